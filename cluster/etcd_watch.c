/* Watches: one thread per watch streams POST /v3/watch, splits the reply into its
 * newline-delimited {"result": WatchResponse} messages and hands events to the callback.
 * It reconnects after a broken stream from the revision after the last one it reported, and
 * answers a server cancel (compaction or otherwise) with a fresh read of the range. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "cluster/etcd_decode.h"
#include "cluster/etcd_internal.h"

enum { MAX_MESSAGE = 64 << 20 };

struct tagc_etcd_watch {
  tagc_etcd *c;
  char *key;
  tagc_etcd_watch_opts opts;
  tagc_etcd_watch_fn fn;
  void *arg;
  pthread_t thread;
  atomic_int stop;          /* set by tagc_etcd_watch_stop */
  int ended;                /* the callback asked to end */
  atomic_llong next_rev;    /* revision to resume from; 0 = "from now" */
  /* state of the current stream */
  char *buf;
  size_t len, cap;
  int created;
  int need_resync;
  int64_t compact_revision;
  char *cancel_reason;
};

int64_t tagc_etcd_watch_revision(const tagc_etcd_watch *w) {
  int64_t next = atomic_load(&((tagc_etcd_watch *)w)->next_rev);
  return next > 0 ? next - 1 : 0;
}

static json_t *create_request(const tagc_etcd_watch *w) {
  json_t *cr = json_object();
  if (!cr || etcd_set_key(cr, w->key, w->opts.prefix) != TAGC_OK)
    goto fail;
  int64_t rev = atomic_load(&((tagc_etcd_watch *)w)->next_rev);
  if (rev > 0 && json_object_set_new(cr, "start_revision", etcd_json_i64(rev)) != 0)
    goto fail;
  if (w->opts.prev_kv && json_object_set_new(cr, "prev_kv", json_true()) != 0)
    goto fail;
  if (w->opts.no_put || w->opts.no_delete) {
    json_t *filters = json_array();
    if (!filters || json_object_set_new(cr, "filters", filters) != 0)
      goto fail;
    if (w->opts.no_put && json_array_append_new(filters, json_string("NOPUT")) != 0)
      goto fail;
    if (w->opts.no_delete && json_array_append_new(filters, json_string("NODELETE")) != 0)
      goto fail;
  }
  return json_pack("{s:o}", "create_request", cr);
fail:
  json_decref(cr);
  return NULL;
}

/* Handles one complete message. Returns non-zero to close the stream. */
static int handle_message(tagc_etcd_watch *w, const char *text, size_t len) {
  json_t *reply;
  int retryable;
  if (tagc_etcd_decode_reply(200, text, len, &reply, &retryable) != TAGC_OK) {
    if (etcd_token_rejected())
      etcd_drop_token(w->c);
    LOG_WARN("etcd", "watch %s: %s; reconnecting", w->key, tagc_last_error());
    return 1;
  }
  tagc_etcd_watch_reply r;
  tagc_status st = tagc_etcd_decode_watch(reply, &r);
  json_decref(reply);
  if (st != TAGC_OK) {
    LOG_WARN("etcd", "watch %s: %s; reconnecting", w->key, tagc_last_error());
    return 1;
  }
  int close = 0;
  if (r.canceled) {
    LOG_INFO("etcd", "watch %s canceled by the server (compact revision %lld, reason '%s')", w->key,
             (long long)r.compact_revision, r.cancel_reason);
    w->need_resync = 1;
    w->compact_revision = r.compact_revision;
    free(w->cancel_reason);
    w->cancel_reason = r.cancel_reason;
    r.cancel_reason = NULL;
    close = 1;
  } else if (r.created) {
    w->created = 1;
    if (atomic_load(&w->next_rev) == 0)
      atomic_store(&w->next_rev, r.revision + 1);
  } else if (r.n_events > 0) {
    tagc_etcd_watch_msg msg = {.kind = TAGC_ETCD_WATCH_EVENTS, .events = r.events, .n_events = r.n_events};
    atomic_store(&w->next_rev, r.events[r.n_events - 1].kv.mod_revision + 1);
    if (w->fn(w->arg, &msg) != 0)
      w->ended = close = 1;
  } else if (w->created && r.revision + 1 > atomic_load(&w->next_rev)) {
    atomic_store(&w->next_rev, r.revision + 1); /* progress notification */
  }
  tagc_etcd_watch_reply_free(&r);
  return close;
}

static int sink(void *arg, const char *data, size_t len) {
  tagc_etcd_watch *w = arg;
  if (atomic_load(&w->stop))
    return 1;
  if (len == 0)
    return 0;
  if (w->len + len + 1 > w->cap) {
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->len + len + 1)
      cap *= 2;
    char *p = cap <= MAX_MESSAGE ? realloc(w->buf, cap) : NULL;
    if (!p) {
      LOG_WARN("etcd", "watch %s: message over %d bytes; reconnecting", w->key, MAX_MESSAGE);
      w->len = 0;
      return 1;
    }
    w->buf = p;
    w->cap = cap;
  }
  memcpy(w->buf + w->len, data, len);
  w->len += len;
  char *start = w->buf, *nl;
  int close = 0;
  while (!close && (nl = memchr(start, '\n', w->len - (size_t)(start - w->buf))) != NULL) {
    if (nl > start)
      close = handle_message(w, start, (size_t)(nl - start));
    start = nl + 1;
  }
  w->len -= (size_t)(start - w->buf);
  memmove(w->buf, start, w->len);
  return close || atomic_load(&w->stop);
}

