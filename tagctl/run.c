/* tagctl run: a training job on this machine. Writes OUT/worker.json (the worker options)
 * and OUT/job.json (this run's options, to replay it), starts the workers (static:
 * rendezvous in OUT; elastic: a local etcd unless --etcd, and --coordinators coordinators),
 * supervises them (tagctl/supervise.h: restarts, why a child died, OUT/pids) until the job is
 * done and stops everything it started. */
#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/store.h"
#include "common/exit_codes.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "cluster/http.h"
#include "cluster/keys.h"
#include "cluster/member.h"
#include "tagctl/supervise.h"
#include "tagctl/tagctl.h"
#include "engine/device.h"
#include "worker/history.h"
#include "worker/run.h"
#include "worker/run_config.h"

typedef struct run_config {
  tagc_train_config train; /* first: the worker's option offsets stay valid */
  int64_t workers;
  char *mode;   /* auto | elastic | static */
  int elastic;  /* the mode resolved */
  int64_t coordinators;
  int64_t min_workers;
  int64_t fault_rank;
  int64_t max_restarts;
} run_config;

static const tagc_opt run_extra[] = {
    {"workers", TAGC_OPT_INT, offsetof(run_config, workers), "1", 1, 64, NULL,
     "local worker processes (CPU ranks, Gloo on loopback)"},
    {"mode", TAGC_OPT_CHOICE, offsetof(run_config, mode), "auto", 0, -1, "auto|elastic|static",
     "elastic: through etcd (a local etcd unless --etcd URL, coordinators, recovery from "
     "failures); static: fixed ranks, rendezvous in OUT; auto: elastic for 2 or more workers"},
    {"coordinators", TAGC_OPT_INT, offsetof(run_config, coordinators), "1", 1, 8, NULL,
     "elastic: coordinator processes (one leads, the others stand by)"},
    {"min-workers", TAGC_OPT_INT, offsetof(run_config, min_workers), "1", 1, 64, NULL,
     "elastic: fewest workers a generation may have"},
    {"fault-rank", TAGC_OPT_INT, offsetof(run_config, fault_rank), "-1", -1, 63, NULL,
     "the worker that --fault arms (-1 = the last one; a restarted worker runs without it)"},
    {"max-restarts", TAGC_OPT_INT, offsetof(run_config, max_restarts), "10", 0, 1000000, NULL,
     "elastic: times each crashed worker, coordinator or local etcd is restarted (backoff "
     "0.5 s doubling to 8 s); exit 0 (done) and 2 (configuration error) are not restarted"},
};

/* The options of tagctl run: its own, then every worker option (forwarded through
 * OUT/worker.json). *opts is malloc'd, sized from the two tables; the caller frees it. */
static tagc_status run_program(tagc_opt_program *prog, tagc_opt **opts) {
  size_t n_extra = sizeof run_extra / sizeof run_extra[0];
  size_t n = n_extra + tagc_train_program.n_opts;
  *opts = malloc(n * sizeof **opts);
  if (!*opts)
    return tagc_errorf(TAGC_ENOMEM, "option table of %zu entries", n);
  memcpy(*opts, run_extra, sizeof run_extra);
  memcpy(*opts + n_extra, tagc_train_program.opts, tagc_train_program.n_opts * sizeof **opts);
  *prog = (tagc_opt_program){"tagctl run", "[options]",
                             "Runs a training job on this machine: starts the workers (and for "
                             "an elastic run a local etcd, unless --etcd, and the coordinators), "
                             "supervises them and writes OUT/metrics.jsonl, OUT/summary.json and "
                             "checkpoints in OUT/ckpt. Run it again with the same --out to "
                             "continue from the newest checkpoint; a finished run trains on with "
                             "a larger --steps.",
                             *opts, n};
  return TAGC_OK;
}

