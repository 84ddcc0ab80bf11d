/* A model as one fp32 arena: gathered from a checkpoint, read from and written to an llm.c
 * model file, written as safetensors (model_io.h). */
#include "tagctl/model_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt/ckpt.h"
#include "common/json.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the file formats written here are little-endian: this host is not"
#endif

#define PATH_CAP 4200
#define LLMC_MAGIC 20240326
#define LLMC_VERSION 3
#define LLMC_HEADER_INTS 256
#define LLMC_UNTIED_HEAD_SLOT 8 /* tagc's extension: 1 = the head follows lnfb */

/* The tensors of one block in llm.c's order, and their Hugging Face GPT-2 names; `conv1d`
 * marks the weights GPT-2 stores transposed (in, out). */
static const struct block_tensor {
  const char *tagc, *hf;
  int conv1d;
} block_tensors[] = {
    {"ln1_w", "ln_1.weight", 0},        {"ln1_b", "ln_1.bias", 0},
    {"qkv_w", "attn.c_attn.weight", 1}, {"qkv_b", "attn.c_attn.bias", 0},
    {"attn_proj_w", "attn.c_proj.weight", 1}, {"attn_proj_b", "attn.c_proj.bias", 0},
    {"ln2_w", "ln_2.weight", 0},        {"ln2_b", "ln_2.bias", 0},
    {"fc_w", "mlp.c_fc.weight", 1},     {"fc_b", "mlp.c_fc.bias", 0},
    {"mlp_proj_w", "mlp.c_proj.weight", 1}, {"mlp_proj_b", "mlp.c_proj.bias", 0},
};
#define N_BLOCK_TENSORS (int)(sizeof block_tensors / sizeof block_tensors[0])

static int is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* The layout tensor called `name`; NULL when absent. */
static const tagc_tensor_info *find_tensor(const tagc_model_layout *lay, const char *name) {
  for (int t = 0; t < lay->n_tensors; t++)
    if (strcmp(lay->tensors[t].name, name) == 0)
      return &lay->tensors[t];
  return NULL;
}

static const tagc_tensor_info *block_tensor(const tagc_model_layout *lay, int l, const char *name) {
  char full[64];
  snprintf(full, sizeof full, "h%d.%s", l, name);
  return find_tensor(lay, full);
}

/* Allocates the arena of m->layout (initialised and checked against the input first, so
 * that a damaged header cannot ask for any amount of memory). */
static tagc_status model_alloc(tagctl_model *m, int vocab) {
  if (vocab < 1 || vocab > m->layout.cfg.padded_vocab)
    return tagc_errorf(TAGC_ECORRUPT, "vocabulary %d outside [1, %d] (the rows of wte)", vocab,
                       m->layout.cfg.padded_vocab);
  m->vocab = vocab;
  m->params = calloc(m->layout.n_params, sizeof(float));
  if (!m->params)
    return tagc_errorf(TAGC_ENOMEM, "model arena of %zu floats", m->layout.n_params);
  return TAGC_OK;
}

