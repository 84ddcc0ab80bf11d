/* A model as one fp32 arena: gathered from a checkpoint, read from and written to an llm.c
 * model file, fitted to a run's layout (model_io.h); safetensors are model/model_hf.c. */
#include "model/model_io.h"

#include <dirent.h>
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
#include "model/model_io_internal.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the file formats written here are little-endian: this host is not"
#endif

#define LLMC_MAGIC 20240326
#define LLMC_VERSION 3
#define LLMC_HEADER_INTS 256
#define LLMC_UNTIED_HEAD_SLOT 8 /* tagc's extension: 1 = the head follows lnfb */

const block_tensor_name model_block_tensors[] = {
    {"ln1_w", "ln_1.weight", 0},        {"ln1_b", "ln_1.bias", 0},
    {"qkv_w", "attn.c_attn.weight", 1}, {"qkv_b", "attn.c_attn.bias", 0},
    {"attn_proj_w", "attn.c_proj.weight", 1}, {"attn_proj_b", "attn.c_proj.bias", 0},
    {"ln2_w", "ln_2.weight", 0},        {"ln2_b", "ln_2.bias", 0},
    {"fc_w", "mlp.c_fc.weight", 1},     {"fc_b", "mlp.c_fc.bias", 0},
    {"mlp_proj_w", "mlp.c_proj.weight", 1}, {"mlp_proj_b", "mlp.c_proj.bias", 0},
};
const int model_n_block_tensors = (int)(sizeof model_block_tensors / sizeof model_block_tensors[0]);

int model_is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int model_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

const tagc_tensor_info *model_find_tensor(const tagc_model_layout *lay, const char *name) {
  for (int t = 0; t < lay->n_tensors; t++)
    if (strcmp(lay->tensors[t].name, name) == 0)
      return &lay->tensors[t];
  return NULL;
}

const tagc_tensor_info *model_block_tensor(const tagc_model_layout *lay, int l, const char *name) {
  char full[64];
  snprintf(full, sizeof full, "h%d.%s", l, name);
  return model_find_tensor(lay, full);
}

