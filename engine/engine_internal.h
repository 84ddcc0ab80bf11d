/* The state of the sharded engine (engine/engine.h), shared by its files: engine.c (the
 * ZeRO-3 schedule: segments, the communication thread, hooks, passes, steps), engine_auto.c
 * (the adaptive decisions: compression warm-up, `auto`'s wires and gathers, reshard after
 * forward, over auto_policy.h's pure functions) and engine_ckpt.c (the checkpoint adapters).
 * A segment's gradient reduction is the gradient codec's (grad_codec.h), a unit's parameter
 * gather the gather codec's (gather_codec.h), the per-step scalars step_scalars.h's. */
#ifndef TAGC_ENGINE_ENGINE_INTERNAL_H
#define TAGC_ENGINE_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine/engine.h"
#include "engine/gather_codec.h"
#include "engine/grad_codec.h"
#include "engine/step_scalars.h"

#define ENGINE_QUEUE 256 /* communication tasks in flight */
#define ENGINE_MARK_SLOT 2048 /* device marks: unit u's gradient is mark u, slot s's release
                                ENGINE_MARK_SLOT + s */
#define ENGINE_ROLLING_SLOTS 3 /* unit parameter buffers when resharding: in use, prefetched, spare */

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
  tagc_gather_codec *gathers;
  engine_segment *segs;
  int n_segs;
  int n_adaptive;     /* segments whose wire `--compress auto` chooses */
  int *unit_first_seg, *unit_n_segs;

  /* device memory: */
  float *grads;   /* full local gradient arena (accumulated over micro-batches) */
  float *staging; /* W * max S floats: the comm thread's, or the compute thread's while idle */
  void *xfer;     /* per-step scalars of all ranks for the scalar all-gathers */
  size_t xfer_bytes;
  tagc_step_scalars scalars; /* this step's, then reduced over ranks */
  double *scalars_packed;    /* [tagc_step_scalars_count]: this rank's, packed */
  double *scalars_all;       /* [W][tagc_step_scalars_count]: every rank's */
  int n_slots;         /* slots in use: ENGINE_ROLLING_SLOTS while resharding, else one per unit */
  int slot_cap;        /* slot buffers allocated (>= n_slots) */
  int reshard;         /* resharding after forward now (ZeRO-3) */
  int reshard_adaptive; /* cfg.reshard_auto in effect and not decided yet */
  int auto_decided;    /* `auto` made its first decision with a known link rate */
  int save_due;        /* tagc_engine_request_save for the next step */
  int copy_due;        /* tagc_engine_request_copy for the next step */
  int stop_due;        /* tagc_engine_request_stop, until the step that carries it */
  int canonical;       /* the residuals are canonical (a snapshot or a load since the last
                          applied step): each rank's only non-zero row is its own (mirror.h) */
  float **slot_buf;
  int *slot_unit;
  int64_t *slot_task;
  size_t max_unit;
  tagc_grad_job *jobs;    /* [most segments of a unit]: a unit's reduction (comm thread) */
  tagc_gather_part *parts; /* [most segments of a unit]: a unit's gather (the gathering thread) */
  tagc_encoding gather;    /* encoding of the compute gathers now: fp32, bf16 or int8 */
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
  int mu_ready;       /* mu and cv initialised */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  engine_task queue[ENGINE_QUEUE];
  int64_t submitted, completed;
  int stop;
  tagc_status failure; /* first failure of a task; later tasks are skipped */
  double comm_s;       /* comm thread busy time (guarded by mu) */
  double exposed_s;    /* compute thread waiting time */
  double optimizer_s;  /* the last applied step's AdamW seconds (in the next step's compute_s) */
  int delay_fd;        /* the compute thread's run-queue delay (tagc_thread_delay_open), or -1 */
  double held_in_wait_s; /* of exposed_s: the compute thread ready to run but held off a CPU */
  double comm_held_s;  /* the comm thread's run-queue delay in this step's tasks (guarded by mu) */
  int64_t step_now;
  int64_t train_passes; /* micro-batch passes per step, the same on every rank (0: not yet agreed) */
  _Atomic double op_delay_s; /* fault "slow" */
  int64_t nan_step;    /* fault "nan": the step whose local gradient gets a NaN; -1 = none */
  char **seg_names;    /* checkpoint unit names (point into segs[i].name) */
  int64_t *seg_numel;
  const float **sq_x;  /* per segment: reduced gradient shard, its length, its sum of squares */
  size_t *sq_n;
  double *sq;
  tagc_adamw_segment *opt_segs; /* per segment: its shard's optimizer range */
};

/* ---- engine_comm.c: the communication thread and its FIFO ---- */

/* Initialises the FIFO's lock and, with peers, starts the thread; stops and joins it
 * (idempotent, also after a failed start). */
tagc_status engine_comm_start(tagc_engine *e);
void engine_comm_stop(tagc_engine *e);

/* Queues a task (with world size 1 runs it at once); returns its id. */
int64_t engine_submit(tagc_engine *e, engine_task_kind kind, int unit, int slot);

/* Waits until task `id` (and so every earlier one) completed; returns the first failure. */
tagc_status engine_wait_task(tagc_engine *e, int64_t id);

/* Waits until every queued communication task completed; returns the first failure. */
tagc_status engine_drain(tagc_engine *e);

/* The lane of the communication tasks: the comm thread's, or the compute lane inline. */
tagc_lane engine_task_lane(const tagc_engine *e);

/* Gathers unit's full parameters into dst (gather_codec.h): the compute gathers' encoding when
 * for_compute, else exact fp32. On the tasks' lane. */
tagc_status engine_gather_unit(tagc_engine *e, int unit, float *dst, int for_compute);

/* Elements of segment s owned by this rank: [s->off + lo, s->off + lo + *n); returns lo. */
size_t engine_shard_range(const tagc_engine *e, const engine_segment *s, size_t *n);

/* The largest shard size S over the segments. */
size_t engine_max_shard(const tagc_engine *e);

/* Allocates slot buffers up to n (each holds the largest unit); frees those beyond n. */
tagc_status engine_grow_slots(tagc_engine *e, int n);
void engine_shrink_slots(tagc_engine *e, int n);

/* ---- engine_auto.c: the adaptive decisions, each from figures every rank shares ---- */

/* The compression warm-up: fixed sketching segments send dense bf16 before cfg.compress_warmup
 * and the sketch from then on, decided by the step alone. Before the step. */
void engine_warmup_wires(tagc_engine *e, int64_t step);

/* `--compress auto` / `--gather auto`: re-chooses the adaptive segments' wires and the gather
 * encoding at the first step with a known link rate (for the gathers: or their own measured
 * rate), then after each density probe. After the step's scalars are reduced; collective where
 * the gathers measure the rate (engine_auto.c). Errors: the all-gather's. */
tagc_status engine_choose_wires(tagc_engine *e, int64_t step, double link_rate);

/* reshard auto: at creation, a slot per unit when all fit the budget; after the first step,
 * stop resharding when no rank reported it cannot hold them (decided once). */
void engine_prepare_hold_all(tagc_engine *e);
void engine_choose_reshard(tagc_engine *e, int64_t step, double cannot_hold);

/* Records the global density of each sketched segment (from the reduced scalars: every rank
 * chooses the same rho next step) and the step's compression figures into stats. */
void engine_update_density(tagc_engine *e, tagc_step_stats *stats);

#endif
