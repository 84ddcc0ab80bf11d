/* libcurl transport of the etcd client. Unary requests of a pooled transport (the client's
 * default, etcd_curl_pool_create) take an easy handle from its pool and give it back after
 * the reply, so that the handle's connection (HTTP keep-alive) serves the next request: a
 * new TCP connection per request would risk a lost SYN on each, which costs TCP's 1 s
 * retransmission against a lease of a few seconds. Handles are never shared by two
 * requests at once, so threads share nothing but the pool's lock. A stream has a handle and
 * a multi handle of its own, so that an idle stream still ticks every 100 ms. */
#include "cluster/etcd_transport.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "cluster/etcd_internal.h"
#include "cluster/etcd_stats.h"
#include "common/timeutil.h"

enum { IDLE_TICK_MS = 100, TCP_KEEPIDLE_S = 5, TCP_KEEPINTVL_S = 2 };

/* Idle handles a pool keeps: as many as the threads that talk to etcd at once (a worker's
 * keeper, watches, supervisor, training and saver threads); a handle given back to a full
 * pool is closed. */
enum { POOL_IDLE_MAX = 8 };

/* The ctx of a pooled transport. `t` first: the transport's address is the pool's. */
typedef struct pool {
  tagc_etcd_transport t;
  pthread_mutex_t lock;
  CURL *idle[POOL_IDLE_MAX]; /* the last given back on top */
  size_t n_idle;
} pool;

/* A unary reply body, NUL-terminated, of at most max bytes; too_long once more arrived. */
typedef struct buffer {
  char *data;
  size_t len, cap, max;
  int too_long;
} buffer;

typedef struct stream_state {
  tagc_etcd_sink_fn sink;
  void *arg;
  int stopped;
} stream_state;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void init_curl(void) { curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT); }

static size_t append_body(char *ptr, size_t size, size_t nmemb, void *userdata) {
  buffer *b = userdata;
  size_t n = size * nmemb;
  if (n > b->max - b->len) {
    b->too_long = 1;
    return 0; /* makes curl fail with CURLE_WRITE_ERROR */
  }
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1)
      cap *= 2;
    if (cap > b->max + 1)
      cap = b->max + 1;
    char *p = realloc(b->data, cap);
    if (!p)
      return 0; /* makes curl fail with CURLE_WRITE_ERROR */
    b->data = p;
    b->cap = cap;
  }
  memcpy(b->data + b->len, ptr, n);
  b->len += n;
  b->data[b->len] = '\0';
  return n;
}

static size_t feed_sink(char *ptr, size_t size, size_t nmemb, void *userdata) {
  stream_state *s = userdata;
  size_t n = size * nmemb;
  if (n == 0)
    return 0;
  if (s->sink(s->arg, ptr, n) != 0) {
    s->stopped = 1;
    return 0;
  }
  return n;
}

/* Milliseconds for a curl timeout, at least 1: curl reads 0 as "no timeout". */
static long to_ms(double s) {
  long ms = (long)(s * 1000);
  return ms < 1 ? 1 : ms;
}

static tagc_status init_once(void) {
  pthread_once(&curl_once, init_curl);
  if (curl_init_result != CURLE_OK)
    return tagc_errorf(TAGC_EINTERNAL, "curl_global_init: %s", curl_easy_strerror(curl_init_result));
  return TAGC_OK;
}

/* An easy handle for one request: the pool's most recently used (its connection is the
 * likeliest to be alive), else a new one. p NULL: always a new one. */
static CURL *take_handle(pool *p) {
  CURL *h = NULL;
  if (p) {
    pthread_mutex_lock(&p->lock);
    if (p->n_idle)
      h = p->idle[--p->n_idle];
    pthread_mutex_unlock(&p->lock);
  }
  return h ? h : curl_easy_init();
}

/* Gives h back to the pool with its connection, or closes it (p NULL, or the pool full). */
static void give_back(pool *p, CURL *h) {
  if (p) {
    pthread_mutex_lock(&p->lock);
    if (p->n_idle < POOL_IDLE_MAX) {
      p->idle[p->n_idle++] = h;
      h = NULL;
    }
    pthread_mutex_unlock(&p->lock);
  }
  if (h)
    curl_easy_cleanup(h);
}

/* Sets up a POST of req on h, which keeps its open connections but no earlier option;
 * *headers must be freed by the caller after the transfer. */
static tagc_status setup(const tagc_etcd_request *req, CURL *h, struct curl_slist **headers) {
  char url[2048];
  if ((size_t)snprintf(url, sizeof url, "%s%s", req->endpoint, req->path) >= sizeof url)
    return tagc_errorf(TAGC_EINVAL, "etcd URL too long: %s%s", req->endpoint, req->path);
  curl_easy_reset(h);
  struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
  if (req->auth_token && hl) {
    char auth[1024];
    snprintf(auth, sizeof auth, "Authorization: %s", req->auth_token);
    struct curl_slist *more = curl_slist_append(hl, auth);
    if (!more) {
      curl_slist_free_all(hl);
      hl = NULL;
    } else {
      hl = more;
    }
  }
  if (!hl)
    return tagc_errorf(TAGC_ENOMEM, "curl header list");
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  /* A stream has no overall timeout; TCP keep-alive probes notice a peer that vanished. */
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, (long)TCP_KEEPIDLE_S);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, (long)TCP_KEEPINTVL_S);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, to_ms(req->connect_timeout_s));
  if (req->timeout_s > 0)
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, to_ms(req->timeout_s));
  if (req->ca_file)
    curl_easy_setopt(h, CURLOPT_CAINFO, req->ca_file);
  if (req->cert_file)
    curl_easy_setopt(h, CURLOPT_SSLCERT, req->cert_file);
  if (req->key_file)
    curl_easy_setopt(h, CURLOPT_SSLKEY, req->key_file);
  *headers = hl;
  return TAGC_OK;
}

