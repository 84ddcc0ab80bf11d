/* The CUDA implementation of tagc_device (engine/device.h): two streams (the lanes), one
 * lazily created event per mark, cudaMalloc'd buffers, and the CUDA model, AdamW and sum of
 * squares of model/model_cuda.h and model/adamw_cuda.h on the compute stream. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_common.cuh" /* TAGC_LAUNCH (the host emulation replaces it) */
#include "model/adamw_cuda.h"
#include "engine/device_internal.h"
#include "model/model_cuda.h"

typedef struct cuda_dev {
  int index;
  tagc_compute_dtype dtype;
  cudaStream_t lane[2];
  cudaStream_t zeroing;                /* new allocations are zeroed here: no wait on the lanes */
  cudaEvent_t mark[TAGC_DEVICE_MARKS]; /* created on first record */
  void *sumsq_ws;                      /* tagc_sumsq_cuda_workspace_bytes() */
  double *sums;                        /* device doubles for sumsq_many */
  int sums_cap;
  int *nonfinite;                      /* AdamW's flag (the engine checks the norm first) */
} cuda_dev;

/* Returns from the caller when a CUDA call fails: "cuda: <what>: <CUDA's message>", translated
 * by common/cuda_status.h (out of device memory is TAGC_ENOMEM). */
#define CUDA_TRY(call, what) TAGC_CHECK(tagc_cuda_status((call), "cuda: %s", what))

/* The current device is per host thread; lanes are used from two threads. */
static cuda_dev *use(void *impl) {
  cuda_dev *c = (cuda_dev *)impl;
  cudaSetDevice(c->index);
  return c;
}

/* Dense peak (TFLOP/s) of the precision in use, from NVIDIA's data sheets (SXM parts, no
 * sparsity; fp32 without TF32, as the fp32 model runs); 0 when the part is not listed. */
static double peak_tflops(const char *name, tagc_compute_dtype dtype) {
  static const struct { const char *part; double bf16, fp32; } table[] = {
      {"H200", 989.0, 67.0}, {"H100", 989.0, 67.0}, {"A100", 312.0, 19.5}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strstr(name, table[i].part))
      return dtype == TAGC_COMPUTE_BF16 ? table[i].bf16 : table[i].fp32;
  return 0;
}

static void cuda_close(void *impl) {
  if (!impl)
    return;
  cuda_dev *c = use(impl);
  cudaStream_t streams[3] = {c->lane[0], c->lane[1], c->zeroing};
  for (int l = 0; l < 3; l++)
    if (streams[l]) {
      cudaStreamSynchronize(streams[l]);
      cudaStreamDestroy(streams[l]);
    }
  for (int i = 0; i < TAGC_DEVICE_MARKS; i++)
    if (c->mark[i])
      cudaEventDestroy(c->mark[i]);
  cudaFree(c->sumsq_ws);
  cudaFree(c->sums);
  cudaFree(c->nonfinite);
  free(c);
}

static tagc_status cuda_open(int index, tagc_device_compute compute, void **impl,
                             tagc_device_info *info) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    return tagc_errorf(TAGC_EUNSUPPORTED, "device cuda:%d: no CUDA device visible (%s)", index,
                       err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
  if (index >= count)
    return tagc_errorf(TAGC_EINVAL, "device cuda:%d: only %d CUDA device(s) visible", index, count);
  cuda_dev *c = (cuda_dev *)calloc(1, sizeof *c);
  if (!c)
    return tagc_errorf(TAGC_ENOMEM, "cuda device state");
  c->index = index;
  c->dtype = compute == TAGC_DEVICE_BF16 ? TAGC_COMPUTE_BF16 : TAGC_COMPUTE_FP32;
  *impl = c;
  cudaDeviceProp prop;
  tagc_status st = TAGC_OK;
  if ((err = cudaSetDevice(index)) != cudaSuccess ||
      (err = cudaGetDeviceProperties(&prop, index)) != cudaSuccess ||
      (err = cudaStreamCreateWithFlags(&c->lane[0], cudaStreamNonBlocking)) != cudaSuccess ||
      (err = cudaStreamCreateWithFlags(&c->lane[1], cudaStreamNonBlocking)) != cudaSuccess ||
      (err = cudaStreamCreateWithFlags(&c->zeroing, cudaStreamNonBlocking)) != cudaSuccess ||
      (err = cudaMalloc(&c->sumsq_ws, tagc_sumsq_cuda_workspace_bytes())) != cudaSuccess ||
      (err = cudaMalloc((void **)&c->nonfinite, sizeof(int))) != cudaSuccess)
    st = tagc_cuda_status(err, "cuda: device set-up");
  if (st != TAGC_OK) {
    cuda_close(c);
    *impl = NULL;
    return st;
  }
  snprintf(info->kind, sizeof info->kind, "cuda");
  info->index = index;
  snprintf(info->name, sizeof info->name, "%s", prop.name);
  info->total_bytes = prop.totalGlobalMem;
  info->peak_tflops = peak_tflops(prop.name, c->dtype);
  return TAGC_OK;
}

