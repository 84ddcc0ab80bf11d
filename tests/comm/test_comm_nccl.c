/* NCCL backend on one GPU (world size 1: NCCL refuses two ranks on one device): lifecycle,
 * every operation on device buffers, counters, abort, a second communicator with a fresh
 * unique id, and a non-blocking init that times out when the second rank never comes.
 * Exits 77 without a CUDA device. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "common/timeutil.h"
#include "test.h"

static char store_dir[] = "/tmp/tagc-comm-nccl-XXXXXX";

static tagc_status make_comm(const char *prefix, int world, double timeout_s,
                             tagc_comm **out) {
  tagc_store *store = NULL;
  TAGC_CHECK(tagc_store_file_new(store_dir, &store));
  tagc_comm_config cfg;
  tagc_comm_config_init(&cfg);
  cfg.backend = TAGC_COMM_NCCL;
  cfg.world_size = world;
  cfg.store = store;
  cfg.prefix = prefix;
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

int main(void) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    TEST_SKIP("no CUDA device");
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
