/* tagctl: the user's command. Dispatches to one file per subcommand: run (tagctl/run.c),
 * ckpt (ckpt/ckpt_cli.c; ckpt export: tagctl/export.c), inject (tagctl/inject.c), status
 * (tagctl/status.c), job (tagctl/job.c), sample (tagctl/sample.c), plot (tagctl/plot.c),
 * metrics (tagctl/metrics.c). */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt_cli.h"
#include "tagctl/tagctl.h"

#ifndef TAGC_GIT_DESCRIBE
#define TAGC_GIT_DESCRIBE "" /* `git describe` at configure time (tagctl/CMakeLists.txt) */
#endif

typedef struct command {
  const char *name;
  int (*main)(int argc, char **argv); /* argv[0] = name */
  const char *summary;
} command;

static int ckpt_main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "export"))
    return tagctl_export(argc - 1, argv + 1);
  return tagc_ckpt_cli_main(argc, argv);
}

static const command commands[] = {
    {"run", tagctl_run, "train on this machine: workers, supervision, checkpoints in OUT"},
    {"ckpt", ckpt_main, "ls|verify|inspect|export: the checkpoints of a run"},
    {"sample", tagctl_sample, "continue a prompt with a trained model (CPU)"},
    {"plot", tagctl_plot, "loss and tokens/s against step, failures and recoveries (SVG, PNG)"},
    {"metrics", tagctl_metrics, "a run's metrics.jsonl as a table or CSV"},
    {"status", tagctl_status, "whether a job is done, running or failed; progress, workers (etcd)"},
    {"inject", tagctl_inject, "arm a fault on a running worker (etcd chaos key)"},
    {"job", tagctl_job, "reset|delete: reuse a job name (etcd)"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
  fprintf(f, "usage: tagctl COMMAND [options]\n"
             "       tagctl COMMAND --help\n"
             "       tagctl --version\n"
             "Trains and inspects tagc jobs: fault-tolerant, compressed, sharded training.\n\n"
             "commands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\n`tagctl COMMAND --help` lists the options of each.\n");
}

static void version(void) {
  printf("tagctl (tagc) %s%s%s\n", TAGC_VERSION, *TAGC_GIT_DESCRIBE ? ", git " : "",
         TAGC_GIT_DESCRIBE);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (!strcmp(argv[1], commands[i].name))
      return commands[i].main(argc - 1, argv + 1);
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version")) {
    version();
    return 0;
  }
  fprintf(stderr, "tagctl: unknown command '%s' (see tagctl --help)\n", argv[1]);
  return 2;
}
