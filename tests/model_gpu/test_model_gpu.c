/* The CUDA model against the CPU oracle (model/model.c, model/adamw.c):
 *  - each own kernel alone against a plain CPU reference (double sums);
 *  - one full training step at world size 1 on two small configs, fp32 and bf16 compute:
 *    the loss, every parameter gradient (max abs and relative difference per tensor
 *    printed), the gradient sum of squares, and the parameters after one AdamW step;
 *  - a repeated step gives bit-identical loss and gradients;
 *  - AdamW on identical inputs (ranges split mid-tensor) and the non-finite flag;
 *  - a context larger than the device memory fails with TAGC_ENOMEM, and the device is
 *    still usable afterwards.
 * Tolerances (relative = max |gpu - cpu| / max |cpu| over a tensor):
 *  - fp32: 1e-4 for the loss and every gradient. Neither side is exact: cuBLAS and OpenBLAS
 *    sum the products in different orders and blockings (rounding ~ sqrt(K) * 2^-24 for
 *    K <= 512 terms), the CPU uses its own exp/tanh approximations (~2 ulp) where the GPU
 *    uses expf/tanhf, and the reductions of LayerNorm and softmax run in other orders; a few
 *    such roundings through three layers of backward stay near 1e-6, so 1e-4 leaves a wide
 *    margin while still catching any wrong index, scale or missing term (those give O(1)).
 *  - bf16: the operands of every product are rounded to 8-bit mantissas (relative 2^-9 per
 *    operand), so the loss is checked to 1e-3 relative and gradients to 3e-2 in relative L2
 *    norm per tensor (||gpu - cpu|| / ||cpu||), the max-based figure is only printed.
 * Exits 77 when there is no CUDA device. Built a second time against the host emulation
 * (TEST_EMU, emu/), where it runs everything but the out-of-memory case. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test.h"
#include "model/adamw.h"
#include "model/adamw_cuda.h"
#include "model/model.h"
#include "model/model_cuda.h"
#include "model/model_kernels_cpu.h"
#include "model/model_kernels_cuda.h"
#include "gpu_util.h"

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                  */

static void download(void *host, const void *dev, size_t bytes) {
  cudaError_t err = cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
  CHECK_MSG(err == cudaSuccess, "cudaMemcpy: %s", cudaGetErrorString(err));
}

/* Max |a - b| / max(max |b|, floor). */
static double max_rel(const float *a, const float *b, size_t n, double floor_) {
  double diff = 0, mag = floor_;
  for (size_t i = 0; i < n; i++) {
    diff = fmax(diff, fabs((double)a[i] - b[i]));
    mag = fmax(mag, fabs((double)b[i]));
  }
  return diff / mag;
}

