/* The GPT model's CPU kernels (model_kernels_cpu.h). */
#include "model/model_kernels_cpu.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* Rows of the causal attention computed per sgemm: row block [r0, r1) only needs key
 * columns [0, r1), so blocking skips most of the masked upper triangle. */
#define ATT_ROW_BLOCK 64
/* Column chunk for the column-parallel reductions over the batch. */
#define COL_CHUNK 32
#define LN_EPS 1e-5f

void tagc_cpu_blas_single_threaded(void) {
  if (openblas_get_num_threads() != 1)
    openblas_set_num_threads(1);
}

/* exp(x) for x in float range, rel. error ~2 ulp: Cody-Waite reduction by ln 2 and a degree-6
 * polynomial (Cephes expf coefficients). Branch-free so that the loops calling it vectorise. */
#pragma omp declare simd notinbranch
static inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  float n = x * 1.44269504088896341f + 12582912.0f; /* round to nearest integer */
  n = n - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float poly = 1.9875691500e-4f;
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  float y = poly * (r * r) + r + 1.0f;
  union { int32_t i; float f; } scale;
  scale.i = ((int32_t)n + 127) << 23;
  return y * scale.f;
}

#pragma omp declare simd notinbranch
static inline float tanh_approx(float x) {
  x = x < -9.0f ? -9.0f : x;
  x = x > 9.0f ? 9.0f : x;
  return 1.0f - 2.0f / (exp_approx(2.0f * x) + 1.0f);
}

#define GELU_K0 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f

void tagc_cpu_encoder_forward(float *out, const uint16_t *tokens, const float *wte,
                              const float *wpe, int BT, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < BT; bt++) {
    const float *te = wte + (size_t)tokens[bt] * C, *pe = wpe + (size_t)(bt % T) * C;
    float *o = out + (size_t)bt * C;
#pragma omp simd
    for (int c = 0; c < C; c++)
      o[c] = te[c] + pe[c];
  }
}

/* Column chunks per thread, rows in order, so each sum has a fixed order. */
void tagc_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout,
                               const uint16_t *tokens, int B, int T, int C) {
  int chunks = (C + COL_CHUNK - 1) / COL_CHUNK;
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < chunks; ch++) {
    int c0 = ch * COL_CHUNK, c1 = c0 + COL_CHUNK < C ? c0 + COL_CHUNK : C;
    for (int bt = 0; bt < B * T; bt++) {
      const float *d = dout + (size_t)bt * C;
      float *w = dwte + (size_t)tokens[bt] * C;
      for (int c = c0; c < c1; c++)
        w[c] += d[c];
    }
  }
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++) {
    float *w = dwpe + (size_t)t * C;
    for (int b = 0; b < B; b++) {
      const float *d = dout + ((size_t)b * T + t) * C;
#pragma omp simd
      for (int c = 0; c < C; c++)
        w[c] += d[c];
    }
  }
}

tagc_cpu_rows tagc_cpu_my_rows(int n) {
  int nth = omp_get_num_threads(), tid = omp_get_thread_num();
  int share = ((n + nth - 1) / nth + 15) / 16 * 16;
  tagc_cpu_rows r = {tid * share < n ? tid * share : n, 0};
  r.hi = r.lo + share < n ? r.lo + share : n;
  return r;
}

/* C (M, N) = alpha op(A) op(B) + beta C for rows [r.lo, r.hi) of C. Each call is
 * single-threaded; OpenBLAS rounds differently for different row splits, so results are
 * bit-identical for a given thread count, not across thread counts. */
static void sgemm_part(tagc_cpu_rows r, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int N, int K,
                       float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                       float *C, int ldc) {
  if (r.lo >= r.hi)
    return;
  const float *a = ta == CblasNoTrans ? A + (size_t)r.lo * lda : A + r.lo;
  cblas_sgemm(CblasRowMajor, ta, tb, r.hi - r.lo, N, K, alpha, a, lda, B, ldb, beta,
              C + (size_t)r.lo * ldc, ldc);
}

