/* Byte-scaled deadlines over a really slow link: two ranks in their own network namespaces,
 * joined by a veth whose both ends are shaped to 24 Mbit/s (3 MB/s) with tbf.
 *   1. A few 1 MB all-gathers complete under the initial rate assumption and measure the link.
 *   2. A 12 MB all-gather — about 4 s of transfer, more than twice the 1.5 s base timeout, so a
 *      fixed timeout would call it a failure — completes with the right data.
 *   3. Rank 1 stops calling: rank 0's 12 MB all-gather fails with TAGC_ETIMEDOUT at its
 *      byte-scaled deadline (base + 3x the transfer time at the measured rate), not later.
 * Needs root and `ip netns` (exit 77 otherwise). The namespaces (addresses 10.233.0.1-2 exist
 * only inside them) carry this process's pid in their names and are removed at exit and on
 * SIGINT/SIGTERM; ones left by a killed earlier run are removed at start. */
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "common/timeutil.h"
#include "harness.h"
#include "test.h"

#define RANK_START() (test_failed_ = test_passed_ = 0)

#define NS_PREFIX "tagcdl-"
#define RATE_BPS 3e6 /* the shaped rate, bytes per second */
#define BASE_S 1.5
#define SMALL_BYTES (1u << 20)
#define BIG_BYTES (12u << 20)

static pid_t owner; /* the process that created the namespaces */

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int rc = system(cmd);
  if (rc != 0)
    fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
  return rc;
}

static void ns_name(char *buf, size_t cap, pid_t pid, int rank) {
  snprintf(buf, cap, NS_PREFIX "%d-%d", (int)pid, rank);
}

static void remove_namespaces(void) {
  if (getpid() != owner)
    return;
  for (int r = 0; r < 2; r++) {
    char ns[64];
    ns_name(ns, sizeof ns, owner, r);
    char path[128];
    snprintf(path, sizeof path, "/var/run/netns/%s", ns);
    if (access(path, F_OK) == 0)
      sh("ip netns del %s", ns);
  }
}

static void on_signal(int sig) {
  remove_namespaces();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Namespaces of earlier runs whose process is gone (killed by a test timeout). */
static void remove_stale(void) {
  DIR *d = opendir("/var/run/netns");
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    int pid;
    if (sscanf(e->d_name, NS_PREFIX "%d-", &pid) == 1 && pid > 0 && kill(pid, 0) != 0 &&
        errno == ESRCH)
      sh("ip netns del %s", e->d_name);
  }
  closedir(d);
}

/* Two namespaces joined by a shaped veth. 77 when namespaces cannot be made here. */
static int setup(void) {
  char a[64], b[64], va[32], vb[32];
  ns_name(a, sizeof a, owner, 0);
  ns_name(b, sizeof b, owner, 1);
  snprintf(va, sizeof va, "tdl%da", (int)owner);
  snprintf(vb, sizeof vb, "tdl%db", (int)owner);
  if (sh("ip netns add %s", a) != 0)
    return 77;
  atexit(remove_namespaces);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  if (sh("ip netns add %s", b) || sh("ip link add %s type veth peer name %s", va, vb) ||
      sh("ip link set %s netns %s", va, a) || sh("ip link set %s netns %s", vb, b) ||
      sh("ip -n %s addr add 10.233.0.1/24 dev %s", a, va) ||
      sh("ip -n %s addr add 10.233.0.2/24 dev %s", b, vb) ||
      sh("ip -n %s link set %s up", a, va) || sh("ip -n %s link set %s up", b, vb) ||
      sh("ip -n %s link set lo up", a) || sh("ip -n %s link set lo up", b) ||
      sh("tc -n %s qdisc add dev %s root tbf rate 24mbit burst 32kb latency 50ms", a, va) ||
      sh("tc -n %s qdisc add dev %s root tbf rate 24mbit burst 32kb latency 50ms", b, vb))
    return 1;
  return 0;
}

static int enter_namespace(int rank) {
  char path[128], ns[64];
  ns_name(ns, sizeof ns, owner, rank);
  snprintf(path, sizeof path, "/var/run/netns/%s", ns);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  int ok = fd >= 0 && setns(fd, CLONE_NEWNET) == 0;
  if (!ok)
    fprintf(stderr, "rank %d: entering %s: %s\n", rank, path, strerror(errno));
  if (fd >= 0)
    close(fd);
  return ok;
}

static void fill(uint8_t *p, size_t n, int rank) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)(i * 7 + (size_t)rank * 131);
}

