/* tagc_decode_cpu against a plain per-lane oracle, bit for bit: lane counts 32 to 1024,
 * random shard sizes (padding past shard_numel included), densities from 1 % to 100 %
 * (lanes the peel cannot finish, so the median-of-3 path runs), rho from 0.5 to 8, encoded
 * and arbitrary sketches, 1 and 2 threads.
 *
 * The oracle is the decode of decode.h written as plainly as possible: lane by lane, a
 * count and XOR of block ids per cell, a FIFO queue seeded with the pure cells in row order
 * (a cell is queued again when its count drops to 1), value = sign * cell, cell -= sign *
 * value for the item's three rows, then the median of the three estimates for what is left.
 * That fixes the order of every fp32 subtraction (the CUDA twin's order), so the optimised
 * decoder must match it exactly, not within a tolerance. */
#include <omp.h>

#include "common/status.h"
#include "kernels/tagc_kernels.h"
#include "kgen.h"
#include "test.h"

static float oracle_sign(uint32_t entry) { return (entry & TAGC_ROW_SIGN) ? -1.0f : 1.0f; }

/* Lane t's items (blocks, ascending) into items, and the element each one is into elem[b];
 * returns the count. */
static int64_t oracle_items(const tagc_layout *l, const uint64_t *bitmap, uint32_t t,
                            uint32_t *items, int64_t *elem) {
  int64_t n = 0;
  uint32_t k = (uint32_t)l->lanes;
  for (int64_t b = 0; b < l->blocks; b++) {
    uint32_t rot = tagc_block_rotation(l->seed, (uint32_t)b, k);
    int64_t e = b * k + ((t - rot) & (k - 1));
    if (e < l->shard_numel && (bitmap[e >> 6] >> (e & 63) & 1)) {
      items[n++] = (uint32_t)b;
      elem[b] = e;
    }
  }
  return n;
}

/* Scratch: cell, count and ids [R], queue [R + 3G], items [G], done and elem [G]. */
typedef struct oracle_ws {
  float *cell;
  uint32_t *count, *ids, *queue, *items;
  uint8_t *done;
  int64_t *elem;
} oracle_ws;

/* Decodes lane t into out (its elements only); returns the number of items peeled. */
static int64_t oracle_lane(const tagc_layout *l, const float *sketch, const uint64_t *bitmap,
                           uint32_t t, oracle_ws *w, float *out) {
  int64_t rows = l->rows, head = 0, tail = 0, peeled = 0;
  for (int64_t r = 0; r < rows; r++) {
    w->cell[r] = sketch[r * l->lanes + t];
    w->count[r] = w->ids[r] = 0;
  }
  int64_t n = oracle_items(l, bitmap, t, w->items, w->elem);
  for (int64_t k = 0; k < n; k++) {
    uint32_t b = w->items[k];
    w->done[b] = 0;
    for (int i = 0; i < 3; i++) {
      uint32_t r = l->block_rows[3 * b + i] & TAGC_ROW_MASK;
      w->count[r]++;
      w->ids[r] ^= b;
    }
  }
  for (int64_t r = 0; r < rows; r++)
    if (w->count[r] == 1)
      w->queue[tail++] = (uint32_t)r;
  while (head < tail) {
    uint32_t r = w->queue[head++];
    if (w->count[r] != 1)
      continue;
    uint32_t b = w->ids[r];
    const uint32_t *e = &l->block_rows[3 * b];
    int own = (e[0] & TAGC_ROW_MASK) == r ? 0 : (e[1] & TAGC_ROW_MASK) == r ? 1 : 2;
    float x = oracle_sign(e[own]) * w->cell[r];
    out[w->elem[b]] = x;
    w->done[b] = 1;
    peeled++;
    for (int i = 0; i < 3; i++) {
      uint32_t ri = e[i] & TAGC_ROW_MASK;
      w->cell[ri] -= oracle_sign(e[i]) * x;
      w->ids[ri] ^= b;
      if (--w->count[ri] == 1)
        w->queue[tail++] = ri;
    }
  }
  for (int64_t k = 0; k < n; k++) {
    uint32_t b = w->items[k];
    if (w->done[b])
      continue;
    const uint32_t *e = &l->block_rows[3 * b];
    float a[3];
    for (int i = 0; i < 3; i++)
      a[i] = oracle_sign(e[i]) * w->cell[e[i] & TAGC_ROW_MASK];
    out[w->elem[b]] = tagc_median3(a[0], a[1], a[2]);
  }
  return peeled;
}

