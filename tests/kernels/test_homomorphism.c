/* End to end over W simulated ranks: sparsify -> OR of bitmaps -> sum of sketches -> owner
 * decode == sum of the ranks' kept values (whenever rho follows the advisor), at the lane
 * count the shard size gives and at 32, 64 and 1024 lanes, plus error-feedback mass
 * conservation, encode linearity and decode determinism. */
#include <float.h>
#include <omp.h>

#include "common/status.h"
#include "kernels/tagc_kernels.h"
#include "kgen.h"
#include "test.h"

/* Decode tolerance: |decoded - exact sum| <= DECODE_TOL * (largest |kept| in the shard).
 * Cell sums and peel subtractions round in fp32 (relative 2^-24 per operation; a cell adds
 * up a handful of items and a peel chain subtracts a few more), so 2^-16 leaves a margin
 * of about 2^8 over the worst observed error, which is printed. */
#define DECODE_TOL (1.0 / 65536.0)
/* With a bf16 wire every rank's sketch cell is rounded to 8 significant bits (relative
 * 2^-9 of the cell, which sums several items) before the fp32 sum, and peeling carries
 * that error along its chains: the measured worst is 1.2e-2 of the largest |kept| (W = 3,
 * d = 0.1); 2^-5 keeps a 2.5x margin. */
#define DECODE_TOL_BF16 (1.0 / 32.0)

typedef struct rank_bufs {
  float *grad, *res0, *res, *kept, *sketch;
  uint64_t *bitmap;
  tagc_sparsify_stats *stats;
} rank_bufs;

typedef struct sim {
  int world;
  int64_t n;
  tagc_layout geo; /* rho-independent part: shard sizes, bitmap and kept layout */
  rank_bufs *rk;
  void *ws;
  size_t ws_bytes;
} sim;

/* lanes: the sketch's lane count (0: tagc_layout_lanes(n)). */
static void sim_init(sim *s, int world, int64_t n, int32_t lanes, float density, uint64_t seed) {
  s->world = world;
  s->n = n;
  CHECK_OK(tagc_layout_init_lanes(&s->geo, world, n, lanes ? lanes : tagc_layout_lanes(n), 2.0, 1));
  s->ws_bytes = tagc_sparsify_workspace_bytes(&s->geo, 0);
  s->ws = malloc(s->ws_bytes);
  s->rk = calloc((size_t)world, sizeof *s->rk);
  kgen g = {seed};
  for (int r = 0; r < world; r++) {
    rank_bufs *b = &s->rk[r];
    int64_t total = world * n;
    b->grad = malloc((size_t)total * sizeof(float));
    b->res0 = malloc((size_t)total * sizeof(float));
    b->res = malloc((size_t)total * sizeof(float));
    b->kept = malloc((size_t)(world * s->geo.shard_padded) * sizeof(float));
    b->bitmap = malloc((size_t)(world * s->geo.bitmap_words) * sizeof(uint64_t));
    b->stats = calloc((size_t)world, sizeof *b->stats);
    kgen_fill(&g, KGEN_LOGNORMAL, b->grad, total);
    for (int64_t i = 0; i < total; i++)
      b->res0[i] = 0.1f * kgen_sample(&g, KGEN_LOGNORMAL);
    memcpy(b->res, b->res0, (size_t)total * sizeof(float));
    CHECK_OK(tagc_sparsify_cpu(&s->geo, density, b->grad, b->res, b->kept, b->bitmap, b->stats,
                               s->ws, s->ws_bytes));
  }
}

static void sim_free(sim *s) {
  for (int r = 0; r < s->world; r++) {
    rank_bufs *b = &s->rk[r];
    free(b->grad);
    free(b->res0);
    free(b->res);
    free(b->kept);
    free(b->bitmap);
    free(b->sketch);
    free(b->stats);
  }
  free(s->rk);
  free(s->ws);
  tagc_layout_free(&s->geo);
}

/* Sum over ranks of (kept + new residual) equals the sum of fp32(grad + old residual):
 * nothing the sparsifier drops is lost. */
static void check_mass(const sim *s) {
  int64_t bad = 0;
  for (int32_t j = 0; j < s->world; j++)
    for (int64_t e = 0; e < s->n; e++) {
      double sent = 0, raw = 0;
      for (int r = 0; r < s->world; r++) {
        const rank_bufs *b = &s->rk[r];
        int64_t i = j * s->n + e;
        sent += (double)b->kept[j * s->geo.shard_padded + e] + (double)b->res[i];
        raw += (double)(b->grad[i] + b->res0[i]);
      }
      bad += sent != raw;
    }
  CHECK_EQ_INT(bad, 0);
}

