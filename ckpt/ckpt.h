/* Sharded checkpoints: one file per rank plus a manifest written last (docs/checkpoint-format.md).
 *
 * The library knows nothing about models. A checkpoint holds, for each FSDP unit, a fixed set
 * of named fp32 "streams" (e.g. param, adam_m, adam_v, residual), each a global flat array of
 * the unit's numel elements. At save time rank r owns element range [lo, hi) of every unit
 * (the caller decides the ranges; hi may run past numel for padded shards, the padding is not
 * stored). At load time any process can read any [lo, hi) of any unit and stream: the reader
 * pulls exactly the overlapping pieces from the saved ranks' files with positional reads, so a
 * checkpoint saved at world size W loads at any W'.
 *
 * Commit protocol (every rank, then rank 0):
 *   tagc_ckpt_write_shard()   each rank: step-<s>.tmp/rank-<r>.bin.tmp, fsync, rename, fsync dir
 *   barrier                   the caller's collective barrier (all shards durable)
 *   tagc_ckpt_commit()        rank 0: check every shard, sealed manifest.json (temp + fsync +
 *                             rename), rename (or exchange) step-<s>.tmp -> step-<s>, fsync
 *                             root, LATEST by rename
 * tagc_ckpt_save() runs the three in order; ckpt_saver.h runs it on a background thread.
 *
 * Paths: `dir` is the checkpoint root (holding step-<s>/ directories and LATEST). All strings
 * passed in are borrowed for the duration of the call. Functions here are thread-safe as long
 * as two threads do not use the same reader at once. */
#ifndef TAGC_CKPT_CKPT_H
#define TAGC_CKPT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/status.h"

#define TAGC_CKPT_FORMAT_VERSION 1
#define TAGC_CKPT_MAX_STREAMS 16

/* Half-open element range [lo, hi) of one unit. */
typedef struct tagc_ckpt_range {
  int64_t lo, hi;
} tagc_ckpt_range;

/* What a checkpoint holds: units (name, element count) and the stream names stored for every
 * unit. All pointers borrowed. */
typedef struct tagc_ckpt_layout {
  int n_units;
  const char *const *unit_names; /* [n_units] */
  const int64_t *unit_numel;     /* [n_units], >= 0 */
  int n_streams;                 /* 1 .. TAGC_CKPT_MAX_STREAMS */
  const char *const *stream_names; /* [n_streams], e.g. "param", "adam_m", "adam_v", "residual" */
} tagc_ckpt_layout;

/* Opaque caller state stored in the manifest (each may be NULL = JSON null). Borrowed. */
typedef struct tagc_ckpt_meta {
  const json_t *model;       /* model config */
  const json_t *tensors;     /* tensor table: per unit, each tensor's name, shape, offset */
  const json_t *sampler;     /* data position */
  const json_t *rng;         /* RNG state */
  const json_t *compression; /* rho per unit, density history, ... */
} tagc_ckpt_meta;

/* Collective barrier supplied by the caller: returns TAGC_OK once every rank of the save has
 * called it for this step, an error (e.g. TAGC_ETIMEDOUT, TAGC_EABORTED) otherwise. */
typedef tagc_status (*tagc_ckpt_barrier_fn)(void *arg, int64_t step);

/* What rank 0 learns when a checkpoint commits (for the etcd record). */
typedef struct tagc_ckpt_committed {
  int64_t step;
  int world_size;
  int64_t total_bytes;       /* sum of the shard files */
  uint32_t manifest_crc32c;  /* CRC32C of manifest.json's bytes */
  char path[4096];           /* <dir>/step-<step> */
} tagc_ckpt_committed;

/* Called on rank 0 after a checkpoint committed (e.g. to record it in etcd). */
typedef tagc_status (*tagc_ckpt_commit_fn)(void *arg, const tagc_ckpt_committed *committed);

/* Everything a rank needs to save repeatedly. Borrowed by tagc_ckpt_save(); copied by
 * tagc_ckpt_saver_create(). */
typedef struct tagc_ckpt_writer_config {
  const char *dir;                /* checkpoint root; created if missing */
  int rank, world_size;
  tagc_ckpt_layout layout;
  const tagc_ckpt_range *ranges;  /* this rank's [n_units] ranges */
  tagc_ckpt_barrier_fn barrier;   /* required when world_size > 1; may be NULL for 1 */
  void *barrier_arg;
  int keep_last;                  /* retention after each commit: keep the newest K ... */
  int keep_every;                 /* ... and every step divisible by M (0 = none); K <= 0: keep all */
  tagc_ckpt_commit_fn on_commit;  /* rank 0, after commit and retention; may be NULL */
  void *on_commit_arg;
} tagc_ckpt_writer_config;

