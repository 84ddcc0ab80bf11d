/* Failure behaviour of the Gloo communicator, with forked ranks: a rank that never calls the
 * operation (timeout), a peer SIGKILLed while the others are blocked in a collective and
 * while they run collectives in a loop, abort() from another thread, a create whose peers
 * never arrive, and ranks whose calls diverge in size, kind or sequence. Every failing call
 * must return within its timeout plus a small slack, and a broken communicator must keep
 * failing at once. */
#include <pthread.h>
#include <stdint.h>

#include "comm/comm.h"
#include "common/timeutil.h"
#include "harness.h"
#include "test.h"

/* A forked rank counts only its own checks, not those its parent made before the fork. */
#define RANK_START() (test_failed_ = test_passed_ = 0)

#define SLACK_S 0.5

/* Rank 1 never calls the all-reduce: rank 0 times out; later, rank 1's own call fails at
 * once because rank 0 closed its connections. */
static int timeout_rank(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  RANK_START();
  tagc_comm *c = harness_comm(rank, world, dir, "timeout", 10.0);
  CHECK(c != NULL);
  if (!c)
    return test_failed_;
  float x[64] = {0};
  if (rank == 0) {
    double t0 = tagc_now();
    tagc_status st = tagc_comm_allreduce(c, x, x, 64, TAGC_DTYPE_F32, TAGC_REDOP_SUM, 1.0);
    double took = tagc_now() - t0;
    CHECK_EQ_INT(st, TAGC_ETIMEDOUT);
    CHECK_MSG(took >= 0.99 && took <= 1.0 + SLACK_S, "timeout after %.3f s", took);
    CHECK_EQ_INT(tagc_comm_failed_peer(c), 1);
    t0 = tagc_now();
    CHECK_EQ_INT(tagc_comm_barrier(c, 5.0), TAGC_ETIMEDOUT);
    CHECK(tagc_now() - t0 < 0.1);
    tagc_comm_stats s;
    tagc_comm_stats_get(c, &s);
    CHECK_EQ_INT(s.op[TAGC_COMM_OP_ALLREDUCE].errors, 1);
    CHECK_EQ_INT(s.op[TAGC_COMM_OP_BARRIER].errors, 1);
    CHECK_EQ_INT(s.op[TAGC_COMM_OP_ALLREDUCE].bytes_sent, 0);
    printf("timeout: rank 0 got %s after %.3f s (timeout 1.0 s)\n", tagc_strerror(st), took);
    harness_mark(dir, "done/0");
  } else {
    CHECK(harness_wait_mark(dir, "done/0", 10.0));
    double t0 = tagc_now();
    CHECK_EQ_INT(tagc_comm_barrier(c, 5.0), TAGC_EPEER);
    CHECK_MSG(tagc_now() - t0 < 1.0, "late caller failed after %.3f s", tagc_now() - t0);
    CHECK_EQ_INT(tagc_comm_failed_peer(c), 0);
  }
  tagc_comm_destroy(c);
  return test_failed_;
}

/* The last rank builds the communicator and then hangs until it is SIGKILLed; the others are
 * blocked in an all-reduce with a 10 s timeout and must fail well before it, then rebuild a
 * smaller communicator under a new prefix and continue. */
static int kill_blocked_rank(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  RANK_START();
  tagc_comm *c = harness_comm(rank, world, dir, "killblocked", 10.0);
  CHECK(c != NULL);
  if (!c)
    return test_failed_;
  if (rank == world - 1) {
    harness_mark(dir, "victim-ready");
    for (;;)
      tagc_sleep(1.0);
  }
  float x[4096] = {0};
  double t0 = tagc_now();
  tagc_status st = tagc_comm_allreduce(c, x, x, 4096, TAGC_DTYPE_F32, TAGC_REDOP_SUM, 10.0);
  double took = tagc_now() - t0;
  CHECK_EQ_INT(st, TAGC_EPEER);
  CHECK_MSG(took < 5.0, "failed after %.3f s", took);
  CHECK_EQ_INT(tagc_comm_failed_peer(c), world - 1);
  printf("kill while blocked: rank %d got %s after %.3f s (peer %d)\n", rank,
         tagc_strerror(st), took, tagc_comm_failed_peer(c));
  tagc_comm_destroy(c);

  /* Recovery: the survivors build the next generation without the victim and go on. */
  c = harness_comm(rank, world - 1, dir, "killblocked-gen2", 10.0);
  CHECK(c != NULL);
  if (!c)
    return test_failed_;
  for (int i = 0; i < 4096; i++)
    x[i] = (float)(rank + 1);
  CHECK_OK(tagc_comm_allreduce(c, x, x, 4096, TAGC_DTYPE_F32, TAGC_REDOP_SUM, 10.0));
  CHECK(x[0] == (float)(world - 1) * world / 2 && x[4095] == x[0]);
  tagc_comm_destroy(c);
  return test_failed_;
}

