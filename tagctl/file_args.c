/* Option parsing of the subcommands that work on files: ckpt export, sample, plot, metrics. */
#include <stdio.h>

#include "tagctl/tagctl.h"

int tagctl_parse_file_args(const tagc_opt_program *prog, void *cfg, int argc, char **argv,
                           char **pos, int n_pos_wanted) {
  if (tagctl_help_wanted(argc, argv)) {
    tagctl_help_print(prog, NULL, 0, stdout);
    return 0;
  }
  int help = 0, n_pos = 0;
  tagc_status st = tagc_opts_parse(prog, cfg, argc, argv, pos, n_pos_wanted, &n_pos, &help);
  if (st != TAGC_OK) {
    fprintf(stderr, "%s: %s\n", prog->name, tagc_last_error());
    return 2;
  }
  if (n_pos != n_pos_wanted) {
    /* one line: the usage's forms (one per line in --help) joined by " | " */
    fprintf(stderr, "usage: %s ", prog->name);
    for (const char *u = prog->usage; *u; u++)
      u[0] == '\n' ? fputs(" | ", stderr) : fputc(*u, stderr);
    fputc('\n', stderr);
    return 2;
  }
  return -1;
}
