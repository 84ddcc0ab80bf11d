#include "engine/device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device_internal.h"

#define ALIGN 256

struct tagc_device {
  const tagc_device_ops *ops;
  void *impl;
  tagc_device_info info;
  pthread_mutex_t mu; /* guards the allocation table and the counters */
  void **ptrs;        /* live allocations and their sizes (for the accounting on free) */
  size_t *sizes;
  size_t n_ptrs, cap_ptrs;
  uint64_t current, peak;
};

struct tagc_device_model {
  tagc_device *d;
  const tagc_model_layout *layout;
  void *impl;
  size_t bytes;
};

/* ---------- the CPU implementation ---------- */

static tagc_status cpu_open(int index, tagc_device_compute compute, void **impl,
                            tagc_device_info *info) {
  (void)index;
  if (compute != TAGC_DEVICE_FP32)
    return tagc_errorf(TAGC_EINVAL, "the CPU computes in fp32 only (--compute fp32)");
  *impl = NULL;
  snprintf(info->kind, sizeof info->kind, "cpu");
  info->index = -1;
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && colon) {
      snprintf(info->name, sizeof info->name, "%s", colon + 2);
      info->name[strcspn(info->name, "\n")] = 0;
      break;
    }
  }
  if (f)
    fclose(f);
  if (!info->name[0])
    snprintf(info->name, sizeof info->name, "cpu");
  return TAGC_OK;
}

static void cpu_close(void *impl) { (void)impl; }

static tagc_stream cpu_stream(void *impl, tagc_lane lane) {
  (void)impl;
  (void)lane;
  return NULL;
}

static tagc_status cpu_alloc(void *impl, size_t bytes, void **out) {
  (void)impl;
  size_t rounded = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  void *p = aligned_alloc(ALIGN, rounded ? rounded : ALIGN);
  if (!p)
    return tagc_errorf(TAGC_ENOMEM, "host allocation of %zu bytes failed", bytes);
  memset(p, 0, rounded);
  *out = p;
  return TAGC_OK;
}

static void cpu_free(void *impl, void *p) {
  (void)impl;
  free(p);
}

static tagc_status cpu_copy(void *impl, tagc_lane lane, void *dst, const void *src, size_t bytes,
                            tagc_copy_kind kind) {
  (void)impl;
  (void)lane;
  (void)kind;
  if (bytes)
    memmove(dst, src, bytes);
  return TAGC_OK;
}

static tagc_status cpu_zero(void *impl, tagc_lane lane, void *p, size_t bytes) {
  (void)impl;
  (void)lane;
  memset(p, 0, bytes);
  return TAGC_OK;
}

static tagc_status cpu_add(void *impl, tagc_lane lane, float *dst, const float *src, size_t n) {
  (void)impl;
  (void)lane;
  for (size_t i = 0; i < n; i++)
    dst[i] += src[i];
  return TAGC_OK;
}

static tagc_status cpu_sync(void *impl, tagc_lane lane) {
  (void)impl;
  (void)lane;
  return TAGC_OK;
}

static tagc_status cpu_mark(void *impl, tagc_lane lane, int id) {
  (void)impl;
  (void)lane;
  (void)id;
  return TAGC_OK;
}

static tagc_status cpu_wait_mark(void *impl, int id) {
  (void)impl;
  (void)id;
  return TAGC_OK;
}

static tagc_status cpu_model_new(void *impl, const tagc_model_layout *layout, int max_batch,
                                 void **model, size_t *bytes) {
  (void)impl;
  *bytes = tagc_model_acts_bytes(layout, max_batch);
  return tagc_model_acts_new(layout, max_batch, (tagc_model_acts **)model);
}

static void cpu_model_free(void *model) { tagc_model_acts_free(model); }

static tagc_status cpu_forward(void *model, const tagc_model_layout *layout,
                               tagc_unit_hooks *hooks, const uint16_t *tokens,
                               const uint16_t *targets, int B, double *loss_sum) {
  return tagc_model_forward(layout, model, hooks, tokens, targets, B, loss_sum);
}

