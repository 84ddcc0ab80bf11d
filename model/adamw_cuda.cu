/* AdamW and the sum of squares on the device (see adamw_cuda.h). The update is the
 * element-wise formula of model/adamw.c with the per-step constants computed the same way
 * on the host; a launch takes up to TAGC_ADAMW_MANY_MAX runs of consecutive tensors with the
 * same `decay` flag, each block a fixed chunk of one run. */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "kernels/cuda_common.cuh" /* TAGC_LAUNCH (the host emulation replaces it) */
#include "model/adamw_cuda.h"

#define THREADS 256
/* First pass of the sum of squares: this many blocks, each over a fixed contiguous range. */
#define SUMSQ_BLOCKS 1024

/* Block tree sum of v over THREADS threads (fixed order); result in thread 0. */
__device__ double block_sum(double v) {
  __shared__ double part[THREADS];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int half = THREADS / 2; half > 0; half >>= 1) {
    if ((int)threadIdx.x < half)
      part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  return part[0];
}

/* The segments of one launch (a kernel parameter of 2 KiB). */
typedef struct sumsq_list {
  const float *x[TAGC_SUMSQ_MANY_MAX];
  size_t n[TAGC_SUMSQ_MANY_MAX];
} sumsq_list;

/* Block (b, s): the b-th of SUMSQ_BLOCKS fixed contiguous ranges of segment s. */
__global__ void sumsq_blocks_kernel(double *partial, sumsq_list l) {
  const float *x = l.x[blockIdx.y];
  size_t n = l.n[blockIdx.y];
  size_t lo = n * blockIdx.x / SUMSQ_BLOCKS, hi = n * (blockIdx.x + 1) / SUMSQ_BLOCKS;
  double s = 0.0;
  for (size_t i = lo + threadIdx.x; i < hi; i += THREADS)
    s += (double)x[i] * (double)x[i];
  double total = block_sum(s);
  if (threadIdx.x == 0)
    partial[(size_t)blockIdx.y * SUMSQ_BLOCKS + blockIdx.x] = total;
}

/* Block s: segment s's block sums added in order. */
__global__ void sumsq_finish_kernel(double *out, const double *partial) {
  const double *p = partial + (size_t)blockIdx.x * SUMSQ_BLOCKS;
  double s = 0.0;
  for (int i = threadIdx.x; i < SUMSQ_BLOCKS; i += THREADS)
    s += p[i];
  double total = block_sum(s);
  if (threadIdx.x == 0)
    out[blockIdx.x] = total;
}

extern "C" size_t tagc_sumsq_cuda_workspace_bytes(void) {
  return (size_t)TAGC_SUMSQ_MANY_MAX * SUMSQ_BLOCKS * sizeof(double);
}

extern "C" tagc_status tagc_sumsq_many_cuda(const float *const *x, const size_t *n, int count,
                                            double *out_dev, void *workspace,
                                            tagc_stream stream) {
  if (count < 0 || (count > 0 && (!x || !n)) || !out_dev || !workspace)
    return tagc_errorf(TAGC_EINVAL, "adamw_cuda: sumsq: NULL pointer or count %d", count);
  for (int i = 0; i < count; i++)
    if (n[i] > 0 && !x[i])
      return tagc_errorf(TAGC_EINVAL, "adamw_cuda: sumsq: segment %d is NULL", i);
  for (int first = 0; first < count; first += TAGC_SUMSQ_MANY_MAX) {
    int k = count - first < TAGC_SUMSQ_MANY_MAX ? count - first : TAGC_SUMSQ_MANY_MAX;
    sumsq_list l;
    memset(&l, 0, sizeof l);
    for (int i = 0; i < k; i++) {
      l.x[i] = x[first + i];
      l.n[i] = n[first + i];
    }
    TAGC_LAUNCH(sumsq_blocks_kernel, dim3(SUMSQ_BLOCKS, k), THREADS, stream)((double *)workspace, l);
    TAGC_LAUNCH(sumsq_finish_kernel, k, THREADS, stream)(out_dev + first,
                                                          (const double *)workspace);
    TAGC_CHECK(cuda_launched("adamw_cuda sumsq"));
  }
  return TAGC_OK;
}

extern "C" tagc_status tagc_sumsq_cuda(const float *x, size_t n, double *out_dev, void *workspace,
                                       tagc_stream stream) {
  if ((n > 0 && !x) || !out_dev || !workspace)
    return tagc_errorf(TAGC_EINVAL, "adamw_cuda: sumsq: NULL pointer");
  return tagc_sumsq_many_cuda(&x, &n, 1, out_dev, workspace, stream);
}

