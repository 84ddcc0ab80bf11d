/* The parameter-gather codec (gather_codec.h). */
#include "engine/gather_codec.h"

#include <stdint.h>
#include <stdlib.h>

#include "common/timeutil.h"
#include "kernels/tagc_kernels.h"

struct tagc_gather_codec {
  tagc_gather_codec_config cfg;
  int world;
  uint16_t *bf16;   /* [W][max_unit_shard] received, then [max_unit_shard] sent */
  unsigned char *q8; /* [W][max_unit_q8_bytes] received, then [max_unit_q8_bytes] sent */
  double wire_bytes; /* received by the all-gathers since the last tagc_gather_codec_take_wire */
  double wire_s;     /* ... and their seconds */
};

tagc_status tagc_gather_codec_new(const tagc_gather_codec_config *cfg, tagc_gather_codec **out) {
  *out = NULL;
  tagc_gather_codec *c = calloc(1, sizeof *c);
  if (!c)
    return tagc_errorf(TAGC_ENOMEM, "parameter-gather codec");
  c->cfg = *cfg;
  c->world = cfg->comm ? tagc_comm_world_size(cfg->comm) : 1;
  size_t slots = (size_t)c->world + 1;
  tagc_status st = TAGC_OK;
  if (cfg->encodings & TAGC_ENC_BIT(TAGC_ENC_INT8))
    st = tagc_device_alloc(cfg->device, slots * cfg->max_unit_q8_bytes, (void **)&c->q8);
  if (st == TAGC_OK && (cfg->encodings & TAGC_ENC_BIT(TAGC_ENC_BF16)))
    st = tagc_device_alloc(cfg->device, slots * cfg->max_unit_shard * sizeof(uint16_t),
                           (void **)&c->bf16);
  if (st != TAGC_OK) {
    tagc_gather_codec_free(c);
    return st;
  }
  *out = c;
  return TAGC_OK;
}

void tagc_gather_codec_free(tagc_gather_codec *c) {
  if (!c)
    return;
  tagc_device_free(c->cfg.device, c->bf16);
  tagc_device_free(c->cfg.device, c->q8);
  free(c);
}

/* One all-gather of `per_rank` bytes from every rank, timed for tagc_gather_codec_take_wire. */
static tagc_status allgather(tagc_gather_codec *c, const void *send, void *recv, size_t per_rank) {
  double t0 = tagc_now();
  TAGC_CHECK(tagc_comm_allgather(c->cfg.comm, send, recv, per_rank, c->cfg.op_timeout_s));
  c->wire_s += tagc_now() - t0;
  c->wire_bytes += (double)per_rank * (double)(c->world - 1);
  return TAGC_OK;
}

void tagc_gather_codec_take_wire(tagc_gather_codec *c, double *bytes, double *seconds) {
  *bytes = c->wire_bytes;
  *seconds = c->wire_s;
  c->wire_bytes = c->wire_s = 0;
}

static size_t q8_bytes(size_t S) { return (size_t)tagc_q8_chunk_bytes((int64_t)S); }

/* int8: every part's shard encoded into one message, all-gathered, each part decoded from its
 * place in every rank's message (the chunks at that message's stride). */
static tagc_status gather_q8(tagc_gather_codec *c, const tagc_gather_part *parts, int n,
                             tagc_kernel_ctx *ctx, tagc_lane lane, float *dst) {
  size_t per_rank = 0;
  for (int i = 0; i < n; i++)
    per_rank += q8_bytes(parts[i].S);
  unsigned char *recv = c->q8, *send = c->q8 + (size_t)c->world * c->cfg.max_unit_q8_bytes;
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    TAGC_CHECK(tagc_kernels_q8_encode(ctx, parts[i].shard, (int64_t)parts[i].S, send + off));
    off += q8_bytes(parts[i].S);
  }
  TAGC_CHECK(tagc_device_sync(c->cfg.device, lane));
  TAGC_CHECK(allgather(c, send, recv, per_rank));
  off = 0;
  for (int i = 0; i < n; i++) {
    const tagc_gather_part *p = &parts[i];
    TAGC_CHECK(tagc_kernels_q8_decode(ctx, recv + off, (int64_t)p->S, c->world, (int64_t)per_rank,
                                      (int64_t)p->len, dst + p->offset));
    off += q8_bytes(p->S);
  }
  return TAGC_OK;
}

/* bf16: as int8, decoded rank by rank (one decode when the unit is one part: the ranks'
 * shards are then contiguous). */
static tagc_status gather_bf16(tagc_gather_codec *c, const tagc_gather_part *parts, int n,
                               tagc_kernel_ctx *ctx, tagc_lane lane, float *dst) {
  size_t W = (size_t)c->world, per_rank = 0;
  for (int i = 0; i < n; i++)
    per_rank += parts[i].S;
  uint16_t *recv = c->bf16, *send = c->bf16 + W * c->cfg.max_unit_shard;
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    TAGC_CHECK(tagc_kernels_bf16_encode(ctx, parts[i].shard, send + off, (int64_t)parts[i].S));
    off += parts[i].S;
  }
  TAGC_CHECK(tagc_device_sync(c->cfg.device, lane));
  TAGC_CHECK(allgather(c, send, recv, per_rank * sizeof(uint16_t)));
  if (n == 1)
    return tagc_kernels_bf16_decode(ctx, recv, dst + parts[0].offset, (int64_t)parts[0].len);
  off = 0;
  for (int i = 0; i < n; i++) {
    const tagc_gather_part *p = &parts[i];
    float *out = dst + p->offset;
    for (size_t j = 0; j < W && j * p->S < p->len; j++) {
      size_t m = p->len - j * p->S < p->S ? p->len - j * p->S : p->S;
      TAGC_CHECK(tagc_kernels_bf16_decode(ctx, recv + j * per_rank + off, out + j * p->S, (int64_t)m));
    }
    off += p->S;
  }
  return TAGC_OK;
}

tagc_status tagc_gather_unit(tagc_gather_codec *c, const tagc_gather_part *parts, int n,
                             tagc_encoding enc, tagc_lane lane, float *work, float *dst) {
  tagc_device *dev = c->cfg.device;
  if (c->world > 1 && enc != TAGC_ENC_FP32) {
    if ((enc != TAGC_ENC_BF16 || !c->bf16) && (enc != TAGC_ENC_INT8 || !c->q8))
      return tagc_errorf(TAGC_EINVAL, "parameter gathers: no %s buffers", tagc_encoding_name(enc));
    tagc_kernel_ctx ctx = tagc_device_kernel_ctx(dev, lane, NULL, NULL, 0);
    return enc == TAGC_ENC_INT8 ? gather_q8(c, parts, n, &ctx, lane, dst)
                                : gather_bf16(c, parts, n, &ctx, lane, dst);
  }
  for (int i = 0; i < n; i++) {
    const tagc_gather_part *p = &parts[i];
    float *out = dst + p->offset;
    if (c->world == 1) {
      TAGC_CHECK(tagc_device_copy(dev, lane, out, p->shard, p->len * sizeof(float), TAGC_COPY_D2D));
      continue;
    }
    int direct = p->S * (size_t)c->world == p->len;
    float *recv = direct ? out : work;
    TAGC_CHECK(allgather(c, p->shard, recv, p->S * sizeof(float)));
    if (!direct)
      TAGC_CHECK(tagc_device_copy(dev, lane, out, recv, p->len * sizeof(float), TAGC_COPY_D2D));
  }
  return TAGC_OK;
}
