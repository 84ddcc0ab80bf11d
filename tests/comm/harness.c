#include "harness.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/timeutil.h"

int harness_start(harness *h, int world, rank_fn fn, void *arg) {
  memset(h, 0, sizeof *h);
  h->world = world;
  if (world < 1 || world > 16)
    return TAGC_EINVAL;
  snprintf(h->dir, sizeof h->dir, "/tmp/tagc-comm-test-XXXXXX");
  if (!mkdtemp(h->dir)) {
    fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
    return TAGC_EIO;
  }
  fflush(NULL);
  pid_t parent = getpid();
  for (int r = 0; r < world; r++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "fork: %s\n", strerror(errno));
      harness_wait(h, 0);
      return TAGC_EIO;
    }
    if (pid == 0) {
      /* A rank never outlives the test, even when the test itself is killed. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(1);
      int failed = fn(r, world, h->dir, arg);
      fflush(NULL);
      _exit(failed ? 1 : 0);
    }
    h->pids[r] = pid;
  }
  return TAGC_OK;
}

void harness_kill(harness *h, int r) {
  if (h->pids[r] <= 0)
    return;
  kill(h->pids[r], SIGKILL);
  waitpid(h->pids[r], NULL, 0);
  h->pids[r] = 0;
}

int harness_wait(harness *h, double limit_s) {
  double deadline = tagc_now() + limit_s;
  int bad = 0, left = 0;
  for (int r = 0; r < h->world; r++)
    left += h->pids[r] > 0;
  while (left > 0 && tagc_now() < deadline) {
    for (int r = 0; r < h->world; r++) {
      int status;
      if (h->pids[r] <= 0 || waitpid(h->pids[r], &status, WNOHANG) != h->pids[r])
        continue;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "rank %d: %s %d\n", r, WIFEXITED(status) ? "exit" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        bad++;
      }
      h->pids[r] = 0;
      left--;
    }
    if (left > 0)
      tagc_sleep(0.005);
  }
  for (int r = 0; r < h->world; r++) {
    if (h->pids[r] > 0) {
      fprintf(stderr, "rank %d: still running after %.1f s, killed\n", r, limit_s);
      harness_kill(h, r);
      bad++;
    }
  }
  if (h->dir[0] && tagc_store_file_remove_all(h->dir) != TAGC_OK)
    fprintf(stderr, "cleanup: %s\n", tagc_last_error());
  return bad;
}

int harness_run(int world, rank_fn fn, void *arg, double limit_s) {
  harness h;
  if (harness_start(&h, world, fn, arg) != TAGC_OK)
    return world;
  return harness_wait(&h, limit_s);
}

tagc_comm *harness_comm(int rank, int world, const char *dir, const char *tag,
                        double timeout_s) {
  return harness_comm_at(rank, world, dir, tag, timeout_s, NULL);
}

tagc_comm *harness_comm_at(int rank, int world, const char *dir, const char *tag,
                           double timeout_s, const char *host) {
  tagc_store *store = NULL;
  if (tagc_store_file_new(dir, &store) != TAGC_OK) {
    fprintf(stderr, "rank %d: store: %s\n", rank, tagc_last_error());
    return NULL;
  }
  char prefix[128];
  snprintf(prefix, sizeof prefix, "test/%s", tag);
  tagc_comm_config cfg;
  tagc_comm_config_init(&cfg);
  cfg.rank = rank;
  cfg.world_size = world;
  cfg.store = store;
  cfg.prefix = prefix;
  cfg.timeout_s = timeout_s;
  cfg.host = host;
  tagc_comm *comm = NULL;
  if (tagc_comm_create(&cfg, &comm) != TAGC_OK)
    fprintf(stderr, "rank %d: comm create: %s\n", rank, tagc_last_error());
  tagc_store_free(store);
  return comm;
}

void harness_mark(const char *dir, const char *key) {
  tagc_store *s = NULL;
  if (tagc_store_file_new(dir, &s) == TAGC_OK)
    tagc_store_set(s, key, "1", 1);
  tagc_store_free(s);
}

int harness_wait_mark(const char *dir, const char *key, double timeout_s) {
  tagc_store *s = NULL;
  void *v = NULL;
  size_t len;
  int ok = tagc_store_file_new(dir, &s) == TAGC_OK &&
           tagc_store_get(s, key, timeout_s, &v, &len) == TAGC_OK;
  free(v);
  tagc_store_free(s);
  return ok;
}
