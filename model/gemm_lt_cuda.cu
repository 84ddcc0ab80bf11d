/* cuBLASLt linear forward with a bias epilogue (see gemm_lt_cuda.h).
 *
 * Row-major out (N, OC) is column-major D (OC x N, ld OC); w (OC, IC) row-major is
 * column-major IC x OC, taken transposed; inp (N, IC) is column-major IC x N. So
 * D = op(A) B + beta C + bias with A = w (TRANSA = T), B = inp, C = add (beta 1) or out
 * (beta 0), and the bias broadcast along D's rows, which is what CUBLASLT_EPILOGUE_BIAS does. */
#include <cublasLt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gemm_lt_cuda.h"

/* Shapes kept: a model has four biased linear shapes per compute type; more are looked up
 * again each time (correct, only slower). */
#define LT_CACHE 16

typedef struct lt_plan {
  int used, N, IC, OC, has_add, bf16;
  uint32_t align; /* the smallest alignment of the five pointers, capped at 256 bytes */
  int found;      /* 0: cuBLASLt offered no algorithm */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
} lt_plan;

struct tagc_gemm_lt {
  cublasLtHandle_t handle;
  cudaStream_t stream;
  void *ws;
  size_t ws_bytes;
  lt_plan plans[LT_CACHE];
  int next; /* the entry to reuse when all are taken */
};

static tagc_status lt_check(cublasStatus_t st, const char *what) {
  if (st == CUBLAS_STATUS_SUCCESS)
    return TAGC_OK;
  return tagc_errorf(TAGC_EINTERNAL, "model_cuda: cuBLASLt %s failed: status %d", what, (int)st);
}

static void plan_free(lt_plan *p) {
  if (p->desc)
    cublasLtMatmulDescDestroy(p->desc);
  if (p->a)
    cublasLtMatrixLayoutDestroy(p->a);
  if (p->b)
    cublasLtMatrixLayoutDestroy(p->b);
  if (p->c)
    cublasLtMatrixLayoutDestroy(p->c);
  memset(p, 0, sizeof *p);
}

extern "C" tagc_status tagc_gemm_lt_create(cudaStream_t stream, void *workspace, size_t ws_bytes,
                                           tagc_gemm_lt **out) {
  *out = NULL;
  const char *env = getenv("TAGC_CUBLASLT");
  if (env && strcmp(env, "0") == 0)
    return TAGC_OK;
  tagc_gemm_lt *g = (tagc_gemm_lt *)calloc(1, sizeof *g);
  if (!g)
    return tagc_errorf(TAGC_ENOMEM, "model_cuda: cuBLASLt context");
  tagc_status st = lt_check(cublasLtCreate(&g->handle), "create");
  if (st != TAGC_OK) {
    free(g);
    return st;
  }
  g->stream = stream;
  g->ws = workspace;
  g->ws_bytes = ws_bytes;
  *out = g;
  return TAGC_OK;
}

extern "C" void tagc_gemm_lt_destroy(tagc_gemm_lt *g) {
  if (!g)
    return;
  for (int i = 0; i < LT_CACHE; i++)
    plan_free(&g->plans[i]);
  cublasLtDestroy(g->handle);
  free(g);
}

static uint32_t alignment(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 1 && a % al)
    al /= 2;
  return al;
}

