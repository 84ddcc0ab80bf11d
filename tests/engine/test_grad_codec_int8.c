/* The int8 gradient wire of `--compress auto` (engine/grad_codec.h, TAGC_ENC_INT8) on the CPU
 * device, three processes over Gloo, a segment of 3 shards of 4096 whose last 700 elements are
 * padding. Against a host oracle built from each rank's known gradients and the q8 kernels:
 *  - every rank's shard is, bit for bit, the rank-order sum of the W ranks' decoded int8
 *    chunks of grad + residual for that shard, and within W * amax/254 of the exact sum;
 *  - the staged residual is v - q(v) exactly (error feedback: what rounding lost is kept),
 *    and a committed step makes it the segment's residual, which the next step adds in;
 *  - a dropped step (commit 0: step 1, and step 2 with its NaN) leaves the residual
 *    bit-identical;
 *  - the all-to-all carries (W-1) int8 chunks per rank and step, about a quarter of fp32;
 *  - a NaN in one rank's gradient reaches its owner's shard as NaN over its 256-element
 *    block (never silently finite), and the other ranks' shards stay finite;
 *  - dense_only adaptive segments never sketch (no density probe at step 16);
 *  - moved to fp32, a step sends gradient + residual and zeroes the residual, and the next
 *    (residual known zero: the gradient goes as it is) sends the gradients' sum;
 *  - a unit's reduction (tagc_grad_reduce_unit) of int8, fp32 and bf16 segments of different
 *    shard sizes (some padded; a `none` one; one moving from int8, with its residual, to fp32)
 *    makes one all-to-all for its int8 segments and one reduce-scatter per dense segment, with
 *    the shards, stats and committed residuals of one tagc_grad_reduce call per segment, bit
 *    for bit, over two steps. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "harness.h" /* tests/comm: forked ranks over a file store */
#include "kernels/q8.h"
#include "test.h"
#include "engine/device.h"
#include "engine/grad_codec.h"

#define W 3
#define S 4096
#define LEN (W * S - 700)
#define N (W * S)

/* Rank r's gradient at step t (padding zero), the same on every process. */
static void gradient(int r, int t, float *g) {
  uint64_t x = 1000003u * (uint64_t)(r + 1) + 7919u * (uint64_t)t;
  for (int i = 0; i < N; i++) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    double u = (double)(x >> 40) / (double)(1 << 24) - 0.5;
    g[i] = i < LEN ? (float)(u * (1 + (i % 97))) : 0.0f; /* magnitudes vary by block */
  }
}

/* q(v) of one rank's W chunks, decoded (the oracle of the wire). */
static void quantised(const float *v, float *q) {
  int64_t chunk = tagc_q8_chunk_bytes(S);
  unsigned char *buf = malloc((size_t)chunk * W);
  for (int j = 0; j < W; j++)
    tagc_q8_encode_cpu(v + j * S, S, buf + j * chunk);
  tagc_q8_decode_cpu(buf, S, W, tagc_q8_chunk_bytes(S), N, q);
  free(buf);
}

/* A unit of six segments: A int8 (shards of S, the last one partly padding), B fp32, C int8
 * (shards of 2S, the second partly padding, the third all padding; fp32 at the second step,
 * with the residual its int8 step left), D bf16, E policy none (fp32, no residual), F bf16
 * (padded): tagc_grad_reduce_unit against one tagc_grad_reduce call per segment on twins.
 * Past each segment's len its gradient buffer holds NaN, which neither may read. */
