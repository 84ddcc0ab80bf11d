/* CPU bitmap ops (see bitmap.h). */
#include "kernels/bitmap.h"

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