void tagctl_model_free(tagctl_model *m) {
  free(m->params);
  m->params = NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Checkpoints                                                                              */

/* Opens the checkpoint `path` names (a step directory, a checkpoint root or a run's OUT)
 * and verifies every file in full. */
static tagc_status open_ckpt(const char *path, tagc_ckpt_reader **rd) {
  char p[PATH_CAP];
  snprintf(p, sizeof p, "%s/manifest.json", path);
  if (exists(p)) {
    TAGC_CHECK(tagc_ckpt_open(path, TAGC_CKPT_VERIFY_QUICK, rd));
  } else {
    snprintf(p, sizeof p, "%s/ckpt", path);
    TAGC_CHECK(tagc_ckpt_find_latest_valid(is_dir(p) ? p : path, TAGC_CKPT_VERIFY_QUICK, rd));
  }
  tagc_status st = tagc_ckpt_verify_files(*rd, 0, 1);
  if (st != TAGC_OK) {
    tagc_ckpt_close(*rd);
    *rd = NULL;
  }
  return st;
}

static tagc_status meta_int(const json_t *model, const char *key, int *out) {
  int64_t v;
  if (tagc_json_get_int(model, key, &v) != TAGC_OK || v < 1 || v > (1 << 30))
    return tagc_errorf(TAGC_ECORRUPT, "the manifest's model has no valid '%s'", key);
  *out = (int)v;
  return TAGC_OK;
}

/* The model config of the manifest: "vocab" is the vocabulary; the rows of wte (the padded
 * vocabulary) come from the tensor table, so a padded model needs no field of its own. */
static tagc_status ckpt_config(tagc_ckpt_reader *rd, tagc_model_config *cfg, int *vocab) {
  const json_t *model = tagc_ckpt_reader_meta(rd, "model");
  if (!json_is_object(model))
    return tagc_errorf(TAGC_ECORRUPT, "%s: the manifest has no model config", tagc_ckpt_reader_path(rd));
  TAGC_CHECK(meta_int(model, "vocab", vocab));
  TAGC_CHECK(meta_int(model, "ctx", &cfg->ctx));
  TAGC_CHECK(meta_int(model, "layers", &cfg->n_layer));
  TAGC_CHECK(meta_int(model, "heads", &cfg->n_head));
  TAGC_CHECK(meta_int(model, "dim", &cfg->d_model));
  cfg->vocab = *vocab;
  const json_t *tensors = tagc_ckpt_reader_meta(rd, "tensors");
  size_t i;
  const json_t *t;
  json_array_foreach(tensors, i, t) {
    const char *name = json_string_value(json_object_get(t, "name"));
    if (name && strcmp(name, "wte") == 0)
      TAGC_CHECK(meta_int(t, "rows", &cfg->padded_vocab));
  }
  return TAGC_OK;
}

/* The manifest's tensor table must be the layout this build computes for its config: the
 * same names, shapes and offsets in the same order. */
static tagc_status check_tensor_table(tagc_ckpt_reader *rd, const tagc_model_layout *lay) {
  const json_t *tensors = tagc_ckpt_reader_meta(rd, "tensors");
  if (json_array_size(tensors) != (size_t)lay->n_tensors)
    return tagc_errorf(TAGC_ECORRUPT, "%s: %zu tensors in the manifest, tagc's model has %d",
                       tagc_ckpt_reader_path(rd), json_array_size(tensors), lay->n_tensors);
  for (int i = 0; i < lay->n_tensors; i++) {
    const json_t *t = json_array_get(tensors, (size_t)i);
    const tagc_tensor_info *ti = &lay->tensors[i];
    const char *name = json_string_value(json_object_get(t, "name"));
    if (!name || strcmp(name, ti->name) != 0 ||
        json_integer_value(json_object_get(t, "rows")) != ti->rows ||
        json_integer_value(json_object_get(t, "cols")) != ti->cols ||
        json_integer_value(json_object_get(t, "offset")) != (json_int_t)ti->offset)
      return tagc_errorf(TAGC_ECORRUPT, "%s: tensor %d of the manifest (%s) is not tagc's %s "
                         "(%d x %d at %zu)", tagc_ckpt_reader_path(rd), i, name ? name : "?",
                         ti->name, ti->rows, ti->cols, ti->offset);
  }
  return TAGC_OK;
}

/* Reads the "param" stream of every unit into its place in the arena. A unit is a run of
 * whole tensors named "u<unit>.<first tensor>" (docs/checkpoint-format.md); the units must
 * tile the arena exactly, in order. */
static tagc_status gather_params(tagc_ckpt_reader *rd, tagctl_model *m) {
  const char *path = tagc_ckpt_reader_path(rd);
  int stream = tagc_ckpt_reader_stream_index(rd, "param");
  if (stream < 0)
    return tagc_errorf(TAGC_ECORRUPT, "%s: no 'param' stream", path);
  size_t covered = 0;
  for (int u = 0; u < tagc_ckpt_reader_n_units(rd); u++) {
    const json_t *unit = json_array_get(json_object_get(tagc_ckpt_reader_manifest(rd), "units"), (size_t)u);
    const char *name = json_string_value(json_object_get(unit, "name"));
    const char *dot = name ? strchr(name, '.') : NULL;
    const tagc_tensor_info *first = dot ? find_tensor(&m->layout, dot + 1) : NULL;
    int64_t numel = tagc_ckpt_reader_unit_numel(rd, u);
    if (!first || first->offset != covered || numel < 0 ||
        first->offset + (size_t)numel > m->layout.n_params)
      return tagc_errorf(TAGC_ECORRUPT, "%s: unit '%s' is not a run of tagc's tensors", path,
                         name ? name : "?");
    TAGC_CHECK(tagc_ckpt_read(rd, u, stream, 0, numel, m->params + first->offset));
    covered += (size_t)numel;
  }
  if (covered != m->layout.n_params)
    return tagc_errorf(TAGC_ECORRUPT, "%s: the units hold %zu parameters, the model %zu", path,
                       covered, m->layout.n_params);
  return TAGC_OK;
}

static tagc_status load_ckpt(const char *path, tagctl_model *m) {
  tagc_ckpt_reader *rd = NULL;
  TAGC_CHECK(open_ckpt(path, &rd));
  tagc_model_config cfg = {0};
  int vocab = 0;
  tagc_status st;
  TAGC_CHECK_GOTO(ckpt_config(rd, &cfg, &vocab), st, done);
  TAGC_CHECK_GOTO(tagc_model_layout_init(&m->layout, &cfg), st, done);
  TAGC_CHECK_GOTO(check_tensor_table(rd, &m->layout), st, done);
  TAGC_CHECK_GOTO(model_alloc(m, vocab), st, done);
  TAGC_CHECK_GOTO(gather_params(rd, m), st, done);
  m->step = tagc_ckpt_reader_step(rd);
done:
  tagc_ckpt_close(rd);
  return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Writing files: temporary name, fsync, rename                                             */

typedef struct out_file {
  FILE *f;
  char path[PATH_CAP], tmp[PATH_CAP];
  int failed;
} out_file;

static tagc_status out_open(out_file *o, const char *path) {
  memset(o, 0, sizeof *o);
  snprintf(o->path, sizeof o->path, "%s", path);
  snprintf(o->tmp, sizeof o->tmp, "%s.tmp", path);
  o->f = fopen(o->tmp, "wb");
  if (!o->f)
    return tagc_errnof(TAGC_EIO, "%s", o->tmp);
  return TAGC_OK;
}

static void out_write(out_file *o, const void *p, size_t bytes) {
  if (!o->failed && bytes && fwrite(p, 1, bytes, o->f) != bytes)
    o->failed = errno ? errno : EIO;
}

/* Writes `n` floats of x, or zeros when x is NULL. */
static void out_floats(out_file *o, const float *x, size_t n) {
  static const float zeros[1024];
  if (x) {
    out_write(o, x, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; i += 1024)
    out_write(o, zeros, (n - i < 1024 ? n - i : 1024) * sizeof(float));
}

/* Completes the file: flush, fsync, rename to its name; on any failure removes it. */
static tagc_status out_close(out_file *o) {
  int err = o->failed;
  if (!err && (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0))
    err = errno;
  if (fclose(o->f) != 0 && !err)
    err = errno;
  if (!err && rename(o->tmp, o->path) != 0)
    err = errno;
  if (!err)
    return TAGC_OK;
  unlink(o->tmp);
  errno = err;
  return tagc_errnof(TAGC_EIO, "%s", o->path);
}

/* ---------------------------------------------------------------------------------------- */
/* safetensors                                                                              */

/* One tensor of the export: its name, where it is in the arena, and whether it is written
 * transposed. */
typedef struct st_entry {
  char name[64];
  const tagc_tensor_info *ti;
  int transpose;
} st_entry;

static void set_entry(st_entry *e, const char *name, const tagc_tensor_info *ti, int transpose) {
  snprintf(e->name, sizeof e->name, "%s", name);
  e->ti = ti;
  e->transpose = transpose;
}

/* GPT2LMHeadModel's state dict in tagc's arena order; returns the count. */
static int st_entries(const tagc_model_layout *lay, st_entry *e) {
  int n = 0;
  set_entry(&e[n++], "transformer.wte.weight", find_tensor(lay, "wte"), 0);
  set_entry(&e[n++], "transformer.wpe.weight", find_tensor(lay, "wpe"), 0);
  for (int l = 0; l < lay->cfg.n_layer; l++)
    for (int k = 0; k < N_BLOCK_TENSORS; k++) {
      char name[64];
      snprintf(name, sizeof name, "transformer.h.%d.%s", l, block_tensors[k].hf);
      set_entry(&e[n++], name, block_tensor(lay, l, block_tensors[k].tagc), block_tensors[k].conv1d);
    }
  set_entry(&e[n++], "transformer.ln_f.weight", find_tensor(lay, "lnf_w"), 0);
  set_entry(&e[n++], "transformer.ln_f.bias", find_tensor(lay, "lnf_b"), 0);
  set_entry(&e[n++], "lm_head.weight", find_tensor(lay, "head_w"), 0);
  return n;
}

static json_t *st_header(const tagctl_model *m, const st_entry *e, int n) {
  json_t *h = json_object(), *meta = json_object();
  char text[32];
  json_object_set_new(meta, "format", json_string("pt"));
  json_object_set_new(meta, "producer", json_string("tagc"));
  snprintf(text, sizeof text, "%d", m->vocab);
  json_object_set_new(meta, "vocab_size", json_string(text));
  if (m->step >= 0) {
    snprintf(text, sizeof text, "%lld", (long long)m->step);
    json_object_set_new(meta, "step", json_string(text));
  }
  json_object_set_new(h, "__metadata__", meta);
  size_t offset = 0;
  for (int i = 0; i < n; i++) {
    const tagc_tensor_info *ti = e[i].ti;
    json_t *shape = ti->cols == 1 ? json_pack("[I]", (json_int_t)ti->rows)
                    : e[i].transpose ? json_pack("[I, I]", (json_int_t)ti->cols, (json_int_t)ti->rows)
                                     : json_pack("[I, I]", (json_int_t)ti->rows, (json_int_t)ti->cols);
    size_t bytes = ti->numel * sizeof(float);
    json_object_set_new(h, e[i].name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", shape,
                                                "data_offsets", (json_int_t)offset,
                                                (json_int_t)(offset + bytes)));
    offset += bytes;
  }
  return h;
}

/* The file name part of `path` (after its last '/'). Borrowed from path. */
static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* config.json in the folder of the safetensors file `st_path`. */
static void config_path(char *buf, size_t cap, const char *st_path) {
  snprintf(buf, cap, "%.*sconfig.json", (int)(base_name(st_path) - st_path), st_path);
}

tagc_status tagctl_model_check_out(const char *path, int safetensors) {
  struct stat sb;
  const char *base = base_name(path);
  if (!*base || !strcmp(base, ".") || !strcmp(base, "..") || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)))
    return tagc_errorf(TAGC_EINVAL, "--out %s is a folder: name the model file to write", path);
  if (!safetensors)
    return TAGC_OK;
  /* config.json is written through config.json.tmp.<pid> (common/json.h) */
  if (!strcmp(base, "config.json") || !strncmp(base, "config.json.tmp", strlen("config.json.tmp")))
    return tagc_errorf(TAGC_EINVAL, "--out %s: the config.json written beside it would replace it; "
                       "name the model file otherwise (model.safetensors)", path);
  char cfg[PATH_CAP];
  config_path(cfg, sizeof cfg, path);
  if (stat(cfg, &sb) == 0 && S_ISDIR(sb.st_mode))
    return tagc_errorf(TAGC_EINVAL, "%s is a folder: the config.json of --out %s cannot be written", cfg, path);
  return TAGC_OK;
}