static void test_unit(tagc_grad_codec *c, tagc_comm *comm, int rank) {
  enum { NSEG = 6 };
  static const size_t len[NSEG] = {LEN, 2 * S, 2 * (W - 1) * S - 5, W * S, W * S - 1000, LEN};
  static const size_t shard_size[NSEG] = {S, S, 2 * S, S, S, S};
  static const tagc_encoding mode[NSEG] = {TAGC_ENC_INT8, TAGC_ENC_FP32, TAGC_ENC_INT8,
                                            TAGC_ENC_BF16, TAGC_ENC_FP32, TAGC_ENC_BF16};
  /* exchanges per step: all-to-alls and reduce-scatters, of the unit and of the twins */
  static const uint64_t unit_ops[2][2] = {{1, 4}, {1, 5}}, twin_ops[2][2] = {{2, 4}, {1, 5}};
  tagc_role_policy pol = {TAGC_ENC_DENSE, 1, 0.05, 0}, none = {TAGC_ENC_BIT(TAGC_ENC_FP32), 0, 0, 0};
  tagc_grad_segment *unit[NSEG] = {0}, *twin[NSEG] = {0};
  float *grad[NSEG], *got[NSEG], *want[NSEG], *work = malloc(2 * N * 4);
  tagc_grad_stats gs_unit[NSEG], gs_twin[NSEG];
  for (int i = 0; i < NSEG; i++) {
    const tagc_role_policy *p = i == 4 ? &none : &pol;
    CHECK_OK(tagc_grad_segment_new(c, p, len[i], shard_size[i], 20 + i, &unit[i]));
    CHECK_OK(tagc_grad_segment_new(c, p, len[i], shard_size[i], 20 + i, &twin[i]));
    if (!unit[i] || !twin[i])
      return;
    tagc_grad_segment_set_encoding(unit[i], mode[i]);
    tagc_grad_segment_set_encoding(twin[i], mode[i]);
    grad[i] = malloc(2 * N * 4);
    got[i] = malloc(shard_size[i] * 4);
    want[i] = malloc(shard_size[i] * 4);
  }
  for (int t = 3; t < 5; t++) {
    if (t == 4) {
      tagc_grad_segment_set_encoding(unit[2], TAGC_ENC_FP32);
      tagc_grad_segment_set_encoding(twin[2], TAGC_ENC_FP32);
    }
    for (int i = 0; i < NSEG; i++) {
      gradient(rank, 10 * t + i, grad[i]); /* N values; C takes two of them */
      gradient(rank, 10 * t + i + 5, grad[i] + N);
      for (size_t k = len[i]; k < 2 * N; k++)
        grad[i][k] = NAN;
    }
    tagc_grad_job jobs[NSEG];
    for (int i = 0; i < NSEG; i++)
      jobs[i] = (tagc_grad_job){unit[i], grad[i], got[i], &gs_unit[i]};
    tagc_comm_stats c0, c1, c2;
    tagc_comm_stats_get(comm, &c0);
    CHECK_OK(tagc_grad_reduce_unit(c, jobs, NSEG, TAGC_LANE_COMM, t, work));
    tagc_comm_stats_get(comm, &c1);
    for (int i = 0; i < NSEG; i++)
      CHECK_OK(tagc_grad_reduce(c, twin[i], TAGC_LANE_COMM, t, grad[i], want[i], work, &gs_twin[i]));
    tagc_comm_stats_get(comm, &c2);
    uint64_t unit_a2a = c1.op[TAGC_COMM_OP_ALLTOALL].calls - c0.op[TAGC_COMM_OP_ALLTOALL].calls;
    uint64_t twin_a2a = c2.op[TAGC_COMM_OP_ALLTOALL].calls - c1.op[TAGC_COMM_OP_ALLTOALL].calls;
    uint64_t unit_rs = c1.op[TAGC_COMM_OP_REDUCE_SCATTER].calls - c0.op[TAGC_COMM_OP_REDUCE_SCATTER].calls;
    uint64_t twin_rs = c2.op[TAGC_COMM_OP_REDUCE_SCATTER].calls - c1.op[TAGC_COMM_OP_REDUCE_SCATTER].calls;
    uint64_t unit_bytes = c1.op[TAGC_COMM_OP_ALLTOALL].bytes_sent - c0.op[TAGC_COMM_OP_ALLTOALL].bytes_sent +
                          c1.op[TAGC_COMM_OP_REDUCE_SCATTER].bytes_sent - c0.op[TAGC_COMM_OP_REDUCE_SCATTER].bytes_sent;
    uint64_t twin_bytes = c2.op[TAGC_COMM_OP_ALLTOALL].bytes_sent - c1.op[TAGC_COMM_OP_ALLTOALL].bytes_sent +
                          c2.op[TAGC_COMM_OP_REDUCE_SCATTER].bytes_sent - c1.op[TAGC_COMM_OP_REDUCE_SCATTER].bytes_sent;
    int u = t - 3;
    CHECK_MSG(unit_a2a == unit_ops[u][0] && unit_rs == unit_ops[u][1] && twin_a2a == twin_ops[u][0] &&
                  twin_rs == twin_ops[u][1] && unit_bytes == twin_bytes,
              "rank %d step %d: unit %llu all-to-alls + %llu reduce-scatters (%llu B), one by one "
              "%llu + %llu (%llu B)", rank, t, (unsigned long long)unit_a2a,
              (unsigned long long)unit_rs, (unsigned long long)unit_bytes,
              (unsigned long long)twin_a2a, (unsigned long long)twin_rs, (unsigned long long)twin_bytes);
    for (int i = 0; i < NSEG; i++) {
      CHECK_MSG(memcmp(got[i], want[i], shard_size[i] * 4) == 0,
                "rank %d step %d segment %d: the unit's shard differs", rank, t, i);
      CHECK_MSG(gs_unit[i].encoding == gs_twin[i].encoding && gs_unit[i].feedback == gs_twin[i].feedback &&
                    gs_unit[i].global_bits == gs_twin[i].global_bits,
                "rank %d step %d segment %d: stats differ (encoding %d vs %d)", rank, t, i,
                (int)gs_unit[i].encoding, (int)gs_twin[i].encoding);
      CHECK_OK(tagc_grad_segment_commit(c, unit[i], TAGC_LANE_COMM, 1));
      CHECK_OK(tagc_grad_segment_commit(c, twin[i], TAGC_LANE_COMM, 1));
      const float *ru = tagc_grad_segment_residual_shard(c, unit[i]);
      const float *rt = tagc_grad_segment_residual_shard(c, twin[i]);
      if (i == 4) { /* policy none: no residual */
        CHECK(!ru && !rt);
        continue;
      }
      ru -= (size_t)rank * shard_size[i];
      rt -= (size_t)rank * shard_size[i];
      CHECK_MSG(memcmp(ru, rt, W * shard_size[i] * 4) == 0,
                "rank %d step %d segment %d: the unit's residual differs", rank, t, i);
      if (i == 2 && t == 4) { /* fp32 after int8: the residual was sent and is zero now */
        int zero = 1;
        for (size_t k = 0; k < W * shard_size[i]; k++)
          zero &= ru[k] == 0.0f;
        CHECK_MSG(zero, "rank %d: segment C's residual is not zero after its fp32 step", rank);
      }
    }
  }
  for (int i = 0; i < NSEG; i++) {
    tagc_grad_segment_free(c, unit[i]);
    tagc_grad_segment_free(c, twin[i]);
    free(grad[i]), free(got[i]), free(want[i]);
  }
  free(work);
}

