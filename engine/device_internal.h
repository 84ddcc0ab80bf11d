/* The table of operations behind tagc_device (engine/device.h): the CPU's in device.c, the
 * CUDA one in device_cuda.cu. device.c does argument checks and memory accounting; an
 * implementation only does the work. `impl` is the implementation's own state. */
#ifndef TAGC_WORKER_DEVICE_INTERNAL_H
#define TAGC_WORKER_DEVICE_INTERNAL_H

#ifdef __cplusplus
extern "C" {
#endif

#include "engine/device.h"

typedef struct tagc_device_ops {
  /* index: CUDA device; fills info; *impl is the new state */
  tagc_status (*open)(int index, tagc_device_compute compute, void **impl, tagc_device_info *info);
  void (*close)(void *impl);
  tagc_stream (*stream)(void *impl, tagc_lane lane); /* NULL on the CPU */
  tagc_status (*alloc)(void *impl, size_t bytes, void **out);
  void (*free)(void *impl, void *p);
  tagc_status (*copy)(void *impl, tagc_lane lane, void *dst, const void *src, size_t bytes,
                      tagc_copy_kind kind);
  tagc_status (*zero)(void *impl, tagc_lane lane, void *p, size_t bytes);
  tagc_status (*add)(void *impl, tagc_lane lane, float *dst, const float *src, size_t n);
  tagc_status (*sync)(void *impl, tagc_lane lane);
  tagc_status (*mark)(void *impl, tagc_lane lane, int id);
  tagc_status (*wait_mark)(void *impl, int id);
  tagc_status (*model_new)(void *impl, const tagc_model_layout *layout, int max_batch,
                           void **model, size_t *bytes);
  void (*model_free)(void *model);
  tagc_status (*forward)(void *model, const tagc_model_layout *layout, tagc_unit_hooks *hooks,
                         const uint16_t *tokens, const uint16_t *targets, int B, double *loss_sum);
  tagc_status (*backward)(void *model, const tagc_model_layout *layout, tagc_unit_hooks *hooks,
                          float loss_scale);
  tagc_status (*sumsq_many)(void *impl, const float *const *x, const size_t *n, int count,
                            double *out);
  tagc_status (*adamw)(void *impl, const tagc_model_layout *layout, const tagc_adamw_segment *segs,
                       int count, const tagc_adamw_config *cfg, int64_t step, float lr,
                       float grad_scale);
  tagc_status (*host_alloc)(void *impl, size_t bytes, void **out); /* page-locked on CUDA */
  void (*host_free)(void *impl, void *p);
} tagc_device_ops;

/* Defined in device_cuda.cu when the build has CUDA. */
extern const tagc_device_ops tagc_device_cuda_ops;

#ifdef __cplusplus
}
#endif

#endif
