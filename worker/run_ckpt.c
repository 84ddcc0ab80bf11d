/* Checkpoints of a worker's run (run_internal.h): the saver, the all-ranks commit rule, and
 * resuming at a point every rank agrees on. */
#include "worker/run_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/timeutil.h"

json_t *run_model_json(const tagc_run *t) {
  const tagc_model_config *m = &t->layout.cfg;
  return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "vocab", m->vocab, "padded_vocab",
                   m->padded_vocab, "ctx", m->ctx, "layers", m->n_layer, "heads", m->n_head, "dim",
                   m->d_model);
}

static json_t *tensors_json(const tagc_run *t) {
  json_t *a = json_array();
  for (int i = 0; a && i < t->layout.n_tensors; i++) {
    const tagc_tensor_info *ti = &t->layout.tensors[i];
    json_array_append_new(a, json_pack("{s:s, s:s, s:i, s:i, s:i, s:I}", "name", ti->name, "role",
                                       tagc_role_name(ti->role), "unit", ti->unit, "rows", ti->rows,
                                       "cols", ti->cols, "offset", (json_int_t)ti->offset));
  }
  return a;
}

static json_t *sampler_json(const tagc_run *t, int64_t step) {
  return json_pack("{s:I, s:I, s:I, s:I, s:I}", "seed", (json_int_t)t->cfg->seed, "batch",
                   (json_int_t)t->cfg->batch, "ctx", (json_int_t)t->cfg->ctx, "step",
                   (json_int_t)step, "corpus_crc32c", (json_int_t)t->corpus.crc);
}

/* Rank 0's barrier before commit: every rank's shard file is durable once it has its final
 * name (ckpt/ renames it after fsync), so waiting for the W files is the barrier, and it needs
 * no collective on the saver's thread. Every rank agreed that all snapshots succeeded before
 * it began to write (save_checkpoint), so each shard is on its way: the wait allows for a
 * peer starting up to an operation timeout later and writing 3x slower than this rank did,
 * and no longer, so that a peer that died meanwhile does not hold the generation's end up. */
static tagc_status shard_files_barrier(void *arg, int64_t step) {
  tagc_run *t = arg;
  if (t->rank != 0)
    return TAGC_OK;
  double now = tagc_now(), deadline = now + t->cfg->op_timeout + 3 * (now - t->save_started);
  for (int r = 0; r < t->world; r++) {
    char path[4200];
    TAGC_CHECK(tagc_ckpt_shard_path(t->ckpt_root, step, r, 1, path, sizeof path));
    while (access(path, F_OK) != 0) {
      if (tagc_now() > deadline || t->aborted)
        return tagc_errorf(TAGC_ETIMEDOUT, "checkpoint of step %lld: rank %d's shard did not "
                           "arrive within %.1f s", (long long)step, r, deadline - now);
      tagc_sleep(0.01);
    }
  }
  return TAGC_OK;
}

/* Rank 0, on the saver's thread: records the committed checkpoint (elastic mode: in etcd,
 * tagc_run_hooks.commit_ckpt). The checkpoint is durable and valid on disk before this
 * record: an etcd that cannot take it (out of reach, its space quota exceeded) leaves the
 * save good. The next plan then resumes from the in-memory copies or an older record, and a
 * worker that finds no record resumes from the newest valid checkpoint on disk. */
static tagc_status record_commit(void *arg, const tagc_ckpt_committed *c) {
  tagc_run *t = arg;
  if (!t->hooks.commit_ckpt)
    return TAGC_OK;
  tagc_status st = t->hooks.commit_ckpt(t->hooks.ctx, t->gen, c->step, c->path, c->world_size,
                                        c->manifest_crc32c);
  if (st == TAGC_ECONFLICT) /* a newer generation or step is already recorded */
    return TAGC_OK;
  if (st != TAGC_OK && st != TAGC_EINVAL && st != TAGC_ENOMEM) {
    LOG_WARN("ckpt", "checkpoint of step %lld is committed on disk (%s), but its record in etcd "
             "was not written: %s", (long long)c->step, c->path, tagc_last_error());
    return TAGC_OK;
  }
  return st;
}