/* The paths of a checkpoint root `dir`, named in this one place:
 *   tagc_ckpt_step_path    <dir>/step-<step>, or <dir>/step-<step>.tmp when tmp (a save in
 *                          progress: shards arrive there before the commit renames it)
 *   tagc_ckpt_shard_path   <that directory>/rank-<rank, 5 digits>.bin, rank's shard file
 * into buf[cap]. TAGC_EINVAL when the path does not fit. Pure; any thread. */
tagc_status tagc_ckpt_step_path(const char *dir, int64_t step, int tmp, char *buf, size_t cap);
tagc_status tagc_ckpt_shard_path(const char *dir, int64_t step, int rank, int tmp, char *buf,
                                 size_t cap);

/* Elements of a unit that rank stores for range r: [lo, min(hi, numel)), empty when lo >= numel. */
int64_t tagc_ckpt_range_count(tagc_ckpt_range r, int64_t numel);

/* Writes this rank's shard of step `step` as <dir>/step-<step>.tmp/rank-<rank>.bin (temporary
 * name, fsync, rename, fsync of the directory), so that on return it is durable.
 * data[u * n_streams + s] points at element ranges[u].lo of stream s of unit u and holds
 * tagc_ckpt_range_count(ranges[u], numel[u]) floats (may be NULL when that count is 0).
 * Errors: TAGC_EINVAL (bad layout, ranges or rank), TAGC_EIO (with path and errno text).
 * Blocks on file I/O. Fault points after-open, mid-write, before-fsync, after-shard. */
tagc_status tagc_ckpt_write_shard(const char *dir, int64_t step, int rank, int world_size,
                                  const tagc_ckpt_layout *layout, const tagc_ckpt_range *ranges,
                                  const float *const *data);

/* Rank 0, after the barrier: checks that the W shard files of step-<step>.tmp exist and are
 * complete (header, size, trailer) and that their ranges tile every unit, then writes
 * manifest.json with its own checksum (temp + fsync + rename), renames the directory to
 * step-<step> (a committed directory of the same step is replaced in one atomic exchange),
 * fsyncs the root and points LATEST at it (temp + fsync + rename). `out` may be NULL.
 * Errors: TAGC_ENOTFOUND (missing shard), TAGC_ECORRUPT (bad shard), TAGC_EINVAL, TAGC_EIO.
 * Fault points before-manifest, before-rename, replacing, before-latest. */
tagc_status tagc_ckpt_commit(const char *dir, int64_t step, int world_size,
                             const tagc_ckpt_layout *layout, const tagc_ckpt_meta *meta,
                             tagc_ckpt_committed *out);

/* One synchronous save: write_shard, barrier, and on rank 0 commit, retention (a failure is
 * logged, not returned) and cfg->on_commit (its failure is returned). `meta` and `out` are
 * used on rank 0 only (either may be NULL). Other ranks return once the barrier passed; they
 * do not learn whether rank 0's commit succeeded. When the barrier or the commit fails, rank
 * 0 removes step-<step>.tmp. Blocks; calls cfg->barrier and cfg->on_commit on the calling
 * thread. */
tagc_status tagc_ckpt_save(const tagc_ckpt_writer_config *cfg, int64_t step,
                           const float *const *data, const tagc_ckpt_meta *meta,
                           tagc_ckpt_committed *out);

/* Retention: deletes committed checkpoints that are neither among the newest keep_last nor
 * a multiple of keep_every, and leftover step-*.tmp directories; never touches the newest
 * valid checkpoint (quick verification) nor anything newer than it. keep_last <= 0 keeps all.
 * *n_removed (may be NULL) gets the number of directories removed. Rank 0 only. */
tagc_status tagc_ckpt_retain(const char *dir, int keep_last, int keep_every, int *n_removed);

/* Removes every step-*.tmp directory under dir (saves that never committed, or the old copy
 * of a replaced step-<s>) and every step-*.replaced one (left by a crash during a replacement
 * where the file system cannot exchange names). For rank 0 at start or resume, before any
 * rank saves: a leftover shard of an abandoned attempt at a step could otherwise satisfy a
 * file-based barrier of a new attempt at the same step. *n_removed (may be NULL) gets the
 * count. */
tagc_status tagc_ckpt_remove_partial(const char *dir, int *n_removed);

/* ---- loading ---- */

typedef enum tagc_ckpt_verify {
  TAGC_CKPT_VERIFY_MANIFEST = 0, /* manifest (and its checksum) only; each file's header is checked on first read */
  TAGC_CKPT_VERIFY_QUICK = 1,    /* + every file: size, header, trailer CRC matches the manifest */
  TAGC_CKPT_VERIFY_FULL = 2      /* + every file read whole and its CRC32C recomputed */
} tagc_ckpt_verify;

typedef struct tagc_ckpt_reader tagc_ckpt_reader;

/* Opens the committed checkpoint directory step_dir and verifies it at `level`.
 * The manifest's own checksum is checked first (version 1 manifests, written before it
 * existed, have none). Errors: TAGC_ENOTFOUND (no manifest), TAGC_EPROTO (malformed manifest
 * JSON), TAGC_ECORRUPT (what is wrong, naming the file), TAGC_EIO, TAGC_ENOMEM. */
