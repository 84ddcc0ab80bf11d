/* safetensors with Hugging Face GPT-2 names, read into an arena and written as a Hugging Face
 * model folder (model_io.h). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/json.h"
#include "kernels/bf16.h"
#include "model/model_io_internal.h"

#define ST_MAX_HEADER (100u << 20) /* the safetensors format's own bound on the header */

static const char *const dtype_names[] = {"F32", "BF16", "F16"};
static const size_t dtype_bytes[] = {4, 2, 2};
static const char *const torch_dtypes[] = {"float32", "bfloat16", "float16"};

/* One tensor of a GPT-2 state dict: its name without the `transformer.` prefix (lm_head has
 * none), the arena tensor, the rows it has in the file (wte and the head: the vocabulary) and
 * whether it is stored transposed (Conv1D). */
typedef struct st_entry {
  char name[64];
  const tagc_tensor_info *ti;
  int rows, transpose;
} st_entry;

static void set_entry(st_entry *e, const char *name, const tagc_tensor_info *ti, int rows, int transpose) {
  snprintf(e->name, sizeof e->name, "%s", name);
  e->ti = ti;
  e->rows = rows;
  e->transpose = transpose;
}

/* GPT2LMHeadModel's state dict in tagc's arena order; returns the count (0 when the layout
 * lacks a tensor, which tagc_model_layout_init never gives). */
static int st_entries(const tagc_model_layout *lay, int vocab, st_entry *e) {
  int n = 0;
  set_entry(&e[n++], "wte.weight", model_find_tensor(lay, "wte"), vocab, 0);
  set_entry(&e[n++], "wpe.weight", model_find_tensor(lay, "wpe"), 0, 0);
  for (int l = 0; l < lay->cfg.n_layer; l++)
    for (int k = 0; k < model_n_block_tensors; k++) {
      char name[64];
      snprintf(name, sizeof name, "h.%d.%s", l, model_block_tensors[k].hf);
      set_entry(&e[n++], name, model_block_tensor(lay, l, model_block_tensors[k].tagc), 0,
                model_block_tensors[k].conv1d);
    }
  set_entry(&e[n++], "ln_f.weight", model_find_tensor(lay, "lnf_w"), 0, 0);
  set_entry(&e[n++], "ln_f.bias", model_find_tensor(lay, "lnf_b"), 0, 0);
  set_entry(&e[n++], "lm_head.weight", model_find_tensor(lay, "head_w"), vocab, 0);
  for (int i = 0; i < n; i++) {
    if (!e[i].ti)
      return 0;
    if (!e[i].rows)
      e[i].rows = e[i].ti->rows;
  }
  return n;
}

/* The shape of an entry in the file: [rows] for a vector, [rows, cols], or [cols, rows]
 * transposed. */
static json_t *st_shape(const st_entry *e) {
  const tagc_tensor_info *ti = e->ti;
  if (ti->cols == 1)
    return json_pack("[I]", (json_int_t)e->rows);
  return e->transpose ? json_pack("[I, I]", (json_int_t)ti->cols, (json_int_t)e->rows)
                      : json_pack("[I, I]", (json_int_t)e->rows, (json_int_t)ti->cols);
}

static size_t st_numel(const st_entry *e) {
  return (size_t)e->rows * (size_t)e->ti->cols;
}

/* ---------------------------------------------------------------------------------------- */
/* Reading                                                                                  */

static float f16_to_f32(uint16_t h) {
  _Float16 x;
  memcpy(&x, &h, sizeof x);
  return (float)x;
}

