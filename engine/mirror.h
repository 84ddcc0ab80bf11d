/* In-memory redundancy of the training state: every rank's shard state, also held by a buddy.
 *
 * An *image* is one rank's whole training state after a committed step: for each segment its
 * fp32 parameter, AdamW moment (m, v) shards and, for segments with error feedback, its whole
 * residual [W][S] (raw, as the rank holds it: a rank's residual covers every owner's shard),
 * plus the compression state (JSON, as a checkpoint manifest records it), the step, the
 * generation and the world size. A tagc_mirror is the process-wide store of images: this
 * rank's two newest own images and, per copy (--mirror-copies, 1 or 2), the two newest it
 * received from the rank that copies to it (rank r sends copy c to r + d_c mod W). It outlives
 * generations; the engine is rebuilt around it.
 *
 * Keeping it current (tagc_engine_mirror_push, every --mirror-every steps): a copy of the live
 * state into the older own slot (device to host), then per copy one collective shift of that
 * image by d_c, received into the older slot of that copy's pair. The image bytes are those of
 * the live state, so every copy is bit-identical to the owner's; a receive that fails leaves
 * that slot invalid and the newer one intact. Cost per push and rank: image bytes = 4 * (3 S +
 * W S [feedback]) summed over segments, sent and received once per copy; memory: 2 + 2 x
 * copies images in host memory. Two copies survive any two ranks lost at once.
 *
 * Rebuilding (tagc_engine_mirror_restore, collective in a new generation, any world size):
 * the ranks exchange which images they hold, choose the newest (generation, step) of which
 * every old rank's image survives somewhere (tagc_mirror_choose: pure), and the holders send
 * every new rank the slices of its new shards: parameters and moments as they are, and
 * residuals summed over the old ranks in rank order 0, 1, ... with fp32 accumulation, the sum
 * a checkpoint's canonicalisation computes (reduce-scatter, comm.h), placed in the new rank's
 * own row; a checkpoint of that step loaded at the new world size gives the same bytes. */
#ifndef TAGC_ENGINE_MIRROR_H
#define TAGC_ENGINE_MIRROR_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct tagc_mirror tagc_mirror;

/* Copies of each image at most, and slots per rank: two own images, two received per copy. */
#define TAGC_MIRROR_MAX_COPIES 2
#define TAGC_MIRROR_SLOTS (2 + 2 * TAGC_MIRROR_MAX_COPIES)

/* What one slot holds, as the ranks tell each other before a rebuild. */
typedef struct tagc_mirror_entry {
  int64_t gen;   /* generation that took it */
  int64_t step;  /* steps completed; 0 = the slot is empty */
  int32_t world; /* world size of that generation */
  int32_t rank;  /* the rank whose state it is */
  int32_t json_len; /* compression state bytes */
  int32_t canonical; /* its residuals were canonicalised (a checkpoint save at that step) */
} tagc_mirror_entry;

/* The choice of a rebuild (tagc_mirror_choose). */
typedef struct tagc_mirror_choice {
  int found;           /* 1: every old rank's image of (gen, step) is held by some new rank */
  int64_t gen, step;
  int world;           /* old world size */
  int provider[1024];  /* old rank -> new rank that sends its image */
  int slot[1024];      /* ... from that rank's slot */
  int canonical;       /* every image of it has canonical residuals */
  /* when !found and some image exists: the newest (gen, step) seen and an old rank of it whose
     image no new rank holds */
  int64_t lost_gen, lost_step;
  int lost_rank, lost_world;
} tagc_mirror_choice;

/* Pure: entries[r * TAGC_MIRROR_SLOTS + k] is new rank r's slot k (world_new ranks). Picks
 * the newest step (then generation) whose old world's every rank has an image among them;
 * provider = the lowest new rank holding it. Old worlds above 1024 ranks are not chosen. */
void tagc_mirror_choose(const tagc_mirror_entry *entries, int world_new, tagc_mirror_choice *out);

/* Pure: the buddy offset d (rank r sends its copies to r + d mod W, 1 <= d < W) that keeps
 * every rank's copy out of its failure domain (domains[r]: a host, node or pod name): the
 * smallest d for which domains[r] != domains[(r + d) % W] for every r; when none does, the d
 * separating the most ranks (the smallest of those). 1 for W < 2. */
int tagc_mirror_shift(const char *const *domains, int world);

/* Pure: the offsets of `copies` copies (1 <= copies <= TAGC_MIRROR_MAX_COPIES), distinct, the
 * first tagc_mirror_shift's, each next the one separating the most ranks from their domain
 * among those left (the smallest of ties). Returns how many were placed: min(copies, W - 1)
 * (0 for W < 2). */
int tagc_mirror_shifts(const char *const *domains, int world, int copies, int *out);

/* Pure: the copies' period (steps) that keeps copy_s per copy within `budget` (a fraction) of
 * step_s per step: ceil(copy_s / (budget * step_s)), at least 1 and at most 100000 (1 when
 * step_s or budget is not positive). */
int64_t tagc_mirror_period(double copy_s, double step_s, double budget);

tagc_status tagc_mirror_new(tagc_mirror **out);
/* NULL is fine. Before the device of the engines that used it is closed: its images live in
 * that device's host memory (page-locked on CUDA, tagc_device_host_alloc). */
void tagc_mirror_free(tagc_mirror *m);

/* Forgets every image (the state went back: a rollback, a resume from disk); keeps memory. */
void tagc_mirror_clear(tagc_mirror *m);

/* This process's slots (for logs and tests). */
void tagc_mirror_entries(const tagc_mirror *m, tagc_mirror_entry out[TAGC_MIRROR_SLOTS]);

/* Bytes of one image of the current layout, and the bytes the last push sent. */
size_t tagc_mirror_image_bytes(const tagc_mirror *m);

#endif