/* The whole shard into out [shard_numel] (+0 where the bitmap is clear); returns the number
 * of items peeled. */
static int64_t oracle_decode(const tagc_layout *l, const float *sketch, const uint64_t *bitmap,
                             float *out) {
  size_t rows = (size_t)l->rows, g = (size_t)l->blocks;
  oracle_ws w = {malloc(rows * 4), malloc(rows * 4), malloc(rows * 4), malloc((rows + 3 * g + 1) * 4),
                 malloc(g * 4), malloc(g), malloc(g * 8)};
  CHECK(w.cell && w.count && w.ids && w.queue && w.items && w.done && w.elem);
  int64_t peeled = 0;
  for (int64_t i = 0; i < l->shard_numel; i++)
    out[i] = 0.0f;
  for (uint32_t t = 0; t < (uint32_t)l->lanes; t++)
    peeled += oracle_lane(l, sketch, bitmap, t, &w, out);
  free(w.cell);
  free(w.count);
  free(w.ids);
  free(w.queue);
  free(w.items);
  free(w.done);
  free(w.elem);
  return peeled;
}

/* A kept value: mostly log-normal with a random sign, sometimes +0, -0 or a large one. */
static float kept_value(kgen *g) {
  uint64_t u = kgen_u64(g) % 64;
  if (u == 0)
    return 0.0f;
  if (u == 1)
    return -0.0f;
  if (u == 2)
    return (kgen_u64(g) & 1) ? 1e30f : -3e29f;
  return kgen_sample(g, KGEN_LOGNORMAL);
}

/* One case (lanes 0: tagc_layout_lanes of n); returns the number of elements left to the
 * estimate. */
static int64_t check_case(int64_t n, int32_t lanes, double density, double rho, uint32_t seed,
                          int arbitrary) {
  tagc_layout l;
  if (lanes)
    CHECK_OK(tagc_layout_init_lanes(&l, 1, n, lanes, rho, seed));
  else
    CHECK_OK(tagc_layout_init(&l, 1, n, rho, seed));
  kgen g = {seed * 0x9E3779B97F4A7C15ull + (uint64_t)n};
  float *kept = calloc((size_t)l.shard_padded, sizeof *kept);
  uint64_t *bitmap = calloc((size_t)l.bitmap_words, sizeof *bitmap);
  float *sketch = malloc((size_t)l.sketch_cells * sizeof *sketch);
  float *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
  CHECK(kept && bitmap && sketch && want && got);
  for (int64_t i = 0; i < n; i++)
    if (kgen_unif(&g) < density) {
      bitmap[i >> 6] |= 1ull << (i & 63);
      kept[i] = kept_value(&g);
    }
  CHECK_OK(tagc_sketch_encode_cpu(&l, kept, bitmap, sketch));
  if (arbitrary) /* cells that no set of items sums to: every value is an inconsistent mix */
    for (int64_t c = 0; c < l.sketch_cells; c++)
      sketch[c] += (float)kgen_normal(&g);
  int64_t want_peeled = oracle_decode(&l, sketch, bitmap, want), nonzero = 0;
  for (int64_t i = 0; i < n; i++)
    nonzero += bitmap[i >> 6] >> (i & 63) & 1;
  for (int threads = 1; threads <= 2; threads++) {
    omp_set_num_threads(threads);
    size_t ws_bytes = tagc_decode_workspace_bytes(&l, threads);
    void *ws = malloc(ws_bytes);
    CHECK(ws != NULL);
    tagc_decode_stats st;
    memset(got, 0x5A, (size_t)n * sizeof *got);
    CHECK_OK(tagc_decode_cpu(&l, sketch, bitmap, got, &st, ws, ws_bytes));
    int64_t first = -1;
    for (int64_t i = 0; i < n && first < 0; i++)
      if (memcmp(&want[i], &got[i], sizeof *got) != 0)
        first = i;
    CHECK_MSG(first < 0,
              "n %lld lanes %d density %.2f rho %.2f seed %u threads %d: element %lld is %a, "
              "oracle %a", (long long)n, (int)l.lanes, density, rho, seed, threads,
              (long long)first, first < 0 ? 0.0 : (double)got[first],
              first < 0 ? 0.0 : (double)want[first]);
    CHECK_EQ_INT(st.nonzero, nonzero);
    CHECK_EQ_INT(st.peeled, want_peeled);
    CHECK_EQ_INT(st.estimated, nonzero - want_peeled);
    free(ws);
  }
  omp_set_num_threads(1);
  free(kept);
  free(bitmap);
  free(sketch);
  free(want);
  free(got);
  tagc_layout_free(&l);
  return nonzero - want_peeled;
}

