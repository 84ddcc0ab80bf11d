/* The engine's adaptive decisions (engine_internal.h): the compression warm-up, `--compress
 * auto`'s wires and `--gather auto`'s encoding, `--reshard-after-forward auto`, and the
 * density bookkeeping the codec's rho and `auto` decide from. Every decision is made from
 * figures all ranks share (the step's reduced scalars, the step number, the gathers' measured
 * rate agreed at the decision steps), so all ranks make the same one; the costs and budgets
 * are auto_policy.h's pure functions. Compute thread, between or after the step's
 * communication. */
#include <math.h>
#include <unistd.h>

#include "common/log.h"
#include "engine/auto_policy.h"
#include "engine/codec_params.h"
#include "engine/engine_internal.h"

/* Bytes the slots hold when every unit stays gathered for the step. */
static double held_all_bytes(const tagc_engine *e) {
  return (double)e->L->n_units * (double)e->max_unit * sizeof(float);
}

/* The budget of reshard_auto (auto_policy.h): the configured one, else a fraction of the GPU's
 * memory or of the host's physical RAM. */
static double gather_budget(const tagc_engine *e) {
  tagc_device_info info;
  tagc_device_get_info(e->dev, &info);
  double mem = (double)info.total_bytes;
  if (!(mem > 0)) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    mem = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
  }
  return tagc_auto_gather_budget(e->cfg.max_gather_bytes, mem);
}

/* reshard_auto: allocates a slot per unit when all of them fit the budget, so that the first
 * step can report whether this rank could stop resharding. An allocation failure only means
 * it cannot (the buffers are released). */
void engine_prepare_hold_all(tagc_engine *e) {
  if (!tagc_auto_keep_gathered(held_all_bytes(e), gather_budget(e)))
    return;
  if (engine_grow_slots(e, e->L->n_units) != TAGC_OK) {
    LOG_DEBUG("engine", "keeping every gathered unit: %s", tagc_last_error());
    engine_shrink_slots(e, ENGINE_ROLLING_SLOTS);
  }
}

/* reshard_auto, once, from the first step's figures that all ranks share: stop resharding when
 * every rank holds a slot per unit, else release the extra slots. Rank 0 logs the reason. */
void engine_choose_reshard(tagc_engine *e, int64_t step, double cannot_hold) {
  if (!e->reshard_adaptive)
    return;
  e->reshard_adaptive = 0;
  double held = held_all_bytes(e), budget = gather_budget(e);
  if (cannot_hold == 0) {
    e->reshard = 0;
    e->n_slots = e->L->n_units;
    if (e->rank == 0)
      LOG_INFO("engine", "auto: step %lld, reshard after forward: true -> false (every gathered "
               "unit held, %.1f MB within the budget %.1f MB on every rank: one all-gather per "
               "unit and step instead of two)", (long long)step + 1, held / 1e6, budget / 1e6);
    return;
  }
  engine_shrink_slots(e, ENGINE_ROLLING_SLOTS);
  if (e->rank == 0)
    LOG_INFO("engine", "auto: step %lld, reshard after forward stays true (%d rank(s) cannot hold "
             "every gathered unit: %.1f MB against a budget of %.1f MB here, --max-gather-mem)",
             (long long)step + 1, (int)cannot_hold, held / 1e6, budget / 1e6);
}

/* The gathers' link rate (auto_policy.h tagc_auto_gather_rate), the slowest rank's: the shared
 * link rate when known, else each rank's gathers' own figure since the last decision, agreed
 * in one all-gather of a double (collective: every rank calls it at the same steps; the comm
 * thread is idle after the step's drain). */
static tagc_status agreed_gather_rate(tagc_engine *e, double link_rate, double *rate) {
  double bytes, seconds;
  tagc_gather_codec_take_wire(e->gathers, &bytes, &seconds);
  *rate = tagc_auto_gather_rate(link_rate, bytes, seconds);
  LOG_DEBUG("engine", "step %lld: the parameter gathers received %.3f MB in %.1f ms",
            (long long)e->step_now + 1, bytes / 1e6, 1e3 * seconds);
  if (link_rate > 0)
    return TAGC_OK;
  double *all = e->scalars_all; /* free once the step's scalars are reduced */
  TAGC_CHECK(tagc_device_allgather_host(e->dev, e->cfg.comm, rate, all, sizeof *rate, e->xfer,
                                        e->cfg.op_timeout_s));
  for (int r = 0; r < e->world; r++)
    *rate = fmin(*rate, all[r]);
  return TAGC_OK;
}

