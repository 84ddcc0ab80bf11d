/* CPU bf16 array ops (see bf16.h). */
#include "kernels/bf16.h"

#define PAR_MIN (1 << 16) /* below this many elements a thread team costs more than it saves */

static tagc_status check_args(const char *op, const void *a, const void *b, int64_t n) {
  if (n < 0 || (n > 0 && (!a || !b)))
    return tagc_errorf(TAGC_EINVAL, "%s: bad arguments (n %lld)", op, (long long)n);
  return TAGC_OK;
}

tagc_status tagc_bf16_encode_cpu(const float *src, uint16_t *dst, int64_t n) {
  TAGC_CHECK(check_args("bf16_encode", src, dst, n));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++)
    dst[i] = tagc_bf16_round(src[i]);
  return TAGC_OK;
}

tagc_status tagc_bf16_encode_stochastic_cpu(const float *src, uint16_t *dst, int64_t n,
                                            uint64_t seed, uint64_t step,
                                            uint64_t first_index) {
  TAGC_CHECK(check_args("bf16_encode_stochastic", src, dst, n));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++)
    dst[i] = tagc_bf16_round_stochastic(src[i],
                                        tagc_rng_u32(seed, step, first_index + (uint64_t)i));
  return TAGC_OK;
}

tagc_status tagc_bf16_decode_cpu(const uint16_t *src, float *dst, int64_t n) {
  TAGC_CHECK(check_args("bf16_decode", src, dst, n));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++)
    dst[i] = tagc_bf16_to_f32(src[i]);
  return TAGC_OK;
}

tagc_status tagc_bf16_accumulate_cpu(float *acc, const uint16_t *in, int64_t n) {
  TAGC_CHECK(check_args("bf16_accumulate", acc, in, n));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++)
    acc[i] += tagc_bf16_to_f32(in[i]);
  return TAGC_OK;
}

tagc_status tagc_bf16_add_encode_cpu(uint16_t *out, const float *local, const uint16_t *in,
                                     int64_t n) {
  TAGC_CHECK(check_args("bf16_add_encode", out, local, n));
  TAGC_CHECK(check_args("bf16_add_encode", out, in, n));
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
  for (int64_t i = 0; i < n; i++)
    out[i] = tagc_bf16_round(local[i] + tagc_bf16_to_f32(in[i]));
  return TAGC_OK;
}