static tagc_status cpu_backward(void *model, const tagc_model_layout *layout,
                                tagc_unit_hooks *hooks, float loss_scale) {
  return tagc_model_backward(layout, model, hooks, loss_scale);
}

static tagc_status cpu_sumsq_many(void *impl, const float *const *x, const size_t *n, int count,
                                  double *out) {
  (void)impl;
  for (int i = 0; i < count; i++)
    out[i] = tagc_sumsq(x[i], n[i]);
  return TAGC_OK;
}

static tagc_status cpu_adamw(void *impl, const tagc_model_layout *layout,
                             const tagc_adamw_segment *segs, int count,
                             const tagc_adamw_config *cfg, int64_t step, float lr,
                             float grad_scale) {
  (void)impl;
  for (int i = 0; i < count; i++)
    if (segs[i].n > 0)
      TAGC_CHECK(tagc_adamw_update_range(layout, segs[i].arena_lo, segs[i].n, segs[i].params,
                                         segs[i].grads, segs[i].m, segs[i].v, cfg, step, lr,
                                         grad_scale));
  return TAGC_OK;
}

static tagc_status cpu_host_alloc(void *impl, size_t bytes, void **out) {
  (void)impl;
  *out = malloc(bytes ? bytes : 1);
  return *out ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "host allocation of %zu bytes failed", bytes);
}

static const tagc_device_ops cpu_ops = {
    cpu_open,    cpu_close,     cpu_stream,    cpu_alloc,       cpu_free,    cpu_copy,
    cpu_zero,    cpu_add,       cpu_sync,      cpu_mark,        cpu_wait_mark, cpu_model_new,
    cpu_model_free, cpu_forward, cpu_backward, cpu_sumsq_many, cpu_adamw, cpu_host_alloc,
    cpu_free};

/* ---------- dispatch and accounting ---------- */

static tagc_status parse_spec(const char *spec, const tagc_device_ops **ops, int *index) {
  *index = -1;
  if (spec && strcmp(spec, "cpu") == 0) {
    *ops = &cpu_ops;
    return TAGC_OK;
  }
  if (!spec || strncmp(spec, "cuda", 4) != 0)
    return tagc_errorf(TAGC_EINVAL, "device '%s': expected cpu, cuda or cuda:N", spec ? spec : "");
  *index = 0;
  if (spec[4] == ':') {
    char *end;
    long v = strtol(spec + 5, &end, 10);
    if (end == spec + 5 || *end || v < 0 || v > 1023)
      return tagc_errorf(TAGC_EINVAL, "device '%s': expected cuda:N with N a device index", spec);
    *index = (int)v;
  } else if (spec[4]) {
    return tagc_errorf(TAGC_EINVAL, "device '%s': expected cpu, cuda or cuda:N", spec);
  }
#ifdef TAGC_HAVE_DEVICE_CUDA
  *ops = &tagc_device_cuda_ops;
  return TAGC_OK;
#else
  return tagc_errorf(TAGC_EUNSUPPORTED, "device '%s': this build has no CUDA support "
                     "(configure with nvcc available and -DTAGC_CUDA=ON)", spec);
#endif
}

tagc_status tagc_device_parse(const char *spec, int *index) {
  const tagc_device_ops *ops;
  return parse_spec(spec, &ops, index);
}

tagc_status tagc_device_open(const char *spec, tagc_device_compute compute, tagc_device **out) {
  *out = NULL;
  const tagc_device_ops *ops = NULL;
  int index;
  TAGC_CHECK(parse_spec(spec, &ops, &index));
  if (compute != TAGC_DEVICE_FP32 && compute != TAGC_DEVICE_BF16)
    return tagc_errorf(TAGC_EINVAL, "device: unknown compute precision %d", (int)compute);
  tagc_device *d = calloc(1, sizeof *d);
  if (!d)
    return tagc_errorf(TAGC_ENOMEM, "device");
  d->ops = ops;
  tagc_status st = ops->open(index, compute, &d->impl, &d->info);
  if (st != TAGC_OK) {
    free(d);
    return st;
  }
  pthread_mutex_init(&d->mu, NULL);
  *out = d;
  return TAGC_OK;
}