static int gathered_ok(const uint8_t *buf, size_t n) {
  for (int r = 0; r < 2; r++)
    for (size_t i = 0; i < n; i += 4093)
      if (buf[(size_t)r * n + i] != (uint8_t)(i * 7 + (size_t)r * 131))
        return 0;
  return 1;
}

static int slow_rank(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  RANK_START();
  if (!enter_namespace(rank))
    return 1;
  tagc_comm *c = harness_comm_at(rank, world, dir, "slowlink", BASE_S,
                                 rank == 0 ? "10.233.0.1" : "10.233.0.2");
  CHECK(c != NULL);
  uint8_t *send = malloc(BIG_BYTES), *recv = malloc(2 * (size_t)BIG_BYTES);
  CHECK(send && recv);
  if (!c || !send || !recv)
    goto out;
  fill(send, BIG_BYTES, rank);

  /* 1. Measure the link with a few medium transfers (the first under the assumed rate). */
  for (int i = 0; i < 3; i++) {
    double t0 = tagc_now();
    CHECK_OK(tagc_comm_allgather(c, send, recv, SMALL_BYTES, 0));
    if (rank == 0)
      printf("warm-up all-gather of %u B: %.3f s\n", SMALL_BYTES, tagc_now() - t0);
  }
  double rate = tagc_comm_link_rate(TAGC_COMM_GLOO);
  CHECK_MSG(rate > 0.5 * RATE_BPS && rate < 2.0 * RATE_BPS, "measured %.0f B/s on a %.0f B/s link",
            rate, RATE_BPS);

  /* 2. A transfer far longer than the base timeout completes. */
  double timeout = tagc_comm_timeout_for(c, 0, BIG_BYTES);
  double t0 = tagc_now();
  CHECK_OK(tagc_comm_allgather(c, send, recv, BIG_BYTES, 0));
  double took = tagc_now() - t0;
  CHECK(gathered_ok(recv, BIG_BYTES));
  CHECK_MSG(took > 2 * BASE_S, "the big all-gather took only %.3f s", took);
  if (rank == 0)
    printf("all-gather of %u B over %.0f B/s (measured %.0f): %.3f s, timeout %.2f s "
           "(base %.1f s)\n", BIG_BYTES, RATE_BPS, rate, took, timeout, BASE_S);

  /* 3. Rank 1 stops calling; rank 0 gives up at its deadline. */
  if (rank == 1) {
    CHECK(harness_wait_mark(dir, "hang-done", 60.0));
    goto out;
  }
  rate = tagc_comm_link_rate(TAGC_COMM_GLOO);
  timeout = tagc_comm_timeout_for(c, 0, BIG_BYTES);
  /* the rate the link measured (checked above to be within 2x of the tbf rate): a loaded
     machine moves fewer bytes per second than the shaping allows, and the deadline follows */
  double expected = BASE_S + 3.0 * BIG_BYTES / rate;
  t0 = tagc_now();
  CHECK_EQ_INT(tagc_comm_allgather(c, send, recv, BIG_BYTES, 0), TAGC_ETIMEDOUT);
  took = tagc_now() - t0;
  harness_mark(dir, "hang-done");
  CHECK_EQ_INT(tagc_comm_failed_peer(c), 1);
  CHECK_MSG(took >= timeout - 0.05 && took <= timeout + 0.5, "hang caught after %.3f s, "
            "deadline %.3f s", took, timeout);
  CHECK_MSG(took <= 1.25 * expected, "hang caught after %.3f s: beyond base + 3x transfer "
            "time (%.2f s)", took, expected);
  printf("hang: rank 0 got TAGC_ETIMEDOUT after %.3f s (deadline %.2f s at %.0f B/s; "
         "base + 3x measured transfer %.2f s)\n", took, timeout, rate, expected);
out:
  free(send);
  free(recv);
  tagc_comm_destroy(c);
  return test_failed_;
}

int main(void) {
  if (geteuid() != 0)
    TEST_SKIP("needs root for network namespaces");
  if (system("ip netns list > /dev/null 2>&1") != 0)
    TEST_SKIP("no `ip netns`");
  owner = getpid();
  remove_stale();
  int rc = setup();
  if (rc == 77)
    TEST_SKIP("cannot create a network namespace here");
  CHECK_EQ_INT(rc, 0);
  if (rc == 0)
    CHECK_EQ_INT(harness_run(2, slow_rank, NULL, 60.0), 0);
  return TEST_END();
}