/* config.json beside the safetensors file `st_path`: n_head, which the tensors do not give. */
static tagc_status read_n_head(const char *st_path, int *n_head, int *n_layer) {
  char path[PATH_CAP];
  const char *slash = strrchr(st_path, '/');
  snprintf(path, sizeof path, "%.*sconfig.json", slash ? (int)(slash + 1 - st_path) : 0, st_path);
  json_error_t jerr;
  json_t *cfg = json_load_file(path, 0, &jerr);
  if (!cfg)
    return tagc_errorf(errno == ENOENT && !model_exists(path) ? TAGC_ENOTFOUND : TAGC_ECORRUPT,
                       "%s: %s (the config.json of %s gives its n_head)", path, jerr.text, st_path);
  int64_t nh = 0, nl = 0;
  tagc_status st = tagc_json_get_int(cfg, "n_head", &nh) == TAGC_OK && tagc_json_get_int(cfg, "n_layer", &nl) == TAGC_OK &&
                           nh >= 1 && nh <= 4096 && nl >= 1 && nl <= TAGC_MAX_LAYERS
                       ? TAGC_OK
                       : tagc_errorf(TAGC_ECORRUPT, "%s: no valid n_head and n_layer", path);
  json_decref(cfg);
  *n_head = (int)nh;
  *n_layer = (int)nl;
  return st;
}

/* The header's entry for `name` (with the `transformer.` prefix when the file has it). */
static json_t *header_entry(json_t *h, const char *prefix, const char *name) {
  char full[96];
  snprintf(full, sizeof full, "%s%s", strncmp(name, "lm_head", 7) ? prefix : "", name);
  return json_object_get(h, full);
}

/* Dimension d of an entry's shape; -1 when it has no such dimension. */
static int64_t shape_dim(const json_t *t, size_t d) {
  const json_t *shape = json_object_get(t, "shape");
  return d < json_array_size(shape) ? json_integer_value(json_array_get(shape, d)) : -1;
}

/* The model config from the tensors' shapes (wte: [V, C], wpe: [T, C]) and config.json. */
static tagc_status st_config(json_t *h, const char *prefix, const char *path, tagc_model_config *cfg) {
  json_t *wte = header_entry(h, prefix, "wte.weight"), *wpe = header_entry(h, prefix, "wpe.weight");
  if (!wte || !wpe)
    return tagc_errorf(TAGC_ECORRUPT, "%s: no %swte.weight and %swpe.weight: not a GPT-2 model",
                       path, prefix, prefix);
  memset(cfg, 0, sizeof *cfg);
  int64_t v = shape_dim(wte, 0), c = shape_dim(wte, 1), t = shape_dim(wpe, 0);
  if (v < 1 || v > TAGC_MAX_VOCAB || t < 1 || t > (1 << 20) || c < 1 || c > (1 << 20) || shape_dim(wpe, 1) != c)
    return tagc_errorf(TAGC_ECORRUPT, "%s: wte and wpe are not [vocabulary, width] and [context, width]", path);
  cfg->vocab = (int)v;
  cfg->ctx = (int)t;
  cfg->d_model = (int)c;
  TAGC_CHECK(read_n_head(path, &cfg->n_head, &cfg->n_layer));
  tagc_status st = tagc_model_layout_init(&(tagc_model_layout){0}, cfg);
  if (st != TAGC_OK) {
    char detail[512]; /* the detail lives in the buffer tagc_errorf writes */
    snprintf(detail, sizeof detail, "%s", tagc_last_error());
    return tagc_errorf(TAGC_ECORRUPT, "%s: %s", path, detail);
  }
  return TAGC_OK;
}

/* Every tensor of the file is one of the model's or an attention-mask buffer. */
static tagc_status check_names(json_t *h, const char *prefix, const st_entry *e, int n, const char *path) {
  const char *key;
  json_t *value;
  json_object_foreach(h, key, value) {
    if (!strcmp(key, "__metadata__"))
      continue;
    size_t len = strlen(key);
    if ((len > 10 && !strcmp(key + len - 10, ".attn.bias")) ||
        (len > 17 && !strcmp(key + len - 17, ".attn.masked_bias")))
      continue;
    int known = 0;
    for (int i = 0; i < n && !known; i++)
      known = header_entry(h, prefix, e[i].name) == value;
    if (!known)
      return tagc_errorf(TAGC_ECORRUPT, "%s: tensor '%s' is not one of this GPT-2 model's "
                         "(config.json's n_layer, Hugging Face names)", path, key);
  }
  return TAGC_OK;
}

