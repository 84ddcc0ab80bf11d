/* Test helper shared by the coordinator tests: a plan's member list as text. */
#ifndef TAGC_TESTS_COORDINATOR_PROC_PLAN_TEXT_H
#define TAGC_TESTS_COORDINATOR_PROC_PLAN_TEXT_H

#include <string.h>

#include <jansson.h>

/* The "members" of plan joined by ',' into buf (cap bytes, cut when longer); returns buf.
 * An empty string when plan is NULL. */
static inline const char *plan_members_text(const json_t *plan, char *buf, size_t cap) {
  buf[0] = '\0';
  size_t i;
  json_t *m;
  json_array_foreach(json_object_get(plan, "members"), i, m) {
    if (i)
      strncat(buf, ",", cap - strlen(buf) - 1);
    strncat(buf, json_string_value(m), cap - strlen(buf) - 1);
  }
  return buf;
}

#endif
