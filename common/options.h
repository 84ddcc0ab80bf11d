/* One declarative option table per program.
 *
 * Each option has one name ("warmup-steps") that is, at once, the flag (--warmup-steps),
 * the environment variable (TAGC_WARMUP_STEPS) and the config file key (warmup_steps).
 * Precedence: flag > environment > config file (--config FILE or TAGC_CONFIG) > default.
 * The config file is a JSON object, or TOML when its name ends in .toml (common/config_toml.h:
 * tables only group keys).
 * --help prints text generated from the table. Values are stored into a caller-owned config
 * struct at each option's offset:
 *   TAGC_OPT_INT    -> int64_t      TAGC_OPT_DOUBLE -> double
 *   TAGC_OPT_BOOL   -> int (0/1)    TAGC_OPT_STRING, TAGC_OPT_CHOICE -> char * (owned, malloc'd;
 *                                    release with tagc_opts_free)
 * Not thread-safe; call from main() before starting threads. */
#ifndef TAGC_COMMON_OPTIONS_H
#define TAGC_COMMON_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tagc_opt_type {
  TAGC_OPT_INT,
  TAGC_OPT_DOUBLE,
  TAGC_OPT_BOOL,
  TAGC_OPT_STRING,
  TAGC_OPT_CHOICE
} tagc_opt_type;

typedef struct tagc_opt {
  const char *name;    /* dash-separated, without "--" */
  tagc_opt_type type;
  size_t offset;       /* offsetof(config struct, field) */
  const char *def;     /* default as text; NULL or "" = empty string / 0 */
  double min, max;     /* inclusive range for INT and DOUBLE (ignored when min > max) */
  const char *choices; /* "a|b|c" for CHOICE */
  const char *help;
} tagc_opt;

typedef struct tagc_opt_program {
  const char *name;    /* program (and subcommand) name for --help and errors */
  const char *usage;   /* e.g. "[options] DIR" */
  const char *summary; /* one paragraph shown by --help */
  const tagc_opt *opts;
  size_t n_opts;
} tagc_opt_program;

/* Parses argv[0..argc) (argv[0] is skipped: the program name). Fills cfg from defaults,
 * the config file, the environment and flags, in that order. Arguments that are not options
 * go to positional[] (at most max_positional; more is an error); *n_positional gets the count.
 * "--" ends option parsing. When --help is given, prints help to stdout, sets *want_help = 1
 * and returns TAGC_OK without validating anything else.
 * Errors: TAGC_EINVAL with a one-line detail naming the option and the problem (unknown
 * option, missing value, malformed number, out of range, not one of the choices, unknown key
 * or wrong type in the config file; for TOML also a key given twice, a nested table, an
 * array or a date), TAGC_EPROTO for a malformed JSON or TOML file (FILE:LINE:COLUMN),
 * TAGC_ENOTFOUND / TAGC_EIO for an unreadable config file. */
tagc_status tagc_opts_parse(const tagc_opt_program *prog, void *cfg, int argc, char **argv,
                            char **positional, int max_positional, int *n_positional,
                            int *want_help);

/* Writes --help text for prog to f. */
void tagc_opts_help(const tagc_opt_program *prog, FILE *f);

/* New JSON object holding the effective value of every option (caller decrefs). */
json_t *tagc_opts_to_json(const tagc_opt_program *prog, const void *cfg);

/* Logs the effective configuration as one line at debug level (subsystem "config"; tagctl run
 * writes it to OUT/worker.json and OUT/job.json instead). */
void tagc_opts_log(const tagc_opt_program *prog, const void *cfg);

/* Frees the strings the parser allocated in cfg. Idempotent. */
void tagc_opts_free(const tagc_opt_program *prog, void *cfg);

#ifdef __cplusplus
}
#endif

#endif
