#include "data.h"

#include <dirent.h>
#include <stdio.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdint.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/log.h"

#define BLOCK 4096
#define VAL_EVERY 10

typedef struct byte_buf {
  uint8_t *data;
  size_t len, cap;
  int n_files;
} byte_buf;

static tagc_status append_file(byte_buf *b, const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return tagc_errnof(TAGC_EIO, "corpus file %s", path);
  tagc_status st = TAGC_OK;
  for (;;) {
    if (b->cap - b->len < 65536) {
      size_t cap = b->cap ? b->cap * 2 : 1 << 20;
      uint8_t *p = realloc(b->data, cap);
      if (!p) {
        st = tagc_errorf(TAGC_ENOMEM, "corpus buffer of %zu bytes", cap);
        break;
      }
      b->data = p;
      b->cap = cap;
    }
    ssize_t n = read(fd, b->data + b->len, b->cap - b->len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      st = tagc_errnof(TAGC_EIO, "corpus file %s", path);
      break;
    }
    if (n == 0)
      break;
    b->len += (size_t)n;
  }
  close(fd);
  if (st == TAGC_OK)
    b->n_files++;
  return st;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

static tagc_status walk(byte_buf *b, const char *path, int depth) {
  struct stat sb;
  if (lstat(path, &sb) != 0)
    return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "corpus %s", path);
  if (S_ISREG(sb.st_mode))
    return append_file(b, path);
  if (!S_ISDIR(sb.st_mode) || depth > 16)
    return TAGC_OK;
  struct dirent **names;
  int n = scandir(path, &names, NULL, by_name);
  if (n < 0)
    return tagc_errnof(TAGC_EIO, "corpus directory %s", path);
  tagc_status st = TAGC_OK;
  for (int i = 0; i < n; i++) {
    const char *name = names[i]->d_name;
    if (st == TAGC_OK && name[0] != '.' && !ends_with(name, ".dat")) {
      char child[4096];
      if ((size_t)snprintf(child, sizeof child, "%s/%s", path, name) >= sizeof child)
        st = tagc_errorf(TAGC_EINVAL, "corpus path too long under %s", path);
      else
        st = walk(b, child, depth + 1);
    }
    free(names[i]);
  }
  free(names);
  return st;
}

/* The corpus's two splits as one segment each. */
static tagc_status set_single(tagc_token_set *set, const uint16_t *tok, size_t n) {
  set->segs = calloc(1, sizeof *set->segs);
  if (!set->segs)
    return tagc_errorf(TAGC_ENOMEM, "token set");
  set->segs[0] = (tagc_token_seg){tok, n, 0};
  set->n_segs = 1;
  return TAGC_OK;
}

