/* The GPT model's own CUDA kernels (see model_kernels_cuda.h). Row kernels use one warp per
 * row with butterfly (xor) shuffles, so every lane holds the same sums in the same order;
 * column sums use a fixed grid of row chunks and a second pass over the chunks. */
#include <cuda_runtime.h>
#include <math.h>

#include "kernels/cuda_common.cuh" /* TAGC_LAUNCH (the host emulation replaces it) */
#include "kernels/bf16.h"
#include "model/model_kernels_cuda.h"
#include "model/warp_cuda.cuh"

#define THREADS 256
#define WARPS_PER_BLOCK (THREADS / 32)
#define MAX_GRID 65535
#define LN_EPS 1e-5f
#define GELU_K0 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f
/* Row chunks of the first column-sum pass; tile of 32 columns x 8 row lanes per block. */
#define COLSUM_CHUNKS 64
#define COLSUM_ROWS 8

/* Blocks for n items at `per_block` each, capped (kernels loop grid-stride). */
static unsigned blocks_for(size_t n, size_t per_block) {
  size_t g = (n + per_block - 1) / per_block;
  if (g < 1)
    g = 1;
  return (unsigned)(g < MAX_GRID ? g : MAX_GRID);
}

/* Global warp index and warp count of a grid-stride row loop. */
#define WARP_ID() (((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5)
#define WARP_COUNT() (((size_t)gridDim.x * blockDim.x) >> 5)
#define LANE() (threadIdx.x & 31)

/* ---------------------------------------------------------------------------------------- */
/* LayerNorm                                                                                */

__global__ void layernorm_forward_kernel(float *out, float *stat, const float *inp,
                                         const float *w, const float *b, int N, int C) {
  int lane = LANE();
  for (size_t row = WARP_ID(); row < (size_t)N; row += WARP_COUNT()) {
    const float *x = inp + row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32)
      sum += x[c];
    float mean = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32)
      var += (x[c] - mean) * (x[c] - mean);
    float rstd = 1.0f / sqrtf(warp_sum(var) / C + LN_EPS);
    float *o = out + row * C;
    for (int c = lane; c < C; c += 32)
      o[c] = (x[c] - mean) * rstd * w[c] + b[c];
    if (lane == 0) {
      stat[2 * row] = mean;
      stat[2 * row + 1] = rstd;
    }
  }
}

extern "C" tagc_status tagc_gpu_layernorm_forward(float *out, float *stat, const float *inp,
                                                  const float *w, const float *b, int N, int C,
                                                  tagc_stream stream) {
  TAGC_LAUNCH(layernorm_forward_kernel, blocks_for(N, WARPS_PER_BLOCK), THREADS, stream)(
      out, stat, inp, w, b, N, C);
  return cuda_launched("model_cuda layernorm_forward");
}

__global__ void layernorm_backward_input_kernel(float *dinp, const float *dres, const float *dout,
                                                const float *inp, const float *stat,
                                                const float *w, int N, int C) {
  int lane = LANE();
  for (size_t row = WARP_ID(); row < (size_t)N; row += WARP_COUNT()) {
    const float *x = inp + row * C, *d = dout + row * C;
    float mean = stat[2 * row], rstd = stat[2 * row + 1];
    float sum_d = 0.0f, sum_dx = 0.0f;
    for (int c = lane; c < C; c += 32) {
      float dn = d[c] * w[c];
      sum_d += dn;
      sum_dx += dn * (x[c] - mean) * rstd;
    }
    float mean_d = warp_sum(sum_d) / C, mean_dx = warp_sum(sum_dx) / C;
    float *di = dinp + row * C;
    const float *dr = dres ? dres + row * C : NULL;
    for (int c = lane; c < C; c += 32) {
      float xhat = (x[c] - mean) * rstd;
      float g = rstd * (d[c] * w[c] - mean_d - xhat * mean_dx);
      di[c] = dr ? dr[c] + g : g;
    }
  }
}

extern "C" tagc_status tagc_gpu_layernorm_backward_input(float *dinp, const float *dres,
                                                         const float *dout, const float *inp,
                                                         const float *stat, const float *w, int N,
                                                         int C, tagc_stream stream) {
  TAGC_LAUNCH(layernorm_backward_input_kernel, blocks_for(N, WARPS_PER_BLOCK), THREADS, stream)(
      dinp, dres, dout, inp, stat, w, N, C);
  return cuda_launched("model_cuda layernorm_backward_input");
}

