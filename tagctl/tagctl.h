/* The subcommands of tagctl (tagctl/main.c dispatches to them) and what they share.
 *
 * Each subcommand gets argv[0] = its own name ("run", "inject", ...) and returns the exit
 * status of tagctl: 0 done, 1 failed, 2 bad arguments (one line on stderr). */
#ifndef TAGC_TAGCTL_TAGCTL_H
#define TAGC_TAGCTL_TAGCTL_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/etcd.h"
#include "common/options.h"
#include "worker/run_config.h"

int tagctl_run(int argc, char **argv);    /* tagctl/run.c */
int tagctl_inject(int argc, char **argv); /* tagctl/inject.c */
int tagctl_status(int argc, char **argv); /* tagctl/status.c */
int tagctl_status_out(int argc, char **argv); /* tagctl/status_out.c: tagctl status OUT */
/* The "compute" line of tagctl status: each rank's compute seconds of the last step from the
 * array compute_s (a metrics.jsonl row's or the progress record's); nothing when it is not an
 * array. tagctl/status.c. */
void tagctl_print_compute(const json_t *compute_s);
int tagctl_job(int argc, char **argv);    /* tagctl/job.c */
int tagctl_export(int argc, char **argv);  /* tagctl/export.c: tagctl ckpt export */
int tagctl_sample(int argc, char **argv);  /* tagctl/sample.c */
int tagctl_plot(int argc, char **argv);    /* tagctl/plot.c */
int tagctl_metrics(int argc, char **argv); /* tagctl/metrics.c */

/* Writes the --help of a subcommand to f, GNU style in 79 columns: "usage: NAME USAGE"
 * (prog->name is "tagctl SUB"; a usage of several forms, separated by \n, gives a line each),
 * the summary, the options under the headings of groups in the groups' order (groups NULL:
 * all under "Options"; options no group names under "Other options"; a group with heading
 * NULL is not listed), each with its default, then --config, --help and how the environment
 * and --config set options. */
void tagctl_help_print(const tagc_opt_program *prog, const tagc_help_group *groups,
                       size_t n_groups, FILE *f);

/* Whether argv[1..argc) asks for --help (or -h) before any "--". */
int tagctl_help_wanted(int argc, char **argv);

/* Parses the options of a subcommand that works on files (export, sample, plot, metrics) into
 * cfg with prog's table (flag > environment > --config > default, as everywhere) and exactly
 * n_pos positional arguments into pos[n_pos]. Returns -1 when the subcommand should go on,
 * else its exit status: 0 after --help, 2 after a one-line error on stderr. Free cfg with
 * tagc_opts_free. */
int tagctl_parse_file_args(const tagc_opt_program *prog, void *cfg, int argc, char **argv,
                           char **pos, int n_pos);

/* tagctl run, before it starts the workers (tagctl/resume_note.c): one line on f about what
 * resuming the newest valid checkpoint of cfg's checkpoint root (quick check) means for the
 * learning-rate schedule. At or past --steps: nothing to train, and what a larger --steps
 * does (the cosine decay stretched to it: the lr at the next step for twice the steps
 * done). Else, when --steps, --warmup, --lr or --min-lr-ratio differ from the previous run's
 * (OUT/job.json, read before this run rewrites it): what changed and the lr of the next step
 * under both schedules. Silent with --no-resume, without a checkpoint or a previous
 * OUT/job.json, when --stop-at is reached, or when nothing changes. Reads only. */
void tagctl_resume_note(const tagc_train_config *cfg, FILE *f);

/* 1 when OUT/summary.json was written since `started` by a job that suspended (every worker
 * left it: "end": "suspended"), with its step in *step; else 0 (tagctl/closing.c). */
/* tagctl run, after the workers have stopped (tagctl/closing.c): a closing block on f: what
 * was trained (OUT/summary.json when this run, started at wall-clock time `started`, wrote
 * it: steps, time, losses, throughput), that nothing was trained, or that it was interrupted or failed (code: tagctl run's exit status), then where the outputs
 * are and the command that continues or replays the run. */
int tagctl_suspended_at(const tagc_train_config *cfg, double started, long long *step);
void tagctl_closing_block(const tagc_train_config *cfg, int code, int interrupted, double started,
                          FILE *f);

/* How long one etcd call of a subcommand may take, retries included, in seconds: a command
 * answers within seconds or says why. */
#define TAGCTL_ETCD_DEADLINE_S 5.0

/* The options of the subcommands that work on a job's etcd keys (inject, status, job). */
typedef struct tagctl_etcd_args {
  char *etcd;
  char *job;
  char *etcd_ca, *etcd_cert, *etcd_key, *etcd_user, *etcd_password_file;
  char *worker;
  int64_t at_step;
  double seconds;
  int clear;
  int force;
  int json;
} tagctl_etcd_args;

/* offsetof a field of tagctl_etcd_args, for the option tables of the subcommands */
#define TAGCTL_ARGOFF(f) offsetof(tagctl_etcd_args, f)

/* A subcommand on a job's etcd keys: its name ("tagctl status"), usage and summary for
 * --help, and its own options (fields of tagctl_etcd_args, TAGCTL_ARGOFF); --etcd, --job and
 * the TLS and auth options come with every one. */
typedef struct tagctl_etcd_command {
  const char *name, *usage, *summary;
  const tagc_opt *opts;
  size_t n_opts;
} tagctl_etcd_command;

/* Parses argv with cmd's options into *args (zeroed by the caller; positional arguments into
 * pos[max_pos] and *n_pos, which may be NULL when max_pos is 0), checks the job id and
 * creates the etcd client *etcd (caller destroys) with the TLS and auth options (the
 * password from TAGC_ETCD_PASSWORD or --etcd-password-file; never over http://). Returns -1
 * when the subcommand should go on, else its exit status: 0 after --help, 2 after a
 * one-line error on stderr. Free args with tagctl_etcd_args_free() in every case. */
int tagctl_etcd_setup(const tagctl_etcd_command *cmd, int argc, char **argv,
                      tagctl_etcd_args *args, char **pos, int max_pos, int *n_pos,
                      tagc_etcd **etcd);

/* Frees the strings of *args. Idempotent. */
void tagctl_etcd_args_free(tagctl_etcd_args *args);

#endif
