/* `--compress auto` (engine/auto_policy.h, engine/policy.h): the cost model picks fp32 on a
 * fast link, int8 on a 1 Gbit/s one, the sketch on a slow one when it compresses well (else
 * int8), bf16 when conversions cost more than the bytes they save; unknown rates change
 * nothing; hysteresis and the switch budget stop oscillation; the spec parser makes tagc roles
 * adaptive and --gather auto follows the policy; --reshard-after-forward auto keeps gathered
 * units exactly when they fit the memory budget; --gather auto gathers int8 on a slow link,
 * bf16 around 1 GB/s and fp32 on a fast one, with the same hysteresis, and where no exchange is
 * large enough for the communicator to measure the link (a small model) from the rate the
 * gathers themselves carried. */
#include <math.h>
#include <string.h>

#include "test.h"
#include "engine/auto_policy.h"
#include "engine/policy.h"

static tagc_auto_input seg(double rate, double rho, double codec_s) {
  return (tagc_auto_input){.elements = 524288, .world = 2, .link_bytes_per_s = rate, .rho = rho,
                           .codec_s = codec_s};
}

static void test_choices(void) {
  tagc_auto_input fast = seg(3e9, 2.0, 4e-3), gbit = seg(125e6, 2.0, 4e-3), slow = seg(12.5e6, 4.0, 4e-3);
  CHECK_EQ_INT(tagc_auto_choose(&fast, TAGC_ENC_BF16, 0), TAGC_ENC_FP32);
  CHECK_EQ_INT(tagc_auto_choose(&fast, TAGC_ENC_SKETCH, 0), TAGC_ENC_FP32);
  CHECK_EQ_INT(tagc_auto_choose(&fast, TAGC_ENC_INT8, 0), TAGC_ENC_FP32);
  CHECK_EQ_INT(tagc_auto_choose(&gbit, TAGC_ENC_FP32, 0), TAGC_ENC_INT8);
  CHECK_EQ_INT(tagc_auto_choose(&slow, TAGC_ENC_BF16, 0), TAGC_ENC_SKETCH);
  CHECK_EQ_INT(tagc_auto_choose(&slow, TAGC_ENC_FP32, 0), TAGC_ENC_SKETCH);
  CHECK_EQ_INT(tagc_auto_choose(&slow, TAGC_ENC_INT8, 0), TAGC_ENC_SKETCH);
  /* at rho 2 the sketch sends more bytes than int8 (1.125 vs 1.016 per element) */
  tagc_auto_input slow2 = seg(12.5e6, 2.0, 4e-3);
  CHECK_EQ_INT(tagc_auto_choose(&slow2, TAGC_ENC_BF16, 0), TAGC_ENC_INT8);
  /* between fast and 1 Gbit/s: the fused int8 wire (0.6 ns per element) beats fp32 and bf16;
   * fp32 wins again above about 2.5 GB/s at W = 2 */
  tagc_auto_input mid = seg(500e6, 0, 0);
  CHECK_EQ_INT(tagc_auto_choose(&mid, TAGC_ENC_FP32, 0), TAGC_ENC_INT8);
  CHECK_EQ_INT(tagc_auto_choose(&mid, TAGC_ENC_BF16, 0), TAGC_ENC_INT8);
  tagc_auto_input above = seg(2.6e9, 0, 0);
  double c_above[TAGC_ENC_COUNT];
  tagc_auto_costs(&above, c_above);
  CHECK(c_above[TAGC_ENC_FP32] < c_above[TAGC_ENC_INT8]);
  /* a sketch that does not compress is no candidate, however slow the link */
  tagc_auto_input dense = seg(12.5e6, 0, 1e-3);
  CHECK_EQ_INT(tagc_auto_choose(&dense, TAGC_ENC_SKETCH, 0), TAGC_ENC_INT8);
  double cost[TAGC_ENC_COUNT];
  tagc_auto_costs(&dense, cost);
  CHECK(isinf(cost[TAGC_ENC_SKETCH]));
  /* an unknown link rate keeps what is there */
  tagc_auto_input unknown = seg(0, 4.0, 1e-3);
  CHECK_EQ_INT(tagc_auto_choose(&unknown, TAGC_ENC_FP32, 0), TAGC_ENC_FP32);
  /* the costs follow the documented formulas */
  tagc_auto_costs(&slow, cost);
  double n = 524288, share = 0.5;
  CHECK_NEAR(cost[TAGC_ENC_FP32], 4 * n * share / 12.5e6, 1e-12);
  CHECK_NEAR(cost[TAGC_ENC_BF16], 2 * n * share / 12.5e6 + TAGC_AUTO_BF16_S_PER_ELEMENT * n, 1e-12);
  CHECK_NEAR(cost[TAGC_ENC_INT8], (1 + 4.0 / 256) * n * share / 12.5e6 + TAGC_AUTO_Q8_GRAD_S_PER_ELEMENT * n,
             1e-12);
  CHECK_NEAR(cost[TAGC_ENC_SKETCH], (n / 8 + n / 2) * share / 12.5e6 + 4e-3, 1e-12);
  CHECK_EQ_STR(tagc_encoding_name(TAGC_ENC_INT8), "int8");
}

