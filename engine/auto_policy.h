/* `--compress auto`: which wire an adaptive gradient segment uses, from what the ranks
 * measured (pure functions; the engine feeds them and applies the result).
 *
 * Per segment of n elements on W ranks and per step, the predicted cost of each wire is
 *   fp32    4 n (W-1)/W bytes / link rate
 *   bf16    2 n (W-1)/W bytes / link rate + TAGC_AUTO_BF16_S_PER_ELEMENT * n (conversions)
 *   int8    (1 + 4/256) n (W-1)/W bytes / link rate + TAGC_AUTO_Q8_GRAD_S_PER_ELEMENT * n
 *           (blockwise int8 of kernels/q8.h, all-to-all; error feedback keeps what rounding
 *           lost)
 *   sketch  (n/8 + 2 n / rho) (W-1)/W bytes / link rate + the codec's measured seconds
 *           (sparsify + encode + decode; until measured, TAGC_AUTO_CODEC_S_PER_ELEMENT * n)
 * with the slowest rank's link rate (comm/deadline.c measures it) and the largest codec time
 * over ranks, so every rank computes the same choice. The sketch is a candidate only when the
 * advisor's rho makes it pay (rho >= TAGC_SKETCH_MIN_RHO, engine/codec_params.h). The dense
 * wires fold the residual in. A segment changes wire only when the new one is
 * predicted at least TAGC_AUTO_GAIN cheaper (hysteresis), and from its TAGC_AUTO_MAX_SWITCHES-th
 * change on each change doubles the gain needed (20 %, 40 %, 80 %, then none is possible), so
 * it cannot oscillate: at most TAGC_AUTO_MAX_SWITCHES + 3 changes. The link is not free when the
 * transfer overlaps compute (two cores here: the codec competes with the model), so the model
 * charges both terms in full. */
#ifndef TAGC_ENGINE_AUTO_POLICY_H
#define TAGC_ENGINE_AUTO_POLICY_H

#include <stdint.h>

#include "common/encoding.h"
#include "engine/codec_params.h"

#define TAGC_AUTO_GAIN 0.1               /* a change must save this fraction of the cost */
#define TAGC_AUTO_BF16_S_PER_ELEMENT 1e-9  /* bf16 encode + accumulate, measured ~8 GB/s each */
#define TAGC_AUTO_MAX_SWITCHES 4         /* then each change doubles the gain needed */
#define TAGC_AUTO_CODEC_S_PER_ELEMENT 1e-8 /* codec estimate before a measurement (1 thread) */
#define TAGC_AUTO_Q8_GRAD_S_PER_ELEMENT 0.6e-9 /* int8 wire: the fused encode with error
                                                  feedback (tagc_bench_kernels q8_encode_ef
                                                  16-18 GB/s of 8 B, 1 thread: 0.5 ns) and the
                                                  owner's decode-sum (0.1 ns per shard element) */

typedef struct tagc_auto_input {
  int64_t elements;        /* n: the segment's elements */
  int world;               /* W >= 2 */
  double link_bytes_per_s; /* the slowest rank's measured rate; <= 0: unknown */
  double rho;              /* the rho the sketch would use now (advisor); 0: would not pay */
  double codec_s;          /* measured codec seconds for this segment; <= 0: unknown */
} tagc_auto_input;

/* Predicted seconds per step of each wire (cost[encoding]); the sketch's is HUGE_VAL when it
 * is no candidate. */
void tagc_auto_costs(const tagc_auto_input *in, double cost[TAGC_ENC_COUNT]);

/* The wire for the next steps given the current one and how often this segment changed wire
 * already; `current` when the link rate is unknown. Pure. */
tagc_encoding tagc_auto_choose(const tagc_auto_input *in, tagc_encoding current, int switches);

