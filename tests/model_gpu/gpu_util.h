/* Helpers of the model's GPU tests (test_model_gpu.c, test_attention_flash.c): a seeded
 * generator (define GPU_TEST_SEED before including this for another sequence) and device
 * buffers that exit the test on a failed allocation. */
#ifndef TAGC_TESTS_MODEL_GPU_GPU_UTIL_H
#define TAGC_TESTS_MODEL_GPU_GPU_UTIL_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef GPU_TEST_SEED
#define GPU_TEST_SEED 0x1234567
#endif

static uint64_t rng_state = GPU_TEST_SEED;

static uint32_t rng_u32(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}

static float rng_uniform(float lo, float hi) {
  return lo + (hi - lo) * (float)(rng_u32() & 0xFFFFFF) / 16777216.0f;
}

static void fill(float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++)
    x[i] = rng_uniform(lo, hi);
}

/* Zeroed device memory. */
static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
    exit(1);
  }
  cudaMemset(p, 0, bytes);
  return p;
}

static void *dev_upload(const void *host, size_t bytes) {
  void *p = dev_alloc(bytes);
  cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
  return p;
}

#endif
