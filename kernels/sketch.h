/* Count-sketch encode (ARCHITECTURE §7 step 3).
 *
 * For every destination shard j, every element e = K*b + t (K = l->lanes) whose local
 * bitmap bit is set adds sign_i(b) * kept[e] to cell (row_i(b), lane (t + rot(b)) mod K) for
 * i = 0, 1, 2 (rows and signs from l->block_rows, kernels/layout.h; rot(b) =
 * tagc_block_rotation(seed, b, K), kernels/hash.h). Elements whose bit is clear contribute nothing, and
 * blocks without any set bit are skipped. The encode is linear:
 * encode(a) + encode(b) == encode(a + b) up to fp32 rounding of the cell sums, which is what
 * lets a SUM reduce-scatter of the dest-major sketches deliver to rank j the sketch of the
 * sum over ranks of their shard-j values.
 *
 * CPU summation order (deterministic, any thread count): per cell, blocks in increasing
 * order, then i = 0, 1, 2. The CUDA version may use atomics (order-nondeterministic). */
#ifndef TAGC_KERNELS_SKETCH_H
#define TAGC_KERNELS_SKETCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/layout.h"
#include "kernels/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Encodes all W shards: kept [W][shard_padded] and bitmap [W][bitmap_words] (borrowed, read;
 * as written by tagc_sparsify_cpu) into sketch [W][sketch_cells] (borrowed, overwritten).
 * No workspace. Errors: TAGC_EINVAL (NULL pointers). Blocking, OpenMP over lanes. */
tagc_status tagc_sketch_encode_cpu(const tagc_layout *l, const float *kept,
                                   const uint64_t *bitmap, float *sketch);

/* CUDA version: same contract, device pointers (l->block_rows copied to the device by the
 * caller: block_rows_dev, [blocks][3]), enqueued on `stream`, no host synchronisation. */
tagc_status tagc_sketch_encode_cuda(const tagc_layout *l, const uint32_t *block_rows_dev,
                                    const float *kept, const uint64_t *bitmap, float *sketch,
                                    tagc_stream stream);

#ifdef __cplusplus
}
#endif

#endif
