/* bf16: round-to-nearest-even against a reference that decides by exact distances in double,
 * on every bf16 value's neighbourhood (exact, +1 ulp of fp32, just below/at/above the tie,
 * top of the interval) and on random fp32; inf/NaN; stochastic rounding (neighbours only,
 * deterministic, split-invariant, unbiased); the wire reduction helpers. */
#include <float.h>

#include "common/status.h"
#include "kernels/bf16.h"
#include "kgen.h"
#include "test.h"

/* Value of a bf16 pattern's magnitude, from its fields; exponent 255 reads as 2^128. */
static double bf16_mag(uint32_t h) {
  uint32_t e = (h >> 7) & 0xFF, m = h & 0x7F;
  if (e == 0)
    return ldexp((double)m, -133);
  if (e == 255)
    return ldexp(1.0, 128);
  return ldexp((double)(128 + m), (int)e - 134);
}

/* Reference RNE for finite x: the two bf16 magnitudes around |x|, nearest wins, ties go to
 * the even pattern; values past the largest bf16 round to inf like any other neighbour. */
static uint16_t ref_round(float x) {
  uint32_t u = tagc_f32_bits(x), sign = (u >> 16) & 0x8000u, lo = (u & 0x7FFFFFFFu) >> 16;
  double ax = fabs((double)x), dl = ax - bf16_mag(lo), dh = bf16_mag(lo + 1) - ax;
  uint32_t pick = dl < dh ? lo : (dh < dl ? lo + 1 : ((lo & 1) ? lo + 1 : lo));
  return (uint16_t)(sign | pick);
}

static void test_neighbourhoods(void) {
  const uint32_t offsets[] = {0, 1, 0x7FFE, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
  int64_t bad = 0, n = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    if (((h >> 7) & 0xFF) == 0xFF)
      continue;
    for (size_t i = 0; i < sizeof offsets / sizeof *offsets; i++) {
      float x = tagc_f32_from_bits((h << 16) + offsets[i]);
      uint16_t got = tagc_bf16_round(x), want = ref_round(x);
      if (got != want && bad++ < 5)
        fprintf(stderr, "x bits %08x: got %04x want %04x\n", tagc_f32_bits(x), got, want);
      n++;
    }
  }
  printf("neighbourhoods: %lld values checked\n", (long long)n);
  CHECK_EQ_INT(bad, 0);
}

static void test_random_and_special(void) {
  kgen g = {3};
  int64_t bad = 0, nan_bad = 0;
  for (int i = 0; i < 2000000; i++) {
    float x = tagc_f32_from_bits((uint32_t)kgen_u64(&g));
    uint16_t got = tagc_bf16_round(x);
    if (isnan(x)) {
      float back = tagc_bf16_to_f32(got);
      nan_bad += !isnan(back) || signbit(back) != signbit(x) || !(got & 0x0040u);
    } else {
      bad += got != ref_round(x);
    }
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(nan_bad, 0);
  CHECK_EQ_INT(tagc_bf16_round(INFINITY), 0x7F80);
  CHECK_EQ_INT(tagc_bf16_round(-INFINITY), 0xFF80);
  CHECK_EQ_INT(tagc_bf16_round(FLT_MAX), 0x7F80);           /* past the last bf16 tie */
  CHECK_EQ_INT(tagc_bf16_round(-0.0f), 0x8000);
  CHECK_EQ_INT(tagc_bf16_round(tagc_f32_from_bits(0x7F800001u)) & 0x7FC0, 0x7FC0);
  int64_t dec_bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++)
    dec_bad += tagc_f32_bits(tagc_bf16_to_f32((uint16_t)h)) != h << 16;
  CHECK_EQ_INT(dec_bad, 0);
}