/* Hugging Face's config.json of the model, beside the safetensors file. */
static tagc_status write_hf_config(const tagctl_model *m, const char *st_path) {
  const tagc_model_config *c = &m->layout.cfg;
  char path[PATH_CAP];
  config_path(path, sizeof path, st_path);
  json_t *cfg = json_pack(
      "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:b, s:f, s:f, s:f, s:b, s:s}",
      "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", c->padded_vocab,
      "n_positions", c->ctx, "n_ctx", c->ctx, "n_embd", c->d_model, "n_layer", c->n_layer,
      "n_head", c->n_head, "activation_function", "gelu_new", "layer_norm_epsilon", 1e-5,
      "tie_word_embeddings", 0, "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0,
      "scale_attn_weights", 1, "torch_dtype", "float32");
  json_t *tagc = json_pack("{s:i}", "vocab", m->vocab); /* the ids in use: [0, vocab) */
  if (tagc && m->step >= 0)
    json_object_set_new(tagc, "step", json_integer(m->step));
  if (!cfg || !tagc) {
    json_decref(cfg);
    json_decref(tagc);
    return tagc_errorf(TAGC_ENOMEM, "config.json");
  }
  json_object_set_new(cfg, "tagc", tagc);
  tagc_status st = tagc_json_write_file(path, cfg);
  json_decref(cfg);
  return st;
}

