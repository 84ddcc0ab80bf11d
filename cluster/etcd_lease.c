/* etcd lease requests: grant, one renewal, revoke, time to live. */
#include "cluster/etcd.h"

#include "cluster/etcd_decode.h"
#include "cluster/etcd_internal.h"

/* POSTs {field: v} to a lease path and decodes the lease reply's ID, TTL and grantedTTL. */
static tagc_status lease_call(tagc_etcd *c, const char *path, const char *field, int64_t v,
                              int idempotent, double deadline_s, int64_t *id, int64_t *ttl,
                              int64_t *granted) {
  json_t *req = json_pack("{s:o}", field, etcd_json_i64(v)), *reply;
  if (!req)
    return tagc_errorf(TAGC_ENOMEM, "etcd request for %s", path);
  tagc_status st = etcd_call(c, path, req, idempotent, deadline_s, &reply);
  json_decref(req);
  TAGC_CHECK(st);
  st = tagc_etcd_decode_lease(reply, id, ttl, granted);
  json_decref(reply);
  return st;
}

static tagc_status lease_gone(int64_t id) {
  return tagc_errorf(TAGC_ENOTFOUND, "etcd: lease %llx expired or not found", (unsigned long long)id);
}

tagc_status tagc_etcd_lease_grant(tagc_etcd *c, int64_t ttl_s, int64_t *id, int64_t *granted_ttl) {
  if (ttl_s <= 0)
    return tagc_errorf(TAGC_EINVAL, "etcd lease TTL must be positive, not %lld", (long long)ttl_s);
  int64_t lid, ttl, unused;
  TAGC_CHECK(lease_call(c, "/v3/lease/grant", "TTL", ttl_s, 0, etcd_deadline(c), &lid, &ttl, &unused));
  if (lid == 0 || ttl <= 0)
    return tagc_errorf(TAGC_EPROTO, "etcd: lease grant answered ID %lld TTL %lld", (long long)lid,
                       (long long)ttl);
  *id = lid;
  if (granted_ttl)
    *granted_ttl = ttl;
  return TAGC_OK;
}

tagc_status etcd_keepalive(tagc_etcd *c, int64_t id, double deadline_s, int64_t *ttl) {
  int64_t lid, left, unused;
  TAGC_CHECK(lease_call(c, "/v3/lease/keepalive", "ID", id, 1, deadline_s, &lid, &left, &unused));
  if (left <= 0) /* the gateway leaves TTL out (= 0) for an expired or unknown lease */
    return lease_gone(id);
  if (ttl)
    *ttl = left;
  return TAGC_OK;
}

tagc_status tagc_etcd_lease_keepalive(tagc_etcd *c, int64_t id, int64_t *ttl) {
  return etcd_keepalive(c, id, etcd_deadline(c), ttl);
}

tagc_status tagc_etcd_lease_revoke(tagc_etcd *c, int64_t id) {
  int64_t unused[3];
  return lease_call(c, "/v3/lease/revoke", "ID", id, 1, etcd_deadline(c), &unused[0], &unused[1],
                    &unused[2]);
}

tagc_status tagc_etcd_lease_ttl(tagc_etcd *c, int64_t id, int64_t *ttl, int64_t *granted_ttl) {
  int64_t lid, left, granted;
  TAGC_CHECK(lease_call(c, "/v3/lease/timetolive", "ID", id, 1, etcd_deadline(c), &lid, &left, &granted));
  if (left < 0 || (left == 0 && granted == 0)) /* -1 for an unknown lease */
    return lease_gone(id);
  if (ttl)
    *ttl = left;
  if (granted_ttl)
    *granted_ttl = granted;
  return TAGC_OK;
}
