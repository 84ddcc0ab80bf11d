/* --help of the tagctl subcommands (tagctl.h): one format for all, GNU style. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "tagctl/tagctl.h"

enum { WIDTH = 79, DESC_COL = 30 };

/* Writes text word by word from column *col, breaking lines before WIDTH and starting each
 * new line at column indent; one_word: text is kept on one line (a default). */
static void wrap(FILE *f, const char *text, int one_word, int indent, int *col) {
  while (*text) {
    while (*text == ' ')
      text++;
    size_t word = one_word ? strlen(text) : strcspn(text, " ");
    if (!word)
      break;
    int room = *col > indent ? 1 : 0;
    if (*col + room + (int)word > WIDTH && *col > indent) {
      fprintf(f, "\n%*s", indent, "");
      *col = indent;
      room = 0;
    }
    fprintf(f, "%s%.*s", room ? " " : "", (int)word, text);
    *col += room + (int)word;
    text += word;
  }
}

static const char *value_hint(const tagc_opt *o) {
  switch (o->type) {
  case TAGC_OPT_INT: return " N";
  case TAGC_OPT_DOUBLE: return " X";
  case TAGC_OPT_STRING: return " TEXT";
  case TAGC_OPT_CHOICE: return " ";
  case TAGC_OPT_BOOL: return "";
  }
  return "";
}

static int bool_on_by_default(const tagc_opt *o) {
  return o->type == TAGC_OPT_BOOL && o->def && (!strcmp(o->def, "true") || !strcmp(o->def, "1"));
}

/* One entry: flag (with its indent) padded to DESC_COL, or on a line of its own when longer,
 * then the description and the default note, wrapped. */
static void print_entry(FILE *f, const char *flag, const char *help, const char *def) {
  int col = (int)strlen(flag);
  fputs(flag, f);
  if (col + 2 > DESC_COL) {
    fputc('\n', f);
    col = 0;
  }
  fprintf(f, "%*s", DESC_COL - col, "");
  col = DESC_COL;
  wrap(f, help, 0, DESC_COL, &col);
  wrap(f, def, 1, DESC_COL, &col);
  fputc('\n', f);
}

/* "--name HINT", or "--name, --no-name" for a switch that is on by default, and its default. */
static void print_option(FILE *f, const tagc_opt *o) {
  char flag[160], def[160] = "";
  if (bool_on_by_default(o))
    snprintf(flag, sizeof flag, "  --%s, --no-%s", o->name, o->name);
  else
    snprintf(flag, sizeof flag, "  --%s%s%s", o->name, value_hint(o),
             o->type == TAGC_OPT_CHOICE ? o->choices : "");
  if (o->type == TAGC_OPT_BOOL)
    snprintf(def, sizeof def, "%s", bool_on_by_default(o) ? "(on by default)" : "");
  else if (o->def && *o->def)
    snprintf(def, sizeof def, "(default: %s)", o->def);
  print_entry(f, flag, o->help, def);
}

/* Whether name is one of the space-separated names. */
static int in_names(const char *names, const char *name) {
  size_t n = strlen(name);
  for (const char *p = names; p && *p;) {
    p += strspn(p, " ");
    size_t len = strcspn(p, " ");
    if (len == n && !strncmp(p, name, n))
      return 1;
    p += len;
  }
  return 0;
}

/* Whether some group names option o. */
static int grouped(const tagc_opt *o, const tagc_help_group *groups, size_t n_groups) {
  for (size_t g = 0; g < n_groups; g++)
    if (in_names(groups[g].names, o->name))
      return 1;
  return 0;
}

/* The options of group g, in the group's order. */
static void print_group(FILE *f, const tagc_opt_program *prog, const tagc_help_group *g) {
  fprintf(f, "\n%s:\n", g->heading);
  for (const char *p = g->names; *p;) {
    p += strspn(p, " ");
    size_t len = strcspn(p, " ");
    for (size_t i = 0; len && i < prog->n_opts; i++)
      if (strlen(prog->opts[i].name) == len && !strncmp(prog->opts[i].name, p, len))
        print_option(f, &prog->opts[i]);
    p += len;
  }
}

/* The options no group names, in table order, under heading (nothing when there are none). */
static void print_rest(FILE *f, const char *heading, const tagc_opt_program *prog,
                       const tagc_help_group *groups, size_t n_groups) {
  int any = 0;
  for (size_t i = 0; i < prog->n_opts; i++) {
    if (grouped(&prog->opts[i], groups, n_groups))
      continue;
    if (!any++)
      fprintf(f, "\n%s:\n", heading);
    print_option(f, &prog->opts[i]);
  }
}

void tagctl_help_print(const tagc_opt_program *prog, const tagc_help_group *groups,
                       size_t n_groups, FILE *f) {
  const char *form = prog->usage; /* forms separated by \n, one line each */
  for (int i = 0; *form; i++) {
    size_t len = strcspn(form, "\n");
    fprintf(f, "%s %s %.*s\n", i ? "      " : "usage:", prog->name, (int)len, form);
    form += len + (form[len] == '\n');
  }
  int col = 0;
  wrap(f, prog->summary, 0, 0, &col);
  fputc('\n', f);
  for (size_t g = 0; g < n_groups; g++)
    if (groups[g].heading)
      print_group(f, prog, &groups[g]);
  print_rest(f, groups ? "Other options" : "Options", prog, groups, n_groups);
  fprintf(f, "\nConfiguration and help:\n");
  print_entry(f, "  --config FILE", "a JSON object of option values, or TOML for FILE.toml "
              "(keys: the names with _)", "");
  print_entry(f, "  --help", "show this text and exit", "");
  /* the first option as the example of its environment variable and config key */
  const char *name = prog->n_opts ? prog->opts[0].name : "name";
  char env[96], key[96];
  size_t n = 0;
  for (; name[n] && n + 1 < sizeof key; n++) {
    key[n] = name[n] == '-' ? '_' : name[n];
    env[n] = (char)toupper((unsigned char)key[n]);
  }
  key[n] = env[n] = '\0';
  char note[512];
  snprintf(note, sizeof note, "Every option is also an environment variable (--%s: TAGC_%s) "
           "and a key of the --config file (%s); a flag wins over the environment, the "
           "environment over the file.", name, env, key);
  fputc('\n', f);
  col = 0;
  wrap(f, note, 0, 0, &col);
  fputc('\n', f);
}

int tagctl_help_wanted(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--"))
      return 0;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
      return 1;
  }
  return 0;
}