static tagc_stream cuda_stream(void *impl, tagc_lane lane) {
  return ((cuda_dev *)impl)->lane[lane];
}

static tagc_status cuda_alloc(void *impl, size_t bytes, void **out) {
  cuda_dev *c = use(impl);
  void *p = NULL;
  cudaError_t err = cudaMalloc(&p, bytes ? bytes : 256);
  if (err != cudaSuccess)
    return tagc_cuda_status(err, "cuda: allocation of %zu bytes", bytes);
  err = cudaMemsetAsync(p, 0, bytes ? bytes : 256, c->zeroing);
  if (err == cudaSuccess)
    err = cudaStreamSynchronize(c->zeroing);
  if (err != cudaSuccess) {
    cudaFree(p);
    return tagc_cuda_status(err, "cuda: zeroing a new allocation");
  }
  *out = p;
  return TAGC_OK;
}

static void cuda_free(void *impl, void *p) {
  use(impl);
  cudaFree(p); /* synchronises the device */
}

static tagc_status cuda_copy(void *impl, tagc_lane lane, void *dst, const void *src, size_t bytes,
                             tagc_copy_kind kind) {
  cuda_dev *c = use(impl);
  static const cudaMemcpyKind kinds[] = {cudaMemcpyDeviceToDevice, cudaMemcpyHostToDevice,
                                         cudaMemcpyDeviceToHost};
  CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kinds[kind], c->lane[lane]), "copy");
  if (kind != TAGC_COPY_D2D) /* the host side is free (H2D) or filled (D2H) on return */
    CUDA_TRY(cudaStreamSynchronize(c->lane[lane]), "copy");
  return TAGC_OK;
}

static tagc_status cuda_zero(void *impl, tagc_lane lane, void *p, size_t bytes) {
  cuda_dev *c = use(impl);
  CUDA_TRY(cudaMemsetAsync(p, 0, bytes, c->lane[lane]), "memset");
  return TAGC_OK;
}

__global__ void add_kernel(float *dst, const float *src, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] += src[i];
}

static tagc_status cuda_add(void *impl, tagc_lane lane, float *dst, const float *src, size_t n) {
  cuda_dev *c = use(impl);
  size_t g = (n + CUDA_THREADS - 1) / CUDA_THREADS;
  TAGC_LAUNCH(add_kernel, (unsigned)(g < CUDA_MAX_GRID ? g : CUDA_MAX_GRID), CUDA_THREADS,
              c->lane[lane])
  (dst, src, n);
  return cuda_launched("device add");
}

static tagc_status cuda_sync(void *impl, tagc_lane lane) {
  cuda_dev *c = use(impl);
  CUDA_TRY(cudaStreamSynchronize(c->lane[lane]), "stream synchronise");
  return TAGC_OK;
}

static tagc_status cuda_mark(void *impl, tagc_lane lane, int id) {
  cuda_dev *c = use(impl);
  if (!c->mark[id])
    CUDA_TRY(cudaEventCreateWithFlags(&c->mark[id], cudaEventDisableTiming), "event create");
  CUDA_TRY(cudaEventRecord(c->mark[id], c->lane[lane]), "event record");
  return TAGC_OK;
}