/* Compares a device result with a host reference: max relative difference <= tol. */
static void check_close(const char *what, const float *dev, const float *ref, size_t n,
                        double tol) {
  float *got = malloc(n * sizeof *got);
  download(got, dev, n * sizeof *got);
  double rel = max_rel(got, ref, n, 1e-30);
  printf("  kernel %-28s max rel diff %.3g\n", what, rel);
  CHECK_MSG(rel <= tol, "%s: relative difference %.3g > %.3g", what, rel, tol);
  free(got);
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels alone                                                                            */

static void test_layernorm(void) {
  int N = 37, C = 96;
  size_t nc = (size_t)N * C;
  float *x = malloc(nc * 4), *w = malloc(C * 4), *b = malloc(C * 4), *d = malloc(nc * 4);
  float *dr = malloc(nc * 4), *out = malloc(nc * 4), *stat = malloc(N * 8), *dinp = malloc(nc * 4);
  float *dw = calloc(C, 4), *db = calloc(C, 4);
  fill(x, nc, -2, 3);
  fill(w, C, 0.5f, 1.5f);
  fill(b, C, -0.5f, 0.5f);
  fill(d, nc, -1, 1);
  fill(dr, nc, -1, 1);
  for (int i = 0; i < N; i++) {
    const float *xi = x + (size_t)i * C;
    double mean = 0, var = 0;
    for (int c = 0; c < C; c++)
      mean += xi[c];
    mean /= C;
    for (int c = 0; c < C; c++)
      var += (xi[c] - mean) * (xi[c] - mean);
    double rstd = 1.0 / sqrt(var / C + 1e-5);
    stat[2 * i] = (float)mean;
    stat[2 * i + 1] = (float)rstd;
    double sd = 0, sdx = 0;
    for (int c = 0; c < C; c++) {
      double xh = (xi[c] - mean) * rstd, di = d[(size_t)i * C + c];
      out[(size_t)i * C + c] = (float)(xh * w[c] + b[c]);
      sd += di * w[c];
      sdx += di * w[c] * xh;
      dw[c] += (float)(di * xh);
      db[c] += (float)di;
    }
    for (int c = 0; c < C; c++) {
      double xh = (xi[c] - mean) * rstd, di = d[(size_t)i * C + c];
      dinp[(size_t)i * C + c] =
          (float)(dr[(size_t)i * C + c] + rstd * (di * w[c] - sd / C - xh * sdx / C));
    }
  }
  float *gx = dev_upload(x, nc * 4), *gw = dev_upload(w, C * 4), *gb = dev_upload(b, C * 4);
  float *gd = dev_upload(d, nc * 4), *gdr = dev_upload(dr, nc * 4), *gout = dev_alloc(nc * 4);
  float *gstat = dev_alloc(N * 8), *gdinp = dev_alloc(nc * 4), *gdw = dev_alloc(C * 4);
  float *gdb = dev_alloc(C * 4), *ws = dev_alloc(tagc_gpu_colsum_workspace_floats(C) * 4);
  CHECK_OK(tagc_gpu_layernorm_forward(gout, gstat, gx, gw, gb, N, C, NULL));
  CHECK_OK(tagc_gpu_layernorm_backward_input(gdinp, gdr, gd, gx, gstat, gw, N, C, NULL));
  CHECK_OK(tagc_gpu_layernorm_backward_params(gdw, gdb, gd, gx, gstat, N, C, ws, NULL));
  check_close("layernorm_forward", gout, out, nc, 1e-5);
  check_close("layernorm_forward stat", gstat, stat, 2 * (size_t)N, 1e-5);
  check_close("layernorm_backward_input", gdinp, dinp, nc, 1e-5);
  check_close("layernorm_backward_params w", gdw, dw, C, 1e-5);
  check_close("layernorm_backward_params b", gdb, db, C, 1e-5);
  /* colsum_add adds: a second call doubles db */
  CHECK_OK(tagc_gpu_colsum_add(gdb, gd, N, C, ws, NULL));
  for (int c = 0; c < C; c++)
    db[c] *= 2;
  check_close("colsum_add", gdb, db, C, 1e-5);
  void *ptrs[] = {gx, gw, gb, gd, gdr, gout, gstat, gdinp, gdw, gdb, ws};
  for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
    cudaFree(ptrs[i]);
  free(x), free(w), free(b), free(d), free(dr), free(out), free(stat), free(dinp), free(dw),
      free(db);
}

static void test_softmax_and_gelu(void) {
  int BH = 3, T = 45;
  size_t n = (size_t)BH * T * T;
  float scale = 0.25f;
  float *s = malloc(n * 4), *p = malloc(n * 4), *dp = malloc(n * 4), *ds = malloc(n * 4);
  fill(s, n, -4, 4);
  fill(dp, n, -1, 1);
  for (size_t r = 0; r < (size_t)BH * T; r++) {
    int t = (int)(r % T);
    const float *sr = s + r * T;
    double mx = -INFINITY, sum = 0, dot = 0;
    for (int j = 0; j <= t; j++)
      mx = fmax(mx, sr[j]);
    for (int j = 0; j <= t; j++)
      sum += exp(sr[j] - mx);
    for (int j = 0; j < T; j++)
      p[r * T + j] = j <= t ? (float)(exp(sr[j] - mx) / sum) : 0.0f;
    for (int j = 0; j <= t; j++)
      dot += (double)p[r * T + j] * dp[r * T + j];
    for (int j = 0; j < T; j++)
      ds[r * T + j] = j <= t ? (float)(p[r * T + j] * (dp[r * T + j] - dot) * scale) : 0.0f;
  }
  float *gs = dev_upload(s, n * 4), *gd = dev_upload(dp, n * 4);
  float *glse = dev_alloc((size_t)BH * T * 4);
  CHECK_OK(tagc_gpu_softmax_causal_forward(gs, glse, BH, T, T, 0, T, NULL));
  check_close("softmax_causal_forward", gs, p, n, 1e-5);
  CHECK_OK(tagc_gpu_softmax_causal_backward(gd, gs, BH, T, T, 0, T, scale, NULL));
  check_close("softmax_causal_backward", gd, ds, n, 1e-5);
  /* a chunk: rows 20..34 against keys 0..34, the probabilities recomputed from the lse the
     whole square's forward kept; then the chunk's own forward and backward */
  int r0 = 20, cn = 15, ck = 35;
  size_t nc = (size_t)BH * cn * ck;
  float *cs = malloc(nc * 4), *cp = malloc(nc * 4), *cdp = malloc(nc * 4), *cds = malloc(nc * 4);
  for (int bh = 0; bh < BH; bh++)
    for (int i = 0; i < cn; i++)
      for (int j = 0; j < ck; j++) {
        size_t src = ((size_t)bh * T + r0 + i) * T + j, dst = ((size_t)bh * cn + i) * ck + j;
        cs[dst] = s[src], cp[dst] = p[src], cdp[dst] = dp[src], cds[dst] = ds[src];
      }
  float *gcs = dev_upload(cs, nc * 4), *gcd = dev_upload(cdp, nc * 4);
  CHECK_OK(tagc_gpu_softmax_causal_recompute(gcs, glse, BH, cn, ck, r0, T, NULL));
  check_close("softmax_causal_recompute chunk", gcs, cp, nc, 1e-5);
  CHECK_OK(tagc_gpu_softmax_causal_backward(gcd, gcs, BH, cn, ck, r0, T, scale, NULL));
  check_close("softmax_causal_backward chunk", gcd, cds, nc, 1e-5);
  float *glse2 = dev_alloc((size_t)BH * T * 4), *lse = malloc((size_t)BH * T * 4),
        *lse2 = malloc((size_t)BH * T * 4);
  cudaFree(gcs);
  gcs = dev_upload(cs, nc * 4);
  CHECK_OK(tagc_gpu_softmax_causal_forward(gcs, glse2, BH, cn, ck, r0, T, NULL));
  check_close("softmax_causal_forward chunk", gcs, cp, nc, 1e-5);
  download(lse, glse, (size_t)BH * T * 4);
  download(lse2, glse2, (size_t)BH * T * 4);
  int lse_bad = 0;
  for (int bh = 0; bh < BH; bh++)
    for (int i = 0; i < cn; i++)
      lse_bad += fabsf(lse[bh * T + r0 + i] - lse2[bh * T + r0 + i]) > 1e-5f * fabsf(lse[bh * T + r0 + i]);
  CHECK_EQ_INT(lse_bad, 0);
  CHECK(tagc_gpu_softmax_causal_forward(gcs, glse2, BH, cn, r0 + cn - 1, r0, T, NULL) == TAGC_EINVAL);
  cudaFree(gcs), cudaFree(gcd), cudaFree(glse), cudaFree(glse2);
  free(cs), free(cp), free(cdp), free(cds), free(lse), free(lse2);

  size_t m = 1000;
  float *x = malloc(m * 4), *y = malloc(m * 4), *dy = malloc(m * 4), *dx = malloc(m * 4);
  fill(x, m, -5, 5);
  fill(dy, m, -1, 1);
  for (size_t i = 0; i < m; i++) {
    double xi = x[i], k0 = 0.7978845608028654, k1 = 0.044715;
    double t = tanh(k0 * (xi + k1 * xi * xi * xi));
    y[i] = (float)(0.5 * xi * (1 + t));
    dx[i] = (float)(dy[i] * (0.5 * (1 + t) + 0.5 * xi * k0 * (1 + 3 * k1 * xi * xi) * (1 - t * t)));
  }
  float *gx = dev_upload(x, m * 4), *gy = dev_alloc(m * 4), *gdy = dev_upload(dy, m * 4);
  CHECK_OK(tagc_gpu_gelu_forward(gy, gx, m, NULL));
  CHECK_OK(tagc_gpu_gelu_backward(gdy, gx, m, NULL));
  check_close("gelu_forward", gy, y, m, 1e-5);
  check_close("gelu_backward", gdy, dx, m, 1e-5);
  cudaFree(gs), cudaFree(gd), cudaFree(gx), cudaFree(gy), cudaFree(gdy);
  free(s), free(p), free(dp), free(ds), free(x), free(y), free(dy), free(dx);
}

static void test_crossentropy_and_embedding(void) {
  int N = 50, V = 256, B = 2, T = 25, C = 40;
  size_t nv = (size_t)N * V;
  float *z = malloc(nv * 4), *prob = malloc(nv * 4), *loss = malloc(N * 4), *grad = malloc(nv * 4);
  uint16_t *tg = malloc(N * sizeof(uint16_t));
  double loss_sum = 0;
  fill(z, nv, -6, 6);
  float scale = 0.1f;
  for (int i = 0; i < N; i++) {
    tg[i] = (uint16_t)(rng_u32() % V);
    const float *zi = z + (size_t)i * V;
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < V; j++)
      mx = fmax(mx, zi[j]);
    for (int j = 0; j < V; j++)
      sum += exp(zi[j] - mx);
    for (int j = 0; j < V; j++) {
      prob[(size_t)i * V + j] = (float)(exp(zi[j] - mx) / sum);
      grad[(size_t)i * V + j] = (float)((prob[(size_t)i * V + j] - (j == tg[i])) * scale);
    }
    loss[i] = (float)(log(sum) + mx - zi[tg[i]]);
    loss_sum += loss[i];
  }
  float *gz = dev_upload(z, nv * 4), *gl = dev_alloc(N * 4);
  uint16_t *gt = dev_upload(tg, N * sizeof(uint16_t));
  double *gsum = dev_alloc(sizeof(double)), got_sum = 0;
  CHECK_OK(tagc_gpu_crossentropy_forward(gl, gz, gt, N, V, V, NULL));
  check_close("crossentropy_forward loss", gl, loss, N, 1e-5);
  check_close("crossentropy_forward probs", gz, prob, nv, 1e-5);
  CHECK_OK(tagc_gpu_sum_losses(gsum, gl, N, NULL));
  download(&got_sum, gsum, sizeof got_sum);
  CHECK_NEAR(got_sum, loss_sum, 1e-5 * fabs(loss_sum));
  CHECK_OK(tagc_gpu_crossentropy_backward(gz, gt, N, V, scale, NULL));
  check_close("crossentropy_backward", gz, grad, nv, 1e-5);

  /* embedding: few distinct tokens so rows repeat */
  int Ve = 7;
  size_t btc = (size_t)B * T * C;
  float *wte = malloc((size_t)Ve * C * 4), *wpe = malloc((size_t)T * C * 4),
        *dout = malloc(btc * 4);
  float *enc = malloc(btc * 4), *dwte = calloc((size_t)Ve * C, 4), *dwpe = calloc((size_t)T * C, 4);
  uint16_t *tok = malloc(B * T * sizeof(uint16_t));
  fill(wte, (size_t)Ve * C, -1, 1);
  fill(wpe, (size_t)T * C, -1, 1);
  fill(dout, btc, -1, 1);
  for (int i = 0; i < B * T; i++) {
    tok[i] = (uint16_t)(rng_u32() % Ve);
    for (int c = 0; c < C; c++) {
      enc[(size_t)i * C + c] = wte[(size_t)tok[i] * C + c] + wpe[(size_t)(i % T) * C + c];
      dwte[(size_t)tok[i] * C + c] += dout[(size_t)i * C + c];
      dwpe[(size_t)(i % T) * C + c] += dout[(size_t)i * C + c];
    }
  }
  float *gwte = dev_upload(wte, (size_t)Ve * C * 4), *gwpe = dev_upload(wpe, (size_t)T * C * 4);
  float *gdout = dev_upload(dout, btc * 4), *genc = dev_alloc(btc * 4);
  float *gdwte = dev_alloc((size_t)Ve * C * 4), *gdwpe = dev_alloc((size_t)T * C * 4);
  uint16_t *gtok = dev_upload(tok, B * T * sizeof(uint16_t));
  CHECK_OK(tagc_gpu_encoder_forward(genc, gtok, gwte, gwpe, B, T, C, NULL));
  void *gws = dev_alloc(tagc_gpu_encoder_backward_workspace_bytes(B * T, Ve));
  CHECK_OK(tagc_gpu_encoder_backward(gdwte, gdwpe, gdout, gtok, B, T, Ve, C, gws, NULL));
  check_close("encoder_forward", genc, enc, btc, 1e-6);
  check_close("encoder_backward wte", gdwte, dwte, (size_t)Ve * C, 0); /* same adds, same order */
  check_close("encoder_backward wpe", gdwpe, dwpe, (size_t)T * C, 1e-5);
  void *ptrs[] = {gz, gl, gt, gsum, gwte, gwpe, gdout, genc, gdwte, gdwpe, gtok, gws};
  for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
    cudaFree(ptrs[i]);
  free(z), free(prob), free(loss), free(grad), free(tg), free(wte), free(wpe), free(dout);
  free(enc), free(dwte), free(dwpe), free(tok);
}