/* Owner j's global bitmap as an all-to-all + OR would build it (recv = W parts). */
static void global_bitmap(const sim *s, int32_t j, uint64_t *recv, uint64_t *out) {
  int64_t words = s->geo.bitmap_words;
  for (int r = 0; r < s->world; r++)
    memcpy(recv + r * words, s->rk[r].bitmap + j * words, (size_t)words * sizeof(uint64_t));
  CHECK_OK(tagc_bitmap_or_many_cpu(out, recv, s->world, words));
}

/* Global density of the unit; *lane_density gets the densest lane's over all owners. */
static double measured_global_density(const sim *s, double *lane_density) {
  uint64_t *recv = malloc((size_t)(s->world * s->geo.bitmap_words) * sizeof(uint64_t));
  uint64_t *glob = malloc((size_t)s->geo.bitmap_words * sizeof(uint64_t));
  int64_t bits = 0, lane_max = 0;
  for (int32_t j = 0; j < s->world; j++) {
    int64_t b, m;
    global_bitmap(s, j, recv, glob);
    CHECK_OK(tagc_bitmap_popcount_cpu(glob, s->geo.bitmap_words, &b));
    CHECK_OK(tagc_bitmap_lane_max_cpu(glob, s->geo.blocks, s->geo.lanes, s->geo.seed, &m));
    bits += b;
    lane_max = m > lane_max ? m : lane_max;
  }
  free(recv);
  free(glob);
  *lane_density = (double)lane_max / (double)s->geo.blocks;
  return (double)bits / (double)(s->world * s->n);
}

/* Encodes every rank with layout l, reduces the sketches to each owner (fp32, or bf16 on
 * the wire with fp32 accumulation), decodes, and compares with the exact sum of kept values. Returns the total estimated count; *maxrel
 * gets the worst error relative to the shard's largest |kept|. */
static int64_t sim_decode(sim *s, const tagc_layout *l, int bf16_wire, double *maxrel) {
  int64_t cells = l->sketch_cells, words = l->bitmap_words, estimated = 0;
  float *sum = malloc((size_t)cells * sizeof(float));
  float *out = malloc((size_t)s->n * sizeof(float));
  uint64_t *recv = malloc((size_t)(s->world * words) * sizeof(uint64_t));
  uint64_t *glob = malloc((size_t)words * sizeof(uint64_t));
  size_t dws_bytes = tagc_decode_workspace_bytes(l, 0);
  void *dws = malloc(dws_bytes);
  uint16_t *wire = malloc((size_t)cells * sizeof(uint16_t));
  double tol = bf16_wire ? DECODE_TOL_BF16 : DECODE_TOL;
  *maxrel = 0;
  for (int r = 0; r < s->world; r++) {
    free(s->rk[r].sketch);
    s->rk[r].sketch = malloc((size_t)(s->world * cells) * sizeof(float));
    CHECK_OK(tagc_sketch_encode_cpu(l, s->rk[r].kept, s->rk[r].bitmap, s->rk[r].sketch));
  }
  for (int32_t j = 0; j < s->world; j++) {
    memset(sum, 0, (size_t)cells * sizeof(float));
    for (int r = 0; r < s->world; r++) {
      const float *part = s->rk[r].sketch + j * cells;
      if (bf16_wire) { /* rank r sends bf16, the owner accumulates in fp32 */
        CHECK_OK(tagc_bf16_encode_cpu(part, wire, cells));
        CHECK_OK(tagc_bf16_accumulate_cpu(sum, wire, cells));
      } else {
        for (int64_t c = 0; c < cells; c++)
          sum[c] += part[c];
      }
    }
    global_bitmap(s, j, recv, glob);
    tagc_decode_stats st;
    CHECK_OK(tagc_decode_cpu(l, sum, glob, out, &st, dws, dws_bytes));
    CHECK_EQ_INT(st.peeled + st.estimated, st.nonzero);
    estimated += st.estimated;
    double maxabs = 0, maxerr = 0;
    int64_t nonzero = 0;
    for (int64_t e = 0; e < s->n; e++) {
      double truth = 0;
      for (int r = 0; r < s->world; r++) {
        double k = s->rk[r].kept[j * l->shard_padded + e];
        truth += k;
        maxabs = fabs(k) > maxabs ? fabs(k) : maxabs;
      }
      nonzero += (glob[e / 64] >> (e % 64)) & 1;
      double err = fabs((double)out[e] - truth);
      maxerr = err > maxerr ? err : maxerr;
    }
    CHECK_EQ_INT(st.nonzero, nonzero);
    if (st.estimated == 0)
      CHECK_MSG(maxerr <= tol * maxabs, "owner %d: error %.3g > %.3g", j, maxerr,
                tol * maxabs);
    double rel = maxabs > 0 ? maxerr / maxabs : 0;
    *maxrel = rel > *maxrel ? rel : *maxrel;
  }
  free(sum);
  free(out);
  free(recv);
  free(glob);
  free(dws);
  free(wire);
  return estimated;
}

