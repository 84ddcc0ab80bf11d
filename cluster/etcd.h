/* A client for etcd's v3 JSON gateway (etcd 3.4+): key ranges, puts, deletes, transactions,
 * leases and watches, over HTTP(S) with several endpoints, bounded retries and deadlines.
 *
 * Wire facts it relies on (reference/orchestration-anchors.md §4): keys and values travel as
 * base64, 64-bit numbers arrive as JSON strings, fields holding their default value are left
 * out, streamed messages are wrapped as {"result": ...}, errors as {"error","code",...}.
 *
 * Threading: one tagc_etcd may be used from any number of threads at once (a keep-alive
 * thread, a watch thread, the main loop). Every call blocks until it has an answer, its
 * deadline passes or its retries are spent.
 *
 * Ownership: results are filled into caller-owned structs and freed with the matching
 * *_free(); their byte buffers belong to the result. Input strings are borrowed for the call.
 *
 * Retries: an attempt that could not connect, timed out, or got HTTP 5xx / etcd "unavailable"
 * is repeated on the next endpoint after an exponential backoff with jitter, within the call's
 * deadline and attempt budget. A transaction or a lease grant is repeated only when its request
 * was never sent, because a timed-out write has an unknown outcome.
 *
 * Errors of every call: TAGC_EPEER (no endpoint reachable, or etcd unavailable), TAGC_ETIMEDOUT,
 * TAGC_EPROTO (a reply that is not what the gateway sends), TAGC_EIO (other transfer failures),
 * and etcd's own errors mapped from their gRPC code (NotFound -> TAGC_ENOTFOUND, InvalidArgument
 * / OutOfRange / auth failures -> TAGC_EINVAL, FailedPrecondition -> TAGC_ECONFLICT, ...) with
 * etcd's message in tagc_last_error(). */
#ifndef TAGC_COORDINATOR_ETCD_H
#define TAGC_COORDINATOR_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/status.h"
#include "cluster/etcd_transport.h"

typedef struct tagc_etcd tagc_etcd;

typedef struct tagc_etcd_config {
  const char *endpoints;       /* comma-separated base URLs, "http://127.0.0.1:2379,..." */
  double request_timeout_s;    /* one HTTP attempt (default 5) */
  double connect_timeout_s;    /* TCP/TLS connect of one attempt (default 1.5: one SYN
                                  retransmission) */
  double deadline_s;           /* a whole call, retries included (TAGC_ETCD_DEADLINE_S) */
  int max_attempts;            /* attempts per call, across endpoints (default 6) */
  double backoff_initial_s;    /* first pause between attempts (default 0.05), doubled each time */
  double backoff_max_s;        /* cap of that pause (default 1) */
  const char *ca_file;         /* TLS: CA bundle to verify the server (NULL: system default) */
  const char *cert_file;       /* TLS: client certificate (PEM), or NULL */
  const char *key_file;        /* TLS: client private key (PEM), or NULL */
  const char *user;            /* etcd auth user name, or NULL for no auth */
  const char *password;        /* its password */
  const tagc_etcd_transport *transport; /* NULL: libcurl. Borrowed; must outlive the client */
} tagc_etcd_config;

/* The default deadline of one call, retries included, in seconds. */
#define TAGC_ETCD_DEADLINE_S 15.0

/* Fills cfg with the defaults above and no endpoints. */
void tagc_etcd_config_init(tagc_etcd_config *cfg);

/* The etcd credentials of a program, as its options give them (--etcd-ca, --etcd-cert,
 * --etcd-key, --etcd-user, --etcd-password-file; NULL or "" = not given). There is no
 * password option: a password on the command line is visible to every user of the host. */
typedef struct tagc_etcd_credentials {
  const char *ca_file, *cert_file, *key_file;
  const char *user;
  const char *password_file;
} tagc_etcd_credentials;

/* The environment variable a password is read from when no password file is given. */
#define TAGC_ETCD_PASSWORD_ENV "TAGC_ETCD_PASSWORD"

