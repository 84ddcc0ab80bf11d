/* CPU count-sketch encode (see sketch.h). Threads split the (shard, lane word) pairs, a lane
 * word being min(lanes, 64) lanes (one bitmap word column), so no two threads touch the
 * same cell and the sum order is fixed. */
#include "kernels/sketch.h"

#include <omp.h>
#include <string.h>

#include "kernels/hash.h"

/* Adds the lanes lane0.. of block b to its three rows: bit q of `mask` says whether lane
 * lane0 + q holds an item, which is element (start + q) mod lanes of the block (kept_block). */
static inline void add_word(const uint32_t rows[3], uint64_t mask, const float *kept_block,
                            uint32_t start, uint32_t lanes, float *sketch, int64_t lane0) {
  float *cell[3];
  float sign[3];
  for (int i = 0; i < 3; i++) {
    cell[i] = sketch + (int64_t)(rows[i] & TAGC_ROW_MASK) * lanes + lane0;
    sign[i] = (rows[i] & TAGC_ROW_SIGN) ? -1.0f : 1.0f;
  }
  while (mask) {
    int q = __builtin_ctzll(mask);
    mask &= mask - 1;
    float x = kept_block[(start + (uint32_t)q) & (lanes - 1)];
    cell[0][q] += sign[0] * x;
    cell[1][q] += sign[1] * x;
    cell[2][q] += sign[2] * x;
  }
}

/* Lanes per lane word: one bitmap word column, or the whole row when it is narrower. */
static int word_lanes(const tagc_layout *l) { return l->lanes < 64 ? l->lanes : 64; }

/* Encodes the lanes of lane words [w0, w1) of one destination shard (lanes rotated per
 * block, kernels/hash.h). */
static void encode_lanes(const tagc_layout *l, const float *kept, const uint64_t *bitmap,
                         float *sketch, int w0, int w1) {
  uint32_t lanes = (uint32_t)l->lanes;
  int width = word_lanes(l);
  for (int64_t r = 0; r < l->rows; r++)
    memset(sketch + r * lanes + width * w0, 0, (size_t)(w1 - w0) * width * sizeof(float));
  for (int64_t b = 0; b < l->blocks; b++) {
    const uint32_t *rows = &l->block_rows[3 * b];
    uint32_t rot = tagc_block_rotation(l->seed, (uint32_t)b, lanes);
    for (int w = w0; w < w1; w++) {
      uint32_t lane0 = (uint32_t)(width * w);
      uint64_t mask = tagc_lane_bits(bitmap, lanes, (uint64_t)b, rot, lane0);
      if (mask)
        add_word(rows, mask, kept + b * lanes, (lane0 - rot) & (lanes - 1), lanes, sketch, lane0);
    }
  }
}

tagc_status tagc_sketch_encode_cpu(const tagc_layout *l, const float *kept,
                                   const uint64_t *bitmap, float *sketch) {
  if (!l || !l->block_rows || !kept || !bitmap || !sketch)
    return tagc_errorf(TAGC_EINVAL, "sketch_encode: NULL argument");
  int words = l->lanes / word_lanes(l);
  int64_t units = (int64_t)l->world * words; /* (shard, lane word) pairs, shard-major */
#pragma omp parallel
  {
    int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    int64_t u0 = units * tid / nt, u1 = units * (tid + 1) / nt;
    for (int64_t j = u0 / words; j * words < u1; j++) { /* this thread's words of shard j */
      int w0 = (int)(u0 > j * words ? u0 - j * words : 0);
      int w1 = (int)(u1 < (j + 1) * words ? u1 - j * words : words);
      if (w0 < w1)
        encode_lanes(l, kept + j * l->shard_padded, bitmap + j * l->bitmap_words,
                     sketch + j * l->sketch_cells, w0, w1);
    }
  }
  return TAGC_OK;
}