/* W ranks, shards of n elements in `lanes` lanes (0: the shard size's), rho advised. */
static void test_world(int world, int64_t n, int32_t lanes, float density) {
  sim s;
  sim_init(&s, world, n, lanes, density, 1000 + (uint64_t)world);
  check_mass(&s);
  double dlane, dglob = measured_global_density(&s, &dlane), rho, maxrel;
  CHECK_OK(tagc_rho_advise(dlane, s.n, s.geo.lanes, &rho));
  tagc_layout l;
  CHECK_OK(tagc_layout_init_lanes(&l, world, s.n, s.geo.lanes, rho, 12345));
  int64_t est = sim_decode(&s, &l, 0, &maxrel);
  printf("W=%d n=%lld K=%d local density %.2f: global %.4f (densest lane %.4f), advised rho %.2f "
         "(R=%lld), estimated %lld, max error / max|kept| %.2e\n",
         world, (long long)n, l.lanes, (double)density, dglob, dlane, rho, (long long)l.rows,
         (long long)est, maxrel);
  CHECK_EQ_INT(est, 0);
  est = sim_decode(&s, &l, 1, &maxrel);
  printf("    bf16 wire: estimated %lld, max error / max|kept| %.2e\n", (long long)est, maxrel);
  CHECK_EQ_INT(est, 0);
  tagc_layout_free(&l);
  sim_free(&s);
}

/* encode(a) + encode(b) == encode(a + b) up to fp32 rounding, and decode does not depend
 * on the thread count. */
static void test_linearity_and_determinism(int32_t lanes) {
  sim s;
  sim_init(&s, 2, 40000, lanes, 0.1f, 77);
  const tagc_layout *l = &s.geo;
  int64_t cells = l->sketch_cells, pad = l->shard_padded, words = l->bitmap_words;
  float *sum_kept = malloc((size_t)(2 * pad) * sizeof(float));
  uint64_t *or_bm = malloc((size_t)(2 * words) * sizeof(uint64_t));
  float *ska = malloc((size_t)(2 * cells) * sizeof(float));
  float *skb = malloc((size_t)(2 * cells) * sizeof(float));
  float *sks = malloc((size_t)(2 * cells) * sizeof(float));
  for (int64_t i = 0; i < 2 * pad; i++)
    sum_kept[i] = s.rk[0].kept[i] + s.rk[1].kept[i];
  memcpy(or_bm, s.rk[0].bitmap, (size_t)(2 * words) * sizeof(uint64_t));
  CHECK_OK(tagc_bitmap_or_into_cpu(or_bm, s.rk[1].bitmap, 2 * words));
  CHECK_OK(tagc_sketch_encode_cpu(l, s.rk[0].kept, s.rk[0].bitmap, ska));
  CHECK_OK(tagc_sketch_encode_cpu(l, s.rk[1].kept, s.rk[1].bitmap, skb));
  CHECK_OK(tagc_sketch_encode_cpu(l, sum_kept, or_bm, sks));
  double maxabs = 0, maxerr = 0;
  for (int64_t c = 0; c < 2 * cells; c++) {
    double a = (double)ska[c] + (double)skb[c];
    maxabs = fabs(a) > maxabs ? fabs(a) : maxabs;
    maxerr = fabs(a - sks[c]) > maxerr ? fabs(a - sks[c]) : maxerr;
  }
  printf("linearity K=%d: max |enc(a)+enc(b)-enc(a+b)| %.3g, max cell %.3g\n", l->lanes, maxerr,
         maxabs);
  CHECK(maxerr <= maxabs * 1e-5);
  size_t one = tagc_decode_workspace_bytes(l, 1), two = tagc_decode_workspace_bytes(l, 2);
  void *ws = malloc(two);
  float *o1 = malloc((size_t)s.n * sizeof(float)), *o2 = malloc((size_t)s.n * sizeof(float));
  tagc_decode_stats st1, st2;
  omp_set_num_threads(2);
  CHECK_OK(tagc_decode_cpu(l, sks, or_bm, o1, &st1, ws, one));
  CHECK_OK(tagc_decode_cpu(l, sks, or_bm, o2, &st2, ws, two));
  CHECK(memcmp(o1, o2, (size_t)s.n * sizeof(float)) == 0);
  CHECK_EQ_INT(st1.estimated, st2.estimated);
  free(ws);
  free(o1);
  free(o2);
  free(sum_kept);
  free(or_bm);
  free(ska);
  free(skb);
  free(sks);
  sim_free(&s);
}

