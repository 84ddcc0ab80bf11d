/* tagctl ckpt ls|verify|inspect. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_cli.h"
#include "ckpt/ckpt_internal.h"
#include "common/json.h"

enum { EXIT_OK = 0, EXIT_INVALID = 1, EXIT_USAGE = 2 };

static int usage(void) {
  fprintf(stderr, "usage: tagctl ckpt ls DIR | verify DIR|DIR/step-N | inspect DIR|DIR/step-N | "
                  "export CKPT --format safetensors|llmc --out FILE (see tagctl ckpt --help)\n");
  return EXIT_USAGE;
}

static int is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* A step directory is named step-<n> or holds a manifest. */
static int is_step_dir(const char *path) {
  char manifest[CKPT_PATH_MAX];
  const char *base = strrchr(path, '/');
  base = base && base[1] ? base + 1 : path;
  int64_t s;
  struct stat sb;
  return ckpt_parse_step_name(base, &s) ||
         (ckpt_path_fmt(manifest, "%s/manifest.json", path) == TAGC_OK && stat(manifest, &sb) == 0);
}

/* Sum of the sizes of the plain files in a directory. */
static long long dir_bytes(const char *path) {
  DIR *d = opendir(path);
  if (!d)
    return -1;
  long long total = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char child[CKPT_PATH_MAX];
    struct stat sb;
    if (ckpt_path_fmt(child, "%s/%s", path, e->d_name) == TAGC_OK && stat(child, &sb) == 0 && S_ISREG(sb.st_mode))
      total += sb.st_size;
  }
  closedir(d);
  return total;
}

static void human_bytes(long long b, char *out, size_t cap) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    i++;
  }
  snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", v, units[i]);
}

/* The step LATEST names, -1 when absent or unreadable. */
static int64_t latest_step(const char *dir) {
  char path[CKPT_PATH_MAX], text[64] = {0};
  if (ckpt_path_fmt(path, "%s/LATEST", dir) != TAGC_OK)
    return -1;
  FILE *f = fopen(path, "r");
  if (!f)
    return -1;
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' '))
    text[--n] = '\0';
  int64_t s;
  return ckpt_parse_step_name(text, &s) ? s : -1;
}

static int cmd_ls(const char *dir) {
  int64_t *steps = NULL, *tmps = NULL;
  int n = 0, n_tmp = 0;
  if (ckpt_list_steps(dir, "", &steps, &n) != TAGC_OK || ckpt_list_steps(dir, CKPT_SUFFIX_TMP, &tmps, &n_tmp) != TAGC_OK) {
    fprintf(stderr, "tagctl ckpt ls: %s\n", tagc_last_error());
    free(steps);
    return EXIT_USAGE;
  }
  int64_t latest = latest_step(dir);
  printf("%-12s %-6s %-12s %s\n", "STEP", "WORLD", "SIZE", "STATE");
  for (int i = 0; i < n; i++) {
    char path[CKPT_PATH_MAX], size[32];
    if (tagc_ckpt_step_path(dir, steps[i], 0, path, sizeof path) != TAGC_OK)
      continue;
    human_bytes(dir_bytes(path), size, sizeof size);
    tagc_ckpt_reader *rd;
    if (tagc_ckpt_open(path, TAGC_CKPT_VERIFY_QUICK, &rd) == TAGC_OK) {
      /* quick check: manifest checksum, file sizes, headers, trailers; the payload is read by verify */
      printf("%-12lld %-6d %-12s valid%s, payload unverified\n", (long long)steps[i],
             tagc_ckpt_reader_world_size(rd), size, steps[i] == latest ? " (LATEST)" : "");
      tagc_ckpt_close(rd);
    } else {
      printf("%-12lld %-6s %-12s INVALID: %s\n", (long long)steps[i], "-", size, tagc_last_error());
    }
  }
  for (int i = 0; i < n_tmp; i++) {
    char name[CKPT_NAME_MAX];
    ckpt_step_name(tmps[i], 1, name);
    printf("%-12lld %-6s %-12s partial (%s, never committed)\n", (long long)tmps[i], "-", "-", name);
  }
  if (n + n_tmp == 0)
    printf("(no checkpoints in %s)\n", dir);
  free(steps);
  free(tmps);
  return EXIT_OK;
}

/* Full check of one step directory, printing every defect; returns 1 when valid. */
static int verify_one(const char *path) {
  tagc_ckpt_reader *rd;
  if (tagc_ckpt_open(path, TAGC_CKPT_VERIFY_MANIFEST, &rd) != TAGC_OK) {
    printf("%s: INVALID: %s\n", path, tagc_last_error());
    return 0;
  }
  int bad = 0, world = tagc_ckpt_reader_world_size(rd);
  for (int r = 0; r < world; r++) {
    if (tagc_ckpt_verify_files(rd, r, world) != TAGC_OK) {
      printf("%s: INVALID: %s\n", path, tagc_last_error());
      bad++;
    }
  }
  if (!bad)
    printf("%s: ok (step %lld, %d files)\n", path, (long long)tagc_ckpt_reader_step(rd), world);
  tagc_ckpt_close(rd);
  return bad == 0;
}

