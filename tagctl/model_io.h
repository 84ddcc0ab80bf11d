/* A trained model as one full fp32 arena (model/model.h's layout), read from a sharded
 * checkpoint of any world size or from an llm.c model file, and written as safetensors (Hugging
 * Face GPT-2 names, with a config.json beside it) or as an llm.c model file. Used by
 * `tagctl ckpt export` (tagctl/export.c) and `tagctl sample` (tagctl/sample.c); the formats
 * and how tagc's model differs from GPT-2 are in docs/operations.md.
 *
 * Single-threaded; blocks on file I/O. */
#ifndef TAGC_TAGCTL_MODEL_IO_H
#define TAGC_TAGCTL_MODEL_IO_H

#include <stdint.h>

#include "common/status.h"
#include "model/model.h"

typedef struct tagctl_model {
  tagc_model_layout layout; /* layout.cfg.vocab = rows of wte and of the head (padded) */
  int vocab;                /* the token ids the model knows: [0, vocab), vocab <= rows */
  float *params;            /* layout.n_params floats, owned */
  int64_t step;             /* the checkpoint's step; -1 when unknown (llm.c file) */
} tagctl_model;

/* Fills *m (caller-owned, free with tagctl_model_free) from `path`: a regular file is read as
 * an llm.c model file, a directory as a checkpoint — a step-<n> directory, a checkpoint root
 * (its newest valid checkpoint) or a run's output folder (its ckpt/). A checkpoint is verified
 * fully (CRC32C of every file) and gathered from its shards, whatever world size saved it.
 * Errors: TAGC_ENOTFOUND (nothing there), TAGC_ECORRUPT (a damaged or foreign file, a
 * checkpoint whose tensor table is not tagc's GPT model), TAGC_EINVAL (a model this build
 * cannot hold), TAGC_EIO, TAGC_ENOMEM; the detail names the file. */
tagc_status tagctl_model_load(const char *path, tagctl_model *m);

/* Whether `path` can take an exported model without replacing what the export itself writes:
 * TAGC_EINVAL (the detail says why) when it names a folder (or ends in '/'), or, for
 * safetensors (`safetensors` != 0), when it is the config.json written beside it (or that file's
 * temporary name) or that config.json's name is a folder. Reads only the file system's metadata. */
tagc_status tagctl_model_check_out(const char *path, int safetensors);

/* Writes the model as safetensors to `path` (temporary name, fsync, rename) and a Hugging Face
 * config.json in the same folder; TAGC_EINVAL, before anything is written, where
 * tagctl_model_check_out refuses the path. The tensors are GPT2LMHeadModel's state-dict entries
 * (transformer.wte.weight, ..., lm_head.weight), F32, Conv1D weights stored (in, out).
 * The bytes depend only on the model and its step, so any world size gives the same file. */
tagc_status tagctl_model_write_safetensors(const tagctl_model *m, const char *path);

/* Writes the model as an llm.c fp32 model file (version 3: padded vocabulary) to `path`
 * (TAGC_EINVAL when it names a folder). tagc's
 * head is not tied to wte: it follows the 16 llm.c tensors and header[8] = 1 says so (llm.c's
 * own loader ignores it and uses wte as the head). */
tagc_status tagctl_model_write_llmc(const tagctl_model *m, const char *path);

/* Frees the arena. Idempotent. */
void tagctl_model_free(tagctl_model *m);

#endif
