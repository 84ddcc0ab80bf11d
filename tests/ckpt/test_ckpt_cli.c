/* tagctl ckpt ls|verify|inspect through the tagc-ckpt-tool executable: outputs and exit codes
 * (0 ok, 1 invalid checkpoint, 2 usage or bad input). ls's quick check says that it leaves
 * the payload unverified, and catches an edited manifest. argv[1] = path of the tool. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "common/log.h"
#include "fixture.h"
#include "test.h"

static const char *tool;
static char output[65536];

/* Runs the tool with up to two arguments; stdout and stderr go to `output`. */
static int run_tool(const char *a, const char *b) {
  char log[] = "/tmp/tagc-cli-out-XXXXXX";
  int fd = mkstemp(log);
  if (fd < 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    const char *argv[] = {tool, a, b, NULL};
    execv(tool, (char *const *)argv);
    _exit(127);
  }
  int status;
  waitpid(pid, &status, 0);
  ssize_t n = pread(fd, output, sizeof output - 1, 0);
  output[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Runs `ckpt a b` and checks its exit status and that its output contains needle. */
static void expect_run(const char *a, const char *b, int code, const char *needle) {
  int rc = run_tool(a, b);
  const char *shown = b ? b : "";
  CHECK_MSG(rc == code, "ckpt %s %s exited %d, expected %d; output:\n%s", a, shown, rc, code, output);
  CHECK_MSG(strstr(output, needle) != NULL, "ckpt %s %s: output lacks '%s':\n%s", a, shown, needle, output);
}

int main(int argc, char **argv) {
  if (argc < 2)
    TEST_SKIP("needs the path of tagc-ckpt-tool");
  tool = argv[1];
  tagc_log_configure("error", TAGC_LOG_TEXT);
  char *dir = fx_tempdir("cli");
  json_t *model = json_pack("{s:s, s:i}", "name", "gpt-tiny", "layers", 2);
  tagc_ckpt_meta meta = {.model = model};
  CHECK_OK(fx_save_inproc(dir, 100, 2, 1, &meta));
  CHECK_OK(fx_save_inproc(dir, 200, 3, 2, &meta));
  char tmp[4200], step200[4200], step100[4200], shard[4300];
  snprintf(tmp, sizeof tmp, "%s/step-300.tmp", dir);
  mkdir(tmp, 0755);
  snprintf(step100, sizeof step100, "%s/step-100", dir);
  snprintf(step200, sizeof step200, "%s/step-200", dir);

  expect_run("ls", dir, 0, "valid (LATEST), payload unverified");
  CHECK(strstr(output, "partial") != NULL);
  CHECK(strstr(output, "200          3 ") != NULL); /* step 200 saved by 3 ranks */
  expect_run("verify", dir, 0, "step-200: ok (step 200, 3 files)");
  expect_run("verify", step100, 0, "ok (step 100, 2 files)");
  expect_run("inspect", dir, 0, "gpt-tiny");
  CHECK(strstr(output, "step         200") != NULL);
  CHECK(strstr(output, "[0,344) [344,688) [688,1031)") != NULL); /* embed's ranges by rank */
  CHECK(strstr(output, "residual") != NULL);
  expect_run("inspect", step100, 0, "world size   2");

  /* Corrupt two files of step 200: verify names both and exits 1; ls marks it. */
  snprintf(shard, sizeof shard, "%s/rank-00001.bin", step200);
  CHECK_EQ_INT(fx_flip_byte(shard, 2000), 0);
  snprintf(shard, sizeof shard, "%s/rank-00002.bin", step200);
  CHECK_EQ_INT(fx_truncate(shard, 100), 0);
  expect_run("verify", dir, 1, "rank-00001.bin: CRC32C of the contents");
  CHECK(strstr(output, "rank-00002.bin: 100 bytes, manifest says") != NULL);
  CHECK(strstr(output, "step-100: ok") != NULL);
  expect_run("verify", step200, 1, "INVALID");
  expect_run("ls", dir, 0, "INVALID");
  expect_run("inspect", dir, 0, "step         100"); /* newest valid */

  /* An edited manifest (same length, still valid JSON): its own checksum fails, in ls too. */
  char manifest[4300], text[65536];
  snprintf(manifest, sizeof manifest, "%s/manifest.json", step100);
  FILE *f = fopen(manifest, "r");
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f)
    fclose(f);
  text[n] = '\0';
  char *name = strstr(text, "gpt-tiny");
  CHECK(name != NULL);
  if (name)
    memcpy(name, "gpt-huge", 8);
  CHECK_EQ_INT(fx_write_text(manifest, text), 0);
  expect_run("ls", dir, 0, "edited or damaged");
  CHECK_MSG(strstr(output, " valid") == NULL, "ls still lists a valid checkpoint:\n%s", output);
  expect_run("verify", step100, 1, "edited or damaged");

  expect_run("ls", NULL, 2, "usage");
  expect_run("frobnicate", dir, 2, "usage");
  expect_run("verify", "/nonexistent/tagc-ckpt", 2, "not a directory");
  char empty[4200];
  snprintf(empty, sizeof empty, "%s/empty", dir);
  mkdir(empty, 0755);
  expect_run("verify", empty, 1, "no committed checkpoints");
  expect_run("ls", empty, 0, "no checkpoints");

  json_decref(model);
  fx_rmtree(dir);
  free(dir);
  return TEST_END();
}
