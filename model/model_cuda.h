/* The GPT model of model/model.h on one CUDA device: forward, backward and the
 * activations, with the same parameter arena layout, hooks and units as the CPU model (the
 * CPU model is the oracle; see tests/model_gpu).
 *
 * Compute dtypes:
 *  - TAGC_COMPUTE_FP32: every matrix product in fp32 (cuBLAS SGEMM, no TF32).
 *  - TAGC_COMPUTE_BF16: the operands of every matrix product (weights and activations) are
 *    rounded to bf16 (round to nearest even) just before the product, which accumulates in
 *    fp32 (cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F); parameters, gradients, stored
 *    activations and all other kernels stay fp32.
 *
 * Hooks: the tagc_unit_hooks of model.h with DEVICE pointers: unit_params returns the unit's
 * fp32 parameters on the device, unit_grads the unit's device gradient buffer (the backward
 * adds into it). Every kernel runs on the stream given at creation; a hook's return means
 * only that the work is ENQUEUED: unit_release(ctx, u) and unit_backward_done(ctx, u) are
 * called once unit u's kernels of the pass are enqueued and the unit's event
 * (tagc_model_cuda_unit_event) is recorded after them, so another stream can
 * cudaStreamWaitEvent on it before it reads the gradient or reuses the parameter buffer.
 *
 * Host synchronisation: only at the end of the forward (the loss is copied to the host) and
 * in create/destroy. Threading: one context is used by one host thread at a time; create,
 * forward, backward and destroy make the context's device current on the calling thread
 * (cudaSetDevice) and leave it so.
 * Determinism: no floating-point atomics; every reduction has a fixed order; cuBLAS runs
 * with atomics disabled and its own preallocated workspace, so the same inputs on the same
 * GPU give bit-identical results. */
#ifndef TAGC_WORKER_MODEL_CUDA_H
#define TAGC_WORKER_MODEL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C headers without their own C++ guards. */
#include "model/model.h"

/* cudaEvent_t, spelled without the CUDA headers (as tagc_stream). */
typedef struct CUevent_st *tagc_event;

typedef enum tagc_compute_dtype {
  TAGC_COMPUTE_FP32 = 0,
  TAGC_COMPUTE_BF16 = 1
} tagc_compute_dtype;

typedef struct tagc_model_cuda tagc_model_cuda;

/* Device bytes tagc_model_cuda_create would allocate for this layout, batch and dtype
 * (activations, scratch and the cuBLAS workspace; not the parameters, which the caller
 * owns). For the memory planner. */
size_t tagc_model_cuda_bytes_needed(const tagc_model_layout *layout, int max_batch,
                                    tagc_compute_dtype dtype);

/* Creates a context on CUDA device `device` for micro-batches of up to max_batch sequences,
 * working on `stream` (NULL = the legacy default stream). Allocates every device buffer up
 * front; the layout is copied. Errors: TAGC_EINVAL (max_batch < 1, bad dtype, no such
 * device), TAGC_ENOMEM (a device allocation or the cuBLAS handle failed; the detail names
 * the buffer and the bytes), TAGC_EINTERNAL (other CUDA/cuBLAS errors). Blocking. *out is
 * NULL on failure. */
tagc_status tagc_model_cuda_create(const tagc_model_layout *layout, int max_batch, int device,
                                   tagc_compute_dtype dtype, tagc_stream stream,
                                   tagc_model_cuda **out);

/* Waits for the stream, frees every device buffer. NULL is fine. */
void tagc_model_cuda_destroy(tagc_model_cuda *m);

/* Device bytes this context holds (what create allocated). */
size_t tagc_model_cuda_bytes(const tagc_model_cuda *m);

/* 1 when the context runs the fused attention (model/attention_flash_cuda.h: chosen by
 * TAGC_ATTENTION=flash in the environment at create, where the shape allows), 0 for the
 * chunked cuBLAS attention. */
int tagc_model_cuda_attention_fused(const tagc_model_cuda *m);

/* Event recorded on the stream after the last kernel of unit u in the latest pass (forward
 * or backward) that visited it; valid for the life of the context. NULL if u is out of
 * range. */
tagc_event tagc_model_cuda_unit_event(const tagc_model_cuda *m, int unit);

/* Forward over B sequences. tokens and targets are HOST arrays of B*ctx bytes (copied to the
 * device). Hooks give device pointers (see above). *loss_sum: the SUM over all B*ctx
 * positions of the cross-entropy in nats, summed in double on the device in a fixed order;
 * the only host synchronisation of the pass is this copy. Errors: TAGC_EINVAL (B outside
 * [1, max_batch], a token or target >= vocab), a hook's status, TAGC_EINTERNAL (a CUDA or
 * cuBLAS failure, with its message), TAGC_ENOMEM (cuBLAS could not allocate). */
tagc_status tagc_model_cuda_forward(tagc_model_cuda *m, tagc_unit_hooks *hooks,
                                    const uint16_t *tokens, const uint16_t *targets, int B,
                                    double *loss_sum);

/* Backward of the last forward: ADDS the gradient of (loss_scale * loss_sum) into the unit
 * gradient buffers (device), units L+1 .. 0, calling unit_backward_done after each unit's
 * kernels are enqueued and its event recorded. No host synchronisation. TAGC_EINVAL without
 * a completed forward (the backward consumes the stored probabilities); errors otherwise as
 * the forward. */
tagc_status tagc_model_cuda_backward(tagc_model_cuda *m, tagc_unit_hooks *hooks,
                                     float loss_scale);

#ifdef __cplusplus
}
#endif

#endif