/* The header and the data, each Conv1D weight transposed through scratch. */
static tagc_status write_st_file(const tagctl_model *m, const st_entry *e, int n, const char *text,
                                 float *scratch, const char *path) {
  out_file o;
  TAGC_CHECK(out_open(&o, path));
  size_t len = strlen(text), padded = (len + 8 + 7) / 8 * 8 - 8; /* data starts 8-aligned */
  uint64_t n_header = padded;
  out_write(&o, &n_header, sizeof n_header);
  out_write(&o, text, len);
  for (size_t i = len; i < padded; i++)
    out_write(&o, " ", 1);
  for (int i = 0; i < n; i++) {
    const tagc_tensor_info *ti = e[i].ti;
    const float *x = m->params + ti->offset;
    if (e[i].transpose) { /* (out, in) -> (in, out) */
      for (int r = 0; r < ti->rows; r++)
        for (int c = 0; c < ti->cols; c++)
          scratch[(size_t)c * ti->rows + r] = x[(size_t)r * ti->cols + c];
      x = scratch;
    }
    out_floats(&o, x, ti->numel);
  }
  return out_close(&o);
}

tagc_status tagctl_model_write_safetensors(const tagctl_model *m, const char *path) {
  TAGC_CHECK(tagctl_model_check_out(path, 1));
  st_entry *e = calloc(TAGC_MAX_TENSORS, sizeof *e);
  char *text = NULL;
  float *scratch = NULL;
  tagc_status st = e ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "tensor list");
  int n = e ? st_entries(&m->layout, e) : 0;
  size_t largest = 1;
  for (int i = 0; i < n && st == TAGC_OK; i++) {
    if (!e[i].ti)
      st = tagc_errorf(TAGC_EINTERNAL, "safetensors: %s has no tagc tensor", e[i].name);
    else if (e[i].transpose && e[i].ti->numel > largest)
      largest = e[i].ti->numel;
  }
  if (st == TAGC_OK) {
    json_t *h = st_header(m, e, n);
    text = h ? json_dumps(h, JSON_COMPACT) : NULL;
    json_decref(h);
    scratch = malloc(largest * sizeof(float));
    if (!text || !scratch)
      st = tagc_errorf(TAGC_ENOMEM, "safetensors header and scratch");
  }
  if (st == TAGC_OK)
    st = write_st_file(m, e, n, text, scratch, path);
  if (st == TAGC_OK)
    st = write_hf_config(m, path);
  free(text);
  free(scratch);
  free(e);
  return st;
}

