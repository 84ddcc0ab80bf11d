/* Test helper: a real, single-member etcd server on 127.0.0.1 with a temporary data dir and
 * free ports, for integration and chaos tests.
 *
 *   tagc_test_etcd e;
 *   if (tagc_test_etcd_start(&e) == TAGC_EUNSUPPORTED) TEST_SKIP("no etcd");
 *   ... use e.url ...
 *   tagc_test_etcd_stop(&e);
 *
 * A single server runs with a 50 ms heartbeat and 500 ms election timeout, so leases as short
 * as 1 s are honoured; cluster members use etcd's defaults (100 ms, 1 s). It dies with the test process (PR_SET_PDEATHSIG). Set TAGC_ETCD_BIN to
 * use another binary than /usr/bin/etcd. Not thread-safe: one thread drives one server. */
#ifndef TAGC_TESTS_COORDINATOR_ETCD_SERVER_H
#define TAGC_TESTS_COORDINATOR_ETCD_SERVER_H

#include <sys/types.h>

#include "common/status.h"

typedef struct tagc_test_etcd {
  pid_t pid;            /* 0 when not running */
  int client_port;
  int peer_port;
  int tls;              /* serving HTTPS and requiring client certificates */
  char dir[256];        /* temporary directory: data/, etcd.log, certificates */
  char url[64];         /* "http://127.0.0.1:<client_port>" (https:// with TLS) */
  char ca_file[300];    /* TLS only: the CA that signed the server and client certificates */
  char cert_file[300];  /* TLS only: a client certificate the server accepts */
  char key_file[300];   /* TLS only: its private key */
  char name[16];        /* member name ("default" alone, "m<i>" in a cluster) */
  char initial_cluster[512]; /* every member's name=peer-URL */
} tagc_test_etcd;

/* Starts etcd and waits (up to 15 s) until GET /health answers "true". TAGC_EUNSUPPORTED when the
 * etcd binary is missing (the caller skips), TAGC_EIO / TAGC_ETIMEDOUT when it does not come
 * up (the last lines of its log are in the error detail). */
tagc_status tagc_test_etcd_start(tagc_test_etcd *e);

/* The same with TLS: makes a throw-away CA, server and client certificates with the openssl
 * command (TAGC_EUNSUPPORTED without it) and serves HTTPS with client-certificate auth. */
tagc_status tagc_test_etcd_start_tls(tagc_test_etcd *e);

/* Kills the server (SIGKILL, by PID) but keeps its data and ports, e.g. to test a client
 * through an outage. */
tagc_status tagc_test_etcd_kill(tagc_test_etcd *e);

/* Starts a server again on the same data dir and ports after tagc_test_etcd_kill. */
tagc_status tagc_test_etcd_restart(tagc_test_etcd *e);

/* Freezes (SIGSTOP, returning once every thread is stopped) or thaws (SIGCONT) the server:
 * a hung etcd whose sockets stay open. */
tagc_status tagc_test_etcd_pause(tagc_test_etcd *e);
tagc_status tagc_test_etcd_resume(tagc_test_etcd *e);

/* Stops the server (SIGTERM, then SIGKILL after 5 s, by PID) and removes its directory.
 * Idempotent. */
void tagc_test_etcd_stop(tagc_test_etcd *e);

/* A cluster of n (1 to 5) members on loopback, each with its own directory and ports. */
enum { TAGC_TEST_ETCD_MAX_MEMBERS = 5 };
typedef struct tagc_test_etcd_cluster {
  int n;
  tagc_test_etcd member[TAGC_TEST_ETCD_MAX_MEMBERS];
  char endpoints[512];  /* every member's URL, comma-separated, member 0 first */
} tagc_test_etcd_cluster;

/* Starts every member and waits (up to 20 s) until each reports itself healthy (it has a
 * leader). Members can then be killed and restarted one by one with the functions above.
 * TAGC_EUNSUPPORTED without the etcd binary. */
tagc_status tagc_test_etcd_cluster_start(tagc_test_etcd_cluster *cl, int n);

/* Stops every member and removes their directories. Idempotent. */
void tagc_test_etcd_cluster_stop(tagc_test_etcd_cluster *cl);

/* A free TCP port on 127.0.0.1 at the time of the call. */
int tagc_test_free_port(void);

#endif
