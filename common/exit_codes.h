/* The exit codes of the tagc programs: one table from the cause of a program's end (its
 * tagc_status) to the code it exits with, and from a code to what a supervisor does with it.
 * tagc-worker's main exits with tagc_exit_code_of(); `tagctl run` (tagctl/supervise.c)
 * restarts a child, or not, by tagc_exit_code_restarts() and says why with
 * tagc_exit_code_meaning(). docs/operations.md ("Exit codes") is the user's copy.
 *
 *   code  cause (tagc_status)                              restarted
 *   0     TAGC_OK: done, nothing to do, or left on SIGTERM  no
 *   1     anything else: a peer, a deadline, memory,        yes
 *         a damaged checkpoint, etcd out of reach
 *   2     TAGC_EINVAL, TAGC_ENOTFOUND, TAGC_EPROTO,          no
 *         TAGC_EUNSUPPORTED: bad options or input, a device
 *         this machine lacks (usage or configuration)
 *   3     TAGC_ENUMERIC: non-finite steps again after a      no
 *         rollback (the training cannot go on)
 *   4     TAGC_EIO: a file that cannot be read or written    no
 *         while running (a full disk, a read-only folder)
 *
 * Pure functions of their argument; any thread. Depends on common/status.h only. */
#ifndef TAGC_COMMON_EXIT_CODES_H
#define TAGC_COMMON_EXIT_CODES_H

#include "common/status.h"

typedef enum tagc_exit_code {
  TAGC_EXIT_DONE = 0,
  TAGC_EXIT_FAILURE = 1,
  TAGC_EXIT_CONFIG = 2,
  TAGC_EXIT_CANNOT_GO_ON = 3,
  TAGC_EXIT_IO = 4
} tagc_exit_code;

/* The code a program exits with when it ends with st. */
tagc_exit_code tagc_exit_code_of(tagc_status st);

/* 1 when a supervisor restarts a tagc program that exited with code (1, and any code not in
 * the table, e.g. a crash's 128 + signal), else 0. */
int tagc_exit_code_restarts(int code);

/* What code says, for a supervisor's line: "a usage or configuration error", ...; for a code
 * not in the table "a failure". Static. */
const char *tagc_exit_code_meaning(int code);

#endif
