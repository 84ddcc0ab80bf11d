#include "tagctl/supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/exit_codes.h"
#include "common/timeutil.h"
#include "worker/history.h"
#include "worker/run.h"

/* A child that dies within this many seconds of its start counts as a quick death: the next
 * backoff doubles. */
#define QUICK_DEATH_S 30.0
#define BACKOFF_FIRST_S 0.5
#define BACKOFF_MAX_S 8.0

void supervise_init(supervise *s, const char *out, int max_restarts) {
  memset(s, 0, sizeof *s);
  s->max_restarts = max_restarts;
  snprintf(s->pids_path, sizeof s->pids_path, "%s/pids", out);
  snprintf(s->out, sizeof s->out, "%s", out);
}

/* Rewrites OUT/pids: one "id pid" line per running child (atomically: write, rename). */
static void write_pids(const supervise *s) {
  char tmp[sizeof s->pids_path + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", s->pids_path);
  FILE *f = fopen(tmp, "w");
  if (!f)
    return;
  fprintf(f, "tagctl %ld\n", (long)getpid());
  for (int i = 0; i < s->n; i++)
    if (s->kids[i]->pid > 0)
      fprintf(f, "%s %ld\n", s->kids[i]->id, (long)s->kids[i]->pid);
  if (fclose(f) == 0)
    rename(tmp, s->pids_path);
}

/* The child side of fork: dies with tagctl, output to the log file or the pipes, exec. */
static void exec_child(supervise_child *c, char *const *argv, pid_t parent, int out_w, int err_w,
                       int append) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) /* tagctl died before the prctl */
    _exit(1);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  unsetenv("TAGC_CONFIG");
  unsetenv(TAGC_OUT_LOCK_FD_ENV);
  if (c->lock_fd >= 0 && fcntl(c->lock_fd, F_SETFD, 0) == 0) {
    char fd[16];
    snprintf(fd, sizeof fd, "%d", c->lock_fd);
    setenv(TAGC_OUT_LOCK_FD_ENV, fd, 1);
  }
  /* spinning OpenMP teams of several workers starve each other on shared cores */
  setenv("OMP_WAIT_POLICY", "passive", 0);
  if (c->log[0]) {
    int fd = open(c->log, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
  } else {
    dup2(out_w, STDOUT_FILENO);
    dup2(err_w, STDERR_FILENO);
  }
  if (strchr(c->path, '/'))
    execv(c->path, argv);
  else
    execvp(c->path, argv);
  fprintf(stderr, "tagctl run: cannot start %s: %s\n", c->path, strerror(errno));
  _exit(127);
}

/* Forks and execs c (argv of its first start, or of a restart). 0, or -1 with errno. */
static int launch(supervise *s, supervise_child *c) {
  int po[2] = {-1, -1}, pe[2] = {-1, -1};
  if (!c->log[0] && (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0)) {
    int e = errno;
    for (int k = 0; k < 2; k++)
      if (po[k] >= 0)
        close(po[k]);
    errno = e;
    return -1;
  }
  char *const *argv = c->restarts && c->restart_argv[0] ? c->restart_argv : c->argv;
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0)
    exec_child(c, argv, parent, po[1], pe[1], c->restarts > 0);
  int e = errno;
  if (!c->log[0]) {
    close(po[1]);
    close(pe[1]);
    if (pid < 0) {
      close(po[0]);
      close(pe[0]);
    } else {
      c->out = (supervise_pipe){.fd = po[0], .to = STDOUT_FILENO};
      c->err = (supervise_pipe){.fd = pe[0], .to = STDERR_FILENO};
    }
  }
  if (pid < 0) {
    errno = e;
    return -1;
  }
  c->pid = pid;
  c->state = SUPERVISE_RUNNING;
  c->started = tagc_now();
  write_pids(s);
  if (s->verbose)
    fprintf(stderr, "tagctl run: started %s (pid %ld)\n", c->name, (long)pid);
  return 0;
}

static void copy_argv(char **dst, char *const *src) {
  int i = 0;
  for (; src && src[i] && i < SUPERVISE_MAX_ARGS - 1; i++)
    dst[i] = strdup(src[i]);
  dst[i] = NULL;
}

