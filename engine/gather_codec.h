/* The parameter-gather codec: all-gathers one FSDP unit's parameter shards into the unit's
 * full parameters, on the wire as fp32, bf16 (mixed-precision FSDP) or blockwise int8
 * (kernels/q8.h, ZeRO++ qwZ style: one fp32 scale per 256 elements). The twin of the gradient
 * codec (grad_codec.h) for the other direction; the master shards stay fp32.
 *
 * A unit is a list of parts (the engine's segments of the unit): each part's shard of S
 * elements on every rank, rank r holding [r*S, (r+1)*S) of the part's len elements. A bf16 or
 * int8 gather sends all of a unit's shards in one all-gather (each rank its shards one after
 * the other, part order) and decodes each part from its place in every rank's message: the
 * same values as one all-gather per part. fp32 gathers each part on its own (directly into
 * the destination when its shards tile it exactly).
 *
 * With world size 1 (comm NULL) nothing is sent: the shards are copied.
 *
 * Device memory: shards, destination and work are memory of the codec's device; the codec's
 * own send/receive buffers too. A gather runs its kernels and copies on the lane it is given
 * and synchronises the lane before the collective; the caller synchronises it before reading
 * the destination.
 *
 * Threading: one thread at a time (the engine's communication thread during a step, the
 * compute thread between steps). */
#ifndef TAGC_ENGINE_GATHER_CODEC_H
#define TAGC_ENGINE_GATHER_CODEC_H

#include <stddef.h>

#include "comm/comm.h"
#include "common/encoding.h"
#include "common/status.h"
#include "engine/device.h"

typedef struct tagc_gather_codec_config {
  tagc_device *device;     /* borrowed; outlives the codec */
  tagc_comm *comm;         /* borrowed; NULL for world size 1 */
  double op_timeout_s;     /* deadline of each collective */
  unsigned encodings;      /* TAGC_ENC_BIT set the gathers may use: sizes the buffers */
  size_t max_unit_shard;   /* the most shard elements of a unit (summed over its parts) */
  size_t max_unit_q8_bytes; /* the most int8 chunk bytes of a unit's shards (summed) */
} tagc_gather_codec_config;

typedef struct tagc_gather_codec tagc_gather_codec;

/* One part of a unit. */
typedef struct tagc_gather_part {
  const float *shard; /* this rank's S elements (device memory, borrowed) */
  size_t S;           /* shard elements (padded: S * W >= len) */
  size_t len;         /* the part's elements */
  size_t offset;      /* where the part starts in the unit's parameters */
} tagc_gather_part;

/* Creates the codec and its bf16/int8 buffers for cfg->encodings. Errors: TAGC_ENOMEM (host
 * or device). *out is NULL on failure. */
tagc_status tagc_gather_codec_new(const tagc_gather_codec_config *cfg, tagc_gather_codec **out);

/* Frees the codec's buffers; NULL is fine. */
void tagc_gather_codec_free(tagc_gather_codec *c);

/* Collective (every rank gathers the same unit with the same encoding). Writes the unit's
 * parameters into dst (the sum of the parts' len floats, at their offsets) from the n parts,
 * encoded as enc on the wire (fp32, or bf16 / int8 when in cfg->encodings). `work` is
 * W * (largest S) floats the call may overwrite. Errors: TAGC_EINVAL (an encoding the codec
 * has no buffers for), communication failures (TAGC_ETIMEDOUT, TAGC_EPEER, TAGC_EABORTED),
 * device errors. */
tagc_status tagc_gather_unit(tagc_gather_codec *c, const tagc_gather_part *parts, int n,
                             tagc_encoding enc, tagc_lane lane, float *work, float *dst);

/* The bytes this rank received in the all-gathers of tagc_gather_unit since the last call
 * ((W-1) x each message, whatever its encoding), and the seconds those all-gathers took (the
 * collective calls alone: no conversion, but each one's latency and any wait for a late
 * peer); then zeroes both. 0 and 0 with world size 1. Not collective; the same thread rules as
 * tagc_gather_unit (the engine takes them after draining the step's communication). */
void tagc_gather_codec_take_wire(tagc_gather_codec *c, double *bytes, double *seconds);

#endif
