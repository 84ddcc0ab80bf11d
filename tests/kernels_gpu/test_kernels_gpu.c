/* GPU test of the CUDA kernels against the CPU oracle (label gpu; exit 77 without a
 * device). Every op runs on the same inputs on both sides; results that the contracts make
 * exact (all of them, given the deterministic encode) must match bit for bit, and the
 * maximum difference is printed either way. Prints kernel timings (cudaEvent) in GB/s.
 * With the argument "quick" (the host emulation's entry in the default suite) the sparsify
 * shapes and sketch cases over QUICK_MAX_ELEMS elements are left out, and the run says so. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/tagc_kernels.h"
#include "test.h"

/* Sizes of the timed cases; the host emulation (test_kernels_gpu_emu) builds smaller ones. */
#ifndef TEST_BIG_SHARD
#define TEST_BIG_SHARD (4 << 20) /* elements per shard, W = 4 */
#endif
#ifndef TEST_BIG_ARRAY
#define TEST_BIG_ARRAY (1 << 24) /* bf16 elements */
#endif
#ifndef TEST_BIG_WORDS
#define TEST_BIG_WORDS (1 << 22) /* bitmap words */
#endif

/* Largest unit (W x n elements) of the sparsify shapes and sketch cases in a quick run. */
#define QUICK_MAX_ELEMS 300000

#define CUDA_OK(expr) CHECK_MSG((expr) == cudaSuccess, "%s: %s", #expr, cudaGetErrorString(cudaGetLastError()))

static cudaStream_t stream;
static cudaEvent_t ev_start, ev_stop;
static int quick; /* argv[1] == "quick" */

/* A case of w x n elements that a quick run leaves out. */
static int skipped_when_quick(int64_t w, int64_t n) { return quick && w * n > QUICK_MAX_ELEMS; }

/* xorshift64* test generator. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}
static float uniform(void) { return (float)((next_u64() >> 40) * (1.0 / 16777216.0)); }
static float gaussian(void) {
  float u = uniform() + 1e-7f, v = uniform();
  return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
    exit(1);
  }
  return p;
}
static void *dev_copy(const void *host, size_t bytes) {
  void *p = dev_alloc(bytes);
  CUDA_OK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
  /* from pageable memory the copy may return before the DMA lands; the kernels run on a
     non-blocking stream, which does not wait for the legacy one */
  CUDA_OK(cudaStreamSynchronize(0));
  return p;
}
static void host_copy(void *host, const void *dev, size_t bytes) {
  CUDA_OK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

/* Elements whose bit patterns differ, and the largest |a - b| among finite pairs. */
static int64_t diff_f32(const float *a, const float *b, int64_t n, double *maxdiff) {
  int64_t bad = 0;
  *maxdiff = 0;
  for (int64_t i = 0; i < n; i++) {
    if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
      bad++;
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > *maxdiff)
      *maxdiff = d;
  }
  return bad;
}

/* Elements that differ other than both being NaN (fp32 arithmetic on a NaN gives a
 * hardware-defined payload and sign: x86 propagates the operand's, CUDA a canonical NaN). */
static int64_t diff_f32_nan(const float *a, const float *b, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    bad += memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(isnan(a[i]) && isnan(b[i]));
  return bad;
}

static int bf16_is_nan(uint16_t h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu) != 0; }

static int64_t diff_bf16_nan(const uint16_t *a, const uint16_t *b, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    bad += a[i] != b[i] && !(bf16_is_nan(a[i]) && bf16_is_nan(b[i]));
  return bad;
}

static int64_t diff_bytes(const void *a, const void *b, int64_t n, size_t elem) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    bad += memcmp((const char *)a + i * elem, (const char *)b + i * elem, elem) != 0;
  return bad;
}

static void timer_start(void) { cudaEventRecord(ev_start, stream); }
static void timer_report(const char *what, double bytes) {
  float ms = 0;
  cudaEventRecord(ev_stop, stream);
  cudaEventSynchronize(ev_stop);
  cudaEventElapsedTime(&ms, ev_start, ev_stop);
  printf("  time %-28s %9.3f ms  %8.1f GB/s\n", what, ms, ms > 0 ? bytes / (ms * 1e6) : 0.0);
}

enum input_kind { IN_GAUSS, IN_TIES, IN_ZEROS, IN_DENORMAL, IN_WIDE, IN_NONFINITE, IN_KINDS };
static const char *kind_name[IN_KINDS] = {"gauss", "ties", "signed-zeros", "denormal", "wide",
                                          "nonfinite"};

static void fill_input(enum input_kind kind, float *g, float *r, int64_t total) {
  for (int64_t i = 0; i < total; i++) {
    switch (kind) {
    case IN_GAUSS:
      g[i] = gaussian();
      r[i] = 0.1f * gaussian();
      break;
    case IN_TIES: /* few distinct magnitudes: whole bins tie at the threshold */
      g[i] = (float)(1 + (int)(next_u64() % 4)) * ((next_u64() & 1) ? -0.5f : 0.5f);
      r[i] = 0.0f;
      break;
    case IN_ZEROS: /* mostly +-0, so fewer than k non-zeros */
      g[i] = (next_u64() % 10 == 0) ? gaussian() : ((next_u64() & 1) ? -0.0f : 0.0f);
      r[i] = (next_u64() & 1) ? -0.0f : 0.0f;
      break;
    case IN_DENORMAL:
      g[i] = gaussian() * 1e-39f;
      r[i] = (next_u64() & 1) ? 1e-45f : -g[i];
      break;
    case IN_WIDE: /* exponents across the whole fp32 range */
      g[i] = ldexpf(uniform() + 0.5f, (int)(next_u64() % 250) - 140) * ((next_u64() & 1) ? -1 : 1);
      r[i] = -g[i] * (float)(next_u64() % 3) * 0.5f;
      break;
    default:
      g[i] = gaussian();
      r[i] = 0.0f;
      break;
    }
  }
  if (kind == IN_NONFINITE) {
    g[total / 2] = INFINITY;
    r[total / 3] = NAN;
  }
}

