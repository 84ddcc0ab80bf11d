/* The token-shard reader (data/data.h, issue 17): llm.c and nanoGPT shards written here are
 * opened through a glob as one concatenation; windows that cross shard boundaries read the
 * right tokens; the sampler's batches do not depend on how a batch is split between ranks;
 * the data CRC covers the tokens (not the headers), so both formats of the same tokens agree;
 * bad shards give the documented status; a set of one window is enough; a shard truncated or
 * rewritten under an open corpus is reported by tagc_corpus_check, never a SIGBUS; the text
 * corpus still reads as bytes, also through a symbolic link given as the corpus. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/status.h"
#include "test.h"
#include "data/data.h"

static char dir[256];

static uint16_t token_at(size_t i) { /* the concatenated training tokens: ids up to 50256 */
  return (uint16_t)((i * 2654435761u >> 7) % 50257);
}

/* Writes a shard of tokens [first, first + n) of token_at (plus `delta` on each). */
static void write_shard(const char *name, int llmc, int32_t magic, int32_t version, int32_t count,
                        size_t first, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (llmc) {
    int32_t h[256] = {magic, version, count};
    fwrite(h, sizeof h, 1, f);
  }
  for (size_t i = 0; i < n; i++) {
    uint16_t t = token_at(first + i);
    fwrite(&t, 2, 1, f);
  }
  fclose(f);
}

static tagc_status open_spec(const char *train, const char *val, const char *format, int vocab,
                             size_t window, tagc_corpus *c) {
  char tp[512], vp[512];
  snprintf(tp, sizeof tp, "%s/%s", dir, train);
  snprintf(vp, sizeof vp, "%s/%s", dir, val);
  tagc_data_spec spec = {NULL, tp, vp, format, vocab};
  return tagc_data_open(&spec, window, c);
}

static const size_t sizes[3] = {1000, 37, 2500}; /* one short shard: windows span it */
#define N_TRAIN (1000 + 37 + 2500)
#define N_VAL 700

