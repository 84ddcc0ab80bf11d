/* The options and etcd client of tagctl inject, status and job. */
#include <stddef.h>
#include <stdio.h>

#include "common/options.h"
#include "cluster/keys.h"
#include "tagctl/tagctl.h"

#define ARGOFF(f) offsetof(tagctl_etcd_args, f)
static const tagc_opt etcd_opts[] = {
    {"etcd", TAGC_OPT_STRING, ARGOFF(etcd), "http://127.0.0.1:2379", 0, -1, NULL, "etcd endpoints"},
    {"job", TAGC_OPT_STRING, ARGOFF(job), "default", 0, -1, NULL, "job name"},
    TAGC_ETCD_CREDENTIAL_OPTS(ARGOFF),
    {"worker", TAGC_OPT_STRING, ARGOFF(worker), "", 0, -1, NULL, "inject: the worker id"},
    {"at-step", TAGC_OPT_INT, ARGOFF(at_step), "-1", -1, 1e12, NULL,
     "inject: the step the fault fires at (-1 = the worker's next step, as it sees it)"},
    {"seconds", TAGC_OPT_DOUBLE, ARGOFF(seconds), "0.5", 0, 3600, NULL, "inject slow: delay per collective"},
    {"clear", TAGC_OPT_BOOL, ARGOFF(clear), "false", 0, -1, NULL, "inject: remove the worker's chaos key"},
    {"force", TAGC_OPT_BOOL, ARGOFF(force), "false", 0, -1, NULL,
     "job reset|delete: also while workers are registered; inject: also for a worker not "
     "registered (yet), e.g. armed before the job starts"},
    {"json", TAGC_OPT_BOOL, ARGOFF(json), "false", 0, -1, NULL, "status: one JSON object"},
};
#define N_ETCD_OPTS (sizeof etcd_opts / sizeof etcd_opts[0])

int tagctl_etcd_setup(const char *name, const char *usage, const char *summary, int argc,
                      char **argv, tagctl_etcd_args *args, char **pos, int max_pos, int *n_pos,
                      tagc_etcd **etcd) {
  tagc_opt_program prog = {name, usage, summary, etcd_opts, N_ETCD_OPTS};
  int help = 0;
  tagc_status st = tagc_opts_parse(&prog, args, argc, argv, pos, max_pos, n_pos, &help);
  if (help)
    return 0;
  if (st == TAGC_OK)
    st = tagc_key_check_id(args->job, "job");
  tagc_etcd_credentials cred = TAGC_ETCD_CREDENTIALS_OF(args);
  if (st == TAGC_OK)
    st = tagc_etcd_connect(args->etcd, &cred, TAGCTL_ETCD_DEADLINE_S, etcd);
  if (st != TAGC_OK) {
    fprintf(stderr, "%s: %s\n", name, tagc_last_error());
    return 2;
  }
  return -1;
}

void tagctl_etcd_args_free(tagctl_etcd_args *args) {
  tagc_opt_program prog = {"", "", "", etcd_opts, N_ETCD_OPTS};
  tagc_opts_free(&prog, args);
}
