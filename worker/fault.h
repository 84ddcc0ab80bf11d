/* Fault points of the worker (ARCHITECTURE §9), armed by the environment variable TAGC_FAULT,
 * by `tagctl run --fault SPEC`, or by the etcd key chaos/<worker-id> (`tagctl inject`).
 *
 * SPEC is a comma-separated list of (docs/fault-injection.md):
 *   crash@S   SIGKILL itself when S steps are done      exit@S   _exit(3) there
 *   oom@S     the step fails as an allocation failure   hang@S   stop making progress there
 *   drop@S    close its connections (abort the communicator) there
 *   slow=X    delay every collective by X seconds (0 turns it off)
 *   nan@S     a NaN in this rank's local gradient at step S (once: a transient fault)
 *   nan@A-B   the same at every step A..B, each time it runs (a bad batch: again after a
 *             rollback); the run skips such steps (engine/engine.h, docs/operations.md)
 *   bootcrash@G  SIGKILL itself while building the communicator of generation G
 *   ckpt:...  checkpoint fault points (handled by ckpt/, ignored here)
 * Each step-triggered fault fires once. Zero cost when off: one comparison per step. */
#ifndef TAGC_WORKER_FAULT_H
#define TAGC_WORKER_FAULT_H

#include <stdint.h>

#include "common/status.h"

typedef enum tagc_fault_kind {
  TAGC_FAULT_CRASH, TAGC_FAULT_EXIT, TAGC_FAULT_OOM, TAGC_FAULT_HANG, TAGC_FAULT_DROP,
  TAGC_FAULT_KINDS
} tagc_fault_kind;

#define TAGC_FAULT_NAN_MAX 8 /* nan items in one spec */

typedef struct tagc_fault_nan {
  int64_t from, to; /* steps [from, to]; from = -1: spent */
  int repeat;       /* nan@A-B: fires each time a step of the range runs */
} tagc_fault_nan;

typedef struct tagc_faults {
  int64_t at[TAGC_FAULT_KINDS]; /* step at which each fires; -1 = not armed */
  double slow_s;                /* delay per collective */
  int64_t boot_crash_gen;       /* generation whose communicator bootstrap crashes; -1 = off */
  int64_t next;                 /* smallest armed step, -1 when none (the per-step check) */
  int n_nan;                    /* nan items */
  tagc_fault_nan nan[TAGC_FAULT_NAN_MAX];
} tagc_faults;

/* Parses spec (NULL or "" = nothing armed) into *out. TAGC_EINVAL naming the bad item. */
tagc_status tagc_faults_parse(const char *spec, tagc_faults *out);

/* Adds the faults armed in src to dst (src's step faults and slow delay win). */
void tagc_faults_merge(tagc_faults *dst, const tagc_faults *src);

/* The fault armed for `step` (and disarms it), or -1. */
int tagc_faults_take(tagc_faults *f, int64_t step);

/* 1 when a nan item covers `step` (a once-only item is then spent), else 0. */
int tagc_faults_nan(tagc_faults *f, int64_t step);

/* "crash", "exit", "oom", "hang", "drop". */
const char *tagc_fault_name(tagc_fault_kind kind);

#endif
