/* model/model_io.c on a randomly initialised model: the llm.c file reads back bit-exactly
 * (its head untied, or tied when the file has none, as llm.c's own files); the Hugging Face
 * folder's safetensors follow the format (8-byte aligned data, contiguous offsets, GPT-2
 * names, Conv1D weights transposed, the vocabulary cut) and read back (f32, bf16) into a
 * run's layout; an --out that exists is refused; damaged files, headers asking for absurd models and unwritable
 * paths give errors, not crashes, huge allocations or stray files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "model/model_io.h"
#include "test.h"

/* a vocabulary that is not a multiple of 128: wte and the head have VP rows */
enum { V = 250, VP = 256, T = 16, L = 2, NH = 2, C = 32 };

static char dir[] = "/tmp/tagc_model_io_XXXXXX";

static void path_in(char *buf, const char *name) {
  snprintf(buf, 4096, "%s/%s", dir, name);
}

static const tagc_tensor_info *tensor(const tagctl_model *m, const char *name) {
  for (int t = 0; t < m->layout.n_tensors; t++)
    if (!strcmp(m->layout.tensors[t].name, name))
      return &m->layout.tensors[t];
  return NULL;
}

static size_t file_read(const char *path, unsigned char **out) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *out = malloc((size_t)n);
  size_t got = fread(*out, 1, (size_t)n, f);
  fclose(f);
  return got;
}

static void file_write(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(p, 1, n, f);
  fclose(f);
}

static void remove_hf(const char *hf) {
  const char *files[] = {"model.safetensors", "config.json", "generation_config.json"};
  char path[4200];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", hf, files[i]);
    CHECK(unlink(path) == 0);
  }
  CHECK(rmdir(hf) == 0);
}

