/* GPT-2-style decoder on the CPU: parameter layout, initialisation, forward and backward.
 *
 * Pre-LayerNorm blocks, causal multi-head attention, GELU (tanh approximation) MLP, learned
 * positions, a vocabulary of up to 65536 uint16 token ids, untied output head. All parameters live in one flat fp32 arena
 * split into FSDP units laid out contiguously:
 *   unit 0        embedding: wte (Vp, C) | wpe (T, C)
 *   unit 1..L     block l-1: ln1_w (C), ln1_b (C), ln2_w (C), ln2_b (C)      role norm
 *                            qkv_w (3C, C), qkv_b (3C)                       role attn_qkv
 *                            attn_proj_w (C, C), attn_proj_b (C)             role attn_proj
 *                            fc_w (4C, C), fc_b (4C)                         role mlp_fc
 *                            mlp_proj_w (C, 4C), mlp_proj_b (C)              role mlp_proj
 *   unit L+1      final:     lnf_w (C), lnf_b (C)                            role norm
 *                            head_w (Vp, C)                                  role head
 * Vp (padded_vocab) is the vocabulary V rounded up to a multiple of 128, as llm.c pads it, so
 * the head's product has friendly shapes. Rows V..Vp-1 of wte and head_w are padding: no
 * token id reaches them, the loss's softmax runs over the first V logits only (the padded
 * logits are never predicted), so their gradient is exactly zero.
 * Within a unit, tensors of one role are contiguous, so a per-role compression policy maps to
 * contiguous ranges. Weight matrices are stored (out, in), row-major, as in torch.nn.Linear.
 *
 * Forward/backward run unit by unit through caller hooks, so that a sharded engine can
 * all-gather a unit's parameters just before use and reduce-scatter its gradient as soon as
 * that unit's backward is done. The single-process trainer passes hooks that return slices
 * of one arena.
 *
 * Threading: the model functions parallelise with OpenMP (omp_set_num_threads /
 * OMP_NUM_THREADS decide) and call OpenBLAS single-threaded from inside their parallel
 * regions; forward and backward set OpenBLAS's own thread count to 1 for that reason. The
 * same inputs and thread count give bit-identical results. A tagc_model_acts is used by one
 * caller at a time. */
#ifndef TAGC_WORKER_MODEL_H
#define TAGC_WORKER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define TAGC_MAX_LAYERS 64
#define TAGC_MAX_TENSORS (3 + 12 * TAGC_MAX_LAYERS + 3)
#define TAGC_MAX_VOCAB 65536 /* token ids are uint16 */
#define TAGC_VOCAB_PAD 128

/* V rounded up to a multiple of TAGC_VOCAB_PAD. */
int tagc_padded_vocab(int vocab);

typedef struct tagc_model_config {
  int vocab;   /* V: token ids are 0..V-1 (256 for bytes, 50257 for GPT-2) */
  int ctx;     /* T: context length (max sequence length) */
  int n_layer; /* L */
  int n_head;  /* NH; must divide C */
  int d_model; /* C */
  int padded_vocab; /* Vp >= V: rows of wte and head_w; 0 given to tagc_model_layout_init means
                     * V rounded up to a multiple of TAGC_VOCAB_PAD (the layout keeps the value) */
} tagc_model_config;

typedef enum tagc_role {
  TAGC_ROLE_TOK_EMB = 0,
  TAGC_ROLE_POS_EMB,
  TAGC_ROLE_NORM,
  TAGC_ROLE_ATTN_QKV,
  TAGC_ROLE_ATTN_PROJ,
  TAGC_ROLE_MLP_FC,
  TAGC_ROLE_MLP_PROJ,
  TAGC_ROLE_HEAD,
  TAGC_ROLE_COUNT
} tagc_role;

/* "tok_emb", "pos_emb", "norm", "attn_qkv", "attn_proj", "mlp_fc", "mlp_proj", "head". */
const char *tagc_role_name(tagc_role role);

typedef struct tagc_tensor_info {
  char name[32];   /* e.g. "h3.fc_w", "wte", "lnf_b" */
  tagc_role role;
  int unit;
  int decay;       /* 1 for weight matrices and embeddings: AdamW weight decay applies */
  int rows, cols;  /* cols == 1 for vectors */
  size_t offset;   /* in floats, from the start of the arena */
  size_t numel;
} tagc_tensor_info;

typedef struct tagc_unit_info {
  size_t offset;   /* in floats, from the start of the arena */
  size_t numel;
  int first_tensor, n_tensors;
} tagc_unit_info;

typedef struct tagc_model_layout {
  tagc_model_config cfg;
  int n_units;     /* L + 2 */
  int n_tensors;
  size_t n_params; /* total floats in the arena */
  tagc_unit_info units[TAGC_MAX_LAYERS + 2];
  tagc_tensor_info tensors[TAGC_MAX_TENSORS];
} tagc_model_layout;

