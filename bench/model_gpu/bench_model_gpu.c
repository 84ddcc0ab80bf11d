/* Training-step benchmark of the CUDA model (model/model_cuda.h): a GPT-2-small-shaped
 * config (L=12, C=768, NH=12, T=1024, V=256 bytes) at world size 1: fp32, bf16, and bf16 with
 * the fused attention (TAGC_ATTENTION=flash) against the chunked one.
 * A step is forward (with its loss sync), backward, the device sum of squares and AdamW
 * over the whole arena. Prints tokens/s and an MFU estimate.
 *
 * Usage: bench_model_gpu [steps [batch]]   (defaults: 10 timed steps after 2 warm-up steps,
 * batch 16, lowered until the context fits in the free device memory).
 *
 * MFU: model FLOPs per token = 6 * (parameters outside the embeddings) + 12 * L * C * T
 * (the attention products, forward and backward, as llm.c counts them), divided by the
 * device peak: TAGC_PEAK_FP32_TFLOPS / TAGC_PEAK_BF16_TFLOPS from the environment, else
 * the H100/H200 SXM dense figures (67 fp32 non-tensor, 989 bf16 tensor). */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/adamw.h"
#include "model/adamw_cuda.h"
#include "model/model.h"
#include "model/model_cuda.h"

#define WARMUP_STEPS 2

typedef struct arena {
  tagc_unit_hooks hooks;
  const tagc_model_layout *layout;
  float *params, *grads;
} arena;

static const float *arena_params(void *ctx, int u) {
  arena *a = ctx;
  return a->params + a->layout->units[u].offset;
}

static float *arena_grads(void *ctx, int u) {
  arena *a = ctx;
  return a->grads + a->layout->units[u].offset;
}

static tagc_status arena_done(void *ctx, int u) {
  (void)ctx, (void)u;
  return TAGC_OK;
}

static double env_or(const char *name, double fallback) {
  const char *s = getenv(name);
  return s && *s ? atof(s) : fallback;
}

#define CUDA_OR_FAIL(expr)                                                                   \
  do {                                                                                       \
    cudaError_t e_ = (expr);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(e_));                            \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

