#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define MAX_RULES 16

typedef struct rule {
  char subsys[32];
  tagc_log_level level;
} rule;

static tagc_log_level default_level = TAGC_LOG_INFO;
static rule rules[MAX_RULES];
static int n_rules;
static int use_json = -1; /* -1: decide on first use */
static char tag[64];

static const char *level_names[] = {"debug", "info", "warn", "error", "off"};

static int parse_level(const char *s, size_t len, tagc_log_level *out) {
  for (int i = 0; i <= TAGC_LOG_OFF; i++) {
    if (strlen(level_names[i]) == len && strncasecmp(s, level_names[i], len) == 0) {
      *out = (tagc_log_level)i;
      return 1;
    }
  }
  return 0;
}

tagc_status tagc_log_configure(const char *spec, tagc_log_format format) {
  tagc_log_level def = TAGC_LOG_INFO;
  rule parsed[MAX_RULES];
  int n = 0;
  const char *p = spec ? spec : "";
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *eq = memchr(p, '=', len);
    if (!eq) {
      if (!parse_level(p, len, &def))
        return tagc_errorf(TAGC_EINVAL, "log level '%.*s' is not debug|info|warn|error|off", (int)len, p);
    } else {
      size_t sl = (size_t)(eq - p);
      if (n == MAX_RULES || sl == 0 || sl >= sizeof parsed[0].subsys)
        return tagc_errorf(TAGC_EINVAL, "log rule '%.*s' is malformed", (int)len, p);
      memcpy(parsed[n].subsys, p, sl);
      parsed[n].subsys[sl] = '\0';
      if (!parse_level(eq + 1, len - sl - 1, &parsed[n].level))
        return tagc_errorf(TAGC_EINVAL, "log rule '%.*s' has an unknown level", (int)len, p);
      n++;
    }
    p += len;
    if (*p == ',')
      p++;
  }
  default_level = def;
  memcpy(rules, parsed, sizeof parsed);
  n_rules = n;
  use_json = format == TAGC_LOG_AUTO ? -1 : format == TAGC_LOG_JSON;
  return TAGC_OK;
}

tagc_status tagc_log_format_parse(const char *name, tagc_log_format *out) {
  static const char *names[] = {"auto", "text", "json"};
  for (int i = 0; i < 3; i++)
    if (name && !strcmp(name, names[i])) {
      *out = (tagc_log_format)i;
      return TAGC_OK;
    }
  return tagc_errorf(TAGC_EINVAL, "log format '%s' is not auto|text|json", name ? name : "");
}

tagc_log_format tagc_log_format_resolve(tagc_log_format format) {
  if (format != TAGC_LOG_AUTO)
    return format;
  return isatty(STDERR_FILENO) ? TAGC_LOG_TEXT : TAGC_LOG_JSON;
}

const char *tagc_log_format_name(tagc_log_format format) {
  return tagc_log_format_resolve(format) == TAGC_LOG_TEXT ? "text" : "json";
}

void tagc_log_set_tag(const char *t) {
  snprintf(tag, sizeof tag, "%s", t ? t : "");
}

int tagc_log_enabled(tagc_log_level level, const char *subsys) {
  tagc_log_level min = default_level;
  for (int i = 0; i < n_rules; i++)
    if (strcmp(rules[i].subsys, subsys) == 0)
      min = rules[i].level;
  return level >= min && level < TAGC_LOG_OFF;
}

/* Appends s to buf as a JSON string body (without quotes). */
static size_t json_escape(char *buf, size_t cap, size_t pos, const char *s) {
  for (; *s && pos + 7 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      buf[pos++] = '\\';
      buf[pos++] = (char)c;
    } else if (c < 0x20) {
      pos += (size_t)snprintf(buf + pos, cap - pos, "\\u%04x", c);
    } else {
      buf[pos++] = (char)c;
    }
  }
  return pos;
}

void tagc_log(tagc_log_level level, const char *subsys, const char *fmt, ...) {
  if (!tagc_log_enabled(level, subsys))
    return;
  if (use_json < 0)
    use_json = !isatty(STDERR_FILENO);
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);

  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char when[40];
  size_t wl = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(when + wl, sizeof when - wl, ".%03ldZ", ts.tv_nsec / 1000000);

  char line[4096];
  size_t pos;
  if (use_json) {
    pos = (size_t)snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"sys\":\"", when,
                           level_names[level]);
    pos = json_escape(line, sizeof line, pos, subsys);
    if (tag[0]) {
      pos += (size_t)snprintf(line + pos, sizeof line - pos, "\",\"tag\":\"");
      pos = json_escape(line, sizeof line, pos, tag);
    }
    pos += (size_t)snprintf(line + pos, sizeof line - pos, "\",\"msg\":\"");
    pos = json_escape(line, sizeof line, pos, msg);
    pos += (size_t)snprintf(line + pos, sizeof line - pos, "\"}\n");
  } else {
    pos = (size_t)snprintf(line, sizeof line, "%s%s%s %-5s %s: %s\n", when + 11, tag[0] ? " " : "",
                           tag, level_names[level], subsys, msg);
  }
  if (pos >= sizeof line) {
    pos = sizeof line - 1;
    line[pos - 1] = '\n';
  }
  fwrite(line, 1, pos, stderr);
}