tagc_status run_open_saver(tagc_run *t) {
  if (t->cfg->ckpt_every == 0 && t->cfg->ckpt_every_s <= 0)
    return TAGC_OK;
  if (t->rank == 0 && mkdir(t->ckpt_root, 0755) != 0 && errno != EEXIST)
    return tagc_errorf(TAGC_EIO, "checkpoint root %s: %s", t->ckpt_root, strerror(errno));
  /* Leftover shards of an abandoned save would satisfy shard_files_barrier: remove them now,
   * before any rank can save (saves come after collective steps, which wait for rank 0). */
  if (t->rank == 0)
    TAGC_CHECK(tagc_ckpt_remove_partial(t->ckpt_root, NULL));
  int n = tagc_engine_n_segments(t->engine);
  t->ranges = calloc((size_t)n, sizeof *t->ranges);
  if (!t->ranges)
    return tagc_errorf(TAGC_ENOMEM, "checkpoint ranges");
  tagc_ckpt_writer_config wc = {0};
  wc.dir = t->ckpt_root;
  wc.rank = t->rank;
  wc.world_size = t->world;
  tagc_engine_ckpt_layout(t->engine, &wc.layout, t->ranges);
  wc.ranges = t->ranges;
  wc.barrier = shard_files_barrier;
  wc.barrier_arg = t;
  wc.keep_last = (int)t->cfg->ckpt_keep_last;
  wc.keep_every = (int)t->cfg->ckpt_keep_every;
  wc.on_commit = record_commit;
  wc.on_commit_arg = t;
  return tagc_ckpt_saver_create(&wc, &t->saver);
}

/* ---------- what the ranks of a generation agree on ---------- */

/* A status that came over the wire; anything out of range counts as a peer failure. */
static tagc_status wire_status(int64_t v) {
  return v <= TAGC_OK && v >= TAGC_EINTERNAL ? (tagc_status)v : TAGC_EPEER;
}

/* Collective: every rank tells the others how its part went (mine), and every rank learns
 * the first failure: this rank's own (its detail kept), else TAGC_EPEER naming the rank
 * whose part failed (`what`, e.g. "snapshot of step 4"), else the all-gather's failure.
 * all[r * n + k] (W * n values) gets rank r's values[k] (n values per rank, values[0] is
 * overwritten with the status). At world size 1, mine. */
static tagc_status agree(tagc_run *t, tagc_status mine, int64_t *values, int n, int64_t *all,
                         const char *what) {
  if (t->world == 1 || !t->comm)
    return mine;
  if (!all) /* no room for the answers: the peers' agreement then times out */
    return mine != TAGC_OK ? mine : tagc_errorf(TAGC_ENOMEM, "agreement on the %s", what);
  values[0] = mine;
  tagc_error_saved own;
  tagc_error_save(&own);
  /* collective on the training communicator: the engine's comm thread must be idle */
  tagc_status st = tagc_device_allgather_host(t->device, t->comm, values, all,
                                              (size_t)n * sizeof *values, NULL, t->cfg->op_timeout);
  if (mine != TAGC_OK) {
    tagc_error_restore(&own);
    return mine;
  }
  for (int r = 0; st == TAGC_OK && r < t->world; r++)
    if (all[(size_t)r * n] != TAGC_OK) {
      t->suspect = r;
      return tagc_errorf(TAGC_EPEER, "rank %d's %s failed (%s)", r, what,
                         tagc_strerror(wire_status(all[(size_t)r * n])));
    }
  return st;
}

/* Re-tags this thread's error detail with a prefix, keeping st. */
static tagc_status prefixed(tagc_status st, const char *prefix) {
  char detail[1024];
  snprintf(detail, sizeof detail, "%s", tagc_last_error());
  return tagc_errorf(st, "%s: %s", prefix, detail);
}