static int cmd_verify(const char *path) {
  if (is_step_dir(path))
    return verify_one(path) ? EXIT_OK : EXIT_INVALID;
  int64_t *steps;
  int n;
  if (ckpt_list_steps(path, "", &steps, &n) != TAGC_OK) {
    fprintf(stderr, "tagctl ckpt verify: %s\n", tagc_last_error());
    return EXIT_USAGE;
  }
  int valid = 0;
  for (int i = 0; i < n; i++) {
    char step_path[CKPT_PATH_MAX];
    if (tagc_ckpt_step_path(path, steps[i], 0, step_path, sizeof step_path) == TAGC_OK)
      valid += verify_one(step_path);
  }
  free(steps);
  if (n == 0)
    printf("%s: no committed checkpoints\n", path);
  return n > 0 && valid == n ? EXIT_OK : EXIT_INVALID;
}

static void print_meta(const tagc_ckpt_reader *rd, const char *key) {
  char *text = tagc_json_dump(tagc_ckpt_reader_meta(rd, key));
  printf("%-12s %s\n", key, text ? text : "?");
  free(text);
}

static void print_units(const tagc_ckpt_reader *rd) {
  const json_t *man = tagc_ckpt_reader_manifest(rd);
  const json_t *files = json_object_get(man, "files");
  printf("units\n  %-24s %-12s %s\n", "NAME", "NUMEL", "RANGES BY RANK");
  for (int u = 0; u < tagc_ckpt_reader_n_units(rd); u++) {
    const char *name = json_string_value(json_object_get(json_array_get(json_object_get(man, "units"), (size_t)u), "name"));
    printf("  %-24s %-12lld", name, (long long)tagc_ckpt_reader_unit_numel(rd, u));
    for (size_t r = 0; r < json_array_size(files); r++) {
      const json_t *g = json_array_get(json_object_get(json_array_get(files, r), "ranges"), (size_t)u);
      printf(" [%lld,%lld)", (long long)json_integer_value(json_array_get(g, 0)),
             (long long)json_integer_value(json_array_get(g, 1)));
    }
    printf("\n");
  }
  printf("files\n");
  for (size_t r = 0; r < json_array_size(files); r++) {
    const json_t *f = json_array_get(files, r);
    printf("  %-16s %12lld bytes  crc32c %08llx\n", json_string_value(json_object_get(f, "file")),
           (long long)json_integer_value(json_object_get(f, "bytes")),
           (long long)json_integer_value(json_object_get(f, "crc32c")));
  }
}

static int cmd_inspect(const char *path) {
  tagc_ckpt_reader *rd;
  tagc_status st = is_step_dir(path) ? tagc_ckpt_open(path, TAGC_CKPT_VERIFY_MANIFEST, &rd)
                                     : tagc_ckpt_find_latest_valid(path, TAGC_CKPT_VERIFY_QUICK, &rd);
  if (st != TAGC_OK) {
    fprintf(stderr, "tagctl ckpt inspect: %s\n", tagc_last_error());
    return EXIT_INVALID;
  }
  const json_t *man = tagc_ckpt_reader_manifest(rd);
  printf("%-12s %s\n", "checkpoint", tagc_ckpt_reader_path(rd));
  printf("%-12s %lld\n", "step", (long long)tagc_ckpt_reader_step(rd));
  printf("%-12s %d\n", "world size", tagc_ckpt_reader_world_size(rd));
  printf("%-12s %d (software %s)\n", "format", TAGC_CKPT_FORMAT_VERSION,
         json_string_value(json_object_get(man, "software_version")) ? json_string_value(json_object_get(man, "software_version")) : "?");
  printf("%-12s", "streams");
  for (int s = 0; s < tagc_ckpt_reader_n_streams(rd); s++)
    printf(" %s", json_string_value(json_array_get(json_object_get(man, "streams"), (size_t)s)));
  printf("\n");
  print_units(rd);
  print_meta(rd, "model");
  print_meta(rd, "tensors");
  print_meta(rd, "sampler");
  print_meta(rd, "rng");
  print_meta(rd, "compression");
  tagc_ckpt_close(rd);
  return EXIT_OK;
}

typedef struct verb {
  const char *name;
  int (*run)(const char *path);
  const char *args; /* for the usage line */
  const char *help; /* for --help, wrapped at 79 columns */
} verb;

