/* Data loader throughput (issue 17): opens token shards as the trainer does (mmap, the
 * open-time scan of every token for ids >= vocab and the data CRC), then fills global
 * batches with the trainer's sampler on one thread, and prints tokens per second of both.
 *
 * Usage: bench_data TRAIN_GLOB VAL_FILE [CTX [BATCH [STEPS]]]   (llm.c shards)
 * Prints: open_scan_tokens_per_s, sample_tokens_per_s (tokens delivered to the model: inputs
 * and targets count once, B*T per batch). Medians of 5 repetitions of STEPS batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/timeutil.h"
#include "data/data.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_data TRAIN_GLOB VAL_FILE [CTX [BATCH [STEPS]]]\n");
    return 2;
  }
  int T = argc > 3 ? atoi(argv[3]) : 64, B = argc > 4 ? atoi(argv[4]) : 16;
  int steps = argc > 5 ? atoi(argv[5]) : 20000;
  tagc_data_spec spec = {NULL, argv[1], argv[2], "llmc", 0};
  tagc_corpus c;
  double open_s[5], sample_s[5];
  for (int r = 0; r < 5; r++) {
    double t0 = tagc_now();
    if (tagc_data_open(&spec, (size_t)T + 1, &c) != TAGC_OK) {
      fprintf(stderr, "bench_data: %s\n", tagc_last_error());
      return 2;
    }
    open_s[r] = tagc_now() - t0;
    if (r < 4)
      tagc_corpus_free(&c);
  }
  uint16_t *tok = malloc((size_t)B * T * 2), *tgt = malloc((size_t)B * T * 2);
  uint64_t sink = 0;
  for (int r = 0; r < 5; r++) {
    double t0 = tagc_now();
    for (int s = 0; s < steps; s++) {
      tagc_batch_fill(&c, 1337, (int64_t)r * steps + s, 0, B, T, tok, tgt);
      sink += tok[s % (B * T)];
    }
    sample_s[r] = tagc_now() - t0;
  }
  qsort(open_s, 5, sizeof(double), cmp_double);
  qsort(sample_s, 5, sizeof(double), cmp_double);
  double total = (double)(c.n_train + c.n_val);
  printf("shards: %d files, %zu training + %zu validation tokens (%.1f MB)\n", c.n_files,
         c.n_train, c.n_val, total * 2 / 1e6);
  printf("open_scan_tokens_per_s %.3g  (median open %.3f s: mmap, range check, CRC32C)\n",
         total / open_s[2], open_s[2]);
  printf("sample_tokens_per_s %.3g  (T=%d B=%d, %d batches, median %.3f s, 1 thread) [%llu]\n",
         (double)steps * B * T / sample_s[2], T, B, steps, sample_s[2], (unsigned long long)sink % 10);
  tagc_corpus_free(&c);
  free(tok);
  free(tgt);
  return 0;
}
