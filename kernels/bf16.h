/* bfloat16 conversion and "bf16 on the wire, fp32 accumulate" helpers.
 *
 * A bf16 value is the upper 16 bits of an fp32 (uint16_t here). fp32 -> bf16:
 *   - round to nearest, ties to even, on the bit pattern: correct for denormals (bf16 has
 *     fp32's exponent range), rounds values past the largest bf16 to inf, keeps inf;
 *   - NaN stays NaN with its sign, made quiet (payload truncated, quiet bit set);
 *   - stochastic rounding: add a uniform 16-bit draw r to the discarded half and truncate,
 *     so x rounds up with probability (discarded bits)/2^16 (unbiased); r comes from
 *     tagc_rng_u32(seed, step, index) (kernels/hash.h) with index = first_index + i, so a
 *     result does not depend on how the array is split across calls or threads.
 * bf16 -> fp32 is exact. */
#ifndef TAGC_KERNELS_BF16_H
#define TAGC_KERNELS_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/hash.h"
#include "kernels/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

TAGC_HD uint32_t tagc_f32_bits(float x) {
  union { float f; uint32_t u; } c;
  c.f = x;
  return c.u;
}

TAGC_HD float tagc_f32_from_bits(uint32_t u) {
  union { float f; uint32_t u; } c;
  c.u = u;
  return c.f;
}

/* fp32 -> bf16, round to nearest even. */
TAGC_HD uint16_t tagc_bf16_round(float x) {
  uint32_t u = tagc_f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return (uint16_t)((u >> 16) | 0x0040u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* fp32 -> bf16, stochastic rounding with the 16 random bits `r` (low half used). */
TAGC_HD uint16_t tagc_bf16_round_stochastic(float x, uint32_t r) {
  uint32_t u = tagc_f32_bits(x);
  if ((u & 0x7FFFFFFFu) >= 0x7F800000u)
    return tagc_bf16_round(x);
  return (uint16_t)((u + (r & 0xFFFFu)) >> 16);
}

/* bf16 -> fp32 (exact). */
TAGC_HD float tagc_bf16_to_f32(uint16_t h) { return tagc_f32_from_bits((uint32_t)h << 16); }

/* dst[i] = bf16(src[i]) round-to-nearest-even, i < n. Errors: TAGC_EINVAL (NULL with n > 0,
 * n < 0). src and dst must not overlap. Blocking, OpenMP. */
tagc_status tagc_bf16_encode_cpu(const float *src, uint16_t *dst, int64_t n);

/* dst[i] = stochastic bf16(src[i]) with draw tagc_rng_u32(seed, step, first_index + i).
 * Errors and threading as tagc_bf16_encode_cpu. */
tagc_status tagc_bf16_encode_stochastic_cpu(const float *src, uint16_t *dst, int64_t n,
                                            uint64_t seed, uint64_t step,
                                            uint64_t first_index);

/* dst[i] = fp32(src[i]). Errors and threading as above. */
tagc_status tagc_bf16_decode_cpu(const uint16_t *src, float *dst, int64_t n);

/* Reduction helpers for a bf16 wire with fp32 accumulation:
 *   accumulate: acc[i] += fp32(in[i])                 (the fp32 accumulator of a reduction)
 *   add_encode: out[i] = bf16(local[i] + fp32(in[i])) (one ring hop: add my fp32 part to the
 *                                                      partial sum received, send on; RNE)
 * out may alias in. Errors and threading as above. */
tagc_status tagc_bf16_accumulate_cpu(float *acc, const uint16_t *in, int64_t n);
tagc_status tagc_bf16_add_encode_cpu(uint16_t *out, const float *local, const uint16_t *in,
                                     int64_t n);

/* CUDA versions: same contracts, device pointers, enqueued on `stream`, no host sync. */
tagc_status tagc_bf16_encode_cuda(const float *src, uint16_t *dst, int64_t n,
                                  tagc_stream stream);
tagc_status tagc_bf16_encode_stochastic_cuda(const float *src, uint16_t *dst, int64_t n,
                                             uint64_t seed, uint64_t step,
                                             uint64_t first_index, tagc_stream stream);
tagc_status tagc_bf16_decode_cuda(const uint16_t *src, float *dst, int64_t n,
                                  tagc_stream stream);
tagc_status tagc_bf16_accumulate_cuda(float *acc, const uint16_t *in, int64_t n,
                                      tagc_stream stream);
tagc_status tagc_bf16_add_encode_cuda(uint16_t *out, const float *local, const uint16_t *in,
                                      int64_t n, tagc_stream stream);

#ifdef __cplusplus
}
#endif

#endif