static void check_llmc(void) {
  size_t first = 0;
  char name[64];
  for (int k = 0; k < 3; k++) {
    snprintf(name, sizeof name, "t_train_%06d.bin", k);
    write_shard(name, 1, TAGC_LLMC_MAGIC, 1, (int32_t)sizes[k], first, sizes[k]);
    first += sizes[k];
  }
  write_shard("t_val_000000.bin", 1, TAGC_LLMC_MAGIC, 1, N_VAL, 1 << 20, N_VAL);
  tagc_corpus c;
  CHECK_OK(open_spec("t_train_*.bin", "t_val_000000.bin", NULL, 0, 65, &c));
  CHECK_EQ_INT(c.kind, TAGC_DATA_LLMC);
  CHECK_EQ_INT(c.vocab, TAGC_GPT2_VOCAB);
  CHECK_EQ_INT(c.n_train, N_TRAIN);
  CHECK_EQ_INT(c.n_val, N_VAL);
  CHECK_EQ_INT(c.n_files, 4);
  CHECK_EQ_INT(c.train_set.n_segs, 3);
  /* every window of 100 tokens, across the boundaries, reads the concatenation */
  uint16_t buf[100];
  size_t wrong = 0;
  for (size_t s = 0; s + 100 <= N_TRAIN; s += 7) {
    tagc_token_set_copy(&c.train_set, s, 100, buf);
    for (size_t i = 0; i < 100; i++)
      wrong += buf[i] != token_at(s + i);
  }
  CHECK_MSG(wrong == 0, "%zu tokens read wrong", wrong);
  /* the sampler: targets are tokens shifted by one, and a batch split in pieces (ranks,
   * micro-batches) reads the same windows as the whole */
  enum { T = 64, B = 9 };
  uint16_t tok[B * T], tgt[B * T], tok2[B * T], tgt2[B * T];
  tagc_batch_fill(&c, 1337, 5, 0, B, T, tok, tgt);
  tagc_batch_fill(&c, 1337, 5, 0, 4, T, tok2, tgt2);
  tagc_batch_fill(&c, 1337, 5, 4, B - 4, T, tok2 + 4 * T, tgt2 + 4 * T);
  CHECK(memcmp(tok, tok2, sizeof tok) == 0 && memcmp(tgt, tgt2, sizeof tgt) == 0);
  wrong = 0;
  for (int b = 0; b < B; b++) {
    size_t s = tagc_sample_start(1337, 5, b, N_TRAIN, T + 1);
    for (int t = 0; t < T; t++)
      wrong += tok[b * T + t] != token_at(s + t) || tgt[b * T + t] != token_at(s + t + 1);
  }
  CHECK_MSG(wrong == 0, "%zu sampled tokens wrong", wrong);
  tagc_val_fill(&c, 0, 4, T, tok, tgt);
  wrong = 0;
  for (int i = 0; i < 4 * T; i++)
    wrong += tok[i] >= TAGC_GPT2_VOCAB || tgt[i] >= TAGC_GPT2_VOCAB;
  CHECK_EQ_INT(wrong, 0);
  /* the CRC covers the training tokens then the validation tokens, headers excluded */
  uint32_t crc = 0;
  for (size_t i = 0; i < N_TRAIN; i++) {
    uint16_t t = token_at(i);
    crc = tagc_crc32c(crc, &t, 2);
  }
  for (size_t i = 0; i < N_VAL; i++) {
    uint16_t t = token_at((1 << 20) + i);
    crc = tagc_crc32c(crc, &t, 2);
  }
  CHECK_EQ_INT(c.crc, crc);
  uint32_t llmc_crc = c.crc;
  tagc_corpus_free(&c);
  tagc_corpus_free(&c); /* idempotent */

  /* nanoGPT files of the same tokens: the same data */
  first = 0;
  for (int k = 0; k < 3; k++) {
    snprintf(name, sizeof name, "n_train_%06d.bin", k);
    write_shard(name, 0, 0, 0, 0, first, sizes[k]);
    first += sizes[k];
  }
  write_shard("n_val.bin", 0, 0, 0, 0, 1 << 20, N_VAL);
  CHECK_EQ_INT(open_spec("n_train_*.bin", "n_val.bin", "nanogpt", 0, 65, &c), TAGC_EINVAL);
  CHECK_OK(open_spec("n_train_*.bin", "n_val.bin", "nanogpt", 50257, 65, &c));
  CHECK_EQ_INT(c.n_train, N_TRAIN);
  CHECK_EQ_INT(c.crc, llmc_crc);
  tagc_corpus_free(&c);
  /* a smaller --vocab than the ids in the data is refused */
  CHECK_EQ_INT(open_spec("n_train_*.bin", "n_val.bin", "nanogpt", 1000, 65, &c), TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "not below the vocabulary 1000") != NULL);
}

