/* Training data: a byte corpus or token shards, the train/validation split, and the
 * deterministic sampler.
 *
 * Token shards (--data): llm.c's format (a header of 256 little-endian int32: magic 20240520,
 * version 1, token count; then the uint16 tokens) or nanoGPT's headerless uint16 .bin files.
 * The training shards (a file or a glob, in sorted name order) are read as one concatenation,
 * the validation shards (--val-data) likewise. Shards are memory-mapped, never read whole.
 *
 * A shard changed under a run is an error, never a crash nor silently other data, for a
 * caller that polls tagc_corpus_check after the fills of a step, before it uses the tokens
 * (the fills cannot return an error, and cost nothing more). A read in a shard truncated under
 * it would raise SIGBUS: a process-wide handler (installed at the first tagc_data_open of
 * shards; any other fault goes to the handler before it) maps a page of zeros there instead
 * and records the shard, so the read goes on with token 0 and the next check fails. Until a
 * corpus is first checked the SIGBUS keeps its default action (nobody would notice the zeros).
 * And tagc_corpus_check compares each shard's size and mtime with those at open, when its
 * tokens were scanned and the corpus CRC computed.
 *
 * The text corpus is every regular file under a path (a file, or a directory walked recursively
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
#include <time.h>

#include "common/status.h"

#define TAGC_DEFAULT_CORPUS "/usr/share/games/fortunes"

#define TAGC_LLMC_MAGIC 20240520
#define TAGC_LLMC_HEADER_BYTES 1024 /* 256 int32: magic, version (1 = uint16 tokens), count */
#define TAGC_GPT2_VOCAB 50257       /* vocab of llm.c shards unless --vocab says otherwise */

typedef enum tagc_data_kind {
  TAGC_DATA_TEXT = 0, /* byte-level text corpus, vocab 256 */
  TAGC_DATA_LLMC,     /* llm.c shards: 1024-byte header + uint16 tokens */
  TAGC_DATA_NANOGPT,  /* nanoGPT .bin: uint16 tokens, no header */
} tagc_data_kind;

/* One contiguous run of tokens (a shard's tokens, or a whole text split). */
typedef struct tagc_token_seg {
  const uint16_t *tok;
  size_t n;
  size_t first; /* position of tok[0] in the concatenation of the set's segments */
} tagc_token_seg;

/* One memory-mapped token shard, as it was when opened. */
typedef struct tagc_shard {
  char *path;          /* owned */
  int fd;              /* kept open: tagc_corpus_check fstats the file the mapping reads */
  void *map;
  size_t len;          /* bytes mapped: the file's size at open */
  struct timespec mtime;
  int guard;           /* its slot in the SIGBUS handler's table of mappings */
} tagc_shard;

/* The sticky failure of the fills (opaque; written through a const corpus). */
typedef struct tagc_data_health tagc_data_health;

/* A token sequence made of segments, read as their concatenation. */
typedef struct tagc_token_set {
  tagc_token_seg *segs;
  int n_segs;
} tagc_token_set;

typedef struct tagc_corpus {
  tagc_data_kind kind;
  int vocab;     /* token ids are 0..vocab-1 */
  tagc_token_set train_set, val_set;
  size_t n_train; /* tokens in the training set */
  size_t n_val;   /* tokens in the validation set */
  int n_files;
  uint32_t crc; /* identifies the data in checkpoints: CRC32C of the text corpus in read order,
                 * or of the training shards' token bytes in order, then the validation shards' */
  /* what the corpus owns */
  uint16_t *text;  /* TAGC_DATA_TEXT: the two splits' tokens */
  tagc_shard *shards; /* token shards: training then validation, in the sets' order */
  int n_shards;
  tagc_data_health *health; /* token shards only; NULL for text */
} tagc_corpus;

/* Where the data comes from (tagc-worker's --corpus, --data, --val-data, --data-format,
 * --vocab). */
typedef struct tagc_data_spec {
  const char *corpus;   /* text file or directory: used when data is NULL or "" */
  const char *data;     /* training shards: a file or a glob(3) pattern */
  const char *val_data; /* validation shards: a file or a glob(3) pattern (required with data) */
  const char *format;   /* "llmc" (default when NULL or "") or "nanogpt" */
  int vocab;            /* 0 = from the data: 256 for text, 50257 for llm.c; nanogpt needs it */
} tagc_data_spec;

/* Reads the corpus at path (a symbolic link given as the path itself is followed; those under
 * a directory are skipped). `window` is the tokens of one sample: the context plus one for
 * the shifted targets (ctx + 1). Errors (one-line detail): TAGC_ENOTFOUND (missing), TAGC_EIO
 * (unreadable), TAGC_EINVAL (no bytes at all, or a split shorter than window bytes, so that no
 * window fits). */
tagc_status tagc_corpus_load(const char *path, size_t window, tagc_corpus *out);

/* Opens the data spec describes: the text corpus, or token shards, memory-mapped (never read
 * into memory whole). Every shard is checked at open: header (llm.c: magic, version 1, token
 * count against the file size), size, at least one token, every token < vocab (one
 * sequential pass over the mapping, which also computes crc). `window` as for
 * tagc_corpus_load. Errors (one-line detail naming the file): TAGC_ENOTFOUND (nothing
 * matches), TAGC_EIO (unreadable), TAGC_EINVAL (bad shard, bad options, or a set shorter than
 * window tokens). Keeps one open descriptor per shard; at most 8192 shards open at once. */
tagc_status tagc_data_open(const tagc_data_spec *spec, size_t window, tagc_corpus *out);

void tagc_corpus_free(tagc_corpus *c); /* idempotent */

/* TAGC_OK while every shard is as it was opened; else TAGC_EIO, sticky, with a one-line
 * detail naming the shard: a read met it truncated (token 0 was read where it was cut), or its
 * size or mtime is no longer that at open (rewritten in place: its tokens may no longer be
 * those the corpus CRC covers). One fstat per shard (about 0.5 us each); always TAGC_OK for
 * the text corpus. Call it after the fills of a step, before using their tokens. Thread-safe. */
tagc_status tagc_corpus_check(const tagc_corpus *c);

/* Copies tokens [start, start + len) of the concatenation of set's segments to out. */
void tagc_token_set_copy(const tagc_token_set *set, size_t start, size_t len, uint16_t *out);

/* Start offset in the training set of sample `index` of global batch `step`, for windows of
 * `window` tokens (inputs + 1 for the shifted targets), drawn uniformly over the whole
 * training set (across shard boundaries: the shards are read as one concatenation). */
size_t tagc_sample_start(uint64_t seed, int64_t step, int64_t index, size_t n_bytes, size_t window);

/* Fills tokens[i*T..] and targets[i*T..] (targets = tokens shifted by one) for samples
 * first..first+count-1 of global batch `step`, drawn from the training set. A shard cut under
 * it reads as token 0 there (tagc_corpus_check reports it). */
void tagc_batch_fill(const tagc_corpus *c, uint64_t seed, int64_t step, int64_t first, int count,
                     int T, uint16_t *tokens, uint16_t *targets);

/* Fills `count` fixed validation windows starting at window number `first`: evenly spaced
 * over the validation set, the same for every run and world size. A cut shard as for
 * tagc_batch_fill. */
void tagc_val_fill(const tagc_corpus *c, int64_t first, int count, int T, uint16_t *tokens,
                   uint16_t *targets);

/* 64-bit mix (splitmix64 finaliser) used by the sampler and other counter-based streams. */
uint64_t tagc_mix64(uint64_t x);

#endif
