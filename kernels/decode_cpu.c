/* CPU owner decode: per-lane peeling with XOR-of-ids cells, then median-of-3 (decode.h). */
#include "kernels/decode.h"

#include <omp.h>
#include <string.h>

/* Per-thread state for one lane; all arrays live in the caller's workspace. */
typedef struct lane_state {
  int32_t *count;  /* [rows] items in the cell */
  uint32_t *ids;   /* [rows] XOR of the block ids of the cell's items */
  float *cell;     /* [rows] the lane's sketch column, peeled items subtracted */
  uint32_t *stack; /* [rows + 3*blocks] cells whose count became 1 */
  uint8_t *done;   /* [blocks] item peeled */
} lane_state;

static size_t lane_state_bytes(const tagc_layout *l) {
  size_t r = (size_t)l->rows, g = (size_t)l->blocks;
  size_t bytes = r * (sizeof(int32_t) + sizeof(uint32_t) + sizeof(float)) +
                 (r + 3 * g) * sizeof(uint32_t) + g;
  return (bytes + 63) & ~(size_t)63;
}

static lane_state lane_state_at(const tagc_layout *l, void *base) {
  size_t r = (size_t)l->rows, g = (size_t)l->blocks;
  lane_state s;
  s.count = base;
  s.ids = (uint32_t *)(s.count + r);
  s.cell = (float *)(s.ids + r);
  s.stack = (uint32_t *)(s.cell + r);
  s.done = (uint8_t *)(s.stack + r + 3 * g);
  return s;
}

size_t tagc_decode_workspace_bytes(const tagc_layout *l, int threads) {
  if (!l)
    return 0;
  int t = threads > 0 ? threads : omp_get_max_threads();
  return (size_t)t * lane_state_bytes(l);
}

static inline int lane_bit(const uint64_t *bitmap, int64_t b, int t) {
  return (int)((bitmap[b * (TAGC_BLOCK / 64) + t / 64] >> (t % 64)) & 1u);
}

static inline float row_sign(uint32_t entry) { return (entry & TAGC_ROW_SIGN) ? -1.0f : 1.0f; }

/* Builds lane t's cells; returns its number of items. */
static int64_t lane_load(const tagc_layout *l, const float *sketch, const uint64_t *bitmap,
                         int t, lane_state *s) {
  int64_t items = 0;
  memset(s->count, 0, (size_t)l->rows * sizeof *s->count);
  memset(s->ids, 0, (size_t)l->rows * sizeof *s->ids);
  for (int64_t r = 0; r < l->rows; r++)
    s->cell[r] = sketch[r * TAGC_BLOCK + t];
  for (int64_t b = 0; b < l->blocks; b++) {
    s->done[b] = 0;
    if (!lane_bit(bitmap, b, t))
      continue;
    items++;
    for (int i = 0; i < 3; i++) {
      uint32_t r = l->block_rows[3 * b + i] & TAGC_ROW_MASK;
      s->count[r]++;
      s->ids[r] ^= (uint32_t)b;
    }
  }
  return items;
}

/* Peels lane t to exhaustion, writing recovered values to out; returns items peeled. */
static int64_t lane_peel(const tagc_layout *l, int t, lane_state *s, float *out) {
  int64_t top = 0, peeled = 0;
  for (int64_t r = 0; r < l->rows; r++)
    if (s->count[r] == 1)
      s->stack[top++] = (uint32_t)r;
  while (top > 0) {
    uint32_t r = s->stack[--top];
    if (s->count[r] != 1)
      continue;
    uint32_t b = s->ids[r];
    const uint32_t *rows = &l->block_rows[3 * (int64_t)b];
    int own = (rows[0] & TAGC_ROW_MASK) == r ? 0 : ((rows[1] & TAGC_ROW_MASK) == r ? 1 : 2);
    float x = row_sign(rows[own]) * s->cell[r];
    out[(int64_t)b * TAGC_BLOCK + t] = x;
    s->done[b] = 1;
    peeled++;
    for (int i = 0; i < 3; i++) {
      uint32_t ri = rows[i] & TAGC_ROW_MASK;
      s->cell[ri] -= row_sign(rows[i]) * x;
      s->ids[ri] ^= b;
      if (--s->count[ri] == 1)
        s->stack[top++] = ri;
    }
  }
  return peeled;
}

/* Median-of-3 estimate for lane t's items left in the 2-core. */
static void lane_estimate(const tagc_layout *l, const uint64_t *bitmap, int t,
                          const lane_state *s, float *out) {
  for (int64_t b = 0; b < l->blocks; b++) {
    if (s->done[b] || !lane_bit(bitmap, b, t))
      continue;
    const uint32_t *rows = &l->block_rows[3 * b];
    float a[3];
    for (int i = 0; i < 3; i++)
      a[i] = row_sign(rows[i]) * s->cell[rows[i] & TAGC_ROW_MASK];
    out[b * TAGC_BLOCK + t] = tagc_median3(a[0], a[1], a[2]);
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
  size_t per_thread = lane_state_bytes(l);
  int nthreads = (int)(ws_bytes / per_thread);
  if (nthreads < 1)
    return tagc_errorf(TAGC_EINVAL, "decode: workspace %zu bytes < %zu", ws_bytes, per_thread);
  TAGC_CHECK(check_padding(l, bitmap));
  int64_t nonzero = 0, peeled = 0;
  /* Lanes write straight into out; elements of the padding have no bit, so the writes of
   * blocks that reach past shard_numel never happen there. */
#pragma omp parallel num_threads(nthreads) reduction(+ : nonzero, peeled)
  {
    lane_state s = lane_state_at(l, (char *)ws + (size_t)omp_get_thread_num() * per_thread);
#pragma omp for schedule(static)
    for (int64_t e = 0; e < l->shard_numel; e++)
      out[e] = 0.0f;
#pragma omp for schedule(static)
    for (int t = 0; t < TAGC_BLOCK; t++) {
      nonzero += lane_load(l, sketch, bitmap, t, &s);
      peeled += lane_peel(l, t, &s, out);
      lane_estimate(l, bitmap, t, &s, out);
    }
  }
  stats->nonzero = nonzero;
  stats->peeled = peeled;
  stats->estimated = nonzero - peeled;
  return TAGC_OK;
}
