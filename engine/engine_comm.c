/* The engine's communication thread (engine_internal.h): its FIFO of tasks, and what a task
 * does, a unit's parameter gather or its gradient reduction. With world size 1 the tasks run
 * inline on the compute lane. */
#include <omp.h>
#include <pthread.h>
#include <unistd.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "engine/engine_internal.h"


/* The lane of the communication tasks: the comm thread's own, or the compute lane when tasks
 * run inline (world size 1). */
tagc_lane engine_task_lane(const tagc_engine *e) {
  return e->thread_started ? TAGC_LANE_COMM : TAGC_LANE_COMPUTE;
}

/* Gathers unit's full parameters into dst; the compute gathers' encoding when `for_compute`
 * (dumps and checkpoint tools always get the exact fp32 values). */
tagc_status engine_gather_unit(tagc_engine *e, int unit, float *dst, int for_compute) {
  const tagc_unit_info *ui = &e->L->units[unit];
  int first = e->unit_first_seg[unit], n = e->unit_n_segs[unit];
  for (int i = 0; i < n; i++) {
    const engine_segment *s = &e->segs[first + i];
    e->parts[i] = (tagc_gather_part){s->p, s->S, s->len, s->off - ui->offset};
  }
  return tagc_gather_unit(e->gathers, e->parts, n, for_compute ? e->gather : TAGC_ENC_FP32,
                          engine_task_lane(e), e->staging, dst);
}

/* A task on the comm thread first waits for the compute lane's work it depends on (the unit's
 * backward, or the last reader of the slot it overwrites) and leaves its own lane idle, so
 * its results are ready for the compute lane when the task counts as completed. */
static tagc_status run_task(tagc_engine *e, const engine_task *t) {
  int threaded = e->thread_started;
  if (threaded)
    TAGC_CHECK(tagc_device_wait_mark(e->dev, t->kind == TASK_GATHER ? ENGINE_MARK_SLOT + t->slot : t->unit));
  if (t->kind == TASK_GATHER) {
    TAGC_CHECK(engine_gather_unit(e, t->unit, e->slot_buf[t->slot], 1));
  } else {
    int first = e->unit_first_seg[t->unit], n = e->unit_n_segs[t->unit];
    for (int i = 0; i < n; i++) {
      engine_segment *s = &e->segs[first + i];
      e->jobs[i] = (tagc_grad_job){s->codec, e->grads + s->off, s->g, &s->step};
    }
    TAGC_CHECK(tagc_grad_reduce_unit(e->codec, e->jobs, n, engine_task_lane(e), e->step_now, e->staging));
  }
  return threaded ? tagc_device_sync(e->dev, TAGC_LANE_COMM) : TAGC_OK;
}

static void *comm_thread(void *arg) {
  tagc_engine *e = arg;
  /* The CPU kernels this thread runs (bf16 conversions, sparsify, encode, decode) overlap the
   * model's compute: one thread. A new pthread starts from OpenMP's global default (all
   * cores), and those spinning teams took the cores from the compute thread: bf16 gathers and
   * tagc were 2.5-3x slower per step than fp32 on a fast link with 2 cores. */
  omp_set_num_threads(1);
  int delay_fd = tagc_thread_delay_open();
  pthread_mutex_lock(&e->mu);
  for (;;) {
    while (!e->stop && e->completed == e->submitted)
      pthread_cond_wait(&e->cv, &e->mu);
    if (e->stop)
      break;
    engine_task t = e->queue[e->completed % ENGINE_QUEUE];
    tagc_status failed = e->failure;
    pthread_mutex_unlock(&e->mu);
    double t0 = tagc_now(), held0 = tagc_thread_delay_s(delay_fd);
    if (e->op_delay_s > 0)
      tagc_sleep(e->op_delay_s);
    tagc_status st = failed != TAGC_OK ? failed : run_task(e, &t);
    if (st != TAGC_OK && failed == TAGC_OK)
      LOG_WARN("engine", "%s of unit %d failed: %s", t.kind == TASK_GATHER ? "all-gather" : "reduce-scatter",
               t.unit, tagc_last_error());
    double dt = tagc_now() - t0, held = tagc_thread_delay_s(delay_fd) - held0;
    pthread_mutex_lock(&e->mu);
    if (st != TAGC_OK && e->failure == TAGC_OK)
      e->failure = st;
    e->comm_s += dt;
    e->comm_held_s += held;
    e->completed++;
    pthread_cond_broadcast(&e->cv);
  }
  pthread_mutex_unlock(&e->mu);
  if (delay_fd >= 0)
    close(delay_fd);
  return NULL;
}

/* Queues a task; returns its id. With world size 1 runs it at once. */
int64_t engine_submit(tagc_engine *e, engine_task_kind kind, int unit, int slot) {
  engine_task t = {kind, unit, slot};
  if (!e->thread_started) {
    tagc_status st = e->failure != TAGC_OK ? e->failure : run_task(e, &t);
    if (st != TAGC_OK)
      e->failure = st;
    e->completed++;
    return e->submitted++;
  }
  pthread_mutex_lock(&e->mu);
  while (e->submitted - e->completed >= ENGINE_QUEUE)
    pthread_cond_wait(&e->cv, &e->mu);
  int64_t id = e->submitted++;
  e->queue[id % ENGINE_QUEUE] = t;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  return id;
}

/* Waits until task `id` (and so every earlier one) completed; returns the first failure. */
tagc_status engine_wait_task(tagc_engine *e, int64_t id) {
  if (!e->thread_started)
    return e->failure;
  double t0 = tagc_now(), held0 = tagc_thread_delay_s(e->delay_fd);
  pthread_mutex_lock(&e->mu);
  while (e->completed <= id)
    pthread_cond_wait(&e->cv, &e->mu);
  tagc_status st = e->failure;
  pthread_mutex_unlock(&e->mu);
  e->exposed_s += tagc_now() - t0;
  e->held_in_wait_s += tagc_thread_delay_s(e->delay_fd) - held0;
  if (st != TAGC_OK)
    return tagc_errorf(st, "collective failed: %s", tagc_strerror(st));
  return TAGC_OK;
}

tagc_status engine_drain(tagc_engine *e) { return engine_wait_task(e, e->submitted - 1); }


tagc_status engine_comm_start(tagc_engine *e) {
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  e->mu_ready = 1;
  if (!e->cfg.comm)
    return TAGC_OK;
  if (pthread_create(&e->thread, NULL, comm_thread, e) != 0)
    return tagc_errorf(TAGC_ENOMEM, "communication thread");
  e->thread_started = 1;
  return TAGC_OK;
}

void engine_comm_stop(tagc_engine *e) {
  if (e->thread_started) {
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->thread_started = 0;
  }
  if (e->mu_ready) {
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    e->mu_ready = 0;
  }
}
