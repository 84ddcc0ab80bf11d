/* In-memory redundancy (engine/mirror.h): the image store, the push to the buddy and the
 * rebuild of a new generation's shards from the images that survived. */
#include "engine/mirror.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "common/log.h"
#include "engine/codec_params.h"
#include "engine/engine_internal.h"

#define MIRROR_MAGIC 0x4d474154u /* "TAGM" */
#define MIRROR_VERSION 1u
#define HDR_BYTES 64
#define JSON_CAP 65536

/* The head of an image: HDR_BYTES, then JSON_CAP bytes of compression state, then the
 * payload (per segment: p, m, v of S floats, then the residual of W * S floats when the
 * segment feeds back). The CRC covers the JSON bytes and the payload. */
typedef struct image_hdr {
  uint32_t magic, version;
  int64_t gen, step;
  int32_t world, rank, canonical, json_len;
  uint64_t floats;
  uint32_t crc;
} image_hdr;

struct tagc_mirror {
  unsigned char *slot[TAGC_MIRROR_SLOTS]; /* 0, 1: own images; 2 + 2c, 3 + 2c: copy c's */
  size_t cap[TAGC_MIRROR_SLOTS];
  tagc_mirror_entry ent[TAGC_MIRROR_SLOTS];
  size_t image_bytes;
  tagc_device *host_dev; /* of the slots: host memory, page-locked on CUDA */
  tagc_device *dev; /* of the staging buffers (CUDA: NCCL moves device memory) */
  void *stage;
  size_t stage_cap;
};

/* Ranks whose copy at offset d leaves their failure domain. */
static int apart_at(const char *const *domains, int world, int d) {
  int apart = 0;
  for (int r = 0; r < world; r++)
    apart += strcmp(domains[r], domains[(r + d) % world]) != 0;
  return apart;
}

int tagc_mirror_shifts(const char *const *domains, int world, int copies, int *out) {
  int n = 0;
  for (; n < copies && n < world - 1; n++) {
    int best = 0, best_apart = -1;
    for (int d = 1; d < world; d++) {
      int used = 0;
      for (int j = 0; j < n; j++)
        used |= out[j] == d;
      if (used)
        continue;
      int apart = apart_at(domains, world, d);
      if (apart > best_apart) {
        best = d;
        best_apart = apart;
      }
      if (apart == world)
        break;
    }
    out[n] = best;
  }
  return n;
}

int tagc_mirror_shift(const char *const *domains, int world) {
  int d = 1;
  tagc_mirror_shifts(domains, world, 1, &d);
  return d;
}

int64_t tagc_mirror_period(double copy_s, double step_s, double budget) {
  double per = budget * step_s;
  if (!(per > 0) || !(copy_s > 0))
    return 1;
  double k = ceil(copy_s / per - 1e-9); /* a copy of exactly the budget: every step */
  return k < 1 ? 1 : k > 100000 ? 100000 : (int64_t)k;
}

tagc_status tagc_mirror_new(tagc_mirror **out) {
  *out = calloc(1, sizeof **out);
  return *out ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "mirror");
}

void tagc_mirror_free(tagc_mirror *m) {
  if (!m)
    return;
  for (int k = 0; k < TAGC_MIRROR_SLOTS; k++)
    if (m->slot[k])
      tagc_device_host_free(m->host_dev, m->slot[k]);
  if (m->dev)
    tagc_device_free(m->dev, m->stage);
  free(m);
}

void tagc_mirror_clear(tagc_mirror *m) { memset(m->ent, 0, sizeof m->ent); }

void tagc_mirror_entries(const tagc_mirror *m, tagc_mirror_entry out[TAGC_MIRROR_SLOTS]) {
  memcpy(out, m->ent, sizeof m->ent);
}

size_t tagc_mirror_image_bytes(const tagc_mirror *m) { return m->image_bytes; }

/* ---------- layout ---------- */

/* The shard size of a segment of len elements at world size w (engine.c's rule). */
static size_t shard_of(size_t len, int w) {
  if (w == 1)
    return len;
  size_t per = (len + (size_t)w - 1) / (size_t)w;
  return (per + TAGC_SHARD_BLOCK - 1) / TAGC_SHARD_BLOCK * TAGC_SHARD_BLOCK;
}

static int feeds_back(const engine_segment *s) { return tagc_role_policy_feeds_back(&s->pol); }

/* Floats of segment s's part of an image at world size w. */
static size_t seg_floats(const engine_segment *s, int w) {
  size_t S = shard_of(s->len, w);
  return 3 * S + (feeds_back(s) ? (size_t)w * S : 0);
}

