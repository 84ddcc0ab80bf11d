/* Fused causal attention (see attention_flash_cuda.h). One block of 4 warps per 32-row tile
 * of one (sequence, head); every tile of q, k, v, dy, scores and probabilities sits in
 * static shared memory (under 48 KiB, so no opt-in), scores are rebuilt from q and k where
 * needed, and the only state kept between kernels is y, lse and D.
 *
 * The products go through one accumulator type, acc<T, M, N>: with T = float each thread
 * owns M*N/128 elements of the M x N result and sums its products in k order on CUDA
 * cores; with T = uint16_t (bf16 bits) each warp owns some 16 x 16 wmma accumulator
 * fragments. Everything row-wise (max, sum, exp, the rescale of the output) happens on the
 * fp32 copies the accumulators store to shared memory, one warp per row and one lane per
 * key (a key tile is 32 wide), so the fragments are only loaded, stored, filled and
 * multiplied. */
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cuda_common.cuh" /* TAGC_LAUNCH (the host emulation replaces it) */
#include "kernels/bf16.h"
#include "model/attention_flash_cuda.h"
#include "model/warp_cuda.cuh"

#define HD 64      /* the head width the kernels handle */
#define BQ 32      /* query rows per tile */
#define BK 32      /* key rows per tile: one lane per key in the row passes */
#define THREADS 128
#define WARPS (THREADS / 32)
#define MAX_GRID_YZ 65535

static_assert(BQ == BK, "the diagonal tile must be square for the causal loop bounds");
static_assert(BK == 32, "the row passes give each lane of a warp one key");

/* Shared-memory layout of a tile of operand type T: row strides in elements. fp32 uses odd
 * strides (a column walk hits 32 different banks); bf16 wmma needs strides that keep every
 * 16-row fragment 32-byte aligned. In the backward, fp32 P and dS overwrite the fp32 scores
 * and dY V^T in place (which keeps the fp32 kernels under 48 KiB). */
template <typename T> struct operand;
template <> struct operand<float> {
  static constexpr int LD = HD + 1;  /* q, k, v, dy tiles (rows x HD) */
  static constexpr int LDS = BK + 1; /* fp32 score tiles (rows x BK) */
  static constexpr int LDP = LDS;    /* P and dS tiles (rows x BK) */
  static constexpr int LDO = HD + 1; /* fp32 output tiles (rows x HD) */
  static constexpr bool in_place = true;
  static __device__ __forceinline__ float from(float x) { return x; }
};
template <> struct operand<uint16_t> {
  static constexpr int LD = HD + 8;
  static constexpr int LDS = BK + 4;
  static constexpr int LDP = BK + 8;
  static constexpr int LDO = HD + 4;
  static constexpr bool in_place = false;
  static __device__ __forceinline__ uint16_t from(float x) { return tagc_bf16_round(x); }
};

/* ---------------------------------------------------------------------------------------- */
/* Accumulators                                                                             */

/* acc (M x N) += op(A) (M x K) op(B) (K x N), op transposing when TA / TB: A is stored
 * row-major as M x K (or K x M when TA) with row stride lda, B as K x N (or N x K when TB).
 * All threads of the block call every member; operands are in shared memory. */
template <typename T, int M, int N> struct acc;

template <int M, int N> struct acc<float, M, N> {
  static_assert(THREADS % N == 0 && (M * N) % THREADS == 0, "thread mapping");
  static constexpr int E = M * N / THREADS, ROW_STEP = THREADS / N;
  /* element i of a thread: row threadIdx.x / N + i * ROW_STEP, column threadIdx.x % N */
  float v[E];

  __device__ void zero() {
    for (int i = 0; i < E; i++)
      v[i] = 0.0f;
  }
  template <bool TA, bool TB>
  __device__ void mma(const float *a, int lda, const float *b, int ldb, int K) {
    int r0 = threadIdx.x / N, c = threadIdx.x % N;
    for (int k = 0; k < K; k++) {
      float bk = TB ? b[c * ldb + k] : b[k * ldb + c];
      for (int i = 0; i < E; i++) {
        int r = r0 + i * ROW_STEP;
        v[i] += (TA ? a[k * lda + r] : a[r * lda + k]) * bk;
      }
    }
  }
  __device__ void store(float *dst, int ld) const {
    for (int i = 0; i < E; i++)
      dst[(threadIdx.x / N + i * ROW_STEP) * ld + threadIdx.x % N] = v[i];
  }
  __device__ void load(const float *src, int ld) {
    for (int i = 0; i < E; i++)
      v[i] = src[(threadIdx.x / N + i * ROW_STEP) * ld + threadIdx.x % N];
  }
};