/* --help: tagctl run's own options, then the worker's groups (worker/run_config.h). */
static void run_help(const tagc_opt_program *prog) {
  enum { MAX_GROUPS = 24 };
  tagc_help_group groups[MAX_GROUPS] = {
      {"Local run", "workers mode coordinators min-workers max-restarts fault-rank"}};
  size_t n = 1;
  for (size_t g = 0; g < tagc_train_n_help_groups && n < MAX_GROUPS; g++)
    groups[n++] = tagc_train_help_groups[g];
  tagctl_help_print(prog, groups, n, stdout);
}

/* Directory holding this executable (the worker binary sits beside it). */
static tagc_status self_dir(char *buf, size_t cap) {
  ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
  if (n <= 0)
    return tagc_errorf(TAGC_EIO, "/proc/self/exe: %s", strerror(errno));
  buf[n] = '\0';
  char *slash = strrchr(buf, '/');
  if (slash)
    *slash = '\0';
  return TAGC_OK;
}

/* The worker options OUT/job.json leaves out: per worker process (rank, world, rendezvous,
 * worker_id: worker_argv gives each worker its own; fault, metrics_addr: one worker's command
 * line) or per invocation (out: a replay names its own). */
static const char *const not_replayed[] = {"rank", "world", "rendezvous", "worker_id",
                                           "out", "fault", "metrics_addr"};

/* Writes OUT/worker.json, the options every worker reads (tagc-worker --config; path gets its
 * name), and OUT/job.json, this run's options for a replay (tagctl run --config OUT/job.json
 * --out NEW trains the same job again): tagctl run's own options and the worker options less
 * not_replayed, and less the URL of the local etcd this run started (local_etcd; a replay
 * starts its own). Neither file holds the etcd password, only the name of its file. */
static tagc_status write_job(const run_config *rc, int local_etcd, char *path, size_t cap) {
  const tagc_opt_program own = {"tagctl run", NULL, NULL, run_extra,
                                sizeof run_extra / sizeof run_extra[0]};
  json_t *worker = tagc_opts_to_json(&tagc_train_program, &rc->train);
  json_t *job = tagc_opts_to_json(&own, rc);
  tagc_status st = TAGC_OK;
  if (!worker || !job || json_object_update(job, worker)) {
    st = tagc_errorf(TAGC_ENOMEM, "job config");
    goto done;
  }
  /* --fault and --metrics-addr are per worker (its command line): see worker_argv */
  json_object_set_new(worker, "fault", json_string(""));
  json_object_set_new(worker, "metrics_addr", json_string(""));
  for (size_t i = 0; i < sizeof not_replayed / sizeof not_replayed[0]; i++)
    json_object_del(job, not_replayed[i]);
  if (local_etcd)
    json_object_del(job, "etcd");
  snprintf(path, cap, "%s/job.json", rc->train.out);
  st = tagc_json_write_file(path, job);
  snprintf(path, cap, "%s/worker.json", rc->train.out);
  if (st == TAGC_OK)
    st = tagc_json_write_file(path, worker);
done:
  json_decref(worker);
  json_decref(job);
  return st;
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) {
  (void)sig;
  interrupted = 1;
}

/* Ctrl-C / SIGTERM: stop the workers, then the coordinators and etcd (run_job). */
static void catch_interrupts(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_interrupt; /* no SA_RESTART: poll() returns EINTR */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* --metrics-addr HOST:PORT serves worker r's /metrics on HOST:PORT+r (port 0: a free one
 * each). TAGC_EINVAL with a one-line detail when the address is bad or the ports run out. */
static tagc_status metrics_addr_of(const run_config *rc, int rank, char *buf, size_t cap) {
  char *host;
  int port;
  if (tagc_http_parse_addr(rc->train.metrics_addr, &host, &port) != TAGC_OK) {
    char detail[256];
    snprintf(detail, sizeof detail, "%s", tagc_last_error());
    return tagc_errorf(TAGC_EINVAL, "--metrics-addr: %s", detail);
  }
  tagc_status st = TAGC_OK;
  if (port && port + rc->workers - 1 > 65535)
    st = tagc_errorf(TAGC_EINVAL, "--metrics-addr: ports %d..%lld for %lld workers pass 65535",
                     port, (long long)(port + rc->workers - 1), (long long)rc->workers);
  else
    snprintf(buf, cap, "%s:%d", host, port ? port + rank : 0);
  free(host);
  return st;
}