static void check_bad(void) {
  tagc_corpus c;
  write_shard("bad_magic.bin", 1, 1234, 1, 500, 0, 500);
  write_shard("bad_version.bin", 1, TAGC_LLMC_MAGIC, 2, 500, 0, 500);
  write_shard("bad_trunc.bin", 1, TAGC_LLMC_MAGIC, 1, 500, 0, 400);
  write_shard("bad_long.bin", 1, TAGC_LLMC_MAGIC, 1, 500, 0, 600);
  write_shard("bad_zero.bin", 1, TAGC_LLMC_MAGIC, 1, 0, 0, 0);
  write_shard("bad_empty.bin", 0, 0, 0, 0, 0, 0);
  write_shard("ok_short.bin", 1, TAGC_LLMC_MAGIC, 1, 50, 0, 50);
  static const struct {
    const char *train, *want;
    tagc_status st;
  } cases[] = {
      {"bad_magic.bin", "magic 1234", TAGC_EINVAL},
      {"bad_version.bin", "version 2", TAGC_EINVAL},
      {"bad_trunc.bin", "truncated", TAGC_EINVAL},
      {"bad_long.bin", "longer than its header", TAGC_EINVAL},
      {"bad_zero.bin", "says 0 tokens", TAGC_EINVAL},
      {"bad_empty.bin", "empty (0 bytes)", TAGC_EINVAL},
      {"nothing_*.bin", "matches no file", TAGC_ENOTFOUND},
      {"missing.bin", "missing.bin", TAGC_ENOTFOUND},
      {"ok_short.bin", "context window", TAGC_EINVAL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tagc_status st = open_spec(cases[i].train, "t_val_000000.bin", NULL, 0, 65, &c);
    CHECK_MSG(st == cases[i].st && strstr(tagc_last_error(), cases[i].want),
              "%s: status %d, error '%s', wanted %d '%s'", cases[i].train, st, tagc_last_error(),
              cases[i].st, cases[i].want);
    CHECK(c.shards == NULL && c.train_set.segs == NULL); /* nothing left behind */
  }
  /* one bad shard among good ones fails the whole set */
  CHECK_EQ_INT(open_spec("[tb]*_*.bin", "t_val_000000.bin", NULL, 0, 65, &c), TAGC_EINVAL);
  tagc_data_spec no_val = {NULL, "x.bin", NULL, NULL, 0};
  CHECK_EQ_INT(tagc_data_open(&no_val, 65, &c), TAGC_EINVAL);
}

/* A set of exactly one window (the context and one more token) is enough; one token less is
 * refused, naming the context window itself. */
static void check_window(void) {
  tagc_corpus c;
  write_shard("w_train.bin", 1, TAGC_LLMC_MAGIC, 1, 65, 0, 65);
  write_shard("w_short.bin", 1, TAGC_LLMC_MAGIC, 1, 64, 0, 64);
  CHECK_OK(open_spec("w_train.bin", "w_train.bin", NULL, 0, 65, &c));
  uint16_t tok[64], tgt[64];
  tagc_batch_fill(&c, 1, 0, 0, 1, 64, tok, tgt);
  CHECK(tok[0] == token_at(0) && tgt[63] == token_at(64));
  tagc_val_fill(&c, 3, 1, 64, tok, tgt);
  CHECK(tok[0] == token_at(0) && tgt[63] == token_at(64));
  CHECK_OK(tagc_corpus_check(&c));
  tagc_corpus_free(&c);
  CHECK_EQ_INT(open_spec("w_short.bin", "w_train.bin", NULL, 0, 65, &c), TAGC_EINVAL);
  CHECK_MSG(strstr(tagc_last_error(), "at least 65 (the context window of 64 tokens and one more)"),
            "%s", tagc_last_error());
}

/* Fills B windows of T from every step in [0, steps): the whole training set is touched. */
static void fill_steps(const tagc_corpus *c, int steps) {
  enum { T = 64, B = 16 };
  uint16_t tok[B * T], tgt[B * T];
  for (int s = 0; s < steps; s++)
    tagc_batch_fill(c, 7, s, 0, B, T, tok, tgt);
  tagc_val_fill(c, 0, B, T, tok, tgt);
}

/* A shard changed under an open corpus: truncated (its mapping would raise SIGBUS in the fill)
 * or rewritten in place at the same size. The fills go on without a signal, reading token 0
 * where the shard was cut, and tagc_corpus_check reports the shard from then on. */
static void check_changed(void) {
  char path[512], name[64];
  tagc_corpus c;
  for (int k = 0; k < 2; k++) {
    snprintf(name, sizeof name, "c_train_%06d.bin", k);
    write_shard(name, 1, TAGC_LLMC_MAGIC, 1, 20000, (size_t)k * 20000, 20000);
  }
  CHECK_OK(open_spec("c_train_*.bin", "t_val_000000.bin", NULL, 0, 65, &c));
  fill_steps(&c, 50);
  CHECK_OK(tagc_corpus_check(&c));
  snprintf(path, sizeof path, "%s/c_train_000001.bin", dir);
  CHECK(truncate(path, TAGC_LLMC_HEADER_BYTES + 100) == 0);
  fill_steps(&c, 200); /* windows in the cut pages: SIGBUS, caught */
  CHECK_EQ_INT(tagc_corpus_check(&c), TAGC_EIO);
  CHECK_MSG(strstr(tagc_last_error(), path) && strstr(tagc_last_error(), "truncated under the run"),
            "%s", tagc_last_error());
  uint16_t cut[8];
  tagc_token_set_copy(&c.train_set, 20000 + 5000, 8, cut); /* a page past the end: zeros */
  CHECK(cut[0] == 0 && cut[7] == 0);
  tagc_token_set_copy(&c.train_set, 0, 8, cut); /* the other shard reads as before */
  CHECK(cut[0] == token_at(0) && cut[7] == token_at(7));
  CHECK_EQ_INT(tagc_corpus_check(&c), TAGC_EIO); /* sticky */
  tagc_corpus_free(&c);

  /* a corpus nobody checks keeps SIGBUS fatal: zeros nobody notices would be silently wrong */
  write_shard("c_train_000001.bin", 1, TAGC_LLMC_MAGIC, 1, 20000, 20000, 20000);
  pid_t child = fork();
  if (child == 0) {
    tagc_corpus u;
    if (open_spec("c_train_*.bin", "t_val_000000.bin", NULL, 0, 65, &u) != TAGC_OK ||
        truncate(path, TAGC_LLMC_HEADER_BYTES + 100) != 0)
      _exit(3);
    fill_steps(&u, 200);
    _exit(0);
  }
  int wst = 0;
  CHECK(child > 0 && waitpid(child, &wst, 0) == child);
  CHECK_MSG(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGBUS, "wait status %#x", wst);

  /* rewritten in place, the same size: found by the check (the fills read valid tokens) */
  write_shard("c_train_000001.bin", 1, TAGC_LLMC_MAGIC, 1, 20000, 20000, 20000);
  CHECK_OK(open_spec("c_train_*.bin", "t_val_000000.bin", NULL, 0, 65, &c));
  usleep(20000); /* past the file system's timestamp granularity */
  write_shard("c_train_000001.bin", 1, TAGC_LLMC_MAGIC, 1, 20000, 7, 20000);
  CHECK_EQ_INT(tagc_corpus_check(&c), TAGC_EIO);
  CHECK_MSG(strstr(tagc_last_error(), path) && strstr(tagc_last_error(), "changed under the run"),
            "%s", tagc_last_error());
  tagc_corpus_free(&c);

  /* replaced by a rename: the mapping still reads the file that was opened, so nothing changed */
  CHECK_OK(open_spec("c_train_*.bin", "t_val_000000.bin", NULL, 0, 65, &c));
  char moved[600];
  snprintf(moved, sizeof moved, "%s.new", path);
  write_shard("c_train_000001.bin.new", 1, TAGC_LLMC_MAGIC, 1, 10, 0, 10);
  CHECK(rename(moved, path) == 0);
  fill_steps(&c, 50);
  CHECK_OK(tagc_corpus_check(&c));
  tagc_corpus_free(&c);
}

static void check_text(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/text.txt", dir);
  FILE *f = fopen(path, "wb");
  for (int i = 0; i < 50000; i++)
    fputc("abcdefghij\xff"[i % 11], f);
  fclose(f);
  tagc_corpus c;
  tagc_data_spec spec = {path, NULL, NULL, NULL, 0};
  CHECK_OK(tagc_data_open(&spec, 65, &c));
  CHECK_EQ_INT(c.kind, TAGC_DATA_TEXT);
  CHECK_EQ_INT(c.vocab, 256);
  CHECK_EQ_INT(c.n_train + c.n_val, 50000);
  CHECK_EQ_INT(c.n_val, 4096); /* block 9 of the 13 */
  uint16_t buf[20];
  tagc_token_set_copy(&c.train_set, 0, 20, buf);
  CHECK_EQ_INT(buf[10], 0xff);
  CHECK_EQ_INT(buf[11], 'a');
  tagc_corpus_free(&c);
  spec.vocab = 300;
  CHECK_EQ_INT(tagc_data_open(&spec, 65, &c), TAGC_EINVAL);
  /* a symbolic link given as the corpus is followed (links under a directory are skipped) */
  char link[512], sub[512];
  snprintf(link, sizeof link, "%s/text-link", dir);
  CHECK(symlink(path, link) == 0);
  spec.corpus = link;
  spec.vocab = 0;
  CHECK_OK(tagc_data_open(&spec, 65, &c));
  CHECK_EQ_INT(c.n_files, 1);
  CHECK_EQ_INT(c.n_train + c.n_val, 50000);
  tagc_corpus_free(&c);
  snprintf(sub, sizeof sub, "%s/texts", dir);
  CHECK(mkdir(sub, 0700) == 0);
  snprintf(link, sizeof link, "%s/texts/a-link", dir);
  CHECK(symlink(path, link) == 0);
  snprintf(link, sizeof link, "%s/texts-link", dir);
  CHECK(symlink(sub, link) == 0);
  CHECK_EQ_INT(tagc_data_open(&spec, 65, &c), TAGC_EINVAL); /* followed, but its one entry is a link */
  CHECK_MSG(strstr(tagc_last_error(), "is empty (0 files"), "%s", tagc_last_error());
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/wt-tokens-data-%d", (int)getpid());
  mkdir(dir, 0700);
  check_llmc();
  check_bad();
  check_window();
  check_changed();
  check_text();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
  return TEST_END();
}