/* Descriptors, layouts and the heuristic's first algorithm for one shape. */
static tagc_status plan_make(tagc_gemm_lt *g, lt_plan *p) {
  cudaDataType_t in = p->bf16 ? CUDA_R_16BF : CUDA_R_32F;
  TAGC_CHECK(lt_check(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                      "descriptor"));
  int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
  TAGC_CHECK(lt_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                     sizeof ta), "transa"));
  TAGC_CHECK(lt_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                     sizeof tb), "transb"));
  TAGC_CHECK(lt_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                     sizeof epi), "epilogue"));
  TAGC_CHECK(lt_check(cublasLtMatrixLayoutCreate(&p->a, in, (uint64_t)p->IC, (uint64_t)p->OC,
                                                 p->IC), "layout A"));
  TAGC_CHECK(lt_check(cublasLtMatrixLayoutCreate(&p->b, in, (uint64_t)p->IC, (uint64_t)p->N,
                                                 p->IC), "layout B"));
  TAGC_CHECK(lt_check(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, (uint64_t)p->OC,
                                                 (uint64_t)p->N, p->OC), "layout C"));
  cublasLtMatmulPreference_t pref = NULL;
  TAGC_CHECK(lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference"));
  uint64_t ws = g->ws_bytes;
  tagc_status st = lt_check(cublasLtMatmulPreferenceSetAttribute(
                                pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                            "workspace preference");
  const cublasLtMatmulPreferenceAttributes_t aligns[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (size_t i = 0; st == TAGC_OK && i < sizeof aligns / sizeof aligns[0]; i++)
    st = lt_check(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &p->align,
                                                       sizeof p->align), "alignment preference");
  cublasLtMatmulHeuristicResult_t res;
  int n = 0;
  /* a heuristic that fails is an answer too: no algorithm here, the cuBLAS path is used */
  cublasStatus_t hs = CUBLAS_STATUS_NOT_SUPPORTED;
  if (st == TAGC_OK)
    hs = cublasLtMatmulAlgoGetHeuristic(g->handle, p->desc, p->a, p->b, p->c, p->c, pref, 1, &res,
                                        &n);
  cublasLtMatmulPreferenceDestroy(pref);
  TAGC_CHECK(st);
  p->found = hs == CUBLAS_STATUS_SUCCESS && n > 0 && res.state == CUBLAS_STATUS_SUCCESS;
  if (p->found)
    p->algo = res.algo;
  return TAGC_OK;
}

static tagc_status plan_for(tagc_gemm_lt *g, int N, int IC, int OC, int has_add, int bf16,
                            uint32_t align, lt_plan **out) {
  for (int i = 0; i < LT_CACHE; i++) {
    lt_plan *p = &g->plans[i];
    if (p->used && p->N == N && p->IC == IC && p->OC == OC && p->has_add == has_add &&
        p->bf16 == bf16 && p->align == align) {
      *out = p;
      return TAGC_OK;
    }
  }
  lt_plan *p = &g->plans[g->next];
  g->next = (g->next + 1) % LT_CACHE;
  plan_free(p);
  p->used = 1;
  p->N = N;
  p->IC = IC;
  p->OC = OC;
  p->has_add = has_add;
  p->bf16 = bf16;
  p->align = align;
  tagc_status st = plan_make(g, p);
  if (st != TAGC_OK) {
    plan_free(p);
    return st;
  }
  *out = p;
  return TAGC_OK;
}

/* The plan of a call (looked up, else made). */
static tagc_status plan_of(tagc_gemm_lt *g, const float *out, const float *add, const void *inp,
                           const void *w, const float *bias, int N, int IC, int OC, int bf16,
                           lt_plan **p) {
  const void *ptrs[] = {out, add ? (const void *)add : (const void *)out, inp, w, bias};
  uint32_t align = 256;
  for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) {
    uint32_t a = alignment(ptrs[i]);
    align = a < align ? a : align;
  }
  return plan_for(g, N, IC, OC, add != NULL, bf16, align, p);
}

extern "C" tagc_status tagc_gemm_lt_usable(tagc_gemm_lt *g, const float *out, const float *add,
                                           const void *inp, const void *w, const float *bias,
                                           int N, int IC, int OC, int bf16, int *usable) {
  *usable = 0;
  if (!g || !bias)
    return TAGC_OK;
  lt_plan *p = NULL;
  TAGC_CHECK(plan_of(g, out, add, inp, w, bias, N, IC, OC, bf16, &p));
  *usable = p->found;
  return TAGC_OK;
}

extern "C" tagc_status tagc_gemm_lt_linear(tagc_gemm_lt *g, float *out, const float *add,
                                           const void *inp, const void *w, const float *bias,
                                           int N, int IC, int OC, int bf16) {
  if (!g || !bias)
    return tagc_errorf(TAGC_EUNSUPPORTED, "model_cuda: no cuBLASLt context or no bias");
  lt_plan *p = NULL;
  TAGC_CHECK(plan_of(g, out, add, inp, w, bias, N, IC, OC, bf16, &p));
  if (!p->found)
    return tagc_errorf(TAGC_EUNSUPPORTED, "model_cuda: cuBLASLt has no algorithm for %d x %d x %d",
                       N, IC, OC);
  TAGC_CHECK(lt_check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof bias), "bias pointer"));
  float alpha = 1.0f, beta = add ? 1.0f : 0.0f;
  return lt_check(cublasLtMatmul(g->handle, p->desc, &alpha, w, p->a, inp, p->b, &beta,
                                 add ? (const void *)add : (const void *)out, p->c, out, p->c,
                                 &p->algo, g->ws, g->ws_bytes, g->stream),
                  "matmul");
}
