/* Unit geometry and the duplicate-free block-row table (see layout.h). */
#include "kernels/layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/hash.h"

/* Rows of block b at retry `attempt`, three distinct values in [0, rows), signs in bit 31. */
static void block_rows_at(uint32_t seed, uint32_t block, uint32_t attempt, uint32_t rows,
                          uint32_t out[3]) {
  uint32_t h0 = tagc_block_hash(seed, block, attempt, 0);
  uint32_t h1 = tagc_block_hash(seed, block, attempt, 1);
  uint32_t h2 = tagc_block_hash(seed, block, attempt, 2);
  uint32_t r0 = tagc_hash_range(h0, rows);
  uint32_t r1 = tagc_hash_range(h1, rows - 1);
  r1 += r1 >= r0;
  uint32_t lo = r0 < r1 ? r0 : r1, hi = r0 < r1 ? r1 : r0;
  uint32_t r2 = tagc_hash_range(h2, rows - 2);
  r2 += r2 >= lo;
  r2 += r2 >= hi;
  out[0] = r0 | ((h0 & 1u) ? TAGC_ROW_SIGN : 0);
  out[1] = r1 | ((h1 & 1u) ? TAGC_ROW_SIGN : 0);
  out[2] = r2 | ((h2 & 1u) ? TAGC_ROW_SIGN : 0);
}

/* Order-free key of a block's row set: the three rows sorted, 21 bits each. */
static uint64_t row_set_key(const uint32_t r[3]) {
  uint64_t a = r[0] & TAGC_ROW_MASK, b = r[1] & TAGC_ROW_MASK, c = r[2] & TAGC_ROW_MASK, t;
  if (a > b) { t = a; a = b; b = t; }
  if (b > c) { t = b; b = c; c = t; }
  if (a > b) { t = a; a = b; b = t; }
  return (a << 42) | (b << 21) | c;
}

typedef struct keyed_block {
  uint64_t key;
  uint32_t block;
} keyed_block;

static int keyed_block_cmp(const void *pa, const void *pb) {
  const keyed_block *a = pa, *b = pb;
  if (a->key != b->key)
    return a->key < b->key ? -1 : 1;
  return a->block < b->block ? -1 : (a->block > b->block);
}

/* Blocks of every row (CSR: the blocks holding row r are blocks[start[r] .. start[r+1])). */
typedef struct row_index {
  int64_t *start;
  uint32_t *blocks;
} row_index;

static void row_index_build(const tagc_layout *l, row_index *ix) {
  memset(ix->start, 0, (size_t)(l->rows + 1) * sizeof *ix->start);
  for (int64_t i = 0; i < 3 * l->blocks; i++)
    ix->start[(l->block_rows[i] & TAGC_ROW_MASK) + 1]++;
  for (int64_t r = 0; r < l->rows; r++)
    ix->start[r + 1] += ix->start[r];
  int64_t *fill = ix->start; /* filled in place, then shifted back */
  for (int64_t b = 0; b < l->blocks; b++)
    for (int i = 0; i < 3; i++)
      ix->blocks[fill[l->block_rows[3 * b + i] & TAGC_ROW_MASK]++] = (uint32_t)b;
  for (int64_t r = l->rows; r > 0; r--)
    ix->start[r] = ix->start[r - 1];
  ix->start[0] = 0;
}

static uint32_t row_at(const tagc_layout *l, uint32_t b, int i) {
  return l->block_rows[3 * (int64_t)b + i] & TAGC_ROW_MASK;
}

static int has_row(const tagc_layout *l, uint32_t b, uint32_t r) {
  return row_at(l, b, 0) == r || row_at(l, b, 1) == r || row_at(l, b, 2) == r;
}

static uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

/* Rows of a set of blocks with their multiplicity (at most 9 distinct for 3 blocks). */
typedef struct row_count {
  int n;
  uint32_t row[12];
  int count[12];
} row_count;

static void count_rows(const tagc_layout *l, row_count *rc, uint32_t b) {
  for (int i = 0; i < 3; i++) {
    uint32_t r = row_at(l, b, i);
    int k = 0;
    while (k < rc->n && rc->row[k] != r)
      k++;
    if (k == rc->n) {
      rc->row[rc->n] = r;
      rc->count[rc->n++] = 0;
    }
    rc->count[k]++;
  }
}

/* A block d (> a, not b or c) that turns {a, b, c} into a stopping set: it holds every row
 * that only one of a, b, c holds (`single`, n of them, 1..3), and its other rows are rows of
 * {a, b, c}. Returns d or -1. */