/* Starts an asynchronous save of the state after `step` completed steps. The ranks agree
 * first that every snapshot succeeded (one collective): otherwise every rank abandons the
 * save, so a stale or partly canonicalised state never becomes a checkpoint. */
int64_t run_ckpt_streak(const tagc_run *t) {
  if (!t->saver)
    return t->ckpt_streak;
  tagc_ckpt_saver_stats cs;
  tagc_ckpt_saver_stats_get(t->saver, &cs);
  /* every save of this saver failed: the streak began before it */
  return cs.failed_in_a_row + (cs.failed_in_a_row == cs.saves_done ? t->ckpt_streak : 0);
}

/* --on-ckpt-failure stop, streak (the most failed saves in a row of any rank) reached
 * --ckpt-failures-max: every rank stops at this step alike (they agreed on streak), rank 0
 * writes summary.json, and the run ends with TAGC_EIO (exit 4) naming the cause and the
 * newest valid checkpoint. */
static tagc_status stop_for_failed_saves(tagc_run *t, int64_t step, int64_t streak) {
  tagc_ckpt_saver_stats cs;
  tagc_ckpt_saver_stats_get(t->saver, &cs);
  char last[320], newest[4300];
  if (cs.last_status != TAGC_OK && cs.last_error[0])
    snprintf(last, sizeof last, "the last, step %lld: %s", (long long)cs.last_step, cs.last_error);
  else
    snprintf(last, sizeof last, "on another rank");
  run_newest_valid(t, newest, sizeof newest);
  run_write_cut_short(t, step, "stopped: checkpoints failing");
  return tagc_errorf(TAGC_EIO, "%lld checkpoint saves in a row failed (%s); the job stops at "
                     "step %lld (--on-ckpt-failure stop, --ckpt-failures-max %lld); the newest "
                     "valid checkpoint: %s", (long long)streak, last, (long long)step,
                     (long long)t->cfg->ckpt_failures_max, newest);
}

tagc_status run_save_checkpoint(tagc_run *t, int64_t step) {
  float *const *views;
  /* begin waits for the previous save: its result is in the streak below */
  TAGC_CHECK(tagc_ckpt_saver_begin(t->saver, step, &views));
  if (tagc_ckpt_fault_abort_snapshot(t->rank))
    tagc_run_abort(t); /* what a newer generation or a lost lease does during a snapshot */
  char what[64];
  snprintf(what, sizeof what, "snapshot of step %lld", (long long)step);
  int64_t mine[2] = {0, run_ckpt_streak(t)}, streak = mine[1];
  int64_t *all = calloc((size_t)t->world * 2, sizeof *all);
  tagc_status st = agree(t, tagc_engine_snapshot(t->engine, views), mine, 2, all, what);
  for (int r = 0; st == TAGC_OK && all && t->world > 1 && t->comm && r < t->world; r++)
    streak = all[2 * r + 1] > streak ? all[2 * r + 1] : streak;
  free(all);
  if (st == TAGC_OK && streak >= t->cfg->ckpt_failures_max &&
      strcmp(t->cfg->on_ckpt_failure, "stop") == 0) {
    TAGC_CHECK_IGNORE(tagc_ckpt_saver_abandon(t->saver), st);
    return stop_for_failed_saves(t, step, streak);
  }
  if (st != TAGC_OK) {
    TAGC_CHECK_IGNORE(tagc_ckpt_saver_abandon(t->saver), st);
    char prefix[96];
    snprintf(prefix, sizeof prefix, "checkpoint of step %lld abandoned", (long long)step);
    return prefixed(st, prefix);
  }
  json_t *model = run_model_json(t), *tensors = tensors_json(t), *sampler = sampler_json(t, step);
  json_t *rng = json_pack("{s:I}", "seed", (json_int_t)t->cfg->seed);
  json_t *comp = tagc_engine_compression_state(t->engine);
  if (comp)
    json_object_set_new(comp, "policy", json_string(t->cfg->compress));
  tagc_ckpt_meta meta = {model, tensors, sampler, rng, comp};
  t->save_started = tagc_now();
  st = tagc_ckpt_saver_finish(t->saver, &meta);
  json_decref(model);
  json_decref(tensors);
  json_decref(sampler);
  json_decref(rng);
  json_decref(comp);
  return st;
}

