/* Geometry of one compressed tensor range ("unit") and its count-sketch block hash table.
 *
 * A unit of W * shard_numel fp32 elements is split into W contiguous destination shards
 * (shard j = elements [j*shard_numel, (j+1)*shard_numel), owned by rank j). Every kernel
 * works on shards padded up to a multiple of TAGC_BLOCK (1024) elements; padding elements
 * are zero, never flagged in a bitmap, and never written back to caller arrays of
 * shard_numel elements.
 *
 * Buffer layouts used by all kernels (dest-major, so a reduce-scatter or all-to-all sends
 * part j to rank j):
 *   grad, residual   fp32 [W][shard_numel]             caller's flat gradient layout
 *   kept             fp32 [W][shard_padded]            sparsified values, zeros elsewhere
 *   bitmap           u64  [W][bitmap_words]            bit q of word w = element 64*w+q
 *   sketch           fp32 [W][sketch_cells]            cell (row r, lane t) at r*1024+t
 * An owner's global bitmap / summed sketch is the single-shard slice of those.
 *
 * Count sketch: block b (elements [1024b, 1024b+1024) of a shard) maps to 3 distinct rows
 * with signs; element 1024b+t lands in lane t of those rows, so the 1024 lanes are 1024
 * independent sketches sharing one hash. Rows come from tagc_block_hash (kernels/hash.h):
 *   r0 = range(h0, R); r1 = range(h1, R-1) skipping r0; r2 = range(h2, R-2) skipping both.
 * Two blocks whose row sets are equal would never peel in any lane where both are non-zero,
 * so tagc_layout_init re-hashes later duplicates (attempt = 1, 2, ...) until all triples
 * differ; the resulting table is stored in the layout and is the only thing the CUDA port
 * needs to copy to the device.
 *
 * Rows: R = max(ceil(G / rho), 3, smallest R with C(R,3) >= 4G), G = shard_padded / 1024,
 * and R < 2^21. */
#ifndef TAGC_KERNELS_LAYOUT_H
#define TAGC_KERNELS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TAGC_BLOCK 1024          /* lanes per sketch row = elements per block */
#define TAGC_MAX_ROWS (1 << 21)  /* sketch rows per shard (row ids pack in 21 bits) */
#define TAGC_ROW_SIGN 0x80000000u /* bit of a block_rows entry meaning sign -1 */
#define TAGC_ROW_MASK 0x001FFFFFu /* bits of a block_rows entry holding the row */

typedef struct tagc_layout {
  int32_t world;          /* W: destination shards (ranks) */
  uint32_t seed;          /* sketch hash seed (same on every rank) */
  double rho;             /* requested compression: blocks per row */
  int64_t shard_numel;    /* n: elements of one destination shard in caller arrays */
  int64_t shard_padded;   /* n rounded up to a multiple of TAGC_BLOCK */
  int64_t blocks;         /* G = shard_padded / TAGC_BLOCK */
  int64_t rows;           /* R: sketch rows per shard */
  int64_t bitmap_words;   /* uint64 words per shard bitmap = shard_padded / 64 */
  int64_t sketch_cells;   /* floats per shard sketch = rows * TAGC_BLOCK */
  uint32_t *block_rows;   /* owned, [blocks][3]: row | TAGC_ROW_SIGN when the sign is -1 */
} tagc_layout;

/* Fills *l for W shards of shard_numel elements at compression rho (blocks per sketch row;
 * any finite value in [0.25, 4096]) and hash seed, and builds the block-row table.
 * Errors: TAGC_EINVAL for world < 1, shard_numel outside [1, 2^32), rho out of range, or a geometry
 * needing TAGC_MAX_ROWS rows or more; TAGC_ENOMEM. On error *l is left freed (safe to
 * tagc_layout_free). Allocates (init time, not the hot path); does not block otherwise.
 * Deterministic: every rank computes the same table from the same arguments. */
tagc_status tagc_layout_init(tagc_layout *l, int32_t world, int64_t shard_numel, double rho,
                             uint32_t seed);

/* Geometry only: *rows = R for a shard of shard_numel elements at compression rho (the
 * formula above). Errors: TAGC_EINVAL as tagc_layout_init. Pure, no allocation. */
tagc_status tagc_layout_rows(int64_t shard_numel, double rho, int64_t *rows);

/* Releases the table; idempotent, accepts a zeroed or already freed layout. */
void tagc_layout_free(tagc_layout *l);

#ifdef __cplusplus
}
#endif

#endif
