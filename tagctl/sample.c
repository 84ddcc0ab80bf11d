/* tagctl sample CKPT --prompt TEXT --tokens N: text from a trained model on the CPU, with the
 * worker's own forward pass (model/model.h). Byte models (vocabulary 256) print text; token
 * models print text through --tokenizer (GPT-2 BPE, tagctl/tokenizer.h), ids otherwise. No cache of keys and values: every new token runs
 * the forward over the whole context window (the model's ctx), which is what tagc trains. */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/model_io.h"
#include "tagctl/tokenizer.h"
#include "tagctl/tagctl.h"
#include "data/data.h"

typedef struct sample_args {
  char *prompt;
  char *prompt_ids;
  int64_t tokens;
  double temperature;
  int64_t top_k;
  int64_t seed;
  int64_t threads;
  char *logits;
  char *tokenizer;
  int ids;
} sample_args;

#define OFF(f) offsetof(sample_args, f)
static const tagc_opt sample_opts[] = {
    {"prompt", TAGC_OPT_STRING, OFF(prompt), "", 0, -1, NULL,
     "the text to continue (byte models, or encoded by --tokenizer)"},
    {"prompt-ids", TAGC_OPT_STRING, OFF(prompt_ids), "", 0, -1, NULL,
     "the token ids to continue, comma-separated (instead of --prompt; any model)"},
    {"tokens", TAGC_OPT_INT, OFF(tokens), "200", 0, 1e7, NULL, "tokens to generate"},
    {"temperature", TAGC_OPT_DOUBLE, OFF(temperature), "1.0", 0, 100, NULL,
     "softmax temperature (0 = always the most likely token)"},
    {"top-k", TAGC_OPT_INT, OFF(top_k), "0", 0, 1e9, NULL, "sample among the K most likely tokens (0 = all)"},
    {"seed", TAGC_OPT_INT, OFF(seed), "1", 0, 9e18, NULL,
     "random seed: the same seed, model and thread count give the same text"},
    {"threads", TAGC_OPT_INT, OFF(threads), "1", 0, 1024, NULL, "compute threads (0 = all cores)"},
    {"logits", TAGC_OPT_STRING, OFF(logits), "", 0, -1, NULL,
     "also write the logits of the prompt's positions to this file (float32, positions x rows "
     "of the head), for checks against other implementations"},
    {"tokenizer", TAGC_OPT_STRING, OFF(tokenizer), "", 0, -1, NULL,
     "GPT-2 BPE tokenizer of a token model: llm.c's tokenizer.bin (decodes), a vocab.json "
     "(encodes too with merges.txt beside it) or a folder holding them; the text is printed "
     "(default: the tokenizer in CKPT's Hugging Face folder, if it has one)"},
    {"ids", TAGC_OPT_BOOL, OFF(ids), "false", 0, -1, NULL,
     "print token ids, not text (the prompt's as --tokenizer encoded it)"},
};

/* The draw for token `index`: uniform in [0, 1) from (seed, index), counter-based. */
static double uniform(uint64_t seed, uint64_t index) {
  return (double)(tagc_mix64(seed ^ tagc_mix64(index)) >> 11) * 0x1.0p-53;
}

typedef struct scored {
  float z;
  int id;
} scored;

/* Descending logit; ties: the lower id first. */
static int by_logit(const void *pa, const void *pb) {
  const scored *a = pa, *b = pb;
  if (a->z != b->z)
    return a->z > b->z ? -1 : 1;
  return a->id - b->id;
}

/* Picks the next token from the logits z[0..V): the most likely one at temperature 0, else a
 * draw u from softmax(z / T) over the top_k most likely. */