/* One rank (tests/comm/harness.h): returns its failed checks. */
static int rank_main(int rank, int world, const char *dir, void *arg) {
  (void)world;
  (void)arg;
  int failed_before = test_failed_;
  tagc_comm *comm = harness_comm(rank, W, dir, "int8", 120);
  tagc_device *dev = NULL;
  CHECK_OK(tagc_device_open("cpu", TAGC_DEVICE_FP32, &dev));
  if (!comm || !dev)
    return 1;
  tagc_grad_codec_config gc = {dev, comm, 120, 0};
  tagc_grad_codec *c = NULL;
  tagc_grad_segment *seg = NULL;
  tagc_role_policy pol = {TAGC_ENC_DENSE, 1, 0.05, 0}; /* adaptive, dense only */
  CHECK_OK(tagc_grad_codec_new(&gc, &c));
  if (c)
    CHECK_OK(tagc_grad_segment_new(c, &pol, LEN, S, 11, &seg));
  if (!seg)
    return 1;
  tagc_grad_segment_set_encoding(seg, TAGC_ENC_INT8);
  float *g[W], *res[W], *res_before[W], *q = malloc(N * 4), *v = malloc(N * 4), *grad = malloc(N * 4);
  float *work = malloc(N * 4), *shard = malloc(S * 4), *want = malloc(S * 4);
  for (int r = 0; r < W; r++) {
    g[r] = malloc(N * 4);
    res[r] = calloc(N, 4); /* the oracle's residual of each rank */
    res_before[r] = malloc(N * 4);
  }
  int64_t chunk = tagc_q8_chunk_bytes(S);
  for (int t = 0; t < 3; t++) {
    for (int r = 0; r < W; r++)
      gradient(r, t, g[r]);
    if (t == 2)
      g[1][2 * S + 300] = NAN; /* owned by rank 2: its block [2S+256, 2S+512) */
    memcpy(grad, g[rank], LEN * 4);
    tagc_comm_stats c0, c1;
    tagc_comm_stats_get(comm, &c0);
    tagc_grad_stats gs;
    CHECK_OK(tagc_grad_reduce(c, seg, TAGC_LANE_COMM, t, grad, shard, work, &gs));
    CHECK_OK(tagc_device_sync(dev, TAGC_LANE_COMM));
    tagc_comm_stats_get(comm, &c1);
    CHECK_MSG(gs.feedback && gs.encoding == TAGC_ENC_INT8, "rank %d step %d: feedback %d encoding %d",
              rank, t, gs.feedback, (int)gs.encoding);
    uint64_t sent = c1.op[TAGC_COMM_OP_ALLTOALL].bytes_sent - c0.op[TAGC_COMM_OP_ALLTOALL].bytes_sent;
    CHECK_MSG(sent == (uint64_t)((W - 1) * chunk), "rank %d step %d: all-to-all sent %llu bytes, want %lld",
              rank, t, (unsigned long long)sent, (long long)((W - 1) * chunk));
    /* the oracle: every rank's v = g + residual, its q(v), the owner's rank-order sum */
    double exact_err = 0, bound = 0;
    for (int r = 0; r < W; r++)
      memcpy(res_before[r], res[r], N * 4);
    for (int r = 0; r < W; r++) {
      for (int i = 0; i < N; i++)
        v[i] = g[r][i] + res[r][i];
      quantised(v, q);
      for (int i = 0; i < S; i++)
        want[i] = r == 0 ? q[rank * S + i] : want[i] + q[rank * S + i];
      if (t == 0) /* steps 1 (dropped) and 2 (a NaN: dropped too) keep step 0's residual */
        for (int i = 0; i < N; i++)
          res[r][i] = v[i] - q[i];
    }
    if (t < 2) {
      CHECK_MSG(memcmp(shard, want, S * 4) == 0, "rank %d step %d: shard differs from the oracle", rank, t);
      for (int i = 0; i < S; i++) {
        double sum = 0; /* the exact sum of what the ranks sent */
        for (int r = 0; r < W; r++)
          sum += (double)g[r][rank * S + i] + res_before[r][rank * S + i];
        exact_err = fmax(exact_err, fabs(shard[i] - sum));
      }
      float m = 0;
      for (int r = 0; r < W; r++)
        for (int i = 0; i < N; i++)
          m = fmaxf(m, fabsf(g[r][i]) + fabsf(res_before[r][i]));
      bound = W * (double)m / 254.0 * 1.01;
      CHECK_MSG(exact_err <= bound, "rank %d step %d: |shard - exact| %.3g > %.3g", rank, t,
                exact_err, bound);
    } else {
      int nan_block = 1, finite_else = 1;
      for (int i = 0; i < S; i++) {
        int in_block = rank == 2 && i >= 256 && i < 512;
        if (in_block)
          nan_block &= isnan(shard[i]);
        else if (i < LEN - rank * S)
          finite_else &= isfinite(shard[i]) && shard[i] == want[i];
      }
      CHECK_MSG(nan_block && finite_else, "rank %d: NaN block %d, the rest finite and exact %d", rank,
                nan_block, finite_else);
    }
    CHECK_OK(tagc_grad_segment_commit(c, seg, TAGC_LANE_COMM, t == 0));
    const float *mine = tagc_grad_segment_residual_shard(c, seg) - (size_t)rank * S;
    CHECK_MSG(memcmp(mine, res[rank], N * 4) == 0, "rank %d step %d: residual is not v - q(v)%s",
              rank, t, t ? " of step 0 (the dropped step changed it)" : "");
  }
  /* a dense-only segment is never probed: step 16 stays int8 */
  gradient(rank, 16, grad);
  tagc_grad_stats gs;
  CHECK_OK(tagc_grad_reduce(c, seg, TAGC_LANE_COMM, 16, grad, shard, work, &gs));
  CHECK_MSG(gs.encoding == TAGC_ENC_INT8, "rank %d: step 16 probed (encoding %d)", rank,
            (int)gs.encoding);
  CHECK_OK(tagc_grad_segment_commit(c, seg, TAGC_LANE_COMM, 1));
  for (int r = 0; r < W; r++) { /* the oracle's residuals after step 16 */
    gradient(r, 16, g[r]);
    for (int i = 0; i < N; i++)
      v[i] = g[r][i] + res[r][i];
    quantised(v, q);
    for (int i = 0; i < N; i++)
      res[r][i] = v[i] - q[i];
  }
  /* auto moves the segment to fp32: step 17 sends gradient + residual and leaves a zero
   * residual; step 18 (residual known zero) sends the gradient alone */
  tagc_grad_segment_set_encoding(seg, TAGC_ENC_FP32);
  for (int t = 17; t <= 18; t++) {
    for (int r = 0; r < W; r++)
      gradient(r, t, g[r]);
    memcpy(grad, g[rank], LEN * 4);
    CHECK_OK(tagc_grad_reduce(c, seg, TAGC_LANE_COMM, t, grad, shard, work, &gs));
    CHECK_OK(tagc_device_sync(dev, TAGC_LANE_COMM));
    CHECK_MSG(gs.encoding == TAGC_ENC_FP32, "rank %d step %d: encoding %d", rank, t, (int)gs.encoding);
    double err = 0, mag = 0;
    for (int i = 0; i < S; i++) {
      double sum = 0, abs_sum = 0;
      for (int r = 0; r < W; r++) {
        double x = (double)g[r][rank * S + i] + (t == 17 ? (double)res[r][rank * S + i] : 0.0);
        sum += x;
        abs_sum += fabs(x);
      }
      err = fmax(err, fabs(shard[i] - sum));
      mag = fmax(mag, abs_sum);
    }
    CHECK_MSG(err <= 1e-6 * mag, "rank %d step %d: |fp32 shard - sum of %s| %.3g (scale %.3g)", rank, t,
              t == 17 ? "gradient + residual" : "gradients", err, mag);
    CHECK_OK(tagc_grad_segment_commit(c, seg, TAGC_LANE_COMM, 1));
    const float *mine = tagc_grad_segment_residual_shard(c, seg) - (size_t)rank * S;
    int zero = 1;
    for (int i = 0; i < N; i++)
      zero &= mine[i] == 0.0f;
    CHECK_MSG(zero, "rank %d step %d: the residual is not zero after a dense fp32 step", rank, t);
  }
  test_unit(c, comm, rank);
  if (test_failed_ == failed_before)
    printf("  rank %d: shards and residuals match the oracle; max |error| within W*amax/254; "
           "NaN block carried; %lld B per all-to-all; a unit's int8 segments in one all-to-all\n",
           rank, (long long)((W - 1) * chunk));
  for (int r = 0; r < W; r++) {
    free(g[r]);
    free(res[r]);
    free(res_before[r]);
  }
  free(q);
  free(v);
  free(grad);
  free(work);
  free(shard);
  free(want);
  tagc_grad_segment_free(c, seg);
  tagc_grad_codec_free(c);
  tagc_comm_destroy(comm);
  tagc_device_close(dev);
  return test_failed_ - failed_before;
}

int main(void) {
  fflush(stdout);
  int bad = harness_run(W, rank_main, NULL, 90);
  CHECK_MSG(bad == 0, "%d of %d ranks failed (their checks above)", bad, W);
  return TEST_END();
}
