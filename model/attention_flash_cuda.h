/* Fused causal self-attention on CUDA, forward and backward, that never materialises the
 * T x T score matrix: tiles of 32 queries x 32 keys live in shared memory only.
 *
 * Shapes (row-major, device pointers, C = NH * hd):
 *   qkv  (B, T, 3C)  q, k, v are the column slices [0, C), [C, 2C), [2C, 3C); head h uses
 *                    columns h*hd .. h*hd + hd - 1 of each
 *   y    (B, T, C)   per head softmax(q k^T * scale, causal) v, scale = 1 / sqrt(hd)
 *   lse  (B, NH, T)  lse[(b*NH + h)*T + t]: natural log of sum_j exp(scale * q_t . k_j),
 *                    j <= t (the layout and value of model_kernels_cuda's softmax)
 *   dqkv (B, T, 3C)  gradient with respect to qkv, overwritten (every element written)
 *
 * Arithmetic: online softmax (a running max and sum per query row), accumulation in fp32.
 * With `bf16` nonzero the operands of the products (q, k, v, dy, the probabilities and
 * their gradient) are rounded to bf16 (nearest even) and multiplied on tensor cores
 * (nvcuda::wmma 16x16x16, fp32 accumulators); otherwise the products are fp32 on CUDA
 * cores. Needs sm_80 or later.
 *
 * Backward: D_t = rowsum(dy_t * y_t) first; then one kernel parallel over key tiles (each
 * owns dK and dV of its keys and walks the query tiles at or after it, recomputing
 * P = exp(S - lse)), and one parallel over query tiles for dQ (walking the key tiles up to
 * the diagonal).
 *
 * Determinism: no atomics; every sum has a fixed order, so results are bit-identical run to
 * run for the same inputs and the same device.
 *
 * Errors: TAGC_EINVAL for a shape the kernels do not handle (see
 * tagc_flash_attention_supported: the caller can then take the cuBLAS path), a NULL pointer
 * or a short workspace; TAGC_EINTERNAL with CUDA's message if a launch failed. Each call
 * enqueues its kernels on `stream` and returns without synchronising the host; all
 * pointers are borrowed for the duration of the enqueued work. */
#ifndef TAGC_MODEL_ATTENTION_FLASH_CUDA_H
#define TAGC_MODEL_ATTENTION_FLASH_CUDA_H

#include <stddef.h>

#include "common/status.h"
#include "kernels/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Nonzero when the kernels handle T query rows of NH heads of width hd: hd == 64, T >= 1,
 * 1 <= NH <= 65535. Pure function. */
int tagc_flash_attention_supported(int T, int NH, int hd);

/* Bytes of device workspace tagc_flash_attention_backward needs (the D_t vector, B*NH*T
 * floats, rounded up to 256). Pure function. */
size_t tagc_flash_attention_workspace_bytes(int B, int T, int NH);

/* y and lse from qkv (shapes above); 1 <= B <= 65535. y and lse must not overlap qkv. */
tagc_status tagc_flash_attention_forward(float *y, float *lse, const float *qkv, int B, int T,
                                         int NH, int hd, int bf16, tagc_stream stream);

/* dqkv from dy (B, T, C), qkv and the forward's y and lse, with the same `bf16` as the
 * forward. workspace: at least tagc_flash_attention_workspace_bytes(B, T, NH) bytes of
 * device memory, borrowed. dqkv must not overlap any input. */
tagc_status tagc_flash_attention_backward(float *dqkv, const float *dy, const float *qkv,
                                          const float *y, const float *lse, int B, int T,
                                          int NH, int hd, int bf16, void *workspace,
                                          size_t workspace_bytes, tagc_stream stream);

#ifdef __cplusplus
}
#endif

#endif
