// NCCL backend: GPU ranks. Built when TAGC_HAVE_NCCL; exports comm_nccl_create() and the
// backend ops of comm_backend.h.
//
// Bootstrap: rank 0 makes a fresh unique id for every communicator and publishes it, base64,
// under <prefix>/ncclid; init is non-blocking (config.blocking = 0) and polled with
// ncclCommGetAsyncError against the create timeout, then aborted if it is not done.
// Exchanges are grouped ncclSend/ncclRecv on the communicator's stream; the host polls a
// CUDA event and ncclCommGetAsyncError until done, failed, aborted or past the deadline.
// Every NCCL call on the communicator happens under `lock`, so abort() from another thread
// can call ncclCommAbort between two polls; the polling thread then finds comm == NULL.
// Shrink (NCCL >= 2.27) derives a child from a working communicator with ncclCommShrink.
// Non-blocking, it runs as a job of the parent: NCCL sets the child handle only when the job
// is done, and reports progress through the parent's ncclCommGetAsyncError, so the parent is
// what is polled, and aborting the parent (timeout, cancel, abort() from another thread)
// aborts the child's init with it.
// Local steps (copy, bf16 rounding, the rank-order reduction) run on the same stream and
// copy/reduce wait for it, so results are complete when an operation returns.
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "comm/comm_backend.h"
#include "common/cuda_status.h"
extern "C" {
#include "common/base64.h"
#include "common/timeutil.h"
}

