/* tagctl/model_io.c on a randomly initialised model: the llm.c file reads back bit-exactly
 * (its head untied, or tied when the file has none, as llm.c's own files); the safetensors
 * header and data follow the format (8-byte aligned data, contiguous offsets, GPT-2 names,
 * Conv1D weights transposed); damaged files, headers asking for absurd models and unwritable
 * paths give errors, not crashes, huge allocations or stray files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "tagctl/model_io.h"
#include "test.h"

enum { V = 256, T = 16, L = 2, NH = 2, C = 32 };

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
  size_t head_bytes = (size_t)V * C * sizeof(float);
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

static void check_safetensors(const tagctl_model *m) {
  char path[4096], cfg_path[4096];
  path_in(path, "model.safetensors");
  path_in(cfg_path, "config.json");
  CHECK_OK(tagctl_model_write_safetensors(m, path));
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
  const float *hs = (const float *)(data + json_integer_value(json_array_get(json_object_get(head, "data_offsets"), 0)));
  CHECK(!memcmp(hs, m->params + tensor(m, "head_w")->offset, (size_t)V * C * sizeof(float)));
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
        json_is_false(json_object_get(cfg, "tie_word_embeddings")));
  json_decref(cfg);
  unlink(cfg_path);
  unlink(path);
}

/* An output that is a folder, or a safetensors file named like the config.json written beside
 * it (or that file's temporary name), is refused before anything is written. */
static void check_collisions(const tagctl_model *m) {
  char path[4096];
  path_in(path, "config.json");
  CHECK(tagctl_model_write_safetensors(m, path) == TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "config.json") != NULL);
  CHECK(access(path, F_OK) != 0);
  path_in(path, "config.json.tmp.1");
  CHECK(tagctl_model_write_safetensors(m, path) == TAGC_EINVAL);
  CHECK_OK(tagctl_model_check_out(path, 0)); /* an llm.c file writes nothing beside it */
  CHECK(tagctl_model_check_out("config.json", 1) == TAGC_EINVAL);
  CHECK_OK(tagctl_model_check_out("model.safetensors", 1));
  CHECK(tagctl_model_write_llmc(m, dir) == TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "is a folder") != NULL);
  CHECK(tagctl_model_write_safetensors(m, dir) == TAGC_EINVAL);
  path_in(path, "");
  CHECK(tagctl_model_write_llmc(m, path) == TAGC_EINVAL); /* "DIR/" */
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

  check_llmc(&m);
  check_safetensors(&m);

  tagctl_model back;
  char path[4096];
  path_in(path, "none.bin");
  CHECK(tagctl_model_load(path, &back) == TAGC_ENOTFOUND);
  path_in(path, "no-such-dir/m.bin");
  CHECK(tagctl_model_write_llmc(&m, path) == TAGC_EIO);
  CHECK(tagctl_model_write_safetensors(&m, path) == TAGC_EIO);
  check_collisions(&m);
  tagctl_model_free(&m);
  tagctl_model_free(&m); /* idempotent */
  CHECK(rmdir(dir) == 0); /* nothing left behind */
  return TEST_END();
}
