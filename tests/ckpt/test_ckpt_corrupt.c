/* Defective checkpoints: a flipped byte, a truncated or missing file, a bad manifest, wrong
 * magic or version -> a clear error, and the loader falls back to the previous checkpoint.
 * Bad arguments to the writer and commit give errors, never crashes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>

#include "ckpt/ckpt.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "fixture.h"
#include "test.h"

static char dir[4096 + 64];

/* Fresh root with valid steps 10 (seed 1) and 20 (seed 2). */
static void setup(void) {
  char *d = fx_tempdir("corrupt");
  snprintf(dir, sizeof dir, "%s", d);
  free(d);
  CHECK_OK(fx_save_inproc(dir, 10, 2, 1, NULL));
  CHECK_OK(fx_save_inproc(dir, 20, 2, 2, NULL));
}

static void teardown(void) { fx_rmtree(dir); }

static char *step_file(int64_t step, const char *name) {
  static char path[8192];
  snprintf(path, sizeof path, "%s/step-%lld/%s", dir, (long long)step, name);
  return path;
}

/* The newest valid checkpoint at `level` is step 10 and its data loads; opening step 20
 * fails with `want_st` and a message containing `needle`. */
static void expect_fallback(const char *what, tagc_ckpt_verify level, tagc_status want_st, const char *needle) {
  char path[8192];
  snprintf(path, sizeof path, "%s/step-20", dir);
  tagc_ckpt_reader *rd;
  tagc_status st = tagc_ckpt_open(path, level, &rd);
  CHECK_MSG(st == want_st, "%s: open gave %d (%s), expected %d", what, st, tagc_last_error(), want_st);
  CHECK_MSG(strstr(tagc_last_error(), needle) != NULL, "%s: error '%s' lacks '%s'", what, tagc_last_error(), needle);
  CHECK(rd == NULL);
  tagc_ckpt_close(rd);
  CHECK_OK(tagc_ckpt_find_latest_valid(dir, level, &rd));
  if (rd) {
    CHECK_MSG(tagc_ckpt_reader_step(rd) == 10, "%s: fell back to step %lld", what, (long long)tagc_ckpt_reader_step(rd));
    CHECK_MSG(fx_check_load(rd, 2, 1) == 0, "%s: fallback data differs", what);
  }
  tagc_ckpt_close(rd);
}

static void test_flipped_payload_byte(void) {
  setup();
  CHECK_EQ_INT(fx_flip_byte(step_file(20, "rank-00001.bin"), 1000), 0);
  /* The quick check trusts the trailer; the full check recomputes the CRC. */
  tagc_ckpt_reader *rd;
  CHECK_OK(tagc_ckpt_open(step_file(20, ""), TAGC_CKPT_VERIFY_QUICK, &rd));
  if (rd) {
    CHECK_EQ_INT(tagc_ckpt_verify_files(rd, 0, 2), TAGC_OK);
    CHECK_EQ_INT(tagc_ckpt_verify_files(rd, 1, 2), TAGC_ECORRUPT);
  }
  tagc_ckpt_close(rd);
  expect_fallback("flipped byte", TAGC_CKPT_VERIFY_FULL, TAGC_ECORRUPT, "CRC32C");
  teardown();
}

