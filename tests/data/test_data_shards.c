/* The token-shard reader (data/data.h, issue 17): llm.c and nanoGPT shards written here are
 * opened through a glob as one concatenation; windows that cross shard boundaries read the
 * right tokens; the sampler's batches do not depend on how a batch is split between ranks;
 * the data CRC covers the tokens (not the headers), so both formats of the same tokens agree;
 * bad shards give the documented status; the text corpus still reads as bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    CHECK(c.maps == NULL && c.train_set.segs == NULL); /* nothing left behind */
  }
  /* one bad shard among good ones fails the whole set */
  CHECK_EQ_INT(open_spec("[tb]*_*.bin", "t_val_000000.bin", NULL, 0, 65, &c), TAGC_EINVAL);
  tagc_data_spec no_val = {NULL, "x.bin", NULL, NULL, 0};
  CHECK_EQ_INT(tagc_data_open(&no_val, 65, &c), TAGC_EINVAL);
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
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/wt-tokens-data-%d", (int)getpid());
  mkdir(dir, 0700);
  check_llmc();
  check_bad();
  check_text();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", dir);
  return TEST_END();
}