/* Padded vocabulary (issue 17): rows of Vp logits, the softmax over the first V only; the
 * padding's probabilities (and so its gradient) are exactly 0, whatever its logits hold. */
static void test_crossentropy_padded(void) {
  enum { N = 9, V = 200, Vp = 256 };
  float *z = malloc(N * Vp * 4), *prob = calloc(N * Vp, 4), *loss = malloc(N * 4);
  uint16_t tg[N];
  fill(z, N * Vp, -6, 6);
  for (int i = 0; i < N; i++) {
    tg[i] = (uint16_t)(rng_u32() % V);
    float *zi = z + (size_t)i * Vp;
    for (int j = V; j < Vp; j++)
      zi[j] = 50.0f; /* would dominate the softmax if it were not masked */
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < V; j++)
      mx = fmax(mx, zi[j]);
    for (int j = 0; j < V; j++)
      sum += exp(zi[j] - mx);
    for (int j = 0; j < V; j++)
      prob[(size_t)i * Vp + j] = (float)(exp(zi[j] - mx) / sum);
    loss[i] = (float)(log(sum) + mx - zi[tg[i]]);
  }
  float *gz = dev_upload(z, N * Vp * 4), *gl = dev_alloc(N * 4);
  uint16_t *gt = dev_upload(tg, sizeof tg);
  CHECK_OK(tagc_gpu_crossentropy_forward(gl, gz, gt, N, V, Vp, NULL));
  check_close("crossentropy_forward padded loss", gl, loss, N, 1e-5);
  float *got = malloc(N * Vp * 4);
  download(got, gz, N * Vp * 4);
  int nonzero = 0;
  for (int i = 0; i < N; i++)
    for (int j = V; j < Vp; j++)
      nonzero += got[(size_t)i * Vp + j] != 0.0f;
  CHECK_MSG(nonzero == 0, "%d padded probabilities are not 0", nonzero);
  check_close("crossentropy_forward padded probs", gz, prob, N * Vp, 1e-5);
  cudaFree(gz), cudaFree(gl), cudaFree(gt);
  free(z), free(prob), free(loss), free(got);
}

