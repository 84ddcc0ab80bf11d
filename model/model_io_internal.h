/* What model/model_io.c (checkpoints, llm.c files) and model/model_hf.c (safetensors,
 * Hugging Face folders) share. */
#ifndef TAGC_TAGCTL_MODEL_IO_INTERNAL_H
#define TAGC_TAGCTL_MODEL_IO_INTERNAL_H

#include <stdio.h>

#include "model/model_io.h"

#define PATH_CAP 4200

/* The tensors of one block in llm.c's order, and their Hugging Face GPT-2 names; `conv1d`
 * marks the weights GPT-2 stores transposed (in, out). */
typedef struct block_tensor {
  const char *tagc, *hf;
  int conv1d;
} block_tensor_name;
extern const block_tensor_name model_block_tensors[];
extern const int model_n_block_tensors;

int model_is_dir(const char *path);
int model_exists(const char *path);

/* The layout tensor called `name` (of block l for model_block_tensor); NULL when absent. */
const tagc_tensor_info *model_find_tensor(const tagc_model_layout *lay, const char *name);
const tagc_tensor_info *model_block_tensor(const tagc_model_layout *lay, int l, const char *name);

/* Sets m->vocab and allocates the zeroed arena of m->layout (initialised and checked against
 * the input first, so that a damaged header cannot ask for any amount of memory). */
tagc_status model_alloc(tagctl_model *m, int vocab);

/* Copies wte into the head (llm.c and Hugging Face's GPT-2 tie them). */
void model_tie_head(tagctl_model *m);

/* A file written under a temporary name, fsynced and renamed into place by out_close (which
 * removes it on any failure). */
typedef struct out_file {
  FILE *f;
  char path[PATH_CAP], tmp[PATH_CAP];
  int failed;
} out_file;

tagc_status out_open(out_file *o, const char *path);
void out_write(out_file *o, const void *p, size_t bytes);
void out_zeros(out_file *o, size_t bytes);
tagc_status out_close(out_file *o);

/* A safetensors file (or a folder's model.safetensors) into *m. */
tagc_status model_load_safetensors(const char *path, tagctl_model *m);

#endif
