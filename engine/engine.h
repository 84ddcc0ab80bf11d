/* The sharded (FSDP / ZeRO-3 style) training engine of one rank.
 *
 * The parameter arena is cut into segments: within each FSDP unit, a maximal run of tensors
 * whose roles share one compression policy. Each segment of `len` elements is split in W
 * contiguous shards of S elements (S = ceil(len / W), rounded up to the 1024-element block of
 * the compression kernels), the last ones padded with zeros. This rank keeps, between steps,
 * only its shard of each segment: fp32 parameters, AdamW moments, and for tagc segments the
 * error-feedback residual of its local gradient.
 *
 * A step: for each micro-batch, forward then backward, unit by unit; a unit's parameters are
 * all-gathered just before use (the next unit is prefetched) and dropped after; on the last
 * micro-batch each unit's gradient is handed to the communication thread as soon as its
 * backward is done (reduce-scatter, compressed per policy) while the backward of the previous
 * unit computes. Then the global gradient norm (one all-gather of a scalar), clipping, and
 * AdamW on the local shards.
 *
 * With world size 1 (comm NULL) the same code runs without communication: every policy is
 * then "none", and the engine is the single-process trainer.
 *
 * Device: the same code runs on the CPU or on one CUDA device (engine/device.h): shards,
 * moments, residuals, the gradient arena and the gathered unit parameters are then device
 * memory, the model, AdamW and the compression kernels run on the device, and the
 * communicator must be NCCL on that device. The compute thread enqueues a unit's backward on
 * the compute stream and records a mark; the communication thread waits for that mark (the
 * compute thread never blocks for it), runs the unit's compression kernels on its own stream
 * and the reduce-scatter on the communicator's, so a unit's reduce-scatter overlaps the
 * backward of the units before it. The host synchronises with the compute stream once per
 * step (the loss and the gradient norm).
 *
 * Threading: one caller thread; the engine owns one communication thread when comm != NULL. */
#ifndef TAGC_ENGINE_ENGINE_H
#define TAGC_ENGINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "common/encoding.h"
#include "common/status.h"
#include "model/adamw.h"
#include "data/data.h"
#include "engine/device.h"
#include "model/model.h"
#include "engine/policy.h"

typedef struct tagc_engine_config {
  const tagc_model_layout *layout; /* borrowed; outlives the engine */
  tagc_comm *comm;                 /* borrowed; NULL for world size 1 */
  tagc_device *device;             /* borrowed; NULL = the CPU (the engine opens its own) */
  tagc_compress_policy policy;
  tagc_adamw_config adam;
  int64_t batch;                   /* global batch in sequences */
  int micro_batch;                 /* sequences per forward/backward on this rank (>= 1) */
  uint64_t seed;                   /* init and sampler */
  const float *init_params;        /* borrowed, layout->n_params floats, only read by
                                      tagc_engine_new: the initial parameters instead of the
                                      seed's; NULL: from the seed */
  double op_timeout_s;             /* deadline of each collective */
  int check_feedback;              /* test hook: measure error-feedback mass conservation */
  tagc_encoding gather;            /* the parameter all-gathers' encoding (engine/gather_codec.h):
                                      fp32, bf16 (mixed-precision FSDP: the model computes on
                                      bf16-rounded weights) or int8 (blockwise, ZeRO++ qwZ
                                      style); the master shards stay fp32. tagc_policy_gather()
                                      fills it and gather_auto from --gather */
  int gather_auto;                 /* with adaptive (--compress auto) roles: the all-gathers
                                      move among fp32, bf16 and int8 with the measured link
                                      (auto_policy.h), starting from `gather` */
  double link_rate;                /* > 0: the link rate (bytes/s) the auto choices assume
                                      instead of the measured one */
  double op_delay_s;               /* fault injection: delay before every collective task */
  int reshard_after_forward;       /* 1: ZeRO-3, a unit is gathered before forward and again
                                      before backward; 0: gathered units stay for the whole step
                                      (one all-gather per unit per step, full parameters held) */
  int reshard_auto;                /* with reshard_after_forward and adaptive (--compress auto)
                                      roles: after the first step, stop resharding when every
                                      rank holds all gathered units within max_gather_bytes
                                      (auto_policy.h); decided once */
  double max_gather_bytes;         /* the budget of reshard_auto; <= 0: a fraction of the
                                      device's memory (auto_policy.h) */
  int64_t compress_warmup;         /* steps 0 .. compress_warmup-1 send every tagc segment
                                      dense (bf16, nothing kept back); the sketch starts after
                                      (error feedback through the first steps' large, fast-
                                      changing gradients costs loss; PowerSGD's hook also
                                      starts after a dense warm-up) */
} tagc_engine_config;

typedef struct tagc_engine tagc_engine;

