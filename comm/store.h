/* Key-value store used to bootstrap communicators (exchange addresses, NCCL unique ids).
 *
 * A store is a tiny vtable so the bootstrap can be swapped: a directory on a shared file
 * system today (tagc_store_file_new), etcd keys later (the coordinator implements the same
 * ops). Keys are short printable strings ("gen/7/boot/rank_0"); values are opaque bytes.
 * Values are immutable once set: writers never overwrite a key with a different value within
 * one generation, which is what makes a plain directory good enough.
 *
 * Threading: a store may be used by one thread at a time unless the implementation says
 * otherwise (the file store is safe from any number of threads and processes). */
#ifndef TAGC_COMM_STORE_H
#define TAGC_COMM_STORE_H

/* The common/ headers have no C++ guards; the Gloo adapter includes this one. */
#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>

#include "common/status.h"

typedef struct tagc_store tagc_store;

typedef struct tagc_store_ops {
  /* Stores len bytes under key, replacing any previous value atomically. */
  tagc_status (*set)(tagc_store *store, const char *key, const void *value, size_t len);
  /* Blocks until key exists or timeout_s seconds pass (TAGC_ETIMEDOUT). On success *value is
   * a new malloc'd buffer (NUL-terminated for convenience, not counted in *len). */
  tagc_status (*get)(tagc_store *store, const char *key, double timeout_s, void **value,
                     size_t *len);
  /* Removes key; removing a missing key is not an error. May be NULL (no-op). */
  tagc_status (*remove)(tagc_store *store, const char *key);
  /* Frees the store and everything it owns. */
  void (*free)(tagc_store *store);
  /* Optional (NULL: one set per key): stores n keys at once, e.g. in one request. */
  tagc_status (*set_many)(tagc_store *store, const char *const *keys, const void *const *values,
                          const size_t *lens, int n);
  /* Optional (NULL: one get per key, in order): waits for n keys at once, e.g. with one read
   * of the prefix they share; contract of tagc_store_get_many. */
  tagc_status (*get_many)(tagc_store *store, const char *const *keys, int n, double timeout_s,
                          void **values, size_t *lens, int *missing);
} tagc_store_ops;

/* Implementations embed this as their first member, zeroed (calloc) but for ops. */
struct tagc_store {
  const tagc_store_ops *ops;
  /* Optional cancellation (tagc_store_set_cancel): a get that waits for a key calls it at
   * least every TAGC_STORE_CANCEL_POLL_S seconds and ends with TAGC_EABORTED once it returns
   * non-zero. */
  int (*cancelled)(void *arg);
  void *cancel_arg;
};

/* Longest time a waiting get goes without asking its cancel function. */
#define TAGC_STORE_CANCEL_POLL_S 0.1

/* Sets key to the len bytes at value. TAGC_EINVAL for a NULL or empty key, TAGC_EIO when
 * the backing storage fails. Blocking (one write). */
tagc_status tagc_store_set(tagc_store *store, const char *key, const void *value, size_t len);

/* Waits up to timeout_s seconds for key and returns its value in a new malloc'd buffer
 * (*value, caller frees; NUL-terminated, terminator not counted in *len).
 * TAGC_ETIMEDOUT when the key did not appear in time, TAGC_EABORTED when the store's cancel
 * function (tagc_store_set_cancel) said stop while waiting, TAGC_EIO on storage errors. */
tagc_status tagc_store_get(tagc_store *store, const char *key, double timeout_s, void **value,
                           size_t *len);

/* Installs (fn != NULL) or removes (NULL) the cancel function of the store's waits: while
 * fn(arg) returns non-zero, tagc_store_get returns TAGC_EABORTED instead of waiting (a key
 * already set is still returned). fn must be quick and may be called from the waiting
 * thread only. Not thread-safe with a get in progress. */
void tagc_store_set_cancel(tagc_store *store, int (*fn)(void *arg), void *arg);

/* Whether the store's cancel function says stop (0 without one). */
int tagc_store_cancelled(const tagc_store *store);

/* Sets keys[i] to the lens[i] bytes at values[i] for i < n, in one request where the store
 * can (the etcd store: one transaction per 64 keys), else one set each. A failure may leave
 * some keys set. Errors as tagc_store_set. Blocking. */
tagc_status tagc_store_set_many(tagc_store *store, const char *const *keys,
                                const void *const *values, const size_t *lens, int n);

/* Waits up to timeout_s seconds (in all) for every key of keys[0 .. n) and returns each value
 * as tagc_store_get does: values[i] a new malloc'd, NUL-terminated buffer (caller frees),
 * lens[i] its length. Keys that share a prefix are read together where the store can (the
 * etcd store: one range read of their longest common prefix up to a '/', then a watch of it
 * while some are missing), else one get each, in order. On TAGC_ETIMEDOUT *missing (may be
 * NULL) is the index of a key that did not come (the lowest one the store knows of) and no
 * value is returned; other errors as tagc_store_get, *missing -1. */
tagc_status tagc_store_get_many(tagc_store *store, const char *const *keys, int n,
                                double timeout_s, void **values, size_t *lens, int *missing);

/* Removes key (absent keys are fine). */
tagc_status tagc_store_remove(tagc_store *store, const char *key);

/* Frees the store; NULL is a no-op. */
void tagc_store_free(tagc_store *store);

/* A store backed by a directory (created if missing; its parent must exist). Each key is one
 * file, written to a temporary name and renamed, so readers never see partial values; key
 * characters other than [A-Za-z0-9._-] are escaped in the file name. Safe to share between
 * threads and processes on one host or a shared file system. The directory itself is left in
 * place by tagc_store_free(); remove it with tagc_store_file_remove_all().
 * Errors: TAGC_EINVAL (NULL dir), TAGC_EIO (cannot create), TAGC_ENOMEM. */
tagc_status tagc_store_file_new(const char *dir, tagc_store **out);

/* Removes every file in the directory of a file store and the directory itself (tests and
 * tagctl clean-up). Only plain files directly inside dir are removed. */
tagc_status tagc_store_file_remove_all(const char *dir);

#ifdef __cplusplus
}
#endif

#endif