/* Validates cfg (TAGC_EINVAL with a detail naming the field) and fills the layout. */
tagc_status tagc_model_layout_init(tagc_model_layout *layout, const tagc_model_config *cfg);

/* Deterministic GPT-2 initialisation from seed into params (n_params floats): weights
 * N(0, 0.02), the two residual projections N(0, 0.02/sqrt(2L)), biases 0, norm weights 1.
 * Bit-identical for the same seed on any machine (own counter-based RNG, no libc rand). */
void tagc_model_init_params(const tagc_model_layout *layout, uint64_t seed, float *params);

/* Activations and scratch for micro-batches of up to max_batch sequences of length ctx. */
typedef struct tagc_model_acts tagc_model_acts;

tagc_status tagc_model_acts_new(const tagc_model_layout *layout, int max_batch, tagc_model_acts **out);
void tagc_model_acts_free(tagc_model_acts *acts); /* NULL is fine */

/* Inference: every later tagc_model_forward with these activations also copies its logits
 * (B, ctx, vocab floats, before the softmax) into `logits` (caller-owned, room for max_batch
 * sequences; borrowed until replaced). NULL stops the copies. */
void tagc_model_acts_keep_logits(tagc_model_acts *acts, float *logits);

/* Bytes tagc_model_acts_new would allocate (for the OOM planner and the summary). */
size_t tagc_model_acts_bytes(const tagc_model_layout *layout, int max_batch);

/* Hooks through which forward/backward reach unit parameters and hand back gradients.
 *  - unit_params(ctx, u): full fp32 parameters of unit u (layout.units[u].numel floats),
 *    valid until unit_release(ctx, u). Called before the unit is used in forward, and again
 *    before it is used in backward. NULL return = failure (the error detail is set): the
 *    pass stops and returns the status the hook stored in `status` (set it before returning
 *    NULL). The embedding unit's parameters are not needed by the backward, so
 *    unit_params(ctx, 0) is not called there (its gradient is still requested and reported).
 *    unit_release(ctx, u) follows every successful unit_params(ctx, u), also on failure.
 *  - unit_grads(ctx, u): the gradient buffer of unit u (numel floats); the backward ADDS
 *    into it (so micro-batches accumulate).
 *  - unit_backward_done(ctx, u): unit u's gradient for this micro-batch is complete.
 *  - unit_release(ctx, u): the pass no longer needs unit u's parameters (may be NULL). */
typedef struct tagc_unit_hooks {
  void *ctx;
  const float *(*unit_params)(void *ctx, int unit);
  float *(*unit_grads)(void *ctx, int unit);
  tagc_status (*unit_backward_done)(void *ctx, int unit);
  void (*unit_release)(void *ctx, int unit);
  tagc_status status; /* set by a hook before returning NULL */
} tagc_unit_hooks;

/* Forward over B sequences (tokens and targets: B*ctx uint16 ids each). Returns in *loss_sum the
 * SUM over all B*ctx positions of the cross-entropy in nats (not the mean). Keeps what the
 * backward needs in acts. Units are visited 0, 1, ..., L+1. TAGC_EINVAL when B is outside
 * [1, max_batch] or a token or target is >= vocab. */
tagc_status tagc_model_forward(const tagc_model_layout *layout, tagc_model_acts *acts,
                               tagc_unit_hooks *hooks, const uint16_t *tokens,
                               const uint16_t *targets, int B, double *loss_sum);

/* Backward of the last forward. The gradient of (loss_scale * loss_sum) is ADDED into the
 * unit gradient buffers; the trainer passes loss_scale = 1 / (tokens in the global batch) so
 * that any world size and micro-batch split compute the same mean loss. Units are visited
 * L+1, L, ..., 0 and unit_backward_done is called for each as soon as it is complete.
 * At most one backward per forward (it consumes the stored probabilities): TAGC_EINVAL
 * without a completed forward. */
tagc_status tagc_model_backward(const tagc_model_layout *layout, tagc_model_acts *acts,
                                tagc_unit_hooks *hooks, float loss_scale);

/* Model FLOPs of one trained token (forward and backward), for MFU: 6 per parameter outside
 * the embedding unit (the embeddings are lookups; the head is a product) plus
 * 12 * layers * width * context for the attention products, as llm.c and the PaLM paper
 * count them. */
double tagc_model_flops_per_token(const tagc_model_layout *layout);

/* Whether the backward of `unit` reads its parameters (it always reads them in forward): the
 * embedding unit's does not, so a sharded engine need not gather it again for backward. */
int tagc_model_backward_needs_params(const tagc_model_layout *layout, int unit);

/* Hooks over one arena of full parameters and one of gradients (the single-process case). */
typedef struct tagc_arena_hooks {
  tagc_unit_hooks hooks;
  const tagc_model_layout *layout;
  const float *params;
  float *grads;
} tagc_arena_hooks;

void tagc_arena_hooks_init(tagc_arena_hooks *ah, const tagc_model_layout *layout,
                           const float *params, float *grads);

#endif
