/* The single place that chooses between the CPU and CUDA kernels (see tagc_kernels.h). */
#include "kernels/tagc_kernels.h"

#ifdef TAGC_KERNELS_CUDA
#define ON_CUDA(call) return (call)
#else
#define ON_CUDA(call) return tagc_errorf(TAGC_EUNSUPPORTED, "kernels: built without CUDA")
#endif

/* Routes one op: CPU call, CUDA call; rejects a NULL ctx or an unknown device. */
#define DISPATCH(ctx, cpu_call, cuda_call)                                         \
  do {                                                                             \
    if (!(ctx))                                                                    \
      return tagc_errorf(TAGC_EINVAL, "kernels: NULL context");                    \
    if ((ctx)->device == TAGC_DEVICE_CPU)                                          \
      return (cpu_call);                                                           \
    if ((ctx)->device == TAGC_DEVICE_CUDA)                                         \
      ON_CUDA(cuda_call);                                                          \
    return tagc_errorf(TAGC_EINVAL, "kernels: unknown device %d", (int)(ctx)->device); \
  } while (0)

size_t tagc_kernels_workspace_bytes(tagc_device_kind device, const tagc_layout *l, int threads) {
  size_t a = 0, b = 0;
  if (device == TAGC_DEVICE_CPU) {
    a = tagc_sparsify_workspace_bytes(l, threads);
    b = tagc_decode_workspace_bytes(l, threads);
  }
#ifdef TAGC_KERNELS_CUDA
  if (device == TAGC_DEVICE_CUDA) {
    a = tagc_sparsify_cuda_workspace_bytes(l);
    b = tagc_decode_cuda_workspace_bytes(l);
  }
#endif
  return a > b ? a : b;
}

tagc_status tagc_kernels_sparsify(const tagc_kernel_ctx *ctx, const tagc_layout *l,
                                  float density, const float *grad, float *residual,
                                  float *kept, uint64_t *bitmap, tagc_sparsify_stats *stats) {
  DISPATCH(ctx,
           tagc_sparsify_cpu(l, density, grad, residual, kept, bitmap, stats, ctx->workspace,
                             ctx->workspace_bytes),
           tagc_sparsify_cuda(l, density, grad, residual, kept, bitmap, stats, ctx->workspace,
                              ctx->workspace_bytes, ctx->stream));
}

tagc_status tagc_kernels_encode(const tagc_kernel_ctx *ctx, const tagc_layout *l,
                                const float *kept, const uint64_t *bitmap, float *sketch) {
  DISPATCH(ctx, tagc_sketch_encode_cpu(l, kept, bitmap, sketch),
           tagc_sketch_encode_cuda(l, ctx->block_rows, kept, bitmap, sketch, ctx->stream));
}

tagc_status tagc_kernels_decode(const tagc_kernel_ctx *ctx, const tagc_layout *l,
                                const float *sketch, const uint64_t *bitmap, float *out,
                                tagc_decode_stats *stats) {
  DISPATCH(ctx,
           tagc_decode_cpu(l, sketch, bitmap, out, stats, ctx->workspace, ctx->workspace_bytes),
           tagc_decode_cuda(l, ctx->block_rows, sketch, bitmap, out, stats, ctx->workspace,
                            ctx->workspace_bytes, ctx->stream));
}

tagc_status tagc_kernels_bitmap_or_into(const tagc_kernel_ctx *ctx, uint64_t *dst,
                                        const uint64_t *src, int64_t words) {
  DISPATCH(ctx, tagc_bitmap_or_into_cpu(dst, src, words),
           tagc_bitmap_or_into_cuda(dst, src, words, ctx->stream));
}

tagc_status tagc_kernels_bitmap_or_many(const tagc_kernel_ctx *ctx, uint64_t *dst,
                                        const uint64_t *src, int32_t count, int64_t words) {
  DISPATCH(ctx, tagc_bitmap_or_many_cpu(dst, src, count, words),
           tagc_bitmap_or_many_cuda(dst, src, count, words, ctx->stream));
}

