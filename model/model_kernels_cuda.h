/* The GPT model's own CUDA kernels (everything but the matrix products, which go to
 * cuBLAS), one C launcher each, used by model/model_cuda.cu and tested one by one against
 * CPU references in tests/model_gpu.
 *
 * Conventions: device pointers; row-major arrays; each launcher enqueues its kernels on
 * `stream` and returns TAGC_EINTERNAL with CUDA's message if the launch failed (nothing
 * synchronises the host). No floating-point atomics: every sum has a fixed order, so the
 * results are bit-identical run to run. Element math follows model/model.c (pre-LN,
 * LayerNorm eps 1e-5, GELU tanh approximation), with CUDA's expf/tanhf/logf. */
#ifndef TAGC_WORKER_MODEL_KERNELS_CUDA_H
#define TAGC_WORKER_MODEL_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (N, C) = LayerNorm(inp) * w + b per row; stat (N, 2) = mean, rstd. */
tagc_status tagc_gpu_layernorm_forward(float *out, float *stat, const float *inp, const float *w,
                                       const float *b, int N, int C, tagc_stream stream);

/* dinp (N, C) = dres + d LayerNorm / d inp applied to dout (dres NULL = 0; dres may alias
 * dinp). */
tagc_status tagc_gpu_layernorm_backward_input(float *dinp, const float *dres, const float *dout,
                                              const float *inp, const float *stat,
                                              const float *w, int N, int C, tagc_stream stream);

/* Floats of workspace the column sums below need for width C. */
size_t tagc_gpu_colsum_workspace_floats(int C);

/* dw[c] += sum_i dout[i][c] * xhat[i][c], db[c] += sum_i dout[i][c] (xhat from inp and
 * stat), over N rows in a fixed two-pass order. ws: tagc_gpu_colsum_workspace_floats(C). */
tagc_status tagc_gpu_layernorm_backward_params(float *dw, float *db, const float *dout,
                                               const float *inp, const float *stat, int N, int C,
                                               float *ws, tagc_stream stream);

/* dst[c] += sum_i src[i][c] over N rows (bias gradients), fixed order. */
tagc_status tagc_gpu_colsum_add(float *dst, const float *src, int N, int C, float *ws,
                                tagc_stream stream);

/* out (N, C) = add + bias (row broadcast); add or bias may be NULL (then 0). */
tagc_status tagc_gpu_add_bias(float *out, const float *add, const float *bias, int N, int C,
                              tagc_stream stream);

/* out[i] = GELU(inp[i]) (tanh approximation), i < n. */
tagc_status tagc_gpu_gelu_forward(float *out, const float *inp, size_t n, tagc_stream stream);

/* d[i] *= GELU'(inp[i]) (in place: dout -> dinp). */
tagc_status tagc_gpu_gelu_backward(float *d, const float *inp, size_t n, tagc_stream stream);

/* The causal softmax on a chunk of rows of BH score matrices: att (BH, n, k) holds the
 * scaled scores of queries r0 .. r0+n-1 against keys 0 .. k-1 (r0 + n <= k <= T; the whole
 * square is n = k = T, r0 = 0). In place, row i (query t = r0 + i) becomes
 * softmax(att[i][0..t]) and 0 past t; lse (NULL: not kept) gets each row's log-sum-exp at
 * lse[bh * T + t]. TAGC_EINVAL for a chunk outside the square. */
tagc_status tagc_gpu_softmax_causal_forward(float *att, float *lse, int BH, int n, int k, int r0,
                                            int T, tagc_stream stream);

/* The same probabilities recomputed from the scores and the forward's lse:
 * att[i][j] = exp(att[i][j] - lse) for j <= t, else 0 (the backward keeps no T x T matrix). */
tagc_status tagc_gpu_softmax_causal_recompute(float *att, const float *lse, int BH, int n, int k,
                                              int r0, int T, tagc_stream stream);

/* ds (BH, n, k) in place, from dP to d scores: ds = p * (dp - sum_j p dp) * scale for
 * j <= t, 0 past it (each row's keys are all in the chunk). */
tagc_status tagc_gpu_softmax_causal_backward(float *ds, const float *p, int BH, int n, int k,
                                             int r0, int T, float scale, tagc_stream stream);

/* Per row of logits (N, Vp): losses[i] = cross-entropy over the first V logits against
 * targets[i], and the row replaced by its softmax probabilities, 0 in the padding V..Vp-1. */
tagc_status tagc_gpu_crossentropy_forward(float *losses, float *logits, const uint16_t *targets,
                                          int N, int V, int Vp, tagc_stream stream);

/* probs (N, V) in place -> scale * (p - onehot(target)) (V: the row length, padded vocabulary
 * included; its zero probabilities stay 0). */
tagc_status tagc_gpu_crossentropy_backward(float *probs, const uint16_t *targets, int N, int V,
                                           float scale, tagc_stream stream);

/* *out (one device double) = sum of losses[0..n) in double, one block, fixed order. */
tagc_status tagc_gpu_sum_losses(double *out, const float *losses, int n, tagc_stream stream);

/* out (B*T, C) = wte[tokens] + wpe[position]. */
tagc_status tagc_gpu_encoder_forward(float *out, const uint16_t *tokens, const float *wte,
                                     const float *wpe, int B, int T, int C, tagc_stream stream);

/* dwte[v] += the dout rows whose token is v, added in position order (bit-identical to
 * tagc_cpu_encoder_backward; work O(B*T*C + V), not O(V*B*T): the positions are bucketed by
 * token first), dwpe[t] += sum over b of dout[b][t]. ws: device memory of
 * tagc_gpu_encoder_backward_workspace_bytes(B*T, V) bytes, 4-byte aligned. */
size_t tagc_gpu_encoder_backward_workspace_bytes(int BT, int V);
tagc_status tagc_gpu_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                      const uint16_t *tokens, int B, int T, int V, int C,
                                      void *ws, tagc_stream stream);

/* dst[i] = bf16(src[i]) round to nearest even (kernels/bf16.h), i < n. */
tagc_status tagc_gpu_to_bf16(uint16_t *dst, const float *src, size_t n, tagc_stream stream);

#ifdef __cplusplus
}
#endif

#endif
