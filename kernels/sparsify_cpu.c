/* CPU oracle of the fused sparsify with error feedback (see sparsify.h).
 * Two passes per shard: a magnitude histogram (per-thread, merged) that fixes the threshold
 * bin, then one streaming pass writing kept, residual and the bitmap. */
#include "kernels/sparsify.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels/bf16.h"

#define HIST_BYTES ((size_t)TAGC_HIST_BINS * sizeof(uint32_t))

static int max_threads(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

size_t tagc_sparsify_workspace_bytes(const tagc_layout *l, int threads) {
  (void)l;
  return (size_t)max_threads(threads) * HIST_BYTES;
}

static inline uint32_t mag_bin(uint32_t bits) { return (bits & 0x7FFFFFFFu) >> TAGC_HIST_SHIFT; }

static inline int is_nonfinite(uint32_t bits) { return (bits & 0x7F800000u) == 0x7F800000u; }

/* Adds the |v| of elements [lo, hi) of one shard to hist; returns non-finite count. */
static int64_t histogram_range(const float *g, const float *r, int64_t lo, int64_t hi,
                               uint32_t *hist) {
  int64_t bad = 0;
  for (int64_t e = lo; e < hi; e++) {
    uint32_t bits = tagc_f32_bits(g[e] + r[e]);
    bad += is_nonfinite(bits);
    hist[mag_bin(bits)] += (bits & 0x7FFFFFFFu) != 0;
  }
  return bad;
}

/* Highest bin b whose suffix count (bins >= b) reaches k; TAGC_HIST_BINS when k == 0,
 * 0 when fewer than k elements are non-zero. */
static uint32_t threshold_bin(const uint32_t *hist, int64_t k) {
  if (k <= 0)
    return TAGC_HIST_BINS;
  int64_t cum = 0;
  for (int64_t b = TAGC_HIST_BINS - 1; b > 0; b--) {
    cum += hist[b];
    if (cum >= k)
      return (uint32_t)b;
  }
  return 0;
}

/* Sparsifies `count` (<= 64) consecutive elements and returns their bitmap word.
 * Branch-free bit selects so the element loop vectorises. */
static inline uint64_t apply_word(const float *g, float *r, float *kept, int count,
                                  uint32_t tbin) {
  uint32_t keep[64];
  for (int q = 0; q < count; q++) {
    uint32_t bits = tagc_f32_bits(g[q] + r[q]), mag = bits & 0x7FFFFFFFu;
    uint32_t k = 0u - (uint32_t)((mag != 0) & ((mag >> TAGC_HIST_SHIFT) >= tbin));
    uint32_t sign = bits & 0x80000000u;
    kept[q] = tagc_f32_from_bits((bits & k) | (sign & ~k));
    r[q] = tagc_f32_from_bits((sign & k) | (bits & ~k));
    keep[q] = k & 1u;
  }
  uint64_t word = 0;
  for (int q = 0; q < count; q++)
    word |= (uint64_t)keep[q] << q;
  return word;
}

/* Pass 2 over one shard (inside a parallel region): writes kept (padded), residual and
 * bitmap, and adds the number of kept elements to *kept_count. */
static void apply_shard(const tagc_layout *l, const float *g, float *r, float *kept,
                        uint64_t *bitmap, uint32_t tbin, int64_t *kept_count) {
  int64_t n = l->shard_numel, full = n / 64, local = 0;
#pragma omp for schedule(static) nowait
  for (int64_t w = 0; w < l->bitmap_words; w++) {
    int64_t base = w * 64;
    int count = w < full ? 64 : (base < n ? (int)(n - base) : 0);
    uint64_t word = apply_word(g + base, r + base, kept + base, count, tbin);
    for (int q = count; q < 64; q++)
      kept[base + q] = 0.0f;
    bitmap[w] = word;
    local += __builtin_popcountll(word);
  }
#pragma omp atomic
  *kept_count += local;
}

static void sparsify_parallel(const tagc_layout *l, float density, const float *grad,
                              float *residual, float *kept, uint64_t *bitmap,
                              tagc_sparsify_stats *stats, uint32_t *hists, int nthreads,
                              int64_t *nonfinite_total) {
  int64_t n = l->shard_numel, bad_total = 0;
  int64_t k = llround((double)density * (double)n);
#pragma omp parallel num_threads(nthreads)
  {
    int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    uint32_t *mine = hists + (size_t)tid * TAGC_HIST_BINS;
    for (int32_t j = 0; j < l->world; j++) {
      const float *g = grad + (int64_t)j * n;
      const float *r = residual + (int64_t)j * n;
      memset(mine, 0, HIST_BYTES);
      int64_t lo = n * tid / nt, hi = n * (tid + 1) / nt;
      int64_t bad = histogram_range(g, r, lo, hi, mine);
#pragma omp barrier
#pragma omp for schedule(static)
      for (int64_t b = 0; b < TAGC_HIST_BINS; b++)
        for (int t = 1; t < nt; t++)
          hists[b] += hists[(size_t)t * TAGC_HIST_BINS + b];
#pragma omp single
      {
        stats[j].nonfinite = 0;
        stats[j].kept = 0;
        stats[j].threshold_bin = threshold_bin(hists, k);
      }
#pragma omp atomic
      stats[j].nonfinite += bad;
#pragma omp barrier
    }
#pragma omp single
    for (int32_t j = 0; j < l->world; j++)
      bad_total += stats[j].nonfinite;
    for (int32_t j = 0; j < l->world; j++) {
      float *kj = kept + (int64_t)j * l->shard_padded;
      uint64_t *bj = bitmap + (int64_t)j * l->bitmap_words;
      if (bad_total) {
#pragma omp single nowait
        {
          memset(kj, 0, (size_t)l->shard_padded * sizeof *kj);
          memset(bj, 0, (size_t)l->bitmap_words * sizeof *bj);
        }
        continue;
      }
      apply_shard(l, grad + (int64_t)j * n, residual + (int64_t)j * n, kj, bj,
                  stats[j].threshold_bin, &stats[j].kept);
    }
  }
  *nonfinite_total = bad_total;
}

tagc_status tagc_sparsify_cpu(const tagc_layout *l, float density, const float *grad,
                              float *residual, float *kept, uint64_t *bitmap,
                              tagc_sparsify_stats *stats, void *ws, size_t ws_bytes) {
  if (!l || !l->block_rows || !grad || !residual || !kept || !bitmap || !stats || !ws)
    return tagc_errorf(TAGC_EINVAL, "sparsify: NULL argument");
  if (!(density >= 0.0f && density <= 1.0f))
    return tagc_errorf(TAGC_EINVAL, "sparsify: density %g outside [0, 1]", (double)density);
  size_t fit = ws_bytes / HIST_BYTES;
  int nthreads = fit < (size_t)omp_get_max_threads() ? (int)fit : omp_get_max_threads();
  if (nthreads < 1)
    return tagc_errorf(TAGC_EINVAL, "sparsify: workspace %zu bytes < %zu", ws_bytes,
                       HIST_BYTES);
  int64_t bad = 0;
  sparsify_parallel(l, density, grad, residual, kept, bitmap, stats, ws, nthreads, &bad);
  for (int32_t j = 0; j < l->world; j++) {
    uint32_t tb = stats[j].threshold_bin;
    stats[j].threshold = tb >= TAGC_HIST_BINS ? INFINITY : tagc_f32_from_bits(tb << TAGC_HIST_SHIFT);
  }
  if (bad)
    return tagc_errorf(TAGC_ENUMERIC, "sparsify: %lld inf/NaN values in gradient + residual",
                       (long long)bad);
  return TAGC_OK;
}
