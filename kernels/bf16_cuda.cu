/* CUDA bf16 array ops (see bf16.h): element-wise kernels over the same host/device helpers
 * as the CPU versions (tagc_bf16_round, tagc_bf16_round_stochastic, tagc_rng_u32), with
 * explicit round-to-nearest fp32 adds, so every result is bit-identical to the CPU. */
#include "kernels/cuda_common.cuh"
#include "kernels/bf16.h"

typedef enum bf16_op { OP_ENCODE, OP_STOCHASTIC, OP_DECODE, OP_ACCUMULATE, OP_ADD_ENCODE } bf16_op;

/* Arguments of one element-wise op; unused pointers are NULL. */
typedef struct bf16_args {
  const float *fsrc;  /* encode source, or add_encode's local part */
  const uint16_t *hsrc; /* decode / accumulate / add_encode bf16 input */
  float *fdst;        /* decode destination or accumulator */
  uint16_t *hdst;     /* encode / add_encode destination */
  uint64_t seed, step, first_index;
} bf16_args;

template <bf16_op OP>
__global__ void bf16_kernel(bf16_args a, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (OP == OP_ENCODE)
      a.hdst[i] = tagc_bf16_round(a.fsrc[i]);
    else if (OP == OP_STOCHASTIC)
      a.hdst[i] = tagc_bf16_round_stochastic(
          a.fsrc[i], tagc_rng_u32(a.seed, a.step, a.first_index + (uint64_t)i));
    else if (OP == OP_DECODE)
      a.fdst[i] = tagc_bf16_to_f32(a.hsrc[i]);
    else if (OP == OP_ACCUMULATE)
      a.fdst[i] = __fadd_rn(a.fdst[i], tagc_bf16_to_f32(a.hsrc[i]));
    else
      a.hdst[i] = tagc_bf16_round(__fadd_rn(a.fsrc[i], tagc_bf16_to_f32(a.hsrc[i])));
  }
}

template <bf16_op OP>
static tagc_status launch(const char *op, const void *p, const void *q, const bf16_args &a,
                          int64_t n, tagc_stream stream) {
  if (n < 0 || (n > 0 && (!p || !q)))
    return tagc_errorf(TAGC_EINVAL, "%s: bad arguments (n %lld)", op, (long long)n);
  if (n == 0)
    return TAGC_OK;
  TAGC_LAUNCH(bf16_kernel<OP>, grid_for(n, 4 * CUDA_THREADS), CUDA_THREADS, stream)(a, n);
  return cuda_launched(op);
}

extern "C" tagc_status tagc_bf16_encode_cuda(const float *src, uint16_t *dst, int64_t n,
                                             tagc_stream stream) {
  bf16_args a = {src, NULL, NULL, dst, 0, 0, 0};
  return launch<OP_ENCODE>("bf16_encode_cuda", src, dst, a, n, stream);
}

extern "C" tagc_status tagc_bf16_encode_stochastic_cuda(const float *src, uint16_t *dst,
                                                        int64_t n, uint64_t seed, uint64_t step,
                                                        uint64_t first_index,
                                                        tagc_stream stream) {
  bf16_args a = {src, NULL, NULL, dst, seed, step, first_index};
  return launch<OP_STOCHASTIC>("bf16_encode_stochastic_cuda", src, dst, a, n, stream);
}

extern "C" tagc_status tagc_bf16_decode_cuda(const uint16_t *src, float *dst, int64_t n,
                                             tagc_stream stream) {
  bf16_args a = {NULL, src, dst, NULL, 0, 0, 0};
  return launch<OP_DECODE>("bf16_decode_cuda", src, dst, a, n, stream);
}

extern "C" tagc_status tagc_bf16_accumulate_cuda(float *acc, const uint16_t *in, int64_t n,
                                                 tagc_stream stream) {
  bf16_args a = {NULL, in, acc, NULL, 0, 0, 0};
  return launch<OP_ACCUMULATE>("bf16_accumulate_cuda", acc, in, a, n, stream);
}

extern "C" tagc_status tagc_bf16_add_encode_cuda(uint16_t *out, const float *local,
                                                 const uint16_t *in, int64_t n,
                                                 tagc_stream stream) {
  bf16_args a = {local, in, NULL, out, 0, 0, 0};
  if (n > 0 && !out)
    return tagc_errorf(TAGC_EINVAL, "bf16_add_encode_cuda: bad arguments (n %lld)", (long long)n);
  return launch<OP_ADD_ENCODE>("bf16_add_encode_cuda", local, in, a, n, stream);
}