/* All ranks run large all-reduces in a loop; rank 1 is killed in the middle. Survivors
 * must see TAGC_EPEER on the call that was running (or the next one). */
static int kill_loop_rank(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  RANK_START();
  tagc_comm *c = harness_comm(rank, world, dir, "killloop", 10.0);
  CHECK(c != NULL);
  if (!c)
    return test_failed_;
  size_t n = 1 << 20;
  float *x = calloc(n, sizeof(float));
  if (rank == 0)
    harness_mark(dir, "loop-running");
  tagc_status st = TAGC_OK;
  double took = 0, limit = tagc_now() + 30.0, timeout = 3.0;
  int iters = 0;
  while (st == TAGC_OK && tagc_now() < limit) {
    double t0 = tagc_now();
    st = tagc_comm_allreduce(c, x, x, n, TAGC_DTYPE_F32, TAGC_REDOP_SUM, timeout);
    took = tagc_now() - t0;
    iters++;
  }
  /* The broken connection is noticed, not waited out (a send in flight to the victim
   * included), so the failing call ends long before its timeout. */
  CHECK_MSG(st == TAGC_EPEER, "status %d after %d calls", st, iters);
  CHECK_MSG(took <= 2.0, "failing call took %.3f s (timeout %.1f s)", took, timeout);
  printf("kill in loop: rank %d got %s after %d calls, failing call %.3f s (peer %d)\n", rank,
         tagc_strerror(st), iters, took, tagc_comm_failed_peer(c));
  free(x);
  tagc_comm_destroy(c);
  return test_failed_;
}

typedef struct abort_arg {
  tagc_comm *comm;
  double delay;
  double when;
} abort_arg;

static void *abort_later(void *p) {
  abort_arg *a = p;
  tagc_sleep(a->delay);
  a->when = tagc_now();
  tagc_comm_abort(a->comm);
  return NULL;
}

/* Rank 0 blocks in a broadcast from the silent rank 1 with a 30 s timeout; another thread
 * aborts after 0.3 s, and the call must return TAGC_EABORTED within 1 s of the abort. */
static int abort_rank(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  RANK_START();
  tagc_comm *c = harness_comm(rank, world, dir, "abort", 10.0);
  CHECK(c != NULL);
  if (!c)
    return test_failed_;
  char buf[128] = {0};
  if (rank == 0) {
    abort_arg a = {c, 0.3, 0};
    pthread_t t;
    pthread_create(&t, NULL, abort_later, &a);
    tagc_status st = tagc_comm_broadcast(c, buf, sizeof buf, 1, 30.0);
    double returned = tagc_now();
    pthread_join(t, NULL);
    CHECK_EQ_INT(st, TAGC_EABORTED);
    CHECK_MSG(returned - a.when < 1.0, "returned %.3f s after abort", returned - a.when);
    CHECK_EQ_INT(tagc_comm_status(c), TAGC_EABORTED);
    CHECK_EQ_INT(tagc_comm_failed_peer(c), -1);
    CHECK_EQ_INT(tagc_comm_barrier(c, 5.0), TAGC_EABORTED);
    printf("abort: pending broadcast returned %.4f s after abort()\n", returned - a.when);
    harness_mark(dir, "aborted");
  } else {
    CHECK(harness_wait_mark(dir, "aborted", 10.0));
    double t0 = tagc_now();
    CHECK_EQ_INT(tagc_comm_broadcast(c, buf, sizeof buf, 1, 5.0), TAGC_EPEER);
    CHECK_MSG(tagc_now() - t0 < 1.0, "peer of aborted rank failed after %.3f s",
              tagc_now() - t0);
  }
  tagc_comm_destroy(c);
  return test_failed_;
}

