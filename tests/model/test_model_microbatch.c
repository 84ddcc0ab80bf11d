/* Gradient accumulation over micro-batches: one pass over B = 4 sequences and two passes over
 * B = 2 added into the same gradient buffer, both with loss_scale = 1 / (4T), agree within a
 * max relative difference of 1e-6 per tensor (only the fp32 summation order differs), and the
 * loss sums agree. */
#include <stdio.h>

#include "model_fixture.h"
#include "test.h"

#define TOLERANCE 1e-6

int main(void) {
  fixture f;
  CHECK_OK(fixture_init(&f, &fixture_config, 4, 3));
  size_t n = f.layout.n_params;
  float scale = 1.0f / (float)(4 * f.layout.cfg.ctx);
  float *whole = malloc(n * sizeof(float));
  double loss_whole = 0, loss_a = 0, loss_b = 0;
  CHECK_OK(fixture_pass(&f, 0, 4, scale, &loss_whole));
  memcpy(whole, f.grads, n * sizeof(float));

  memset(f.grads, 0, n * sizeof(float));
  CHECK_OK(fixture_pass(&f, 0, 2, scale, &loss_a));
  CHECK_OK(fixture_pass(&f, 2, 2, scale, &loss_b));
  CHECK_NEAR(loss_a + loss_b, loss_whole, 1e-7 * loss_whole);

  double worst = 0;
  const char *worst_name = "";
  for (int t = 0; t < f.layout.n_tensors; t++) {
    const tagc_tensor_info *ti = &f.layout.tensors[t];
    double d = max_rel_diff(f.grads + ti->offset, whole + ti->offset, ti->numel);
    CHECK_MSG(d <= TOLERANCE, "%s: max rel diff %.3g > %g", ti->name, d, TOLERANCE);
    if (d > worst) {
      worst = d;
      worst_name = ti->name;
    }
  }
  printf("micro-batches 2+2 vs 4: worst %s max rel diff %.3g (tolerance %g)\n", worst_name, worst,
         TOLERANCE);
  free(whole);
  fixture_free(&f);
  return TEST_END();
}
