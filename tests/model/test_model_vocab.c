/* The padded vocabulary (issue 17): a model whose vocabulary V = 200 is padded to Vp = 256 rows
 * computes the same loss and gradients as the same model stored unpadded (padded_vocab = V),
 * even with large values in the padded head rows (they are masked out of the softmax, never
 * predicted), and the padded rows of wte and head_w get exactly zero gradient. Also the
 * padding rule (multiples of 128, GPT-2's 50257 -> 50304) and uint16 ids above 255. */
#include <stdio.h>

#include "model_fixture.h"
#include "test.h"

#define V 200

/* Copies params of layout `from` into layout `to` tensor by tensor (rows in common). */
static void copy_params(const tagc_model_layout *to, float *dst, const tagc_model_layout *from,
                        const float *src) {
  for (int t = 0; t < to->n_tensors; t++) {
    const tagc_tensor_info *a = &to->tensors[t], *b = &from->tensors[t];
    int rows = a->rows < b->rows ? a->rows : b->rows;
    memcpy(dst + a->offset, src + b->offset, (size_t)rows * (size_t)a->cols * sizeof(float));
  }
}

static void check_padding_rule(void) {
  CHECK_EQ_INT(tagc_padded_vocab(256), 256);
  CHECK_EQ_INT(tagc_padded_vocab(50257), 50304);
  CHECK_EQ_INT(tagc_padded_vocab(200), 256);
  CHECK_EQ_INT(tagc_padded_vocab(129), 256);
  CHECK_EQ_INT(tagc_padded_vocab(65536), 65536);
  tagc_model_layout lay;
  tagc_model_config big = {.vocab = 50257, .ctx = 4, .n_layer = 1, .n_head = 1, .d_model = 4};
  CHECK_OK(tagc_model_layout_init(&lay, &big));
  CHECK_EQ_INT(lay.cfg.vocab, 50257);
  CHECK_EQ_INT(lay.cfg.padded_vocab, 50304);
  CHECK_EQ_INT(lay.tensors[0].rows, 50304);                /* wte */
  CHECK_EQ_INT(lay.tensors[lay.n_tensors - 1].rows, 50304); /* head_w */
}

static void check_masked(void) {
  tagc_model_config padded_cfg = {.vocab = V, .ctx = 16, .n_layer = 1, .n_head = 2, .d_model = 16};
  tagc_model_config plain_cfg = padded_cfg;
  plain_cfg.padded_vocab = V;
  fixture pad, plain;
  CHECK_OK(fixture_init(&pad, &padded_cfg, 3, 99));
  CHECK_OK(fixture_init(&plain, &plain_cfg, 3, 99));
  CHECK_EQ_INT(pad.layout.cfg.padded_vocab, 256);
  CHECK_EQ_INT(plain.layout.cfg.padded_vocab, V);
  CHECK_EQ_INT(pad.layout.n_params, plain.layout.n_params + 2 * (256 - V) * 16);
  /* the same model in both layouts; large values in the padded rows of the head and wte */
  copy_params(&plain.layout, plain.params, &pad.layout, pad.params);
  const tagc_tensor_info *wte = &pad.layout.tensors[0];
  const tagc_tensor_info *head = &pad.layout.tensors[pad.layout.n_tensors - 1];
  for (size_t i = (size_t)V * 16; i < head->numel; i++) {
    pad.params[head->offset + i] = 5.0f;
    pad.params[wte->offset + i] = -5.0f;
  }
  size_t bt = 3 * 16;
  for (size_t i = 0; i < bt; i++) { /* ids above 255 need uint16 */
    pad.tokens[i] = plain.tokens[i] = (uint16_t)(150 + i * 7 % 50);
    pad.targets[i] = plain.targets[i] = (uint16_t)(V - 1 - i * 13 % 90);
  }
  double loss_pad = 0, loss_plain = 0;
  CHECK_OK(fixture_pass(&pad, 0, 3, 1.0f, &loss_pad));
  CHECK_OK(fixture_pass(&plain, 0, 3, 1.0f, &loss_plain));
  CHECK_NEAR(loss_pad, loss_plain, 1e-5 * loss_plain);
  /* gradients: equal on the real rows, exactly zero on the padded rows */
  float *mapped = calloc(plain.layout.n_params, sizeof(float));
  copy_params(&plain.layout, mapped, &pad.layout, pad.grads);
  double rel = max_rel_diff(mapped, plain.grads, plain.layout.n_params);
  CHECK_MSG(rel < 1e-5, "padded vs unpadded gradients differ: %.3g", rel);
  size_t nonzero = 0;
  for (size_t i = (size_t)V * 16; i < head->numel; i++)
    nonzero += pad.grads[head->offset + i] != 0.0f || pad.grads[wte->offset + i] != 0.0f;
  CHECK_MSG(nonzero == 0, "%zu padded gradient entries are not zero", nonzero);
  /* a token >= V (inside the padding) is refused */
  pad.tokens[5] = V;
  CHECK_EQ_INT(tagc_model_forward(&pad.layout, pad.acts, &pad.hooks.hooks, pad.tokens, pad.targets, 3,
                                  &loss_pad), TAGC_EINVAL);
  free(mapped);
  fixture_free(&pad);
  fixture_free(&plain);
}

int main(void) {
  check_padding_rule();
  check_masked();
  return TEST_END();
}
