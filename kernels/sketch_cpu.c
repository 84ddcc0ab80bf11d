/* CPU count-sketch encode (see sketch.h). Threads split the 1024 lanes (in 64-lane bitmap
 * words), so no two threads touch the same cell and the sum order is fixed. */
#include "kernels/sketch.h"

#include <omp.h>
#include <string.h>

#include "kernels/hash.h"

#define WORDS_PER_BLOCK (TAGC_BLOCK / 64)

/* Adds lanes lane0..lane0+63 of block b to its three rows: bit q of `mask` says whether lane
 * lane0 + q holds an item, which is element (start + q) mod 1024 of the block (kept_block). */
static inline void add_word(const uint32_t rows[3], uint64_t mask, const float *kept_block,
                            uint32_t start, float *sketch, int64_t lane0) {
  float *cell[3];
  float sign[3];
  for (int i = 0; i < 3; i++) {
    cell[i] = sketch + (int64_t)(rows[i] & TAGC_ROW_MASK) * TAGC_BLOCK + lane0;
    sign[i] = (rows[i] & TAGC_ROW_SIGN) ? -1.0f : 1.0f;
  }
  while (mask) {
    int q = __builtin_ctzll(mask);
    mask &= mask - 1;
    float x = kept_block[(start + (uint32_t)q) & (TAGC_BLOCK - 1)];
    cell[0][q] += sign[0] * x;
    cell[1][q] += sign[1] * x;
    cell[2][q] += sign[2] * x;
  }
}

/* Encodes lanes [64*w0, 64*w1) of one destination shard (lanes rotated per block,
 * kernels/hash.h). */
static void encode_lanes(const tagc_layout *l, const float *kept, const uint64_t *bitmap,
                         float *sketch, int w0, int w1) {
  for (int64_t r = 0; r < l->rows; r++)
    memset(sketch + r * TAGC_BLOCK + 64 * w0, 0, (size_t)(w1 - w0) * 64 * sizeof(float));
  for (int64_t b = 0; b < l->blocks; b++) {
    const uint32_t *rows = &l->block_rows[3 * b];
    const uint64_t *words = bitmap + b * WORDS_PER_BLOCK;
    uint32_t rot = tagc_block_rotation(l->seed, (uint32_t)b);
    for (int w = w0; w < w1; w++) {
      uint32_t start = (uint32_t)(64 * w - rot) & (TAGC_BLOCK - 1);
      uint64_t mask = tagc_block_bits64(words, start);
      if (mask)
        add_word(rows, mask, kept + b * TAGC_BLOCK, start, sketch, 64 * w);
    }
  }
}

tagc_status tagc_sketch_encode_cpu(const tagc_layout *l, const float *kept,
                                   const uint64_t *bitmap, float *sketch) {
  if (!l || !l->block_rows || !kept || !bitmap || !sketch)
    return tagc_errorf(TAGC_EINVAL, "sketch_encode: NULL argument");
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    int parts = nt < WORDS_PER_BLOCK ? nt : WORDS_PER_BLOCK;
    if (tid < parts) {
      int w0 = WORDS_PER_BLOCK * tid / parts, w1 = WORDS_PER_BLOCK * (tid + 1) / parts;
      for (int32_t j = 0; j < l->world; j++)
        encode_lanes(l, kept + (int64_t)j * l->shard_padded, bitmap + (int64_t)j * l->bitmap_words,
                     sketch + (int64_t)j * l->sketch_cells, w0, w1);
    }
  }
  return TAGC_OK;
}