static size_t image_floats(const tagc_engine *e, int w) {
  size_t n = 0;
  for (int i = 0; i < e->n_segs; i++)
    n += seg_floats(&e->segs[i], w);
  return n;
}

static size_t image_bytes(size_t floats) { return HDR_BYTES + JSON_CAP + floats * sizeof(float); }

static float *payload(unsigned char *img) { return (float *)(img + HDR_BYTES + JSON_CAP); }

static uint32_t image_crc(const unsigned char *img, const image_hdr *h) {
  uint32_t c = tagc_crc32c(0, img + HDR_BYTES, (size_t)h->json_len);
  return tagc_crc32c(c, img + HDR_BYTES + JSON_CAP, h->floats * sizeof(float));
}

static tagc_status ensure_slot(tagc_mirror *m, tagc_device *d, int k, size_t bytes) {
  m->ent[k].step = 0; /* invalid while written */
  if (m->cap[k] >= bytes)
    return TAGC_OK;
  if (m->host_dev && m->host_dev != d)
    return tagc_errorf(TAGC_EINVAL, "the in-memory copies belong to another device");
  m->host_dev = d;
  if (m->slot[k])
    tagc_device_host_free(d, m->slot[k]);
  m->slot[k] = NULL;
  m->cap[k] = 0;
  void *p = NULL;
  tagc_status st = tagc_device_host_alloc(d, bytes, &p);
  if (st != TAGC_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", tagc_last_error());
    return tagc_errorf(TAGC_ENOMEM, "in-memory copy of %zu bytes (--mirror-every 0 turns the "
                       "copies off): %s", bytes, why);
  }
  m->slot[k] = p;
  m->cap[k] = bytes;
  return TAGC_OK;
}

/* The older (or an empty) slot of the pair starting at k. */
static int older(const tagc_mirror *m, int k) {
  return m->ent[k].step <= m->ent[k + 1].step ? k : k + 1;
}

/* ---------- transfers (host bytes; through device memory on CUDA) ---------- */

static tagc_status stage(tagc_mirror *m, tagc_device *d, size_t bytes) {
  if (m->dev == d && m->stage_cap >= bytes)
    return TAGC_OK;
  if (m->dev)
    tagc_device_free(m->dev, m->stage);
  m->stage = NULL;
  m->stage_cap = 0;
  m->dev = d;
  TAGC_CHECK(tagc_device_alloc(d, bytes, &m->stage));
  m->stage_cap = bytes;
  return TAGC_OK;
}

/* alltoallv of host buffers; send_bytes[rank] == recv_bytes[rank] is copied locally. */
static tagc_status xfer(tagc_engine *e, tagc_mirror *m, const void *send, const size_t *sb,
                        void *recv, const size_t *rb) {
  size_t st = 0, rt = 0;
  for (int j = 0; j < e->world; j++) {
    st += sb[j];
    rt += rb[j];
  }
  if (!e->cfg.comm) { /* world size 1: only the own block */
    if (sb[0])
      memcpy(recv, send, sb[0]);
    return TAGC_OK;
  }
  if (!tagc_device_is_cuda(e->dev))
    return tagc_comm_alltoallv(e->cfg.comm, send, sb, recv, rb, e->cfg.op_timeout_s);
  TAGC_CHECK(stage(m, e->dev, st + rt));
  char *ds = m->stage, *dr = (char *)m->stage + st;
  if (st)
    TAGC_CHECK(tagc_device_copy(e->dev, TAGC_LANE_COMPUTE, ds, send, st, TAGC_COPY_H2D));
  TAGC_CHECK(tagc_device_sync(e->dev, TAGC_LANE_COMPUTE));
  TAGC_CHECK(tagc_comm_alltoallv(e->cfg.comm, ds, sb, dr, rb, e->cfg.op_timeout_s));
  return rt ? tagc_device_copy(e->dev, TAGC_LANE_COMPUTE, recv, dr, rt, TAGC_COPY_D2H) : TAGC_OK;
}

/* ---------- push ---------- */

