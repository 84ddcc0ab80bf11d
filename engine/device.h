/* Where the sharded engine computes: the host CPU (the oracle) or one CUDA device.
 *
 * The engine (engine/engine.c) has one code path; every buffer it keeps between steps (shards,
 * moments, residuals, the gradient arena, gathered unit parameters, compression scratch) is
 * "device memory" of a tagc_device: host memory for the CPU, cudaMalloc'd memory for CUDA.
 * It moves and combines them only through these functions, and runs the model, AdamW and
 * the compression kernels through them.
 *
 * Lanes. Work is ordered per lane: TAGC_LANE_COMPUTE (forward, backward, optimizer) and
 * TAGC_LANE_COMM (the communication thread's compression kernels and copies). On CUDA each
 * lane is a CUDA stream owned by the device and calls only enqueue, except those documented
 * as synchronising; on the CPU every call completes before it returns and lanes are only
 * labels. Marks order the lanes: tagc_device_mark(lane, id) records mark `id` after the work
 * enqueued so far on `lane`; tagc_device_wait_mark(id) blocks the calling host thread until
 * that work completed (the communication thread uses it before it hands a unit's gradient or
 * a reused parameter buffer to NCCL, so the compute thread never waits on the hot path).
 *
 * Errors: TAGC_ENOMEM when a device allocation fails (cudaErrorMemoryAllocation: the worker's
 * OOM path), TAGC_EINTERNAL for other CUDA failures (the detail names the call), TAGC_EINVAL
 * for bad arguments, TAGC_EUNSUPPORTED for CUDA in a build without it.
 *
 * Threading: one device is shared by the compute thread and the communication thread; each
 * lane is used by one thread at a time (the lane's owner), allocation and accounting are
 * thread-safe. */
#ifndef TAGC_WORKER_DEVICE_H
#define TAGC_WORKER_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "common/status.h"
#include "kernels/tagc_kernels.h"
#include "model/adamw.h"
#include "model/model.h"

typedef struct tagc_device tagc_device;

typedef enum tagc_lane { TAGC_LANE_COMPUTE = 0, TAGC_LANE_COMM = 1 } tagc_lane;

typedef enum tagc_copy_kind {
  TAGC_COPY_D2D = 0, /* device to device, enqueued on the lane */
  TAGC_COPY_H2D = 1, /* host to device; returns once the host buffer may be reused */
  TAGC_COPY_D2H = 2  /* device to host; synchronises the lane (the data is there on return) */
} tagc_copy_kind;

/* Precision of the model's matrix products on CUDA (the CPU computes in fp32). */
typedef enum tagc_device_compute { TAGC_DEVICE_FP32 = 0, TAGC_DEVICE_BF16 = 1 } tagc_device_compute;

/* What a device is, for logs and summary.json. */
typedef struct tagc_device_info {
  char kind[8];        /* "cpu" or "cuda" */
  int index;           /* CUDA device index; -1 for the CPU */
  char name[256];      /* GPU name, or the CPU model name */
  uint64_t total_bytes; /* device memory (CUDA); 0 for the CPU */
  double peak_tflops;  /* dense peak of the configured compute precision when known, else 0 */
} tagc_device_info;

/* Checks a device spec without opening it: *index is the CUDA device index, -1 for the CPU.
 * TAGC_EINVAL for a malformed spec, TAGC_EUNSUPPORTED for CUDA in a build without it. */
tagc_status tagc_device_parse(const char *spec, int *index);

/* Opens the CPU (spec "cpu") or a CUDA device ("cuda" = device 0, "cuda:N") with its two
 * lanes. Errors: TAGC_EINVAL for another spec or a device index out of range,
 * TAGC_EUNSUPPORTED for CUDA without CUDA support or without a visible GPU (one line saying
 * which), TAGC_EINTERNAL for a CUDA failure. */
tagc_status tagc_device_open(const char *spec, tagc_device_compute compute, tagc_device **out);

/* Waits for both lanes and frees the device's own resources. Buffers must be freed before.
 * NULL is fine. */
void tagc_device_close(tagc_device *d);

int tagc_device_is_cuda(const tagc_device *d);
void tagc_device_get_info(const tagc_device *d, tagc_device_info *info);

/* Kernel dispatch context of a lane (see kernels/tagc_kernels.h): ws and block_rows must be
 * device memory of d (block_rows: unused on the CPU). */
tagc_kernel_ctx tagc_device_kernel_ctx(const tagc_device *d, tagc_lane lane,
                                       const uint32_t *block_rows, void *ws, size_t ws_bytes);

/* ---- memory ---- */

/* *out = `bytes` of zeroed device memory (at least 256-byte aligned). TAGC_ENOMEM with the
 * size in the detail. bytes == 0 gives a valid unique pointer. Blocking. */
