#include "engine/policy.h"

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

/* The fixed rules by name: none, bf16, tagc. */
static const struct {
  const char *name;
  unsigned encodings;
} fixed_rules[] = {
    {"none", TAGC_ENC_BIT(TAGC_ENC_FP32)},
    {"bf16", TAGC_ENC_BIT(TAGC_ENC_BF16)},
    {"tagc", TAGC_ENC_BIT(TAGC_ENC_SKETCH) | TAGC_ENC_BIT(TAGC_ENC_BF16)},
};
enum { RULE_NONE, RULE_BF16, RULE_TAGC, N_RULES };

static tagc_role_policy fixed(int rule) {
  return (tagc_role_policy){fixed_rules[rule].encodings, 0, TAGC_DEFAULT_DENSITY, 0};
}

/* `auto`: every wire (sketch at TAGC_AUTO_DENSITY), or the dense ones only. */
static tagc_role_policy adaptive(int dense_only) {
  return (tagc_role_policy){dense_only ? TAGC_ENC_DENSE : TAGC_ENC_ALL, 1, TAGC_AUTO_DENSITY, 0};
}

int tagc_role_policy_sketches(const tagc_role_policy *p) {
  return (p->encodings & TAGC_ENC_BIT(TAGC_ENC_SKETCH)) != 0;
}

int tagc_role_policy_feeds_back(const tagc_role_policy *p) {
  return (p->encodings & (TAGC_ENC_BIT(TAGC_ENC_SKETCH) | TAGC_ENC_BIT(TAGC_ENC_INT8))) != 0;
}

tagc_encoding tagc_role_policy_start(const tagc_role_policy *p) {
  if (p->adaptive)
    return TAGC_ENC_BF16;
  if (tagc_role_policy_sketches(p))
    return TAGC_ENC_SKETCH;
  for (int e = 0; e < TAGC_ENC_COUNT; e++)
    if (p->encodings & TAGC_ENC_BIT(e))
      return (tagc_encoding)e;
  return TAGC_ENC_FP32;
}

const char *tagc_role_policy_name(const tagc_role_policy *p) {
  for (int r = 0; !p->adaptive && r < RULE_TAGC; r++)
    if (p->encodings == fixed_rules[r].encodings)
      return fixed_rules[r].name;
  return "tagc";
}

tagc_status tagc_policy_gather(const char *gather, const tagc_compress_policy *p,
                               tagc_encoding *start, int *adaptive_out) {
  *adaptive_out = 0;
  if (strcmp(gather, "auto") != 0)
    return tagc_encoding_parse(gather, TAGC_ENC_DENSE, "--gather", start);
  *start = TAGC_ENC_FP32;
  for (int r = 0; r < TAGC_ROLE_COUNT; r++) {
    if (p->role[r].encodings != TAGC_ENC_BIT(TAGC_ENC_FP32) || p->role[r].adaptive)
      *start = TAGC_ENC_BF16; /* some role compresses */
    *adaptive_out |= p->role[r].adaptive;
  }
  return TAGC_OK;
}

int tagc_role_policy_equal(const tagc_role_policy *a, const tagc_role_policy *b) {
  if (a->encodings != b->encodings || a->adaptive != b->adaptive)
    return 0;
  return !tagc_role_policy_feeds_back(a) || (a->density == b->density && a->rho == b->rho);
}

static void preset(tagc_compress_policy *p, int rule) {
  for (int r = 0; r < TAGC_ROLE_COUNT; r++)
    p->role[r] = fixed(rule);
  if (rule != RULE_TAGC)
    return;
  p->role[TAGC_ROLE_NORM] = fixed(RULE_NONE);
  p->role[TAGC_ROLE_ATTN_QKV] = fixed(RULE_BF16);
  p->role[TAGC_ROLE_ATTN_PROJ] = fixed(RULE_BF16);
}

static tagc_status parse_rule(const char *s, size_t n, int *out) {
  for (int k = 0; k < N_RULES; k++) {
    const char *name = fixed_rules[k].name;
    if (strlen(name) == n && strncmp(s, name, n) == 0) {
      *out = k;
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
  if (!strcmp(buf, "auto")) {
    *rp = adaptive(0);
    return TAGC_OK;
  }
  char *colon = strchr(buf, ':');
  int rule = RULE_NONE;
  TAGC_CHECK(parse_rule(buf, colon ? (size_t)(colon - buf) : n, &rule));
  double density = rp->density, rho = rp->rho; /* a rule keeps the preset's unless it gives them */
  *rp = fixed(rule);
  rp->density = density;
  rp->rho = rho;
  if (!colon)
    return TAGC_OK;
  if (rule != RULE_TAGC)
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
  preset(&p, RULE_TAGC);
  const char *s = spec ? spec : "";
  int first = 1;
  while (*s) {
    const char *comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    const char *eq = memchr(s, '=', len);
    if (!eq) {
      int rule = RULE_TAGC;
      if (!first)
        return tagc_errorf(TAGC_EINVAL, "compression rule '%.*s' needs role=kind", (int)len, s);
      int is_auto = len == 4 && !strncmp(s, "auto", 4);
      if (!is_auto)
        TAGC_CHECK(parse_rule(s, len, &rule));
      preset(&p, rule);
      /* auto: the preset's tagc roles adaptive; its bf16 (attention) and fp32 (norm) roles
       * adaptive among the dense wires. One policy for attention and norms makes a block's
       * ln1, attention and ln2 one segment (one exchange instead of three: on 2 busy cores
       * every exchange's wake-ups cost milliseconds). */
      for (int r = 0; is_auto && r < TAGC_ROLE_COUNT; r++)
        p.role[r] = adaptive(!tagc_role_policy_sketches(&p.role[r]));
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