/* ---------------------------------------------------------------------------------------- */
/* Full training step                                                                       */

typedef struct dev_hooks {
  tagc_unit_hooks hooks;
  const tagc_model_layout *layout;
  tagc_model_cuda *model;
  float *params, *grads; /* device arenas */
  int next_done;         /* the unit unit_backward_done expects next */
  int order_ok;
} dev_hooks;

static const float *dh_params(void *ctx, int u) {
  dev_hooks *h = ctx;
  return h->params + h->layout->units[u].offset;
}

static float *dh_grads(void *ctx, int u) {
  dev_hooks *h = ctx;
  return h->grads + h->layout->units[u].offset;
}

static tagc_status dh_done(void *ctx, int u) {
  dev_hooks *h = ctx;
  if (u != h->next_done || !tagc_model_cuda_unit_event(h->model, u))
    h->order_ok = 0;
  h->next_done = u - 1;
  return TAGC_OK;
}

static void step_test(const tagc_model_config *cfg, int B, tagc_compute_dtype dtype) {
  int bf16 = dtype == TAGC_COMPUTE_BF16;
  printf("config L=%d C=%d NH=%d T=%d V=%d B=%d, %s compute\n", cfg->n_layer, cfg->d_model,
         cfg->n_head, cfg->ctx, cfg->vocab, B, bf16 ? "bf16" : "fp32");
  static tagc_model_layout lay;
  CHECK_OK(tagc_model_layout_init(&lay, cfg));
  size_t np = lay.n_params, bytes = np * sizeof(float), nt = (size_t)B * cfg->ctx;
  float *params = malloc(bytes), *grads = calloc(np, 4), *ggrads = malloc(bytes);
  uint16_t *tokens = malloc(nt * sizeof(uint16_t)), *targets = malloc(nt * sizeof(uint16_t));
  tagc_model_init_params(&lay, 42, params);
  for (size_t i = 0; i < nt; i++) {
    tokens[i] = (uint16_t)(rng_u32() % cfg->vocab);
    targets[i] = (uint16_t)(rng_u32() % cfg->vocab);
  }
  float loss_scale = 1.0f / (float)nt;

  /* CPU oracle */
  tagc_model_acts *acts = NULL;
  tagc_arena_hooks ah;
  double loss_cpu = 0;
  CHECK_OK(tagc_model_acts_new(&lay, B, &acts));
  tagc_arena_hooks_init(&ah, &lay, params, grads);
  CHECK_OK(tagc_model_forward(&lay, acts, &ah.hooks, tokens, targets, B, &loss_cpu));
  CHECK_OK(tagc_model_backward(&lay, acts, &ah.hooks, loss_scale));
  tagc_model_acts_free(acts);

  /* GPU */
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  tagc_model_cuda *m = NULL;
  tagc_status st = tagc_model_cuda_create(&lay, B, 0, dtype, stream, &m);
  CHECK_OK(st);
  if (st != TAGC_OK)
    return;
  CHECK(tagc_model_cuda_bytes(m) > 0 &&
        tagc_model_cuda_bytes(m) == tagc_model_cuda_bytes_needed(&lay, B, dtype));
  const char *att = getenv("TAGC_ATTENTION");
  int fused = att && strcmp(att, "flash") == 0; /* the configs run fused support its shape */
  printf("  attention: %s\n", tagc_model_cuda_attention_fused(m) ? "fused" : "chunked");
  CHECK_EQ_INT(tagc_model_cuda_attention_fused(m), fused);
  dev_hooks dh = {{0}, &lay, m, dev_upload(params, bytes), dev_alloc(bytes), lay.n_units - 1, 1};
  dh.hooks = (tagc_unit_hooks){.ctx = &dh, .unit_params = dh_params, .unit_grads = dh_grads,
                               .unit_backward_done = dh_done, .unit_release = NULL};
  double loss_gpu = 0;
  CHECK(tagc_model_cuda_backward(m, &dh.hooks, loss_scale) == TAGC_EINVAL);
  CHECK_OK(tagc_model_cuda_forward(m, &dh.hooks, tokens, targets, B, &loss_gpu));
  CHECK_OK(tagc_model_cuda_backward(m, &dh.hooks, loss_scale));
  CHECK(dh.order_ok && dh.next_done == -1);
  CHECK(cudaEventSynchronize(tagc_model_cuda_unit_event(m, 0)) == cudaSuccess);
  download(ggrads, dh.grads, bytes);

  /* The same step again from zeroed gradients: bit-identical loss and gradients. */
  float *again = malloc(bytes);
  double loss_again = 0;
  cudaMemset(dh.grads, 0, bytes);
  dh.next_done = lay.n_units - 1;
  CHECK_OK(tagc_model_cuda_forward(m, &dh.hooks, tokens, targets, B, &loss_again));
  CHECK_OK(tagc_model_cuda_backward(m, &dh.hooks, loss_scale));
  download(again, dh.grads, bytes);
  CHECK_MSG(loss_again == loss_gpu && memcmp(again, ggrads, bytes) == 0,
            "a repeated step is not bit-identical (loss %.17g vs %.17g)", loss_again, loss_gpu);
  free(again);

  double loss_rel = fabs(loss_gpu - loss_cpu) / fabs(loss_cpu);
  printf("  loss sum: cpu %.9g gpu %.9g rel diff %.3g\n", loss_cpu, loss_gpu, loss_rel);
  CHECK_MSG(loss_rel <= (bf16 ? 1e-3 : 1e-4), "loss rel diff %.3g", loss_rel);
  double worst = 0;
  for (int t = 0; t < lay.n_tensors; t++) {
    const tagc_tensor_info *ti = &lay.tensors[t];
    const float *a = ggrads + ti->offset, *b = grads + ti->offset;
    double diff = 0, mag = 0, d2 = 0, n2 = 0;
    for (size_t i = 0; i < ti->numel; i++) {
      double e = (double)a[i] - b[i];
      diff = fmax(diff, fabs(e));
      mag = fmax(mag, fabs((double)b[i]));
      d2 += e * e;
      n2 += (double)b[i] * b[i];
    }
    double rel = diff / fmax(mag, 1e-30), l2 = sqrt(d2) / fmax(sqrt(n2), 1e-30);
    printf("  grad %-16s max|cpu| %.3e max abs diff %.3e rel %.3e l2 rel %.3e\n", ti->name, mag,
           diff, rel, l2);
    CHECK_MSG(mag > 0, "%s: CPU gradient is all zero", ti->name);
    if (bf16)
      CHECK_MSG(l2 <= 3e-2, "%s: l2 relative gradient difference %.3g > 3e-2", ti->name, l2);
    else
      CHECK_MSG(rel <= 1e-4, "%s: relative gradient difference %.3g > 1e-4", ti->name, rel);
    worst = fmax(worst, bf16 ? l2 : rel);
  }
  printf("  worst gradient difference %.3g\n", worst);

  /* One AdamW step with clipping: CPU on its gradients, GPU on its own. */
  tagc_adamw_config ac = {.lr = 1e-3f, .min_lr_ratio = 0.1f, .warmup_steps = 0,
                          .total_steps = 10, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .weight_decay = 0.1f, .grad_clip = 0.5f};
  float *pc = malloc(bytes), *mv = calloc(np, 4), *vv = calloc(np, 4), *pg = malloc(bytes);
  memcpy(pc, params, bytes);
  double ss_cpu = tagc_sumsq(grads, np), ss_gpu = 0;
  CHECK_OK(tagc_adamw_update_range(&lay, 0, np, pc, grads, mv, vv, &ac, 1, ac.lr,
                                   tagc_clip_scale(&ac, ss_cpu)));
  double *gss = dev_alloc(sizeof(double));
  void *ws = dev_alloc(tagc_sumsq_cuda_workspace_bytes());
  float *gm = dev_alloc(bytes), *gv = dev_alloc(bytes);
  int *flag = dev_alloc(sizeof(int)), nonfinite = -1;
  CHECK_OK(tagc_sumsq_cuda(dh.grads, np, gss, ws, stream));
  cudaStreamSynchronize(stream);
  download(&ss_gpu, gss, sizeof ss_gpu);
  static int many_checked; /* once, at a small shape: 2 x 130 sums are slow in the emulation */
  if (np < ((size_t)1 << 24) && !many_checked++) {
    /* the same as segments in one call: each segment bit for bit its own call (130 segments:
       two launches of at most TAGC_SUMSQ_MANY_MAX) */
    enum { NSEG = 130 };
    const float *segx[NSEG];
    size_t segn[NSEG];
    double *gmany = dev_alloc(NSEG * sizeof(double)), many[NSEG], one[NSEG];
    for (int i = 0; i < NSEG; i++) {
      size_t lo = np * (size_t)i / NSEG, hi = np * (size_t)(i + 1) / NSEG;
      segx[i] = dh.grads + lo;
      segn[i] = i == 7 ? 0 : hi - lo; /* an empty one too */
      CHECK_OK(tagc_sumsq_cuda(segx[i], segn[i], gss, ws, stream));
      cudaStreamSynchronize(stream);
      download(&one[i], gss, sizeof one[i]);
    }
    CHECK_OK(tagc_sumsq_many_cuda(segx, segn, NSEG, gmany, ws, stream));
    cudaStreamSynchronize(stream);
    download(many, gmany, sizeof many);
    CHECK_EQ_INT(memcmp(many, one, sizeof many), 0);
    CHECK(tagc_sumsq_many_cuda(segx, segn, -1, gmany, ws, stream) == TAGC_EINVAL);
    cudaFree(gmany);
  }
  printf("  grad sumsq cpu %.9g gpu %.9g (clip scale %.6g)\n", ss_cpu, ss_gpu,
         tagc_clip_scale(&ac, ss_gpu));
  CHECK_MSG(fabs(ss_gpu - ss_cpu) <= (bf16 ? 1e-1 : 1e-4) * ss_cpu, "sumsq %.9g vs %.9g", ss_gpu,
            ss_cpu);
  CHECK_OK(tagc_adamw_update_range_cuda(&lay, 0, np, dh.params, dh.grads, gm, gv, &ac, 1, ac.lr,
                                        tagc_clip_scale(&ac, ss_gpu), flag, stream));
  cudaStreamSynchronize(stream);
  download(pg, dh.params, bytes);
  download(&nonfinite, flag, sizeof nonfinite);
  CHECK_EQ_INT(nonfinite, 0);
  /* Per element the step is about lr * g / (|g| + eps): elements whose gradient is near zero
   * amplify the gradient differences, so the mean difference is checked, in units of lr. */
  double mean = 0, maxd = 0;
  for (size_t i = 0; i < np; i++) {
    double e = fabs((double)pg[i] - pc[i]);
    mean += e;
    maxd = fmax(maxd, e);
  }
  mean /= (double)np;
  printf("  params after AdamW: max abs diff %.3e (%.3g lr), mean %.3e (%.3g lr)\n", maxd,
         maxd / ac.lr, mean, mean / ac.lr);
  CHECK_MSG(mean <= (bf16 ? 0.3 : 1e-3) * ac.lr, "mean parameter difference %.3g lr", mean / ac.lr);
  CHECK_MSG(maxd <= 2.5 * ac.lr, "max parameter difference %.3g lr", maxd / ac.lr);

  tagc_model_cuda_destroy(m);
  cudaStreamDestroy(stream);
  void *ptrs[] = {dh.params, dh.grads, gss, ws, gm, gv, flag};
  for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
    cudaFree(ptrs[i]);
  free(params), free(grads), free(ggrads), free(tokens), free(targets);
  free(pc), free(mv), free(vv), free(pg);
}