/* Reads entry e from the file into the arena, converting to fp32 and transposing Conv1D
 * weights; `raw` has room for the largest tensor in the file's dtype. */
static tagc_status read_entry(int fd, off_t data_start, off_t file_size, json_t *t, const st_entry *e,
                              const char *path, void *raw, float *scratch, float *dst) {
  const char *dtype = json_string_value(json_object_get(t, "dtype"));
  int d = -1;
  for (int k = 0; k < 3 && dtype; k++)
    if (!strcmp(dtype, dtype_names[k]))
      d = k;
  if (d < 0)
    return tagc_errorf(TAGC_ECORRUPT, "%s: %s is %s (F32, BF16 and F16 are read)", path, e->name,
                       dtype ? dtype : "without a dtype");
  json_t *want = st_shape(e);
  int same = json_equal(want, json_object_get(t, "shape"));
  char *text = json_dumps(want, JSON_COMPACT);
  json_decref(want);
  if (!same) {
    tagc_status st = tagc_errorf(TAGC_ECORRUPT, "%s: %s is not %s", path, e->name, text ? text : "?");
    free(text);
    return st;
  }
  free(text);
  size_t numel = st_numel(e), bytes = numel * dtype_bytes[d];
  json_t *off = json_object_get(t, "data_offsets");
  json_int_t begin = json_integer_value(json_array_get(off, 0)), end = json_integer_value(json_array_get(off, 1));
  if (begin < 0 || end - begin != (json_int_t)bytes || data_start + end > file_size)
    return tagc_errorf(TAGC_ECORRUPT, "%s: %s's data_offsets are not its %zu bytes inside the file",
                       path, e->name, bytes);
  ssize_t got = pread(fd, raw, bytes, data_start + begin);
  if (got != (ssize_t)bytes)
    return got < 0 ? tagc_errnof(TAGC_EIO, "%s", path) : tagc_errorf(TAGC_EIO, "%s: short read", path);
  float *x = e->transpose ? scratch : dst;
  for (size_t i = 0; i < numel; i++)
    x[i] = d == TAGCTL_F32 ? ((const float *)raw)[i]
           : d == TAGCTL_BF16 ? tagc_bf16_to_f32(((const uint16_t *)raw)[i])
                              : f16_to_f32(((const uint16_t *)raw)[i]);
  if (e->transpose) { /* (in, out) -> (out, in) */
    const tagc_tensor_info *ti = e->ti;
    for (int r = 0; r < ti->rows; r++)
      for (int c = 0; c < ti->cols; c++)
        dst[(size_t)r * ti->cols + c] = scratch[(size_t)c * ti->rows + r];
  }
  return TAGC_OK;
}

/* The tensors of the header into m's arena (its layout set, its arena allocated). */
static tagc_status st_read_tensors(int fd, off_t data_start, off_t size, json_t *h, const char *prefix,
                                   const char *path, tagctl_model *m, int *tied) {
  st_entry *e = calloc(TAGC_MAX_TENSORS, sizeof *e);
  if (!e)
    return tagc_errorf(TAGC_ENOMEM, "tensor list");
  int n = st_entries(&m->layout, m->vocab, e);
  size_t largest = 1;
  for (int i = 0; i < n; i++)
    if (st_numel(&e[i]) > largest)
      largest = st_numel(&e[i]);
  void *raw = malloc(largest * sizeof(float));
  float *scratch = malloc(largest * sizeof(float));
  tagc_status st = n && raw && scratch ? check_names(h, prefix, e, n, path)
                                       : tagc_errorf(TAGC_ENOMEM, "safetensors read buffers");
  *tied = !header_entry(h, prefix, "lm_head.weight");
  for (int i = 0; i < n - *tied && st == TAGC_OK; i++) {
    json_t *t = header_entry(h, prefix, e[i].name);
    st = t ? read_entry(fd, data_start, size, t, &e[i], path, raw, scratch, m->params + e[i].ti->offset)
           : tagc_errorf(TAGC_ECORRUPT, "%s: no tensor %s%s", path, prefix, e[i].name);
  }
  free(scratch);
  free(raw);
  free(e);
  return st;
}

