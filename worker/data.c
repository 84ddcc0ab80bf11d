#include "data.h"

#include <dirent.h>
#include <stdio.h>
#include <errno.h>
#include <fcntl.h>
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
  size_t n_blocks = (b.len + BLOCK - 1) / BLOCK;
  size_t n_val_blocks = n_blocks / VAL_EVERY;
  out->val = malloc(n_val_blocks * BLOCK + 1);
  out->train = malloc(b.len + 1);
  if (!out->val || !out->train) {
    free(b.data);
    tagc_corpus_free(out);
    return tagc_errorf(TAGC_ENOMEM, "corpus of %zu bytes", b.len);
  }
  for (size_t i = 0; i < n_blocks; i++) {
    size_t len = i + 1 == n_blocks ? b.len - i * BLOCK : BLOCK;
    if (i % VAL_EVERY == VAL_EVERY - 1) {
      memcpy(out->val + out->n_val, b.data + i * BLOCK, len);
      out->n_val += len;
    } else {
      memcpy(out->train + out->n_train, b.data + i * BLOCK, len);
      out->n_train += len;
    }
  }
  out->n_files = b.n_files;
  out->crc = tagc_crc32c(0, b.data, b.len);
  free(b.data);
  if (out->n_train < min_window + 1 || out->n_val < min_window + 1) {
    size_t train = out->n_train, val = out->n_val;
    tagc_corpus_free(out);
    return tagc_errorf(TAGC_EINVAL,
                       "corpus %s is too short: %zu training and %zu validation bytes, each "
                       "needs more than the context window of %zu bytes",
                       path, train, val, min_window);
  }
  LOG_INFO("data", "corpus %s: %d files, %zu training bytes, %zu validation bytes", path,
           out->n_files, out->n_train, out->n_val);
  return TAGC_OK;
}

void tagc_corpus_free(tagc_corpus *c) {
  free(c->train);
  free(c->val);
  c->train = c->val = NULL;
  c->n_train = c->n_val = 0;
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

static void copy_window(const uint8_t *src, size_t start, int T, uint8_t *tokens, uint8_t *targets) {
  memcpy(tokens, src + start, (size_t)T);
  memcpy(targets, src + start + 1, (size_t)T);
}

void tagc_batch_fill(const tagc_corpus *c, uint64_t seed, int64_t step, int64_t first, int count,
                     int T, uint8_t *tokens, uint8_t *targets) {
  for (int i = 0; i < count; i++) {
    size_t start = tagc_sample_start(seed, step, first + i, c->n_train, (size_t)T + 1);
    copy_window(c->train, start, T, tokens + (size_t)i * T, targets + (size_t)i * T);
  }
}

void tagc_val_fill(const tagc_corpus *c, int64_t first, int count, int T, uint8_t *tokens,
                   uint8_t *targets) {
  size_t span = c->n_val - (size_t)T - 1;
  for (int i = 0; i < count; i++) {
    /* golden-ratio stride: evenly spread, deterministic, never out of range */
    size_t start = (size_t)(((uint64_t)(first + i) * 0x9e3779b97f4a7c15ull) % (span + 1));
    copy_window(c->val, start, T, tokens + (size_t)i * T, targets + (size_t)i * T);
  }
}