/* Copies the live state into own slot k: header, compression state, payload, CRC. */
static tagc_status capture(tagc_engine *e, tagc_mirror *m, int k, int64_t gen, int64_t step) {
  size_t floats = image_floats(e, e->world), bytes = image_bytes(floats);
  TAGC_CHECK(ensure_slot(m, e->dev, k, bytes));
  unsigned char *img = m->slot[k];
  json_t *comp = tagc_engine_compression_state(e);
  char *js = comp ? json_dumps(comp, JSON_COMPACT) : NULL;
  json_decref(comp);
  size_t jl = js ? strlen(js) : 0;
  if (!js || jl > JSON_CAP) {
    free(js);
    return tagc_errorf(js ? TAGC_EINVAL : TAGC_ENOMEM, "compression state of %zu bytes for the "
                       "in-memory copy (at most %d)", jl, JSON_CAP);
  }
  memcpy(img + HDR_BYTES, js, jl);
  free(js);
  float *out = payload(img);
  for (int i = 0; i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    size_t S = s->S, n = S * sizeof(float);
    const float *src[3] = {s->p, s->m, s->v};
    for (int j = 0; j < 3; j++, out += S)
      TAGC_CHECK(tagc_device_copy(e->dev, TAGC_LANE_COMPUTE, out, src[j], n, TAGC_COPY_D2H));
    if (!feeds_back(s))
      continue;
    size_t full = (size_t)e->world * S;
    const float *res = tagc_grad_segment_residual(e->codec, s->codec);
    if (res)
      TAGC_CHECK(tagc_device_copy(e->dev, TAGC_LANE_COMPUTE, out, res, full * sizeof(float),
                                  TAGC_COPY_D2H));
    else
      memset(out, 0, full * sizeof(float));
    out += full;
  }
  image_hdr h = {MIRROR_MAGIC, MIRROR_VERSION, gen, step, e->world, e->rank, e->canonical,
                 (int32_t)jl, (uint64_t)floats, 0};
  h.crc = image_crc(img, &h);
  memset(img, 0, HDR_BYTES);
  memcpy(img, &h, sizeof h);
  m->ent[k] = (tagc_mirror_entry){gen, step, e->world, e->rank, (int32_t)jl, e->canonical};
  m->image_bytes = bytes;
  return TAGC_OK;
}

tagc_status tagc_engine_mirror_push(tagc_engine *e, tagc_mirror *m, int64_t gen, int64_t step,
                                    const int *shifts, int copies) {
  TAGC_CHECK(engine_drain(e)); /* the comm thread is idle: this is a collective of the caller */
  int own = older(m, 0);
  TAGC_CHECK(capture(e, m, own, gen, step));
  if (e->world == 1)
    return TAGC_OK;
  int w = e->world;
  if (copies < 1 || copies > TAGC_MIRROR_MAX_COPIES || copies > w - 1)
    return tagc_errorf(TAGC_EINVAL, "%d in-memory copies at world size %d (1 to %d)", copies, w,
                       w - 1 < TAGC_MIRROR_MAX_COPIES ? w - 1 : TAGC_MIRROR_MAX_COPIES);
  for (int c = 0; c < copies; c++) {
    int shift = shifts[c];
    if (shift < 1 || shift >= w || (c > 0 && shift == shifts[0]))
      return tagc_errorf(TAGC_EINVAL, "copy offset %d for world size %d", shift, w);
  }
  size_t bytes = m->image_bytes;
  for (int c = 0; c < copies; c++) {
    int shift = shifts[c];
    int peer = older(m, 2 + 2 * c), from = (e->rank + w - shift) % w;
    TAGC_CHECK(ensure_slot(m, e->dev, peer, bytes));
    size_t sb[w], rb[w];
    memset(sb, 0, sizeof sb);
    memset(rb, 0, sizeof rb);
    sb[(e->rank + shift) % w] = bytes;
    rb[from] = bytes;
    TAGC_CHECK(xfer(e, m, m->slot[own], sb, m->slot[peer], rb));
    image_hdr h;
    memcpy(&h, m->slot[peer], sizeof h);
    if (h.magic != MIRROR_MAGIC || h.version != MIRROR_VERSION || h.gen != gen ||
        h.step != step || h.world != w || h.rank != from || h.json_len < 0 ||
        h.json_len > JSON_CAP || h.floats != image_floats(e, w))
      return tagc_errorf(TAGC_EPEER, "the in-memory copy received from rank %d is malformed "
                         "(step %lld, rank %d, world %d for step %lld, rank %d, world %d)", from,
                         (long long)h.step, (int)h.rank, (int)h.world, (long long)step, from, w);
    m->ent[peer] = (tagc_mirror_entry){h.gen, h.step, h.world, h.rank, h.json_len, h.canonical};
  }
  /* slots of copies no longer made (fewer copies than before) hold older steps and are
     offered as such: tagc_mirror_choose takes the newest complete step */
  return TAGC_OK;
}

