/* The fused causal attention (model/attention_flash_cuda.h) against the CPU oracle
 * (tagc_cpu_attention_forward / backward of model/model_kernels_cpu.h), hd 64, on shapes
 * whose T is and is not a multiple of the 32-row tile:
 *  - y, lse and dqkv in fp32 and bf16 modes (max abs and relative difference printed;
 *    relative = max |gpu - cpu| / max |cpu| over the tensor, L2 relative =
 *    ||gpu - cpu|| / ||cpu||); lse against log-sum-exp of the scaled scores in double;
 *  - dqkv is written in full (the buffer starts as NaN);
 *  - a second forward and backward give bit-identical y, lse and dqkv;
 *  - unsupported shapes, NULL pointers and a short workspace give TAGC_EINVAL;
 *  - GPT-2 small's shape (B 1, T 1024, 12 heads): on a device always, in the emulation only
 *    with the argument "gpt2" (test_attention_flash_emu_gpt2, a minute: label slow).
 * Tolerances:
 *  - fp32: 1e-4 relative for y, dqkv and lse. Both sides sum in fp32 in different orders
 *    (the kernels' online softmax rescales per 32-key tile and divides by the sum at the
 *    end; the CPU normalises first and multiplies through OpenBLAS) and use different exp
 *    (expf against a ~2 ulp polynomial): ~1e-6, while a wrong index, mask or scale is O(1).
 *  - bf16: q, k, v, dy and the probabilities are rounded to 8-bit mantissas (2^-9 relative
 *    each) before the products, so 2e-2 in L2 relative per tensor; max figures printed.
 * Exits 77 when there is no CUDA device. Built a second time against the host emulation
 * (TEST_EMU) with the stand-in wmma of tests/kernels_gpu/emu/mma.h. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test.h"
#include "model/attention_flash_cuda.h"
#include "model/model_kernels_cpu.h"

#define GPU_TEST_SEED 0x5eed1234
#include "gpu_util.h"

#define HD 64

static float *download(const void *dev, size_t n) {
  float *host = malloc(n * sizeof *host);
  cudaError_t err = cudaMemcpy(host, dev, n * sizeof *host, cudaMemcpyDeviceToHost);
  CHECK_MSG(err == cudaSuccess, "cudaMemcpy: %s", cudaGetErrorString(err));
  return host;
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Compares got with ref: max-based relative difference (fp32) or L2 relative (bf16) within
 * tol; NaN counts as a failure. Prints both figures. */
static void compare(const char *what, const float *got, const float *ref, size_t n, int bf16,
                    double tol) {
  double max_diff = 0, max_ref = 1e-30, sq_diff = 0, sq_ref = 1e-60;
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (!(d == d))
      bad++;
    max_diff = fmax(max_diff, d);
    max_ref = fmax(max_ref, fabs((double)ref[i]));
    sq_diff += d * d;
    sq_ref += (double)ref[i] * ref[i];
  }
  double rel = max_diff / max_ref, l2 = sqrt(sq_diff / sq_ref), fig = bf16 ? l2 : rel;
  printf("    %-5s max abs %.3g  max rel %.3g  l2 rel %.3g\n", what, max_diff, rel, l2);
  CHECK_MSG(bad == 0, "%s: %zu non-finite differences", what, bad);
  CHECK_MSG(fig <= tol, "%s: %s difference %.3g > %.3g", what, bf16 ? "L2 relative" : "relative",
            fig, tol);
}

/* lse[(b*NH + h)*T + t] = log sum_{j <= t} exp(scale * q_t . k_j), in double. */
static void lse_reference(float *lse, const float *qkv, int B, int T, int NH) {
  int C = NH * HD;
  size_t C3 = 3 * (size_t)C;
  double scale = 1.0 / sqrt((double)HD), *s = malloc((size_t)T * sizeof *s);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * HD;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
          const float *k = qkv + ((size_t)b * T + j) * C3 + C + (size_t)h * HD;
          double dot = 0;
          for (int c = 0; c < HD; c++)
            dot += (double)q[c] * k[c];
          s[j] = scale * dot;
          mx = fmax(mx, s[j]);
        }
        for (int j = 0; j <= t; j++)
          sum += exp(s[j] - mx);
        lse[((size_t)b * NH + h) * T + t] = (float)(mx + log(sum));
      }
  free(s);
}

typedef struct outputs {
  float *y, *lse, *dqkv;
} outputs;

/* One forward and backward on the device; dqkv starts as NaN (all bits set). */
static outputs run_flash(const float *gqkv, const float *gdy, int B, int T, int NH, int bf16) {
  size_t C = (size_t)NH * HD, BT = (size_t)B * T, ws_bytes =
      tagc_flash_attention_workspace_bytes(B, T, NH);
  float *gy = dev_alloc(BT * C * 4), *glse = dev_alloc(BT * NH * 4);
  float *gdqkv = dev_alloc(BT * 3 * C * 4);
  void *ws = dev_alloc(ws_bytes);
  cudaMemset(gdqkv, 0xFF, BT * 3 * C * 4);
  CHECK_OK(tagc_flash_attention_forward(gy, glse, gqkv, B, T, NH, HD, bf16, NULL));
  CHECK_OK(tagc_flash_attention_backward(gdqkv, gdy, gqkv, gy, glse, B, T, NH, HD, bf16, ws,
                                         ws_bytes, NULL));
  CHECK(cudaStreamSynchronize(NULL) == cudaSuccess);
  outputs o = {download(gy, BT * C), download(glse, BT * NH), download(gdqkv, BT * 3 * C)};
  cudaFree(gy), cudaFree(glse), cudaFree(gdqkv), cudaFree(ws);
  return o;
}