static void free_argv(char **argv) {
  for (int i = 0; argv[i]; i++)
    free(argv[i]);
  argv[0] = NULL;
}

supervise_child *supervise_start(supervise *s, supervise_kind kind, const char *name,
                                 const char *id, const char *path, char *const *argv,
                                 const char *log, int lock_fd, int restartable) {
  supervise_child *c = s->n < SUPERVISE_MAX_CHILDREN ? calloc(1, sizeof *c) : NULL;
  if (!c) {
    fprintf(stderr, "tagctl run: cannot start %s: too many processes or out of memory\n", name);
    return NULL;
  }
  snprintf(c->name, sizeof c->name, "%s", name);
  snprintf(c->id, sizeof c->id, "%s", id);
  snprintf(c->path, sizeof c->path, "%s", path);
  snprintf(c->log, sizeof c->log, "%s", log ? log : "");
  c->kind = kind;
  c->lock_fd = lock_fd;
  c->restartable = restartable;
  c->out.fd = c->err.fd = -1;
  copy_argv(c->argv, argv);
  s->kids[s->n++] = c;
  if (launch(s, c) != 0) {
    fprintf(stderr, "tagctl run: cannot start %s: %s\n", name, strerror(errno));
    c->state = SUPERVISE_GAVE_UP;
    return NULL;
  }
  return c;
}

void supervise_set_restart_argv(supervise_child *c, char *const *argv) {
  free_argv(c->restart_argv);
  copy_argv(c->restart_argv, argv);
}

/* Remembers the last non-empty line of text[0..n) in c->last. */
static void note_line(supervise_child *c, const char *text, size_t n) {
  while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' '))
    n--;
  if (n)
    snprintf(c->last, sizeof c->last, "%.*s", (int)n, text);
}

/* Writes the complete lines of p's buffer (all of it when `all`) to p->to. */
static void flush_lines(supervise_child *c, supervise_pipe *p, int all) {
  size_t start = 0;
  for (size_t i = 0; i < p->len; i++) {
    if (p->buf[i] != '\n')
      continue;
    note_line(c, p->buf + start, i + 1 - start);
    start = i + 1;
  }
  if (all && start < p->len) {
    note_line(c, p->buf + start, p->len - start);
    start = p->len;
  }
  for (size_t done = 0; done < start;) {
    ssize_t w = write(p->to, p->buf + done, start - done);
    if (w <= 0 && errno != EINTR)
      break;
    done += w > 0 ? (size_t)w : 0;
  }
  memmove(p->buf, p->buf + start, p->len - start);
  p->len -= start;
}

/* Reads what the pipe holds; closes it at end of file. */
static void drain(supervise_child *c, supervise_pipe *p) {
  ssize_t r = read(p->fd, p->buf + p->len, sizeof p->buf - p->len);
  if (r < 0 && errno == EINTR)
    return;
  if (r <= 0) {
    flush_lines(c, p, 1);
    close(p->fd);
    p->fd = -1;
    return;
  }
  p->len += (size_t)r;
  flush_lines(c, p, p->len == sizeof p->buf);
}

/* Lines of etcd's log that say why it stopped (capnslog "C |" and "panic:", zap "fatal" or
 * "panic"): a Go panic ends the log with its stack trace, so such a line is quoted instead of
 * the last one. */
static const char *const etcd_fatal[] = {" C | ", "panic: ", "\"level\":\"fatal\"",
                                         "\"level\":\"panic\"", NULL};

/* The last non-empty line of a file (its last 16 KiB are read), or the last one holding one
 * of the strings in prefer (NULL-terminated; NULL = none) when there is such a line. */
