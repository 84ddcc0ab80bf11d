/* The one dispatch point of the TAGC-2 compression kernels: everything the sharded engine
 * calls per compressed unit, on the CPU (the oracle, OpenMP) or on CUDA, chosen by
 * ctx->device. The op headers (sparsify.h, bitmap.h, sketch.h, decode.h, bf16.h, rho.h,
 * wire.h, layout.h) hold the semantics; these wrappers only route.
 *
 * Per unit and step, on each rank (see docs/compression.md):
 *   tagc_kernels_sparsify   grad + residual -> kept, residual, local bitmap [W][words]
 *   (comm) bitmap exchange  OR reduce-scatter, or all-to-all + tagc_kernels_bitmap_or_many
 *   tagc_kernels_encode     kept, local bitmap -> sketches [W][cells] (dest-major)
 *   (comm) reduce-scatter   SUM of the sketches (fp32, or bf16 wire + fp32 accumulate)
 *   tagc_kernels_decode     my summed sketch + my global bitmap -> my shard of the sum
 *   tagc_kernels_lane_max + tagc_rho_advise  -> rho for the next step
 *
 * A CUDA build compiles kernels/dispatch.c with TAGC_KERNELS_CUDA defined and links the
 * *_cuda.cu objects; without it, device == TAGC_DEVICE_CUDA returns TAGC_EUNSUPPORTED. */
#ifndef TAGC_KERNELS_TAGC_KERNELS_H
#define TAGC_KERNELS_TAGC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/bf16.h"
#include "kernels/bitmap.h"
#include "kernels/decode.h"
#include "kernels/layout.h"
#include "kernels/q8.h"
#include "kernels/rho.h"
#include "kernels/sketch.h"
#include "kernels/sparsify.h"
#include "kernels/stream.h"
#include "kernels/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tagc_device_kind { TAGC_DEVICE_CPU = 0, TAGC_DEVICE_CUDA = 1 } tagc_device_kind;

/* Where and how a unit's kernels run. Caller-owned; all pointers borrowed. */
typedef struct tagc_kernel_ctx {
  tagc_device_kind device;
  tagc_stream stream;          /* CUDA: stream every launch is enqueued on; CPU: unused */
  const uint32_t *block_rows;  /* CUDA: device copy of layout->block_rows; CPU: unused */
  void *workspace;             /* >= tagc_kernels_workspace_bytes(); device memory on CUDA */
  size_t workspace_bytes;
  int threads;                 /* CPU: OpenMP threads the workspace was sized for */
} tagc_kernel_ctx;

/* Workspace for every op of a unit with layout l on `device` (the maximum over ops; one
 * workspace per unit, reused by its ops in sequence). threads: CPU OpenMP threads (<= 0:
 * the OpenMP maximum); ignored for CUDA. Returns 0 for a CUDA device in a build without
 * CUDA. */
size_t tagc_kernels_workspace_bytes(tagc_device_kind device, const tagc_layout *l, int threads);

/* Routed ops: same contracts, errors and pointer kinds (host for CPU, device for CUDA) as
 * the functions named. CPU calls block; CUDA calls enqueue on ctx->stream and return.
 * Extra error: TAGC_EUNSUPPORTED for CUDA in a build without it, TAGC_EINVAL for a NULL
 * ctx or unknown device. */
tagc_status tagc_kernels_sparsify(const tagc_kernel_ctx *ctx, const tagc_layout *l,
                                  float density, const float *grad, float *residual,
                                  float *kept, uint64_t *bitmap, tagc_sparsify_stats *stats);
tagc_status tagc_kernels_encode(const tagc_kernel_ctx *ctx, const tagc_layout *l,
                                const float *kept, const uint64_t *bitmap, float *sketch);
tagc_status tagc_kernels_decode(const tagc_kernel_ctx *ctx, const tagc_layout *l,
                                const float *sketch, const uint64_t *bitmap, float *out,
                                tagc_decode_stats *stats);
tagc_status tagc_kernels_bitmap_or_into(const tagc_kernel_ctx *ctx, uint64_t *dst,
                                        const uint64_t *src, int64_t words);
tagc_status tagc_kernels_bitmap_or_many(const tagc_kernel_ctx *ctx, uint64_t *dst,
                                        const uint64_t *src, int32_t count, int64_t words);
tagc_status tagc_kernels_popcount(const tagc_kernel_ctx *ctx, const uint64_t *words,
                                  int64_t nwords, int64_t *bits);
/* The densest lane of a shard bitmap of layout l (tagc_bitmap_lane_max_cpu with l's blocks,
 * lanes and seed). */
tagc_status tagc_kernels_lane_max(const tagc_kernel_ctx *ctx, const tagc_layout *l,
                                  const uint64_t *bitmap, int64_t *max_items);
tagc_status tagc_kernels_bf16_encode(const tagc_kernel_ctx *ctx, const float *src,
                                     uint16_t *dst, int64_t n);
tagc_status tagc_kernels_bf16_encode_stochastic(const tagc_kernel_ctx *ctx, const float *src,
                                                uint16_t *dst, int64_t n, uint64_t seed,
                                                uint64_t step, uint64_t first_index);
tagc_status tagc_kernels_bf16_decode(const tagc_kernel_ctx *ctx, const uint16_t *src,
                                     float *dst, int64_t n);
tagc_status tagc_kernels_bf16_accumulate(const tagc_kernel_ctx *ctx, float *acc,
                                         const uint16_t *in, int64_t n);
tagc_status tagc_kernels_q8_encode(const tagc_kernel_ctx *ctx, const float *src, int64_t n,
                                   void *chunk);
tagc_status tagc_kernels_q8_decode(const tagc_kernel_ctx *ctx, const void *chunks, int64_t n,
                                   int32_t count, int64_t stride, int64_t limit, float *dst);
tagc_status tagc_kernels_q8_encode_ef(const tagc_kernel_ctx *ctx, const float *src,
                                      const float *residual, int64_t n, void *chunk,
                                      float *residual_out);
tagc_status tagc_kernels_q8_decode_sum(const tagc_kernel_ctx *ctx, const void *chunks, int64_t n,
                                       int32_t count, int64_t stride, float *dst);
tagc_status tagc_kernels_bf16_add_encode(const tagc_kernel_ctx *ctx, uint16_t *out,
                                         const float *local, const uint16_t *in, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
