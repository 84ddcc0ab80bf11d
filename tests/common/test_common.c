/* Unit tests of common/: CRC32C, base64, JSON helpers, option parsing, log filter. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base64.h"
#include "common/crc32c.h"
#include "common/fsutil.h"
#include "common/json.h"
#include "common/log.h"
#include "common/options.h"
#include "common/status.h"
#include "test.h"

static void test_crc32c(void) {
  CHECK_EQ_INT(tagc_crc32c(0, "123456789", 9), 0xe3069283u); /* RFC 3720 check value */
  CHECK_EQ_INT(tagc_crc32c_portable(0, "123456789", 9), 0xe3069283u);
  unsigned char buf[4099];
  for (size_t i = 0; i < sizeof buf; i++)
    buf[i] = (unsigned char)(i * 7 + 3);
  uint32_t whole = tagc_crc32c(0, buf, sizeof buf);
  CHECK_EQ_INT(tagc_crc32c_portable(0, buf, sizeof buf), whole);
  CHECK_EQ_INT(tagc_crc32c(tagc_crc32c(0, buf, 1000), buf + 1000, sizeof buf - 1000), whole);
  buf[17] ^= 1;
  CHECK(tagc_crc32c(0, buf, sizeof buf) != whole);
}

static void test_base64(void) {
  const char *cases[][2] = {{"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"},
                            {"foob", "Zm9vYg=="}, {"/tagc/job/gen", "L3RhZ2Mvam9iL2dlbg=="}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char enc[64];
    tagc_base64_encode(cases[i][0], strlen(cases[i][0]), enc);
    CHECK_EQ_STR(enc, cases[i][1]);
    unsigned char *dec;
    size_t n;
    CHECK_OK(tagc_base64_decode_new(cases[i][1], &dec, &n));
    CHECK_EQ_INT(n, strlen(cases[i][0]));
    CHECK(memcmp(dec, cases[i][0], n) == 0);
    free(dec);
  }
  unsigned char out[16];
  size_t n;
  CHECK_EQ_INT(tagc_base64_decode("Zg=", 3, out, sizeof out, &n), TAGC_EPROTO);
  CHECK_EQ_INT(tagc_base64_decode("Z*==", 4, out, sizeof out, &n), TAGC_EPROTO);
  CHECK_EQ_INT(tagc_base64_decode("Z=g=", 4, out, sizeof out, &n), TAGC_EPROTO);
  CHECK_EQ_INT(tagc_base64_decode("Zg==Zg==", 8, out, sizeof out, &n), TAGC_EPROTO);
  CHECK_EQ_INT(tagc_base64_decode("Zg==", 4, out, 0, &n), TAGC_EPROTO);
}

/* Texts that decode to more than the buffer holds are refused before anything is written:
 * the byte after the buffer (a canary in a larger array) keeps its value, and so does the
 * buffer itself. */
static void test_base64_capacity(void) {
  const char *text = "Zm9vYmFy"; /* "foobar": 6 bytes, 7 with the NUL */
  unsigned char buf[16];
  size_t n = 99;
  for (size_t cap = 0; cap < 7; cap++) {
    memset(buf, 0xa5, sizeof buf);
    CHECK_EQ_INT(tagc_base64_decode(text, strlen(text), buf, cap, &n), TAGC_EPROTO);
    for (size_t i = 0; i < sizeof buf; i++)
      CHECK_EQ_INT(buf[i], 0xa5);
    CHECK_EQ_INT(n, 99);
  }
  CHECK_OK(tagc_base64_decode(text, strlen(text), buf, 7, &n));
  CHECK_EQ_INT(n, 6);
  CHECK(memcmp(buf, "foobar", 7) == 0);
  CHECK_EQ_INT(buf[7], 0xa5);
  /* padding shortens the result: "Zm8=" is 2 bytes, "Zg==" 1 */
  CHECK_OK(tagc_base64_decode("Zm8=", 4, buf, 3, &n));
  CHECK_EQ_INT(n, 2);
  CHECK_EQ_INT(tagc_base64_decode("Zm8=", 4, buf, 2, &n), TAGC_EPROTO);
  CHECK_OK(tagc_base64_decode("Zg==", 4, buf, 2, &n));
  CHECK_EQ_INT(n, 1);
  CHECK_OK(tagc_base64_decode("", 0, buf, 1, &n));
  CHECK_EQ_INT(n, 0);
  /* An oversize value where a fixed-size one is expected (the NCCL unique id: 128 bytes):
   * 4 KiB of text into a 129-byte buffer on the heap, so that ASan sees any overrun. */
  size_t len = 4096;
  char *big = malloc(len);
  unsigned char *id = malloc(129);
  CHECK(big && id);
  if (big && id) {
    memset(big, 'A', len);
    CHECK_EQ_INT(tagc_base64_decode(big, len, id, 129, &n), TAGC_EPROTO);
    CHECK(strstr(tagc_last_error(), "3072 bytes") != NULL);
    CHECK_EQ_INT(tagc_base64_decode(big, 172, id, 129, &n), TAGC_EPROTO); /* 129 bytes */
    unsigned char raw[128];
    for (size_t i = 0; i < sizeof raw; i++)
      raw[i] = (unsigned char)(i * 37 + 1);
    tagc_base64_encode(raw, sizeof raw, big); /* 172 characters ending in "==" */
    CHECK_OK(tagc_base64_decode(big, strlen(big), id, 129, &n));
    CHECK_EQ_INT(n, 128);
    CHECK(memcmp(id, raw, sizeof raw) == 0);
    CHECK_EQ_INT(tagc_base64_decode(big, strlen(big), id, 128, &n), TAGC_EPROTO);
  }
  free(big);
  free(id);
}