/* Sleeps up to s seconds, returning early once the watch is stopped. */
static void pause_unless_stopped(tagc_etcd_watch *w, double s) {
  double until = tagc_now() + s;
  while (!atomic_load(&w->stop) && tagc_now() < until)
    tagc_sleep(0.02);
}

/* Reads the range (initially, or after a cancel) and reports it; the watch resumes after it. */
static tagc_status resync(tagc_etcd_watch *w) {
  tagc_etcd_range_opts ro = {.prefix = w->opts.prefix};
  tagc_etcd_range_result snap;
  /* One request's worth of deadline, so that stopping the watch never waits long. */
  TAGC_CHECK(etcd_range(w->c, w->key, &ro, etcd_request_timeout(w->c), &snap));
  tagc_etcd_watch_msg msg = {.kind = TAGC_ETCD_WATCH_RESYNC,
                             .snapshot = &snap,
                             .compact_revision = w->compact_revision,
                             .cancel_reason = w->cancel_reason ? w->cancel_reason : ""};
  LOG_DEBUG("etcd", "watch %s read at revision %lld (compact revision %lld, cancel reason '%s')",
            w->key, (long long)snap.revision, (long long)w->compact_revision, msg.cancel_reason);
  atomic_store(&w->next_rev, snap.revision + 1);
  w->need_resync = 0;
  if (w->fn(w->arg, &msg) != 0)
    w->ended = 1;
  tagc_etcd_range_result_free(&snap);
  return TAGC_OK;
}

/* One streamed watch request to endpoint, until it ends, breaks or is closed. */
static void stream_once(tagc_etcd_watch *w, const char *endpoint) {
  json_t *req = create_request(w);
  char *body = req ? tagc_json_dump(req) : NULL;
  json_decref(req);
  if (!body) {
    LOG_WARN("etcd", "watch %s: out of memory building the request", w->key);
    return;
  }
  char token[ETCD_TOKEN_MAX];
  tagc_etcd_request r;
  w->len = 0;
  w->created = 0;
  if (etcd_prepare(w->c, &r, endpoint, "/v3/watch", body, token) == TAGC_OK) {
    r.timeout_s = 0;
    long http;
    const tagc_etcd_transport *t = etcd_transport(w->c);
    tagc_status st = t->stream(t->ctx, &r, sink, w, &http);
    if (w->len > 0 && !atomic_load(&w->stop) && !w->ended && !w->need_resync)
      handle_message(w, w->buf, w->len); /* a last message without its newline */
    if (st != TAGC_OK && st != TAGC_EABORTED)
      LOG_DEBUG("etcd", "watch %s on %s: %s", w->key, endpoint, tagc_last_error());
  } else {
    LOG_DEBUG("etcd", "watch %s on %s: %s", w->key, endpoint, tagc_last_error());
  }
  free(body);
}

static void *watch_main(void *arg) {
  tagc_etcd_watch *w = arg;
  size_t ep = etcd_preferred_endpoint(w->c);
  int failures = 0;
  while (!atomic_load(&w->stop) && !w->ended) {
    if (w->need_resync) {
      if (resync(w) != TAGC_OK) {
        LOG_WARN("etcd", "watch %s: re-read failed: %s", w->key, tagc_last_error());
        pause_unless_stopped(w, etcd_backoff_s(w->c, ++failures));
      }
      continue;
    }
    stream_once(w, etcd_endpoint(w->c, ep));
    if (atomic_load(&w->stop) || w->ended || w->need_resync)
      continue;
    /* The stream ended or broke: try the next endpoint, backing off while nothing works. */
    failures = w->created ? 1 : failures + 1;
    if (!w->created)
      ep++;
    pause_unless_stopped(w, etcd_backoff_s(w->c, failures));
  }
  return NULL;
}

tagc_status tagc_etcd_watch_start(tagc_etcd *c, const char *key, const tagc_etcd_watch_opts *opts,
                                  tagc_etcd_watch_fn fn, void *arg, tagc_etcd_watch **out) {
  *out = NULL;
  if (!c || !key || !fn)
    return tagc_errorf(TAGC_EINVAL, "etcd watch: NULL client, key or callback");
  static const tagc_etcd_watch_opts defaults;
  if (!opts)
    opts = &defaults;
  if (opts->start_revision < 0 || (opts->no_put && opts->no_delete) ||
      (opts->initial_read && opts->start_revision))
    return tagc_errorf(TAGC_EINVAL, "etcd watch %s: bad start revision, filters or initial read", key);
  tagc_etcd_watch *w = calloc(1, sizeof *w);
  if (!w || !(w->key = strdup(key))) {
    free(w);
    return tagc_errorf(TAGC_ENOMEM, "etcd watch");
  }
  w->c = c;
  w->opts = *opts;
  w->fn = fn;
  w->arg = arg;
  w->need_resync = opts->initial_read;
  atomic_init(&w->stop, 0);
  atomic_init(&w->next_rev, opts->start_revision);
  int rc = pthread_create(&w->thread, NULL, watch_main, w);
  if (rc != 0) {
    free(w->key);
    free(w);
    return tagc_errorf(TAGC_ENOMEM, "etcd watch thread: error %d", rc);
  }
  *out = w;
  return TAGC_OK;
}

void tagc_etcd_watch_stop(tagc_etcd_watch *w) {
  if (!w)
    return;
  atomic_store(&w->stop, 1);
  pthread_join(w->thread, NULL);
  free(w->buf);
  free(w->cancel_reason);
  free(w->key);
  free(w);
}