/* The fallback logs exactly one line for the skipped checkpoint, naming file and defect. */
static void test_fallback_log_line(void) {
  setup();
  CHECK_EQ_INT(fx_flip_byte(step_file(20, "rank-00000.bin"), 3000), 0);
  char log_path[] = "/tmp/tagc-ckpt-log-XXXXXX";
  int log_fd = mkstemp(log_path);
  int saved = dup(2);
  fflush(stderr);
  dup2(log_fd, 2);
  tagc_log_configure("warn", TAGC_LOG_TEXT);
  tagc_ckpt_reader *rd;
  tagc_status st = tagc_ckpt_find_latest_valid(dir, TAGC_CKPT_VERIFY_FULL, &rd);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  tagc_log_configure("error", TAGC_LOG_TEXT);
  CHECK_OK(st);
  if (rd)
    CHECK_EQ_INT(tagc_ckpt_reader_step(rd), 10);
  tagc_ckpt_close(rd);
  char text[4096] = {0};
  ssize_t n = pread(log_fd, text, sizeof text - 1, 0);
  close(log_fd);
  unlink(log_path);
  CHECK(n > 0);
  int lines = 0;
  for (ssize_t i = 0; i < n; i++)
    lines += text[i] == '\n';
  CHECK_EQ_INT(lines, 1);
  CHECK_MSG(strstr(text, "skipping invalid checkpoint") && strstr(text, "step-20: rank-00000.bin: CRC32C"),
            "log line: %s", text);
  teardown();
}

static void test_truncated(void) {
  setup();
  CHECK_EQ_INT(fx_truncate(step_file(20, "rank-00000.bin"), 5000), 0);
  expect_fallback("truncated", TAGC_CKPT_VERIFY_QUICK, TAGC_ECORRUPT, "truncated");
  /* A reader that skipped file checks fails the read cleanly. */
  tagc_ckpt_reader *rd;
  CHECK_OK(tagc_ckpt_open(step_file(20, ""), TAGC_CKPT_VERIFY_MANIFEST, &rd));
  if (rd) {
    float buf[16];
    CHECK_EQ_INT(tagc_ckpt_read(rd, 0, 0, 0, 16, buf), TAGC_ECORRUPT);
  }
  tagc_ckpt_close(rd);
  teardown();
}

static void test_missing_file(void) {
  setup();
  CHECK_EQ_INT(unlink(step_file(20, "rank-00001.bin")), 0);
  expect_fallback("missing file", TAGC_CKPT_VERIFY_QUICK, TAGC_ECORRUPT, "rank-00001.bin");
  teardown();
}

static void test_bad_manifest(void) {
  setup();
  CHECK_EQ_INT(fx_write_text(step_file(20, "manifest.json"), "{\"format\": \"tagc-ckpt\", "), 0);
  expect_fallback("malformed manifest", TAGC_CKPT_VERIFY_MANIFEST, TAGC_EPROTO, "manifest.json");
  CHECK_EQ_INT(fx_write_text(step_file(20, "manifest.json"), "{\"format\": \"tagc-ckpt\", \"version\": 1, \"step\": 20, \"world_size\": \"two\"}"), 0);
  expect_fallback("wrong type", TAGC_CKPT_VERIFY_MANIFEST, TAGC_ECORRUPT, "world_size");
  CHECK_EQ_INT(fx_write_text(step_file(20, "manifest.json"), "[1, 2, 3]"), 0);
  expect_fallback("not an object", TAGC_CKPT_VERIFY_MANIFEST, TAGC_ECORRUPT, "not a tagc checkpoint");
  CHECK_EQ_INT(unlink(step_file(20, "manifest.json")), 0);
  expect_fallback("no manifest", TAGC_CKPT_VERIFY_MANIFEST, TAGC_ENOTFOUND, "manifest.json");
  teardown();
}

#define SEAL "{\n  \"manifest_crc32c\": \""

/* Reads step 20's manifest into text[65536] (NUL-terminated); returns its length. */
static size_t read_manifest(char *text) {
  FILE *f = fopen(step_file(20, "manifest.json"), "r");
  size_t n = f ? fread(text, 1, 65535, f) : 0;
  if (f)
    fclose(f);
  text[n] = '\0';
  return n;
}

/* Writes the manifest's checksum again after an edit, as a deliberate forger would. */
static void reseal_manifest(void) {
  char text[65536];
  size_t n = read_manifest(text), at = strlen(SEAL);
  CHECK(n > at + 8 && strncmp(text, SEAL, at) == 0);
  memcpy(text + at, "00000000", 8);
  char digits[9];
  snprintf(digits, sizeof digits, "%08x", tagc_crc32c(0, text, n));
  memcpy(text + at, digits, 8);
  CHECK_EQ_INT(fx_write_text(step_file(20, "manifest.json"), text), 0);
}