namespace {

struct NcclComm {
  ncclComm_t comm = nullptr; // NULL once aborted
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  int device = 0;
  void *scratch = nullptr;
  size_t scratch_bytes = 0;
  // Outgrown scratch buffers, freed by destroy (see nccl_scratch); doubling from 1 MiB
  // outgrows at most 44 before size_t overflows.
  void *retired[64] = {};
  int n_retired = 0;
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
};

// Seconds between polls of a pending init or exchange.
constexpr double kPollS = 100e-6;

// "nccl backend: <what>: <CUDA's message>", translated by common/cuda_status.h.
tagc_status cuda_error(cudaError_t e, const char *what) {
  return tagc_cuda_status(e, "nccl backend: %s", what);
}

// The current device is per thread, and operations may come from another thread than
// create: select the communicator's device before touching its stream or memory.
NcclComm *use_device(void *impl) {
  NcclComm *c = static_cast<NcclComm *>(impl);
  cudaSetDevice(c->device);
  return c;
}

tagc_status nccl_error(ncclResult_t r, const char *what) {
  tagc_status st = (r == ncclRemoteError || r == ncclSystemError) ? TAGC_EPEER : TAGC_EIO;
  return tagc_errorf(st, "nccl %s: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(nullptr));
}

// Aborts the NCCL communicator; the caller holds n->lock.
void abort_locked(NcclComm *n) {
  if (n->comm) {
    ncclCommAbort(n->comm);
    n->comm = nullptr;
  }
}

// Polls until the communicator leaves ncclInProgress (init, a shrink of it or a
// non-blocking group call); cfg (the create's or shrink's config, NULL otherwise) may cancel
// the wait (tagc_comm_config.cancelled).
tagc_status wait_ready(NcclComm *n, double deadline, const char *what,
                       const tagc_comm_config *cfg = nullptr) {
  for (;;) {
    bool stop = cfg && cfg->cancelled && cfg->cancelled(cfg->cancel_arg);
    pthread_mutex_lock(&n->lock);
    ncclResult_t r = ncclSuccess;
    if (n->comm)
      ncclCommGetAsyncError(n->comm, &r);
    bool gone = n->comm == nullptr || (stop && r == ncclInProgress);
    bool late = r == ncclInProgress && tagc_now() >= deadline;
    if (gone || late || (r != ncclSuccess && r != ncclInProgress))
      abort_locked(n);
    pthread_mutex_unlock(&n->lock);
    if (gone)
      return tagc_errorf(TAGC_EABORTED, "nccl %s: aborted", what);
    if (late)
      return tagc_errorf(TAGC_ETIMEDOUT, "nccl %s: not done by the deadline", what);
    if (r == ncclSuccess)
      return TAGC_OK;
    if (r != ncclInProgress)
      return nccl_error(r, what);
    tagc_sleep(kPollS);
  }
}

// The tag is not compared here (unlike Gloo): NCCL does not overrun a receive when sizes
// differ, but it truncates a longer message and leaves a receive waiting for a shorter one
// until the deadline (comm/README.md).
tagc_status nccl_exchange(void *impl, const comm_tag *, const comm_xfer *x, int n,
                          double deadline, int *peer) {
  NcclComm *c = use_device(impl);
  *peer = n == 1 ? x[0].peer : -1;
  pthread_mutex_lock(&c->lock);
  if (!c->comm) {
    pthread_mutex_unlock(&c->lock);
    return tagc_errorf(TAGC_EABORTED, "nccl exchange: aborted");
  }
  ncclResult_t r = ncclGroupStart();
  for (int i = 0; i < n && r == ncclSuccess; i++) {
    if (x[i].send_bytes)
      r = ncclSend(x[i].send, x[i].send_bytes, ncclUint8, x[i].peer, c->comm, c->stream);
    if (r == ncclSuccess && x[i].recv_bytes)
      r = ncclRecv(x[i].recv, x[i].recv_bytes, ncclUint8, x[i].peer, c->comm, c->stream);
  }
  ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess)
    r = end;
  pthread_mutex_unlock(&c->lock);
  if (r != ncclSuccess && r != ncclInProgress)
    return nccl_error(r, "send/recv");
  TAGC_CHECK(wait_ready(c, deadline, "send/recv"));
  cudaError_t e = cudaEventRecord(c->done, c->stream);
  if (e != cudaSuccess)
    return cuda_error(e, "event record");
  for (;;) {
    e = cudaEventQuery(c->done);
    if (e == cudaSuccess) // an abort ends the kernels early too: done only if none came
      return wait_ready(c, deadline, "send/recv");
    if (e != cudaErrorNotReady)
      return cuda_error(e, "event query");
    TAGC_CHECK(wait_ready(c, deadline, "send/recv"));
    if (tagc_now() >= deadline) {
      pthread_mutex_lock(&c->lock);
      abort_locked(c);
      pthread_mutex_unlock(&c->lock);
      return tagc_errorf(TAGC_ETIMEDOUT, "nccl send/recv: not done by the deadline");
    }
    tagc_sleep(kPollS);
  }
}

tagc_status sync_stream(NcclComm *c, const char *what) {
  return cuda_error(cudaStreamSynchronize(c->stream), what);
}

tagc_status nccl_copy(void *impl, void *dst, const void *src, size_t bytes) {
  NcclComm *c = use_device(impl);
  if (dst == src || bytes == 0)
    return TAGC_OK;
  TAGC_CHECK(cuda_error(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream),
                        "copy"));
  return sync_stream(c, "copy");
}

__device__ uint16_t f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__device__ float bf16_to_f32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

__global__ void to_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = f32_to_bf16(src[i]);
}

// NaN-propagating maximum, as in the host reduction.
__device__ float max_f32(float a, float b) {
  return (b > a || isnan(b)) ? b : a;
}