/* ---------------------------------------------------------------------------------------- */
/* Column sums: pass 1 writes ws[chunk][c] (and ws[COLSUM_CHUNKS * C + chunk * C + c] for the
 * LayerNorm weight), pass 2 adds the chunks in order into the destination.                */

template <bool LN>
__global__ void colsum_chunks_kernel(float *ws, const float *src, const float *inp,
                                     const float *stat, int N, int C) {
  __shared__ float part[2][COLSUM_ROWS][32];
  int c = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
  int per = (N + COLSUM_CHUNKS - 1) / COLSUM_CHUNKS;
  int r0 = chunk * per, r1 = min(N, r0 + per);
  float s = 0.0f, sx = 0.0f;
  if (c < C)
    for (int i = r0 + threadIdx.y; i < r1; i += COLSUM_ROWS) {
      float d = src[(size_t)i * C + c];
      s += d;
      if (LN)
        sx += d * ((inp[(size_t)i * C + c] - stat[2 * i]) * stat[2 * i + 1]);
    }
  part[0][threadIdx.y][threadIdx.x] = s;
  part[1][threadIdx.y][threadIdx.x] = sx;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.0f, tx = 0.0f;
    for (int k = 0; k < COLSUM_ROWS; k++) {
      t += part[0][k][threadIdx.x];
      tx += part[1][k][threadIdx.x];
    }
    ws[(size_t)chunk * C + c] = t;
    if (LN)
      ws[(size_t)(COLSUM_CHUNKS + chunk) * C + c] = tx;
  }
}

/* dst[c] += sum over chunks of ws[chunk][c]; dst2 likewise from the second half (or NULL). */
__global__ void colsum_finish_kernel(float *dst, float *dst2, const float *ws, int C) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    float t = 0.0f, tx = 0.0f;
    for (int k = 0; k < COLSUM_CHUNKS; k++) {
      t += ws[(size_t)k * C + c];
      if (dst2)
        tx += ws[(size_t)(COLSUM_CHUNKS + k) * C + c];
    }
    dst[c] += t;
    if (dst2)
      dst2[c] += tx;
  }
}

extern "C" size_t tagc_gpu_colsum_workspace_floats(int C) {
  return 2 * (size_t)COLSUM_CHUNKS * (size_t)(C > 0 ? C : 0);
}

extern "C" tagc_status tagc_gpu_layernorm_backward_params(float *dw, float *db, const float *dout,
                                                          const float *inp, const float *stat,
                                                          int N, int C, float *ws,
                                                          tagc_stream stream) {
  dim3 grid((C + 31) / 32, COLSUM_CHUNKS), block(32, COLSUM_ROWS);
  TAGC_LAUNCH(colsum_chunks_kernel<true>, grid, block, stream)(ws, dout, inp, stat, N, C);
  TAGC_LAUNCH(colsum_finish_kernel, blocks_for(C, THREADS), THREADS, stream)(db, dw, ws, C);
  return cuda_launched("model_cuda layernorm_backward_params");
}

extern "C" tagc_status tagc_gpu_colsum_add(float *dst, const float *src, int N, int C, float *ws,
                                           tagc_stream stream) {
  dim3 grid((C + 31) / 32, COLSUM_CHUNKS), block(32, COLSUM_ROWS);
  TAGC_LAUNCH(colsum_chunks_kernel<false>, grid, block, stream)(ws, src, NULL, NULL, N, C);
  TAGC_LAUNCH(colsum_finish_kernel, blocks_for(C, THREADS), THREADS, stream)(dst, NULL, ws, C);
  return cuda_launched("model_cuda colsum_add");
}

/* ---------------------------------------------------------------------------------------- */
/* Element-wise                                                                             */

__global__ void add_bias_kernel(float *out, const float *add, const float *bias, int N, int C) {
  size_t n = (size_t)N * C;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float a = add ? add[i] : 0.0f;
    out[i] = bias ? a + bias[i % C] : a;
  }
}

