/* The engine's checkpoint adapters (engine.h, "checkpoints"): the checkpoint units are the
 * engine's segments, each with four streams (parameters, AdamW moments, error-feedback
 * residual) of which a rank saves and loads its own shard; plus the compression state of the
 * manifest. Called by the compute thread with no step running. */
#include "engine/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const stream_names[TAGC_ENGINE_STREAMS] = {"param", "adam_m", "adam_v", "residual"};

void tagc_engine_ckpt_layout(const tagc_engine *e, tagc_ckpt_layout *layout,
                             tagc_ckpt_range *ranges) {
  layout->n_units = e->n_segs;
  layout->unit_names = (const char *const *)e->seg_names;
  layout->unit_numel = e->seg_numel;
  layout->n_streams = TAGC_ENGINE_STREAMS;
  layout->stream_names = stream_names;
  for (int i = 0; i < e->n_segs; i++) {
    ranges[i].lo = (int64_t)((size_t)e->rank * e->segs[i].S);
    ranges[i].hi = ranges[i].lo + (int64_t)e->segs[i].S;
  }
}

tagc_status tagc_engine_snapshot(tagc_engine *e, float *const *views) {
  TAGC_CHECK(engine_drain(e)); /* the comm thread is idle: its staging buffer is free */
  for (int i = 0; i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    size_t n;
    engine_shard_range(e, s, &n);
    TAGC_CHECK(tagc_grad_segment_canonicalise(e->codec, s->codec, TAGC_LANE_COMPUTE, e->staging));
    e->canonical = 1;
    float *const *v = views + (size_t)i * TAGC_ENGINE_STREAMS;
    const float *src[TAGC_ENGINE_STREAMS] = {s->p, s->m, s->v,
                                             tagc_grad_segment_residual_shard(e->codec, s->codec)};
    for (int k = 0; k < TAGC_ENGINE_STREAMS; k++) {
      if (!n)
        continue;
      if (src[k])
        TAGC_CHECK(tagc_device_copy(e->dev, TAGC_LANE_COMPUTE, v[k], src[k], n * sizeof(float), TAGC_COPY_D2H));
      else
        memset(v[k], 0, n * sizeof(float));
    }
  }
  return TAGC_OK;
}

/* The reader's index of each engine stream, or TAGC_ECORRUPT naming the missing one. */
static tagc_status stream_indices(tagc_ckpt_reader *rd, int streams[TAGC_ENGINE_STREAMS]) {
  for (int k = 0; k < TAGC_ENGINE_STREAMS; k++)
    if ((streams[k] = tagc_ckpt_reader_stream_index(rd, stream_names[k])) < 0)
      return tagc_errorf(TAGC_ECORRUPT, "%s: no '%s' stream", tagc_ckpt_reader_path(rd), stream_names[k]);
  return TAGC_OK;
}

/* Reads stream k of segment s's range [lo, hi) into the device buffer dst through host. */
static tagc_status load_stream(tagc_engine *e, tagc_ckpt_reader *rd, int u, int stream,
                               const engine_segment *s, float *dst, float *host) {
  int64_t lo = (int64_t)((size_t)e->rank * s->S), hi = lo + (int64_t)s->S;
  TAGC_CHECK(tagc_ckpt_read(rd, u, stream, lo, hi, host));
  return tagc_device_copy(e->dev, TAGC_LANE_COMPUTE, dst, host, s->S * sizeof(float), TAGC_COPY_H2D);
}

static tagc_status load_segment(tagc_engine *e, tagc_ckpt_reader *rd, const int *streams,
                                engine_segment *s, float *host) {
  int u = tagc_ckpt_reader_unit_index(rd, s->name);
  if (u < 0 || tagc_ckpt_reader_unit_numel(rd, u) != (int64_t)s->len)
    return tagc_errorf(TAGC_ECORRUPT, "%s: unit %s is missing or has another size: the "
                       "checkpoint is of another model or compression policy",
                       tagc_ckpt_reader_path(rd), s->name);
  float *dst[3] = {s->p, s->m, s->v};
  for (int k = 0; k < 3; k++)
    TAGC_CHECK(load_stream(e, rd, u, streams[k], s, dst[k], host));
  /* at world size 1 the residual is folded into the first step */
  float *residual;
  TAGC_CHECK(tagc_grad_segment_reset_residual(e->codec, s->codec, TAGC_LANE_COMPUTE, &residual));
  return residual ? load_stream(e, rd, u, streams[3], s, residual, host) : TAGC_OK;
}

tagc_status tagc_engine_load(tagc_engine *e, tagc_ckpt_reader *rd) {
  int streams[TAGC_ENGINE_STREAMS];
  TAGC_CHECK(stream_indices(rd, streams));
  size_t max_s = engine_max_shard(e);
  float *host = malloc(max_s * sizeof(float)); /* the reader fills host memory */
  if (!host)
    return tagc_errorf(TAGC_ENOMEM, "checkpoint read buffer of %zu floats", max_s);
  tagc_status st = TAGC_OK;
  for (int i = 0; st == TAGC_OK && i < e->n_segs; i++)
    st = load_segment(e, rd, streams, &e->segs[i], host);
  free(host);
  e->canonical = st == TAGC_OK;
  return st;
}