static int64_t completing_block(const tagc_layout *l, const row_index *ix, const row_count *rc,
                                const uint32_t *single, int n, uint32_t a, uint32_t b,
                                uint32_t c) {
  for (int64_t u = ix->start[single[0]]; u < ix->start[single[0] + 1]; u++) {
    uint32_t d = ix->blocks[u];
    if (d <= a || d == b || d == c)
      continue;
    int ok = 1;
    for (int k = 1; k < n && ok; k++)
      ok = has_row(l, d, single[k]);
    for (int i = 0; i < 3 && ok; i++) {
      uint32_t r = row_at(l, d, i);
      int in = 0;
      for (int k = 0; k < rc->n && !in; k++)
        in = rc->row[k] == r;
      ok = in;
    }
    if (ok)
      return d;
  }
  return -1;
}

/* Marks in `bad` the highest block of every stopping set of 3 or 4 blocks: blocks whose
 * rows each hold at least two of them, so that no peel can start from them. All lanes share
 * the rows, so in every lane where all of them hold an item they are left to the estimate.
 * The expected number of such sets in a random layout grows like rho^k / R^(k/2) for k
 * blocks, so the small ones are the likely ones (size 2, equal triples, is removed before).
 * Sets are found from their lowest block a: b
 * shares a row with a, c with a or b, and d must hold the rows only one of a, b, c holds.
 * Returns the number of blocks marked. */
static int64_t mark_stopping_sets(const tagc_layout *l, const row_index *ix, uint8_t *bad) {
  int64_t marked = 0;
  for (uint32_t a = 0; a < (uint32_t)l->blocks; a++)
    for (int ia = 0; ia < 3; ia++) {
      uint32_t ra = row_at(l, a, ia);
      for (int64_t u = ix->start[ra]; u < ix->start[ra + 1]; u++) {
        uint32_t b = ix->blocks[u];
        if (b <= a)
          continue;
        uint32_t ab[2] = {a, b};
        for (int x = 0; x < 2; x++)
          for (int ic = 0; ic < 3; ic++) {
            uint32_t rc_row = row_at(l, ab[x], ic);
            for (int64_t v = ix->start[rc_row]; v < ix->start[rc_row + 1]; v++) {
              uint32_t c = ix->blocks[v];
              if (c <= a || c == b)
                continue;
              row_count rc = {0};
              count_rows(l, &rc, a);
              count_rows(l, &rc, b);
              count_rows(l, &rc, c);
              uint32_t single[9];
              int n = 0;
              for (int k = 0; k < rc.n; k++)
                if (rc.count[k] == 1)
                  single[n++] = rc.row[k];
              uint32_t top = max_u32(b, c);
              if (n == 0) {
                marked += !bad[top];
                bad[top] = 1;
              } else if (n <= 3) {
                int64_t d = completing_block(l, ix, &rc, single, n, a, b, c);
                if (d >= 0) {
                  top = max_u32(top, (uint32_t)d);
                  marked += !bad[top];
                  bad[top] = 1;
                }
              }
            }
          }
      }
    }
  return marked;
}

/* Where mark_stopping_sets looks. Above STOPPING_SET_MAX_ROWS rows small stopping sets are
 * too rare to matter (expected count of 3-block sets about 36 rho^3 / R^2: 5e-4 at
 * R = 2048, rho 4). Above STOPPING_SET_MAX_DEGREE blocks per row (3G/R, i.e. rho > 5.3) the
 * search (about 100 (3G/R)^3 steps per block) gets slow and the sets too many to remove,
 * while the density that gives such a rho leaves few items per lane. The passes are capped
 * so that a layout where they cannot all go still terminates (deterministically). */
#define STOPPING_SET_MAX_ROWS 2048
#define STOPPING_SET_MAX_DEGREE 16
#define STOPPING_SET_MAX_PASSES 16

/* Re-hashes every block whose row set equals that of a lower-numbered block, and the
 * highest block of every small stopping set (mark_stopping_sets, within the limits above),
 * until there are none. Terminates: C(rows,3) >= 4*blocks leaves most triples free, and the
 * stopping-set passes are capped. */
static tagc_status dedup_rows(tagc_layout *l) {
  int64_t g = l->blocks;
  keyed_block *keys = malloc((size_t)g * sizeof *keys);
  uint32_t *attempt = calloc((size_t)g, sizeof *attempt);
  uint8_t *bad = malloc((size_t)g);
  row_index ix = {malloc((size_t)(l->rows + 1) * sizeof *ix.start),
                  malloc((size_t)(3 * g) * sizeof *ix.blocks)};
  tagc_status st = TAGC_OK;
  if (!keys || !attempt || !bad || !ix.start || !ix.blocks) {
    st = tagc_errorf(TAGC_ENOMEM, "layout: no memory for %lld block keys", (long long)g);
    goto done;
  }
  int changed = 1, search = l->rows <= STOPPING_SET_MAX_ROWS &&
                            3 * g <= STOPPING_SET_MAX_DEGREE * l->rows;
  for (int pass = 0; changed; pass++) {
    changed = 0;
    for (int64_t b = 0; b < g; b++)
      keys[b] = (keyed_block){row_set_key(&l->block_rows[3 * b]), (uint32_t)b};
    qsort(keys, (size_t)g, sizeof *keys, keyed_block_cmp);
    memset(bad, 0, (size_t)g);
    for (int64_t i = 1; i < g; i++)
      if (keys[i].key == keys[i - 1].key)
        bad[keys[i].block] = changed = 1;
    if (!changed && search && pass < STOPPING_SET_MAX_PASSES) {
      row_index_build(l, &ix);
      changed = mark_stopping_sets(l, &ix, bad) > 0;
    }
    for (int64_t b = 0; changed && b < g; b++)
      if (bad[b]) {
        attempt[b]++;
        block_rows_at(l->seed, (uint32_t)b, attempt[b], (uint32_t)l->rows, &l->block_rows[3 * b]);
      }
  }
done:
  free(keys);
  free(attempt);
  free(bad);
  free(ix.start);
  free(ix.blocks);
  return st;
}

