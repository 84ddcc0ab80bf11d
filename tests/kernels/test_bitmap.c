/* Bitmap ops against bit-by-bit references: OR of W bitmaps (all-to-all fold and in-place),
 * popcount, the densest rotated lane at every lane count; argument errors. */
#include "common/status.h"
#include "kernels/bitmap.h"
#include "kernels/hash.h"
#include "kgen.h"
#include "test.h"

static int bit(const uint64_t *w, int64_t i) { return (int)((w[i / 64] >> (i % 64)) & 1); }

int main(void) {
  kgen g = {4};
  const int64_t words = 100003;
  for (int32_t count = 1; count <= 8; count++) {
    uint64_t *src = malloc((size_t)(count * words) * sizeof(uint64_t));
    uint64_t *dst = malloc((size_t)words * sizeof(uint64_t));
    uint64_t *acc = calloc((size_t)words, sizeof(uint64_t));
    for (int64_t i = 0; i < count * words; i++)
      src[i] = kgen_u64(&g) & kgen_u64(&g) & kgen_u64(&g); /* ~12% density */
    CHECK_OK(tagc_bitmap_or_many_cpu(dst, src, count, words));
    for (int32_t k = 0; k < count; k++)
      CHECK_OK(tagc_bitmap_or_into_cpu(acc, src + k * words, words));
    int64_t bad = 0, ones = 0, popped = -1;
    for (int64_t e = 0; e < words * 64; e += 1 + (e % 3)) {
      int any = 0;
      for (int32_t k = 0; k < count; k++)
        any |= bit(src + k * words, e);
      bad += bit(dst, e) != any;
    }
    for (int64_t e = 0; e < words * 64; e++)
      ones += bit(dst, e);
    CHECK_EQ_INT(bad, 0);
    CHECK(memcmp(dst, acc, (size_t)words * sizeof(uint64_t)) == 0);
    CHECK_OK(tagc_bitmap_popcount_cpu(dst, words, &popped));
    CHECK_EQ_INT(popped, ones);
    CHECK_OK(tagc_bitmap_or_many_cpu(src, src, count, words)); /* in place into part 0 */
    CHECK(memcmp(src, dst, (size_t)words * sizeof(uint64_t)) == 0);
    free(src);
    free(dst);
    free(acc);
  }
  /* lane maximum against a per-lane count, at every lane count */
  static const int32_t lanes_list[] = {32, 64, 128, 256, 512, 1024};
  for (size_t k = 0; k < sizeof lanes_list / sizeof *lanes_list; k++) {
    const int32_t lanes = lanes_list[k];
    const uint32_t ul = (uint32_t)lanes, seed = 11;
    const int64_t blocks = 300 * (1024 / lanes), words = blocks * lanes / 64;
    uint64_t *bm = malloc((size_t)words * sizeof(uint64_t));
    for (int64_t i = 0; i < words; i++)
      bm[i] = kgen_u64(&g) & kgen_u64(&g);
    const uint32_t hot = (9u * 64 + 5) & (ul - 1);
    for (int64_t b = 0; b < 200; b++) { /* sketch lane `hot` set in 200+ blocks */
      int64_t e = b * lanes + ((hot - tagc_block_rotation(seed, (uint32_t)b, ul)) & (ul - 1));
      bm[e / 64] |= 1ull << (e % 64);
    }
    int64_t want = 0, got = -1;
    for (uint32_t t = 0; t < ul; t++) {
      int64_t c = 0;
      for (int64_t b = 0; b < blocks; b++)
        c += bit(bm, b * lanes + ((t - tagc_block_rotation(seed, (uint32_t)b, ul)) & (ul - 1)));
      want = c > want ? c : want;
    }
    CHECK_OK(tagc_bitmap_lane_max_cpu(bm, blocks, lanes, seed, &got));
    CHECK_EQ_INT(got, want);
    CHECK(got >= 200);
    CHECK_EQ_INT(tagc_bitmap_lane_max_cpu(NULL, 3, lanes, seed, &got), TAGC_EINVAL);
    CHECK_EQ_INT(tagc_bitmap_lane_max_cpu(bm, 3, lanes + 1, seed, &got), TAGC_EINVAL);

    /* A hot matrix column (element 5 of every 128-wide row: a C = 128 weight's column 5, so
     * 8 elements per 1024) is spread over the lanes by the rotation: the densest lane stays
     * near the mean instead of holding every block. */
    memset(bm, 0, (size_t)words * sizeof(uint64_t));
    for (int64_t e = 5; e < blocks * lanes; e += 128)
      bm[e / 64] |= 1ull << (e % 64);
    CHECK_OK(tagc_bitmap_lane_max_cpu(bm, blocks, lanes, seed, &got));
    double mean = (double)blocks * lanes / 128.0 / lanes;
    printf("K=%d: hot column over %lld blocks: densest lane %lld items (mean %.2f)\n", lanes,
           (long long)blocks, (long long)got, mean);
    /* without the rotation one lane would hold blocks * min(1, lanes / 128) items */
    CHECK_MSG(got >= mean && got <= 2.5 * mean + 6, "K=%d: densest lane %lld, mean %.2f", lanes,
              (long long)got, mean);
    free(bm);
  }
  uint64_t w = 1;
  int64_t bits;
  CHECK_EQ_INT(tagc_bitmap_or_many_cpu(&w, &w, 0, 1), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_bitmap_or_into_cpu(NULL, &w, 1), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_bitmap_popcount_cpu(&w, -1, &bits), TAGC_EINVAL);
  CHECK_OK(tagc_bitmap_popcount_cpu(NULL, 0, &bits));
  CHECK_EQ_INT(bits, 0);
  return TEST_END();
}
