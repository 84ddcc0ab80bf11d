/* The sharded engine on a CUDA device against the same engine on the CPU (the oracle), at
 * world size 1 (no communicator): a 2-layer model (width 64, 2 heads, context 32, vocab 256),
 * a small generated corpus, compression policy "none", a global batch of 6 sequences in
 * micro-batches of 4 (two passes of 3, so gradients accumulate over micro-batches), ZeRO-3
 * resharding, STEPS optimizer steps, a validation pass and the gathered parameters.
 * Checks:
 *  - loss and gradient norm of every step, and the validation loss: relative difference
 *    <= 1e-4 (fp32). Neither side is exact: cuBLAS and OpenBLAS sum products in other
 *    orders, the CPU has its own exp/tanh approximations, LayerNorm and softmax reductions
 *    run in other orders (see tests/model_gpu/test_model_gpu.c); such roundings stay near
 *    1e-6 after a few steps, while a wrong index, scale or missing micro-batch gives O(1).
 *  - final parameters: AdamW moves an element by about lr * m / sqrt(v) whatever the size
 *    of its gradient, so elements whose gradient is near zero (rounding noise decides the
 *    sign) may differ by up to ~2 lr per step. max |gpu - cpu| is therefore bounded by
 *    2.5 lr per step (relative to max |cpu| it is printed), and the mean difference, which
 *    those few elements barely move, must stay below 1e-3 lr per step.
 *  - the same with bf16 compute (--compute bf16): the operands of every matrix product are
 *    rounded to 8-bit mantissas (2^-9 relative each), so step 0's loss is checked to 1e-3
 *    (as in test_model_gpu), the gradient norms to 3e-2 (test_model_gpu's bound on the
 *    relative L2 difference of bf16 gradients, which bounds that of their norm), the loss
 *    of later steps, whose parameters moved along those gradients, and the validation loss
 *    to 1e-2, and the mean parameter difference to 0.3 lr per step;
 *  - a second fp32 run on the device is bit-identical (losses, norms, parameters);
 *  - the device's memory peak covers at least the shards, moments and gradients, and every
 *    byte is freed with the engine;
 *  - snapshot: at world size 1 the "param" views equal the gathered parameters bit for bit;
 *    saved as a checkpoint and loaded into a fresh engine on the device, the next step of
 *    both engines gives identical loss and parameters; the same for an in-memory copy
 *    (engine/mirror.h: device to host into the image, host to device in the rebuild);
 *  - "cuda:99" is refused with TAGC_EINVAL or TAGC_EUNSUPPORTED;
 *  - a NaN injected into the gradient at step 1 (fault nan), on the CPU and on the device: the
 *    step is reported skipped and leaves parameters, moments and residual bit-identical; the
 *    next step trains; under the emulation also the codec's tagc sketch path on the device
 *    at W = 2 (two processes over Gloo): the NaN is reported, a dropped step leaves both
 *    ranks' residuals bit-identical.
 * Exits 77 without a CUDA device. Built a second time against the host emulation of
 * tests/kernels_gpu/emu and tests/model_gpu/emu (TEST_EMU): same checks, several minutes. */
#include <cuda_runtime_api.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "comm/store.h"
#include "common/status.h"
#include "common/timeutil.h"
#include "test.h"
#include "data/data.h"
#include "engine/device.h"
#include "engine/engine.h"
#include "engine/grad_codec.h"
#include "engine/mirror.h"
#include "engine/policy.h"

#define STEPS 3
#define BATCH 6
#define MICRO 4
#define VAL_WINDOWS 6
#define LR 1e-3f

typedef struct run_result {
  double loss[STEPS], grad_norm[STEPS];
  double val_loss;
  float *params; /* gathered after the steps */
} run_result;

static tagc_model_layout layout;
static tagc_corpus corpus;
static char tmp_dir[256];