/* AdamW on identical inputs, in two calls split inside a tensor; then a NaN gradient. */
static void adamw_test(void) {
  tagc_model_config cfg = {.vocab = 256, .ctx = 16, .n_layer = 2, .n_head = 2, .d_model = 32};
  static tagc_model_layout lay;
  CHECK_OK(tagc_model_layout_init(&lay, &cfg));
  size_t np = lay.n_params, bytes = np * 4;
  float *p = malloc(bytes), *g = malloc(bytes), *m = malloc(bytes), *v = malloc(bytes);
  float *out = malloc(bytes);
  fill(p, np, -0.1f, 0.1f);
  fill(g, np, -0.01f, 0.01f);
  fill(m, np, -0.001f, 0.001f);
  fill(v, np, 0, 1e-4f);
  float *gp = dev_upload(p, bytes), *gg = dev_upload(g, bytes), *gm = dev_upload(m, bytes);
  float *gv = dev_upload(v, bytes);
  int *flag = dev_alloc(sizeof(int)), nonfinite = -1;
  tagc_adamw_config ac = {.lr = 3e-3f, .min_lr_ratio = 0.1f, .warmup_steps = 0, .total_steps = 10,
                          .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                          .grad_clip = 1.0f};
  size_t split = lay.tensors[5].offset + 7; /* inside h0.qkv_b, next to decayed tensors */
  CHECK_OK(tagc_adamw_update_range(&lay, 0, np, p, g, m, v, &ac, 3, ac.lr, 0.7f));
  CHECK_OK(tagc_adamw_update_range_cuda(&lay, 0, split, gp, gg, gm, gv, &ac, 3, ac.lr, 0.7f, flag,
                                        NULL));
  CHECK_OK(tagc_adamw_update_range_cuda(&lay, split, np - split, gp + split, gg + split, gm + split,
                                        gv + split, &ac, 3, ac.lr, 0.7f, flag, NULL));
  download(out, gp, bytes);
  double rp = max_rel(out, p, np, 1e-30);
  download(out, gm, bytes);
  double rm = max_rel(out, m, np, 1e-30);
  download(out, gv, bytes);
  double rv = max_rel(out, v, np, 1e-30);
  printf("adamw on identical inputs: max rel diff params %.3g m %.3g v %.3g\n", rp, rm, rv);
  CHECK(rp <= 1e-6 && rm <= 1e-6 && rv <= 1e-6);
  CHECK(tagc_adamw_update_range_cuda(&lay, 1, np, gp, gg, gm, gv, &ac, 3, ac.lr, 1, flag, NULL) ==
        TAGC_EINVAL);
  CHECK(tagc_adamw_update_range_cuda(&lay, 0, np, gp, gg, gm, gv, &ac, 0, ac.lr, 1, flag, NULL) ==
        TAGC_EINVAL);

  /* a NaN gradient: flag set, nothing updated */
  float nan_ = NAN;
  download(p, gp, bytes);
  cudaMemcpy(gg + np / 2, &nan_, sizeof nan_, cudaMemcpyHostToDevice);
  CHECK_OK(tagc_adamw_update_range_cuda(&lay, 0, np, gp, gg, gm, gv, &ac, 4, ac.lr, 1, flag, NULL));
  download(out, gp, bytes);
  download(&nonfinite, flag, sizeof nonfinite);
  CHECK_EQ_INT(nonfinite, 1);
  CHECK(memcmp(out, p, bytes) == 0);

  /* sum of squares against the CPU */
  double *gss = dev_alloc(sizeof(double)), ss = 0;
  void *ws = dev_alloc(tagc_sumsq_cuda_workspace_bytes());
  CHECK_OK(tagc_sumsq_cuda(gm, np, gss, ws, NULL));
  download(&ss, gss, sizeof ss);
  download(out, gm, bytes);
  double ref = tagc_sumsq(out, np);
  CHECK_NEAR(ss, ref, 1e-12 * ref);
  void *ptrs[] = {gp, gg, gm, gv, flag, gss, ws};
  for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
    cudaFree(ptrs[i]);
  free(p), free(g), free(m), free(v), free(out);
}