int32_t tagc_layout_lanes(int64_t shard_numel) {
  int64_t padded = shard_numel < 1 ? TAGC_PAD : (shard_numel + TAGC_PAD - 1) / TAGC_PAD * TAGC_PAD;
  int32_t lanes = TAGC_LANES_MAX;
  while (lanes > TAGC_LANES_MIN && padded / lanes < TAGC_LANE_BLOCKS)
    lanes /= 2;
  return lanes;
}

static int lanes_valid(int32_t lanes) {
  return lanes >= TAGC_LANES_MIN && lanes <= TAGC_LANES_MAX && (lanes & (lanes - 1)) == 0;
}

tagc_status tagc_layout_rows(int64_t shard_numel, int32_t lanes, double rho, int64_t *rows) {
  if (!rows)
    return tagc_errorf(TAGC_EINVAL, "layout: NULL rows");
  if (shard_numel < 1 || shard_numel >= ((int64_t)1 << 32))
    return tagc_errorf(TAGC_EINVAL, "layout: shard_numel %lld out of range",
                       (long long)shard_numel);
  if (!lanes_valid(lanes))
    return tagc_errorf(TAGC_EINVAL, "layout: %d lanes is not a power of two in [%d, %d]",
                       (int)lanes, TAGC_LANES_MIN, TAGC_LANES_MAX);
  if (!(rho >= 0.25 && rho <= 4096.0))
    return tagc_errorf(TAGC_EINVAL, "layout: rho %g outside [0.25, 4096]", rho);
  int64_t g = (shard_numel + TAGC_PAD - 1) / TAGC_PAD * (TAGC_PAD / lanes);
  int64_t r = (int64_t)ceil((double)g / rho);
  if (r < 3)
    r = 3;
  while ((double)r * (double)(r - 1) * (double)(r - 2) / 6.0 < 4.0 * (double)g)
    r++;
  if (r >= TAGC_MAX_ROWS)
    return tagc_errorf(TAGC_EINVAL, "layout: %lld sketch rows (shard %lld, %d lanes, rho %g) exceed %d",
                       (long long)r, (long long)shard_numel, (int)lanes, rho, TAGC_MAX_ROWS);
  *rows = r;
  return TAGC_OK;
}

tagc_status tagc_layout_init_lanes(tagc_layout *l, int32_t world, int64_t shard_numel,
                                   int32_t lanes, double rho, uint32_t seed) {
  if (!l)
    return tagc_errorf(TAGC_EINVAL, "layout: NULL layout");
  memset(l, 0, sizeof *l);
  if (world < 1)
    return tagc_errorf(TAGC_EINVAL, "layout: world %d < 1", (int)world);
  int64_t rows;
  TAGC_CHECK(tagc_layout_rows(shard_numel, lanes, rho, &rows));
  l->world = world;
  l->seed = seed;
  l->rho = rho;
  l->shard_numel = shard_numel;
  l->shard_padded = (shard_numel + TAGC_PAD - 1) / TAGC_PAD * TAGC_PAD;
  l->lanes = lanes;
  l->blocks = l->shard_padded / lanes;
  l->rows = rows;
  l->bitmap_words = l->shard_padded / 64;
  l->sketch_cells = rows * lanes;
  l->block_rows = malloc((size_t)l->blocks * 3 * sizeof *l->block_rows);
  if (!l->block_rows)
    return tagc_errorf(TAGC_ENOMEM, "layout: no memory for %lld block rows",
                       (long long)l->blocks);
  for (int64_t b = 0; b < l->blocks; b++)
    block_rows_at(seed, (uint32_t)b, 0, (uint32_t)rows, &l->block_rows[3 * b]);
  tagc_status st = dedup_rows(l);
  if (st != TAGC_OK)
    tagc_layout_free(l);
  return st;
}

tagc_status tagc_layout_init(tagc_layout *l, int32_t world, int64_t shard_numel, double rho,
                             uint32_t seed) {
  return tagc_layout_init_lanes(l, world, shard_numel, tagc_layout_lanes(shard_numel), rho, seed);
}

void tagc_layout_free(tagc_layout *l) {
  if (!l)
    return;
  free(l->block_rows);
  l->block_rows = NULL;
}
