/* tagctl run: a training job on this machine. Writes OUT/job.json (the worker options),
 * starts the workers (static: rendezvous in OUT; elastic: a local etcd unless --etcd, and
 * --coordinators coordinators), waits for them and stops everything it started. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
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
#include <sys/wait.h>
#include <unistd.h>

#include "comm/store.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "cluster/http.h"
#include "cluster/keys.h"
#include "tagctl/tagctl.h"
#include "worker/device.h"
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
     "the worker that --fault arms (-1 = the last one)"},
};

/* The options of tagctl run: its own, then every worker option (forwarded through
 * OUT/job.json). *opts is malloc'd, sized from the two tables; the caller frees it. */
static tagc_status run_program(tagc_opt_program *prog, tagc_opt **opts) {
  size_t n_extra = sizeof run_extra / sizeof run_extra[0];
  size_t n = n_extra + tagc_train_program.n_opts;
  *opts = malloc(n * sizeof **opts);
  if (!*opts)
    return tagc_errorf(TAGC_ENOMEM, "option table of %zu entries", n);
  memcpy(*opts, run_extra, sizeof run_extra);
  memcpy(*opts + n_extra, tagc_train_program.opts, tagc_train_program.n_opts * sizeof **opts);
  *prog = (tagc_opt_program){"tagctl run", "[options]",
                             "Runs a training job locally: starts the workers, shows their "
                             "progress and writes OUT/metrics.jsonl and OUT/summary.json.",
                             *opts, n};
  return TAGC_OK;
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

/* Writes the worker part of the configuration to OUT/job.json for the workers to read. */
static tagc_status write_job(const run_config *rc, char *path, size_t cap) {
  snprintf(path, cap, "%s/job.json", rc->train.out);
  json_t *job = tagc_opts_to_json(&tagc_train_program, &rc->train);
  if (job) { /* --fault and --metrics-addr are per worker (its command line): see spawn_worker */
    json_object_set_new(job, "fault", json_string(""));
    json_object_set_new(job, "metrics_addr", json_string(""));
  }
  if (!job)
    return tagc_errorf(TAGC_ENOMEM, "job config");
  tagc_status st = tagc_json_write_file(path, job);
  json_decref(job);
  return st;
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) {
  (void)sig;
  interrupted = 1;
}

/* Ctrl-C / SIGTERM: stop the workers, then the coordinators and etcd (launch_workers). */
static void catch_interrupts(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_interrupt; /* no SA_RESTART: wait() returns EINTR */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* Kills (SIGKILL) every started worker still running. */
static void kill_all(const pid_t *pids, int n) {
  for (int i = 0; i < n; i++)
    if (pids[i] > 0)
      kill(pids[i], SIGKILL);
}

/* Starts a program with argv (NULL-terminated) and the child environment of local runs;
 * stdout/stderr go to `log` when not NULL. lock_fd >= 0 (workers): the child inherits OUT's
 * lock through that descriptor (worker/run.h, TAGC_OUT_LOCK_FD). Returns its PID or -1. */
static pid_t spawn(const char *path, char *const *argv, const char *log, int lock_fd) {
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  unsetenv("TAGC_CONFIG");
  unsetenv(TAGC_OUT_LOCK_FD_ENV);
  if (lock_fd >= 0 && fcntl(lock_fd, F_SETFD, 0) == 0) {
    char fd[16];
    snprintf(fd, sizeof fd, "%d", lock_fd);
    setenv(TAGC_OUT_LOCK_FD_ENV, fd, 1);
  }
  /* spinning OpenMP teams of several workers starve each other on shared cores */
  setenv("OMP_WAIT_POLICY", "passive", 0);
  if (log) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
  }
  if (strchr(path, '/'))
    execv(path, argv);
  else
    execvp(path, argv);
  fprintf(stderr, "tagctl run: cannot start %s: %s\n", path, strerror(errno));
  _exit(127);
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

/* Starts worker `rank` of n: static rendezvous in rdzv, or elastic through etcd (rdzv NULL). */
static pid_t spawn_worker(const char *worker, const char *job, int rank, int n, const char *rdzv,
                          const run_config *rc, int lock_fd) {
  char r[16], w[16], id[32];
  snprintf(r, sizeof r, "%d", rank);
  snprintf(w, sizeof w, "%d", n);
  snprintf(id, sizeof id, "w%d", rank);
  char *argv[20];
  int a = 0;
  argv[a++] = "tagc-worker";
  argv[a++] = "--config";
  argv[a++] = (char *)job;
  if (rdzv) {
    argv[a++] = "--rank", argv[a++] = r, argv[a++] = "--world", argv[a++] = w;
    argv[a++] = "--rendezvous", argv[a++] = (char *)rdzv;
  } else {
    argv[a++] = "--worker-id", argv[a++] = id;
  }
  int fault_rank = rc->fault_rank >= 0 ? (int)rc->fault_rank : n - 1;
  if (rc->train.fault && *rc->train.fault && rank == fault_rank)
    argv[a++] = "--fault", argv[a++] = rc->train.fault;
  char maddr[300];
  if (*rc->train.metrics_addr && metrics_addr_of(rc, rank, maddr, sizeof maddr) == TAGC_OK)
    argv[a++] = "--metrics-addr", argv[a++] = maddr;
  char dev[32];
  if (!strcmp(rc->train.device, "cuda") && n > 1) { /* one GPU per local worker */
    snprintf(dev, sizeof dev, "cuda:%d", rank);
    argv[a++] = "--device", argv[a++] = dev;
  }
  argv[a] = NULL;
  return spawn(worker, argv, NULL, lock_fd);
}

/* Runs the workers of a local job to completion. Static mode: if one fails, the others are
 * stopped and its exit status is returned. Elastic mode: the others carry on without it (that
 * is the point); the run succeeds when a worker finished the job. */
static int launch_workers(const char *worker, const char *job, const run_config *rc, int lock_fd) {
  int n = (int)rc->workers;
  pid_t pids[64];
  char rdzv[PATH_MAX];
  snprintf(rdzv, sizeof rdzv, "%s/rendezvous-%d", rc->train.out, (int)getpid());
  for (int i = 0; i < n; i++) {
    pids[i] = spawn_worker(worker, job, i, n, rc->elastic ? NULL : rdzv, rc, lock_fd);
    if (pids[i] < 0) {
      fprintf(stderr, "tagctl run: fork: %s\n", strerror(errno));
      kill_all(pids, i);
      n = i;
      break;
    }
  }
  int failed = n == (int)rc->workers ? 0 : 1, finished = 0;
  for (int left = n; left > 0;) {
    int ws;
    pid_t pid = wait(&ws);
    if (pid < 0 && errno == EINTR) {
      if (interrupted && !failed) {
        fprintf(stderr, "tagctl run: interrupted; stopping the workers\n");
        kill_all(pids, n);
        failed = 130;
      }
      continue;
    }
    if (pid < 0)
      break;
    int mine = 0;
    for (int i = 0; i < n; i++)
      if (pids[i] == pid)
        pids[i] = -1, left--, mine = 1;
    if (!mine)
      continue;
    int c = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    if (c == 0)
      finished = 1;
    else if (!failed) {
      failed = c;
      if (!rc->elastic)
        kill_all(pids, n);
      else
        fprintf(stderr, "tagctl run: a worker exited with status %d; the others go on\n", c);
    }
  }
  tagc_store_file_remove_all(rdzv);
  return rc->elastic && finished && !interrupted ? 0 : failed;
}

/* ---------- elastic local runs: etcd and coordinators ---------- */

typedef struct infra {
  pid_t etcd;
  pid_t coords[8];
  int n_coords;
  char data_dir[PATH_MAX];
} infra;

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

/* Waits until etcd at url answers (a read of a missing key). */
static tagc_status wait_etcd(const char *url, double timeout_s) {
  tagc_etcd_config ec;
  tagc_etcd_config_init(&ec);
  ec.endpoints = url;
  ec.deadline_s = 1;
  tagc_etcd *c;
  TAGC_CHECK(tagc_etcd_create(&ec, &c));
  tagc_status st = TAGC_ETIMEDOUT;
  for (double end = tagc_now() + timeout_s; tagc_now() < end; tagc_sleep(0.1)) {
    char *v = NULL;
    st = tagc_etcd_get(c, "/tagc-probe", &v, NULL, NULL);
    free(v);
    if (st == TAGC_OK || st == TAGC_ENOTFOUND) {
      st = TAGC_OK;
      break;
    }
  }
  tagc_etcd_destroy(c);
  return st == TAGC_OK ? st : tagc_errorf(TAGC_ETIMEDOUT, "local etcd at %s did not start", url);
}

/* Starts a single-member etcd for this run (fresh data dir under OUT) and sets --etcd. */
static tagc_status start_etcd(run_config *rc, infra *in) {
  int cp = free_port(), pp = free_port();
  if (cp < 0 || pp < 0)
    return tagc_errorf(TAGC_EIO, "no free loopback port for etcd");
  snprintf(in->data_dir, sizeof in->data_dir, "%s/etcd-%d", rc->train.out, (int)getpid());
  char client[64], peer[64], cluster[96], log[PATH_MAX + 16];
  snprintf(client, sizeof client, "http://127.0.0.1:%d", cp);
  snprintf(peer, sizeof peer, "http://127.0.0.1:%d", pp);
  snprintf(cluster, sizeof cluster, "local=%s", peer);
  snprintf(log, sizeof log, "%s/etcd.log", rc->train.out);
  char *argv[] = {"etcd", "--name", "local", "--data-dir", in->data_dir, "--listen-client-urls",
                  client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                  "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster, NULL};
  in->etcd = spawn("etcd", argv, log, -1);
  if (in->etcd < 0)
    return tagc_errorf(TAGC_EIO, "cannot start etcd: %s", strerror(errno));
  free(rc->train.etcd);
  rc->train.etcd = strdup(client);
  return rc->train.etcd ? wait_etcd(client, 20) : tagc_errorf(TAGC_ENOMEM, "etcd URL");
}

/* An external etcd (--etcd URL) with the run's credentials: TAGC_OK when it answers and the
 * job is not done yet; *done = 1 when it is (one line printed); else TAGC_EPEER with one
 * line ("cannot use etcd at URL: why"), or TAGC_EINVAL for bad credential options. */
static tagc_status probe_etcd(const run_config *rc, int *done) {
  *done = 0;
  tagc_etcd_config ec;
  tagc_etcd_config_init(&ec);
  ec.endpoints = rc->train.etcd;
  ec.deadline_s = 5;
  tagc_etcd_credentials cred = {rc->train.etcd_ca, rc->train.etcd_cert, rc->train.etcd_key,
                                rc->train.etcd_user, rc->train.etcd_password_file};
  char key[TAGC_KEY_MAX], *value = NULL;
  tagc_etcd *c = NULL;
  TAGC_CHECK(tagc_etcd_create_with_credentials(&ec, &cred, &c));
  tagc_status st = tagc_key_done(rc->train.job, key, sizeof key);
  if (st == TAGC_OK)
    st = tagc_etcd_get(c, key, &value, NULL, NULL);
  tagc_etcd_destroy(c);
  free(value);
  if (st == TAGC_OK) {
    printf("tagctl run: job %s is already done; nothing to train (`tagctl job reset --job %s` "
           "trains it again)\n", rc->train.job, rc->train.job);
    *done = 1;
    return TAGC_OK;
  }
  if (st == TAGC_ENOTFOUND)
    return TAGC_OK;
  char detail[512];
  snprintf(detail, sizeof detail, "%s", tagc_last_error());
  return tagc_errorf(TAGC_EPEER, "cannot use etcd at %s: %s", rc->train.etcd, detail);
}

/* Appends "--NAME VALUE" to argv (at *a) when value is set. */
static void add_flag(char **argv, int *a, const char *name, char *value) {
  if (value && *value)
    argv[(*a)++] = (char *)name, argv[(*a)++] = value;
}

static tagc_status start_coordinators(const run_config *rc, const char *dir, infra *in) {
  char path[PATH_MAX + 32], minw[16], maxw[16];
  snprintf(path, sizeof path, "%s/tagc-coordinator", dir);
  snprintf(minw, sizeof minw, "%lld", (long long)rc->min_workers);
  snprintf(maxw, sizeof maxw, "%lld", (long long)rc->workers);
  for (int k = 0; k < rc->coordinators; k++) {
    char log[PATH_MAX + 32];
    snprintf(log, sizeof log, "%s/coordinator-%d.log", rc->train.out, k);
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
    in->coords[in->n_coords] = spawn(path, argv, log, -1);
    if (in->coords[in->n_coords] < 0)
      return tagc_errorf(TAGC_EIO, "cannot start %s: %s", path, strerror(errno));
    in->n_coords++;
  }
  return TAGC_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* Stops what start_etcd / start_coordinators started (by PID) and removes etcd's data. */
static void stop_infra(infra *in) {
  for (int k = 0; k < in->n_coords; k++)
    kill(in->coords[k], SIGTERM);
  if (in->etcd > 0)
    kill(in->etcd, SIGTERM);
  for (int k = 0; k < in->n_coords; k++)
    waitpid(in->coords[k], NULL, 0);
  if (in->etcd > 0)
    waitpid(in->etcd, NULL, 0);
  if (in->data_dir[0])
    nftw(in->data_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* One line at the start of an elastic run: where coordinator 0 serves /status and /metrics
 * (the port its log names, waited for up to 10 s) and the tagctl status command. */
static void print_where(const run_config *rc) {
  char log[PATH_MAX + 32], line[1024];
  snprintf(log, sizeof log, "%s/coordinator-0.log", rc->train.out);
  int port = 0;
  for (double until = tagc_now() + 10; !port && tagc_now() < until; tagc_sleep(0.05)) {
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
  tagc_status st = tagc_opts_parse(&prog, &rc, argc, argv, NULL, 0, NULL, &help);
  if (st != TAGC_OK || help) {
    if (st != TAGC_OK)
      fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    code = st != TAGC_OK ? 2 : 0;
    goto done;
  }
  if ((st = tagc_log_configure(rc.train.log, TAGC_LOG_AUTO)) != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    goto done;
  }
  char maddr[300];
  if (*rc.train.metrics_addr && (st = metrics_addr_of(&rc, 0, maddr, sizeof maddr)) != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    goto done;
  }
  int dev_index;
  if ((st = tagc_device_parse(rc.train.device, &dev_index)) != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    code = st == TAGC_EINVAL ? 2 : 1;
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
  char dir[PATH_MAX], worker[PATH_MAX + 16], job[PATH_MAX];
  infra in = {0};
  catch_interrupts();
  if ((st = self_dir(dir, sizeof dir)) == TAGC_OK)
    st = tagc_mkdir_p(rc.train.out);
  int lock_fd = -1; /* OUT is this run's until the end: a second run there is refused */
  if (st == TAGC_OK && (st = tagc_out_lock(rc.train.out, NULL, &lock_fd)) != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    code = 2;
    goto done;
  }
  int finished = 0; /* the job on an external etcd is done already */
  if (st == TAGC_OK && rc.elastic && !*rc.train.etcd)
    st = start_etcd(&rc, &in);
  else if (st == TAGC_OK && rc.elastic)
    st = probe_etcd(&rc, &finished);
  if (st == TAGC_OK && rc.elastic && !finished)
    st = start_coordinators(&rc, dir, &in);
  if (st == TAGC_OK && !finished)
    st = write_job(&rc, job, sizeof job);
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    code = st == TAGC_EINVAL ? 2 : 1;
  } else if (finished) {
    code = 0;
  } else {
    snprintf(worker, sizeof worker, "%s/tagc-worker", dir);
    if (rc.elastic)
      print_where(&rc);
    code = launch_workers(worker, job, &rc, lock_fd);
  }
  stop_infra(&in);
  if (lock_fd >= 0)
    close(lock_fd);
done:
  tagc_opts_free(&prog, &rc);
  free(opts);
  return code;
}
