/* Leaving a job for good, on a real etcd: tagc_member_announce_leave writes leaving/<id> with
 * the registration (the create revision of workers/<id>), wakes a plan wait at once and stops
 * re-registration; tagc_member_withdraw makes tagc_member_gen say every generation ended; the
 * committed checkpoint's step; a supervisor's death record (tagc_member_registration_of names
 * the dead PID's registration only, tagc_member_put_leaving adds "died" and "uptime"). And the
 * credentials of a program's etcd options
 * (tagc_etcd_config_credentials): password from the environment or a file, never over http. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common/json.h"
#include "common/status.h"
#include "common/timeutil.h"
#include "cluster/etcd.h"
#include "cluster/keys.h"
#include "cluster/member.h"
#include "etcd_server.h"
#include "test.h"

static tagc_etcd *client(const char *url) {
  tagc_etcd_config cfg;
  tagc_etcd_config_init(&cfg);
  cfg.endpoints = url;
  tagc_etcd *c = NULL;
  if (tagc_etcd_create(&cfg, &c) != TAGC_OK)
    fprintf(stderr, "etcd client: %s\n", tagc_last_error());
  return c;
}

static void test_announce_and_withdraw(tagc_etcd *c) {
  json_t *info = json_object();
  tagc_member *m = NULL;
  CHECK_OK(tagc_member_join(c, "leave", "w0", info, 2, &m));
  if (!m)
    return;
  tagc_etcd_range_result r;
  CHECK_OK(tagc_etcd_range(c, "/tagc/leave/workers/w0", NULL, &r));
  int64_t registration = r.n == 1 ? r.kvs[0].create_revision : -1;
  tagc_etcd_range_result_free(&r);

  int64_t step = -1;
  CHECK_OK(tagc_member_committed_step(m, &step));
  CHECK_EQ_INT(step, 0);
  CHECK_OK(tagc_member_commit_ckpt(m, 1, 30, "/c/step-30", 2, 7));
  CHECK_OK(tagc_member_committed_step(m, &step));
  CHECK_EQ_INT(step, 30);

  CHECK_EQ_INT(tagc_member_gen(m), 0);
  CHECK_OK(tagc_member_announce_leave(m, "SIGTERM"));
  char *text = NULL;
  size_t len = 0;
  CHECK_OK(tagc_etcd_get(c, "/tagc/leave/leaving/w0", &text, &len, NULL));
  json_t *rec = NULL;
  if (text)
    CHECK_OK(tagc_json_parse(text, len, &rec));
  CHECK_EQ_INT(json_integer_value(json_object_get(rec, "registration")), registration);
  CHECK_EQ_STR(json_string_value(json_object_get(rec, "reason")), "SIGTERM");
  json_decref(rec);
  free(text);

  /* a plan wait returns at once, however long it was asked to wait */
  tagc_plan p;
  double t0 = tagc_now();
  CHECK_EQ_INT(tagc_member_wait_plan(m, 0, 30, &p), TAGC_EABORTED);
  CHECK(tagc_now() - t0 < 1);
  CHECK(!p.job_done);

  /* the registration stays until the worker leaves; the generation watch still works */
  CHECK_OK(tagc_etcd_put(c, "/tagc/leave/gen", "4", 1, 0, NULL));
  for (t0 = tagc_now(); tagc_member_gen(m) != 4 && tagc_now() - t0 < 5;)
    tagc_sleep(0.02);
  CHECK_EQ_INT(tagc_member_gen(m), 4);
  tagc_member_withdraw(m);
  CHECK(tagc_member_gen(m) == INT64_MAX);
  tagc_member_leave(m);
  CHECK_EQ_INT(tagc_etcd_get(c, "/tagc/leave/workers/w0", &text, NULL, NULL), TAGC_ENOTFOUND);
  CHECK_OK(tagc_etcd_get(c, "/tagc/leave/leaving/w0", &text, NULL, NULL)); /* for the leader */
  free(text);
  json_decref(info);
}

