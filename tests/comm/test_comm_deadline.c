/* The link-rate estimator and byte-scaled deadlines (comm/deadline.h): configuration bounds,
 * the initial assumption, which samples count, the lower median over the window, the floor
 * and the cap. */
#include <math.h>
#include <stdint.h>

#include "comm/deadline.h"
#include "test.h"

#define MB 1000000.0

static tagc_link_estimator fresh(void) {
  tagc_deadline_config dc;
  tagc_deadline_config_init(&dc);
  tagc_link_estimator e;
  CHECK_OK(tagc_link_init(&e, &dc));
  return e;
}

static void test_config_bounds(void) {
  tagc_deadline_config dc;
  tagc_link_estimator e;
  tagc_deadline_config_init(&dc);
  CHECK_OK(tagc_link_init(&e, &dc));
  CHECK_EQ_INT(tagc_link_init(&e, NULL), TAGC_EINVAL);
  dc.slack = 0.5;
  CHECK_EQ_INT(tagc_link_init(&e, &dc), TAGC_EINVAL);
  dc.slack = NAN;
  CHECK_EQ_INT(tagc_link_init(&e, &dc), TAGC_EINVAL);
  tagc_deadline_config_init(&dc);
  dc.min_rate = 0;
  CHECK_EQ_INT(tagc_link_init(&e, &dc), TAGC_EINVAL);
  tagc_deadline_config_init(&dc);
  dc.initial_rate = dc.min_rate / 2;
  CHECK_EQ_INT(tagc_link_init(&e, &dc), TAGC_EINVAL);
  dc.initial_rate = INFINITY;
  CHECK_EQ_INT(tagc_link_init(&e, &dc), TAGC_EINVAL);
  tagc_deadline_config_init(&dc);
  dc.max_extra_s = -1;
  CHECK_EQ_INT(tagc_link_init(&e, &dc), TAGC_EINVAL);
}

/* Before any sample: the documented 100 Mbit/s assumption. */
static void test_initial(void) {
  tagc_link_estimator e = fresh();
  CHECK_NEAR(tagc_link_measured_rate(&e), 0, 0);
  CHECK_NEAR(tagc_link_rate(&e), 12.5 * MB, 1e-6);
  CHECK_NEAR(tagc_link_timeout(&e, 2.0, 0), 2.0, 1e-12);
  /* 25 MB at 12.5 MB/s is 2 s, times the slack 3. */
  CHECK_NEAR(tagc_link_timeout(&e, 2.0, 25000000), 2.0 + 6.0, 1e-9);
}

/* Small transfers (latency) and broken clock readings are not measured. */
static void test_ignored_samples(void) {
  tagc_link_estimator e = fresh();
  tagc_link_record(&e, 1000, 1.0);           /* 1 kB/s: latency-bound, not a rate */
  tagc_link_record(&e, 256 * 1024 - 1, 1.0); /* just below the threshold */
  tagc_link_record(&e, 10000000, 0);
  tagc_link_record(&e, 10000000, -1);
  tagc_link_record(&e, 10000000, NAN);
  tagc_link_record(&e, 10000000, INFINITY);
  CHECK_EQ_INT(e.samples, 0);
  CHECK_NEAR(tagc_link_rate(&e), 12.5 * MB, 1e-6);
  tagc_link_record(&e, 256 * 1024, 0.1);
  CHECK_EQ_INT(e.samples, 1);
  CHECK_NEAR(tagc_link_measured_rate(&e), 2621440.0, 1e-6);
}

/* The lower median: odd and even counts; a measured rate above the initial one is used. */
static void test_median(void) {
  tagc_link_estimator e = fresh();
  double rates[] = {50, 10, 40, 20, 30}; /* MB/s, out of order */
  for (int i = 0; i < 5; i++)
    tagc_link_record(&e, 100000000, 100.0 / rates[i]);
  CHECK_NEAR(tagc_link_measured_rate(&e), 30 * MB, 1e-3);
  tagc_link_record(&e, 100000000, 100.0 / 60);
  CHECK_NEAR(tagc_link_measured_rate(&e), 30 * MB, 1e-3); /* 10 20 [30] 40 50 60 */
  CHECK_NEAR(tagc_link_peak_rate(&e), 40 * MB, 1e-3);     /* 10 20 30 [40] 50 60: 3*5/4 = 3 */
  CHECK_NEAR(tagc_link_rate(&e), 30 * MB, 1e-3);
  CHECK_NEAR(tagc_link_timeout(&e, 1.0, 30000000), 1.0 + 3.0, 1e-9);
}