/* Abort with nothing pending, then every call fails at once; destroy after abort works. */
static void test_abort_idle(void) {
  char dir[] = "/tmp/tagc-comm-idle-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  tagc_comm *c = harness_comm(0, 1, dir, "idle", 5.0);
  CHECK(c != NULL);
  if (c) {
    char b = 0;
    CHECK_OK(tagc_comm_barrier(c, 0));
    tagc_comm_abort(c);
    tagc_comm_abort(c);
    CHECK_EQ_INT(tagc_comm_broadcast(c, &b, 1, 0, 0), TAGC_EABORTED);
    CHECK_EQ_INT(tagc_comm_status(c), TAGC_EABORTED);
    tagc_comm_destroy(c);
  }
  CHECK_OK(tagc_store_file_remove_all(dir));
}

/* Only rank 0 of 2 calls create: it must give up after its timeout. */
static int create_timeout_rank(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  RANK_START();
  if (rank != 0)
    return 0;
  double t0 = tagc_now();
  tagc_comm *c = harness_comm(rank, world, dir, "lonely", 1.0);
  double took = tagc_now() - t0;
  CHECK(c == NULL);
  CHECK_EQ_INT(tagc_comm_status(c), TAGC_EINVAL);
  CHECK_MSG(took >= 0.99 && took <= 1.0 + SLACK_S, "create gave up after %.3f s", took);
  printf("create timeout: rank 0 gave up after %.3f s (%s)\n", took, tagc_last_error());
  tagc_comm_destroy(c);
  return test_failed_;
}

/* Ranks whose calls diverge: the last rank's call differs from the others'. Every rank must
 * get TAGC_EPEER, fast (the header of the other side's call tells), naming another rank: with
 * two ranks each names the other; with three, the rank after which the odd one comes checks
 * it first and names it, while rank 0 may see that rank close its connections first (blame is
 * best effort). The communicator must stay broken, and no process may die (Gloo's event loop
 * used to abort the receiver of a larger message). */
typedef enum mismatch_case {
  MISMATCH_SIZE,     /* all-gather of 64 bytes against one of 4096 */
  MISMATCH_KIND,     /* all-gather against an all-to-all moving the same bytes */
  MISMATCH_SKIPPED,  /* the last rank makes an all-gather of 0 bytes (no transfer) first */
  MISMATCH_COUNT
} mismatch_case;

static const char *const mismatch_names[MISMATCH_COUNT] = {"size", "kind", "skipped call"};

static tagc_status mismatch_call(tagc_comm *c, mismatch_case k, int odd, char *buf) {
  char *out = buf + 4096;
  switch (k) {
  case MISMATCH_SIZE:
    return tagc_comm_allgather(c, buf, out, odd ? 4096 : 64, 5.0);
  case MISMATCH_KIND:
    return odd ? tagc_comm_alltoall(c, buf, out, 64, 5.0)
               : tagc_comm_allgather(c, buf, out, 64, 5.0);
  default:
    if (odd)
      CHECK_OK(tagc_comm_allgather(c, buf, out, 0, 5.0));
    return tagc_comm_allgather(c, buf, out, 64, 5.0);
  }
}

