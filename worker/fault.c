#include "fault.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[TAGC_FAULT_KINDS] = {"crash", "exit", "oom", "hang", "drop"};

const char *tagc_fault_name(tagc_fault_kind kind) {
  return kind >= 0 && kind < TAGC_FAULT_KINDS ? names[kind] : "?";
}

static void update_next(tagc_faults *f) {
  f->next = -1;
  for (int k = 0; k < TAGC_FAULT_KINDS; k++)
    if (f->at[k] >= 0 && (f->next < 0 || f->at[k] < f->next))
      f->next = f->at[k];
}

static tagc_status parse_item(const char *s, size_t n, tagc_faults *f) {
  char item[64];
  if (n >= sizeof item)
    return tagc_errorf(TAGC_EINVAL, "fault '%.*s...' is too long", 40, s);
  memcpy(item, s, n);
  item[n] = '\0';
  if (!strncmp(item, "ckpt:", 5))
    return TAGC_OK;
  char *end;
  if (!strncmp(item, "slow=", 5)) {
    f->slow_s = strtod(item + 5, &end);
    if (end == item + 5 || *end || !(f->slow_s >= 0 && f->slow_s <= 3600))
      return tagc_errorf(TAGC_EINVAL, "fault '%s': slow=SECONDS takes 0..3600", item);
    return TAGC_OK;
  }
  char *at = strchr(item, '@');
  if (at && !strncmp(item, "nan@", 4)) {
    long long a = strtoll(at + 1, &end, 10), b = a;
    int repeat = *end == '-';
    if (repeat)
      b = strtoll(end + 1, &end, 10);
    if (end == at + 1 || *end || a < 0 || b < a || !isdigit((unsigned char)at[strlen(at) - 1]))
      return tagc_errorf(TAGC_EINVAL, "fault '%s': nan@STEP or nan@FIRST-LAST (steps >= 0, "
                         "FIRST <= LAST)", item);
    if (f->n_nan == TAGC_FAULT_NAN_MAX)
      return tagc_errorf(TAGC_EINVAL, "fault '%s': at most %d nan items", item, TAGC_FAULT_NAN_MAX);
    f->nan[f->n_nan++] = (tagc_fault_nan){a, b, repeat};
    return TAGC_OK;
  }
  if (at && !strncmp(item, "bootcrash@", 10)) {
    long long g = strtoll(at + 1, &end, 10);
    if (end == at + 1 || *end || g < 1)
      return tagc_errorf(TAGC_EINVAL, "fault '%s': the generation must be a number >= 1", item);
    f->boot_crash_gen = g;
    return TAGC_OK;
  }
  if (at) {
    *at = '\0';
    for (int k = 0; k < TAGC_FAULT_KINDS; k++) {
      if (strcmp(item, names[k]) != 0)
        continue;
      long long step = strtoll(at + 1, &end, 10);
      if (end == at + 1 || *end || step < 0)
        return tagc_errorf(TAGC_EINVAL, "fault '%s@%s': the step must be a number >= 0", item, at + 1);
      f->at[k] = step;
      return TAGC_OK;
    }
    *at = '@';
  }
  return tagc_errorf(TAGC_EINVAL,
                     "fault '%s' is not crash|exit|oom|hang|drop|nan@STEP, nan@FIRST-LAST, "
                     "bootcrash@GEN, slow=SECONDS or ckpt:STAGE", item);
}

tagc_status tagc_faults_parse(const char *spec, tagc_faults *out) {
  tagc_faults f;
  for (int k = 0; k < TAGC_FAULT_KINDS; k++)
    f.at[k] = -1;
  f.slow_s = 0;
  f.boot_crash_gen = -1;
  f.n_nan = 0;
  for (const char *p = spec ? spec : ""; *p;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (n)
      TAGC_CHECK(parse_item(p, n, &f));
    p += n + (comma != NULL);
  }
  update_next(&f);
  *out = f;
  return TAGC_OK;
}

int tagc_faults_take(tagc_faults *f, int64_t step) {
  if (f->next != step)
    return -1;
  for (int k = 0; k < TAGC_FAULT_KINDS; k++) {
    if (f->at[k] == step) {
      f->at[k] = -1;
      update_next(f);
      return k;
    }
  }
  return -1;
}

int tagc_faults_nan(tagc_faults *f, int64_t step) {
  int hit = 0;
  for (int i = 0; i < f->n_nan; i++) {
    tagc_fault_nan *n = &f->nan[i];
    if (n->from < 0 || step < n->from || step > n->to)
      continue;
    hit = 1;
    if (!n->repeat)
      n->from = n->to = -1;
  }
  return hit;
}

void tagc_faults_merge(tagc_faults *dst, const tagc_faults *src) {
  for (int i = 0; i < src->n_nan && dst->n_nan < TAGC_FAULT_NAN_MAX; i++)
    dst->nan[dst->n_nan++] = src->nan[i];
  for (int k = 0; k < TAGC_FAULT_KINDS; k++)
    if (src->at[k] >= 0)
      dst->at[k] = src->at[k];
  dst->slow_s = src->slow_s;
  if (src->boot_crash_gen >= 0)
    dst->boot_crash_gen = src->boot_crash_gen;
  update_next(dst);
}
