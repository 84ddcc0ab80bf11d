/* Geometry of one compressed tensor range ("unit") and its count-sketch block hash table.
 *
 * A unit of W * shard_numel fp32 elements is split into W contiguous destination shards
 * (shard j = elements [j*shard_numel, (j+1)*shard_numel), owned by rank j). Every kernel
 * works on shards padded up to a multiple of TAGC_PAD (1024) elements; padding elements
 * are zero, never flagged in a bitmap, and never written back to caller arrays of
 * shard_numel elements.
 *
 * Buffer layouts used by all kernels (dest-major, so a reduce-scatter or all-to-all sends
 * part j to rank j):
 *   grad, residual   fp32 [W][shard_numel]             caller's flat gradient layout
 *   kept             fp32 [W][shard_padded]            sparsified values, zeros elsewhere
 *   bitmap           u64  [W][bitmap_words]            bit q of word w = element 64*w+q
 *   sketch           fp32 [W][sketch_cells]            cell (row r, lane t) at r*lanes+t
 * An owner's global bitmap / summed sketch is the single-shard slice of those.
 *
 * Count sketch: a shard is cut into blocks of K = `lanes` elements (a power of two, 32 to
 * 1024). Block b (elements [Kb, Kb+K)) maps to 3 distinct rows with signs; element Kb+t
 * lands in lane (t + rot(b)) mod K of those rows (kernels/hash.h), so the K lanes are K
 * independent sketches sharing one hash, each with G = shard_padded / K item slots. Rows
 * come from tagc_block_hash (kernels/hash.h):
 *   r0 = range(h0, R); r1 = range(h1, R-1) skipping r0; r2 = range(h2, R-2) skipping both.
 * Two blocks whose row sets are equal would never peel in any lane where both are non-zero,
 * so tagc_layout_init re-hashes later duplicates (attempt = 1, 2, ...) until all triples
 * differ; the resulting table is stored in the layout and is the only thing the CUDA port
 * needs to copy to the device.
 *
 * Lanes: a lane is one peeling problem, and a peeling problem with few item slots needs
 * proportionally many rows (the finite-size margin of kernels/rho.h), so small shards use
 * fewer, longer lanes: tagc_layout_lanes() gives the largest K <= 1024 that leaves at least
 * TAGC_LANE_BLOCKS blocks per lane (32 for any shard below 32 * TAGC_LANE_BLOCKS elements).
 * It depends on the shard size alone, so every rank computes the same K.
 *
 * Rows: R = max(ceil(G / rho), 3, smallest R with C(R,3) >= 4G), G = shard_padded / K,
 * and R < 2^21. */
#ifndef TAGC_KERNELS_LAYOUT_H
#define TAGC_KERNELS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TAGC_PAD 1024            /* shards are padded to a multiple of this many elements */
#define TAGC_LANES_MIN 32        /* fewest lanes per sketch row: one warp reads a block */
#define TAGC_LANES_MAX 1024      /* most lanes per sketch row (= TAGC_PAD, so K divides it) */
#define TAGC_LANE_BLOCKS 1024    /* tagc_layout_lanes keeps at least this many blocks per lane */
#define TAGC_MAX_ROWS (1 << 21)  /* sketch rows per shard (row ids pack in 21 bits) */
#define TAGC_ROW_SIGN 0x80000000u /* bit of a block_rows entry meaning sign -1 */
#define TAGC_ROW_MASK 0x001FFFFFu /* bits of a block_rows entry holding the row */

typedef struct tagc_layout {
  int32_t world;          /* W: destination shards (ranks) */
  uint32_t seed;          /* sketch hash seed (same on every rank) */
  double rho;             /* requested compression: blocks per row */
  int64_t shard_numel;    /* n: elements of one destination shard in caller arrays */
  int64_t shard_padded;   /* n rounded up to a multiple of TAGC_PAD */
  int32_t lanes;          /* K: lanes per sketch row = elements per block (power of two) */
  int64_t blocks;         /* G = shard_padded / K: item slots per lane */
  int64_t rows;           /* R: sketch rows per shard */
  int64_t bitmap_words;   /* uint64 words per shard bitmap = shard_padded / 64 */
  int64_t sketch_cells;   /* floats per shard sketch = rows * K */
  uint32_t *block_rows;   /* owned, [blocks][3]: row | TAGC_ROW_SIGN when the sign is -1 */
} tagc_layout;

/* The lane count K for a shard of shard_numel elements: the largest power of two in
 * [TAGC_LANES_MIN, TAGC_LANES_MAX] with roundup(shard_numel, TAGC_PAD) / K >=
 * TAGC_LANE_BLOCKS, or TAGC_LANES_MIN when even that leaves fewer blocks. Pure; any
 * shard_numel >= 1 (smaller values give TAGC_LANES_MIN). */
int32_t tagc_layout_lanes(int64_t shard_numel);

/* Fills *l for W shards of shard_numel elements at compression rho (blocks per sketch row;
 * any finite value in [0.25, 4096]) and hash seed, with tagc_layout_lanes(shard_numel)
 * lanes, and builds the block-row table. Errors: TAGC_EINVAL for world < 1, shard_numel
 * outside [1, 2^32), rho out of range, or a geometry needing TAGC_MAX_ROWS rows or more;
 * TAGC_ENOMEM. On error *l is left freed (safe to tagc_layout_free). Allocates (init time,
 * not the hot path); does not block otherwise. Deterministic: every rank computes the same
 * table from the same arguments. */
tagc_status tagc_layout_init(tagc_layout *l, int32_t world, int64_t shard_numel, double rho,
                             uint32_t seed);

/* tagc_layout_init with an explicit lane count (a power of two in [TAGC_LANES_MIN,
 * TAGC_LANES_MAX]; else TAGC_EINVAL): tests and benchmarks of one lane count. */
tagc_status tagc_layout_init_lanes(tagc_layout *l, int32_t world, int64_t shard_numel,
                                   int32_t lanes, double rho, uint32_t seed);

/* Geometry only: *rows = R for a shard of shard_numel elements in `lanes` lanes at
 * compression rho (the formula above). Errors: TAGC_EINVAL as tagc_layout_init_lanes. Pure,
 * no allocation. */
tagc_status tagc_layout_rows(int64_t shard_numel, int32_t lanes, double rho, int64_t *rows);

/* Releases the table; idempotent, accepts a zeroed or already freed layout. */
void tagc_layout_free(tagc_layout *l);

#ifdef __cplusplus
}
#endif

#endif