static double rel_diff(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

/* A corpus of generated words, so that the model has something to learn. */
static void write_corpus(const char *path) {
  static const char *const words[] = {"the ", "engine ", "shards ", "each ", "gradient ",
                                      "across ", "ranks, ", "and ", "device ", "memory.\n"};
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f)
    return;
  uint64_t x = 7;
  for (int i = 0; i < 9000; i++) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    fputs(words[(x >> 33) % (sizeof words / sizeof words[0])], f);
  }
  fclose(f);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static tagc_engine_config engine_config(tagc_device *dev) {
  tagc_engine_config cfg = {0};
  cfg.layout = &layout;
  cfg.device = dev;
  CHECK_OK(tagc_policy_parse("none", &cfg.policy));
  cfg.adam = (tagc_adamw_config){.lr = LR, .min_lr_ratio = 0.1f, .warmup_steps = 0,
                                 .total_steps = STEPS + 1, .beta1 = 0.9f, .beta2 = 0.95f,
                                 .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1.0f};
  cfg.batch = BATCH;
  cfg.micro_batch = MICRO;
  cfg.seed = 1234;
  cfg.op_timeout_s = 60;
  cfg.reshard_after_forward = 1;
  return cfg;
}

/* Creates an engine on dev and runs the steps, the validation pass and the gather. */
static tagc_status train(tagc_device *dev, tagc_engine **out, run_result *r) {
  tagc_engine_config cfg = engine_config(dev);
  TAGC_CHECK(tagc_engine_new(&cfg, out));
  for (int s = 0; s < STEPS; s++) {
    tagc_step_stats st;
    TAGC_CHECK(tagc_engine_step(*out, &corpus, s, &st));
    r->loss[s] = st.loss;
    r->grad_norm[s] = st.grad_norm;
  }
  TAGC_CHECK(tagc_engine_eval(*out, &corpus, VAL_WINDOWS, &r->val_loss));
  r->params = malloc(layout.n_params * sizeof(float));
  if (!r->params)
    return tagc_errorf(TAGC_ENOMEM, "parameters");
  return tagc_engine_gather_params(*out, r->params);
}

/* One more step (step index STEPS) and the parameters after it. */
static void step_more(tagc_engine *e, double *loss, float *params) {
  tagc_step_stats st = {0};
  CHECK_OK(tagc_engine_step(e, &corpus, STEPS, &st));
  *loss = st.loss;
  CHECK_OK(tagc_engine_gather_params(e, params));
}

/* Snapshot into host views: "param" equals the gathered parameters (one shard = the whole
 * segment at world size 1), the residual stream is zero (policy none), the moments moved.
 * Then a checkpoint of it, loaded into a fresh engine on the same device, continues exactly
 * as the engine that saved it. */
static void snapshot_round_trip(tagc_device *dev, tagc_engine *e, const float *gathered) {
  int n = tagc_engine_n_segments(e);
  tagc_ckpt_layout cl;
  tagc_ckpt_range *ranges = calloc((size_t)n, sizeof *ranges);
  float **views = calloc((size_t)n * TAGC_ENGINE_STREAMS, sizeof *views);
  tagc_engine_ckpt_layout(e, &cl, ranges);
  CHECK_EQ_INT(cl.n_units, n);
  int param_ok = 1, residual_zero = 1;
  double m_abs = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < TAGC_ENGINE_STREAMS; k++)
      views[i * TAGC_ENGINE_STREAMS + k] = malloc(cl.unit_numel[i] * sizeof(float));
  CHECK_OK(tagc_engine_snapshot(e, views));
  for (int i = 0; i < n; i++) {
    tagc_segment_info si;
    tagc_engine_segment_info(e, i, &si);
    CHECK(si.len == (size_t)cl.unit_numel[i] && si.shard == si.len);
    float *const *v = views + (size_t)i * TAGC_ENGINE_STREAMS;
    param_ok &= memcmp(v[0], gathered + si.offset, si.len * sizeof(float)) == 0;
    for (size_t j = 0; j < si.len; j++) {
      m_abs = fmax(m_abs, fabs(v[1][j]));
      residual_zero &= v[3][j] == 0.0f;
    }
  }
  CHECK_MSG(param_ok, "snapshot 'param' views differ from the gathered parameters");
  CHECK_MSG(residual_zero, "snapshot residual of policy none is not zero");
  CHECK_MSG(m_abs > 0, "snapshot AdamW first moment is all zero after %d steps", STEPS);

  char ckpt_dir[300];
  snprintf(ckpt_dir, sizeof ckpt_dir, "%s/ckpt", tmp_dir);
  tagc_ckpt_writer_config wc = {.dir = ckpt_dir, .rank = 0, .world_size = 1, .layout = cl,
                                .ranges = ranges};
  CHECK_OK(tagc_ckpt_save(&wc, STEPS, (const float *const *)views, NULL, NULL));
  char step_dir[400];
  snprintf(step_dir, sizeof step_dir, "%s/step-%d", ckpt_dir, STEPS);
  tagc_ckpt_reader *rd = NULL;
  tagc_engine *fresh = NULL;
  tagc_engine_config cfg = engine_config(dev);
  CHECK_OK(tagc_ckpt_open(step_dir, TAGC_CKPT_VERIFY_FULL, &rd));
  CHECK_OK(tagc_engine_new(&cfg, &fresh));
  if (rd && fresh) {
    CHECK_OK(tagc_engine_load(fresh, rd));
    size_t bytes = layout.n_params * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes);
    double loss_a = 0, loss_b = 1;
    step_more(e, &loss_a, a);
    step_more(fresh, &loss_b, b);
    printf("  step %d after a checkpoint round trip: loss %.9g (saving engine %.9g)\n", STEPS,
           loss_b, loss_a);
    CHECK_MSG(loss_a == loss_b && memcmp(a, b, bytes) == 0,
              "the engine loaded from the checkpoint does not continue like the one that saved "
              "it (loss %.17g vs %.17g)", loss_b, loss_a);
    free(a);
    free(b);
  }
  tagc_ckpt_close(rd);
  tagc_engine_free(fresh);
  for (int i = 0; i < n * TAGC_ENGINE_STREAMS; i++)
    free(views[i]);
  free(views);
  free(ranges);
}

