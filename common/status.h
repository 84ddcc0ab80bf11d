/* Status codes shared by every tagc module, with a thread-local detail message.
 *
 * Fallible functions return a tagc_status (0 = success, negative = error) and put their
 * results in out-parameters. The human detail of the most recent error on this thread is
 * kept in a thread-local buffer: set it with tagc_errorf() at the place the error is found,
 * read it with tagc_last_error() where the error is reported. */
#ifndef TAGC_COMMON_STATUS_H
#define TAGC_COMMON_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tagc_status {
  TAGC_OK = 0,
  TAGC_EINVAL = -1,      /* bad argument, option or input data */
  TAGC_ENOMEM = -2,      /* allocation failed (host or device) */
  TAGC_EIO = -3,         /* file or socket I/O failed */
  TAGC_ECORRUPT = -4,    /* checksum, magic, version or size mismatch */
  TAGC_ETIMEDOUT = -5,   /* a deadline passed */
  TAGC_EPEER = -6,       /* a peer failed or closed the connection */
  TAGC_EABORTED = -7,    /* the operation was aborted (communicator abort, shutdown) */
  TAGC_ENOTFOUND = -8,   /* key, file or checkpoint not found */
  TAGC_EUNSUPPORTED = -9,/* feature not built in or not available on this machine */
  TAGC_EPROTO = -10,     /* malformed message from a server or peer (JSON, HTTP) */
  TAGC_ECONFLICT = -11,  /* compare failed: fenced txn, stale generation */
  TAGC_ENUMERIC = -12,   /* inf or NaN where finite numbers are required */
  TAGC_EINTERNAL = -13   /* a library returned something it documents it never does */
} tagc_status;

/* Short constant name of a status ("invalid argument", ...). Never NULL. */
const char *tagc_strerror(tagc_status st);

/* Sets this thread's error detail (printf format) and returns st, so that
 * `return tagc_errorf(TAGC_EINVAL, "bad x %d", x);` reports and propagates in one line. */
tagc_status tagc_errorf(tagc_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* This thread's latest error detail; "" when none was set. Borrowed; valid until the next
 * tagc_errorf() on this thread. */
const char *tagc_last_error(void);

/* Clears this thread's error detail. */
void tagc_clear_error(void);

/* The one errno translator: for a failed system call, sets the detail to "<fmt>: strerror(errno)"
 * and returns st, or TAGC_ENOMEM whatever st says when errno is ENOMEM (so the out-of-memory
 * path sees host allocation failures). Reads errno first; errno is left as it was. */
tagc_status tagc_errnof(tagc_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Saves and restores this thread's error detail around cleanup work that may overwrite it. */
typedef struct tagc_error_saved {
  char detail[1024];
} tagc_error_saved;
void tagc_error_save(tagc_error_saved *s);
void tagc_error_restore(const tagc_error_saved *s);

/* Propagate a failed status to the caller. */
#define TAGC_CHECK(expr)                   \
  do {                                     \
    tagc_status check_st_ = (expr);        \
    if (check_st_ != TAGC_OK)              \
      return check_st_;                    \
  } while (0)

/* Store a failed status in `st` and jump to the function's cleanup label. */
#define TAGC_CHECK_GOTO(expr, st, label) \
  do {                                   \
    (st) = (expr);                       \
    if ((st) != TAGC_OK)                 \
      goto label;                        \
  } while (0)

/* On a cleanup path: evaluate expr always; keep the first error. When `st` already holds a
 * failure, expr's status and detail are dropped and st's detail survives. */
#define TAGC_CHECK_IGNORE(expr, st)                  \
  do {                                               \
    if ((st) == TAGC_OK) {                           \
      (st) = (expr);                                 \
    } else {                                         \
      tagc_error_saved ignore_saved_;                \
      tagc_error_save(&ignore_saved_);               \
      (void)(expr);                                  \
      tagc_error_restore(&ignore_saved_);            \
    }                                                \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif
