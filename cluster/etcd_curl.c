/* libcurl transport of the etcd client: one easy handle per request (so threads share
 * nothing), a multi handle per stream so that an idle stream still ticks every 100 ms. */
#include "cluster/etcd_transport.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "cluster/etcd_stats.h"
#include "common/timeutil.h"

enum { IDLE_TICK_MS = 100, TCP_KEEPIDLE_S = 5, TCP_KEEPINTVL_S = 2 };

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

/* Sets up a POST of req on a new easy handle; *headers must be freed by the caller. */
static tagc_status setup(const tagc_etcd_request *req, CURL **out, struct curl_slist **headers) {
  pthread_once(&curl_once, init_curl);
  if (curl_init_result != CURLE_OK)
    return tagc_errorf(TAGC_EINTERNAL, "curl_global_init: %s", curl_easy_strerror(curl_init_result));
  char url[2048];
  if ((size_t)snprintf(url, sizeof url, "%s%s", req->endpoint, req->path) >= sizeof url)
    return tagc_errorf(TAGC_EINVAL, "etcd URL too long: %s%s", req->endpoint, req->path);
  CURL *h = curl_easy_init();
  if (!h)
    return tagc_errorf(TAGC_ENOMEM, "curl_easy_init failed");
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
  if (!hl) {
    curl_easy_cleanup(h);
    return tagc_errorf(TAGC_ENOMEM, "curl header list");
  }
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
  *out = h;
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
  (void)ctx;
  CURL *h;
  struct curl_slist *hl;
  TAGC_CHECK(setup(req, &h, &hl));
  char detail[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
  buffer b = {.max = req->max_reply_bytes ? req->max_reply_bytes : TAGC_ETCD_MAX_REPLY_BYTES};
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  double started = tagc_now();
  CURLcode rc = curl_easy_perform(h);
  tagc_status st = TAGC_OK;
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
  tagc_etcd_stats_record(tagc_now() - started, st != TAGC_OK || *http_status >= 400);
  curl_easy_cleanup(h);
  curl_slist_free_all(hl);
  return st;
}

static tagc_status curl_stream(void *ctx, const tagc_etcd_request *req, tagc_etcd_sink_fn sink,
                               void *sink_arg, long *http_status) {
  (void)ctx;
  *http_status = 0;
  CURL *h;
  struct curl_slist *hl;
  TAGC_CHECK(setup(req, &h, &hl));
  char detail[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
  stream_state s = {sink, sink_arg, 0};
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, feed_sink);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
  tagc_status st = TAGC_OK;
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