static void last_line_of_file(const char *path, const char *const *prefer, char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  static char tail[16384];
  long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : 0;
  fseek(f, size > (long)sizeof tail - 1 ? size - (long)sizeof tail + 1 : 0, SEEK_SET);
  size_t n = fread(tail, 1, sizeof tail - 1, f);
  fclose(f);
  tail[n] = '\0';
  const char *last = NULL, *preferred = NULL;
  for (char *line = strtok(tail, "\r\n"); line; line = strtok(NULL, "\r\n")) {
    if (line[strspn(line, " \t")] == '\0')
      continue;
    last = line;
    for (int k = 0; prefer && prefer[k]; k++)
      if (strstr(line, prefer[k]))
        preferred = line;
  }
  const char *line = preferred ? preferred : last ? last : "";
  size_t len = strlen(line) < cap - 1 ? strlen(line) : cap - 1;
  memcpy(buf, line, len);
  buf[len] = '\0';
}

const char *supervise_last_line(supervise_child *c) {
  if (c->log[0])
    last_line_of_file(c->log, c->kind == SUPERVISE_ETCD ? etcd_fatal : NULL, c->last,
                      sizeof c->last);
  return c->last;
}

/* "exited with status N" / "was killed by signal N (NAME)". */
static void describe_exit(int ws, char *buf, size_t cap) {
  if (WIFSIGNALED(ws))
    snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
  else
    snprintf(buf, cap, "exited with status %d", WEXITSTATUS(ws));
}

/* A child died with wait status ws: says why and decides what comes next. */
static void on_death(supervise *s, supervise_child *c, int ws) {
  long pid = (long)c->pid;
  for (supervise_pipe *p = &c->out; p <= &c->err; p++)
    while (p->fd >= 0)
      drain(c, p);
  c->pid = 0;
  c->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  write_pids(s);
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) {
    c->state = SUPERVISE_FINISHED;
    return;
  }
  double reported = s->on_death ? s->on_death(s->hook_arg, c, pid, tagc_now() - c->started) : 0;
  char why[96], next[128];
  describe_exit(ws, why, sizeof why);
  const char *last = supervise_last_line(c);
  /* tagc programs exit by common/exit_codes.h; etcd by its own rules (a Go panic exits 2) */
  int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
  if (code == TAGC_EXIT_CONFIG && c->kind != SUPERVISE_ETCD) {
    c->state = SUPERVISE_REFUSED;
    if (!c->log[0] && *last)
      return; /* its own one-line error went through to the terminal: nothing to add */
    snprintf(next, sizeof next, "%s: not restarted", tagc_exit_code_meaning(code));
  } else if (code > 0 && !tagc_exit_code_restarts(code) && c->kind != SUPERVISE_ETCD) {
    c->state = SUPERVISE_GAVE_UP;
    snprintf(next, sizeof next, "%s: not restarted", tagc_exit_code_meaning(code));
  } else if (!c->restartable) {
    c->state = SUPERVISE_GAVE_UP;
    snprintf(next, sizeof next, "not restarted");
  } else if (c->restarts >= s->max_restarts) {
    c->state = SUPERVISE_GAVE_UP;
    snprintf(next, sizeof next, "no restart left (--max-restarts %d)", s->max_restarts);
  } else {
    c->quick_deaths = tagc_now() - c->started < QUICK_DEATH_S ? c->quick_deaths + 1 : 0;
    double delay = BACKOFF_FIRST_S;
    for (int k = 1; k < c->quick_deaths && delay < BACKOFF_MAX_S; k++)
      delay *= 2;
    if (delay > BACKOFF_MAX_S)
      delay = BACKOFF_MAX_S;
    c->state = SUPERVISE_PENDING;
    c->restart_at = tagc_now() + delay;
    snprintf(next, sizeof next, "restarting in %.1f s (restart %d of %d)", delay,
             c->restarts + 1, s->max_restarts);
    json_t *ev = json_pack("{s:s, s:s, s:s}", "event", "restart", "who", c->id, "why", why);
    if (ev && reported > 0)
      json_object_set_new(ev, "death_reported", json_real(reported));
    tagc_history_append(s->out, ev);
  }
  fprintf(stderr, "tagctl run: %s (pid %ld) %s%s%s; %s\n", c->name, pid, why,
          *last ? ": " : "", last, next);
}

