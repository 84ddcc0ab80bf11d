/* tagctl: the user's command. Dispatches to one file per subcommand: run (tagctl/run.c),
 * ckpt (ckpt/ckpt_cli.c; ckpt export: tagctl/export.c), inject (tagctl/inject.c), status
 * (tagctl/status.c), job (tagctl/job.c), sample (tagctl/sample.c), plot (tagctl/plot.c),
 * metrics (tagctl/metrics.c). */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt_cli.h"
#include "tagctl/tagctl.h"

static void usage(FILE *f) {
  fprintf(f, "usage: tagctl COMMAND [options]\n\n"
             "commands:\n"
             "  run     train locally (tagctl run --help)\n"
             "  ckpt    ls|verify|inspect DIR: checkpoints of a run (DIR = OUT/ckpt)\n"
             "          export CKPT --format safetensors|llmc --out FILE: the model as one file\n"
             "  sample  continue a prompt with a trained model (CPU)\n"
             "  plot    OUT: loss and tokens/s against step, with failures and recoveries (SVG, PNG)\n"
             "  metrics OUT --csv: a run's metrics.jsonl as CSV\n"
             "  inject  arm a fault on a running worker (etcd chaos key)\n"
             "  status  whether a job is done, running or failed, its progress and workers (etcd)\n"
             "  job     reset|delete: reuse a job name (etcd)\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "run"))
    return tagctl_run(argc - 1, argv + 1);
  if (!strcmp(argv[1], "ckpt") && argc > 2 && !strcmp(argv[2], "export"))
    return tagctl_export(argc - 2, argv + 2);
  if (!strcmp(argv[1], "ckpt"))
    return tagc_ckpt_cli_main(argc - 1, argv + 1);
  if (!strcmp(argv[1], "inject"))
    return tagctl_inject(argc - 1, argv + 1);
  if (!strcmp(argv[1], "status"))
    return tagctl_status(argc - 1, argv + 1);
  if (!strcmp(argv[1], "job"))
    return tagctl_job(argc - 1, argv + 1);
  if (!strcmp(argv[1], "sample"))
    return tagctl_sample(argc - 1, argv + 1);
  if (!strcmp(argv[1], "plot"))
    return tagctl_plot(argc - 1, argv + 1);
  if (!strcmp(argv[1], "metrics"))
    return tagctl_metrics(argc - 1, argv + 1);
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "tagctl: unknown command '%s' (see tagctl --help)\n", argv[1]);
  return 2;
}