/* ---------- choosing what to rebuild from ---------- */

/* Newest first: step, then generation. */
static int newer(const tagc_mirror_entry *a, const tagc_mirror_entry *b) {
  return a->step != b->step ? a->step > b->step : a->gen > b->gen;
}

static int same_group(const tagc_mirror_entry *a, const tagc_mirror_entry *b) {
  return a->step == b->step && a->gen == b->gen && a->world == b->world;
}

void tagc_mirror_choose(const tagc_mirror_entry *entries, int world_new, tagc_mirror_choice *out) {
  memset(out, 0, sizeof *out);
  out->lost_rank = -1;
  int n = world_new * TAGC_MIRROR_SLOTS;
  const tagc_mirror_entry *prev = NULL; /* the group tried last: the next is older */
  for (;;) {
    const tagc_mirror_entry *b = NULL;
    for (int i = 0; i < n; i++) {
      const tagc_mirror_entry *c = &entries[i];
      if (c->step <= 0 || c->world < 1 || c->world > 1024 || c->rank < 0 || c->rank >= c->world)
        continue;
      if (prev && !newer(prev, c))
        continue; /* tried already, or newer than a group tried */
      if (!b || newer(c, b))
        b = c;
    }
    if (!b)
      return; /* out->found stays 0 */
    out->gen = b->gen;
    out->step = b->step;
    out->world = b->world;
    out->canonical = 1;
    int complete = 1;
    for (int q = 0; q < b->world; q++) {
      out->provider[q] = -1;
      for (int i = 0; i < n && out->provider[q] < 0; i++) {
        const tagc_mirror_entry *c = &entries[i];
        if (same_group(c, b) && c->rank == q) {
          out->provider[q] = i / TAGC_MIRROR_SLOTS;
          out->slot[q] = i % TAGC_MIRROR_SLOTS;
          out->canonical &= c->canonical != 0;
        }
      }
      if (out->provider[q] < 0 && complete) {
        complete = 0;
        if (out->lost_rank < 0) { /* the newest group's loss is the one worth naming */
          out->lost_gen = b->gen;
          out->lost_step = b->step;
          out->lost_rank = q;
          out->lost_world = b->world;
        }
      }
    }
    if (complete) {
      out->found = 1;
      return;
    }
    prev = b;
  }
}

/* ---------- rebuilding ---------- */

/* Overlap of [a0, a1) and [b0, b1): *lo and the count. */
static size_t overlap(size_t a0, size_t a1, size_t b0, size_t b1, size_t *lo) {
  *lo = a0 > b0 ? a0 : b0;
  size_t hi = a1 < b1 ? a1 : b1;
  return hi > *lo ? hi - *lo : 0;
}

/* Elements of segment s that old rank q (old shard So) gives new rank d (new shard Sn):
 * parameters and moments where their ranges meet; the residual slice of d's range. */
typedef struct piece {
  size_t pmv, pmv_lo; /* count, global start */
  size_t res, res_lo;
} piece;

static piece piece_of(const engine_segment *s, int q, size_t So, int d, size_t Sn) {
  piece p;
  size_t len = s->len;
  size_t n0 = (size_t)d * Sn < len ? (size_t)d * Sn : len, n1 = (size_t)(d + 1) * Sn < len ? (size_t)(d + 1) * Sn : len;
  size_t o0 = (size_t)q * So < len ? (size_t)q * So : len, o1 = (size_t)(q + 1) * So < len ? (size_t)(q + 1) * So : len;
  p.pmv = overlap(o0, o1, n0, n1, &p.pmv_lo);
  p.res = feeds_back(s) ? n1 - n0 : 0;
  p.res_lo = n0;
  return p;
}

/* The JSON's bytes in a block, padded so that the floats after it stay aligned. */
static size_t json_pad(size_t n) { return (n + 7) & ~(size_t)7; }

/* Bytes old rank q's holder sends new rank d (old world wo; q == 0 also sends the JSON). */
static size_t block_bytes(const tagc_engine *e, int q, int wo, int d, size_t json_len) {
  size_t f = 0;
  for (int i = 0; i < e->n_segs; i++) {
    const engine_segment *s = &e->segs[i];
    piece p = piece_of(s, q, shard_of(s->len, wo), d, s->S);
    f += 3 * p.pmv + p.res;
  }
  return f * sizeof(float) + (q == 0 ? json_pad(json_len) : 0);
}