/* Edits the manifest's JSON: replaces the first occurrence of `from` with `to`. */
static void edit_manifest(const char *from, const char *to) {
  char text[65536];
  read_manifest(text);
  char *at = strstr(text, from);
  CHECK_MSG(at != NULL, "manifest lacks '%s'", from);
  if (!at)
    return;
  char out[65536 + 64];
  snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  CHECK_EQ_INT(fx_write_text(step_file(20, "manifest.json"), out), 0);
}

/* Each edit is caught by the manifest's checksum; resealed, by the check of its content. */
static void test_manifest_lies(void) {
  static const struct {
    const char *what, *from, *to, *needle;
  } lies[] = {
      {"world size", "\"world_size\": 2", "\"world_size\": 3", "files"},
      {"step", "\"step\": 20", "\"step\": 10", "step 10"},
      {"path escape", "\"rank-00001.bin\"", "\"../step-10/rank-00001.bin\"", "expected 'rank-00001.bin'"},
  };
  for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
    setup();
    edit_manifest(lies[i].from, lies[i].to);
    expect_fallback(lies[i].what, TAGC_CKPT_VERIFY_MANIFEST, TAGC_ECORRUPT, "edited or damaged");
    reseal_manifest();
    expect_fallback(lies[i].what, TAGC_CKPT_VERIFY_MANIFEST, TAGC_ECORRUPT, lies[i].needle);
    teardown();
  }
}

/* The manifest has a checksum of its own: an edit of a field no other check reads (here the
 * creation time, or the caller's state) makes the checkpoint invalid, at every level. A
 * version 1 manifest (no checksum) still opens; a version 2 one without it does not. */
static void test_manifest_checksum(void) {
  setup();
  edit_manifest("\"created\": ", "\"created\": 1");
  expect_fallback("created", TAGC_CKPT_VERIFY_MANIFEST, TAGC_ECORRUPT, "edited or damaged");
  teardown();
  setup();
  edit_manifest("\"sampler\": null", "\"sampler\": {\"step\": 1}");
  expect_fallback("caller state", TAGC_CKPT_VERIFY_QUICK, TAGC_ECORRUPT, "edited or damaged");
  teardown();
  setup();
  edit_manifest("\"manifest_crc32c\": ", "\"crc\": ");
  expect_fallback("no checksum", TAGC_CKPT_VERIFY_MANIFEST, TAGC_ECORRUPT, "without its checksum");
  edit_manifest("\"version\": 2", "\"version\": 1");
  tagc_ckpt_reader *rd;
  CHECK_OK(tagc_ckpt_open(step_file(20, ""), TAGC_CKPT_VERIFY_FULL, &rd));
  tagc_ckpt_close(rd);
  teardown();
}

static void test_header_defects(void) {
  setup();
  CHECK_EQ_INT(fx_flip_byte(step_file(20, "rank-00000.bin"), 0), 0);
  expect_fallback("bad magic", TAGC_CKPT_VERIFY_QUICK, TAGC_ECORRUPT, "bad magic");
  teardown();
  setup();
  CHECK_EQ_INT(fx_flip_byte(step_file(20, "rank-00001.bin"), 8), 0); /* version 1 -> 0x41 */
  expect_fallback("bad version", TAGC_CKPT_VERIFY_QUICK, TAGC_ECORRUPT, "version");
  teardown();
  setup();
  CHECK_EQ_INT(fx_flip_byte(step_file(20, "rank-00001.bin"), 70), 0); /* inside the range table */
  expect_fallback("header bits", TAGC_CKPT_VERIFY_QUICK, TAGC_ECORRUPT, "header checksum");
  teardown();
  setup();
  CHECK_EQ_INT(fx_flip_byte(step_file(20, "rank-00001.bin"), -8), 0); /* trailer CRC field */
  expect_fallback("trailer", TAGC_CKPT_VERIFY_QUICK, TAGC_ECORRUPT, "trailer CRC32C");
  teardown();
}

