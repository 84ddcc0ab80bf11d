/* The libcurl transport's cap on unary replies, against a tiny HTTP server on loopback that
 * answers every POST with a JSON body of a chosen size (with a Content-Length, or delimited by
 * closing the connection): a body up to the cap arrives whole; one byte more is TAGC_EPROTO,
 * and the transfer stops there, so a server that sends without end cannot exhaust memory.
 * Through the client (default cap TAGC_ETCD_MAX_REPLY_BYTES) the oversize reply is refused
 * and not retried. The client's connections are kept and reused (keep-alive). And
 * tagc_etcd_connect, the client of a program's options over this transport: bad options are one
 * line and no client; its deadline bounds the authentication as well as the request. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/etcd.h"
#include "cluster/etcd_transport.h"
#include "common/status.h"
#include "common/timeutil.h"
#include "test.h"

enum { MAX_CONNS = 64 };

/* What the server sends: a JSON object of body_bytes bytes (an etcd range reply padded with
 * a string field), with a Content-Length header unless close_delimited. Each connection is
 * closed after its answer, or with keep_alive served on its own thread until the client
 * closes it (or server_drop_connections). */
typedef struct server {
  int fd;
  int port;
  pthread_t thread;
  pthread_mutex_t lock;
  size_t body_bytes;
  int close_delimited;
  int keep_alive;
  int connections;
  int requests;
  int conn_fd[MAX_CONNS]; /* keep-alive connections, -1 once closed */
  pthread_t conn_thread[MAX_CONNS];
  int n_conns;
} server;

#define HEAD "{\"header\":{\"cluster_id\":\"1\",\"revision\":\"7\"},\"count\":\"0\",\"pad\":\""
#define TAIL "\"}"

static int send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0)
      return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Reads the request head and its Content-Length body (the client's JSON, which never holds
 * more than the request: the client waits for each answer). 0 once a request was read. */
static int read_request(int fd) {
  char buf[8192];
  size_t len = 0;
  char *end = NULL;
  while (!end && len < sizeof buf - 1) {
    ssize_t k = recv(fd, buf + len, sizeof buf - 1 - len, 0);
    if (k <= 0)
      return -1;
    len += (size_t)k;
    buf[len] = '\0';
    end = strstr(buf, "\r\n\r\n");
  }
  if (!end)
    return -1;
  const char *cl = strcasestr(buf, "Content-Length:");
  size_t want = cl ? strtoul(cl + 15, NULL, 10) : 0;
  size_t have = len - (size_t)(end + 4 - buf);
  while (have < want) {
    ssize_t k = recv(fd, buf, sizeof buf, 0);
    if (k <= 0)
      return -1;
    have += (size_t)k;
  }
  return 0;
}

static void answer(int fd, size_t body_bytes, int close_delimited, int keep_alive) {
  char head[256];
  if (close_delimited)
    snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                "Connection: close\r\n\r\n");
  else
    snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                "Content-Length: %zu\r\n%s\r\n", body_bytes,
             keep_alive ? "" : "Connection: close\r\n");
  if (send_all(fd, head, strlen(head)) || send_all(fd, HEAD, strlen(HEAD)))
    return;
  static char pad[1 << 16];
  memset(pad, 'x', sizeof pad);
  size_t left = body_bytes - strlen(HEAD) - strlen(TAIL);
  while (left) {
    size_t n = left < sizeof pad ? left : sizeof pad;
    if (send_all(fd, pad, n))
      return; /* the client stopped reading */
    left -= n;
  }
  send_all(fd, TAIL, strlen(TAIL));
}

typedef struct conn_arg {
  server *s;
  int slot;
} conn_arg;

/* One keep-alive connection: answers requests until the client closes it. */
static void *serve_conn(void *arg) {
  conn_arg a = *(conn_arg *)arg;
  free(arg);
  server *s = a.s;
  pthread_mutex_lock(&s->lock);
  int fd = s->conn_fd[a.slot];
  pthread_mutex_unlock(&s->lock);
  while (read_request(fd) == 0) {
    pthread_mutex_lock(&s->lock);
    s->requests++;
    size_t bytes = s->body_bytes;
    pthread_mutex_unlock(&s->lock);
    answer(fd, bytes, 0, 1);
  }
  pthread_mutex_lock(&s->lock);
  s->conn_fd[a.slot] = -1;
  pthread_mutex_unlock(&s->lock);
  close(fd);
  return NULL;
}

