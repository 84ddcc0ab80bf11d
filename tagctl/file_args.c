/* Option parsing of the subcommands that work on files: ckpt export, sample, plot, metrics. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "tagctl/tagctl.h"

/* Removes TAGC_<NAME> for every option of the table: these subcommands take flags (and
 * --config) only, so that a TAGC_OUT or TAGC_SEED exported for training runs can neither
 * redirect an export nor change a sample. */
static void drop_environment(const tagc_opt_program *prog) {
  for (size_t i = 0; i < prog->n_opts; i++) {
    char env[128];
    size_t o = (size_t)snprintf(env, sizeof env, "TAGC_");
    for (const char *p = prog->opts[i].name; *p && o + 1 < sizeof env; p++)
      env[o++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    env[o] = '\0';
    unsetenv(env);
  }
}

int tagctl_parse_file_args(const tagc_opt_program *prog, void *cfg, int argc, char **argv,
                           char **pos, int n_pos_wanted) {
  drop_environment(prog);
  int help = 0, n_pos = 0;
  tagc_status st = tagc_opts_parse(prog, cfg, argc, argv, pos, n_pos_wanted, &n_pos, &help);
  if (help)
    return 0;
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl %s: %s\n", prog->name, tagc_last_error());
    return 2;
  }
  if (n_pos != n_pos_wanted) {
    fprintf(stderr, "usage: tagctl %s %s\n", prog->name, prog->usage);
    return 2;
  }
  return -1;
}