template <int M, int N> struct acc<uint16_t, M, N> {
  static constexpr int TN = N / 16, F = (M / 16) * TN / WARPS;
  static_assert(M % 16 == 0 && N % 16 == 0 && F * WARPS == (M / 16) * TN, "fragment mapping");
  /* fragment i of warp w: the 16 x 16 tile g = w + i * WARPS, at rows 16 * (g / TN) and
   * columns 16 * (g % TN) */
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> f[F];

  static __device__ int row(int i) { return 16 * (((int)threadIdx.x / 32 + i * WARPS) / TN); }
  static __device__ int col(int i) { return 16 * (((int)threadIdx.x / 32 + i * WARPS) % TN); }

  __device__ void zero() {
    for (int i = 0; i < F; i++)
      nvcuda::wmma::fill_fragment(f[i], 0.0f);
  }
  template <bool TA, bool TB>
  __device__ void mma(const uint16_t *a, int lda, const uint16_t *b, int ldb, int K) {
    using namespace nvcuda;
    using la = typename std::conditional<TA, wmma::col_major, wmma::row_major>::type;
    using lb = typename std::conditional<TB, wmma::col_major, wmma::row_major>::type;
    for (int i = 0; i < F; i++) {
      int r = row(i), c = col(i);
      for (int k = 0; k < K; k += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, la> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, lb> fb;
        const uint16_t *pa = TA ? a + k * lda + r : a + r * lda + k;
        const uint16_t *pb = TB ? b + c * ldb + k : b + k * ldb + c;
        wmma::load_matrix_sync(fa, reinterpret_cast<const __nv_bfloat16 *>(pa), lda);
        wmma::load_matrix_sync(fb, reinterpret_cast<const __nv_bfloat16 *>(pb), ldb);
        wmma::mma_sync(f[i], fa, fb, f[i]);
      }
    }
  }
  __device__ void store(float *dst, int ld) const {
    for (int i = 0; i < F; i++)
      nvcuda::wmma::store_matrix_sync(dst + row(i) * ld + col(i), f[i], ld,
                                      nvcuda::wmma::mem_row_major);
  }
  __device__ void load(const float *src, int ld) {
    for (int i = 0; i < F; i++)
      nvcuda::wmma::load_matrix_sync(f[i], src + row(i) * ld + col(i), ld,
                                     nvcuda::wmma::mem_row_major);
  }
};

/* ---------------------------------------------------------------------------------------- */
/* Tiles                                                                                    */

/* The query tile of a block whose work grows with the tile index (the causal loops): the
 * longest ones are scheduled first, so the short ones fill the tail of the grid. */
__device__ __forceinline__ int last_tile_first() { return (int)(gridDim.x - 1 - blockIdx.x); }

/* dst (rows x HD, stride operand<T>::LD) = rows row0 .. row0 + rows - 1 of src (row stride
 * `stride`, HD columns) rounded to T; rows at or past T_ are zero. */
template <typename T>
__device__ void load_tile(T *dst, const float *src, size_t stride, int row0, int rows, int T_) {
  for (int e = threadIdx.x; e < rows * HD; e += THREADS) {
    int r = e / HD, c = e % HD, t = row0 + r;
    dst[r * operand<T>::LD + c] = operand<T>::from(t < T_ ? src[(size_t)t * stride + c] : 0.0f);
  }
}

/* Rows row0 .. of dst (row stride `stride`, HD columns) below T_ = the accumulator. stage is
 * shared scratch of rows x LDO floats. Starts and ends with a block barrier of its own. */