extern "C" tagc_status tagc_gpu_add_bias(float *out, const float *add, const float *bias, int N,
                                         int C, tagc_stream stream) {
  unsigned grid = blocks_for((size_t)N * C, 4 * THREADS);
  TAGC_LAUNCH(add_bias_kernel, grid, THREADS, stream)(out, add, bias, N, C);
  return cuda_launched("model_cuda add_bias");
}

__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float t = tanhf(GELU_K0 * (x + GELU_K1 * x * x * x));
    out[i] = 0.5f * x * (1.0f + t);
  }
}

__global__ void gelu_backward_kernel(float *d, const float *inp, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float t = tanhf(GELU_K0 * (x + GELU_K1 * x * x * x));
    float dt = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x) * (1.0f - t * t);
    d[i] *= 0.5f * (1.0f + t) + 0.5f * x * dt;
  }
}

extern "C" tagc_status tagc_gpu_gelu_forward(float *out, const float *inp, size_t n,
                                             tagc_stream stream) {
  TAGC_LAUNCH(gelu_forward_kernel, blocks_for(n, 4 * THREADS), THREADS, stream)(out, inp, n);
  return cuda_launched("model_cuda gelu_forward");
}

extern "C" tagc_status tagc_gpu_gelu_backward(float *d, const float *inp, size_t n,
                                              tagc_stream stream) {
  TAGC_LAUNCH(gelu_backward_kernel, blocks_for(n, 4 * THREADS), THREADS, stream)(d, inp, n);
  return cuda_launched("model_cuda gelu_backward");
}

__global__ void to_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = tagc_bf16_round(src[i]);
}

extern "C" tagc_status tagc_gpu_to_bf16(uint16_t *dst, const float *src, size_t n,
                                        tagc_stream stream) {
  TAGC_LAUNCH(to_bf16_kernel, blocks_for(n, 4 * THREADS), THREADS, stream)(dst, src, n);
  return cuda_launched("model_cuda to_bf16");
}

/* ---------------------------------------------------------------------------------------- */
/* Causal attention softmax                                                                 */

/* The rows are a chunk of the causal square: rows r0 .. r0 + n - 1 of each of BH matrices,
 * stored (BH, n, k) with k > r0 + n - 1 columns (the keys 0 .. k - 1); row i of a matrix is
 * query t = r0 + i, whose keys are 0 .. t. n = k = T, r0 = 0 is the whole square. */
__global__ void softmax_causal_forward_kernel(float *att, float *lse, int BH, int n, int k,
                                              int r0, int T) {
  int lane = LANE();
  size_t rows = (size_t)BH * n;
  for (size_t row = WARP_ID(); row < rows; row += WARP_COUNT()) {
    int t = r0 + (int)(row % n);
    float *s = att + row * k;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32)
      mx = fmaxf(mx, s[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) {
      float e = expf(s[j] - mx);
      s[j] = e;
      sum += e;
    }
    sum = warp_sum(sum);
    float inv = 1.0f / sum;
    for (int j = lane; j < k; j += 32)
      s[j] = j <= t ? s[j] * inv : 0.0f;
    if (lse && lane == 0)
      lse[row / n * T + t] = mx + logf(sum);
  }
}

__global__ void softmax_causal_recompute_kernel(float *att, const float *lse, int BH, int n,
                                                int k, int r0, int T) {
  int lane = LANE();
  size_t rows = (size_t)BH * n;
  for (size_t row = WARP_ID(); row < rows; row += WARP_COUNT()) {
    int t = r0 + (int)(row % n);
    float *s = att + row * k, L = lse[row / n * T + t];
    for (int j = lane; j < k; j += 32)
      s[j] = j <= t ? expf(s[j] - L) : 0.0f;
  }
}

__global__ void softmax_causal_backward_kernel(float *ds, const float *p, int BH, int n, int k,
                                               int r0, float scale) {
  int lane = LANE();
  size_t rows = (size_t)BH * n;
  for (size_t row = WARP_ID(); row < rows; row += WARP_COUNT()) {
    int t = r0 + (int)(row % n);
    float *d = ds + row * k;
    const float *pr = p + row * k;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32)
      dot += pr[j] * d[j];
    dot = warp_sum(dot);
    for (int j = lane; j < k; j += 32)
      d[j] = j <= t ? pr[j] * (d[j] - dot) * scale : 0.0f;
  }
}