static void test_hysteresis(void) {
  /* sketch vs int8 within the gain: no change in either direction */
  double n = 524288, share = 0.5, rate = 12.5e6;
  double int8 = (1 + 4.0 / 256) * n * share / rate + TAGC_AUTO_Q8_GRAD_S_PER_ELEMENT * n;
  double wire_sketch = (n / 8 + 2 * n / 4.0) * share / rate;
  double codec = 0.95 * int8 - wire_sketch; /* sketch 5% cheaper: below the 10% gain */
  tagc_auto_input close = seg(rate, 4.0, codec);
  CHECK_EQ_INT(tagc_auto_choose(&close, TAGC_ENC_INT8, 0), TAGC_ENC_INT8);
  CHECK_EQ_INT(tagc_auto_choose(&close, TAGC_ENC_SKETCH, 0), TAGC_ENC_SKETCH);
  /* 15% cheaper: changes while the switch budget lasts, not after it (needs 20%) */
  close.codec_s = 0.85 * int8 - wire_sketch;
  CHECK_EQ_INT(tagc_auto_choose(&close, TAGC_ENC_INT8, 0), TAGC_ENC_SKETCH);
  CHECK_EQ_INT(tagc_auto_choose(&close, TAGC_ENC_INT8, TAGC_AUTO_MAX_SWITCHES), TAGC_ENC_INT8);
  /* a rate flapping between two links cannot flip a segment more than the budget allows */
  tagc_encoding m = TAGC_ENC_BF16;
  int switches = 0;
  for (int k = 0; k < 40; k++) {
    tagc_auto_input in = seg(k % 2 ? 12.5e6 : 60e6, 4.0, 4e-3); /* sketch 23%, int8 18% cheaper */
    tagc_encoding next = tagc_auto_choose(&in, m, switches);
    switches += next != m;
    m = next;
  }
  CHECK(switches <= TAGC_AUTO_MAX_SWITCHES + 1);
  /* even a rate flapping between a slow and a very fast link (gains of 70-95 %) stops:
   * from the budget on each change doubles the gain needed */
  m = TAGC_ENC_FP32;
  switches = 0;
  for (int k = 0; k < 40; k++) {
    tagc_auto_input in = seg(k % 2 ? 12.5e6 : 20e9, 4.0, 4e-4);
    tagc_encoding next = tagc_auto_choose(&in, m, switches);
    switches += next != m;
    m = next;
  }
  CHECK(switches >= TAGC_AUTO_MAX_SWITCHES && switches <= TAGC_AUTO_MAX_SWITCHES + 3);
}

