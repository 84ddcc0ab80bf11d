/* CUDA fused sparsify with error feedback (see sparsify.h). The exact threshold bin of each
 * shard is found on the device by a two-level radix select over the 2^16-bin magnitude
 * histogram of the contract: level 1 counts the 256 exponent bins (bin >> 8), a one-block
 * kernel picks the exponent bin where the suffix count crosses k, level 2 counts the 256
 * mantissa sub-bins of that exponent only, and a second one-block kernel fixes the bin and
 * writes the stats. Both levels are counts of the same multiset the CPU histograms, so the
 * bin (and therefore kept, residual and bitmap) is bit-identical to tagc_sparsify_cpu.
 * Five launches, all on the caller's stream, no host synchronisation. */
#include <math.h>

#include "kernels/cuda_common.cuh"
#include "kernels/bf16.h"
#include "kernels/sparsify.h"

#define LEVEL_BINS 256 /* bins per radix level: 2 levels x 8 bits = TAGC_HIST_BINS */

/* Per-shard selection state kept in the workspace between the launches. */
typedef struct shard_select {
  unsigned long long above; /* non-zero elements in exponent bins above `coarse` */
  uint32_t tbin;            /* threshold bin once known */
  uint32_t coarse;          /* exponent bin holding the threshold; LEVEL_BINS: tbin final */
} shard_select;

/* Workspace layout: [W][256] coarse counts, [W][256] fine counts, [W] selections,
 * [W] non-finite counts, one total non-finite count. */
typedef struct sparsify_ws {
  unsigned int *coarse;
  unsigned int *fine;
  shard_select *sel;
  unsigned long long *nonfinite;
  unsigned long long *bad_total;
  size_t bytes;
} sparsify_ws;

static sparsify_ws ws_layout(const tagc_layout *l, void *base) {
  size_t w = (size_t)l->world, off = 0;
  sparsify_ws ws;
  char *p = (char *)base;
  ws.coarse = (unsigned int *)(p + off);
  off += ws_align(w * LEVEL_BINS * sizeof(unsigned int));
  ws.fine = (unsigned int *)(p + off);
  off += ws_align(w * LEVEL_BINS * sizeof(unsigned int));
  ws.sel = (shard_select *)(p + off);
  off += ws_align(w * sizeof(shard_select));
  ws.nonfinite = (unsigned long long *)(p + off);
  off += ws_align(w * sizeof(unsigned long long));
  ws.bad_total = (unsigned long long *)(p + off);
  off += ws_align(sizeof(unsigned long long));
  ws.bytes = off;
  return ws;
}

__device__ __forceinline__ float fused_value(const float *g, const float *r, int64_t e) {
  return __fadd_rn(g[e], r[e]);
}

__device__ __forceinline__ uint32_t magnitude_bits(float v) {
  return tagc_f32_bits(v) & 0x7FFFFFFFu;
}

/* Adds the non-zero |v| of shard blockIdx.y to its histogram level: level 1 (fine == NULL)
 * counts exponent bins and non-finite values; level 2 counts the sub-bins of exponent bin
 * sel->coarse (skipped when the selection is already final). */
__global__ void histogram_kernel(const float *grad, const float *residual, int64_t n,
                                 unsigned int *coarse, unsigned int *fine,
                                 const shard_select *sel, unsigned long long *nonfinite,
                                 unsigned long long *bad_total) {
  __shared__ unsigned int hist[LEVEL_BINS];
  int j = blockIdx.y;
  uint32_t want = LEVEL_BINS;
  if (fine) {
    want = sel[j].coarse;
    if (want >= LEVEL_BINS)
      return;
  }
  for (int i = threadIdx.x; i < LEVEL_BINS; i += blockDim.x)
    hist[i] = 0;
  __syncthreads();
  const float *g = grad + (int64_t)j * n, *r = residual + (int64_t)j * n;
  unsigned long long bad = 0;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    uint32_t mag = magnitude_bits(fused_value(g, r, e));
    uint32_t bin = mag >> TAGC_HIST_SHIFT;
    if (!fine) {
      bad += mag >= 0x7F800000u;
      if (mag)
        atomicAdd(&hist[bin >> 8], 1u);
    } else if (mag && (bin >> 8) == want) {
      atomicAdd(&hist[bin & 0xFFu], 1u);
    }
  }
  __syncthreads();
  unsigned int *out = (fine ? fine : coarse) + (size_t)j * LEVEL_BINS;
  for (int i = threadIdx.x; i < LEVEL_BINS; i += blockDim.x)
    if (hist[i])
      atomicAdd(&out[i], hist[i]);
  if (!fine) {
    unsigned long long total = block_sum_u64(bad);
    if (threadIdx.x == 0 && total) {
      atomicAdd(&nonfinite[j], total);
      atomicAdd(bad_total, total);
    }
  }
}

