/* Whom a failing Gloo bootstrap blames (tagc_comm_create_ex): a rank whose address never
 * appears, and a rank that published its address but is gone before the others connect.
 * Forked ranks over a file store; every create must return within twice its timeout. */
#include "comm/comm.h"
#include "common/timeutil.h"
#include "harness.h"
#include "test.h"

/* A forked rank counts only its own checks, not those its parent made before the fork. */
#define RANK_START() (test_failed_ = test_passed_ = 0)

#define SLACK_S 0.5

/* Creates rank's communicator over the store in dir; returns its status, the blamed rank in
 * *peer and the seconds it took in *took. A communicator that was made passes a barrier
 * before it is destroyed (a rank that closes its connections at once could race with a peer
 * still accepting them). */
static tagc_status create(int rank, int world, const char *dir, double timeout_s, int *peer,
                          double *took) {
  tagc_store *store = NULL;
  *peer = -2;
  *took = 0;
  if (tagc_store_file_new(dir, &store) != TAGC_OK)
    return TAGC_EIO;
  tagc_comm_config cfg;
  tagc_comm_config_init(&cfg);
  cfg.rank = rank;
  cfg.world_size = world;
  cfg.store = store;
  cfg.prefix = "boot";
  cfg.timeout_s = timeout_s;
  tagc_comm *comm = NULL;
  double t0 = tagc_now();
  tagc_status st = tagc_comm_create_ex(&cfg, &comm, peer);
  *took = tagc_now() - t0;
  printf("rank %d of %d: %s after %.2f s, blames rank %d (%s)\n", rank, world,
         tagc_strerror(st), *took, *peer, st == TAGC_OK ? "connected" : tagc_last_error());
  CHECK(st == TAGC_OK ? comm != NULL : comm == NULL);
  if (comm)
    CHECK_OK(tagc_comm_barrier(comm, timeout_s));
  tagc_comm_destroy(comm);
  tagc_store_free(store);
  return st;
}

/* Everyone arrives: success, nobody blamed. */
static int all_arrive(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  RANK_START();
  int peer;
  double took;
  CHECK_OK(create(rank, world, dir, 5.0, &peer, &took));
  CHECK_EQ_INT(peer, -1);
  return test_failed_;
}

/* Rank 2 never calls create: ranks 0 and 1 blame it once their timeout passed. */
static int absent_rank(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  RANK_START();
  if (rank == 2)
    return 0;
  int peer;
  double took;
  CHECK_EQ_INT(create(rank, world, dir, 1.0, &peer, &took), TAGC_ETIMEDOUT);
  CHECK_EQ_INT(peer, 2);
  CHECK_MSG(took >= 0.99 && took <= 1.0 + SLACK_S, "gave up after %.2f s", took);
  return test_failed_;
}

/* Rank 1 comes 1 s late; rank 2 (timeout 0.5 s) has published its addresses but gives up
 * waiting for rank 1's and closes its sockets. Rank 2 blames rank 1 (no address); ranks 0 and
 * 1 find rank 2's address but cannot connect to it, and blame rank 2. */
static int gone_before_connect(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  RANK_START();
  int peer;
  double took, timeout = rank == 2 ? 0.5 : 3.0;
  if (rank == 1)
    tagc_sleep(1.0);
  tagc_status st = create(rank, world, dir, timeout, &peer, &took);
  CHECK(st == TAGC_ETIMEDOUT || st == TAGC_EPEER);
  CHECK_EQ_INT(peer, rank == 2 ? 1 : 2);
  CHECK_MSG(took <= 2 * timeout + SLACK_S, "gave up after %.2f s (timeout %.1f s)", took, timeout);
  return test_failed_;
}

int main(void) {
  CHECK_EQ_INT(harness_run(3, all_arrive, NULL, 30.0), 0);
  CHECK_EQ_INT(harness_run(3, absent_rank, NULL, 30.0), 0);
  CHECK_EQ_INT(harness_run(3, gone_before_connect, NULL, 30.0), 0);
  return TEST_END();
}
