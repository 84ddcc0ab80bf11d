#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config_toml.h"
#include "json.h"
#include "log.h"

#define FIELD(cfg, opt, type) ((type *)((char *)(cfg) + (opt)->offset))

static void env_name(const char *name, char *out, size_t cap) {
  size_t o = (size_t)snprintf(out, cap, "TAGC_");
  for (; *name && o + 1 < cap; name++)
    out[o++] = *name == '-' ? '_' : (char)toupper((unsigned char)*name);
  out[o] = '\0';
}

static void json_key(const char *name, char *out, size_t cap) {
  size_t o = 0;
  for (; *name && o + 1 < cap; name++)
    out[o++] = *name == '-' ? '_' : *name;
  out[o] = '\0';
}

static int choice_ok(const char *choices, const char *v) {
  size_t n = strlen(v);
  for (const char *p = choices; *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && strncmp(p, v, n) == 0)
      return 1;
    p += len + (bar != NULL);
  }
  return 0;
}

/* Sets one option from text; `origin` names where the text came from for errors. */
static tagc_status set_value(const tagc_opt *o, void *cfg, const char *text, const char *origin) {
  switch (o->type) {
  case TAGC_OPT_INT: {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 0);
    if (errno || end == text || *end)
      return tagc_errorf(TAGC_EINVAL, "%s: '%s' is not an integer", origin, text);
    if (o->min <= o->max && (v < o->min || v > o->max))
      return tagc_errorf(TAGC_EINVAL, "%s: %lld is out of range [%.17g, %.17g]", origin, v, o->min,
                         o->max);
    *FIELD(cfg, o, int64_t) = v;
    return TAGC_OK;
  }
  case TAGC_OPT_DOUBLE: {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v))
      return tagc_errorf(TAGC_EINVAL, "%s: '%s' is not a finite number", origin, text);
    if (o->min <= o->max && (v < o->min || v > o->max))
      return tagc_errorf(TAGC_EINVAL, "%s: %g is out of range [%g, %g]", origin, v, o->min, o->max);
    *FIELD(cfg, o, double) = v;
    return TAGC_OK;
  }
  case TAGC_OPT_BOOL:
    if (!strcmp(text, "1") || !strcmp(text, "true") || !strcmp(text, "yes") || !strcmp(text, "on"))
      *FIELD(cfg, o, int) = 1;
    else if (!strcmp(text, "0") || !strcmp(text, "false") || !strcmp(text, "no") ||
             !strcmp(text, "off"))
      *FIELD(cfg, o, int) = 0;
    else
      return tagc_errorf(TAGC_EINVAL, "%s: '%s' is not true or false", origin, text);
    return TAGC_OK;
  case TAGC_OPT_CHOICE:
    if (!choice_ok(o->choices, text))
      return tagc_errorf(TAGC_EINVAL, "%s: '%s' is not one of %s", origin, text, o->choices);
    /* fall through */
  case TAGC_OPT_STRING: {
    char *dup = strdup(text);
    if (!dup)
      return tagc_errorf(TAGC_ENOMEM, "%s", origin);
    char **slot = FIELD(cfg, o, char *);
    free(*slot);
    *slot = dup;
    return TAGC_OK;
  }
  }
  return tagc_errorf(TAGC_EINTERNAL, "%s: unknown option type", origin);
}

static const tagc_opt *find_opt(const tagc_opt_program *prog, const char *name, size_t len) {
  for (size_t i = 0; i < prog->n_opts; i++)
    if (strlen(prog->opts[i].name) == len && strncmp(prog->opts[i].name, name, len) == 0)
      return &prog->opts[i];
  return NULL;
}

/* A config file as JSON: a FILE.toml is TOML (common/config_toml.h), anything else JSON. */
static tagc_status load_config(const char *path, json_t **root) {
  size_t n = strlen(path);
  if (n > 5 && !strcmp(path + n - 5, ".toml"))
    return tagc_toml_to_json(path, root);
  return tagc_json_load_file(path, root);
}

