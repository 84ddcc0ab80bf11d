/* rho advisor (ARCHITECTURE §7 step 5): how much the sketch may compress and stay lossless.
 *
 * Per lane, a shard's sketch is a 3-uniform hypergraph with R cells (rows) and m items (the
 * lane's set bits), load c = m / R. Peeling empties a random such hypergraph w.h.p. iff
 * c < c3 = 0.8185 (the 2-core threshold of random 3-uniform hypergraphs), but a finite
 * lane fails well below c3 (small stopping sets, and the threshold window narrows only like
 * R^-1/2), and a shard has up to 1024 lanes that must all succeed. Measured with the real kernels
 * (docs/compression.md, tagc_peel_table): the largest failure-free load was about 0.50 at
 * R = 128, 0.65 at R = 512, 0.70 at R = 1024-2048. The advisor targets
 *     c_target(R) = min(TAGC_PEEL_LOAD_MAX, TAGC_PEEL_LOAD_LIMIT - TAGC_PEEL_LOAD_SLOPE / sqrt(R))
 * (0.42 at R = 128, 0.62 at 512, 0.68 at 1024, 0.75 at 4096) and returns the largest rho
 * whose R = ceil(G / rho) satisfies m <= c_target(R) * R with m = density * G: the smallest
 * such R solves LIMIT*R - SLOPE*sqrt(R) = m in closed form.
 *
 * Pass the peak lane density (tagc_bitmap_lane_max_cpu / G), not the mean: even with the
 * per-block lane rotation (kernels/hash.h) real gradients make some lanes denser than
 * others, and for i.i.d. bitmaps the two differ by a few sigma. */
#ifndef TAGC_KERNELS_RHO_H
#define TAGC_KERNELS_RHO_H

#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TAGC_PEEL_LOAD_LIMIT 0.8185 /* asymptotic 3-hypergraph peeling threshold c3 */
#define TAGC_PEEL_LOAD_SLOPE 4.5    /* finite-size margin: c3 - SLOPE / sqrt(R) */
#define TAGC_PEEL_LOAD_MAX 0.78     /* never closer to c3 than this, whatever R */
#define TAGC_RHO_MIN 0.25
#define TAGC_RHO_MAX 4096.0

/* Largest rho for which a shard of shard_numel elements in `lanes` lanes (kernels/layout.h;
 * the engine's is tagc_layout_lanes(shard_numel)) whose densest lane has density
 * global_density (set bits of the ORed bitmap per item slot of that lane, in [0, 1]) peels
 * losslessly with the margin above. rho < 1 means the sketch is larger than the shard:
 * compression does not pay, send the unit uncompressed. Errors: TAGC_EINVAL (density NaN or
 * outside [0,1], shard_numel < 1, lanes not a power of two in [32, 1024], NULL). Pure
 * function, thread-safe, non-blocking. */
tagc_status tagc_rho_advise(double global_density, int64_t shard_numel, int32_t lanes,
                            double *rho);

#ifdef __cplusplus
}
#endif

#endif
