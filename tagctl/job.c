/* tagctl job reset|delete: reuse a job name. reset clears what one run of the job wrote
 * (generation, plans and bootstrap keys, failure reports, progress, the committed-checkpoint
 * record, done, chaos and leave records) and keeps its config; delete removes every key of
 * the job. Both refuse while workers are registered (the job is running) unless --force.
 * docs/operations.md, "Completion and reuse of a job name". */
#include <stdio.h>
#include <string.h>

#include "cluster/etcd.h"
#include "cluster/keys.h"
#include "tagctl/tagctl.h"

/* TAGC_ENOTFOUND when the job has no key; TAGC_ECONFLICT when workers are registered and
 * force is 0; else TAGC_OK. */
static tagc_status check_job(tagc_etcd *etcd, const tagctl_etcd_args *a) {
  char prefix[TAGC_KEY_MAX], workers[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_job_prefix(a->job, prefix, sizeof prefix));
  TAGC_CHECK(tagc_key_workers_prefix(a->job, workers, sizeof workers));
  tagc_etcd_range_opts count = {.prefix = 1, .count_only = 1};
  tagc_etcd_range_result r = {0}, w = {0};
  TAGC_CHECK(tagc_etcd_range(etcd, prefix, &count, &r));
  tagc_status st = tagc_etcd_range(etcd, workers, &count, &w);
  int64_t keys = r.count, live = w.count;
  tagc_etcd_range_result_free(&r);
  tagc_etcd_range_result_free(&w);
  TAGC_CHECK(st);
  if (keys == 0)
    return tagc_errorf(TAGC_ENOTFOUND, "no such job '%s' in etcd %s", a->job, a->etcd);
  if (live > 0 && !a->force)
    return tagc_errorf(TAGC_ECONFLICT, "job '%s' is running: %lld worker(s) registered; stop "
                       "them first, or use --force", a->job, (long long)live);
  return TAGC_OK;
}

/* Deletes the keys of one run of the job in one transaction, keeping config, the workers'
 * registrations and the coordinators' election keys (they live on leases). */
static tagc_status reset(tagc_etcd *etcd, const char *job, int64_t *deleted) {
  enum { N = 8 };
  char keys[N][TAGC_KEY_MAX];
  int prefix[N] = {0, 1, 1, 0, 0, 0, 1, 1};
  TAGC_CHECK(tagc_key_gen(job, keys[0], TAGC_KEY_MAX));
  TAGC_CHECK(tagc_key_gens_prefix(job, keys[1], TAGC_KEY_MAX));
  TAGC_CHECK(tagc_key_failures_prefix(job, keys[2], TAGC_KEY_MAX));
  TAGC_CHECK(tagc_key_ckpt_committed(job, keys[3], TAGC_KEY_MAX));
  TAGC_CHECK(tagc_key_progress(job, keys[4], TAGC_KEY_MAX));
  TAGC_CHECK(tagc_key_done(job, keys[5], TAGC_KEY_MAX));
  TAGC_CHECK(tagc_key_chaos_prefix(job, keys[6], TAGC_KEY_MAX));
  TAGC_CHECK(tagc_key_leaving_prefix(job, keys[7], TAGC_KEY_MAX));
  tagc_etcd_op ops[N];
  for (int i = 0; i < N; i++)
    ops[i] = (tagc_etcd_op){.type = TAGC_ETCD_OP_DELETE, .key = keys[i], .prefix = prefix[i]};
  tagc_etcd_txn_result t;
  TAGC_CHECK(tagc_etcd_txn(etcd, NULL, 0, ops, N, NULL, 0, &t));
  *deleted = 0;
  for (size_t i = 0; i < t.n_responses; i++)
    *deleted += t.responses[i].deleted;
  tagc_etcd_txn_result_free(&t);
  return TAGC_OK;
}

static tagc_status delete_job(tagc_etcd *etcd, const char *job, int64_t *deleted) {
  char prefix[TAGC_KEY_MAX];
  TAGC_CHECK(tagc_key_job_prefix(job, prefix, sizeof prefix));
  return tagc_etcd_delete(etcd, prefix, 1, deleted);
}

static const tagc_opt job_opts[] = {
    {"force", TAGC_OPT_BOOL, TAGCTL_ARGOFF(force), "false", 0, -1, NULL,
     "also while workers are registered (the job is running)"},
};

static const tagctl_etcd_command job_command = {
    "tagctl job", "reset|delete --etcd URL --job J [--force]",
    "Reuses a job name. reset: clears the generation, plans, progress, committed-checkpoint "
    "record, failure reports and done, keeps the job's config; workers started afterwards "
    "train it again (from their --out's newest checkpoint, if it has one). delete: removes "
    "every key of the job. Both refuse while workers are registered, unless --force.",
    job_opts, sizeof job_opts / sizeof job_opts[0]};

int tagctl_job(int argc, char **argv) {
  tagctl_etcd_args a = {0};
  char *pos[1];
  int n_pos = 0;
  tagc_etcd *etcd = NULL;
  int code = tagctl_etcd_setup(&job_command, argc, argv, &a, pos, 1, &n_pos, &etcd);
  if (code >= 0)
    goto done;
  const char *verb = n_pos ? pos[0] : "";
  int is_reset = !strcmp(verb, "reset");
  if (!is_reset && strcmp(verb, "delete") != 0) {
    fprintf(stderr, "tagctl job: say reset or delete (got '%s')\n", verb);
    code = 2;
    goto done;
  }
  int64_t deleted = 0;
  tagc_status st = check_job(etcd, &a);
  if (st == TAGC_OK)
    st = is_reset ? reset(etcd, a.job, &deleted) : delete_job(etcd, a.job, &deleted);
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl job %s: %s\n", verb, tagc_last_error());
    code = 1;
    goto done;
  }
  if (is_reset)
    printf("job %s reset: %lld key(s) of its last run removed, config kept; it trains again "
           "when its workers start\n", a.job, (long long)deleted);
  else
    printf("job %s deleted: %lld key(s) removed\n", a.job, (long long)deleted);
  code = 0;
done:
  tagctl_etcd_args_free(&a);
  tagc_etcd_destroy(etcd);
  return code;
}