tagc_status tagc_corpus_load(const char *path, size_t min_window, tagc_corpus *out) {
  memset(out, 0, sizeof *out);
  if (!path || !*path)
    return tagc_errorf(TAGC_EINVAL, "corpus path is empty");
  byte_buf b = {0};
  tagc_status st = walk(&b, path, 0);
  if (st == TAGC_OK && b.len == 0)
    st = tagc_errorf(TAGC_EINVAL, "corpus %s is empty (%d files, 0 bytes)", path, b.n_files);
  if (st != TAGC_OK) {
    free(b.data);
    return st;
  }
  out->kind = TAGC_DATA_TEXT;
  out->vocab = 256;
  out->text = malloc((b.len + 1) * sizeof(uint16_t));
  if (!out->text) {
    free(b.data);
    return tagc_errorf(TAGC_ENOMEM, "corpus of %zu bytes", b.len);
  }
  /* training blocks first, then the validation blocks, in one buffer */
  size_t n_blocks = (b.len + BLOCK - 1) / BLOCK;
  size_t n_val = 0;
  for (size_t i = VAL_EVERY - 1; i < n_blocks; i += VAL_EVERY)
    n_val += i + 1 == n_blocks ? b.len - i * BLOCK : BLOCK;
  uint16_t *train = out->text, *val = out->text + (b.len - n_val);
  for (size_t i = 0; i < n_blocks; i++) {
    size_t len = i + 1 == n_blocks ? b.len - i * BLOCK : BLOCK;
    uint16_t *dst = i % VAL_EVERY == VAL_EVERY - 1 ? val + out->n_val : train + out->n_train;
    for (size_t k = 0; k < len; k++)
      dst[k] = b.data[i * BLOCK + k];
    if (i % VAL_EVERY == VAL_EVERY - 1)
      out->n_val += len;
    else
      out->n_train += len;
  }
  out->n_files = b.n_files;
  out->crc = tagc_crc32c(0, b.data, b.len);
  free(b.data);
  if (out->n_train < min_window + 1 || out->n_val < min_window + 1) {
    size_t n_train = out->n_train, nv = out->n_val;
    tagc_corpus_free(out);
    return tagc_errorf(TAGC_EINVAL,
                       "corpus %s is too short: %zu training and %zu validation bytes, each "
                       "needs more than the context window of %zu bytes",
                       path, n_train, nv, min_window);
  }
  st = set_single(&out->train_set, train, out->n_train);
  if (st == TAGC_OK)
    st = set_single(&out->val_set, val, out->n_val);
  if (st != TAGC_OK) {
    tagc_corpus_free(out);
    return st;
  }
  LOG_INFO("data", "corpus %s: %d files, %zu training bytes, %zu validation bytes", path,
           out->n_files, out->n_train, out->n_val);
  return TAGC_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Token shards                                                                             */

#define SCAN_CHUNK 65536 /* tokens per pass of the open-time scan: max id and CRC32C */

static int has_glob_chars(const char *s) {
  return strpbrk(s, "*?[") != NULL;
}

/* The paths `pattern` names, sorted: the file itself, or what the glob matches. */
static tagc_status expand(const char *option, const char *pattern, glob_t *g) {
  memset(g, 0, sizeof *g);
  if (!pattern || !*pattern)
    return tagc_errorf(TAGC_EINVAL, "%s is empty", option);
  if (!has_glob_chars(pattern)) {
    struct stat sb;
    if (stat(pattern, &sb) != 0)
      return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "%s %s", option, pattern);
    if (!S_ISREG(sb.st_mode))
      return tagc_errorf(TAGC_EINVAL, "%s %s is not a regular file", option, pattern);
  }
  int rc = glob(pattern, GLOB_ERR, NULL, g);
  if (rc == GLOB_NOMATCH)
    return tagc_errorf(TAGC_ENOTFOUND, "%s %s matches no file", option, pattern);
  if (rc != 0)
    return tagc_errorf(TAGC_EIO, "%s %s: cannot list its directory", option, pattern);
  return TAGC_OK;
}

static tagc_status add_map(tagc_corpus *c, void *map, size_t len) {
  void **maps = realloc(c->maps, (size_t)(c->n_maps + 1) * sizeof *maps);
  if (!maps)
    return tagc_errorf(TAGC_ENOMEM, "shard table");
  c->maps = maps;
  size_t *lens = realloc(c->map_len, (size_t)(c->n_maps + 1) * sizeof *lens);
  if (!lens)
    return tagc_errorf(TAGC_ENOMEM, "shard table");
  c->map_len = lens;
  c->maps[c->n_maps] = map;
  c->map_len[c->n_maps++] = len;
  return TAGC_OK;
}

/* One pass over n tokens: the first id >= vocab (its position in *bad, else SIZE_MAX) and
 * the CRC32C of their bytes. */
static uint32_t scan_tokens(const uint16_t *tok, size_t n, int vocab, uint32_t crc, size_t *bad) {
  *bad = SIZE_MAX;
  for (size_t lo = 0; lo < n; lo += SCAN_CHUNK) {
    size_t len = n - lo < SCAN_CHUNK ? n - lo : SCAN_CHUNK;
    const uint16_t *p = tok + lo;
    uint16_t mx = 0;
#pragma omp simd reduction(max : mx)
    for (size_t i = 0; i < len; i++)
      mx = p[i] > mx ? p[i] : mx;
    if (mx >= vocab) {
      for (size_t i = 0; i < len; i++)
        if (p[i] >= vocab) {
          *bad = lo + i;
          return crc;
        }
    }
    crc = tagc_crc32c(crc, p, len * sizeof *p);
  }
  return crc;
}

