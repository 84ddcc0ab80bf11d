#include "cluster/keys.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int id_char(char ch) {
  return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
         ch == '_' || ch == '.' || ch == '-';
}

tagc_status tagc_key_check_id(const char *id, const char *what) {
  if (!id || !*id)
    return tagc_errorf(TAGC_EINVAL, "%s is empty", what);
  size_t n = strlen(id);
  if (n > TAGC_KEY_ID_MAX)
    return tagc_errorf(TAGC_EINVAL, "%s '%.20s...' is longer than %d characters", what, id,
                       TAGC_KEY_ID_MAX);
  if (strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
    return tagc_errorf(TAGC_EINVAL, "%s may not be '%s'", what, id);
  for (size_t i = 0; i < n; i++) {
    if (!id_char(id[i]))
      return tagc_errorf(TAGC_EINVAL, "%s '%s' holds a character outside [A-Za-z0-9_.-]", what, id);
  }
  return TAGC_OK;
}

static tagc_status check_name(const char *name) {
  if (!name || !*name || name[0] == '/' || strlen(name) > TAGC_KEY_NAME_MAX)
    return tagc_errorf(TAGC_EINVAL, "bootstrap name '%s' is empty, too long or starts with '/'",
                       name ? name : "(null)");
  for (const char *p = name; *p; p++) {
    if (!id_char(*p) && *p != '/' && *p != ':')
      return tagc_errorf(TAGC_EINVAL, "bootstrap name '%s' holds a character outside [A-Za-z0-9_.-/:]",
                         name);
  }
  return TAGC_OK;
}

static tagc_status check_number(int64_t v, const char *what) {
  return v >= 0 ? TAGC_OK : tagc_errorf(TAGC_EINVAL, "%s %" PRId64 " is negative", what, v);
}

/* Writes "/tagc/<job>/" + the formatted rest into buf. */
static tagc_status format_key(char *buf, size_t cap, const char *job, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static tagc_status format_key(char *buf, size_t cap, const char *job, const char *fmt, ...) {
  TAGC_CHECK(tagc_key_check_id(job, "job id"));
  int head = snprintf(buf, cap, "/tagc/%s/", job);
  if (head < 0 || (size_t)head >= cap)
    return tagc_errorf(TAGC_EINVAL, "key buffer of %zu bytes is too small", cap);
  va_list ap;
  va_start(ap, fmt);
  int rest = vsnprintf(buf + head, cap - (size_t)head, fmt, ap);
  va_end(ap);
  if (rest < 0 || (size_t)(head + rest) >= cap)
    return tagc_errorf(TAGC_EINVAL, "key buffer of %zu bytes is too small", cap);
  return TAGC_OK;
}

tagc_status tagc_key_job_prefix(const char *job, char *buf, size_t cap) {
  return format_key(buf, cap, job, "%s", "");
}

tagc_status tagc_key_config(const char *job, char *buf, size_t cap) {
  return format_key(buf, cap, job, "config");
}

tagc_status tagc_key_coord(const char *job, int64_t lease, char *buf, size_t cap) {
  return format_key(buf, cap, job, "coord/%" PRIx64, (uint64_t)lease);
}

tagc_status tagc_key_coord_prefix(const char *job, char *buf, size_t cap) {
  return format_key(buf, cap, job, "coord/");
}

tagc_status tagc_key_worker(const char *job, const char *id, char *buf, size_t cap) {
  TAGC_CHECK(tagc_key_check_id(id, "worker id"));
  return format_key(buf, cap, job, "workers/%s", id);
}

tagc_status tagc_key_workers_prefix(const char *job, char *buf, size_t cap) {
  return format_key(buf, cap, job, "workers/");
}

tagc_status tagc_key_gen(const char *job, char *buf, size_t cap) {
  return format_key(buf, cap, job, "gen");
}

tagc_status tagc_key_gens_prefix(const char *job, char *buf, size_t cap) {
  return format_key(buf, cap, job, "gen/");
}

tagc_status tagc_key_gen_prefix(const char *job, int64_t g, char *buf, size_t cap) {
  TAGC_CHECK(check_number(g, "generation"));
  return format_key(buf, cap, job, "gen/%" PRId64 "/", g);
}

tagc_status tagc_key_gen_plan(const char *job, int64_t g, char *buf, size_t cap) {
  TAGC_CHECK(check_number(g, "generation"));
  return format_key(buf, cap, job, "gen/%" PRId64 "/plan", g);
}

tagc_status tagc_key_gen_boot(const char *job, int64_t g, const char *name, char *buf, size_t cap) {
  TAGC_CHECK(check_number(g, "generation"));
  TAGC_CHECK(check_name(name));
  return format_key(buf, cap, job, "gen/%" PRId64 "/boot/%s", g, name);
}

tagc_status tagc_key_gen_boot_prefix(const char *job, int64_t g, char *buf, size_t cap) {
  TAGC_CHECK(check_number(g, "generation"));
  return format_key(buf, cap, job, "gen/%" PRId64 "/boot/", g);
}

tagc_status tagc_key_gen_ready(const char *job, int64_t g, int rank, char *buf, size_t cap) {
  TAGC_CHECK(check_number(g, "generation"));
  TAGC_CHECK(check_number(rank, "rank"));
  return format_key(buf, cap, job, "gen/%" PRId64 "/ready/%d", g, rank);
}

tagc_status tagc_key_gen_ready_prefix(const char *job, int64_t g, char *buf, size_t cap) {
  TAGC_CHECK(check_number(g, "generation"));
  return format_key(buf, cap, job, "gen/%" PRId64 "/ready/", g);
}

tagc_status tagc_key_failure(const char *job, int64_t g, const char *id, char *buf, size_t cap) {
  TAGC_CHECK(check_number(g, "generation"));
  TAGC_CHECK(tagc_key_check_id(id, "worker id"));
  return format_key(buf, cap, job, "failures/%" PRId64 "/%s", g, id);
}

tagc_status tagc_key_failures_prefix(const char *job, char *buf, size_t cap) {
  return format_key(buf, cap, job, "failures/");
}

tagc_status tagc_key_failures_gen_prefix(const char *job, int64_t g, char *buf, size_t cap) {
  TAGC_CHECK(check_number(g, "generation"));
  return format_key(buf, cap, job, "failures/%" PRId64 "/", g);
}

tagc_status tagc_key_ckpt_committed(const char *job, char *buf, size_t cap) {
  return format_key(buf, cap, job, "ckpt/committed");
}

tagc_status tagc_key_progress(const char *job, char *buf, size_t cap) {
  return format_key(buf, cap, job, "progress");
}

tagc_status tagc_key_chaos(const char *job, const char *id, char *buf, size_t cap) {
  TAGC_CHECK(tagc_key_check_id(id, "worker id"));
  return format_key(buf, cap, job, "chaos/%s", id);
}

tagc_status tagc_key_chaos_prefix(const char *job, char *buf, size_t cap) {
  return format_key(buf, cap, job, "chaos/");
}

tagc_status tagc_key_leaving(const char *job, const char *id, char *buf, size_t cap) {
  TAGC_CHECK(tagc_key_check_id(id, "worker id"));
  return format_key(buf, cap, job, "leaving/%s", id);
}

tagc_status tagc_key_leaving_prefix(const char *job, char *buf, size_t cap) {
  return format_key(buf, cap, job, "leaving/");
}

tagc_status tagc_key_done(const char *job, char *buf, size_t cap) {
  return format_key(buf, cap, job, "done");
}

tagc_status tagc_key_suffix(const char *key, const char *prefix, const char **suffix) {
  size_t n = prefix ? strlen(prefix) : 0;
  if (!key || !prefix || strncmp(key, prefix, n) != 0 || key[n] == '\0')
    return tagc_errorf(TAGC_EINVAL, "key '%s' is not under '%s'", key ? key : "(null)",
                       prefix ? prefix : "(null)");
  *suffix = key + n;
  return TAGC_OK;
}

static const char *const failure_kinds[TAGC_FAIL_KINDS] = {
    [TAGC_FAIL_CRASH] = "crash",     [TAGC_FAIL_HANG] = "hang", [TAGC_FAIL_PARTITION] = "partition",
    [TAGC_FAIL_COMM] = "comm",       [TAGC_FAIL_OOM] = "oom",   [TAGC_FAIL_INJECTED] = "injected",
    [TAGC_FAIL_TIMEOUT] = "timeout", [TAGC_FAIL_LEASE] = "lease", [TAGC_FAIL_STRAGGLER] = "straggler"};

const char *tagc_failure_kind_name(tagc_failure_kind k) {
  return k >= 0 && k < TAGC_FAIL_KINDS ? failure_kinds[k] : "unknown";
}

tagc_failure_kind tagc_failure_kind_parse(const char *name) {
  for (int k = 0; name && k < TAGC_FAIL_KINDS; k++) {
    if (strcmp(name, failure_kinds[k]) == 0)
      return (tagc_failure_kind)k;
  }
  return TAGC_FAIL_UNKNOWN;
}
