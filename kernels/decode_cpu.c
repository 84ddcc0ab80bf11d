/* CPU owner decode: per-lane peeling with XOR-of-ids cells, then median-of-3 (decode.h). */
#include "kernels/decode.h"

#include <omp.h>
#include <string.h>

/* Lanes are decoded in groups of 64 (one bitmap word column): the group's sketch columns
 * are transposed into lane-major arrays and its items listed per lane in one pass over the
 * bitmap words, so the peel itself touches only contiguous per-lane memory. */
#define GROUP 64
#define GROUPS (TAGC_BLOCK / GROUP)

/* Per-thread state, carved from the caller's workspace. */
typedef struct group_state {
  float *cell;     /* [GROUP][rows] sketch columns of the group, peeled items subtracted */
  uint32_t *items; /* [GROUP][blocks] block ids of each lane's items, ascending */
  float *vals;     /* [GROUP][blocks] decoded value of each lane's k-th item */
  int64_t *nitems; /* [GROUP] */
  int32_t *count;  /* [rows] items in each cell of the lane being decoded */
  uint32_t *ids;   /* [rows] XOR of the block ids of those items */
  uint32_t *stack; /* [rows + 3*blocks + 1] cells whose count became 1 */
  uint32_t *pos;   /* [blocks] index k of block b in the lane's item list */
  uint8_t *done;   /* [blocks] item peeled, indexed by block */
} group_state;

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

static size_t group_state_bytes(const tagc_layout *l) {
  size_t r = (size_t)l->rows, g = (size_t)l->blocks;
  return 2 * align64(GROUP * g * sizeof(uint32_t)) + align64(GROUP * r * sizeof(float)) +
         align64(GROUP * sizeof(int64_t)) + 2 * align64(r * sizeof(uint32_t)) +
         align64((r + 3 * g + 1) * sizeof(uint32_t)) + align64(g * sizeof(uint32_t)) + align64(g);
}

static group_state group_state_at(const tagc_layout *l, char *p) {
  size_t r = (size_t)l->rows, g = (size_t)l->blocks;
  group_state s;
  s.cell = (float *)p;
  p += align64(GROUP * r * sizeof(float));
  s.items = (uint32_t *)p;
  p += align64(GROUP * g * sizeof(uint32_t));
  s.vals = (float *)p;
  p += align64(GROUP * g * sizeof(float));
  s.nitems = (int64_t *)p;
  p += align64(GROUP * sizeof(int64_t));
  s.count = (int32_t *)p;
  p += align64(r * sizeof(int32_t));
  s.ids = (uint32_t *)p;
  p += align64(r * sizeof(uint32_t));
  s.stack = (uint32_t *)p;
  p += align64((r + 3 * g + 1) * sizeof(uint32_t));
  s.pos = (uint32_t *)p;
  p += align64(g * sizeof(uint32_t));
  s.done = (uint8_t *)p;
  return s;
}

size_t tagc_decode_workspace_bytes(const tagc_layout *l, int threads) {
  if (!l)
    return 0;
  int t = threads > 0 ? threads : omp_get_max_threads();
  return (size_t)t * group_state_bytes(l);
}

/* +1.0f or -1.0f from the sign bit of a block_rows entry (branch-free). */
static inline float row_sign(uint32_t entry) {
  union { uint32_t u; float f; } c = {0x3F800000u | (entry & TAGC_ROW_SIGN)};
  return c.f;
}

/* Element of block b (0..1023) held by lane 64w (the group's first lane). */
static inline uint32_t lane_start(const tagc_layout *l, int64_t b, int w) {
  return (uint32_t)(GROUP * w - tagc_block_rotation(l->seed, (uint32_t)b)) & (TAGC_BLOCK - 1);
}

/* out[at .. at+n) = vals[0 .. n), clipped to elements below limit. */
static inline void store_run(float *out, int64_t limit, int64_t at, const float *vals, int64_t n) {
  if (at + n > limit)
    n = limit - at;
  if (n > 0)
    memcpy(out + at, vals, (size_t)n * sizeof(float));
}

/* Transposes group w's sketch columns and lists each lane's items. */
static void group_load(const tagc_layout *l, const float *sketch, const uint64_t *bitmap, int w,
                       group_state *s) {
  int64_t rows = l->rows;
  /* Row-major reads: a row's 64 group cells are 4 contiguous cache lines. (Reading down a
   * column instead strides by 4 KiB, and 16 such rows share one L1 set.) */
  for (int64_t r = 0; r < rows; r++) {
    const float *src = sketch + r * TAGC_BLOCK + GROUP * w;
    for (int q = 0; q < GROUP; q++)
      s->cell[q * rows + r] = src[q];
  }
  memset(s->nitems, 0, GROUP * sizeof *s->nitems);
  for (int64_t b = 0; b < l->blocks; b++) {
    uint64_t m = tagc_block_bits64(bitmap + b * GROUPS, lane_start(l, b, w));
    while (m) {
      int q = __builtin_ctzll(m);
      m &= m - 1;
      s->items[q * l->blocks + s->nitems[q]++] = (uint32_t)b;
    }
  }
}

/* Peels one lane of the group (cells in `cell`, items in `items`), then estimates what is
 * left; vals[k] gets the value of items[k]. Returns the number of items peeled. */
