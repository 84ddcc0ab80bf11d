/* CPU blockwise int8 quantisation (see q8.h). */
#include "kernels/q8.h"

#include <string.h>

#define PAR_MIN_BLOCKS 256 /* below this many blocks a thread team costs more than it saves */

/* The gather's encode is the gradient wire's without a residual: v = src + 0.0f turns -0 into
 * +0, whose code (0) and block maximum are the same, so the bytes are those of src. */
tagc_status tagc_q8_encode_cpu(const float *src, int64_t n, void *chunk) {
  if (n < 0 || (n > 0 && (!src || !chunk)))
    return tagc_errorf(TAGC_EINVAL, "q8_encode: bad arguments (n %lld)", (long long)n);
  return tagc_q8_encode_ef_cpu(src, NULL, n, chunk, NULL);
}

tagc_status tagc_q8_decode_cpu(const void *chunks, int64_t n, int32_t count, int64_t stride,
                               int64_t limit, float *dst) {
  if (n < 0 || count < 1 || limit < 0 || limit > (int64_t)count * n ||
      !tagc_q8_stride_ok(n, stride) || (limit > 0 && (!chunks || !dst)))
    return tagc_errorf(TAGC_EINVAL,
                       "q8_decode: bad arguments (n %lld, count %d, stride %lld, limit %lld)",
                       (long long)n, (int)count, (long long)stride, (long long)limit);
  if (limit == 0)
    return TAGC_OK;
  int64_t nb = (n + TAGC_Q8_BLOCK - 1) / TAGC_Q8_BLOCK, bytes = stride;
  for (int32_t c = 0; c < count; c++) {
    int64_t base = (int64_t)c * n, len = limit - base < n ? limit - base : n;
    if (len <= 0)
      break;
    const char *p = (const char *)chunks + (int64_t)c * bytes;
    const float *scale = (const float *)p;
    const int8_t *code = (const int8_t *)p + 4 * nb;
    float *out = dst + base;
    int64_t blocks = (len + TAGC_Q8_BLOCK - 1) / TAGC_Q8_BLOCK;
#pragma omp parallel for schedule(static) if (blocks > PAR_MIN_BLOCKS)
    for (int64_t k = 0; k < blocks; k++) {
      int64_t lo = k * TAGC_Q8_BLOCK, hi = lo + TAGC_Q8_BLOCK < len ? lo + TAGC_Q8_BLOCK : len;
      float s = scale[k];
      for (int64_t i = lo; i < hi; i++)
        out[i] = (float)code[i] * s;
    }
  }
  return TAGC_OK;
}

tagc_status tagc_q8_encode_ef_cpu(const float *src, const float *residual, int64_t n, void *chunk,
                                  float *residual_out) {
  if (n < 0 || (n > 0 && (!src || !chunk)))
    return tagc_errorf(TAGC_EINVAL, "q8_encode_ef: bad arguments (n %lld)", (long long)n);
  int64_t nb = (n + TAGC_Q8_BLOCK - 1) / TAGC_Q8_BLOCK;
  float *scale = (float *)chunk;
  int8_t *code = (int8_t *)chunk + 4 * nb;
#pragma omp parallel for schedule(static) if (nb > PAR_MIN_BLOCKS)
  for (int64_t k = 0; k < nb; k++) {
    int64_t lo = k * TAGC_Q8_BLOCK, len = lo + TAGC_Q8_BLOCK < n ? TAGC_Q8_BLOCK : n - lo;
    const float *x = src + lo;
    float v[TAGC_Q8_BLOCK];
    uint32_t m = 0;
    if (residual) {
      const float *r = residual + lo;
      for (int64_t i = 0; i < len; i++)
        v[i] = x[i] + r[i];
    } else {
      for (int64_t i = 0; i < len; i++)
        v[i] = x[i] + 0.0f; /* -0 becomes +0, as in the addition of a zeroed residual */
    }
    for (int64_t i = 0; i < len; i++) {
      uint32_t a = tagc_q8_abs_bits(v[i]);
      m = a > m ? a : m;
    }
    float s = tagc_q8_scale(m);
    scale[k] = s;
    int8_t *q = code + lo;
    for (int64_t i = 0; i < len; i++)
      q[i] = tagc_q8_code(v[i], s);
    if (residual_out) {
      float *out = residual_out + lo;
      for (int64_t i = 0; i < len; i++)
        out[i] = v[i] - (float)q[i] * s;
    }
  }
  int64_t used = 4 * nb + n;
  if (n > 0)
    memset((char *)chunk + used, 0, (size_t)(tagc_q8_chunk_bytes(n) - used));
  return TAGC_OK;
}

tagc_status tagc_q8_decode_sum_cpu(const void *chunks, int64_t n, int32_t count, int64_t stride,
                                   float *dst) {
  if (n < 0 || count < 1 || !tagc_q8_stride_ok(n, stride) || (n > 0 && (!chunks || !dst)))
    return tagc_errorf(TAGC_EINVAL, "q8_decode_sum: bad arguments (n %lld, count %d, stride %lld)",
                       (long long)n, (int)count, (long long)stride);
  int64_t nb = (n + TAGC_Q8_BLOCK - 1) / TAGC_Q8_BLOCK, bytes = stride;
#pragma omp parallel for schedule(static) if (nb > PAR_MIN_BLOCKS)
  for (int64_t k = 0; k < nb; k++) {
    int64_t lo = k * TAGC_Q8_BLOCK, len = lo + TAGC_Q8_BLOCK < n ? TAGC_Q8_BLOCK : n - lo;
    float *out = dst + lo;
    for (int32_t c = 0; c < count; c++) {
      const char *p = (const char *)chunks + (int64_t)c * bytes;
      float s = ((const float *)p)[k];
      const int8_t *q = (const int8_t *)p + 4 * nb + lo;
      if (c == 0)
        for (int64_t i = 0; i < len; i++)
          out[i] = (float)q[i] * s;
      else
        for (int64_t i = 0; i < len; i++)
          out[i] = out[i] + (float)q[i] * s;
    }
  }
  return TAGC_OK;
}
