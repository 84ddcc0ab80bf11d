#include "etcd_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/timeutil.h"

int tagc_test_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static const char *etcd_binary(void) {
  const char *bin = getenv("TAGC_ETCD_BIN");
  return bin && *bin ? bin : "/usr/bin/etcd";
}

typedef struct reply {
  char text[256];
  size_t len;
} reply;

static size_t keep_head(char *p, size_t s, size_t n, void *u) {
  reply *r = u;
  size_t take = s * n;
  if (take > sizeof r->text - 1 - r->len)
    take = sizeof r->text - 1 - r->len;
  memcpy(r->text + r->len, p, take);
  r->len += take;
  r->text[r->len] = '\0';
  return s * n;
}

/* GET /health answers 200 with "health":"true": the member serves and has a leader. */
static int healthy(const tagc_test_etcd *e) {
  char full[128];
  snprintf(full, sizeof full, "%s/health", e->url);
  CURL *h = curl_easy_init();
  if (!h)
    return 0;
  reply r = {.len = 0};
  curl_easy_setopt(h, CURLOPT_URL, full);
  if (e->tls) {
    curl_easy_setopt(h, CURLOPT_CAINFO, e->ca_file);
    curl_easy_setopt(h, CURLOPT_SSLCERT, e->cert_file);
    curl_easy_setopt(h, CURLOPT_SSLKEY, e->key_file);
  }
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 500L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep_head);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
  long code = 0;
  if (curl_easy_perform(h) == CURLE_OK)
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(h);
  return code == 200 && strstr(r.text, "\"true\"") != NULL;
}

/* The last bytes of the server's log, for error messages. */
static const char *log_tail(const tagc_test_etcd *e, char *buf, size_t cap) {
  char path[300];
  snprintf(path, sizeof path, "%s/etcd.log", e->dir);
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f)
    return buf;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, size > (long)cap - 1 ? size - (long)cap + 1 : 0, SEEK_SET);
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static void exec_etcd(const tagc_test_etcd *e, int single) {
  char data[300], log[300], client[64], peer[64], cert[300], key[300];
  snprintf(data, sizeof data, "%s/data", e->dir);
  snprintf(log, sizeof log, "%s/etcd.log", e->dir);
  snprintf(client, sizeof client, "%s://127.0.0.1:%d", e->tls ? "https" : "http", e->client_port);
  snprintf(peer, sizeof peer, "http://127.0.0.1:%d", e->peer_port);
  snprintf(cert, sizeof cert, "%s/server.pem", e->dir);
  snprintf(key, sizeof key, "%s/server.key", e->dir);
  int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const char *argv[40] = {"etcd", "--name", e->name, "--data-dir", data, "--listen-client-urls",
                          client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                          "--initial-advertise-peer-urls", peer, "--initial-cluster",
                          e->initial_cluster, "--log-level", "warn"};
  int n = 17;
  if (single) {
    const char *fast[] = {"--heartbeat-interval", "50", "--election-timeout", "500"};
    for (size_t i = 0; i < sizeof fast / sizeof fast[0]; i++)
      argv[n++] = fast[i];
  }
  if (e->tls) {
    const char *tls[] = {"--cert-file", cert, "--key-file", key, "--trusted-ca-file", e->ca_file,
                         "--client-cert-auth"};
    for (size_t i = 0; i < sizeof tls / sizeof tls[0]; i++)
      argv[n++] = tls[i];
  }
  argv[n] = NULL;
  execv(etcd_binary(), (char *const *)argv);
  _exit(127);
}

static tagc_status spawn(tagc_test_etcd *e) {
  pid_t pid = fork();
  if (pid < 0)
    return tagc_errorf(TAGC_EIO, "fork: %s", strerror(errno));
  if (pid == 0)
    exec_etcd(e, strchr(e->initial_cluster, ',') == NULL);
  e->pid = pid;
  return TAGC_OK;
}

static tagc_status wait_healthy(tagc_test_etcd *e, double deadline) {
  char tail[600];
  while (tagc_now() < deadline) {
    int status;
    if (waitpid(e->pid, &status, WNOHANG) == e->pid) {
      e->pid = 0;
      return tagc_errorf(TAGC_EIO, "etcd %s exited with status %d: %s", e->name, status,
                         log_tail(e, tail, sizeof tail));
    }
    if (healthy(e))
      return TAGC_OK;
    tagc_sleep(0.05);
  }
  return tagc_errorf(TAGC_ETIMEDOUT, "etcd %s was not healthy in time: %s", e->name,
                     log_tail(e, tail, sizeof tail));
}

