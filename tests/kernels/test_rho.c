/* rho advisor: the advised load stays below the 3-hypergraph threshold with a margin that
 * grows for small sketches, rho falls as density rises, and bad input is rejected. The
 * lossless claim itself is tested end to end in test_kernels_homomorphism. */
#include "common/status.h"
#include "kernels/layout.h"
#include "kernels/rho.h"
#include "test.h"

int main(void) {
  const int64_t shards[] = {1000, 100000, 1 << 20, 1 << 24};
  for (size_t s = 0; s < sizeof shards / sizeof *shards; s++) {
    double prev = 1e30;
    for (double d = 0.01; d <= 1.0; d += 0.01) {
      double rho;
      CHECK_OK(tagc_rho_advise(d, shards[s], &rho));
      int64_t rows;
      CHECK_OK(tagc_layout_rows(shards[s], rho, &rows));
      double blocks = ceil((double)shards[s] / TAGC_BLOCK);
      double load = d * blocks / (double)rows;
      double target = fmin(TAGC_PEEL_LOAD_MAX,
                           TAGC_PEEL_LOAD_LIMIT - TAGC_PEEL_LOAD_SLOPE / sqrt((double)rows));
      CHECK_MSG(load <= target + 1e-12 || rho == TAGC_RHO_MIN,
                "shard %lld density %.2f: load %.3f > %.3f", (long long)shards[s], d, load, target);
      CHECK(rho <= prev);
      prev = rho;
    }
  }
  double small, large;
  CHECK_OK(tagc_rho_advise(0.1, 1 << 16, &small));
  CHECK_OK(tagc_rho_advise(0.1, 1 << 26, &large));
  CHECK(small < large); /* more margin for a small sketch */
  double rho;
  CHECK_OK(tagc_rho_advise(0.0, 1000, &rho));
  CHECK(rho == TAGC_RHO_MAX);
  CHECK_EQ_INT(tagc_rho_advise(-0.1, 1000, &rho), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_rho_advise(NAN, 1000, &rho), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_rho_advise(0.1, 0, &rho), TAGC_EINVAL);
  return TEST_END();
}
