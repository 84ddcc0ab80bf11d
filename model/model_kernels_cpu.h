/* The GPT model's CPU kernels (the oracle of model_kernels_cuda.h): embedding, LayerNorm,
 * linear layers (OpenBLAS), GELU, causal attention and softmax cross-entropy, forward and
 * backward, used by the passes of model/model.c.
 *
 * Conventions: row-major fp32 arrays; weight matrices stored (out, in); N rows of width C.
 * Element math: pre-LN LayerNorm with eps 1e-5, GELU tanh approximation, exp and tanh by
 * branch-free polynomials (so that their loops vectorise; rel. error ~2 ulp).
 *
 * Threading: the encoder kernels open their own OpenMP parallel regions. Every other kernel
 * runs inside the caller's `#pragma omp parallel` region and is called by all of its
 * threads: row kernels (`_rows`) work on the calling thread's share of the rows, given as
 * tagc_cpu_my_rows(N), the same split for every call with the same row count, so a chain of
 * row kernels needs no barrier between its steps; parameter-gradient kernels (`_dparams`)
 * split the output rows or columns instead and need all input rows ready (a barrier first);
 * the attention kernels share out (batch, head) pairs and end with a barrier. OpenBLAS is
 * called single-threaded from inside the regions (tagc_cpu_blas_single_threaded first).
 *
 * Determinism: no atomics; every reduction has a fixed order (sums over the batch are split
 * over columns, each column summed by one thread in row order), so with the same thread
 * count the results are bit-identical run to run. OpenBLAS rounds differently for different
 * row splits: results are not bit-identical across thread counts. */
#ifndef TAGC_WORKER_MODEL_KERNELS_CPU_H
#define TAGC_WORKER_MODEL_KERNELS_CPU_H

#include <stdint.h>

/* Rows [lo, hi) of a row kernel's input and output. */
typedef struct tagc_cpu_rows {
  int lo, hi;
} tagc_cpu_rows;

/* Geometry of the attention of one layer. */
typedef struct tagc_cpu_att_dims {
  int B, T, C, NH, hd;
  float scale; /* 1 / sqrt(hd) */
} tagc_cpu_att_dims;

/* Keeps OpenBLAS's own thread pool at one thread: the kernels call it from inside OpenMP
 * regions, and two pools would fight for the cores. Call before a pass. */
void tagc_cpu_blas_single_threaded(void);

/* The calling thread's share of n rows: equal parts rounded to multiples of 16. */
tagc_cpu_rows tagc_cpu_my_rows(int n);

/* out (BT, C) = wte[tokens] + wpe[position] (position = row % T). Own parallel region. */
void tagc_cpu_encoder_forward(float *out, const uint16_t *tokens, const float *wte,
                              const float *wpe, int BT, int T, int C);

/* dwte[token] += dout rows, dwpe[t] += sum over b of dout (B, T, C). Own parallel regions. */
void tagc_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout,
                               const uint16_t *tokens, int B, int T, int C);

/* out = LayerNorm(inp) * w + b per row; stat (N, 2) = mean, rstd. */
void tagc_cpu_layernorm_rows(tagc_cpu_rows r, float *out, float *stat, const float *inp,
                             const float *w, const float *b, int C);

/* dinp = dres + d LN / d inp applied to dout (dres may alias dinp). */
void tagc_cpu_layernorm_dinp_rows(tagc_cpu_rows r, float *dinp, const float *dres,
                                  const float *dout, const float *inp, const float *stat,
                                  const float *w, int C);

/* dw, db += column sums over all N rows: this thread's share of the C columns. */
void tagc_cpu_layernorm_dparams(float *dw, float *db, const float *dout, const float *inp,
                                const float *stat, int N, int C);

/* out (rows, OC) = add + inp (rows, IC) @ w (OC, IC)^T + bias; add and bias may be NULL. */
void tagc_cpu_linear_rows(tagc_cpu_rows r, float *out, const float *add, const float *inp,
                          const float *w, const float *bias, int IC, int OC);

/* dinp (rows, IC) = dout (rows, OC) @ w (OC, IC). */
void tagc_cpu_linear_dinp_rows(tagc_cpu_rows r, float *dinp, const float *dout, const float *w,
                               int IC, int OC);

/* dw += dout^T @ inp over all N rows and dbias += column sums of dout (NULL = no bias), for
 * this thread's share of the OC output rows. */
void tagc_cpu_linear_dparams(float *dw, float *dbias, const float *dout, const float *inp,
                             int N, int IC, int OC);

/* out = GELU(inp) over rows of `width` elements. */
void tagc_cpu_gelu_rows(tagc_cpu_rows r, float *out, const float *inp, int width);

/* d (in place): dout -> dinp of GELU at inp. */
void tagc_cpu_gelu_backward_rows(tagc_cpu_rows r, float *d, const float *inp, int width);

/* y (B, T, C) = per head softmax(q k^T * scale, causal) v from qkv (B, T, 3C); att
 * (B, NH, T, T) keeps the probabilities. */
void tagc_cpu_attention_forward(const tagc_cpu_att_dims *d, float *y, float *att,
                                const float *qkv);

/* dqkv (B, T, 3C) = gradient of tagc_cpu_attention_forward given dy; datt is scratch of
 * att's size. */
void tagc_cpu_attention_backward(const tagc_cpu_att_dims *d, float *dqkv, float *datt,
                                 const float *dy, const float *att, const float *qkv);

/* Softmax cross-entropy per row of Vp logits, over the first V of them (the rest are the
 * padded vocabulary): losses[i], and logits replaced by probabilities, 0 for the padding. */
void tagc_cpu_crossentropy_rows(tagc_cpu_rows r, float *losses, float *logits,
                                const uint16_t *targets, int V, int Vp);

/* Probabilities -> scale * (p - onehot(target)), in place. */
void tagc_cpu_crossentropy_backward_rows(tagc_cpu_rows r, float *probs, const uint16_t *targets,
                                         int V, float scale);

#endif
