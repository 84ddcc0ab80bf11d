/* The gradient codec: turns the local gradient of one segment on every rank into the
 * owner's reduced shard, per the segment's compression policy (engine/policy.h).
 *
 * A segment of `len` elements is cut into W shards of S elements (S * W >= len; the caller
 * chooses S, a multiple of the compression kernels' 1024-element block); rank r owns
 * [r*S, (r+1)*S). Reducing a segment leaves in this rank's shard the sum over ranks of their
 * local gradients (policy none: an fp32 reduce-scatter; bf16: bf16 on the wire), or for
 * tagc the TAGC-2 estimate of that sum: fused sparsify with error feedback -> OR
 * reduce-scatter of the bitmaps -> count-sketch encode -> one reduce-scatter of all W
 * sketches -> owner decode (docs/compression.md). What a tagc segment does not send stays in
 * its error-feedback residual for the next step. rho is the policy's, or chosen each step
 * from the densest lane all ranks measured at the previous step; when the sketch would not
 * pay the segment is sent dense with its residual and probed again every few steps.
 *
 * With world size 1 (comm NULL) nothing is sent: the shard is the gradient (plus a residual
 * loaded from a checkpoint, folded in once).
 *
 * Device memory: segment buffers and the codec's scratch are memory of the codec's device
 * (engine/device.h). A reduction runs its kernels and copies on the lane it is given and its
 * collectives on the communicator; it synchronises the lane before each collective, and the
 * caller synchronises the lane before it reads the shard.
 *
 * Threading: one thread at a time per codec (the engine's communication thread during a
 * step, the compute thread between steps); the segments of a codec share its scratch. */
#ifndef TAGC_ENGINE_GRAD_CODEC_H
#define TAGC_ENGINE_GRAD_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "common/encoding.h"
#include "common/status.h"
#include "engine/device.h"
#include "engine/policy.h"

typedef struct tagc_grad_codec_config {
  tagc_device *device; /* borrowed; outlives the codec */
  tagc_comm *comm;     /* borrowed; NULL for world size 1 */
  double op_timeout_s; /* deadline of each collective */
  int check_feedback;  /* test hook: sum the error-feedback mass (CPU device only) */
} tagc_grad_codec_config;

/* The codec of one engine: settings and the scratch its segments share. */
typedef struct tagc_grad_codec tagc_grad_codec;

/* The codec state of one segment: its policy, error-feedback residual and sketch layout. */
typedef struct tagc_grad_segment tagc_grad_segment;

/* What one reduction of a segment measured on this rank. */
typedef struct tagc_grad_stats {
  int feedback;         /* a segment with error feedback (its policy allows the sketch or int8)
                           and peers; the fields below are 0 otherwise */
  tagc_encoding encoding; /* the wire used this step (a dense one when the sketch would not pay) */
  double rho;           /* rho of the sketch sent; 0 when dense */
  int64_t global_bits;  /* bits set in this rank's ORed bitmap shard; -1 when not measured */
  double lane_density;  /* items in the densest lane of that shard / blocks; 0 if not measured */
  int64_t estimated;    /* elements of this rank's shard left to the estimate (not peeled) */
  double codec_s;       /* seconds in the sketch kernels this step (0 when dense) */
  int64_t nonfinite;    /* sketched tagc segments: inf/NaN values in this rank's gradient +
                           residual (this rank then sent zeros; the engine skips the step).
                           Dense paths carry such values to the owner's shard instead. */
} tagc_grad_stats;

/* Creates a codec (no device memory yet: scratch grows on demand). Errors: TAGC_ENOMEM,
 * TAGC_EUNSUPPORTED (check_feedback on a CUDA device: the check reads buffers on the host).
 * *out is NULL on failure. */
tagc_status tagc_grad_codec_new(const tagc_grad_codec_config *cfg, tagc_grad_codec **out);

/* Frees the codec's scratch (waiting for pending device work); NULL is fine. Free its
 * segments first. */
void tagc_grad_codec_free(tagc_grad_codec *c);

/* Creates the state of a segment of len elements in shards of S under policy pol. A tagc
 * segment with peers gets its residual (W * S floats of device memory, zeroed). hash_seed
 * seeds the sketch hashes: the same on every rank for one segment, and stable across world
 * sizes and restarts. Errors: TAGC_ENOMEM (host or device). *out is NULL on failure. */
tagc_status tagc_grad_segment_new(tagc_grad_codec *c, const tagc_role_policy *pol, size_t len,
                                  size_t S, uint32_t hash_seed, tagc_grad_segment **out);

/* Frees a segment's residual and layout; NULL is fine. */
void tagc_grad_segment_free(tagc_grad_codec *c, tagc_grad_segment *s);

/* Collective over the codec's communicator (every rank calls it for the same segments in the
 * same order). Reduces the segment's local gradient `grad` (len floats of device memory, not
 * modified) into this rank's shard `shard` (S floats). `work` is W * S floats of device
 * memory the call may overwrite. `step` is the optimizer step (it decides the density
 * probes). On return the lane may still run work; *stats is this step's measurement.
 * The residual does not change here: the reduction stages the new one, and
 * tagc_grad_segment_commit applies or drops it once every rank knows whether the step is
 * applied (a step skipped for a non-finite gradient leaves it bit-identical).
 * Errors: communication failures (TAGC_ETIMEDOUT, TAGC_EPEER, TAGC_EABORTED), TAGC_ENOMEM
 * (growing the scratch), device errors; nothing is staged then. A non-finite gradient is no
 * error: see stats->nonfinite. */
