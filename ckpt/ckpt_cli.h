/* `tagctl ckpt ls|verify|inspect DIR`: checkpoint tools for humans. */
#ifndef TAGC_CKPT_CLI_H
#define TAGC_CKPT_CLI_H

/* argv[0] = "ckpt", argv[1] = ls | verify | inspect, argv[2] = a checkpoint root, one
 * step-<n> directory, or a run's OUT (no step directory in it and OUT/ckpt a directory: it
 * stands for OUT/ckpt). Prints to stdout (errors to stderr) and returns the exit status:
 * 0 ok, 1 verify (or inspect) found an invalid checkpoint, 2 usage or unreadable input.
 * --help (alone: the commands; after one: that command) prints help on stdout, status 0.
 *   ls DIR       every checkpoint: step, world size, size, validity (quick check: payload
 *                unverified), LATEST
 *   verify PATH  full check (sizes, headers, CRC32C of every file); prints each defect
 *   inspect PATH manifest summary: units, ranges per rank, files, saved state
 * Single-threaded; reads only. */
int tagc_ckpt_cli_main(int argc, char **argv);

#endif