/* The in-memory copy's path on the device (engine/mirror.h, issue 26): e's state copied into
 * a mirror (device to page-locked host memory), rebuilt into a fresh engine on the same device (host to
 * device); the next step of both gives identical loss and parameters. */
static void mirror_round_trip(tagc_device *dev, tagc_engine *e, int64_t next) {
  tagc_mirror *m = NULL;
  CHECK_OK(tagc_mirror_new(&m));
  tagc_engine *fresh = NULL;
  tagc_engine_config cfg = engine_config(dev);
  CHECK_OK(tagc_engine_new(&cfg, &fresh));
  if (!m || !fresh)
    return;
  int shift = 1;
  CHECK_OK(tagc_engine_mirror_push(e, m, 1, next, &shift, 1));
  tagc_mirror_choice *ch = malloc(sizeof *ch);
  int64_t step = 0;
  CHECK_OK(tagc_engine_mirror_restore(fresh, m, 0, ch, &step));
  CHECK_MSG(step == next && ch->found && ch->world == 1, "rebuilt step %lld (want %lld)",
            (long long)step, (long long)next);
  size_t bytes = layout.n_params * sizeof(float);
  float *a = malloc(bytes), *b = malloc(bytes);
  tagc_step_stats sa = {0}, sb = {0};
  CHECK_OK(tagc_engine_step(e, &corpus, next, &sa));
  CHECK_OK(tagc_engine_step(fresh, &corpus, next, &sb));
  CHECK_OK(tagc_engine_gather_params(e, a));
  CHECK_OK(tagc_engine_gather_params(fresh, b));
  printf("  step %lld after an in-memory copy round trip: loss %.9g (copied engine %.9g)\n",
         (long long)next, sb.loss, sa.loss);
  CHECK_MSG(sa.loss == sb.loss && memcmp(a, b, bytes) == 0, "the engine rebuilt from the "
            "in-memory copy does not continue like the one copied (loss %.17g vs %.17g)",
            sb.loss, sa.loss);
  free(a);
  free(b);
  free(ch);
  tagc_engine_free(fresh);
  tagc_mirror_free(m);
}

