/* GPT-2 byte-level BPE from tokenizer.bin or vocab.json + merges.txt (tokenizer.h). */
#include "tagctl/tokenizer.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>
#include <unicode/uchar.h>
#include <unicode/utf8.h>

#define PATH_CAP 4200
#define LLMC_TOKENIZER_MAGIC 20240328
#define EOT_TEXT "<|endoftext|>"

/* A merge (left id, right id) -> (rank, merged id), in an open-addressing table. */
typedef struct merge_slot {
  uint64_t key; /* left << 32 | right; EMPTY_KEY when free */
  int rank, merged;
} merge_slot;
#define EMPTY_KEY UINT64_MAX

struct tagctl_tokenizer {
  int size, eot;
  unsigned char *blob; /* the bytes of every token, one after the other */
  size_t *start;       /* token i: blob[start[i] .. start[i + 1]) */
  int byte_id[256];    /* the id of each single byte (encoding) */
  merge_slot *merges;  /* NULL: decoding only */
  size_t merge_cap;    /* a power of two */
  char vocab_path[PATH_CAP], merges_path[PATH_CAP];
};

/* ---------------------------------------------------------------------------------------- */
/* GPT-2's printable code point of each byte (bytes_to_unicode in GPT-2's encoder.py)       */

static int byte_is_printable(int b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

/* cp_byte[cp] = the byte written as code point cp (cp < 512), -1 for none. */
static void byte_code_points(int cp_byte[512]) {
  for (int i = 0; i < 512; i++)
    cp_byte[i] = -1;
  int n = 0;
  for (int b = 0; b < 256; b++)
    cp_byte[byte_is_printable(b) ? b : 256 + n++] = b;
}

/* ---------------------------------------------------------------------------------------- */

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static merge_slot *merge_find(const tagctl_tokenizer *t, int left, int right) {
  uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
  for (size_t i = mix(key) & (t->merge_cap - 1);; i = (i + 1) & (t->merge_cap - 1))
    if (t->merges[i].key == key || t->merges[i].key == EMPTY_KEY)
      return &t->merges[i];
}

void tagctl_tokenizer_free(tagctl_tokenizer *t) {
  if (!t)
    return;
  free(t->blob);
  free(t->start);
  free(t->merges);
  free(t);
}

int tagctl_tokenizer_size(const tagctl_tokenizer *t) {
  return t->size;
}

int tagctl_tokenizer_eot(const tagctl_tokenizer *t) {
  return t->eot;
}

const char *tagctl_tokenizer_vocab_path(const tagctl_tokenizer *t) {
  return *t->vocab_path ? t->vocab_path : NULL;
}

const char *tagctl_tokenizer_merges_path(const tagctl_tokenizer *t) {
  return *t->merges_path ? t->merges_path : NULL;
}

const unsigned char *tagctl_tokenizer_bytes(const tagctl_tokenizer *t, int id, size_t *len) {
  *len = t->start[id + 1] - t->start[id];
  return t->blob + t->start[id];
}

/* Allocates the tables of `size` tokens holding `bytes` bytes in all. */
static tagc_status tok_alloc(tagctl_tokenizer *t, int size, size_t bytes) {
  t->size = size;
  t->eot = -1;
  t->blob = malloc(bytes ? bytes : 1);
  t->start = calloc((size_t)size + 1, sizeof *t->start);
  for (int b = 0; b < 256; b++)
    t->byte_id[b] = -1;
  return t->blob && t->start ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "tokenizer of %d tokens", size);
}

static void find_eot(tagctl_tokenizer *t) {
  for (int i = 0; i < t->size && t->eot < 0; i++) {
    size_t len;
    const unsigned char *b = tagctl_tokenizer_bytes(t, i, &len);
    if (len == strlen(EOT_TEXT) && !memcmp(b, EOT_TEXT, len))
      t->eot = i;
  }
}

/* ---------------------------------------------------------------------------------------- */
/* llm.c's tokenizer.bin                                                                    */

