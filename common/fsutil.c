#include "common/fsutil.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

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
