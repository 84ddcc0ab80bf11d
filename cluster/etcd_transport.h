/* The HTTP layer under the etcd client, as a table of functions so that tests can script
 * the server's answers (5xx, garbage, timeouts, canceled watches) without a network.
 * The default is libcurl (tagc_etcd_curl_transport). */
#ifndef TAGC_COORDINATOR_ETCD_TRANSPORT_H
#define TAGC_COORDINATOR_ETCD_TRANSPORT_H

#include <stddef.h>

#include "common/status.h"

/* The largest unary reply body the libcurl transport accepts unless a request says otherwise
 * (watch streams cap each message alike). Set at compile time with
 * -DTAGC_ETCD_MAX_REPLY_BYTES=N. */
#ifndef TAGC_ETCD_MAX_REPLY_BYTES
#define TAGC_ETCD_MAX_REPLY_BYTES ((size_t)64 << 20)
#endif

/* One POST to endpoint + path. Borrowed for the call. */
typedef struct tagc_etcd_request {
  const char *endpoint;      /* "http://127.0.0.1:2379" */
  const char *path;          /* "/v3/kv/range" */
  const char *body;          /* JSON text */
  const char *auth_token;    /* Authorization header value, or NULL */
  double timeout_s;          /* whole attempt; streams: 0 = none */
  double connect_timeout_s;
  const char *ca_file, *cert_file, *key_file; /* TLS files or NULL */
  size_t max_reply_bytes;    /* unary: largest body accepted; 0 = TAGC_ETCD_MAX_REPLY_BYTES */
} tagc_etcd_request;

/* Stream sink: data chunks as they arrive; len == 0 is an idle tick, called at least every
 * 100 ms while the stream is open. Return 0 to go on, non-zero to close the stream. */
typedef int (*tagc_etcd_sink_fn)(void *arg, const char *data, size_t len);

typedef struct tagc_etcd_transport {
  /* Unary POST. On any HTTP answer: TAGC_OK, *http_status, and a new malloc'd NUL-terminated
   * body (*body_len bytes; caller frees). Errors: TAGC_EPEER when no connection could be made
   * (nothing was sent), TAGC_ETIMEDOUT when the attempt timed out after connecting,
   * TAGC_EPROTO when the body grows past the request's max_reply_bytes (the transfer stops
   * there), TAGC_EIO for other transfer failures. Called from many threads at once. */
  tagc_status (*request)(void *ctx, const tagc_etcd_request *req, long *http_status, char **body,
                         size_t *body_len);
  /* Streaming POST: feeds the reply body to sink until the server closes (TAGC_OK), sink
   * returns non-zero (TAGC_EABORTED) or the transfer fails (errors as for request).
   * *http_status gets the HTTP status once known (0 before). */
  tagc_status (*stream)(void *ctx, const tagc_etcd_request *req, tagc_etcd_sink_fn sink,
                        void *sink_arg, long *http_status);
  void *ctx;
} tagc_etcd_transport;

/* The libcurl transport (stateless; ctx unused). Initialises libcurl once, thread-safely. */
const tagc_etcd_transport *tagc_etcd_curl_transport(void);

#endif
