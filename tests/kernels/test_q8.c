/* Blockwise int8 gather quantisation (kernels/q8.h): chunk size and layout, the per-element
 * error bound scale/2 against a double-precision reference of the scale, ties to even, the
 * all-zero block, a NaN or infinite element poisoning its block only, the gathered decode with
 * a limit, thread-count independence, and argument errors. The gradient wire's fused kernels
 * (encode with error feedback, the owner's decode-sum) give the bits of the composed steps. */
#include <omp.h>

#include "common/status.h"
#include "kernels/q8.h"
#include "kgen.h"
#include "test.h"

static void test_chunk_bytes(void) {
  CHECK_EQ_INT(tagc_q8_chunk_bytes(0), 0);
  CHECK_EQ_INT(tagc_q8_chunk_bytes(1), 16);           /* 4 + 1 -> 16 */
  CHECK_EQ_INT(tagc_q8_chunk_bytes(256), 272);        /* 4 + 256 -> 272 */
  CHECK_EQ_INT(tagc_q8_chunk_bytes(257), 272);        /* 8 + 257 = 265 -> 272 */
  CHECK_EQ_INT(tagc_q8_chunk_bytes(1 << 20), (1 << 20) + 4 * 4096);
}

static void test_round_trip(int64_t n, kgen *g) {
  int64_t bytes = tagc_q8_chunk_bytes(n), nb = (n + 255) / 256;
  float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
  unsigned char *q = malloc((size_t)bytes);
  memset(q, 0xAB, (size_t)bytes);
  for (int64_t i = 0; i < n; i++)
    x[i] = kgen_sample(g, (kgen_dist)(i / 256 % 3)) * (i % 7 == 0 ? 100.0f : 1.0f);
  CHECK_OK(tagc_q8_encode_cpu(x, n, q));
  CHECK_OK(tagc_q8_decode_cpu(q, n, 1, tagc_q8_chunk_bytes(n), n, y));
  const float *scale = (const float *)q;
  const int8_t *code = (const int8_t *)(q + 4 * nb);
  int64_t bad_scale = 0, bad_err = 0, bad_code = 0;
  for (int64_t k = 0; k < nb; k++) {
    double amax = 0;
    for (int64_t i = 256 * k; i < n && i < 256 * (k + 1); i++)
      amax = fmax(amax, fabs((double)x[i]));
    bad_scale += scale[k] != (float)((float)amax / 127.0f);
    for (int64_t i = 256 * k; i < n && i < 256 * (k + 1); i++) {
      bad_err += fabs((double)y[i] - (double)x[i]) > 0.5 * (double)scale[k] * (1 + 1e-6);
      bad_code += code[i] < -127 || y[i] != (float)code[i] * scale[k];
    }
  }
  int64_t pad_nonzero = 0;
  for (int64_t b = 4 * nb + n; b < bytes; b++)
    pad_nonzero += q[b] != 0;
  CHECK_EQ_INT(bad_scale, 0);
  CHECK_EQ_INT(bad_err, 0);
  CHECK_EQ_INT(bad_code, 0);
  CHECK_EQ_INT(pad_nonzero, 0);
  free(x), free(y), free(q);
}

