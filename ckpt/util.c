/* File helpers and directory listing for the checkpoint library. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"

static tagc_status path_fits(int n, size_t cap) {
  if (n < 0 || (size_t)n >= cap)
    return tagc_errorf(TAGC_EINVAL, "checkpoint path too long (%d bytes)", n);
  return TAGC_OK;
}

tagc_status ckpt_path_fmt(char *buf, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, CKPT_PATH_MAX, fmt, ap);
  va_end(ap);
  return path_fits(n, CKPT_PATH_MAX);
}

tagc_status ckpt_write_full(int fd, const void *buf, size_t len, const char *name) {
  const char *p = buf;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return tagc_errorf(TAGC_EIO, "write %s: %s", name, strerror(errno));
    p += w;
    len -= (size_t)w;
  }
  return TAGC_OK;
}

tagc_status ckpt_write_file_atomic(const char *path, const void *buf, size_t len) {
  char tmp[CKPT_PATH_MAX];
  TAGC_CHECK(ckpt_path_fmt(tmp, "%s.tmp", path));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return tagc_errorf(TAGC_EIO, "create %s: %s", tmp, strerror(errno));
  tagc_status st = ckpt_write_full(fd, buf, len, tmp);
  if (st == TAGC_OK && fsync(fd) != 0)
    st = tagc_errorf(TAGC_EIO, "fsync %s: %s", tmp, strerror(errno));
  close(fd);
  if (st == TAGC_OK && rename(tmp, path) != 0)
    st = tagc_errorf(TAGC_EIO, "rename %s: %s", tmp, strerror(errno));
  if (st != TAGC_OK)
    unlink(tmp);
  return st;
}

tagc_status ckpt_pread_full(int fd, void *buf, size_t len, uint64_t off, const char *name) {
  char *p = buf;
  while (len > 0) {
    ssize_t r = pread(fd, p, len, (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return tagc_errorf(TAGC_EIO, "read %s: %s", name, strerror(errno));
    if (r == 0)
      return tagc_errorf(TAGC_ECORRUPT, "%s: unexpected end of file at byte %llu", name,
                         (unsigned long long)off);
    p += r;
    off += (uint64_t)r;
    len -= (size_t)r;
  }
  return TAGC_OK;
}

tagc_status ckpt_fsync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return tagc_errorf(TAGC_EIO, "open %s for fsync: %s", path, strerror(errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0)
    return tagc_errorf(TAGC_EIO, "fsync %s: %s", path, strerror(err));
  return TAGC_OK;
}

tagc_status ckpt_remove_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d)
    return errno == ENOENT ? TAGC_OK : tagc_errorf(TAGC_EIO, "opendir %s: %s", path, strerror(errno));
  tagc_status st = TAGC_OK;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    char child[CKPT_PATH_MAX];
    if (ckpt_path_fmt(child, "%s/%s", path, e->d_name) != TAGC_OK || unlink(child) != 0) {
      st = tagc_errorf(TAGC_EIO, "remove %s/%s: %s", path, e->d_name, strerror(errno));
      break;
    }
  }
  closedir(d);
  if (st == TAGC_OK && rmdir(path) != 0)
    st = tagc_errorf(TAGC_EIO, "rmdir %s: %s", path, strerror(errno));
  return st;
}

void ckpt_step_name(int64_t step, int tmp, char name[CKPT_NAME_MAX]) {
  snprintf(name, CKPT_NAME_MAX, "step-%lld%s", (long long)step, tmp ? ".tmp" : "");
}

void ckpt_shard_name(int rank, char name[CKPT_NAME_MAX]) {
  snprintf(name, CKPT_NAME_MAX, "rank-%05d.bin", rank);
}

tagc_status tagc_ckpt_step_path(const char *dir, int64_t step, int tmp, char *buf, size_t cap) {
  char name[CKPT_NAME_MAX];
  ckpt_step_name(step, tmp, name);
  return path_fits(snprintf(buf, cap, "%s/%s", dir, name), cap);
}

tagc_status tagc_ckpt_shard_path(const char *dir, int64_t step, int rank, int tmp, char *buf,
                                 size_t cap) {
  char step_name[CKPT_NAME_MAX], shard_name[CKPT_NAME_MAX];
  ckpt_step_name(step, tmp, step_name);
  ckpt_shard_name(rank, shard_name);
  return path_fits(snprintf(buf, cap, "%s/%s/%s", dir, step_name, shard_name), cap);
}

int ckpt_parse_shard_name(const char *name, int *rank) {
  int end = 0;
  return sscanf(name, "rank-%5d.bin%n", rank, &end) == 1 && name[end] == '\0' && end == 14;
}

int ckpt_parse_step_name(const char *name, int64_t *step) {
  if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9' || (name[5] == '0' && name[6]))
    return 0; /* canonical decimal only, so that step-<s> names one directory */
  char *end;
  errno = 0;
  long long s = strtoll(name + 5, &end, 10);
  if (errno || *end)
    return 0;
  *step = s;
  return 1;
}

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x < y) - (x > y);
}

tagc_status ckpt_list_steps(const char *dir, const char *suffix, int64_t **steps, int *n) {
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d)
    return errno == ENOENT ? TAGC_OK : tagc_errorf(TAGC_EIO, "opendir %s: %s", dir, strerror(errno));
  size_t suffix_len = strlen(suffix);
  int cap = 0;
  struct dirent *e;
  tagc_status st = TAGC_OK;
  while ((e = readdir(d)) != NULL) {
    char name[256];
    snprintf(name, sizeof name, "%s", e->d_name);
    size_t len = strlen(name);
    if (len <= suffix_len || strcmp(name + len - suffix_len, suffix) != 0)
      continue;
    name[len - suffix_len] = '\0'; /* a committed name with any suffix fails the parse below */
    int64_t s;
    if (!ckpt_parse_step_name(name, &s))
      continue;
    if (*n == cap) {
      cap = cap ? cap * 2 : 16;
      int64_t *grown = realloc(*steps, (size_t)cap * sizeof **steps);
      if (!grown) {
        st = tagc_errorf(TAGC_ENOMEM, "listing %s", dir);
        break;
      }
      *steps = grown;
    }
    (*steps)[(*n)++] = s;
  }
  closedir(d);
  if (st != TAGC_OK) {
    free(*steps);
    *steps = NULL;
    *n = 0;
    return st;
  }
  if (*n > 1)
    qsort(*steps, (size_t)*n, sizeof **steps, cmp_desc);
  return TAGC_OK;
}