tagc_status tagc_kernels_popcount(const tagc_kernel_ctx *ctx, const uint64_t *words,
                                  int64_t nwords, int64_t *bits) {
  DISPATCH(ctx, tagc_bitmap_popcount_cpu(words, nwords, bits),
           tagc_bitmap_popcount_cuda(words, nwords, bits, ctx->stream));
}

tagc_status tagc_kernels_lane_max(const tagc_kernel_ctx *ctx, const tagc_layout *l,
                                  const uint64_t *bitmap, int64_t *max_items) {
  if (!l)
    return tagc_errorf(TAGC_EINVAL, "kernels: NULL layout");
  DISPATCH(ctx, tagc_bitmap_lane_max_cpu(bitmap, l->blocks, l->lanes, l->seed, max_items),
           tagc_bitmap_lane_max_cuda(bitmap, l->blocks, l->lanes, l->seed, max_items, ctx->stream));
}

tagc_status tagc_kernels_bf16_encode(const tagc_kernel_ctx *ctx, const float *src,
                                     uint16_t *dst, int64_t n) {
  DISPATCH(ctx, tagc_bf16_encode_cpu(src, dst, n),
           tagc_bf16_encode_cuda(src, dst, n, ctx->stream));
}

tagc_status tagc_kernels_bf16_encode_stochastic(const tagc_kernel_ctx *ctx, const float *src,
                                                uint16_t *dst, int64_t n, uint64_t seed,
                                                uint64_t step, uint64_t first_index) {
  DISPATCH(ctx, tagc_bf16_encode_stochastic_cpu(src, dst, n, seed, step, first_index),
           tagc_bf16_encode_stochastic_cuda(src, dst, n, seed, step, first_index, ctx->stream));
}

tagc_status tagc_kernels_bf16_decode(const tagc_kernel_ctx *ctx, const uint16_t *src,
                                     float *dst, int64_t n) {
  DISPATCH(ctx, tagc_bf16_decode_cpu(src, dst, n),
           tagc_bf16_decode_cuda(src, dst, n, ctx->stream));
}

tagc_status tagc_kernels_bf16_accumulate(const tagc_kernel_ctx *ctx, float *acc,
                                         const uint16_t *in, int64_t n) {
  DISPATCH(ctx, tagc_bf16_accumulate_cpu(acc, in, n),
           tagc_bf16_accumulate_cuda(acc, in, n, ctx->stream));
}

tagc_status tagc_kernels_bf16_add_encode(const tagc_kernel_ctx *ctx, uint16_t *out,
                                         const float *local, const uint16_t *in, int64_t n) {
  DISPATCH(ctx, tagc_bf16_add_encode_cpu(out, local, in, n),
           tagc_bf16_add_encode_cuda(out, local, in, n, ctx->stream));
}

tagc_status tagc_kernels_q8_encode(const tagc_kernel_ctx *ctx, const float *src, int64_t n,
                                   void *chunk) {
  DISPATCH(ctx, tagc_q8_encode_cpu(src, n, chunk), tagc_q8_encode_cuda(src, n, chunk, ctx->stream));
}

tagc_status tagc_kernels_q8_decode(const tagc_kernel_ctx *ctx, const void *chunks, int64_t n,
                                   int32_t count, int64_t stride, int64_t limit, float *dst) {
  DISPATCH(ctx, tagc_q8_decode_cpu(chunks, n, count, stride, limit, dst),
           tagc_q8_decode_cuda(chunks, n, count, stride, limit, dst, ctx->stream));
}

tagc_status tagc_kernels_q8_encode_ef(const tagc_kernel_ctx *ctx, const float *src,
                                      const float *residual, int64_t n, void *chunk,
                                      float *residual_out) {
  DISPATCH(ctx, tagc_q8_encode_ef_cpu(src, residual, n, chunk, residual_out),
           tagc_q8_encode_ef_cuda(src, residual, n, chunk, residual_out, ctx->stream));
}

tagc_status tagc_kernels_q8_decode_sum(const tagc_kernel_ctx *ctx, const void *chunks, int64_t n,
                                       int32_t count, int64_t stride, float *dst) {
  DISPATCH(ctx, tagc_q8_decode_sum_cpu(chunks, n, count, stride, dst),
           tagc_q8_decode_sum_cuda(chunks, n, count, stride, dst, ctx->stream));
}
