/* The GPT model on one CUDA device (see model_cuda.h): the forward and backward of
 * model/model.c step by step, with cuBLAS for every matrix product and the kernels of
 * model_kernels_cuda.cu for the rest.
 *
 * Matrix products go through one row-major wrapper (mm) over cuBLAS's column-major strided
 * batched GEMM: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so the
 * operands are passed swapped with the same transpositions. Attention runs per sequence and
 * chunk of query rows as a batch over the heads (a head's Q, K, V are column slices of qkv:
 * stride hd), on the causal band of keys only; it keeps a log-sum-exp per row and recomputes
 * the probabilities in the backward, so no T x T matrix outlives its chunk. In bf16 mode each
 * operand region is rounded to bf16 into a scratch buffer right before its product. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/cuda_status.h"
#include "model/attention_flash_cuda.h"
#include "model/gemm_lt_cuda.h"
#include "model/model_cuda.h"
#include "model/model_hooks.h"
#include "model/model_kernels_cuda.h"

#define CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20)

/* Tensor order inside a block unit and the final unit (matches model.h). */
enum {
  K_LN1_W, K_LN1_B, K_LN2_W, K_LN2_B, K_QKV_W, K_QKV_B,
  K_PROJ_W, K_PROJ_B, K_FC_W, K_FC_B, K_MPROJ_W, K_MPROJ_B
};
enum { K_WTE, K_WPE };
enum { K_LNF_W, K_LNF_B, K_HEAD_W };

/* Device buffers, in allocation order. */
enum {
  D_TOKENS, D_TARGETS, D_ENC, D_LN1, D_LN1S, D_QKV, D_ATT, D_ATTY, D_RES2, D_LN2, D_LN2S, D_FCH,
  D_FCHG, D_RES3, D_LNF, D_LNFS, D_LOGITS, D_LOSSES, D_LOSS_SUM, D_DRES, D_DRESN, D_DRES2,
  D_DLN2, D_DATTN, D_DLN1, D_DBIG, D_DQKV, D_DATT, D_COLSUM, D_ENC_WS, D_BF_A, D_BF_B, D_BLAS_WS,
  D_COUNT
};

static const char *const buffer_names[D_COUNT] = {
    "tokens", "targets", "encoded", "ln1", "ln1_stat", "qkv", "att", "atty", "res2", "ln2",
    "ln2_stat", "fch", "fch_gelu", "res3", "lnf", "lnf_stat", "logits", "losses", "loss_sum",
    "dres", "dres_next", "dres2", "dln2", "dattn", "dln1", "dbig", "dqkv", "datt",
    "column-sum workspace", "embedding-backward workspace", "bf16 operand A", "bf16 operand B", "cuBLAS workspace"};

struct tagc_model_cuda {
  tagc_model_layout lay;
  int max_batch, device;
  tagc_compute_dtype dtype;
  cudaStream_t stream;
  cublasHandle_t blas;
  tagc_gemm_lt *lt; /* biased linear layers with the bias in cuBLASLt's epilogue; NULL: off */
  int flash;        /* the fused attention (use_flash) */
  int B, have_forward;
  size_t bytes;
  size_t bf_cap; /* elements of each bf16 operand buffer */
  void *buf[D_COUNT];
  cudaEvent_t events[TAGC_MAX_LAYERS + 2];
  double *loss_host; /* pinned */
  float *dres, *dres_next; /* swapped per block in the backward */
};

/* ---------------------------------------------------------------------------------------- */
/* Errors                                                                                   */

/* "model_cuda: <what>: <CUDA's message>", translated by common/cuda_status.h (out of device
 * memory is TAGC_ENOMEM; the error is cleared so later checks do not report it again). */
static tagc_status cuda_check(cudaError_t err, const char *what) {
  return tagc_cuda_status(err, "model_cuda: %s", what);
}

static tagc_status blas_check(cublasStatus_t st, const char *what) {
  if (st == CUBLAS_STATUS_SUCCESS)
    return TAGC_OK;
  if (st == CUBLAS_STATUS_ALLOC_FAILED)
    return tagc_errorf(TAGC_ENOMEM, "model_cuda: cuBLAS %s: could not allocate device memory",
                       what);
  return tagc_errorf(TAGC_EINTERNAL, "model_cuda: cuBLAS %s: %s", what,
                     cublasGetStatusString(st));
}

/* ---------------------------------------------------------------------------------------- */
/* Memory plan                                                                              */

/* Query rows per attention chunk: the whole sequence while its NH x T x T scores fit in
 * TAGC_ATT_SCRATCH_FLOATS, else fewer (a multiple of 16), so that the scratch stays bounded
 * whatever T: the attention's memory is O(B NH T) per layer (lse) plus this scratch. (The
 * host emulation's test builds with a small bound, so that its steps run several chunks.) */
#ifndef TAGC_ATT_SCRATCH_FLOATS
#define TAGC_ATT_SCRATCH_FLOATS ((size_t)16 << 20)
#endif

/* The fused attention (attention_flash_cuda.h) instead of the chunked cuBLAS one: with
 * TAGC_ATTENTION=flash in the environment, where the kernels take the shape. Which is faster
 * is for a GPU to measure (bench_model_gpu times both); the chunked path is the default. */