/* Every adaptive segment takes the wire auto_policy.h predicts cheapest at link_rate; only a
 * dense one when the rate is the gathers' (`measured`, auto_policy.h tagc_auto_gather_rate:
 * its latency would hide the exchanges the sketch adds). */
static void choose_segment_wires(tagc_engine *e, int64_t step, double link_rate, int measured) {
  int warm = step + 1 < e->cfg.compress_warmup; /* the next step is in the compression warm-up */
  int moved[TAGC_ENC_COUNT][TAGC_ENC_COUNT] = {{0}}, n_moved = 0;
  double before_ms = 0, after_ms = 0;
  for (int i = 0; i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    if (!s->pol.adaptive)
      continue;
    tagc_auto_input in = {(int64_t)s->len, e->world, link_rate,
                          measured ? 0 : tagc_grad_segment_advised_rho(s->codec), s->codec_s};
    tagc_encoding now = tagc_grad_segment_encoding(s->codec);
    tagc_encoding next = tagc_auto_choose(&in, now, s->switches);
    /* through the warm-up only the wires without error feedback: fp32 and bf16 */
    if (next == now || (warm && (next == TAGC_ENC_SKETCH || next == TAGC_ENC_INT8)))
      continue;
    double cost[TAGC_ENC_COUNT];
    tagc_auto_costs(&in, cost);
    if (e->rank == 0)
      LOG_DEBUG("engine", "auto: step %lld, %s: %s -> %s (link %.1f MB/s%s, rho %.2f, codec %.2f "
                "ms; predicted %.2f -> %.2f ms per step)", (long long)step + 1, s->name,
                tagc_encoding_name(now), tagc_encoding_name(next), link_rate / 1e6,
                measured ? " measured by the gathers" : "", in.rho, 1e3 * (s->codec_s),
                1e3 * cost[now], 1e3 * cost[next]);
    moved[now][next]++;
    n_moved++;
    before_ms += 1e3 * cost[now];
    after_ms += 1e3 * cost[next];
    tagc_grad_segment_set_encoding(s->codec, next);
    s->switches++;
  }
  if (!n_moved || e->rank != 0)
    return;
  /* one line per decision: how many segments moved from which wire to which (each segment's
   * own figures at debug level, subsystem engine) */
  char what[256] = "";
  size_t used = 0;
  for (int a = 0; a < TAGC_ENC_COUNT; a++)
    for (int b = 0; b < TAGC_ENC_COUNT; b++)
      if (moved[a][b] && used < sizeof what)
        used += (size_t)snprintf(what + used, sizeof what - used, "%s%d %s -> %s",
                                 used ? ", " : "", moved[a][b], tagc_encoding_name((tagc_encoding)a),
                                 tagc_encoding_name((tagc_encoding)b));
  LOG_INFO("engine", "auto: step %lld, %d segment wire%s changed (%s; link %.1f MB/s%s; predicted "
           "%.2f -> %.2f ms per step for them)", (long long)step + 1, n_moved,
           n_moved == 1 ? "" : "s", what, link_rate / 1e6,
           measured ? " measured by the gathers" : "", before_ms, after_ms);
}

/* The gathers' encoding auto_policy.h predicts cheapest at `rate`. */
static void choose_gathers(tagc_engine *e, int64_t step, double link_rate, double rate) {
  tagc_encoding next = tagc_auto_gather_choose(e->world, rate, e->gather, e->gather_switches);
  if (next == e->gather)
    return;
  double cost[TAGC_ENC_COUNT];
  tagc_auto_gather_costs(e->world, rate, cost);
  if (e->rank == 0)
    LOG_INFO("engine", "auto: step %lld, parameter gathers: %s -> %s (link %.1f MB/s%s; "
             "predicted %.3f -> %.3f ns per gathered element)", (long long)step + 1,
             tagc_encoding_name(e->gather), tagc_encoding_name(next), rate / 1e6,
             link_rate > 0 ? "" : ", measured by the gathers", 1e9 * cost[e->gather],
             1e9 * cost[next]);
  e->gather = next;
  e->gather_switches++;
}

/* `--compress auto`: at the first step with a known link rate (so short runs benefit), then
 * after each density probe (every TAGC_PROBE_EVERY steps), every adaptive segment takes the wire
 * auto_policy.h predicts cheapest, from figures all ranks share (the slowest link, the largest
 * codec time, the agreed density), so all ranks choose the same; `--gather auto` re-chooses the
 * gathers at the same steps. Where the link rate is unknown (no exchange large enough: a small
 * model) both are priced with the gathers' own rate at step 1 and after each probe, the
 * segments among the dense wires only. Rank 0 logs each change with its reason. */
