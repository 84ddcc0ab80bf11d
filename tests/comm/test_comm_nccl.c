/* NCCL backend on one GPU. First three ranks in forked processes share the device, each
 * posing as its own host (NCCL_HOSTID; NCCL refuses two ranks of one host on one device), so
 * they talk over sockets on loopback: a world of 3 is built, rank 1 leaves, and the
 * survivors shrink the communicator (tagc_comm_shrink), check that it moves the right bytes,
 * abort the parent and build the same world again from a fresh unique id — the fallback —
 * printing the seconds of each. Then in this process, world size 1: lifecycle, every
 * operation on device buffers, counters, abort, a second communicator with a fresh unique
 * id, and a non-blocking init that times out when the second rank never comes.
 * Exits 77 without a CUDA device, after checking on Gloo (which has no shrink) that
 * tagc_comm_shrink refuses and leaves the communicator working. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/comm.h"
#include "common/timeutil.h"
#include "harness.h"
#include "test.h"

static char store_dir[] = "/tmp/tagc-comm-nccl-XXXXXX";

static tagc_comm_config nccl_config(int rank, int world, tagc_store *store, const char *prefix) {
  tagc_comm_config cfg;
  tagc_comm_config_init(&cfg);
  cfg.backend = TAGC_COMM_NCCL;
  cfg.rank = rank;
  cfg.world_size = world;
  cfg.store = store;
  cfg.prefix = prefix;
  cfg.timeout_s = 30.0;
  return cfg;
}

/* Rank 0 of world over the store in store_dir. */
static tagc_status make_comm(const char *prefix, int world, double timeout_s,
                             tagc_comm **out) {
  tagc_store *store = NULL;
  TAGC_CHECK(tagc_store_file_new(store_dir, &store));
  tagc_comm_config cfg = nccl_config(0, world, store, prefix);
  cfg.timeout_s = timeout_s;
  tagc_status st = tagc_comm_create(&cfg, out);
  tagc_store_free(store);
  return st;
}

static void *to_device(const void *host, size_t bytes) {
  void *d = NULL;
  if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess)
    return NULL;
  /* from pageable memory cudaMemcpy may return before the DMA lands, and the communicator's
     stream does not wait for the legacy stream: synchronise before NCCL reads it */
  if (cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess) {
    cudaFree(d);
    return NULL;
  }
  return d;
}

/* Zeroes device memory before a collective writes it: cudaMemset runs on the legacy stream,
 * which the communicator's non-blocking stream does not wait for. */
static void clear_device(void *dev, size_t bytes) {
  CHECK(cudaMemset(dev, 0, bytes) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess);
}

static void from_device(void *host, const void *dev, size_t bytes) {
  cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
}