static void *serve(void *arg) {
  server *s = arg;
  for (;;) {
    int fd = accept(s->fd, NULL, NULL);
    if (fd < 0)
      return NULL; /* the listening socket was shut down */
    pthread_mutex_lock(&s->lock);
    s->connections++;
    size_t bytes = s->body_bytes;
    int close_delimited = s->close_delimited;
    int slot = s->keep_alive && s->n_conns < MAX_CONNS ? s->n_conns++ : -1;
    conn_arg *a = slot >= 0 ? malloc(sizeof *a) : NULL;
    if (a) {
      *a = (conn_arg){s, slot};
      s->conn_fd[slot] = fd;
      if (pthread_create(&s->conn_thread[slot], NULL, serve_conn, a) != 0) {
        free(a);
        a = NULL;
        s->n_conns--;
      }
    }
    if (!a)
      s->requests++;
    pthread_mutex_unlock(&s->lock);
    if (a)
      continue;
    if (read_request(fd) == 0)
      answer(fd, bytes, close_delimited, 0);
    close(fd);
  }
}

/* Closes every keep-alive connection from the server's side (as a restarted etcd would) and
 * joins their threads. */
static void server_drop_connections(server *s) {
  pthread_mutex_lock(&s->lock);
  for (int i = 0; i < s->n_conns; i++)
    if (s->conn_fd[i] >= 0)
      shutdown(s->conn_fd[i], SHUT_RDWR);
  int n = s->n_conns;
  pthread_mutex_unlock(&s->lock);
  for (int i = 0; i < n; i++)
    pthread_join(s->conn_thread[i], NULL);
  pthread_mutex_lock(&s->lock);
  s->n_conns = 0;
  pthread_mutex_unlock(&s->lock);
}

static int server_start(server *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->lock, NULL);
  s->fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(s->fd, 8) != 0 ||
      getsockname(s->fd, (struct sockaddr *)&a, &alen) != 0)
    return -1;
  s->port = ntohs(a.sin_port);
  return pthread_create(&s->thread, NULL, serve, s) == 0 ? 0 : -1;
}

static void server_stop(server *s) {
  server_drop_connections(s);
  shutdown(s->fd, SHUT_RDWR);
  pthread_join(s->thread, NULL);
  close(s->fd);
  pthread_mutex_destroy(&s->lock);
}

static void server_script(server *s, size_t body_bytes, int close_delimited, int keep_alive) {
  pthread_mutex_lock(&s->lock);
  s->body_bytes = body_bytes;
  s->close_delimited = close_delimited;
  s->keep_alive = keep_alive;
  s->connections = 0;
  s->requests = 0;
  pthread_mutex_unlock(&s->lock);
}

static int server_connections(server *s) {
  pthread_mutex_lock(&s->lock);
  int n = s->connections;
  pthread_mutex_unlock(&s->lock);
  return n;
}

static int server_requests(server *s) {
  pthread_mutex_lock(&s->lock);
  int n = s->requests;
  pthread_mutex_unlock(&s->lock);
  return n;
}

/* One POST through the libcurl transport with the given cap. */
static tagc_status post(const char *endpoint, size_t max_reply, char **body, size_t *len) {
  tagc_etcd_request req = {.endpoint = endpoint, .path = "/v3/kv/range", .body = "{}",
                           .timeout_s = 20, .connect_timeout_s = 2,
                           .max_reply_bytes = max_reply};
  const tagc_etcd_transport *t = tagc_etcd_curl_transport();
  long http = 0;
  *body = NULL;
  *len = 0;
  return t->request(t->ctx, &req, &http, body, len);
}