static int pick(const float *z, int V, double temperature, int top_k, double u, scored *order) {
  for (int i = 0; i < V; i++)
    order[i] = (scored){z[i], i};
  qsort(order, (size_t)V, sizeof *order, by_logit);
  if (temperature == 0)
    return order[0].id;
  int k = top_k > 0 && top_k < V ? top_k : V;
  double sum = 0, top = order[0].z;
  for (int i = 0; i < k; i++)
    sum += exp((order[i].z - top) / temperature);
  double target = u * sum, acc = 0;
  for (int i = 0; i < k; i++) {
    acc += exp((order[i].z - top) / temperature);
    if (acc > target)
      return order[i].id;
  }
  return order[k - 1].id;
}

/* --prompt encoded by the tokenizer into *ids (new); -1 when done, else the exit status. */
static int encode_prompt(const tagctl_tokenizer *tok, const char *text, int **ids, int *n) {
  tagc_status st = tagctl_tokenizer_encode(tok, text, ids, n);
  if (st == TAGC_OK)
    return -1;
  fprintf(stderr, "tagctl sample: --prompt: %s%s\n", tagc_last_error(),
          st == TAGC_EUNSUPPORTED ? "; give --prompt-ids" : "");
  return st == TAGC_ENOMEM ? 1 : 2;
}

/* The prompt as token ids: --prompt-ids, else --prompt encoded by the tokenizer, else the bytes
 * of --prompt (byte models only). */
static int parse_prompt(const sample_args *a, const tagctl_model *m, const tagctl_tokenizer *tok,
                        int **ids, int *n) {
  *n = 0;
  if (*a->prompt && *a->prompt_ids) {
    fprintf(stderr, "tagctl sample: give --prompt or --prompt-ids, not both\n");
    return 2;
  }
  if (*a->prompt && tok)
    return encode_prompt(tok, a->prompt, ids, n);
  size_t cap = strlen(a->prompt) + strlen(a->prompt_ids) + 1;
  *ids = malloc(cap * sizeof **ids);
  if (!*ids) {
    fprintf(stderr, "tagctl sample: out of memory\n");
    return 1;
  }
  if (*a->prompt) {
    if (m->layout.cfg.vocab != 256 || m->vocab != 256) {
      fprintf(stderr, "tagctl sample: this model's tokens are not bytes (vocabulary %d): give "
              "--tokenizer or --prompt-ids\n", m->vocab);
      return 2;
    }
    for (const unsigned char *p = (const unsigned char *)a->prompt; *p; p++)
      (*ids)[(*n)++] = *p;
  } else {
    for (char *p = a->prompt_ids, *end; *p; p = *end == ',' ? end + 1 : end) {
      long v = strtol(p, &end, 10);
      if (end == p || (*end && *end != ',') || v < 0 || v >= m->vocab) {
        fprintf(stderr, "tagctl sample: --prompt-ids: '%s' is not a list of ids in [0, %d)\n", a->prompt_ids, m->vocab);
        return 2;
      }
      (*ids)[(*n)++] = (int)v;
    }
  }
  if (*n == 0) {
    fprintf(stderr, "tagctl sample: the prompt is empty (--prompt TEXT or --prompt-ids LIST)\n");
    return 2;
  }
  return -1;
}

typedef struct sampler {
  const tagctl_model *m;
  const tagctl_tokenizer *tok; /* NULL: bytes or ids */
  int print_ids;
  tagc_model_acts *acts;
  tagc_arena_hooks hooks;
  uint16_t *window, *targets; /* one sequence of ctx tokens */
  float *logits;              /* (ctx, vocab) */
} sampler;

/* Runs the forward over the last min(n, ctx) tokens of ids; *row gets the logits after the
 * last of them. */
static tagc_status forward(sampler *s, const int *ids, int n, const float **row) {
  int T = s->m->layout.cfg.ctx, V = s->m->layout.cfg.vocab, first = n > T ? n - T : 0;
  memset(s->window, 0, (size_t)T * sizeof *s->window); /* later positions do not reach it (causal) */
  for (int i = first; i < n; i++)
    s->window[i - first] = (uint16_t)ids[i];
  double loss;
  TAGC_CHECK(tagc_model_forward(&s->m->layout, s->acts, &s->hooks.hooks, s->window, s->window, 1, &loss));
  *row = s->logits + (size_t)(n - first - 1) * V;
  return TAGC_OK;
}

