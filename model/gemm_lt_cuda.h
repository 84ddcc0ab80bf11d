/* A linear layer's forward as one cuBLASLt product with the bias in its epilogue:
 * out = add + bias + inp @ w^T without the separate pass that wrote add + bias into out
 * before the product (a write and a read of out per layer).
 *
 * The algorithm for each shape and pointer alignment is chosen once by cuBLASLt's heuristic
 * and kept (so a repeated step runs the same kernel: bit-identical). Where cuBLASLt offers
 * none, or TAGC_CUBLASLT=0 is set in the environment, the caller's cuBLAS path is used.
 * Internal to model/model_cuda.cu. */
#ifndef TAGC_MODEL_GEMM_LT_CUDA_H
#define TAGC_MODEL_GEMM_LT_CUDA_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tagc_gemm_lt tagc_gemm_lt;

/* A context on `stream` with `workspace` (device, ws_bytes; may be the cuBLAS handle's: both
 * run on the same stream). *out = NULL (and TAGC_OK) when TAGC_CUBLASLT=0 disables it.
 * Errors: TAGC_ENOMEM, TAGC_EINTERNAL (cuBLASLt's status in the message). */
tagc_status tagc_gemm_lt_create(cudaStream_t stream, void *workspace, size_t ws_bytes,
                                tagc_gemm_lt **out);
void tagc_gemm_lt_destroy(tagc_gemm_lt *g);

/* Row-major out (N, OC) = add (N, OC; NULL: none) + bias (OC) + inp (N, IC) @ w (OC, IC)^T,
 * fp32 out and bias; inp and w are fp32, or bf16 bits when bf16 is set (fp32 accumulation).
 * out may not alias inp or w (it may be add). TAGC_EUNSUPPORTED when cuBLASLt has no
 * algorithm for the shape (nothing was enqueued: use another path); TAGC_EINTERNAL when a
 * cuBLASLt call fails. */
tagc_status tagc_gemm_lt_linear(tagc_gemm_lt *g, float *out, const float *add, const void *inp,
                                const void *w, const float *bias, int N, int IC, int OC,
                                int bf16);

/* *usable = whether tagc_gemm_lt_linear with these arguments has an algorithm (0 when g is
 * NULL or bias is NULL), choosing it now if this shape is new; nothing is enqueued. The
 * pointers count for their alignment only. */
tagc_status tagc_gemm_lt_usable(tagc_gemm_lt *g, const float *out, const float *add,
                                const void *inp, const void *w, const float *bias, int N, int IC,
                                int OC, int bf16, int *usable);

#ifdef __cplusplus
}
#endif

#endif
