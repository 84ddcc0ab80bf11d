/* Store vtable wrappers and the directory-backed store. */
#include "comm/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/timeutil.h"

tagc_status tagc_store_set(tagc_store *store, const char *key, const void *value, size_t len) {
  if (!store || !key || !key[0] || (!value && len))
    return tagc_errorf(TAGC_EINVAL, "store set: missing store, key or value");
  return store->ops->set(store, key, value, len);
}

tagc_status tagc_store_get(tagc_store *store, const char *key, double timeout_s, void **value,
                           size_t *len) {
  if (!store || !key || !key[0] || !value || !len)
    return tagc_errorf(TAGC_EINVAL, "store get: missing store, key or output");
  return store->ops->get(store, key, timeout_s, value, len);
}

tagc_status tagc_store_remove(tagc_store *store, const char *key) {
  if (!store || !key || !key[0])
    return tagc_errorf(TAGC_EINVAL, "store remove: missing store or key");
  return store->ops->remove ? store->ops->remove(store, key) : TAGC_OK;
}

tagc_status tagc_store_set_many(tagc_store *store, const char *const *keys,
                                const void *const *values, const size_t *lens, int n) {
  if (!store || n < 0 || (n > 0 && (!keys || !values || !lens)))
    return tagc_errorf(TAGC_EINVAL, "store set_many: missing store, keys or values");
  for (int i = 0; i < n; i++) {
    if (!keys[i] || !keys[i][0] || (!values[i] && lens[i]))
      return tagc_errorf(TAGC_EINVAL, "store set_many: missing key or value %d", i);
  }
  if (store->ops->set_many)
    return store->ops->set_many(store, keys, values, lens, n);
  for (int i = 0; i < n; i++)
    TAGC_CHECK(store->ops->set(store, keys[i], values[i], lens[i]));
  return TAGC_OK;
}

/* One get per key, in order, each with the time left. */
static tagc_status get_each(tagc_store *store, const char *const *keys, int n, double timeout_s,
                            void **values, size_t *lens, int *missing) {
  double deadline = tagc_now() + timeout_s;
  for (int i = 0; i < n; i++) {
    double left = deadline - tagc_now();
    tagc_status st = store->ops->get(store, keys[i], left > 0 ? left : 0, &values[i], &lens[i]);
    if (st != TAGC_OK) {
      if (st == TAGC_ETIMEDOUT && missing)
        *missing = i;
      for (int j = 0; j < i; j++) {
        free(values[j]);
        values[j] = NULL;
      }
      return st;
    }
  }
  return TAGC_OK;
}

tagc_status tagc_store_get_many(tagc_store *store, const char *const *keys, int n,
                                double timeout_s, void **values, size_t *lens, int *missing) {
  if (missing)
    *missing = -1;
  if (!store || n < 0 || (n > 0 && (!keys || !values || !lens)))
    return tagc_errorf(TAGC_EINVAL, "store get_many: missing store, keys or output");
  for (int i = 0; i < n; i++) {
    values[i] = NULL;
    lens[i] = 0;
    if (!keys[i] || !keys[i][0])
      return tagc_errorf(TAGC_EINVAL, "store get_many: missing key %d", i);
  }
  if (store->ops->get_many)
    return store->ops->get_many(store, keys, n, timeout_s, values, lens, missing);
  return get_each(store, keys, n, timeout_s, values, lens, missing);
}

void tagc_store_set_cancel(tagc_store *store, int (*fn)(void *arg), void *arg) {
  if (!store)
    return;
  store->cancelled = fn;
  store->cancel_arg = fn ? arg : NULL;
}

int tagc_store_cancelled(const tagc_store *store) {
  return store && store->cancelled && store->cancelled(store->cancel_arg);
}

void tagc_store_free(tagc_store *store) {
  if (store)
    store->ops->free(store);
}

typedef struct file_store {
  tagc_store base;
  char *dir;
} file_store;

/* dir + "/" + escaped key (each byte outside [A-Za-z0-9._-] becomes %XX); malloc'd. */
static char *key_path(const file_store *fs, const char *key) {
  size_t n = strlen(fs->dir) + 2 + 3 * strlen(key) + 1;
  char *path = malloc(n);
  if (!path)
    return NULL;
  char *p = path + sprintf(path, "%s/", fs->dir);
  for (const unsigned char *k = (const unsigned char *)key; *k; k++) {
    int plain = (*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') ||
                (*k >= '0' && *k <= '9') || *k == '.' || *k == '_' || *k == '-';
    if (plain && !(k == (const unsigned char *)key && *k == '.'))
      *p++ = (char)*k;
    else
      p += sprintf(p, "%%%02X", *k);
  }
  *p = '\0';
  return path;
}

static tagc_status write_all(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return tagc_errnof(TAGC_EIO, "store write");
    p += w;
    len -= (size_t)w;
  }
  return TAGC_OK;
}