static void test_special_blocks(void) {
  float x[768];
  for (int i = 0; i < 768; i++)
    x[i] = (float)(i % 17) - 8.0f; /* amax 8: scale 8/127 */
  for (int i = 256; i < 512; i++)
    x[i] = 0.0f;
  x[600] = NAN;
  unsigned char q[1024];
  float y[768];
  CHECK_OK(tagc_q8_encode_cpu(x, 768, q));
  CHECK_OK(tagc_q8_decode_cpu(q, 768, 1, tagc_q8_chunk_bytes(768), 768, y));
  int zero_ok = 1, nan_ok = 1, first_ok = 1;
  for (int i = 256; i < 512; i++)
    zero_ok &= y[i] == 0.0f && !signbit(y[i]);
  for (int i = 512; i < 768; i++)
    nan_ok &= isnan(y[i]);
  for (int i = 0; i < 256; i++)
    first_ok &= fabsf(y[i] - x[i]) <= 0.5f * 8.0f / 127.0f;
  CHECK(zero_ok);
  CHECK(nan_ok);
  CHECK(first_ok);
  /* The block maximum maps to +-127 exactly and decodes to itself up to one rounding. */
  CHECK_EQ_INT(((const int8_t *)(q + 12))[0], -127); /* x[0] = -8, x[16] = 8 */
  CHECK_EQ_INT(((const int8_t *)(q + 12))[16], 127);
  /* An infinity poisons only its block, never turns finite. */
  x[700] = INFINITY;
  x[600] = 1.0f;
  CHECK_OK(tagc_q8_encode_cpu(x, 768, q));
  CHECK_OK(tagc_q8_decode_cpu(q, 768, 1, tagc_q8_chunk_bytes(768), 768, y));
  CHECK(!isfinite(y[700]) && !isfinite(y[520]));
  CHECK(isfinite(y[10]) && y[300] == 0.0f);
}