/* The multi-range AdamW: 70 ranges (more runs than one launch takes, one of them empty,
 * boundaries inside tensors) give, bit for bit, what one call per range gives; a NaN in the
 * last range leaves every range untouched. */
static void adamw_many_test(void) {
  tagc_model_config cfg = {.vocab = 256, .ctx = 16, .n_layer = 2, .n_head = 2, .d_model = 32};
  static tagc_model_layout lay;
  CHECK_OK(tagc_model_layout_init(&lay, &cfg));
  size_t np = lay.n_params, bytes = np * sizeof(float);
  float *h[4], *one[4], *many[4], *out = malloc(bytes), *p0 = malloc(bytes);
  for (int k = 0; k < 4; k++) {
    h[k] = malloc(bytes);
    fill(h[k], np, k == 3 ? 0 : -0.1f, k == 3 ? 1e-4f : 0.1f); /* p, g, m, v (v >= 0) */
    one[k] = dev_upload(h[k], bytes);
    many[k] = dev_upload(h[k], bytes);
  }
  memcpy(p0, h[0], bytes);
  enum { NSEG = 70 };
  tagc_adamw_segment segs[NSEG];
  int *flag = dev_alloc(sizeof(int)), nonfinite = -1;
  tagc_adamw_config ac = {.lr = 3e-3f, .min_lr_ratio = 0.1f, .total_steps = 10, .beta1 = 0.9f,
                          .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1.0f};
  for (int i = 0; i < NSEG; i++) {
    size_t lo = np * (size_t)i / NSEG, hi = i == 9 ? lo : np * (size_t)(i + 1) / NSEG;
    if (i == 10)
      lo = np * 9 / NSEG; /* takes over the empty one's part */
    segs[i] = (tagc_adamw_segment){lo, hi - lo, many[0] + lo, many[1] + lo, many[2] + lo,
                                   many[3] + lo};
    CHECK_OK(tagc_adamw_update_range_cuda(&lay, lo, hi - lo, one[0] + lo, one[1] + lo,
                                          one[2] + lo, one[3] + lo, &ac, 2, ac.lr, 0.8f, flag,
                                          NULL));
  }
  CHECK_OK(tagc_adamw_many_cuda(&lay, segs, NSEG, &ac, 2, ac.lr, 0.8f, flag, NULL));
  download(&nonfinite, flag, sizeof nonfinite);
  CHECK_EQ_INT(nonfinite, 0);
  int same = 1;
  size_t moved = 0;
  for (int k = 0; k < 4; k++) {
    download(out, many[k], bytes);
    download(h[k], one[k], bytes);
    same &= memcmp(out, h[k], bytes) == 0;
  }
  download(out, many[0], bytes);
  for (size_t i = 0; i < np; i++)
    moved += out[i] != p0[i];
  printf("adamw many: %d ranges, %s one range at a time; %zu of %zu parameters moved\n", NSEG,
         same ? "bit-identical to" : "DIFFERENT from", moved, np);
  CHECK(same);
  CHECK(moved > np * 9 / 10);

  /* a NaN in the last range: the flag, and no range moves */
  float nan_ = NAN;
  cudaMemcpy(many[1] + np - 1, &nan_, sizeof nan_, cudaMemcpyHostToDevice);
  download(h[0], many[0], bytes);
  download(h[2], many[2], bytes);
  CHECK_OK(tagc_adamw_many_cuda(&lay, segs, NSEG, &ac, 3, ac.lr, 0.8f, flag, NULL));
  download(&nonfinite, flag, sizeof nonfinite);
  CHECK_EQ_INT(nonfinite, 1);
  download(out, many[0], bytes);
  CHECK(memcmp(out, h[0], bytes) == 0);
  download(out, many[2], bytes);
  CHECK(memcmp(out, h[2], bytes) == 0);

  CHECK(tagc_adamw_many_cuda(&lay, segs, -1, &ac, 3, ac.lr, 1, flag, NULL) == TAGC_EINVAL);
  segs[3].n = np; /* past the arena's end */
  CHECK(tagc_adamw_many_cuda(&lay, segs, NSEG, &ac, 3, ac.lr, 1, flag, NULL) == TAGC_EINVAL);
  CHECK(tagc_adamw_many_cuda(&lay, segs, 0, &ac, 3, NAN, 1, flag, NULL) == TAGC_ENUMERIC);
  for (int k = 0; k < 4; k++) {
    cudaFree(one[k]), cudaFree(many[k]);
    free(h[k]);
  }
  cudaFree(flag);
  free(out), free(p0);
}