static tagc_status st_parse(int fd, const char *path, off_t size, tagctl_model *m) {
  uint64_t n_header;
  if (size < 8 || pread(fd, &n_header, 8, 0) != 8 || n_header > ST_MAX_HEADER || 8 + n_header > (uint64_t)size)
    return tagc_errorf(TAGC_ECORRUPT, "%s: not a safetensors file (header length)", path);
  char *text = malloc(n_header);
  if (!text)
    return tagc_errorf(TAGC_ENOMEM, "safetensors header of %llu bytes", (unsigned long long)n_header);
  json_error_t jerr;
  json_t *h = pread(fd, text, n_header, 8) == (ssize_t)n_header ? json_loadb(text, n_header, 0, &jerr) : NULL;
  free(text);
  if (!json_is_object(h)) {
    json_decref(h);
    return tagc_errorf(TAGC_ECORRUPT, "%s: the safetensors header is not a JSON object", path);
  }
  const char *prefix = json_object_get(h, "transformer.wte.weight") ? "transformer." : "";
  tagc_model_config cfg;
  tagc_status st = st_config(h, prefix, path, &cfg);
  int tied = 0;
  if (st == TAGC_OK)
    st = tagc_model_layout_init(&m->layout, &cfg);
  if (st == TAGC_OK)
    st = model_alloc(m, cfg.vocab);
  if (st == TAGC_OK)
    st = st_read_tensors(fd, (off_t)(8 + n_header), size, h, prefix, path, m, &tied);
  if (st == TAGC_OK && tied)
    model_tie_head(m);
  const char *step = json_string_value(json_object_get(json_object_get(h, "__metadata__"), "step"));
  m->step = step ? strtoll(step, NULL, 10) : -1;
  json_decref(h);
  return st;
}

tagc_status model_load_safetensors(const char *path, tagctl_model *m) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "%s", path);
  struct stat sb;
  tagc_status st = fstat(fd, &sb) == 0 ? st_parse(fd, path, sb.st_size, m) : tagc_errnof(TAGC_EIO, "%s", path);
  close(fd);
  return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Writing                                                                                  */

static json_t *st_header(const tagctl_model *m, const st_entry *e, int n, tagctl_dtype dtype) {
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
    char name[96];
    snprintf(name, sizeof name, "%s%s", strncmp(e[i].name, "lm_head", 7) ? "transformer." : "", e[i].name);
    size_t bytes = st_numel(&e[i]) * dtype_bytes[dtype];
    json_object_set_new(h, name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype_names[dtype], "shape",
                                           st_shape(&e[i]), "data_offsets", (json_int_t)offset,
                                           (json_int_t)(offset + bytes)));
    offset += bytes;
  }
  return h;
}

/* x[0..n) in dtype into out (n elements of it); TAGC_EINVAL when a value overflows f16. */
static tagc_status convert(const float *x, size_t n, tagctl_dtype dtype, void *out, const char *name) {
  uint16_t *h = out;
  for (size_t i = 0; i < n; i++) {
    if (dtype == TAGCTL_BF16) {
      h[i] = tagc_bf16_round(x[i]);
    } else {
      _Float16 v = (_Float16)x[i];
      if (isinf((float)v) && !isinf(x[i]))
        return tagc_errorf(TAGC_EINVAL, "%s holds %g, beyond float16's range: export as bf16 or f32",
                           name, (double)x[i]);
      memcpy(&h[i], &v, sizeof v);
    }
  }
  return TAGC_OK;
}

/* The header and the data: each Conv1D weight transposed through scratch, each tensor of a
 * 16-bit dtype converted through half. */