static void test_operations(tagc_comm *c) {
  enum { N = 1000 };
  float h[N], back[N];
  for (int i = 0; i < N; i++)
    h[i] = (float)(i % 97) * 0.37f - 11.0f;
  h[0] = 1.0f + 0x1p-8f;
  h[1] = 1.0f + 3 * 0x1p-8f;
  float *a = to_device(h, sizeof h), *b = to_device(h, sizeof h);
  CHECK(a && b);

  CHECK_OK(tagc_comm_allgather(c, a, b, sizeof h, 0));
  from_device(back, b, sizeof back);
  CHECK_EQ_INT(memcmp(back, h, sizeof h), 0);
  clear_device(b, sizeof h);
  CHECK_OK(tagc_comm_alltoall(c, a, b, sizeof h, 0));
  from_device(back, b, sizeof back);
  CHECK_EQ_INT(memcmp(back, h, sizeof h), 0);
  CHECK_OK(tagc_comm_broadcast(c, a, sizeof h, 0, 0));
  CHECK_OK(tagc_comm_barrier(c, 0));

  clear_device(b, sizeof h);
  CHECK_OK(tagc_comm_reduce_scatter(c, a, b, N, TAGC_DTYPE_F32, TAGC_REDOP_SUM,
                                    TAGC_WIRE_NATIVE, 0));
  from_device(back, b, sizeof back);
  CHECK_EQ_INT(memcmp(back, h, sizeof h), 0);
  CHECK_OK(tagc_comm_reduce_scatter(c, a, b, N, TAGC_DTYPE_F32, TAGC_REDOP_SUM,
                                    TAGC_WIRE_BF16, 0));
  from_device(back, b, sizeof back);
  CHECK(back[0] == 1.0f);
  CHECK(back[1] == 1.0f + 0x1p-6f);
  int bad = 0;
  for (int i = 2; i < N; i++)
    bad += fabsf(back[i] - h[i]) > fabsf(h[i]) * 0x1p-8f;
  CHECK_EQ_INT(bad, 0);

  CHECK_OK(tagc_comm_allreduce(c, a, a, N, TAGC_DTYPE_F32, TAGC_REDOP_MAX, 0));
  from_device(back, a, sizeof back);
  CHECK_EQ_INT(memcmp(back, h, sizeof h), 0);

  uint64_t bits[5] = {1, 2, 4, 8, UINT64_MAX}, bits_back[5];
  uint64_t *d = to_device(bits, sizeof bits), *e = to_device(bits, sizeof bits);
  clear_device(e, sizeof bits);
  CHECK_OK(tagc_comm_allreduce(c, d, e, 5, TAGC_DTYPE_U64, TAGC_REDOP_BOR, 0));
  from_device(bits_back, e, sizeof bits);
  CHECK_EQ_INT(memcmp(bits, bits_back, sizeof bits), 0);

  tagc_comm_stats s;
  tagc_comm_stats_get(c, &s);
  CHECK_EQ_INT(s.op[TAGC_COMM_OP_REDUCE_SCATTER].calls, 2);
  CHECK_EQ_INT(s.op[TAGC_COMM_OP_ALLREDUCE].calls, 2);
  uint64_t bytes = 0, errors = 0;
  for (int k = 0; k < TAGC_COMM_OP_COUNT; k++) {
    bytes += s.op[k].bytes_sent + s.op[k].bytes_recv;
    errors += s.op[k].errors;
  }
  CHECK_EQ_INT(bytes, 0); /* world size 1: nothing crosses the wire */
  CHECK_EQ_INT(errors, 0);
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
  cudaFree(e);
}

/* The CUDA device count, asked in a child: the shrink test forks its ranks, and CUDA does
 * not survive a fork once initialised. */
static int device_count(void) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
      n = 0;
    _exit(n < 100 ? n : 100);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
    return 0;
  return WEXITSTATUS(status);
}

enum { SHRINK_WORLD = 3, LEAVER = 1, FLOATS = 4096, GATHER_BYTES = 64 };

/* An all-reduce (sum) and an all-gather give the exact bytes expected: rank r adds
 * (r + 1) * (1 + i % 7) to element i and gathers 64 bytes of r * 16 + j. */
static void check_exchanges(tagc_comm *c) {
  int me = tagc_comm_rank(c), w = tagc_comm_world_size(c);
  static float h[FLOATS], back[FLOATS];
  for (int i = 0; i < FLOATS; i++)
    h[i] = (float)((me + 1) * (1 + i % 7));
  float *a = to_device(h, sizeof h);
  CHECK(a != NULL);
  if (!a)
    return;
  CHECK_OK(tagc_comm_allreduce(c, a, a, FLOATS, TAGC_DTYPE_F32, TAGC_REDOP_SUM, 0));
  from_device(back, a, sizeof back);
  int bad = 0;
  for (int i = 0; i < FLOATS; i++)
    bad += back[i] != (float)(w * (w + 1) / 2 * (1 + i % 7));
  CHECK_EQ_INT(bad, 0);
  unsigned char mine[GATHER_BYTES], all[GATHER_BYTES * SHRINK_WORLD] = {0};
  for (int j = 0; j < GATHER_BYTES; j++)
    mine[j] = (unsigned char)(me * 16 + j);
  unsigned char *d = to_device(mine, sizeof mine), *e = to_device(all, (size_t)w * sizeof mine);
  CHECK(d && e);
  if (d && e) {
    CHECK_OK(tagc_comm_allgather(c, d, e, sizeof mine, 0));
    from_device(all, e, (size_t)w * sizeof mine);
    bad = 0;
    for (int r = 0; r < w; r++)
      for (int j = 0; j < GATHER_BYTES; j++)
        bad += all[r * GATHER_BYTES + j] != (unsigned char)(r * 16 + j);
    CHECK_EQ_INT(bad, 0);
  }
  cudaFree(a);
  cudaFree(d);
  cudaFree(e);
}