/* Maps and checks one shard; appends its tokens to set. */
static tagc_status open_shard(tagc_corpus *c, tagc_token_set *set, size_t *total,
                              const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "shard %s", path);
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    tagc_status st = tagc_errnof(TAGC_EIO, "shard %s", path);
    close(fd);
    return st;
  }
  size_t size = (size_t)sb.st_size, hdr = c->kind == TAGC_DATA_LLMC ? TAGC_LLMC_HEADER_BYTES : 0;
  tagc_status st = TAGC_OK;
  if (!S_ISREG(sb.st_mode))
    st = tagc_errorf(TAGC_EINVAL, "shard %s is not a regular file", path);
  else if (size == 0)
    st = tagc_errorf(TAGC_EINVAL, "shard %s is empty (0 bytes)", path);
  else if (size < hdr)
    st = tagc_errorf(TAGC_EINVAL, "shard %s is truncated: %zu bytes, shorter than llm.c's "
                     "%d-byte header", path, size, TAGC_LLMC_HEADER_BYTES);
  else if (c->kind == TAGC_DATA_NANOGPT && size % 2)
    st = tagc_errorf(TAGC_EINVAL, "shard %s has an odd size (%zu bytes): not uint16 tokens",
                     path, size);
  void *map = MAP_FAILED;
  if (st == TAGC_OK) {
    map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
      st = tagc_errnof(TAGC_EIO, "shard %s: mmap of %zu bytes", path, size);
  }
  close(fd);
  if (st != TAGC_OK)
    return st;
  st = add_map(c, map, size);
  if (st != TAGC_OK) {
    munmap(map, size);
    return st;
  }
  size_t n = (size - hdr) / 2;
  if (c->kind == TAGC_DATA_LLMC) {
    int32_t h[3];
    memcpy(h, map, sizeof h);
    if (h[0] != TAGC_LLMC_MAGIC)
      return tagc_errorf(TAGC_EINVAL, "shard %s: magic %d is not llm.c's %d (headerless nanoGPT "
                         "files need --data-format nanogpt --vocab N)", path, h[0], TAGC_LLMC_MAGIC);
    if (h[1] != 1)
      return tagc_errorf(TAGC_EINVAL, "shard %s: llm.c version %d is not supported (only 1: "
                         "uint16 tokens)", path, h[1]);
    if (h[2] <= 0)
      return tagc_errorf(TAGC_EINVAL, "shard %s is empty: its header says %d tokens", path, h[2]);
    if ((size_t)h[2] > n || size - hdr != 2 * (size_t)h[2])
      return tagc_errorf(TAGC_EINVAL, "shard %s is %s: its header says %d tokens (%zu bytes "
                         "with the header), the file has %zu bytes", path,
                         (size_t)h[2] > n ? "truncated" : "longer than its header says", h[2],
                         hdr + 2 * (size_t)h[2], size);
    n = (size_t)h[2];
  }
  const uint16_t *tok = (const uint16_t *)((const char *)map + hdr);
  madvise(map, size, MADV_SEQUENTIAL);
  size_t bad;
  c->crc = scan_tokens(tok, n, c->vocab, c->crc, &bad);
  if (bad != SIZE_MAX)
    return tagc_errorf(TAGC_EINVAL, "shard %s: token %u at position %zu is not below the "
                       "vocabulary %d%s", path, tok[bad], bad, c->vocab,
                       c->kind == TAGC_DATA_LLMC ? " (llm.c shards: GPT-2's 50257 unless --vocab)"
                                                 : " (--vocab)");
  madvise(map, size, MADV_RANDOM); /* training reads scattered windows */
  tagc_token_seg *segs = realloc(set->segs, (size_t)(set->n_segs + 1) * sizeof *segs);
  if (!segs)
    return tagc_errorf(TAGC_ENOMEM, "shard table");
  set->segs = segs;
  segs[set->n_segs++] = (tagc_token_seg){tok, n, *total};
  *total += n;
  return TAGC_OK;
}

static tagc_status open_set(tagc_corpus *c, const char *option, const char *pattern,
                            tagc_token_set *set, size_t *total) {
  glob_t g;
  TAGC_CHECK(expand(option, pattern, &g));
  tagc_status st = TAGC_OK;
  for (size_t i = 0; st == TAGC_OK && i < g.gl_pathc; i++) {
    st = open_shard(c, set, total, g.gl_pathv[i]);
    c->n_files++;
  }
  globfree(&g);
  return st;
}