static tagc_status load_llmc(FILE *f, const char *path, tagctl_tokenizer *t) {
  uint32_t h[256];
  if (fread(h, sizeof h, 1, f) != 1 || h[0] != LLMC_TOKENIZER_MAGIC || (h[1] != 1 && h[1] != 2))
    return tagc_errorf(TAGC_ECORRUPT, "%s: not an llm.c tokenizer (magic %d, version 1 or 2)", path,
                       LLMC_TOKENIZER_MAGIC);
  if (h[2] < 1 || h[2] > 1u << 20)
    return tagc_errorf(TAGC_ECORRUPT, "%s: vocabulary of %u tokens", path, h[2]);
  TAGC_CHECK(tok_alloc(t, (int)h[2], (size_t)h[2] * 255));
  size_t at = 0;
  for (int i = 0; i < t->size; i++) {
    unsigned char len;
    if (fread(&len, 1, 1, f) != 1 || len == 0 || fread(t->blob + at, 1, len, f) != len)
      return tagc_errorf(TAGC_ECORRUPT, "%s: token %d of %d is cut short or empty", path, i, t->size);
    t->start[i] = at;
    at += len;
  }
  t->start[t->size] = at;
  if (fgetc(f) != EOF)
    return tagc_errorf(TAGC_ECORRUPT, "%s: bytes after the last of its %d tokens", path, t->size);
  if (h[1] == 2 && h[3] < h[2])
    t->eot = (int)h[3];
  else
    find_eot(t);
  return TAGC_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Hugging Face's vocab.json and merges.txt                                                 */

/* The bytes a vocab.json key stands for, appended at blob + *at; -1 when it has a code point
 * that is no byte's. */
static int key_bytes(const char *key, const int cp_byte[512], unsigned char *out) {
  int32_t i = 0, len = (int32_t)strlen(key), n = 0;
  while (i < len) {
    UChar32 c;
    U8_NEXT((const uint8_t *)key, i, len, c);
    if (c < 0 || c >= 512 || cp_byte[c] < 0)
      return -1;
    out[n++] = (unsigned char)cp_byte[c];
  }
  return n;
}

static tagc_status load_vocab(const char *path, tagctl_tokenizer *t, json_t **vocab) {
  json_error_t jerr;
  *vocab = json_load_file(path, 0, &jerr);
  if (!json_is_object(*vocab))
    return tagc_errorf(TAGC_ECORRUPT, "%s: not a JSON object of tokens (line %d: %s)", path, jerr.line, jerr.text);
  size_t n = json_object_size(*vocab), bytes = 0;
  const char *key;
  json_t *value;
  json_object_foreach(*vocab, key, value) bytes += strlen(key);
  if (n < 1 || n > 1u << 20)
    return tagc_errorf(TAGC_ECORRUPT, "%s: %zu tokens", path, n);
  TAGC_CHECK(tok_alloc(t, (int)n, bytes));
  int cp_byte[512];
  byte_code_points(cp_byte);
  size_t *len = calloc(n, sizeof *len);
  unsigned char **at = calloc(n, sizeof *at);
  unsigned char *scratch = malloc(bytes + 1);
  tagc_status st = len && at && scratch ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "%s", path);
  size_t used = 0;
  json_object_foreach(*vocab, key, value) {
    if (st != TAGC_OK)
      break;
    json_int_t id = json_integer_value(value);
    int nb = key_bytes(key, cp_byte, scratch + used);
    if (!json_is_integer(value) || id < 0 || id >= (json_int_t)n || at[id])
      st = tagc_errorf(TAGC_ECORRUPT, "%s: token '%s' has id %s: the ids must be 0..%zu, each once",
                       path, key, json_is_integer(value) ? "taken or out of range" : "that is no integer", n - 1);
    else if (nb <= 0)
      st = tagc_errorf(TAGC_ECORRUPT, "%s: token '%s' is not GPT-2 byte-level (a code point no "
                       "byte is written as)", path, key);
    else {
      at[id] = scratch + used;
      len[id] = (size_t)nb;
      used += (size_t)nb;
    }
  }
  for (size_t i = 0, off = 0; st == TAGC_OK && i < n; i++) { /* in id order */
    memcpy(t->blob + off, at[i], len[i]);
    t->start[i] = off;
    off += len[i];
    t->start[i + 1] = off;
    if (len[i] == 1 && t->byte_id[t->blob[t->start[i]]] < 0)
      t->byte_id[t->blob[t->start[i]]] = (int)i;
  }
  free(scratch);
  free(at);
  free(len);
  if (st == TAGC_OK)
    find_eot(t);
  return st;
}

static tagc_status token_id(json_t *vocab, const char *text, const char *path, int line, int *id) {
  json_t *v = json_object_get(vocab, text);
  if (!v)
    return tagc_errorf(TAGC_ECORRUPT, "%s line %d: '%s' is not a token of vocab.json", path, line, text);
  *id = (int)json_integer_value(v);
  return TAGC_OK;
}