static int use_flash(const tagc_model_config *c) {
  const char *env = getenv("TAGC_ATTENTION");
  return env && strcmp(env, "flash") == 0 &&
         tagc_flash_attention_supported(c->ctx, c->n_head, c->d_model / c->n_head);
}

static int att_rows(const tagc_model_config *c) {
  size_t T = (size_t)c->ctx, NH = (size_t)c->n_head;
  if (NH * T * T <= TAGC_ATT_SCRATCH_FLOATS)
    return (int)T;
  size_t q = TAGC_ATT_SCRATCH_FLOATS / (NH * T) / 16 * 16;
  return (int)(q < 16 ? 16 : q);
}

/* Floats of one chunk's scores (NH x rows x T), each of the two scratch matrices. */
static size_t att_scratch_floats(const tagc_model_config *c) {
  return (size_t)c->n_head * (size_t)att_rows(c) * (size_t)c->ctx;
}

static size_t bf16_elems(const tagc_model_config *c, size_t B) {
  size_t T = (size_t)c->ctx, C = (size_t)c->d_model;
  size_t V = (size_t)c->padded_vocab, BT = B * T;
  size_t cap = att_scratch_floats(c); /* a chunk's probabilities or dS */
  size_t other[] = {BT * 4 * C, BT * V, 4 * C * C, V * C, T * 3 * C};
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    cap = other[i] > cap ? other[i] : cap;
  return cap;
}

/* Bytes of each device buffer for micro-batches of B. */
static void plan(const tagc_model_config *c, size_t B, tagc_compute_dtype dtype,
                 size_t bytes[D_COUNT]) {
  size_t T = (size_t)c->ctx, C = (size_t)c->d_model, L = (size_t)c->n_layer;
  size_t NH = (size_t)c->n_head, V = (size_t)c->padded_vocab, BT = B * T, f = sizeof(float);
  bytes[D_TOKENS] = bytes[D_TARGETS] = BT * sizeof(uint16_t);
  bytes[D_ENC] = BT * C * f;
  bytes[D_LN1] = bytes[D_ATTY] = bytes[D_RES2] = bytes[D_LN2] = bytes[D_RES3] = L * BT * C * f;
  bytes[D_LN1S] = bytes[D_LN2S] = L * BT * 2 * f;
  bytes[D_QKV] = L * BT * 3 * C * f;
  bytes[D_ATT] = L * B * NH * T * f; /* each attention row's log-sum-exp */
  bytes[D_FCH] = bytes[D_FCHG] = L * BT * 4 * C * f;
  bytes[D_LNF] = BT * C * f;
  bytes[D_LNFS] = BT * 2 * f;
  bytes[D_LOGITS] = BT * V * f;
  bytes[D_LOSSES] = BT * f;
  bytes[D_LOSS_SUM] = sizeof(double);
  bytes[D_DRES] = bytes[D_DRESN] = bytes[D_DRES2] = bytes[D_DLN2] = bytes[D_DATTN] =
      bytes[D_DLN1] = BT * C * f;
  bytes[D_DBIG] = BT * 4 * C * f;
  bytes[D_DQKV] = BT * 3 * C * f;
  bytes[D_DATT] = use_flash(c) ? tagc_flash_attention_workspace_bytes((int)B, (int)T, (int)NH)
                               : 2 * att_scratch_floats(c) * f; /* a chunk's scores and dS */
  bytes[D_COLSUM] = tagc_gpu_colsum_workspace_floats(4 * c->d_model) * f;
  bytes[D_ENC_WS] = tagc_gpu_encoder_backward_workspace_bytes((int)BT, c->vocab);
  bytes[D_BF_A] = bytes[D_BF_B] = dtype == TAGC_COMPUTE_BF16 ? bf16_elems(c, B) * 2 : 0;
  bytes[D_BLAS_WS] = CUBLAS_WORKSPACE_BYTES;
}

/* Each buffer rounded to 256 bytes, as cudaMalloc aligns them. */
static size_t plan_total(const size_t bytes[D_COUNT]) {
  size_t total = 0;
  for (int i = 0; i < D_COUNT; i++)
    total += (bytes[i] + 255) / 256 * 256;
  return total;
}

extern "C" size_t tagc_model_cuda_bytes_needed(const tagc_model_layout *layout, int max_batch,
                                               tagc_compute_dtype dtype) {
  size_t bytes[D_COUNT];
  plan(&layout->cfg, (size_t)(max_batch > 0 ? max_batch : 0), dtype, bytes);
  return plan_total(bytes);
}

extern "C" size_t tagc_model_cuda_bytes(const tagc_model_cuda *m) { return m ? m->bytes : 0; }

extern "C" int tagc_model_cuda_attention_fused(const tagc_model_cuda *m) {
  return m ? m->flash : 0;
}

extern "C" tagc_event tagc_model_cuda_unit_event(const tagc_model_cuda *m, int unit) {
  if (!m || unit < 0 || unit >= m->lay.n_units)
    return NULL;
  return m->events[unit];
}

