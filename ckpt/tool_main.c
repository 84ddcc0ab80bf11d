/* tagc-ckpt-tool: the `tagctl ckpt` subcommand as a standalone program (for tests). */
#include "ckpt/ckpt_cli.h"

int main(int argc, char **argv) {
  argv[0] = "ckpt";
  return tagc_ckpt_cli_main(argc, argv);
}