static tagc_status write_st_file(const tagctl_model *m, const st_entry *e, int n, const char *text,
                                 tagctl_dtype dtype, float *scratch, void *half, const char *path) {
  out_file o;
  TAGC_CHECK(out_open(&o, path));
  size_t len = strlen(text), padded = (len + 8 + 7) / 8 * 8 - 8; /* data starts 8-aligned */
  uint64_t n_header = padded;
  out_write(&o, &n_header, sizeof n_header);
  out_write(&o, text, len);
  for (size_t i = len; i < padded; i++)
    out_write(&o, " ", 1);
  tagc_status st = TAGC_OK;
  for (int i = 0; i < n && st == TAGC_OK; i++) {
    const tagc_tensor_info *ti = e[i].ti;
    const float *x = m->params + ti->offset;
    if (e[i].transpose) { /* (out, in) -> (in, out) */
      for (int r = 0; r < ti->rows; r++)
        for (int c = 0; c < ti->cols; c++)
          scratch[(size_t)c * ti->rows + r] = x[(size_t)r * ti->cols + c];
      x = scratch;
    }
    if (dtype == TAGCTL_F32) {
      out_write(&o, x, st_numel(&e[i]) * sizeof(float));
    } else if ((st = convert(x, st_numel(&e[i]), dtype, half, e[i].name)) == TAGC_OK) {
      out_write(&o, half, st_numel(&e[i]) * sizeof(uint16_t));
    }
  }
  if (st != TAGC_OK)
    o.failed = EINVAL;
  tagc_status closed = out_close(&o);
  return st != TAGC_OK ? st : closed;
}

static tagc_status write_safetensors(const tagctl_model *m, const char *path, tagctl_dtype dtype) {
  st_entry *e = calloc(TAGC_MAX_TENSORS, sizeof *e);
  if (!e)
    return tagc_errorf(TAGC_ENOMEM, "tensor list");
  int n = st_entries(&m->layout, m->vocab, e);
  size_t largest = 1;
  for (int i = 0; i < n; i++)
    if (st_numel(&e[i]) > largest)
      largest = st_numel(&e[i]);
  json_t *h = n ? st_header(m, e, n, dtype) : NULL;
  char *text = h ? json_dumps(h, JSON_COMPACT) : NULL;
  json_decref(h);
  float *scratch = malloc(largest * sizeof(float));
  uint16_t *half = malloc(largest * sizeof(uint16_t));
  tagc_status st = text && scratch && half ? write_st_file(m, e, n, text, dtype, scratch, half, path)
                                           : tagc_errorf(TAGC_ENOMEM, "safetensors header and scratch");
  free(half);
  free(scratch);
  free(text);
  free(e);
  return st;
}

static tagc_status write_json(const char *dir, const char *name, json_t *value) {
  if (!value)
    return tagc_errorf(TAGC_ENOMEM, "%s", name);
  char path[PATH_CAP + 64];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  tagc_status st = tagc_json_write_file(path, value);
  json_decref(value);
  return st;
}

/* Hugging Face's config.json: GPT2LMHeadModel with tagc's shapes, the head untied. */
static json_t *hf_config(const tagctl_model *m, const tagctl_hf_options *opt) {
  const tagc_model_config *c = &m->layout.cfg;
  json_t *cfg = json_pack(
      "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:b, s:f, s:f, s:f, s:b, s:s}",
      "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", m->vocab,
      "n_positions", c->ctx, "n_ctx", c->ctx, "n_embd", c->d_model, "n_layer", c->n_layer,
      "n_head", c->n_head, "activation_function", "gelu_new", "layer_norm_epsilon", 1e-5,
      "tie_word_embeddings", 0, "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0,
      "scale_attn_weights", 1, "torch_dtype", torch_dtypes[opt->dtype]);
  json_t *tagc = json_pack("{s:i}", "vocab", m->vocab);
  if (tagc && m->step >= 0)
    json_object_set_new(tagc, "step", json_integer(m->step));
  if (cfg && opt->eos_id >= 0) {
    json_object_set_new(cfg, "bos_token_id", json_integer(opt->eos_id));
    json_object_set_new(cfg, "eos_token_id", json_integer(opt->eos_id));
  }
  if (!cfg || !tagc) {
    json_decref(cfg);
    json_decref(tagc);
    return NULL;
  }
  json_object_set_new(cfg, "tagc", tagc);
  return cfg;
}