extern "C" void tagc_model_cuda_destroy(tagc_model_cuda *m) {
  if (!m)
    return;
  cudaSetDevice(m->device);
  cudaStreamSynchronize(m->stream);
  tagc_gemm_lt_destroy(m->lt);
  if (m->blas)
    cublasDestroy(m->blas);
  for (int i = 0; i < D_COUNT; i++)
    cudaFree(m->buf[i]);
  for (int u = 0; u < m->lay.n_units; u++)
    if (m->events[u])
      cudaEventDestroy(m->events[u]);
  cudaFreeHost(m->loss_host);
  free(m);
}

static tagc_status alloc_buffers(tagc_model_cuda *m) {
  size_t bytes[D_COUNT];
  plan(&m->lay.cfg, (size_t)m->max_batch, m->dtype, bytes);
  for (int i = 0; i < D_COUNT; i++) {
    if (bytes[i] == 0)
      continue;
    cudaError_t err = cudaMalloc(&m->buf[i], bytes[i]);
    if (err != cudaSuccess) {
      m->buf[i] = NULL;
      return tagc_cuda_status(err, "model_cuda: cudaMalloc of %zu bytes for %s (%zu bytes already "
                              "allocated, %zu needed in all for micro-batch %d)",
                              bytes[i], buffer_names[i], m->bytes, plan_total(bytes),
                              m->max_batch);
    }
    m->bytes += (bytes[i] + 255) / 256 * 256;
  }
  m->bf_cap = bytes[D_BF_A] / 2;
  return TAGC_OK;
}

static tagc_status setup(tagc_model_cuda *m) {
  TAGC_CHECK(cuda_check(cudaSetDevice(m->device), "cudaSetDevice"));
  TAGC_CHECK(alloc_buffers(m));
  TAGC_CHECK(cuda_check(cudaMallocHost((void **)&m->loss_host, sizeof(double)),
                        "pinned host loss buffer"));
  for (int u = 0; u < m->lay.n_units; u++)
    TAGC_CHECK(cuda_check(cudaEventCreateWithFlags(&m->events[u], cudaEventDisableTiming),
                          "cudaEventCreate"));
  TAGC_CHECK(blas_check(cublasCreate(&m->blas), "create handle"));
  TAGC_CHECK(blas_check(cublasSetStream(m->blas, m->stream), "set stream"));
  TAGC_CHECK(blas_check(cublasSetWorkspace(m->blas, m->buf[D_BLAS_WS], CUBLAS_WORKSPACE_BYTES),
                        "set workspace"));
  TAGC_CHECK(blas_check(cublasSetMathMode(m->blas, CUBLAS_DEFAULT_MATH), "set math mode"));
  TAGC_CHECK(blas_check(cublasSetAtomicsMode(m->blas, CUBLAS_ATOMICS_NOT_ALLOWED),
                        "set atomics mode"));
  TAGC_CHECK(blas_check(cublasSetPointerMode(m->blas, CUBLAS_POINTER_MODE_HOST),
                        "set pointer mode"));
  /* the workspace is shared: cuBLAS and cuBLASLt run one after the other on the stream */
  return tagc_gemm_lt_create(m->stream, m->buf[D_BLAS_WS], CUBLAS_WORKSPACE_BYTES, &m->lt);
}

extern "C" tagc_status tagc_model_cuda_create(const tagc_model_layout *layout, int max_batch,
                                              int device, tagc_compute_dtype dtype,
                                              tagc_stream stream, tagc_model_cuda **out) {
  *out = NULL;
  if (max_batch < 1)
    return tagc_errorf(TAGC_EINVAL, "model_cuda: max_batch must be >= 1 (got %d)", max_batch);
  if (dtype != TAGC_COMPUTE_FP32 && dtype != TAGC_COMPUTE_BF16)
    return tagc_errorf(TAGC_EINVAL, "model_cuda: unknown compute dtype %d", (int)dtype);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || device < 0 || device >= count) {
    cudaGetLastError();
    return tagc_errorf(TAGC_EINVAL, "model_cuda: no CUDA device %d (%d found%s%s)", device, count,
                       err != cudaSuccess ? ": " : "",
                       err != cudaSuccess ? cudaGetErrorString(err) : "");
  }
  tagc_model_cuda *m = (tagc_model_cuda *)calloc(1, sizeof *m);
  if (!m)
    return tagc_errorf(TAGC_ENOMEM, "model_cuda: context struct");
  m->lay = *layout;
  m->max_batch = max_batch;
  m->device = device;
  m->dtype = dtype;
  m->stream = stream;
  m->flash = use_flash(&layout->cfg);
  tagc_status st = setup(m);
  if (st != TAGC_OK) {
    tagc_model_cuda_destroy(m);
    return st;
  }
  m->dres = (float *)m->buf[D_DRES];
  m->dres_next = (float *)m->buf[D_DRESN];
  *out = m;
  return TAGC_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Matrix products                                                                          */

/* A row-major operand: the matrix `rows` x `cols` as stored (before any transposition),
 * leading dimension ld, batch stride (elements). */
