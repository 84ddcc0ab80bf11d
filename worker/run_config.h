/* The configuration of a training job, shared by both ways of running it (static ranks,
 * worker/train.h; elastic through etcd, worker/elastic.h) and by `tagctl run`, which
 * forwards it to its workers through OUT/worker.json.
 *
 * tagc_train_program is the option table of tagc-worker: flags, environment, --config JSON
 * file and defaults (common/options.h) fill a tagc_train_config; tagc_opts_free() frees its
 * strings. */
#ifndef TAGC_WORKER_RUN_CONFIG_H
#define TAGC_WORKER_RUN_CONFIG_H

#include <stdint.h>

#include "common/options.h"

typedef struct tagc_train_config {
  char *corpus;
  char *data;        /* token shards for training: a file or a glob ("" = the text corpus) */
  char *val_data;    /* validation shards: a file or a glob (required with data) */
  char *data_format; /* "llmc" or "nanogpt" */
  int64_t vocab;     /* 0 = from the data (256 text, 50257 llm.c); nanogpt needs it */
  char *out;
  int64_t steps;
  int64_t batch;       /* global batch, in sequences */
  int64_t micro_batch; /* sequences per forward/backward; 0 = the whole local batch */
  int64_t ctx;
  int64_t layers;
  int64_t heads;
  int64_t dim;
  double lr;
  double min_lr_ratio;
  int64_t warmup;
  double weight_decay;
  double grad_clip;
  double beta1, beta2, eps;
  int64_t seed;
  int64_t eval_every;
  int64_t eval_windows;
  int64_t threads;
  char *log;
  char *log_format; /* auto | text | json */
  char *compress;
  int64_t compress_warmup; /* steps sent dense before the sketch starts; -1: see below */
  int64_t rank;       /* this process's rank */
  int64_t world;      /* number of ranks */
  char *rendezvous;   /* directory of the static rendezvous store (world > 1) */
  char *host;         /* address to listen on and advertise */
  double op_timeout;  /* seconds a collective may take before it counts as failed */
  char *dump_params;  /* rank 0 writes the final full parameters here ("" = no) */
  int64_t ckpt_every;
  char *ckpt_dir;     /* "" = OUT/ckpt */
  double ckpt_every_s; /* wall-clock checkpoint interval (0 = off) */
  int64_t ckpt_keep_last, ckpt_keep_every;
  char *on_ckpt_failure;     /* stop | warn: saves failing --ckpt-failures-max times in a row */
  int64_t ckpt_failures_max;
  int resume;
  int allow_restart_from_scratch; /* every checkpoint invalid: train from step 0, loudly */
  char *init_from;    /* a model file whose weights a run from step 0 starts with ("" = the seed) */
  int64_t stop_at;    /* stop after this step (0 = no) */
  int check_feedback; /* test hook, see tagc_engine_config */
  double link_rate;   /* bytes/s assumed by the auto choices; 0 = measured */
  char *gather;       /* "auto", "fp32", "bf16" or "int8" parameter all-gathers (tagc_policy_gather) */
  char *reshard_after_forward; /* "auto", "true" or "false" */
  double max_gather_mem; /* MiB of gathered parameters `auto` may hold for a step; 0 = default */
  char *fault;        /* fault spec (see worker/fault.h) */
  int check_rebuild;          /* test hook: compare a memory rebuild with the disk checkpoint */
  int64_t mirror_every;        /* in-memory copy to the next rank every N steps (0 = off, -1 auto) */
  int64_t mirror_copies;       /* copies of each rank's state (engine/mirror.h) */
  double mirror_budget;        /* auto: largest fraction of the step time the copies may cost */
  char *failure_domain;        /* in-memory copies go to another domain ("" = env or host) */
  int64_t max_nonfinite_skips; /* consecutive skipped (non-finite) steps before a rollback */
  double straggler_ratio;      /* a rank this much slower than the median may be a straggler */
  double straggler_window;     /* seconds of the detection window (worker/straggler.h) */
  int exclude_straggler;       /* report a straggler so that the coordinator excludes it */
  double straggler_rejoin;     /* seconds an excluded straggler stays out before asking back */
  char *etcd;         /* etcd endpoints: elastic mode */
  char *job;
  char *worker_id;
  int64_t leave_exit_code;     /* exit status after leaving on SIGTERM/SIGINT (0 = success) */
  double lease_ttl;
  char *etcd_ca, *etcd_cert, *etcd_key; /* TLS files of the etcd client ("" = none) */
  char *etcd_user;            /* etcd auth ("" = none); password: TAGC_ETCD_PASSWORD or the file */
  char *etcd_password_file;
  double leave_timeout;       /* SIGTERM: longest wait for the generation without this worker */
  double etcd_patience;       /* longest wait for a plan with etcd out of reach */
  double leave_ckpt_wait;     /* SIGTERM: longest wait for the next committed checkpoint first */
  char *metrics_addr; /* HOST:PORT of /metrics and /healthz ("" = off) */
  char *device;       /* "cpu", "cuda" or "cuda:N" */
  char *compute;      /* "fp32" or "bf16" matrix products (CUDA) */
} tagc_train_config;

/* The option table of tagc-worker (and of tagctl run, which forwards to it). */
extern const tagc_opt_program tagc_train_program;

/* A heading of a --help listing and the options under it: names as in the table, separated
 * by spaces. The heading NULL hides its options from the listing; they still work. */
typedef struct tagc_help_group {
  const char *heading;
  const char *names;
} tagc_help_group;

/* How `tagctl run --help` lists tagc_train_program's options, group by group. Every option
 * of the table belongs to exactly one group (tests/tagctl/test_help.py checks it): a new
 * option goes into the group it belongs to. The hidden group holds what tagctl run sets for
 * each worker (--rank, --world, --rendezvous, --worker-id). */
extern const tagc_help_group tagc_train_help_groups[];
extern const size_t tagc_train_n_help_groups;

#endif
