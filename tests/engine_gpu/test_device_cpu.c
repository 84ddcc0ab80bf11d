/* The CPU device of engine/device.h, which the engine uses as its oracle: zeroed and aligned
 * allocations, copies of every kind, zero and add, the usage counters (current up and down,
 * peak kept), marks and syncs as no-ops, the kernel context, sums of squares, AdamW and the
 * model context dispatched to the CPU code, and the refused specs: malformed ones with
 * TAGC_EINVAL, "cuda" with TAGC_EUNSUPPORTED in a build without CUDA (with CUDA it opens a
 * visible GPU or is refused the same way when there is none). */
#include <stdint.h>
#include <string.h>

#include "common/status.h"
#include "test.h"
#include "model/adamw.h"
#include "engine/device.h"
#include "model/model.h"

static void check_usage(tagc_device *d, uint64_t want_current, uint64_t want_peak) {
  uint64_t current = 1, peak = 1;
  tagc_device_usage(d, &current, &peak);
  CHECK_EQ_INT(current, want_current);
  CHECK_EQ_INT(peak, want_peak);
}

static int all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i])
      return 0;
  return 1;
}

static void test_memory(tagc_device *d) {
  check_usage(d, 0, 0);
  unsigned char *a = NULL, *b = NULL, *z1 = NULL, *z2 = NULL;
  CHECK_OK(tagc_device_alloc(d, 1000, (void **)&a));
  CHECK(a && (uintptr_t)a % 256 == 0 && all_zero(a, 1000));
  check_usage(d, 1000, 1000);
  memset(a, 0x5A, 1000); /* freed memory comes back zeroed below */
  CHECK_OK(tagc_device_alloc(d, 3000, (void **)&b));
  CHECK(b && (uintptr_t)b % 256 == 0 && all_zero(b, 3000));
  check_usage(d, 4000, 4000);
  tagc_device_free(d, a);
  check_usage(d, 3000, 4000);
  CHECK_OK(tagc_device_alloc(d, 1000, (void **)&a));
  CHECK(a && all_zero(a, 1000));
  check_usage(d, 4000, 4000);
  CHECK_OK(tagc_device_alloc(d, 0, (void **)&z1));
  CHECK_OK(tagc_device_alloc(d, 0, (void **)&z2));
  CHECK(z1 && z2 && z1 != z2);
  check_usage(d, 4000, 4000);
  tagc_device_free(d, NULL);
  tagc_device_free(d, z1);
  tagc_device_free(d, z2);
  tagc_device_free(d, a);
  tagc_device_free(d, b);
  check_usage(d, 0, 4000);
}