static void test_json(void) {
  json_t *v;
  CHECK_EQ_INT(tagc_json_parse("{\"a\":", 5, &v), TAGC_EPROTO);
  CHECK_OK(tagc_json_parse("{\"rev\":\"9223372036854775807\",\"n\":3,\"s\":\"x\",\"bad\":\"12x\"}", 55, &v));
  int64_t x;
  CHECK_OK(tagc_json_get_i64_str(v, "rev", 0, &x));
  CHECK_EQ_INT(x, INT64_MAX);
  CHECK_OK(tagc_json_get_i64_str(v, "n", 0, &x));
  CHECK_EQ_INT(x, 3);
  tagc_errorf(TAGC_EIO, "earlier detail");
  CHECK_OK(tagc_json_get_i64_str(v, "missing", 42, &x));
  CHECK_EQ_STR(tagc_last_error(), "earlier detail"); /* an absent optional key sets no detail */
  CHECK_EQ_INT(x, 42);
  CHECK_EQ_INT(tagc_json_get_i64_str(v, "bad", 0, &x), TAGC_EPROTO);
  CHECK_EQ_INT(tagc_json_get_int(v, "s", &x), TAGC_EPROTO);
  CHECK_EQ_INT(tagc_json_get_int(v, "nope", &x), TAGC_ENOTFOUND);
  json_decref(v);
}

typedef struct cfg {
  int64_t steps;
  double lr;
  int verbose;
  char *out;
  char *compress;
} cfg;

static const tagc_opt opts[] = {
    {"steps", TAGC_OPT_INT, offsetof(cfg, steps), "10", 1, 1e6, NULL, "steps to run"},
    {"lr", TAGC_OPT_DOUBLE, offsetof(cfg, lr), "0.001", 0, 1, NULL, "learning rate"},
    {"verbose", TAGC_OPT_BOOL, offsetof(cfg, verbose), "false", 0, -1, NULL, "talk more"},
    {"out", TAGC_OPT_STRING, offsetof(cfg, out), "out", 0, -1, NULL, "output directory"},
    {"compress", TAGC_OPT_CHOICE, offsetof(cfg, compress), "tagc", 0, -1, "tagc|bf16|none", "policy"},
};
static const tagc_opt_program prog = {"t", NULL, "test program", opts, sizeof opts / sizeof opts[0]};

static tagc_status parse(cfg *c, int argc, char **argv) {
  memset(c, 0, sizeof *c);
  int help, np;
  char *pos[2];
  tagc_status st = tagc_opts_parse(&prog, c, argc, argv, pos, 2, &np, &help);
  return st;
}

