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
 * Role names are those of tagc_role_name(); "attn" and "mlp" name both of their roles.
 *
 * A role's policy is the set of encodings (common/encoding.h) its segments may use, and
 * whether `auto` chooses among them at run time:
 *   none  {fp32}           bf16  {bf16}
 *   tagc  {sketch, bf16}   the sketch; dense bf16 (with the residual) where it would not pay
 *                          and through the compression warm-up
 *   auto  {sketch, bf16, fp32, int8} adaptive; the preset's attention and norm roles
 *         {bf16, fp32, int8} adaptive (never a sketch, nor its density probes)
 * A policy with the sketch or int8 keeps an error-feedback residual. */
#ifndef TAGC_ENGINE_POLICY_H
#define TAGC_ENGINE_POLICY_H

#include "common/encoding.h"
#include "common/status.h"
#include "model/model.h"

typedef struct tagc_role_policy {
  unsigned encodings; /* TAGC_ENC_BIT set: the wires this role's segments may use */
  int adaptive;       /* `auto` picks the wire among `encodings` from the measured link rate
                         and codec cost (engine/auto_policy.h) */
  double density;     /* sketch: target density of the union of all ranks' kept elements
                         (0 < d <= 1); each rank keeps tagc_policy_rank_density(density, W) */
  double rho;         /* sketch: compression ratio; 0 = from the kernels' advisor */
} tagc_role_policy;

typedef struct tagc_compress_policy {
  tagc_role_policy role[TAGC_ROLE_COUNT];
} tagc_compress_policy;

#define TAGC_DEFAULT_DENSITY 0.1
/* The union density of adaptive (`auto`) roles: they take the sketch only where bytes cost the
 * most time (slow links), and there half the default density gives rho ~2.8 instead of ~2.3
 * (5.2x instead of 4.8x fewer bytes than fp32 ZeRO-3 on the 3.3 M bench model with int8
 * gathers and no reshard) at no worse a loss than 0.1 (docs/compression.md). */
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

/* The parameter all-gathers of a --gather setting ("auto", "fp32", "bf16" or "int8") under
 * policy p: *start is the encoding of the first step; *adaptive is 1 for "auto" over adaptive
 * (--compress auto) roles, whose gathers then move among fp32, bf16 and int8 with the link
 * (auto_policy.h). "auto" otherwise gathers bf16 exactly when the policy compresses some
 * role, the mixed-precision setting of FSDP/ZeRO++ that pairs with compressed gradients (a
 * policy of `none` everywhere stays the fp32 ZeRO-3 baseline). TAGC_EINVAL for another name. */
tagc_status tagc_policy_gather(const char *gather, const tagc_compress_policy *p,
                               tagc_encoding *start, int *adaptive);

/* The role's segments may sketch; keep an error-feedback residual (sketch or int8). */
int tagc_role_policy_sketches(const tagc_role_policy *p);
int tagc_role_policy_feeds_back(const tagc_role_policy *p);

/* The encoding a segment starts with: bf16 for an adaptive one, the sketch for a fixed one
 * that may sketch, else the fixed policy's only encoding. */
tagc_encoding tagc_role_policy_start(const tagc_role_policy *p);

/* The rule's name in manifests and logs: "none" ({fp32}), "bf16" ({bf16}) or "tagc" (a
 * sketching or adaptive policy). */
const char *tagc_role_policy_name(const tagc_role_policy *p);

/* Two policies compress the same way (used to merge adjacent tensors into one segment). */
int tagc_role_policy_equal(const tagc_role_policy *a, const tagc_role_policy *b);

#endif