static void test_copy_zero_add(tagc_device *d) {
  enum { N = 300 };
  float host[N], back[N], *x = NULL, *y = NULL;
  for (int i = 0; i < N; i++)
    host[i] = (float)i - 100.5f;
  CHECK_OK(tagc_device_alloc(d, N * sizeof(float), (void **)&x));
  CHECK_OK(tagc_device_alloc(d, N * sizeof(float), (void **)&y));
  if (!x || !y)
    return;
  CHECK_OK(tagc_device_copy(d, TAGC_LANE_COMPUTE, x, host, sizeof host, TAGC_COPY_H2D));
  CHECK_OK(tagc_device_copy(d, TAGC_LANE_COMM, y, x, sizeof host, TAGC_COPY_D2D));
  memset(back, 0, sizeof back);
  CHECK_OK(tagc_device_copy(d, TAGC_LANE_COMM, back, y, sizeof back, TAGC_COPY_D2H));
  CHECK(memcmp(back, host, sizeof host) == 0);

  CHECK_OK(tagc_device_add(d, TAGC_LANE_COMPUTE, y, x, N)); /* y = 2 x, exact */
  CHECK_OK(tagc_device_add(d, TAGC_LANE_COMPUTE, y, x, 0)); /* no-op */
  CHECK_OK(tagc_device_copy(d, TAGC_LANE_COMPUTE, back, y, sizeof back, TAGC_COPY_D2H));
  int doubled = 1;
  for (int i = 0; i < N; i++)
    doubled &= back[i] == 2 * host[i];
  CHECK(doubled);

  CHECK_OK(tagc_device_zero(d, TAGC_LANE_COMM, y + 10, 20 * sizeof(float)));
  CHECK_OK(tagc_device_copy(d, TAGC_LANE_COMPUTE, back, y, sizeof back, TAGC_COPY_D2H));
  int zeroed = 1;
  for (int i = 0; i < N; i++)
    zeroed &= back[i] == (i >= 10 && i < 30 ? 0.0f : 2 * host[i]);
  CHECK(zeroed);

  CHECK(tagc_device_copy(d, TAGC_LANE_COMPUTE, NULL, x, 4, TAGC_COPY_D2D) == TAGC_EINVAL);
  CHECK(tagc_device_copy(d, TAGC_LANE_COMPUTE, x, NULL, 4, TAGC_COPY_H2D) == TAGC_EINVAL);
  CHECK_OK(tagc_device_copy(d, TAGC_LANE_COMPUTE, NULL, NULL, 0, TAGC_COPY_D2H));
  tagc_device_free(d, x);
  tagc_device_free(d, y);
}

static void test_ordering(tagc_device *d) {
  CHECK_OK(tagc_device_sync(d, TAGC_LANE_COMPUTE));
  CHECK_OK(tagc_device_sync(d, TAGC_LANE_COMM));
  CHECK_OK(tagc_device_wait_mark(d, 5)); /* never recorded: returns at once */
  CHECK_OK(tagc_device_mark(d, TAGC_LANE_COMPUTE, 5));
  CHECK_OK(tagc_device_mark(d, TAGC_LANE_COMM, TAGC_DEVICE_MARKS - 1));
  CHECK_OK(tagc_device_wait_mark(d, 5));
  CHECK(tagc_device_mark(d, TAGC_LANE_COMPUTE, -1) == TAGC_EINVAL);
  CHECK(tagc_device_mark(d, TAGC_LANE_COMPUTE, TAGC_DEVICE_MARKS) == TAGC_EINVAL);
  CHECK(tagc_device_wait_mark(d, TAGC_DEVICE_MARKS) == TAGC_EINVAL);
  uint32_t rows[4];
  char ws[64];
  tagc_kernel_ctx ctx = tagc_device_kernel_ctx(d, TAGC_LANE_COMM, rows, ws, sizeof ws);
  CHECK(ctx.device == TAGC_DEVICE_CPU && ctx.stream == NULL && ctx.workspace == ws &&
        ctx.workspace_bytes == sizeof ws);
}

