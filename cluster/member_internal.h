/* Inside cluster/member*.c: the state of a tagc_member (cluster/member.h) and the helpers its
 * two files share. member.c: registration under a lease, the watches of `gen` and `done`, the
 * supervisor, plans and generation queries, leaving; member_records.c: the records a member
 * writes and reads for the training thread (ready, failures, progress, checkpoint records,
 * `done`, chaos). */
#ifndef TAGC_CLUSTER_MEMBER_INTERNAL_H
#define TAGC_CLUSTER_MEMBER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <jansson.h>

#include "cluster/etcd.h"
#include "cluster/keys.h"
#include "cluster/member.h"

/* Earlier registrations a re-registration names as the ones it continues ("previous"). */
#define MAX_PREVIOUS 16

struct tagc_member {
  tagc_etcd *c;
  char job[TAGC_KEY_ID_MAX + 1];
  char id[TAGC_KEY_ID_MAX + 1];
  char worker_key[TAGC_KEY_MAX];
  char gen_key[TAGC_KEY_MAX];
  char done_key[TAGC_KEY_MAX];
  double ttl_s;
  atomic_int_least64_t registration; /* create revision of workers/<id> under the current lease */

  pthread_mutex_t reg_lock; /* serialises registration: keeper, lease and info below */
  char *info;               /* registration JSON text */
  int64_t previous[MAX_PREVIOUS]; /* this process's earlier registrations since its join or
                                     last rejoin, newest last: the ones a re-registration
                                     after a lost lease continues */
  int n_previous;
  tagc_etcd_keeper *keeper;
  atomic_int_least64_t lease;

  pthread_mutex_t lock; /* guards the fields below and signals `changed` */
  pthread_cond_t changed;
  int64_t gen;
  int done;
  int lost_pending; /* the supervisor has a lost lease to replace */
  int stopping;
  int leaving;      /* tagc_member_announce_leave: no plan waits, no re-registration */
  int withdrawn;    /* tagc_member_withdraw: tagc_member_gen() says every generation ended */
  void (*fn)(void *arg, int64_t gen);
  void *fn_arg;

  atomic_int lease_lost;
  atomic_int losses;
  tagc_etcd_watch *gen_watch;
  tagc_etcd_watch *done_watch;
  pthread_t supervisor;
  int supervisor_started;
};

/* A JSON object as text in *out (new malloc'd string). TAGC_ENOMEM. */
tagc_status member_dump(const json_t *obj, char **out);

/* Puts a JSON object (stolen; NULL: TAGC_ENOMEM) at key under lease (0: none). Errors of
 * tagc_etcd_put. Blocks for one etcd write. */
tagc_status member_put_json(tagc_member *m, const char *key, json_t *obj, int64_t lease);

/* Notes that the job is done: every tagc_member_wait_plan() returns "done" from now on. */
void member_see_done(tagc_member *m);

#endif
