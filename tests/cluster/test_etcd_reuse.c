/* The etcd client keeps its connections to a real etcd: a TCP relay on loopback between the
 * client and the server counts the connections the client opens. Requests one after another
 * use one connection; a lease keeper renewing on its thread while the main thread reads adds
 * at most one more; after etcd is killed and restarted the client reconnects (one connection
 * per handle in use) and every call succeeds again. Before keep-alive each request opened a
 * connection of its own (a lost SYN on a lossy link then costs 1 s of a 3 s lease). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/status.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "etcd_server.h"
#include "test.h"

enum { MAX_LINKS = 64 };

/* Accepts on `fd` and pumps each connection to 127.0.0.1:target_port on a thread of its own;
 * a slot whose connection ended is reused, so that a client opening a connection per request
 * is served too (and counted). */
typedef struct relay {
  int fd, port, target_port;
  pthread_t thread;
  pthread_mutex_t lock;
  int accepted;
  int client_fd[MAX_LINKS], server_fd[MAX_LINKS];
  int used[MAX_LINKS], ended[MAX_LINKS];
  pthread_t link_thread[MAX_LINKS];
} relay;

typedef struct link_arg {
  relay *r;
  int slot;
} link_arg;

static int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Copies both ways until either side closes, then closes both. */
static void *pump(void *arg) {
  relay *r = ((link_arg *)arg)->r;
  int slot = ((link_arg *)arg)->slot;
  free(arg);
  pthread_mutex_lock(&r->lock);
  int fds[2] = {r->client_fd[slot], r->server_fd[slot]};
  pthread_mutex_unlock(&r->lock);
  char buf[16384];
  for (;;) {
    struct pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    if (poll(p, 2, -1) < 0)
      break;
    int done = 0;
    for (int i = 0; i < 2 && !done; i++) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      ssize_t n = recv(fds[i], buf, sizeof buf, 0);
      done = n <= 0 || send(fds[1 - i], buf, (size_t)n, MSG_NOSIGNAL) != n;
    }
    if (done)
      break;
  }
  shutdown(fds[0], SHUT_RDWR);
  shutdown(fds[1], SHUT_RDWR);
  pthread_mutex_lock(&r->lock);
  r->ended[slot] = 1;
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

/* Joins the thread of a used slot and closes its sockets. */
static void release(relay *r, int i) {
  pthread_join(r->link_thread[i], NULL);
  close(r->client_fd[i]);
  close(r->server_fd[i]);
  r->used[i] = r->ended[i] = 0;
}

/* A free slot, releasing ended ones; -1 when all are busy. Caller holds r->lock. */
static int free_slot(relay *r) {
  for (int i = 0; i < MAX_LINKS; i++) {
    if (r->used[i] && r->ended[i])
      release(r, i);
    if (!r->used[i])
      return i;
  }
  return -1;
}

static void *accept_loop(void *arg) {
  relay *r = arg;
  for (;;) {
    int cfd = accept(r->fd, NULL, NULL);
    if (cfd < 0)
      return NULL; /* relay_stop shut the listening socket down */
    int sfd = connect_loopback(r->target_port);
    pthread_mutex_lock(&r->lock);
    r->accepted++;
    int slot = sfd >= 0 ? free_slot(r) : -1;
    link_arg *a = slot >= 0 ? malloc(sizeof *a) : NULL;
    if (a) {
      *a = (link_arg){r, slot};
      r->client_fd[slot] = cfd;
      r->server_fd[slot] = sfd;
      if (pthread_create(&r->link_thread[slot], NULL, pump, a) == 0) {
        r->used[slot] = 1;
      } else {
        free(a);
        a = NULL;
      }
    }
    pthread_mutex_unlock(&r->lock);
    if (!a) {
      close(cfd);
      if (sfd >= 0)
        close(sfd);
    }
  }
}

static int relay_start(relay *r, int target_port) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->lock, NULL);
  r->target_port = target_port;
  r->fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  if (r->fd < 0 || bind(r->fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(r->fd, 16) != 0 ||
      getsockname(r->fd, (struct sockaddr *)&a, &alen) != 0)
    return -1;
  r->port = ntohs(a.sin_port);
  return pthread_create(&r->thread, NULL, accept_loop, r) == 0 ? 0 : -1;
}

