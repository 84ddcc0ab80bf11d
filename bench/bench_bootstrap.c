/* Gloo full-mesh set-up time against the world size: W processes on loopback each build a
 * communicator through tagc_comm_create, bootstrapping through the file store (a directory)
 * or the etcd store (a local etcd started for the run, one client per process, as workers
 * have). A trial starts every rank at once (after each has its store and etcd connection)
 * and lasts until the last rank's create returned; the ranks destroy their communicators only
 * once all have one. Prints per store and W the median, min and max of the trials, the etcd
 * requests of one bootstrap (all ranks' unary requests: puts, transactions, range reads; not
 * the watch streams) and the TCP sockets a rank holds after create.
 *
 * Usage: bench_bootstrap [--stores file,etcd] [--worlds 4,8,16,32,64] [--trials 3]
 *                        [--timeout S]
 * A trial whose ranks do not all succeed within the timeout (default 60 s) prints "failed"
 * and the first error; larger worlds are still tried. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster/etcd.h"
#include "cluster/etcd_stats.h"
#include "cluster/etcd_store.h"
#include "comm/comm.h"
#include "comm/store.h"
#include "common/timeutil.h"
#include "etcd_server.h"

#define MAX_WORLD 256
#define MAX_TRIALS 9

/* What a rank tells the parent after its create. */
typedef struct rank_result {
  int ok;
  double done;       /* tagc_now() when create returned (one clock for all processes) */
  long requests;     /* etcd unary requests of this rank's bootstrap */
  int sockets;       /* sockets the rank holds with its communicator */
  char error[200];
} rank_result;

typedef struct trial {
  const char *store;   /* "file" or "etcd" */
  const char *etcd;    /* URL (etcd) */
  char dir[128];       /* file store directory */
  long gen;            /* unique per trial: the etcd store's generation */
  int world;
  double timeout_s;
} trial;

static int count_sockets(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  struct dirent *e;
  char path[300], target[64];
  while (d && (e = readdir(d)) != NULL) {
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len > 0) {
      target[len] = '\0';
      n += strncmp(target, "socket:", 7) == 0;
    }
  }
  if (d)
    closedir(d);
  return n;
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Blocks until the parent closes its end of the pipe. */
static void wait_closed(int fd) {
  char b;
  while (read(fd, &b, 1) < 0 && errno == EINTR) {
  }
}

/* One rank: store (and etcd client), "ready" on `out`, waits for `go` to close, creates the
 * communicator, sends its result on `out`, waits for `release` to close, destroys it. */
static int rank_main(const trial *t, int rank, int out, int go, int release) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  rank_result r = {0};
  tagc_etcd *etcd = NULL;
  tagc_store *store = NULL;
  tagc_status st;
  if (strcmp(t->store, "etcd") == 0) {
    tagc_etcd_credentials cred = {0};
    st = tagc_etcd_connect(t->etcd, &cred, TAGC_ETCD_DEADLINE_S, &etcd);
    if (st == TAGC_OK)
      st = tagc_etcd_store_new(etcd, "bench", t->gen, &store);
  } else {
    st = tagc_store_file_new(t->dir, &store);
  }
  char ready = st == TAGC_OK ? 'r' : 'x';
  write_all(out, &ready, 1);
  wait_closed(go);
  tagc_comm *comm = NULL;
  if (st == TAGC_OK) {
    tagc_etcd_stats before, after;
    tagc_etcd_stats_get(&before);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "gen/%ld/boot", t->gen);
    tagc_comm_config cfg;
    tagc_comm_config_init(&cfg);
    cfg.rank = rank;
    cfg.world_size = t->world;
    cfg.store = store;
    cfg.prefix = prefix;
    cfg.timeout_s = t->timeout_s;
    st = tagc_comm_create(&cfg, &comm);
    r.done = tagc_now();
    tagc_etcd_stats_get(&after);
    r.requests = (long)(after.requests - before.requests);
  }
  r.ok = st == TAGC_OK;
  if (!r.ok)
    snprintf(r.error, sizeof r.error, "%s", tagc_last_error());
  r.sockets = r.ok ? count_sockets() : 0;
  write_all(out, &r, sizeof r);
  wait_closed(release);
  tagc_comm_destroy(comm);
  tagc_store_free(store);
  tagc_etcd_destroy(etcd);
  return r.ok ? 0 : 1;
}

static int read_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

typedef struct trial_result {
  int ok;
  double seconds;      /* go -> the last rank's create returned */
  long requests;       /* all ranks */
  int sockets_max;     /* the most any rank held */
  char error[240];
} trial_result;

