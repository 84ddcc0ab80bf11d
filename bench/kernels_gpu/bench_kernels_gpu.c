/* GPU timing of the CUDA compression kernels on unit shapes of the GPT-2 runs
 * (docs/gpu.md). For each shape: sparsify (all W shards), encode (all W shards), decode
 * (shard 0 of the local sketch with its local bitmap: the work of an owner decode at
 * the local density), bitmap OR of W parts + popcount, bf16 encode / accumulate of the
 * sketch; each timed with cudaEvents over `iters` launches after one warm-up, printed as
 * ms per call and GB/s of the minimum memory traffic. Exits 77 without a device.
 * Usage: bench_kernels_gpu [iters]   (default 20) */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/tagc_kernels.h"

#define CUDA_CALL(expr)                                                                   \
  do {                                                                                    \
    cudaError_t e_ = (expr);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(e_));                         \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

#define TAGC_CALL(expr)                                                                   \
  do {                                                                                    \
    if ((expr) != TAGC_OK) {                                                              \
      fprintf(stderr, "%s: %s\n", #expr, tagc_last_error());                              \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static cudaStream_t stream;
static cudaEvent_t ev0, ev1;

static void *dev_zeroed(size_t bytes) {
  void *p;
  CUDA_CALL(cudaMalloc(&p, bytes));
  CUDA_CALL(cudaMemset(p, 0, bytes));
  return p;
}

static void report(const char *shape, const char *op, int iters, double bytes) {
  float ms;
  CUDA_CALL(cudaEventRecord(ev1, stream));
  CUDA_CALL(cudaEventSynchronize(ev1));
  CUDA_CALL(cudaEventElapsedTime(&ms, ev0, ev1));
  ms /= (float)iters;
  printf("%-22s %-22s %10.4f ms %9.1f GB/s\n", shape, op, ms, bytes / (ms * 1e6));
}

/* Times `call` (a statement using the stream) iters times after a warm-up. */
#define TIME(shape, op, iters, bytes, call)                                               \
  do {                                                                                    \
    call;                                                                                 \
    CUDA_CALL(cudaEventRecord(ev0, stream));                                              \
    for (int it_ = 0; it_ < (iters); it_++)                                               \
      call;                                                                               \
    report(shape, op, iters, bytes);                                                      \
  } while (0)

static void bench_shape(const char *name, int32_t world, int64_t n, float density, int iters) {
  double rho;
  TAGC_CALL(tagc_rho_advise(density * 1.5 > 1 ? 1 : density * 1.5, n, tagc_layout_lanes(n), &rho));
  tagc_layout l;
  TAGC_CALL(tagc_layout_init(&l, world, n, rho < TAGC_RHO_MIN ? TAGC_RHO_MIN : rho, 11));
  int64_t total = (int64_t)world * n, padded = (int64_t)world * l.shard_padded;
  float *host = malloc((size_t)total * sizeof *host);
  uint64_t s = 88172645463325252ull;
  for (int64_t i = 0; i < total; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    host[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) *
              (float)exp((double)((s >> 3) % 16) - 8.0);
  }
  float *grad = dev_zeroed(total * 4), *resid = dev_zeroed(total * 4);
  float *kept = dev_zeroed(padded * 4), *sketch = dev_zeroed((int64_t)world * l.sketch_cells * 4);
  float *out = dev_zeroed(n * 4);
  uint64_t *bitmap = dev_zeroed((int64_t)world * l.bitmap_words * 8);
  uint64_t *global = dev_zeroed(l.bitmap_words * 8);
  uint16_t *wire = dev_zeroed((int64_t)world * l.sketch_cells * 2);
  int64_t *bits = dev_zeroed(8);
  tagc_sparsify_stats *sstats = dev_zeroed(world * sizeof *sstats);
  tagc_decode_stats *dstats = dev_zeroed(sizeof *dstats);
  uint32_t *rows = dev_zeroed(l.blocks * 3 * 4);
  size_t ws_bytes = tagc_sparsify_cuda_workspace_bytes(&l);
  if (tagc_decode_cuda_workspace_bytes(&l) > ws_bytes)
    ws_bytes = tagc_decode_cuda_workspace_bytes(&l);
  void *ws = dev_zeroed(ws_bytes);
  CUDA_CALL(cudaMemcpy(grad, host, total * 4, cudaMemcpyHostToDevice));
  CUDA_CALL(cudaMemcpy(rows, l.block_rows, l.blocks * 3 * 4, cudaMemcpyHostToDevice));
  char shape[64];
  snprintf(shape, sizeof shape, "%s W=%d rho=%.1f", name, world, l.rho);

  TIME(shape, "sparsify", iters, total * 16.0 + padded / 8.0,
       TAGC_CALL(tagc_sparsify_cuda(&l, density, grad, resid, kept, bitmap, sstats, ws, ws_bytes,
                                    stream)));
  TIME(shape, "sketch_encode", iters, padded * 4.125 + world * l.sketch_cells * 4.0,
       TAGC_CALL(tagc_sketch_encode_cuda(&l, rows, kept, bitmap, sketch, stream)));
  TIME(shape, "bitmap_or_many", iters, (world + 1.0) * l.bitmap_words * 8,
       TAGC_CALL(tagc_bitmap_or_many_cuda(global, bitmap, world, l.bitmap_words, stream)));
  TIME(shape, "bitmap_popcount", iters, l.bitmap_words * 8.0,
       TAGC_CALL(tagc_bitmap_popcount_cuda(global, l.bitmap_words, bits, stream)));
  TIME(shape, "bitmap_lane_max", iters, l.bitmap_words * 8.0,
       TAGC_CALL(tagc_bitmap_lane_max_cuda(bitmap, l.blocks, l.lanes, l.seed, bits, stream)));
  TIME(shape, "bf16_encode(sketch)", iters, world * l.sketch_cells * 6.0,
       TAGC_CALL(tagc_bf16_encode_cuda(sketch, wire, world * l.sketch_cells, stream)));
  TIME(shape, "bf16_accumulate(sketch)", iters, world * l.sketch_cells * 10.0,
       TAGC_CALL(tagc_bf16_accumulate_cuda(sketch, wire, world * l.sketch_cells, stream)));
  TAGC_CALL(tagc_sketch_encode_cuda(&l, rows, kept, bitmap, sketch, stream));
  TIME(shape, "decode(1 shard)", iters, l.sketch_cells * 4.0 + l.bitmap_words * 8 + n * 4.0,
       TAGC_CALL(tagc_decode_cuda(&l, rows, sketch, bitmap, out, dstats, ws, ws_bytes, stream)));
  tagc_decode_stats ds;
  CUDA_CALL(cudaMemcpy(&ds, dstats, sizeof ds, cudaMemcpyDeviceToHost));
  printf("%-22s decode: nonzero %lld peeled %lld estimated %lld (rows %lld)\n", shape,
         (long long)ds.nonzero, (long long)ds.peeled, (long long)ds.estimated, (long long)l.rows);

  cudaFree(grad), cudaFree(resid), cudaFree(kept), cudaFree(sketch), cudaFree(out);
  cudaFree(bitmap), cudaFree(global), cudaFree(wire), cudaFree(bits), cudaFree(sstats);
  cudaFree(dstats), cudaFree(rows), cudaFree(ws);
  free(host);
  tagc_layout_free(&l);
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 20;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fprintf(stderr, "bench_kernels_gpu: no CUDA device\n");
    return 77;
  }
  if (iters < 1)
    iters = 1;
  CUDA_CALL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CALL(cudaEventCreate(&ev0));
  CUDA_CALL(cudaEventCreate(&ev1));
  bench_shape("mlp 1.18M/shard", 2, 1179648, 0.05f, iters);
  bench_shape("mlp 1.18M/shard", 8, 1179648, 0.05f, iters);
  bench_shape("wte 19.3M/shard", 2, 19316736, 0.02f, iters);
  bench_shape("wte 19.3M/shard", 8, 19316736, 0.02f, iters);
  return 0;
}
