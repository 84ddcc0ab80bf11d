/* Blockwise int8 quantisation of parameters for the all-gather (ZeRO++ qwZ style; the fp32
 * master shard never changes, only what crosses the wire is quantised).
 *
 * A chunk holds n consecutive fp32 values as
 *   [nb = ceil(n / TAGC_Q8_BLOCK) fp32 scales][n int8 codes][zero padding to 16 bytes]
 * (tagc_q8_chunk_bytes(n) bytes). Block k covers elements [256k, 256k + 256):
 *   scale_k = amax_k / 127 (amax_k = the largest |x| in the block, fp32 division; the
 *             canonical quiet NaN 0x7FC00000 when the block holds a NaN),
 *   q_i     = rint(x_i / scale_k) clamped to [-127, 127] (round to nearest, ties to even),
 *   x'_i    = q_i * scale_k  (one fp32 multiply, so |x - x'| <= scale_k / 2 per element).
 * An all-zero block has scale 0 and decodes to +0. A block holding a NaN or an infinity gets
 * a NaN or infinite scale and decodes to NaN throughout: it is never silently finite.
 * Every operation is IEEE fp32 (no FMA, correctly rounded division), so the CPU oracle and
 * the CUDA twin produce the same bytes and values. An all-gather of W chunks of n elements
 * (one per rank) decodes in one call into the first `limit` elements of the W*n. */
#ifndef TAGC_KERNELS_Q8_H
#define TAGC_KERNELS_Q8_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/hash.h"
#include "kernels/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TAGC_Q8_BLOCK 256

/* Bytes of a chunk of n elements (n >= 0). */
TAGC_HD int64_t tagc_q8_chunk_bytes(int64_t n) {
  int64_t nb = (n + TAGC_Q8_BLOCK - 1) / TAGC_Q8_BLOCK;
  return (4 * nb + n + 15) & ~(int64_t)15;
}

/* The code of x in a block with scale s (see above). */
TAGC_HD int8_t tagc_q8_code(float x, float s) {
  float t = rintf(x / s);
  t = t == t ? t : 0.0f; /* 0/0 (all-zero block) or a non-finite block: the scale carries it */
  t = t > 127.0f ? 127.0f : (t < -127.0f ? -127.0f : t); /* selects: the loop vectorises */
  return (int8_t)t;
}

/* |x| as its bit pattern: ordered like |x| for every finite and infinite value, and every
 * NaN above infinity, so a block's maximum is an integer maximum (exact, order-independent,
 * vectorisable) in which a NaN always wins. */
TAGC_HD uint32_t tagc_q8_abs_bits(float x) {
  union { float f; uint32_t u; } c;
  c.f = x;
  return c.u & 0x7FFFFFFFu;
}

/* The scale of a block from its maximum |x| bits: amax / 127, or the canonical quiet NaN when
 * the block holds a NaN (so CPU and CUDA write the same bytes). */
TAGC_HD float tagc_q8_scale(uint32_t amax_bits) {
  union { float f; uint32_t u; } c;
  c.u = amax_bits > 0x7F800000u ? 0x7FC00000u : amax_bits;
  return amax_bits > 0x7F800000u ? c.f : c.f / 127.0f;
}

/* Encodes src[0..n) into one chunk (tagc_q8_chunk_bytes(n) bytes, padding zeroed).
 * Errors: TAGC_EINVAL (NULL with n > 0, n < 0). Blocking, OpenMP over blocks. */
tagc_status tagc_q8_encode_cpu(const float *src, int64_t n, void *chunk);

/* dst[j] = decode of element j % n of chunk j / n, for j < limit, where chunk c starts at
 * byte c * stride of chunks (count chunks; stride tagc_q8_chunk_bytes(n) when they are
 * packed, more when other data lies between them, as in a unit's grouped all-gather).
 * Errors: TAGC_EINVAL (NULL, n < 0, count < 1, stride below tagc_q8_chunk_bytes(n) or not a
 * multiple of 4, limit < 0 or > count * n). Blocking, OpenMP. */
tagc_status tagc_q8_decode_cpu(const void *chunks, int64_t n, int32_t count, int64_t stride,
                               int64_t limit, float *dst);

/* The int8 gradient wire's sender, with error feedback, in one pass: v = src + residual
 * (residual NULL: v = src + 0.0f, as if it were all +0) is encoded into one chunk with the
 * bytes tagc_q8_encode_cpu(v) writes, and residual_out[i] = v_i - x'_i, x'_i being v_i's
 * decode (one fp32 multiply, one fp32 subtraction: what v lost to the rounding). residual_out
 * may be NULL (not written) or equal residual (in place). Same bits as add, encode, decode,
 * subtract. Errors: TAGC_EINVAL (n < 0, src or chunk NULL with n > 0). Blocking, OpenMP. */
tagc_status tagc_q8_encode_ef_cpu(const float *src, const float *residual, int64_t n, void *chunk,
                                  float *residual_out);

/* The int8 gradient wire's owner: dst[i] = x'_0[i] + x'_1[i] + ... + x'_{count-1}[i] for
 * i < n, the decodes of chunks 0, 1, ... (n elements each, chunk c at byte c * stride, as for
 * the decode) summed in that order in fp32 (the first is assigned, not added to zero).
 * Errors: TAGC_EINVAL (NULL with n > 0, n < 0, count < 1, stride as for the decode).
 * Blocking, OpenMP. */
tagc_status tagc_q8_decode_sum_cpu(const void *chunks, int64_t n, int32_t count, int64_t stride,
                                   float *dst);

/* CUDA versions: same contracts and bytes, device pointers, enqueued on `stream`. */
tagc_status tagc_q8_encode_cuda(const float *src, int64_t n, void *chunk, tagc_stream stream);
tagc_status tagc_q8_decode_cuda(const void *chunks, int64_t n, int32_t count, int64_t stride,
                                int64_t limit, float *dst, tagc_stream stream);
tagc_status tagc_q8_encode_ef_cuda(const float *src, const float *residual, int64_t n,
                                   void *chunk, float *residual_out, tagc_stream stream);
tagc_status tagc_q8_decode_sum_cuda(const void *chunks, int64_t n, int32_t count,
                                    int64_t stride, float *dst, tagc_stream stream);

/* 1 when stride can separate chunks of n elements (at least tagc_q8_chunk_bytes(n), a
 * multiple of 4 so that the scales stay aligned). */
TAGC_HD int tagc_q8_stride_ok(int64_t n, int64_t stride) {
  return stride >= tagc_q8_chunk_bytes(n) && stride % 4 == 0;
}

#ifdef __cplusplus
}
#endif

#endif
