#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* The corpus path itself is followed when it is a symbolic link; links under it are skipped. */
static tagc_status walk(byte_buf *b, const char *path, int depth) {
  struct stat sb;
  if ((depth == 0 ? stat(path, &sb) : lstat(path, &sb)) != 0)
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

tagc_status tagc_corpus_load(const char *path, size_t window, tagc_corpus *out) {
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
  if (out->n_train < window || out->n_val < window) {
    size_t n_train = out->n_train, nv = out->n_val;
    tagc_corpus_free(out);
    return tagc_errorf(TAGC_EINVAL,
                       "corpus %s is too short: %zu training and %zu validation bytes, each "
                       "needs at least %zu (the context window of %zu bytes and one more)",
                       path, n_train, nv, window, window - 1);
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

/* ---------------------------------------------------------------------------------------- */
/* Shards changed under the run                                                             */

struct tagc_data_health {
  atomic_int polled;    /* tagc_corpus_check was called: a fault may be survived */
  atomic_int bus_shard; /* -1, or the first shard a read faulted in (set by on_sigbus) */
  atomic_int failed;    /* set once, after detail is written */
  pthread_mutex_t mu;   /* serialises the writers of detail */
  char detail[768];
};

/* Every shard mapping of the process, for the SIGBUS handler, which may run on any thread at any
 * time: slots are claimed and released with atomics and never move. */
enum { GUARD_SLOTS = 8192 };
static struct guard_slot {
  _Atomic uintptr_t start; /* 0: free; 1: being filled; else the mapping's address */
  size_t len;
  tagc_data_health *health;
  int shard;
} guard_slots[GUARD_SLOTS];
static atomic_int guard_top; /* slots at and above are free */
static size_t page_size;
static struct sigaction prev_sigbus;
static pthread_once_t sigbus_once = PTHREAD_ONCE_INIT;

/* A read in a shard mapping beyond the file's end (it was truncated under us) of a corpus whose
 * caller polls tagc_corpus_check: the page is replaced by a page of zeros, the shard recorded,
 * and the read resumes. Any other fault, and one of a corpus nobody polls (the zeros would go
 * unnoticed), goes to the disposition before ours (the default one dumps core as it would
 * have). Async-signal-safe (mmap is a plain system call). */
static void on_sigbus(int sig, siginfo_t *si, void *uc) {
  uintptr_t addr = (uintptr_t)si->si_addr;
  int top = atomic_load_explicit(&guard_top, memory_order_acquire);
  for (int i = 0; i < top; i++) {
    struct guard_slot *g = &guard_slots[i];
    uintptr_t start = atomic_load_explicit(&g->start, memory_order_acquire);
    if (start <= 1 || addr < start || addr - start >= g->len)
      continue;
    if (!atomic_load(&g->health->polled))
      break;
    void *page = (void *)(addr & ~(uintptr_t)(page_size - 1));
    if (mmap(page, page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
      break;
    int none = -1;
    atomic_compare_exchange_strong(&g->health->bus_shard, &none, g->shard);
    return;
  }
  if (prev_sigbus.sa_flags & SA_SIGINFO) {
    prev_sigbus.sa_sigaction(sig, si, uc);
  } else if (prev_sigbus.sa_handler != SIG_DFL && prev_sigbus.sa_handler != SIG_IGN) {
    prev_sigbus.sa_handler(sig);
  } else {
    signal(SIGBUS, SIG_DFL); /* a fault recurs on return; a sent signal is raised again */
    if (si->si_code <= 0)
      raise(SIGBUS);
  }
}

static void install_sigbus(void) {
  page_size = (size_t)sysconf(_SC_PAGESIZE);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &prev_sigbus);
}

/* Puts shard i of c under the SIGBUS handler; its slot in *slot. */
static tagc_status guard_add(tagc_corpus *c, int i, int *slot) {
  for (int k = 0; k < GUARD_SLOTS; k++) {
    uintptr_t free_slot = 0;
    if (!atomic_compare_exchange_strong(&guard_slots[k].start, &free_slot, 1))
      continue;
    guard_slots[k].len = c->shards[i].len;
    guard_slots[k].health = c->health;
    guard_slots[k].shard = i;
    atomic_store_explicit(&guard_slots[k].start, (uintptr_t)c->shards[i].map, memory_order_release);
    int top = atomic_load(&guard_top);
    while (top < k + 1 && !atomic_compare_exchange_weak(&guard_top, &top, k + 1))
      ;
    *slot = k;
    return TAGC_OK;
  }
  return tagc_errorf(TAGC_EINVAL, "shard %s: more than %d token shards open at once",
                     c->shards[i].path, GUARD_SLOTS);
}

/* Records the first failure; later ones keep it. */
static void set_failed(const tagc_corpus *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_failed(const tagc_corpus *c, const char *fmt, ...) {
  tagc_data_health *h = c->health;
  pthread_mutex_lock(&h->mu);
  if (!atomic_load(&h->failed)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->detail, sizeof h->detail, fmt, ap);
    va_end(ap);
    atomic_store(&h->failed, 1);
  }
  pthread_mutex_unlock(&h->mu);
}

/* Whether shard i changed since it was opened (the failure then recorded). */
static int shard_changed(const tagc_corpus *c, int i) {
  const tagc_shard *sh = &c->shards[i];
  struct stat sb;
  if (fstat(sh->fd, &sb) != 0) {
    set_failed(c, "shard %s: fstat: %s", sh->path, strerror(errno));
    return 1;
  }
  if ((size_t)sb.st_size < sh->len) {
    set_failed(c, "shard %s was truncated under the run: %zu bytes at open, %lld now", sh->path,
               sh->len, (long long)sb.st_size);
    return 1;
  }
  if ((size_t)sb.st_size != sh->len || sb.st_mtim.tv_sec != sh->mtime.tv_sec ||
      sb.st_mtim.tv_nsec != sh->mtime.tv_nsec) {
    set_failed(c, "shard %s changed under the run (%zu bytes at open, %lld now, modified since): "
               "its tokens may no longer be those the corpus CRC covers",
               sh->path, sh->len, (long long)sb.st_size);
    return 1;
  }
  return 0;
}

/* tagc_corpus_check without marking the corpus as polled (the open's own check). */
static tagc_status verify(const tagc_corpus *c) {
  tagc_data_health *h = c->health;
  int bus = atomic_load(&h->bus_shard);
  if (bus >= 0 && !atomic_load(&h->failed) && !shard_changed(c, bus))
    set_failed(c, "shard %s: a read of its mapping failed (SIGBUS)", c->shards[bus].path);
  for (int i = 0; i < c->n_shards && !atomic_load(&h->failed); i++)
    shard_changed(c, i);
  if (!atomic_load(&h->failed))
    return TAGC_OK;
  pthread_mutex_lock(&h->mu);
  tagc_status st = tagc_errorf(TAGC_EIO, "%s", h->detail);
  pthread_mutex_unlock(&h->mu);
  return st;
}

tagc_status tagc_corpus_check(const tagc_corpus *c) {
  if (!c->health)
    return TAGC_OK;
  atomic_store(&c->health->polled, 1);
  return verify(c);
}

/* Takes ownership of the shard's descriptor and mapping (the corpus frees them) and puts the
 * mapping under the SIGBUS handler before anything reads it. */
static tagc_status add_shard(tagc_corpus *c, const char *path, int fd, void *map, const struct stat *sb) {
  tagc_shard *shards = realloc(c->shards, (size_t)(c->n_shards + 1) * sizeof *shards);
  char *name = strdup(path);
  if (shards)
    c->shards = shards;
  if (!shards || !name) {
    free(name);
    return tagc_errorf(TAGC_ENOMEM, "shard table");
  }
  shards[c->n_shards] = (tagc_shard){name, fd, map, (size_t)sb->st_size, sb->st_mtim, -1};
  tagc_status st = guard_add(c, c->n_shards, &shards[c->n_shards].guard);
  if (st != TAGC_OK)
    free(name);
  else
    c->n_shards++;
  return st;
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
  if (st == TAGC_OK)
    st = add_shard(c, path, fd, map, &sb);
  if (st != TAGC_OK) {
    if (map != MAP_FAILED)
      munmap(map, size);
    close(fd);
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

tagc_status tagc_data_open(const tagc_data_spec *spec, size_t window, tagc_corpus *out) {
  memset(out, 0, sizeof *out);
  int have_data = spec->data && *spec->data;
  int have_val = spec->val_data && *spec->val_data;
  if (!have_data) {
    if (have_val)
      return tagc_errorf(TAGC_EINVAL, "--val-data needs --data (the training shards)");
    if (spec->vocab && spec->vocab != 256)
      return tagc_errorf(TAGC_EINVAL, "--vocab %d applies to --data shards; the text corpus is "
                         "byte-level (256)", spec->vocab);
    return tagc_corpus_load(spec->corpus, window, out);
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
  out->health = calloc(1, sizeof *out->health);
  if (!out->health)
    return tagc_errorf(TAGC_ENOMEM, "data health");
  atomic_init(&out->health->bus_shard, -1);
  pthread_mutex_init(&out->health->mu, NULL);
  pthread_once(&sigbus_once, install_sigbus);
  tagc_status st = open_set(out, "--data", spec->data, &out->train_set, &out->n_train);
  if (st == TAGC_OK)
    st = open_set(out, "--val-data", spec->val_data, &out->val_set, &out->n_val);
  if (st == TAGC_OK) /* a shard changed while it was scanned */
    st = verify(out);
  if (st == TAGC_OK && (out->n_train < window || out->n_val < window))
    st = tagc_errorf(TAGC_EINVAL, "--data has %zu training and --val-data %zu validation "
                     "tokens: each needs at least %zu (the context window of %zu tokens and one more)",
                     out->n_train, out->n_val, window, window - 1);
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
  for (int i = 0; i < c->n_shards; i++) {
    atomic_store(&guard_slots[c->shards[i].guard].start, 0);
    munmap(c->shards[i].map, c->shards[i].len);
    close(c->shards[i].fd);
    free(c->shards[i].path);
  }
  free(c->shards);
  if (c->health)
    pthread_mutex_destroy(&c->health->mu);
  free(c->health);
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