static void test_options(void) {
  cfg c;
  char *a1[] = {"t", "--steps", "20", "--lr=0.5", "--verbose", "--compress", "none"};
  CHECK_OK(parse(&c, 7, a1));
  CHECK_EQ_INT(c.steps, 20);
  CHECK_NEAR(c.lr, 0.5, 0);
  CHECK_EQ_INT(c.verbose, 1);
  CHECK_EQ_STR(c.compress, "none");
  CHECK_EQ_STR(c.out, "out");
  tagc_opts_free(&prog, &c);

  char *bad[][3] = {{"t", "--steps", "0"},       {"t", "--steps", "x1"}, {"t", "--lr", "nan"},
                    {"t", "--compress", "zip"}, {"t", "--bogus", "1"},  {"t", "--verbose=maybe", "a"},
                    {"t", "a", "b"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tagc_status st = parse(&c, i == 6 ? 3 : (i == 5 ? 2 : 3), bad[i]);
    if (i == 6) {
      CHECK_OK(st); /* two positionals fit */
    } else {
      CHECK_MSG(st == TAGC_EINVAL, "case %zu gave %d", i, st);
      CHECK(strlen(tagc_last_error()) > 0 && strchr(tagc_last_error(), '\n') == NULL);
    }
    tagc_opts_free(&prog, &c);
  }
  char *missing[] = {"t", "--steps"};
  CHECK_EQ_INT(parse(&c, 2, missing), TAGC_EINVAL);
  tagc_opts_free(&prog, &c);

  /* precedence: flag > env > file > default */
  char path[] = "/tmp/tagc-test-opts-XXXXXX";
  int fd = mkstemp(path);
  const char *js = "{\"steps\": 30, \"lr\": 0.25, \"out\": \"fromfile\"}";
  CHECK(write(fd, js, strlen(js)) == (ssize_t)strlen(js));
  close(fd);
  setenv("TAGC_LR", "0.125", 1);
  char *a2[] = {"t", "--config", path, "--steps", "40"};
  CHECK_OK(parse(&c, 5, a2));
  CHECK_EQ_INT(c.steps, 40);
  CHECK_NEAR(c.lr, 0.125, 0);
  CHECK_EQ_STR(c.out, "fromfile");
  tagc_opts_free(&prog, &c);
  unsetenv("TAGC_LR");

  const char *badjs[] = {"{\"steps\": ", "{\"stepz\": 3}", "{\"steps\": \"3\"}", "[1]"};
  for (size_t i = 0; i < 4; i++) {
    fd = open(path, O_WRONLY | O_TRUNC);
    CHECK(write(fd, badjs[i], strlen(badjs[i])) == (ssize_t)strlen(badjs[i]));
    close(fd);
    char *a3[] = {"t", "--config", path};
    tagc_status st = parse(&c, 3, a3);
    CHECK_MSG(st == TAGC_EINVAL || st == TAGC_EPROTO, "bad json %zu gave %d", i, st);
    tagc_opts_free(&prog, &c);
  }
  unlink(path);
  char *a4[] = {"t", "--config", "/nonexistent/x.json"};
  CHECK_EQ_INT(parse(&c, 3, a4), TAGC_ENOTFOUND);
  tagc_opts_free(&prog, &c);
}

static void test_log(void) {
  CHECK_OK(tagc_log_configure("warn,comm=debug", TAGC_LOG_JSON));
  CHECK(tagc_log_enabled(TAGC_LOG_DEBUG, "comm"));
  CHECK(!tagc_log_enabled(TAGC_LOG_INFO, "etcd"));
  CHECK(tagc_log_enabled(TAGC_LOG_ERROR, "etcd"));
  CHECK_EQ_INT(tagc_log_configure("loud", TAGC_LOG_JSON), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_log_configure("x=", TAGC_LOG_JSON), TAGC_EINVAL);
  CHECK_OK(tagc_log_configure("info", TAGC_LOG_AUTO));
}

static void test_mkdir_p(void) {
  char root[] = "/tmp/tagc-mkdir-XXXXXX";
  CHECK(mkdtemp(root) != NULL);
  char path[512], file[256];
  snprintf(path, sizeof path, "%s/a/b//c/", root);
  CHECK_OK(tagc_mkdir_p(path));
  struct stat sb;
  snprintf(path, sizeof path, "%s/a/b/c", root);
  CHECK(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode));
  CHECK_OK(tagc_mkdir_p(path)); /* exists: fine */
  snprintf(file, sizeof file, "%s/a/f", root);
  int fd = open(file, O_CREAT | O_WRONLY, 0644);
  CHECK(fd >= 0);
  close(fd);
  snprintf(path, sizeof path, "%s/g", file);
  CHECK_EQ_INT(tagc_mkdir_p(file), TAGC_EIO); /* a file in the way */
  CHECK(strstr(tagc_last_error(), "a file of that name exists") != NULL);
  CHECK_EQ_INT(tagc_mkdir_p(path), TAGC_EIO); /* below a file */
  CHECK_EQ_INT(tagc_mkdir_p(""), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_mkdir_p(NULL), TAGC_EINVAL);
  unlink(file);
  const char *dirs[] = {"a/b/c", "a/b", "a", ""};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
    CHECK(rmdir(path) == 0);
  }
}