/* Sets the TLS and auth fields of cfg (its endpoints already set) from cred. A user's
 * password comes from cred->password_file (its first line) or else from the environment
 * variable TAGC_ETCD_PASSWORD, into *password (new string the caller frees after
 * tagc_etcd_create; cfg->password points at it; NULL without a user). Errors, TAGC_EINVAL
 * with one line naming the option: a user without a password; a user with an http://
 * endpoint (the password would cross the network in clear text); a certificate without its
 * key. TAGC_ENOTFOUND / TAGC_EIO for an unreadable password file. Not thread-safe (reads the
 * environment). */
tagc_status tagc_etcd_config_credentials(tagc_etcd_config *cfg, const tagc_etcd_credentials *cred,
                                         char **password);

/* The client of a program's etcd options: the endpoints (--etcd) and cred, with every setting
 * of tagc_etcd_config at its default but the deadline of one call, deadline_s seconds
 * (TAGC_ETCD_DEADLINE_S for the default); no single attempt, authentication included, is
 * given longer than that. The password is read as tagc_etcd_config_credentials reads it, and
 * wiped and freed before this returns. Errors of tagc_etcd_config_credentials (TAGC_EINVAL
 * with one line naming the option; TAGC_ENOTFOUND / TAGC_EIO for the password file), of
 * tagc_etcd_create, and TAGC_ENOTFOUND / TAGC_EINVAL for a TLS file that cannot be read (named
 * with its option); *out is NULL after any. Does not contact the server. Not thread-safe
 * (reads the environment). */
tagc_status tagc_etcd_connect(const char *endpoints, const tagc_etcd_credentials *cred,
                              double deadline_s, tagc_etcd **out);

/* The option rows of tagc_etcd_credentials for a program's option table (common/options.h):
 * OFF(field) is the offset of the char * fields etcd_ca, etcd_cert, etcd_key, etcd_user and
 * etcd_password_file of its config struct. */
#define TAGC_ETCD_CREDENTIAL_OPTS(OFF)                                                      \
  {"etcd-ca", TAGC_OPT_STRING, OFF(etcd_ca), "", 0, -1, NULL,                              \
   "TLS: CA bundle of the etcd server"},                                                   \
  {"etcd-cert", TAGC_OPT_STRING, OFF(etcd_cert), "", 0, -1, NULL,                          \
   "TLS: etcd client certificate (PEM)"},                                                  \
  {"etcd-key", TAGC_OPT_STRING, OFF(etcd_key), "", 0, -1, NULL,                            \
   "TLS: etcd client private key (PEM)"},                                                  \
  {"etcd-user", TAGC_OPT_STRING, OFF(etcd_user), "", 0, -1, NULL,                          \
   "etcd auth user (https only); password from TAGC_ETCD_PASSWORD or --etcd-password-file"}, \
  {"etcd-password-file", TAGC_OPT_STRING, OFF(etcd_password_file), "", 0, -1, NULL,        \
   "file whose first line is the etcd password (there is no password flag)"}

/* The tagc_etcd_credentials held by the fields those rows fill, in the config struct that p
 * points to (the strings are borrowed from it). */
#define TAGC_ETCD_CREDENTIALS_OF(p)                                                        \
  ((tagc_etcd_credentials){(p)->etcd_ca, (p)->etcd_cert, (p)->etcd_key, (p)->etcd_user,    \
                           (p)->etcd_password_file})

/* Creates a client. Copies everything it needs from cfg. TAGC_EINVAL for an empty or malformed
 * endpoint list, out-of-range numbers, or TLS files with a plain http:// endpoint (where they
 * would be ignored); TAGC_ENOMEM. Does not contact the server. */
tagc_status tagc_etcd_create(const tagc_etcd_config *cfg, tagc_etcd **out);

/* Frees the client. NULL is ignored. All watches and keepers on it must be stopped first. */
void tagc_etcd_destroy(tagc_etcd *c);

/* ---- results ---- */

typedef struct tagc_etcd_kv {
  unsigned char *key;   /* key_len bytes, plus a NUL so text keys print directly */
  size_t key_len;
  unsigned char *value; /* value_len bytes, plus a NUL */
  size_t value_len;
  int64_t create_revision;
  int64_t mod_revision;
  int64_t version;      /* 0 for a deleted key in a DELETE event */
  int64_t lease;        /* 0 when not attached to a lease */
} tagc_etcd_kv;