/* A few transfers that waited for a late peer (low rate) or rode a burst allowance (high)
 * leave the estimate where the bulk of the transfers are. */
static void test_outliers(void) {
  tagc_link_estimator e = fresh();
  for (int i = 0; i < 10; i++)
    tagc_link_record(&e, 4000000, 1.0); /* 4 MB/s */
  for (int i = 0; i < 4; i++)
    tagc_link_record(&e, 4000000, 40.0); /* waited 40 s for a peer */
  for (int i = 0; i < 4; i++)
    tagc_link_record(&e, 4000000, 0.001); /* burst */
  CHECK_NEAR(tagc_link_measured_rate(&e), 4 * MB, 1e-6);
}

/* Only the last TAGC_LINK_WINDOW samples count: the link got faster, and later slower. */
static void test_window(void) {
  tagc_link_estimator e = fresh();
  for (int i = 0; i < TAGC_LINK_WINDOW; i++)
    tagc_link_record(&e, 2000000, 1.0);
  CHECK_NEAR(tagc_link_measured_rate(&e), 2 * MB, 1e-6);
  for (int i = 0; i < TAGC_LINK_WINDOW / 2; i++)
    tagc_link_record(&e, 8000000, 1.0);
  CHECK_NEAR(tagc_link_measured_rate(&e), 2 * MB, 1e-6); /* still the majority */
  tagc_link_record(&e, 8000000, 1.0);
  CHECK_NEAR(tagc_link_measured_rate(&e), 8 * MB, 1e-6);
  for (int i = 0; i < TAGC_LINK_WINDOW; i++)
    tagc_link_record(&e, 3000000, 1.0);
  CHECK_NEAR(tagc_link_measured_rate(&e), 3 * MB, 1e-6);
  CHECK_EQ_INT(e.n, TAGC_LINK_WINDOW);
  CHECK_EQ_INT(e.samples, 2 * TAGC_LINK_WINDOW + TAGC_LINK_WINDOW / 2 + 1);
}

/* The floor on the rate and the cap on the added time bound every deadline. */
static void test_floor_and_cap(void) {
  tagc_link_estimator e = fresh();
  for (int i = 0; i < 3; i++)
    tagc_link_record(&e, 1000000, 100.0); /* 10 kB/s: below the floor */
  CHECK_NEAR(tagc_link_measured_rate(&e), 1e4, 1e-6);
  CHECK_NEAR(tagc_link_rate(&e), 1 * MB, 1e-6);
  CHECK_NEAR(tagc_link_timeout(&e, 5.0, 1000000), 5.0 + 3.0, 1e-9);
  CHECK_NEAR(tagc_link_timeout(&e, 5.0, UINT64_MAX), 5.0 + 3600.0, 1e-9);
  tagc_deadline_config dc;
  tagc_deadline_config_init(&dc);
  dc.max_extra_s = 0; /* the fixed-timeout behaviour */
  CHECK_OK(tagc_link_init(&e, &dc));
  CHECK_NEAR(tagc_link_timeout(&e, 5.0, 1000000000), 5.0, 1e-12);
}

/* The scenario of the slow-link test: a 2 MB/s link, measured by a few medium transfers; a
 * 20 MB transfer needs 10 s and gets base + 30 s, a fixed 4 s timeout would have failed. */
static void test_slow_link(void) {
  tagc_link_estimator e = fresh();
  CHECK(tagc_link_timeout(&e, 4.0, 20000000) < 10.0); /* unmeasured: too optimistic alone */
  for (int i = 0; i < 3; i++)
    tagc_link_record(&e, 2000000, 1.0 + 0.01 * i);
  double t = tagc_link_timeout(&e, 4.0, 20000000);
  CHECK_MSG(t > 4.0 + 20000000 / (2 * MB), "timeout %.2f s does not cover the transfer", t);
  CHECK_NEAR(t, 4.0 + 3 * 20000000 / (2000000 / 1.01), 1e-6);
}

int main(void) {
  test_config_bounds();
  test_initial();
  test_ignored_samples();
  test_median();
  test_outliers();
  test_window();
  test_floor_and_cap();
  test_slow_link();
  return TEST_END();
}