static int64_t lane_decode(const tagc_layout *l, float *cell, const uint32_t *items,
                           int64_t nitems, group_state *s, float *vals) {
  int64_t top = 0, peeled = 0;
  memset(s->count, 0, (size_t)l->rows * sizeof *s->count);
  memset(s->ids, 0, (size_t)l->rows * sizeof *s->ids);
  for (int64_t k = 0; k < nitems; k++) {
    const uint32_t *rows = &l->block_rows[3 * (int64_t)items[k]];
    s->done[items[k]] = 0;
    s->pos[items[k]] = (uint32_t)k;
    for (int i = 0; i < 3; i++) {
      s->count[rows[i] & TAGC_ROW_MASK]++;
      s->ids[rows[i] & TAGC_ROW_MASK] ^= items[k];
    }
  }
  for (int64_t r = 0; r < l->rows; r++) { /* branch-free: most tests are unpredictable */
    s->stack[top] = (uint32_t)r;
    top += s->count[r] == 1;
  }
  while (top > 0) {
    uint32_t r = s->stack[--top];
    if (s->count[r] != 1)
      continue;
    uint32_t b = s->ids[r];
    const uint32_t *rows = &l->block_rows[3 * (int64_t)b];
    uint32_t e0 = rows[0], e1 = rows[1], e2 = rows[2]; /* which of them is r is unpredictable: */
    uint32_t own = (e1 & TAGC_ROW_MASK) == r ? e1 : e2; /* selects, not branches */
    own = (e0 & TAGC_ROW_MASK) == r ? e0 : own;
    float x = row_sign(own) * cell[r];
    vals[s->pos[b]] = x;
    s->done[b] = 1;
    peeled++;
    for (int i = 0; i < 3; i++) {
      uint32_t ri = rows[i] & TAGC_ROW_MASK;
      cell[ri] -= row_sign(rows[i]) * x;
      s->ids[ri] ^= b;
      s->stack[top] = ri; /* pushed only if its count drops to 1 (branch-free) */
      top += --s->count[ri] == 1;
    }
  }
  for (int64_t k = 0; peeled < nitems && k < nitems; k++) {
    uint32_t b = items[k];
    if (s->done[b])
      continue;
    const uint32_t *rows = &l->block_rows[3 * (int64_t)b];
    float a[3];
    for (int i = 0; i < 3; i++)
      a[i] = row_sign(rows[i]) * cell[rows[i] & TAGC_ROW_MASK];
    vals[k] = tagc_median3(a[0], a[1], a[2]);
  }
  return peeled;
}

/* Writes group w's lanes of every block to out: decoded values where the bitmap is set,
 * +0 elsewhere. Lane 64w + q of block b is element (start + q) mod 1024 of the block, a
 * circular run of 64 elements; nothing is written past shard_numel (padding bits are clear,
 * so those lanes hold +0). */
static void group_store(const tagc_layout *l, const uint64_t *bitmap, int w,
                        const group_state *s, float *out) {
  int64_t cursor[GROUP] = {0};
  for (int64_t b = 0; b < l->blocks; b++) {
    int64_t base = b * TAGC_BLOCK;
    uint32_t start = lane_start(l, b, w);
    float chunk[GROUP] = {0};
    uint64_t m = tagc_block_bits64(bitmap + b * GROUPS, start);
    while (m) {
      int q = __builtin_ctzll(m);
      m &= m - 1;
      chunk[q] = s->vals[q * l->blocks + cursor[q]++];
    }
    int64_t first = TAGC_BLOCK - start < GROUP ? TAGC_BLOCK - start : GROUP; /* before the wrap */
    store_run(out, l->shard_numel, base + start, chunk, first);
    store_run(out, l->shard_numel, base, chunk + first, GROUP - first);
  }
}

/* Error unless every bit past shard_numel (the padding) is clear. */
static tagc_status check_padding(const tagc_layout *l, const uint64_t *bitmap) {
  for (int64_t w = l->shard_numel / 64; w < l->bitmap_words; w++) {
    int64_t first = l->shard_numel - w * 64; /* bits < first are real elements */
    uint64_t pad = first <= 0 ? ~0ull : ~0ull << first;
    if (bitmap[w] & pad)
      return tagc_errorf(TAGC_EINVAL, "decode: bitmap word %lld flags padding past element %lld",
                         (long long)w, (long long)l->shard_numel);
  }
  return TAGC_OK;
}

tagc_status tagc_decode_cpu(const tagc_layout *l, const float *sketch, const uint64_t *bitmap,
                            float *out, tagc_decode_stats *stats, void *ws, size_t ws_bytes) {
  if (!l || !l->block_rows || !sketch || !bitmap || !out || !stats || !ws)
    return tagc_errorf(TAGC_EINVAL, "decode: NULL argument");
  size_t per_thread = group_state_bytes(l);
  size_t fit = ws_bytes / per_thread;
  int nthreads = fit < (size_t)omp_get_max_threads() ? (int)fit : omp_get_max_threads();
  if (nthreads < 1)
    return tagc_errorf(TAGC_EINVAL, "decode: workspace %zu bytes < %zu", ws_bytes, per_thread);
  TAGC_CHECK(check_padding(l, bitmap));
  int64_t nonzero = 0, peeled = 0;
#pragma omp parallel num_threads(nthreads) reduction(+ : nonzero, peeled)
  {
    group_state s = group_state_at(l, (char *)ws + (size_t)omp_get_thread_num() * per_thread);
#pragma omp for schedule(static)
    for (int w = 0; w < GROUPS; w++) {
      group_load(l, sketch, bitmap, w, &s);
      for (int q = 0; q < GROUP; q++) {
        int64_t off = (int64_t)q * l->blocks;
        nonzero += s.nitems[q];
        peeled += lane_decode(l, s.cell + (int64_t)q * l->rows, s.items + off, s.nitems[q], &s,
                              s.vals + off);
      }
      group_store(l, bitmap, w, &s, out);
    }
  }
  stats->nonzero = nonzero;
  stats->peeled = peeled;
  stats->estimated = nonzero - peeled;
  return TAGC_OK;
}