/* Level-1 selection for shard blockIdx.x (one block of LEVEL_BINS threads): the highest
 * exponent bin whose suffix count reaches k. When k == 0 or too few elements are non-zero
 * the threshold bin is final already (TAGC_HIST_BINS or 0, as the CPU). */
__global__ void select_coarse_kernel(const unsigned int *coarse, shard_select *sel, int64_t k) {
  __shared__ unsigned int hist[LEVEL_BINS];
  int j = blockIdx.x;
  hist[threadIdx.x] = coarse[(size_t)j * LEVEL_BINS + threadIdx.x];
  __syncthreads();
  if (threadIdx.x != 0)
    return;
  shard_select s = {0, TAGC_HIST_BINS, LEVEL_BINS};
  if (k > 0) {
    unsigned long long cum = 0;
    s.tbin = 0;
    for (int c = LEVEL_BINS - 1; c >= 0; c--) {
      if (cum + hist[c] >= (unsigned long long)k) {
        s.above = cum;
        s.coarse = (uint32_t)c;
        break;
      }
      cum += hist[c];
    }
  }
  sel[j] = s;
}

/* Level-2 selection and stats for shard blockIdx.x (one block of LEVEL_BINS threads). kept
 * is the suffix count at the threshold bin (every non-zero element in bins >= tbin), which
 * is what the apply kernel keeps; 0 when the call is rejected. */
__global__ void select_fine_kernel(const unsigned int *coarse, const unsigned int *fine,
                                   shard_select *sel, const unsigned long long *nonfinite,
                                   const unsigned long long *bad_total, int64_t k,
                                   tagc_sparsify_stats *stats) {
  __shared__ unsigned int hist[LEVEL_BINS];
  __shared__ unsigned int level1[LEVEL_BINS];
  int j = blockIdx.x;
  hist[threadIdx.x] = fine[(size_t)j * LEVEL_BINS + threadIdx.x];
  level1[threadIdx.x] = coarse[(size_t)j * LEVEL_BINS + threadIdx.x];
  __syncthreads();
  if (threadIdx.x != 0)
    return;
  shard_select s = sel[j];
  unsigned long long kept = 0;
  if (s.coarse < LEVEL_BINS) {
    unsigned long long cum = s.above;
    for (int f = LEVEL_BINS - 1; f >= 0; f--) {
      cum += hist[f];
      if (cum >= (unsigned long long)k) {
        s.tbin = s.coarse * LEVEL_BINS + (uint32_t)f;
        break;
      }
    }
    kept = cum;
    s.coarse = LEVEL_BINS;
    sel[j] = s;
  } else if (s.tbin == 0) {
    for (int c = 0; c < LEVEL_BINS; c++)
      kept += level1[c];
  }
  tagc_sparsify_stats out;
  out.kept = *bad_total ? 0 : (int64_t)kept;
  out.nonfinite = (int64_t)nonfinite[j];
  out.threshold_bin = s.tbin;
  out.threshold = s.tbin >= TAGC_HIST_BINS ? __int_as_float(0x7F800000)
                                           : tagc_f32_from_bits(s.tbin << TAGC_HIST_SHIFT);
  stats[j] = out;
}

/* Writes kept (padded), residual and bitmap of shard blockIdx.y: one warp per 64-element
 * bitmap word, two elements per thread, word assembled with ballots. A rejected call (any
 * non-finite value in the unit) zeroes kept and bitmap and leaves residual alone. */