void tagc_device_close(tagc_device *d) {
  if (!d)
    return;
  d->ops->close(d->impl);
  pthread_mutex_destroy(&d->mu);
  free(d->ptrs);
  free(d->sizes);
  free(d);
}

int tagc_device_is_cuda(const tagc_device *d) { return d->ops != &cpu_ops; }

void tagc_device_get_info(const tagc_device *d, tagc_device_info *info) { *info = d->info; }

tagc_kernel_ctx tagc_device_kernel_ctx(const tagc_device *d, tagc_lane lane,
                                       const uint32_t *block_rows, void *ws, size_t ws_bytes) {
  tagc_kernel_ctx ctx = {tagc_device_is_cuda(d) ? TAGC_DEVICE_CUDA : TAGC_DEVICE_CPU,
                         d->ops->stream(d->impl, lane), block_rows, ws, ws_bytes, 1};
  return ctx;
}

tagc_status tagc_device_alloc(tagc_device *d, size_t bytes, void **out) {
  *out = NULL;
  pthread_mutex_lock(&d->mu);
  tagc_status st = TAGC_OK;
  if (d->n_ptrs == d->cap_ptrs) {
    size_t cap = d->cap_ptrs ? 2 * d->cap_ptrs : 64;
    void **p = realloc(d->ptrs, cap * sizeof *p);
    if (p)
      d->ptrs = p;
    size_t *s = p ? realloc(d->sizes, cap * sizeof *s) : NULL;
    if (s)
      d->sizes = s;
    if (!p || !s)
      st = tagc_errorf(TAGC_ENOMEM, "device allocation table");
    else
      d->cap_ptrs = cap;
  }
  pthread_mutex_unlock(&d->mu);
  TAGC_CHECK(st);
  void *p;
  TAGC_CHECK(d->ops->alloc(d->impl, bytes, &p));
  pthread_mutex_lock(&d->mu);
  d->ptrs[d->n_ptrs] = p;
  d->sizes[d->n_ptrs++] = bytes;
  d->current += bytes;
  if (d->current > d->peak)
    d->peak = d->current;
  pthread_mutex_unlock(&d->mu);
  *out = p;
  return TAGC_OK;
}

void tagc_device_free(tagc_device *d, void *p) {
  if (!p)
    return;
  pthread_mutex_lock(&d->mu);
  for (size_t i = 0; i < d->n_ptrs; i++) {
    if (d->ptrs[i] == p) {
      d->current -= d->sizes[i];
      d->ptrs[i] = d->ptrs[--d->n_ptrs];
      d->sizes[i] = d->sizes[d->n_ptrs];
      break;
    }
  }
  pthread_mutex_unlock(&d->mu);
  d->ops->free(d->impl, p);
}

tagc_status tagc_device_host_alloc(tagc_device *d, size_t bytes, void **out) {
  *out = NULL;
  return d->ops->host_alloc(d->impl, bytes, out);
}

void tagc_device_host_free(tagc_device *d, void *p) {
  if (p)
    d->ops->host_free(d->impl, p);
}

void tagc_device_usage(const tagc_device *d, uint64_t *current, uint64_t *peak) {
  pthread_mutex_lock((pthread_mutex_t *)&d->mu);
  *current = d->current;
  *peak = d->peak;
  pthread_mutex_unlock((pthread_mutex_t *)&d->mu);
}

tagc_status tagc_device_copy(tagc_device *d, tagc_lane lane, void *dst, const void *src,
                             size_t bytes, tagc_copy_kind kind) {
  if (bytes && (!dst || !src))
    return tagc_errorf(TAGC_EINVAL, "device copy: NULL buffer");
  return bytes ? d->ops->copy(d->impl, lane, dst, src, bytes, kind) : TAGC_OK;
}

