/* The cost model of `--compress auto` (auto_policy.h). */
#include "engine/auto_policy.h"

#include <math.h>

void tagc_auto_costs(const tagc_auto_input *in, double cost[TAGC_ENC_COUNT]) {
  double n = (double)in->elements, share = (double)(in->world - 1) / (double)in->world;
  double rate = in->link_bytes_per_s;
  cost[TAGC_ENC_FP32] = 4.0 * n * share / rate;
  cost[TAGC_ENC_BF16] = 2.0 * n * share / rate + TAGC_AUTO_BF16_S_PER_ELEMENT * n;
  cost[TAGC_ENC_INT8] = (1.0 + 4.0 / 256.0) * n * share / rate + TAGC_AUTO_Q8_GRAD_S_PER_ELEMENT * n;
  if (!(in->rho >= TAGC_SKETCH_MIN_RHO)) {
    cost[TAGC_ENC_SKETCH] = HUGE_VAL;
    return;
  }
  double codec = in->codec_s > 0 ? in->codec_s : TAGC_AUTO_CODEC_S_PER_ELEMENT * n;
  cost[TAGC_ENC_SKETCH] = (n / 8.0 + 2.0 * n / in->rho) * share / rate + codec;
}

/* The fraction a change must save: TAGC_AUTO_GAIN, doubled for every change from the
 * TAGC_AUTO_MAX_SWITCHES-th on (20 %, 40 %, 80 %, then more than all: no more changes), so a
 * flapping rate flips a segment a bounded number of times. */
static double required_gain(int switches) {
  double gain = TAGC_AUTO_GAIN;
  for (int k = TAGC_AUTO_MAX_SWITCHES; k <= switches && gain <= 1.0; k++)
    gain *= 2;
  return gain;
}

/* The cheapest of the costs, or `current` unless that saves required_gain(switches): the one
 * hysteresis of the gradient wires and the gathers. */
static tagc_encoding pick(const double cost[TAGC_ENC_COUNT], tagc_encoding current, int switches) {
  tagc_encoding best = current;
  for (int m = 0; m < TAGC_ENC_COUNT; m++)
    if (cost[m] < cost[best])
      best = (tagc_encoding)m;
  return cost[best] <= (1.0 - required_gain(switches)) * cost[current] ? best : current;
}

tagc_encoding tagc_auto_choose(const tagc_auto_input *in, tagc_encoding current, int switches) {
  if (!(in->link_bytes_per_s > 0) || in->world < 2 || in->elements < 1)
    return current;
  double cost[TAGC_ENC_COUNT];
  tagc_auto_costs(in, cost);
  return pick(cost, current, switches);
}

double tagc_auto_gather_rate(double link_rate, double gather_bytes, double gather_s) {
  if (link_rate > 0)
    return link_rate;
  if (!(gather_bytes >= TAGC_AUTO_MIN_GATHER_BYTES) || !(gather_s > 0) || !isfinite(gather_s))
    return 0;
  return gather_bytes / gather_s;
}

void tagc_auto_gather_costs(int world, double link_bytes_per_s, double cost[TAGC_ENC_COUNT]) {
  double share = world > 1 ? (double)(world - 1) / (double)world : 0.0;
  cost[TAGC_ENC_SKETCH] = HUGE_VAL;
  cost[TAGC_ENC_FP32] = 4.0 * share / link_bytes_per_s;
  cost[TAGC_ENC_BF16] = 2.0 * share / link_bytes_per_s + TAGC_AUTO_GATHER_BF16_S_PER_ELEMENT;
  cost[TAGC_ENC_INT8] =
      (1.0 + 4.0 / 256.0) * share / link_bytes_per_s + TAGC_AUTO_GATHER_Q8_S_PER_ELEMENT;
}

tagc_encoding tagc_auto_gather_choose(int world, double link_bytes_per_s, tagc_encoding current,
                                      int switches) {
  if (!(link_bytes_per_s > 0) || world < 2)
    return current;
  double cost[TAGC_ENC_COUNT];
  tagc_auto_gather_costs(world, link_bytes_per_s, cost);
  return pick(cost, current, switches);
}

double tagc_auto_gather_budget(double max_gather_bytes, double device_bytes) {
  if (max_gather_bytes > 0)
    return max_gather_bytes;
  return device_bytes > 0 ? TAGC_AUTO_GATHER_MEM_FRACTION * device_bytes : 0;
}

int tagc_auto_keep_gathered(double held_bytes, double budget) {
  return held_bytes > 0 && budget > 0 && held_bytes <= budget;
}
