/* Host emulation of the CUDA device for the model kernels (test_model_gpu_emu): the fiber
 * emulation of tests/kernels_gpu/emu plus the few device functions the model kernels use
 * beyond the compression kernels. Never part of a product build. */
#ifndef TAGC_TESTS_MODEL_GPU_EMU_CUDA_RUNTIME_H
#define TAGC_TESTS_MODEL_GPU_EMU_CUDA_RUNTIME_H

#include "../../kernels_gpu/emu/cuda_runtime.h"

#include <cmath>

/* __fmul_rn and __fdiv_rn come from the kernels emulation. */
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int mask) {
  return emu_shfl(v, emu_lane() ^ mask);
}
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline int min(int a, int b) { return a < b ? a : b; }

#endif
