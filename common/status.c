#include "status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char error_detail[1024];

const char *tagc_strerror(tagc_status st) {
  switch (st) {
  case TAGC_OK: return "ok";
  case TAGC_EINVAL: return "invalid argument";
  case TAGC_ENOMEM: return "out of memory";
  case TAGC_EIO: return "i/o error";
  case TAGC_ECORRUPT: return "corrupt data";
  case TAGC_ETIMEDOUT: return "timed out";
  case TAGC_EPEER: return "peer failure";
  case TAGC_EABORTED: return "aborted";
  case TAGC_ENOTFOUND: return "not found";
  case TAGC_EUNSUPPORTED: return "unsupported";
  case TAGC_EPROTO: return "protocol error";
  case TAGC_ECONFLICT: return "conflict";
  case TAGC_ENUMERIC: return "non-finite value";
  case TAGC_EINTERNAL: return "internal error";
  }
  return "unknown status";
}

tagc_status tagc_errorf(tagc_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error_detail, sizeof error_detail, fmt, ap);
  va_end(ap);
  return st;
}

const char *tagc_last_error(void) { return error_detail; }

void tagc_clear_error(void) { error_detail[0] = '\0'; }

tagc_status tagc_errnof(tagc_status st, const char *fmt, ...) {
  int err = errno;
  char what[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  char buf[128];
  const char *why = strerror_r(err, buf, sizeof buf);
  snprintf(error_detail, sizeof error_detail, "%s: %s", what, why);
  errno = err;
  return err == ENOMEM ? TAGC_ENOMEM : st;
}

void tagc_error_save(tagc_error_saved *s) { memcpy(s->detail, error_detail, sizeof s->detail); }

void tagc_error_restore(const tagc_error_saved *s) { memcpy(error_detail, s->detail, sizeof error_detail); }
