/* Training data: a byte corpus, its train/validation split, and the deterministic sampler.
 *
 * The corpus is every regular file under a path (a file, or a directory walked recursively
 * in byte order of names; symbolic links and fortune's *.dat index files are skipped),
 * concatenated. It is cut in 4 KiB blocks: every 10th block (index % 10 == 9) goes to the
 * validation set, the rest to the training set, so both cover every source file.
 *
 * The sampler maps (seed, step, sample index in the global batch) to a window start with a
 * counter-based hash: the sequence of global batches depends only on the seed and the batch
 * size, never on the world size, micro-batch split or restarts. */
#ifndef TAGC_WORKER_DATA_H
#define TAGC_WORKER_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define TAGC_DEFAULT_CORPUS "/usr/share/games/fortunes"

typedef struct tagc_corpus {
  uint8_t *train;
  size_t n_train;
  uint8_t *val;
  size_t n_val;
  int n_files;
  uint32_t crc; /* CRC32C of the whole corpus in read order: identifies it in checkpoints */
} tagc_corpus;

/* Reads the corpus at path. Errors (one-line detail): TAGC_ENOTFOUND (missing), TAGC_EIO
 * (unreadable), TAGC_EINVAL (no bytes at all, or a split shorter than min_window + 1 bytes so
 * no window of that length fits). */
tagc_status tagc_corpus_load(const char *path, size_t min_window, tagc_corpus *out);

void tagc_corpus_free(tagc_corpus *c); /* idempotent */

/* Start offset in the training set of sample `index` of global batch `step`, for windows of
 * `window` bytes (tokens + 1 for the shifted targets). */
size_t tagc_sample_start(uint64_t seed, int64_t step, int64_t index, size_t n_bytes, size_t window);

/* Fills tokens[i*T..] and targets[i*T..] (targets = tokens shifted by one) for samples
 * first..first+count-1 of global batch `step`, drawn from the training set. */
void tagc_batch_fill(const tagc_corpus *c, uint64_t seed, int64_t step, int64_t first, int count,
                     int T, uint8_t *tokens, uint8_t *targets);

/* Fills `count` fixed validation windows starting at window number `first`: evenly spaced
 * over the validation set, the same for every run and world size. */
void tagc_val_fill(const tagc_corpus *c, int64_t first, int count, int T, uint8_t *tokens,
                   uint8_t *targets);

/* 64-bit mix (splitmix64 finaliser) used by the sampler and other counter-based streams. */
uint64_t tagc_mix64(uint64_t x);

#endif
