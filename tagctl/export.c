/* tagctl ckpt export CKPT --format safetensors|llmc --out DIR|FILE: a checkpoint of any world
 * size as a Hugging Face model folder or an llm.c model file (model/model_io.h,
 * docs/operations.md). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "model/model_io.h"
#include "tagctl/tagctl.h"
#include "tagctl/tokenizer.h"

typedef struct export_args {
  char *format;
  char *out;
  char *dtype;
  char *tokenizer;
} export_args;

#define OFF(f) offsetof(export_args, f)
static const tagc_opt export_opts[] = {
    {"format", TAGC_OPT_CHOICE, OFF(format), "safetensors", 0, -1, "safetensors|llmc",
     "safetensors: a Hugging Face GPT-2 folder (config.json, model.safetensors, "
     "generation_config.json); llmc: llm.c's fp32 model file (gpt2_124M.bin layout, version 3)"},
    {"out", TAGC_OPT_STRING, OFF(out), "", 0, -1, NULL,
     "the folder to create (safetensors; absent or empty) or the file to write (llmc; absent) "
     "(required)"},
    {"dtype", TAGC_OPT_CHOICE, OFF(dtype), "f32", 0, -1, "f32|bf16|f16",
     "the tensors' type in model.safetensors (rounded to nearest even)"},
    {"tokenizer", TAGC_OPT_STRING, OFF(tokenizer), "", 0, -1, NULL,
     "a GPT-2 BPE vocab.json with merges.txt beside it (or their folder), copied into the "
     "folder with a tokenizer_config.json; it must have the model's vocabulary"},
};

/* The tokenizer of --tokenizer into opt; 0 when done, else the exit status (reported). */
static int export_tokenizer(const char *path, const tagctl_model *m, tagctl_tokenizer **tok,
                            tagctl_hf_options *opt) {
  tagc_status st = tagctl_tokenizer_load(path, tok);
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl ckpt export: --tokenizer %s\n", tagc_last_error());
    return st == TAGC_ENOMEM || st == TAGC_EIO ? 1 : 2;
  }
  if (!tagctl_tokenizer_vocab_path(*tok) || !tagctl_tokenizer_merges_path(*tok)) {
    fprintf(stderr, "tagctl ckpt export: --tokenizer %s: Hugging Face's GPT-2 tokenizer needs "
            "vocab.json and merges.txt; this has no merges\n", path);
    return 2;
  }
  if (tagctl_tokenizer_size(*tok) != m->vocab) {
    fprintf(stderr, "tagctl ckpt export: --tokenizer %s has %d tokens, the model's vocabulary is %d\n",
            path, tagctl_tokenizer_size(*tok), m->vocab);
    return 2;
  }
  opt->vocab_json = tagctl_tokenizer_vocab_path(*tok);
  opt->merges_txt = tagctl_tokenizer_merges_path(*tok);
  opt->eos_id = tagctl_tokenizer_eot(*tok);
  return 0;
}

/* Checks the arguments and --out before a long load; 0 when fine, else the exit status. */
static int check_args(const export_args *a, int llmc) {
  if (llmc && (strcmp(a->dtype, "f32") != 0 || *a->tokenizer)) {
    fprintf(stderr, "tagctl ckpt export: --format llmc is fp32 without tokenizer files: "
            "--dtype and --tokenizer are for safetensors\n");
    return 2;
  }
  if (tagctl_model_check_out(a->out, !llmc) != TAGC_OK) {
    fprintf(stderr, "tagctl ckpt export: %s\n", tagc_last_error());
    return 2;
  }
  return 0;
}

static int write_model(const export_args *a, int llmc, const tagctl_model *m) {
  tagctl_tokenizer *tok = NULL;
  tagctl_hf_options opt = {.dtype = !strcmp(a->dtype, "bf16")  ? TAGCTL_BF16
                                    : !strcmp(a->dtype, "f16") ? TAGCTL_F16
                                                               : TAGCTL_F32,
                           .eos_id = m->vocab == 50257 ? 50256 : -1}; /* GPT-2's <|endoftext|> */
  int rc = *a->tokenizer ? export_tokenizer(a->tokenizer, m, &tok, &opt) : 0;
  if (rc) {
    tagctl_tokenizer_free(tok);
    return rc;
  }
  tagc_status st = llmc ? tagctl_model_write_llmc(m, a->out) : tagctl_model_write_hf(m, a->out, &opt);
  if (st == TAGC_OK && llmc)
    printf("%s: llm.c model, %zu parameters, vocabulary %d\n", a->out, m->layout.n_params, m->vocab);
  else if (st == TAGC_OK)
    printf("%s: Hugging Face GPT-2 folder (config.json, model.safetensors %s, generation_config.json%s), "
           "vocabulary %d\n", a->out, a->dtype, tok ? ", vocab.json, merges.txt, tokenizer_config.json" : "",
           m->vocab);
  else
    fprintf(stderr, "tagctl ckpt export: %s\n", tagc_last_error());
  tagctl_tokenizer_free(tok);
  return st == TAGC_OK ? 0 : st == TAGC_EINVAL ? 2 : 1;
}

int tagctl_export(int argc, char **argv) {
  tagc_opt_program prog = {"tagctl ckpt export",
                           "CKPT [--format safetensors] --out DIR\nCKPT --format llmc --out FILE",
                           "Writes the parameters of a checkpoint (a step-N directory, a "
                           "checkpoint root or a run's OUT: its newest valid checkpoint; any world "
                           "size), of a Hugging Face folder or safetensors file, or of an llm.c "
                           "model file as a Hugging Face folder or an llm.c model file. The "
                           "vocabulary is cut to its real size (GPT-2: 50257, not the padded 50304).",
                           export_opts, sizeof export_opts / sizeof export_opts[0]};
  export_args args = {0};
  char *ckpt = NULL;
  int rc = tagctl_parse_file_args(&prog, &args, argc, argv, &ckpt, 1);
  if (rc < 0 && !*args.out) {
    fprintf(stderr, "tagctl ckpt export: --out is required (a folder to create, or the llm.c file)\n");
    rc = 2;
  }
  int llmc = rc < 0 && strcmp(args.format, "llmc") == 0;
  if (rc < 0 && (rc = check_args(&args, llmc)) == 0)
    rc = -1;
  if (rc >= 0) {
    tagc_opts_free(&prog, &args);
    return rc;
  }
  tagctl_model m;
  tagc_status st = tagctl_model_load(ckpt, &m);
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl ckpt export: %s\n", tagc_last_error());
    tagc_opts_free(&prog, &args);
    return st == TAGC_ENOTFOUND || st == TAGC_EINVAL ? 2 : 1;
  }
  rc = write_model(&args, llmc, &m);
  tagctl_model_free(&m);
  tagc_opts_free(&prog, &args);
  return rc;
}