tagc_status tagc_ckpt_open(const char *step_dir, tagc_ckpt_verify level, tagc_ckpt_reader **out);

/* Opens the newest checkpoint under dir that verifies at `level`; each defective newer one is
 * logged (one warning line) and skipped. TAGC_ENOTFOUND when there is no committed checkpoint,
 * TAGC_ECORRUPT when there are some and none is valid. */
tagc_status tagc_ckpt_find_latest_valid(const char *dir, tagc_ckpt_verify level,
                                        tagc_ckpt_reader **out);

/* Full verification (whole-file CRC32C) of files first, first + stride, ... so that W' loading
 * ranks can split the work and combine the results with their own collective. */
tagc_status tagc_ckpt_verify_files(tagc_ckpt_reader *rd, int first, int stride);

/* Reads elements [lo, hi) of stream `stream` of unit `unit` into dst (hi - lo floats).
 * Elements at or past the unit's numel (padding) read as 0. Reads only the overlapping parts
 * of the files that hold them. Errors: TAGC_EINVAL (bad index or range), TAGC_ECORRUPT /
 * TAGC_EIO (a file's header, size or read failed). */
tagc_status tagc_ckpt_read(tagc_ckpt_reader *rd, int unit, int stream, int64_t lo, int64_t hi,
                           float *dst);

/* Accessors; strings and the manifest are borrowed from the reader. */
int64_t tagc_ckpt_reader_step(const tagc_ckpt_reader *rd);
int tagc_ckpt_reader_world_size(const tagc_ckpt_reader *rd);
const char *tagc_ckpt_reader_path(const tagc_ckpt_reader *rd);
const json_t *tagc_ckpt_reader_manifest(const tagc_ckpt_reader *rd);
/* CRC32C of manifest.json's bytes: the manifest_crc32c of tagc_ckpt_committed (and of the etcd
 * record), so that ranks and plans can tell one checkpoint from another of the same step. */
uint32_t tagc_ckpt_reader_manifest_crc32c(const tagc_ckpt_reader *rd);
int tagc_ckpt_reader_n_units(const tagc_ckpt_reader *rd);
int tagc_ckpt_reader_n_streams(const tagc_ckpt_reader *rd);
/* Index of the unit / stream with that name; -1 when absent. */
int tagc_ckpt_reader_unit_index(const tagc_ckpt_reader *rd, const char *name);
int tagc_ckpt_reader_stream_index(const tagc_ckpt_reader *rd, const char *name);
int64_t tagc_ckpt_reader_unit_numel(const tagc_ckpt_reader *rd, int unit);
/* Manifest entry "model", "tensors", "sampler", "rng" or "compression" (JSON null when not
 * saved). */
const json_t *tagc_ckpt_reader_meta(const tagc_ckpt_reader *rd, const char *key);

/* Closes the files and frees the reader. NULL is a no-op. */
void tagc_ckpt_close(tagc_ckpt_reader *rd);

/* ---- fault points ---- */

/* Arms the checkpoint fault points from a spec "ckpt:<stage>" or "ckpt:<stage>@<rank>"
 * (stages: after-open, mid-write, before-fsync, after-shard, before-manifest, before-rename,
 * before-latest, replacing); the process kills itself with SIGKILL on reaching that stage.
 * The stage abort-snapshot kills nothing: see tagc_ckpt_fault_abort_snapshot(); nor does full:
 * while it is armed every shard write fails with ENOSPC, as on a full disk. The spec may
 * be a comma-separated list: items of other subsystems are ignored, the first "ckpt:" item
 * counts. NULL reads the environment variable TAGC_FAULT again; "" disarms. Without a call, TAGC_FAULT is read once on first use.
 * Errors: TAGC_EINVAL for an unknown stage. Call before saving, not concurrently with it. */
tagc_status tagc_ckpt_fault_configure(const char *spec);

/* 1 (once, then disarmed) when "ckpt:abort-snapshot[@rank]" is armed for this rank: the
 * caller, between tagc_ckpt_saver_begin and finish, then breaks its snapshot the way a newer
 * generation or a lost lease does (it aborts its communicator). Else 0; one compare when off. */
int tagc_ckpt_fault_abort_snapshot(int rank);

/* For tests of the commit rule: fn(arg, step, rank) runs in tagc_ckpt_write_shard right after
 * the shard got its final name, i.e. when a rank 0 waiting for the files may commit the
 * directory (rename it) concurrently; the writer must not fail for that. NULL removes it.
 * Not for production use; set it before saving, not concurrently with it. */
typedef void (*tagc_ckpt_shard_named_fn)(void *arg, int64_t step, int rank);
void tagc_ckpt_fault_on_shard_named(tagc_ckpt_shard_named_fn fn, void *arg);

#endif