/* Overloaded sketch: peeling stalls, the rest is estimated, and the counts add up. */
static void test_overload(void) {
  sim s;
  sim_init(&s, 2, 60000, 0, 0.3f, 5);
  tagc_layout l;
  CHECK_OK(tagc_layout_init(&l, 2, s.n, 8.0, 3));
  double maxrel;
  int64_t est = sim_decode(&s, &l, 0, &maxrel);
  double dlane;
  printf("overloaded (rho 8, global density %.2f): %lld estimated\n",
         measured_global_density(&s, &dlane), (long long)est);
  CHECK(est > 0);
  tagc_layout_free(&l);
  sim_free(&s);
}

/* Median of three against sorting, on all triples from a small value set (many ties). */
static void test_median(void) {
  const float v[] = {-2.0f, -1.0f, 0.0f, 1.0f, 3.0f};
  int bad = 0;
  for (int a = 0; a < 5; a++)
    for (int b = 0; b < 5; b++)
      for (int c = 0; c < 5; c++) {
        float x[3] = {v[a], v[b], v[c]};
        for (int i = 0; i < 2; i++)
          for (int k = 0; k < 2 - i; k++)
            if (x[k] > x[k + 1]) {
              float t = x[k];
              x[k] = x[k + 1];
              x[k + 1] = t;
            }
        bad += tagc_median3(v[a], v[b], v[c]) != x[1];
      }
  CHECK_EQ_INT(bad, 0);
}

static void test_bad_decode_input(void) {
  tagc_layout l;
  CHECK_OK(tagc_layout_init(&l, 1, 1000, 2.0, 0));
  float *sk = calloc((size_t)l.sketch_cells, sizeof(float)), out[1000];
  uint64_t *bm = calloc((size_t)l.bitmap_words, sizeof(uint64_t));
  size_t wsb = tagc_decode_workspace_bytes(&l, 1);
  void *ws = malloc(wsb);
  tagc_decode_stats st;
  bm[l.bitmap_words - 1] = 1ull << 63; /* element 1023: padding */
  CHECK_EQ_INT(tagc_decode_cpu(&l, sk, bm, out, &st, ws, wsb), TAGC_EINVAL);
  bm[l.bitmap_words - 1] = 0;
  CHECK_EQ_INT(tagc_decode_cpu(&l, sk, bm, out, &st, ws, 8), TAGC_EINVAL);
  CHECK_OK(tagc_decode_cpu(&l, sk, bm, out, &st, ws, wsb));
  CHECK_EQ_INT(st.nonzero, 0);
  free(sk);
  free(bm);
  free(ws);
  tagc_layout_free(&l);
}

int main(void) {
  const int worlds[] = {2, 3, 4, 8};
  for (int i = 0; i < 4; i++) { /* 128 lanes of 1184 blocks */
    test_world(worlds[i], 150000 + 77 * worlds[i], 0, 0.05f);
    test_world(worlds[i], 150000 + 77 * worlds[i], 0, 0.10f);
  }
  /* the tiny default model's shards (W=2: 10, 17 and 8 blocks of 1024) in 32 lanes, and
   * the other lane counts */
  test_world(2, 17408, 32, 0.05f);
  test_world(2, 10240, 32, 0.10f);
  test_world(4, 8192, 32, 0.05f);
  test_world(2, 20480, 64, 0.10f);
  test_world(3, 70001, 128, 0.05f);
  test_world(2, 150000, 1024, 0.10f);
  test_world(4, 200000, 512, 0.05f);
  test_linearity_and_determinism(32);
  test_linearity_and_determinism(64);
  test_linearity_and_determinism(1024);
  test_overload();
  test_median();
  test_bad_decode_input();
  return TEST_END();
}