static void test_credentials(void) {
  tagc_etcd_config ec;
  char *pw = NULL;
  tagc_etcd_config_init(&ec);
  ec.endpoints = "https://a:2379,http://b:2379";
  tagc_etcd_credentials none = {"", "", "", "", ""};
  CHECK_OK(tagc_etcd_config_credentials(&ec, &none, &pw));
  CHECK(pw == NULL && ec.user == NULL && ec.ca_file == NULL && ec.password == NULL);

  setenv(TAGC_ETCD_PASSWORD_ENV, "from-env", 1);
  tagc_etcd_credentials user = {"ca.pem", "", "", "root", ""};
  CHECK_EQ_INT(tagc_etcd_config_credentials(&ec, &user, &pw), TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "refusing to send the etcd password over plain http:// (http://b:2379)"));
  CHECK(pw == NULL);

  ec.endpoints = "https://a:2379, https://b:2379";
  CHECK_OK(tagc_etcd_config_credentials(&ec, &user, &pw));
  CHECK_EQ_STR(pw, "from-env");
  CHECK(ec.password == pw && !strcmp(ec.user, "root") && !strcmp(ec.ca_file, "ca.pem"));
  free(pw);

  char path[] = "/tmp/tagc-pw-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0 && write(fd, "from-file\n", 10) == 10);
  close(fd);
  tagc_etcd_credentials file = {"", "", "", "root", path};
  CHECK_OK(tagc_etcd_config_credentials(&ec, &file, &pw));
  CHECK_EQ_STR(pw, "from-file");
  free(pw);
  unlink(path);
  CHECK_EQ_INT(tagc_etcd_config_credentials(&ec, &file, &pw), TAGC_ENOTFOUND);

  unsetenv(TAGC_ETCD_PASSWORD_ENV);
  CHECK_EQ_INT(tagc_etcd_config_credentials(&ec, &user, &pw), TAGC_EINVAL);
  CHECK(strstr(tagc_last_error(), "needs a password"));
  tagc_etcd_credentials half = {"", "c.pem", "", "", ""};
  CHECK_EQ_INT(tagc_etcd_config_credentials(&ec, &half, &pw), TAGC_EINVAL);
}

/* What tagctl run writes when a worker dies: the record of the dead PID's registration. */
static void test_death_record(tagc_etcd *c) {
  json_t *info = json_pack("{s:i}", "pid", 4711);
  tagc_member *m = NULL;
  CHECK_OK(tagc_member_join(c, "death", "w1", info, 2, &m));
  json_decref(info);
  if (!m)
    return;
  tagc_etcd_range_result r;
  CHECK_OK(tagc_etcd_range(c, "/tagc/death/workers/w1", NULL, &r));
  int64_t registration = r.n == 1 ? r.kvs[0].create_revision : -1;
  tagc_etcd_range_result_free(&r);
  int64_t got = -1;
  CHECK_OK(tagc_member_registration_of(c, "death", "w1", 4711, &got));
  CHECK_EQ_INT(got, registration);
  CHECK_EQ_INT(tagc_member_registration_of(c, "death", "w1", 4712, &got), TAGC_ENOTFOUND);
  CHECK_EQ_INT(tagc_member_registration_of(c, "death", "w9", 4711, &got), TAGC_ENOTFOUND);
  tagc_leave_record lr = {.registration = registration,
                          .reason = "crashed (seen by its supervisor)", .died = 1,
                          .uptime_s = 3.25};
  CHECK_OK(tagc_member_put_leaving(c, "death", "w1", &lr));
  char *text = NULL;
  size_t len = 0;
  CHECK_OK(tagc_etcd_get(c, "/tagc/death/leaving/w1", &text, &len, NULL));
  json_t *rec = NULL;
  if (text)
    CHECK_OK(tagc_json_parse(text, len, &rec));
  CHECK_EQ_INT(json_integer_value(json_object_get(rec, "registration")), registration);
  CHECK_EQ_STR(json_string_value(json_object_get(rec, "reason")),
               "crashed (seen by its supervisor)");
  CHECK(json_is_true(json_object_get(rec, "died")));
  CHECK_NEAR(json_number_value(json_object_get(rec, "uptime")), 3.25, 1e-9);
  CHECK(json_is_number(json_object_get(rec, "time")));
  json_decref(rec);
  free(text);
  tagc_member_leave(m);
}

int main(void) {
  test_credentials();
  tagc_test_etcd e;
  tagc_status st = tagc_test_etcd_start(&e);
  if (st == TAGC_EUNSUPPORTED)
    TEST_SKIP("no etcd binary");
  CHECK_OK(st);
  if (st != TAGC_OK)
    return TEST_END();
  tagc_etcd *c = client(e.url);
  if (c) {
    test_announce_and_withdraw(c);
    test_death_record(c);
    tagc_etcd_destroy(c);
  }
  tagc_test_etcd_stop(&e);
  return TEST_END();
}
