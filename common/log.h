/* The one logging function of tagc.
 *
 * Each line carries a level and a subsystem name ("comm", "etcd", "train", ...) and the
 * process's tag (a worker's id, a coordinator's). Output goes to stderr, as text
 * ("12:00:01.234 w0 info  data: message") or one JSON object per line; auto: text when stderr
 * is a terminal. A filter spec chooses the minimum level, globally and per subsystem:
 * "info" or "warn,comm=debug,etcd=error". Thread-safe: each line is written with one call. */
#ifndef TAGC_COMMON_LOG_H
#define TAGC_COMMON_LOG_H

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tagc_log_level {
  TAGC_LOG_DEBUG = 0,
  TAGC_LOG_INFO = 1,
  TAGC_LOG_WARN = 2,
  TAGC_LOG_ERROR = 3,
  TAGC_LOG_OFF = 4
} tagc_log_level;

typedef enum tagc_log_format { TAGC_LOG_AUTO = 0, TAGC_LOG_TEXT, TAGC_LOG_JSON } tagc_log_format;

/* Sets the filter (NULL keeps the default "info") and output format. Returns TAGC_EINVAL
 * with a detail message for a malformed spec. Call once at start, before threads log. */
tagc_status tagc_log_configure(const char *spec, tagc_log_format format);

/* "auto" | "text" | "json" -> *out; TAGC_EINVAL with a one-line detail otherwise. */
tagc_status tagc_log_format_parse(const char *name, tagc_log_format *out);

/* The format auto resolves to for this process (text when stderr is a terminal). */
tagc_log_format tagc_log_format_resolve(tagc_log_format format);

/* "text" or "json": the name of a resolved format (for a child's TAGC_LOG_FORMAT). */
const char *tagc_log_format_name(tagc_log_format format);

/* Sets a process-wide tag added to every line (e.g. "w1"); NULL clears it. */
void tagc_log_set_tag(const char *tag);

/* True when a message of this level for this subsystem would be written. */
int tagc_log_enabled(tagc_log_level level, const char *subsys);

void tagc_log(tagc_log_level level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define LOG_DEBUG(sub, ...) tagc_log(TAGC_LOG_DEBUG, sub, __VA_ARGS__)
#define LOG_INFO(sub, ...) tagc_log(TAGC_LOG_INFO, sub, __VA_ARGS__)
#define LOG_WARN(sub, ...) tagc_log(TAGC_LOG_WARN, sub, __VA_ARGS__)
#define LOG_ERROR(sub, ...) tagc_log(TAGC_LOG_ERROR, sub, __VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif
