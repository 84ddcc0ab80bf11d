/* File-system helpers shared by the programs. */
#ifndef TAGC_COMMON_FSUTIL_H
#define TAGC_COMMON_FSUTIL_H

#include "common/status.h"

/* Creates directory `path` and its missing parents (mode 0755), like `mkdir -p`; an existing
 * directory is fine. TAGC_EIO naming the component that could not be made and why;
 * TAGC_EINVAL for an empty or over-long (>= 4096 bytes) path. Not atomic across processes,
 * but safe when several create the same tree at once. */
tagc_status tagc_mkdir_p(const char *path);

#endif