tagc_status tagc_device_alloc(tagc_device *d, size_t bytes, void **out);

/* Frees a pointer from tagc_device_alloc (NULL is fine). Waits for pending work first. */
void tagc_device_free(tagc_device *d, void *p);

/* *out = `bytes` of host memory for transfers with the device, not zeroed and not in the
 * accounting below: page-locked (cudaMallocHost) on CUDA, so that copies to and from it are
 * DMA at the bus's speed; plain memory on the CPU. TAGC_ENOMEM (CUDA: its status) with the
 * size. Freed with tagc_device_host_free (NULL is fine) before the device is closed. */
tagc_status tagc_device_host_alloc(tagc_device *d, size_t bytes, void **out);
void tagc_device_host_free(tagc_device *d, void *p);

/* Bytes currently allocated through this device, and the peak since open. */
void tagc_device_usage(const tagc_device *d, uint64_t *current, uint64_t *peak);

/* Copies `bytes` on `lane` (see tagc_copy_kind for which side each pointer is on). */
tagc_status tagc_device_copy(tagc_device *d, tagc_lane lane, void *dst, const void *src,
                             size_t bytes, tagc_copy_kind kind);

/* Collective over comm: all-gathers `bytes` of host memory from every rank into recv (host,
 * world * bytes, rank order), through device memory as the communicator needs: `scratch` is
 * at least (world + 1) * bytes of device memory, or NULL to allocate it for the call. Runs on
 * the compute lane; blocks. Errors: the copies' and the all-gather's (TAGC_ETIMEDOUT,
 * TAGC_EPEER, TAGC_EABORTED), TAGC_ENOMEM. */
tagc_status tagc_device_allgather_host(tagc_device *d, tagc_comm *comm, const void *send, void *recv,
                                       size_t bytes, void *scratch, double timeout_s);

/* Zeroes `bytes` of device memory on `lane`. */
tagc_status tagc_device_zero(tagc_device *d, tagc_lane lane, void *p, size_t bytes);

/* dst[i] += src[i] for i < n (fp32, device memory), on `lane`. */
tagc_status tagc_device_add(tagc_device *d, tagc_lane lane, float *dst, const float *src,
                            size_t n);

/* ---- ordering ---- */

/* Waits until everything enqueued on `lane` completed. */
tagc_status tagc_device_sync(tagc_device *d, tagc_lane lane);

/* Records mark `id` (0 <= id < TAGC_DEVICE_MARKS) after the work enqueued so far on lane. */
#define TAGC_DEVICE_MARKS 4096
tagc_status tagc_device_mark(tagc_device *d, tagc_lane lane, int id);

/* Blocks the calling thread until the work before the latest record of mark `id` completed
 * (at once if the mark was never recorded). */
tagc_status tagc_device_wait_mark(tagc_device *d, int id);

/* ---- model and optimizer on the compute lane ---- */

typedef struct tagc_device_model tagc_device_model;

/* Activations and scratch for micro-batches of up to max_batch sequences. ENOMEM names the
 * bytes. */
tagc_status tagc_device_model_new(tagc_device *d, const tagc_model_layout *layout, int max_batch,
                                  tagc_device_model **out);
void tagc_device_model_free(tagc_device_model *m); /* NULL is fine */

/* Bytes the model context holds on the device (activations, scratch). */
size_t tagc_device_model_bytes(const tagc_device_model *m);

/* tagc_model_forward / tagc_model_backward (CPU) or their CUDA twins; hooks return device
 * pointers; tokens and targets are host arrays. On CUDA unit_release and unit_backward_done
 * mean the unit's work is enqueued (record a mark to order other lanes after it). */
tagc_status tagc_device_model_forward(tagc_device_model *m, tagc_unit_hooks *hooks,
                                      const uint16_t *tokens, const uint16_t *targets, int B,
                                      double *loss_sum);
tagc_status tagc_device_model_backward(tagc_device_model *m, tagc_unit_hooks *hooks,
                                       float loss_scale);

/* out[i] = sum of x[i][k]^2 (in double), for count device arrays, on the compute lane; the
 * values are on the host on return (synchronises once). Deterministic. */
tagc_status tagc_device_sumsq_many(tagc_device *d, const float *const *x, const size_t *n,
                                   int count, double *out);

/* tagc_adamw_update_range on `count` device shard ranges, on the compute lane (on CUDA a
 * few launches for all of them: tagc_adamw_many_cuda). A non-finite gradient is the
 * caller's to rule out first (the engine checks the global norm). */
tagc_status tagc_device_adamw(tagc_device *d, const tagc_model_layout *layout,
                              const tagc_adamw_segment *segs, int count,
                              const tagc_adamw_config *cfg, int64_t step, float lr,
                              float grad_scale);

#endif