static void free_outputs(outputs *o) { free(o->y), free(o->lse), free(o->dqkv); }

static void shape_test(int B, int T, int NH) {
  size_t C = (size_t)NH * HD, BT = (size_t)B * T, att_n = (size_t)B * NH * T * T;
  float *qkv = malloc(BT * 3 * C * 4), *dy = malloc(BT * C * 4), *y = malloc(BT * C * 4);
  float *dqkv = malloc(BT * 3 * C * 4), *lse = malloc(BT * NH * 4);
  float *att = malloc(att_n * 4), *datt = malloc(att_n * 4);
  /* scores of a few units: peaked and flat rows both occur */
  fill(qkv, BT * 3 * C, -1.0f, 1.0f);
  fill(dy, BT * C, -1.0f, 1.0f);
  tagc_cpu_att_dims d = {B, T, (int)C, NH, HD, 1.0f / sqrtf((float)HD)};
  tagc_cpu_attention_forward(&d, y, att, qkv);
  tagc_cpu_attention_backward(&d, dqkv, datt, dy, att, qkv);
  lse_reference(lse, qkv, B, T, NH);
  float *gqkv = dev_upload(qkv, BT * 3 * C * 4), *gdy = dev_upload(dy, BT * C * 4);
  for (int bf16 = 0; bf16 <= 1; bf16++) {
    double t0 = seconds();
    outputs o = run_flash(gqkv, gdy, B, T, NH, bf16);
    printf("  B %d T %d NH %d %s (%.2f s)\n", B, T, NH, bf16 ? "bf16" : "fp32", seconds() - t0);
    double tol = bf16 ? 2e-2 : 1e-4;
    compare("y", o.y, y, BT * C, bf16, tol);
    compare("lse", o.lse, lse, BT * NH, bf16, tol);
    compare("dqkv", o.dqkv, dqkv, BT * 3 * C, bf16, tol);
    outputs again = run_flash(gqkv, gdy, B, T, NH, bf16);
    CHECK_MSG(memcmp(o.y, again.y, BT * C * 4) == 0 && memcmp(o.lse, again.lse, BT * NH * 4) == 0
                  && memcmp(o.dqkv, again.dqkv, BT * 3 * C * 4) == 0,
              "B %d T %d NH %d %s: a second run differs", B, T, NH, bf16 ? "bf16" : "fp32");
    free_outputs(&o);
    free_outputs(&again);
  }
  cudaFree(gqkv), cudaFree(gdy);
  free(qkv), free(dy), free(y), free(dqkv), free(lse), free(att), free(datt);
}

static void invalid_test(void) {
  CHECK(tagc_flash_attention_supported(1024, 12, 64));
  CHECK(tagc_flash_attention_supported(1, 1, 64));
  CHECK(!tagc_flash_attention_supported(1024, 12, 32));
  CHECK(!tagc_flash_attention_supported(1024, 6, 128));
  CHECK(!tagc_flash_attention_supported(0, 12, 64));
  CHECK(!tagc_flash_attention_supported(16, 0, 64));
  int B = 1, T = 8, NH = 1;
  size_t ws_bytes = tagc_flash_attention_workspace_bytes(B, T, NH);
  CHECK(ws_bytes >= (size_t)B * T * NH * sizeof(float));
  float *buf = dev_alloc(4096 * sizeof(float));
  void *ws = dev_alloc(ws_bytes);
  CHECK_EQ_INT(tagc_flash_attention_forward(buf, buf, buf, B, T, NH, 32, 0, NULL), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_flash_attention_forward(buf, buf, buf, B, 0, NH, 64, 1, NULL), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_flash_attention_forward(buf, buf, buf, 0, T, NH, 64, 0, NULL), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_flash_attention_forward(NULL, buf, buf, B, T, NH, 64, 0, NULL), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_flash_attention_backward(buf, buf, buf, buf, buf, B, T, NH, 128, 0, ws,
                                             ws_bytes, NULL), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_flash_attention_backward(buf, buf, buf, buf, buf, B, T, NH, 64, 0, ws,
                                             ws_bytes - 1, NULL), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_flash_attention_backward(buf, buf, buf, buf, buf, B, T, NH, 64, 0, NULL,
                                             ws_bytes, NULL), TAGC_EINVAL);
  cudaFree(buf), cudaFree(ws);
}

#ifdef TEST_EMU
#define EMULATED 1
#else
#define EMULATED 0
#endif

int main(int argc, char **argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    TEST_SKIP("no CUDA device");
  tagc_cpu_blas_single_threaded();
  double t0 = seconds();
  /* GPT-2 small's attention (12 heads, T 1024) takes a minute in the emulation: there it
   * runs alone, with the argument "gpt2"; on a device after the small shapes */
  int gpt2_only = argc > 1 && strcmp(argv[1], "gpt2") == 0;
  if (!gpt2_only) {
    invalid_test();
    shape_test(1, 1, 2);
    shape_test(2, 17, 3);
    shape_test(1, 64, 4);
    shape_test(2, 130, 2);
  }
  if (gpt2_only || !EMULATED)
    shape_test(1, 1024, 12);
  printf("  all shapes: %.1f s\n", seconds() - t0);
  return TEST_END();
}
