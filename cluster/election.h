/* Leader election of coordinators on etcd, and fenced writes by the leader.
 *
 * Each candidate owns the key coord/<lease-hex> of its job (keys.h), bound to its lease and
 * holding its address. The leader is the candidate whose key has the lowest create revision;
 * a candidate waits for the deletion of the next lower key (its predecessor), not for every
 * change, so a crowd of standbys does not stampede. The leader's create revision is its
 * fencing token: every write it makes is a txn that first compares its own key's create
 * revision, so a deposed leader (lease expired, key gone) can never write.
 *
 * The lease is the caller's (grant it and run a tagc_etcd_keeper on it); losing it deposes.
 * One tagc_election is driven by one thread; tagc_election_cancel may be called from another. */
#ifndef TAGC_COORDINATOR_ELECTION_H
#define TAGC_COORDINATOR_ELECTION_H

#include <stdint.h>

#include "common/status.h"
#include "cluster/etcd.h"

typedef struct tagc_election tagc_election;

/* A candidate for job's coordinator, on lease, advertising value (e.g. "http://host:port").
 * Copies job and value; borrows c, which must outlive the election. Contacts nothing yet.
 * TAGC_EINVAL for a bad job id, lease 0 or NULL value. */
tagc_status tagc_election_create(tagc_etcd *c, const char *job, int64_t lease, const char *value,
                                 tagc_election **out);

/* Deletes nothing; frees the candidate. NULL is ignored. */
void tagc_election_destroy(tagc_election *e);

/* Registers the candidate key (once; a later call reuses it) and blocks until this candidate
 * is the leader. TAGC_ETIMEDOUT after timeout_s (still a candidate: call again to keep
 * waiting), TAGC_ENOTFOUND when the lease or the key is gone, TAGC_EABORTED after
 * tagc_election_cancel, or an etcd error. */
tagc_status tagc_election_campaign(tagc_election *e, double timeout_s);

/* Makes a campaign in progress return TAGC_EABORTED soon (thread-safe, non-blocking). */
void tagc_election_cancel(tagc_election *e);

/* The create revision of this candidate's key (the fencing token); 0 before campaigning. */
int64_t tagc_election_revision(const tagc_election *e);

/* A write by the leader: if this candidate's key still has its create revision and every
 * compare in cmp holds, runs ops. TAGC_ECONFLICT when no campaign of this candidate has
 * returned TAGC_OK yet, or when the candidate is fenced out (deposed: its key is gone);
 * TAGC_OK with out->succeeded == 0 when only the caller's compares failed (the responses then
 * hold one range: the candidate's own key). out may be NULL; else the caller frees it. */
tagc_status tagc_election_txn(tagc_election *e, const tagc_etcd_compare *cmp, size_t n_cmp,
                              const tagc_etcd_op *ops, size_t n_ops, tagc_etcd_txn_result *out);

/* Gives up: deletes the candidate key if it is still ours (a fenced delete). */
tagc_status tagc_election_resign(tagc_election *e);

/* The current leader of job: *leader gets a one-entry result whose kvs[0] is the leader's key
 * and value (caller frees with tagc_etcd_range_result_free). TAGC_ENOTFOUND when there are
 * no candidates. */
tagc_status tagc_election_leader(tagc_etcd *c, const char *job, tagc_etcd_range_result *leader);

#endif
