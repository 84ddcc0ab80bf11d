/* Owner decode of one shard (ARCHITECTURE §7 step 4).
 *
 * Input: the owner's summed sketch (fp32 [sketch_cells]; convert a bf16 wire sketch to
 * fp32 first) and the owner's global bitmap (OR over ranks, [bitmap_words]).
 * Per lane t (independent; K = l->lanes of them):
 *   1. items = blocks b with bit Kb + ((t - rot(b)) mod K) set (rot: the per-block lane
 *      rotation of kernels/hash.h); cell counts come from the bitmap only.
 *   2. Peeling: a cell holding exactly one item gives that item's value (sign * cell); the
 *      value is subtracted from the item's other cells and their counts drop. Each cell
 *      also keeps the XOR of its items' block ids, so a pure cell names its item directly.
 *      Pure cells are processed from a FIFO queue seeded in row order (breadth first: an
 *      item is peeled at about the round a parallel peel would reach it, so the rounding
 *      error a peel chain carries stays short; a LIFO stack followed chains depth first and
 *      gave bf16-wire errors of up to 0.33 x max |kept| at 256 lanes, FIFO 5.5e-3):
 *      at most G items are peeled and every cell is queued at most once (when its count
 *      reaches 1), so the loop is bounded and needs no host round trip; a lane never reads
 *      state another lane writes (no race).
 *   3. Items left in the 2-core get the median of their three estimates sign_i * cell_i
 *      (median-of-3 = max(min(a,b), min(max(a,b),c)), exact for ties).
 * Elements whose global bit is clear decode to +0. The result is deterministic and does
 * not depend on the thread count (lanes are independent, each processed sequentially).
 * Peeled values equal the sum of the ranks' kept values up to fp32 rounding of the sketch
 * sums and of the subtractions along the peel chain. */
#ifndef TAGC_KERNELS_DECODE_H
#define TAGC_KERNELS_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/hash.h"
#include "kernels/layout.h"
#include "kernels/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Median of three finite values, correct when any of them are equal. */
TAGC_HD float tagc_median3(float a, float b, float c) {
  float lo = a < b ? a : b, hi = a < b ? b : a;
  float m = hi < c ? hi : c;
  return lo > m ? lo : m;
}

typedef struct tagc_decode_stats {
  int64_t nonzero;    /* elements flagged in the global bitmap */
  int64_t peeled;     /* of those, recovered by peeling (lossless) */
  int64_t estimated;  /* of those, left to the median-of-3 estimate (lossy); target 0 */
} tagc_decode_stats;

/* Workspace bytes for the CPU decode on up to `threads` OpenMP threads (<= 0: the OpenMP
 * maximum). The call uses as many threads as the workspace allows. */
size_t tagc_decode_workspace_bytes(const tagc_layout *l, int threads);

/* Decodes one shard: sketch [sketch_cells] and bitmap [bitmap_words] (borrowed, read) into
 * out [shard_numel] (borrowed, overwritten), *stats written. ws: at least
 * tagc_decode_workspace_bytes(l, 1) bytes. Errors: TAGC_EINVAL (NULL, workspace too small,
 * a bit set in the padding beyond shard_numel). Blocking, OpenMP over lanes. */
tagc_status tagc_decode_cpu(const tagc_layout *l, const float *sketch, const uint64_t *bitmap,
                            float *out, tagc_decode_stats *stats, void *ws, size_t ws_bytes);

/* CUDA version: same contract and results up to the fp32 sum order of the sketch, device
 * pointers (stats too), enqueued on `stream`, no host synchronisation (per-lane peeling in
 * one kernel). */
size_t tagc_decode_cuda_workspace_bytes(const tagc_layout *l);
tagc_status tagc_decode_cuda(const tagc_layout *l, const uint32_t *block_rows_dev,
                             const float *sketch, const uint64_t *bitmap, float *out,
                             tagc_decode_stats *stats, void *ws, size_t ws_bytes,
                             tagc_stream stream);

#ifdef __cplusplus
}
#endif

#endif