/* The command line of worker `rank` of n (strings in *wa): static rendezvous in rdzv, or
 * elastic through etcd (rdzv NULL); --fault only when with_fault (a fault is armed once:
 * a restarted worker runs without it). */
typedef struct worker_args {
  char *argv[24];
  char rank[16], world[16], id[32], maddr[300], dev[32];
} worker_args;

static void worker_argv(worker_args *wa, const char *config, int rank, int n, const char *rdzv,
                        const run_config *rc, int with_fault) {
  snprintf(wa->rank, sizeof wa->rank, "%d", rank);
  snprintf(wa->world, sizeof wa->world, "%d", n);
  snprintf(wa->id, sizeof wa->id, "w%d", rank);
  char **argv = wa->argv;
  int a = 0;
  argv[a++] = "tagc-worker";
  argv[a++] = "--config";
  argv[a++] = (char *)config; /* OUT/worker.json */
  if (rdzv) {
    argv[a++] = "--rank", argv[a++] = wa->rank, argv[a++] = "--world", argv[a++] = wa->world;
    argv[a++] = "--rendezvous", argv[a++] = (char *)rdzv;
  } else {
    argv[a++] = "--worker-id", argv[a++] = wa->id;
  }
  int fault_rank = rc->fault_rank >= 0 ? (int)rc->fault_rank : n - 1;
  if (with_fault && rc->train.fault && *rc->train.fault && rank == fault_rank)
    argv[a++] = "--fault", argv[a++] = rc->train.fault;
  if (*rc->train.metrics_addr && metrics_addr_of(rc, rank, wa->maddr, sizeof wa->maddr) == TAGC_OK)
    argv[a++] = "--metrics-addr", argv[a++] = wa->maddr;
  if (!strcmp(rc->train.device, "cuda") && n > 1) { /* one GPU per local worker */
    snprintf(wa->dev, sizeof wa->dev, "cuda:%d", rank);
    argv[a++] = "--device", argv[a++] = wa->dev;
  }
  argv[a] = NULL;
}

/* Starts the workers; in elastic runs a crashed one is restarted (supervise.h). 0 or -1. */
static int start_workers(supervise *sv, const char *worker, const char *job, const char *rdzv,
                         const run_config *rc, int lock_fd) {
  int n = (int)rc->workers;
  for (int i = 0; i < n; i++) {
    worker_args wa, again;
    worker_argv(&wa, job, i, n, rc->elastic ? NULL : rdzv, rc, 1);
    char name[40];
    snprintf(name, sizeof name, "worker %s", wa.id);
    supervise_child *c = supervise_start(sv, SUPERVISE_WORKER, name, wa.id, worker, wa.argv, NULL,
                                         lock_fd, rc->elastic);
    if (!c)
      return -1;
    worker_argv(&again, job, i, n, rc->elastic ? NULL : rdzv, rc, 0);
    supervise_set_restart_argv(c, again.argv);
  }
  return 0;
}

/* ---------- elastic local runs: etcd and coordinators ---------- */

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0)
    close(fd);
  return port;
}

/* Waits until the local etcd at url answers (a read of a missing key); fails at once, with
 * etcd's exit and the last line of its log, when the process ends first. */
