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

/* Re-hashes every block whose row set equals that of a lower-numbered block, until all
 * sets differ. Terminates: C(rows,3) >= 4*blocks leaves most triples free. */
static tagc_status dedup_rows(tagc_layout *l) {
  int64_t g = l->blocks;
  keyed_block *keys = malloc((size_t)g * sizeof *keys);
  uint32_t *attempt = calloc((size_t)g, sizeof *attempt);
  if (!keys || !attempt) {
    free(keys);
    free(attempt);
    return tagc_errorf(TAGC_ENOMEM, "layout: no memory for %lld block keys", (long long)g);
  }
  int changed = 1;
  while (changed) {
    changed = 0;
    for (int64_t b = 0; b < g; b++)
      keys[b] = (keyed_block){row_set_key(&l->block_rows[3 * b]), (uint32_t)b};
    qsort(keys, (size_t)g, sizeof *keys, keyed_block_cmp);
    for (int64_t i = 1; i < g; i++) {
      if (keys[i].key != keys[i - 1].key)
        continue;
      uint32_t b = keys[i].block;
      attempt[b]++;
      block_rows_at(l->seed, b, attempt[b], (uint32_t)l->rows, &l->block_rows[3 * (int64_t)b]);
      changed = 1;
    }
  }
  free(keys);
  free(attempt);
  return TAGC_OK;
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