int supervise_reap(supervise *s, supervise_child *c) {
  if (c->state != SUPERVISE_RUNNING)
    return 1;
  int ws;
  pid_t pid = c->pid;
  pid_t r = waitpid(pid, &ws, WNOHANG);
  if (r != pid)
    return 0;
  on_death(s, c, ws);
  return 1;
}

int supervise_poll(supervise *s, double timeout_s) {
  struct pollfd fds[2 * SUPERVISE_MAX_CHILDREN];
  supervise_pipe *pipes[2 * SUPERVISE_MAX_CHILDREN];
  supervise_child *owners[2 * SUPERVISE_MAX_CHILDREN];
  nfds_t n = 0;
  double now = tagc_now(), wake = now + timeout_s;
  for (int i = 0; i < s->n; i++) {
    supervise_child *c = s->kids[i];
    if (c->state == SUPERVISE_PENDING && c->restart_at < wake)
      wake = c->restart_at;
    for (supervise_pipe *p = &c->out; p <= &c->err; p++)
      if (p->fd >= 0) {
        fds[n] = (struct pollfd){.fd = p->fd, .events = POLLIN};
        pipes[n] = p, owners[n++] = c;
      }
  }
  int ms = wake > now ? (int)((wake - now) * 1000) + 1 : 0;
  if (poll(fds, n, ms) > 0)
    for (nfds_t k = 0; k < n; k++)
      if (fds[k].revents)
        drain(owners[k], pipes[k]);
  int changed = 0;
  for (int i = 0; i < s->n; i++) {
    supervise_child *c = s->kids[i];
    if (c->state == SUPERVISE_RUNNING) {
      changed += supervise_reap(s, c);
    } else if (c->state == SUPERVISE_PENDING && tagc_now() >= c->restart_at) {
      c->restarts++;
      changed++;
      if (s->before_restart)
        s->before_restart(s->hook_arg, c);
      if (launch(s, c) != 0) {
        fprintf(stderr, "tagctl run: cannot restart %s: %s\n", c->name, strerror(errno));
        c->state = SUPERVISE_GAVE_UP;
      } else {
        fprintf(stderr, "tagctl run: restarted %s (pid %ld)\n", c->name, (long)c->pid);
      }
    }
  }
  return changed;
}

int supervise_alive(const supervise *s, supervise_kind kind) {
  return supervise_count(s, kind, SUPERVISE_RUNNING) + supervise_count(s, kind, SUPERVISE_PENDING);
}

int supervise_count(const supervise *s, supervise_kind kind, supervise_state state) {
  int n = 0;
  for (int i = 0; i < s->n; i++)
    n += s->kids[i]->kind == kind && s->kids[i]->state == state;
  return n;
}

void supervise_signal(supervise *s, supervise_kind kind, int sig) {
  for (int i = 0; i < s->n; i++)
    if (s->kids[i]->kind == kind && s->kids[i]->state == SUPERVISE_RUNNING)
      kill(s->kids[i]->pid, sig);
}

void supervise_stop(supervise *s, supervise_kind kind, int sig) {
  supervise_signal(s, kind, sig);
  for (int i = 0; i < s->n; i++) {
    supervise_child *c = s->kids[i];
    if (c->kind != kind)
      continue;
    if (c->state == SUPERVISE_PENDING)
      c->state = SUPERVISE_STOPPED;
    if (c->state != SUPERVISE_RUNNING)
      continue;
    for (supervise_pipe *p = &c->out; p <= &c->err; p++)
      while (p->fd >= 0)
        drain(c, p);
    int ws;
    while (waitpid(c->pid, &ws, 0) < 0 && errno == EINTR)
      ;
    c->pid = 0;
    c->state = SUPERVISE_STOPPED;
    c->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  }
  write_pids(s);
}

void supervise_free(supervise *s) {
  for (int i = 0; i < s->n; i++) {
    supervise_child *c = s->kids[i];
    for (supervise_pipe *p = &c->out; p <= &c->err; p++)
      if (p->fd >= 0)
        close(p->fd);
    free_argv(c->argv);
    free_argv(c->restart_argv);
    free(c);
  }
  s->n = 0;
}