static tagc_status apply_json(const tagc_opt_program *prog, void *cfg, const char *path) {
  json_t *root;
  TAGC_CHECK(load_config(path, &root));
  tagc_status st = TAGC_OK;
  if (!json_is_object(root)) {
    st = tagc_errorf(TAGC_EINVAL, "%s: the config file must hold a JSON object", path);
    goto done;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    const tagc_opt *o = NULL;
    char k[128];
    for (size_t i = 0; i < prog->n_opts && !o; i++) {
      json_key(prog->opts[i].name, k, sizeof k);
      if (!strcmp(k, key))
        o = &prog->opts[i];
    }
    if (!o) {
      st = tagc_errorf(TAGC_EINVAL, "%s: unknown key '%s'", path, key);
      goto done;
    }
    char origin[256], text[64];
    const char *s = text;
    snprintf(origin, sizeof origin, "%s: key '%s'", path, key);
    if (json_is_string(v) && (o->type == TAGC_OPT_STRING || o->type == TAGC_OPT_CHOICE))
      s = json_string_value(v);
    else if (json_is_integer(v) && (o->type == TAGC_OPT_INT || o->type == TAGC_OPT_DOUBLE))
      snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v) && o->type == TAGC_OPT_DOUBLE)
      snprintf(text, sizeof text, "%.17g", json_real_value(v));
    else if (json_is_boolean(v) && o->type == TAGC_OPT_BOOL)
      s = json_is_true(v) ? "true" : "false";
    else {
      st = tagc_errorf(TAGC_EINVAL, "%s has the wrong JSON type", origin);
      goto done;
    }
    TAGC_CHECK_GOTO(set_value(o, cfg, s, origin), st, done);
  }
done:
  json_decref(root);
  return st;
}

/* Scans argv for --config / --help before anything else is applied. */
static tagc_status prescan(int argc, char **argv, const char **config, int *want_help) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--"))
      break;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
      *want_help = 1;
    else if (!strcmp(argv[i], "--config")) {
      if (i + 1 >= argc)
        return tagc_errorf(TAGC_EINVAL, "--config: missing value");
      *config = argv[++i];
    } else if (!strncmp(argv[i], "--config=", 9))
      *config = argv[i] + 9;
  }
  return TAGC_OK;
}

tagc_status tagc_opts_parse(const tagc_opt_program *prog, void *cfg, int argc, char **argv,
                            char **positional, int max_positional, int *n_positional,
                            int *want_help) {
  *want_help = 0;
  if (n_positional)
    *n_positional = 0;
  const char *config = getenv("TAGC_CONFIG");
  TAGC_CHECK(prescan(argc, argv, &config, want_help));
  if (*want_help) {
    tagc_opts_help(prog, stdout);
    return TAGC_OK;
  }
  for (size_t i = 0; i < prog->n_opts; i++) {
    const tagc_opt *o = &prog->opts[i];
    char origin[160];
    snprintf(origin, sizeof origin, "default of --%s", o->name);
    TAGC_CHECK(set_value(o, cfg, o->def ? o->def : (o->type == TAGC_OPT_STRING ? "" : "0"), origin));
  }
  if (config && *config)
    TAGC_CHECK(apply_json(prog, cfg, config));
  for (size_t i = 0; i < prog->n_opts; i++) {
    char env[128];
    env_name(prog->opts[i].name, env, sizeof env);
    const char *v = getenv(env);
    if (v)
      TAGC_CHECK(set_value(&prog->opts[i], cfg, v, env));
  }
  int options_done = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (options_done || a[0] != '-' || !a[1]) {
      if (!positional || *n_positional >= max_positional)
        return tagc_errorf(TAGC_EINVAL, "unexpected argument '%s' (see %s --help)", a, prog->name);
      positional[(*n_positional)++] = argv[i];
      continue;
    }
    if (!strcmp(a, "--")) {
      options_done = 1;
      continue;
    }
    if (strncmp(a, "--", 2) != 0)
      return tagc_errorf(TAGC_EINVAL, "unknown option '%s' (see %s --help)", a, prog->name);
    if (!strcmp(a, "--config")) {
      i++;
      continue;
    }
    if (!strncmp(a, "--config=", 9))
      continue;
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const tagc_opt *o = find_opt(prog, name, len);
    const char *value = eq ? eq + 1 : NULL;
    if (!o && !eq && len > 3 && !strncmp(name, "no-", 3)) {
      o = find_opt(prog, name + 3, len - 3);
      if (o && o->type == TAGC_OPT_BOOL)
        value = "false";
      else
        o = NULL;
    }
    if (!o)
      return tagc_errorf(TAGC_EINVAL, "unknown option '--%.*s' (see %s --help)", (int)len, name,
                         prog->name);
    if (!value && o->type == TAGC_OPT_BOOL)
      value = "true";
    if (!value) {
      if (i + 1 >= argc)
        return tagc_errorf(TAGC_EINVAL, "--%s: missing value", o->name);
      value = argv[++i];
    }
    char origin[160];
    snprintf(origin, sizeof origin, "--%s", o->name);
    TAGC_CHECK(set_value(o, cfg, value, origin));
  }
  return TAGC_OK;
}