tagc_status tagc_grad_reduce(tagc_grad_codec *c, tagc_grad_segment *s, tagc_lane lane,
                             int64_t step, const float *grad, float *shard, float *work,
                             tagc_grad_stats *stats);

/* One segment's part of a unit's reduction (tagc_grad_reduce_unit): the arguments
 * tagc_grad_reduce takes for it. */
typedef struct tagc_grad_job {
  tagc_grad_segment *seg;
  const float *grad;      /* len floats of device memory, not modified */
  float *shard;           /* S floats of device memory */
  tagc_grad_stats *stats; /* this step's measurement */
} tagc_grad_job;

/* Collective: reduces the n segments of one unit with the results (shards, staged residuals,
 * stats) of n tagc_grad_reduce calls, bit for bit, except that the segments on the int8 wire
 * this step share one all-to-all: each rank's chunks for rank j of all of them travel as one
 * message (in job order), so a unit makes one int8 exchange however many segments it has. The
 * other segments are reduced after it, one by one in job order. `work` as for
 * tagc_grad_reduce, sized for the largest segment. Every rank passes the same segments in the
 * same order. Errors: as tagc_grad_reduce. */
tagc_status tagc_grad_reduce_unit(tagc_grad_codec *c, const tagc_grad_job *jobs, int n,
                                  tagc_lane lane, int64_t step, float *work);

/* After the step's reductions (the lane that ran them idle): apply = 1 makes the residual
 * the last tagc_grad_reduce staged the segment's residual; apply = 0 drops it, keeping the
 * residual of before the step bit for bit. The tagc sketch path stages into a second
 * residual-sized buffer (allocated at its first use), so that dropping costs nothing.
 * Errors: device errors. */
tagc_status tagc_grad_segment_commit(tagc_grad_codec *c, tagc_grad_segment *s, tagc_lane lane,
                                     int apply);

/* The densest lane over all ranks at the last sketched step (the maximum of their
 * lane_density): what chooses the next rho. All ranks must set the same value. */
void tagc_grad_segment_set_density_seen(tagc_grad_segment *s, double lane_density);
double tagc_grad_segment_density_seen(const tagc_grad_segment *s);

/* rho of the segment's current sketch layout (0 = none built yet). */
double tagc_grad_segment_rho(const tagc_grad_segment *s);

/* The rho the advisor gives for the density seen last (0 when nothing was measured yet, the
 * sketch would not pay, or the policy never sketches). */
double tagc_grad_segment_advised_rho(const tagc_grad_segment *s);

/* The wire of a segment with error feedback: the sketch (a fixed tagc policy's), or dense
 * bf16 / fp32 / int8 with the residual folded in, still probing the density with a sketch
 * every TAGC_PROBE_EVERY steps when the policy may sketch. Adaptive segments (policy `auto`)
 * start on bf16; the engine moves them (engine/auto_policy.h). All ranks must set the same. */
void tagc_grad_segment_set_encoding(tagc_grad_segment *s, tagc_encoding enc);
tagc_encoding tagc_grad_segment_encoding(const tagc_grad_segment *s);

/* The error-feedback sums of the reductions since the last call, then reset: [0] the raw
 * gradients plus old residuals, [1] what was kept (sent) plus the new residuals, [2] the sum
 * of the absolute values of [0]'s terms. Zeros unless check_feedback. */
void tagc_grad_codec_take_feedback(tagc_grad_codec *c, double sums[3]);

/* ---- checkpoints ---- */

/* Collective, for a snapshot. Replaces each rank's residual by the summed residual of its own
 * shard (zero elsewhere): the same un-sent mass, storable at 1x parameter size. No-op for a
 * segment without residual or without peers. `work` as in tagc_grad_reduce. Errors:
 * communication failures, device errors. */
tagc_status tagc_grad_segment_canonicalise(tagc_grad_codec *c, tagc_grad_segment *s,
                                           tagc_lane lane, float *work);

/* This rank's shard of the residual (S floats of device memory, borrowed), or NULL when the
 * segment holds no residual. */
float *tagc_grad_segment_residual_shard(const tagc_grad_codec *c, const tagc_grad_segment *s);

/* The whole residual (W * S floats of device memory, row j destined to rank j; borrowed), or
 * NULL when the segment holds none. It moves between steps (staging swaps buffers). */
const float *tagc_grad_segment_residual(const tagc_grad_codec *c, const tagc_grad_segment *s);

/* For a load: zeroes the whole residual of a tagc segment (allocating it first when it has
 * none: also with world size 1, where the next reduction folds it in) and returns in *shard
 * this rank's shard of it to fill; *shard is NULL for a policy that keeps no residual.
 * Errors: TAGC_ENOMEM, device errors. */
tagc_status tagc_grad_segment_reset_residual(tagc_grad_codec *c, tagc_grad_segment *s,
                                             tagc_lane lane, float **shard);

#endif