/* ---------- resuming ---------- */

/* This rank's resume point: *rd open and fully verified, or NULL for step 0 — which is
 * chosen silently only when nothing was ever saved. The plan's checkpoint first, else (it is
 * damaged or gone) the newest valid one; when the plan names the committed manifest's CRC
 * and the plan's checkpoint has another, TAGC_ECORRUPT: the folder was written over.
 * --no-resume leaves out what the folder held at the start, never the plan's checkpoint:
 * that is the job's own record (elastic mode: committed by its generations since it started
 * or was reset), so a generation after a failure resumes from it; without one, step 0. */
static tagc_status choose_resume(tagc_run *t, const tagc_gen_spec *g, tagc_ckpt_reader **rd) {
  *rd = NULL;
  if (!t->cfg->resume && !g->resume_path)
    return TAGC_OK;
  tagc_status st;
  if (g->resume_path) {
    st = tagc_ckpt_open(g->resume_path, TAGC_CKPT_VERIFY_FULL, rd);
    uint32_t crc = st == TAGC_OK ? tagc_ckpt_reader_manifest_crc32c(*rd) : 0;
    if (st == TAGC_OK && g->resume_manifest_crc && crc != g->resume_manifest_crc) {
      tagc_ckpt_close(*rd); /* not what was committed: someone replaced it, trust none here */
      *rd = NULL;
      return tagc_errorf(TAGC_ECORRUPT, "checkpoint %s is not the one committed: its manifest "
                         "has CRC32C %08x, the job's record %08x (written over by another run?)",
                         g->resume_path, crc, g->resume_manifest_crc);
    }
    if (st == TAGC_OK)
      return TAGC_OK;
    if (!t->cfg->resume) /* the folder's other checkpoints may be from before this job */
      return prefixed(TAGC_ECORRUPT, "the plan's checkpoint cannot be resumed from, and "
                      "--no-resume leaves out the folder's others");
    LOG_WARN("train", "checkpoint %s: %s; looking for the newest valid one", g->resume_path,
             tagc_last_error());
  }
  st = tagc_ckpt_find_latest_valid(t->ckpt_root, TAGC_CKPT_VERIFY_FULL, rd);
  if (st == TAGC_OK || (st == TAGC_ENOTFOUND && !g->resume_path)) {
    tagc_clear_error();
    return TAGC_OK;
  }
  if (st != TAGC_ENOTFOUND && st != TAGC_ECORRUPT)
    return st;
  if (t->cfg->allow_restart_from_scratch) {
    LOG_ERROR("train", "%s: RESTARTING FROM STEP 0, as --allow-restart-from-scratch "
              "(TAGC_ALLOW_RESTART_FROM_SCRATCH) allows", tagc_last_error());
    tagc_clear_error();
    return TAGC_OK;
  }
  return prefixed(TAGC_ECORRUPT, "no checkpoint to resume from, and refusing to restart from "
                  "step 0 (--allow-restart-from-scratch or TAGC_ALLOW_RESTART_FROM_SCRATCH=1 for that, "
                  "or --no-resume)");
}

/* The checkpoint belongs to this job: same model, batch, seed and corpus. A manifest without
 * padded_vocab (written before it existed, byte vocabulary) has padded_vocab == vocab. */
