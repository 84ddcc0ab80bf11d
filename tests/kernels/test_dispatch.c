/* The dispatch point routes CPU contexts to the CPU oracles (same results bit for bit as the
 * direct calls) and rejects a NULL context or an unknown device. */
#include "common/status.h"
#include "kernels/tagc_kernels.h"
#include "kgen.h"
#include "test.h"

int main(void) {
  const int world = 3;
  const int64_t n = 20000;
  tagc_layout l;
  CHECK_OK(tagc_layout_init(&l, world, n, 3.0, 5));
  tagc_kernel_ctx ctx = {.device = TAGC_DEVICE_CPU, .threads = 2};
  ctx.workspace_bytes = tagc_kernels_workspace_bytes(TAGC_DEVICE_CPU, &l, 2);
  CHECK(ctx.workspace_bytes >= tagc_sparsify_workspace_bytes(&l, 2));
  CHECK(ctx.workspace_bytes >= tagc_decode_workspace_bytes(&l, 2));
  ctx.workspace = malloc(ctx.workspace_bytes);
  float *grad = malloc(world * n * sizeof(float)), *res_a = calloc(world * n, sizeof(float));
  float *res_b = calloc(world * n, sizeof(float));
  float *kept_a = malloc(world * l.shard_padded * sizeof(float));
  float *kept_b = malloc(world * l.shard_padded * sizeof(float));
  uint64_t *bm_a = malloc(world * l.bitmap_words * sizeof(uint64_t));
  uint64_t *bm_b = malloc(world * l.bitmap_words * sizeof(uint64_t));
  float *sk_a = malloc(world * l.sketch_cells * sizeof(float));
  float *sk_b = malloc(world * l.sketch_cells * sizeof(float));
  float *out_a = malloc(n * sizeof(float)), *out_b = malloc(n * sizeof(float));
  tagc_sparsify_stats st_a[3], st_b[3];
  tagc_decode_stats ds_a, ds_b;
  kgen g = {17};
  kgen_fill(&g, KGEN_LOGNORMAL, grad, world * n);

  CHECK_OK(tagc_kernels_sparsify(&ctx, &l, 0.08f, grad, res_a, kept_a, bm_a, st_a));
  CHECK_OK(tagc_sparsify_cpu(&l, 0.08f, grad, res_b, kept_b, bm_b, st_b, ctx.workspace,
                             ctx.workspace_bytes));
  CHECK(memcmp(kept_a, kept_b, world * l.shard_padded * sizeof(float)) == 0);
  CHECK(memcmp(bm_a, bm_b, world * l.bitmap_words * sizeof(uint64_t)) == 0);
  CHECK_OK(tagc_kernels_encode(&ctx, &l, kept_a, bm_a, sk_a));
  CHECK_OK(tagc_sketch_encode_cpu(&l, kept_b, bm_b, sk_b));
  CHECK(memcmp(sk_a, sk_b, world * l.sketch_cells * sizeof(float)) == 0);
  CHECK_OK(tagc_kernels_decode(&ctx, &l, sk_a, bm_a, out_a, &ds_a));
  CHECK_OK(tagc_decode_cpu(&l, sk_b, bm_b, out_b, &ds_b, ctx.workspace, ctx.workspace_bytes));
  CHECK(memcmp(out_a, out_b, n * sizeof(float)) == 0);
  CHECK_EQ_INT(ds_a.estimated, ds_b.estimated);
  int64_t bits = 0, lane = 0;
  CHECK_OK(tagc_kernels_popcount(&ctx, bm_a, l.bitmap_words, &bits));
  CHECK_EQ_INT(bits, st_a[0].kept);
  CHECK_OK(tagc_kernels_lane_max(&ctx, &l, bm_a, &lane));
  CHECK(lane > 0 && lane <= l.blocks);
  CHECK_OK(tagc_kernels_bitmap_or_many(&ctx, bm_b, bm_a, world, l.bitmap_words));
  CHECK_OK(tagc_kernels_bitmap_or_into(&ctx, bm_b, bm_a, l.bitmap_words));

  uint16_t *h = malloc(n * sizeof(uint16_t));
  CHECK_OK(tagc_kernels_bf16_encode(&ctx, grad, h, n));
  CHECK_EQ_INT(h[7], tagc_bf16_round(grad[7]));
  CHECK_OK(tagc_kernels_bf16_encode_stochastic(&ctx, grad, h, n, 1, 2, 3));
  CHECK_OK(tagc_kernels_bf16_decode(&ctx, h, out_a, n));
  CHECK_OK(tagc_kernels_bf16_accumulate(&ctx, out_a, h, n));
  CHECK_OK(tagc_kernels_bf16_add_encode(&ctx, h, out_a, h, n));

  CHECK_EQ_INT(tagc_kernels_encode(NULL, &l, kept_a, bm_a, sk_a), TAGC_EINVAL);
  tagc_kernel_ctx bad = ctx;
  bad.device = (tagc_device_kind)7;
  CHECK_EQ_INT(tagc_kernels_encode(&bad, &l, kept_a, bm_a, sk_a), TAGC_EINVAL);

  free(h);
  free(grad);
  free(res_a);
  free(res_b);
  free(kept_a);
  free(kept_b);
  free(bm_a);
  free(bm_b);
  free(sk_a);
  free(sk_b);
  free(out_a);
  free(out_b);
  free(ctx.workspace);
  tagc_layout_free(&l);
  return TEST_END();
}