tagc_status tagc_device_allgather_host(tagc_device *d, tagc_comm *comm, const void *send, void *recv,
                                       size_t bytes, void *scratch, double timeout_s) {
  void *dev = scratch;
  if (!dev)
    TAGC_CHECK(tagc_device_alloc(d, bytes * ((size_t)tagc_comm_world_size(comm) + 1), &dev));
  char *dsend = dev, *drecv = dsend + bytes;
  tagc_status st = tagc_device_copy(d, TAGC_LANE_COMPUTE, dsend, send, bytes, TAGC_COPY_H2D);
  if (st == TAGC_OK)
    st = tagc_comm_allgather(comm, dsend, drecv, bytes, timeout_s);
  if (st == TAGC_OK)
    st = tagc_device_copy(d, TAGC_LANE_COMPUTE, recv, drecv,
                          bytes * (size_t)tagc_comm_world_size(comm), TAGC_COPY_D2H);
  if (!scratch)
    tagc_device_free(d, dev);
  return st;
}

tagc_status tagc_device_zero(tagc_device *d, tagc_lane lane, void *p, size_t bytes) {
  return bytes ? d->ops->zero(d->impl, lane, p, bytes) : TAGC_OK;
}

tagc_status tagc_device_add(tagc_device *d, tagc_lane lane, float *dst, const float *src, size_t n) {
  return n ? d->ops->add(d->impl, lane, dst, src, n) : TAGC_OK;
}

tagc_status tagc_device_sync(tagc_device *d, tagc_lane lane) { return d->ops->sync(d->impl, lane); }

tagc_status tagc_device_mark(tagc_device *d, tagc_lane lane, int id) {
  if (id < 0 || id >= TAGC_DEVICE_MARKS)
    return tagc_errorf(TAGC_EINVAL, "device mark %d out of range", id);
  return d->ops->mark(d->impl, lane, id);
}

tagc_status tagc_device_wait_mark(tagc_device *d, int id) {
  if (id < 0 || id >= TAGC_DEVICE_MARKS)
    return tagc_errorf(TAGC_EINVAL, "device mark %d out of range", id);
  return d->ops->wait_mark(d->impl, id);
}

tagc_status tagc_device_model_new(tagc_device *d, const tagc_model_layout *layout, int max_batch,
                                  tagc_device_model **out) {
  *out = NULL;
  tagc_device_model *m = calloc(1, sizeof *m);
  if (!m)
    return tagc_errorf(TAGC_ENOMEM, "device model");
  m->d = d;
  m->layout = layout;
  tagc_status st = d->ops->model_new(d->impl, layout, max_batch, &m->impl, &m->bytes);
  if (st != TAGC_OK) {
    free(m);
    return st;
  }
  *out = m;
  return TAGC_OK;
}

void tagc_device_model_free(tagc_device_model *m) {
  if (!m)
    return;
  m->d->ops->model_free(m->impl);
  free(m);
}

size_t tagc_device_model_bytes(const tagc_device_model *m) { return m->bytes; }

tagc_status tagc_device_model_forward(tagc_device_model *m, tagc_unit_hooks *hooks,
                                      const uint16_t *tokens, const uint16_t *targets, int B,
                                      double *loss_sum) {
  return m->d->ops->forward(m->impl, m->layout, hooks, tokens, targets, B, loss_sum);
}

tagc_status tagc_device_model_backward(tagc_device_model *m, tagc_unit_hooks *hooks,
                                       float loss_scale) {
  return m->d->ops->backward(m->impl, m->layout, hooks, loss_scale);
}

tagc_status tagc_device_sumsq_many(tagc_device *d, const float *const *x, const size_t *n,
                                   int count, double *out) {
  return count > 0 ? d->ops->sumsq_many(d->impl, x, n, count, out) : TAGC_OK;
}

tagc_status tagc_device_adamw(tagc_device *d, const tagc_model_layout *layout,
                              const tagc_adamw_segment *segs, int count,
                              const tagc_adamw_config *cfg, int64_t step, float lr,
                              float grad_scale) {
  return count > 0 ? d->ops->adamw(d->impl, layout, segs, count, cfg, step, lr, grad_scale)
                   : TAGC_OK;
}