static void test_policy_spec(void) {
  tagc_compress_policy p;
  CHECK_OK(tagc_policy_parse("auto", &p));
  CHECK(p.role[TAGC_ROLE_MLP_FC].encodings == TAGC_ENC_ALL && p.role[TAGC_ROLE_MLP_FC].adaptive);
  CHECK_EQ_STR(tagc_role_policy_name(&p.role[TAGC_ROLE_MLP_FC]), "tagc");
  CHECK_NEAR(p.role[TAGC_ROLE_MLP_FC].density, TAGC_AUTO_DENSITY, 0);
  /* norms choose among the dense wires like attention, with attention's policy: a block's
   * ln1, attention and ln2 are one segment */
  CHECK(p.role[TAGC_ROLE_NORM].encodings == TAGC_ENC_DENSE && p.role[TAGC_ROLE_NORM].adaptive &&
        tagc_role_policy_feeds_back(&p.role[TAGC_ROLE_NORM]));
  CHECK(tagc_role_policy_equal(&p.role[TAGC_ROLE_NORM], &p.role[TAGC_ROLE_ATTN_QKV]));
  CHECK_OK(tagc_policy_parse("auto,norm=none", &p));
  CHECK(p.role[TAGC_ROLE_NORM].encodings == TAGC_ENC_BIT(TAGC_ENC_FP32) && !p.role[TAGC_ROLE_NORM].adaptive);
  CHECK_EQ_STR(tagc_role_policy_name(&p.role[TAGC_ROLE_NORM]), "none");
  CHECK(!tagc_role_policy_feeds_back(&p.role[TAGC_ROLE_NORM]));
  CHECK(tagc_role_policy_sketches(&p.role[TAGC_ROLE_MLP_FC]));
  /* the preset's bf16 attention roles choose among the dense wires only */
  CHECK(p.role[TAGC_ROLE_ATTN_QKV].adaptive && !tagc_role_policy_sketches(&p.role[TAGC_ROLE_ATTN_QKV]));
  CHECK(p.role[TAGC_ROLE_ATTN_PROJ].adaptive && !tagc_role_policy_sketches(&p.role[TAGC_ROLE_ATTN_PROJ]));
  CHECK_EQ_INT(tagc_role_policy_start(&p.role[TAGC_ROLE_ATTN_PROJ]), TAGC_ENC_BF16);
  CHECK(!tagc_role_policy_equal(&p.role[TAGC_ROLE_ATTN_PROJ], &p.role[TAGC_ROLE_MLP_PROJ]));
  CHECK_OK(tagc_policy_parse("auto,attn=auto", &p));
  CHECK(p.role[TAGC_ROLE_ATTN_QKV].adaptive && tagc_role_policy_sketches(&p.role[TAGC_ROLE_ATTN_QKV]));
  CHECK_OK(tagc_policy_parse("tagc,mlp=auto", &p));
  CHECK(p.role[TAGC_ROLE_MLP_PROJ].adaptive && !p.role[TAGC_ROLE_TOK_EMB].adaptive);
  CHECK_NEAR(p.role[TAGC_ROLE_MLP_PROJ].density, TAGC_AUTO_DENSITY, 0);
  CHECK_NEAR(p.role[TAGC_ROLE_TOK_EMB].density, TAGC_DEFAULT_DENSITY, 0);
  CHECK(!tagc_role_policy_equal(&p.role[TAGC_ROLE_MLP_PROJ], &p.role[TAGC_ROLE_TOK_EMB]));
  CHECK_EQ_INT(tagc_policy_parse("tagc,auto", &p), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_policy_parse("automatic", &p), TAGC_EINVAL);
  /* the fixed rules: tagc sketches (bf16 where the sketch would not pay), bf16 and none are
   * one dense encoding each */
  CHECK_OK(tagc_policy_parse("tagc", &p));
  CHECK_EQ_INT(tagc_role_policy_start(&p.role[TAGC_ROLE_MLP_FC]), TAGC_ENC_SKETCH);
  CHECK_EQ_STR(tagc_role_policy_name(&p.role[TAGC_ROLE_MLP_FC]), "tagc");
  CHECK_EQ_STR(tagc_role_policy_name(&p.role[TAGC_ROLE_ATTN_QKV]), "bf16");
  CHECK_EQ_INT(tagc_role_policy_start(&p.role[TAGC_ROLE_ATTN_QKV]), TAGC_ENC_BF16);
  CHECK(!tagc_role_policy_feeds_back(&p.role[TAGC_ROLE_ATTN_QKV]));
  /* --gather auto: bf16 when any role is compressed, fp32 for the baseline; adaptive only over
   * adaptive roles */
  tagc_encoding g;
  int adaptive;
  CHECK_OK(tagc_policy_parse("none", &p));
  CHECK_OK(tagc_policy_gather("auto", &p, &g, &adaptive));
  CHECK(g == TAGC_ENC_FP32 && !adaptive);
  CHECK_OK(tagc_policy_gather("bf16", &p, &g, &adaptive));
  CHECK(g == TAGC_ENC_BF16 && !adaptive);
  CHECK_OK(tagc_policy_gather("int8", &p, &g, &adaptive));
  CHECK(g == TAGC_ENC_INT8 && !adaptive);
  CHECK_EQ_INT(tagc_policy_gather("sketch", &p, &g, &adaptive), TAGC_EINVAL);
  CHECK_OK(tagc_policy_parse("tagc", &p));
  CHECK_OK(tagc_policy_gather("auto", &p, &g, &adaptive));
  CHECK(g == TAGC_ENC_BF16 && !adaptive);
  CHECK_OK(tagc_policy_parse("auto", &p));
  CHECK_OK(tagc_policy_gather("auto", &p, &g, &adaptive));
  CHECK(g == TAGC_ENC_BF16 && adaptive);
  CHECK_OK(tagc_policy_gather("fp32", &p, &g, &adaptive));
  CHECK(g == TAGC_ENC_FP32 && !adaptive);
  /* the vocabulary's names, and a name outside the allowed set */
  for (int e = 0; e < TAGC_ENC_COUNT; e++) {
    CHECK_OK(tagc_encoding_parse(tagc_encoding_name((tagc_encoding)e), TAGC_ENC_ALL, "x", &g));
    CHECK_EQ_INT(g, e);
  }
  CHECK_EQ_INT(tagc_encoding_parse("sketch", TAGC_ENC_DENSE, "--gather", &g), TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "bf16|fp32|int8") != NULL);
  /* the tagc density is a union target: each rank keeps less as W grows */
  CHECK_NEAR(tagc_policy_rank_density(0.2, 1), 0.2, 1e-12);
  CHECK_NEAR(1 - pow(1 - tagc_policy_rank_density(0.2, 4), 4), 0.2, 1e-12);
  CHECK(tagc_policy_rank_density(0.2, 8) < tagc_policy_rank_density(0.2, 2));
  /* --compress-warmup -1: the larger of the lr warm-up and a fifth of the run */
  CHECK_EQ_INT(tagc_compress_warmup_auto(20, 1000), 200);
  CHECK_EQ_INT(tagc_compress_warmup_auto(20, 60), 20);
  CHECK_EQ_INT(tagc_compress_warmup_auto(2000, 600000), 120000);
  CHECK_EQ_INT(tagc_compress_warmup_auto(0, 4), 0);
}