typedef struct tagc_etcd_range_result {
  tagc_etcd_kv *kvs;    /* n entries, sorted by key */
  size_t n;
  int64_t count;        /* keys in the range (may exceed n when limited) */
  int more;             /* 1 when a limit cut the result */
  int64_t revision;     /* store revision the result was read at (header.revision) */
} tagc_etcd_range_result;

/* Frees the buffers of a result and zeroes it; safe to call twice. */
void tagc_etcd_range_result_free(tagc_etcd_range_result *r);

/* ---- key-value ---- */

typedef struct tagc_etcd_range_opts {
  int prefix;           /* every key starting with key */
  int64_t revision;     /* read at this revision; 0 = latest */
  int64_t limit;        /* at most this many keys; 0 = no limit */
  int keys_only;        /* leave values out */
  int count_only;       /* only count */
  int serializable;     /* answer from the local member, possibly stale */
  const char *range_end;/* every key in [key, range_end) (instead of prefix); NULL = none */
} tagc_etcd_range_opts;

/* Reads one key (opts NULL or prefix 0) or a prefix into *out (caller frees with
 * tagc_etcd_range_result_free). No match is TAGC_OK with n == 0. A compacted or future
 * revision gives TAGC_EINVAL with etcd's message. */
tagc_status tagc_etcd_range(tagc_etcd *c, const char *key, const tagc_etcd_range_opts *opts,
                            tagc_etcd_range_result *out);

/* Convenience: the value of one key in a new NUL-terminated malloc'd buffer (caller frees),
 * its length and mod revision (either may be NULL). TAGC_ENOTFOUND when the key is absent. */
tagc_status tagc_etcd_get(tagc_etcd *c, const char *key, char **value, size_t *len,
                          int64_t *mod_revision);

/* Writes key = value (len bytes), attached to lease (0 = none). *revision (may be NULL) gets
 * the revision of the write. A lease that does not exist gives TAGC_ENOTFOUND. */
tagc_status tagc_etcd_put(tagc_etcd *c, const char *key, const void *value, size_t len,
                          int64_t lease, int64_t *revision);

/* tagc_etcd_get and tagc_etcd_put within deadline_s seconds (retries included) instead of the
 * client's deadline: for writes and reads that are worth less than the wait (a worker's
 * progress record while etcd is away). */
tagc_status tagc_etcd_get_within(tagc_etcd *c, const char *key, double deadline_s, char **value,
                                 size_t *len);
tagc_status tagc_etcd_put_within(tagc_etcd *c, const char *key, const void *value, size_t len,
                                 int64_t lease, double deadline_s);

/* Deletes key, or every key with that prefix. *deleted (may be NULL) gets the count. */
tagc_status tagc_etcd_delete(tagc_etcd *c, const char *key, int prefix, int64_t *deleted);

/* Compacts the store's history up to revision (watches and reads before it fail after). */
tagc_status tagc_etcd_compact(tagc_etcd *c, int64_t revision);

/* ---- transactions ---- */

typedef enum tagc_etcd_target {
  TAGC_ETCD_VERSION,
  TAGC_ETCD_CREATE,
  TAGC_ETCD_MOD,
  TAGC_ETCD_VALUE,
  TAGC_ETCD_LEASE
} tagc_etcd_target;

typedef enum tagc_etcd_cmp_result {
  TAGC_ETCD_EQUAL,
  TAGC_ETCD_GREATER,
  TAGC_ETCD_LESS,
  TAGC_ETCD_NOT_EQUAL
} tagc_etcd_cmp_result;

typedef struct tagc_etcd_compare {
  const char *key;
  tagc_etcd_target target;
  tagc_etcd_cmp_result result;
  int64_t number;       /* version / create or mod revision / lease, by target */
  const void *value;    /* TAGC_ETCD_VALUE: value_len bytes */
  size_t value_len;
} tagc_etcd_compare;

typedef enum tagc_etcd_op_type { TAGC_ETCD_OP_RANGE, TAGC_ETCD_OP_PUT, TAGC_ETCD_OP_DELETE } tagc_etcd_op_type;

