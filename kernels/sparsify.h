/* Fused sparsification with error feedback, per destination shard (ARCHITECTURE §7 step 1).
 *
 * For every element of shard j:   v = grad + residual            (one fp32 add)
 *   kept     = v                 if v != 0 and |v| >= t_j, else a zero with v's sign
 *   residual = a zero with v's sign if kept, else v
 * so kept + residual == v bit for bit (signed zeros included), and the local bitmap bit
 * is set exactly where kept != 0.
 *
 * Threshold: a histogram of |v| with 2^16 bins, bin(x) = bits(|x|) >> 15 (8 exponent bits
 * and the top 8 mantissa bits: each bin spans at most 2^-8 = 0.39% of its lower edge).
 * With k = round(density * shard_numel), t_j is the lower edge of the highest bin b such
 * that the non-zero elements in bins >= b number at least k (t_j = +inf when k = 0; every
 * non-zero element is kept when fewer than k are non-zero). The achieved count is therefore
 * >= k and exceeds k by less than the population of the threshold bin; ties at t_j are all
 * kept. The threshold is a pure function of the shard's multiset of |v|, so CPU and CUDA
 * must produce the same t_j, kept, residual and bitmap bit for bit (denormals must not be
 * flushed: no -ftz / -ffast-math in these kernels).
 *
 * Non-finite v (inf or NaN in grad or residual, or an overflowing add) anywhere in the unit
 * rejects the whole call: residual is left unchanged, kept and bitmap are zeroed, and
 * stats[j].nonfinite counts the offending elements. */
#ifndef TAGC_KERNELS_SPARSIFY_H
#define TAGC_KERNELS_SPARSIFY_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/layout.h"
#include "kernels/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TAGC_HIST_BINS 65536 /* magnitude histogram bins */
#define TAGC_HIST_SHIFT 15   /* bin(x) = float bits of |x| >> TAGC_HIST_SHIFT */

/* Per destination shard result of one sparsify call. */
typedef struct tagc_sparsify_stats {
  int64_t kept;         /* elements kept (= bits set in the shard's local bitmap) */
  int64_t nonfinite;    /* inf/NaN values of v found (call rejected when any shard > 0) */
  float threshold;      /* t_j: |v| >= threshold and v != 0 means kept (+inf: none) */
  uint32_t threshold_bin; /* bin of t_j, TAGC_HIST_BINS when nothing is kept */
} tagc_sparsify_stats;

/* Workspace bytes the CPU version needs to run on up to `threads` OpenMP threads
 * (threads <= 0: omp_get_max_threads()). The call uses as many threads as the workspace it
 * is given allows, and its results do not depend on the thread count. */
size_t tagc_sparsify_workspace_bytes(const tagc_layout *l, int threads);

/* CPU oracle of the fused sparsify over all W shards of a unit.
 * density: target fraction of kept elements per shard, in [0, 1].
 * grad [W][shard_numel] (borrowed, read), residual [W][shard_numel] (borrowed, updated in
 * place), kept [W][shard_padded] and bitmap [W][bitmap_words] (borrowed, fully written),
 * stats [W] (written), ws/ws_bytes: scratch of at least tagc_sparsify_workspace_bytes(l, 1).
 * grad must not overlap the outputs; residual may not alias kept.
 * Errors: TAGC_EINVAL (NULL pointer, density outside [0,1] or NaN, workspace too small),
 * TAGC_ENUMERIC (non-finite v, see above). Blocking, uses OpenMP threads. */
tagc_status tagc_sparsify_cpu(const tagc_layout *l, float density, const float *grad,
                              float *residual, float *kept, uint64_t *bitmap,
                              tagc_sparsify_stats *stats, void *ws, size_t ws_bytes);

/* CUDA version (kernels/sparsify_cuda.cu): same contract with device pointers (stats too);
 * enqueued on `stream`, no host synchronisation, non-finite input reported only through
 * stats[j].nonfinite. Workspace: tagc_sparsify_cuda_workspace_bytes(l). Returns TAGC_EINVAL
 * for bad arguments detected on the host, TAGC_EINTERNAL for a failed launch. */
size_t tagc_sparsify_cuda_workspace_bytes(const tagc_layout *l);
tagc_status tagc_sparsify_cuda(const tagc_layout *l, float density, const float *grad,
                               float *residual, float *kept, uint64_t *bitmap,
                               tagc_sparsify_stats *stats, void *ws, size_t ws_bytes,
                               tagc_stream stream);

#ifdef __cplusplus
}
#endif

#endif