/* The device run: training, usage figures, the snapshot round trip (first run only). */
static void device_run(tagc_device_compute compute, run_result *r, int round_trip) {
  double t0 = tagc_now();
  tagc_device *dev = NULL;
  CHECK_OK(tagc_device_open("cuda", compute, &dev));
  if (!dev)
    return;
  tagc_device_info info;
  tagc_device_get_info(dev, &info);
  CHECK(tagc_device_is_cuda(dev));
  CHECK_EQ_STR(info.kind, "cuda");
  CHECK_EQ_INT(info.index, 0);
  printf("device %s (%.1f GiB), %s compute%s\n", info.name, (double)info.total_bytes / (1 << 30),
         compute == TAGC_DEVICE_BF16 ? "bf16" : "fp32", round_trip ? ", checkpoint round trip" : "");
  tagc_engine *e = NULL;
  CHECK_OK(train(dev, &e, r));
  uint64_t current = 0, peak = 0;
  tagc_device_usage(dev, &current, &peak);
  printf("  device memory: %llu bytes in use, peak %llu\n", (unsigned long long)current,
         (unsigned long long)peak);
  /* at least the shard blocks (params, m, v, reduced gradient) and the gradient arena */
  CHECK_MSG(peak >= 5 * layout.n_params * sizeof(float), "peak %llu bytes is below the 5 "
            "fp32 copies of the %zu parameters the engine keeps", (unsigned long long)peak,
            layout.n_params);
  if (e && round_trip) {
    snapshot_round_trip(dev, e, r->params); /* it also runs step STEPS */
    mirror_round_trip(dev, e, STEPS + 1);
  }
  tagc_engine_free(e);
  tagc_device_usage(dev, &current, &peak);
  CHECK_MSG(current == 0, "%llu device bytes still allocated after the engine was freed",
            (unsigned long long)current);
  tagc_device_close(dev);
  printf("  %.2f s\n", tagc_now() - t0);
}

/* Tolerances of a device run against the CPU (see the header comment). */
typedef struct tolerance {
  double first_loss; /* relative, loss of step 0 */
  double loss;       /* relative, loss of later steps and the validation loss */
  double norm;       /* relative, gradient norm of every step */
  double mean_lr;    /* mean |gpu - cpu| of the final parameters, in lr per step */
} tolerance;

static void compare(const run_result *gpu, const run_result *cpu, tolerance tol) {
  for (int s = 0; s < STEPS; s++) {
    double dl = rel_diff(gpu->loss[s], cpu->loss[s]), dn = rel_diff(gpu->grad_norm[s], cpu->grad_norm[s]);
    double t = s == 0 ? tol.first_loss : tol.loss;
    printf("  step %d: loss cpu %.9g gpu %.9g (rel %.3g), grad norm cpu %.9g gpu %.9g (rel %.3g)\n",
           s, cpu->loss[s], gpu->loss[s], dl, cpu->grad_norm[s], gpu->grad_norm[s], dn);
    CHECK_MSG(dl <= t, "step %d: loss relative difference %.3g > %.3g", s, dl, t);
    CHECK_MSG(dn <= tol.norm, "step %d: gradient norm relative difference %.3g > %.3g", s, dn,
              tol.norm);
  }
  double dv = rel_diff(gpu->val_loss, cpu->val_loss);
  printf("  validation loss cpu %.9g gpu %.9g (rel %.3g)\n", cpu->val_loss, gpu->val_loss, dv);
  CHECK_MSG(dv <= tol.loss, "validation loss relative difference %.3g > %.3g", dv, tol.loss);
  double maxd = 0, mag = 0, mean = 0;
  for (size_t i = 0; i < layout.n_params; i++) {
    double d = fabs((double)gpu->params[i] - cpu->params[i]);
    maxd = fmax(maxd, d);
    mag = fmax(mag, fabs((double)cpu->params[i]));
    mean += d;
  }
  mean /= (double)layout.n_params;
  printf("  parameters: max|gpu - cpu| %.3e (%.3g lr, %.3g of max|cpu| %.3g), mean %.3e (%.3g lr)\n",
         maxd, maxd / LR, maxd / mag, mag, mean, mean / LR);
  CHECK_MSG(maxd <= 2.5 * LR * STEPS, "max parameter difference %.3g lr > %.3g lr", maxd / LR,
            2.5 * STEPS);
  CHECK_MSG(mean <= tol.mean_lr * LR * STEPS, "mean parameter difference %.3g lr > %.3g lr",
            mean / LR, tol.mean_lr * STEPS);
}

/* All four streams of every segment (params, moments, residual) into fresh host views. */
static float **snapshot_views(tagc_engine *e) {
  int n = tagc_engine_n_segments(e);
  tagc_ckpt_layout cl;
  tagc_ckpt_range *ranges = calloc((size_t)n, sizeof *ranges);
  float **views = calloc((size_t)n * TAGC_ENGINE_STREAMS, sizeof *views);
  tagc_engine_ckpt_layout(e, &cl, ranges);
  for (int i = 0; i < n * TAGC_ENGINE_STREAMS; i++)
    views[i] = calloc(cl.unit_numel[i / TAGC_ENGINE_STREAMS], sizeof(float));
  CHECK_OK(tagc_engine_snapshot(e, views));
  free(ranges);
  return views;
}

