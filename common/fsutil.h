/* File-system helpers shared by the programs. */
#ifndef TAGC_COMMON_FSUTIL_H
#define TAGC_COMMON_FSUTIL_H

#include <stddef.h>

#include "common/status.h"

/* Creates directory `path` and its missing parents (mode 0755), like `mkdir -p`; an existing
 * directory is fine. TAGC_EIO naming the component that could not be made and why;
 * TAGC_EINVAL for an empty or over-long (>= 4096 bytes) path. Not atomic across processes,
 * but safe when several create the same tree at once. */
tagc_status tagc_mkdir_p(const char *path);

/* Appends the n bytes of line (one or more whole lines) to the end of fd with one write, or
 * leaves the file as it was: a short or failed write (a full disk) is cut back to the length
 * before it, so a reader never finds a line cut in the middle. TAGC_EIO with
 * "what: <strerror>" (e.g. "No space left on device") when it was not written. One writer
 * per file (the cut-back is not atomic against another appender). Blocks on the write. */
tagc_status tagc_append_whole(int fd, const char *line, size_t n, const char *what);

#endif
