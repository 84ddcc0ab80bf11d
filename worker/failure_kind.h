/* The kind a worker reports a failed generation as (failures/<g>/<id>, counted by the
 * coordinator in failures_total; the kinds and their names: cluster/keys.h). The rule
 * (docs/operations.md, "Failure kinds"):
 *   oom, hang, injected   decided by the run itself (ENOMEM, an injected hang or drop)
 *   crash                 the suspected peer's process is gone: its registration (lease) has
 *                         ended, or it ran on this host and its pid is dead or a zombie
 *   hang                  a collective (or the bootstrap) timed out and no peer is known to
 *                         be gone
 *   partition             a connection failed (reset, closed) while the peer's process is
 *                         verifiably alive (same host)
 *   comm                  a connection failed and the peer's process cannot be checked (another
 *                         host, registration still live) or no peer was suspected
 * The coordinator adds `lease` for each member whose lease expired (coordinator/planner.c).
 * Threading: any thread; tagc_peer_check sleeps up to settle_s. */
#ifndef TAGC_WORKER_FAILURE_KIND_H
#define TAGC_WORKER_FAILURE_KIND_H

#include <jansson.h>

#include "cluster/keys.h"
#include "worker/run.h"

typedef enum { TAGC_PEER_UNKNOWN, TAGC_PEER_GONE, TAGC_PEER_ALIVE } tagc_peer_state;

/* Whether the worker registered as `info` (its workers/<id> value, borrowed; NULL when the
 * key is gone) still runs. A peer on host my_host is checked by pid through /proc, for up to
 * settle_s seconds (a process killed a moment ago closes its sockets before it exits);
 * on another host it is TAGC_PEER_UNKNOWN while registered. */
tagc_peer_state tagc_peer_check(const json_t *info, const char *my_host, double settle_s);

/* The kind to report: cause is what the run saw fail (tagc_gen_result.cause), peer what
 * tagc_peer_check found (TAGC_PEER_UNKNOWN without a suspect). Pure. */
tagc_failure_kind tagc_failure_kind_for(tagc_gen_cause cause, tagc_peer_state peer);

#endif