/* A CA, and server (for 127.0.0.1) and client certificates it signed, in e->dir. */
static tagc_status make_certificates(tagc_test_etcd *e) {
  static const char script[] =
      "set -e; cd '%s'; k='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';"
      "openssl req -x509 $k -keyout ca.key -out ca.pem -days 1 -subj /CN=tagc-test-ca;"
      "for who in server client; do"
      "  openssl req $k -keyout $who.key -out $who.csr -subj /CN=127.0.0.1;"
      "  printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > $who.ext;"
      "  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1"
      "    -extfile $who.ext -out $who.pem;"
      "done";
  char cmd[sizeof script + 300];
  snprintf(cmd, sizeof cmd, script, e->dir);
  char quiet[sizeof cmd + 32];
  snprintf(quiet, sizeof quiet, "(%s) >/dev/null 2>&1", cmd);
  if (system(quiet) != 0)
    return tagc_errorf(TAGC_EIO, "openssl could not make test certificates in %s", e->dir);
  snprintf(e->ca_file, sizeof e->ca_file, "%s/ca.pem", e->dir);
  snprintf(e->cert_file, sizeof e->cert_file, "%s/client.pem", e->dir);
  snprintf(e->key_file, sizeof e->key_file, "%s/client.key", e->dir);
  return TAGC_OK;
}

/* Zeroes e, checks the binary, and makes its temporary directory and ports. */
static tagc_status prepare(tagc_test_etcd *e, int tls, const char *name) {
  memset(e, 0, sizeof *e);
  if (access(etcd_binary(), X_OK) != 0)
    return tagc_errorf(TAGC_EUNSUPPORTED, "no etcd binary at %s", etcd_binary());
  if (tls && access("/usr/bin/openssl", X_OK) != 0)
    return tagc_errorf(TAGC_EUNSUPPORTED, "no /usr/bin/openssl to make test certificates");
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const char *tmp = getenv("TMPDIR");
  snprintf(e->dir, sizeof e->dir, "%s/tagc-etcd-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(e->dir))
    return tagc_errorf(TAGC_EIO, "mkdtemp %s: %s", e->dir, strerror(errno));
  e->tls = tls;
  snprintf(e->name, sizeof e->name, "%s", name);
  e->client_port = tagc_test_free_port();
  e->peer_port = tagc_test_free_port();
  snprintf(e->url, sizeof e->url, "%s://127.0.0.1:%d", tls ? "https" : "http", e->client_port);
  return tls ? make_certificates(e) : TAGC_OK;
}

static tagc_status start(tagc_test_etcd *e, int tls) {
  tagc_status st = TAGC_EIO;
  /* A port taken by someone else between picking and binding makes etcd exit: try again. */
  for (int attempt = 0; attempt < 3 && st != TAGC_OK; attempt++) {
    st = prepare(e, tls, "default");
    if (st == TAGC_OK) {
      snprintf(e->initial_cluster, sizeof e->initial_cluster, "default=http://127.0.0.1:%d", e->peer_port);
      st = spawn(e);
    }
    if (st == TAGC_OK)
      st = wait_healthy(e, tagc_now() + 15);
    if (st != TAGC_OK) {
      tagc_status keep = st;
      tagc_test_etcd_stop(e);
      st = keep;
      if (st == TAGC_EUNSUPPORTED)
        break;
    }
  }
  return st;
}

tagc_status tagc_test_etcd_start(tagc_test_etcd *e) { return start(e, 0); }

tagc_status tagc_test_etcd_start_tls(tagc_test_etcd *e) { return start(e, 1); }

tagc_status tagc_test_etcd_cluster_start(tagc_test_etcd_cluster *cl, int n) {
  memset(cl, 0, sizeof *cl);
  if (n < 1 || n > TAGC_TEST_ETCD_MAX_MEMBERS)
    return tagc_errorf(TAGC_EINVAL, "cluster of %d members", n);
  char initial[512] = "";
  tagc_status st = TAGC_OK;
  for (int i = 0; i < n && st == TAGC_OK; i++) {
    char name[16];
    snprintf(name, sizeof name, "m%d", i);
    st = prepare(&cl->member[i], 0, name);
    cl->n = i + 1;
    size_t used = strlen(initial), eused = strlen(cl->endpoints);
    snprintf(initial + used, sizeof initial - used, "%s%s=http://127.0.0.1:%d", i ? "," : "", name,
             cl->member[i].peer_port);
    snprintf(cl->endpoints + eused, sizeof cl->endpoints - eused, "%s%s", i ? "," : "", cl->member[i].url);
  }
  for (int i = 0; i < n && st == TAGC_OK; i++) {
    snprintf(cl->member[i].initial_cluster, sizeof cl->member[i].initial_cluster, "%s", initial);
    st = spawn(&cl->member[i]);
  }
  double deadline = tagc_now() + 20;
  for (int i = 0; i < n && st == TAGC_OK; i++)
    st = wait_healthy(&cl->member[i], deadline);
  if (st != TAGC_OK) {
    tagc_status keep = st;
    tagc_test_etcd_cluster_stop(cl);
    st = keep;
  }
  return st;
}

void tagc_test_etcd_cluster_stop(tagc_test_etcd_cluster *cl) {
  for (int i = 0; i < cl->n; i++)
    tagc_test_etcd_stop(&cl->member[i]);
  cl->n = 0;
}

/* Sends sig and reaps the process, waiting up to timeout_s; 0 once it is gone. */
static int signal_and_reap(pid_t pid, int sig, double timeout_s) {
  kill(pid, sig);
  double deadline = tagc_now() + timeout_s;
  while (tagc_now() < deadline) {
    pid_t r = waitpid(pid, NULL, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD))
      return 0;
    tagc_sleep(0.01);
  }
  return -1;
}

