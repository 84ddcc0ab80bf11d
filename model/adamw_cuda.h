/* AdamW and the gradient sum of squares on a device shard (the CUDA twins of
 * tagc_adamw_update_range and tagc_sumsq in model/adamw.h).
 *
 * Device pointers; work is enqueued on `stream`, nothing synchronises the host. Both are
 * deterministic (fixed launch shapes, fixed-order reductions, no atomics on floats). */
#ifndef TAGC_WORKER_ADAMW_CUDA_H
#define TAGC_WORKER_ADAMW_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C headers without their own C++ guards. */
#include "model/adamw.h"
#include "model/model.h"

/* Segments one launch of tagc_sumsq_many_cuda takes (more are done in several). */
#define TAGC_SUMSQ_MANY_MAX 128

/* Bytes of device workspace tagc_sumsq_cuda and tagc_sumsq_many_cuda need (a fixed number
 * of partial sums per segment of a launch: 1 MiB). */
size_t tagc_sumsq_cuda_workspace_bytes(void);

/* *out_dev (one device double) = sum of x[i]^2, i < n, accumulated in double: a first pass
 * of a fixed grid, each block summing a fixed contiguous range in a fixed order, then one
 * block adding the block sums in order. The bits depend only on x and n (not on the GPU
 * model), and equal tagc_sumsq up to the rounding of the double additions. workspace: at
 * least tagc_sumsq_cuda_workspace_bytes() device bytes, 8-byte aligned. A non-finite x makes
 * the result non-finite. Errors: TAGC_EINVAL (NULL pointer), TAGC_EINTERNAL (launch). */
tagc_status tagc_sumsq_cuda(const float *x, size_t n, double *out_dev, void *workspace,
                            tagc_stream stream);

/* out_dev[i] = tagc_sumsq_cuda of (x[i], n[i]) for i < count, bit for bit, in two launches
 * per TAGC_SUMSQ_MANY_MAX segments instead of two per segment. x and n are host arrays of
 * device pointers and sizes. Errors: TAGC_EINVAL (NULL pointer, count < 0), TAGC_EINTERNAL. */
tagc_status tagc_sumsq_many_cuda(const float *const *x, const size_t *n, int count,
                                 double *out_dev, void *workspace, tagc_stream stream);

/* Ranges one launch of tagc_adamw_many_cuda takes (more are done in several). */
#define TAGC_ADAMW_MANY_MAX 64

/* One AdamW step on `count` arena ranges (segs[i]: [arena_lo, arena_lo + n) with device
 * pointers at element arena_lo of their arenas): the math of tagc_adamw_update_range (same
 * per-step constants computed on the host in double, decay only on tensors with `decay`,
 * gradient = grads * grad_scale, bias corrections with the 1-based `step`), each element bit
 * for bit what one range at a time gives. Launches: one flag clear, then per
 * TAGC_ADAMW_MANY_MAX runs (a range split where the decay flag changes) one check and one
 * update, each block a fixed chunk of one run, instead of three or more launches per range.
 * Non-finite gradients: the check sets *nonfinite_dev (one device int, set to 0 or 1 by the
 * call) when a gradient of any range is not finite, and then no range is updated (params,
 * m and v untouched); the caller reads the flag when it next synchronises (the CPU version
 * returns TAGC_ENUMERIC instead). Errors on the host: TAGC_EINVAL (a range outside the
 * layout, step < 1, NULL, count < 0), TAGC_ENUMERIC (lr or grad_scale not finite),
 * TAGC_EINTERNAL (launch). */
tagc_status tagc_adamw_many_cuda(const tagc_model_layout *layout, const tagc_adamw_segment *segs,
                                 int count, const tagc_adamw_config *cfg, int64_t step, float lr,
                                 float grad_scale, int *nonfinite_dev, tagc_stream stream);

/* tagc_adamw_many_cuda on the one range [arena_lo, arena_lo + n). */
tagc_status tagc_adamw_update_range_cuda(const tagc_model_layout *layout, size_t arena_lo,
                                         size_t n, float *params, const float *grads, float *m,
                                         float *v, const tagc_adamw_config *cfg, int64_t step,
                                         float lr, float grad_scale, int *nonfinite_dev,
                                         tagc_stream stream);

#ifdef __cplusplus
}
#endif

#endif