/* Arguments that are not a shrink to the survivors fall back (or are refused) before NCCL. */
static void check_shrink_refusals(tagc_comm *parent, tagc_comm_config good) {
  int leaver = LEAVER, self = tagc_comm_rank(parent);
  tagc_comm *none = NULL;
  tagc_comm_config cfg = good;
  cfg.rank = good.world_size - 1 - good.rank; /* survivors in another order */
  CHECK_EQ_INT(tagc_comm_shrink(parent, &leaver, 1, &cfg, &none), TAGC_EUNSUPPORTED);
  cfg = good;
  cfg.world_size = SHRINK_WORLD; /* a joiner takes the place */
  CHECK_EQ_INT(tagc_comm_shrink(parent, &leaver, 1, &cfg, &none), TAGC_EUNSUPPORTED);
  CHECK_EQ_INT(tagc_comm_shrink(parent, NULL, 0, &good, &none), TAGC_EUNSUPPORTED);
  CHECK_EQ_INT(tagc_comm_shrink(parent, &self, 1, &good, &none), TAGC_EINVAL);
  CHECK(none == NULL);
  CHECK_OK(tagc_comm_status(parent));
}

/* One rank of the shrink test (a forked process; returns its failed checks). */
static int shrink_rank(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  test_failed_ = test_passed_ = 0;
  char host[32];
  snprintf(host, sizeof host, "tagc-test-rank-%d", rank);
  setenv("NCCL_HOSTID", host, 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_NET", "Socket", 0);
  tagc_store *store = NULL;
  CHECK_OK(tagc_store_file_new(dir, &store));
  if (!store)
    return test_failed_;
  tagc_comm *parent = NULL, *child = NULL, *again = NULL;
  tagc_comm_config cfg = nccl_config(rank, world, store, "gen/1/boot");
  double t0 = tagc_now();
  CHECK_OK(tagc_comm_create(&cfg, &parent));
  double init_s = tagc_now() - t0;
  if (parent)
    check_exchanges(parent);
  if (rank == LEAVER) { /* leaves once the survivors have shrunk without it */
    for (int r = 0; r < world; r++) {
      char key[32];
      snprintf(key, sizeof key, "shrunk/%d", r);
      CHECK(r == LEAVER || harness_wait_mark(dir, key, 90.0));
    }
    tagc_comm_destroy(parent);
    tagc_store_free(store);
    return test_failed_;
  }
  int leaver = LEAVER, new_rank = rank - (rank > LEAVER);
  tagc_comm_config next = nccl_config(new_rank, world - 1, store, "gen/2/boot");
  double shrink_s = 0, abort_s = 0;
  tagc_status shrunk = TAGC_EINVAL;
  if (parent) {
    check_shrink_refusals(parent, next);
    t0 = tagc_now();
    shrunk = tagc_comm_shrink(parent, &leaver, 1, &next, &child);
    shrink_s = tagc_now() - t0;
    if (shrunk == TAGC_EUNSUPPORTED)
      printf("nccl shrink not available, the full rebuild is the path: %s\n", tagc_last_error());
    else
      CHECK_OK(shrunk);
  }
  char key[32];
  snprintf(key, sizeof key, "shrunk/%d", rank);
  harness_mark(dir, key);
  if (child) {
    CHECK_EQ_INT(tagc_comm_rank(child), new_rank);
    CHECK_EQ_INT(tagc_comm_world_size(child), world - 1);
    check_exchanges(child);
  }
  t0 = tagc_now();
  tagc_comm_abort(parent);
  tagc_comm_destroy(parent);
  abort_s = tagc_now() - t0;
  if (child) /* the parent's end leaves the shrunk communicator working */
    check_exchanges(child);
  tagc_comm_destroy(child);
  t0 = tagc_now(); /* the fallback: the same survivors from a fresh unique id */
  CHECK_OK(tagc_comm_create(&next, &again));
  double reinit_s = tagc_now() - t0;
  if (again)
    check_exchanges(again);
  tagc_comm_destroy(again);
  tagc_store_free(store);
  if (rank == 0)
    printf("nccl timing: init %.3f s (world %d), abort %.3f s, shrink %.3f s%s, re-init %.3f s "
           "(world %d)\n", init_s, world, abort_s, shrink_s,
           shrunk == TAGC_OK ? "" : " (not done)", reinit_s, world - 1);
  return test_failed_;
}

/* Gloo has no shrink: a survivor's call says so (the caller rebuilds), a malformed list is
 * refused, and the communicator keeps working. Runs without a device. */
static int gloo_rank(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  test_failed_ = test_passed_ = 0;
  tagc_comm *c = harness_comm(rank, world, dir, "shrink", 10.0);
  tagc_store *store = NULL;
  CHECK_OK(tagc_store_file_new(dir, &store));
  CHECK(c != NULL);
  if (!c || !store) {
    tagc_comm_destroy(c);
    tagc_store_free(store);
    return test_failed_;
  }
  tagc_comm_config cfg = nccl_config(0, 1, store, "next");
  cfg.backend = TAGC_COMM_GLOO;
  int other = 1 - rank, twice[2] = {other, other}, beyond = world;
  tagc_comm *none = NULL;
  CHECK_EQ_INT(tagc_comm_shrink(c, &other, 1, &cfg, &none), TAGC_EUNSUPPORTED);
  CHECK_EQ_INT(tagc_comm_shrink(c, twice, 2, &cfg, &none), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_comm_shrink(c, &beyond, 1, &cfg, &none), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_comm_shrink(c, NULL, 1, &cfg, &none), TAGC_EINVAL);
  CHECK(none == NULL);
  CHECK_OK(tagc_comm_barrier(c, 0));
  tagc_comm_destroy(c);
  tagc_store_free(store);
  return test_failed_;
}

int main(void) {
  CHECK_EQ_INT(harness_run(2, gloo_rank, NULL, 60.0), 0);
  if (test_failed_)
    return TEST_END();
  if (device_count() == 0)
    TEST_SKIP("no CUDA device");
  CHECK_EQ_INT(harness_run(SHRINK_WORLD, shrink_rank, NULL, 150.0), 0);
  CHECK(mkdtemp(store_dir) != NULL);

  tagc_comm *c = NULL;
  double t0 = tagc_now();
  CHECK_OK(make_comm("gen/1/boot", 1, 30.0, &c));
  printf("nccl init (world 1): %.3f s\n", tagc_now() - t0);
  if (c) {
    CHECK_EQ_INT(tagc_comm_backend_of(c), TAGC_COMM_NCCL);
    test_operations(c);
    tagc_comm_abort(c);
    CHECK_EQ_INT(tagc_comm_barrier(c, 0), TAGC_EABORTED);
    tagc_comm_destroy(c);
  }

  /* A new generation: new prefix, fresh unique id, works again. */
  c = NULL;
  CHECK_OK(make_comm("gen/2/boot", 1, 30.0, &c));
  if (c) {
    CHECK_OK(tagc_comm_barrier(c, 0));
    tagc_comm_destroy(c);
  }

  /* Rank 1 of 2 never arrives: the non-blocking init is aborted at the timeout. */
  c = NULL;
  t0 = tagc_now();
  tagc_status st = make_comm("gen/3/boot", 2, 3.0, &c);
  double took = tagc_now() - t0;
  CHECK_EQ_INT(st, TAGC_ETIMEDOUT);
  CHECK(c == NULL);
  CHECK_MSG(took < 3.0 + 2.0, "init gave up after %.3f s", took);
  printf("nccl init with a missing rank: %s after %.3f s\n", tagc_strerror(st), took);

  CHECK_OK(tagc_store_file_remove_all(store_dir));
  return TEST_END();
}
