#include "policy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t tagc_compress_warmup_auto(int64_t lr_warmup, int64_t steps) {
  int64_t fifth = steps > 0 ? steps / 5 : 0;
  return lr_warmup > fifth ? lr_warmup : fifth;
}

double tagc_policy_rank_density(double union_density, int world) {
  if (world <= 1 || union_density >= 1)
    return union_density;
  return 1.0 - pow(1.0 - union_density, 1.0 / (double)world);
}

int tagc_policy_gather_bf16(const char *gather, const tagc_compress_policy *p) {
  if (strcmp(gather, "auto") != 0)
    return strcmp(gather, "bf16") == 0;
  for (int r = 0; r < TAGC_ROLE_COUNT; r++)
    if (p->role[r].kind != TAGC_POLICY_NONE)
      return 1;
  return 0;
}

const char *tagc_policy_gather_name(const char *gather, const tagc_compress_policy *p) {
  if (strcmp(gather, "int8") == 0)
    return "int8";
  if (strcmp(gather, "auto") == 0)
    for (int r = 0; r < TAGC_ROLE_COUNT; r++)
      if (p->role[r].adaptive)
        return "auto"; /* bf16 or int8 with the link; metrics.jsonl tells each step's */
  return tagc_policy_gather_bf16(gather, p) ? "bf16" : "fp32";
}

const char *tagc_policy_kind_name(tagc_policy_kind kind) {
  switch (kind) {
  case TAGC_POLICY_NONE: return "none";
  case TAGC_POLICY_BF16: return "bf16";
  case TAGC_POLICY_TAGC: return "tagc";
  }
  return "?";
}

int tagc_role_policy_equal(const tagc_role_policy *a, const tagc_role_policy *b) {
  if (a->kind != b->kind || a->adaptive != b->adaptive || a->dense_only != b->dense_only)
    return 0;
  return a->kind != TAGC_POLICY_TAGC || (a->density == b->density && a->rho == b->rho);
}

static void preset(tagc_compress_policy *p, tagc_policy_kind all) {
  for (int r = 0; r < TAGC_ROLE_COUNT; r++)
    p->role[r] = (tagc_role_policy){all, TAGC_DEFAULT_DENSITY, 0, 0, 0};
  p->sketch_bf16 = 1;
  if (all != TAGC_POLICY_TAGC)
    return;
  p->role[TAGC_ROLE_NORM].kind = TAGC_POLICY_NONE;
  p->role[TAGC_ROLE_ATTN_QKV].kind = TAGC_POLICY_BF16;
  p->role[TAGC_ROLE_ATTN_PROJ].kind = TAGC_POLICY_BF16;
}

static tagc_status parse_kind(const char *s, size_t n, tagc_policy_kind *out) {
  for (int k = TAGC_POLICY_NONE; k <= TAGC_POLICY_TAGC; k++) {
    const char *name = tagc_policy_kind_name((tagc_policy_kind)k);
    if (strlen(name) == n && strncmp(s, name, n) == 0) {
      *out = (tagc_policy_kind)k;
      return TAGC_OK;
    }
  }
  return tagc_errorf(TAGC_EINVAL, "compression '%.*s' is not none|bf16|tagc|auto", (int)n, s);
}

/* Parses "kind[:density[:rho|auto]]" or "auto" into *rp. */
static tagc_status parse_rule_value(const char *s, size_t n, tagc_role_policy *rp) {
  char buf[128];
  if (n >= sizeof buf)
    return tagc_errorf(TAGC_EINVAL, "compression rule value '%.*s' is too long", (int)n, s);
  memcpy(buf, s, n);
  buf[n] = '\0';
  rp->adaptive = 0;
  rp->dense_only = 0;
  if (!strcmp(buf, "auto")) {
    *rp = (tagc_role_policy){TAGC_POLICY_TAGC, TAGC_AUTO_DENSITY, 0, 1, 0};
    return TAGC_OK;
  }
  char *colon = strchr(buf, ':');
  TAGC_CHECK(parse_kind(buf, colon ? (size_t)(colon - buf) : n, &rp->kind));
  if (!colon)
    return TAGC_OK;
  if (rp->kind != TAGC_POLICY_TAGC)
    return tagc_errorf(TAGC_EINVAL, "compression '%s': only tagc takes parameters", buf);
  char *end;
  rp->density = strtod(colon + 1, &end);
  if (end == colon + 1 || (*end && *end != ':') || !(rp->density > 0 && rp->density <= 1))
    return tagc_errorf(TAGC_EINVAL, "compression '%s': density must be in (0, 1]", buf);
  if (*end == ':') {
    const char *r = end + 1;
    if (!strcmp(r, "auto")) {
      rp->rho = 0;
    } else {
      rp->rho = strtod(r, &end);
      if (end == r || *end || !(rp->rho >= 1 && rp->rho <= 64))
        return tagc_errorf(TAGC_EINVAL, "compression '%s': rho must be auto or in [1, 64]", buf);
    }
  }
  return TAGC_OK;
}

static int role_matches(const char *name, size_t n, int role) {
  const char *rn = tagc_role_name((tagc_role)role);
  if (strlen(rn) == n && strncmp(rn, name, n) == 0)
    return 1;
  /* "attn" and "mlp" name both roles of that sub-layer */
  return (n == 4 && !strncmp(name, "attn", 4) && !strncmp(rn, "attn_", 5)) ||
         (n == 3 && !strncmp(name, "mlp", 3) && !strncmp(rn, "mlp_", 4));
}

tagc_status tagc_policy_parse(const char *spec, tagc_compress_policy *out) {
  tagc_compress_policy p;
  preset(&p, TAGC_POLICY_TAGC);
  const char *s = spec ? spec : "";
  int first = 1;
  while (*s) {
    const char *comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    const char *eq = memchr(s, '=', len);
    if (!eq) {
      tagc_policy_kind k = TAGC_POLICY_NONE;
      if (!first)
        return tagc_errorf(TAGC_EINVAL, "compression rule '%.*s' needs role=kind", (int)len, s);
      int adaptive = len == 4 && !strncmp(s, "auto", 4);
      if (!adaptive)
        TAGC_CHECK(parse_kind(s, len, &k));
      preset(&p, adaptive ? TAGC_POLICY_TAGC : k);
      /* auto: the preset's tagc roles adaptive; its bf16 (attention) and fp32 (norm) roles
       * adaptive among the dense wires. One policy for attention and norms makes a block's
       * ln1, attention and ln2 one segment (one exchange instead of three: on 2 busy cores
       * every exchange's wake-ups cost milliseconds). */
      for (int r = 0; adaptive && r < TAGC_ROLE_COUNT; r++)
        p.role[r] = (tagc_role_policy){TAGC_POLICY_TAGC, TAGC_AUTO_DENSITY, 0, 1,
                                       p.role[r].kind != TAGC_POLICY_TAGC};
    } else {
      int matched = 0;
      size_t nlen = (size_t)(eq - s);
      for (int r = 0; r < TAGC_ROLE_COUNT; r++) {
        if (!role_matches(s, nlen, r))
          continue;
        matched = 1;
        TAGC_CHECK(parse_rule_value(eq + 1, len - nlen - 1, &p.role[r]));
      }
      if (!matched)
        return tagc_errorf(TAGC_EINVAL, "compression rule '%.*s': unknown role '%.*s'", (int)len,
                           s, (int)nlen, s);
    }
    first = 0;
    s += len + (comma != NULL);
  }
  *out = p;
  return TAGC_OK;
}