static int mismatch_rank(int rank, int world, const char *dir, void *arg) {
  mismatch_case k = *(const mismatch_case *)arg;
  RANK_START();
  tagc_comm *c = harness_comm(rank, world, dir, "mismatch", 10.0);
  CHECK(c != NULL);
  if (!c)
    return test_failed_;
  static char buf[4096 * 5];
  CHECK_OK(tagc_comm_barrier(c, 5.0)); /* connected and in step before the divergence */
  int odd = rank == world - 1;
  double t0 = tagc_now();
  tagc_status st = mismatch_call(c, k, odd, buf);
  double took = tagc_now() - t0;
  CHECK_MSG(st == TAGC_EPEER, "%s: rank %d got %s: %s", mismatch_names[k], rank,
            tagc_strerror(st), tagc_last_error());
  CHECK_MSG(took < 2.0, "%s: failed after %.3f s (timeout 5 s)", mismatch_names[k], took);
  int blamed = tagc_comm_failed_peer(c);
  int want = rank == world - 2 ? world - 1 : rank == world - 1 && world == 2 ? 0 : -1;
  CHECK_MSG(want >= 0 ? blamed == want : blamed >= 0 && blamed < world && blamed != rank,
            "%s: rank %d of %d blames rank %d", mismatch_names[k], rank, world, blamed);
  printf("mismatch (%s, W=%d): rank %d got %s after %.3f s: %s\n", mismatch_names[k], world,
         rank, tagc_strerror(st), took, tagc_last_error());
  t0 = tagc_now();
  CHECK_EQ_INT(tagc_comm_barrier(c, 5.0), TAGC_EPEER);
  CHECK(tagc_now() - t0 < 0.1);
  tagc_comm_destroy(c);
  return test_failed_;
}

/* Ranks 1 and 3 of 4 hang after create and are SIGKILLed one after the other; ranks 0 and 2,
 * blocked in an all-reduce, fail naming one of them and find both connections broken
 * (tagc_comm_broken_peers: what a failure report names as the peers that died together). */
static int kill_two_rank(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  RANK_START();
  tagc_comm *c = harness_comm(rank, world, dir, "killtwo", 10.0);
  CHECK(c != NULL);
  if (!c)
    return test_failed_;
  if (rank % 2 == 1) {
    harness_mark(dir, rank == 1 ? "victim1-ready" : "victim3-ready");
    for (;;)
      tagc_sleep(1.0);
  }
  float x[4096] = {0};
  tagc_status st = tagc_comm_allreduce(c, x, x, 4096, TAGC_DTYPE_F32, TAGC_REDOP_SUM, 10.0);
  CHECK_EQ_INT(st, TAGC_EPEER);
  int broken[4] = {-1, -1, -1, -1};
  int n = tagc_comm_broken_peers(c, broken, 4);
  CHECK_MSG(n == 2 && broken[0] == 1 && broken[1] == 3, "rank %d: %d broken: %d %d", rank, n,
            broken[0], broken[1]);
  tagc_comm_destroy(c);
  return test_failed_;
}

static void test_kill_two(void) {
  harness h;
  CHECK_OK(harness_start(&h, 4, kill_two_rank, NULL));
  CHECK(harness_wait_mark(h.dir, "victim1-ready", 20.0));
  CHECK(harness_wait_mark(h.dir, "victim3-ready", 20.0));
  tagc_sleep(0.3);
  harness_kill(&h, 1);
  harness_kill(&h, 3);
  CHECK_EQ_INT(harness_wait(&h, 30.0), 0);
}

static void test_kill(rank_fn fn, int world, const char *ready_key, double delay) {
  harness h;
  CHECK_OK(harness_start(&h, world, fn, NULL));
  int ready = harness_wait_mark(h.dir, ready_key, 20.0);
  CHECK(ready);
  tagc_sleep(delay);
  harness_kill(&h, fn == kill_blocked_rank ? world - 1 : 1);
  CHECK_EQ_INT(harness_wait(&h, 30.0), 0);
}

int main(void) {
  CHECK_EQ_INT(harness_run(2, timeout_rank, NULL, 30.0), 0);
  test_kill(kill_blocked_rank, 3, "victim-ready", 0.3);
  test_kill(kill_loop_rank, 3, "loop-running", 0.5);
  test_kill_two();
  CHECK_EQ_INT(harness_run(2, abort_rank, NULL, 30.0), 0);
  test_abort_idle();
  CHECK_EQ_INT(harness_run(2, create_timeout_rank, NULL, 30.0), 0);
  for (int world = 2; world <= 3; world++) {
    for (mismatch_case k = 0; k < MISMATCH_COUNT; k++)
      CHECK_EQ_INT(harness_run(world, mismatch_rank, &k, 30.0), 0);
  }
  return TEST_END();
}