__global__ void apply_kernel(const float *grad, float *residual, float *kept, uint64_t *bitmap,
                             int64_t n, int64_t padded, int64_t words, const shard_select *sel,
                             const unsigned long long *bad_total) {
  int j = blockIdx.y;
  int lane = threadIdx.x & 31;
  int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
  int64_t w0 = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const float *g = grad + (int64_t)j * n;
  float *r = residual + (int64_t)j * n;
  float *kj = kept + (int64_t)j * padded;
  uint64_t *bj = bitmap + (int64_t)j * words;
  uint32_t tbin = sel[j].tbin;
  bool reject = *bad_total != 0;
  for (int64_t w = w0; w < words; w += warps) {
    uint32_t half[2];
    for (int h = 0; h < 2; h++) {
      int64_t e = w * 64 + h * 32 + lane;
      bool keep = false;
      if (reject || e >= n) {
        kj[e] = 0.0f;
      } else {
        float v = fused_value(g, r, e);
        uint32_t bits = tagc_f32_bits(v);
        uint32_t mag = bits & 0x7FFFFFFFu;
        float zero = tagc_f32_from_bits(bits & 0x80000000u);
        keep = mag != 0 && (mag >> TAGC_HIST_SHIFT) >= tbin;
        kj[e] = keep ? v : zero;
        r[e] = keep ? zero : v;
      }
      half[h] = __ballot_sync(0xFFFFFFFFu, keep);
    }
    if (lane == 0)
      bj[w] = (uint64_t)half[0] | ((uint64_t)half[1] << 32);
  }
}

/* Blocks per shard for a grid of W shards over `items` items each: enough to cover the items
 * at `per_block` per block, capped so the whole grid stays near CUDA_MAX_GRID blocks. */
static unsigned per_shard_blocks(int64_t items, int64_t per_block, int32_t world) {
  unsigned cap = CUDA_MAX_GRID / (unsigned)world;
  unsigned g = grid_for(items, per_block);
  return g < cap ? g : (cap ? cap : 1);
}

extern "C" size_t tagc_sparsify_cuda_workspace_bytes(const tagc_layout *l) {
  if (!l || l->world < 1)
    return 0;
  return ws_layout(l, NULL).bytes;
}

extern "C" tagc_status tagc_sparsify_cuda(const tagc_layout *l, float density,
                                          const float *grad, float *residual, float *kept,
                                          uint64_t *bitmap, tagc_sparsify_stats *stats,
                                          void *ws, size_t ws_bytes, tagc_stream stream) {
  if (!l || l->world < 1 || !grad || !residual || !kept || !bitmap || !stats || !ws)
    return tagc_errorf(TAGC_EINVAL, "sparsify_cuda: NULL argument");
  if (!(density >= 0.0f && density <= 1.0f))
    return tagc_errorf(TAGC_EINVAL, "sparsify_cuda: density %g outside [0, 1]", (double)density);
  if (l->world > 65535)
    return tagc_errorf(TAGC_EINVAL, "sparsify_cuda: %d shards exceed the grid limit 65535",
                       (int)l->world);
  if ((uintptr_t)ws % 16 != 0)
    return tagc_errorf(TAGC_EINVAL, "sparsify_cuda: workspace not 16-byte aligned");
  sparsify_ws w = ws_layout(l, ws);
  if (ws_bytes < w.bytes)
    return tagc_errorf(TAGC_EINVAL, "sparsify_cuda: workspace %zu bytes < %zu", ws_bytes, w.bytes);
  int64_t n = l->shard_numel;
  int64_t k = llround((double)density * (double)n);
  TAGC_CHECK(tagc_cuda_status(cudaMemsetAsync(ws, 0, w.bytes, stream),
                              "sparsify_cuda: CUDA error"));
  dim3 hist_grid(per_shard_blocks(n, 8 * CUDA_THREADS, l->world), (unsigned)l->world);
  TAGC_LAUNCH(histogram_kernel, hist_grid, CUDA_THREADS, stream)(
      grad, residual, n, w.coarse, NULL, w.sel, w.nonfinite, w.bad_total);
  TAGC_LAUNCH(select_coarse_kernel, (unsigned)l->world, LEVEL_BINS, stream)(w.coarse, w.sel, k);
  TAGC_LAUNCH(histogram_kernel, hist_grid, CUDA_THREADS, stream)(
      grad, residual, n, w.coarse, w.fine, w.sel, w.nonfinite, w.bad_total);
  TAGC_LAUNCH(select_fine_kernel, (unsigned)l->world, LEVEL_BINS, stream)(
      w.coarse, w.fine, w.sel, w.nonfinite, w.bad_total, k, stats);
  dim3 apply_grid(per_shard_blocks(l->bitmap_words, 2 * (CUDA_THREADS / 32), l->world),
                  (unsigned)l->world);
  TAGC_LAUNCH(apply_kernel, apply_grid, CUDA_THREADS, stream)(
      grad, residual, kept, bitmap, n, l->shard_padded, l->bitmap_words, w.sel, w.bad_total);
  return cuda_launched("sparsify_cuda");
}
