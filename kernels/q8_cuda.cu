/* CUDA blockwise int8 quantisation (see q8.h): one thread block per quantisation block for
 * the encode (block maximum by warp shuffles, then one element per thread; the gather's encode
 * is the gradient wire's without a residual), grid-stride element loops for the decodes. Same
 * helpers as the CPU oracle (tagc_q8_abs_bits, tagc_q8_scale, tagc_q8_code) and explicit
 * round-to-nearest operations, so bytes and values are bit-identical. */
#include "kernels/cuda_common.cuh"
#include "kernels/q8.h"

static_assert(TAGC_Q8_BLOCK == CUDA_THREADS, "one CUDA thread per element of a q8 block");

__global__ void q8_decode_kernel(const char *chunks, int64_t n, int64_t nb, int64_t bytes,
                                 int64_t limit, float *dst) {
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < limit;
       j += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = j / n, i = j - c * n;
    const char *p = chunks + c * bytes;
    float s = ((const float *)p)[i / TAGC_Q8_BLOCK];
    dst[j] = __fmul_rn((float)((const int8_t *)p)[4 * nb + i], s);
  }
}

/* encode with error feedback (q8.h): the encode's block maximum and codes on v = src + residual,
 * then residual_out = v - decode(v); explicit round-to-nearest operations (no contraction). */
__global__ void q8_encode_ef_kernel(const float *src, const float *residual, int64_t n,
                                    int64_t nb, float *scale, int8_t *code, uint8_t *pad,
                                    int64_t pad_bytes, float *residual_out) {
  __shared__ uint32_t warp_max[CUDA_THREADS / 32];
  for (int64_t k = blockIdx.x; k < nb; k += gridDim.x) {
    int64_t i = k * TAGC_Q8_BLOCK + threadIdx.x;
    float x = 0.0f;
    if (i < n)
      x = __fadd_rn(src[i], residual ? residual[i] : 0.0f);
    uint32_t m = tagc_q8_abs_bits(x);
    for (int off = 16; off > 0; off >>= 1)
    {
      uint32_t o = __shfl_down_sync(0xFFFFFFFFu, m, off);
      m = o > m ? o : m;
    }
    if ((threadIdx.x & 31) == 0)
      warp_max[threadIdx.x >> 5] = m;
    __syncthreads();
    uint32_t bmax = warp_max[0];
    for (int w = 1; w < CUDA_THREADS / 32; w++)
      bmax = warp_max[w] > bmax ? warp_max[w] : bmax;
    float s = tagc_q8_scale(bmax);
    if (threadIdx.x == 0)
      scale[k] = s;
    if (i < n) {
      int8_t q = tagc_q8_code(x, s);
      code[i] = q;
      if (residual_out)
        residual_out[i] = __fsub_rn(x, __fmul_rn((float)q, s));
    }
    __syncthreads();
  }
  if (blockIdx.x == 0)
    for (int64_t b = threadIdx.x; b < pad_bytes; b += blockDim.x)
      pad[b] = 0;
}

/* the owner's sum of count decodes, in chunk order */
__global__ void q8_decode_sum_kernel(const char *chunks, int64_t n, int64_t nb, int64_t bytes,
                                     int32_t count, float *dst) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float acc = 0.0f;
    for (int32_t c = 0; c < count; c++) {
      const char *p = chunks + (int64_t)c * bytes;
      float d = __fmul_rn((float)((const int8_t *)p)[4 * nb + i],
                          ((const float *)p)[i / TAGC_Q8_BLOCK]);
      acc = c == 0 ? d : __fadd_rn(acc, d);
    }
    dst[i] = acc;
  }
}

extern "C" tagc_status tagc_q8_encode_cuda(const float *src, int64_t n, void *chunk,
                                           tagc_stream stream) {
  if (n < 0 || (n > 0 && (!src || !chunk)))
    return tagc_errorf(TAGC_EINVAL, "q8_encode_cuda: bad arguments (n %lld)", (long long)n);
  return tagc_q8_encode_ef_cuda(src, NULL, n, chunk, NULL, stream); /* as on the CPU */
}

extern "C" tagc_status tagc_q8_decode_cuda(const void *chunks, int64_t n, int32_t count,
                                           int64_t stride, int64_t limit, float *dst,
                                           tagc_stream stream) {
  if (n < 0 || count < 1 || limit < 0 || limit > (int64_t)count * n ||
      !tagc_q8_stride_ok(n, stride) || (limit > 0 && (!chunks || !dst)))
    return tagc_errorf(TAGC_EINVAL,
                       "q8_decode_cuda: bad arguments (n %lld, count %d, stride %lld, limit %lld)",
                       (long long)n, (int)count, (long long)stride, (long long)limit);
  if (limit == 0)
    return TAGC_OK;
  int64_t nb = (n + TAGC_Q8_BLOCK - 1) / TAGC_Q8_BLOCK;
  TAGC_LAUNCH(q8_decode_kernel, grid_for(limit, 4 * CUDA_THREADS), CUDA_THREADS, stream)
  ((const char *)chunks, n, nb, stride, limit, dst);
  return cuda_launched("q8_decode_cuda");
}

extern "C" tagc_status tagc_q8_encode_ef_cuda(const float *src, const float *residual, int64_t n,
                                              void *chunk, float *residual_out,
                                              tagc_stream stream) {
  if (n < 0 || (n > 0 && (!src || !chunk)))
    return tagc_errorf(TAGC_EINVAL, "q8_encode_ef_cuda: bad arguments (n %lld)", (long long)n);
  if (n == 0)
    return TAGC_OK;
  int64_t nb = (n + TAGC_Q8_BLOCK - 1) / TAGC_Q8_BLOCK, used = 4 * nb + n;
  unsigned grid = (unsigned)(nb < CUDA_MAX_GRID ? nb : CUDA_MAX_GRID);
  TAGC_LAUNCH(q8_encode_ef_kernel, grid, CUDA_THREADS, stream)
  (src, residual, n, nb, (float *)chunk, (int8_t *)chunk + 4 * nb, (uint8_t *)chunk + used,
   tagc_q8_chunk_bytes(n) - used, residual_out);
  return cuda_launched("q8_encode_ef_cuda");
}

extern "C" tagc_status tagc_q8_decode_sum_cuda(const void *chunks, int64_t n, int32_t count,
                                               int64_t stride, float *dst, tagc_stream stream) {
  if (n < 0 || count < 1 || !tagc_q8_stride_ok(n, stride) || (n > 0 && (!chunks || !dst)))
    return tagc_errorf(TAGC_EINVAL,
                       "q8_decode_sum_cuda: bad arguments (n %lld, count %d, stride %lld)",
                       (long long)n, (int)count, (long long)stride);
  if (n == 0)
    return TAGC_OK;
  int64_t nb = (n + TAGC_Q8_BLOCK - 1) / TAGC_Q8_BLOCK;
  TAGC_LAUNCH(q8_decode_sum_kernel, grid_for(n, 4 * CUDA_THREADS), CUDA_THREADS, stream)
  ((const char *)chunks, n, nb, stride, count, dst);
  return cuda_launched("q8_decode_sum_cuda");
}