static tagc_status wait_etcd(supervise *sv, supervise_child *etcd, const char *url,
                             double timeout_s) {
  tagc_etcd_config ec;
  tagc_etcd_config_init(&ec);
  ec.endpoints = url;
  ec.deadline_s = 1;
  tagc_etcd *c;
  TAGC_CHECK(tagc_etcd_create(&ec, &c));
  tagc_status st = TAGC_ETIMEDOUT;
  for (double end = tagc_now() + timeout_s; tagc_now() < end && !interrupted; tagc_sleep(0.1)) {
    if (supervise_reap(sv, etcd)) {
      st = TAGC_EPEER;
      break;
    }
    char *v = NULL;
    st = tagc_etcd_get(c, "/tagc-probe", &v, NULL, NULL);
    free(v);
    if (st == TAGC_OK || st == TAGC_ENOTFOUND) {
      st = TAGC_OK;
      break;
    }
  }
  tagc_etcd_destroy(c);
  if (st == TAGC_EPEER)
    return tagc_errorf(TAGC_EPEER, "the local etcd exited before it answered (its log: %s)",
                       etcd->log);
  return st == TAGC_OK ? st
                       : tagc_errorf(TAGC_ETIMEDOUT, "local etcd at %s did not answer within "
                                     "%g s (its log: %s)", url, timeout_s, etcd->log);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* Removes a folder tree; a missing one is fine. */
static void remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* Starts a single-member etcd for this run and sets --etcd. Its data folder is OUT/etcd: a
 * leftover of a run that was killed is removed first (this run holds OUT's lock), and the
 * folder is removed when the run ends. A local etcd that dies is restarted on the same
 * folder and ports. */
static tagc_status start_etcd(run_config *rc, supervise *sv, char *data_dir, size_t cap) {
  int cp = free_port(), pp = free_port();
  if (cp < 0 || pp < 0)
    return tagc_errorf(TAGC_EIO, "no free loopback port for etcd");
  snprintf(data_dir, cap, "%s/etcd", rc->train.out);
  remove_tree(data_dir);
  char client[64], peer[64], cluster[96], log[PATH_MAX + 16];
  snprintf(client, sizeof client, "http://127.0.0.1:%d", cp);
  snprintf(peer, sizeof peer, "http://127.0.0.1:%d", pp);
  snprintf(cluster, sizeof cluster, "local=%s", peer);
  snprintf(log, sizeof log, "%s/etcd.log", rc->train.out);
  char *argv[] = {"etcd", "--name", "local", "--data-dir", data_dir, "--listen-client-urls",
                  client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                  "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster, NULL};
  /* not restartable until it answered: an etcd that cannot start fails the run at once */
  supervise_child *c = supervise_start(sv, SUPERVISE_ETCD, "the local etcd", "etcd", "etcd", argv,
                                       log, -1, 0);
  if (!c)
    return tagc_errorf(TAGC_EIO, "cannot start etcd");
  free(rc->train.etcd);
  rc->train.etcd = strdup(client);
  if (!rc->train.etcd)
    return tagc_errorf(TAGC_ENOMEM, "etcd URL");
  TAGC_CHECK(wait_etcd(sv, c, client, 20));
  c->restartable = 1;
  return TAGC_OK;
}

/* Whether the job's `done` key exists on the run's etcd (with its credentials): TAGC_OK with
 * *done set, else TAGC_EPEER with one line ("cannot use etcd at URL: why"), or TAGC_EINVAL
 * for bad credential options. */
static tagc_status read_done(const run_config *rc, int *done) {
  *done = 0;
  tagc_etcd_credentials cred = TAGC_ETCD_CREDENTIALS_OF(&rc->train);
  char key[TAGC_KEY_MAX], *value = NULL;
  tagc_etcd *c = NULL;
  TAGC_CHECK(tagc_etcd_connect(rc->train.etcd, &cred, TAGCTL_ETCD_DEADLINE_S, &c));
  tagc_status st = tagc_key_done(rc->train.job, key, sizeof key);
  if (st == TAGC_OK)
    st = tagc_etcd_get(c, key, &value, NULL, NULL);
  tagc_etcd_destroy(c);
  free(value);
  if (st == TAGC_OK || st == TAGC_ENOTFOUND) {
    *done = st == TAGC_OK;
    return TAGC_OK;
  }
  char detail[512];
  snprintf(detail, sizeof detail, "%s", tagc_last_error());
  return tagc_errorf(TAGC_EPEER, "cannot use etcd at %s: %s", rc->train.etcd, detail);
}

/* An external etcd (--etcd URL): TAGC_OK when it answers and the job is not done yet;
 * *done = 1 when it is (one line printed); else the errors of read_done. */
static tagc_status probe_etcd(const run_config *rc, int *done) {
  TAGC_CHECK(read_done(rc, done));
  if (*done)
    printf("tagctl run: job %s is already done; nothing to train (`tagctl job reset --job %s` "
           "trains it again)\n", rc->train.job, rc->train.job);
  return TAGC_OK;
}

/* The seconds clear_chaos may take: the worker's restart waits for it. */
#define CLEAR_CHAOS_DEADLINE_S 2.0
/* How long a death report may try to reach etcd (the supervisor's loop waits meanwhile); on
 * failure the dead worker's lease expiry tells the leader instead. */
#define DEATH_REPORT_DEADLINE_S 2.0

/* Before a worker is restarted: deletes its chaos/<id> key, so that a fault injected with
 * tagctl inject fires once, like --fault (a restarted worker would arm it again). */
static void clear_chaos(void *arg, supervise_child *c) {
  const run_config *rc = arg;
  if (c->kind != SUPERVISE_WORKER)
    return;
  tagc_etcd_credentials cred = TAGC_ETCD_CREDENTIALS_OF(&rc->train);
  char key[TAGC_KEY_MAX];
  tagc_etcd *etcd = NULL;
  tagc_status st = tagc_key_chaos(rc->train.job, c->id, key, sizeof key);
  if (st == TAGC_OK)
    st = tagc_etcd_connect(rc->train.etcd, &cred, CLEAR_CHAOS_DEADLINE_S, &etcd);
  if (st == TAGC_OK)
    st = tagc_etcd_delete(etcd, key, 0, NULL);
  if (st != TAGC_OK && st != TAGC_ENOTFOUND)
    fprintf(stderr, "tagctl run: %s keeps its injected fault (chaos key): %s\n", c->name,
            tagc_last_error());
  tagc_etcd_destroy(etcd);
}

/* When a worker dies: writes the leaving/<id> record its registration would write on a
 * graceful leave, marked "died" with its uptime, so that the leader plans without it at once
 * instead of when its lease expires (docs/operations.md, crash loops). Nothing when the
 * process had no registration (it died before registering, or its key already expired).
 * Returns the wall-clock time of the record, 0 when none was written. */
static double report_death(void *arg, supervise_child *c, long pid, double uptime_s) {
  const run_config *rc = arg;
  if (c->kind != SUPERVISE_WORKER)
    return 0;
  tagc_etcd_credentials cred = TAGC_ETCD_CREDENTIALS_OF(&rc->train);
  tagc_etcd *etcd = NULL;
  tagc_leave_record rec = {.reason = "crashed (seen by its supervisor)", .died = 1,
                           .uptime_s = uptime_s};
  tagc_status st = tagc_etcd_connect(rc->train.etcd, &cred, DEATH_REPORT_DEADLINE_S, &etcd);
  if (st == TAGC_OK)
    st = tagc_member_registration_of(etcd, rc->train.job, c->id, pid, &rec.registration);
  double at = tagc_wall_time();
  if (st == TAGC_OK)
    st = tagc_member_put_leaving(etcd, rc->train.job, c->id, &rec);
  if (st == TAGC_OK)
    fprintf(stderr, "tagctl run: reported the death of %s (registration %lld, up %.1f s) to "
            "the job\n", c->name, (long long)rec.registration, uptime_s);
  else if (st != TAGC_ENOTFOUND)
    fprintf(stderr, "tagctl run: cannot report the death of %s to the job (its lease will "
            "tell): %s\n", c->name, tagc_last_error());
  tagc_etcd_destroy(etcd);
  return st == TAGC_OK ? at : 0;
}

/* Appends "--NAME VALUE" to argv (at *a) when value is set. */
static void add_flag(char **argv, int *a, const char *name, char *value) {
  if (value && *value)
    argv[(*a)++] = (char *)name, argv[(*a)++] = value;
}

static tagc_status start_coordinators(const run_config *rc, const char *dir, supervise *sv) {
  char path[PATH_MAX + 32], minw[16], maxw[16];
  snprintf(path, sizeof path, "%s/tagc-coordinator", dir);
  snprintf(minw, sizeof minw, "%lld", (long long)rc->min_workers);
  snprintf(maxw, sizeof maxw, "%lld", (long long)rc->workers);
  for (int k = 0; k < rc->coordinators; k++) {
    char log[PATH_MAX + 32], name[32], id[32];
    snprintf(log, sizeof log, "%s/coordinator-%d.log", rc->train.out, k);
    snprintf(name, sizeof name, "coordinator %d", k);
    snprintf(id, sizeof id, "coordinator-%d", k);
    /* the first generation waits for every local worker (they start together), at most
       30 s; later ones need only --min-workers. The etcd password reaches them through the
       environment (TAGC_ETCD_PASSWORD) or its file, never the command line. */
    char *argv[32] = {"tagc-coordinator", "--etcd", rc->train.etcd, "--job", rc->train.job,
                      "--min-workers", minw, "--max-workers", maxw, "--start-workers", maxw,
                      "--http", "127.0.0.1:0", "--log", "info"};
    int a = 15;
    add_flag(argv, &a, "--etcd-ca", rc->train.etcd_ca);
    add_flag(argv, &a, "--etcd-cert", rc->train.etcd_cert);
    add_flag(argv, &a, "--etcd-key", rc->train.etcd_key);
    add_flag(argv, &a, "--etcd-user", rc->train.etcd_user);
    add_flag(argv, &a, "--etcd-password-file", rc->train.etcd_password_file);
    argv[a] = NULL;
    if (!supervise_start(sv, SUPERVISE_COORDINATOR, name, id, path, argv, log, -1, 1))
      return tagc_errorf(TAGC_EIO, "cannot start %s", path);
  }
  return TAGC_OK;
}

/* Why an elastic job cannot go on although workers are alive, or NULL. */
static const char *elastic_blocked(const supervise *sv, int local_etcd) {
  if (supervise_count(sv, SUPERVISE_COORDINATOR, SUPERVISE_REFUSED))
    return "a coordinator refused the job's configuration (above)";
  if (!supervise_alive(sv, SUPERVISE_COORDINATOR) &&
      !supervise_count(sv, SUPERVISE_COORDINATOR, SUPERVISE_FINISHED))
    return "no coordinator is left to plan the job (above)";
  if (local_etcd && !supervise_alive(sv, SUPERVISE_ETCD))
    return "the local etcd is gone (above)";
  return NULL;
}

/* Supervises the run until no worker is left (or it cannot go on) and returns the exit
 * status of tagctl run: 0 when the job finished or suspended (every worker left it at one
 * saved step), 130 when interrupted, 2 when a coordinator
 * or every worker refused the configuration, else the first failure's status (or 1). */
static int supervise_run(supervise *sv, const run_config *rc, int local_etcd, double started) {
  int code = 0;
  while (supervise_alive(sv, SUPERVISE_WORKER) > 0) {
    supervise_poll(sv, 0.2);
    const char *why = NULL;
    if (interrupted) {
      fprintf(stderr, "tagctl run: interrupted; stopping the workers\n");
      code = 130;
    } else if (!rc->elastic) {
      for (int i = 0; i < sv->n && !code; i++)
        if (sv->kids[i]->state == SUPERVISE_GAVE_UP || sv->kids[i]->state == SUPERVISE_REFUSED)
          code = sv->kids[i]->status; /* static ranks are fixed: the others cannot go on */
    } else if ((why = elastic_blocked(sv, local_etcd))) {
      fprintf(stderr, "tagctl run: stopping the job: %s\n", why);
      code = supervise_count(sv, SUPERVISE_COORDINATOR, SUPERVISE_REFUSED) ? 2 : 1;
    }
    if (code)
      break;
  }
  supervise_stop(sv, SUPERVISE_WORKER, SIGKILL);
  if (code)
    return code;
  int workers = supervise_count(sv, SUPERVISE_WORKER, SUPERVISE_FINISHED);
  int done = workers == (int)rc->workers;
  /* --stop-at: every worker stopping cleanly there is what was asked (the job is not done) */
  if (rc->elastic && !(rc->train.stop_at > 0 && done) && read_done(rc, &done) != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    done = workers > 0;
  }
  long long at = 0;
  if (done || (workers == (int)rc->workers && tagctl_suspended_at(&rc->train, started, &at)))
    return 0; /* a suspended job: every worker left it at one saved step (closing block) */
  int refused = supervise_count(sv, SUPERVISE_WORKER, SUPERVISE_REFUSED);
  fprintf(stderr, "tagctl run: the job did not finish: %d of %lld workers finished, %d refused "
          "the configuration, %d gave up\n", workers, (long long)rc->workers, refused,
          supervise_count(sv, SUPERVISE_WORKER, SUPERVISE_GAVE_UP));
  for (int i = 0; i < sv->n; i++)
    if (sv->kids[i]->kind == SUPERVISE_WORKER && sv->kids[i]->status)
      return sv->kids[i]->status;
  return refused ? 2 : 1;
}

/* One line at the start of an elastic run: where coordinator 0 serves /status and /metrics
 * (the port its log names, waited for up to 10 s) and the tagctl status command. */
static void print_where(const run_config *rc, supervise *sv) {
  char log[PATH_MAX + 32], line[1024];
  snprintf(log, sizeof log, "%s/coordinator-0.log", rc->train.out);
  int port = 0;
  /* up to 10 s, while a coordinator runs (one that refused the job is reported at once) */
  for (double until = tagc_now() + 10;
       !port && tagc_now() < until && supervise_count(sv, SUPERVISE_COORDINATOR, SUPERVISE_RUNNING) > 0;
       supervise_poll(sv, 0.05)) {
    FILE *f = fopen(log, "r");
    while (f && !port && fgets(line, sizeof line, f)) {
      const char *at = strstr(line, "serving /healthz, /status, /metrics on port ");
      if (at)
        port = atoi(at + strlen("serving /healthz, /status, /metrics on port "));
    }
    if (f)
      fclose(f);
  }
  char where[64] = "(see coordinator-0.log)";
  if (port > 0)
    snprintf(where, sizeof where, "http://127.0.0.1:%d", port);
  printf("tagctl run: coordinator /status and /metrics at %s; progress: tagctl status --etcd %s "
         "--job %s\n", where, rc->train.etcd, rc->train.job);
  fflush(stdout);
}

int tagctl_run(int argc, char **argv) {
  run_config rc;
  memset(&rc, 0, sizeof rc);
  tagc_opt_program prog;
  tagc_opt *opts;
  if (run_program(&prog, &opts) != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    return 1;
  }
  int help = 0, code = 2;
  if (tagctl_help_wanted(argc, argv)) {
    run_help(&prog);
    code = 0;
    goto done;
  }
  tagc_status st = tagc_opts_parse(&prog, &rc, argc, argv, NULL, 0, NULL, &help);
  if (st != TAGC_OK || help) {
    if (st != TAGC_OK)
      fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    code = st != TAGC_OK ? 2 : 0;
    goto done;
  }
  double started = tagc_wall_time(); /* the closing block reads a summary.json written since */
  tagc_log_format format = TAGC_LOG_AUTO;
  if ((st = tagc_log_format_parse(rc.train.log_format, &format)) != TAGC_OK ||
      (st = tagc_log_configure(rc.train.log, format)) != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    goto done;
  }
  /* The workers' and coordinators' stderr is a pipe into this process: they log in the format
   * auto chose here (the environment outranks their config file, a flag would outrank it) */
  setenv("TAGC_LOG_FORMAT", tagc_log_format_name(format), 1);
  char maddr[300];
  if (*rc.train.metrics_addr && (st = metrics_addr_of(&rc, 0, maddr, sizeof maddr)) != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    goto done;
  }
  int dev_index;
  if ((st = tagc_device_parse(rc.train.device, &dev_index)) != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    code = tagc_exit_code_of(st);
    goto done;
  }
  if (dev_index < 0 && strcmp(rc.train.compute, "fp32")) {
    fprintf(stderr, "tagctl run: the CPU computes in fp32 only (--compute fp32)\n");
    goto done;
  }
  rc.elastic = !strcmp(rc.mode, "elastic") || (!strcmp(rc.mode, "auto") && rc.workers > 1);
  if (rc.train.threads == 0) { /* share the cores: oversubscribed OpenMP teams crawl */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    rc.train.threads = cores / rc.workers > 1 ? cores / rc.workers : 1;
  }
  char dir[PATH_MAX], worker[PATH_MAX + 16], job[PATH_MAX], data_dir[PATH_MAX + 16] = "";
  char rdzv[PATH_MAX + 32] = "";
  supervise sv;
  supervise_init(&sv, rc.train.out, rc.elastic ? (int)rc.max_restarts : 0);
  sv.before_restart = rc.elastic ? clear_chaos : NULL;
  sv.on_death = rc.elastic ? report_death : NULL;
  sv.hook_arg = &rc;
  catch_interrupts();
  if ((st = self_dir(dir, sizeof dir)) == TAGC_OK)
    st = tagc_mkdir_p(rc.train.out);
  int lock_fd = -1; /* OUT is this run's until the end: a second run there is refused */
  if (st == TAGC_OK && (st = tagc_out_lock(rc.train.out, NULL, &lock_fd)) != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    code = 2;
    goto done;
  }
  int finished = 0, local_etcd = rc.elastic && !*rc.train.etcd;
  if (st == TAGC_OK && local_etcd)
    st = start_etcd(&rc, &sv, data_dir, sizeof data_dir);
  else if (st == TAGC_OK && rc.elastic)
    st = probe_etcd(&rc, &finished); /* the job on the external etcd may be done already */
  if (st == TAGC_OK && rc.elastic && !finished)
    st = start_coordinators(&rc, dir, &sv);
  if (st == TAGC_OK && !finished) {
    tagctl_resume_note(&rc.train, stdout); /* reads the previous OUT/job.json: before write_job */
    fflush(stdout);
    st = write_job(&rc, local_etcd, job, sizeof job);
  }
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    code = tagc_exit_code_of(st);
  } else if (finished) {
    code = 0;
  } else {
    snprintf(worker, sizeof worker, "%s/tagc-worker", dir);
    snprintf(rdzv, sizeof rdzv, "%s/rendezvous-%d", rc.train.out, (int)getpid());
    if (rc.elastic)
      print_where(&rc, &sv);
    tagc_history_append(rc.train.out, json_pack("{s:s}", "event", "start"));
    code = start_workers(&sv, worker, job, rdzv, &rc, lock_fd) == 0 ? supervise_run(&sv, &rc, local_etcd, started)
                                                                  : 1;
    if (interrupted)
      tagc_history_append(rc.train.out, json_pack("{s:s}", "event", "interrupt"));
    tagc_history_append(rc.train.out, json_pack("{s:s, s:i}", "event", "end", "status", code));
    tagctl_closing_block(&rc.train, code, interrupted, started, stdout);
  }
  supervise_stop(&sv, SUPERVISE_WORKER, SIGKILL);
  supervise_stop(&sv, SUPERVISE_COORDINATOR, SIGTERM);
  supervise_stop(&sv, SUPERVISE_ETCD, SIGTERM);
  supervise_free(&sv);
  if (rdzv[0] && !rc.elastic)
    tagc_store_file_remove_all(rdzv);
  if (data_dir[0])
    remove_tree(data_dir);
  unlink(sv.pids_path);
  if (lock_fd >= 0)
    close(lock_fd);
done:
  tagc_opts_free(&prog, &rc);
  free(opts);
  return code;
}
