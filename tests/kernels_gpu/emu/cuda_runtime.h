/* Host emulation of the CUDA device features used by kernels/ *_cuda.cu, for checking the
 * kernels' logic on machines without a GPU (test_kernels_gpu_emu). It stands in for the
 * real <cuda_runtime.h> (this directory comes first on the include path): the runtime API
 * declarations stay the real ones, device qualifiers become host C++, and every CUDA
 * thread of a block runs as a fiber (emu.cpp) so that __syncthreads, shuffles and ballots
 * behave as on the device. Blocks run one after another; atomics are plain read-modify-
 * writes. It checks indexing, synchronisation structure and arithmetic, not timing,
 * occupancy or the memory model. Never part of a product build. */
#ifndef TAGC_TESTS_KERNELS_GPU_EMU_CUDA_RUNTIME_H
#define TAGC_TESTS_KERNELS_GPU_EMU_CUDA_RUNTIME_H

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <functional>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __align__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static /* one instance; blocks run one at a time and initialise it */
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

/* Indices of the running fiber. */
struct emu_thread_state {
  uint3 tid, bid;
  dim3 bdim, gdim;
};
extern emu_thread_state *emu_cur;
#define threadIdx (emu_cur->tid)
#define blockIdx (emu_cur->bid)
#define blockDim (emu_cur->bdim)
#define gridDim (emu_cur->gdim)

/* Runs body once per thread of every block of the grid. */
void emu_launch(dim3 grid, dim3 block, std::function<void()> body);
void emu_syncthreads(void);
/* Deposits v for the calling lane, waits for the warp, returns lane src's deposit. */
uint64_t emu_warp_exchange(uint64_t v, int src);
uint32_t emu_ballot(bool pred);

template <typename... P> struct emu_launcher {
  dim3 grid, block;
  void (*kernel)(P...);
  void operator()(P... args) const {
    void (*k)(P...) = kernel;
    emu_launch(grid, block, [=]() { k(args...); });
  }
};
/* The stream is accepted and ignored: emulated work completes before the call returns. */
template <typename... P>
emu_launcher<P...> emu_make_launcher(dim3 g, dim3 b, void (*k)(P...), cudaStream_t) {
  return emu_launcher<P...>{g, b, k};
}
#define TAGC_LAUNCH(kernel, grid, block, stream) \
  emu_make_launcher(dim3(grid), dim3(block), kernel, stream)

#define __syncthreads() emu_syncthreads()

template <typename T> inline T emu_shfl(T v, int src) {
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  uint64_t r = emu_warp_exchange(u, src);
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}
inline int emu_lane(void) { return (int)((threadIdx.x + threadIdx.y * blockDim.x) & 31); }
template <typename T> inline T __shfl_down_sync(unsigned, T v, int off) {
  int src = emu_lane() + off;
  return emu_shfl(v, src < 32 ? src : emu_lane());
}
template <typename T> inline T __shfl_up_sync(unsigned, T v, int off) {
  int src = emu_lane() - off;
  return emu_shfl(v, src >= 0 ? src : emu_lane());
}
inline unsigned __ballot_sync(unsigned, int pred) { return emu_ballot(pred != 0); }
template <typename T> inline T atomicAdd(T *p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <typename T> inline T atomicXor(T *p, T v) {
  T old = *p;
  *p = old ^ v;
  return old;
}
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline float __int_as_float(int x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }

#endif
