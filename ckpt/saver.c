/* Asynchronous saver: one background thread, one host buffer, backpressure on overlap. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/ckpt_saver.h"
#include "common/log.h"
#include "common/timeutil.h"

struct tagc_ckpt_saver {
  tagc_ckpt_writer_config cfg; /* points into the copies below */
  char *dir;
  char **unit_names, **stream_names;
  int64_t *numel;
  tagc_ckpt_range *ranges;
  float *buffer;               /* this rank's shard, all units and streams */
  float **views;               /* [n_units * n_streams] into buffer */
  size_t buffer_floats;

  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int busy;     /* a job is being copied, queued or written */
  int pending;  /* a job is ready for the thread */
  int staging;  /* between begin and finish */
  double stage_t0;
  int stopping;
  int64_t step;
  tagc_ckpt_meta meta; /* owned deep copies of the submitted state */
  tagc_ckpt_saver_stats stats;
};

static json_t *copy_json(const json_t *v) { return v ? json_deep_copy(v) : NULL; }

static void meta_copy(const tagc_ckpt_meta *src, tagc_ckpt_meta *dst) {
  *dst = (tagc_ckpt_meta){copy_json(src->model), copy_json(src->tensors), copy_json(src->sampler),
                          copy_json(src->rng), copy_json(src->compression)};
}

/* The copies are ours: the const in tagc_ckpt_meta is for callers lending their state. */
static void meta_free(tagc_ckpt_meta *m) {
  json_decref((json_t *)m->model);
  json_decref((json_t *)m->tensors);
  json_decref((json_t *)m->sampler);
  json_decref((json_t *)m->rng);
  json_decref((json_t *)m->compression);
  *m = (tagc_ckpt_meta){0};
}

static void *saver_main(void *arg) {
  tagc_ckpt_saver *sv = arg;
  pthread_mutex_lock(&sv->mu);
  for (;;) {
    while (!sv->pending && !sv->stopping)
      pthread_cond_wait(&sv->cv, &sv->mu);
    if (!sv->pending)
      break;
    sv->pending = 0;
    int64_t step = sv->step;
    pthread_mutex_unlock(&sv->mu);

    double t0 = tagc_now();
    tagc_ckpt_committed committed = {0};
    tagc_status st = tagc_ckpt_save(&sv->cfg, step, (const float *const *)sv->views, &sv->meta, &committed);
    char detail[sizeof sv->stats.last_error] = "";
    if (st != TAGC_OK) {
      snprintf(detail, sizeof detail, "%s", tagc_last_error());
      /* rank 0's line is the save's (its commit fails with any rank's part); the others'
         own detail is for --log ckpt=debug, so that a full disk says it once, not W times */
      if (sv->cfg.rank == 0)
        LOG_ERROR("ckpt", "checkpoint of step %lld failed: %s", (long long)step, detail);
      else
        LOG_DEBUG("ckpt", "checkpoint of step %lld failed on rank %d: %s", (long long)step,
                  sv->cfg.rank, detail);
    }
    meta_free(&sv->meta);

    pthread_mutex_lock(&sv->mu);
    sv->stats.saves_done++;
    sv->stats.saves_failed += st != TAGC_OK;
    sv->stats.failed_in_a_row = st != TAGC_OK ? sv->stats.failed_in_a_row + 1 : 0;
    sv->stats.last_write_s = tagc_now() - t0;
    sv->stats.last_step = step;
    sv->stats.last_status = st;
    memcpy(sv->stats.last_error, detail, sizeof detail);
    if (st == TAGC_OK && sv->cfg.rank == 0)
      sv->stats.last_committed = committed;
    sv->busy = 0;
    pthread_cond_broadcast(&sv->cv);
  }
  pthread_mutex_unlock(&sv->mu);
  return NULL;
}

static void free_copies(tagc_ckpt_saver *sv) {
  for (int u = 0; sv->unit_names && u < sv->cfg.layout.n_units; u++)
    free(sv->unit_names[u]);
  for (int s = 0; sv->stream_names && s < sv->cfg.layout.n_streams; s++)
    free(sv->stream_names[s]);
  free(sv->unit_names);
  free(sv->stream_names);
  free(sv->numel);
  free(sv->ranges);
  free(sv->dir);
  free(sv->buffer);
  free(sv->views);
}