template <typename T, int M>
__device__ void write_tile(float *dst, size_t stride, int row0, int T_, const acc<T, M, HD> &a,
                           float *stage) {
  constexpr int LDO = operand<T>::LDO;
  __syncthreads();
  a.store(stage, LDO);
  __syncthreads();
  for (int e = threadIdx.x; e < M * HD; e += THREADS) {
    int r = e / HD, c = e % HD, t = row0 + r;
    if (t < T_)
      dst[(size_t)t * stride + c] = stage[r * LDO + c];
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Forward                                                                                  */

template <typename T> struct fwd_smem {
  __align__(32) T q[BQ * operand<T>::LD];
  __align__(32) T k[BK * operand<T>::LD];
  __align__(32) T v[BK * operand<T>::LD];
  __align__(32) float s[BQ * operand<T>::LDS];
  __align__(32) T p[BQ * operand<T>::LDP];
  __align__(32) float o[BQ * operand<T>::LDO];
  float m[BQ], l[BQ]; /* running max and sum of exp(score - max) per query row */
};

/* The online-softmax step of key tile k0 for query tile q0: each row's running max and sum
 * updated with this tile's scores (sm.s, unscaled q.k), P = exp(scale * s - max) (0 for
 * masked keys), and the row of the output accumulator (sm.o) rescaled to the new max. */
template <typename T> __device__ void softmax_step(fwd_smem<T> &sm, int q0, int k0, int T_,
                                                   float scale) {
  int lane = threadIdx.x & 31;
  for (int r = threadIdx.x >> 5; r < BQ; r += WARPS) {
    int t = q0 + r, key = k0 + lane;
    bool live = t < T_ && key <= t;
    float x = live ? sm.s[r * operand<T>::LDS + lane] * scale : -INFINITY;
    float m_old = sm.m[r], m_new = fmaxf(m_old, warp_max(x));
    float p = live ? expf(x - m_new) : 0.0f;
    float alpha = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
    float sum = warp_sum(p);
    sm.p[r * operand<T>::LDP + lane] = operand<T>::from(p);
    for (int c = lane; c < HD; c += 32)
      sm.o[r * operand<T>::LDO + c] *= alpha;
    if (lane == 0) {
      sm.m[r] = m_new;
      sm.l[r] = sm.l[r] * alpha + sum;
    }
  }
}

/* Block (query tile, head, sequence): y and lse of its rows. */
template <typename T>
__global__ void __launch_bounds__(THREADS)
    flash_forward_kernel(float *y, float *lse, const float *qkv, int T_, int NH, float scale) {
  constexpr int LD = operand<T>::LD;
  __shared__ fwd_smem<T> sm;
  int qt = last_tile_first(), h = blockIdx.y, b = blockIdx.z, C = NH * HD, q0 = qt * BQ;
  size_t C3 = 3 * (size_t)C;
  const float *base = qkv + (size_t)b * T_ * C3 + (size_t)h * HD;
  load_tile(sm.q, base, C3, q0, BQ, T_);
  if (threadIdx.x < BQ) {
    sm.m[threadIdx.x] = -INFINITY;
    sm.l[threadIdx.x] = 0.0f;
  }
  acc<T, BQ, HD> o;
  o.zero();
  for (int kt = 0; kt <= qt; kt++) {
    int k0 = kt * BK;
    __syncthreads(); /* the previous tile's products are done with k, v and p */
    load_tile(sm.k, base + C, C3, k0, BK, T_);
    load_tile(sm.v, base + 2 * C, C3, k0, BK, T_);
    __syncthreads();
    acc<T, BQ, BK> s;
    s.zero();
    s.template mma<false, true>(sm.q, LD, sm.k, LD, HD);
    s.store(sm.s, operand<T>::LDS);
    o.store(sm.o, operand<T>::LDO);
    __syncthreads();
    softmax_step(sm, q0, k0, T_, scale);
    __syncthreads();
    o.load(sm.o, operand<T>::LDO);
    o.template mma<false, false>(sm.p, operand<T>::LDP, sm.v, LD, BK);
  }
  __syncthreads();
  o.store(sm.o, operand<T>::LDO);
  __syncthreads();
  float *yb = y + (size_t)b * T_ * C + (size_t)h * HD;
  for (int e = threadIdx.x; e < BQ * HD; e += THREADS) {
    int r = e / HD, c = e % HD, t = q0 + r;
    if (t < T_)
      yb[(size_t)t * C + c] = sm.o[r * operand<T>::LDO + c] / sm.l[r];
  }
  if (threadIdx.x < BQ && q0 + (int)threadIdx.x < T_)
    lse[((size_t)b * NH + h) * T_ + q0 + threadIdx.x] =
        sm.m[threadIdx.x] + logf(sm.l[threadIdx.x]);
}

/* ---------------------------------------------------------------------------------------- */
/* Backward                                                                                 */

/* D[(b*NH + h)*T + t] = sum_c dy[b][t][h*HD + c] * y[b][t][h*HD + c]: one warp per (b, t, h)
 * row (which is row w of dy and y seen as (B*T*NH, HD)), lanes summed by butterfly. */
__global__ void row_dot_kernel(float *D, const float *dy, const float *y, int B, int T_,
                               int NH) {
  size_t rows = (size_t)B * T_ * NH;
  int lane = threadIdx.x & 31;
  for (size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < rows;
       w += ((size_t)gridDim.x * blockDim.x) >> 5) {
    float sum = 0.0f;
    for (int c = lane; c < HD; c += 32)
      sum += dy[w * HD + c] * y[w * HD + c];
    sum = warp_sum(sum);
    size_t bt = w / NH, b = bt / T_, t = bt % T_, h = w % NH;
    if (lane == 0)
      D[(b * NH + h) * T_ + t] = sum;
  }
}

template <typename T> struct bwd_smem {
  /* q and dy back to back: after the last tile they stage the output (BQ x LDO floats) */
  __align__(32) T qdy[2 * BQ * operand<T>::LD];
  __align__(32) T k[BK * operand<T>::LD];
  __align__(32) T v[BK * operand<T>::LD];
  __align__(32) float s[BQ * operand<T>::LDS];  /* scores; P in place when T is float */
  __align__(32) float dp[BQ * operand<T>::LDS]; /* dY V^T; dS in place when T is float */
  /* separate P and dS tiles for bf16 operands (one unused element when T is float) */
  __align__(32) T p[operand<T>::in_place ? 1 : BQ * operand<T>::LDP];
  __align__(32) T ds[operand<T>::in_place ? 1 : BQ * operand<T>::LDP];
  float lse[BQ], d[BQ];

  __device__ T *q() { return qdy; }
  __device__ T *dy() { return qdy + BQ * operand<T>::LD; }
  __device__ float *stage() { return reinterpret_cast<float *>(qdy); }
  __device__ T *p_tile() { return operand<T>::in_place ? reinterpret_cast<T *>(s) : p; }
  __device__ T *ds_tile() { return operand<T>::in_place ? reinterpret_cast<T *>(dp) : ds; }
};
/* The output stage (BQ x LDO floats) fits in the q and dy tiles. */
template <typename T> constexpr bool stage_fits() {
  return sizeof(float) * BQ * operand<T>::LDO <= 2 * sizeof(T) * BQ * operand<T>::LD;
}
static_assert(stage_fits<float>() && stage_fits<uint16_t>(), "output stage");

/* The query tile q0's rows of q, dy, lse and D. */
template <typename T>
__device__ void load_query_tile(bwd_smem<T> &sm, const float *q, const float *dy, size_t C3,
                                size_t C, const float *lse, const float *D, int q0, int T_) {
  load_tile(sm.q(), q, C3, q0, BQ, T_);
  load_tile(sm.dy(), dy, C, q0, BQ, T_);
  if (threadIdx.x < BQ) {
    int t = q0 + threadIdx.x;
    sm.lse[threadIdx.x] = t < T_ ? lse[t] : 0.0f;
    sm.d[threadIdx.x] = t < T_ ? D[t] : 0.0f;
  }
}

/* From the loaded tiles: P = exp(scale * q k^T - lse) and dS = P * (dY V^T - D) * scale,
 * both 0 past the diagonal and past T. The caller's barrier before the tiles were loaded
 * keeps the previous tile's products off the in-place stores; ends with a barrier. */
template <typename T>
__device__ void probs_and_grads(bwd_smem<T> &sm, int q0, int k0, int T_, float scale) {
  constexpr int LD = operand<T>::LD, LDS = operand<T>::LDS, LDP = operand<T>::LDP;
  acc<T, BQ, BK> s, dp;
  s.zero();
  dp.zero();
  s.template mma<false, true>(sm.q(), LD, sm.k, LD, HD);
  dp.template mma<false, true>(sm.dy(), LD, sm.v, LD, HD);
  s.store(sm.s, LDS);
  dp.store(sm.dp, LDS);
  __syncthreads();
  T *p = sm.p_tile(), *ds = sm.ds_tile();
  int lane = threadIdx.x & 31;
  for (int r = threadIdx.x >> 5; r < BQ; r += WARPS) {
    int t = q0 + r, key = k0 + lane;
    bool live = t < T_ && key <= t;
    float pr = live ? expf(sm.s[r * LDS + lane] * scale - sm.lse[r]) : 0.0f;
    float g = pr * (sm.dp[r * LDS + lane] - sm.d[r]) * scale;
    p[r * LDP + lane] = operand<T>::from(pr);
    ds[r * LDP + lane] = operand<T>::from(g);
  }
  __syncthreads();
}

/* Block (key tile, head, sequence): dK and dV of its keys, over the query tiles at or after
 * it in order. */
template <typename T>
__global__ void __launch_bounds__(THREADS)
    flash_backward_dkdv_kernel(float *dqkv, const float *dy, const float *qkv, const float *lse,
                               const float *D, int T_, int NH, float scale) {
  constexpr int LD = operand<T>::LD, LDP = operand<T>::LDP;
  __shared__ bwd_smem<T> sm;
  int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, k0 = kt * BK, nq = (T_ + BQ - 1) / BQ;
  size_t C = (size_t)NH * HD, C3 = 3 * C, bh = (size_t)b * NH + h;
  const float *base = qkv + (size_t)b * T_ * C3 + (size_t)h * HD;
  const float *dyb = dy + (size_t)b * T_ * C + (size_t)h * HD;
  load_tile(sm.k, base + C, C3, k0, BK, T_);
  load_tile(sm.v, base + 2 * C, C3, k0, BK, T_);
  acc<T, BK, HD> dk, dv;
  dk.zero();
  dv.zero();
  for (int qt = kt; qt < nq; qt++) {
    int q0 = qt * BQ;
    __syncthreads(); /* the previous tile's products are done with q and dy */
    load_query_tile(sm, base, dyb, C3, C, lse + bh * T_, D + bh * T_, q0, T_);
    __syncthreads();
    probs_and_grads(sm, q0, k0, T_, scale);
    dv.template mma<true, false>(sm.p_tile(), LDP, sm.dy(), LD, BQ);
    dk.template mma<true, false>(sm.ds_tile(), LDP, sm.q(), LD, BQ);
  }
  float *dbase = dqkv + (size_t)b * T_ * C3 + (size_t)h * HD;
  write_tile(dbase + C, C3, k0, T_, dk, sm.stage());
  write_tile(dbase + 2 * C, C3, k0, T_, dv, sm.stage());
}

/* Block (query tile, head, sequence): dQ of its rows, over the key tiles up to the diagonal
 * in order. */
template <typename T>
__global__ void __launch_bounds__(THREADS)
    flash_backward_dq_kernel(float *dqkv, const float *dy, const float *qkv, const float *lse,
                             const float *D, int T_, int NH, float scale) {
  constexpr int LD = operand<T>::LD, LDP = operand<T>::LDP;
  __shared__ bwd_smem<T> sm;
  int qt = last_tile_first(), h = blockIdx.y, b = blockIdx.z, q0 = qt * BQ;
  size_t C = (size_t)NH * HD, C3 = 3 * C, bh = (size_t)b * NH + h;
  const float *base = qkv + (size_t)b * T_ * C3 + (size_t)h * HD;
  const float *dyb = dy + (size_t)b * T_ * C + (size_t)h * HD;
  load_query_tile(sm, base, dyb, C3, C, lse + bh * T_, D + bh * T_, q0, T_);
  acc<T, BQ, HD> dq;
  dq.zero();
  for (int kt = 0; kt <= qt; kt++) {
    int k0 = kt * BK;
    __syncthreads(); /* the previous tile's products are done with k */
    load_tile(sm.k, base + C, C3, k0, BK, T_);
    load_tile(sm.v, base + 2 * C, C3, k0, BK, T_);
    __syncthreads();
    probs_and_grads(sm, q0, k0, T_, scale);
    dq.template mma<false, false>(sm.ds_tile(), LDP, sm.k, LD, BK);
  }
  write_tile(dqkv + (size_t)b * T_ * C3 + (size_t)h * HD, C3, q0, T_, dq, sm.stage());
}

/* ---------------------------------------------------------------------------------------- */
/* Launchers                                                                                */

static tagc_status check_shape(const char *what, int B, int T, int NH, int hd) {
  if (B < 1 || B > MAX_GRID_YZ || !tagc_flash_attention_supported(T, NH, hd))
    return tagc_errorf(TAGC_EINVAL, "flash attention %s: B %d, T %d, %d heads of %d: "
                       "unsupported (hd 64, T >= 1, 1 <= B, NH <= %d)", what, B, T, NH, hd,
                       MAX_GRID_YZ);
  return TAGC_OK;
}

extern "C" int tagc_flash_attention_supported(int T, int NH, int hd) {
  return hd == HD && T >= 1 && NH >= 1 && NH <= MAX_GRID_YZ;
}

extern "C" size_t tagc_flash_attention_workspace_bytes(int B, int T, int NH) {
  return ws_align((size_t)B * T * NH * sizeof(float));
}

extern "C" tagc_status tagc_flash_attention_forward(float *y, float *lse, const float *qkv,
                                                    int B, int T, int NH, int hd, int bf16,
                                                    tagc_stream stream) {
  TAGC_CHECK(check_shape("forward", B, T, NH, hd));
  if (!y || !lse || !qkv)
    return tagc_errorf(TAGC_EINVAL, "flash attention forward: NULL pointer");
  dim3 grid((T + BQ - 1) / BQ, NH, B);
  float scale = 1.0f / sqrtf((float)hd);
  if (bf16)
    TAGC_LAUNCH(flash_forward_kernel<uint16_t>, grid, THREADS, stream)(y, lse, qkv, T, NH, scale);
  else
    TAGC_LAUNCH(flash_forward_kernel<float>, grid, THREADS, stream)(y, lse, qkv, T, NH, scale);
  return cuda_launched("flash attention forward");
}

extern "C" tagc_status tagc_flash_attention_backward(float *dqkv, const float *dy,
                                                     const float *qkv, const float *y,
                                                     const float *lse, int B, int T, int NH,
                                                     int hd, int bf16, void *workspace,
                                                     size_t workspace_bytes,
                                                     tagc_stream stream) {
  TAGC_CHECK(check_shape("backward", B, T, NH, hd));
  if (!dqkv || !dy || !qkv || !y || !lse || !workspace)
    return tagc_errorf(TAGC_EINVAL, "flash attention backward: NULL pointer");
  if (workspace_bytes < tagc_flash_attention_workspace_bytes(B, T, NH))
    return tagc_errorf(TAGC_EINVAL, "flash attention backward: workspace of %zu bytes, %zu "
                       "needed", workspace_bytes, tagc_flash_attention_workspace_bytes(B, T, NH));
  float *D = (float *)workspace, scale = 1.0f / sqrtf((float)hd);
  TAGC_LAUNCH(row_dot_kernel, grid_for((int64_t)B * T * NH, THREADS / 32), THREADS, stream)(
      D, dy, y, B, T, NH);
  dim3 grid((T + BK - 1) / BK, NH, B);
  if (bf16) {
    TAGC_LAUNCH(flash_backward_dkdv_kernel<uint16_t>, grid, THREADS, stream)(
        dqkv, dy, qkv, lse, D, T, NH, scale);
    TAGC_LAUNCH(flash_backward_dq_kernel<uint16_t>, grid, THREADS, stream)(
        dqkv, dy, qkv, lse, D, T, NH, scale);
  } else {
    TAGC_LAUNCH(flash_backward_dkdv_kernel<float>, grid, THREADS, stream)(
        dqkv, dy, qkv, lse, D, T, NH, scale);
    TAGC_LAUNCH(flash_backward_dq_kernel<float>, grid, THREADS, stream)(
        dqkv, dy, qkv, lse, D, T, NH, scale);
  }
  return cuda_launched("flash attention backward");
}