tagc_status tagc_test_etcd_kill(tagc_test_etcd *e) {
  if (e->pid > 0 && signal_and_reap(e->pid, SIGKILL, 10) != 0)
    return tagc_errorf(TAGC_ETIMEDOUT, "etcd pid %d did not die", (int)e->pid);
  e->pid = 0;
  return TAGC_OK;
}

static tagc_status send_signal(tagc_test_etcd *e, int sig) {
  if (e->pid <= 0)
    return tagc_errorf(TAGC_EINVAL, "etcd is not running");
  if (kill(e->pid, sig) != 0)
    return tagc_errorf(TAGC_EIO, "kill(%d, %d): %s", (int)e->pid, sig, strerror(errno));
  return TAGC_OK;
}

/* True when every thread of pid is stopped (state 'T' in /proc/<pid>/task/<tid>/stat). */
static int all_threads_stopped(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d)
    return 0;
  int stopped = 1;
  struct dirent *ent;
  while (stopped && (ent = readdir(d)) != NULL) {
    if (ent->d_name[0] == '.')
      continue;
    char stat_path[sizeof path + sizeof ent->d_name + 8], line[512];
    snprintf(stat_path, sizeof stat_path, "%s/%s/stat", path, ent->d_name);
    FILE *f = fopen(stat_path, "r");
    if (!f)
      continue; /* the thread just exited */
    const char *after_name = fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL;
    fclose(f);
    stopped = after_name && after_name[1] == ' ' && after_name[2] == 'T';
  }
  closedir(d);
  return stopped;
}

tagc_status tagc_test_etcd_pause(tagc_test_etcd *e) {
  TAGC_CHECK(send_signal(e, SIGSTOP));
  /* kill() returns before threads running on other CPUs have stopped: wait for them. */
  double deadline = tagc_now() + 2;
  while (!all_threads_stopped(e->pid)) {
    if (tagc_now() > deadline)
      return tagc_errorf(TAGC_ETIMEDOUT, "etcd pid %d did not stop", (int)e->pid);
    tagc_sleep(0.005);
  }
  return TAGC_OK;
}

tagc_status tagc_test_etcd_resume(tagc_test_etcd *e) { return send_signal(e, SIGCONT); }

tagc_status tagc_test_etcd_restart(tagc_test_etcd *e) {
  if (e->pid > 0)
    return tagc_errorf(TAGC_EINVAL, "etcd pid %d is still running", (int)e->pid);
  TAGC_CHECK(spawn(e));
  return wait_healthy(e, tagc_now() + 15);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

void tagc_test_etcd_stop(tagc_test_etcd *e) {
  if (e->pid > 0)
    kill(e->pid, SIGCONT); /* a paused server cannot act on SIGTERM */
  if (e->pid > 0 && signal_and_reap(e->pid, SIGTERM, 5) != 0)
    signal_and_reap(e->pid, SIGKILL, 5);
  e->pid = 0;
  if (e->dir[0])
    nftw(e->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  e->dir[0] = '\0';
}