/* `--gather auto` with `--compress auto`: the precision of the parameter all-gathers, fp32,
 * bf16 or blockwise int8 (kernels/q8.h), from the same shared link rate, or the gathers' own
 * measured one where that is unknown (tagc_auto_gather_rate). Per gathered element,
 * on W ranks, the predicted cost is
 *   fp32   4 (W-1)/W bytes / link rate
 *   bf16   2 (W-1)/W bytes / link rate + TAGC_AUTO_GATHER_BF16_S_PER_ELEMENT
 *   int8   (1 + 4/256) (W-1)/W bytes / link rate + TAGC_AUTO_GATHER_Q8_S_PER_ELEMENT
 * (conversions: encode of the own shard, decode of the whole unit). Every unit and every
 * gather of a step scale the costs alike, so one choice serves all units: at W = 2 int8 wins
 * below a link rate of about 1 GB/s and fp32 above 2 GB/s (the conversions then cost more than
 * the bytes they save). Same hysteresis as the gradient wires. Starts at bf16. */

#define TAGC_AUTO_GATHER_BF16_S_PER_ELEMENT 0.5e-9 /* bench_kernels: encode + decode, 1 thread */
#define TAGC_AUTO_GATHER_Q8_S_PER_ELEMENT 1e-9

/* The link rate `auto` prices bytes with on one rank: the shared link rate (link_rate, the
 * communicator's peak rate, comm.h) when it is known, else what this rank's parameter
 * all-gathers carried since the last decision: gather_bytes received in gather_s
 * (gather_codec.h tagc_gather_codec_take_wire), when at least TAGC_AUTO_MIN_GATHER_BYTES. The
 * communicator only measures exchanges of at least 256 KiB, which a small model never makes
 * (L=4 C=128 at W=2: a block's bf16 gather is 198 KB), so without the gathers' own figure the
 * gathers and the wires kept their starting bf16 on any link. That figure holds each
 * all-gather's latency and any wait for a late peer (L=4 C=128, W=2, 1 thread per rank:
 * 9.1 MB/s on a 12.5 MB/s link, 53 MB/s on unlimited veth), so it errs low, towards fewer
 * bytes. It is sound where the choices make the same exchanges and differ in bytes only: the
 * three gather encodings, and the dense wires (one exchange per unit each); the engine offers
 * the segments no sketch at such a rate (rho 0), whose extra exchanges (the bitmaps' OR, the
 * index) the latency would hide. The engine takes the minimum over ranks. 0 when unknown. Pure. */
#define TAGC_AUTO_MIN_GATHER_BYTES 65536.0

double tagc_auto_gather_rate(double link_rate, double gather_bytes, double gather_s);

/* Predicted seconds per gathered element of each precision (fp32 included, for the log; the
 * sketch, no gather encoding, HUGE_VAL). */
void tagc_auto_gather_costs(int world, double link_bytes_per_s, double cost[TAGC_ENC_COUNT]);

/* fp32, bf16 or int8 for the next steps at link_bytes_per_s (tagc_auto_gather_rate, agreed
 * over ranks); `current` when the rate is unknown or W < 2. Pure. */
tagc_encoding tagc_auto_gather_choose(int world, double link_bytes_per_s, tagc_encoding current,
                                      int switches);

/* `--reshard-after-forward auto` with `--compress auto`: ZeRO-3 (reshard) gathers every unit
 * but the embeddings twice per step, before forward and again before backward, and holds at
 * most three gathered units; keeping every gathered unit for the step (no reshard, ZeRO++ hpZ's
 * trade) sends each unit once, saving (W-1)/W of the gathered model's bytes per step on any
 * link, at the same compute, and holds the full fp32 parameters of every unit at once. So the
 * rule is one of memory only: keep the gathered units when they fit the budget on every rank,
 * decided once (after the first step) and never undone.
 *
 * The budget in bytes: max_gather_bytes when > 0, else TAGC_AUTO_GATHER_MEM_FRACTION of the
 * device's memory (device_bytes: a GPU's total memory, the host's physical RAM for the CPU);
 * 0 when neither is known (then resharding stays). */
#define TAGC_AUTO_GATHER_MEM_FRACTION 0.125

double tagc_auto_gather_budget(double max_gather_bytes, double device_bytes);

/* 1 when holding `held_bytes` of gathered parameters for the whole step fits `budget`. Pure. */
int tagc_auto_keep_gathered(double held_bytes, double budget);

#endif