/* Translates a failed transfer, once, into our status classes. */
static tagc_status transfer_error(CURL *h, CURLcode rc, const tagc_etcd_request *req,
                                  const char *detail) {
  curl_off_t connect_us = 0;
  curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connect_us);
  tagc_status st = TAGC_EIO;
  if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
      (rc == CURLE_OPERATION_TIMEDOUT && connect_us == 0))
    st = TAGC_EPEER;
  else if (rc == CURLE_OPERATION_TIMEDOUT)
    st = TAGC_ETIMEDOUT;
  /* curl's own detail (e.g. the TLS alert "certificate required") when it says more */
  const char *what = curl_easy_strerror(rc);
  int more = detail[0] && strcmp(detail, what) != 0;
  return tagc_errorf(st, "etcd %s%s: %s%s%.*s%s", req->endpoint, req->path, what, more ? " (" : "",
                     (int)strcspn(detail, "\n"), more ? detail : "", more ? ")" : "");
}

static tagc_status curl_request(void *ctx, const tagc_etcd_request *req, long *http_status,
                                char **body, size_t *body_len) {
  pool *p = ctx;
  TAGC_CHECK(init_once());
  CURL *h = take_handle(p);
  if (!h)
    return tagc_errorf(TAGC_ENOMEM, "curl_easy_init failed");
  struct curl_slist *hl;
  tagc_status st = setup(req, h, &hl);
  if (st != TAGC_OK) {
    give_back(p, h);
    return st;
  }
  char detail[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
  buffer b = {.max = req->max_reply_bytes ? req->max_reply_bytes : TAGC_ETCD_MAX_REPLY_BYTES};
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  double started = tagc_now();
  CURLcode rc = curl_easy_perform(h);
  if (b.too_long) {
    st = tagc_errorf(TAGC_EPROTO, "etcd %s%s: reply larger than %zu bytes", req->endpoint,
                     req->path, b.max);
    free(b.data);
  } else if (rc != CURLE_OK) {
    st = transfer_error(h, rc, req, detail);
    free(b.data);
  } else {
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, http_status);
    *body = b.data ? b.data : calloc(1, 1);
    *body_len = b.len;
    if (!*body)
      st = tagc_errorf(TAGC_ENOMEM, "etcd reply buffer");
  }
  tagc_etcd_stats_record(tagc_now() - started, st != TAGC_OK || *http_status >= 400,
                         req->body ? strlen(req->body) : 0, b.len);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL); /* `detail` ends with this call */
  give_back(p, h); /* after a failed transfer curl has closed its connection already */
  curl_slist_free_all(hl);
  return st;
}

static tagc_status curl_stream(void *ctx, const tagc_etcd_request *req, tagc_etcd_sink_fn sink,
                               void *sink_arg, long *http_status) {
  (void)ctx;
  *http_status = 0;
  TAGC_CHECK(init_once());
  CURL *h = curl_easy_init();
  if (!h)
    return tagc_errorf(TAGC_ENOMEM, "curl_easy_init failed");
  struct curl_slist *hl;
  tagc_status st = setup(req, h, &hl);
  if (st != TAGC_OK) {
    curl_easy_cleanup(h);
    return st;
  }
  char detail[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
  stream_state s = {sink, sink_arg, 0};
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, feed_sink);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
  CURLM *m = curl_multi_init();
  if (!m || curl_multi_add_handle(m, h) != CURLM_OK) {
    st = tagc_errorf(TAGC_ENOMEM, "curl_multi_init failed");
    goto done;
  }
  int running = 1;
  while (running) {
    if (curl_multi_perform(m, &running) != CURLM_OK) {
      st = tagc_errorf(TAGC_EIO, "curl_multi_perform failed");
      break;
    }
    if (!running)
      break;
    if (sink(sink_arg, NULL, 0) != 0) {
      st = TAGC_EABORTED;
      break;
    }
    curl_multi_poll(m, NULL, 0, IDLE_TICK_MS, NULL);
  }
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, http_status);
  if (st == TAGC_OK) {
    int left;
    CURLMsg *msg = curl_multi_info_read(m, &left);
    CURLcode rc = msg && msg->msg == CURLMSG_DONE ? msg->data.result : CURLE_OK;
    if (s.stopped)
      st = TAGC_EABORTED;
    else if (rc != CURLE_OK)
      st = transfer_error(h, rc, req, detail);
  }
  curl_multi_remove_handle(m, h);
done:
  if (m)
    curl_multi_cleanup(m);
  curl_easy_cleanup(h);
  curl_slist_free_all(hl);
  return st;
}

const tagc_etcd_transport *tagc_etcd_curl_transport(void) {
  static const tagc_etcd_transport t = {curl_request, curl_stream, NULL};
  return &t;
}

tagc_status etcd_curl_pool_create(tagc_etcd_transport **out) {
  *out = NULL;
  TAGC_CHECK(init_once());
  pool *p = calloc(1, sizeof *p);
  if (!p)
    return tagc_errorf(TAGC_ENOMEM, "etcd connection pool");
  pthread_mutex_init(&p->lock, NULL);
  p->t = (tagc_etcd_transport){curl_request, curl_stream, p};
  *out = &p->t;
  return TAGC_OK;
}

void etcd_curl_pool_free(tagc_etcd_transport *t) {
  if (!t)
    return;
  pool *p = t->ctx;
  for (size_t i = 0; i < p->n_idle; i++)
    curl_easy_cleanup(p->idle[i]);
  pthread_mutex_destroy(&p->lock);
  free(p);
}