/* Per-step constants (as in adamw.c). */
typedef struct adamw_step {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float neg_step_size, bc2_sqrt, eps, decay_mul, grad_scale;
} adamw_step;

/* Elements each block of the multi-range kernels takes (a fixed chunk of one run). */
#define ADAMW_CHUNK (8 * THREADS)

/* The runs of one launch (a kernel parameter of under 3 KiB): run r is n[r] elements at
 * p[r], g[r], m[r], v[r]; its chunks are blocks first_block[r] .. first_block[r + 1] - 1. */
typedef struct adamw_list {
  float *p[TAGC_ADAMW_MANY_MAX];
  const float *g[TAGC_ADAMW_MANY_MAX];
  float *m[TAGC_ADAMW_MANY_MAX], *v[TAGC_ADAMW_MANY_MAX];
  size_t n[TAGC_ADAMW_MANY_MAX];
  unsigned first_block[TAGC_ADAMW_MANY_MAX + 1];
  unsigned char decay[TAGC_ADAMW_MANY_MAX];
  int count;
} adamw_list;

/* The run this block's chunk belongs to (the last r with first_block[r] <= blockIdx.x), and
 * the chunk's element range [*lo, *hi) in it. */
__device__ int chunk_of(const adamw_list *l, size_t *lo, size_t *hi) {
  int a = 0, b = l->count - 1;
  while (a < b) {
    int mid = (a + b + 1) / 2;
    if (l->first_block[mid] <= blockIdx.x)
      a = mid;
    else
      b = mid - 1;
  }
  *lo = (size_t)(blockIdx.x - l->first_block[a]) * ADAMW_CHUNK;
  *hi = *lo + ADAMW_CHUNK < l->n[a] ? *lo + ADAMW_CHUNK : l->n[a];
  return a;
}

__global__ void nonfinite_kernel(int *flag, adamw_list l) {
  size_t lo, hi;
  int r = chunk_of(&l, &lo, &hi);
  const float *g = l.g[r];
  for (size_t i = lo + threadIdx.x; i < hi; i += THREADS)
    if (!isfinite(g[i]))
      *flag = 1; /* every writer stores the same value */
}

__global__ void adamw_kernel(adamw_step s, adamw_list l, const int *flag) {
  if (*flag)
    return;
  size_t lo, hi;
  int r = chunk_of(&l, &lo, &hi);
  float *p = l.p[r], *m = l.m[r], *v = l.v[r];
  const float *grads = l.g[r];
  int decay = l.decay[r];
  for (size_t i = lo + threadIdx.x; i < hi; i += THREADS) {
    float g = __fmul_rn(grads[i], s.grad_scale);
    float pi = decay ? __fmul_rn(p[i], s.decay_mul) : p[i];
    float mi = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(g, s.one_minus_beta1));
    float vi = __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    p[i] = __fadd_rn(pi, __fmul_rn(s.neg_step_size, __fdiv_rn(mi, denom)));
    m[i] = mi;
    v[i] = vi;
  }
}

/* Launches the check (`check`) or the update over the runs gathered in l. */
static tagc_status flush(adamw_list *l, size_t blocks, int check, const adamw_step *s, int *flag,
                         tagc_stream stream) {
  if (l->count == 0)
    return TAGC_OK;
  l->first_block[l->count] = (unsigned)blocks;
  if (check)
    TAGC_LAUNCH(nonfinite_kernel, (unsigned)blocks, THREADS, stream)(flag, *l);
  else
    TAGC_LAUNCH(adamw_kernel, (unsigned)blocks, THREADS, stream)(*s, *l, flag);
  TAGC_CHECK(cuda_launched(check ? "adamw_cuda nonfinite check" : "adamw_cuda update"));
  l->count = 0;
  return TAGC_OK;
}

/* The ranges as runs of one decay flag (a range split where its tensors' flag changes), in
 * launches of at most TAGC_ADAMW_MANY_MAX runs. */