// out[i] = rows[0][i] (op) rows[1][i] (op) ..., in row order, fp32 accumulation.
__global__ void reduce_kernel(void *out, const void *rows, int nrows, size_t count,
                              tagc_dtype dtype, tagc_redop op, tagc_wire wire) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x) {
    if (dtype == TAGC_DTYPE_U64) {
      const uint64_t *r = static_cast<const uint64_t *>(rows);
      uint64_t acc = r[i];
      for (int k = 1; k < nrows; k++) {
        uint64_t v = r[(size_t)k * count + i];
        acc = op == TAGC_REDOP_SUM ? acc + v : op == TAGC_REDOP_MAX ? (v > acc ? v : acc) : (acc | v);
      }
      static_cast<uint64_t *>(out)[i] = acc;
    } else {
      const float *r = static_cast<const float *>(rows);
      const uint16_t *h = static_cast<const uint16_t *>(rows);
      float acc = wire == TAGC_WIRE_BF16 ? bf16_to_f32(h[i]) : r[i];
      for (int k = 1; k < nrows; k++) {
        float v = wire == TAGC_WIRE_BF16 ? bf16_to_f32(h[(size_t)k * count + i])
                                         : r[(size_t)k * count + i];
        acc = op == TAGC_REDOP_SUM ? acc + v : max_f32(acc, v);
      }
      static_cast<float *>(out)[i] = acc;
    }
  }
}

unsigned grid_for(size_t n) {
  size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 4096 ? (blocks ? blocks : 1) : 4096);
}

tagc_status nccl_to_bf16(void *impl, uint16_t *dst, const float *src, size_t n) {
  NcclComm *c = use_device(impl);
  to_bf16_kernel<<<grid_for(n), 256, 0, c->stream>>>(dst, src, n);
  return cuda_error(cudaGetLastError(), "bf16 kernel");
}

tagc_status nccl_reduce(void *impl, void *out, const void *rows, int nrows, size_t count,
                        tagc_dtype dtype, tagc_redop op, tagc_wire wire) {
  NcclComm *c = use_device(impl);
  reduce_kernel<<<grid_for(count), 256, 0, c->stream>>>(out, rows, nrows, count, dtype, op, wire);
  TAGC_CHECK(cuda_error(cudaGetLastError(), "reduce kernel"));
  return sync_stream(c, "reduce");
}

// Smallest scratch allocation: the barrier's few bytes do not start a chain of tiny buffers.
constexpr size_t kMinScratch = size_t(1) << 20;

// Grow-only, in powers of two, and nothing freed before destroy: cudaFree synchronises the
// whole device, which would stall the step's compute streams in the middle of a step. An
// outgrown buffer is kept until destroy (no sync needed: the stream may still read it); the
// outgrown ones add up to less than the current one, itself under twice the largest request
// (or 1 MiB), and growth stops once the largest exchange of a step has been seen.
tagc_status nccl_scratch(void *impl, size_t bytes, void **out) {
  NcclComm *c = use_device(impl);
  if (bytes > c->scratch_bytes) {
    size_t size = kMinScratch;
    while (size < bytes && size <= SIZE_MAX / 2)
      size *= 2;
    if (size < bytes)
      return tagc_errorf(TAGC_ENOMEM, "nccl backend: scratch of %zu bytes", bytes);
    void *p = nullptr;
    TAGC_CHECK(tagc_cuda_status(cudaMalloc(&p, size), "nccl backend: scratch of %zu bytes",
                                size));
    if (c->scratch)
      c->retired[c->n_retired++] = c->scratch;
    c->scratch = p;
    c->scratch_bytes = size;
  }
  *out = c->scratch;
  return TAGC_OK;
}

void nccl_abort(void *impl) {
  NcclComm *c = static_cast<NcclComm *>(impl);
  pthread_mutex_lock(&c->lock);
  abort_locked(c);
  pthread_mutex_unlock(&c->lock);
}

// Frees everything. Abort, not destroy: ncclCommDestroy may wait for peers to finalize.
void nccl_destroy(void *impl) {
  NcclComm *c = use_device(impl);
  abort_locked(c);
  if (c->stream)
    cudaStreamSynchronize(c->stream);
  cudaFree(c->scratch);
  for (int i = 0; i < c->n_retired; i++)
    cudaFree(c->retired[i]);
  if (c->done)
    cudaEventDestroy(c->done);
  if (c->stream)
    cudaStreamDestroy(c->stream);
  pthread_mutex_destroy(&c->lock);
  delete c;
}