/* ---------------------------------------------------------------------------------------- */
/* llm.c model files                                                                        */

/* The 16 llm.c tensors (a block tensor: all layers in a row), then tagc's head: calls
 * fn(ctx, the arena's tensor, its floats, the floats in the file) in file order; the file
 * pads wte and the head with zero rows up to vp. */
typedef void (*llmc_visit_fn)(void *ctx, float *x, size_t numel, size_t file_numel);

static void llmc_visit(const tagctl_model *m, int vp, int with_head, llmc_visit_fn fn, void *ctx) {
  const tagc_model_layout *lay = &m->layout;
  size_t C = (size_t)lay->cfg.d_model;
  const tagc_tensor_info *wte = find_tensor(lay, "wte"), *wpe = find_tensor(lay, "wpe");
  size_t rows = (size_t)(wte->rows < vp ? wte->rows : vp);
  fn(ctx, m->params + wte->offset, rows * C, (size_t)vp * C);
  fn(ctx, m->params + wpe->offset, wpe->numel, wpe->numel);
  for (int k = 0; k < N_BLOCK_TENSORS; k++)
    for (int l = 0; l < lay->cfg.n_layer; l++) {
      const tagc_tensor_info *ti = block_tensor(lay, l, block_tensors[k].tagc);
      fn(ctx, m->params + ti->offset, ti->numel, ti->numel);
    }
  const char *tail[] = {"lnf_w", "lnf_b"};
  for (int k = 0; k < 2; k++) {
    const tagc_tensor_info *ti = find_tensor(lay, tail[k]);
    fn(ctx, m->params + ti->offset, ti->numel, ti->numel);
  }
  if (with_head) {
    const tagc_tensor_info *head = find_tensor(lay, "head_w");
    fn(ctx, m->params + head->offset, rows * C, (size_t)vp * C);
  }
}

static int padded_vocab(int rows) {
  return (rows + 127) / 128 * 128;
}

static void write_tensor(void *ctx, float *x, size_t numel, size_t file_numel) {
  out_write(ctx, x, numel * sizeof(float));
  out_floats(ctx, NULL, file_numel - numel);
}