static tagc_status check_job(tagc_run *t, tagc_ckpt_reader *rd) {
  json_t *model = run_model_json(t), *sampler = sampler_json(t, tagc_ckpt_reader_step(rd));
  json_t *theirs = json_deep_copy(tagc_ckpt_reader_meta(rd, "model"));
  json_t *their_vocab = json_object_get(theirs, "vocab");
  if (json_is_object(theirs) && !json_object_get(theirs, "padded_vocab") && their_vocab)
    json_object_set(theirs, "padded_vocab", their_vocab);
  json_int_t vocab = json_integer_value(json_object_get(theirs, "vocab"));
  json_int_t padded = json_integer_value(json_object_get(theirs, "padded_vocab"));
  const tagc_model_config *mc = &t->layout.cfg;
  tagc_status st = TAGC_OK;
  if (vocab != mc->vocab || padded != mc->padded_vocab)
    st = tagc_errorf(TAGC_EINVAL, "checkpoint %s was trained with vocabulary %lld (padded %lld); "
                     "this run's data gives %d (padded %d): use the same data and --vocab, "
                     "another --out or --no-resume", tagc_ckpt_reader_path(rd), (long long)vocab,
                     (long long)padded, mc->vocab, mc->padded_vocab);
  else if (!json_equal(model, theirs) ||
      !json_equal(sampler, tagc_ckpt_reader_meta(rd, "sampler")))
    st = tagc_errorf(TAGC_EINVAL, "checkpoint %s is of another model, batch, seed or corpus: "
                     "use another --out or --no-resume", tagc_ckpt_reader_path(rd));
  json_decref(model);
  json_decref(theirs);
  json_decref(sampler);
  return st;
}

/* Collective: the ranks resume from the same checkpoint (step and manifest CRC32C), or the
 * generation fails with TAGC_ECONFLICT naming their choices. */
static tagc_status agree_resume(tagc_run *t, const tagc_gen_spec *g, tagc_status mine,
                                const tagc_ckpt_reader *rd) {
  int64_t values[3] = {0, rd ? tagc_ckpt_reader_step(rd) : 0,
                       rd ? (int64_t)tagc_ckpt_reader_manifest_crc32c(rd) : 0};
  if (g->resume_step > 0 && values[1] != g->resume_step && mine == TAGC_OK)
    LOG_WARN("train", "the plan resumes from step %lld; this rank found step %lld",
             (long long)g->resume_step, (long long)values[1]);
  int64_t *all = calloc((size_t)t->world * 3, sizeof *all);
  tagc_status st = agree(t, mine, values, 3, all, "choice of its resume point");
  char list[512] = "";
  int off_rank0 = -1, off_plan = -1;
  for (int r = 0; st == TAGC_OK && r < t->world && t->world > 1; r++) {
    const int64_t *v = all + 3 * (size_t)r;
    size_t used = strlen(list);
    if (v[1])
      snprintf(list + used, sizeof list - used, "%srank %d: step %lld (manifest %08llx)", r ? ", " : "",
               r, (long long)v[1], (unsigned long long)v[2]);
    else
      snprintf(list + used, sizeof list - used, "%srank %d: step 0 (no checkpoint)", r ? ", " : "", r);
    if (off_rank0 < 0 && (v[1] != all[1] || v[2] != all[2]))
      off_rank0 = r;
    if (off_plan < 0 && g->resume_step > 0 && v[1] != g->resume_step)
      off_plan = r;
  }
  if (off_rank0 >= 0) { /* blame the first rank off the plan, else the first off rank 0 */
    t->suspect = off_plan >= 0 ? off_plan : off_rank0;
    st = tagc_errorf(TAGC_ECONFLICT, "the ranks would resume from different checkpoints (%s): "
                     "refusing to train", list);
  }
  free(all);
  return st;
}

/* ---------- rebuilding from the in-memory copies ---------- */