/* Deep-copies the config and lays out the host buffer. */
static tagc_status copy_config(tagc_ckpt_saver *sv, const tagc_ckpt_writer_config *cfg) {
  int nu = cfg->layout.n_units, ns = cfg->layout.n_streams;
  sv->cfg = *cfg;
  sv->dir = strdup(cfg->dir);
  sv->unit_names = calloc((size_t)nu + 1, sizeof *sv->unit_names);
  sv->stream_names = calloc((size_t)ns, sizeof *sv->stream_names);
  sv->numel = calloc((size_t)nu + 1, sizeof *sv->numel);
  sv->ranges = calloc((size_t)nu + 1, sizeof *sv->ranges);
  sv->views = calloc((size_t)nu * ns + 1, sizeof *sv->views);
  if (!sv->dir || !sv->unit_names || !sv->stream_names || !sv->numel || !sv->ranges || !sv->views)
    return tagc_errorf(TAGC_ENOMEM, "checkpoint saver config");
  for (int s = 0; s < ns; s++)
    if (!(sv->stream_names[s] = strdup(cfg->layout.stream_names[s])))
      return tagc_errorf(TAGC_ENOMEM, "checkpoint saver config");
  for (int u = 0; u < nu; u++) {
    if (!(sv->unit_names[u] = strdup(cfg->layout.unit_names[u])))
      return tagc_errorf(TAGC_ENOMEM, "checkpoint saver config");
    sv->numel[u] = cfg->layout.unit_numel[u];
    sv->ranges[u] = cfg->ranges[u];
    sv->buffer_floats += (size_t)tagc_ckpt_range_count(cfg->ranges[u], sv->numel[u]) * (size_t)ns;
  }
  sv->buffer = malloc(sv->buffer_floats * sizeof(float) + 1);
  if (!sv->buffer)
    return tagc_errorf(TAGC_ENOMEM, "checkpoint host buffer of %zu floats", sv->buffer_floats);
  memset(sv->buffer, 0, sv->buffer_floats * sizeof(float)); /* fault the pages in now, not in the first stall */
  size_t off = 0;
  for (int u = 0; u < nu; u++) {
    size_t count = (size_t)tagc_ckpt_range_count(cfg->ranges[u], sv->numel[u]);
    for (int s = 0; s < ns; s++, off += count)
      sv->views[(size_t)u * ns + s] = sv->buffer + off;
  }
  sv->cfg.dir = sv->dir;
  sv->cfg.layout.unit_names = (const char *const *)sv->unit_names;
  sv->cfg.layout.stream_names = (const char *const *)sv->stream_names;
  sv->cfg.layout.unit_numel = sv->numel;
  sv->cfg.ranges = sv->ranges;
  return TAGC_OK;
}

tagc_status tagc_ckpt_saver_create(const tagc_ckpt_writer_config *cfg, tagc_ckpt_saver **out) {
  *out = NULL;
  if (!cfg || !cfg->dir || cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size ||
      (cfg->world_size > 1 && !cfg->barrier) || (cfg->layout.n_units > 0 && !cfg->ranges))
    return tagc_errorf(TAGC_EINVAL, "checkpoint saver: need dir, rank < world size, ranges, and a barrier for W > 1");
  TAGC_CHECK(ckpt_layout_check(&cfg->layout));
  tagc_ckpt_saver *sv = calloc(1, sizeof *sv);
  if (!sv)
    return tagc_errorf(TAGC_ENOMEM, "checkpoint saver");
  tagc_status st = copy_config(sv, cfg);
  if (st != TAGC_OK) {
    free_copies(sv);
    free(sv);
    return st;
  }
  sv->stats.last_step = -1;
  pthread_mutex_init(&sv->mu, NULL);
  pthread_cond_init(&sv->cv, NULL);
  if (pthread_create(&sv->thread, NULL, saver_main, sv) != 0) {
    pthread_mutex_destroy(&sv->mu);
    pthread_cond_destroy(&sv->cv);
    free_copies(sv);
    free(sv);
    return tagc_errorf(TAGC_EINTERNAL, "checkpoint saver: cannot start its thread");
  }
  *out = sv;
  return TAGC_OK;
}

tagc_status tagc_ckpt_saver_begin(tagc_ckpt_saver *sv, int64_t step, float *const **views) {
  if (step < 0 || sv->staging)
    return tagc_errorf(TAGC_EINVAL, "checkpoint begin: step %lld%s", (long long)step,
                       sv->staging ? " while another one is being staged" : "");
  double t0 = tagc_now();
  pthread_mutex_lock(&sv->mu);
  if (sv->stopping) {
    pthread_mutex_unlock(&sv->mu);
    return tagc_errorf(TAGC_EABORTED, "checkpoint saver is shutting down");
  }
  if (sv->busy) {
    LOG_WARN("ckpt", "checkpoint of step %lld waits: the previous save is still running (backpressure)",
             (long long)step);
    sv->stats.backpressure_waits++;
    while (sv->busy)
      pthread_cond_wait(&sv->cv, &sv->mu);
  }
  sv->busy = 1;
  sv->step = step;
  pthread_mutex_unlock(&sv->mu);
  sv->staging = 1;
  sv->stage_t0 = t0;
  *views = sv->views;
  return TAGC_OK;
}