static tagc_status write_logits(const char *path, const float *logits, int n, int V) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return tagc_errnof(TAGC_EIO, "%s", path);
  size_t count = (size_t)n * V;
  int ok = fwrite(logits, sizeof(float), count, f) == count;
  if (fclose(f) != 0 || !ok)
    return tagc_errnof(TAGC_EIO, "%s", path);
  return TAGC_OK;
}

static void print_token(const sampler *s, int id, int first) {
  if (s->tok && !s->print_ids) {
    size_t len;
    const unsigned char *b = tagctl_tokenizer_bytes(s->tok, id, &len);
    fwrite(b, 1, len, stdout);
  } else if (s->m->vocab == 256 && s->m->layout.cfg.vocab == 256 && !s->print_ids) {
    putchar(id);
  } else {
    printf(first ? "%d" : " %d", id);
  }
}

/* The first of z[0..n) that is inf or NaN (a diverged model), -1 when none. */
static int first_nonfinite(const float *z, int n) {
  for (int i = 0; i < n; i++)
    if (!isfinite(z[i]))
      return i;
  return -1;
}

/* Generates a->tokens tokens after the prompt and prints prompt and continuation. */
static tagc_status generate(sampler *s, const sample_args *a, int *ids, int n_prompt) {
  const tagctl_model *m = s->m;
  int V = m->layout.cfg.vocab, n = n_prompt;
  scored *order = malloc((size_t)V * sizeof *order);
  if (!order)
    return tagc_errorf(TAGC_ENOMEM, "sampler");
  const float *row;
  tagc_status st = TAGC_OK;
  for (int i = 0; i < n_prompt; i++)
    print_token(s, ids[i], i == 0);
  for (int64_t t = 0; t < a->tokens && st == TAGC_OK; t++) {
    st = forward(s, ids, n, &row);
    if (st != TAGC_OK)
      break;
    int bad = first_nonfinite(row, m->vocab);
    if (bad >= 0) {
      st = tagc_errorf(TAGC_ENUMERIC, "the model's logit of token %d is %g", bad, row[bad]);
      break;
    }
    /* only ids the model knows: the padded rows of the head never come out */
    int next = pick(row, m->vocab, a->temperature, (int)a->top_k, uniform((uint64_t)a->seed, (uint64_t)t), order);
    ids[n++] = next;
    print_token(s, next, 0);
    fflush(stdout);
  }
  putchar('\n');
  free(order);
  return st;
}

static tagc_status sample_model(const tagctl_model *m, const tagctl_tokenizer *tok, const sample_args *a,
                                int *prompt, int n_prompt) {
  int T = m->layout.cfg.ctx, V = m->layout.cfg.vocab;
  sampler s = {.m = m, .tok = tok, .print_ids = a->ids};
  int *ids = malloc(((size_t)n_prompt + (size_t)a->tokens) * sizeof *ids);
  s.window = calloc((size_t)T, sizeof *s.window);
  s.logits = malloc((size_t)T * V * sizeof(float));
  tagc_status st = ids && s.window && s.logits ? tagc_model_acts_new(&m->layout, 1, &s.acts)
                                               : tagc_errorf(TAGC_ENOMEM, "sampler buffers");
  if (st == TAGC_OK) {
    memcpy(ids, prompt, (size_t)n_prompt * sizeof *ids);
    tagc_model_acts_keep_logits(s.acts, s.logits);
    tagc_arena_hooks_init(&s.hooks, &m->layout, m->params, NULL);
    const float *row;
    if (*a->logits && n_prompt > T)
      st = tagc_errorf(TAGC_EINVAL, "--logits: the prompt (%d tokens) is longer than the context (%d)", n_prompt, T);
    else if (*a->logits && (st = forward(&s, ids, n_prompt, &row)) == TAGC_OK)
      st = write_logits(a->logits, s.logits, n_prompt, V);
    if (st == TAGC_OK)
      st = generate(&s, a, ids, n_prompt);
  }
  tagc_model_acts_free(s.acts);
  free(s.logits);
  free(s.window);
  free(ids);
  return st;
}

