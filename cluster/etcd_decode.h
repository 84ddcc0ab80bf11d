/* Decoders of etcd gateway replies into the result structs of etcd.h. Internal to the etcd
 * client (and its fuzz target). They never trust the input: a wrong type, bad base64 or a
 * number that does not parse is TAGC_EPROTO, fields left out take their proto3 default. */
#ifndef TAGC_COORDINATOR_ETCD_DECODE_H
#define TAGC_COORDINATOR_ETCD_DECODE_H

#include <jansson.h>

#include "cluster/etcd.h"

/* Turns one HTTP reply into a JSON object (new reference, caller decrefs). A 200 reply whose
 * body is an object without "error" is TAGC_OK. etcd error bodies ({"error","message","code"}
 * at top level, or {"error":{...}} in streams) become the mapped status with etcd's message.
 * Unparseable bodies are TAGC_EPROTO. *retryable is set when another attempt may succeed
 * (etcd unavailable / deadline, or an HTTP 5xx without an etcd error body). A streamed
 * {"result": X} reply is unwrapped to X. */
tagc_status tagc_etcd_decode_reply(long http_status, const char *body, size_t len, json_t **out,
                                   int *retryable);

/* Maps an etcd (gRPC) error code and message to a status, setting the thread's detail. */
tagc_status tagc_etcd_error_status(int64_t code, const char *message);

/* header.revision of a reply (0 when left out). */
tagc_status tagc_etcd_decode_revision(const json_t *reply, int64_t *revision);

/* One mvcc KeyValue object into kv (buffers owned by kv; freed by tagc_etcd_kv_free). */
tagc_status tagc_etcd_decode_kv(const json_t *obj, tagc_etcd_kv *kv);
void tagc_etcd_kv_free(tagc_etcd_kv *kv);

/* A RangeResponse into out (caller frees with tagc_etcd_range_result_free). */
tagc_status tagc_etcd_decode_range(const json_t *reply, tagc_etcd_range_result *out);

/* A TxnResponse into out (caller frees with tagc_etcd_txn_result_free). */
tagc_status tagc_etcd_decode_txn(const json_t *reply, tagc_etcd_txn_result *out);

/* A LeaseGrant / LeaseKeepAlive / LeaseTimeToLive reply: ID, TTL (0 when left out) and
 * grantedTTL (0 when left out). */
tagc_status tagc_etcd_decode_lease(const json_t *reply, int64_t *id, int64_t *ttl, int64_t *granted);

/* One WatchResponse (already unwrapped from "result"). */
typedef struct tagc_etcd_watch_reply {
  int64_t revision;          /* header.revision */
  int created;
  int canceled;
  int64_t compact_revision;
  char *cancel_reason;       /* malloc'd, "" when none */
  tagc_etcd_event *events;   /* n_events, owned */
  size_t n_events;
} tagc_etcd_watch_reply;

tagc_status tagc_etcd_decode_watch(const json_t *reply, tagc_etcd_watch_reply *out);
void tagc_etcd_watch_reply_free(tagc_etcd_watch_reply *r);

#endif
