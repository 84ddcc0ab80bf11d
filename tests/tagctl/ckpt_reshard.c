/* Test helper: rewrites a committed checkpoint at another world size, the way a run of W
 * workers would have saved the same state (each unit cut into W shards of
 * roundup(ceil(numel / W), 1024) elements, as engine/engine.c does), with the same manifest
 * state. For the check that an export does not depend on the world size that saved.
 * usage: ckpt_reshard STEP_DIR DST_ROOT W */
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/ckpt.h"

static int fail(const char *what) {
  fprintf(stderr, "ckpt_reshard: %s: %s\n", what, tagc_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 4 || atoi(argv[3]) < 1) {
    fprintf(stderr, "usage: ckpt_reshard STEP_DIR DST_ROOT W\n");
    return 2;
  }
  int world = atoi(argv[3]);
  tagc_ckpt_reader *rd;
  if (tagc_ckpt_open(argv[1], TAGC_CKPT_VERIFY_FULL, &rd) != TAGC_OK)
    return fail(argv[1]);
  int n_units = tagc_ckpt_reader_n_units(rd), n_streams = tagc_ckpt_reader_n_streams(rd);
  const json_t *man = tagc_ckpt_reader_manifest(rd);
  const char **unit_names = calloc((size_t)n_units, sizeof *unit_names);
  const char **stream_names = calloc((size_t)n_streams, sizeof *stream_names);
  int64_t *numel = calloc((size_t)n_units, sizeof *numel);
  tagc_ckpt_range *ranges = calloc((size_t)n_units, sizeof *ranges);
  const float **data = calloc((size_t)n_units * n_streams, sizeof *data);
  float **bufs = calloc((size_t)n_units * n_streams, sizeof *bufs);
  for (int u = 0; u < n_units; u++) {
    unit_names[u] = json_string_value(json_object_get(json_array_get(json_object_get(man, "units"), (size_t)u), "name"));
    numel[u] = tagc_ckpt_reader_unit_numel(rd, u);
  }
  for (int s = 0; s < n_streams; s++)
    stream_names[s] = json_string_value(json_array_get(json_object_get(man, "streams"), (size_t)s));
  tagc_ckpt_layout layout = {n_units, unit_names, numel, n_streams, stream_names};
  int64_t step = tagc_ckpt_reader_step(rd);
  for (int r = 0; r < world; r++) {
    for (int u = 0; u < n_units; u++) {
      int64_t shard = ((numel[u] + world - 1) / world + 1023) / 1024 * 1024;
      ranges[u] = (tagc_ckpt_range){r * shard, (r + 1) * shard};
      int64_t count = tagc_ckpt_range_count(ranges[u], numel[u]);
      for (int s = 0; s < n_streams; s++) {
        float **b = &bufs[u * n_streams + s];
        free(*b);
        *b = malloc((size_t)(count > 0 ? count : 1) * sizeof(float));
        if (count > 0 && tagc_ckpt_read(rd, u, s, ranges[u].lo, ranges[u].lo + count, *b) != TAGC_OK)
          return fail("read");
        data[u * n_streams + s] = count > 0 ? *b : NULL;
      }
    }
    if (tagc_ckpt_write_shard(argv[2], step, r, world, &layout, ranges, data) != TAGC_OK)
      return fail("write shard");
  }
  tagc_ckpt_meta meta = {tagc_ckpt_reader_meta(rd, "model"), tagc_ckpt_reader_meta(rd, "tensors"),
                         tagc_ckpt_reader_meta(rd, "sampler"), tagc_ckpt_reader_meta(rd, "rng"),
                         tagc_ckpt_reader_meta(rd, "compression")};
  if (tagc_ckpt_commit(argv[2], step, world, &layout, &meta, NULL) != TAGC_OK)
    return fail("commit");
  for (int i = 0; i < n_units * n_streams; i++)
    free(bufs[i]);
  free(bufs);
  free(data);
  free(ranges);
  free(numel);
  free(stream_names);
  free(unit_names);
  tagc_ckpt_close(rd);
  return 0;
}
