/* tagctl inject: arms (or clears) a fault on a running worker through its etcd key
 * chaos/<worker>; the worker polls it about once a second (worker/run.c) and fires a step
 * fault whose step has already passed at its next step. The worker must be registered
 * (workers/<worker>) unless --force (a fault armed before the job starts); --clear works for
 * any worker id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ckpt/ckpt.h"
#include "cluster/etcd.h"
#include "cluster/keys.h"
#include "tagctl/tagctl.h"
#include "worker/fault.h"

/* Without --at-step: the job's step as rank 0 last recorded it (progress), 0 before one; the
 * worker fires a step it has passed at its next one. */
static tagc_status next_step(tagc_etcd *etcd, const char *job, int64_t *step) {
  char key[512], *text = NULL;
  *step = 0;
  TAGC_CHECK(tagc_key_progress(job, key, sizeof key));
  tagc_status st = tagc_etcd_get(etcd, key, &text, NULL, NULL);
  if (st == TAGC_ENOTFOUND)
    return TAGC_OK;
  TAGC_CHECK(st);
  json_t *p = json_loads(text, 0, NULL);
  json_int_t s = json_integer_value(json_object_get(p, "step"));
  *step = s > 0 ? s : 0;
  json_decref(p);
  free(text);
  return TAGC_OK;
}

/* The fault spec of KIND as the worker parses it: slow=SECONDS, ckpt:STAGE[@RANK] (as is: the
 * worker's next checkpoint save dies at that stage) or KIND@STEP. */
static tagc_status fault_spec(const tagctl_etcd_args *a, const char *kind, int64_t step,
                              char *spec, size_t cap) {
  if (!strcmp(kind, "slow"))
    snprintf(spec, cap, "slow=%g", a->seconds);
  else if (!strncmp(kind, "ckpt:", 5)) {
    if (strlen(kind) <= 5 || strchr(kind, ',') || strlen(kind) >= cap)
      return tagc_errorf(TAGC_EINVAL, "fault '%s': one ckpt:STAGE[@RANK]", kind);
    snprintf(spec, cap, "%s", kind);
    return tagc_ckpt_fault_configure(spec); /* checks the stage (this process has no saves) */
  } else
    snprintf(spec, cap, "%s@%lld", kind, (long long)step);
  tagc_faults check;
  return tagc_faults_parse(spec, &check);
}

/* TAGC_OK when worker id is registered in the job, else TAGC_ENOTFOUND with a line. */
static tagc_status registered(tagc_etcd *etcd, const char *job, const char *id) {
  char key[512], *text = NULL;
  TAGC_CHECK(tagc_key_worker(job, id, key, sizeof key));
  tagc_status st = tagc_etcd_get(etcd, key, &text, NULL, NULL);
  free(text);
  if (st == TAGC_ENOTFOUND)
    return tagc_errorf(TAGC_ENOTFOUND, "no worker '%s' is registered in job '%s' (see `tagctl "
                       "status --job %s`)", id, job, job);
  return st;
}

/* Writes chaos/<worker> for the kind in pos (after checking the spec and the worker). */
static tagc_status arm(tagc_etcd *etcd, const tagctl_etcd_args *a, const char *kind,
                       const char *key) {
  char spec[64];
  int64_t step = a->at_step;
  TAGC_CHECK(fault_spec(a, kind, step >= 0 ? step : 0, spec, sizeof spec)); /* bad input first */
  if (!a->force)
    TAGC_CHECK(registered(etcd, a->job, a->worker));
  if (step < 0 && strcmp(kind, "slow") != 0 && strncmp(kind, "ckpt:", 5) != 0) {
    TAGC_CHECK(next_step(etcd, a->job, &step));
    TAGC_CHECK(fault_spec(a, kind, step, spec, sizeof spec));
  }
  TAGC_CHECK(tagc_etcd_put(etcd, key, spec, strlen(spec), 0, NULL));
  printf("%s = %s\n", key, spec);
  return TAGC_OK;
}

static const tagc_opt inject_opts[] = {
    {"worker", TAGC_OPT_STRING, TAGCTL_ARGOFF(worker), "", 0, -1, NULL, "the worker's id (required)"},
    {"at-step", TAGC_OPT_INT, TAGCTL_ARGOFF(at_step), "-1", -1, 1e12, NULL,
     "the step the fault fires at (-1 = the worker's next step, as it sees it)"},
    {"seconds", TAGC_OPT_DOUBLE, TAGCTL_ARGOFF(seconds), "0.5", 0, 3600, NULL,
     "slow: the delay per collective"},
    {"clear", TAGC_OPT_BOOL, TAGCTL_ARGOFF(clear), "false", 0, -1, NULL,
     "remove the worker's chaos key instead (any worker id)"},
    {"force", TAGC_OPT_BOOL, TAGCTL_ARGOFF(force), "false", 0, -1, NULL,
     "also for a worker not registered (yet), e.g. armed before the job starts"},
};

static const tagctl_etcd_command inject_command = {
    "tagctl inject", "--job J --worker W KIND [--at-step S]\n--job J --worker W --clear",
    "Arms a fault on a running worker through its etcd key chaos/<worker>. KIND: crash, exit, "
    "oom, hang, drop, nan (at step S, default: the worker's next step), slow (--seconds per "
    "collective) or ckpt:STAGE (its next checkpoint save dies at STAGE, e.g. ckpt:mid-write); "
    "the worker polls the key about once a second and must be registered in the job (--force: "
    "arm it anyway, e.g. before the job starts).",
    inject_opts, sizeof inject_opts / sizeof inject_opts[0]};

int tagctl_inject(int argc, char **argv) {
  tagctl_etcd_args a = {0};
  char *pos[1];
  int n_pos = 0;
  tagc_etcd *etcd = NULL;
  int code = tagctl_etcd_setup(&inject_command, argc, argv, &a, pos, 1, &n_pos, &etcd);
  if (code >= 0)
    goto done;
  char key[512];
  tagc_status st = tagc_key_chaos(a.job, a.worker, key, sizeof key);
  if (st == TAGC_OK && a.clear)
    st = tagc_etcd_delete(etcd, key, 0, NULL);
  else if (st == TAGC_OK)
    st = arm(etcd, &a, n_pos ? pos[0] : "", key);
  code = st == TAGC_OK ? 0 : (st == TAGC_EINVAL ? 2 : 1);
  if (st != TAGC_OK)
    fprintf(stderr, "tagctl inject: %s\n", tagc_last_error());
done:
  tagc_etcd_destroy(etcd);
  tagctl_etcd_args_free(&a);
  return code;
}
