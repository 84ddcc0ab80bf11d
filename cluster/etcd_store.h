/* A communicator bootstrap store (comm/store.h) over the etcd keys gen/<g>/boot/... of a job.
 *
 * Every store key maps to gen/<g>/boot/<name> (coordinator/keys.h). A key that already starts
 * with "gen/<g>/boot/" for the store's own generation (the communicator prefix "gen/7/boot"
 * gives keys like "gen/7/boot/rank_0") is mapped without repeating that part, so
 * gen/7/boot/rank_0 and rank_0 name the same etcd key. Names may hold [A-Za-z0-9_.-/:].
 *
 * set is one put (no lease: the leader deletes old generations' keys); get reads the key and,
 * when it is absent, watches it until it appears or the timeout passes; remove deletes it.
 * set_many is one transaction per 64 keys; get_many one watch of the keys' shared prefix that
 * starts with a read of it, so a communicator of W ranks costs O(W) requests, not O(W^2).
 *
 * Threading: safe from any number of threads at once (the etcd client is). The etcd client is
 * borrowed and must outlive the store. */
#ifndef TAGC_COORDINATOR_ETCD_STORE_H
#define TAGC_COORDINATOR_ETCD_STORE_H

#include <stdint.h>

#include "comm/store.h"
#include "common/status.h"
#include "cluster/etcd.h"

/* A new store for generation gen of job in *out (free with tagc_store_free). TAGC_EINVAL for
 * a NULL client, a bad job id or a negative generation; TAGC_ENOMEM. Contacts nothing. */
tagc_status tagc_etcd_store_new(tagc_etcd *etcd, const char *job, int64_t gen, tagc_store **out);

#endif
