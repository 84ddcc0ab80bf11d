/* Deterministic random inputs for the kernel tests (independent of the code under test). */
#ifndef TAGC_TESTS_KERNELS_KGEN_H
#define TAGC_TESTS_KERNELS_KGEN_H

#include <math.h>
#include <stdint.h>

typedef struct kgen {
  uint64_t s;
} kgen;

static inline uint64_t kgen_u64(kgen *g) {
  uint64_t z = (g->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static inline double kgen_unif(kgen *g) { return ((double)(kgen_u64(g) >> 11) + 0.5) / 9007199254740992.0; }

static inline double kgen_normal(kgen *g) {
  return sqrt(-2.0 * log(kgen_unif(g))) * cos(6.283185307179586 * kgen_unif(g));
}

typedef enum kgen_dist { KGEN_GAUSS, KGEN_LOGNORMAL, KGEN_CAUCHY } kgen_dist;

/* One sample with a random sign: Gaussian (sigma 1e-3), log-normal magnitude
 * (mu = -9, sigma = 2, like transformer gradients) or Cauchy (scale 1e-4, heavy tail). */
static inline float kgen_sample(kgen *g, kgen_dist d) {
  double x;
  if (d == KGEN_GAUSS)
    return (float)(1e-3 * kgen_normal(g));
  if (d == KGEN_LOGNORMAL)
    x = exp(-9.0 + 2.0 * kgen_normal(g));
  else
    x = 1e-4 * tan(3.141592653589793 * (kgen_unif(g) - 0.5));
  return (float)((kgen_u64(g) & 1) ? -x : x);
}

static inline void kgen_fill(kgen *g, kgen_dist d, float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    x[i] = kgen_sample(g, d);
}

#endif