tagc_status tagctl_model_write_llmc(const tagctl_model *m, const char *path) {
  const tagc_model_config *c = &m->layout.cfg;
  int32_t header[LLMC_HEADER_INTS] = {0};
  header[0] = LLMC_MAGIC;
  header[1] = LLMC_VERSION;
  header[2] = c->ctx;
  header[3] = m->vocab;
  header[4] = c->n_layer;
  header[5] = c->n_head;
  header[6] = c->d_model;
  header[7] = padded_vocab(c->padded_vocab);
  header[LLMC_UNTIED_HEAD_SLOT] = 1;
  TAGC_CHECK(tagctl_model_check_out(path, 0));
  out_file o;
  TAGC_CHECK(out_open(&o, path));
  out_write(&o, header, sizeof header);
  llmc_visit(m, header[7], 1, write_tensor, &o);
  return out_close(&o);
}

typedef struct llmc_reader {
  FILE *f;
  int failed;
} llmc_reader;

static void read_tensor(void *ctx, float *x, size_t numel, size_t file_numel) {
  llmc_reader *r = ctx;
  if (r->failed)
    return;
  if (fread(x, sizeof(float), numel, r->f) != numel ||
      fseeko(r->f, (off_t)((file_numel - numel) * sizeof(float)), SEEK_CUR) != 0)
    r->failed = 1;
}

/* Copies wte into the head (llm.c ties them). */
static void tie_head(tagctl_model *m) {
  const tagc_tensor_info *wte = find_tensor(&m->layout, "wte"), *head = find_tensor(&m->layout, "head_w");
  memcpy(m->params + head->offset, m->params + wte->offset, head->numel * sizeof(float));
}

static tagc_status llmc_parse(FILE *f, const char *path, off_t size, tagctl_model *m) {
  int32_t h[LLMC_HEADER_INTS];
  if (fread(h, sizeof h, 1, f) != 1 || h[0] != LLMC_MAGIC)
    return tagc_errorf(TAGC_ECORRUPT, "%s: not an llm.c model file (no magic %d)", path, LLMC_MAGIC);
  if (h[1] != 1 && h[1] != 3)
    return tagc_errorf(TAGC_ECORRUPT, "%s: llm.c model version %d (1 and 3 are known)", path, h[1]);
  int vp = h[1] == 3 ? h[7] : h[3], untied = h[LLMC_UNTIED_HEAD_SLOT] == 1;
  if (vp < h[3] || vp < 1)
    return tagc_errorf(TAGC_ECORRUPT, "%s: padded vocabulary %d below the vocabulary %d", path, vp, h[3]);
  tagc_model_config cfg = {.vocab = h[3], .ctx = h[2], .n_layer = h[4], .n_head = h[5],
                           .d_model = h[6], .padded_vocab = vp};
  if (tagc_model_layout_init(&m->layout, &cfg) != TAGC_OK) {
    char detail[512]; /* the detail lives in the buffer tagc_errorf writes */
    snprintf(detail, sizeof detail, "%s", tagc_last_error());
    return tagc_errorf(TAGC_ECORRUPT, "%s: %s", path, detail);
  }
  size_t C = (size_t)cfg.d_model, expect = m->layout.n_params - (untied ? 0 : (size_t)vp * C);
  if ((uint64_t)size != sizeof h + (uint64_t)expect * sizeof(float))
    return tagc_errorf(TAGC_ECORRUPT, "%s: %lld bytes, the header's model needs %llu", path,
                       (long long)size, (unsigned long long)(sizeof h + expect * sizeof(float)));
  TAGC_CHECK(model_alloc(m, h[3]));
  llmc_reader r = {f, 0};
  llmc_visit(m, vp, untied, read_tensor, &r);
  if (r.failed)
    return tagc_errnof(TAGC_EIO, "%s", path);
  if (!untied)
    tie_head(m);
  m->step = -1;
  return TAGC_OK;
}

static tagc_status load_llmc(const char *path, tagctl_model *m) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "%s", path);
  struct stat sb;
  tagc_status st = fstat(fileno(f), &sb) == 0 ? llmc_parse(f, path, sb.st_size, m)
                                               : tagc_errnof(TAGC_EIO, "%s", path);
  fclose(f);
  return st;
}

/* ---------------------------------------------------------------------------------------- */

tagc_status tagctl_model_load(const char *path, tagctl_model *m) {
  memset(m, 0, sizeof *m);
  struct stat sb;
  if (stat(path, &sb) != 0)
    return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "%s", path);
  tagc_status st = S_ISDIR(sb.st_mode) ? load_ckpt(path, m) : load_llmc(path, m);
  if (st != TAGC_OK)
    tagctl_model_free(m);
  return st;
}
