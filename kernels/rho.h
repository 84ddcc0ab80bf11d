/* rho advisor (ARCHITECTURE §7 step 5): how much the sketch may compress and stay lossless.
 *
 * Per lane, a shard's sketch is a random 3-uniform hypergraph with R cells (rows) and, at
 * global density d, about d*G items (G = blocks), so its load is c = d*G/R = d*rho.
 * Peeling empties such a hypergraph with high probability iff c < c3 = 0.8185 (the 2-core
 * threshold of random 3-uniform hypergraphs); near c3 finite lanes fail often, and a shard
 * has 1024 lanes that must all succeed. The advisor therefore targets a load
 *     c_target(R) = TAGC_PEEL_LOAD_TARGET - TAGC_PEEL_LOAD_SLOPE / sqrt(R)
 * (the transition window of a finite 2-core shrinks like R^-1/2; constants set from the
 * measured unpeeled-fraction table in docs/compression.md) and returns
 *     rho = c_target(R) / d   with R = ceil(G / rho)   (solved by fixed-point iteration),
 * clamped to [TAGC_RHO_MIN, TAGC_RHO_MAX]. */
#ifndef TAGC_KERNELS_RHO_H
#define TAGC_KERNELS_RHO_H

#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TAGC_PEEL_LOAD_LIMIT 0.8185  /* asymptotic 3-hypergraph peeling threshold */
#define TAGC_PEEL_LOAD_TARGET 0.75   /* asymptotic target load (margin 0.07 below c3) */
#define TAGC_PEEL_LOAD_SLOPE 1.0     /* finite-size margin coefficient on 1/sqrt(R) */
#define TAGC_RHO_MIN 0.25
#define TAGC_RHO_MAX 4096.0

/* Largest rho for which a shard of shard_numel elements at global density
 * global_density (fraction of elements set in the ORed bitmap, in [0, 1]) peels losslessly
 * with the margin above. rho < 1 means the sketch is larger than the shard: compression
 * does not pay, send the unit uncompressed. Errors: TAGC_EINVAL (density NaN or outside
 * [0,1], shard_numel < 1, NULL). Pure function, thread-safe, non-blocking. */
tagc_status tagc_rho_advise(double global_density, int64_t shard_numel, double *rho);

#ifdef __cplusplus
}
#endif

#endif
