/* Gradient compression policy by parameter role (ARCHITECTURE §7).
 *
 * A spec is either a preset or a comma-separated list of role=kind rules:
 *   "tagc"  the paper's best setting: tagc for the MLP matrices, embeddings and head, bf16 for
 *           attention, none for norms
 *   "auto"  the tagc preset, but every tagc role's wire (fp32, bf16, int8 or the sketch) is
 *           chosen at run time from the measured link rate and codec cost
 *           (engine/auto_policy.h), its sketch at density TAGC_AUTO_DENSITY; the preset's bf16
 *           attention roles choose among the dense wires (fp32, bf16, int8) only; a rule
 *           "role=auto" makes one role adaptive (sketch included)
 *   "bf16"  bf16 wire for every role;  "none"  fp32 reduce-scatter for every role (the FSDP
 *           baseline)
 *   "tagc,attn_qkv=none,mlp_fc=tagc:0.05:4"  a preset followed by per-role overrides; a tagc
 *           rule may give the density target and rho ("auto" = from the kernels' advisor).
 * Role names are those of tagc_role_name(); "attn" and "mlp" name both of their roles. */
#ifndef TAGC_WORKER_POLICY_H
#define TAGC_WORKER_POLICY_H

#include "common/status.h"
#include "model/model.h"

typedef enum tagc_policy_kind { TAGC_POLICY_NONE = 0, TAGC_POLICY_BF16, TAGC_POLICY_TAGC } tagc_policy_kind;

typedef struct tagc_role_policy {
  tagc_policy_kind kind;
  double density; /* tagc: target density of the union of all ranks' kept elements (0 < d <= 1);
                     each rank keeps tagc_policy_rank_density(density, W) */
  double rho;     /* tagc: sketch compression ratio; 0 = auto */
  int adaptive;   /* tagc role under `auto`: the engine picks its wire (fp32, bf16, int8 or the
                     sketch) from the measured link rate and codec cost (engine/auto_policy.h) */
  int dense_only; /* adaptive: never the sketch (nor its density probes), only fp32, bf16 or
                     int8 (the attention roles of `auto`, bf16 in the tagc preset) */
} tagc_role_policy;

typedef struct tagc_compress_policy {
  tagc_role_policy role[TAGC_ROLE_COUNT];
  int sketch_bf16; /* tagc sketches travel as bf16 (TAGC-2) rather than fp32 */
} tagc_compress_policy;

#define TAGC_DEFAULT_DENSITY 0.1
/* The union density of adaptive (`auto`) roles: they take the sketch only where bytes cost the
 * most time (slow links), and there half the default density gives rho ~2.8 instead of ~2.3
 * (5.2x instead of 4.8x fewer bytes than fp32 ZeRO-3 on the 3.3 M bench model with int8
 * gathers and no reshard) at no worse a loss than 0.1 (docs/benchmarks.md 3b). */
#define TAGC_AUTO_DENSITY 0.05

/* The density each of W ranks keeps so that the union of their kept sets has density about
 * `union_density` when the ranks choose independently: 1 - (1 - d)^(1/W). The sketch's size
 * follows the union (its rows grow with the items per lane), so this keeps the sketch as
 * small at W = 8 as at W = 2: 0.1 -> 0.051 per rank at W = 2, 0.026 at W = 4, 0.013 at W = 8.
 * W = 1 keeps d itself. */
double tagc_policy_rank_density(double union_density, int world);

/* The compression warm-up of `--compress-warmup -1`: the larger of the lr warm-up and a fifth of
 * the run's steps. Dense steps first cost little loss; the sketch from step 1 cost the default
 * job 3.6 % of val loss at 1000 steps with a 20-step warm-up, 2.4 % with 100 and 1.0 % with 200
 * (docs/compression.md, "Compression warm-up"). */
int64_t tagc_compress_warmup_auto(int64_t lr_warmup, int64_t steps);

/* Parses spec into *out. TAGC_EINVAL with a detail naming the bad rule. */
tagc_status tagc_policy_parse(const char *spec, tagc_compress_policy *out);

/* Whether parameters are all-gathered as bf16 for a --gather setting ("auto", "fp32", "bf16"):
 * "auto" gathers bf16 exactly when the policy compresses some role (bf16 or tagc), the
 * mixed-precision setting of FSDP/ZeRO++ that pairs with compressed gradients; a policy of
 * `none` everywhere stays the fp32 ZeRO-3 baseline. */
int tagc_policy_gather_bf16(const char *gather, const tagc_compress_policy *p);

/* The precision of the parameter all-gathers in effect: "int8", "bf16" or "fp32", or "auto"
 * for --gather auto over adaptive (--compress auto) roles. */
const char *tagc_policy_gather_name(const char *gather, const tagc_compress_policy *p);

/* "none", "bf16" or "tagc". */
const char *tagc_policy_kind_name(tagc_policy_kind kind);

/* Two policies compress the same way (used to merge adjacent tensors into one segment). */
int tagc_role_policy_equal(const tagc_role_policy *a, const tagc_role_policy *b);

#endif