/* Packs old rank q's image (img, world wo) for new rank d. */
static unsigned char *pack(const tagc_engine *e, const unsigned char *img, int q, int wo, int d,
                           unsigned char *out) {
  const image_hdr *h = (const image_hdr *)img;
  if (q == 0) {
    memcpy(out, img + HDR_BYTES, (size_t)h->json_len);
    memset(out + h->json_len, 0, json_pad((size_t)h->json_len) - (size_t)h->json_len);
    out += json_pad((size_t)h->json_len);
  }
  const float *base = (const float *)(img + HDR_BYTES + JSON_CAP);
  for (int i = 0; i < e->n_segs; i++) {
    const engine_segment *s = &e->segs[i];
    size_t So = shard_of(s->len, wo);
    piece p = piece_of(s, q, So, d, s->S);
    for (int j = 0; j < 3; j++) {
      memcpy(out, base + j * So + (p.pmv_lo - (size_t)q * So), p.pmv * sizeof(float));
      out += p.pmv * sizeof(float);
    }
    if (p.res) {
      memcpy(out, base + 3 * So + p.res_lo, p.res * sizeof(float));
      out += p.res * sizeof(float);
    }
    base += seg_floats(s, wo);
  }
  return out;
}

/* Checks a held image before it is offered: header and CRC. */
static int image_ok(const tagc_mirror *m, int k) {
  const tagc_mirror_entry *c = &m->ent[k];
  if (c->step <= 0)
    return 0;
  image_hdr h;
  memcpy(&h, m->slot[k], sizeof h);
  if (h.magic != MIRROR_MAGIC || h.step != c->step || h.json_len < 0 || h.json_len > JSON_CAP ||
      image_bytes(h.floats) > m->cap[k] || image_crc(m->slot[k], &h) != h.crc) {
    LOG_WARN("engine", "in-memory copy of rank %d, step %lld is damaged (CRC32C): not used",
             (int)c->rank, (long long)c->step);
    return 0;
  }
  return 1;
}

