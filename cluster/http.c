#include "cluster/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

struct tagc_http {
  struct MHD_Daemon *daemon;
  tagc_http_handler fn;
  void *arg;
  int port;
};

tagc_status tagc_http_parse_addr(const char *addr, char **host_out, int *port) {
  *host_out = NULL;
  const char *colon = addr ? strrchr(addr, ':') : NULL;
  if (!colon || colon == addr || !colon[1])
    return tagc_errorf(TAGC_EINVAL, "HTTP address '%s' is not HOST:PORT", addr ? addr : "(null)");
  char *end;
  errno = 0;
  long p = strtol(colon + 1, &end, 10);
  if (errno || *end || p < 0 || p > 65535)
    return tagc_errorf(TAGC_EINVAL, "HTTP address '%s': port is not a number in 0..65535", addr);
  *host_out = strndup(addr, (size_t)(colon - addr));
  if (!*host_out)
    return tagc_errorf(TAGC_ENOMEM, "HTTP address");
  *port = (int)p;
  return TAGC_OK;
}

/* Resolves addr to an IPv4 socket address. */
static tagc_status resolve(const char *addr, struct sockaddr_in *sa) {
  char *host;
  int port;
  TAGC_CHECK(tagc_http_parse_addr(addr, &host, &port));
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  tagc_status st = TAGC_OK;
  if (rc != 0 || !res)
    st = tagc_errorf(TAGC_EINVAL, "HTTP address '%s': host '%s' does not resolve to IPv4: %s",
                     addr, host, gai_strerror(rc));
  else
    *sa = *(struct sockaddr_in *)res->ai_addr;
  sa->sin_port = htons((uint16_t)port);
  if (res)
    freeaddrinfo(res);
  free(host);
  return st;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls) {
  (void)version;
  (void)upload_data;
  (void)upload_data_size;
  (void)con_cls;
  tagc_http *h = cls;
  tagc_http_response resp = {.status = MHD_HTTP_NOT_FOUND,
                             .content_type = "text/plain; charset=utf-8"};
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    resp.status = MHD_HTTP_METHOD_NOT_ALLOWED;
    resp.body = strdup("only GET and HEAD\n");
  } else {
    h->fn(h->arg, url, &resp);
  }
  size_t len = resp.body ? strlen(resp.body) : 0;
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, resp.body ? resp.body : "", resp.body
                                                                          ? MHD_RESPMEM_MUST_FREE
                                                                          : MHD_RESPMEM_PERSISTENT);
  if (!r) {
    free(resp.body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, resp.content_type);
  enum MHD_Result ret = MHD_queue_response(conn, (unsigned)resp.status, r);
  MHD_destroy_response(r);
  return ret;
}

tagc_status tagc_http_start(const char *addr, tagc_http_handler fn, void *arg, tagc_http **out) {
  *out = NULL;
  if (!fn)
    return tagc_errorf(TAGC_EINVAL, "HTTP server: NULL handler");
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  TAGC_CHECK(resolve(addr, &sa));
  tagc_http *h = calloc(1, sizeof *h);
  if (!h)
    return tagc_errorf(TAGC_ENOMEM, "HTTP server");
  h->fn = fn;
  h->arg = arg;
  h->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, ntohs(sa.sin_port), NULL, NULL,
                               answer, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                               MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
  if (!h->daemon) {
    free(h);
    return tagc_errorf(TAGC_EIO, "HTTP server: cannot listen on %s (in use or not a local address?)",
                       addr);
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
  h->port = info ? info->port : ntohs(sa.sin_port);
  *out = h;
  return TAGC_OK;
}

int tagc_http_port(const tagc_http *h) { return h->port; }

void tagc_http_stop(tagc_http *h) {
  if (!h)
    return;
  MHD_stop_daemon(h->daemon);
  free(h);
}
