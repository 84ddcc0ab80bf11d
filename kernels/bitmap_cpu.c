/* CPU bitmap ops (see bitmap.h). */
#include "kernels/bitmap.h"

#include "kernels/hash.h"
#include "kernels/layout.h"

tagc_status tagc_bitmap_or_into_cpu(uint64_t *dst, const uint64_t *src, int64_t words) {
  if (words < 0 || (words > 0 && (!dst || !src)))
    return tagc_errorf(TAGC_EINVAL, "bitmap_or_into: bad arguments (words %lld)",
                       (long long)words);
#pragma omp parallel for schedule(static) if (words > (1 << 16))
  for (int64_t i = 0; i < words; i++)
    dst[i] |= src[i];
  return TAGC_OK;
}

tagc_status tagc_bitmap_or_many_cpu(uint64_t *dst, const uint64_t *src, int32_t count,
                                    int64_t words) {
  if (count < 1 || words < 0 || (words > 0 && (!dst || !src)))
    return tagc_errorf(TAGC_EINVAL, "bitmap_or_many: bad arguments (count %d, words %lld)",
                       (int)count, (long long)words);
#pragma omp parallel for schedule(static) if (words > (1 << 14))
  for (int64_t i = 0; i < words; i++) {
    uint64_t acc = src[i];
    for (int32_t k = 1; k < count; k++)
      acc |= src[(int64_t)k * words + i];
    dst[i] = acc;
  }
  return TAGC_OK;
}

tagc_status tagc_bitmap_popcount_cpu(const uint64_t *words, int64_t nwords, int64_t *bits) {
  if (!bits || nwords < 0 || (nwords > 0 && !words))
    return tagc_errorf(TAGC_EINVAL, "bitmap_popcount: bad arguments (nwords %lld)",
                       (long long)nwords);
  int64_t total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (nwords > (1 << 16))
  for (int64_t i = 0; i < nwords; i++)
    total += __builtin_popcountll(words[i]);
  *bits = total;
  return TAGC_OK;
}

tagc_status tagc_bitmap_lane_max_cpu(const uint64_t *bitmap, int64_t blocks, int32_t lanes,
                                     uint32_t seed, int64_t *max_items) {
  if (!max_items || blocks < 0 || (blocks > 0 && !bitmap) || lanes < TAGC_LANES_MIN ||
      lanes > TAGC_LANES_MAX || (lanes & (lanes - 1)))
    return tagc_errorf(TAGC_EINVAL, "bitmap_lane_max: bad arguments (blocks %lld, lanes %d)",
                       (long long)blocks, (int)lanes);
  int width = lanes < 64 ? lanes : 64, words = lanes / width;
  int64_t best = 0;
  /* one lane word (up to 64 lanes) per iteration: lanes width*w.. over all blocks */
#pragma omp parallel for schedule(static) reduction(max : best) if (blocks > 64)
  for (int w = 0; w < words; w++) {
    int64_t count[64] = {0};
    for (int64_t b = 0; b < blocks; b++) {
      uint32_t rot = tagc_block_rotation(seed, (uint32_t)b, (uint32_t)lanes);
      uint64_t word = tagc_lane_bits(bitmap, (uint32_t)lanes, (uint64_t)b, rot, (uint32_t)(width * w));
      for (int q = 0; q < width; q++)
        count[q] += (word >> q) & 1u;
    }
    for (int q = 0; q < width; q++)
      best = count[q] > best ? count[q] : best;
  }
  *max_items = best;
  return TAGC_OK;
}
