#include "config_toml.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <map>
#include <new>
#include <string>

#include <toml++/toml.h>

namespace {

/* Where a key was given: its dotted name ("training.steps") and position. */
struct given {
  std::string name;
  toml::source_position at;
};

/* "FILE:LINE:COLUMN" of a position, for error details. */
std::string where(const char *path, const toml::source_position &p) {
  return std::string(path) + ":" + std::to_string(p.line) + ":" + std::to_string(p.column);
}

/* The JSON key of a TOML key: warmup-steps and warmup_steps are one option. */
std::string json_key(std::string_view k) {
  std::string s(k);
  for (char &c : s)
    if (c == '-')
      c = '_';
  return s;
}

/* One line: a parser message may span several. */
std::string one_line(std::string_view text) {
  std::string s(text);
  for (char &c : s)
    if (c == '\n' || c == '\r')
      c = ' ';
  return s;
}

/* The JSON value of a TOML value (new reference), or NULL with *why set. */
json_t *value_of(const toml::node &v, const char **why) {
  switch (v.type()) {
  case toml::node_type::integer: return json_integer(v.as_integer()->get());
  case toml::node_type::boolean: return json_boolean(v.as_boolean()->get());
  case toml::node_type::string: {
    const std::string &s = v.as_string()->get();
    *why = "is a string with a NUL character";
    return s.find('\0') == std::string::npos ? json_stringn(s.data(), s.size()) : nullptr;
  }
  case toml::node_type::floating_point: {
    double d = v.as_floating_point()->get();
    *why = "is not a finite number";
    return std::isfinite(d) ? json_real(d) : nullptr;
  }
  case toml::node_type::array: *why = "is an array: an option takes one value"; break;
  case toml::node_type::table:
    *why = "is a table inside a table: tables nest one level only";
    break;
  default: *why = "is a date or time: options take numbers, booleans and strings"; break;
  }
  return nullptr;
}

/* Adds the values of one table (top level: table_name empty) to obj; a table at the top level
 * is walked once more. seen maps each JSON key to where it was given. */
tagc_status flatten(const char *path, const toml::table &tbl, const std::string &table_name,
                    json_t *obj, std::map<std::string, given> &seen) {
  for (auto &&[k, v] : tbl) {
    std::string name = table_name.empty() ? std::string(k.str())
                                          : table_name + "." + std::string(k.str());
    if (v.is_table() && table_name.empty()) {
      tagc_status st = flatten(path, *v.as_table(), name, obj, seen);
      if (st != TAGC_OK)
        return st;
      continue;
    }
    std::string key = json_key(k.str());
    given now{name, v.source().begin};
    auto prev = seen.find(key);
    if (prev != seen.end()) { /* tables iterate by name: report the later one in the file */
      const given &first = prev->second.at < now.at ? prev->second : now;
      const given &again = prev->second.at < now.at ? now : prev->second;
      return tagc_errorf(TAGC_EINVAL, "%s: key '%s' is given twice (first at %s as '%s')",
                         where(path, again.at).c_str(), again.name.c_str(),
                         where(path, first.at).c_str(), first.name.c_str());
    }
    const char *why = "cannot be stored (out of memory)";
    json_t *jv = value_of(v, &why);
    if (!jv)
      return tagc_errorf(TAGC_EINVAL, "%s: key '%s' %s", where(path, now.at).c_str(),
                         name.c_str(), why);
    if (json_object_set_new(obj, key.c_str(), jv) != 0)
      return tagc_errorf(TAGC_ENOMEM, "%s: key '%s'", where(path, now.at).c_str(), name.c_str());
    seen.emplace(key, now);
  }
  return TAGC_OK;
}

tagc_status read_all(const char *path, std::string &text) {
  FILE *f = std::fopen(path, "rb");
  if (!f)
    return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "%s", path);
  char buf[8192];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
    text.append(buf, n);
  int failed = std::ferror(f);
  std::fclose(f);
  return failed ? tagc_errorf(TAGC_EIO, "%s: read error", path) : TAGC_OK;
}

tagc_status convert(const char *path, json_t **out) {
  std::string text;
  tagc_status st = read_all(path, text);
  if (st != TAGC_OK)
    return st;
  toml::table doc;
  try {
    doc = toml::parse(text, std::string_view(path));
  } catch (const toml::parse_error &e) {
    const toml::source_position &p = e.source().begin;
    return tagc_errorf(TAGC_EPROTO, "%s:%u:%u: %s", path, (unsigned)p.line, (unsigned)p.column,
                       one_line(e.description()).c_str());
  }
  json_t *obj = json_object();
  if (!obj)
    return tagc_errorf(TAGC_ENOMEM, "%s", path);
  std::map<std::string, given> seen;
  try {
    st = flatten(path, doc, "", obj, seen);
  } catch (...) {
    json_decref(obj);
    throw;
  }
  if (st != TAGC_OK) {
    json_decref(obj);
    return st;
  }
  *out = obj;
  return TAGC_OK;
}

} // namespace

extern "C" tagc_status tagc_toml_to_json(const char *path, json_t **out) {
  try {
    return convert(path, out);
  } catch (const std::bad_alloc &) {
    return tagc_errorf(TAGC_ENOMEM, "%s", path);
  } catch (const std::exception &e) {
    return tagc_errorf(TAGC_EINTERNAL, "%s: %s", path, e.what());
  }
}