static void test_stochastic(void) {
  kgen g = {8};
  enum { N = 100000 };
  float *x = malloc(N * sizeof(float));
  uint16_t *a = malloc(N * sizeof(uint16_t)), *b = malloc(N * sizeof(uint16_t));
  for (int i = 0; i < N; i++)
    x[i] = kgen_sample(&g, i % 2 ? KGEN_LOGNORMAL : KGEN_GAUSS);
  x[0] = 1.0f;
  x[1] = tagc_f32_from_bits(0x00000005u);
  CHECK_OK(tagc_bf16_encode_stochastic_cpu(x, a, N, 11, 3, 1000));
  CHECK_OK(tagc_bf16_encode_stochastic_cpu(x, b, 777, 11, 3, 1000));
  CHECK_OK(tagc_bf16_encode_stochastic_cpu(x + 777, b + 777, N - 777, 11, 3, 1777));
  CHECK(memcmp(a, b, N * sizeof(uint16_t)) == 0);
  int64_t bad = 0;
  for (int i = 0; i < N; i++) {
    uint32_t lo = (tagc_f32_bits(x[i]) >> 16);
    bad += a[i] != lo && a[i] != lo + 1;
    bad += (tagc_f32_bits(x[i]) & 0xFFFF) == 0 && a[i] != lo;
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_OK(tagc_bf16_encode_stochastic_cpu(x, b, N, 12, 3, 1000));
  CHECK(memcmp(a, b, N * sizeof(uint16_t)) != 0);
  /* unbiased: 1 + 2^-10 rounds up to 1 + 2^-7 with probability 1/8 */
  float v = 1.0f + 1.0f / 1024.0f;
  for (int i = 0; i < N; i++)
    x[i] = v;
  CHECK_OK(tagc_bf16_encode_stochastic_cpu(x, a, N, 99, 0, 0));
  double mean = 0;
  for (int i = 0; i < N; i++)
    mean += tagc_bf16_to_f32(a[i]);
  mean /= N;
  double sigma = ldexp(1.0, -7) * sqrt(0.125 * 0.875 / N);
  printf("stochastic mean %.9f for %.9f (sigma %.2g)\n", mean, (double)v, sigma);
  CHECK_NEAR(mean, v, 5 * sigma);
  free(x);
  free(a);
  free(b);
}

static void test_wire_helpers(void) {
  kgen g = {21};
  enum { N = 70000 };
  float *x = malloc(N * sizeof(float)), *acc = malloc(N * sizeof(float)),
        *back = malloc(N * sizeof(float));
  uint16_t *w = malloc(N * sizeof(uint16_t)), *o = malloc(N * sizeof(uint16_t));
  kgen_fill(&g, KGEN_GAUSS, x, N);
  CHECK_OK(tagc_bf16_encode_cpu(x, w, N));
  CHECK_OK(tagc_bf16_decode_cpu(w, back, N));
  int64_t bad = 0;
  for (int i = 0; i < N; i++) {
    bad += w[i] != ref_round(x[i]);
    bad += tagc_f32_bits(back[i]) != (uint32_t)w[i] << 16;
    acc[i] = 0.5f * x[i];
  }
  CHECK_OK(tagc_bf16_add_encode_cpu(o, acc, w, N));
  CHECK_OK(tagc_bf16_accumulate_cpu(acc, w, N));
  for (int i = 0; i < N; i++) {
    float sum = 0.5f * x[i] + back[i];
    bad += tagc_f32_bits(acc[i]) != tagc_f32_bits(sum);
    bad += o[i] != ref_round(sum);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(tagc_bf16_encode_cpu(NULL, w, 5), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_bf16_decode_cpu(w, back, -1), TAGC_EINVAL);
  CHECK_OK(tagc_bf16_encode_cpu(NULL, NULL, 0));
  free(x);
  free(acc);
  free(back);
  free(w);
  free(o);
}

int main(void) {
  test_neighbourhoods();
  test_random_and_special();
  test_stochastic();
  test_wire_helpers();
  return TEST_END();
}