/* Per-step figures of this rank. */
typedef struct tagc_step_stats {
  double loss;            /* mean over the global batch */
  double grad_norm;       /* global, before clipping */
  double lr;
  double step_s;
  double comm_s;          /* time the communication thread spent in collectives */
  double exposed_comm_s;  /* time the compute thread waited for communication */
  uint64_t bytes_sent;    /* payload bytes this rank sent during the step */
  uint64_t bytes_recv;
  double global_density;  /* tagc segments: non-zeros of the ORed index / elements */
  double rho;             /* tagc segments sent as sketches: their rho, weighted by elements
                             (0 when none was) */
  double sketch_coverage; /* fraction of the tagc segments' elements sent as sketches (the rest
                             went dense: the sketch would not have paid) */
  double path_fraction[TAGC_ENC_COUNT]; /* of all gradient elements: sent as sketches, dense
                              bf16, dense fp32, dense int8 (indexed by tagc_encoding) */
  const char *gather;     /* precision of this step's compute all-gathers: "fp32", "bf16", "int8" */
  int reshard;            /* 1: this step gathered units again for backward (ZeRO-3) */
  uint64_t unpeeled;      /* tagc segments: elements left to the estimate, all ranks */
  uint64_t tagc_elements; /* tagc segments: elements set in the ORed bitmaps, all ranks */
  double feedback_error;  /* check_feedback: |sum(grad + old residual) - sum(kept + new
                             residual)| / sum of magnitudes, over all ranks; 0 when off */
  int nonfinite;          /* 1: a rank saw a non-finite loss or gradient and every rank
                             skipped the step (parameters, moments, residuals unchanged) */
  int nonfinite_ranks;    /* how many ranks reported one (0 when only the sums overflowed) */
  /* set by the caller of tagc_engine_mirror_push for the step (worker/run.c): its seconds
     (also counted in step_s) and the image bytes sent (not in bytes_sent) */
  double mirror_s;
  uint64_t mirror_bytes;
  int save_due;           /* some rank asked for a save at this step (tagc_engine_request_save) */
  int copy_due;           /* some rank asked for an in-memory copy (tagc_engine_request_copy) */
  int stop_due;           /* some rank asked that the job stop after it (tagc_engine_request_stop) */
  /* timing of the ranks (from the step's scalar exchange; nothing of the math reads them) */
  double compute_s;       /* this rank's compute seconds: forward, backward, the codec's work
                             on the compute thread and the previous step's optimizer, without
                             the waits on communication (and so on slower peers) */
  const double *compute_ranks; /* [world]: every rank's compute_s (borrowed from the engine,
                             valid until its next step) */
  double clock_s;         /* the largest of the ranks' monotonic clocks at the exchange: the
                             same on every rank */
} tagc_step_stats;

/* Creates the engine: layout of segments, shards, buffers, and the parameters initialised
 * from cfg->seed (every rank computes the same full init and keeps its shard) or copied from
 * cfg->init_params (this rank's shard of it). Errors:
 * TAGC_EINVAL, TAGC_ENOMEM (host or device memory: the caller's OOM path),
 * TAGC_EUNSUPPORTED (check_feedback on a CUDA device). */
tagc_status tagc_engine_new(const tagc_engine_config *cfg, tagc_engine **out);

/* Stops the communication thread and frees everything; NULL is fine. Aborts nothing: call
 * tagc_comm_abort() first if a collective may hang. */
void tagc_engine_free(tagc_engine *e);

/* One optimizer step on global batch `step` (0-based) of the corpus: this rank trains on its
 * slice of the batch. A non-finite loss or gradient on any rank (one flag in the step's
 * scalar all-gather) is no error: every rank skips the step alike, leaving parameters, AdamW
 * moments and error-feedback residuals bit-identical, and sets stats->nonfinite.
 * Errors: communication failures (TAGC_ETIMEDOUT, TAGC_EPEER, TAGC_EABORTED; the step's
 * partial gradients are discarded and the parameters unchanged), TAGC_ENOMEM. */
tagc_status tagc_engine_step(tagc_engine *e, const tagc_corpus *corpus, int64_t step,
                             tagc_step_stats *stats);

/* Mean validation loss over n_windows fixed windows, split across ranks. */
tagc_status tagc_engine_eval(tagc_engine *e, const tagc_corpus *corpus, int64_t n_windows,
                             double *val_loss);

/* Gathers the full parameter arena (n_params floats) into out on every rank (collective). */
tagc_status tagc_engine_gather_params(tagc_engine *e, float *out);

/* Fault "nan": puts a NaN into this rank's local gradient at step `step` (each segment's
 * first element, before its reduction), the next time that step runs only; -1 disarms.
 * Caller thread, between steps. */
void tagc_engine_inject_nan(tagc_engine *e, int64_t step);

/* Asks, for the next step only, that every rank be told (tagc_step_stats.save_due) that this
 * rank wants a checkpoint after it: the wall-clock interval, decided alike by all ranks
 * through the step's scalar all-gather. */