#define TAGC_OR_FAIL(expr)                                                                   \
  do {                                                                                       \
    tagc_status s_ = (expr);                                                                 \
    if (s_ != TAGC_OK) {                                                                     \
      fprintf(stderr, "%s: %s (%s)\n", #expr, tagc_strerror(s_), tagc_last_error());         \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

/* Times `steps` training steps with compute dtype `dtype`, printed under `label`; 0 on
 * success. */
static int bench(const tagc_model_layout *lay, const float *host_params, int steps, int batch,
                 tagc_compute_dtype dtype, const char *label) {
  const tagc_model_config *c = &lay->cfg;
  size_t np = lay->n_params, bytes = np * sizeof(float), arena_bytes = 4 * bytes;
  size_t free_b = 0, total_b = 0;
  CUDA_OR_FAIL(cudaMemGetInfo(&free_b, &total_b));
  while (batch > 1 &&
         tagc_model_cuda_bytes_needed(lay, batch, dtype) + arena_bytes > free_b / 10 * 9)
    batch--;
  const char *name = label;
  cudaStream_t stream;
  CUDA_OR_FAIL(cudaStreamCreate(&stream));
  tagc_model_cuda *m = NULL;
  TAGC_OR_FAIL(tagc_model_cuda_create(lay, batch, 0, dtype, stream, &m));
  arena a = {{0}, lay, NULL, NULL};
  float *mom = NULL, *var = NULL;
  double *sumsq = NULL;
  void *ws = NULL;
  int *flag = NULL;
  CUDA_OR_FAIL(cudaMalloc((void **)&a.params, bytes));
  CUDA_OR_FAIL(cudaMalloc((void **)&a.grads, bytes));
  CUDA_OR_FAIL(cudaMalloc((void **)&mom, bytes));
  CUDA_OR_FAIL(cudaMalloc((void **)&var, bytes));
  CUDA_OR_FAIL(cudaMalloc((void **)&sumsq, sizeof(double)));
  CUDA_OR_FAIL(cudaMalloc(&ws, tagc_sumsq_cuda_workspace_bytes()));
  CUDA_OR_FAIL(cudaMalloc((void **)&flag, sizeof(int)));
  CUDA_OR_FAIL(cudaMemcpy(a.params, host_params, bytes, cudaMemcpyHostToDevice));
  CUDA_OR_FAIL(cudaMemset(mom, 0, bytes));
  CUDA_OR_FAIL(cudaMemset(var, 0, bytes));
  a.hooks = (tagc_unit_hooks){.ctx = &a, .unit_params = arena_params, .unit_grads = arena_grads,
                              .unit_backward_done = arena_done};
  size_t nt = (size_t)batch * c->ctx;
  uint16_t *tokens = malloc(nt * sizeof(uint16_t)), *targets = malloc(nt * sizeof(uint16_t));
  uint64_t x = 88172645463325252ULL;
  for (size_t i = 0; i < nt; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    tokens[i] = (uint16_t)(x & 0xFF);
    targets[i] = (uint16_t)((x >> 8) & 0xFF);
  }
  tagc_adamw_config ac = {.lr = 3e-4f, .min_lr_ratio = 0.1f, .warmup_steps = 0,
                          .total_steps = 1000, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .weight_decay = 0.1f, .grad_clip = 1.0f};
  cudaEvent_t t0, t1;
  CUDA_OR_FAIL(cudaEventCreate(&t0));
  CUDA_OR_FAIL(cudaEventCreate(&t1));
  double loss = 0, first_loss = 0;
  for (int s = 0; s < WARMUP_STEPS + steps; s++) {
    if (s == WARMUP_STEPS)
      CUDA_OR_FAIL(cudaEventRecord(t0, stream));
    CUDA_OR_FAIL(cudaMemsetAsync(a.grads, 0, bytes, stream));
    TAGC_OR_FAIL(tagc_model_cuda_forward(m, &a.hooks, tokens, targets, batch, &loss));
    if (s == 0)
      first_loss = loss;
    TAGC_OR_FAIL(tagc_model_cuda_backward(m, &a.hooks, 1.0f / (float)nt));
    TAGC_OR_FAIL(tagc_sumsq_cuda(a.grads, np, sumsq, ws, stream));
    /* grad_scale 1: reading the norm back would add a host sync per step; the clipped
     * variant costs the same kernels. */
    TAGC_OR_FAIL(tagc_adamw_update_range_cuda(lay, 0, np, a.params, a.grads, mom, var, &ac,
                                              s + 1, ac.lr, 1.0f, flag, stream));
  }
  CUDA_OR_FAIL(cudaEventRecord(t1, stream));
  CUDA_OR_FAIL(cudaEventSynchronize(t1));
  float ms = 0;
  CUDA_OR_FAIL(cudaEventElapsedTime(&ms, t0, t1));
  int nonfinite = 0;
  CUDA_OR_FAIL(cudaMemcpy(&nonfinite, flag, sizeof nonfinite, cudaMemcpyDeviceToHost));

  double flops_token = tagc_model_flops_per_token(lay);
  double step_s = ms / 1e3 / steps, tok_s = (double)nt / step_s;
  double peak = dtype == TAGC_COMPUTE_BF16 ? env_or("TAGC_PEAK_BF16_TFLOPS", 989.0)
                                           : env_or("TAGC_PEAK_FP32_TFLOPS", 67.0);
  double mfu = flops_token * tok_s / (peak * 1e12);
  printf("%s: batch %d x %d tokens, %.1f ms/step, %.0f tokens/s, %.1f TFLOP/s model, MFU %.1f%% "
         "of %.0f TFLOP/s; device memory %.2f GiB (+%.2f GiB arenas); loss/token %.4f -> %.4f%s\n",
         name, batch, c->ctx, step_s * 1e3, tok_s, flops_token * tok_s / 1e12, 100 * mfu, peak,
         tagc_model_cuda_bytes(m) / 1073741824.0, arena_bytes / 1073741824.0,
         first_loss / (double)nt, loss / (double)nt, nonfinite ? " (NON-FINITE GRADIENT)" : "");
  tagc_model_cuda_destroy(m);
  cudaFree(a.params), cudaFree(a.grads), cudaFree(mom), cudaFree(var), cudaFree(sumsq);
  cudaFree(ws), cudaFree(flag);
  cudaEventDestroy(t0), cudaEventDestroy(t1), cudaStreamDestroy(stream);
  free(tokens), free(targets);
  return nonfinite ? 1 : 0;
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 10, batch = argc > 2 ? atoi(argv[2]) : 16;
  if (steps < 1 || batch < 1) {
    fprintf(stderr, "usage: bench_model_gpu [steps >= 1 [batch >= 1]]\n");
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    fprintf(stderr, "bench_model_gpu: no CUDA device\n");
    return 77;
  }
  struct cudaDeviceProp prop;
  CUDA_OR_FAIL(cudaGetDeviceProperties(&prop, 0));
  tagc_model_config cfg = {.vocab = 256, .ctx = 1024, .n_layer = 12, .n_head = 12, .d_model = 768};
  static tagc_model_layout lay;
  TAGC_OR_FAIL(tagc_model_layout_init(&lay, &cfg));
  printf("device %s (sm_%d%d), GPT-2 small shape L=%d C=%d NH=%d T=%d V=%d, %zu parameters\n",
         prop.name, prop.major, prop.minor, cfg.n_layer, cfg.d_model, cfg.n_head, cfg.ctx,
         cfg.vocab, lay.n_params);
  float *params = malloc(lay.n_params * sizeof(float));
  if (!params)
    return 1;
  tagc_model_init_params(&lay, 1, params);
  int rc = bench(&lay, params, steps, batch, TAGC_COMPUTE_FP32, "fp32");
  rc |= bench(&lay, params, steps, batch, TAGC_COMPUTE_BF16, "bf16");
  setenv("TAGC_ATTENTION", "flash", 1); /* the fused attention against the chunked one */
  rc |= bench(&lay, params, steps, batch, TAGC_COMPUTE_BF16, "bf16+flash");
  unsetenv("TAGC_ATTENTION");
  free(params);
  return rc;
}