static void test_reshard_budget(void) {
  /* the budget: the configured bytes, else an eighth of the device's memory, else none */
  CHECK_NEAR(tagc_auto_gather_budget(64e6, 8e9), 64e6, 1e-6);
  CHECK_NEAR(tagc_auto_gather_budget(0, 8e9), TAGC_AUTO_GATHER_MEM_FRACTION * 8e9, 1e-6);
  CHECK_NEAR(tagc_auto_gather_budget(0, 0), 0, 0);
  /* keep every gathered unit exactly when it fits; nothing fits an unknown budget */
  CHECK_EQ_INT(tagc_auto_keep_gathered(13.3e6, 64e6), 1);
  CHECK_EQ_INT(tagc_auto_keep_gathered(64e6, 64e6), 1);
  CHECK_EQ_INT(tagc_auto_keep_gathered(65e6, 64e6), 0);
  CHECK_EQ_INT(tagc_auto_keep_gathered(13.3e6, 0), 0);
}

static void test_gather_choices(void) {
  /* W = 2, from the start (bf16): per element fp32 4/2/B, bf16 2/2/B + 0.5 ns, int8
   * 1.016/2/B + 1 ns */
  CHECK_EQ_INT(tagc_auto_gather_choose(2, 12.5e6, TAGC_ENC_BF16, 0), TAGC_ENC_INT8);
  CHECK_EQ_INT(tagc_auto_gather_choose(2, 1e9, TAGC_ENC_BF16, 0), TAGC_ENC_BF16);
  CHECK_EQ_INT(tagc_auto_gather_choose(2, 5e9, TAGC_ENC_BF16, 0), TAGC_ENC_FP32);
  CHECK_EQ_INT(tagc_auto_gather_choose(2, 20e9, TAGC_ENC_INT8, 0), TAGC_ENC_FP32);
  CHECK_EQ_INT(tagc_auto_gather_choose(2, 12.5e6, TAGC_ENC_FP32, 0), TAGC_ENC_INT8);
  /* near the fp32/bf16 crossing (2 GB/s) neither is 10 % cheaper: no change either way */
  CHECK_EQ_INT(tagc_auto_gather_choose(2, 2.2e9, TAGC_ENC_BF16, 0), TAGC_ENC_BF16);
  CHECK_EQ_INT(tagc_auto_gather_choose(2, 2.2e9, TAGC_ENC_FP32, 0), TAGC_ENC_FP32);
  /* unknown rate or no peers: as it is */
  CHECK_EQ_INT(tagc_auto_gather_choose(2, 0, TAGC_ENC_BF16, 0), TAGC_ENC_BF16);
  CHECK_EQ_INT(tagc_auto_gather_choose(1, 20e9, TAGC_ENC_BF16, 0), TAGC_ENC_BF16);
  /* the switch budget: past it even a large gain changes nothing */
  CHECK_EQ_INT(tagc_auto_gather_choose(2, 20e9, TAGC_ENC_INT8, 7), TAGC_ENC_INT8);
  double cost[TAGC_ENC_COUNT];
  tagc_auto_gather_costs(2, 5e9, cost);
  CHECK_NEAR(cost[TAGC_ENC_FP32], 0.4e-9, 1e-15);
  CHECK_NEAR(cost[TAGC_ENC_BF16], 0.7e-9, 1e-15);
}

