/* tagctl ckpt export CKPT --format safetensors|llmc --out FILE: a checkpoint of any world
 * size as one model file others can load (tagctl/model_io.h, docs/operations.md). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "tagctl/model_io.h"
#include "tagctl/tagctl.h"

typedef struct export_args {
  char *format;
  char *out;
} export_args;

#define OFF(f) offsetof(export_args, f)
static const tagc_opt export_opts[] = {
    {"format", TAGC_OPT_CHOICE, OFF(format), "safetensors", 0, -1, "safetensors|llmc",
     "safetensors: Hugging Face GPT-2 tensors and a config.json beside FILE; llmc: llm.c's fp32 "
     "model file (gpt2_124M.bin layout, version 3)"},
    {"out", TAGC_OPT_STRING, OFF(out), "", 0, -1, NULL, "the file to write (required)"},
};

int tagctl_export(int argc, char **argv) {
  tagc_opt_program prog = {"tagctl ckpt export", "CKPT --format safetensors|llmc --out FILE",
                           "Writes the parameters of a checkpoint (a step-N directory, a "
                           "checkpoint root or a run's OUT: its newest valid checkpoint; any world "
                           "size) or of an llm.c model file as one model file.",
                           export_opts, sizeof export_opts / sizeof export_opts[0]};
  export_args args = {0};
  char *ckpt = NULL;
  int rc = tagctl_parse_file_args(&prog, &args, argc, argv, &ckpt, 1);
  if (rc < 0 && !*args.out) {
    fprintf(stderr, "tagctl ckpt export: --out FILE is required\n");
    rc = 2;
  }
  if (rc >= 0) {
    tagc_opts_free(&prog, &args);
    return rc;
  }
  int llmc = strcmp(args.format, "llmc") == 0;
  tagc_status st = tagctl_model_check_out(args.out, !llmc); /* before a long load */
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl ckpt export: %s\n", tagc_last_error());
    tagc_opts_free(&prog, &args);
    return 2;
  }
  tagctl_model m;
  st = tagctl_model_load(ckpt, &m);
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl ckpt export: %s\n", tagc_last_error());
    tagc_opts_free(&prog, &args);
    return st == TAGC_ENOTFOUND || st == TAGC_EINVAL ? 2 : 1;
  }
  st = llmc ? tagctl_model_write_llmc(&m, args.out) : tagctl_model_write_safetensors(&m, args.out);
  if (st == TAGC_OK)
    printf("%s: %s, %zu parameters%s\n", args.out, llmc ? "llm.c model" : "safetensors",
           m.layout.n_params, llmc ? "" : " (config.json beside it)");
  else
    fprintf(stderr, "tagctl ckpt export: %s\n", tagc_last_error());
  tagctl_model_free(&m);
  tagc_opts_free(&prog, &args);
  return st == TAGC_OK ? 0 : 1;
}
