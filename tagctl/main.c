/* tagctl: the user's command. `tagctl run` launches local workers; later subcommands add
 * status, fault injection and checkpoint tools. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckpt_cli.h"
#include "comm/store.h"
#include "common/json.h"
#include "common/log.h"
#include "worker/train.h"

typedef struct run_config {
  tagc_train_config train; /* first: the worker's option offsets stay valid */
  int64_t workers;
} run_config;

static const tagc_opt run_extra[] = {
    {"workers", TAGC_OPT_INT, offsetof(run_config, workers), "1", 1, 64, NULL,
     "local worker processes (CPU ranks, Gloo on loopback)"},
};

static tagc_opt run_opts[64];

static tagc_opt_program run_program(void) {
  size_t n = 0;
  for (size_t i = 0; i < sizeof run_extra / sizeof run_extra[0]; i++)
    run_opts[n++] = run_extra[i];
  for (size_t i = 0; i < tagc_train_program.n_opts; i++)
    run_opts[n++] = tagc_train_program.opts[i];
  return (tagc_opt_program){"tagctl run", "[options]",
                            "Runs a training job locally: starts the workers, shows their "
                            "progress and writes OUT/metrics.jsonl and OUT/summary.json.",
                            run_opts, n};
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
  if (mkdir(rc->train.out, 0755) != 0 && errno != EEXIST)
    return tagc_errorf(TAGC_EIO, "output directory %s: %s", rc->train.out, strerror(errno));
  snprintf(path, cap, "%s/job.json", rc->train.out);
  json_t *job = tagc_opts_to_json(&tagc_train_program, &rc->train);
  if (!job)
    return tagc_errorf(TAGC_ENOMEM, "job config");
  tagc_status st = tagc_json_write_file(path, job);
  json_decref(job);
  return st;
}

/* Kills (SIGKILL) every started worker still running. */
static void kill_all(const pid_t *pids, int n) {
  for (int i = 0; i < n; i++)
    if (pids[i] > 0)
      kill(pids[i], SIGKILL);
}

/* Starts rank i of n with the job file; returns its PID or -1. */
static pid_t spawn_worker(const char *worker, const char *job, int rank, int n, const char *rdzv) {
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  char r[16], w[16];
  snprintf(r, sizeof r, "%d", rank);
  snprintf(w, sizeof w, "%d", n);
  unsetenv("TAGC_CONFIG");
  if (n > 1) /* spinning OpenMP teams of several workers starve each other on shared cores */
    setenv("OMP_WAIT_POLICY", "passive", 0);
  execl(worker, "tagc-worker", "--config", job, "--rank", r, "--world", w, "--rendezvous", rdzv,
        (char *)NULL);
  fprintf(stderr, "tagctl run: cannot start %s: %s\n", worker, strerror(errno));
  _exit(127);
}

/* Runs the workers of a local job to completion. If one fails, the others are stopped and
 * the failing worker's exit status is returned. */
static int launch_workers(const char *worker, const char *job, const run_config *rc) {
  int n = (int)rc->workers;
  pid_t pids[64];
  char rdzv[PATH_MAX];
  snprintf(rdzv, sizeof rdzv, "%s/rendezvous-%d", rc->train.out, (int)getpid());
  for (int i = 0; i < n; i++) {
    pids[i] = spawn_worker(worker, job, i, n, rdzv);
    if (pids[i] < 0) {
      fprintf(stderr, "tagctl run: fork: %s\n", strerror(errno));
      kill_all(pids, i);
      n = i;
      break;
    }
  }
  int code = n == (int)rc->workers ? 0 : 1;
  for (int left = n; left > 0;) {
    int ws;
    pid_t pid = wait(&ws);
    if (pid < 0 && errno == EINTR)
      continue;
    if (pid < 0)
      break;
    for (int i = 0; i < n; i++)
      if (pids[i] == pid)
        pids[i] = -1, left--;
    int c = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    if (c != 0 && code == 0) {
      code = c;
      kill_all(pids, n);
    }
  }
  tagc_store_file_remove_all(rdzv);
  return code;
}

static int cmd_run(int argc, char **argv) {
  run_config rc;
  memset(&rc, 0, sizeof rc);
  tagc_opt_program prog = run_program();
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
  if (rc.train.threads == 0) { /* share the cores: oversubscribed OpenMP teams crawl */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    rc.train.threads = cores / rc.workers > 1 ? cores / rc.workers : 1;
  }
  char dir[PATH_MAX], worker[PATH_MAX + 16], job[PATH_MAX];
  if ((st = self_dir(dir, sizeof dir)) != TAGC_OK || (st = write_job(&rc, job, sizeof job)) != TAGC_OK) {
    fprintf(stderr, "tagctl run: %s\n", tagc_last_error());
    goto done;
  }
  snprintf(worker, sizeof worker, "%s/tagc-worker", dir);
  code = launch_workers(worker, job, &rc);
done:
  tagc_opts_free(&prog, &rc);
  return code;
}

static void usage(FILE *f) {
  fprintf(f, "usage: tagctl COMMAND [options]\n\n"
             "commands:\n"
             "  run     train locally (tagctl run --help)\n"
             "  ckpt    ls|verify|inspect DIR: checkpoints of a run (DIR = OUT/ckpt)\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "run"))
    return cmd_run(argc - 1, argv + 1);
  if (!strcmp(argv[1], "ckpt"))
    return tagc_ckpt_cli_main(argc - 1, argv + 1);
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "tagctl: unknown command '%s' (see tagctl --help)\n", argv[1]);
  return 2;
}