/* W chunks decoded at once into the first `limit` elements, as the all-gather does. */
static void test_gathered(kgen *g) {
  int64_t n = 1000, count = 3, bytes = tagc_q8_chunk_bytes(n), limit = 2500;
  float *x = malloc((size_t)(count * n) * 4), *y = malloc((size_t)(count * n) * 4),
        *one = malloc((size_t)n * 4);
  unsigned char *q = malloc((size_t)(count * bytes));
  for (int64_t i = 0; i < count * n; i++)
    x[i] = kgen_sample(g, KGEN_GAUSS);
  for (int64_t c = 0; c < count; c++)
    CHECK_OK(tagc_q8_encode_cpu(x + c * n, n, q + c * bytes));
  for (int64_t i = limit; i < count * n; i++)
    y[i] = 42.0f;
  CHECK_OK(tagc_q8_decode_cpu(q, n, (int32_t)count, bytes, limit, y));
  int64_t bad = 0;
  for (int64_t c = 0; c < count; c++) {
    CHECK_OK(tagc_q8_decode_cpu(q + c * bytes, n, 1, bytes, n, one));
    for (int64_t i = 0; i < n && c * n + i < limit; i++)
      bad += memcmp(&one[i], &y[c * n + i], 4) != 0;
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(y[limit] == 42.0f && y[count * n - 1] == 42.0f); /* nothing written past the limit */
  free(x), free(y), free(one), free(q);
}

/* The bytes do not depend on the OpenMP team size. */
static void test_threads(kgen *g) {
  int64_t n = 300000, bytes = tagc_q8_chunk_bytes(n);
  float *x = malloc((size_t)n * 4);
  unsigned char *a = malloc((size_t)bytes), *b = malloc((size_t)bytes);
  for (int64_t i = 0; i < n; i++)
    x[i] = kgen_sample(g, KGEN_LOGNORMAL);
  omp_set_num_threads(1);
  CHECK_OK(tagc_q8_encode_cpu(x, n, a));
  omp_set_num_threads(2);
  CHECK_OK(tagc_q8_encode_cpu(x, n, b));
  CHECK(memcmp(a, b, (size_t)bytes) == 0);
  free(x), free(a), free(b);
}

/* encode_ef against add + encode + decode + subtract, bit for bit (chunk and residual): with a
 * residual, without one (as if +0: -0 turns +0), in place, and without residual output; a NaN
 * in the residual poisons its block only. */
static void test_encode_ef(int64_t n, kgen *g) {
  int64_t bytes = tagc_q8_chunk_bytes(n);
  float *x = malloc((size_t)n * 4), *r = malloc((size_t)n * 4), *v = malloc((size_t)n * 4),
        *d = malloc((size_t)n * 4), *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
  unsigned char *qa = malloc((size_t)bytes), *qb = malloc((size_t)bytes);
  for (int64_t i = 0; i < n; i++) {
    x[i] = kgen_sample(g, (kgen_dist)(i / 256 % 3)) * (i % 5 == 0 ? -0.0f : 1.0f);
    r[i] = i % 7 == 0 ? -0.0f : 0.01f * kgen_sample(g, KGEN_GAUSS);
  }
  if (n > 600)
    r[n - 3] = NAN;
  for (int with_res = 0; with_res < 2; with_res++) {
    for (int64_t i = 0; i < n; i++)
      v[i] = x[i] + (with_res ? r[i] : 0.0f);
    CHECK_OK(tagc_q8_encode_cpu(v, n, qa));
    CHECK_OK(tagc_q8_decode_cpu(qa, n, 1, bytes, n, d));
    for (int64_t i = 0; i < n; i++)
      want[i] = v[i] - d[i];
    memset(qb, 0xAB, (size_t)bytes);
    CHECK_OK(tagc_q8_encode_ef_cpu(x, with_res ? r : NULL, n, qb, got));
    CHECK(memcmp(qa, qb, (size_t)bytes) == 0);
    CHECK(memcmp(want, got, (size_t)n * 4) == 0);
    memset(qb, 0xAB, (size_t)bytes);
    CHECK_OK(tagc_q8_encode_ef_cpu(x, with_res ? r : NULL, n, qb, NULL));
    CHECK(memcmp(qa, qb, (size_t)bytes) == 0);
  }
  /* in place: the residual becomes the new one */
  memcpy(got, r, (size_t)n * 4);
  CHECK_OK(tagc_q8_encode_ef_cpu(x, got, n, qb, got));
  CHECK(memcmp(want, got, (size_t)n * 4) == 0);
  if (n > 600) {
    int64_t last = (n - 1) / 256 * 256;
    CHECK(isnan(got[n - 3]) && isnan(d[last]));
    CHECK(isfinite(d[0]));
  }
  free(x), free(r), free(v), free(d), free(want), free(got), free(qa), free(qb);
}

/* decode_sum against W single decodes summed in rank order, bit for bit, at 1 and 2 threads. */
static void test_decode_sum(int64_t n, int32_t count, kgen *g) {
  int64_t bytes = tagc_q8_chunk_bytes(n);
  float *x = malloc((size_t)n * 4), *one = malloc((size_t)n * 4), *want = malloc((size_t)n * 4),
        *got = malloc((size_t)n * 4);
  unsigned char *q = malloc((size_t)(count * bytes));
  for (int32_t c = 0; c < count; c++) {
    for (int64_t i = 0; i < n; i++)
      x[i] = kgen_sample(g, (kgen_dist)((i / 256 + c) % 3)) * (i % 9 == c ? -0.0f : 1.0f);
    CHECK_OK(tagc_q8_encode_cpu(x, n, q + c * bytes));
    CHECK_OK(tagc_q8_decode_cpu(q + c * bytes, n, 1, bytes, n, one));
    for (int64_t i = 0; i < n; i++)
      want[i] = c == 0 ? one[i] : want[i] + one[i];
  }
  for (int t = 1; t <= 2; t++) {
    omp_set_num_threads(t);
    memset(got, 0x7f, (size_t)n * 4);
    CHECK_OK(tagc_q8_decode_sum_cpu(q, n, count, bytes, got));
    CHECK(memcmp(want, got, (size_t)n * 4) == 0);
  }
  free(x), free(one), free(want), free(got), free(q);
}

/* Chunks further apart than their size (a unit's grouped exchange puts the other segments'
 * chunks between them): decode and decode_sum read them at the stride given, with the same
 * values as when packed, and never the bytes between; a stride below the chunk size or not a
 * multiple of 4 is refused. */
static void test_strided(kgen *g) {
  int64_t n = 1000, bytes = tagc_q8_chunk_bytes(n), stride = bytes + 48, limit = 2 * n + 10;
  int32_t count = 3;
  float *x = malloc((size_t)(count * n) * 4), *want = malloc((size_t)(count * n) * 4),
        *got = malloc((size_t)(count * n) * 4);
  unsigned char *packed = malloc((size_t)(count * bytes)), *spread = malloc((size_t)(count * stride));
  memset(spread, 0x7f, (size_t)(count * stride)); /* between the chunks: huge scales if read */
  for (int64_t i = 0; i < count * n; i++)
    x[i] = kgen_sample(g, KGEN_GAUSS);
  for (int32_t c = 0; c < count; c++) {
    CHECK_OK(tagc_q8_encode_cpu(x + c * n, n, packed + c * bytes));
    memcpy(spread + c * stride, packed + c * bytes, (size_t)bytes);
  }
  CHECK_OK(tagc_q8_decode_cpu(packed, n, count, bytes, limit, want));
  CHECK_OK(tagc_q8_decode_cpu(spread, n, count, stride, limit, got));
  CHECK(memcmp(want, got, (size_t)limit * 4) == 0);
  CHECK_OK(tagc_q8_decode_sum_cpu(packed, n, count, bytes, want));
  CHECK_OK(tagc_q8_decode_sum_cpu(spread, n, count, stride, got));
  CHECK(memcmp(want, got, (size_t)n * 4) == 0);
  CHECK(tagc_q8_decode_cpu(spread, n, count, bytes - 16, limit, got) == TAGC_EINVAL);
  CHECK(tagc_q8_decode_cpu(spread, n, count, stride + 2, limit, got) == TAGC_EINVAL);
  CHECK(tagc_q8_decode_sum_cpu(spread, n, count, bytes - 16, got) == TAGC_EINVAL);
  CHECK(tagc_q8_decode_sum_cpu(spread, n, count, stride + 2, got) == TAGC_EINVAL);
  free(x), free(want), free(got), free(packed), free(spread);
}

static void test_bad_arguments(void) {
  float x[4] = {0};
  unsigned char q[32];
  CHECK(tagc_q8_encode_cpu(NULL, 4, q) == TAGC_EINVAL);
  CHECK(tagc_q8_encode_cpu(x, -1, q) == TAGC_EINVAL);
  CHECK(tagc_q8_decode_cpu(q, 4, 0, tagc_q8_chunk_bytes(4), 1, x) == TAGC_EINVAL);
  CHECK(tagc_q8_decode_cpu(q, 4, 1, tagc_q8_chunk_bytes(4), 5, x) == TAGC_EINVAL); /* limit past count * n */
  CHECK(tagc_q8_decode_cpu(NULL, 4, 1, tagc_q8_chunk_bytes(4), 4, x) == TAGC_EINVAL);
  CHECK_OK(tagc_q8_encode_cpu(NULL, 0, NULL));
  CHECK_OK(tagc_q8_decode_cpu(NULL, 4, 1, tagc_q8_chunk_bytes(4), 0, NULL));
  CHECK(tagc_q8_encode_ef_cpu(NULL, x, 4, q, x) == TAGC_EINVAL);
  CHECK(tagc_q8_encode_ef_cpu(x, x, -1, q, x) == TAGC_EINVAL);
  CHECK(tagc_q8_decode_sum_cpu(q, 4, 0, tagc_q8_chunk_bytes(4), x) == TAGC_EINVAL);
  CHECK(tagc_q8_decode_sum_cpu(NULL, 4, 1, tagc_q8_chunk_bytes(4), x) == TAGC_EINVAL);
  CHECK_OK(tagc_q8_encode_ef_cpu(NULL, NULL, 0, NULL, NULL));
  CHECK_OK(tagc_q8_decode_sum_cpu(NULL, 0, 2, tagc_q8_chunk_bytes(0), NULL));
}

int main(void) {
  kgen g = {7};
  test_chunk_bytes();
  for (int64_t n = 1; n < 1200; n += 173)
    test_round_trip(n, &g);
  test_round_trip(1 << 18, &g);
  test_special_blocks();
  test_gathered(&g);
  test_threads(&g);
  for (int64_t n = 1; n < 1200; n += 311)
    test_encode_ef(n, &g);
  test_encode_ef(300000, &g);
  test_decode_sum(1, 2, &g);
  test_decode_sum(1000, 3, &g);
  test_decode_sum(300000, 4, &g);
  test_strided(&g);
  test_bad_arguments();
  return TEST_END();
}
