/* Unpeeled fraction of the owner decode as a function of global density and rho.
 *
 * For each (rho, density): a shard of --shard elements with i.i.d. non-zeros at that
 * density (the ORed global bitmap), Gaussian values, encoded and decoded with the real CPU
 * kernels in --lanes lanes (default: the shard size's, tagc_layout_lanes); prints the
 * fraction of non-zeros left to the estimate, averaged over --trials seeds, and the rho the
 * advisor would pick for that density.
 * Usage: tagc_peel_table [--shard N] [--lanes K] [--trials T] [--rho a,b,...]
 *                        [--density a,b,...] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "kernels/tagc_kernels.h"

static int parse_list(const char *s, double *out, int cap) {
  int n = 0;
  while (*s && n < cap) {
    char *end;
    out[n++] = strtod(s, &end);
    if (end == s)
      return -1;
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Fraction of non-zeros estimated for one shard, or -1 on error. */
static double unpeeled(int64_t n, int32_t lanes, double rho, double density, uint64_t seed) {
  tagc_layout l;
  if (tagc_layout_init_lanes(&l, 1, n, lanes, rho, (uint32_t)seed) != TAGC_OK)
    return -1;
  float *kept = calloc((size_t)l.shard_padded, sizeof(float));
  uint64_t *bm = calloc((size_t)l.bitmap_words, sizeof(uint64_t));
  float *sketch = malloc((size_t)l.sketch_cells * sizeof(float));
  float *out = malloc((size_t)n * sizeof(float));
  size_t wsb = tagc_decode_workspace_bytes(&l, 0);
  void *ws = malloc(wsb);
  double frac = -1;
  uint64_t rs = seed * 7919 + 1;
  uint64_t cut = (uint64_t)(density * 18446744073709551615.0);
  for (int64_t e = 0; e < n; e++)
    if (splitmix(&rs) < cut) {
      bm[e / 64] |= 1ull << (e % 64);
      kept[e] = (float)((double)(splitmix(&rs) >> 11) / 9007199254740992.0 + 0.5);
    }
  tagc_decode_stats st;
  if (kept && bm && sketch && out && ws && tagc_sketch_encode_cpu(&l, kept, bm, sketch) == TAGC_OK &&
      tagc_decode_cpu(&l, sketch, bm, out, &st, ws, wsb) == TAGC_OK)
    frac = st.nonzero ? (double)st.estimated / (double)st.nonzero : 0.0;
  free(kept);
  free(bm);
  free(sketch);
  free(out);
  free(ws);
  tagc_layout_free(&l);
  return frac;
}

int main(int argc, char **argv) {
  int64_t shard = 1 << 20;
  int32_t lanes = 0;
  int trials = 3;
  double rhos[32] = {2, 4}, dens[64] = {0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.38, 0.4, 0.45, 0.5};
  int nr = 2, nd = 11;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--shard") && i + 1 < argc)
      shard = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--lanes") && i + 1 < argc)
      lanes = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--trials") && i + 1 < argc)
      trials = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rho") && i + 1 < argc)
      nr = parse_list(argv[++i], rhos, 32);
    else if (!strcmp(argv[i], "--density") && i + 1 < argc)
      nd = parse_list(argv[++i], dens, 64);
    else {
      fprintf(stderr, "usage: %s [--shard N] [--lanes K] [--trials T] [--rho a,b] [--density a,b]\n",
              argv[0]);
      return 2;
    }
  }
  if (nr < 1 || nd < 1 || shard < 1 || trials < 1) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  if (!lanes)
    lanes = tagc_layout_lanes(shard);
  printf("shard %lld elements, %d lanes of %lld blocks, %d trials\n| density |", (long long)shard,
         lanes, (long long)((shard + TAGC_PAD - 1) / TAGC_PAD * TAGC_PAD / lanes), trials);
  for (int r = 0; r < nr; r++)
    printf(" rho=%g: load, unpeeled |", rhos[r]);
  printf(" advised rho |\n|---|");
  for (int r = 0; r < nr; r++)
    printf("---|");
  printf("---|\n");
  for (int d = 0; d < nd; d++) {
    printf("| %.3f |", dens[d]);
    for (int r = 0; r < nr; r++) {
      double sum = 0;
      for (int t = 0; t < trials; t++) {
        double f = unpeeled(shard, lanes, rhos[r], dens[d], 1000u * (uint64_t)t + 17);
        if (f < 0) {
          fprintf(stderr, "error: %s\n", tagc_last_error());
          return 1;
        }
        sum += f;
      }
      printf(" %.3f, %.2e |", dens[d] * rhos[r], sum / trials);
    }
    double adv = 0;
    tagc_rho_advise(dens[d], shard, lanes, &adv);
    printf(" %.2f |\n", adv);
    fflush(stdout);
  }
  return 0;
}