#define DIR_TEXT                                                                            \
  "DIR is a checkpoint root (a run's OUT/ckpt, or its --ckpt-dir) or a run's OUT,\n"        \
  "which stands for OUT/ckpt."

static const verb verbs[] = {
    {"ls", cmd_ls, "DIR",
     "Lists the checkpoints of DIR: step, world size, size and state. valid: a quick\n"
     "check of the manifest, the file sizes, headers and trailers, the payload unread\n"
     "(LATEST: the one LATEST names); INVALID and why; partial: a save never\n"
     "committed.\n" DIR_TEXT},
    {"verify", cmd_verify, "DIR|DIR/step-N",
     "Checks every file of each committed checkpoint of DIR, or of one step-N\n"
     "directory, in full (sizes, headers, CRC32C of the contents) and prints each\n"
     "defect. Exit status 1 when one is invalid or there is none.\n" DIR_TEXT},
    {"inspect", cmd_inspect, "DIR|DIR/step-N",
     "Summarises a checkpoint's manifest (DIR: its newest valid checkpoint): step,\n"
     "world size, format, units and their ranges per rank, files, and the saved\n"
     "model, tensors, sampler, RNG and compression state.\n" DIR_TEXT},
};
#define N_VERBS (sizeof verbs / sizeof verbs[0])

static const char export_usage[] = "export CKPT --format safetensors|llmc --out FILE";

static int is_help(const char *arg) { return !strcmp(arg, "--help") || !strcmp(arg, "-h"); }

static void ckpt_help(void) {
  printf("usage: tagctl ckpt COMMAND ARGS\n");
  for (size_t i = 0; i < N_VERBS; i++)
    printf("       tagctl ckpt %s %s\n", verbs[i].name, verbs[i].args);
  printf("       tagctl ckpt %s\n", export_usage);
  printf("The checkpoints of a run (docs/checkpoint-format.md). Exit status: 0 ok, 1 an\n"
         "invalid checkpoint, 2 a usage error or a path that is not a directory.\n\n"
         "commands:\n"
         "  ls       every checkpoint with its step, world size, size and state\n"
         "  verify   a full check of every file (CRC32C); prints each defect\n"
         "  inspect  a checkpoint's manifest: units, ranges per rank, files, saved state\n"
         "  export   the model as one file: safetensors (Hugging Face GPT-2) or llm.c\n\n"
         "Options:\n"
         "  --help                      show this text and exit\n\n"
         "`tagctl ckpt COMMAND --help` says more about each.\n");
}

static void verb_help(const verb *v) {
  printf("usage: tagctl ckpt %s %s\n%s\n\nOptions:\n"
         "  --help                      show this text and exit\n", v->name, v->args, v->help);
}

/* DIR as the tools read it: a run's OUT (no step directory in it, OUT/ckpt a directory)
 * stands for OUT/ckpt, as for tagctl ckpt export and sample. */
static const char *checkpoint_root(const char *path, char *buf) {
  int64_t *steps = NULL, *tmps = NULL;
  int n = 0, n_tmp = 0;
  if (is_step_dir(path) || ckpt_path_fmt(buf, "%s/ckpt", path) != TAGC_OK || !is_dir(buf))
    return path;
  int any = ckpt_list_steps(path, "", &steps, &n) != TAGC_OK ||
            ckpt_list_steps(path, CKPT_SUFFIX_TMP, &tmps, &n_tmp) != TAGC_OK || n + n_tmp > 0;
  free(steps);
  free(tmps);
  tagc_clear_error();
  return any ? path : buf;
}

int tagc_ckpt_cli_main(int argc, char **argv) {
  if (argc == 2 && is_help(argv[1])) {
    ckpt_help();
    return EXIT_OK;
  }
  const verb *v = NULL;
  for (size_t i = 0; argc > 1 && i < N_VERBS; i++)
    if (!strcmp(argv[1], verbs[i].name))
      v = &verbs[i];
  if (!v)
    return usage();
  for (int i = 2; i < argc; i++) {
    if (is_help(argv[i])) {
      verb_help(v);
      return EXIT_OK;
    }
    if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "tagctl ckpt %s: unknown option '%s' (see tagctl ckpt %s --help)\n",
              v->name, argv[i], v->name);
      return EXIT_USAGE;
    }
  }
  if (argc != 3) {
    fprintf(stderr, "usage: tagctl ckpt %s %s\n", v->name, v->args);
    return EXIT_USAGE;
  }
  const char *path = argv[2];
  if (!is_dir(path)) {
    fprintf(stderr, "tagctl ckpt %s: %s is not a directory\n", v->name, path);
    return EXIT_USAGE;
  }
  char root[CKPT_PATH_MAX];
  return v->run(checkpoint_root(path, root));
}