typedef struct tagc_etcd_op {
  tagc_etcd_op_type type;
  const char *key;
  int prefix;           /* RANGE / DELETE: the whole prefix */
  const void *value;    /* PUT: value_len bytes */
  size_t value_len;
  int64_t lease;        /* PUT: lease, 0 = none */
} tagc_etcd_op;

typedef struct tagc_etcd_op_response {
  tagc_etcd_op_type type;
  tagc_etcd_range_result range; /* RANGE: the keys read */
  int64_t deleted;              /* DELETE: how many */
} tagc_etcd_op_response;

typedef struct tagc_etcd_txn_result {
  int succeeded;                /* 1 when every compare held and `success` ran */
  int64_t revision;             /* store revision after the txn */
  tagc_etcd_op_response *responses; /* one per op of the branch that ran */
  size_t n_responses;
} tagc_etcd_txn_result;

/* Frees a txn result and zeroes it; safe to call twice. */
void tagc_etcd_txn_result_free(tagc_etcd_txn_result *r);

/* If every compare holds, runs `success`, else `failure`; *out (caller frees) tells which and
 * holds the per-op responses. A failed compare is TAGC_OK with succeeded == 0. */
tagc_status tagc_etcd_txn(tagc_etcd *c, const tagc_etcd_compare *cmp, size_t n_cmp,
                          const tagc_etcd_op *success, size_t n_success,
                          const tagc_etcd_op *failure, size_t n_failure,
                          tagc_etcd_txn_result *out);

/* ---- leases ---- */

/* Grants a lease of ttl_s seconds (etcd raises tiny TTLs to its minimum, 2 s by default).
 * *id gets the lease ID, *granted_ttl (may be NULL) the TTL the server chose. */
tagc_status tagc_etcd_lease_grant(tagc_etcd *c, int64_t ttl_s, int64_t *id, int64_t *granted_ttl);

/* Renews the lease once (one request, as the gateway requires). *ttl (may be NULL) gets the
 * renewed TTL. TAGC_ENOTFOUND when the lease has expired or never existed. */
tagc_status tagc_etcd_lease_keepalive(tagc_etcd *c, int64_t id, int64_t *ttl);

/* Revokes the lease, deleting every key attached to it. TAGC_ENOTFOUND when unknown. */
tagc_status tagc_etcd_lease_revoke(tagc_etcd *c, int64_t id);

/* Remaining (*ttl) and granted (*granted_ttl) seconds; either may be NULL.
 * TAGC_ENOTFOUND when the lease has expired or never existed. */
tagc_status tagc_etcd_lease_ttl(tagc_etcd *c, int64_t id, int64_t *ttl, int64_t *granted_ttl);

/* ---- raw gateway call ---- */

/* POSTs `request` (borrowed) to a gateway path ("/v3/maintenance/status") with the client's
 * retries, auth and error mapping, and returns the decoded reply as a new reference (caller
 * decrefs). For calls this header has no wrapper for. `idempotent` = 0 forbids repeating a
 * request that may have reached the server. */
tagc_status tagc_etcd_call(tagc_etcd *c, const char *path, json_t *request, int idempotent,
                           json_t **reply);

/* ---- watches ---- */

typedef enum tagc_etcd_event_type { TAGC_ETCD_PUT, TAGC_ETCD_DELETE } tagc_etcd_event_type;

typedef struct tagc_etcd_event {
  tagc_etcd_event_type type;
  tagc_etcd_kv kv;      /* DELETE: key and mod_revision only */
  tagc_etcd_kv prev;    /* previous value when the watch asked for it and one existed */
  int has_prev;
} tagc_etcd_event;

typedef enum tagc_etcd_watch_kind {
  TAGC_ETCD_WATCH_EVENTS, /* events, in revision order */
  TAGC_ETCD_WATCH_RESYNC  /* a fresh read of the range: the server canceled the watch (e.g.
                             compaction), or the watch asked for an initial read */
} tagc_etcd_watch_kind;