static int relay_accepted(relay *r) {
  pthread_mutex_lock(&r->lock);
  int n = r->accepted;
  pthread_mutex_unlock(&r->lock);
  return n;
}

static void relay_stop(relay *r) {
  shutdown(r->fd, SHUT_RDWR);
  pthread_join(r->thread, NULL);
  close(r->fd);
  for (int i = 0; i < MAX_LINKS; i++) {
    if (!r->used[i])
      continue;
    shutdown(r->client_fd[i], SHUT_RDWR);
    shutdown(r->server_fd[i], SHUT_RDWR);
    release(r, i);
  }
  pthread_mutex_destroy(&r->lock);
}

static void lost(void *arg, int64_t lease, tagc_status why) {
  (void)lease;
  (void)why;
  *(int *)arg = 1;
}

/* n reads of one key; how many failed. */
static int read_key(tagc_etcd *c, int n) {
  int failed = 0;
  for (int i = 0; i < n; i++) {
    char *v = NULL;
    if (tagc_etcd_get(c, "/reuse/k", &v, NULL, NULL) != TAGC_OK)
      failed++;
    free(v);
  }
  return failed;
}

int main(void) {
  enum { SEQUENTIAL = 50, TTL_S = 2 };
  tagc_test_etcd e;
  tagc_status st = tagc_test_etcd_start(&e);
  if (st == TAGC_EUNSUPPORTED)
    TEST_SKIP(tagc_last_error());
  CHECK_OK(st);
  if (st != TAGC_OK)
    return TEST_END();
  relay r;
  if (relay_start(&r, e.client_port) != 0) {
    perror("relay");
    tagc_test_etcd_stop(&e);
    return 1;
  }
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d", r.port);
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = url;
  tagc_etcd *c = NULL;
  CHECK_OK(tagc_etcd_create(&cfg, &c));
  if (!c)
    goto out;

  CHECK_OK(tagc_etcd_put(c, "/reuse/k", "v", 1, 0, NULL));
  CHECK_EQ_INT(read_key(c, SEQUENTIAL), 0);
  CHECK_EQ_INT(relay_accepted(&r), 1);

  /* A keeper renews every TTL/3 on its own thread while this one reads: two connections at
   * most, however many renewals and reads. */
  int64_t lease = 0;
  int was_lost = 0;
  CHECK_OK(tagc_etcd_lease_grant(c, TTL_S, &lease, NULL));
  tagc_etcd_keeper *k = NULL;
  CHECK_OK(tagc_etcd_keeper_start_patient(c, lease, TTL_S, lost, &was_lost, &k));
  double until = tagc_now() + 2.0 * TTL_S;
  int reads = 0;
  while (tagc_now() < until) {
    CHECK_EQ_INT(read_key(c, 1), 0);
    reads++;
    tagc_sleep(0.02);
  }
  int64_t ttl = 0;
  CHECK_OK(tagc_etcd_lease_ttl(c, lease, &ttl, NULL));
  CHECK_MSG(ttl > 0 && !was_lost, "the lease is alive after %d s of renewals (ttl %lld)",
            2 * TTL_S, (long long)ttl);
  int with_keeper = relay_accepted(&r);
  CHECK_MSG(with_keeper <= 2, "%d reads and a keeper's renewals opened %d connections", reads,
            with_keeper);
  tagc_etcd_keeper_stop(k);

  /* The kept connections die with etcd; the next calls connect again and succeed. */
  CHECK_OK(tagc_test_etcd_kill(&e));
  CHECK_OK(tagc_test_etcd_restart(&e));
  CHECK_EQ_INT(read_key(c, SEQUENTIAL), 0);
  int after = relay_accepted(&r) - with_keeper;
  CHECK_MSG(after >= 1 && after <= 2, "after a restart %d reads opened %d connections",
            SEQUENTIAL, after);
  tagc_etcd_destroy(c);
out:
  relay_stop(&r);
  tagc_test_etcd_stop(&e);
  return TEST_END();
}