tagc_status tagc_data_open(const tagc_data_spec *spec, size_t min_window, tagc_corpus *out) {
  memset(out, 0, sizeof *out);
  int have_data = spec->data && *spec->data;
  int have_val = spec->val_data && *spec->val_data;
  if (!have_data) {
    if (have_val)
      return tagc_errorf(TAGC_EINVAL, "--val-data needs --data (the training shards)");
    if (spec->vocab && spec->vocab != 256)
      return tagc_errorf(TAGC_EINVAL, "--vocab %d applies to --data shards; the text corpus is "
                         "byte-level (256)", spec->vocab);
    return tagc_corpus_load(spec->corpus, min_window, out);
  }
  if (!have_val)
    return tagc_errorf(TAGC_EINVAL, "--data needs --val-data (the validation shard, e.g. llm.c's "
                       "*_val_*.bin)");
  const char *format = spec->format && *spec->format ? spec->format : "llmc";
  if (strcmp(format, "llmc") == 0)
    out->kind = TAGC_DATA_LLMC;
  else if (strcmp(format, "nanogpt") == 0)
    out->kind = TAGC_DATA_NANOGPT;
  else
    return tagc_errorf(TAGC_EINVAL, "--data-format %s: use llmc or nanogpt", format);
  if (spec->vocab < 0 || spec->vocab == 1 || spec->vocab > 65536)
    return tagc_errorf(TAGC_EINVAL, "--vocab %d: must be in [2, 65536] (uint16 token ids)",
                       spec->vocab);
  if (out->kind == TAGC_DATA_NANOGPT && !spec->vocab)
    return tagc_errorf(TAGC_EINVAL, "--data-format nanogpt needs --vocab N (its files have no "
                       "header; GPT-2's tokenizer: 50257)");
  out->vocab = spec->vocab ? spec->vocab : TAGC_GPT2_VOCAB;
  tagc_status st = open_set(out, "--data", spec->data, &out->train_set, &out->n_train);
  if (st == TAGC_OK)
    st = open_set(out, "--val-data", spec->val_data, &out->val_set, &out->n_val);
  if (st == TAGC_OK && (out->n_train < min_window + 1 || out->n_val < min_window + 1))
    st = tagc_errorf(TAGC_EINVAL, "--data has %zu training and --val-data %zu validation "
                     "tokens: each needs more than the context window of %zu tokens",
                     out->n_train, out->n_val, min_window);
  if (st != TAGC_OK) {
    tagc_corpus_free(out);
    return st;
  }
  LOG_INFO("data", "%s shards: %d files, %zu training tokens (%d shards), %zu validation tokens, "
           "vocab %d", format, out->n_files, out->n_train, out->train_set.n_segs, out->n_val,
           out->vocab);
  return TAGC_OK;
}

void tagc_corpus_free(tagc_corpus *c) {
  free(c->text);
  for (int i = 0; i < c->n_maps; i++)
    munmap(c->maps[i], c->map_len[i]);
  free(c->maps);
  free(c->map_len);
  free(c->train_set.segs);
  free(c->val_set.segs);
  memset(c, 0, sizeof *c);
}

uint64_t tagc_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

size_t tagc_sample_start(uint64_t seed, int64_t step, int64_t index, size_t n_bytes, size_t window) {
  uint64_t h = tagc_mix64(tagc_mix64(tagc_mix64(seed) ^ (uint64_t)step) ^ (uint64_t)index);
  return (size_t)(h % (uint64_t)(n_bytes - window + 1));
}

void tagc_token_set_copy(const tagc_token_set *set, size_t start, size_t len, uint16_t *out) {
  int lo = 0, hi = set->n_segs - 1; /* the last segment whose first <= start */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (set->segs[mid].first <= start)
      lo = mid;
    else
      hi = mid - 1;
  }
  for (int s = lo; len > 0 && s < set->n_segs; s++) {
    const tagc_token_seg *seg = &set->segs[s];
    size_t off = start - seg->first, k = seg->n - off < len ? seg->n - off : len;
    memcpy(out, seg->tok + off, k * sizeof *out);
    out += k;
    start += k;
    len -= k;
  }
}

static void copy_window(const tagc_token_set *set, size_t start, int T, uint16_t *tokens,
                        uint16_t *targets) {
  tagc_token_set_copy(set, start, (size_t)T, tokens);
  tagc_token_set_copy(set, start + 1, (size_t)T, targets);
}

void tagc_batch_fill(const tagc_corpus *c, uint64_t seed, int64_t step, int64_t first, int count,
                     int T, uint16_t *tokens, uint16_t *targets) {
  for (int i = 0; i < count; i++) {
    size_t start = tagc_sample_start(seed, step, first + i, c->n_train, (size_t)T + 1);
    copy_window(&c->train_set, start, T, tokens + (size_t)i * T, targets + (size_t)i * T);
  }
}

void tagc_val_fill(const tagc_corpus *c, int64_t first, int count, int T, uint16_t *tokens,
                   uint16_t *targets) {
  size_t span = c->n_val - (size_t)T - 1;
  for (int i = 0; i < count; i++) {
    /* golden-ratio stride: evenly spread, deterministic, never out of range */
    size_t start = (size_t)(((uint64_t)(first + i) * 0x9e3779b97f4a7c15ull) % (span + 1));
    copy_window(&c->val_set, start, T, tokens + (size_t)i * T, targets + (size_t)i * T);
  }
}