/* Runs one trial: forks the ranks, one result pipe each, shared go and release pipes. */
static void run_trial(const trial *t, trial_result *res) {
  memset(res, 0, sizeof *res);
  int go[2], release[2], outs[MAX_WORLD];
  pid_t pids[MAX_WORLD];
  if (pipe(go) != 0 || pipe(release) != 0) {
    snprintf(res->error, sizeof res->error, "pipe: %s", strerror(errno));
    return;
  }
  int started = 0;
  for (; started < t->world; started++) {
    int p[2];
    if (pipe(p) != 0)
      break;
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      close(go[1]);
      close(release[1]);
      for (int i = 0; i < started; i++)
        close(outs[i]);
      _exit(rank_main(t, started, p[1], go[0], release[0]));
    }
    close(p[1]);
    if (pid < 0) {
      close(p[0]);
      break;
    }
    pids[started] = pid;
    outs[started] = p[0];
  }
  close(go[0]);
  close(release[0]);
  int ready = started == t->world;
  for (int i = 0; i < started; i++) {
    char c = 0;
    ready &= read_all(outs[i], &c, 1) == 0 && c == 'r';
  }
  double t0 = tagc_now();
  close(go[1]); /* every rank starts now */
  res->ok = ready;
  double last = t0;
  for (int i = 0; i < started; i++) {
    rank_result r;
    if (read_all(outs[i], &r, sizeof r) != 0) {
      memset(&r, 0, sizeof r);
      snprintf(r.error, sizeof r.error, "rank %d ended without a result", i);
    }
    if (!r.ok && res->ok)
      snprintf(res->error, sizeof res->error, "rank %d: %s", i, r.error);
    res->ok &= r.ok;
    if (r.ok && r.done > last)
      last = r.done;
    res->requests += r.requests;
    if (r.sockets > res->sockets_max)
      res->sockets_max = r.sockets;
  }
  if (!ready && !res->error[0])
    snprintf(res->error, sizeof res->error, "not every rank started (%d of %d)", started,
             t->world);
  res->seconds = last - t0;
  close(release[1]);
  for (int i = 0; i < started; i++) {
    close(outs[i]);
    waitpid(pids[i], NULL, 0);
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Parses "4,8,16" into w (at most cap values); returns the count. */
static int parse_list(const char *s, int *w, int cap) {
  int n = 0;
  for (const char *p = s; *p && n < cap;) {
    w[n++] = atoi(p);
    p = strchr(p, ',');
    if (!p)
      break;
    p++;
  }
  return n;
}

int main(int argc, char **argv) {
  const char *stores = "file,etcd";
  int worlds[16] = {4, 8, 16, 32, 64}, n_worlds = 5, trials = 3;
  double timeout_s = 60;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--stores") == 0 && i + 1 < argc)
      stores = argv[++i];
    else if (strcmp(argv[i], "--worlds") == 0 && i + 1 < argc)
      n_worlds = parse_list(argv[++i], worlds, 16);
    else if (strcmp(argv[i], "--trials") == 0 && i + 1 < argc)
      trials = atoi(argv[++i]);
    else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc)
      timeout_s = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_bootstrap [--stores file,etcd] [--worlds 4,8,16,32,64] "
                      "[--trials 3] [--timeout S]\n");
      return 2;
    }
  }
  if (trials < 1 || trials > MAX_TRIALS) {
    fprintf(stderr, "bench_bootstrap: --trials must be 1 to %d\n", MAX_TRIALS);
    return 2;
  }
  for (int i = 0; i < n_worlds; i++) {
    if (worlds[i] < 2 || worlds[i] > MAX_WORLD) {
      fprintf(stderr, "bench_bootstrap: a world size must be 2 to %d\n", MAX_WORLD);
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  tagc_test_etcd server = {0};
  int use_etcd = strstr(stores, "etcd") != NULL;
  if (use_etcd && tagc_test_etcd_start(&server) != TAGC_OK) {
    fprintf(stderr, "bench_bootstrap: cannot start etcd: %s\n", tagc_last_error());
    return 1;
  }
  char base[] = "/tmp/tagc-bench-boot-XXXXXX";
  if (!mkdtemp(base)) {
    fprintf(stderr, "bench_bootstrap: mkdtemp: %s\n", strerror(errno));
    tagc_test_etcd_stop(&server);
    return 1;
  }
  printf("store  W    median_s  min_s    max_s    etcd_requests  sockets_per_rank  status\n");
  long gen = 1;
  for (const char *s = stores; *s;) {
    const char *comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    const char *name = len == 4 && strncmp(s, "etcd", 4) == 0   ? "etcd"
                       : len == 4 && strncmp(s, "file", 4) == 0 ? "file"
                                                                : NULL;
    s += len + (comma != NULL);
    if (!name)
      continue;
    for (int wi = 0; wi < n_worlds; wi++) {
      double secs[MAX_TRIALS];
      trial_result r = {0};
      int ok = 1;
      for (int k = 0; k < trials && ok; k++) {
        trial t = {.store = name, .etcd = server.url, .gen = gen++, .world = worlds[wi],
                   .timeout_s = timeout_s};
        snprintf(t.dir, sizeof t.dir, "%s/t%ld", base, t.gen);
        run_trial(&t, &r);
        ok = r.ok;
        secs[k] = r.seconds;
        if (strcmp(name, "file") == 0)
          tagc_store_file_remove_all(t.dir);
      }
      if (!ok) {
        printf("%-5s  %-4d failed: %s\n", name, worlds[wi], r.error);
        fflush(stdout);
        continue;
      }
      qsort(secs, (size_t)trials, sizeof secs[0], cmp_double);
      printf("%-5s  %-4d %-9.3f %-8.3f %-8.3f %-14ld %-17d ok\n", name, worlds[wi],
             secs[trials / 2], secs[0], secs[trials - 1], strcmp(name, "etcd") == 0 ? r.requests : 0,
             r.sockets_max);
      fflush(stdout);
    }
  }
  rmdir(base);
  tagc_test_etcd_stop(&server);
  return 0;
}