#ifndef TEST_EMU /* the host emulation has no device memory limit */
/* A context larger than the device: TAGC_ENOMEM naming the buffer; the device still works. */
static void oom_test(void) {
  tagc_model_config cfg = {.vocab = 256, .ctx = 1024, .n_layer = 12, .n_head = 12, .d_model = 768};
  static tagc_model_layout lay;
  CHECK_OK(tagc_model_layout_init(&lay, &cfg));
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  size_t per = tagc_model_cuda_bytes_needed(&lay, 1, TAGC_COMPUTE_FP32);
  int batch = (int)(2 * total_b / per + 1);
  tagc_model_cuda *m = NULL;
  tagc_status st = tagc_model_cuda_create(&lay, batch, 0, TAGC_COMPUTE_FP32, NULL, &m);
  printf("oom: batch %d needs %zu bytes of %zu: %s\n", batch,
         tagc_model_cuda_bytes_needed(&lay, batch, TAGC_COMPUTE_FP32), total_b, tagc_last_error());
  CHECK_EQ_INT(st, TAGC_ENOMEM);
  CHECK(m == NULL);
  CHECK(strstr(tagc_last_error(), "cudaMalloc") != NULL);
  CHECK(cudaGetLastError() == cudaSuccess);
  void *p = NULL;
  CHECK(cudaMalloc(&p, 1 << 20) == cudaSuccess);
  cudaFree(p);
  CHECK(tagc_model_cuda_create(&lay, 0, 0, TAGC_COMPUTE_FP32, NULL, &m) == TAGC_EINVAL);
  CHECK(tagc_model_cuda_create(&lay, 1, 1 << 20, TAGC_COMPUTE_FP32, NULL, &m) == TAGC_EINVAL);
}
#endif

/* The model's device memory no longer holds T x T attention matrices: at GPT-2-small width
 * (12 layers, C 768, 12 heads, V 50257) doubling T from 1024 to 2048 at the same tokens per
 * micro-batch (B 8 -> 4) changes the bytes by the per-token buffers only (within 1 %); the
 * probabilities would have added 12 x 8 x 12 x 1024^2 x 4 B = 4.8 GB. */
static void test_attention_memory(void) {
  tagc_model_config c1 = {.vocab = 50257, .ctx = 1024, .n_layer = 12, .n_head = 12, .d_model = 768};
  tagc_model_config c2 = c1;
  c2.ctx = 2048;
  tagc_model_layout l1, l2;
  CHECK_OK(tagc_model_layout_init(&l1, &c1));
  CHECK_OK(tagc_model_layout_init(&l2, &c2));
  size_t b1 = tagc_model_cuda_bytes_needed(&l1, 8, TAGC_COMPUTE_BF16);
  size_t b2 = tagc_model_cuda_bytes_needed(&l2, 4, TAGC_COMPUTE_BF16);
  printf("  device bytes, GPT-2 small bf16: T=1024 B=8 %.2f GB, T=2048 B=4 %.2f GB\n", b1 / 1e9,
         b2 / 1e9);
  CHECK_MSG(b2 < b1 * 1.01 && b1 < b2 * 1.01, "bytes %zu (T 1024) vs %zu (T 2048)", b1, b2);
}

