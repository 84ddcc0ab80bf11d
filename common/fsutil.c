#include "common/fsutil.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

tagc_status tagc_mkdir_p(const char *path) {
  char buf[4096];
  size_t n = path ? strlen(path) : 0;
  if (n == 0 || n >= sizeof buf)
    return tagc_errorf(TAGC_EINVAL, "directory path '%s' is empty or too long", path ? path : "");
  memcpy(buf, path, n + 1);
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p != '\0')
      continue;
    char saved = *p;
    *p = '\0';
    struct stat sb;
    if (mkdir(buf, 0755) != 0 && !(errno == EEXIST && stat(buf, &sb) == 0 && S_ISDIR(sb.st_mode))) {
      if (errno == EEXIST)
        return tagc_errorf(TAGC_EIO, "cannot create directory %s: a file of that name exists", buf);
      return tagc_errnof(TAGC_EIO, "cannot create directory %s", buf);
    }
    *p = saved;
    if (saved == '\0')
      return TAGC_OK;
  }
}

tagc_status tagc_append_whole(int fd, const char *line, size_t n, const char *what) {
  off_t before = lseek(fd, 0, SEEK_END);
  if (before < 0)
    return tagc_errnof(TAGC_EIO, "%s", what);
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(fd, line + off, n - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      if (w == 0)
        errno = ENOSPC;
      tagc_status st = tagc_errnof(TAGC_EIO, "%s", what);
      int err = errno;
      if (off > 0 && ftruncate(fd, before) != 0) /* keep the first error's text */
        errno = err;
      return st;
    }
    off += (size_t)w;
  }
  return TAGC_OK;
}