/* Fault "nan" on `dev` (issue 14, defect 5): a NaN put into the local gradient at step 1 is
 * reported (stats.nonfinite, no error) and the step is skipped: parameters, both AdamW
 * moments and the residual are bit-identical to those after step 0 (no silent zeroing of a
 * unit's gradient, no update from it); step 2 then trains normally. */
static void nan_skip_check(tagc_device *dev, const char *what) {
  tagc_engine_config cfg = engine_config(dev);
  tagc_engine *e = NULL;
  CHECK_OK(tagc_engine_new(&cfg, &e));
  if (!e)
    return;
  int n = tagc_engine_n_segments(e);
  tagc_ckpt_layout cl;
  tagc_ckpt_range *ranges = calloc((size_t)n, sizeof *ranges);
  tagc_engine_ckpt_layout(e, &cl, ranges);
  tagc_step_stats st = {0};
  CHECK_OK(tagc_engine_step(e, &corpus, 0, &st));
  CHECK(st.nonfinite == 0);
  float **before = snapshot_views(e);
  tagc_engine_inject_nan(e, 1);
  tagc_status rc = tagc_engine_step(e, &corpus, 1, &st);
  CHECK_MSG(rc == TAGC_OK, "%s: the step with a NaN gradient failed (%d): %s", what, (int)rc,
            tagc_last_error());
  CHECK_MSG(st.nonfinite == 1 && st.nonfinite_ranks == 1 && !isfinite(st.grad_norm),
            "%s: the NaN step is not reported as skipped (nonfinite %d, ranks %d, norm %g)", what,
            st.nonfinite, st.nonfinite_ranks, st.grad_norm);
  float **after = snapshot_views(e);
  int same[TAGC_ENGINE_STREAMS] = {1, 1, 1, 1};
  for (int i = 0; i < n * TAGC_ENGINE_STREAMS; i++)
    same[i % TAGC_ENGINE_STREAMS] &= memcmp(before[i], after[i], cl.unit_numel[i / TAGC_ENGINE_STREAMS] *
                                            sizeof(float)) == 0;
  CHECK_MSG(same[0] && same[1] && same[2] && same[3], "%s: the skipped step changed the state "
            "(param %s, adam_m %s, adam_v %s, residual %s)", what, same[0] ? "same" : "CHANGED",
            same[1] ? "same" : "CHANGED", same[2] ? "same" : "CHANGED", same[3] ? "same" : "CHANGED");
  CHECK_OK(tagc_engine_step(e, &corpus, 2, &st));
  CHECK_MSG(st.nonfinite == 0 && isfinite(st.loss) && isfinite(st.grad_norm),
            "%s: the step after the skipped one is not normal", what);
  float **next = snapshot_views(e);
  int moved = 0;
  for (int i = 0; i < n; i++)
    moved |= memcmp(after[i * TAGC_ENGINE_STREAMS], next[i * TAGC_ENGINE_STREAMS],
                    cl.unit_numel[i] * sizeof(float)) != 0;
  CHECK_MSG(moved, "%s: the step after the skipped one changed no parameter", what);
  printf("  %s: NaN at step 1 skipped (state unchanged), step 2 loss %.6g\n", what, st.loss);
  for (int i = 0; i < n * TAGC_ENGINE_STREAMS; i++) {
    free(before[i]);
    free(after[i]);
    free(next[i]);
  }
  free(before);
  free(after);
  free(next);
  free(ranges);
  tagc_engine_free(e);
}

#ifdef TEST_EMU
/* The codec's tagc sketch path on the device at W = 2 (two processes, Gloo between them:
 * device memory is host memory only under the emulation, so this runs there only): a NaN in
 * rank 1's gradient makes rank 1's reduction report it (stats.nonfinite) instead of sending
 * zeros silently, and once the step is dropped (commit 0) both ranks' residuals are
 * bit-identical to those before it; an applied step (commit 1) changes them. Returns this
 * rank's failures. */