void tagc_engine_request_save(tagc_engine *e, int due);

/* The same for an in-memory copy after the next step (tagc_step_stats.copy_due): a rank that
 * is leaving asks for one, so that its state of that step is with its buddy. */
void tagc_engine_request_copy(tagc_engine *e, int due);

/* The same for stopping after the next step (tagc_step_stats.stop_due): every member of the
 * job is leaving, so all ranks end at one step boundary (worker/run.c, suspend). */
void tagc_engine_request_stop(tagc_engine *e, int due);

/* Changes the injected delay before each collective task (fault "slow"); any thread. */
void tagc_engine_set_op_delay(tagc_engine *e, double seconds);

int tagc_engine_world_size(const tagc_engine *e);
int tagc_engine_rank(const tagc_engine *e);

/* Number of segments, and a description of segment i for metrics and checkpoints. */
typedef struct tagc_segment_info {
  int unit;
  size_t offset;     /* arena offset of the segment */
  size_t len;        /* elements */
  size_t shard;      /* S: elements per rank, padded */
  tagc_role_policy policy;
} tagc_segment_info;

int tagc_engine_n_segments(const tagc_engine *e);
void tagc_engine_segment_info(const tagc_engine *e, int i, tagc_segment_info *out);

/* ---- checkpoints (the checkpoint units are the engine's segments) ---- */

#define TAGC_ENGINE_STREAMS 4 /* param, adam_m, adam_v, residual */

/* Describes the checkpoint content of this engine: segment names and sizes (the same for
 * every world size), the four stream names, and this rank's range of each segment. The
 * layout's arrays are borrowed from the engine; ranges must hold n_segments entries. */
void tagc_engine_ckpt_layout(const tagc_engine *e, tagc_ckpt_layout *layout,
                             tagc_ckpt_range *ranges);

/* Collective. Canonicalises the error-feedback residuals (reduce-scatter: each rank then
 * holds the summed residual of its own shard and zero elsewhere — the same un-sent mass, now
 * storable at 1x parameter size; a run that saves and one that resumes from the save do the
 * same math) and copies this rank's shards into views[seg * TAGC_ENGINE_STREAMS + stream].
 * Errors: communication failures. */
tagc_status tagc_engine_snapshot(tagc_engine *e, float *const *views);

/* Loads parameters, moments and residual shards from an open checkpoint (any saved world
 * size) into this rank's shards. TAGC_ECORRUPT when the checkpoint's segments do not match
 * this model and policy. */
tagc_status tagc_engine_load(tagc_engine *e, tagc_ckpt_reader *rd);

/* Test hook (--check-rebuild): compares this rank's shards (parameters, moments, residual
 * shard) bit for bit with what tagc_engine_load would read from rd; *compared floats, of
 * which *mismatched differ (first: the first difference). Errors: the reader's. */
tagc_status tagc_engine_compare(tagc_engine *e, tagc_ckpt_reader *rd, int64_t *compared,
                                int64_t *mismatched, char *first, size_t first_cap);

/* Compression state for the manifest (new reference) and its restoration. */
json_t *tagc_engine_compression_state(const tagc_engine *e);
tagc_status tagc_engine_set_compression_state(tagc_engine *e, const json_t *state);

/* In-memory redundancy (engine/mirror.h). Collective, with no step running, after step
 * `step` of generation `gen` was applied (and after a checkpoint save of that step, so that
 * the copy holds what the checkpoint holds): copies this rank's state into m and, for each of
 * the `copies` offsets shifts[c] (tagc_mirror_shifts: distinct, 1 <= shift < W), sends it to
 * rank + shift, receiving rank - shift's. Any shifts at W = 1. Errors: communication
 * failures (the received slot stays invalid), TAGC_ENOMEM, TAGC_EPEER for a malformed image,
 * TAGC_EINVAL for bad offsets or more copies than W - 1 or TAGC_MIRROR_MAX_COPIES. */
struct tagc_mirror;
tagc_status tagc_engine_mirror_push(tagc_engine *e, struct tagc_mirror *m, int64_t gen,
                                    int64_t step, const int *shifts, int copies);

/* Collective, in a new engine (any world size), before its first step: rebuilds its shards,
 * residuals and compression state from the images the ranks hold (tagc_mirror_choose), as a
 * checkpoint of that step would load them. TAGC_OK with *step the step rebuilt; TAGC_ENOTFOUND
 * (no detail set) when no complete set of images of a step >= min_step survives: *choice
 * then says which rank's image of which step was lost (lost_rank, or -1 when there were no
 * images at all); the engine is then untouched. Other errors: communication failures,
 * TAGC_ENOMEM, TAGC_EPEER for a malformed compression state. */
struct tagc_mirror_choice;
tagc_status tagc_engine_mirror_restore(tagc_engine *e, struct tagc_mirror *m, int64_t min_step,
                                       struct tagc_mirror_choice *choice, int64_t *step);

#endif