/* The tokenizer at path, which must have the model's vocabulary; -1 when loaded, else the
 * exit status (reported). */
static int load_tokenizer(const char *path, const tagctl_model *m, tagctl_tokenizer **tok) {
  tagc_status st = tagctl_tokenizer_load(path, tok);
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl sample: --tokenizer %s\n", tagc_last_error());
    return st == TAGC_ENOMEM || st == TAGC_EIO ? 1 : 2;
  }
  if (tagctl_tokenizer_size(*tok) != m->vocab) {
    fprintf(stderr, "tagctl sample: --tokenizer %s has %d tokens, the model's vocabulary is %d\n", path,
            tagctl_tokenizer_size(*tok), m->vocab);
    return 2;
  }
  return -1;
}

/* The folder of a Hugging Face model (path itself, or the folder of a .safetensors file)
 * when it holds a vocab.json: the tokenizer `ckpt export --tokenizer` put there; else "". */
static void folder_tokenizer(const char *path, char *dir, size_t cap) {
  struct stat sb;
  size_t n = strlen(path);
  dir[0] = 0;
  if (stat(path, &sb) != 0 || n + 16 > cap)
    return;
  if (S_ISDIR(sb.st_mode)) {
    snprintf(dir, cap, "%s", path);
  } else if (n > 12 && strcmp(path + n - 12, ".safetensors") == 0) {
    const char *slash = strrchr(path, '/');
    snprintf(dir, cap, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
  }
  char vocab[4096 + 16];
  snprintf(vocab, sizeof vocab, "%s/vocab.json", dir);
  if (!*dir || stat(vocab, &sb) != 0 || !S_ISREG(sb.st_mode))
    dir[0] = 0;
}

int tagctl_sample(int argc, char **argv) {
  tagc_opt_program prog = {"tagctl sample", "CKPT [--prompt TEXT | --prompt-ids IDS] [options]",
                           "Continues a prompt with a trained model on the CPU. CKPT is a "
                           "checkpoint (a step-N directory, a checkpoint root or a run's OUT), a "
                           "Hugging Face folder or safetensors file, or an llm.c model file "
                           "(tagctl ckpt export).",
                           sample_opts, sizeof sample_opts / sizeof sample_opts[0]};
  sample_args args = {0};
  char *path = NULL;
  int rc = tagctl_parse_file_args(&prog, &args, argc, argv, &path, 1);
  if (rc >= 0) {
    tagc_opts_free(&prog, &args);
    return rc;
  }
  tagctl_model m;
  tagctl_tokenizer *tok = NULL;
  int *prompt = NULL, n_prompt = 0;
  char own[4096];
  folder_tokenizer(path, own, sizeof own);
  const char *tok_path = *args.tokenizer ? args.tokenizer : own;
  tagc_status st = tagctl_model_load(path, &m);
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl sample: %s\n", tagc_last_error());
    rc = st == TAGC_ENOTFOUND || st == TAGC_EINVAL ? 2 : 1;
  } else if (*tok_path && (rc = load_tokenizer(tok_path, &m, &tok)) >= 0) {
    /* reported */
  } else if ((rc = parse_prompt(&args, &m, tok, &prompt, &n_prompt)) < 0) {
    omp_set_num_threads(args.threads > 0 ? (int)args.threads : omp_get_num_procs());
    st = sample_model(&m, tok, &args, prompt, n_prompt);
    if (st != TAGC_OK)
      fprintf(stderr, "tagctl sample: %s\n", tagc_last_error());
    rc = st == TAGC_OK ? 0 : st == TAGC_EINVAL ? 2 : 1;
  }
  free(prompt);
  tagctl_tokenizer_free(tok);
  if (m.params)
    tagctl_model_free(&m);
  tagc_opts_free(&prog, &args);
  return rc;
}