tagc_status tagc_ckpt_saver_finish(tagc_ckpt_saver *sv, const tagc_ckpt_meta *meta) {
  if (!sv->staging)
    return tagc_errorf(TAGC_EINVAL, "checkpoint finish without begin");
  if (meta)
    meta_copy(meta, &sv->meta);
  sv->staging = 0;
  pthread_mutex_lock(&sv->mu);
  sv->pending = 1;
  sv->stats.last_stall_s = tagc_now() - sv->stage_t0;
  pthread_cond_broadcast(&sv->cv);
  pthread_mutex_unlock(&sv->mu);
  return TAGC_OK;
}

tagc_status tagc_ckpt_saver_abandon(tagc_ckpt_saver *sv) {
  if (!sv->staging)
    return tagc_errorf(TAGC_EINVAL, "checkpoint abandon without begin");
  LOG_WARN("ckpt", "checkpoint of step %lld abandoned on rank %d: nothing is written", (long long)sv->step,
           sv->cfg.rank);
  sv->staging = 0;
  pthread_mutex_lock(&sv->mu);
  sv->stats.saves_abandoned++;
  sv->busy = 0;
  pthread_cond_broadcast(&sv->cv);
  pthread_mutex_unlock(&sv->mu);
  return TAGC_OK;
}

tagc_status tagc_ckpt_saver_submit(tagc_ckpt_saver *sv, int64_t step, const float *const *data,
                                   const tagc_ckpt_meta *meta) {
  int nu = sv->cfg.layout.n_units, ns = sv->cfg.layout.n_streams;
  if (nu > 0 && !data)
    return tagc_errorf(TAGC_EINVAL, "checkpoint submit: step %lld needs data", (long long)step);
  for (int u = 0; u < nu; u++)
    for (int s = 0; s < ns; s++)
      if (tagc_ckpt_range_count(sv->ranges[u], sv->numel[u]) > 0 && !data[(size_t)u * ns + s])
        return tagc_errorf(TAGC_EINVAL, "checkpoint submit: no data for unit %d stream %d", u, s);
  float *const *views;
  TAGC_CHECK(tagc_ckpt_saver_begin(sv, step, &views));
  for (int u = 0; u < nu; u++) {
    size_t count = (size_t)tagc_ckpt_range_count(sv->ranges[u], sv->numel[u]);
    for (int s = 0; s < ns && count > 0; s++)
      memcpy(views[(size_t)u * ns + s], data[(size_t)u * ns + s], count * sizeof(float));
  }
  return tagc_ckpt_saver_finish(sv, meta);
}

tagc_status tagc_ckpt_saver_wait(tagc_ckpt_saver *sv) {
  pthread_mutex_lock(&sv->mu);
  while (sv->busy)
    pthread_cond_wait(&sv->cv, &sv->mu);
  tagc_status st = sv->stats.saves_done ? sv->stats.last_status : TAGC_OK;
  char detail[sizeof sv->stats.last_error];
  memcpy(detail, sv->stats.last_error, sizeof detail);
  pthread_mutex_unlock(&sv->mu);
  return st == TAGC_OK ? st : tagc_errorf(st, "%s", detail);
}

void tagc_ckpt_saver_stats_get(tagc_ckpt_saver *sv, tagc_ckpt_saver_stats *out) {
  pthread_mutex_lock(&sv->mu);
  *out = sv->stats;
  pthread_mutex_unlock(&sv->mu);
}

void tagc_ckpt_saver_destroy(tagc_ckpt_saver *sv) {
  if (!sv)
    return;
  pthread_mutex_lock(&sv->mu);
  sv->stopping = 1;
  pthread_cond_broadcast(&sv->cv);
  pthread_mutex_unlock(&sv->mu);
  pthread_join(sv->thread, NULL);
  meta_free(&sv->meta);
  pthread_mutex_destroy(&sv->mu);
  pthread_cond_destroy(&sv->cv);
  free_copies(sv);
  free(sv);
}
