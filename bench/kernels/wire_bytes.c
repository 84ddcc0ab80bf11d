/* Bytes each rank sends per compressed unit, against an fp32 reduce-scatter, at the rho the
 * advisor picks (so nothing is left to the estimate).
 *
 * Per unit of N = W*n elements (ring collectives, per rank):
 *   fp32 reduce-scatter baseline   (W-1)/W * 4N
 *   bitmap OR exchange             (W-1)/W * W * P/8       P = n padded to 1024
 *   sketch reduce-scatter          (W-1)/W * W * R*K*s     s = 4 (fp32) or 2 (bf16 wire),
 *                                                          K = tagc_layout_lanes(n) lanes
 * Global density of the union of W masks at local density d: d (masks identical, best
 * case) up to 1-(1-d)^W (independent masks, worst case). rho comes from tagc_rho_advise on
 * the expected densest lane: mean + 4 sigma of a Binomial(G, d_glob) lane count.
 * Usage: tagc_wire_bytes [--shard n] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/tagc_kernels.h"

static void row(int w, double d, const char *masks, double dglob, int64_t n) {
  int32_t lanes = tagc_layout_lanes(n);
  double padded = ceil((double)n / TAGC_PAD) * TAGC_PAD, blocks = padded / lanes;
  double lane = fmin(1.0, dglob + 4.0 * sqrt(dglob * (1.0 - dglob) / blocks));
  double rho;
  int64_t rows;
  if (tagc_rho_advise(lane, n, lanes, &rho) != TAGC_OK ||
      tagc_layout_rows(n, lanes, rho, &rows) != TAGC_OK) {
    fprintf(stderr, "error: %s\n", tagc_last_error());
    exit(1);
  }
  double share = (double)(w - 1) / w, base = share * 4.0 * w * (double)n;
  double bitmap = share * w * padded / 8.0;
  double sk32 = share * w * (double)rows * lanes * 4.0, sk16 = sk32 / 2.0;
  printf("| %d | %.2f | %s | %.3f | %.2f | %.1f | %.2fx | %.2fx |\n", w, d, masks, dglob, rho,
         (bitmap + sk32) / base * 100.0, base / (bitmap + sk32), base / (bitmap + sk16));
}

int main(int argc, char **argv) {
  int64_t n = 4 << 20;
  if (argc == 3 && !strcmp(argv[1], "--shard"))
    n = atoll(argv[2]);
  else if (argc != 1) {
    fprintf(stderr, "usage: %s [--shard n]\n", argv[0]);
    return 2;
  }
  printf("shard n = %lld elements per rank\n", (long long)n);
  printf("| W | local d | masks | global d | rho | fp32-wire bytes %% of baseline | "
         "ratio fp32 wire | ratio bf16 wire |\n|---|---|---|---|---|---|---|---|\n");
  const int worlds[] = {2, 4, 8};
  const double dens[] = {0.05, 0.10};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) {
      row(worlds[i], dens[j], "identical", dens[j], n);
      row(worlds[i], dens[j], "independent", 1.0 - pow(1.0 - dens[j], worlds[i]), n);
    }
  return 0;
}
