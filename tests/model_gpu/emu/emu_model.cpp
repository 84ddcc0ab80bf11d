/* Host stand-ins for the runtime calls the model adds to tests/kernels_gpu/emu, and a
 * reference cuBLAS (the two strided batched GEMMs the model uses, each product in double
 * through OpenBLAS) and cuBLASLt (the matmul with a bias epilogue of model/gemm_lt_cuda.cu),
 * so that test_model_gpu runs the whole CUDA model on the host. The real cublas_v2.h declares the functions defined here. */
#include "cuda_runtime.h"

#include <cblas.h>
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>

namespace {

/* bf16 bits -> float (exact). */
float bf16_value(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/* Element (r, c) of op(X) for a column-major X with leading dimension ld. */
template <typename T>
double at(const T *x, cublasOperation_t op, int ld, int r, int c) {
  const T v = op == CUBLAS_OP_N ? x[(size_t)c * ld + r] : x[(size_t)r * ld + c];
  if constexpr (sizeof(T) == 2)
    return bf16_value(v);
  else
    return v;
}

/* The argument checks cuBLAS documents (CUBLAS_STATUS_INVALID_VALUE), then the product:
 * op(A) and op(B) of each matrix packed to double, multiplied by OpenBLAS's dgemm (products
 * summed in double, so the rounding is that of the final store to float; a GPT-2-shape step
 * is then seconds of GEMM instead of hours of loops). */
template <typename T>
cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    float alpha, const T *A, int lda, long long sa, const T *B, int ldb,
                    long long sb, float beta, float *C, int ldc, long long sc, int batch) {
  auto at_least = [](int ld, int rows) { return ld >= (rows > 1 ? rows : 1); };
  if (m < 0 || n < 0 || k < 0 || batch < 0 || !at_least(lda, ta == CUBLAS_OP_N ? m : k) ||
      !at_least(ldb, tb == CUBLAS_OP_N ? k : n) || !at_least(ldc, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0)
    return CUBLAS_STATUS_SUCCESS;
  std::vector<double> pa((size_t)m * k), pb((size_t)k * n), pc((size_t)m * n);
  for (int i = 0; i < batch; i++) {
    const T *a = A + i * sa, *b = B + i * sb;
    float *c = C + i * sc;
    for (int p = 0; p < k; p++) /* column-major op(A) (m x k) and op(B) (k x n) */
      for (int row = 0; row < m; row++)
        pa[(size_t)p * m + row] = at(a, ta, lda, row, p);
    for (int col = 0; col < n; col++)
      for (int p = 0; p < k; p++)
        pb[(size_t)col * k + p] = at(b, tb, ldb, p, col);
    if (k > 0)
      cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, pa.data(), m,
                  pb.data(), k, 0.0, pc.data(), m);
    else
      std::fill(pc.begin(), pc.end(), 0.0);
    for (int col = 0; col < n; col++)
      for (int row = 0; row < m; row++) {
        float *out = &c[(size_t)col * ldc + row];
        double s = pc[(size_t)col * m + row];
        *out = (float)(alpha * s + (beta != 0.0f ? beta * *out : 0.0f));
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaMallocHost(void **p, size_t n) {
  *p = std::malloc(n ? n : 1);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void *p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  *free_bytes = *total = (size_t)1 << 30;
  return cudaSuccess;
}
}

static cublasContext *const fake_handle = reinterpret_cast<cublasContext *>(0x1);

cublasStatus_t cublasCreate(cublasHandle_t *h) {
  *h = fake_handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void *, size_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t, cublasAtomicsMode_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetPointerMode(cublasHandle_t, cublasPointerMode_t) {
  return CUBLAS_STATUS_SUCCESS;
}
const char *cublasGetStatusString(cublasStatus_t) { return "emulated cuBLAS error"; }

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long sa, const float *B, int ldb, long long sb,
                                         const float *beta, float *C, int ldc, long long sc,
                                         int batch) {
  return gemm(ta, tb, m, n, k, *alpha, A, lda, sa, B, ldb, sb, *beta, C, ldc, sc, batch);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType at_,
                                          int lda, long long sa, const void *B, cudaDataType bt,
                                          int ldb, long long sb, const void *beta, void *C,
                                          cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t, cublasGemmAlgo_t) {
  if (at_ != CUDA_R_16BF || bt != CUDA_R_16BF || ct != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  return gemm(ta, tb, m, n, k, *(const float *)alpha, (const uint16_t *)A, lda, sa,
              (const uint16_t *)B, ldb, sb, *(const float *)beta, (float *)C, ldc, sc, batch);
}

/* cuBLASLt: descriptors are host structs behind the opaque pointers; the heuristic offers one
 * algorithm unless TAGC_EMU_LT_NONE is set (the model's fallback path); the matmul is the
 * reference GEMM above into D (C copied in first when beta is not 0), then the bias added to
 * each row of D, epilogue CUBLASLT_EPILOGUE_BIAS or DEFAULT only. */
namespace {
struct lt_desc {
  int32_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const float *bias = nullptr;
};
struct lt_layout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
struct lt_pref {
  int unused;
};
template <typename T> T *from(void *p) { return reinterpret_cast<T *>(p); }
}  // namespace

static cublasLtContext *const fake_lt = reinterpret_cast<cublasLtContext *>(0x2);

/* Matmuls run, for the test to see which path the model took. */
extern "C" long emu_lt_matmuls;
long emu_lt_matmuls;

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  *h = fake_lt;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct,
                                        cudaDataType_t st) {
  if (ct != CUBLAS_COMPUTE_32F || st != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(new lt_desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete from<lt_desc>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
  lt_desc *x = from<lt_desc>(d);
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_TRANSA:
  case CUBLASLT_MATMUL_DESC_TRANSB:
    if (size != sizeof(int32_t))
      return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(attr == CUBLASLT_MATMUL_DESC_TRANSA ? &x->ta : &x->tb, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    if (size != sizeof(uint32_t))
      return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&x->epilogue, buf, size);
    return x->epilogue == CUBLASLT_EPILOGUE_DEFAULT || x->epilogue == CUBLASLT_EPILOGUE_BIAS
               ? CUBLAS_STATUS_SUCCESS
               : CUBLAS_STATUS_NOT_SUPPORTED;
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    if (size != sizeof(void *))
      return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&x->bias, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  default:
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (ld < (int64_t)(rows > 1 ? rows : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(new lt_layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete from<lt_layout>(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(new lt_pref{0});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete from<lt_pref>(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                    cublasLtMatmulPreferenceAttributes_t,
                                                    const void *buf, size_t) {
  return buf ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *returned) {
  *returned = 0;
  if (requested < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (std::getenv("TAGC_EMU_LT_NONE"))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  std::memset(&results[0], 0, sizeof results[0]);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t ad, const void *B,
                              cublasLtMatrixLayout_t bd, const void *beta, const void *C,
                              cublasLtMatrixLayout_t cd, void *D, cublasLtMatrixLayout_t dd,
                              const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t) {
  const lt_desc *x = from<lt_desc>(desc);
  const lt_layout *la = from<lt_layout>(ad), *lb = from<lt_layout>(bd);
  const lt_layout *lc = from<lt_layout>(cd), *ld = from<lt_layout>(dd);
  cublasOperation_t ta = (cublasOperation_t)x->ta, tb = (cublasOperation_t)x->tb;
  int m = (int)ld->rows, n = (int)ld->cols;
  int k = (int)(ta == CUBLAS_OP_N ? la->cols : la->rows);
  if (la->type != lb->type || lc->type != CUDA_R_32F || ld->type != CUDA_R_32F ||
      lc->rows != ld->rows || lc->cols != ld->cols || lc->ld != ld->ld ||
      (int)(ta == CUBLAS_OP_N ? la->rows : la->cols) != m ||
      (int)(tb == CUBLAS_OP_N ? lb->rows : lb->cols) != k ||
      (int)(tb == CUBLAS_OP_N ? lb->cols : lb->rows) != n ||
      (x->epilogue == CUBLASLT_EPILOGUE_BIAS && !x->bias))
    return CUBLAS_STATUS_INVALID_VALUE;
  emu_lt_matmuls++;
  float al = *static_cast<const float *>(alpha), be = *static_cast<const float *>(beta);
  float *d = static_cast<float *>(D);
  if (be != 0.0f && C != D)
    for (int col = 0; col < n; col++)
      std::memcpy(d + (size_t)col * ld->ld, static_cast<const float *>(C) + (size_t)col * lc->ld,
                  (size_t)m * sizeof(float));
  cublasStatus_t st;
  if (la->type == CUDA_R_16BF)
    st = gemm(ta, tb, m, n, k, al, static_cast<const uint16_t *>(A), (int)la->ld, 0,
              static_cast<const uint16_t *>(B), (int)lb->ld, 0, be, d, (int)ld->ld, 0, 1);
  else if (la->type == CUDA_R_32F)
    st = gemm(ta, tb, m, n, k, al, static_cast<const float *>(A), (int)la->ld, 0,
              static_cast<const float *>(B), (int)lb->ld, 0, be, d, (int)ld->ld, 0, 1);
  else
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (st != CUBLAS_STATUS_SUCCESS || x->epilogue != CUBLASLT_EPILOGUE_BIAS)
    return st;
  for (int col = 0; col < n; col++)
    for (int row = 0; row < m; row++)
      d[(size_t)col * ld->ld + row] += x->bias[row];
  return CUBLAS_STATUS_SUCCESS;
}
