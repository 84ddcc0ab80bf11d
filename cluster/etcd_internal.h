/* Shared between the files of the etcd client (etcd.c, etcd_kv.c, etcd_lease.c, etcd_watch.c,
 * etcd_keeper.c); not for users of the client. */
#ifndef TAGC_COORDINATOR_ETCD_INTERNAL_H
#define TAGC_COORDINATOR_ETCD_INTERNAL_H

#include <jansson.h>

#include "cluster/etcd.h"

enum { ETCD_TOKEN_MAX = 512 };

/* Number of endpoints, the one that answered last, and the URL of endpoint i % count. */
size_t etcd_endpoint_count(const tagc_etcd *c);
size_t etcd_preferred_endpoint(tagc_etcd *c);
const char *etcd_endpoint(const tagc_etcd *c, size_t i);

/* Remembers endpoint i as the one to try first. */
void etcd_set_preferred_endpoint(tagc_etcd *c, size_t i);

/* Pause before retry number `attempt` (1, 2, ...): exponential, capped, with jitter. */
double etcd_backoff_s(const tagc_etcd *c, int attempt);

/* Fills req for a POST of body to path at endpoint; token (ETCD_TOKEN_MAX bytes) receives the
 * current auth token, fetching one first when the client has a user and none is held yet. */
tagc_status etcd_prepare(tagc_etcd *c, tagc_etcd_request *req, const char *endpoint,
                         const char *path, const char *body, char *token);

/* True when this thread's last error says the server rejected our auth token (it expired);
 * etcd_drop_token then makes the next request authenticate again. */
int etcd_token_rejected(void);
void etcd_drop_token(tagc_etcd *c);

const tagc_etcd_transport *etcd_transport(const tagc_etcd *c);

/* The client's default transport: libcurl with a pool of easy handles that keep their
 * connections open between requests (etcd_curl.c). New; free with etcd_curl_pool_free (NULL
 * is ignored) once no request uses it. Thread-safe. TAGC_ENOMEM, TAGC_EINTERNAL when libcurl
 * cannot be initialised. */
tagc_status etcd_curl_pool_create(tagc_etcd_transport **out);
void etcd_curl_pool_free(tagc_etcd_transport *t);
double etcd_request_timeout(const tagc_etcd *c);

/* The client's deadline of one call (tagc_etcd_config.deadline_s). */
double etcd_deadline(const tagc_etcd *c);

/* tagc_etcd_call with its own deadline (seconds from now). */
tagc_status etcd_call(tagc_etcd *c, const char *path, json_t *request, int idempotent,
                      double deadline_s, json_t **reply);

/* tagc_etcd_range with its own deadline (seconds from now). */
tagc_status etcd_range(tagc_etcd *c, const char *key, const tagc_etcd_range_opts *opts,
                       double deadline_s, tagc_etcd_range_result *out);

/* tagc_etcd_lease_keepalive with its own deadline (seconds from now). */
tagc_status etcd_keepalive(tagc_etcd *c, int64_t id, double deadline_s, int64_t *ttl);

/* JSON fields of a request: base64 bytes, a key's or prefix's range_end, an int64 as string.
 * All return new references (NULL when out of memory). */
json_t *etcd_json_bytes(const void *data, size_t len);
json_t *etcd_json_i64(int64_t v);

/* Sets "key" (and "range_end" for a prefix) in obj. */
tagc_status etcd_set_key(json_t *obj, const char *key, int prefix);

#endif
