/* Multi-process test harness for comm: forks W ranks that bootstrap through a file store in
 * a fresh temporary directory, waits for them with a time limit, kills and reaps every child
 * on failure or timeout, and removes the directory. Ranks get SIGKILL if the test process
 * dies, so none is left behind. */
#ifndef TAGC_TESTS_COMM_HARNESS_H
#define TAGC_TESTS_COMM_HARNESS_H

#include <sys/types.h>

#include "comm/comm.h"

/* Body of one rank: returns its number of failed checks (0 = success). `dir` is the store
 * directory shared by all ranks; `arg` is passed through. Runs in a forked child. */
typedef int (*rank_fn)(int rank, int world, const char *dir, void *arg);

typedef struct harness {
  char dir[64];
  int world;
  pid_t pids[16];
} harness;

/* Forks world ranks running fn. TAGC_EIO when the directory or fork fails. */
int harness_start(harness *h, int world, rank_fn fn, void *arg);

/* Waits for every rank up to limit_s seconds; kills the rest with SIGKILL after that.
 * Returns the number of ranks that did not exit with status 0 (killed ones included), and
 * removes the store directory. Skips ranks already reaped by harness_kill(). */
int harness_wait(harness *h, double limit_s);

/* SIGKILLs rank r and reaps it (the test's fault injection). */
void harness_kill(harness *h, int r);

/* harness_start + harness_wait. */
int harness_run(int world, rank_fn fn, void *arg, double limit_s);

/* A Gloo communicator for `rank` over the store in dir, prefix "test/<tag>", default
 * timeout timeout_s. NULL (with the error printed) on failure. */
tagc_comm *harness_comm(int rank, int world, const char *dir, const char *tag,
                        double timeout_s);

/* harness_comm listening on and advertising `host` (NULL = 127.0.0.1). */
tagc_comm *harness_comm_at(int rank, int world, const char *dir, const char *tag,
                           double timeout_s, const char *host);

/* Test events between ranks through the file store in dir: harness_mark sets key;
 * harness_wait_mark waits up to timeout_s for it and returns whether it came. */
void harness_mark(const char *dir, const char *key);
int harness_wait_mark(const char *dir, const char *key, double timeout_s);

#endif