static json_t *generation_config(const tagctl_hf_options *opt) {
  json_t *g = json_pack("{s:b}", "_from_model_config", 1);
  if (g && opt->eos_id >= 0) {
    json_object_set_new(g, "bos_token_id", json_integer(opt->eos_id));
    json_object_set_new(g, "eos_token_id", json_integer(opt->eos_id));
  }
  return g;
}

static tagc_status copy_file(const char *from, const char *dir, const char *name) {
  char path[PATH_CAP + 64], buf[65536];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *in = fopen(from, "rb");
  if (!in)
    return tagc_errnof(TAGC_EIO, "%s", from);
  out_file o;
  tagc_status st = out_open(&o, path);
  size_t got;
  while (st == TAGC_OK && (got = fread(buf, 1, sizeof buf, in)) > 0)
    out_write(&o, buf, got);
  if (st == TAGC_OK && ferror(in))
    o.failed = EIO;
  fclose(in);
  return st == TAGC_OK ? out_close(&o) : st;
}

static tagc_status write_tokenizer(const tagctl_model *m, const tagctl_hf_options *opt, const char *dir) {
  TAGC_CHECK(copy_file(opt->vocab_json, dir, "vocab.json"));
  TAGC_CHECK(copy_file(opt->merges_txt, dir, "merges.txt"));
  json_t *t = json_pack("{s:s, s:i, s:b}", "tokenizer_class", "GPT2Tokenizer", "model_max_length",
                        m->layout.cfg.ctx, "add_prefix_space", 0);
  if (t && opt->eos_id >= 0) {
    json_object_set_new(t, "bos_token", json_string("<|endoftext|>"));
    json_object_set_new(t, "eos_token", json_string("<|endoftext|>"));
    json_object_set_new(t, "unk_token", json_string("<|endoftext|>"));
  }
  return write_json(dir, "tokenizer_config.json", t);
}

/* Removes the staging folder and what the export put in it. */
static void remove_stage(const char *stage) {
  static const char *const files[] = {"model.safetensors", "config.json", "generation_config.json",
                                      "vocab.json", "merges.txt", "tokenizer_config.json"};
  char path[PATH_CAP + 64];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", stage, files[i]);
    unlink(path);
  }
  rmdir(stage);
}

static tagc_status fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || fsync(fd) != 0) {
    tagc_status st = tagc_errnof(TAGC_EIO, "%s", path);
    if (fd >= 0)
      close(fd);
    return st;
  }
  close(fd);
  return TAGC_OK;
}

tagc_status tagctl_model_write_hf(const tagctl_model *m, const char *dir, const tagctl_hf_options *opt) {
  TAGC_CHECK(tagctl_model_check_out(dir, 1));
  char target[PATH_CAP - 16], stage[PATH_CAP];
  snprintf(target, sizeof target, "%s", dir);
  for (size_t n = strlen(target); n > 1 && target[n - 1] == '/'; n--)
    target[n - 1] = 0;
  snprintf(stage, sizeof stage, "%s.tmp-XXXXXX", target);
  if (!mkdtemp(stage))
    return tagc_errnof(TAGC_EIO, "%s", stage);
  mode_t mask = umask(0); /* mkdtemp's 0700: the folder gets mkdir's mode */
  umask(mask);
  chmod(stage, 0777 & ~mask);
  char path[PATH_CAP + 64];
  snprintf(path, sizeof path, "%s/model.safetensors", stage);
  tagc_status st = write_safetensors(m, path, opt->dtype);
  if (st == TAGC_OK)
    st = write_json(stage, "config.json", hf_config(m, opt));
  if (st == TAGC_OK)
    st = write_json(stage, "generation_config.json", generation_config(opt));
  if (st == TAGC_OK && opt->vocab_json)
    st = write_tokenizer(m, opt, stage);
  if (st == TAGC_OK)
    st = fsync_dir(stage);
  if (st == TAGC_OK && rename(stage, target) != 0) /* replaces an empty folder, never a full one */
    st = tagc_errnof(TAGC_EIO, "%s", target);
  if (st != TAGC_OK)
    remove_stage(stage);
  return st;
}