tagc_status tagc_engine_mirror_restore(tagc_engine *e, tagc_mirror *m, int64_t min_step,
                                       tagc_mirror_choice *ch, int64_t *step) {
  *step = 0;
  TAGC_CHECK(engine_drain(e));
  int wn = e->world, me = e->rank;
  tagc_mirror_entry mine[TAGC_MIRROR_SLOTS];
  for (int k = 0; k < TAGC_MIRROR_SLOTS; k++) {
    mine[k] = m->ent[k];
    if (!image_ok(m, k))
      mine[k].step = 0;
  }
  tagc_mirror_entry *all = calloc((size_t)wn * TAGC_MIRROR_SLOTS, sizeof *all);
  if (!all)
    return tagc_errorf(TAGC_ENOMEM, "mirror entries");
  tagc_status st = TAGC_OK;
  if (e->cfg.comm)
    st = tagc_device_allgather_host(e->dev, e->cfg.comm, mine, all, sizeof mine, NULL,
                                    e->cfg.op_timeout_s);
  else
    memcpy(all, mine, sizeof mine);
  if (st == TAGC_OK)
    tagc_mirror_choose(all, wn, ch);
  int json_len = 0;
  if (st == TAGC_OK && ch->found)
    json_len = all[ch->provider[0] * TAGC_MIRROR_SLOTS + ch->slot[0]].json_len;
  free(all);
  TAGC_CHECK(st);
  if (!ch->found || ch->step < min_step)
    return TAGC_ENOTFOUND; /* the caller says why (ch) */
  int wo = ch->world;
  size_t *sb = calloc((size_t)wn, sizeof *sb), *rb = calloc((size_t)wn, sizeof *rb);
  if (!sb || !rb) {
    free(sb);
    free(rb);
    return tagc_errorf(TAGC_ENOMEM, "mirror counts");
  }
  for (int d = 0; d < wn; d++)
    for (int q = 0; q < wo; q++) {
      if (ch->provider[q] == me)
        sb[d] += block_bytes(e, q, wo, d, (size_t)json_len);
      if (d == ch->provider[q])
        rb[d] += block_bytes(e, q, wo, me, (size_t)json_len);
    }
  size_t st_total = 0, rt_total = 0;
  for (int d = 0; d < wn; d++) {
    st_total += sb[d];
    rt_total += rb[d];
  }
  unsigned char *send = malloc(st_total + 1), *recv = malloc(rt_total + 1);
  if (!send || !recv)
    st = tagc_errorf(TAGC_ENOMEM, "rebuild buffers of %zu + %zu bytes", st_total, rt_total);
  unsigned char *w = send;
  for (int d = 0; st == TAGC_OK && d < wn; d++)
    for (int q = 0; q < wo; q++)
      if (ch->provider[q] == me)
        w = pack(e, m->slot[ch->slot[q]], q, wo, d, w);
  if (st == TAGC_OK)
    st = xfer(e, m, send, sb, recv, rb);
  /* where old rank q's block starts in recv: providers in rank order, each's q ascending */
  size_t *at = calloc((size_t)wo, sizeof *at);
  if (st == TAGC_OK && !at)
    st = tagc_errorf(TAGC_ENOMEM, "mirror offsets");
  size_t off = 0;
  for (int p = 0; st == TAGC_OK && p < wn; p++)
    for (int q = 0; q < wo; q++)
      if (ch->provider[q] == p) {
        at[q] = off;
        off += block_bytes(e, q, wo, me, (size_t)json_len);
      }
  size_t max_s = engine_max_shard(e);
  float *host = st == TAGC_OK ? calloc(4 * max_s, sizeof(float)) : NULL;
  if (st == TAGC_OK && !host)
    st = tagc_errorf(TAGC_ENOMEM, "rebuild buffer of %zu floats", 4 * max_s);
  /* each block's cursor: json first for q == 0 */
  size_t *cur = calloc((size_t)wo, sizeof *cur);
  if (st == TAGC_OK && !cur)
    st = tagc_errorf(TAGC_ENOMEM, "mirror cursors");
  for (int q = 0; st == TAGC_OK && q < wo; q++)
    cur[q] = at[q] + (q == 0 ? json_pad((size_t)json_len) : 0);
  int canonical = ch->canonical;
  for (int i = 0; st == TAGC_OK && i < e->n_segs; i++) {
    engine_segment *s = &e->segs[i];
    size_t Sn = s->S, So = shard_of(s->len, wo);
    memset(host, 0, 4 * Sn * sizeof(float));
    float *res_acc = host + 3 * Sn;
    for (int q = 0; q < wo; q++) {
      piece p = piece_of(s, q, So, me, Sn);
      const float *src = (const float *)(recv + cur[q]);
      for (int j = 0; j < 3; j++) {
        memcpy(host + j * Sn + (p.pmv_lo - (size_t)me * Sn), src, p.pmv * sizeof(float));
        src += p.pmv;
      }
      if (p.res) {
        /* the canonical sum over old ranks in rank order (comm.h reduce-scatter: the first
           row copied, the others added); after a save's canonicalisation only the owner's row
           is non-zero and is taken as it is */
        for (size_t x = 0; x < p.res; x++) {
          size_t g = p.res_lo + x;
          if (canonical)
            res_acc[x] = (int)(g / So) == q ? src[x] : res_acc[x];
          else
            res_acc[x] = q == 0 ? src[x] : res_acc[x] + src[x];
        }
        src += p.res;
      }
      cur[q] = (size_t)((const unsigned char *)src - recv);
    }
    float *dst[3] = {s->p, s->m, s->v};
    for (int j = 0; st == TAGC_OK && j < 3; j++)
      st = tagc_device_copy(e->dev, TAGC_LANE_COMPUTE, dst[j], host + j * Sn, Sn * sizeof(float),
                            TAGC_COPY_H2D);
    float *shard = NULL;
    if (st == TAGC_OK)
      st = tagc_grad_segment_reset_residual(e->codec, s->codec, TAGC_LANE_COMPUTE, &shard);
    if (st == TAGC_OK && shard)
      st = tagc_device_copy(e->dev, TAGC_LANE_COMPUTE, shard, res_acc, Sn * sizeof(float),
                            TAGC_COPY_H2D);
  }
  if (st == TAGC_OK) {
    json_error_t jerr;
    json_t *comp = json_loadb((const char *)recv + at[0], (size_t)json_len, 0, &jerr);
    st = comp ? tagc_engine_set_compression_state(e, comp)
              : tagc_errorf(TAGC_EPEER, "the in-memory copy's compression state is not JSON: %s",
                            jerr.text);
    json_decref(comp);
  }
  if (st == TAGC_OK)
    st = tagc_device_sync(e->dev, TAGC_LANE_COMPUTE);
  free(host);
  free(cur);
  free(at);
  free(send);
  free(recv);
  free(sb);
  free(rb);
  if (st == TAGC_OK) {
    e->canonical = 1;
    *step = ch->step;
  }
  return st;
}
