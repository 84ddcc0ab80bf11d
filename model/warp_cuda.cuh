/* Warp reductions shared by the model's kernels (model_kernels_cuda.cu and
 * attention_flash_cuda.cu). */
#ifndef TAGC_MODEL_WARP_CUDA_CUH
#define TAGC_MODEL_WARP_CUDA_CUH

#include <cuda_runtime.h>

/* Sum and maximum of `v` over the 32 lanes of a warp (xor butterfly: every lane gets the
 * result, the same bits on each). Every lane of the warp must call them. */
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1)
    v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  return v;
}

#endif
