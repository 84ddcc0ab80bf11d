#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

tagc_status tagc_json_load_file(const char *path, json_t **out) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "%s", path);
  json_error_t err;
  json_t *v = json_loadf(f, JSON_REJECT_DUPLICATES, &err);
  fclose(f);
  if (!v)
    return tagc_errorf(TAGC_EPROTO, "%s:%d:%d: %s", path, err.line, err.column, err.text);
  *out = v;
  return TAGC_OK;
}

tagc_status tagc_json_parse(const char *text, size_t len, json_t **out) {
  json_error_t err;
  json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!v)
    return tagc_errorf(TAGC_EPROTO, "malformed JSON at offset %d: %s", err.position, err.text);
  *out = v;
  return TAGC_OK;
}

static tagc_status lookup(const json_t *obj, const char *key, json_t **v) {
  *v = NULL;
  if (!json_is_object(obj))
    return tagc_errorf(TAGC_EPROTO, "expected a JSON object holding '%s'", key);
  *v = json_object_get(obj, key);
  if (!*v)
    return tagc_errorf(TAGC_ENOTFOUND, "JSON key '%s' is missing", key);
  return TAGC_OK;
}

tagc_status tagc_json_get_str(const json_t *obj, const char *key, const char **out) {
  json_t *v;
  TAGC_CHECK(lookup(obj, key, &v));
  if (!json_is_string(v))
    return tagc_errorf(TAGC_EPROTO, "JSON key '%s' must be a string", key);
  *out = json_string_value(v);
  return TAGC_OK;
}

tagc_status tagc_json_get_int(const json_t *obj, const char *key, int64_t *out) {
  json_t *v;
  TAGC_CHECK(lookup(obj, key, &v));
  if (!json_is_integer(v))
    return tagc_errorf(TAGC_EPROTO, "JSON key '%s' must be an integer", key);
  *out = json_integer_value(v);
  return TAGC_OK;
}

tagc_status tagc_json_get_num(const json_t *obj, const char *key, double *out) {
  json_t *v;
  TAGC_CHECK(lookup(obj, key, &v));
  if (!json_is_number(v))
    return tagc_errorf(TAGC_EPROTO, "JSON key '%s' must be a number", key);
  *out = json_number_value(v);
  return TAGC_OK;
}

tagc_status tagc_json_get_bool(const json_t *obj, const char *key, int *out) {
  json_t *v;
  TAGC_CHECK(lookup(obj, key, &v));
  if (!json_is_boolean(v))
    return tagc_errorf(TAGC_EPROTO, "JSON key '%s' must be true or false", key);
  *out = json_is_true(v);
  return TAGC_OK;
}

tagc_status tagc_json_get_i64_str(const json_t *obj, const char *key, int64_t def, int64_t *out) {
  json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
  if (json_is_object(obj) && !v) { /* absent: the default, and no error detail left behind
                                      (a later failure would otherwise print "key missing") */
    *out = def;
    return TAGC_OK;
  }
  TAGC_CHECK(lookup(obj, key, &v));
  if (json_is_integer(v)) {
    *out = json_integer_value(v);
    return TAGC_OK;
  }
  if (!json_is_string(v))
    return tagc_errorf(TAGC_EPROTO, "JSON key '%s' must be a 64-bit number", key);
  const char *s = json_string_value(v);
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno || end == s || *end)
    return tagc_errorf(TAGC_EPROTO, "JSON key '%s' holds '%.40s', not a 64-bit number", key, s);
  *out = x;
  return TAGC_OK;
}

char *tagc_json_dump(const json_t *value) {
  return json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
}

tagc_status tagc_json_write_file(const char *path, const json_t *value) {
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= sizeof tmp)
    return tagc_errorf(TAGC_EINVAL, "path too long: %s", path);
  char *text = json_dumps(value, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  if (!text)
    return tagc_errorf(TAGC_ENOMEM, "JSON dump for %s", path);
  tagc_status st = TAGC_OK;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    st = tagc_errnof(TAGC_EIO, "%s", tmp);
    goto done;
  }
  size_t len = strlen(text);
  text[len] = '\n'; /* replaces the NUL; we write len + 1 bytes */
  size_t off = 0;
  while (off < len + 1) {
    ssize_t w = write(fd, text + off, len + 1 - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0) {
      st = tagc_errnof(TAGC_EIO, "%s", tmp);
      break;
    }
    off += (size_t)w;
  }
  if (st == TAGC_OK && fsync(fd) != 0)
    st = tagc_errnof(TAGC_EIO, "fsync %s", tmp);
  close(fd);
  if (st == TAGC_OK && rename(tmp, path) != 0)
    st = tagc_errnof(TAGC_EIO, "rename %s", path);
  if (st != TAGC_OK)
    unlink(tmp);
done:
  free(text);
  return st;
}