tagc_status tagc_engine_compare(tagc_engine *e, tagc_ckpt_reader *rd, int64_t *compared,
                                int64_t *mismatched, char *first, size_t first_cap) {
  *compared = *mismatched = 0;
  if (first_cap)
    first[0] = '\0';
  TAGC_CHECK(engine_drain(e));
  int streams[TAGC_ENGINE_STREAMS];
  TAGC_CHECK(stream_indices(rd, streams));
  size_t max_s = engine_max_shard(e);
  float *a = malloc(max_s * sizeof(float)), *b = malloc(max_s * sizeof(float));
  tagc_status st = a && b ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "compare buffers");
  for (int i = 0; st == TAGC_OK && i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    int u = tagc_ckpt_reader_unit_index(rd, s->name);
    if (u < 0) {
      st = tagc_errorf(TAGC_ECORRUPT, "%s: no unit %s", tagc_ckpt_reader_path(rd), s->name);
      break;
    }
    const float *res = tagc_grad_segment_residual_shard(e->codec, s->codec);
    const float *live[TAGC_ENGINE_STREAMS] = {s->p, s->m, s->v, res};
    int64_t lo = (int64_t)((size_t)e->rank * s->S), hi = lo + (int64_t)s->S;
    for (int k = 0; st == TAGC_OK && k < TAGC_ENGINE_STREAMS; k++) {
      if (!live[k])
        continue; /* a policy without residual loads none */
      st = tagc_ckpt_read(rd, u, streams[k], lo, hi, a);
      if (st == TAGC_OK)
        st = tagc_device_copy(e->dev, TAGC_LANE_COMPUTE, b, live[k], s->S * sizeof(float), TAGC_COPY_D2H);
      for (size_t x = 0; st == TAGC_OK && x < s->S; x++) {
        if (memcmp(&a[x], &b[x], sizeof(float)) != 0) {
          if (!*mismatched && first_cap)
            snprintf(first, first_cap, "%s %s[%zu]: %.9g here, %.9g in the checkpoint", s->name,
                     stream_names[k], (size_t)lo + x, (double)b[x], (double)a[x]);
          ++*mismatched;
        }
      }
      *compared += (int64_t)s->S;
    }
  }
  free(a);
  free(b);
  return st;
}

json_t *tagc_engine_compression_state(const tagc_engine *e) {
  json_t *segs = json_array();
  for (int i = 0; segs && i < e->n_segs; i++) {
    const engine_segment *s = &e->segs[i];
    json_t *item = json_pack("{s:s, s:s, s:f, s:f, s:f}", "name", s->name,
                             "policy", tagc_role_policy_name(&s->pol),
                             "lane_density_seen", tagc_grad_segment_density_seen(s->codec),
                             "rho", tagc_grad_segment_rho(s->codec), "target_density", s->pol.density);
    if (item && s->pol.adaptive) /* `auto`: the wire chosen so far, and how often it changed */
      json_object_update_new(item, json_pack("{s:s, s:i, s:f}", "wire",
                                             tagc_encoding_name(tagc_grad_segment_encoding(s->codec)),
                                             "switches", s->switches, "codec_s", s->codec_s));
    json_array_append_new(segs, item);
  }
  json_t *state = json_pack("{s:i, s:o}", "world_size", e->world, "segments", segs);
  if (state && e->n_adaptive) /* `auto` made its first decision: it next decides on schedule */
    json_object_set_new(state, "auto_decided", json_boolean(e->auto_decided));
  if (state && e->gather_adaptive) /* `--gather auto`: the precision chosen so far */
    json_object_update_new(state, json_pack("{s:s, s:i}", "gather", tagc_encoding_name(e->gather),
                                            "gather_switches", e->gather_switches));
  return state;
}

tagc_status tagc_engine_set_compression_state(tagc_engine *e, const json_t *state) {
  json_t *segs = json_object_get(state, "segments");
  const char *gather = json_string_value(json_object_get(state, "gather"));
  tagc_encoding enc;
  if (gather && e->gather_adaptive && /* a resumed run gathers as the saved one did */
      tagc_encoding_parse(gather, TAGC_ENC_DENSE, "gather", &enc) == TAGC_OK) {
    e->gather = enc;
    e->gather_switches = (int)json_integer_value(json_object_get(state, "gather_switches"));
  }
  tagc_clear_error();
  /* a resumed run re-decides when the saved one would have, not at its first step */
  e->auto_decided = e->auto_decided || json_is_true(json_object_get(state, "auto_decided"));
  size_t i;
  json_t *item;
  json_array_foreach(segs, i, item) {
    const char *name = json_string_value(json_object_get(item, "name"));
    json_t *ld = json_object_get(item, "lane_density_seen");
    if (!name || !json_is_number(ld))
      return tagc_errorf(TAGC_ECORRUPT, "compression state entry %zu is malformed", i);
    for (int k = 0; k < e->n_segs; k++) {
      if (!strcmp(e->segs[k].name, name)) {
        engine_segment *s = &e->segs[k];
        tagc_grad_segment_set_density_seen(s->codec, json_number_value(ld));
        const char *wire = json_string_value(json_object_get(item, "wire"));
        if (wire && s->pol.adaptive &&
            tagc_encoding_parse(wire, s->pol.encodings, "wire", &enc) == TAGC_OK) {
          tagc_grad_segment_set_encoding(s->codec, enc);
          s->switches = (int)json_integer_value(json_object_get(item, "switches"));
          s->codec_s = json_number_value(json_object_get(item, "codec_s"));
        }
        tagc_clear_error();
      }
    }
  }
  return TAGC_OK;
}