typedef struct tagc_etcd_watch_msg {
  tagc_etcd_watch_kind kind;
  const tagc_etcd_event *events;         /* EVENTS: n_events events */
  size_t n_events;
  const tagc_etcd_range_result *snapshot;/* RESYNC: every key of the range at snapshot->revision;
                                            the watch resumes after that revision */
  int64_t compact_revision;              /* RESYNC: the compaction that canceled it, or 0 */
  const char *cancel_reason;             /* RESYNC: the server's reason, or "" */
} tagc_etcd_watch_msg;

/* Called on the watch's own thread for each message. Everything in msg is borrowed for the
 * call. Return 0 to go on, non-zero to end the watch (tagc_etcd_watch_stop still frees it). */
typedef int (*tagc_etcd_watch_fn)(void *arg, const tagc_etcd_watch_msg *msg);

typedef struct tagc_etcd_watch_opts {
  int prefix;              /* watch every key with this prefix */
  int64_t start_revision;  /* first revision to report; 0 = from now */
  int initial_read;        /* first report a RESYNC holding the range as it is now
                              (compact_revision 0, cancel_reason ""), then every change after
                              that read: read-then-watch without a gap. Needs start_revision 0 */
  int prev_kv;             /* events carry the previous value */
  int no_put;              /* only deletions */
  int no_delete;           /* only puts */
} tagc_etcd_watch_opts;

typedef struct tagc_etcd_watch tagc_etcd_watch;

/* Starts a watch of key (or prefix) on a new thread that streams one HTTP request and calls fn
 * with each message. When the connection breaks it reconnects (next endpoint, backoff) and
 * resumes after the last revision it reported; when the server cancels the watch (compaction
 * or otherwise) it re-reads the range, reports a RESYNC and resumes after that read.
 * TAGC_EINVAL for bad arguments; errors after start are retried, never fatal. */
tagc_status tagc_etcd_watch_start(tagc_etcd *c, const char *key, const tagc_etcd_watch_opts *opts,
                                  tagc_etcd_watch_fn fn, void *arg, tagc_etcd_watch **out);

/* Revision after which the watch is caught up (last reported event or resync revision). */
int64_t tagc_etcd_watch_revision(const tagc_etcd_watch *w);

/* Stops the watch, joins its thread and frees it: within ~0.1 s, or one request timeout
 * while a re-read or an authentication is in flight. NULL is ignored.
 * Must not be called from the watch's own callback. */
void tagc_etcd_watch_stop(tagc_etcd_watch *w);

/* ---- lease keeper ---- */

typedef struct tagc_etcd_keeper tagc_etcd_keeper;

/* Called once, on the keeper's thread, when the lease is lost: the server reports it gone or
 * no renewal succeeded within its TTL (status TAGC_ENOTFOUND or TAGC_ETIMEDOUT). */
typedef void (*tagc_etcd_lease_lost_fn)(void *arg, int64_t lease, tagc_status why);

/* Renews lease `id` every ttl_s/3 seconds on a new thread until stopped or lost. */
tagc_status tagc_etcd_keeper_start(tagc_etcd *c, int64_t id, int64_t ttl_s,
                                   tagc_etcd_lease_lost_fn lost, void *arg,
                                   tagc_etcd_keeper **out);

/* A patient keeper: renews like tagc_etcd_keeper_start, but never gives the lease up on its
 * own. A renewal that fails (etcd unreachable, a leader election) is retried every
 * min(TTL/10, 1 s) for as long as it takes, since etcd may still hold the lease when it
 * answers again (a restarted or newly elected leader extends every lease by its TTL); `lost`
 * is called only when etcd answers that the lease is gone (TAGC_ENOTFOUND). For holders
 * whose work goes on without etcd (workers); an election candidate must use the impatient
 * keeper, which stops trusting the lease after a TTL without a renewal. */
tagc_status tagc_etcd_keeper_start_patient(tagc_etcd *c, int64_t id, int64_t ttl_s,
                                           tagc_etcd_lease_lost_fn lost, void *arg,
                                           tagc_etcd_keeper **out);

/* Seconds since the keeper's last successful renewal (or its start). Any thread. */
double tagc_etcd_keeper_silence_s(const tagc_etcd_keeper *k);

/* Stops renewing (does not revoke), joins the thread and frees. NULL is ignored. */
void tagc_etcd_keeper_stop(tagc_etcd_keeper *k);

#endif