/* --check-rebuild: this rank's rebuilt shards against the checkpoint of the same step. */
static tagc_status check_rebuild(tagc_run *t, int64_t step) {
  char path[4200];
  TAGC_CHECK(tagc_ckpt_step_path(t->ckpt_root, step, 0, path, sizeof path));
  tagc_ckpt_reader *rd = NULL;
  if (tagc_ckpt_open(path, TAGC_CKPT_VERIFY_FULL, &rd) != TAGC_OK) {
    LOG_WARN("train", "rebuild check: no valid checkpoint of step %lld to compare with (%s)",
             (long long)step, tagc_last_error());
    tagc_clear_error();
    return TAGC_OK;
  }
  int64_t n = 0, bad = 0;
  char first[256];
  tagc_status st = tagc_engine_compare(t->engine, rd, &n, &bad, first, sizeof first);
  tagc_ckpt_close(rd);
  TAGC_CHECK(st);
  if (bad)
    return tagc_errorf(TAGC_EINTERNAL, "rebuild check: rank %d's shards of step %lld differ from "
                       "the checkpoint in %lld of %lld floats (first: %s)", t->rank,
                       (long long)step, (long long)bad, (long long)n, first);
  LOG_INFO("train", "rebuild check: rank %d's shards of step %lld equal the checkpoint's bit for "
           "bit (%lld floats)", t->rank, (long long)step, (long long)n);
  return TAGC_OK;
}

tagc_status run_rebuild(tagc_run *t, const tagc_gen_spec *g, int *rebuilt) {
  *rebuilt = 0;
  tagc_mirror_choice *ch = malloc(sizeof *ch);
  if (!ch)
    return tagc_errorf(TAGC_ENOMEM, "mirror choice");
  double t0 = tagc_now();
  int64_t step = 0;
  tagc_status st = tagc_engine_mirror_restore(t->engine, t->mirror, g->resume_step, ch, &step);
  if (st == TAGC_OK) {
    *rebuilt = 1;
    t->start_step = step;
    t->rec.n.memory_rebuilds++;
    if (t->rank == 0)
      LOG_INFO("train", "rebuilt step %lld from the in-memory copies of %d workers (generation "
               "%lld) in %.2f s, with %d workers", (long long)step, ch->world,
               (long long)ch->gen, tagc_now() - t0, t->world);
  } else if (st == TAGC_ENOTFOUND) {
    st = TAGC_OK;
    tagc_clear_error();
    if (ch->lost_rank >= 0 || ch->found) {
      t->rec.n.disk_fallbacks++;
      if (t->rank == 0 && ch->found) /* older than the plan's checkpoint */
        LOG_WARN("train", "the in-memory copies hold step %lld, older than the plan's checkpoint "
                 "(step %lld): resuming from disk", (long long)ch->step, (long long)g->resume_step);
      else if (t->rank == 0)
        LOG_WARN("train", "no in-memory copy of the shards of rank %d of %d (generation %lld, "
                 "step %lld) survived: resuming from the disk checkpoint",
                 ch->lost_rank, ch->lost_world, (long long)ch->lost_gen, (long long)ch->lost_step);
    }
    tagc_mirror_clear(t->mirror); /* what follows starts from the disk's state */
  }
  free(ch);
  if (st == TAGC_OK && *rebuilt && t->cfg->check_rebuild)
    st = check_rebuild(t, t->start_step);
  return st;
}

