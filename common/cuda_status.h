/* The one translator of CUDA runtime errors into tagc_status, for every CUDA source of the
 * project (kernels/, comm/, worker/). Header-only: it needs the CUDA runtime API, so only
 * CUDA sources include it (compiled by nvcc, or as C++ by the host emulation of
 * tests/kernels_gpu/emu); the C libraries never see it.
 *
 * Mapping: cudaErrorMemoryAllocation -> TAGC_ENOMEM, so that the worker's out-of-memory path
 * (a smaller micro-batch, the "oom" failure kind) sees device allocation failures wherever
 * they happen; every other CUDA error -> TAGC_EINTERNAL: a launch, copy, stream or event that
 * fails means the device or the runtime is in a state the program does not expect, not bad
 * input or a file or socket problem (TAGC_EIO would make tagc-worker exit with the
 * "bad options, corpus or output directory" status). */
#ifndef TAGC_COMMON_CUDA_STATUS_H
#define TAGC_COMMON_CUDA_STATUS_H

#ifndef __cplusplus
#error "common/cuda_status.h is for CUDA sources only (nvcc, or the C++ host emulation)"
#endif

#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdio.h>

#include "common/status.h"

/* TAGC_OK for cudaSuccess. Otherwise sets the detail to "<fmt>: <cudaGetErrorString(err)>"
 * and returns TAGC_ENOMEM (cudaErrorMemoryAllocation) or TAGC_EINTERNAL (anything else).
 * Also resets the runtime's last error, so that a later check does not report a non-sticky
 * failure (an allocation that did not fit) a second time; sticky errors stay. */
static inline tagc_status tagc_cuda_status(cudaError_t err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static inline tagc_status tagc_cuda_status(cudaError_t err, const char *fmt, ...) {
  if (err == cudaSuccess)
    return TAGC_OK;
  (void)cudaGetLastError();
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  tagc_status st = err == cudaErrorMemoryAllocation ? TAGC_ENOMEM : TAGC_EINTERNAL;
  return tagc_errorf(st, "%s: %s", what, cudaGetErrorString(err));
}

#endif