static tagc_status cuda_wait_mark(void *impl, int id) {
  cuda_dev *c = use(impl);
  if (c->mark[id])
    CUDA_TRY(cudaEventSynchronize(c->mark[id]), "event synchronise");
  return TAGC_OK;
}

static tagc_status cuda_model_new(void *impl, const tagc_model_layout *layout, int max_batch,
                                  void **model, size_t *bytes) {
  cuda_dev *c = use(impl);
  tagc_model_cuda *m;
  TAGC_CHECK(tagc_model_cuda_create(layout, max_batch, c->index, c->dtype,
                                    c->lane[TAGC_LANE_COMPUTE], &m));
  *bytes = tagc_model_cuda_bytes(m);
  *model = m;
  return TAGC_OK;
}

static void cuda_model_free(void *model) { tagc_model_cuda_destroy((tagc_model_cuda *)model); }

static tagc_status cuda_forward(void *model, const tagc_model_layout *layout,
                                tagc_unit_hooks *hooks, const uint16_t *tokens,
                                const uint16_t *targets, int B, double *loss_sum) {
  (void)layout;
  return tagc_model_cuda_forward((tagc_model_cuda *)model, hooks, tokens, targets, B, loss_sum);
}

static tagc_status cuda_backward(void *model, const tagc_model_layout *layout,
                                 tagc_unit_hooks *hooks, float loss_scale) {
  (void)layout;
  return tagc_model_cuda_backward((tagc_model_cuda *)model, hooks, loss_scale);
}

static tagc_status cuda_sumsq_many(void *impl, const float *const *x, const size_t *n, int count,
                                   double *out) {
  cuda_dev *c = use(impl);
  cudaStream_t s = c->lane[TAGC_LANE_COMPUTE];
  if (count > c->sums_cap) {
    CUDA_TRY(cudaStreamSynchronize(s), "sum of squares");
    cudaFree(c->sums);
    c->sums = NULL;
    c->sums_cap = 0;
    CUDA_TRY(cudaMalloc((void **)&c->sums, (size_t)count * sizeof(double)), "sum of squares buffer");
    c->sums_cap = count;
  }
  TAGC_CHECK(tagc_sumsq_many_cuda(x, n, count, c->sums, c->sumsq_ws, s));
  CUDA_TRY(cudaMemcpyAsync(out, c->sums, (size_t)count * sizeof(double), cudaMemcpyDeviceToHost, s),
           "sum of squares copy");
  CUDA_TRY(cudaStreamSynchronize(s), "sum of squares");
  return TAGC_OK;
}

static tagc_status cuda_adamw(void *impl, const tagc_model_layout *layout,
                              const tagc_adamw_segment *segs, int count,
                              const tagc_adamw_config *cfg, int64_t step, float lr,
                              float grad_scale) {
  cuda_dev *c = use(impl);
  return tagc_adamw_many_cuda(layout, segs, count, cfg, step, lr, grad_scale, c->nonfinite,
                              c->lane[TAGC_LANE_COMPUTE]);
}

/* Page-locked host memory: device copies to and from it are DMA at the bus's speed (pageable
 * memory goes through a driver bounce buffer). */
static tagc_status cuda_host_alloc(void *impl, size_t bytes, void **out) {
  use(impl);
  cudaError_t err = cudaMallocHost(out, bytes ? bytes : 1);
  if (err != cudaSuccess) {
    *out = NULL;
    return tagc_cuda_status(err, "cuda: page-locked host allocation of %zu bytes", bytes);
  }
  return TAGC_OK;
}

static void cuda_host_free(void *impl, void *p) {
  use(impl);
  cudaFreeHost(p);
}

extern "C" const tagc_device_ops tagc_device_cuda_ops = {
    cuda_open,   cuda_close,     cuda_stream,     cuda_alloc,    cuda_free,
    cuda_copy,   cuda_zero,      cuda_add,        cuda_sync,     cuda_mark,
    cuda_wait_mark, cuda_model_new, cuda_model_free, cuda_forward, cuda_backward,
    cuda_sumsq_many, cuda_adamw, cuda_host_alloc, cuda_host_free};