/* Chooses, agrees on and loads the resume point (collective). */
tagc_status run_resume(tagc_run *t, const tagc_gen_spec *g) {
  tagc_ckpt_reader *rd;
  tagc_status st = choose_resume(t, g, &rd);
  if (st == TAGC_OK && rd)
    st = check_job(t, rd);
  if (st != TAGC_OK) {
    tagc_ckpt_close(rd);
    rd = NULL;
  }
  st = agree_resume(t, g, st, rd);
  if (st == TAGC_OK && rd)
    st = tagc_engine_load(t->engine, rd);
  if (st == TAGC_OK && rd)
    st = tagc_engine_set_compression_state(t->engine, tagc_ckpt_reader_meta(rd, "compression"));
  if (st == TAGC_OK && rd) {
    t->start_step = tagc_ckpt_reader_step(rd);
    if (t->rank == 0) /* says where it came from: a plan without a checkpoint is no step 0 */
      LOG_INFO("train", "resuming from %s (step %lld, saved by %d workers) with %d workers: %s%s",
               tagc_ckpt_reader_path(rd), (long long)t->start_step,
               tagc_ckpt_reader_world_size(rd), t->world,
               g->resume_step == t->start_step ? "the job's committed checkpoint"
                                               : "the newest valid checkpoint in ",
               g->resume_step == t->start_step ? "" : t->ckpt_root);
  }
  tagc_ckpt_close(rd);
  return st;
}

/* ---------- rolling back after non-finite steps ---------- */

tagc_status run_rollback(tagc_run *t, int64_t step, int64_t *to) {
  long long first = (long long)(step + 2 - t->skip_streak), last = (long long)step + 1;
  if (t->rollback_at >= step)
    return tagc_errorf(TAGC_ENUMERIC, "steps %lld-%lld: %lld consecutive non-finite steps again "
                       "after rolling back at step %lld: the gradient is non-finite whatever the "
                       "checkpoint (bad data or a diverging model); giving up", first, last,
                       (long long)t->skip_streak, (long long)t->rollback_at + 1);
  if (!t->saver)
    return tagc_errorf(TAGC_ENUMERIC, "steps %lld-%lld: %lld consecutive non-finite steps and no "
                       "checkpoint to roll back to (--ckpt-every 0)", first, last,
                       (long long)t->skip_streak);
  tagc_status st = tagc_ckpt_saver_wait(t->saver); /* a save in flight may be the newest */
  if (st != TAGC_OK)
    LOG_WARN("train", "rollback: the last save failed (%s); looking for the newest valid "
             "checkpoint", tagc_last_error());
  /* Every rank's save has ended (rank 0's includes the commit) before any rank lists the
   * checkpoints: otherwise one rank can already see step-N while another still sees the one
   * before, and the ranks fail to agree on where to roll back to. */
  int64_t one[1];
  int64_t *all = calloc((size_t)t->world, sizeof *all);
  tagc_status ended = agree(t, TAGC_OK, one, 1, all, "end of the last save");
  free(all);
  TAGC_CHECK(ended);
  tagc_ckpt_reader *rd = NULL;
  st = tagc_ckpt_find_latest_valid(t->ckpt_root, TAGC_CKPT_VERIFY_FULL, &rd);
  if (st == TAGC_ENOTFOUND || st == TAGC_ECORRUPT)
    st = prefixed(TAGC_ENUMERIC, "consecutive non-finite steps and no valid checkpoint to roll "
                  "back to");
  if (st == TAGC_OK)
    st = check_job(t, rd);
  if (st != TAGC_OK) {
    tagc_ckpt_close(rd);
    rd = NULL;
  }
  tagc_gen_spec none = {0};
  tagc_status agreed = agree_resume(t, &none, st, rd);
  if (agreed == TAGC_OK)
    agreed = tagc_engine_load(t->engine, rd);
  if (agreed == TAGC_OK)
    agreed = tagc_engine_set_compression_state(t->engine, tagc_ckpt_reader_meta(rd, "compression"));
  if (agreed == TAGC_OK) {
    *to = tagc_ckpt_reader_step(rd);
    t->rollback_at = step;
    if (t->mirror) /* its copies are of the steps rolled back */
      tagc_mirror_clear(t->mirror);
    if (t->rank == 0)
        LOG_WARN("train", "rolled back to %s (step %lld) after %lld consecutive non-finite steps "
               "(%lld-%lld)", tagc_ckpt_reader_path(rd), (long long)*to, (long long)t->skip_streak,
               first, last);
  }
  tagc_ckpt_close(rd);
  return agreed;
}