tagc_status engine_choose_wires(tagc_engine *e, int64_t step, double link_rate) {
  int due = step % TAGC_PROBE_EVERY == 0 || step + 1 == e->cfg.compress_warmup;
  if (e->auto_decided && !due)
    return TAGC_OK;
  double rate = link_rate;
  if (link_rate > 0 || due)
    TAGC_CHECK(agreed_gather_rate(e, link_rate, &rate));
  if (!(rate > 0))
    return TAGC_OK;
  e->auto_decided = 1;
  choose_segment_wires(e, step, rate, !(link_rate > 0));
  if (e->gather_adaptive)
    choose_gathers(e, step, link_rate, rate);
  return TAGC_OK;
}

/* The compression warm-up (cfg.compress_warmup): a fixed tagc segment sends dense bf16 (its
 * residual stays zero) before it ends and the sketch from then on, decided by the step alone
 * (a resumed run does the same). Adaptive segments are held dense by choose_wires. At the
 * first step after the warm-up every sketching segment forgets the density its last probe saw
 * (up to 16 steps old, of gradients without residual), so that step is a lossless probe and
 * the next ones are sized from it (with the stale figure, 300 steps of train_tagc's C=256
 * model left 9 elements to the estimate just after a 60-step warm-up). */
void engine_warmup_wires(tagc_engine *e, int64_t step) {
  if (e->world < 2)
    return;
  tagc_encoding want = step < e->cfg.compress_warmup ? TAGC_ENC_BF16 : TAGC_ENC_SKETCH;
  int started = 0;
  for (int i = 0; i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    if (!tagc_role_policy_feeds_back(&s->pol))
      continue;
    if (!s->pol.adaptive && tagc_grad_segment_encoding(s->codec) != want) {
      tagc_grad_segment_set_encoding(s->codec, want);
      started += want == TAGC_ENC_SKETCH;
    }
    if (step > 0 && (step == e->cfg.compress_warmup || step == e->cfg.compress_warmup + 1) &&
        tagc_grad_segment_encoding(s->codec) == TAGC_ENC_SKETCH)
      tagc_grad_segment_set_density_seen(s->codec, 0);
  }
  if (started && step > 0 && e->rank == 0)
    LOG_INFO("engine", "step %lld: the compression warm-up (%lld steps) is over: %d tagc "
             "segments sketch from now on", (long long)step + 1,
             (long long)e->cfg.compress_warmup, started);
}

/* Records the global density of each tagc segment (all ranks see the same sums, so they
 * all choose the same rho next step) and the step's compression figures. */
void engine_update_density(tagc_engine *e, tagc_step_stats *stats) {
  const tagc_step_scalars *x = &e->scalars;
  double bits = 0, elements = 0, rho = 0, tagc_len = 0, all = 0, path[TAGC_ENC_COUNT] = {0};
  for (int i = 0; i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    all += (double)s->len;
    if (!s->step.feedback) { /* a fixed dense policy (or no peers) */
      int bf16 = s->pol.encodings == TAGC_ENC_BIT(TAGC_ENC_BF16);
      path[bf16 ? TAGC_ENC_BF16 : TAGC_ENC_FP32] += (double)s->len;
      continue;
    }
    path[s->step.encoding] += (double)s->len;
    if (s->step.encoding == TAGC_ENC_SKETCH && s->step.rho >= TAGC_SKETCH_MIN_RHO)
      s->codec_s = x->codec_s[i]; /* not a lossless probe's */
    tagc_len += (double)s->len;
    if (s->step.encoding != TAGC_ENC_SKETCH)
      continue; /* sent dense: nothing measured */
    tagc_grad_segment_set_density_seen(s->codec, x->lane_density[i]);
    bits += x->global_bits[i];
    elements += (double)s->len;
    rho += s->step.rho * (double)s->len;
  }
  stats->global_density = elements > 0 ? bits / elements : 0;
  stats->rho = elements > 0 ? rho / elements : 0;
  stats->sketch_coverage = tagc_len > 0 ? elements / tagc_len : 0;
  for (int m = 0; m < TAGC_ENC_COUNT; m++)
    stats->path_fraction[m] = all > 0 ? path[m] / all : 0;
  stats->gather = tagc_encoding_name(e->gather);
  stats->unpeeled = (uint64_t)x->estimated;
  if (x->fb_abs > 0)
    stats->feedback_error = fabs(x->fb_in - x->fb_out) / x->fb_abs;
  stats->tagc_elements = (uint64_t)bits;
}