static tagc_status load_merges(FILE *f, const char *path, json_t *vocab, tagctl_tokenizer *t) {
  for (int b = 0; b < 256; b++)
    if (t->byte_id[b] < 0)
      return tagc_errorf(TAGC_ECORRUPT, "%s: vocab.json has no token for byte %d, which encoding "
                         "starts from", path, b);
  t->merge_cap = 1024;
  while (t->merge_cap < 2 * (size_t)t->size)
    t->merge_cap *= 2;
  t->merges = malloc(t->merge_cap * sizeof *t->merges);
  if (!t->merges)
    return tagc_errorf(TAGC_ENOMEM, "merges");
  for (size_t i = 0; i < t->merge_cap; i++)
    t->merges[i].key = EMPTY_KEY;
  char line[1024], joined[1024];
  int rank = 0, lineno = 0;
  size_t count = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    line[strcspn(line, "\r\n")] = 0;
    if ((lineno == 1 && !strncmp(line, "#version", 8)) || !*line)
      continue;
    char *space = strchr(line, ' ');
    if (!space || space == line || !space[1] || strchr(space + 1, ' '))
      return tagc_errorf(TAGC_ECORRUPT, "%s line %d: not a merge 'A B'", path, lineno);
    *space = 0;
    snprintf(joined, sizeof joined, "%s%s", line, space + 1);
    int left = -1, right = -1, merged = -1;
    TAGC_CHECK(token_id(vocab, line, path, lineno, &left));
    TAGC_CHECK(token_id(vocab, space + 1, path, lineno, &right));
    TAGC_CHECK(token_id(vocab, joined, path, lineno, &merged));
    if (++count > t->merge_cap / 2)
      return tagc_errorf(TAGC_ECORRUPT, "%s: more merges than vocab.json has tokens", path);
    merge_slot *s = merge_find(t, left, right);
    if (s->key == EMPTY_KEY) /* a repeated merge keeps its first (lowest) rank */
      *s = (merge_slot){(uint64_t)(uint32_t)left << 32 | (uint32_t)right, rank, merged};
    rank++;
  }
  if (ferror(f))
    return tagc_errnof(TAGC_EIO, "%s", path);
  return TAGC_OK;
}

/* vocab.json at vocab_path; merges.txt beside it when there is one. */
static tagc_status load_hf(const char *vocab_path, tagctl_tokenizer *t) {
  json_t *vocab = NULL;
  snprintf(t->vocab_path, sizeof t->vocab_path, "%s", vocab_path);
  tagc_status st = load_vocab(vocab_path, t, &vocab);
  const char *slash = strrchr(vocab_path, '/');
  char merges[PATH_CAP];
  snprintf(merges, sizeof merges, "%.*smerges.txt", slash ? (int)(slash + 1 - vocab_path) : 0, vocab_path);
  FILE *f = st == TAGC_OK ? fopen(merges, "r") : NULL;
  if (f) {
    snprintf(t->merges_path, sizeof t->merges_path, "%s", merges);
    st = load_merges(f, merges, vocab, t);
    fclose(f);
  } else if (st == TAGC_OK && errno != ENOENT) {
    st = tagc_errnof(TAGC_EIO, "%s", merges);
  }
  json_decref(vocab);
  return st;
}

static tagc_status load_file(const char *path, tagctl_tokenizer *t) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "%s", path);
  uint32_t magic = 0;
  int is_llmc = fread(&magic, sizeof magic, 1, f) == 1 && magic == LLMC_TOKENIZER_MAGIC;
  rewind(f);
  tagc_status st = is_llmc ? load_llmc(f, path, t) : TAGC_OK;
  fclose(f);
  return is_llmc ? st : load_hf(path, t);
}

tagc_status tagctl_tokenizer_load(const char *path, tagctl_tokenizer **out) {
  *out = NULL;
  tagctl_tokenizer *t = calloc(1, sizeof *t);
  if (!t)
    return tagc_errorf(TAGC_ENOMEM, "tokenizer");
  struct stat sb;
  char file[PATH_CAP];
  tagc_status st;
  if (stat(path, &sb) != 0) {
    st = tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "%s", path);
  } else if (S_ISDIR(sb.st_mode)) {
    snprintf(file, sizeof file, "%s/vocab.json", path);
    if (stat(file, &sb) != 0)
      snprintf(file, sizeof file, "%s/tokenizer.bin", path);
    st = stat(file, &sb) == 0 ? load_file(file, t)
                              : tagc_errorf(TAGC_ENOTFOUND, "%s: no vocab.json or tokenizer.bin in it", path);
  } else {
    st = load_file(path, t);
  }
  if (st != TAGC_OK) {
    tagctl_tokenizer_free(t);
    return st;
  }
  *out = t;
  return TAGC_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Encoding                                                                                 */