static tagc_status chunk_ok(int BH, int n, int k, int r0, int T, const char *what) {
  if (BH < 1 || n < 1 || r0 < 0 || r0 + n > k || k > T)
    return tagc_errorf(TAGC_EINVAL, "model_cuda %s: rows %d..%d of %d matrices with %d of %d "
                       "columns: the chunk must lie within the causal square", what, r0,
                       r0 + n - 1, BH, k, T);
  return TAGC_OK;
}

extern "C" tagc_status tagc_gpu_softmax_causal_forward(float *att, float *lse, int BH, int n,
                                                       int k, int r0, int T,
                                                       tagc_stream stream) {
  TAGC_CHECK(chunk_ok(BH, n, k, r0, T, "softmax_causal_forward"));
  unsigned grid = blocks_for((size_t)BH * n, WARPS_PER_BLOCK);
  TAGC_LAUNCH(softmax_causal_forward_kernel, grid, THREADS, stream)(att, lse, BH, n, k, r0, T);
  return cuda_launched("model_cuda softmax_causal_forward");
}

extern "C" tagc_status tagc_gpu_softmax_causal_recompute(float *att, const float *lse, int BH,
                                                         int n, int k, int r0, int T,
                                                         tagc_stream stream) {
  TAGC_CHECK(chunk_ok(BH, n, k, r0, T, "softmax_causal_recompute"));
  unsigned grid = blocks_for((size_t)BH * n, WARPS_PER_BLOCK);
  TAGC_LAUNCH(softmax_causal_recompute_kernel, grid, THREADS, stream)(att, lse, BH, n, k, r0, T);
  return cuda_launched("model_cuda softmax_causal_recompute");
}

extern "C" tagc_status tagc_gpu_softmax_causal_backward(float *ds, const float *p, int BH, int n,
                                                        int k, int r0, int T, float scale,
                                                        tagc_stream stream) {
  TAGC_CHECK(chunk_ok(BH, n, k, r0, T, "softmax_causal_backward"));
  unsigned grid = blocks_for((size_t)BH * n, WARPS_PER_BLOCK);
  TAGC_LAUNCH(softmax_causal_backward_kernel, grid, THREADS, stream)(ds, p, BH, n, k, r0, scale);
  return cuda_launched("model_cuda softmax_causal_backward");
}

/* ---------------------------------------------------------------------------------------- */
/* Cross-entropy fused with the softmax                                                     */

__global__ void crossentropy_forward_kernel(float *losses, float *logits, const uint16_t *targets,
                                            int N, int V, int Vp) {
  int lane = LANE();
  for (size_t row = WARP_ID(); row < (size_t)N; row += WARP_COUNT()) {
    float *z = logits + row * Vp;
    float target_logit = z[targets[row]];
    float mx = -INFINITY;
    for (int j = lane; j < V; j += 32)
      mx = fmaxf(mx, z[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < V; j += 32) {
      float e = expf(z[j] - mx);
      z[j] = e;
      sum += e;
    }
    sum = warp_sum(sum);
    float inv = 1.0f / sum;
    for (int j = lane; j < V; j += 32)
      z[j] *= inv;
    for (int j = V + lane; j < Vp; j += 32) /* padding: never predicted, zero gradient */
      z[j] = 0.0f;
    if (lane == 0)
      losses[row] = logf(sum) + mx - target_logit;
  }
}

__global__ void crossentropy_backward_kernel(float *probs, const uint16_t *targets, int N, int V,
                                             float scale) {
  size_t n = (size_t)N * V;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t row = i / V;
    int j = (int)(i % V);
    float p = probs[i];
    probs[i] = (j == targets[row] ? p - 1.0f : p) * scale;
  }
}

extern "C" tagc_status tagc_gpu_crossentropy_forward(float *losses, float *logits,
                                                     const uint16_t *targets, int N, int V,
                                                     int Vp, tagc_stream stream) {
  TAGC_LAUNCH(crossentropy_forward_kernel, blocks_for(N, WARPS_PER_BLOCK), THREADS, stream)(
      losses, logits, targets, N, V, Vp);
  return cuda_launched("model_cuda crossentropy_forward");
}

