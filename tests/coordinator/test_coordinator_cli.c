/* tagc-coordinator's bad input: each case exits non-zero within seconds with one clear
 * "tagc-coordinator: ..." line last on stderr; --help exits 0. */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/timeutil.h"
#include "etcd_server.h"
#include "test.h"

static char exe[PATH_MAX];
static char out_path[64];

/* Runs exe with args; returns the exit status (-1 when it had to be killed after limit_s).
 * stdout and stderr go to out_path. */
static int run(char *const args[], double limit_s) {
  char *argv[16] = {exe};
  for (int i = 0; args[i] && i < 14; i++)
    argv[i + 1] = args[i];
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(exe, argv);
    _exit(127);
  }
  int status;
  for (double t0 = tagc_now(); tagc_now() - t0 < limit_s; tagc_sleep(0.05)) {
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

/* The last line of the output, and how many lines start with "tagc-coordinator:". */
static int error_lines(char *last, size_t cap) {
  FILE *f = fopen(out_path, "r");
  char line[4096];
  int n = 0;
  last[0] = '\0';
  while (f && fgets(line, sizeof line, f)) {
    n += strncmp(line, "tagc-coordinator:", 17) == 0;
    snprintf(last, cap, "%s", line);
  }
  if (f)
    fclose(f);
  return n;
}

static void expect_error(char *const args[], int code, const char *needle) {
  char last[4096];
  int rc = run(args, 10);
  CHECK_MSG(rc == code, "%s ...: exit %d, expected %d", args[0], rc, code);
  CHECK_EQ_INT(error_lines(last, sizeof last), 1);
  CHECK_MSG(strncmp(last, "tagc-coordinator: ", 18) == 0 && strstr(last, needle),
            "last line '%s' lacks '%s'", last, needle);
}

int main(void) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = '\0';
  snprintf(exe, sizeof exe, "%s/tagc-coordinator", dirname(self));
  if (access(exe, X_OK) != 0)
    TEST_SKIP("tagc-coordinator is not built next to this test");
  snprintf(out_path, sizeof out_path, "/tmp/tagc-coord-cli.%d", (int)getpid());

  expect_error((char *[]){"--bogus", NULL}, 2, "bogus");
  expect_error((char *[]){"--etcd", "http://127.0.0.1:1", NULL}, 2, "--job");
  expect_error((char *[]){"--job", "bad/id", NULL}, 2, "bad/id");
  expect_error((char *[]){"--job", "j", "--min-workers", "0", NULL}, 2, "min-workers");
  expect_error((char *[]){"--job", "j", "--min-workers", "3", "--max-workers", "2", NULL}, 2,
               "--max-workers");
  expect_error((char *[]){"--job", "j", "--settle", "fast", NULL}, 2, "settle");
  expect_error((char *[]){"--job", "j", "--http", "nowhere", NULL}, 2, "--http");
  expect_error((char *[]){"--job", "j", "--etcd", "ftp:/x", NULL}, 2, "etcd");

  /* Nothing listens on that port: one clear line within the etcd timeout, exit 1. */
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d", tagc_test_free_port());
  double t0 = tagc_now();
  expect_error((char *[]){"--job", "j", "--etcd", url, "--etcd-timeout", "1", NULL}, 1, url);
  CHECK_MSG(tagc_now() - t0 < 5, "unreachable etcd took %.1f s to report", tagc_now() - t0);

  CHECK_EQ_INT(run((char *[]){"--help", NULL}, 10), 0);
  char last[4096];
  CHECK_EQ_INT(error_lines(last, sizeof last), 0);
  FILE *f = fopen(out_path, "r");
  char help[8192] = "";
  size_t got = f ? fread(help, 1, sizeof help - 1, f) : 0;
  help[got] = '\0';
  if (f)
    fclose(f);
  CHECK(strstr(help, "--min-workers") && strstr(help, "--lease-ttl") && strstr(help, "--http"));
  unlink(out_path);
  return TEST_END();
}
