/* rho advisor: the advised load stays below the 3-hypergraph threshold with a margin that
 * grows for small sketches, at every lane count; rho falls as density rises, and bad input is
 * rejected. The lane count rule (tagc_layout_lanes). The
 * lossless claim itself is tested end to end in test_kernels_homomorphism. */
#include "common/status.h"
#include "kernels/layout.h"
#include "kernels/rho.h"
#include "test.h"

int main(void) {
  const int64_t shards[] = {1000, 100000, 1 << 20, 1 << 24};
  const int32_t lanes_list[] = {32, 64, 256, 1024};
  for (size_t s = 0; s < sizeof shards / sizeof *shards; s++)
    for (size_t k = 0; k < sizeof lanes_list / sizeof *lanes_list; k++) {
      int32_t lanes = lanes_list[k];
      double prev = 1e30;
      for (double d = 0.01; d <= 1.0; d += 0.01) {
        double rho;
        CHECK_OK(tagc_rho_advise(d, shards[s], lanes, &rho));
        int64_t rows;
        CHECK_OK(tagc_layout_rows(shards[s], lanes, rho, &rows));
        double blocks = ceil((double)shards[s] / TAGC_PAD) * (TAGC_PAD / lanes);
        double load = d * blocks / (double)rows;
        double target = fmin(TAGC_PEEL_LOAD_MAX,
                             TAGC_PEEL_LOAD_LIMIT - TAGC_PEEL_LOAD_SLOPE / sqrt((double)rows));
        CHECK_MSG(load <= target + 1e-12 || rho == TAGC_RHO_MIN,
                  "shard %lld K=%d density %.2f: load %.3f > %.3f", (long long)shards[s], lanes, d,
                  load, target);
        CHECK(rho <= prev);
        prev = rho;
      }
    }
  double small, large, narrow;
  CHECK_OK(tagc_rho_advise(0.1, 1 << 16, 1024, &small));
  CHECK_OK(tagc_rho_advise(0.1, 1 << 26, 1024, &large));
  CHECK(small < large); /* more margin for a small sketch */
  CHECK_OK(tagc_rho_advise(0.1, 1 << 16, 32, &narrow));
  CHECK(narrow > small); /* fewer, longer lanes: less margin per item */
  double rho;
  CHECK_OK(tagc_rho_advise(0.0, 1000, 1024, &rho));
  CHECK(rho == TAGC_RHO_MAX);
  CHECK_EQ_INT(tagc_rho_advise(-0.1, 1000, 1024, &rho), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_rho_advise(NAN, 1000, 1024, &rho), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_rho_advise(0.1, 0, 1024, &rho), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_rho_advise(0.1, 1000, 16, &rho), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_rho_advise(0.1, 1000, 96, &rho), TAGC_EINVAL);

  /* The lane count depends on the shard size alone: the largest power of two in [32, 1024]
   * leaving TAGC_LANE_BLOCKS blocks per lane. */
  CHECK_EQ_INT(tagc_layout_lanes(1), TAGC_LANES_MIN);
  CHECK_EQ_INT(tagc_layout_lanes(10240), 32);
  CHECK_EQ_INT(tagc_layout_lanes((int64_t)TAGC_LANE_BLOCKS * 64), 64);
  CHECK_EQ_INT(tagc_layout_lanes((int64_t)TAGC_LANE_BLOCKS * 64 - 1024), 32);
  CHECK_EQ_INT(tagc_layout_lanes((int64_t)TAGC_LANE_BLOCKS * 1024), 1024);
  CHECK_EQ_INT(tagc_layout_lanes((int64_t)TAGC_LANE_BLOCKS * 1024 - 1), 1024); /* padded up */
  CHECK_EQ_INT(tagc_layout_lanes((int64_t)TAGC_LANE_BLOCKS * 1024 - 1024), 512);
  CHECK_EQ_INT(tagc_layout_lanes((int64_t)1 << 31), 1024);
  for (int64_t n = 1; n < ((int64_t)1 << 26); n = n * 3 + 1) {
    int32_t k = tagc_layout_lanes(n);
    int64_t blocks = (n + TAGC_PAD - 1) / TAGC_PAD * TAGC_PAD / k;
    CHECK(k >= TAGC_LANES_MIN && k <= TAGC_LANES_MAX && (k & (k - 1)) == 0);
    CHECK(blocks >= TAGC_LANE_BLOCKS || k == TAGC_LANES_MIN);
    CHECK(k == TAGC_LANES_MAX || blocks < 2 * TAGC_LANE_BLOCKS);
  }
  return TEST_END();
}