#define CODEC_S 4096
static int codec_rank(int rank, const char *dir) {
  int failed_before = test_failed_;
  tagc_store *store = NULL;
  CHECK_OK(tagc_store_file_new(dir, &store));
  tagc_comm_config cc;
  tagc_comm_config_init(&cc);
  cc.rank = rank;
  cc.world_size = 2;
  cc.store = store;
  cc.prefix = "codec";
  cc.timeout_s = 600;
  tagc_comm *comm = NULL;
  tagc_device *dev = NULL;
  if (store)
    CHECK_OK(tagc_comm_create(&cc, &comm));
  CHECK_OK(tagc_device_open("cuda", TAGC_DEVICE_FP32, &dev));
  if (!comm || !dev)
    return 1;
  tagc_grad_codec_config gc = {dev, comm, 600, 0};
  tagc_grad_codec *c = NULL;
  tagc_grad_segment *seg = NULL;
  tagc_role_policy pol = {TAGC_ENC_BIT(TAGC_ENC_SKETCH) | TAGC_ENC_BIT(TAGC_ENC_BF16), 0, 0.1, 4};
  size_t n = 2 * CODEC_S;
  CHECK_OK(tagc_grad_codec_new(&gc, &c));
  if (c)
    CHECK_OK(tagc_grad_segment_new(c, &pol, n, CODEC_S, 7, &seg));
  float *grad = NULL, *shard = NULL, *work = NULL;
  CHECK_OK(tagc_device_alloc(dev, n * sizeof(float), (void **)&grad));
  CHECK_OK(tagc_device_alloc(dev, CODEC_S * sizeof(float), (void **)&shard));
  CHECK_OK(tagc_device_alloc(dev, n * sizeof(float), (void **)&work));
  float *host = malloc(n * sizeof(float)), *res[3];
  for (int k = 0; k < 3; k++)
    res[k] = malloc(n * sizeof(float));
  if (!seg || !grad || !shard || !work || !host)
    return 1;
  /* the whole [W][S] residual: this rank's shard is row `rank` of it */
  const float *residual = tagc_grad_segment_residual_shard(c, seg) - (size_t)rank * CODEC_S;
  uint64_t x = 99 + (uint64_t)rank;
  for (int step = 0; step < 3; step++) {
    for (size_t i = 0; i < n; i++) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      host[i] = (float)((double)(x >> 40) / (double)(1 << 24) - 0.5);
    }
    if (step == 1 && rank == 1)
      host[5] = NAN;
    tagc_grad_stats gs;
    CHECK_OK(tagc_device_copy(dev, TAGC_LANE_COMM, grad, host, n * sizeof(float), TAGC_COPY_H2D));
    CHECK_OK(tagc_grad_reduce(c, seg, TAGC_LANE_COMM, step, grad, shard, work, &gs));
    CHECK_OK(tagc_device_sync(dev, TAGC_LANE_COMM));
    CHECK_MSG(gs.feedback && gs.encoding == TAGC_ENC_SKETCH, "rank %d step %d: not sent as a sketch", rank, step);
    CHECK_MSG((gs.nonfinite > 0) == (step == 1 && rank == 1),
              "rank %d step %d: the codec reports %lld non-finite values", rank, step,
              (long long)gs.nonfinite);
    CHECK_OK(tagc_grad_segment_commit(c, seg, TAGC_LANE_COMM, step != 1));
    residual = tagc_grad_segment_residual_shard(c, seg) - (size_t)rank * CODEC_S;
    CHECK_OK(tagc_device_copy(dev, TAGC_LANE_COMM, res[step], residual, n * sizeof(float),
                              TAGC_COPY_D2H));
  }
  size_t nonzero = 0;
  for (size_t i = 0; i < n; i++)
    nonzero += res[0][i] != 0;
  CHECK_MSG(nonzero > n / 2, "rank %d: the residual after step 0 is mostly zero (%zu)", rank, nonzero);
  CHECK_MSG(memcmp(res[0], res[1], n * sizeof(float)) == 0,
            "rank %d: the dropped step changed the residual", rank);
  CHECK_MSG(memcmp(res[1], res[2], n * sizeof(float)) != 0,
            "rank %d: the applied step left the residual as it was", rank);
  if (test_failed_ == failed_before)
    printf("  codec rank %d: NaN step reported (rank 1) and dropped, residual bit-identical\n", rank);
  for (int k = 0; k < 3; k++)
    free(res[k]);
  free(host);
  tagc_device_free(dev, grad);
  tagc_device_free(dev, shard);
  tagc_device_free(dev, work);
  tagc_grad_segment_free(c, seg);
  tagc_grad_codec_free(c);
  tagc_comm_destroy(comm);
  tagc_device_close(dev);
  tagc_store_free(store);
  return test_failed_ - failed_before;
}

