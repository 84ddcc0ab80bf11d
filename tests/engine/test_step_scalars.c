/* The per-step scalar exchange (engine/step_scalars.h): the packed layout every rank sends,
 * and each field's reduction over ranks (sums in rank order, maxima, the minimum link rate,
 * each rank's compute seconds), on hand-made gathers of three ranks. */
#include "test.h"
#include "engine/step_scalars.h"

enum { W = 3, NSEG = 2 };

/* Rank r's scalars: distinct values per field and rank, so a wrong slot or operation shows. */
static void fill(tagc_step_scalars *x, int r) {
  x->loss = 1.0 + r;
  x->sumsq = 0.1 * (r + 1);
  x->estimated = 10 * r;
  x->fb_in = 1e-3 * r;
  x->fb_out = 2e-3 * r;
  x->fb_abs = 3e-3 * r;
  x->nonfinite = r == 1;
  x->cannot_hold = r == 2;
  x->save_due = r == 1;
  x->copy_due = r != 1;
  x->stop_due = r == 2;
  x->link_rate = 1e8 * (3 - r); /* rank 2 is the slowest */
  x->compute_s = r == 1 ? 0.5 : 0.125 * (r + 1); /* rank 1 computes slowest */
  x->clock_s = 1000.0 + r;
  for (int i = 0; i < NSEG; i++) {
    x->global_bits[i] = 100 * (i + 1) + r;
    x->lane_density[i] = i == 0 ? 0.1 * r : 0.5 - 0.1 * r;
    x->codec_s[i] = r == i ? 9e-3 : 1e-3;
  }
}

int main(void) {
  tagc_step_scalars x, mine;
  CHECK_OK(tagc_step_scalars_init(&x, NSEG, W));
  CHECK_OK(tagc_step_scalars_init(&mine, NSEG, W));
  size_t n = tagc_step_scalars_count(&x);
  CHECK_EQ_INT((long long)n, 8 + 3 * NSEG + 6);
  double all[W][8 + 3 * NSEG + 6];
  for (int r = 0; r < W; r++) {
    fill(&mine, r);
    tagc_step_scalars_pack(&mine, all[r]);
  }
  /* the wire layout: 8 sums, the segments' bits, their lane densities, the rate, the codec
   * seconds (what one rank sends; the order is part of the exchange between builds) */
  CHECK(all[1][0] == 2.0 && all[1][6] == 1.0 && all[2][7] == 1.0);
  CHECK(all[2][8] == 102 && all[2][9] == 202);
  CHECK(all[2][10] == 0.1 * 2 && all[2][12] == 1e8);
  CHECK(all[0][13] == 9e-3 && all[1][14] == 9e-3);
  CHECK(all[1][15] == 1.0 && all[0][15] == 0.0); /* save_due */
  CHECK(all[0][16] == 1.0 && all[1][16] == 0.0 && all[2][16] == 1.0); /* copy_due */
  CHECK(all[2][17] == 1.0 && all[0][17] == 0.0); /* stop_due */
  CHECK(all[1][18] == 0.5 && all[2][18] == 0.375); /* compute_s */
  CHECK(all[2][19] == 1002.0);                    /* clock_s last */

  tagc_step_scalars_reduce(&x, &all[0][0], W);
  CHECK(x.loss == (0.0 + 1.0 + 2.0 + 3.0)); /* rank-order sum */
  CHECK(x.sumsq == ((0.0 + 0.1) + 0.2) + 0.1 * 3);
  CHECK(x.estimated == 30 && x.nonfinite == 1 && x.cannot_hold == 1 && x.save_due == 1 &&
        x.copy_due == 2 && x.stop_due == 1);
  CHECK(x.fb_in == (0.0 + 1e-3) + 2e-3);
  CHECK_MSG(x.link_rate == 1e8, "link rate %g: the slowest rank's", x.link_rate);
  CHECK(x.global_bits[0] == 303 && x.global_bits[1] == 603);
  CHECK(x.lane_density[0] == 0.1 * 2 && x.lane_density[1] == 0.5);
  CHECK(x.codec_s[0] == 9e-3 && x.codec_s[1] == 9e-3);
  CHECK_MSG(x.compute_s == 0.5, "compute_s %g: the slowest rank's", x.compute_s);
  CHECK(x.compute_ranks[0] == 0.125 && x.compute_ranks[1] == 0.5 && x.compute_ranks[2] == 0.375);
  CHECK_MSG(x.clock_s == 1002.0, "clock %g: the largest", x.clock_s);

  tagc_step_scalars_clear(&x);
  CHECK(x.loss == 0 && x.link_rate == 0 && x.global_bits[1] == 0 && x.codec_s[0] == 0);
  CHECK(x.compute_s == 0 && x.compute_ranks[1] == 0 && x.clock_s == 0);
  tagc_step_scalars_free(&x);
  tagc_step_scalars_free(&x); /* idempotent */
  tagc_step_scalars_free(&mine);
  return TEST_END();
}