static void test_transport_cap(server *s, const char *endpoint) {
  enum { CAP = 4096 };
  char *body;
  size_t len;
  for (int close_delimited = 0; close_delimited < 2; close_delimited++) {
    server_script(s, CAP, close_delimited, 0);
    CHECK_OK(post(endpoint, CAP, &body, &len));
    CHECK_EQ_INT(len, CAP);
    CHECK(body && body[len] == '\0' && strncmp(body, HEAD, strlen(HEAD)) == 0);
    free(body);

    server_script(s, CAP + 1, close_delimited, 0);
    CHECK_EQ_INT(post(endpoint, CAP, &body, &len), TAGC_EPROTO);
    CHECK_MSG(strstr(tagc_last_error(), "larger than 4096 bytes") != NULL, "%s",
              tagc_last_error());
  }
  /* 256 MiB without a length: refused as soon as the cap is passed, not after the whole. */
  server_script(s, (size_t)256 << 20, 1, 0);
  double t0 = tagc_now();
  CHECK_EQ_INT(post(endpoint, CAP, &body, &len), TAGC_EPROTO);
  CHECK_MSG(tagc_now() - t0 < 5.0, "took %.2f s", tagc_now() - t0);
}

/* The client: one range whose reply is a byte over the default cap gives TAGC_EPROTO after a
 * single attempt (a malformed reply is not retried). */
static void test_client_default_cap(server *s, const char *endpoint) {
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = endpoint;
  cfg.request_timeout_s = 20;
  cfg.deadline_s = 30;
  tagc_etcd *c = NULL;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  if (!c)
    return;
  server_script(s, 1000, 0, 0);
  tagc_etcd_range_result r;
  CHECK_OK(tagc_etcd_range(c, "/k", NULL, &r));
  CHECK_EQ_INT(r.revision, 7);
  tagc_etcd_range_result_free(&r);

  server_script(s, TAGC_ETCD_MAX_REPLY_BYTES + 1, 1, 0);
  CHECK_EQ_INT(tagc_etcd_range(c, "/k", NULL, &r), TAGC_EPROTO);
  CHECK_MSG(strstr(tagc_last_error(), "larger than") != NULL, "%s", tagc_last_error());
  CHECK_EQ_INT(server_connections(s), 1);
  tagc_etcd_destroy(c);
}

typedef struct reader {
  tagc_etcd *c;
  int n;
  int failed;
} reader;

static void *read_keys(void *arg) {
  reader *r = arg;
  for (int i = 0; i < r->n; i++) {
    tagc_etcd_range_result res;
    if (tagc_etcd_range(r->c, "/k", NULL, &res) != TAGC_OK)
      r->failed++;
    else
      tagc_etcd_range_result_free(&res);
  }
  return NULL;
}

/* The client keeps its connections (HTTP keep-alive): requests one after another share one;
 * threads at once need at most one each, and keep them; a connection the server closed is
 * replaced by one new connection, without a failed request. The transport without a pool
 * (tagc_etcd_curl_transport) still opens one per request. */
