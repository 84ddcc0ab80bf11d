/* The state of the sharded engine (engine/engine.h), shared by its two files: engine.c (the
 * ZeRO-3 schedule: segments, the communication thread, hooks, passes, steps) and
 * engine_ckpt.c (the checkpoint adapters). The gradient reduction of each segment is the
 * codec's (engine/grad_codec.h). */
#ifndef TAGC_WORKER_ENGINE_INTERNAL_H
#define TAGC_WORKER_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine/engine.h"
#include "engine/grad_codec.h"

#define ENGINE_QUEUE 256 /* communication tasks in flight */

typedef struct engine_segment {
  char name[48]; /* "u<unit>.<first tensor>": stable across world sizes (checkpoint unit) */
  int unit;
  size_t off, len, S; /* arena offset, elements, shard size */
  tagc_role_policy pol;
  /* device memory (engine/device.h) */
  float *p, *m, *v, *g; /* this rank's shard (S each): params, moments, reduced gradient */
  tagc_grad_segment *codec; /* residual and sketch state */
  tagc_grad_stats step;     /* the codec's figures of this step (comm thread; read after drain) */
  double codec_s;           /* adaptive: the codec's seconds at the last sketched step (max over ranks) */
  int switches;             /* adaptive: wire changes so far (auto_policy.h) */
} engine_segment;

typedef enum engine_task_kind { TASK_GATHER, TASK_REDUCE } engine_task_kind;

typedef struct engine_task {
  engine_task_kind kind;
  int unit;
  int slot;
} engine_task;

struct tagc_engine {
  tagc_engine_config cfg;
  const tagc_model_layout *L;
  tagc_device *dev;   /* cfg.device, or the CPU opened by the engine (own_dev) */
  int own_dev;
  int rank, world;
  tagc_grad_codec *codec;
  engine_segment *segs;
  int n_segs;
  int n_adaptive;     /* segments whose wire `--compress auto` chooses */
  int *unit_first_seg, *unit_n_segs;

  /* device memory: */
  float *grads;   /* full local gradient arena (accumulated over micro-batches) */
  float *staging; /* W * max S floats: the comm thread's, or the compute thread's while idle */
  void *xfer;     /* per-step scalars of all ranks for the scalar all-gathers */
  size_t xfer_bytes;
  int n_slots;         /* slots in use: ROLLING_SLOTS while resharding, else one per unit */
  int slot_cap;        /* slot buffers allocated (>= n_slots) */
  int reshard;         /* resharding after forward now (ZeRO-3) */
  int reshard_adaptive; /* cfg.reshard_auto in effect and not decided yet */
  int auto_decided;    /* `auto` made its first decision with a known link rate */
  float **slot_buf;
  int *slot_unit;
  int64_t *slot_task;
  size_t max_unit;
  uint16_t *gather16;  /* bf16 all-gather of a unit: [W][gather16_n] received, then
                          [gather16_n] sent */
  size_t gather16_n;   /* the most shard elements of a unit (the sum over its segments) */
  unsigned char *gatherq; /* int8 all-gather of a unit: [W][gatherq_chunk] received, then
                             [gatherq_chunk] sent */
  size_t gatherq_chunk;   /* the most chunk bytes of a unit's shards (summed over segments) */
  tagc_grad_job *jobs;    /* [most segments of a unit]: a unit's reduction (comm thread) */
  tagc_gather_mode gather; /* precision of the compute gathers now */
  int gather_adaptive;     /* --gather auto over adaptive roles: re-chosen with the wires */
  int gather_switches;

  tagc_device_model *model;
  uint16_t *tokens, *targets; /* host, token ids */
  tagc_unit_hooks hooks;
  int dir;            /* +1 forward, -1 backward */
  tagc_status mark_status; /* first failure to record a device mark in a pass */
  int reduce_on_done; /* last micro-batch: hand gradients to the comm thread */

  /* communication thread and its FIFO of tasks */
  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  engine_task queue[ENGINE_QUEUE];
  int64_t submitted, completed;
  int stop;
  tagc_status failure; /* first failure of a task; later tasks are skipped */
  double comm_s;       /* comm thread busy time (guarded by mu) */
  double exposed_s;    /* compute thread waiting time */
  int64_t step_now;
  int64_t train_passes; /* micro-batch passes per step, the same on every rank (0: not yet agreed) */
  _Atomic double op_delay_s; /* fault "slow" */
  int64_t nan_step;    /* fault "nan": the step whose local gradient gets a NaN; -1 = none */
  char **seg_names;    /* checkpoint unit names (point into segs[i].name) */
  int64_t *seg_numel;
  double *sums;        /* per-step scalars summed over ranks: see tagc_engine_step */
  const float **sq_x;  /* per segment: reduced gradient shard, its length, its sum of squares */
  size_t *sq_n;
  double *sq;
};

/* Waits until every queued communication task completed; returns the first failure. */
tagc_status engine_drain(tagc_engine *e);

/* Elements of segment s owned by this rank: [s->off + lo, s->off + lo + *n); returns lo. */
size_t engine_shard_range(const tagc_engine *e, const engine_segment *s, size_t *n);

#endif
