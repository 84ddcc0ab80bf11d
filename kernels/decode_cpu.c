/* CPU owner decode: per-lane FIFO peeling over cells keyed by XOR of item-and-row keys, then
 * median-of-3 (decode.h). */
#include "kernels/decode.h"

#include <omp.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* Lanes are decoded in groups of min(lanes, 64) (one lane word of tagc_lane_bits, a bitmap
 * word column when lanes >= 64): the group's sketch columns are transposed into lane-major
 * arrays and its items listed per lane in one pass over the bitmap words, so the peel
 * itself touches only contiguous per-lane memory. Each item's value goes straight to its
 * place in the group's values in output order; adjacent groups whose values fit in one
 * buffer are then written out together, block by block, so the output is written in order
 * rather than in 64-element pieces 4 KiB apart (one such pass per group made every write a
 * cold line and a TLB miss). The float operations and their order are those of the CUDA
 * twin (decode_cuda.cu): only where values are kept changed. */
#define GROUP 64                        /* most lanes per group */
#define GROUPS (TAGC_LANES_MAX / GROUP) /* most groups per shard */

/* Block b's rows and signs, unpacked from l->block_rows once per call (no masking or sign
 * decoding in the peel). */
typedef struct block_entry {
  uint32_t row[3];
  float sign[3]; /* +1.0f or -1.0f */
} block_entry;

/* Per-thread state, carved from the caller's workspace. */
typedef struct group_state {
  uint32_t lanes;  /* K of the layout */
  int width;       /* lanes per group: min(K, GROUP) */
  int groups;      /* groups per shard: K / width */
  int64_t stride;  /* lane stride of items and islot: blocks, padded so that the 64 lanes'
                    * lists start in different L1 sets (a 4 KiB multiple would alias) */
  float *cell;     /* [width][rows] sketch columns of the group, peeled items subtracted */
  uint32_t *items; /* [width][stride] block ids of each lane's items, ascending */
  uint32_t *islot; /* [width][stride] where each lane's k-th item goes in the group's values
                    * (output order: block by block, lanes ascending within a block) */
  uint32_t *rot;   /* [blocks] lane rotation of each block (kernels/hash.h) */
  block_entry *entry; /* [blocks] */
  block_entry *lane;  /* [stride] entries of the items of the lane being peeled, in item
                       * order */
  float *cvals;    /* [width * stride] values of the pending groups, in output order */
  int64_t ncvals;  /* values in cvals */
  int w0, w1;      /* pending groups: decoded and compacted, not yet stored */
  int64_t goff[GROUPS]; /* offset in cvals of pending group w0 + g */
  int64_t *nitems; /* [width] */
  uint64_t *cell_ids; /* [rows] per cell of the lane being peeled: (items in the cell - 1)
                       * << 32 | XOR of their keys (k << 2 | j for the lane's k-th item in its
                       * row j), so one read-modify-write updates both, a cell is pure when
                       * the word is below ONE_ITEM, and a pure cell names its item and which
                       * of the item's rows it is */
  uint32_t *queue; /* [rows + 1] cells whose count became 1, FIFO (each at most once; one
                    * slot more for the branch-free push) */
} group_state;

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

/* blocks rounded up to 16 (one cache line of uint32), plus one line. */
static int64_t lane_stride(const tagc_layout *l) { return ((l->blocks + 15) & ~(int64_t)15) + 16; }

static size_t group_state_bytes(const tagc_layout *l) {
  size_t r = (size_t)l->rows, g = (size_t)l->blocks, st = (size_t)lane_stride(l);
  return 3 * align64(GROUP * st * sizeof(uint32_t)) + align64(g * sizeof(uint32_t)) +
         align64(g * sizeof(block_entry)) + align64(st * sizeof(block_entry)) +
         align64(GROUP * r * sizeof(float)) + align64(GROUP * sizeof(int64_t)) +
         align64(r * sizeof(uint64_t)) + align64((r + 1) * sizeof(uint32_t));
}