enum { CLASS_LETTER, CLASS_NUMBER, CLASS_SPACE, CLASS_OTHER };

/* The class of the code point at s[*i] (invalid UTF-8: other); advances *i past it. */
static int next_class(const uint8_t *s, int32_t *i, int32_t len) {
  UChar32 c;
  U8_NEXT(s, *i, len, c);
  if (c < 0)
    return CLASS_OTHER;
  if (u_isUWhiteSpace(c))
    return CLASS_SPACE;
  uint32_t mask = U_GET_GC_MASK(c);
  return mask & U_GC_L_MASK ? CLASS_LETTER : mask & U_GC_N_MASK ? CLASS_NUMBER : CLASS_OTHER;
}

/* The end of the run of code points of class k from i. */
static int32_t run_end(const uint8_t *s, int32_t i, int32_t len, int k) {
  while (i < len) {
    int32_t j = i;
    if (next_class(s, &j, len) != k)
      break;
    i = j;
  }
  return i;
}

/* The end of the piece of GPT-2's pattern that starts at i (tokenizer.h). */
static int32_t piece_end(const uint8_t *s, int32_t i, int32_t len) {
  if (s[i] == '\'' && i + 1 < len) {
    static const char *const contractions[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    for (size_t k = 0; k < sizeof contractions / sizeof contractions[0]; k++) {
      size_t n = strlen(contractions[k]);
      if ((size_t)(len - i - 1) >= n && !memcmp(s + i + 1, contractions[k], n))
        return i + 1 + (int32_t)n;
    }
  }
  int32_t j = i;
  int k = next_class(s, &j, len);
  if (s[i] == ' ' && j < len) { /* " ?" before letters, numbers or other */
    int32_t j2 = j;
    int k2 = next_class(s, &j2, len);
    if (k2 != CLASS_SPACE)
      return run_end(s, j2, len, k2);
  }
  if (k != CLASS_SPACE)
    return run_end(s, j, len, k);
  /* \s+(?!\S) | \s+: a run of white space, less its last code point when text follows */
  int32_t last = i, end = j;
  while (end < len) {
    int32_t next = end;
    if (next_class(s, &next, len) != CLASS_SPACE)
      break;
    last = end;
    end = next;
  }
  return end < len && last > i ? last : end;
}

/* BPE of one piece's n bytes: ids[0..n) are its byte ids on entry; returns the count left. */
static int bpe(const tagctl_tokenizer *t, int *ids, int n) {
  for (;;) {
    int best = -1, best_rank = 0;
    for (int i = 0; i + 1 < n; i++) {
      const merge_slot *s = merge_find(t, ids[i], ids[i + 1]);
      if (s->key != EMPTY_KEY && (best < 0 || s->rank < best_rank)) {
        best = i;
        best_rank = s->rank;
      }
    }
    if (best < 0)
      return n;
    int left = ids[best], right = ids[best + 1], merged = merge_find(t, left, right)->merged, out = 0;
    for (int i = 0; i < n; i++) {
      if (i + 1 < n && ids[i] == left && ids[i + 1] == right) {
        ids[out++] = merged;
        i++;
      } else {
        ids[out++] = ids[i];
      }
    }
    n = out;
  }
}

tagc_status tagctl_tokenizer_encode(const tagctl_tokenizer *t, const char *text, int **ids, int *n) {
  *ids = NULL;
  *n = 0;
  if (!t->merges)
    return tagc_errorf(TAGC_EUNSUPPORTED, "%s has no merges (merges.txt beside a vocab.json): it "
                       "decodes but cannot encode text", *t->vocab_path ? t->vocab_path : "an llm.c tokenizer.bin");
  const uint8_t *s = (const uint8_t *)text;
  int32_t len = (int32_t)strlen(text);
  int *out = malloc(((size_t)len + 1) * sizeof *out);
  if (!out)
    return tagc_errorf(TAGC_ENOMEM, "%d ids", len);
  int count = 0;
  for (int32_t i = 0; i < len;) {
    int32_t end = piece_end(s, i, len);
    int first = count;
    for (int32_t k = i; k < end; k++)
      out[count++] = t->byte_id[s[k]];
    count = first + bpe(t, out + first, count - first);
    i = end;
  }
  *ids = out;
  *n = count;
  return TAGC_OK;
}