static void test_connection_reuse(server *s, const char *endpoint) {
  enum { SEQUENTIAL = 20, THREADS = 4, PER_THREAD = 10 };
  server_script(s, 1000, 0, 1);
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = endpoint;
  tagc_etcd *c = NULL;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  if (!c)
    return;
  reader one = {c, SEQUENTIAL, 0};
  read_keys(&one);
  CHECK_EQ_INT(one.failed, 0);
  CHECK_EQ_INT(server_requests(s), SEQUENTIAL);
  CHECK_EQ_INT(server_connections(s), 1);

  reader r[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    r[i] = (reader){c, PER_THREAD, 0};
    CHECK(pthread_create(&t[i], NULL, read_keys, &r[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ_INT(r[i].failed, 0);
  }
  CHECK_EQ_INT(server_requests(s), SEQUENTIAL + THREADS * PER_THREAD);
  int conns = server_connections(s);
  CHECK_MSG(conns >= 1 && conns <= THREADS, "%d threads opened %d connections", THREADS, conns);
  read_keys(&one);
  CHECK_EQ_INT(one.failed, 0);
  CHECK_EQ_INT(server_connections(s), conns);

  server_drop_connections(s);
  one.n = 1;
  read_keys(&one);
  CHECK_EQ_INT(one.failed, 0);
  CHECK_EQ_INT(server_connections(s), conns + 1);
  tagc_etcd_destroy(c);

  char *body;
  size_t len;
  for (int i = 0; i < 3; i++) {
    CHECK_OK(post(endpoint, 4096, &body, &len));
    free(body);
  }
  CHECK_EQ_INT(server_connections(s), conns + 4);
  server_drop_connections(s);
}

/* A socket that listens and never accepts: the TCP connect succeeds, the TLS handshake never
 * gets an answer. */
static int silent_listener(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

static void test_connect(void) {
  tagc_etcd *c = NULL;
  tagc_etcd_credentials none = {0};
  CHECK_OK(tagc_etcd_connect("http://127.0.0.1:1", &none, TAGC_ETCD_DEADLINE_S, &c));
  CHECK(c != NULL);
  tagc_etcd_destroy(c);
  CHECK_EQ_INT(tagc_etcd_connect("http://127.0.0.1:1", &none, 0, &c), TAGC_EINVAL);
  CHECK(c == NULL);

  tagc_etcd_credentials half = {.cert_file = "c.pem"};
  CHECK_EQ_INT(tagc_etcd_connect("https://127.0.0.1:1", &half, 5, &c), TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "--etcd-cert and --etcd-key go together") != NULL);
  tagc_etcd_credentials user = {.user = "root"};
  unsetenv(TAGC_ETCD_PASSWORD_ENV);
  CHECK_EQ_INT(tagc_etcd_connect("https://127.0.0.1:1", &user, 5, &c), TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "--etcd-user root needs a password") != NULL);
  setenv(TAGC_ETCD_PASSWORD_ENV, "secret", 1);
  CHECK_EQ_INT(tagc_etcd_connect("http://127.0.0.1:1", &user, 5, &c), TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "refusing to send the etcd password") != NULL);
  CHECK(c == NULL);

  /* TLS files with an http:// endpoint would be ignored: refused, also by tagc_etcd_create. */
  tagc_etcd_credentials ca = {.ca_file = "/nonexistent/ca.pem"};
  CHECK_EQ_INT(tagc_etcd_connect("https://127.0.0.1:1,http://127.0.0.1:2", &ca, 5, &c), TAGC_EINVAL);
  CHECK_MSG(strstr(tagc_last_error(), "--etcd-ca with the plain http:// etcd endpoint http://127.0.0.1:2"),
            "%s", tagc_last_error());
  CHECK(c == NULL);
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = "http://127.0.0.1:1";
  cfg.cert_file = cfg.key_file = "/etc/hostname";
  CHECK_EQ_INT(tagc_etcd_create(&cfg, &c), TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "--etcd-cert with the plain http://") != NULL && c == NULL);
  /* with https, a TLS file that is not there is named before any connection */
  CHECK_EQ_INT(tagc_etcd_connect("https://127.0.0.1:1", &ca, 5, &c), TAGC_ENOTFOUND);
  CHECK(strstr(tagc_last_error(), "--etcd-ca /nonexistent/ca.pem: No such file") != NULL && c == NULL);

  /* Each attempt may take the client's 5 s, its TLS connect 1.5 s: with a 0.2 s deadline the
   * authentication gives up within the deadline too. */
  int port = 0, fd = silent_listener(&port);
  CHECK(fd >= 0);
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "https://127.0.0.1:%d", port);
  CHECK_OK(tagc_etcd_connect(endpoint, &user, 0.2, &c));
  double t0 = tagc_now();
  char *v = NULL;
  CHECK(tagc_etcd_get(c, "/k", &v, NULL, NULL) != TAGC_OK);
  double took = tagc_now() - t0;
  CHECK_MSG(took < 0.7, "a call with a 0.2 s deadline took %.2f s", took);
  tagc_etcd_destroy(c);
  close(fd);
  unsetenv(TAGC_ETCD_PASSWORD_ENV);
}

int main(void) {
  server s;
  if (server_start(&s) != 0) {
    perror("test server");
    return 1;
  }
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", s.port);
  test_transport_cap(&s, endpoint);
  test_client_default_cap(&s, endpoint);
  test_connection_reuse(&s, endpoint);
  server_stop(&s);
  test_connect();
  return TEST_END();
}