void tagc_cpu_layernorm_rows(tagc_cpu_rows r, float *out, float *stat, const float *inp,
                             const float *w, const float *b, int C) {
  for (int i = r.lo; i < r.hi; i++) {
    const float *x = inp + (size_t)i * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; c++)
      sum += x[c];
    float mean = sum / C, var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; c++)
      var += (x[c] - mean) * (x[c] - mean);
    float rstd = 1.0f / sqrtf(var / C + LN_EPS);
    float *o = out + (size_t)i * C;
#pragma omp simd
    for (int c = 0; c < C; c++)
      o[c] = (x[c] - mean) * rstd * w[c] + b[c];
    stat[2 * i] = mean;
    stat[2 * i + 1] = rstd;
  }
}

void tagc_cpu_layernorm_dinp_rows(tagc_cpu_rows r, float *dinp, const float *dres,
                                  const float *dout, const float *inp, const float *stat,
                                  const float *w, int C) {
  for (int i = r.lo; i < r.hi; i++) {
    const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C, *dr = dres + (size_t)i * C;
    float mean = stat[2 * i], rstd = stat[2 * i + 1];
    float sum_d = 0.0f, sum_dx = 0.0f;
#pragma omp simd reduction(+ : sum_d, sum_dx)
    for (int c = 0; c < C; c++) {
      float dn = d[c] * w[c];
      sum_d += dn;
      sum_dx += dn * (x[c] - mean) * rstd;
    }
    float mean_d = sum_d / C, mean_dx = sum_dx / C;
    float *di = dinp + (size_t)i * C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float xhat = (x[c] - mean) * rstd;
      di[c] = dr[c] + rstd * (d[c] * w[c] - mean_d - xhat * mean_dx);
    }
  }
}

/* Rows in order for each column. */
void tagc_cpu_layernorm_dparams(float *dw, float *db, const float *dout, const float *inp,
                                const float *stat, int N, int C) {
  tagc_cpu_rows cols = tagc_cpu_my_rows(C);
  for (int i = 0; i < N; i++) {
    const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
    float mean = stat[2 * i], rstd = stat[2 * i + 1];
#pragma omp simd
    for (int c = cols.lo; c < cols.hi; c++) {
      dw[c] += d[c] * ((x[c] - mean) * rstd);
      db[c] += d[c];
    }
  }
}

void tagc_cpu_linear_rows(tagc_cpu_rows r, float *out, const float *add, const float *inp,
                          const float *w, const float *bias, int IC, int OC) {
  for (int i = r.lo; i < r.hi; i++) {
    float *o = out + (size_t)i * OC;
    const float *a = add ? add + (size_t)i * OC : NULL;
    if (a && bias) {
#pragma omp simd
      for (int c = 0; c < OC; c++)
        o[c] = a[c] + bias[c];
    } else if (a || bias) {
      memcpy(o, a ? a : bias, (size_t)OC * sizeof(float));
    } else {
      memset(o, 0, (size_t)OC * sizeof(float));
    }
  }
  sgemm_part(r, CblasNoTrans, CblasTrans, OC, IC, 1.0f, inp, IC, w, IC, 1.0f, out, OC);
}

void tagc_cpu_linear_dinp_rows(tagc_cpu_rows r, float *dinp, const float *dout, const float *w,
                               int IC, int OC) {
  sgemm_part(r, CblasNoTrans, CblasNoTrans, IC, OC, 1.0f, dout, OC, w, IC, 0.0f, dinp, IC);
}