static void test_nothing_valid(void) {
  setup();
  CHECK_EQ_INT(unlink(step_file(10, "manifest.json")), 0);
  CHECK_EQ_INT(unlink(step_file(20, "manifest.json")), 0);
  tagc_ckpt_reader *rd;
  CHECK_EQ_INT(tagc_ckpt_find_latest_valid(dir, TAGC_CKPT_VERIFY_QUICK, &rd), TAGC_ECORRUPT);
  CHECK(strstr(tagc_last_error(), "no valid checkpoint") != NULL);
  CHECK_EQ_INT(tagc_ckpt_find_latest_valid("/nonexistent/tagc", TAGC_CKPT_VERIFY_QUICK, &rd), TAGC_ENOTFOUND);
  teardown();
}

static void test_bad_arguments(void) {
  char *d = fx_tempdir("badargs");
  tagc_ckpt_range ranges[FX_UNITS];
  float *data[FX_UNITS * FX_STREAMS];
  fx_ranges(2, 0, ranges);
  fx_shard_alloc(2, 0, 1, data);
  const float *const *cdata = (const float *const *)data;
  CHECK_EQ_INT(tagc_ckpt_write_shard(d, 1, 2, 2, &fx_layout, ranges, cdata), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_ckpt_write_shard(d, -1, 0, 2, &fx_layout, ranges, cdata), TAGC_EINVAL);
  tagc_ckpt_layout bad = fx_layout;
  bad.n_streams = 0;
  CHECK_EQ_INT(tagc_ckpt_write_shard(d, 1, 0, 2, &bad, ranges, cdata), TAGC_EINVAL);
  tagc_ckpt_range backwards[FX_UNITS];
  memcpy(backwards, ranges, sizeof ranges);
  backwards[1] = (tagc_ckpt_range){10, 5};
  CHECK_EQ_INT(tagc_ckpt_write_shard(d, 1, 0, 2, &fx_layout, backwards, cdata), TAGC_EINVAL);
  /* Rank 1 never wrote: commit reports the missing shard. */
  CHECK_OK(tagc_ckpt_write_shard(d, 1, 0, 2, &fx_layout, ranges, cdata));
  CHECK_EQ_INT(tagc_ckpt_commit(d, 1, 2, &fx_layout, NULL, NULL), TAGC_ENOTFOUND);
  /* Rank 1 wrote a range that leaves a hole: commit refuses. */
  tagc_ckpt_range holed[FX_UNITS];
  fx_ranges(2, 1, holed);
  holed[0].lo += 1;
  float *data1[FX_UNITS * FX_STREAMS];
  fx_shard_alloc(2, 1, 1, data1);
  CHECK_OK(tagc_ckpt_write_shard(d, 1, 1, 2, &fx_layout, holed, (const float *const *)data1));
  CHECK_EQ_INT(tagc_ckpt_commit(d, 1, 2, &fx_layout, NULL, NULL), TAGC_ECORRUPT);
  CHECK(strstr(tagc_last_error(), "embed") != NULL);
  /* Commit at a different world size than the shards were written with. */
  CHECK_EQ_INT(tagc_ckpt_commit(d, 1, 1, &fx_layout, NULL, NULL), TAGC_ECORRUPT);
  fx_shard_free(data);
  fx_shard_free(data1);
  fx_rmtree(d);
  free(d);
}

int main(void) {
  tagc_log_configure("error", TAGC_LOG_TEXT);
  test_flipped_payload_byte();
  test_fallback_log_line();
  test_truncated();
  test_missing_file();
  test_bad_manifest();
  test_manifest_lies();
  test_manifest_checksum();
  test_header_defects();
  test_nothing_valid();
  test_bad_arguments();
  return TEST_END();
}