/* A write that stops part-way (here at RLIMIT_FSIZE, as at a full disk) leaves the file as it
 * was before the line: whole lines only. */
static void test_append_whole(void) {
  char path[] = "/tmp/tagc-append-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  CHECK_OK(tagc_append_whole(fd, "{\"a\":1}\n", 8, path));
  struct rlimit old, lim = {40, 40};
  CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
  lim.rlim_max = old.rlim_max;
  signal(SIGXFSZ, SIG_IGN); /* EFBIG instead of the signal */
  CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  const char *line = "{\"b\":\"a line longer than what is left of the limit\"}\n";
  CHECK_EQ_INT(tagc_append_whole(fd, line, strlen(line), path), TAGC_EIO);
  CHECK(strstr(tagc_last_error(), path) == tagc_last_error());
  CHECK(strstr(tagc_last_error(), "too large") != NULL);
  CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
  signal(SIGXFSZ, SIG_DFL);
  struct stat sb;
  CHECK(fstat(fd, &sb) == 0);
  CHECK_EQ_INT(sb.st_size, 8); /* cut back to the line before */
  CHECK_OK(tagc_append_whole(fd, "{\"c\":3}\n", 8, path));
  char buf[64] = {0};
  CHECK_EQ_INT(pread(fd, buf, sizeof buf - 1, 0), 16);
  CHECK_EQ_STR(buf, "{\"a\":1}\n{\"c\":3}\n");
  int full = open("/dev/full", O_WRONLY);
  if (full >= 0) { /* the error names the path and says why */
    CHECK_EQ_INT(tagc_append_whole(full, "x\n", 2, "/dev/full"), TAGC_EIO);
    CHECK(strstr(tagc_last_error(), "No space left on device") != NULL);
    close(full);
  }
  close(fd);
  unlink(path);
}

static tagc_status fail_with(tagc_status st, const char *what) { return tagc_errorf(st, "%s", what); }

static void test_error_idiom(void) {
  errno = ENOENT;
  CHECK_EQ_INT(tagc_errnof(TAGC_ENOTFOUND, "open %s", "x"), TAGC_ENOTFOUND);
  CHECK(strstr(tagc_last_error(), "open x: ") == tagc_last_error());
  CHECK(strstr(tagc_last_error(), "No such file") != NULL);
  CHECK_EQ_INT(errno, ENOENT);
  errno = ENOMEM; /* an allocation failure is TAGC_ENOMEM whatever the caller passes */
  CHECK_EQ_INT(tagc_errnof(TAGC_EIO, "mmap"), TAGC_ENOMEM);
  errno = ENOSPC;
  CHECK_EQ_INT(tagc_errnof(TAGC_EIO, "write"), TAGC_EIO);

  tagc_status st = TAGC_OK; /* the first error wins, with its detail */
  TAGC_CHECK_IGNORE(fail_with(TAGC_EIO, "first"), st);
  TAGC_CHECK_IGNORE(fail_with(TAGC_EPEER, "second"), st);
  CHECK_EQ_INT(st, TAGC_EIO);
  CHECK_EQ_STR(tagc_last_error(), "first");
  int evaluated = 0;
  TAGC_CHECK_IGNORE((evaluated++, TAGC_OK), st);
  CHECK_EQ_INT(evaluated, 1);
  CHECK_EQ_INT(st, TAGC_EIO);
}

int main(void) {
  test_crc32c();
  test_error_idiom();
  test_mkdir_p();
  test_append_whole();
  test_base64();
  test_base64_capacity();
  test_json();
  test_options();
  test_log();
  return TEST_END();
}
