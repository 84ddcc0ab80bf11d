/* Shared helpers of the CUDA kernels (the kernels/ *_cuda.cu files): C linkage for the project's C
 * headers, the launch check (errors translated by common/cuda_status.h), grid sizing and
 * block-level reductions.
 * Device code here never synchronises the host and never touches the legacy default stream:
 * every launch and async copy names the caller's stream. */
#ifndef TAGC_KERNELS_CUDA_COMMON_CUH
#define TAGC_KERNELS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cuda_status.h"

/* Enqueues `kernel` on `stream`: TAGC_LAUNCH(k, grid, block, stream)(args...). A host
 * emulation (tests/kernels_gpu/emu) defines it first to run the kernels without a GPU. */
#ifndef TAGC_LAUNCH
#define TAGC_LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#endif

/* Threads per block of the streaming (one element per thread) kernels. */
#define CUDA_THREADS 256
/* Cap on the x-dimension of grid-stride launches (enough blocks to fill an H200 many times). */
#define CUDA_MAX_GRID 8192

/* Status of the launches just enqueued (non-blocking: reads the sticky launch error only),
 * through the one translator: "<op>: CUDA error: <CUDA's message>". */
static inline tagc_status cuda_launched(const char *op) {
  return tagc_cuda_status(cudaGetLastError(), "%s: CUDA error", op);
}

/* Blocks for a grid-stride loop over `items` with `per_block` items per block per pass. */
static inline unsigned grid_for(int64_t items, int64_t per_block) {
  int64_t g = (items + per_block - 1) / per_block;
  if (g < 1)
    g = 1;
  return (unsigned)(g < CUDA_MAX_GRID ? g : CUDA_MAX_GRID);
}

/* Rounds a byte count up to 256 so workspace sections stay aligned for any element type. */
static inline size_t ws_align(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

/* Sum of `v` over the thread block (blockDim.x a multiple of 32, at most 1024); the result
 * is valid in thread 0 only. Uses 32 words of shared memory; every thread must call it. */
__device__ __forceinline__ unsigned long long block_sum_u64(unsigned long long v) {
  __shared__ unsigned long long warp_sums[32];
  for (int off = 16; off > 0; off >>= 1)
    v += __shfl_down_sync(0xFFFFFFFFu, v, off);
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0)
    warp_sums[warp] = v;
  __syncthreads();
  unsigned long long total = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
      total += warp_sums[w];
  __syncthreads();
  return total;
}

#endif