static tagc_status launch_runs(const tagc_model_layout *layout, const tagc_adamw_segment *segs,
                               int count, int check, const adamw_step *s, int *flag,
                               tagc_stream stream) {
  adamw_list l;
  memset(&l, 0, sizeof l);
  size_t blocks = 0;
  for (int i = 0; i < count; i++) {
    const tagc_adamw_segment *sg = &segs[i];
    size_t hi = sg->arena_lo + sg->n, run_lo = sg->arena_lo;
    for (int t = 0; t < layout->n_tensors && run_lo < hi; t++) {
      const tagc_tensor_info *ti = &layout->tensors[t];
      size_t end = ti->offset + ti->numel < hi ? ti->offset + ti->numel : hi;
      if (end <= run_lo)
        continue;
      if (!(t + 1 == layout->n_tensors || end == hi || layout->tensors[t + 1].decay != ti->decay))
        continue;
      size_t k = run_lo - sg->arena_lo, len = end - run_lo;
      size_t nb = (len + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
      if (l.count == TAGC_ADAMW_MANY_MAX || blocks + nb > (size_t)INT32_MAX) {
        TAGC_CHECK(flush(&l, blocks, check, s, flag, stream));
        blocks = 0;
      }
      int r = l.count++;
      l.p[r] = sg->params + k;
      l.g[r] = sg->grads + k;
      l.m[r] = sg->m + k;
      l.v[r] = sg->v + k;
      l.n[r] = len;
      l.decay[r] = (unsigned char)(ti->decay != 0);
      l.first_block[r] = (unsigned)blocks;
      blocks += nb;
      run_lo = end;
    }
  }
  return flush(&l, blocks, check, s, flag, stream);
}

extern "C" tagc_status tagc_adamw_many_cuda(const tagc_model_layout *layout,
                                            const tagc_adamw_segment *segs, int count,
                                            const tagc_adamw_config *cfg, int64_t step, float lr,
                                            float grad_scale, int *nonfinite_dev,
                                            tagc_stream stream) {
  if (count < 0 || (count > 0 && !segs) || !nonfinite_dev)
    return tagc_errorf(TAGC_EINVAL, "adamw_cuda: NULL pointer or count %d", count);
  for (int i = 0; i < count; i++) {
    const tagc_adamw_segment *sg = &segs[i];
    if (sg->arena_lo > layout->n_params || sg->n > layout->n_params - sg->arena_lo)
      return tagc_errorf(TAGC_EINVAL, "adamw_cuda: range [%zu, %zu) outside the arena of %zu "
                         "floats", sg->arena_lo, sg->arena_lo + sg->n, layout->n_params);
    if (sg->n > 0 && (!sg->params || !sg->grads || !sg->m || !sg->v))
      return tagc_errorf(TAGC_EINVAL, "adamw_cuda: NULL pointer in range %d", i);
  }
  if (step < 1)
    return tagc_errorf(TAGC_EINVAL, "adamw_cuda: step must be >= 1 (got %lld)", (long long)step);
  if (!isfinite(grad_scale) || !isfinite(lr))
    return tagc_errorf(TAGC_ENUMERIC, "adamw_cuda: lr %g or grad_scale %g is not finite", lr,
                       grad_scale);
  TAGC_CHECK(tagc_cuda_status(cudaMemsetAsync(nonfinite_dev, 0, sizeof(int), stream),
                              "adamw_cuda: clearing the flag"));
  double b1 = cfg->beta1, b2 = cfg->beta2;
  adamw_step s = {
      cfg->beta1,
      (float)(1.0 - b1),
      cfg->beta2,
      (float)(1.0 - b2),
      (float)(-(double)lr / (1.0 - pow(b1, (double)step))),
      (float)sqrt(1.0 - pow(b2, (double)step)),
      cfg->eps,
      (float)(1.0 - (double)lr * (double)cfg->weight_decay),
      grad_scale,
  };
  /* every check before any update: a non-finite gradient anywhere leaves every range as is */
  TAGC_CHECK(launch_runs(layout, segs, count, 1, &s, nonfinite_dev, stream));
  return launch_runs(layout, segs, count, 0, &s, nonfinite_dev, stream);
}

extern "C" tagc_status tagc_adamw_update_range_cuda(const tagc_model_layout *layout,
                                                    size_t arena_lo, size_t n, float *params,
                                                    const float *grads, float *m, float *v,
                                                    const tagc_adamw_config *cfg, int64_t step,
                                                    float lr, float grad_scale,
                                                    int *nonfinite_dev, tagc_stream stream) {
  tagc_adamw_segment seg = {arena_lo, n, params, grads, m, v};
  return tagc_adamw_many_cuda(layout, &seg, 1, cfg, step, lr, grad_scale, nonfinite_dev, stream);
}
