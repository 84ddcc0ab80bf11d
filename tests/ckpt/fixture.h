/* Shared helpers of the checkpoint tests: a small layout, deterministic data, padded shard
 * ranges, in-process and forked saves, temporary directories. */
#ifndef TAGC_TESTS_CKPT_FIXTURE_H
#define TAGC_TESTS_CKPT_FIXTURE_H

#include <stdint.h>

#include "ckpt/ckpt.h"

#define FX_UNITS 5
#define FX_STREAMS 4

/* Units embed (1031), block (4096), tiny (3), empty (0), one (1); streams param, adam_m,
 * adam_v, residual. */
extern const tagc_ckpt_layout fx_layout;

/* Deterministic element value: arbitrary finite bit patterns (signs, tiny and huge exponents). */
float fx_value(int unit, int stream, int64_t i, uint32_t seed);

/* Rank's ranges at world size W: contiguous shards of ceil(numel / W), the last ones padded. */
void fx_ranges(int world, int rank, tagc_ckpt_range out[FX_UNITS]);

/* This rank's shard data filled with fx_value (data[u * FX_STREAMS + s], malloc'd). */
void fx_shard_alloc(int world, int rank, uint32_t seed, float *data[FX_UNITS * FX_STREAMS]);
void fx_shard_free(float *data[FX_UNITS * FX_STREAMS]);

/* Writes all W shards from this process, then commits (no barrier needed in one process). */
tagc_status fx_save_inproc(const char *dir, int64_t step, int world, uint32_t seed, const tagc_ckpt_meta *meta);

/* Reads every stream of every unit as W' ranks would (their padded ranges) and compares the
 * gathered arrays bit for bit with fx_value(seed); padding must read as 0. Returns the number
 * of mismatching elements, or -1 when a read failed. */
long fx_check_load(tagc_ckpt_reader *rd, int world2, uint32_t seed);

/* A new empty directory under $TMPDIR (or /tmp); caller frees the string. */
char *fx_tempdir(const char *tag);

/* rm -rf of a test directory. */
void fx_rmtree(const char *path);

/* XORs one byte of a file at offset (negative = from the end). Returns 0 on success. */
int fx_flip_byte(const char *path, long offset);

/* Truncates a file to len bytes. Returns 0 on success. */
int fx_truncate(const char *path, long len);

/* Writes text to path (overwrites). Returns 0 on success. */
int fx_write_text(const char *path, const char *text);

/* A barrier for W forked processes in shared memory, with a deadline. */
typedef struct fx_barrier fx_barrier;
fx_barrier *fx_barrier_new(int world);
void fx_barrier_free(fx_barrier *b);
/* tagc_ckpt_barrier_fn; arg is the fx_barrier. TAGC_ETIMEDOUT after 20 s. */
tagc_status fx_barrier_wait(void *arg, int64_t step);

#endif