static const char *type_hint(const tagc_opt *o) {
  switch (o->type) {
  case TAGC_OPT_INT: return "N";
  case TAGC_OPT_DOUBLE: return "X";
  case TAGC_OPT_BOOL: return "";
  case TAGC_OPT_STRING: return "TEXT";
  case TAGC_OPT_CHOICE: return o->choices;
  }
  return "";
}

void tagc_opts_help(const tagc_opt_program *prog, FILE *f) {
  fprintf(f, "usage: %s %s\n\n%s\n\noptions (flag > environment > --config file > default):\n",
          prog->name, prog->usage ? prog->usage : "[options]", prog->summary ? prog->summary : "");
  for (size_t i = 0; i < prog->n_opts; i++) {
    const tagc_opt *o = &prog->opts[i];
    char flag[96], env[96];
    snprintf(flag, sizeof flag, "--%s %s", o->name, type_hint(o));
    env_name(o->name, env, sizeof env);
    fprintf(f, "  %-34s %s\n  %-34s [env %s; default %s]\n", flag, o->help, "", env,
            o->def && *o->def ? o->def : "none");
  }
  fprintf(f, "  %-34s %s\n  %-34s %s\n", "--config FILE",
          "JSON object or, for FILE.toml, TOML file of option values (keys use _)",
          "--help", "show this text");
}

json_t *tagc_opts_to_json(const tagc_opt_program *prog, const void *cfg) {
  json_t *obj = json_object();
  for (size_t i = 0; obj && i < prog->n_opts; i++) {
    const tagc_opt *o = &prog->opts[i];
    char key[128];
    json_key(o->name, key, sizeof key);
    json_t *v = NULL;
    switch (o->type) {
    case TAGC_OPT_INT: v = json_integer(*FIELD(cfg, o, const int64_t)); break;
    case TAGC_OPT_DOUBLE: v = json_real(*FIELD(cfg, o, const double)); break;
    case TAGC_OPT_BOOL: v = json_boolean(*FIELD(cfg, o, const int)); break;
    case TAGC_OPT_STRING:
    case TAGC_OPT_CHOICE: {
      const char *s = *FIELD(cfg, o, char *const);
      v = json_string(s ? s : "");
      break;
    }
    }
    json_object_set_new(obj, key, v);
  }
  return obj;
}

void tagc_opts_log(const tagc_opt_program *prog, const void *cfg) {
  json_t *obj = tagc_opts_to_json(prog, cfg);
  char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  LOG_DEBUG("config", "%s effective configuration %s", prog->name, text ? text : "(out of memory)");
  free(text);
  json_decref(obj);
}

void tagc_opts_free(const tagc_opt_program *prog, void *cfg) {
  for (size_t i = 0; i < prog->n_opts; i++) {
    const tagc_opt *o = &prog->opts[i];
    if (o->type == TAGC_OPT_STRING || o->type == TAGC_OPT_CHOICE) {
      char **slot = FIELD(cfg, o, char *);
      free(*slot);
      *slot = NULL;
    }
  }
}