static void check_llmc(const tagctl_model *m) {
  char path[4096];
  path_in(path, "m.bin");
  CHECK_OK(tagctl_model_write_llmc(m, path));
  tagctl_model back;
  CHECK_OK(tagctl_model_load(path, &back));
  CHECK_EQ_INT(back.layout.n_params, m->layout.n_params);
  CHECK(back.params && !memcmp(back.params, m->params, m->layout.n_params * sizeof(float)));
  CHECK_EQ_INT(back.vocab, V);
  CHECK_EQ_INT(back.step, -1);
  tagctl_model_free(&back);

  /* an llm.c file of llm.c's own: no head after lnfb, header[8] = 0: the head is wte */
  unsigned char *raw;
  size_t n = file_read(path, &raw);
  size_t head_bytes = (size_t)VP * C * sizeof(float);
  ((int32_t *)raw)[8] = 0;
  char tied[4096];
  path_in(tied, "tied.bin");
  file_write(tied, raw, n - head_bytes);
  CHECK_OK(tagctl_model_load(tied, &back));
  const tagc_tensor_info *wte = tensor(m, "wte"), *head = tensor(m, "head_w");
  CHECK(back.params && !memcmp(back.params + head->offset, m->params + wte->offset, head_bytes));
  CHECK(back.params && !memcmp(back.params, m->params, head->offset * sizeof(float)));
  tagctl_model_free(&back);

  /* damaged files */
  const struct {
    int slot, value;
    size_t cut;
    const char *what;
  } bad[] = {{0, 1234, 0, "not an llm.c model file"}, {1, 2, 0, "version 2"},
             {4, 1000, 0, "n_layer"},                 {6, 1 << 14, 0, "bytes, the header's model needs"},
             {7, 128, 0, "padded vocabulary 128 below"}, {-1, 0, 100, "bytes, the header's model needs"},
             {-1, 0, n - 8, "not an llm.c model file"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    unsigned char *copy = malloc(n);
    memcpy(copy, raw, n);
    ((int32_t *)copy)[8] = 1;
    if (bad[i].slot >= 0)
      ((int32_t *)copy)[bad[i].slot] = bad[i].value;
    file_write(tied, copy, n - bad[i].cut);
    free(copy);
    tagc_status st = tagctl_model_load(tied, &back);
    CHECK_MSG(st == TAGC_ECORRUPT && strstr(tagc_last_error(), bad[i].what), "damaged llm.c file %zu: "
              "status %d, '%s' (want '%s')", i, st, tagc_last_error(), bad[i].what);
    CHECK(back.params == NULL);
  }
  free(raw);
  unlink(tied);
  unlink(path);
}

/* The Hugging Face folder: model.safetensors (8-byte aligned data, contiguous offsets, GPT-2
 * names, Conv1D weights transposed, wte and lm_head cut to the vocabulary), config.json; read
 * back bit-exactly, as f32 and through bf16 (exact for values that are bf16 already). */
static void check_safetensors(const tagctl_model *m) {
  char hf[4096], path[4200], cfg_path[4200];
  path_in(hf, "hf");
  snprintf(path, sizeof path, "%s/model.safetensors", hf);
  snprintf(cfg_path, sizeof cfg_path, "%s/config.json", hf);
  tagctl_hf_options opt = {TAGCTL_F32, NULL, NULL, -1};
  CHECK_OK(tagctl_model_write_hf(m, hf, &opt));
  unsigned char *raw;
  size_t n = file_read(path, &raw);
  uint64_t hlen;
  memcpy(&hlen, raw, 8);
  CHECK((8 + hlen) % 8 == 0 && 8 + hlen < n);
  json_t *h = json_loadb((const char *)raw + 8, hlen, 0, NULL);
  CHECK(h != NULL);
  CHECK_EQ_INT(json_object_size(h), 1 + 2 + 12 * L + 3);
  CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(h, "__metadata__"), "format")), "pt");
  const unsigned char *data = raw + 8 + hlen;
  /* c_attn of block 1: [C, 3C], the transpose of qkv_w (3C, C) */
  json_t *qkv = json_object_get(h, "transformer.h.1.attn.c_attn.weight");
  CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(qkv, "shape"), 0)), C);
  CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(qkv, "shape"), 1)), 3 * C);
  const float *stored = (const float *)(data + json_integer_value(json_array_get(json_object_get(qkv, "data_offsets"), 0)));
  const float *arena = m->params + tensor(m, "h1.qkv_w")->offset;
  int transposed = 1;
  for (int r = 0; r < 3 * C; r++)
    for (int c = 0; c < C; c++)
      transposed &= stored[(size_t)c * 3 * C + r] == arena[(size_t)r * C + c];
  CHECK(transposed);
  json_t *head = json_object_get(h, "lm_head.weight");
  CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(head, "shape"), 0)), m->vocab);
  const float *hs = (const float *)(data + json_integer_value(json_array_get(json_object_get(head, "data_offsets"), 0)));
  CHECK(!memcmp(hs, m->params + tensor(m, "head_w")->offset, (size_t)m->vocab * C * sizeof(float)));
  /* offsets contiguous to the end of the file */
  int64_t end = 0;
  const char *key;
  json_t *t;
  json_object_foreach(h, key, t) {
    if (!strcmp(key, "__metadata__"))
      continue;
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0)), end);
    end = json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 1));
  }
  CHECK_EQ_INT(8 + (int64_t)hlen + end, (int64_t)n);
  json_decref(h);
  free(raw);
  json_t *cfg = json_load_file(cfg_path, 0, NULL);
  CHECK(cfg && json_integer_value(json_object_get(cfg, "n_embd")) == C &&
        json_integer_value(json_object_get(cfg, "vocab_size")) == m->vocab &&
        json_is_false(json_object_get(cfg, "tie_word_embeddings")));
  json_decref(cfg);

  /* read back (the folder and the file): the vocabulary's rows exact, the padding zero */
  tagctl_model back;
  CHECK_OK(tagctl_model_load(hf, &back));
  CHECK_EQ_INT(back.vocab, m->vocab);
  CHECK_EQ_INT(back.step, m->step);
  float *fitted = calloc(m->layout.n_params, sizeof(float));
  CHECK_OK(tagctl_model_fit(&back, &m->layout, fitted));
  tagctl_model_free(&back);
  int same = 1;
  for (int i = 0; i < m->layout.n_tensors; i++) {
    const tagc_tensor_info *ti = &m->layout.tensors[i];
    int rows = ti->role == TAGC_ROLE_TOK_EMB || ti->role == TAGC_ROLE_HEAD ? m->vocab : ti->rows;
    same &= !memcmp(fitted + ti->offset, m->params + ti->offset, (size_t)rows * ti->cols * sizeof(float));
    for (size_t k = (size_t)rows * ti->cols; k < ti->numel; k++)
      same &= fitted[ti->offset + k] == 0.0f;
  }
  CHECK_MSG(same, "HF folder -> load -> fit: the vocabulary's rows bit-exact, padded rows zero");
  /* a run of another shape is refused, naming the option */
  tagc_model_layout other;
  tagc_model_config oc = m->layout.cfg;
  oc.d_model = 2 * C;
  oc.padded_vocab = 0;
  CHECK_OK(tagc_model_layout_init(&other, &oc));
  CHECK_OK(tagctl_model_load(path, &back));
  float *big = malloc(other.n_params * sizeof(float));
  CHECK(tagctl_model_fit(&back, &other, big) == TAGC_EINVAL && strstr(tagc_last_error(), "--dim"));
  free(big);
  tagctl_model_free(&back);
  remove_hf(hf);

  /* bf16: values already bf16 come back exactly, as BF16 tensors of half the bytes */
  tagctl_model b16 = *m;
  b16.params = malloc(m->layout.n_params * sizeof(float));
  for (size_t i = 0; i < m->layout.n_params; i++) {
    uint32_t u;
    memcpy(&u, &m->params[i], 4);
    u &= 0xFFFF0000u;
    memcpy(&b16.params[i], &u, 4);
  }
  opt.dtype = TAGCTL_BF16;
  CHECK_OK(tagctl_model_write_hf(&b16, hf, &opt));
  CHECK_OK(tagctl_model_load(hf, &back));
  CHECK_OK(tagctl_model_fit(&back, &m->layout, fitted));
  const tagc_tensor_info *wpe = tensor(m, "wpe");
  CHECK(!memcmp(fitted + wpe->offset, b16.params + wpe->offset, (m->layout.n_params - wpe->offset - tensor(m, "head_w")->numel) * sizeof(float)));
  tagctl_model_free(&back);
  remove_hf(hf);
  free(b16.params);
  free(fitted);
}

