/* A trained model as one full fp32 arena (model/model.h's layout), read from a sharded
 * checkpoint of any world size, from an llm.c model file or from a safetensors file with
 * Hugging Face GPT-2 names, and written as a Hugging Face model folder (safetensors,
 * config.json, generation_config.json, tokenizer files) or as an llm.c model file. Used by
 * `tagctl ckpt export` (tagctl/export.c), `tagctl sample` (tagctl/sample.c) and the worker's
 * --init-from (worker/run.c); the formats and how tagc's model differs from GPT-2 are in
 * docs/operations.md.
 *
 * Single-threaded; blocks on file I/O. */
#ifndef TAGC_TAGCTL_MODEL_IO_H
#define TAGC_TAGCTL_MODEL_IO_H

#include <stdint.h>

#include "common/status.h"
#include "model/model.h"

typedef struct tagctl_model {
  tagc_model_layout layout; /* layout.cfg.vocab = vocab; layout.cfg.padded_vocab = the rows of
                               wte and of the head */
  int vocab;                /* the token ids the model knows: [0, vocab), vocab <= rows */
  float *params;            /* layout.n_params floats, owned */
  int64_t step;             /* the checkpoint's step; -1 when unknown (llm.c file) */
} tagctl_model;

/* Fills *m (caller-owned, free with tagctl_model_free) from `path`: a directory is a
 * checkpoint — a step-<n> directory, a checkpoint root (its newest valid checkpoint), a run's
 * output folder (its ckpt/) — or a Hugging Face model folder (its model.safetensors); a
 * regular file is a safetensors file (its config.json beside it gives n_head) or an llm.c
 * model file. A checkpoint is verified fully (CRC32C of every file) and gathered from its
 * shards, whatever world size saved it. safetensors: GPT2LMHeadModel's names with or without
 * the `transformer.` prefix, F32, BF16 or F16; no lm_head.weight means a head tied to wte (as
 * Hugging Face's own GPT-2 files); the attention-mask buffers (attn.bias, attn.masked_bias)
 * are skipped. Rows of wte and of the head past the file's vocabulary are zero.
 * Errors: TAGC_ENOTFOUND (nothing there), TAGC_ECORRUPT (a damaged or foreign file, a
 * checkpoint whose tensor table is not tagc's GPT model, a tensor of the wrong shape),
 * TAGC_EINVAL (a model this build cannot hold), TAGC_EIO, TAGC_ENOMEM; the detail names the
 * file. */
tagc_status tagctl_model_load(const char *path, tagctl_model *m);

/* Copies m into `params` (layout->n_params floats, caller-owned) laid out as `layout`: the
 * same vocabulary, context, layers, heads and width, or TAGC_EINVAL naming the first that
 * differs with the worker option that sets it (--vocab, --ctx, --layers, --heads, --dim);
 * rows of wte and of the head from the vocabulary to layout's padded rows are zero. */
tagc_status tagctl_model_fit(const tagctl_model *m, const tagc_model_layout *layout, float *params);

typedef enum tagctl_dtype { TAGCTL_F32 = 0, TAGCTL_BF16, TAGCTL_F16 } tagctl_dtype;

/* What a Hugging Face folder holds besides the model. */
typedef struct tagctl_hf_options {
  tagctl_dtype dtype;     /* of the tensors in model.safetensors (bf16 and f16 round to nearest
                             even; a value beyond f16's range is TAGC_EINVAL) */
  const char *vocab_json; /* with merges_txt: copied into the folder as vocab.json and
                             merges.txt, with a tokenizer_config.json; NULL: no tokenizer */
  const char *merges_txt;
  int eos_id;             /* generation_config.json's bos/eos token id; -1: none */
} tagctl_hf_options;

/* Whether `path` can take an export without replacing anything: TAGC_EINVAL (the detail says
 * why) when it exists and is not an empty folder (hf_dir != 0: the folder to create) or
 * exists at all (hf_dir == 0: the llm.c file), or names "." or "..". Reads only the file
 * system's metadata. */
tagc_status tagctl_model_check_out(const char *path, int hf_dir);

/* Writes the model as a Hugging Face folder `dir` (created; staged in a temporary folder
 * beside it, each file fsynced, then renamed to `dir`, so a failure leaves no `dir`):
 * model.safetensors (GPT2LMHeadModel's state-dict entries transformer.wte.weight, ...,
 * lm_head.weight; Conv1D weights stored (in, out); wte and lm_head cut to the vocabulary),
 * config.json (vocab_size = the vocabulary), generation_config.json and, with a tokenizer,
 * vocab.json, merges.txt and tokenizer_config.json. TAGC_EINVAL, before anything is written,
 * where tagctl_model_check_out refuses `dir`. The bytes depend only on the model, its step
 * and `opt`, so any world size gives the same files. */
tagc_status tagctl_model_write_hf(const tagctl_model *m, const char *dir, const tagctl_hf_options *opt);

/* Writes the model as an llm.c fp32 model file (version 3: padded vocabulary, rows past the
 * vocabulary zero) to `path` (TAGC_EINVAL where tagctl_model_check_out(path, 0) refuses it).
 * tagc's head is not tied to wte: it follows the 16 llm.c tensors and header[8] = 1 says so
 * (llm.c's own loader ignores it and uses wte as the head). */
tagc_status tagctl_model_write_llmc(const tagctl_model *m, const char *path);

/* Frees the arena. Idempotent. */
void tagctl_model_free(tagctl_model *m);

#endif
