/* Supervision of the processes `tagctl run` starts (internal to tagctl/): workers,
 * coordinators and a local etcd. Each child dies with tagctl (PR_SET_PDEATHSIG SIGKILL, set
 * in the child after fork), is listed with its PID in OUT/pids, and when it ends tagctl says
 * why (exit status or signal, and the last line of its output) and decides:
 *
 *   exit 0                      finished (the job is done, or it left gracefully): not restarted
 *   exit 2                      usage or configuration error of a tagc program: not
 *                               restarted (refused); etcd's exit 2 (a Go panic) is a crash
 *   exit 3, 4                   a tagc program that cannot go on (common/exit_codes.h: the
 *                               training, an I/O failure while running): not restarted
 *                               (gave up), with the code's meaning
 *   any other exit, any signal  restarted after a backoff (0.5 s, doubling while it keeps
 *                               dying within 30 s of its start, at most 8 s), at most
 *                               max_restarts times per child; then it is given up
 *
 * Workers' stdout and stderr pass through pipes to tagctl's own (line by line, so that the
 * last line is known); coordinators and etcd write to their log file (appended across
 * restarts); for etcd the line quoted is the one that says why it stopped (a fatal entry or
 * a Go panic before its stack trace). Single-threaded: the caller's loop calls
 * supervise_poll. */
#ifndef TAGC_TAGCTL_SUPERVISE_H
#define TAGC_TAGCTL_SUPERVISE_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#define SUPERVISE_MAX_ARGS 40
#define SUPERVISE_MAX_CHILDREN 80

typedef enum supervise_kind { SUPERVISE_WORKER, SUPERVISE_COORDINATOR, SUPERVISE_ETCD } supervise_kind;

typedef enum supervise_state {
  SUPERVISE_RUNNING,  /* pid > 0 */
  SUPERVISE_PENDING,  /* died; restarted at restart_at */
  SUPERVISE_FINISHED, /* exited 0 */
  SUPERVISE_REFUSED,  /* exited 2: usage or configuration error */
  SUPERVISE_GAVE_UP,  /* died with no restart left (or restarts not allowed), or exited 3 or 4 */
  SUPERVISE_STOPPED   /* stopped by supervise_stop_all */
} supervise_state;

/* A line buffer of one output pipe of a worker. */
typedef struct supervise_pipe {
  int fd;       /* -1 when closed */
  int to;       /* tagctl's descriptor the lines go to */
  char buf[4096];
  size_t len;
} supervise_pipe;

typedef struct supervise_child {
  char name[48];                       /* "worker w1", "coordinator 0", "etcd" */
  char id[32];                         /* OUT/pids name: w1, coordinator-0, etcd */
  supervise_kind kind;
  char path[PATH_MAX + 32];
  char *argv[SUPERVISE_MAX_ARGS];      /* strings owned by the child (strdup'd) */
  char *restart_argv[SUPERVISE_MAX_ARGS]; /* argv of restarts; NULL: the same */
  char log[PATH_MAX + 32];             /* output file, or "" = piped through tagctl */
  int lock_fd;                         /* inherited descriptor (OUT's lock), or -1 */
  int restartable;                     /* 0: a death is final (static runs) */
  pid_t pid;
  supervise_state state;
  int status;                          /* last exit: code, or 128 + signal */
  int restarts, quick_deaths;
  double started, restart_at;
  supervise_pipe out, err;
  char last[256];                      /* last non-empty output line (piped children) */
} supervise_child;

typedef struct supervise {
  supervise_child *kids[SUPERVISE_MAX_CHILDREN];
  int n;
  int max_restarts;
  char pids_path[PATH_MAX + 16];       /* OUT/pids */
  char out[PATH_MAX];                  /* OUT: restarts go to OUT/history.jsonl */
  int verbose;                         /* print every (re)start with its PID */
  /* called before each restart (may be NULL): e.g. to clear what should not outlive the
     process that died */
  void (*before_restart)(void *arg, supervise_child *c);
  /* called when a child that was running dies other than by exiting 0 (may be NULL), with
     its PID and the seconds it ran: e.g. to report the death to the job at once. Returns the
     wall-clock time of that report, or 0 for none; a restart's history event keeps it as
     "death_reported" */
  double (*on_death)(void *arg, supervise_child *c, long pid, double uptime_s);
  void *hook_arg;
} supervise;

/* Empty set writing its PIDs to out/pids. */
void supervise_init(supervise *s, const char *out, int max_restarts);

/* Adds a child (argv NULL-terminated, copied; log "" or NULL = piped) and starts it. Returns
 * the child (owned by s) or NULL with one line printed when it cannot be started. */
supervise_child *supervise_start(supervise *s, supervise_kind kind, const char *name,
                                 const char *id, const char *path, char *const *argv,
                                 const char *log, int lock_fd, int restartable);

/* Sets the arguments restarts of c use (copied; NULL-terminated). */
void supervise_set_restart_argv(supervise_child *c, char *const *argv);

/* Waits up to timeout_s for output or a death, forwards output, reaps the children that
 * died (printing why and what happens next) and restarts those that are due. Returns how
 * many children changed state. */
int supervise_poll(supervise *s, double timeout_s);

/* Reaps c if it has died (without waiting). Returns 1 when it is no longer running. */
int supervise_reap(supervise *s, supervise_child *c);

/* How many children of `kind` are running or pending a restart. */
int supervise_alive(const supervise *s, supervise_kind kind);

/* How many children of `kind` are in `state`. */
int supervise_count(const supervise *s, supervise_kind kind, supervise_state state);

/* The last line of c's output: its pipe's, else its log file's. */
const char *supervise_last_line(supervise_child *c);

/* Sends sig to every running child of `kind`. */
void supervise_signal(supervise *s, supervise_kind kind, int sig);

/* Stops (sig, then waits for) the running children of `kind`; pending restarts are
 * cancelled. Their output is drained. */
void supervise_stop(supervise *s, supervise_kind kind, int sig);

/* Frees the children (not running any more). */
void supervise_free(supervise *s);

#endif
