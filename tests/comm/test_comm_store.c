/* The store interface through the directory-backed store: set/get round trips, key escaping,
 * blocking get with timeout, remove, set_many / get_many through one op per key, and clean-up of
 * the directory. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/store.h"
#include "common/timeutil.h"
#include "test.h"

/* A cancel function that says stop from a given time on (tagc_store_set_cancel). */
static int stop_after(void *arg) { return tagc_now() >= *(double *)arg; }

int main(void) {
  char dir[] = "/tmp/tagc-store-test-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  tagc_store *s = NULL;
  CHECK_OK(tagc_store_file_new(dir, &s));
  if (!s)
    return TEST_END();

  const char bin[5] = {'a', 0, 'b', '\n', (char)0xff};
  CHECK_OK(tagc_store_set(s, "gen/7/boot/rank_0", bin, sizeof bin));
  CHECK_OK(tagc_store_set(s, "..", "dots", 4));
  void *v = NULL;
  size_t len = 0;
  CHECK_OK(tagc_store_get(s, "gen/7/boot/rank_0", 1.0, &v, &len));
  CHECK_EQ_INT(len, sizeof bin);
  CHECK(v && memcmp(v, bin, sizeof bin) == 0 && ((char *)v)[len] == '\0');
  free(v);
  CHECK_OK(tagc_store_get(s, "..", 1.0, &v, &len));
  CHECK(len == 4 && memcmp(v, "dots", 4) == 0);
  free(v);

  /* Overwrite replaces; a similar key with another separator is a different key. */
  CHECK_OK(tagc_store_set(s, "gen/7/boot/rank_0", "x", 1));
  CHECK_OK(tagc_store_get(s, "gen/7/boot/rank_0", 1.0, &v, &len));
  CHECK(len == 1 && ((char *)v)[0] == 'x');
  free(v);
  v = NULL;
  double t0 = tagc_now();
  CHECK_EQ_INT(tagc_store_get(s, "gen/7/boot:rank_0", 0.2, &v, &len), TAGC_ETIMEDOUT);
  double waited = tagc_now() - t0;
  CHECK_MSG(waited >= 0.2 && waited < 1.0, "get timeout took %.3f s", waited);
  CHECK(v == NULL);

  /* A value set by another process while get waits is returned. */
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    tagc_sleep(0.1);
    _exit(tagc_store_set(s, "late", "here", 4) == TAGC_OK ? 0 : 1);
  }
  CHECK_OK(tagc_store_get(s, "late", 5.0, &v, &len));
  CHECK(len == 4 && memcmp(v, "here", 4) == 0);
  free(v);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  CHECK_OK(tagc_store_remove(s, "late"));
  CHECK_OK(tagc_store_remove(s, "late"));
  CHECK_EQ_INT(tagc_store_get(s, "late", 0.0, &v, &len), TAGC_ETIMEDOUT);
  CHECK_EQ_INT(tagc_store_set(s, "", "x", 1), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_store_set(NULL, "k", "x", 1), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_store_file_new(NULL, &s), TAGC_EINVAL);

  /* cancel: a waiting get ends with TAGC_EABORTED soon after its cancel function says stop,
     not at its timeout; a key that is there is still returned */
  double at = tagc_now() + 0.3;
  tagc_store_set_cancel(s, stop_after, &at);
  double c0 = tagc_now();
  CHECK_EQ_INT(tagc_store_get(s, "never", 30.0, &v, &len), TAGC_EABORTED);
  double took = tagc_now() - c0;
  CHECK_MSG(took >= 0.25 && took < 2.0, "cancelled get returned after %.2f s", took);
  CHECK_OK(tagc_store_get(s, "gen/7/boot/rank_0", 1.0, &v, &len));
  free(v);
  tagc_store_set_cancel(s, NULL, NULL);
  CHECK(!tagc_store_cancelled(s));

  /* set_many / get_many without their own ops: one set or get per key, in order; a missing
     key is a timeout naming its index, with no value returned */
  const char *keys[3] = {"m/1/0", "m/1/2", "m/10/0"};
  const void *vals[3] = {"a", "bc", "def"};
  size_t lens[3] = {1, 2, 3}, got_lens[3];
  void *got[3];
  CHECK_OK(tagc_store_set_many(s, keys, vals, lens, 3));
  CHECK_OK(tagc_store_get_many(s, keys, 3, 1.0, got, got_lens, NULL));
  for (int i = 0; i < 3; i++) {
    CHECK(got_lens[i] == lens[i] && memcmp(got[i], vals[i], lens[i]) == 0);
    free(got[i]);
  }
  const char *some_missing[3] = {"m/1/0", "m/1/9", "m/10/0"};
  int missing = -2;
  CHECK_EQ_INT(tagc_store_get_many(s, some_missing, 3, 0.2, got, got_lens, &missing),
               TAGC_ETIMEDOUT);
  CHECK_EQ_INT(missing, 1);
  CHECK(got[0] == NULL && got[1] == NULL && got[2] == NULL);
  CHECK_EQ_INT(tagc_store_set_many(s, keys, NULL, lens, 3), TAGC_EINVAL);
  tagc_store_free(s);
  CHECK_OK(tagc_store_file_remove_all(dir));
  CHECK(access(dir, F_OK) != 0);
  return TEST_END();
}