extern "C" tagc_status tagc_gpu_crossentropy_backward(float *probs, const uint16_t *targets, int N,
                                                      int V, float scale, tagc_stream stream) {
  unsigned grid = blocks_for((size_t)N * V, 4 * THREADS);
  TAGC_LAUNCH(crossentropy_backward_kernel, grid, THREADS, stream)(probs, targets, N, V, scale);
  return cuda_launched("model_cuda crossentropy_backward");
}

/* One block of 1024 threads: thread k sums positions k, k + 1024, ... in double, then a
 * fixed tree over the threads. */
__global__ void sum_losses_kernel(double *out, const float *losses, int n) {
  __shared__ double part[1024];
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    s += (double)losses[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half >>= 1) {
    if ((int)threadIdx.x < half)
      part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    *out = part[0];
}

extern "C" tagc_status tagc_gpu_sum_losses(double *out, const float *losses, int n,
                                           tagc_stream stream) {
  TAGC_LAUNCH(sum_losses_kernel, 1, 1024, stream)(out, losses, n);
  return cuda_launched("model_cuda sum_losses");
}

/* ---------------------------------------------------------------------------------------- */
/* Embeddings                                                                               */

__global__ void encoder_forward_kernel(float *out, const uint16_t *tokens, const float *wte,
                                       const float *wpe, int B, int T, int C) {
  size_t n = (size_t)B * T * C;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t bt = i / C;
    int c = (int)(i % C), t = (int)(bt % T);
    out[i] = wte[(size_t)tokens[bt] * C + c] + wpe[(size_t)t * C + c];
  }
}

extern "C" tagc_status tagc_gpu_encoder_forward(float *out, const uint16_t *tokens,
                                                const float *wte, const float *wpe, int B, int T,
                                                int C, tagc_stream stream) {
  TAGC_LAUNCH(encoder_forward_kernel, blocks_for((size_t)B * T * C, 4 * THREADS), THREADS, stream)(
      out, tokens, wte, wpe, B, T, C);
  return cuda_launched("model_cuda encoder_forward");
}

/* The embedding backward by token buckets: the positions are sorted by token (a stable
 * counting sort: counts, one scan, a scatter, then each bucket put back in position order),
 * and one block per (distinct token, column tile) adds that token's dout rows into its dwte
 * row in position order, exactly as the CPU oracle does (bit-identical). Work O(BT * C + V),
 * not O(V * BT); no floating-point atomics. Workspace (int32): count[V], offset[V],
 * cursor[V], list[V] (the distinct tokens in order), nlist[1], sorted[BT], order[BT]. */
#define SCAN_THREADS 1024

__global__ void token_count_kernel(int *count, const uint16_t *tokens, int BT) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < BT)
    atomicAdd(&count[tokens[i]], 1);
}

/* One block: offset = exclusive scan of count, cursor = offset, list = the tokens with a
 * non-zero count in increasing order, nlist = their number. Each thread scans a contiguous
 * chunk; the chunk totals are scanned in shared memory. */
__global__ void token_scan_kernel(int *offset, int *cursor, int *list, int *nlist,
                                  const int *count, int V) {
  __shared__ int sums[SCAN_THREADS], nonzero[SCAN_THREADS];
  int per = (V + SCAN_THREADS - 1) / SCAN_THREADS, t = threadIdx.x;
  int lo = min(V, t * per), hi = min(V, lo + per);
  int s = 0, nz = 0;
  for (int v = lo; v < hi; v++) {
    s += count[v];
    nz += count[v] > 0;
  }
  sums[t] = s;
  nonzero[t] = nz;
  __syncthreads();
  for (int d = 1; d < SCAN_THREADS; d *= 2) { /* inclusive Hillis-Steele scan */
    int a = t >= d ? sums[t - d] : 0, b = t >= d ? nonzero[t - d] : 0;
    __syncthreads();
    sums[t] += a;
    nonzero[t] += b;
    __syncthreads();
  }
  int run = sums[t] - s, k = nonzero[t] - nz;
  for (int v = lo; v < hi; v++) {
    offset[v] = cursor[v] = run;
    run += count[v];
    if (count[v] > 0)
      list[k++] = v;
  }
  if (t == SCAN_THREADS - 1)
    *nlist = nonzero[t];
}