/* A bit in the padding, and a workspace one byte short, are rejected (TAGC_EINVAL). */
static void check_errors(void) {
  tagc_layout l;
  CHECK_OK(tagc_layout_init_lanes(&l, 1, 1000, 32, 2.0, 7));
  uint64_t *bitmap = calloc((size_t)l.bitmap_words, sizeof *bitmap);
  float *sketch = calloc((size_t)l.sketch_cells, sizeof *sketch), out[1000];
  size_t ws_bytes = tagc_decode_workspace_bytes(&l, 1);
  void *ws = malloc(ws_bytes);
  tagc_decode_stats st;
  CHECK(bitmap && sketch && ws);
  CHECK_EQ_INT(tagc_decode_cpu(&l, sketch, bitmap, out, &st, ws, ws_bytes - 1), TAGC_EINVAL);
  bitmap[1000 / 64] |= 1ull << (1000 % 64);
  CHECK_EQ_INT(tagc_decode_cpu(&l, sketch, bitmap, out, &st, ws, ws_bytes), TAGC_EINVAL);
  free(bitmap);
  free(sketch);
  free(ws);
  tagc_layout_free(&l);
}

int main(void) {
  static const int64_t fixed_n[] = {1, 63, 1023, 1024, 1025, 4096, 65543, 150000};
  static const int32_t lane_counts[] = {32, 64, 128, 256, 512, 1024, 0};
  static const double densities[] = {0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0};
  static const double rhos[] = {0.5, 1.0, 2.0, 3.3, 4.72, 8.0};
  kgen g = {2026};
  int64_t estimated = 0, padded = 0, cases = 0, by_lanes[7] = {0};
  for (int c = 0; c < 70; c++) {
    int64_t n = c < 8 ? fixed_n[c] : 1 + (int64_t)(kgen_u64(&g) % 200000);
    int li = c % 7;
    double d = densities[kgen_u64(&g) % 9], rho = rhos[kgen_u64(&g) % 6];
    int64_t e = check_case(n, lane_counts[li], d, rho, (uint32_t)(kgen_u64(&g) % 1000), c % 5 == 4);
    estimated += e;
    by_lanes[li] += e;
    padded += n % TAGC_PAD != 0;
    cases++;
  }
  estimated += check_case(2 * 1048576, 0, 0.1, 4.72, 1, 0); /* the bench's shape (1024 lanes) */
  estimated += check_case(300000, 32, 1.0, 8.0, 3, 0);      /* 32 lanes, most left to the estimate */
  cases += 2;
  check_errors();
  printf("%lld cases, %lld with padding, %lld elements estimated (by lanes 32..1024, default:",
         (long long)cases, (long long)padded, (long long)estimated);
  for (int i = 0; i < 7; i++)
    printf(" %lld", (long long)by_lanes[i]);
  printf(")\n");
  CHECK(estimated > 0); /* the median-of-3 path ran */
  CHECK(padded > 0);
  return TEST_END();
}
