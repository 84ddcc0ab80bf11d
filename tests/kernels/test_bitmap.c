/* Bitmap ops against bit-by-bit references: OR of W bitmaps (all-to-all fold and in-place),
 * popcount; argument errors. */
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
  /* lane maximum against a per-lane count */
  {
    const int64_t blocks = 300;
    uint64_t *bm = malloc((size_t)(blocks * 16) * sizeof(uint64_t));
    for (int64_t i = 0; i < blocks * 16; i++)
      bm[i] = kgen_u64(&g) & kgen_u64(&g);
    const uint32_t seed = 11;
    for (int64_t b = 0; b < 200; b++) { /* sketch lane 9*64+5 set in 200+ blocks */
      uint32_t e = (9u * 64 + 5 - tagc_block_rotation(seed, (uint32_t)b)) & 1023u;
      bm[b * 16 + e / 64] |= 1ull << (e % 64);
    }
    int64_t want = 0, got = -1;
    for (int t = 0; t < 1024; t++) {
      int64_t c = 0;
      for (int64_t b = 0; b < blocks; b++)
        c += bit(bm, b * 1024 + ((t - tagc_block_rotation(seed, (uint32_t)b)) & 1023u));
      want = c > want ? c : want;
    }
    CHECK_OK(tagc_bitmap_lane_max_cpu(bm, blocks, seed, &got));
    CHECK_EQ_INT(got, want);
    CHECK(got >= 200);
    CHECK_EQ_INT(tagc_bitmap_lane_max_cpu(NULL, 3, seed, &got), TAGC_EINVAL);

    /* A hot matrix column (element 5 of every block, and of every 128-wide row: a C = 128
     * weight's column 5) is spread over the lanes by the rotation: the densest lane stays
     * near the mean instead of holding every block. */
    memset(bm, 0, (size_t)(blocks * 16) * sizeof(uint64_t));
    for (int64_t b = 0; b < blocks; b++)
      for (int r = 0; r < 8; r++)
        bm[b * 16 + (r * 128 + 5) / 64] |= 1ull << ((r * 128 + 5) % 64);
    CHECK_OK(tagc_bitmap_lane_max_cpu(bm, blocks, seed, &got));
    printf("hot column over %lld blocks: densest lane %lld items (mean %.2f)\n",
           (long long)blocks, (long long)got, 8.0 * blocks / 1024);
    CHECK(got >= 3 && got <= 12); /* mean 2.3; 300 items in one lane without the rotation */
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