const comm_backend_ops nccl_ops = {nccl_exchange, nccl_copy,  nccl_to_bf16, nccl_reduce,
                                   nccl_scratch,  nccl_abort, nccl_destroy, nullptr};

// Rank 0 publishes a fresh unique id under <prefix>/ncclid; the others wait for it.
tagc_status share_unique_id(const tagc_comm_config *cfg, ncclUniqueId *id) {
  char key[512];
  snprintf(key, sizeof key, "%s/ncclid", cfg->prefix);
  if (cfg->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(id);
    if (r != ncclSuccess)
      return nccl_error(r, "unique id");
    char text[2 * sizeof id->internal + 8];
    tagc_base64_encode(id->internal, sizeof id->internal, text);
    return tagc_store_set(cfg->store, key, text, strlen(text));
  }
  void *value = nullptr;
  size_t len = 0;
  TAGC_CHECK(tagc_store_get(cfg->store, key, cfg->timeout_s, &value, &len));
  unsigned char raw[sizeof id->internal + 1]; // the id and the decoder's NUL
  size_t raw_len = 0;
  tagc_status st = tagc_base64_decode(static_cast<char *>(value), len, raw, sizeof raw, &raw_len);
  free(value);
  if (st != TAGC_OK) {
    char why[256]; // tagc_errorf writes the buffer tagc_last_error() reads
    snprintf(why, sizeof why, "%s", tagc_last_error());
    st = tagc_errorf(st, "nccl unique id under %s: %s", key, why);
  }
  if (st == TAGC_OK && raw_len != sizeof id->internal)
    st = tagc_errorf(TAGC_EPROTO, "nccl unique id under %s has %zu bytes", key, raw_len);
  if (st == TAGC_OK)
    memcpy(id->internal, raw, sizeof id->internal);
  return st;
}

tagc_status init_device(NcclComm *c, int device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    return tagc_errorf(TAGC_EUNSUPPORTED, "nccl backend: no CUDA device (%s)",
                       e == cudaSuccess ? "count 0" : cudaGetErrorString(e));
  if (device < 0 || device >= count)
    return tagc_errorf(TAGC_EINVAL, "comm config: device %d of %d", device, count);
  c->device = device;
  if ((e = cudaSetDevice(device)) != cudaSuccess ||
      (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess ||
      (e = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming)) != cudaSuccess)
    return cuda_error(e, "device setup");
  return TAGC_OK;
}

} // namespace

