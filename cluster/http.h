/* A tiny HTTP server (libmicrohttpd) for the coordinator's /healthz, /status and /metrics.
 *
 * The server answers GET and HEAD only (405 otherwise) by calling one handler with the path;
 * the handler fills a response. It listens on one IPv4 address; port 0 picks a free one
 * (tagc_http_port() tells which). Requests are served one at a time on the server's own
 * thread, so the handler runs on that thread and must be thread-safe against the rest of
 * the program. */
#ifndef TAGC_COORDINATOR_HTTP_H
#define TAGC_COORDINATOR_HTTP_H

#include "common/status.h"

typedef struct tagc_http tagc_http;

typedef struct tagc_http_response {
  int status;               /* HTTP status code (the handler sets it; 404 by default) */
  const char *content_type; /* static string; "text/plain; charset=utf-8" by default */
  char *body;               /* malloc'd body the server frees, or NULL for an empty one */
} tagc_http_response;

/* Fills resp for a GET of path (without the query string). */
typedef void (*tagc_http_handler)(void *arg, const char *path, tagc_http_response *resp);

/* Parses "HOST:PORT" (HOST an IPv4 address or a name that resolves to one, PORT 0-65535)
 * into *host_out (new string, caller frees) and *port. TAGC_EINVAL with a one-line detail. */
tagc_status tagc_http_parse_addr(const char *addr, char **host_out, int *port);

/* Starts serving on addr ("127.0.0.1:9090", port 0 = any free). TAGC_EINVAL for a bad
 * address, TAGC_EIO when the address cannot be bound. fn and arg are borrowed until stop. */
tagc_status tagc_http_start(const char *addr, tagc_http_handler fn, void *arg, tagc_http **out);

/* The port the server listens on. */
int tagc_http_port(const tagc_http *h);

/* Stops serving (waits for a request in progress) and frees. NULL is ignored. */
void tagc_http_stop(tagc_http *h);

#endif