/* Each bias column summed in row order. */
void tagc_cpu_linear_dparams(float *dw, float *dbias, const float *dout, const float *inp,
                             int N, int IC, int OC) {
  tagc_cpu_rows o = tagc_cpu_my_rows(OC);
  sgemm_part(o, CblasTrans, CblasNoTrans, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
  if (!dbias)
    return;
  for (int i = 0; i < N; i++) {
    const float *d = dout + (size_t)i * OC;
#pragma omp simd
    for (int c = o.lo; c < o.hi; c++)
      dbias[c] += d[c];
  }
}

void tagc_cpu_gelu_rows(tagc_cpu_rows r, float *out, const float *inp, int width) {
  size_t lo = (size_t)r.lo * width, hi = (size_t)r.hi * width;
#pragma omp simd
  for (size_t i = lo; i < hi; i++) {
    float x = inp[i];
    float t = tanh_approx(GELU_K0 * (x + GELU_K1 * x * x * x));
    out[i] = 0.5f * x * (1.0f + t);
  }
}

void tagc_cpu_gelu_backward_rows(tagc_cpu_rows r, float *d, const float *inp, int width) {
  size_t lo = (size_t)r.lo * width, hi = (size_t)r.hi * width;
#pragma omp simd
  for (size_t i = lo; i < hi; i++) {
    float x = inp[i];
    float t = tanh_approx(GELU_K0 * (x + GELU_K1 * x * x * x));
    float dt = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x) * (1.0f - t * t);
    d[i] *= 0.5f * (1.0f + t) + 0.5f * x * dt;
  }
}

/* Offset of score row t of (batch b, head h) in att (B, NH, T, T). */
static inline size_t att_row(const tagc_cpu_att_dims *d, int b, int h, int t) {
  return (((size_t)b * d->NH + h) * d->T + t) * d->T;
}

/* Last column (exclusive) computed for query row t: the end of its row block. */
static inline int att_cols(const tagc_cpu_att_dims *d, int t) {
  int r1 = (t / ATT_ROW_BLOCK + 1) * ATT_ROW_BLOCK;
  return r1 < d->T ? r1 : d->T;
}

/* Causal softmax of score row t in place; columns past the diagonal up to the row block's
 * end are set to 0 so that the block products can use them. */
static void softmax_causal_row(const tagc_cpu_att_dims *d, float *s, int t) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j <= t; j++)
    mx = s[j] > mx ? s[j] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j <= t; j++) {
    s[j] = exp_approx(s[j] - mx);
    sum += s[j];
  }
  float inv = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j <= t; j++)
    s[j] *= inv;
  int end = att_cols(d, t);
  for (int j = t + 1; j < end; j++)
    s[j] = 0.0f;
}

/* Score-row gradient in place: ds = p * (dp - sum_j p dp) * scale, zero past the diagonal. */
static void softmax_causal_row_backward(const tagc_cpu_att_dims *d, float *ds, const float *p,
                                        int t) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int j = 0; j <= t; j++)
    dot += p[j] * ds[j];
#pragma omp simd
  for (int j = 0; j <= t; j++)
    ds[j] = p[j] * (ds[j] - dot) * d->scale;
  int end = att_cols(d, t);
  for (int j = t + 1; j < end; j++)
    ds[j] = 0.0f;
}

/* One (batch, head) pair per iteration, shared out over the enclosing region's threads
 * (with the implied barrier at the end). Row blocks skip most of the masked triangle. */
void tagc_cpu_attention_forward(const tagc_cpu_att_dims *d, float *y, float *att,
                                const float *qkv) {
  int C3 = 3 * d->C;
#pragma omp for schedule(static)
  for (int bh = 0; bh < d->B * d->NH; bh++) {
    int b = bh / d->NH, h = bh % d->NH;
    const float *base = qkv + (size_t)b * d->T * C3 + (size_t)h * d->hd;
    float *p = att + att_row(d, b, h, 0);
    for (int r0 = 0; r0 < d->T; r0 += ATT_ROW_BLOCK) {
      int r1 = att_cols(d, r0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, d->hd, d->scale,
                  base + (size_t)r0 * C3, C3, base + d->C, C3, 0.0f, p + (size_t)r0 * d->T, d->T);
    }
    for (int t = 0; t < d->T; t++)
      softmax_causal_row(d, p + (size_t)t * d->T, t);
    for (int r0 = 0; r0 < d->T; r0 += ATT_ROW_BLOCK) {
      int r1 = att_cols(d, r0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, d->hd, r1, 1.0f,
                  p + (size_t)r0 * d->T, d->T, base + 2 * d->C, C3, 0.0f,
                  y + ((size_t)b * d->T + r0) * d->C + (size_t)h * d->hd, d->C);
    }
  }
}

