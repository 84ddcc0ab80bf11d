/* Unit tests of common/config_toml.h: a TOML document with tables read into the flat JSON
 * object of a --config file; each refused document gives its status and one line naming the
 * file (and the key, for a bad key); --config FILE.toml goes through common/options.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config_toml.h"
#include "common/options.h"
#include "common/status.h"
#include "test.h"

static char path[] = "/tmp/tagc-test-toml-XXXXXX.toml";

static void write_doc(const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* Status of converting text; a refusal must be one line naming the file and `needle`. */
static tagc_status refused(const char *text, const char *needle) {
  write_doc(text);
  json_t *v = NULL;
  tagc_status st = tagc_toml_to_json(path, &v);
  CHECK_MSG(st != TAGC_OK && v == NULL, "'%s' was accepted", text);
  const char *e = tagc_last_error();
  CHECK_MSG(strstr(e, path) && strstr(e, needle) && !strchr(e, '\n'),
            "'%s': error '%s' lacks '%s'", text, e, needle);
  json_decref(v);
  return st;
}

static void test_tables_flatten(void) {
  write_doc("seed = 7\n"
            "[training]\nsteps = 300\nwarmup-steps = 20\nlr = 3e-4\nresume = false\n"
            "[model]\ndim = 64\nname = \"tiny\"\n");
  json_t *v = NULL;
  CHECK_OK(tagc_toml_to_json(path, &v));
  CHECK_EQ_INT(json_object_size(v), 7);
  CHECK_EQ_INT(json_integer_value(json_object_get(v, "seed")), 7);
  CHECK_EQ_INT(json_integer_value(json_object_get(v, "steps")), 300);
  CHECK_EQ_INT(json_integer_value(json_object_get(v, "warmup_steps")), 20);
  CHECK(json_is_real(json_object_get(v, "lr")));
  CHECK_NEAR(json_real_value(json_object_get(v, "lr")), 3e-4, 0);
  CHECK(json_is_false(json_object_get(v, "resume")));
  CHECK_EQ_INT(json_integer_value(json_object_get(v, "dim")), 64);
  CHECK_EQ_STR(json_string_value(json_object_get(v, "name")), "tiny");
  json_decref(v);
}

static void test_refusals(void) {
  char where[64];
  snprintf(where, sizeof where, "%s:2:", path);
  CHECK_EQ_INT(refused("[training]\nsteps = = 3\n", where), TAGC_EPROTO);
  CHECK_EQ_INT(refused("[training]\nsteps = 3\n[model]\nsteps = 4\n",
                       "key 'model.steps' is given twice"), TAGC_EINVAL);
  CHECK_EQ_INT(refused("warmup_steps = 1\n[training]\nwarmup-steps = 2\n", "warmup-steps"),
               TAGC_EINVAL);
  CHECK_EQ_INT(refused("[a.b]\nsteps = 1\n", "key 'a.b'"), TAGC_EINVAL);
  CHECK_EQ_INT(refused("[model]\nsizes = [1, 2]\n", "key 'model.sizes'"), TAGC_EINVAL);
  CHECK_EQ_INT(refused("when = 1979-05-27\n", "key 'when'"), TAGC_EINVAL);
  CHECK_EQ_INT(refused("lr = nan\n", "key 'lr'"), TAGC_EINVAL);
  CHECK_EQ_INT(refused("job = \"a\\u0000b\"\n", "key 'job'"), TAGC_EINVAL);
  json_t *v = NULL;
  CHECK_EQ_INT(tagc_toml_to_json("/nonexistent/x.toml", &v), TAGC_ENOTFOUND);
}

typedef struct cfg {
  int64_t steps, warmup_steps;
  double lr;
} cfg;

static const tagc_opt opts[] = {
    {"steps", TAGC_OPT_INT, offsetof(cfg, steps), "10", 1, 1e6, NULL, "steps to run"},
    {"warmup-steps", TAGC_OPT_INT, offsetof(cfg, warmup_steps), "0", 0, 1e6, NULL, "warmup"},
    {"lr", TAGC_OPT_DOUBLE, offsetof(cfg, lr), "0.001", 0, 1, NULL, "learning rate"},
};
static const tagc_opt_program prog = {"t", NULL, "test program", opts,
                                      sizeof opts / sizeof opts[0]};

/* --config FILE.toml: file < environment < flag, an unknown key named. */
static void test_options_toml(void) {
  write_doc("[training]\nsteps = 30\nwarmup-steps = 5\nlr = 1\n");
  setenv("TAGC_LR", "0.125", 1);
  char *argv[] = {"t", "--config", path, "--steps", "40"};
  cfg c;
  int help;
  CHECK_OK(tagc_opts_parse(&prog, &c, 5, argv, NULL, 0, NULL, &help));
  CHECK_EQ_INT(c.steps, 40);
  CHECK_EQ_INT(c.warmup_steps, 5);
  CHECK_NEAR(c.lr, 0.125, 0);
  unsetenv("TAGC_LR");
  write_doc("[training]\nstepz = 30\n");
  CHECK_EQ_INT(tagc_opts_parse(&prog, &c, 3, argv, NULL, 0, NULL, &help), TAGC_EINVAL);
  CHECK_MSG(strstr(tagc_last_error(), "unknown key 'stepz'") != NULL, "%s", tagc_last_error());
  write_doc("[training]\nsteps = 2.5\n");
  CHECK_EQ_INT(tagc_opts_parse(&prog, &c, 3, argv, NULL, 0, NULL, &help), TAGC_EINVAL);
}

int main(void) {
  int fd = mkstemps(path, 5);
  CHECK(fd >= 0);
  close(fd);
  test_tables_flatten();
  test_refusals();
  test_options_toml();
  unlink(path);
  return TEST_END();
}