/* Sums of squares, AdamW and the model context reach the CPU code. */
static void test_compute(tagc_device *d) {
  float a[3] = {1, 2, 3}, b[2] = {-4, 0.5f};
  const float *x[2] = {a, b};
  size_t n[2] = {3, 2};
  double out[2] = {-1, -1};
  CHECK_OK(tagc_device_sumsq_many(d, x, n, 2, out));
  CHECK(out[0] == 14.0 && out[1] == 16.25);
  CHECK_OK(tagc_device_sumsq_many(d, x, n, 0, out));

  tagc_model_config mc = {.vocab = 256, .ctx = 8, .n_layer = 1, .n_head = 2, .d_model = 16};
  tagc_model_layout lay;
  CHECK_OK(tagc_model_layout_init(&lay, &mc));
  size_t np = lay.n_params, bytes = np * sizeof(float);
  float *p1 = malloc(bytes), *g = malloc(bytes), *p2 = malloc(bytes);
  float *m1 = calloc(np, 4), *v1 = calloc(np, 4), *m2 = calloc(np, 4), *v2 = calloc(np, 4);
  tagc_model_init_params(&lay, 3, p1);
  memcpy(p2, p1, bytes);
  for (size_t i = 0; i < np; i++)
    g[i] = (float)((int)(i % 13) - 6) * 1e-3f;
  tagc_adamw_config ac = {.lr = 1e-3f, .min_lr_ratio = 0.1f, .total_steps = 10, .beta1 = 0.9f,
                          .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1.0f};
  /* two ranges split inside a tensor, as two shards' segments */
  size_t split = np / 3;
  tagc_adamw_segment segs[2] = {{0, split, p1, g, m1, v1},
                                {split, np - split, p1 + split, g + split, m1 + split, v1 + split}};
  CHECK_OK(tagc_device_adamw(d, &lay, segs, 2, &ac, 1, ac.lr, 0.5f));
  CHECK_OK(tagc_adamw_update_range(&lay, 0, np, p2, g, m2, v2, &ac, 1, ac.lr, 0.5f));
  CHECK(memcmp(p1, p2, bytes) == 0 && memcmp(m1, m2, bytes) == 0 && memcmp(v1, v2, bytes) == 0);
  CHECK(memcmp(p1, g, bytes) != 0);

  tagc_device_model *m = NULL;
  CHECK_OK(tagc_device_model_new(d, &lay, 2, &m));
  CHECK(m && tagc_device_model_bytes(m) == tagc_model_acts_bytes(&lay, 2));
  tagc_device_model_free(m);
  tagc_device_model_free(NULL);
  free(p1), free(g), free(p2), free(m1), free(v1), free(m2), free(v2);
}

static void test_specs(void) {
  static const char *const bad[] = {"gpu", "cuda:x", "cuda:-1", "cuda:", "cuda:1x", "cudax",
                                    "cuda:99999", "", "CPU", NULL};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tagc_device *d = (tagc_device *)&d;
    tagc_status st = tagc_device_open(bad[i], TAGC_DEVICE_FP32, &d);
    CHECK_MSG(st == TAGC_EINVAL && d == NULL, "spec '%s': status %d", bad[i] ? bad[i] : "(null)",
              (int)st);
  }
  tagc_device *d = NULL;
  CHECK(tagc_device_open("cpu", TAGC_DEVICE_BF16, &d) == TAGC_EINVAL && d == NULL);
  CHECK(tagc_device_open("cpu", (tagc_device_compute)7, &d) == TAGC_EINVAL && d == NULL);

  tagc_status st = tagc_device_open("cuda", TAGC_DEVICE_FP32, &d);
#ifdef TEST_HAVE_CUDA
  CHECK_MSG(st == TAGC_OK || st == TAGC_EUNSUPPORTED, "cuda: status %d (%s)", (int)st,
            tagc_last_error());
  if (st == TAGC_OK)
    CHECK(tagc_device_is_cuda(d));
#else
  CHECK_MSG(st == TAGC_EUNSUPPORTED && d == NULL, "cuda without CUDA: status %d", (int)st);
  CHECK(strstr(tagc_last_error(), "CUDA") != NULL);
#endif
  tagc_device_close(d);
  tagc_device_close(NULL);
}

int main(void) {
  tagc_device *d = NULL;
  CHECK_OK(tagc_device_open("cpu", TAGC_DEVICE_FP32, &d));
  if (!d)
    return TEST_END();
  tagc_device_info info;
  tagc_device_get_info(d, &info);
  CHECK_EQ_STR(info.kind, "cpu");
  CHECK_EQ_INT(info.index, -1);
  CHECK(info.name[0] != 0 && info.total_bytes == 0);
  CHECK(!tagc_device_is_cuda(d));
  test_memory(d);
  test_copy_zero_add(d);
  test_ordering(d);
  test_compute(d);
  check_usage(d, 0, 4000);
  tagc_device_close(d);
  test_specs();
  return TEST_END();
}