/* Worksharing like tagc_cpu_attention_forward. */
void tagc_cpu_attention_backward(const tagc_cpu_att_dims *d, float *dqkv, float *datt,
                                 const float *dy, const float *att, const float *qkv) {
  int C3 = 3 * d->C;
#pragma omp for schedule(static)
  for (int bh = 0; bh < d->B * d->NH; bh++) {
    int b = bh / d->NH, h = bh % d->NH;
    size_t off = (size_t)b * d->T * C3 + (size_t)h * d->hd;
    const float *base = qkv + off, *p = att + att_row(d, b, h, 0);
    const float *dyb = dy + (size_t)b * d->T * d->C + (size_t)h * d->hd;
    float *dbase = dqkv + off, *ds = datt + att_row(d, b, h, 0);
    /* Row blocks run last to first: the last one covers every key row, so its dV and dK
     * products initialise them (beta 0) and the earlier, shorter ones accumulate. */
    int last = (d->T - 1) / ATT_ROW_BLOCK * ATT_ROW_BLOCK;
    /* dP = dY V^T and dV (+)= P^T dY. */
    for (int r0 = last; r0 >= 0; r0 -= ATT_ROW_BLOCK) {
      int r1 = att_cols(d, r0);
      const float *dyr = dyb + (size_t)r0 * d->C;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, d->hd, 1.0f, dyr, d->C,
                  base + 2 * d->C, C3, 0.0f, ds + (size_t)r0 * d->T, d->T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, d->hd, r1 - r0, 1.0f,
                  p + (size_t)r0 * d->T, d->T, dyr, d->C, r0 == last ? 0.0f : 1.0f,
                  dbase + 2 * d->C, C3);
    }
    for (int t = 0; t < d->T; t++)
      softmax_causal_row_backward(d, ds + (size_t)t * d->T, p + (size_t)t * d->T, t);
    /* dQ = dS K and dK (+)= dS^T Q. */
    for (int r0 = last; r0 >= 0; r0 -= ATT_ROW_BLOCK) {
      int r1 = att_cols(d, r0);
      const float *dsr = ds + (size_t)r0 * d->T;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, d->hd, r1, 1.0f, dsr, d->T,
                  base + d->C, C3, 0.0f, dbase + (size_t)r0 * C3, C3);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, d->hd, r1 - r0, 1.0f, dsr, d->T,
                  base + (size_t)r0 * C3, C3, r0 == last ? 0.0f : 1.0f, dbase + d->C, C3);
    }
  }
}

void tagc_cpu_crossentropy_rows(tagc_cpu_rows r, float *losses, float *logits,
                                const uint16_t *targets, int V, int Vp) {
  for (int i = r.lo; i < r.hi; i++) {
    float *z = logits + (size_t)i * Vp;
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; j++)
      mx = z[j] > mx ? z[j] : mx;
    float target_logit = z[targets[i]];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; j++) {
      z[j] = exp_approx(z[j] - mx);
      sum += z[j];
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < V; j++)
      z[j] *= inv;
    for (int j = V; j < Vp; j++) /* padding: never predicted, zero gradient */
      z[j] = 0.0f;
    losses[i] = logf(sum) + mx - target_logit;
  }
}

void tagc_cpu_crossentropy_backward_rows(tagc_cpu_rows r, float *probs, const uint16_t *targets,
                                         int V, float scale) {
  for (int i = r.lo; i < r.hi; i++) {
    float *p = probs + (size_t)i * V;
    p[targets[i]] -= 1.0f;
#pragma omp simd
    for (int j = 0; j < V; j++)
      p[j] *= scale;
  }
}