/* sorted[] gets each position in its token's bucket, in an arbitrary order within it. */
__global__ void token_scatter_kernel(int *sorted, int *cursor, const uint16_t *tokens, int BT) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < BT)
    sorted[atomicAdd(&cursor[tokens[i]], 1)] = i;
}

/* Block b: the bucket of the b-th distinct token back in position order (order[]): each
 * position's place is the number of smaller ones in its bucket (positions are distinct). */
__global__ void token_order_kernel(int *order, const int *sorted, const int *offset,
                                   const int *count, const int *list, const int *nlist) {
  if ((int)blockIdx.x >= *nlist)
    return;
  int v = list[blockIdx.x], base = offset[v], n = count[v];
  for (int k = threadIdx.x; k < n; k += blockDim.x) {
    int p = sorted[base + k], rank = 0;
    for (int j = 0; j < n; j++)
      rank += sorted[base + j] < p;
    order[base + rank] = p;
  }
}

/* Block (b, column tile): dwte row of the b-th distinct token += its dout rows in position
 * order, for the tile's columns. */
__global__ void wte_backward_kernel(float *dwte, const float *dout, const int *order,
                                    const int *offset, const int *count, const int *list,
                                    const int *nlist, int C) {
  if ((int)blockIdx.x >= *nlist)
    return;
  int v = list[blockIdx.x], c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C)
    return;
  const int *pos = order + offset[v];
  float acc = dwte[(size_t)v * C + c];
  for (int k = 0, n = count[v]; k < n; k++)
    acc = __fadd_rn(acc, dout[(size_t)pos[k] * C + c]);
  dwte[(size_t)v * C + c] = acc;
}

extern "C" size_t tagc_gpu_encoder_backward_workspace_bytes(int BT, int V) {
  return ((size_t)4 * V + 1 + (size_t)2 * BT) * sizeof(int);
}

__global__ void wpe_backward_kernel(float *dwpe, const float *dout, int B, int T, int C) {
  size_t n = (size_t)T * C;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float acc = 0.0f;
    for (int b = 0; b < B; b++)
      acc += dout[(size_t)b * n + i];
    dwpe[i] += acc;
  }
}

extern "C" tagc_status tagc_gpu_encoder_backward(float *dwte, float *dwpe, const float *dout,
                                                 const uint16_t *tokens, int B, int T, int V,
                                                 int C, void *ws, tagc_stream stream) {
  int BT = B * T;
  int *count = (int *)ws, *offset = count + V, *cursor = offset + V, *list = cursor + V;
  int *nlist = list + V, *sorted = nlist + 1, *order = sorted + BT;
  TAGC_CHECK(tagc_cuda_status(cudaMemsetAsync(count, 0, (size_t)V * sizeof(int), stream),
                              "model_cuda encoder_backward: clear the token counts"));
  unsigned pos_grid = blocks_for((size_t)BT, THREADS);
  TAGC_LAUNCH(token_count_kernel, pos_grid, THREADS, stream)(count, tokens, BT);
  TAGC_LAUNCH(token_scan_kernel, 1, SCAN_THREADS, stream)(offset, cursor, list, nlist, count, V);
  TAGC_LAUNCH(token_scatter_kernel, pos_grid, THREADS, stream)(sorted, cursor, tokens, BT);
  unsigned buckets = (unsigned)(BT < V ? BT : V); /* at most this many distinct tokens */
  TAGC_LAUNCH(token_order_kernel, buckets, 128, stream)(order, sorted, offset, count, list, nlist);
  dim3 grid(buckets, (C + 127) / 128);
  TAGC_LAUNCH(wte_backward_kernel, grid, 128, stream)(dwte, dout, order, offset, count, list,
                                                      nlist, C);
  unsigned wpe_grid = blocks_for((size_t)T * C, 4 * THREADS);
  TAGC_LAUNCH(wpe_backward_kernel, wpe_grid, THREADS, stream)(dwpe, dout, B, T, C);
  return cuda_launched("model_cuda encoder_backward");
}
