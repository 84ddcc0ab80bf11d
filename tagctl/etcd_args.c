/* The options and etcd client of tagctl inject, status and job. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/options.h"
#include "cluster/keys.h"
#include "tagctl/tagctl.h"

/* The options every one of them takes; each adds its own (tagctl_etcd_command). */
static const tagc_opt connection_opts[] = {
    {"etcd", TAGC_OPT_STRING, TAGCTL_ARGOFF(etcd), "http://127.0.0.1:2379", 0, -1, NULL,
     "etcd endpoints (comma-separated URLs)"},
    {"job", TAGC_OPT_STRING, TAGCTL_ARGOFF(job), "default", 0, -1, NULL, "job name"},
    TAGC_ETCD_CREDENTIAL_OPTS(TAGCTL_ARGOFF),
};
#define N_CONNECTION (sizeof connection_opts / sizeof connection_opts[0])
#define MAX_OPTS 32

/* The names of opts[0..n), space-separated, into buf (for a help group). */
static void names_of(const tagc_opt *opts, size_t n, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? " " : "", opts[i].name);
}

int tagctl_etcd_setup(const tagctl_etcd_command *cmd, int argc, char **argv,
                      tagctl_etcd_args *args, char **pos, int max_pos, int *n_pos,
                      tagc_etcd **etcd) {
  tagc_opt opts[MAX_OPTS];
  size_t n = cmd->n_opts + N_CONNECTION;
  if (n > MAX_OPTS) {
    fprintf(stderr, "%s: %zu options, more than the %d of tagctl_etcd_setup\n", cmd->name, n,
            MAX_OPTS);
    return 1;
  }
  memcpy(opts, cmd->opts, cmd->n_opts * sizeof *opts);
  memcpy(opts + cmd->n_opts, connection_opts, sizeof connection_opts);
  tagc_opt_program prog = {cmd->name, cmd->usage, cmd->summary, opts, n};
  if (tagctl_help_wanted(argc, argv)) {
    char own[512], conn[512];
    names_of(cmd->opts, cmd->n_opts, own, sizeof own);
    names_of(connection_opts, N_CONNECTION, conn, sizeof conn);
    tagc_help_group groups[] = {{"Options", own}, {"etcd connection", conn}};
    tagctl_help_print(&prog, groups, 2, stdout);
    return 0;
  }
  int help = 0;
  tagc_status st = tagc_opts_parse(&prog, args, argc, argv, pos, max_pos, n_pos, &help);
  if (st == TAGC_OK)
    st = tagc_key_check_id(args->job, "job");
  tagc_etcd_credentials cred = TAGC_ETCD_CREDENTIALS_OF(args);
  if (st == TAGC_OK)
    st = tagc_etcd_connect(args->etcd, &cred, TAGCTL_ETCD_DEADLINE_S, etcd);
  if (st != TAGC_OK) {
    fprintf(stderr, "%s: %s\n", cmd->name, tagc_last_error());
    return 2;
  }
  return -1;
}

void tagctl_etcd_args_free(tagctl_etcd_args *args) {
  tagc_opt_program prog = {"", "", "", connection_opts, N_CONNECTION};
  tagc_opts_free(&prog, args);
  free(args->worker);
  args->worker = NULL;
}
