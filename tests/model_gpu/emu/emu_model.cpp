/* Host stand-ins for the runtime calls the model adds to tests/kernels_gpu/emu, and a
 * reference cuBLAS (the two strided batched GEMMs the model uses, each product in double
 * through OpenBLAS), so that test_model_gpu runs the whole CUDA model on the host. The real cublas_v2.h declares the functions defined here. */
#include "cuda_runtime.h"

#include <cblas.h>
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
