/* CUDA bitmap ops (see bitmap.h): word-parallel OR folds, a popcount reduction and the
 * densest-lane count, all enqueued on the caller's stream. Integer results, so identical
 * to the CPU versions. */
#include "kernels/cuda_common.cuh"
#include "kernels/bitmap.h"
#include "kernels/hash.h"
#include "kernels/layout.h"

/* dst[i] = OR over k < count of src[k*words + i], or dst[i] |= src[i] when `into`. */
__global__ void or_kernel(uint64_t *dst, const uint64_t *src, int32_t count, int64_t words,
                          bool into) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint64_t acc = into ? dst[i] : 0;
    for (int32_t k = 0; k < count; k++)
      acc |= src[(int64_t)k * words + i];
    dst[i] = acc;
  }
}

__global__ void popcount_kernel(const uint64_t *words, int64_t nwords, unsigned long long *bits) {
  unsigned long long local = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwords;
       i += (int64_t)gridDim.x * blockDim.x)
    local += (unsigned long long)__popcll(words[i]);
  unsigned long long total = block_sum_u64(local);
  if (threadIdx.x == 0 && total)
    atomicAdd(bits, total);
}

/* One block of K = `lanes` threads, thread t = lane t: counts lane t's bits over all blocks
 * (lane t of block b is element (t - rot(b)) mod K, kernels/hash.h; the threads of a warp
 * read one or two neighbouring words per block), then the block's maximum goes to
 * *max_items. No workspace, no atomics. */
__global__ void __launch_bounds__(TAGC_LANES_MAX)
    lane_max_kernel(const uint64_t *bitmap, int64_t blocks, uint32_t lanes, uint32_t seed,
                    int64_t *max_items) {
  __shared__ unsigned long long warp_max[TAGC_LANES_MAX / 32];
  int t = threadIdx.x;
  unsigned long long count = 0;
#pragma unroll 8
  for (int64_t b = 0; b < blocks; b++) {
    uint32_t e = ((uint32_t)t - tagc_block_rotation(seed, (uint32_t)b, lanes)) & (lanes - 1);
    int64_t bit = b * lanes + e;
    count += (bitmap[bit >> 6] >> (bit & 63)) & 1u;
  }
  for (int off = 16; off > 0; off >>= 1) {
    unsigned long long other = __shfl_down_sync(0xFFFFFFFFu, count, off);
    count = other > count ? other : count;
  }
  if ((t & 31) == 0)
    warp_max[t >> 5] = count;
  __syncthreads();
  if (t == 0) {
    unsigned long long best = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
      best = warp_max[w] > best ? warp_max[w] : best;
    *max_items = (int64_t)best;
  }
}

static tagc_status launch_or(uint64_t *dst, const uint64_t *src, int32_t count, int64_t words,
                             bool into, tagc_stream stream, const char *op) {
  if (words == 0)
    return TAGC_OK;
  TAGC_LAUNCH(or_kernel, grid_for(words, CUDA_THREADS), CUDA_THREADS, stream)(
      dst, src, count, words, into);
  return cuda_launched(op);
}

extern "C" tagc_status tagc_bitmap_or_into_cuda(uint64_t *dst, const uint64_t *src,
                                                int64_t words, tagc_stream stream) {
  if (words < 0 || (words > 0 && (!dst || !src)))
    return tagc_errorf(TAGC_EINVAL, "bitmap_or_into_cuda: bad arguments (words %lld)",
                       (long long)words);
  return launch_or(dst, src, 1, words, true, stream, "bitmap_or_into_cuda");
}

extern "C" tagc_status tagc_bitmap_or_many_cuda(uint64_t *dst, const uint64_t *src,
                                                int32_t count, int64_t words,
                                                tagc_stream stream) {
  if (count < 1 || words < 0 || (words > 0 && (!dst || !src)))
    return tagc_errorf(TAGC_EINVAL, "bitmap_or_many_cuda: bad arguments (count %d, words %lld)",
                       (int)count, (long long)words);
  return launch_or(dst, src, count, words, false, stream, "bitmap_or_many_cuda");
}

extern "C" tagc_status tagc_bitmap_popcount_cuda(const uint64_t *words, int64_t nwords,
                                                 int64_t *bits, tagc_stream stream) {
  if (!bits || nwords < 0 || (nwords > 0 && !words))
    return tagc_errorf(TAGC_EINVAL, "bitmap_popcount_cuda: bad arguments (nwords %lld)",
                       (long long)nwords);
  TAGC_CHECK(tagc_cuda_status(cudaMemsetAsync(bits, 0, sizeof *bits, stream),
                              "bitmap_popcount_cuda: CUDA error"));
  if (nwords == 0)
    return TAGC_OK;
  TAGC_LAUNCH(popcount_kernel, grid_for(nwords, 4 * CUDA_THREADS), CUDA_THREADS, stream)(
      words, nwords, (unsigned long long *)bits);
  return cuda_launched("bitmap_popcount_cuda");
}

extern "C" tagc_status tagc_bitmap_lane_max_cuda(const uint64_t *bitmap, int64_t blocks,
                                                 int32_t lanes, uint32_t seed,
                                                 int64_t *max_items, tagc_stream stream) {
  if (!max_items || blocks < 0 || (blocks > 0 && !bitmap) || lanes < TAGC_LANES_MIN ||
      lanes > TAGC_LANES_MAX || (lanes & (lanes - 1)))
    return tagc_errorf(TAGC_EINVAL, "bitmap_lane_max_cuda: bad arguments (blocks %lld, lanes %d)",
                       (long long)blocks, (int)lanes);
  TAGC_LAUNCH(lane_max_kernel, 1, lanes, stream)(bitmap, blocks, (uint32_t)lanes, seed, max_items);
  return cuda_launched("bitmap_lane_max_cuda");
}