static group_state group_state_at(const tagc_layout *l, char *p) {
  size_t r = (size_t)l->rows, g = (size_t)l->blocks;
  group_state s;
  s.lanes = (uint32_t)l->lanes;
  s.width = l->lanes < GROUP ? l->lanes : GROUP;
  s.groups = l->lanes / s.width;
  s.stride = lane_stride(l);
  s.cell = (float *)p;
  p += align64(GROUP * r * sizeof(float));
  s.items = (uint32_t *)p;
  p += align64(GROUP * (size_t)s.stride * sizeof(uint32_t));
  s.islot = (uint32_t *)p;
  p += align64(GROUP * (size_t)s.stride * sizeof(uint32_t));
  s.rot = (uint32_t *)p;
  p += align64(g * sizeof(uint32_t));
  s.entry = (block_entry *)p;
  p += align64(g * sizeof(block_entry));
  s.lane = (block_entry *)p;
  p += align64((size_t)s.stride * sizeof(block_entry));
  s.cvals = (float *)p;
  p += align64(GROUP * (size_t)s.stride * sizeof(float));
  s.ncvals = 0;
  s.w0 = s.w1 = 0;
  s.nitems = (int64_t *)p;
  p += align64(GROUP * sizeof(int64_t));
  s.cell_ids = (uint64_t *)p;
  p += align64(r * sizeof(uint64_t));
  s.queue = (uint32_t *)p;
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

/* Element of block b (0..lanes-1) held by the first lane of group w. */
static inline uint32_t lane_start(const group_state *s, int64_t b, int w) {
  return (uint32_t)(s->width * w - s->rot[b]) & (s->lanes - 1);
}

/* Lanes of group w of block b that hold an item (bit q = the group's lane q). */
static inline uint64_t group_bits(const group_state *s, const uint64_t *bitmap, int64_t b, int w) {
  return tagc_lane_bits(bitmap, s->lanes, (uint64_t)b, s->rot[b], (uint32_t)(s->width * w));
}

/* out[at .. at+n) = vals[0 .. n), clipped to elements below limit. */
static inline void store_run(float *out, int64_t limit, int64_t at, const float *vals, int64_t n) {
  if (at + n > limit)
    n = limit - at;
  for (int64_t i = 0; i < n; i++)
    out[at + i] = vals[i];
}

/* Transposes group w's sketch columns and lists each lane's items with their places in the
 * group's values. Returns the group's number of items. */
static int64_t group_load(const tagc_layout *l, const float *sketch, const uint64_t *bitmap, int w,
                       group_state *s) {
  int64_t rows = l->rows, stride = s->stride, lanes = s->lanes;
  int width = s->width;
  /* Tiles of 8 rows x 64 lanes: each row's 64 group cells are 4 contiguous cache lines, and
   * each lane gets 8 contiguous cells. (Reading down a column instead strides by 4 KiB, and
   * 16 such rows share one L1 set.) */
  int64_t r0 = 0;
  for (; r0 + 8 <= rows; r0 += 8) {
    const float *src = sketch + r0 * lanes + width * w;
    for (int q = 0; q < width; q++) {
      float *dst = s->cell + q * rows + r0;
      for (int j = 0; j < 8; j++)
        dst[j] = src[j * lanes + q];
    }
  }
  for (; r0 < rows; r0++) {
    const float *src = sketch + r0 * lanes + width * w;
    for (int q = 0; q < width; q++)
      s->cell[q * rows + r0] = src[q];
  }
  memset(s->nitems, 0, (size_t)width * sizeof *s->nitems);
  uint32_t n = 0;
  for (int64_t b = 0; b < l->blocks; b++) {
    uint64_t m = group_bits(s, bitmap, b, w);
    while (m) {
      int q = __builtin_ctzll(m);
      m &= m - 1;
      int64_t at = q * stride + s->nitems[q]++;
      s->items[at] = (uint32_t)b;
      s->islot[at] = n++;
    }
  }
  return n;
}

#define ONE_ITEM (1ull << 32)    /* one item in the count half of a cell_ids word */
#define EMPTY_CELL (~0ull << 32) /* cell_ids word of a cell with no items (count - 1 = -1) */

/* Peels one lane of the group (cells in `cell`, items in `items`), then estimates what is
 * left; vals[islot[k]] gets the value of items[k]. Returns the number of items peeled.
 * A peeled item's own cell (the pure one it was read from) is left as it is: no item is
 * left in it, so its value is never read again and it is never queued again, and its word
 * still names the item. So once the queue is empty an item is peeled iff one of its cells
 * is pure (the cells of an item left in the 2-core hold at least two items each: a cell
 * whose count reached 1 was queued and peeled). */
static int64_t lane_decode(const tagc_layout *l, float *cell, const uint32_t *items,
                           const uint32_t *islot, int64_t nitems, group_state *s, float *vals) {
  int64_t rows = l->rows, head = 0, tail = 0, peeled = 0;
  uint64_t *ci = s->cell_ids;
  uint32_t *queue = s->queue;
  block_entry *lane = s->lane;
  for (int64_t r = 0; r < rows; r++)
    ci[r] = EMPTY_CELL;
  for (int64_t k = 0; k < nitems; k++) {
    const block_entry *e = &s->entry[items[k]];
    lane[k] = *e;
    for (uint32_t j = 0; j < 3; j++)
      ci[e->row[j]] = (ci[e->row[j]] ^ ((uint32_t)k << 2 | j)) + ONE_ITEM;
  }
#pragma GCC unroll 4
  for (int64_t r = 0; r < rows; r++) { /* branch-free: most tests are unpredictable */
    queue[tail] = (uint32_t)r;
    tail += ci[r] < ONE_ITEM;
  }
  while (head < tail) {
    uint64_t c = ci[queue[head++]];
    if (c >= ONE_ITEM) /* queued when pure, emptied since */
      continue;
    uint32_t k = (uint32_t)c >> 2, own = (uint32_t)c & 3;
    const block_entry *e = &lane[k];
    float x = e->sign[own] * cell[e->row[own]];
    vals[islot[k]] = x;
    peeled++;
    uint32_t ja = own == 0, jb = own == 2 ? 1 : 2; /* the other two rows, ascending */
    uint32_t ra = e->row[ja], rb = e->row[jb];
    cell[ra] -= e->sign[ja] * x;
    uint64_t va = (ci[ra] ^ (k << 2 | ja)) - ONE_ITEM;
    ci[ra] = va;
    queue[tail] = ra; /* queued only if its count drops to 1 (branch-free) */
    tail += va < ONE_ITEM;
    cell[rb] -= e->sign[jb] * x;
    uint64_t vb = (ci[rb] ^ (k << 2 | jb)) - ONE_ITEM;
    ci[rb] = vb;
    queue[tail] = rb;
    tail += vb < ONE_ITEM;
  }
  for (int64_t k = 0; peeled < nitems && k < nitems; k++) {
    const block_entry *e = &lane[k];
    if (ci[e->row[0]] < ONE_ITEM || ci[e->row[1]] < ONE_ITEM || ci[e->row[2]] < ONE_ITEM)
      continue; /* peeled */
    vals[islot[k]] = tagc_median3(e->sign[0] * cell[e->row[0]], e->sign[1] * cell[e->row[1]],
                                  e->sign[2] * cell[e->row[2]]);
  }
  return peeled;
}

/* dst[0 .. width) = vals[0], vals[1], ... at the set bits of m (ascending), +0 at the clear
 * ones (width: 32 or 64). Returns the number of values used (popcount of m). */
static inline int expand_lanes(float *dst, uint64_t m, const float *vals, int width) {
#ifdef __AVX512F__
  int used = 0;
  for (int i = 0; i < width; i += 16) {
    __mmask16 part = (__mmask16)(m >> i);
    _mm512_storeu_ps(dst + i, _mm512_maskz_expandloadu_ps(part, vals + used));
    used += __builtin_popcount(part);
  }
  return used;
#else
  int used = 0;
  for (int q = 0; q < width; q++)
    dst[q] = 0.0f;
  for (; m; m &= m - 1)
    dst[__builtin_ctzll(m)] = vals[used++];
  return used;
#endif
}

/* Writes the pending groups' lanes (groups w0 .. w1-1, compacted in s->cvals) of every block
 * to out: decoded values where the bitmap is set, +0 elsewhere. Lane width*w + j of block b
 * is element (lane_start + j) mod lanes of the block, so each group's lanes are one circular
 * run of `width` elements, expanded straight into out unless it wraps or crosses
 * shard_numel (then through a buffer, clipped: padding bits are clear, so those lanes hold
 * +0). Block by block, the writes walk the output in order. */
static void pending_store(const tagc_layout *l, const uint64_t *bitmap, group_state *s,
                          float *out) {
  int ng = s->w1 - s->w0, width = s->width;
  int64_t limit = l->shard_numel, cursor[GROUPS], lanes = s->lanes;
  for (int g = 0; g < ng; g++)
    cursor[g] = s->goff[g];
  for (int64_t b = 0; b < l->blocks; b++) {
    int64_t base = b * lanes;
    for (int g = 0; g < ng; g++) {
      int64_t start = lane_start(s, b, s->w0 + g);
      uint64_t m = group_bits(s, bitmap, b, s->w0 + g);
      const float *vals = s->cvals + cursor[g];
      if (start + width <= lanes && base + start + width <= limit) {
        cursor[g] += expand_lanes(out + base + start, m, vals, width);
        continue;
      }
      float run[GROUP];
      cursor[g] += expand_lanes(run, m, vals, width);
      int64_t first = lanes - start < width ? lanes - start : width; /* before the wrap */
      store_run(out, limit, base + start, run, first);
      store_run(out, limit, base, run + first, width - first);
    }
  }
  s->w0 = s->w1 = 0;
  s->ncvals = 0;
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
    for (int64_t b = 0; b < l->blocks; b++) {
      s.rot[b] = tagc_block_rotation(l->seed, (uint32_t)b, s.lanes);
      for (int j = 0; j < 3; j++) {
        uint32_t e = l->block_rows[3 * b + j];
        s.entry[b].row[j] = e & TAGC_ROW_MASK;
        s.entry[b].sign[j] = row_sign(e);
      }
    }
#pragma omp for schedule(static)
    for (int w = 0; w < s.groups; w++) {
      int64_t total = group_load(l, sketch, bitmap, w, &s);
      /* Groups are stored in batches of adjacent groups whose values fit in cvals (one
       * group always fits: at most `width` items per block); the batching only changes the
       * order of the writes, never a value. */
      if (s.w1 > s.w0 && (w != s.w1 || s.ncvals + total > s.width * s.stride))
        pending_store(l, bitmap, &s, out);
      if (s.w1 == s.w0)
        s.w0 = s.w1 = w;
      s.goff[s.w1 - s.w0] = s.ncvals;
      s.w1++;
      for (int q = 0; q < s.width; q++) {
        int64_t off = (int64_t)q * s.stride;
        peeled += lane_decode(l, s.cell + (int64_t)q * l->rows, s.items + off, s.islot + off,
                              s.nitems[q], &s, s.cvals + s.ncvals);
      }
      nonzero += total;
      s.ncvals += total;
    }
    if (s.w1 > s.w0)
      pending_store(l, bitmap, &s, out);
  }
  stats->nonzero = nonzero;
  stats->peeled = peeled;
  stats->estimated = nonzero - peeled;
  return TAGC_OK;
}
