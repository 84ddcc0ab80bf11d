/* Throughput of the CPU kernels in GB/s of input, against memcpy of the same bytes.
 *
 * For each size N (elements) and thread count, one unit of W = 2 shards of N/2 elements,
 * log-normal gradients, density 10%, rho from the advisor (densest lane):
 *   sparsify   input grad + residual        8 B/element
 *   encode     input kept values            4 B/element
 *   decode     output shard (one owner)     4 B/element of the shard
 *   bf16       input fp32                   4 B/element (encode and decode: the fp32 side)
 *   q8         input fp32                   4 B/element (int8 gather: encode and decode)
 *   q8_encode_ef  input grad + residual     8 B/element (int8 gradient wire, sender)
 *   q8_decode_sum output shard (one owner)  4 B/element of the shard (sum of the W chunks)
 *   or_many    input W bitmaps              W/8 B/element
 * memcpy copies the same number of bytes between two other buffers (best of the repeats);
 * "ratio" = op GB/s / memcpy GB/s. Best of --reps runs for every figure.
 * Usage: tagc_bench_kernels [--sizes 1,4,16,64 (M elements)] [--threads 1,2] [--reps 3]
 *                           [--density 0.1] [--ops decode,encode,... (default: all)] */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/status.h"
#include "kernels/tagc_kernels.h"

typedef struct unit {
  tagc_layout l;
  int64_t total;
  float *grad, *res, *res_saved, *kept, *sketch, *out, *scratch_a, *scratch_b;
  uint16_t *half;
  unsigned char *q8; /* one int8 chunk of the whole gradient (kernels/q8.h) */
  unsigned char *q8w; /* the gradient as W = 2 chunks of a shard each (the all-to-all's) */
  float *res_out;     /* encode_ef's new residual */
  uint64_t *bitmap, *glob;
  tagc_sparsify_stats stats[2];
  void *ws;
  size_t ws_bytes;
} unit;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static float lognormal(uint64_t *s) {
  double u1 = ((double)(splitmix(s) >> 11) + 0.5) / 9007199254740992.0;
  double u2 = ((double)(splitmix(s) >> 11) + 0.5) / 9007199254740992.0;
  double x = exp(-9.0 + 2.0 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  return (float)((splitmix(s) & 1) ? -x : x);
}

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  memset(p, 0, bytes);
  return p;
}

/* Builds the unit: sparsify once to measure the densest lane, then lay out at advised rho. */
static void unit_init(unit *u, int64_t n_total, float density) {
  int64_t shard = n_total / 2;
  tagc_layout geo;
  if (tagc_layout_init(&geo, 2, shard, 2.0, 1) != TAGC_OK) {
    fprintf(stderr, "layout: %s\n", tagc_last_error());
    exit(1);
  }
  u->total = 2 * shard;
  u->grad = xmalloc((size_t)u->total * 4);
  u->res = xmalloc((size_t)u->total * 4);
  u->res_saved = xmalloc((size_t)u->total * 4);
  u->scratch_a = xmalloc((size_t)u->total * 8);
  u->scratch_b = xmalloc((size_t)u->total * 8);
  u->half = xmalloc((size_t)u->total * 2);
  u->q8 = xmalloc((size_t)tagc_q8_chunk_bytes(u->total));
  u->q8w = xmalloc((size_t)(2 * tagc_q8_chunk_bytes(shard)));
  u->res_out = xmalloc((size_t)u->total * 4);
  u->kept = xmalloc((size_t)(2 * geo.shard_padded) * 4);
  u->bitmap = xmalloc((size_t)(2 * geo.bitmap_words) * 8);
  u->glob = xmalloc((size_t)geo.bitmap_words * 8);
  u->out = xmalloc((size_t)shard * 4);
  uint64_t s = 12345;
  for (int64_t i = 0; i < u->total; i++) {
    u->grad[i] = lognormal(&s);
    u->res_saved[i] = 0.1f * lognormal(&s);
  }
  memcpy(u->res, u->res_saved, (size_t)u->total * 4);
  for (int j = 0; j < 2; j++)
    tagc_q8_encode_cpu(u->grad + j * shard, shard, u->q8w + j * tagc_q8_chunk_bytes(shard));
  size_t ws = tagc_sparsify_workspace_bytes(&geo, 2);
  void *w = xmalloc(ws);
  tagc_sparsify_cpu(&geo, density, u->grad, u->res, u->kept, u->bitmap, u->stats, w, ws);
  free(w);
  int64_t lane_max = 0;
  tagc_bitmap_lane_max_cpu(u->bitmap, geo.blocks, geo.lanes, 1, &lane_max);
  double rho;
  tagc_rho_advise((double)lane_max / (double)geo.blocks, shard, geo.lanes, &rho);
  tagc_layout_free(&geo);
  tagc_layout_init(&u->l, 2, shard, rho, 1);
  u->sketch = xmalloc((size_t)(2 * u->l.sketch_cells) * 4);
  size_t a = tagc_sparsify_workspace_bytes(&u->l, 2), b = tagc_decode_workspace_bytes(&u->l, 2);
  u->ws_bytes = a > b ? a : b;
  u->ws = xmalloc(u->ws_bytes);
}