tagc_status model_alloc(tagctl_model *m, int vocab) {
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
  if (model_exists(p)) {
    TAGC_CHECK(tagc_ckpt_open(path, TAGC_CKPT_VERIFY_QUICK, rd));
  } else {
    snprintf(p, sizeof p, "%s/ckpt", path);
    TAGC_CHECK(tagc_ckpt_find_latest_valid(model_is_dir(p) ? p : path, TAGC_CKPT_VERIFY_QUICK, rd));
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
    const tagc_tensor_info *first = dot ? model_find_tensor(&m->layout, dot + 1) : NULL;
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

tagc_status out_open(out_file *o, const char *path) {
  memset(o, 0, sizeof *o);
  snprintf(o->path, sizeof o->path, "%s", path);
  snprintf(o->tmp, sizeof o->tmp, "%s.tmp", path);
  o->f = fopen(o->tmp, "wb");
  if (!o->f)
    return tagc_errnof(TAGC_EIO, "%s", o->tmp);
  return TAGC_OK;
}

void out_write(out_file *o, const void *p, size_t bytes) {
  if (!o->failed && bytes && fwrite(p, 1, bytes, o->f) != bytes)
    o->failed = errno ? errno : EIO;
}

void out_zeros(out_file *o, size_t bytes) {
  static const char zeros[4096];
  for (size_t i = 0; i < bytes; i += sizeof zeros)
    out_write(o, zeros, bytes - i < sizeof zeros ? bytes - i : sizeof zeros);
}

tagc_status out_close(out_file *o) {
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
/* llm.c model files                                                                        */

/* The 16 llm.c tensors (a block tensor: all layers in a row), then tagc's head: calls
 * fn(ctx, the arena's tensor, its floats, the floats in the file) in file order; of wte and
 * the head the first `rows` rows are the arena's, the file has vp. */
typedef void (*llmc_visit_fn)(void *ctx, float *x, size_t numel, size_t file_numel);

static void llmc_visit(const tagctl_model *m, int vp, size_t rows, int with_head, llmc_visit_fn fn,
                       void *ctx) {
  const tagc_model_layout *lay = &m->layout;
  size_t C = (size_t)lay->cfg.d_model;
  const tagc_tensor_info *wte = model_find_tensor(lay, "wte"), *wpe = model_find_tensor(lay, "wpe");
  fn(ctx, m->params + wte->offset, rows * C, (size_t)vp * C);
  fn(ctx, m->params + wpe->offset, wpe->numel, wpe->numel);
  for (int k = 0; k < model_n_block_tensors; k++)
    for (int l = 0; l < lay->cfg.n_layer; l++) {
      const tagc_tensor_info *ti = model_block_tensor(lay, l, model_block_tensors[k].tagc);
      fn(ctx, m->params + ti->offset, ti->numel, ti->numel);
    }
  const char *tail[] = {"lnf_w", "lnf_b"};
  for (int k = 0; k < 2; k++) {
    const tagc_tensor_info *ti = model_find_tensor(lay, tail[k]);
    fn(ctx, m->params + ti->offset, ti->numel, ti->numel);
  }
  if (with_head) {
    const tagc_tensor_info *head = model_find_tensor(lay, "head_w");
    fn(ctx, m->params + head->offset, rows * C, (size_t)vp * C);
  }
}

static int padded_vocab(int rows) {
  return (rows + 127) / 128 * 128;
}

static void write_tensor(void *ctx, float *x, size_t numel, size_t file_numel) {
  out_write(ctx, x, numel * sizeof(float));
  out_zeros(ctx, (file_numel - numel) * sizeof(float));
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
  llmc_visit(m, header[7], (size_t)m->vocab, 1, write_tensor, &o); /* rows past the vocabulary: 0 */
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

void model_tie_head(tagctl_model *m) {
  const tagc_tensor_info *wte = model_find_tensor(&m->layout, "wte"), *head = model_find_tensor(&m->layout, "head_w");
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
  llmc_visit(m, vp, (size_t)vp, untied, read_tensor, &r);
  if (r.failed)
    return tagc_errnof(TAGC_EIO, "%s", path);
  if (!untied)
    model_tie_head(m);
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

/* The first bytes of a safetensors file: a little-endian header length, then '{' (and not
 * llm.c's magic). */
static int looks_like_safetensors(const char *path) {
  unsigned char b[9];
  int32_t magic;
  FILE *f = fopen(path, "rb");
  int yes = f && fread(b, 1, sizeof b, f) == sizeof b && b[8] == '{' && b[6] == 0 && b[7] == 0 &&
            (memcpy(&magic, b, sizeof magic), magic != LLMC_MAGIC);
  if (f)
    fclose(f);
  return yes;
}

tagc_status tagctl_model_load(const char *path, tagctl_model *m) {
  memset(m, 0, sizeof *m);
  struct stat sb;
  if (stat(path, &sb) != 0)
    return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "%s", path);
  char st_path[PATH_CAP];
  snprintf(st_path, sizeof st_path, "%s/model.safetensors", path);
  tagc_status st;
  if (S_ISDIR(sb.st_mode))
    st = model_exists(st_path) ? model_load_safetensors(st_path, m) : load_ckpt(path, m);
  else
    st = looks_like_safetensors(path) ? model_load_safetensors(path, m) : load_llmc(path, m);
  if (st != TAGC_OK)
    tagctl_model_free(m);
  return st;
}

/* ---------------------------------------------------------------------------------------- */

tagc_status tagctl_model_fit(const tagctl_model *m, const tagc_model_layout *layout, float *params) {
  const tagc_model_config *have = &m->layout.cfg, *want = &layout->cfg;
  const struct {
    const char *what, *option;
    int have, want;
  } dims[] = {{"vocabulary", "--vocab", m->vocab, want->vocab},
              {"context", "--ctx", have->ctx, want->ctx},
              {"layers", "--layers", have->n_layer, want->n_layer},
              {"heads", "--heads", have->n_head, want->n_head},
              {"width", "--dim", have->d_model, want->d_model}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (dims[i].have != dims[i].want)
      return tagc_errorf(TAGC_EINVAL, "the model's %s is %d, this run's (%s) %d", dims[i].what,
                         dims[i].have, dims[i].option, dims[i].want);
  memset(params, 0, layout->n_params * sizeof(float));
  for (int t = 0; t < layout->n_tensors; t++) { /* the same tensors in the same order */
    const tagc_tensor_info *to = &layout->tensors[t], *from = &m->layout.tensors[t];
    int vocab_rows = to->role == TAGC_ROLE_TOK_EMB || to->role == TAGC_ROLE_HEAD;
    size_t n = vocab_rows ? (size_t)m->vocab * (size_t)to->cols : to->numel;
    memcpy(params + to->offset, m->params + from->offset, n * sizeof(float));
  }
  return TAGC_OK;
}

/* The file name part of `path` (after its last '/'). Borrowed from path. */
static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static int dir_is_empty(const char *path) {
  DIR *d = opendir(path);
  if (!d)
    return 0;
  struct dirent *de;
  int empty = 1;
  while (empty && (de = readdir(d)))
    empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
  closedir(d);
  return empty;
}

tagc_status tagctl_model_check_out(const char *path, int hf_dir) {
  char p[PATH_CAP];
  snprintf(p, sizeof p, "%s", path);
  for (size_t n = strlen(p); hf_dir && n > 1 && p[n - 1] == '/'; n--)
    p[n - 1] = 0; /* a folder may be named "hf/" */
  const char *base = base_name(p);
  struct stat sb;
  int there = stat(p, &sb) == 0;
  if (!hf_dir) {
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..") || (there && S_ISDIR(sb.st_mode)))
      return tagc_errorf(TAGC_EINVAL, "--out %s is a folder: name the model file to write", path);
    if (there)
      return tagc_errorf(TAGC_EINVAL, "--out %s exists: remove it or name another file", path);
    return TAGC_OK;
  }
  if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
    return tagc_errorf(TAGC_EINVAL, "--out %s: name the folder to create for the model", path);
  if (there && !S_ISDIR(sb.st_mode))
    return tagc_errorf(TAGC_EINVAL, "--out %s exists and is not a folder: name a new folder "
                       "for the model (it gets config.json, model.safetensors, ...)", path);
  if (there && !dir_is_empty(p))
    return tagc_errorf(TAGC_EINVAL, "--out %s is a folder that is not empty: name a new or "
                       "empty folder for the model", path);
  return TAGC_OK;
}