/* Sparsifies the same unit on both sides; returns the CPU's kept and bitmap for later ops
 * through *kept_out / *bitmap_out (caller frees) when asked. */
static void check_sparsify(const tagc_layout *l, float density, enum input_kind kind, int timed,
                           float **kept_out, uint64_t **bitmap_out) {
  int64_t w = l->world, n = l->shard_numel, total = w * n;
  float *g = malloc(total * sizeof *g), *r = malloc(total * sizeof *r);
  float *r_cpu = malloc(total * sizeof *r), *r_gpu = malloc(total * sizeof *r);
  float *k_cpu = malloc(w * l->shard_padded * sizeof(float));
  float *k_gpu = malloc(w * l->shard_padded * sizeof(float));
  uint64_t *b_cpu = malloc(w * l->bitmap_words * 8), *b_gpu = malloc(w * l->bitmap_words * 8);
  tagc_sparsify_stats *s_cpu = calloc(w, sizeof *s_cpu), *s_gpu = calloc(w, sizeof *s_gpu);
  fill_input(kind, g, r, total);
  memcpy(r_cpu, r, total * sizeof *r);
  size_t cws = tagc_sparsify_workspace_bytes(l, 0);
  void *cpu_ws = malloc(cws);
  tagc_status st = tagc_sparsify_cpu(l, density, g, r_cpu, k_cpu, b_cpu, s_cpu, cpu_ws, cws);
  CHECK(st == (kind == IN_NONFINITE ? TAGC_ENUMERIC : TAGC_OK));

  float *dg = dev_copy(g, total * 4), *dr = dev_copy(r, total * 4);
  float *dk = dev_alloc(w * l->shard_padded * 4);
  uint64_t *db = dev_alloc(w * l->bitmap_words * 8);
  tagc_sparsify_stats *ds = dev_alloc(w * sizeof *ds);
  size_t gws_bytes = tagc_sparsify_cuda_workspace_bytes(l);
  void *gws = dev_alloc(gws_bytes);
  CHECK_OK(tagc_sparsify_cuda(l, density, dg, dr, dk, db, ds, gws, gws_bytes, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  host_copy(r_gpu, dr, total * 4);
  host_copy(k_gpu, dk, w * l->shard_padded * 4);
  host_copy(b_gpu, db, w * l->bitmap_words * 8);
  host_copy(s_gpu, ds, w * sizeof *ds);

  double dk_max, dr_max;
  int64_t bad_k = diff_f32(k_cpu, k_gpu, w * l->shard_padded, &dk_max);
  int64_t bad_r = diff_f32(r_cpu, r_gpu, total, &dr_max);
  int64_t bad_b = diff_bytes(b_cpu, b_gpu, w * l->bitmap_words, 8);
  int64_t bad_s = 0;
  /* A shard holding a NaN v has a hardware-defined NaN bin (see diff_f32_nan), so its
   * threshold is only compared when the shard is finite; the call is rejected anyway. */
  for (int64_t j = 0; j < w; j++)
    bad_s += s_cpu[j].kept != s_gpu[j].kept || s_cpu[j].nonfinite != s_gpu[j].nonfinite ||
             (s_cpu[j].nonfinite == 0 &&
              (s_cpu[j].threshold_bin != s_gpu[j].threshold_bin ||
               memcmp(&s_cpu[j].threshold, &s_gpu[j].threshold, sizeof(float)) != 0));
  printf("sparsify W=%lld n=%lld d=%g %-12s kept[0]=%lld bin=%u: mismatches kept %lld resid %lld "
         "bitmap %lld stats %lld, max diff %g\n",
         (long long)w, (long long)n, (double)density, kind_name[kind], (long long)s_cpu[0].kept,
         s_cpu[0].threshold_bin, (long long)bad_k, (long long)bad_r, (long long)bad_b,
         (long long)bad_s, fmax(dk_max, dr_max));
  CHECK_EQ_INT(bad_k, 0);
  CHECK_EQ_INT(bad_r, 0);
  CHECK_EQ_INT(bad_b, 0);
  CHECK_EQ_INT(bad_s, 0);

  if (timed) {
    CUDA_OK(cudaMemcpy(dr, r, total * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaStreamSynchronize(0)); /* the pageable copy landed before the stream reads it */
    timer_start();
    tagc_sparsify_cuda(l, density, dg, dr, dk, db, ds, gws, gws_bytes, stream);
    timer_report("sparsify (16 B/elem min)", (double)total * 16.125);
  }
  if (kept_out) {
    *kept_out = k_cpu;
    *bitmap_out = b_cpu;
  } else {
    free(k_cpu);
    free(b_cpu);
  }
  cudaFree(dg), cudaFree(dr), cudaFree(dk), cudaFree(db), cudaFree(ds), cudaFree(gws);
  free(g), free(r), free(r_cpu), free(r_gpu), free(k_gpu), free(b_gpu), free(s_cpu), free(s_gpu);
  free(cpu_ws);
}

static void test_sparsify(void) {
  static const struct { int32_t w; int64_t n; } shapes[] = {{1, 1}, {1, 1000}, {3, 4097}, {8, 100003}};
  static const float densities[] = {0.0f, 0.001f, 0.05f, 0.5f, 1.0f};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    if (skipped_when_quick(shapes[s].w, shapes[s].n))
      continue;
    tagc_layout l;
    CHECK_OK(tagc_layout_init(&l, shapes[s].w, shapes[s].n, 2.0, 7));
    for (int kind = 0; kind < IN_KINDS; kind++)
      for (size_t d = 0; d < sizeof densities / sizeof *densities; d++)
        if (kind == IN_GAUSS || densities[d] == 0.05f || densities[d] == 1.0f)
          check_sparsify(&l, densities[d], (enum input_kind)kind, 0, NULL, NULL);
    tagc_layout_free(&l);
  }
  tagc_layout l;
  CHECK_OK(tagc_layout_init(&l, 4, TEST_BIG_SHARD, 8.0, 7));
  check_sparsify(&l, 0.01f, IN_GAUSS, 1, NULL, NULL);
  tagc_layout_free(&l);
}

static void test_bitmap(void) {
  static const int64_t sizes[] = {0, 1, 63, 100000, TEST_BIG_WORDS};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    int64_t words = sizes[s];
    int32_t count = 5;
    uint64_t *src = malloc((count * words + 1) * 8), *dst = malloc((words + 1) * 8);
    uint64_t *cpu = malloc((words + 1) * 8), *gpu = malloc((words + 1) * 8);
    for (int64_t i = 0; i < count * words; i++)
      src[i] = next_u64() & next_u64() & next_u64();
    for (int64_t i = 0; i < words; i++)
      dst[i] = next_u64() & next_u64();
    uint64_t *dsrc = dev_copy(src, count * words * 8), *ddst = dev_copy(dst, words * 8);
    int64_t *dbits = dev_alloc(8), bits_cpu = -1, bits_gpu = -2;

    memcpy(cpu, dst, words * 8);
    CHECK_OK(tagc_bitmap_or_into_cpu(cpu, src, words));
    CHECK_OK(tagc_bitmap_or_into_cuda(ddst, dsrc, words, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    host_copy(gpu, ddst, words * 8);
    int64_t bad_into = diff_bytes(cpu, gpu, words, 8);

    CHECK_OK(tagc_bitmap_or_many_cpu(cpu, src, count, words));
    CHECK_OK(tagc_bitmap_or_many_cuda(ddst, dsrc, count, words, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    host_copy(gpu, ddst, words * 8);
    int64_t bad_many = diff_bytes(cpu, gpu, words, 8);

    CHECK_OK(tagc_bitmap_or_many_cpu(src, src, count, words)); /* in place, dst == src */
    CHECK_OK(tagc_bitmap_or_many_cuda(dsrc, dsrc, count, words, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    host_copy(gpu, dsrc, words * 8);
    int64_t bad_inplace = diff_bytes(src, gpu, words, 8);

    CHECK_OK(tagc_bitmap_popcount_cpu(cpu, words, &bits_cpu));
    CHECK_OK(tagc_bitmap_popcount_cuda(ddst, words, dbits, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    host_copy(&bits_gpu, dbits, 8);
    printf("bitmap words=%lld: mismatches or_into %lld or_many %lld in-place %lld, popcount %lld vs %lld\n",
           (long long)words, (long long)bad_into, (long long)bad_many, (long long)bad_inplace,
           (long long)bits_cpu, (long long)bits_gpu);
    CHECK_EQ_INT(bad_into, 0);
    CHECK_EQ_INT(bad_many, 0);
    CHECK_EQ_INT(bad_inplace, 0);
    CHECK_EQ_INT(bits_cpu, bits_gpu);
    if (words == sizes[sizeof sizes / sizeof *sizes - 1]) {
      timer_start();
      tagc_bitmap_or_many_cuda(ddst, dsrc, count, words, stream);
      timer_report("bitmap_or_many x5", (double)words * 8 * (count + 1));
      timer_start();
      tagc_bitmap_popcount_cuda(ddst, words, dbits, stream);
      timer_report("bitmap_popcount", (double)words * 8);
    }
    CHECK(tagc_bitmap_or_many_cuda(ddst, dsrc, 0, words, stream) == TAGC_EINVAL);
    CHECK(tagc_bitmap_popcount_cuda(ddst, -1, dbits, stream) == TAGC_EINVAL);
    cudaFree(dsrc), cudaFree(ddst), cudaFree(dbits);
    free(src), free(dst), free(cpu), free(gpu);
  }
}

/* Encodes kept/bitmap on both sides and checks the sketches are identical; returns the
 * CPU sketch (caller frees). */
static float *check_encode(const tagc_layout *l, const uint32_t *drows, const float *kept,
                           const uint64_t *bitmap, int timed) {
  int64_t w = l->world, cells = w * l->sketch_cells;
  float *s_cpu = malloc(cells * 4), *s_gpu = malloc(cells * 4);
  CHECK_OK(tagc_sketch_encode_cpu(l, kept, bitmap, s_cpu));
  float *dk = dev_copy(kept, w * l->shard_padded * 4);
  uint64_t *db = dev_copy(bitmap, w * l->bitmap_words * 8);
  float *ds = dev_alloc(cells * 4);
  CHECK_OK(tagc_sketch_encode_cuda(l, drows, dk, db, ds, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  host_copy(s_gpu, ds, cells * 4);
  double maxd;
  int64_t bad = diff_f32(s_cpu, s_gpu, cells, &maxd);
  printf("encode W=%d n=%lld K=%d R=%lld: mismatched cells %lld of %lld, max diff %g\n", l->world,
         (long long)l->shard_numel, l->lanes, (long long)l->rows, (long long)bad, (long long)cells,
         maxd);
  CHECK_EQ_INT(bad, 0);
  if (timed) {
    timer_start();
    tagc_sketch_encode_cuda(l, drows, dk, db, ds, stream);
    timer_report("sketch_encode", (double)w * (l->shard_padded * 4.125 + l->sketch_cells * 4));
  }
  cudaFree(dk), cudaFree(db), cudaFree(ds);
  free(s_gpu);
  return s_cpu;
}

/* Decodes shard 0 of the CPU sketch on both sides. When `exact` (integer kept values, so
 * every sketch sum and subtraction is exact) peeled elements must also equal kept. */
static void check_decode(const tagc_layout *l, const uint32_t *drows, const float *sketch,
                         const uint64_t *bitmap, const float *kept, int exact, int timed) {
  int64_t n = l->shard_numel;
  float *o_cpu = malloc(n * 4), *o_gpu = malloc(n * 4);
  tagc_decode_stats st_cpu, st_gpu;
  size_t cws = tagc_decode_workspace_bytes(l, 0);
  void *cpu_ws = malloc(cws);
  CHECK_OK(tagc_decode_cpu(l, sketch, bitmap, o_cpu, &st_cpu, cpu_ws, cws));
  float *dsk = dev_copy(sketch, l->sketch_cells * 4);
  uint64_t *db = dev_copy(bitmap, l->bitmap_words * 8);
  float *dout = dev_alloc(n * 4);
  tagc_decode_stats *dst = dev_alloc(sizeof *dst);
  size_t gws_bytes = tagc_decode_cuda_workspace_bytes(l);
  void *gws = dev_alloc(gws_bytes);
  CHECK_OK(tagc_decode_cuda(l, drows, dsk, db, dout, dst, gws, gws_bytes, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  host_copy(o_gpu, dout, n * 4);
  host_copy(&st_gpu, dst, sizeof st_gpu);
  double maxd;
  int64_t bad = diff_f32(o_cpu, o_gpu, n, &maxd);
  printf("decode n=%lld K=%d R=%lld: nonzero %lld peeled %lld estimated %lld (gpu %lld/%lld/%lld): "
         "mismatches %lld, max diff %g\n",
         (long long)n, l->lanes, (long long)l->rows, (long long)st_cpu.nonzero, (long long)st_cpu.peeled,
         (long long)st_cpu.estimated, (long long)st_gpu.nonzero, (long long)st_gpu.peeled,
         (long long)st_gpu.estimated, (long long)bad, maxd);
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(st_cpu.nonzero, st_gpu.nonzero);
  CHECK_EQ_INT(st_cpu.peeled, st_gpu.peeled);
  CHECK_EQ_INT(st_cpu.estimated, st_gpu.estimated);
  if (exact && st_gpu.estimated == 0) {
    double maxk = 0;
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) { /* by value: unkept elements of kept may be -0 */
      wrong += kept[i] != o_gpu[i];
      maxk = fmax(maxk, fabs((double)kept[i] - (double)o_gpu[i]));
    }
    printf("decode exact recovery: %lld elements differ from kept, max diff %g\n",
           (long long)wrong, maxk);
    CHECK_EQ_INT(wrong, 0);
  }
  if (timed) {
    timer_start();
    tagc_decode_cuda(l, drows, dsk, db, dout, dst, gws, gws_bytes, stream);
    timer_report("decode", (double)l->sketch_cells * 4 + l->bitmap_words * 8 + n * 4);
  }
  cudaFree(dsk), cudaFree(db), cudaFree(dout), cudaFree(dst), cudaFree(gws);
  free(o_cpu), free(o_gpu), free(cpu_ws);
}

/* Sparsify -> encode -> decode pipeline on several geometries and lane counts (0: the one
 * tagc_layout_lanes gives); density x rho sets the peel load (items per cell): below ~0.8
 * everything peels, above it a 2-core stays (estimated). */
static void test_sketch_pipeline(void) {
  static const struct { int32_t w; int64_t n; int32_t lanes; double rho; float density; int integer; int timed; } cases[] = {
      {1, 5000, 0, 2.0, 0.2f, 1, 0},     {1, 300000, 0, 1.0, 0.05f, 1, 0},
      {2, 200000, 0, 2.0, 0.1f, 1, 0},   {3, 300001, 0, 8.0, 0.05f, 0, 0},
      {1, 200000, 0, 2.0, 0.6f, 0, 0},   {2, 131072, 0, 8.0, 0.3f, 1, 0},
      {2, 17408, 32, 2.5, 0.1f, 1, 0},   {2, 40000, 32, 2.0, 0.3f, 0, 0},
      {2, 20480, 64, 2.0, 0.1f, 1, 0},   {1, 99999, 64, 1.5, 0.5f, 0, 0},
      {2, 65536, 256, 3.0, 0.1f, 1, 0},  {3, 70001, 128, 2.0, 0.05f, 0, 0},
      {1, 150000, 1024, 2.0, 0.2f, 1, 0}, {2, 100000, 512, 1.0, 0.05f, 0, 0},
      {4, TEST_BIG_SHARD, 0, 8.0, 0.05f, 0, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    if (skipped_when_quick(cases[c].w, cases[c].n))
      continue;
    tagc_layout l;
    int32_t lanes = cases[c].lanes ? cases[c].lanes : tagc_layout_lanes(cases[c].n);
    CHECK_OK(tagc_layout_init_lanes(&l, cases[c].w, cases[c].n, lanes, cases[c].rho,
                                    1234 + (uint32_t)c));
    float *kept;
    uint64_t *bitmap;
    check_sparsify(&l, cases[c].density, IN_GAUSS, 0, &kept, &bitmap);
    if (cases[c].integer) /* small integers: every fp32 sum in the pipeline is exact */
      for (int64_t i = 0; i < l.world * l.shard_padded; i++)
        if (kept[i] != 0.0f)
          kept[i] = (float)(1 + (int64_t)(next_u64() % 1000)) * (kept[i] < 0 ? -1.0f : 1.0f);
    uint32_t *drows = dev_copy(l.block_rows, l.blocks * 3 * sizeof(uint32_t));
    float *sketch = check_encode(&l, drows, kept, bitmap, cases[c].timed);
    check_decode(&l, drows, sketch, bitmap, kept, cases[c].integer, cases[c].timed);
    cudaFree(drows);
    free(kept), free(bitmap), free(sketch);
    tagc_layout_free(&l);
  }
}

static void test_bf16(void) {
  static const int64_t sizes[] = {0, 1, 1000, TEST_BIG_ARRAY};
  static const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-45f, -1e-40f, 3.3895314e38f,
                                   3.4028235e38f, INFINITY, -INFINITY, NAN, 1.00390625f,
                                   1.01171875f, -2.99609375f};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    int64_t n = sizes[s];
    size_t nb = (size_t)(n ? n : 1);
    float *f = malloc(nb * 4), *acc = malloc(nb * 4), *f_cpu = malloc(nb * 4), *f_gpu = malloc(nb * 4);
    uint16_t *h = malloc(nb * 2), *h_cpu = malloc(nb * 2), *h_gpu = malloc(nb * 2);
    for (int64_t i = 0; i < n; i++) {
      f[i] = i < (int64_t)(sizeof specials / sizeof *specials) ? specials[i] : gaussian() * 1e3f;
      acc[i] = gaussian();
      h[i] = (uint16_t)next_u64();
    }
    float *df = dev_copy(f, nb * 4), *dacc = dev_copy(acc, nb * 4);
    uint16_t *dh = dev_copy(h, nb * 2), *dout = dev_alloc(nb * 2);
    float *dfo = dev_alloc(nb * 4);
    int64_t bad[5];

    CHECK_OK(tagc_bf16_encode_cpu(f, h_cpu, n));
    CHECK_OK(tagc_bf16_encode_cuda(df, dout, n, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    host_copy(h_gpu, dout, n * 2);
    bad[0] = diff_bytes(h_cpu, h_gpu, n, 2);

    CHECK_OK(tagc_bf16_encode_stochastic_cpu(f, h_cpu, n, 42, 7, 1000));
    CHECK_OK(tagc_bf16_encode_stochastic_cuda(df, dout, n, 42, 7, 1000, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    host_copy(h_gpu, dout, n * 2);
    bad[1] = diff_bytes(h_cpu, h_gpu, n, 2);

    CHECK_OK(tagc_bf16_decode_cpu(h, f_cpu, n));
    CHECK_OK(tagc_bf16_decode_cuda(dh, dfo, n, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    host_copy(f_gpu, dfo, n * 4);
    bad[2] = diff_bytes(f_cpu, f_gpu, n, 4);

    memcpy(f_cpu, acc, n * 4);
    CHECK_OK(tagc_bf16_accumulate_cpu(f_cpu, h, n));
    CHECK_OK(tagc_bf16_accumulate_cuda(dacc, dh, n, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    host_copy(f_gpu, dacc, n * 4);
    bad[3] = diff_f32_nan(f_cpu, f_gpu, n);

    memcpy(h_cpu, h, n * 2);
    CHECK_OK(tagc_bf16_add_encode_cpu(h_cpu, f, h_cpu, n)); /* out aliases in */
    CHECK_OK(tagc_bf16_add_encode_cuda(dh, df, dh, n, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    host_copy(h_gpu, dh, n * 2);
    bad[4] = diff_bf16_nan(h_cpu, h_gpu, n);

    printf("bf16 n=%lld: mismatches encode %lld stochastic %lld decode %lld accumulate %lld "
           "add_encode %lld\n",
           (long long)n, (long long)bad[0], (long long)bad[1], (long long)bad[2],
           (long long)bad[3], (long long)bad[4]);
    for (int i = 0; i < 5; i++)
      CHECK_EQ_INT(bad[i], 0);
    if (n == sizes[sizeof sizes / sizeof *sizes - 1]) {
      timer_start();
      tagc_bf16_encode_cuda(df, dout, n, stream);
      timer_report("bf16_encode", n * 6.0);
      timer_start();
      tagc_bf16_encode_stochastic_cuda(df, dout, n, 1, 2, 3, stream);
      timer_report("bf16_encode_stochastic", n * 6.0);
      timer_start();
      tagc_bf16_accumulate_cuda(dacc, dh, n, stream);
      timer_report("bf16_accumulate", n * 10.0);
    }
    CHECK(tagc_bf16_encode_cuda(NULL, dout, 5, stream) == TAGC_EINVAL);
    CHECK(tagc_bf16_decode_cuda(dh, dfo, -1, stream) == TAGC_EINVAL);
    cudaFree(df), cudaFree(dacc), cudaFree(dh), cudaFree(dout), cudaFree(dfo);
    free(f), free(acc), free(f_cpu), free(f_gpu), free(h), free(h_cpu), free(h_gpu);
  }
}

/* Host-side argument checks return TAGC_EINVAL without launching anything. */
static void test_bad_arguments(void) {
  tagc_layout l;
  CHECK_OK(tagc_layout_init(&l, 2, 3000, 2.0, 1));
  size_t need = tagc_sparsify_cuda_workspace_bytes(&l);
  void *ws = dev_alloc(need);
  float *buf = dev_alloc(2 * l.shard_padded * 4);
  uint64_t *bm = dev_alloc(2 * l.bitmap_words * 8);
  tagc_sparsify_stats *ss = dev_alloc(2 * sizeof *ss);
  CHECK(tagc_sparsify_cuda(&l, 1.5f, buf, buf, buf, bm, ss, ws, need, stream) == TAGC_EINVAL);
  CHECK(tagc_sparsify_cuda(&l, NAN, buf, buf, buf, bm, ss, ws, need, stream) == TAGC_EINVAL);
  CHECK(tagc_sparsify_cuda(&l, 0.1f, buf, buf, buf, bm, ss, ws, need - 1, stream) == TAGC_EINVAL);
  CHECK(tagc_sparsify_cuda(&l, 0.1f, NULL, buf, buf, bm, ss, ws, need, stream) == TAGC_EINVAL);
  CHECK(tagc_sparsify_cuda(&l, 0.1f, buf, buf, buf, bm, ss, (char *)ws + 8, need, stream) ==
        TAGC_EINVAL);
  CHECK(tagc_sketch_encode_cuda(&l, NULL, buf, bm, buf, stream) == TAGC_EINVAL);
  CHECK(tagc_decode_cuda(&l, (const uint32_t *)bm, buf, bm, buf, NULL, ws, need, stream) ==
        TAGC_EINVAL);
  CHECK(tagc_decode_cuda_workspace_bytes(&l) > 0);
  cudaFree(ws), cudaFree(buf), cudaFree(bm), cudaFree(ss);
  tagc_layout_free(&l);
}

/* The dispatch point routes TAGC_DEVICE_CUDA here: the whole pipeline through
 * tagc_kernels_* on a CUDA context equals the same calls on a CPU context. */
static void test_dispatch(void) {
  tagc_layout l;
  CHECK_OK(tagc_layout_init(&l, 2, 50000, 4.0, 99));
  int64_t total = 2 * l.shard_numel, padded = 2 * l.shard_padded, cells = 2 * l.sketch_cells;
  float *g = malloc(total * 4), *r = malloc(total * 4), *r_cpu = malloc(total * 4);
  fill_input(IN_GAUSS, g, r, total);
  memcpy(r_cpu, r, total * 4);
  float *k_cpu = malloc(padded * 4), *sk_cpu = malloc(cells * 4), *o_cpu = malloc(l.shard_numel * 4);
  float *o_gpu = malloc(l.shard_numel * 4);
  uint64_t *b_cpu = malloc(2 * l.bitmap_words * 8);
  tagc_sparsify_stats ss[2];
  tagc_decode_stats ds_cpu, ds_gpu;
  int64_t bits_cpu = -1, bits_gpu = -2;
  tagc_kernel_ctx cpu = {TAGC_DEVICE_CPU, NULL, NULL, NULL, 0, 0};
  cpu.workspace_bytes = tagc_kernels_workspace_bytes(TAGC_DEVICE_CPU, &l, 0);
  cpu.workspace = malloc(cpu.workspace_bytes);
  CHECK_OK(tagc_kernels_sparsify(&cpu, &l, 0.1f, g, r_cpu, k_cpu, b_cpu, ss));
  CHECK_OK(tagc_kernels_encode(&cpu, &l, k_cpu, b_cpu, sk_cpu));
  CHECK_OK(tagc_kernels_decode(&cpu, &l, sk_cpu, b_cpu, o_cpu, &ds_cpu));
  CHECK_OK(tagc_kernels_popcount(&cpu, b_cpu, 2 * l.bitmap_words, &bits_cpu));

  tagc_kernel_ctx gpu = {TAGC_DEVICE_CUDA, stream, NULL, NULL, 0, 0};
  gpu.block_rows = dev_copy(l.block_rows, l.blocks * 3 * sizeof(uint32_t));
  gpu.workspace_bytes = tagc_kernels_workspace_bytes(TAGC_DEVICE_CUDA, &l, 0);
  CHECK(gpu.workspace_bytes > 0);
  gpu.workspace = dev_alloc(gpu.workspace_bytes);
  float *dg = dev_copy(g, total * 4), *dr = dev_copy(r, total * 4), *dk = dev_alloc(padded * 4);
  float *dsk = dev_alloc(cells * 4), *dout = dev_alloc(l.shard_numel * 4);
  uint64_t *db = dev_alloc(2 * l.bitmap_words * 8);
  tagc_sparsify_stats *dss = dev_alloc(sizeof ss);
  tagc_decode_stats *dds = dev_alloc(sizeof ds_gpu);
  int64_t *dbits = dev_alloc(8);
  CHECK_OK(tagc_kernels_sparsify(&gpu, &l, 0.1f, dg, dr, dk, db, dss));
  CHECK_OK(tagc_kernels_encode(&gpu, &l, dk, db, dsk));
  CHECK_OK(tagc_kernels_decode(&gpu, &l, dsk, db, dout, dds));
  CHECK_OK(tagc_kernels_popcount(&gpu, db, 2 * l.bitmap_words, dbits));
  CUDA_OK(cudaStreamSynchronize(stream));
  host_copy(o_gpu, dout, l.shard_numel * 4);
  host_copy(&ds_gpu, dds, sizeof ds_gpu);
  host_copy(&bits_gpu, dbits, 8);
  double maxd;
  int64_t bad = diff_f32(o_cpu, o_gpu, l.shard_numel, &maxd);
  printf("dispatch pipeline: decode mismatches %lld (max diff %g), peeled %lld vs %lld, "
         "popcount %lld vs %lld\n",
         (long long)bad, maxd, (long long)ds_cpu.peeled, (long long)ds_gpu.peeled,
         (long long)bits_cpu, (long long)bits_gpu);
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(ds_cpu.peeled, ds_gpu.peeled);
  CHECK_EQ_INT(bits_cpu, bits_gpu);
  cudaFree((void *)gpu.block_rows), cudaFree(gpu.workspace), cudaFree(dg), cudaFree(dr);
  cudaFree(dk), cudaFree(dsk), cudaFree(dout), cudaFree(db), cudaFree(dss), cudaFree(dds);
  cudaFree(dbits);
  free(cpu.workspace), free(g), free(r), free(r_cpu), free(k_cpu), free(sk_cpu), free(o_cpu);
  free(o_gpu), free(b_cpu);
  tagc_layout_free(&l);
}

/* Densest-lane count at every lane count: random sparse bitmaps, plus one lane set in every
 * block. */
static void test_lane_max(void) {
  static const int64_t blocks_list[] = {0, 1, 37, 5000};
  static const int32_t lanes_list[] = {32, 64, 128, 256, 512, 1024};
  for (size_t k = 0; k < sizeof lanes_list / sizeof *lanes_list; k++)
    for (size_t c = 0; c < sizeof blocks_list / sizeof *blocks_list; c++)
      for (int dense_lane = 0; dense_lane < 2; dense_lane++) {
        int32_t lanes = lanes_list[k];
        int64_t blocks = blocks_list[c], words = (blocks * lanes + 63) / 64;
        uint64_t *bm = malloc((size_t)(words + 1) * 8);
        for (int64_t i = 0; i < words; i++)
          bm[i] = next_u64() & next_u64() & next_u64();
        for (int64_t b = 0; dense_lane && b < blocks; b++) { /* one sketch lane of every block */
          uint32_t lane = 777u & (uint32_t)(lanes - 1);
          int64_t e = b * lanes + ((lane - tagc_block_rotation(7u, (uint32_t)b, (uint32_t)lanes)) &
                                   (uint32_t)(lanes - 1));
          bm[e / 64] |= 1ull << (e % 64);
        }
        int64_t cpu = -1, gpu = -2, *dmax = dev_alloc(8);
        uint64_t *dbm = dev_copy(bm, (size_t)words * 8);
        CHECK_OK(tagc_bitmap_lane_max_cpu(bm, blocks, lanes, 7u, &cpu));
        CHECK_OK(tagc_bitmap_lane_max_cuda(dbm, blocks, lanes, 7u, dmax, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        host_copy(&gpu, dmax, 8);
        printf("lane_max K=%d blocks=%lld dense=%d: cpu %lld gpu %lld\n", lanes, (long long)blocks,
               dense_lane, (long long)cpu, (long long)gpu);
        CHECK_EQ_INT(cpu, gpu);
        if (dense_lane)
          CHECK_EQ_INT(gpu, blocks);
        cudaFree(dmax), cudaFree(dbm);
        free(bm);
      }
  CHECK(tagc_bitmap_lane_max_cuda(NULL, 3, 1024, 0, NULL, stream) == TAGC_EINVAL);
  int64_t *dmax = dev_alloc(8);
  CHECK(tagc_bitmap_lane_max_cuda((const uint64_t *)dmax, 1, 48, 0, dmax, stream) == TAGC_EINVAL);
  cudaFree(dmax);
}

/* Blockwise int8 gather quantisation: the CUDA chunk bytes and decoded values equal the CPU
 * oracle's, for ragged sizes, an all-zero block, a NaN block, and a W=3 gathered decode. */
static void test_q8(void) {
  static const int64_t sizes[] = {1, 255, 257, 1000, TEST_BIG_ARRAY + 77};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    int64_t n = sizes[s], bytes = tagc_q8_chunk_bytes(n), count = 3;
    float *f = malloc((size_t)(count * n) * 4), *out_cpu = malloc((size_t)(count * n) * 4),
          *out_gpu = malloc((size_t)(count * n) * 4);
    unsigned char *q_cpu = malloc((size_t)(count * bytes)), *q_gpu = malloc((size_t)(count * bytes));
    for (int64_t i = 0; i < count * n; i++)
      f[i] = gaussian() * (i % 3 == 0 ? 1e-3f : 0.5f);
    if (n > 600) {
      for (int64_t i = 256; i < 512; i++)
        f[i] = 0.0f; /* an all-zero block */
      f[n + 3] = NAN;
    }
    float *df = dev_copy(f, (size_t)(count * n) * 4), *dout = dev_alloc((size_t)(count * n) * 4);
    unsigned char *dq = dev_alloc((size_t)(count * bytes));
    for (int64_t c = 0; c < count; c++) {
      CHECK_OK(tagc_q8_encode_cpu(f + c * n, n, q_cpu + c * bytes));
      CHECK_OK(tagc_q8_encode_cuda(df + c * n, n, dq + c * bytes, stream));
    }
    int64_t limit = count * n - (n > 1 ? n / 2 : 0);
    CHECK_OK(tagc_q8_decode_cpu(q_cpu, n, (int32_t)count, bytes, limit, out_cpu));
    CHECK_OK(tagc_q8_decode_cuda(dq, n, (int32_t)count, bytes, limit, dout, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    host_copy(q_gpu, dq, (size_t)(count * bytes));
    host_copy(out_gpu, dout, (size_t)limit * 4);
    int64_t bad_q = diff_bytes(q_cpu, q_gpu, count * bytes, 1);
    int64_t bad_f = diff_f32_nan(out_cpu, out_gpu, limit);
    printf("q8 n=%lld: mismatches chunk bytes %lld decode %lld\n", (long long)n, (long long)bad_q,
           (long long)bad_f);
    CHECK_EQ_INT(bad_q, 0);
    CHECK_EQ_INT(bad_f, 0);
    CHECK(tagc_q8_decode_cuda(dq, n, 0, bytes, 1, dout, stream) == TAGC_EINVAL);
    CHECK(tagc_q8_decode_cuda(dq, n, (int32_t)count, bytes + 2, 1, dout, stream) == TAGC_EINVAL);
    cudaFree(df), cudaFree(dout), cudaFree(dq);
    free(f), free(out_cpu), free(out_gpu), free(q_cpu), free(q_gpu);
  }
}

/* The int8 gradient wire: the CUDA encode with error feedback (chunk bytes and new residual,
 * with and without a residual, a NaN in it) and the owner's decode-sum of W = 3 chunks equal
 * the CPU oracle's bit for bit; the device chunks lie 32 bytes further apart than their size
 * (a unit's grouped exchange), the CPU's packed. */
static void test_q8_grad(void) {
  static const int64_t sizes[] = {1, 257, 1000, TEST_BIG_ARRAY + 77};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    int64_t n = sizes[s], bytes = tagc_q8_chunk_bytes(n), count = 3, bad_q = 0, bad_r = 0, bad_f = 0;
    int64_t gstride = bytes + 32;
    float *f = malloc((size_t)(count * n) * 4), *r = malloc((size_t)(count * n) * 4),
          *res_cpu = malloc((size_t)(count * n) * 4), *res_gpu = malloc((size_t)(count * n) * 4),
          *sum_cpu = malloc((size_t)n * 4), *sum_gpu = malloc((size_t)n * 4);
    unsigned char *q_cpu = malloc((size_t)(count * bytes)), *q_gpu = malloc((size_t)(count * gstride));
    for (int64_t i = 0; i < count * n; i++) {
      f[i] = gaussian() * (i % 3 == 0 ? 1e-3f : 0.5f);
      r[i] = i % 5 == 0 ? -0.0f : 0.01f * gaussian();
    }
    if (n > 600)
      r[n + 3] = NAN;
    float *df = dev_copy(f, (size_t)(count * n) * 4), *dr = dev_copy(r, (size_t)(count * n) * 4);
    float *dres = dev_alloc((size_t)(count * n) * 4), *dsum = dev_alloc((size_t)n * 4);
    unsigned char *dq = dev_alloc((size_t)(count * gstride));
    for (int with_res = 0; with_res < 2; with_res++) {
      for (int64_t c = 0; c < count; c++) {
        const float *rc = with_res ? r + c * n : NULL, *drc = with_res ? dr + c * n : NULL;
        CHECK_OK(tagc_q8_encode_ef_cpu(f + c * n, rc, n, q_cpu + c * bytes, res_cpu + c * n));
        CHECK_OK(tagc_q8_encode_ef_cuda(df + c * n, drc, n, dq + c * gstride, dres + c * n, stream));
      }
      CHECK_OK(tagc_q8_decode_sum_cpu(q_cpu, n, (int32_t)count, tagc_q8_chunk_bytes(n), sum_cpu));
      CHECK_OK(tagc_q8_decode_sum_cuda(dq, n, (int32_t)count, gstride, dsum, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      host_copy(q_gpu, dq, (size_t)(count * gstride));
      host_copy(res_gpu, dres, (size_t)(count * n) * 4);
      host_copy(sum_gpu, dsum, (size_t)n * 4);
      for (int64_t c = 0; c < count; c++)
        bad_q += diff_bytes(q_cpu + c * bytes, q_gpu + c * gstride, bytes, 1);
      bad_r += diff_f32_nan(res_cpu, res_gpu, count * n);
      bad_f += diff_f32_nan(sum_cpu, sum_gpu, n);
    }
    printf("q8 grad n=%lld: mismatches chunk bytes %lld residual %lld sum %lld\n", (long long)n,
           (long long)bad_q, (long long)bad_r, (long long)bad_f);
    CHECK_EQ_INT(bad_q, 0);
    CHECK_EQ_INT(bad_r, 0);
    CHECK_EQ_INT(bad_f, 0);
    CHECK(tagc_q8_decode_sum_cuda(dq, n, 0, gstride, dsum, stream) == TAGC_EINVAL);
    CHECK(tagc_q8_decode_sum_cuda(dq, n, (int32_t)count, bytes - 4, dsum, stream) == TAGC_EINVAL);
    cudaFree(df), cudaFree(dr), cudaFree(dres), cudaFree(dsum), cudaFree(dq);
    free(f), free(r), free(res_cpu), free(res_gpu), free(sum_cpu), free(sum_gpu), free(q_cpu), free(q_gpu);
  }
}

int main(int argc, char **argv) {
  quick = argc > 1 && strcmp(argv[1], "quick") == 0;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    TEST_SKIP("no CUDA device");
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_OK(cudaEventCreate(&ev_start));
  CUDA_OK(cudaEventCreate(&ev_stop));
  test_bad_arguments();
  test_bitmap();
  test_lane_max();
  test_bf16();
  test_q8();
  test_q8_grad();
  test_sparsify();
  test_sketch_pipeline();
  test_dispatch();
  cudaEventDestroy(ev_start);
  cudaEventDestroy(ev_stop);
  cudaStreamDestroy(stream);
  if (quick)
    printf("quick run: sparsify shapes and sketch cases over %d elements left to the full run\n",
           QUICK_MAX_ELEMS);
  return TEST_END();
}