static void test_gather_measured_rate(void) {
  /* L=4 C=128 T=64 (0.83 M parameters), W=2, 100 Mbit/s: no exchange reaches the
   * communicator's 256 KiB, so the shared link rate stays unknown, and the rule of the link
   * rate alone kept the bf16 gathers (1.76 MB per step, 169 ms against 132 ms with int8) */
  CHECK_EQ_INT(tagc_auto_gather_choose(2, 0, TAGC_ENC_BF16, 0), TAGC_ENC_BF16);
  /* its step-1 gathers received 1.716 MB in 188.8 ms on rank 0: 9.1 MB/s, int8 */
  double slow = tagc_auto_gather_rate(0, 1.716e6, 0.1888);
  CHECK_NEAR(slow, 1.716e6 / 0.1888, 1e-6);
  CHECK_EQ_INT(tagc_auto_gather_choose(2, slow, TAGC_ENC_BF16, 0), TAGC_ENC_INT8);
  /* unlimited veth, same model: 1.716 MB in 32.1 ms on the slower rank (53.4 MB/s: each
   * 200 KB all-gather is mostly latency and the wait for the peer): int8 too, where int8
   * gathers ran 41-43 ms a step and fp32 ones 47 ms; the three encodings make the same
   * exchanges, so the latency is the same for all and only the bytes differ */
  double unlimited = tagc_auto_gather_rate(0, 1.716e6, 0.0321);
  CHECK(unlimited > 50e6 && unlimited < 55e6);
  CHECK_EQ_INT(tagc_auto_gather_choose(2, unlimited, TAGC_ENC_BF16, 0), TAGC_ENC_INT8);
  /* the wires of that model's adaptive segments, priced with the same measured rate among the
   * dense wires (rho 0): an MLP segment (131072 elements) and a block's attention with its
   * norms (about 66 K) leave their starting bf16 for int8 on both links */
  tagc_auto_input mlp = {.elements = 131072, .world = 2, .link_bytes_per_s = slow, .rho = 0};
  tagc_auto_input attn = {.elements = 66560, .world = 2, .link_bytes_per_s = unlimited, .rho = 0};
  CHECK_EQ_INT(tagc_auto_choose(&mlp, TAGC_ENC_BF16, 0), TAGC_ENC_INT8);
  CHECK_EQ_INT(tagc_auto_choose(&attn, TAGC_ENC_BF16, 0), TAGC_ENC_INT8);
  /* with the advisor's rho (6.0 there) the sketch would look cheaper than int8 at that rate:
   * 4.6 against 7.4 ms at 9.1 MB/s, where its extra exchanges made tagc/int8/false steps 2-2.5x
   * as long as bf16/int8/false ones, hence rho 0 for a rate the gathers measured */
  mlp.rho = 6.0;
  CHECK_EQ_INT(tagc_auto_choose(&mlp, TAGC_ENC_BF16, 0), TAGC_ENC_SKETCH);
  /* a known shared link rate wins over the gathers' own figure (the 3.3 M bench model's
   * exchanges are measured by the communicator) */
  CHECK_NEAR(tagc_auto_gather_rate(5e9, 1.716e6, 0.1888), 5e9, 0);
  CHECK_EQ_INT(tagc_auto_gather_choose(2, tagc_auto_gather_rate(5e9, 1.716e6, 0.1888), TAGC_ENC_BF16, 0),
               TAGC_ENC_FP32);
  /* too few bytes to tell bandwidth from latency, or no time: unknown, nothing changes */
  CHECK_NEAR(tagc_auto_gather_rate(0, TAGC_AUTO_MIN_GATHER_BYTES - 1, 1e-3), 0, 0);
  CHECK_NEAR(tagc_auto_gather_rate(0, 1.716e6, 0), 0, 0);
  CHECK_NEAR(tagc_auto_gather_rate(0, 1.716e6, HUGE_VAL), 0, 0);
  CHECK_NEAR(tagc_auto_gather_rate(0, 0, 0), 0, 0);
  CHECK_EQ_INT(tagc_auto_gather_choose(2, tagc_auto_gather_rate(0, 1e3, 1e-3), TAGC_ENC_BF16, 0),
               TAGC_ENC_BF16);
}

int main(void) {
  test_choices();
  test_gather_choices();
  test_gather_measured_rate();
  test_reshard_budget();
  test_hysteresis();
  test_policy_spec();
  return TEST_END();
}