static void unit_free(unit *u) {
  free(u->grad);
  free(u->res);
  free(u->res_saved);
  free(u->scratch_a);
  free(u->scratch_b);
  free(u->half);
  free(u->q8);
  free(u->q8w);
  free(u->res_out);
  free(u->kept);
  free(u->bitmap);
  free(u->glob);
  free(u->out);
  free(u->sketch);
  free(u->ws);
  tagc_layout_free(&u->l);
}

enum { OP_SPARSIFY, OP_ENCODE, OP_DECODE, OP_BF16, OP_BF16_DECODE, OP_Q8, OP_Q8_DECODE, OP_Q8_EF,
       OP_Q8_SUM, OP_OR, OP_COUNT };
static const char *op_names[] = {"sparsify", "encode", "decode", "bf16_encode", "bf16_decode",
                                 "q8_encode", "q8_decode", "q8_encode_ef", "q8_decode_sum",
                                 "or_many"};

static double op_bytes(const unit *u, int op) {
  switch (op) {
  case OP_SPARSIFY:
  case OP_Q8_EF: return 8.0 * (double)u->total;
  case OP_DECODE: return 4.0 * (double)u->l.shard_numel;
  case OP_Q8_SUM: return 4.0 * (double)(u->total / 2);
  case OP_OR: return 2.0 * 8.0 * (double)u->l.bitmap_words;
  default: return 4.0 * (double)u->total;
  }
}

static tagc_status run_op(unit *u, int op, tagc_decode_stats *dst) {
  switch (op) {
  case OP_SPARSIFY:
    return tagc_sparsify_cpu(&u->l, 0.1f, u->grad, u->res, u->kept, u->bitmap, u->stats, u->ws,
                             u->ws_bytes);
  case OP_ENCODE: return tagc_sketch_encode_cpu(&u->l, u->kept, u->bitmap, u->sketch);
  case OP_DECODE: return tagc_decode_cpu(&u->l, u->sketch, u->glob, u->out, dst, u->ws, u->ws_bytes);
  case OP_BF16: return tagc_bf16_encode_cpu(u->grad, u->half, u->total);
  case OP_BF16_DECODE: return tagc_bf16_decode_cpu(u->half, u->res, u->total);
  case OP_Q8: return tagc_q8_encode_cpu(u->grad, u->total, u->q8);
  case OP_Q8_DECODE:
    return tagc_q8_decode_cpu(u->q8, u->total, 1, tagc_q8_chunk_bytes(u->total), u->total, u->res);
  case OP_Q8_EF:
    return tagc_q8_encode_ef_cpu(u->grad, u->res_saved, u->total, u->q8, u->res_out);
  case OP_Q8_SUM:
    return tagc_q8_decode_sum_cpu(u->q8w, u->total / 2, 2, tagc_q8_chunk_bytes(u->total / 2), u->out);
  default: return tagc_bitmap_or_many_cpu(u->glob, u->bitmap, 2, u->l.bitmap_words);
  }
}

/* Best time of `reps` runs of op; sparsify gets its residual restored before each run,
 * outside the timed region, so every run sees the same input. */