/* The embedding backward at GPT-2 shapes (T = 1024, C = 768) with the byte vocabulary and
 * GPT-2's (V = 50257), tokens skewed as in text (a third from 8 frequent ones), onto a dwte
 * that already holds a gradient (accumulation over micro-batches): bit-identical to the CPU
 * oracle. The seconds each takes are printed: the work is O(B*T*C + V), so the two are close
 * (the former kernel scanned all B*T tokens for each of the V rows). */
static void test_embedding_vocab(int V) {
  int B = 1, T = 1024, C = 768, BT = B * T;
  size_t vc = (size_t)V * C, btc = (size_t)BT * C;
  float *dout = malloc(btc * 4), *dwte = malloc(vc * 4), *dwpe = malloc((size_t)T * C * 4);
  uint16_t *tok = malloc(BT * sizeof(uint16_t));
  fill(dout, btc, -1, 1);
  fill(dwte, vc, -0.5f, 0.5f);
  fill(dwpe, (size_t)T * C, -0.5f, 0.5f);
  for (int i = 0; i < BT; i++)
    tok[i] = (uint16_t)(rng_u32() % 3 == 0 ? rng_u32() % 8 : rng_u32() % (uint32_t)V);
  tok[BT - 1] = (uint16_t)(V - 1); /* the last row too */
  float *gdwte = dev_upload(dwte, vc * 4), *gdwpe = dev_upload(dwpe, (size_t)T * C * 4);
  float *gdout = dev_upload(dout, btc * 4);
  uint16_t *gtok = dev_upload(tok, BT * sizeof(uint16_t));
  void *gws = dev_alloc(tagc_gpu_encoder_backward_workspace_bytes(BT, V));
  tagc_cpu_encoder_backward(dwte, dwpe, dout, tok, B, T, C);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_OK(tagc_gpu_encoder_backward(gdwte, gdwpe, gdout, gtok, B, T, V, C, gws, NULL));
  CHECK(cudaStreamSynchronize(NULL) == cudaSuccess);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("  encoder_backward V=%d BT=%d C=%d: %.3f s\n", V, BT, C,
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  check_close(V > 256 ? "encoder_backward wte V=50257" : "encoder_backward wte V=256", gdwte, dwte,
              vc, 0);
  check_close("encoder_backward wpe T=1024", gdwpe, dwpe, (size_t)T * C, 1e-6);
  cudaFree(gdwte), cudaFree(gdwpe), cudaFree(gdout), cudaFree(gtok), cudaFree(gws);
  free(dout), free(dwte), free(dwpe), free(tok);
}

#ifdef TEST_EMU
extern long emu_lt_matmuls; /* emu/emu_model.cpp: cuBLASLt products run */
#endif

int main(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    TEST_SKIP("no CUDA device");
#ifdef TEST_GPT2_STEP
  /* GPT-2 small's shapes, one layer (the emulation's speed): the real vocabulary (padded to
   * 50304 rows), 12 heads of 64, a 1024-token sequence; both compute types. */
  tagc_model_config gpt2 = {.vocab = 50257, .ctx = 1024, .n_layer = 1, .n_head = 12,
                            .d_model = 768};
  step_test(&gpt2, 1, TAGC_COMPUTE_FP32);
  step_test(&gpt2, 1, TAGC_COMPUTE_BF16);
  setenv("TAGC_ATTENTION", "flash", 1); /* the fused attention, tensor-core path */
  step_test(&gpt2, 1, TAGC_COMPUTE_BF16);
  unsetenv("TAGC_ATTENTION");
  return TEST_END();
#endif
  test_layernorm();
  test_softmax_and_gelu();
  test_crossentropy_and_embedding();
  test_attention_memory();
  test_embedding_vocab(256);
  test_embedding_vocab(50257);
  test_crossentropy_padded();
  adamw_test();
  adamw_many_test();
  tagc_model_config small = {.vocab = 256, .ctx = 64, .n_layer = 2, .n_head = 4, .d_model = 64};
  tagc_model_config medium = {.vocab = 256, .ctx = 128, .n_layer = 3, .n_head = 4, .d_model = 128};
  step_test(&small, 4, TAGC_COMPUTE_FP32);
  step_test(&medium, 2, TAGC_COMPUTE_FP32);
  step_test(&small, 4, TAGC_COMPUTE_BF16);
  step_test(&medium, 2, TAGC_COMPUTE_BF16);
  /* the biased linear layers without cuBLASLt (TAGC_CUBLASLT=0), and (emulation) with a
     heuristic that offers no algorithm: the cuBLAS path, same checks */
#ifdef TEST_EMU
  CHECK_MSG(emu_lt_matmuls > 0, "no cuBLASLt product ran");
  long lt_before = emu_lt_matmuls;
#endif
  setenv("TAGC_CUBLASLT", "0", 1);
  step_test(&small, 4, TAGC_COMPUTE_FP32);
  step_test(&small, 4, TAGC_COMPUTE_BF16);
  unsetenv("TAGC_CUBLASLT");
#ifdef TEST_EMU
  setenv("TAGC_EMU_LT_NONE", "1", 1);
  step_test(&small, 4, TAGC_COMPUTE_FP32);
  unsetenv("TAGC_EMU_LT_NONE");
  CHECK_MSG(emu_lt_matmuls == lt_before, "%ld cuBLASLt products ran with it off",
            emu_lt_matmuls - lt_before);
#endif
  /* the fused attention (heads of 64, the width it takes) against the same oracle */
  tagc_model_config wide = {.vocab = 256, .ctx = 80, .n_layer = 2, .n_head = 2, .d_model = 128};
  setenv("TAGC_ATTENTION", "flash", 1);
  step_test(&wide, 2, TAGC_COMPUTE_FP32);
  step_test(&wide, 2, TAGC_COMPUTE_BF16);
  unsetenv("TAGC_ATTENTION");
  /* token ids above 255 and a padded vocabulary (300 -> 384 rows) through the whole model */
  tagc_model_config padded = {.vocab = 300, .ctx = 16, .n_layer = 1, .n_head = 2, .d_model = 32};
  step_test(&padded, 2, TAGC_COMPUTE_FP32);
#ifndef TEST_EMU
  oom_test();
#endif
  return TEST_END();
}