extern "C" tagc_status comm_nccl_create(const tagc_comm_config *cfg,
                                        const comm_backend_ops **ops, void **impl) {
  NcclComm *c = new (std::nothrow) NcclComm();
  if (!c)
    return tagc_errorf(TAGC_ENOMEM, "nccl create: out of memory");
  double deadline = tagc_now() + cfg->timeout_s;
  ncclUniqueId id;
  tagc_status st = init_device(c, cfg->device);
  if (st == TAGC_OK)
    st = share_unique_id(cfg, &id);
  if (st == TAGC_OK) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    config.shrinkShare = 0; // see start_shrink
#endif
    ncclResult_t r = ncclCommInitRankConfig(&c->comm, cfg->world_size, id, cfg->rank, &config);
    if (r != ncclSuccess && r != ncclInProgress)
      st = nccl_error(r, "init");
    else
      st = wait_ready(c, deadline, "init", cfg);
  }
  if (st != TAGC_OK) {
    nccl_destroy(c);
    return st;
  }
  *ops = &nccl_ops;
  *impl = c;
  return TAGC_OK;
}

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 27, 0)
extern "C" tagc_status comm_nccl_shrink(void *, const int *, int, const tagc_comm_config *,
                                        const comm_backend_ops **, void **) {
  return tagc_errorf(TAGC_EUNSUPPORTED, "nccl shrink: built with NCCL %d, needs 2.27",
                     NCCL_VERSION_CODE);
}
#else
// Starts ncclCommShrink of p into c (the child's handle is set once the job is done);
// NCCL_SHRINK_DEFAULT because p is working and idle (every operation returns complete).
static tagc_status start_shrink(NcclComm *p, NcclComm *c, const int *excluded, int n_excluded) {
  int *list = static_cast<int *>(malloc(sizeof(int) * n_excluded)); // NCCL sorts it in place
  if (!list)
    return tagc_errorf(TAGC_ENOMEM, "nccl shrink: out of memory");
  memcpy(list, excluded, sizeof(int) * n_excluded);
  // No resource sharing, so that destroying (aborting) the parent later leaves the child be:
  // a child sharing the parent's resources shares its abort flag too. NCCL takes the choice
  // from the parent's config (set at init; NCCL_COMM_SHRINK_SHARE_RESOURCES overrides it,
  // which comm_nccl_shrink refuses), this one's is for the child's own shrinks.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.shrinkShare = 0;
  tagc_status st = TAGC_OK;
  pthread_mutex_lock(&p->lock);
  if (!p->comm) {
    st = tagc_errorf(TAGC_EUNSUPPORTED, "nccl shrink: the communicator was aborted");
  } else {
    ncclResult_t r = ncclCommShrink(p->comm, list, n_excluded, &c->comm, &config,
                                    NCCL_SHRINK_DEFAULT);
    if (r != ncclSuccess && r != ncclInProgress)
      st = nccl_error(r, "shrink");
  }
  pthread_mutex_unlock(&p->lock);
  free(list);
  return st;
}

extern "C" tagc_status comm_nccl_shrink(void *parent, const int *excluded, int n_excluded,
                                        const tagc_comm_config *cfg,
                                        const comm_backend_ops **ops, void **impl) {
  int version = 0;
  ncclResult_t r = ncclGetVersion(&version);
  if (r != ncclSuccess)
    return nccl_error(r, "version");
  if (version < NCCL_VERSION(2, 27, 0))
    return tagc_errorf(TAGC_EUNSUPPORTED, "nccl shrink: NCCL %d at run time, needs 2.27",
                       version);
  // NCCL lets this variable override the shrinkShare of the config (see start_shrink).
  const char *share = getenv("NCCL_COMM_SHRINK_SHARE_RESOURCES");
  if (share && atoi(share) != 0)
    return tagc_errorf(TAGC_EUNSUPPORTED, "nccl shrink: NCCL_COMM_SHRINK_SHARE_RESOURCES=%s "
                       "would tie the new communicator to the old one's abort", share);
  NcclComm *p = use_device(parent);
  if (cfg->device != p->device)
    return tagc_errorf(TAGC_EUNSUPPORTED, "nccl shrink: device %d, the communicator's is %d",
                       cfg->device, p->device);
  NcclComm *c = new (std::nothrow) NcclComm();
  if (!c)
    return tagc_errorf(TAGC_ENOMEM, "nccl shrink: out of memory");
  double deadline = tagc_now() + cfg->timeout_s;
  tagc_status st = init_device(c, p->device);
  if (st == TAGC_OK)
    st = start_shrink(p, c, excluded, n_excluded);
  // On failure wait_ready aborts the parent, which ends the shrink job (and the child's
  // init) before it returns; only then is c->comm safe to read.
  if (st == TAGC_OK)
    st = wait_ready(p, deadline, "shrink", cfg);
  if (st == TAGC_OK && !c->comm)
    st = tagc_errorf(TAGC_EIO, "nccl shrink: no communicator came back");
  if (st != TAGC_OK) {
    nccl_destroy(c);
    return st;
  }
  *ops = &nccl_ops;
  *impl = c;
  return TAGC_OK;
}
#endif
