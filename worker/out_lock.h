/* The owner of an output folder. */
#ifndef TAGC_WORKER_OUT_LOCK_H
#define TAGC_WORKER_OUT_LOCK_H

#include "common/status.h"

/* The owner of an output folder: an advisory lock (flock) on OUT/.lock, held for the life of
 * the run by `tagctl run`, else by the worker that writes OUT's metrics and summary. The
 * file names the holder ({"pid","host","job","since"}); the kernel drops the lock when the
 * holder's last descriptor closes, so a dead holder's lock is free again by itself.
 *   job NULL:  exclusive: *fd gets the locked descriptor (O_CLOEXEC; the caller keeps it open
 *              for as long as it owns OUT, and may hand it to its children).
 *   job set:   shared by the processes of that job (elastic workers started by hand, which
 *              share OUT): refused while another job or an exclusive owner holds OUT.
 * Errors: TAGC_EINVAL with a one-line detail naming the holder (pid, host) when OUT is taken,
 * TAGC_EIO when OUT/.lock cannot be opened. Blocks at most about a second. */
tagc_status tagc_out_lock(const char *out, const char *job, int *fd);

/* The same lock on another folder a run owns, dir/.lock (dir must exist): kind names the
 * folder in the refusal ("checkpoint folder") and option the flag that picks another
 * ("--ckpt-dir"). Errors as tagc_out_lock. */
tagc_status tagc_dir_lock(const char *dir, const char *kind, const char *option, const char *job,
                          int *fd);

/* The environment variable through which `tagctl run` hands its locked descriptor to the
 * workers it starts: the worker then owns OUT through it instead of locking it again. */
#define TAGC_OUT_LOCK_FD_ENV "TAGC_OUT_LOCK_FD"

/* The descriptor `tagctl run` handed down (TAGC_OUT_LOCK_FD) when it holds OUT/.lock through
 * it, now held by this process too; -1 otherwise. */
int tagc_out_lock_inherited(const char *out);

#endif