/* An --out that exists (a file, a folder with files in it) is refused before anything is
 * written; an llm.c file must not exist either. */
static void check_collisions(const tagctl_model *m) {
  char path[4200], hf[4096];
  tagctl_hf_options opt = {TAGCTL_F32, NULL, NULL, -1};
  path_in(hf, "hf");
  CHECK_OK(tagctl_model_write_hf(m, hf, &opt));
  snprintf(path, sizeof path, "%s/config.json", hf);
  CHECK(tagctl_model_write_hf(m, path, &opt) == TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "exists and is not a folder") != NULL);
  CHECK(tagctl_model_write_hf(m, hf, &opt) == TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "not empty") != NULL);
  CHECK(tagctl_model_write_llmc(m, path) == TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "exists") != NULL);
  CHECK(tagctl_model_write_llmc(m, dir) == TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "is a folder") != NULL);
  path_in(path, "");
  CHECK(tagctl_model_write_llmc(m, path) == TAGC_EINVAL); /* "DIR/" */
  CHECK(tagctl_model_check_out(".", 1) == TAGC_EINVAL);
  remove_hf(hf);
  /* an empty folder is taken */
  CHECK(mkdir(hf, 0755) == 0);
  CHECK_OK(tagctl_model_write_hf(m, hf, &opt));
  remove_hf(hf);
}

int main(void) {
  CHECK(mkdtemp(dir) != NULL);
  tagctl_model m = {0};
  tagc_model_config cfg = {V, T, L, NH, C, 0};
  CHECK_OK(tagc_model_layout_init(&m.layout, &cfg));
  m.vocab = V;
  m.step = 12;
  m.params = malloc(m.layout.n_params * sizeof(float));
  tagc_model_init_params(&m.layout, 5, m.params);
  for (size_t i = 0; i < m.layout.n_params; i++) /* norms and biases: not just 1 and 0 */
    m.params[i] += 1e-3f * (float)(i % 97);
  CHECK_EQ_INT(m.layout.cfg.padded_vocab, VP);
  /* the padded rows zero, as the llm.c file and a fitted model hold them */
  memset(m.params + tensor(&m, "wte")->offset + (size_t)V * C, 0, (size_t)(VP - V) * C * sizeof(float));
  memset(m.params + tensor(&m, "head_w")->offset + (size_t)V * C, 0, (size_t)(VP - V) * C * sizeof(float));

  check_llmc(&m);
  check_safetensors(&m);

  tagctl_model back;
  char path[4096];
  path_in(path, "none.bin");
  CHECK(tagctl_model_load(path, &back) == TAGC_ENOTFOUND);
  path_in(path, "no-such-dir/m.bin");
  CHECK(tagctl_model_write_llmc(&m, path) == TAGC_EIO);
  tagctl_hf_options opt = {TAGCTL_F32, NULL, NULL, -1};
  CHECK(tagctl_model_write_hf(&m, path, &opt) == TAGC_EIO);
  check_collisions(&m);
  tagctl_model_free(&m);
  tagctl_model_free(&m); /* idempotent */
  CHECK(rmdir(dir) == 0); /* nothing left behind */
  return TEST_END();
}