static tagc_status file_set(tagc_store *store, const char *key, const void *value, size_t len) {
  file_store *fs = (file_store *)store;
  char *path = key_path(fs, key);
  char *tmp = path ? malloc(strlen(path) + 32) : NULL;
  tagc_status st = TAGC_OK;
  if (!tmp) {
    st = tagc_errorf(TAGC_ENOMEM, "store set: out of memory");
    goto fail;
  }
  sprintf(tmp, "%s.tmp%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    st = tagc_errnof(TAGC_EIO, "store set %s", tmp);
    goto fail;
  }
  st = write_all(fd, value, len);
  if (close(fd) != 0 && st == TAGC_OK)
    st = tagc_errnof(TAGC_EIO, "store set %s: close", tmp);
  if (st == TAGC_OK && rename(tmp, path) != 0)
    st = tagc_errnof(TAGC_EIO, "store set %s: rename", path);
  if (st != TAGC_OK)
    unlink(tmp);
fail:
  free(tmp);
  free(path);
  return st;
}

/* Reads the whole file; TAGC_ENOTFOUND when it does not exist (yet). */
static tagc_status read_file(const char *path, void **value, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return TAGC_ENOTFOUND;
    return tagc_errnof(TAGC_EIO, "store get %s", path);
  }
  size_t cap = 256, n = 0;
  char *buf = malloc(cap);
  tagc_status st = buf ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "store get: out of memory");
  while (st == TAGC_OK) {
    if (n + 1 >= cap) {
      char *bigger = realloc(buf, cap * 2);
      if (!bigger) {
        st = tagc_errorf(TAGC_ENOMEM, "store get: out of memory");
        break;
      }
      buf = bigger;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      st = tagc_errnof(TAGC_EIO, "store get %s", path);
    else if (r == 0)
      break;
    else
      n += (size_t)r;
  }
  close(fd);
  if (st != TAGC_OK) {
    free(buf);
    return st;
  }
  buf[n] = '\0';
  *value = buf;
  *len = n;
  return TAGC_OK;
}

static tagc_status file_get(tagc_store *store, const char *key, double timeout_s, void **value,
                            size_t *len) {
  file_store *fs = (file_store *)store;
  char *path = key_path(fs, key);
  if (!path)
    return tagc_errorf(TAGC_ENOMEM, "store get: out of memory");
  double deadline = tagc_now() + timeout_s;
  double pause = 0.001;
  tagc_status st;
  while ((st = read_file(path, value, len)) == TAGC_ENOTFOUND) {
    double left = deadline - tagc_now();
    if (left <= 0) {
      st = tagc_errorf(TAGC_ETIMEDOUT, "store get: key %s not set within %.3g s", key,
                       timeout_s);
      break;
    }
    if (tagc_store_cancelled(store)) {
      st = tagc_errorf(TAGC_EABORTED, "store get: waiting for key %s cancelled", key);
      break;
    }
    tagc_sleep(pause < left ? pause : left);
    pause = pause * 2 < 0.05 ? pause * 2 : 0.05;
  }
  free(path);
  return st;
}

static tagc_status file_remove(tagc_store *store, const char *key) {
  char *path = key_path((file_store *)store, key);
  if (!path)
    return tagc_errorf(TAGC_ENOMEM, "store remove: out of memory");
  tagc_status st = TAGC_OK;
  if (unlink(path) != 0 && errno != ENOENT)
    st = tagc_errnof(TAGC_EIO, "store remove %s", path);
  free(path);
  return st;
}

static void file_free(tagc_store *store) {
  file_store *fs = (file_store *)store;
  free(fs->dir);
  free(fs);
}

static const tagc_store_ops file_ops = {
    .set = file_set, .get = file_get, .remove = file_remove, .free = file_free};

tagc_status tagc_store_file_new(const char *dir, tagc_store **out) {
  if (!dir || !dir[0] || !out)
    return tagc_errorf(TAGC_EINVAL, "file store: missing directory");
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return tagc_errnof(TAGC_EIO, "file store: mkdir %s", dir);
  file_store *fs = calloc(1, sizeof *fs);
  char *copy = strdup(dir);
  if (!fs || !copy) {
    free(fs);
    free(copy);
    return tagc_errorf(TAGC_ENOMEM, "file store: out of memory");
  }
  fs->base.ops = &file_ops;
  fs->dir = copy;
  *out = &fs->base;
  return TAGC_OK;
}

tagc_status tagc_store_file_remove_all(const char *dir) {
  if (!dir || !dir[0])
    return tagc_errorf(TAGC_EINVAL, "file store: missing directory");
  DIR *d = opendir(dir);
  if (!d)
    return errno == ENOENT ? TAGC_OK
                           : tagc_errnof(TAGC_EIO, "file store: opendir %s", dir);
  tagc_status st = TAGC_OK;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
      continue;
    if (unlinkat(dirfd(d), e->d_name, 0) != 0 && st == TAGC_OK)
      st = tagc_errnof(TAGC_EIO, "file store: unlink %s/%s", dir, e->d_name);
  }
  closedir(d);
  if (st == TAGC_OK && rmdir(dir) != 0)
    st = tagc_errnof(TAGC_EIO, "file store: rmdir %s", dir);
  return st;
}