typedef struct operand {
  const float *p;
  int ld;
  long long stride;
  const uint16_t *b16; /* bf16 compute: p's region already rounded (same layout); NULL: not */
} operand;

static operand op(const float *p, int ld, long long stride) {
  operand o = {p, ld, stride, NULL};
  return o;
}

/* Rounds the region an operand covers (stored rows x cols, `batch` matrices) to bf16 into
 * dst (capacity cap elements). */
static tagc_status operand_to_bf16(const tagc_model_cuda *m, uint16_t *dst, operand a, int rows,
                                   int cols, int batch) {
  size_t extent = (size_t)(batch - 1) * (size_t)a.stride + (size_t)(rows - 1) * (size_t)a.ld +
                  (size_t)cols;
  if (extent > m->bf_cap)
    return tagc_errorf(TAGC_EINTERNAL, "model_cuda: bf16 operand of %zu elements exceeds the "
                       "scratch of %zu", extent, m->bf_cap);
  return tagc_gpu_to_bf16(dst, a.p, extent, m->stream);
}

/* Row-major C (M, N) = alpha op(A) op(B) + beta C for `batch` matrices, where op(A) is
 * (M, K) and op(B) is (K, N); ta / tb: the operand is stored transposed. */
static tagc_status mm(tagc_model_cuda *m, bool ta, bool tb, int M, int N, int K, float alpha,
                      operand A, operand B, float beta, float *C, int ldc, long long strideC,
                      int batch) {
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (m->dtype == TAGC_COMPUTE_FP32)
    return blas_check(cublasSgemmStridedBatched(m->blas, opb, opa, N, M, K, &alpha, B.p, B.ld,
                                                B.stride, A.p, A.ld, A.stride, &beta, C, ldc,
                                                strideC, batch),
                      "sgemm");
  const uint16_t *a16 = A.b16, *b16 = B.b16;
  if (!a16) {
    TAGC_CHECK(operand_to_bf16(m, (uint16_t *)m->buf[D_BF_A], A, ta ? K : M, ta ? M : K, batch));
    a16 = (const uint16_t *)m->buf[D_BF_A];
  }
  if (!b16) {
    TAGC_CHECK(operand_to_bf16(m, (uint16_t *)m->buf[D_BF_B], B, tb ? N : K, tb ? K : N, batch));
    b16 = (const uint16_t *)m->buf[D_BF_B];
  }
  return blas_check(cublasGemmStridedBatchedEx(m->blas, opb, opa, N, M, K, &alpha, b16,
                                               CUDA_R_16BF, B.ld, B.stride, a16, CUDA_R_16BF,
                                               A.ld, A.stride, &beta, C, CUDA_R_32F, ldc, strideC,
                                               batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "bf16 gemm");
}

/* out (N, OC) = add + bias + inp (N, IC) @ w (OC, IC)^T; add and bias may be NULL. With a
 * bias, one cuBLASLt product with the bias in its epilogue where it has an algorithm; else
 * add + bias written into out first and the product added (beta 1). */
static tagc_status linear_forward(tagc_model_cuda *m, float *out, const float *add,
                                  const float *inp, const float *w, const float *bias, int N,
                                  int IC, int OC) {
  int bf16 = m->dtype == TAGC_COMPUTE_BF16, usable = 0;
  const void *a = inp, *b = w;
  if (bf16) { /* the bf16 operands go to the scratch buffers (their alignment: cudaMalloc's) */
    a = m->buf[D_BF_A];
    b = m->buf[D_BF_B];
  }
  TAGC_CHECK(tagc_gemm_lt_usable(m->lt, out, add, a, b, bias, N, IC, OC, bf16, &usable));
  if (usable) {
    if (bf16) {
      TAGC_CHECK(operand_to_bf16(m, (uint16_t *)m->buf[D_BF_A], op(inp, IC, 0), N, IC, 1));
      TAGC_CHECK(operand_to_bf16(m, (uint16_t *)m->buf[D_BF_B], op(w, IC, 0), OC, IC, 1));
    }
    return tagc_gemm_lt_linear(m->lt, out, add, a, b, bias, N, IC, OC, bf16);
  }
  float beta = 0.0f;
  if (add || bias) {
    TAGC_CHECK(tagc_gpu_add_bias(out, add, bias, N, OC, m->stream));
    beta = 1.0f;
  }
  return mm(m, false, true, N, OC, IC, 1.0f, op(inp, IC, 0), op(w, IC, 0), beta, out, OC, 0, 1);
}

/* A linear layer's backward, both products from one bf16 rounding of dout (the rounding is
 * the same RNE of the same values, so the results are those of rounding it per product):
 * dinp (N, IC) = dout (N, OC) @ w (OC, IC); dw (OC, IC) += dout^T @ inp; dbias += column sums
 * of dout (NULL = no bias). */
static tagc_status linear_backward(tagc_model_cuda *m, float *dinp, float *dw, float *dbias,
                                   const float *dout, const float *inp, const float *w, int N,
                                   int IC, int OC) {
  operand d = op(dout, OC, 0);
  if (m->dtype == TAGC_COMPUTE_BF16) {
    TAGC_CHECK(operand_to_bf16(m, (uint16_t *)m->buf[D_BF_A], d, N, OC, 1));
    d.b16 = (const uint16_t *)m->buf[D_BF_A];
  }
  TAGC_CHECK(mm(m, false, false, N, IC, OC, 1.0f, d, op(w, IC, 0), 0.0f, dinp, IC, 0, 1));
  TAGC_CHECK(mm(m, true, false, OC, IC, N, 1.0f, d, op(inp, IC, 0), 1.0f, dw, IC, 0, 1));
  if (!dbias)
    return TAGC_OK;
  return tagc_gpu_colsum_add(dbias, dout, N, OC, (float *)m->buf[D_COLSUM], m->stream);
}

/* ---------------------------------------------------------------------------------------- */
/* Attention                                                                                */

typedef struct att_dims {
  int B, T, C, NH, hd;
  float scale;
} att_dims;

static att_dims dims_of(const tagc_model_config *c, int B) {
  att_dims d = {B, c->ctx, c->d_model, c->n_head, c->d_model / c->n_head, 0.0f};
  d.scale = 1.0f / sqrtf((float)d.hd);
  return d;
}

/* y (B, T, C) = per head softmax(q k^T * scale, causal) v, per sequence and chunk of query
 * rows [r0, r0 + n): the scores against the keys 0 .. r0 + n - 1 only (the causal band),
 * their softmax in place, then the product with v. lse keeps each row's log-sum-exp for the
 * backward, which recomputes the probabilities: no T x T matrix is kept. */
static tagc_status attention_forward(tagc_model_cuda *m, const att_dims *d, float *y, float *lse,
                                     const float *qkv) {
  if (m->flash)
    return tagc_flash_attention_forward(y, lse, qkv, d->B, d->T, d->NH, d->hd,
                                        m->dtype == TAGC_COMPUTE_BF16, m->stream);
  int C3 = 3 * d->C, T = d->T, hd = d->hd, rows = att_rows(&m->lay.cfg);
  float *s = (float *)m->buf[D_DATT];
  for (int b = 0; b < d->B; b++) {
    const float *q = qkv + (size_t)b * T * C3;
    float *lse_b = lse + (size_t)b * d->NH * T;
    for (int r0 = 0; r0 < T; r0 += rows) {
      int n = T - r0 < rows ? T - r0 : rows, k = r0 + n;
      long long nk = (long long)n * k;
      TAGC_CHECK(mm(m, false, true, n, k, hd, d->scale, op(q + (size_t)r0 * C3, C3, hd),
                    op(q + d->C, C3, hd), 0.0f, s, k, nk, d->NH));
      TAGC_CHECK(tagc_gpu_softmax_causal_forward(s, lse_b, d->NH, n, k, r0, T, m->stream));
      TAGC_CHECK(mm(m, false, false, n, hd, k, 1.0f, op(s, k, nk), op(q + 2 * d->C, C3, hd), 0.0f,
                    y + ((size_t)b * T + r0) * d->C, d->C, hd, d->NH));
    }
  }
  return TAGC_OK;
}

/* dqkv (B, T, 3C) = gradient of attention_forward given dy, chunk by chunk as the forward:
 * P recomputed from the scores and lse, dV += P^T dY, dS from dP = dY V^T, dQ = dS K,
 * dK += dS^T Q (dK and dV accumulate over the chunks in order: deterministic). */
static tagc_status attention_backward(tagc_model_cuda *m, const att_dims *d, float *dqkv,
                                      const float *dy, const float *y, const float *lse,
                                      const float *qkv) {
  if (m->flash) {
    size_t ws = tagc_flash_attention_workspace_bytes(d->B, d->T, d->NH);
    return tagc_flash_attention_backward(dqkv, dy, qkv, y, lse, d->B, d->T, d->NH, d->hd,
                                         m->dtype == TAGC_COMPUTE_BF16, m->buf[D_DATT], ws,
                                         m->stream);
  }
  int C3 = 3 * d->C, T = d->T, hd = d->hd, rows = att_rows(&m->lay.cfg);
  float *s = (float *)m->buf[D_DATT], *ds = s + att_scratch_floats(&m->lay.cfg);
  TAGC_CHECK(cuda_check(cudaMemsetAsync(dqkv, 0, (size_t)d->B * T * C3 * sizeof(float), m->stream),
                        "clear dqkv"));
  for (int b = 0; b < d->B; b++) {
    const float *base = qkv + (size_t)b * T * C3, *dyb = dy + (size_t)b * T * d->C;
    const float *lse_b = lse + (size_t)b * d->NH * T;
    float *dbase = dqkv + (size_t)b * T * C3;
    for (int r0 = 0; r0 < T; r0 += rows) {
      int n = T - r0 < rows ? T - r0 : rows, k = r0 + n;
      long long nk = (long long)n * k;
      const float *qc = base + (size_t)r0 * C3, *dyc = dyb + (size_t)r0 * d->C;
      TAGC_CHECK(mm(m, false, true, n, k, hd, d->scale, op(qc, C3, hd), op(base + d->C, C3, hd),
                    0.0f, s, k, nk, d->NH));
      TAGC_CHECK(tagc_gpu_softmax_causal_recompute(s, lse_b, d->NH, n, k, r0, T, m->stream));
      TAGC_CHECK(mm(m, false, true, n, k, hd, 1.0f, op(dyc, d->C, hd), op(base + 2 * d->C, C3, hd),
                    0.0f, ds, k, nk, d->NH));
      TAGC_CHECK(mm(m, true, false, k, hd, n, 1.0f, op(s, k, nk), op(dyc, d->C, hd), 1.0f,
                    dbase + 2 * d->C, C3, hd, d->NH));
      TAGC_CHECK(tagc_gpu_softmax_causal_backward(ds, s, d->NH, n, k, r0, T, d->scale, m->stream));
      TAGC_CHECK(mm(m, false, false, n, hd, k, 1.0f, op(ds, k, nk), op(base + d->C, C3, hd), 0.0f,
                    dbase + (size_t)r0 * C3, C3, hd, d->NH));
      TAGC_CHECK(mm(m, true, false, k, hd, n, 1.0f, op(ds, k, nk), op(qc, C3, hd), 1.0f,
                    dbase + d->C, C3, hd, d->NH));
    }
  }
  return TAGC_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Blocks                                                                                   */

static size_t toff(const tagc_model_layout *lay, int u, int k) {
  const tagc_unit_info *ui = &lay->units[u];
  return lay->tensors[ui->first_tensor + k].offset - ui->offset;
}

/* Pointers to layer l's activations (batch stride max_batch, as allocated). */
typedef struct layer_acts {
  float *ln1, *ln1_stat, *qkv, *att, *atty, *res2, *ln2, *ln2_stat, *fch, *fch_gelu, *res3;
  const float *input;
} layer_acts;

static layer_acts layer_get(const tagc_model_cuda *m, int l) {
  const tagc_model_config *c = &m->lay.cfg;
  size_t BT = (size_t)m->max_batch * c->ctx, C = (size_t)c->d_model, L = (size_t)l;
  size_t TT = (size_t)m->max_batch * c->n_head * (size_t)c->ctx; /* lse rows per layer */
#define F(i) ((float *)m->buf[i])
  layer_acts la = {
      F(D_LN1) + L * BT * C,       F(D_LN1S) + L * BT * 2,      F(D_QKV) + L * BT * 3 * C,
      F(D_ATT) + L * TT,           F(D_ATTY) + L * BT * C,      F(D_RES2) + L * BT * C,
      F(D_LN2) + L * BT * C,       F(D_LN2S) + L * BT * 2,      F(D_FCH) + L * BT * 4 * C,
      F(D_FCHG) + L * BT * 4 * C,  F(D_RES3) + L * BT * C,
      l == 0 ? F(D_ENC) : F(D_RES3) + (L - 1) * BT * C,
  };
  return la;
}

static const float *final_input(const tagc_model_cuda *m) {
  return layer_get(m, m->lay.cfg.n_layer - 1).res3;
}

static tagc_status block_forward(tagc_model_cuda *m, int l, const float *p) {
  const tagc_model_config *c = &m->lay.cfg;
  int u = l + 1, N = m->B * c->ctx, C = c->d_model;
  att_dims d = dims_of(c, m->B);
  layer_acts la = layer_get(m, l);
  cudaStream_t s = m->stream;
#define P(k) (p + toff(&m->lay, u, k))
  TAGC_CHECK(tagc_gpu_layernorm_forward(la.ln1, la.ln1_stat, la.input, P(K_LN1_W), P(K_LN1_B), N,
                                        C, s));
  TAGC_CHECK(linear_forward(m, la.qkv, NULL, la.ln1, P(K_QKV_W), P(K_QKV_B), N, C, 3 * C));
  TAGC_CHECK(attention_forward(m, &d, la.atty, la.att, la.qkv));
  TAGC_CHECK(linear_forward(m, la.res2, la.input, la.atty, P(K_PROJ_W), P(K_PROJ_B), N, C, C));
  TAGC_CHECK(tagc_gpu_layernorm_forward(la.ln2, la.ln2_stat, la.res2, P(K_LN2_W), P(K_LN2_B), N,
                                        C, s));
  TAGC_CHECK(linear_forward(m, la.fch, NULL, la.ln2, P(K_FC_W), P(K_FC_B), N, C, 4 * C));
  TAGC_CHECK(tagc_gpu_gelu_forward(la.fch_gelu, la.fch, (size_t)N * 4 * C, s));
  return linear_forward(m, la.res3, la.res2, la.fch_gelu, P(K_MPROJ_W), P(K_MPROJ_B), N, 4 * C, C);
#undef P
}

static tagc_status head_forward(tagc_model_cuda *m, const float *p) {
  const tagc_model_config *c = &m->lay.cfg;
  int u = c->n_layer + 1, N = m->B * c->ctx;
  float *lnf = F(D_LNF), *logits = F(D_LOGITS);
  TAGC_CHECK(tagc_gpu_layernorm_forward(lnf, F(D_LNFS), final_input(m),
                                        p + toff(&m->lay, u, K_LNF_W),
                                        p + toff(&m->lay, u, K_LNF_B), N, c->d_model, m->stream));
  TAGC_CHECK(linear_forward(m, logits, NULL, lnf, p + toff(&m->lay, u, K_HEAD_W), NULL, N,
                            c->d_model, c->padded_vocab));
  TAGC_CHECK(tagc_gpu_crossentropy_forward(F(D_LOSSES), logits, (const uint16_t *)m->buf[D_TARGETS],
                                           N, c->vocab, c->padded_vocab, m->stream));
  return tagc_gpu_sum_losses((double *)m->buf[D_LOSS_SUM], F(D_LOSSES), N, m->stream);
}

/* Gradient w.r.t. the final unit; m->dres = d loss / d (last res3). */
static tagc_status head_backward(tagc_model_cuda *m, const float *p, float *g, float loss_scale) {
  const tagc_model_config *c = &m->lay.cfg;
  int u = c->n_layer + 1, N = m->B * c->ctx, C = c->d_model, V = c->padded_vocab;
  const float *x = final_input(m), *lnf_w = p + toff(&m->lay, u, K_LNF_W);
  float *logits = F(D_LOGITS), *dlnf = F(D_DLN2);
  TAGC_CHECK(tagc_gpu_crossentropy_backward(logits, (const uint16_t *)m->buf[D_TARGETS], N, V,
                                            loss_scale, m->stream));
  TAGC_CHECK(linear_backward(m, dlnf, g + toff(&m->lay, u, K_HEAD_W), NULL, logits, F(D_LNF),
                             p + toff(&m->lay, u, K_HEAD_W), N, C, V));
  TAGC_CHECK(tagc_gpu_layernorm_backward_input(m->dres, NULL, dlnf, x, F(D_LNFS), lnf_w, N, C,
                                               m->stream));
  return tagc_gpu_layernorm_backward_params(g + toff(&m->lay, u, K_LNF_W),
                                            g + toff(&m->lay, u, K_LNF_B), dlnf, x, F(D_LNFS), N,
                                            C, F(D_COLSUM), m->stream);
}

/* m->dres: gradient w.r.t. block l's output on entry, w.r.t. its input on return. */
static tagc_status block_backward(tagc_model_cuda *m, int l, const float *p, float *g) {
  const tagc_model_config *c = &m->lay.cfg;
  int u = l + 1, N = m->B * c->ctx, C = c->d_model;
  att_dims d = dims_of(c, m->B);
  layer_acts la = layer_get(m, l);
  cudaStream_t s = m->stream;
  float *d3 = m->dres, *d1 = m->dres_next, *dfch = F(D_DBIG), *dln2 = F(D_DLN2);
  float *dres2 = F(D_DRES2), *dattn = F(D_DATTN), *dln1 = F(D_DLN1), *dqkv = F(D_DQKV);
  float *ws = F(D_COLSUM);
#define P(k) (p + toff(&m->lay, u, k))
#define G(k) (g + toff(&m->lay, u, k))
  /* each gradient's products right after it is made, while its bf16 rounding is at hand */
  TAGC_CHECK(linear_backward(m, dfch, G(K_MPROJ_W), G(K_MPROJ_B), d3, la.fch_gelu, P(K_MPROJ_W),
                             N, 4 * C, C));
  TAGC_CHECK(tagc_gpu_gelu_backward(dfch, la.fch, (size_t)N * 4 * C, s));
  TAGC_CHECK(linear_backward(m, dln2, G(K_FC_W), G(K_FC_B), dfch, la.ln2, P(K_FC_W), N, C, 4 * C));
  TAGC_CHECK(tagc_gpu_layernorm_backward_input(dres2, d3, dln2, la.res2, la.ln2_stat, P(K_LN2_W),
                                               N, C, s));
  TAGC_CHECK(tagc_gpu_layernorm_backward_params(G(K_LN2_W), G(K_LN2_B), dln2, la.res2,
                                                la.ln2_stat, N, C, ws, s));
  TAGC_CHECK(linear_backward(m, dattn, G(K_PROJ_W), G(K_PROJ_B), dres2, la.atty, P(K_PROJ_W), N,
                             C, C));
  TAGC_CHECK(attention_backward(m, &d, dqkv, dattn, la.atty, la.att, la.qkv));
  TAGC_CHECK(linear_backward(m, dln1, G(K_QKV_W), G(K_QKV_B), dqkv, la.ln1, P(K_QKV_W), N, C,
                             3 * C));
  TAGC_CHECK(tagc_gpu_layernorm_backward_input(d1, dres2, dln1, la.input, la.ln1_stat, P(K_LN1_W),
                                               N, C, s));
  TAGC_CHECK(tagc_gpu_layernorm_backward_params(G(K_LN1_W), G(K_LN1_B), dln1, la.input,
                                                la.ln1_stat, N, C, ws, s));
#undef P
#undef G
  m->dres = d1;
  m->dres_next = d3;
  return TAGC_OK;
}

static tagc_status embedding_backward(tagc_model_cuda *m, float *g) {
  const tagc_model_config *c = &m->lay.cfg;
  return tagc_gpu_encoder_backward(g + toff(&m->lay, 0, K_WTE), g + toff(&m->lay, 0, K_WPE),
                                   m->dres, (const uint16_t *)m->buf[D_TOKENS], m->B, c->ctx,
                                   c->vocab, c->d_model, m->buf[D_ENC_WS], m->stream);
}

/* ---------------------------------------------------------------------------------------- */
/* Passes                                                                                   */

static tagc_status record(tagc_model_cuda *m, int unit) {
  return cuda_check(cudaEventRecord(m->events[unit], m->stream), "cudaEventRecord");
}

/* Runs the forward of unit u between unit_params and unit_release. */
static tagc_status forward_unit(tagc_model_cuda *m, tagc_unit_hooks *h, int u) {
  const tagc_model_config *c = &m->lay.cfg;
  const float *p;
  TAGC_CHECK(tagc_unit_hooks_params(h, u, &p));
  tagc_status st;
  if (u == 0)
    st = tagc_gpu_encoder_forward(F(D_ENC), (const uint16_t *)m->buf[D_TOKENS],
                                  p + toff(&m->lay, 0, K_WTE), p + toff(&m->lay, 0, K_WPE), m->B,
                                  c->ctx, c->d_model, m->stream);
  else if (u <= c->n_layer)
    st = block_forward(m, u - 1, p);
  else
    st = head_forward(m, p);
  if (st == TAGC_OK)
    st = record(m, u);
  tagc_unit_hooks_release(h, u);
  return st;
}

extern "C" tagc_status tagc_model_cuda_forward(tagc_model_cuda *m, tagc_unit_hooks *hooks,
                                               const uint16_t *tokens, const uint16_t *targets,
                                               int B, double *loss_sum) {
  const tagc_model_config *c = &m->lay.cfg;
  m->have_forward = 0;
  if (B < 1 || B > m->max_batch)
    return tagc_errorf(TAGC_EINVAL, "model_cuda: batch %d outside [1, %d]", B, m->max_batch);
  size_t n = (size_t)B * c->ctx;
  for (size_t i = 0; i < n; i++)
    if (tokens[i] >= c->vocab || targets[i] >= c->vocab)
      return tagc_errorf(TAGC_EINVAL, "model_cuda: token %d or target %d at position %zu >= "
                         "vocab %d", tokens[i], targets[i], i, c->vocab);
  TAGC_CHECK(cuda_check(cudaSetDevice(m->device), "cudaSetDevice"));
  m->B = B;
  TAGC_CHECK(cuda_check(cudaMemcpyAsync(m->buf[D_TOKENS], tokens, n * sizeof *tokens,
                                        cudaMemcpyHostToDevice, m->stream), "copy tokens"));
  TAGC_CHECK(cuda_check(cudaMemcpyAsync(m->buf[D_TARGETS], targets, n * sizeof *targets,
                                        cudaMemcpyHostToDevice,
                                        m->stream), "copy targets"));
  for (int u = 0; u < m->lay.n_units; u++)
    TAGC_CHECK(forward_unit(m, hooks, u));
  TAGC_CHECK(cuda_check(cudaMemcpyAsync(m->loss_host, m->buf[D_LOSS_SUM], sizeof(double),
                                        cudaMemcpyDeviceToHost, m->stream), "copy loss"));
  TAGC_CHECK(cuda_check(cudaStreamSynchronize(m->stream), "forward"));
  *loss_sum = *m->loss_host;
  m->have_forward = 1;
  return TAGC_OK;
}

/* Runs the backward of unit u between its hooks; records its event before
 * unit_backward_done. */
static tagc_status backward_unit(tagc_model_cuda *m, tagc_unit_hooks *h, int u,
                                 float loss_scale) {
  int L = m->lay.cfg.n_layer, needs = tagc_model_backward_needs_params(&m->lay, u);
  const float *p = NULL;
  float *g;
  if (needs)
    TAGC_CHECK(tagc_unit_hooks_params(h, u, &p));
  tagc_status st = tagc_unit_hooks_grads(h, u, &g);
  if (st == TAGC_OK) {
    if (u == L + 1)
      st = head_backward(m, p, g, loss_scale);
    else if (u >= 1)
      st = block_backward(m, u - 1, p, g);
    else
      st = embedding_backward(m, g);
  }
  if (st == TAGC_OK)
    st = record(m, u);
  if (st == TAGC_OK)
    st = h->unit_backward_done(h->ctx, u);
  if (needs)
    tagc_unit_hooks_release(h, u);
  return st;
}

extern "C" tagc_status tagc_model_cuda_backward(tagc_model_cuda *m, tagc_unit_hooks *hooks,
                                                float loss_scale) {
  if (!m->have_forward)
    return tagc_errorf(TAGC_EINVAL, "model_cuda: backward without a completed forward");
  m->have_forward = 0;
  TAGC_CHECK(cuda_check(cudaSetDevice(m->device), "cudaSetDevice"));
  m->dres = F(D_DRES);
  m->dres_next = F(D_DRESN);
  for (int u = m->lay.n_units - 1; u >= 0; u--)
    TAGC_CHECK(backward_unit(m, hooks, u, loss_scale));
  return TAGC_OK;
}
#undef F