static void codec_nan_check(void) {
  char dir[300];
  snprintf(dir, sizeof dir, "%s/codec-store", tmp_dir);
  CHECK(mkdir(dir, 0755) == 0);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0)
  {
    int failed = codec_rank(1, dir);
    fflush(stdout);
    _exit(failed ? 1 : 0);
  }
  int mine = codec_rank(0, dir), status = -1;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK_MSG(mine == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "codec check: rank 0 %d failures, rank 1 status %d", mine, status);
}
#endif

static void check_bad_index(void) {
  tagc_device *dev = (tagc_device *)&dev;
  tagc_status st = tagc_device_open("cuda:99", TAGC_DEVICE_FP32, &dev);
  CHECK_MSG(st == TAGC_EINVAL || st == TAGC_EUNSUPPORTED, "cuda:99 gave status %d", (int)st);
  CHECK(dev == NULL);
  printf("  cuda:99: %s\n", tagc_last_error());
}

int main(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    TEST_SKIP("no CUDA device");
  tagc_model_config mc = {.vocab = 256, .ctx = 32, .n_layer = 2, .n_head = 2, .d_model = 64};
  CHECK_OK(tagc_model_layout_init(&layout, &mc));
  const char *base = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/test_engine_gpu.XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(tmp_dir)) {
    perror("mkdtemp");
    return 1;
  }
  char path[300];
  snprintf(path, sizeof path, "%s/corpus.txt", tmp_dir);
  write_corpus(path);
  CHECK_OK(tagc_corpus_load(path, (size_t)mc.ctx + 1, &corpus));
  printf("model: %zu parameters, corpus %zu train / %zu validation bytes\n", layout.n_params,
         corpus.n_train, corpus.n_val);

  double t0 = tagc_now();
  run_result cpu = {0}, gpu = {0}, again = {0}, bf16 = {0};
  tagc_device *cpu_dev = NULL;
  tagc_engine *e = NULL;
  CHECK_OK(tagc_device_open("cpu", TAGC_DEVICE_FP32, &cpu_dev));
  CHECK_OK(train(cpu_dev, &e, &cpu));
  tagc_engine_free(e);
  tagc_device_close(cpu_dev);
  CHECK_MSG(cpu.loss[STEPS - 1] < cpu.loss[0], "the CPU loss did not decrease (%.6g -> %.6g)",
            cpu.loss[0], cpu.loss[STEPS - 1]);
  printf("cpu run: %.2f s\n", tagc_now() - t0);

  device_run(TAGC_DEVICE_FP32, &gpu, 1);
  device_run(TAGC_DEVICE_FP32, &again, 0);
  device_run(TAGC_DEVICE_BF16, &bf16, 0);
  if (gpu.params && cpu.params) {
    printf("device (fp32 compute) against the CPU oracle:\n");
    compare(&gpu, &cpu, (tolerance){1e-4, 1e-4, 1e-4, 1e-3});
  }
  if (bf16.params && cpu.params) {
    printf("device (bf16 compute) against the CPU oracle:\n");
    compare(&bf16, &cpu, (tolerance){1e-3, 1e-2, 3e-2, 0.3});
  }
  if (gpu.params && again.params) {
    int same = memcmp(gpu.params, again.params, layout.n_params * sizeof(float)) == 0 &&
               gpu.val_loss == again.val_loss;
    for (int s = 0; s < STEPS; s++)
      same &= gpu.loss[s] == again.loss[s] && gpu.grad_norm[s] == again.grad_norm[s];
    CHECK_MSG(same, "a second device run is not bit-identical to the first");
  }
  check_bad_index();
  printf("non-finite gradient (fault nan):\n");
  tagc_device *nan_dev = NULL;
  CHECK_OK(tagc_device_open("cpu", TAGC_DEVICE_FP32, &nan_dev));
  if (nan_dev)
    nan_skip_check(nan_dev, "cpu");
  tagc_device_close(nan_dev);
  nan_dev = NULL;
  CHECK_OK(tagc_device_open("cuda", TAGC_DEVICE_FP32, &nan_dev));
  if (nan_dev)
    nan_skip_check(nan_dev, "cuda");
  tagc_device_close(nan_dev);
#ifdef TEST_EMU
  codec_nan_check();
#endif

  free(cpu.params);
  free(gpu.params);
  free(again.params);
  free(bf16.params);
  tagc_corpus_free(&corpus);
  nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return TEST_END();
}