static double time_op(unit *u, int op, int reps, tagc_decode_stats *dst) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    if (op == OP_SPARSIFY)
      memcpy(u->res, u->res_saved, (size_t)u->total * 4);
    double t0 = now_s();
    tagc_status st = run_op(u, op, dst);
    double t = now_s() - t0;
    if (st != TAGC_OK) {
      fprintf(stderr, "%s failed: %s\n", op_names[op], tagc_last_error());
      exit(1);
    }
    best = t < best ? t : best;
  }
  return best;
}

static double time_memcpy(unit *u, double bytes, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    memcpy(u->scratch_b, u->scratch_a, (size_t)bytes);
    double t = now_s() - t0;
    best = t < best ? t : best;
    u->scratch_a[r % 7] += 1.0f; /* keep the copy observable */
  }
  return best;
}

static int parse_list(const char *s, double *out, int cap) {
  int n = 0;
  while (*s && n < cap) {
    char *end;
    out[n++] = strtod(s, &end);
    if (end == s)
      return -1;
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

/* want[op] = 1 for each op named in the comma-separated list s, 0 for the others. */
static int parse_ops(const char *s, int *want) {
  for (int op = 0; op < OP_COUNT; op++)
    want[op] = 0;
  while (*s) {
    size_t len = strcspn(s, ",");
    int found = 0;
    for (int op = 0; op < OP_COUNT; op++)
      if (strlen(op_names[op]) == len && !strncmp(s, op_names[op], len))
        want[op] = found = 1;
    if (!found)
      return -1;
    s += len + (s[len] == ',');
  }
  return 0;
}

int main(int argc, char **argv) {
  double sizes[16] = {1, 4, 16, 64}, threads[8] = {1, 2};
  int nsizes = 4, nthreads = 2, reps = 3;
  float density = 0.1f;
  int want[OP_COUNT];
  for (int op = 0; op < OP_COUNT; op++)
    want[op] = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
      nsizes = parse_list(argv[++i], sizes, 16);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      nthreads = parse_list(argv[++i], threads, 8);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--density") && i + 1 < argc)
      density = (float)atof(argv[++i]);
    else if (!strcmp(argv[i], "--ops") && i + 1 < argc) {
      if (parse_ops(argv[++i], want) != 0) {
        fprintf(stderr, "--ops: unknown op in '%s'\n", argv[i]);
        return 2;
      }
    } else {
      fprintf(stderr, "usage: %s [--sizes 1,4,16,64] [--threads 1,2] [--reps 3] [--density 0.1] [--ops decode,...]\n",
              argv[0]);
      return 2;
    }
  }
  if (nsizes < 1 || nthreads < 1 || reps < 1 || !(density > 0 && density <= 1)) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  printf("| elements | threads | op | GB/s | memcpy GB/s | ratio | note |\n|---|---|---|---|---|---|---|\n");
  for (int si = 0; si < nsizes; si++) {
    unit u;
    unit_init(&u, (int64_t)(sizes[si] * 1048576.0), density);
    for (int ti = 0; ti < nthreads; ti++) {
      omp_set_num_threads((int)threads[ti]);
      tagc_decode_stats dst = {0};
      /* encode before decode so the sketch and global bitmap are current */
      for (int op = 0; op < OP_COUNT; op++) {
        if (!want[op])
          continue;
        if (op == OP_DECODE) {
          tagc_sketch_encode_cpu(&u.l, u.kept, u.bitmap, u.sketch);
          tagc_bitmap_or_many_cpu(u.glob, u.bitmap, 1, u.l.bitmap_words);
        }
        double bytes = op_bytes(&u, op);
        double t = time_op(&u, op, reps, &dst), tm = time_memcpy(&u, bytes, reps);
        char note[96] = "";
        if (op == OP_DECODE)
          snprintf(note, sizeof note, "rho %.2f, estimated %lld", u.l.rho, (long long)dst.estimated);
        if (op == OP_SPARSIFY)
          snprintf(note, sizeof note, "kept %.4f", (double)u.stats[0].kept / (double)u.l.shard_numel);
        printf("| %.0fM | %d | %s | %.2f | %.2f | %.2f | %s |\n", sizes[si], (int)threads[ti],
               op_names[op], bytes / t / 1e9, bytes / tm / 1e9, tm / t, note);
        fflush(stdout);
      }
    }
    unit_free(&u);
  }
  return 0;
}
