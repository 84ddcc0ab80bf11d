/* Correctness and counters of every Gloo collective for world sizes 1..4, each rank a forked
 * process bootstrapped through a file store. Expectations are computed locally from the
 * deterministic inputs of all ranks, summing in rank order, so fp32 results must match bit
 * for bit. */
#include <stdint.h>

#include "comm/comm.h"
#include "common/timeutil.h"
#include "harness.h"
#include "test.h"

/* A forked rank counts only its own checks, not those its parent made before the fork. */
#define RANK_START() (test_failed_ = test_passed_ = 0)

/* Deterministic input value of element i on rank r (multiples of 1/64 and irregular). */
static float input_f32(int r, size_t i) {
  uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(i * 2246822519u);
  h ^= h >> 13;
  h *= 3266489917u;
  h ^= h >> 16;
  return ((float)(h % 20001) - 10000.0f) / 977.0f;
}

static uint64_t input_u64(int r, size_t i) {
  return (uint64_t)1 << ((r * 7 + i * 3) % 64) | (uint64_t)(i % 5 == (size_t)r) << 63;
}

static void fill_f32(float *x, size_t n, int r, size_t base) {
  for (size_t i = 0; i < n; i++)
    x[i] = input_f32(r, base + i);
}

static void check_stats(tagc_comm *c, tagc_comm_opkind kind, uint64_t sent, uint64_t recv) {
  tagc_comm_stats s;
  tagc_comm_stats_get(c, &s);
  CHECK_EQ_INT(s.op[kind].calls, 1);
  CHECK_EQ_INT(s.op[kind].errors, 0);
  CHECK_MSG(s.op[kind].bytes_sent == sent && s.op[kind].bytes_recv == recv,
            "%s: sent %llu recv %llu, expected %llu %llu", tagc_comm_opkind_name(kind),
            (unsigned long long)s.op[kind].bytes_sent, (unsigned long long)s.op[kind].bytes_recv,
            (unsigned long long)sent, (unsigned long long)recv);
  CHECK(s.op[kind].seconds >= 0);
  tagc_comm_stats_reset(c);
}

static void test_allgather(tagc_comm *c, int rank, int w) {
  size_t n = 1001;
  unsigned char *in = malloc(n), *out = malloc(n * (size_t)w);
  for (size_t i = 0; i < n; i++)
    in[i] = (unsigned char)(rank * 31 + i);
  CHECK_OK(tagc_comm_allgather(c, in, out, n, 0));
  int bad = 0;
  for (int r = 0; r < w; r++)
    for (size_t i = 0; i < n; i++)
      bad += out[(size_t)r * n + i] != (unsigned char)(r * 31 + i);
  CHECK_EQ_INT(bad, 0);
  check_stats(c, TAGC_COMM_OP_ALLGATHER, (uint64_t)(w - 1) * n, (uint64_t)(w - 1) * n);
  /* In place: own block already at its offset in the output. */
  memset(out, 0, n * (size_t)w);
  memcpy(out + (size_t)rank * n, in, n);
  CHECK_OK(tagc_comm_allgather(c, out + (size_t)rank * n, out, n, 0));
  bad = 0;
  for (int r = 0; r < w; r++)
    for (size_t i = 0; i < n; i++)
      bad += out[(size_t)r * n + i] != (unsigned char)(r * 31 + i);
  CHECK_EQ_INT(bad, 0);
  if (w > 1)
    CHECK_EQ_INT(tagc_comm_allgather(c, out + 1, out, n, 0), TAGC_EINVAL);
  tagc_comm_stats_reset(c);
  free(in);
  free(out);
}

static void test_alltoall(tagc_comm *c, int rank, int w) {
  size_t n = 777;
  unsigned char *in = malloc(n * (size_t)w), *out = malloc(n * (size_t)w);
  for (int j = 0; j < w; j++)
    for (size_t i = 0; i < n; i++)
      in[(size_t)j * n + i] = (unsigned char)(rank * 17 + j * 5 + i);
  CHECK_OK(tagc_comm_alltoall(c, in, out, n, 0));
  int bad = 0;
  for (int r = 0; r < w; r++)
    for (size_t i = 0; i < n; i++)
      bad += out[(size_t)r * n + i] != (unsigned char)(r * 17 + rank * 5 + i);
  CHECK_EQ_INT(bad, 0);
  check_stats(c, TAGC_COMM_OP_ALLTOALL, (uint64_t)(w - 1) * n, (uint64_t)(w - 1) * n);
  free(in);
  free(out);
}

/* Varying sizes: rank i sends (i + 2 j) % 3 * 100 + i bytes to rank j (some pairs 0 bytes
 * one way), then a shift (to rank + 1, from rank - 1) that contacts one peer each way. */
static size_t v_bytes(int from, int to) { return (size_t)(((from + 2 * to) % 3) * 100 + from); }

static void test_alltoallv(tagc_comm *c, int rank, int w) {
  size_t sb[8], rb[8], st = 0, rt = 0, sent = 0, recv = 0;
  for (int j = 0; j < w; j++) {
    sb[j] = j == rank ? v_bytes(rank, rank) : v_bytes(rank, j);
    rb[j] = j == rank ? v_bytes(rank, rank) : v_bytes(j, rank);
    st += sb[j];
    rt += rb[j];
    sent += j == rank ? 0 : sb[j];
    recv += j == rank ? 0 : rb[j];
  }
  unsigned char *in = malloc(st + 1), *out = malloc(rt + 1);
  for (int j = 0, o = 0; j < w; o += (int)sb[j], j++)
    for (size_t i = 0; i < sb[j]; i++)
      in[o + i] = (unsigned char)(rank * 41 + j * 7 + i);
  CHECK_OK(tagc_comm_alltoallv(c, in, sb, out, rb, 0));
  int bad = 0;
  for (int r = 0, o = 0; r < w; o += (int)rb[r], r++)
    for (size_t i = 0; i < rb[r]; i++)
      bad += out[o + i] != (unsigned char)(r * 41 + rank * 7 + i);
  CHECK_EQ_INT(bad, 0);
  check_stats(c, TAGC_COMM_OP_ALLTOALLV, sent, recv);
  /* a shift: 1000 bytes to rank + 1, from rank - 1 */
  if (w > 1) {
    size_t s2[8] = {0}, r2[8] = {0};
    s2[(rank + 1) % w] += 1000;
    r2[(rank + w - 1) % w] += 1000;
    unsigned char a[1000], b[1000];
    for (int i = 0; i < 1000; i++)
      a[i] = (unsigned char)(rank + i);
    CHECK_OK(tagc_comm_alltoallv(c, a, s2, b, r2, 0));
    int from = (rank + w - 1) % w, bad2 = 0;
    for (int i = 0; i < 1000; i++)
      bad2 += b[i] != (unsigned char)(from + i);
    CHECK_EQ_INT(bad2, 0);
    check_stats(c, TAGC_COMM_OP_ALLTOALLV, w == 1 ? 0 : 1000, w == 1 ? 0 : 1000);
  }
  /* a count mismatch with a peer: refused, never mixed (checked apart, it breaks c) */
  free(in);
  free(out);
}

static void test_broadcast_barrier(tagc_comm *c, int rank, int w) {
  char buf[300];
  int root = w - 1;
  for (size_t i = 0; i < sizeof buf; i++)
    buf[i] = rank == root ? (char)(i * 7) : 0;
  CHECK_OK(tagc_comm_broadcast(c, buf, sizeof buf, root, 0));
  int bad = 0;
  for (size_t i = 0; i < sizeof buf; i++)
    bad += buf[i] != (char)(i * 7);
  CHECK_EQ_INT(bad, 0);
  uint64_t bytes = sizeof buf;
  if (rank == root)
    check_stats(c, TAGC_COMM_OP_BROADCAST, (uint64_t)(w - 1) * bytes, 0);
  else
    check_stats(c, TAGC_COMM_OP_BROADCAST, 0, bytes);
  CHECK_OK(tagc_comm_barrier(c, 0));
  check_stats(c, TAGC_COMM_OP_BARRIER, (uint64_t)(w - 1), (uint64_t)(w - 1));
}

static void test_reduce_scatter_f32(tagc_comm *c, int rank, int w) {
  size_t n = 65537;
  float *in = malloc(sizeof(float) * n * (size_t)w), *out = malloc(sizeof(float) * n);
  fill_f32(in, n * (size_t)w, rank, 0);
  CHECK_OK(tagc_comm_reduce_scatter(c, in, out, n, TAGC_DTYPE_F32, TAGC_REDOP_SUM,
                                    TAGC_WIRE_NATIVE, 0));
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    size_t g = (size_t)rank * n + i;
    float want = input_f32(0, g);
    for (int r = 1; r < w; r++)
      want += input_f32(r, g);
    bad += memcmp(&want, &out[i], sizeof want) != 0;
  }
  CHECK_EQ_INT(bad, 0);
  check_stats(c, TAGC_COMM_OP_REDUCE_SCATTER, (uint64_t)(w - 1) * n * 4,
              (uint64_t)(w - 1) * n * 4);
  free(in);
  free(out);
}

static void test_reduce_scatter_bf16(tagc_comm *c, int rank, int w) {
  size_t n = 4099;
  float *in = malloc(sizeof(float) * n * (size_t)w), *out = malloc(sizeof(float) * n);
  fill_f32(in, n * (size_t)w, rank, 0);
  /* Two ties of round-to-nearest-even in the first elements of every chunk. */
  for (int j = 0; j < w; j++) {
    in[(size_t)j * n] = 1.0f + 0x1p-8f;        /* -> 1.0 */
    in[(size_t)j * n + 1] = 1.0f + 3 * 0x1p-8f; /* -> 1 + 2^-6 */
  }
  CHECK_OK(tagc_comm_reduce_scatter(c, in, out, n, TAGC_DTYPE_F32, TAGC_REDOP_SUM,
                                    TAGC_WIRE_BF16, 0));
  CHECK_EQ_INT(out[0] == (float)w, 1);
  CHECK_EQ_INT(out[1] == (float)w * (1.0f + 0x1p-6f), 1);
  double worst = 0;
  for (size_t i = 2; i < n; i++) {
    size_t g = (size_t)rank * n + i;
    double exact = 0, bound = 0;
    for (int r = 0; r < w; r++) {
      exact += input_f32(r, g);
      bound += fabs(input_f32(r, g)) * 0x1p-8 + 1e-6;
    }
    double err = fabs(out[i] - exact) / bound;
    worst = err > worst ? err : worst;
  }
  CHECK_MSG(worst <= 1.0, "bf16 wire error %.3g of its bound", worst);
  check_stats(c, TAGC_COMM_OP_REDUCE_SCATTER, (uint64_t)(w - 1) * n * 2,
              (uint64_t)(w - 1) * n * 2);
  free(in);
  free(out);
}

static void test_reduce_scatter_or(tagc_comm *c, int rank, int w) {
  size_t n = 300;
  uint64_t *in = malloc(8 * n * (size_t)w), *out = malloc(8 * n);
  for (size_t i = 0; i < n * (size_t)w; i++)
    in[i] = input_u64(rank, i);
  CHECK_OK(tagc_comm_reduce_scatter(c, in, out, n, TAGC_DTYPE_U64, TAGC_REDOP_BOR,
                                    TAGC_WIRE_NATIVE, 0));
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t want = 0;
    for (int r = 0; r < w; r++)
      want |= input_u64(r, (size_t)rank * n + i);
    bad += out[i] != want;
  }
  CHECK_EQ_INT(bad, 0);
  check_stats(c, TAGC_COMM_OP_REDUCE_SCATTER, (uint64_t)(w - 1) * n * 8,
              (uint64_t)(w - 1) * n * 8);
  free(in);
  free(out);
}

/* Bytes one all-reduce moves per direction on this rank (the formula in comm.h). */
static uint64_t allreduce_bytes(size_t count, int w, int rank, size_t es) {
  size_t block = count / (size_t)w + ((size_t)rank < count % (size_t)w);
  return (uint64_t)(count + (size_t)(w - 2) * block) * es * (w > 1);
}

static void test_allreduce_sum(tagc_comm *c, int rank, int w) {
  size_t n = 10003;
  float *x = malloc(sizeof(float) * n), *first = malloc(sizeof(float) * n);
  float *all = malloc(sizeof(float) * n * (size_t)w);
  fill_f32(x, n, rank, 0);
  CHECK_OK(tagc_comm_allreduce(c, x, x, n, TAGC_DTYPE_F32, TAGC_REDOP_SUM, 0)); /* in place */
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want = input_f32(0, i);
    for (int r = 1; r < w; r++)
      want += input_f32(r, i);
    bad += memcmp(&want, &x[i], sizeof want) != 0;
  }
  CHECK_EQ_INT(bad, 0);
  check_stats(c, TAGC_COMM_OP_ALLREDUCE, allreduce_bytes(n, w, rank, 4),
              allreduce_bytes(n, w, rank, 4));
  /* Every rank holds the same bits, and a second run (out of place) repeats them. */
  CHECK_OK(tagc_comm_allgather(c, x, all, sizeof(float) * n, 0));
  bad = 0;
  for (int r = 0; r < w; r++)
    bad += memcmp(all + (size_t)r * n, x, sizeof(float) * n) != 0;
  CHECK_EQ_INT(bad, 0);
  memcpy(first, x, sizeof(float) * n);
  fill_f32(all, n, rank, 0);
  CHECK_OK(tagc_comm_allreduce(c, all, x, n, TAGC_DTYPE_F32, TAGC_REDOP_SUM, 0));
  CHECK_EQ_INT(memcmp(first, x, sizeof(float) * n), 0);
  tagc_comm_stats_reset(c);
  free(x);
  free(first);
  free(all);
}

/* The first reduction of a communicator with fewer elements than ranks: the ranks that own
 * no element have had no scratch yet (this used to fail with "scratch of 0 bytes"). */
static void test_first_tiny_allreduce(tagc_comm *c, int rank, int w) {
  float v = (float)(rank + 1);
  CHECK_OK(tagc_comm_allreduce(c, &v, &v, 1, TAGC_DTYPE_F32, TAGC_REDOP_SUM, 0));
  CHECK(v == (float)(w * (w + 1) / 2));
  tagc_comm_stats_reset(c);
}

static void test_allreduce_max_or(tagc_comm *c, int rank, int w) {
  size_t n = 517;
  float *x = malloc(sizeof(float) * n);
  fill_f32(x, n, rank, 100);
  if (rank == w - 1)
    x[3] = NAN;
  CHECK_OK(tagc_comm_allreduce(c, x, x, n, TAGC_DTYPE_F32, TAGC_REDOP_MAX, 0));
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want = input_f32(0, 100 + i);
    for (int r = 1; r < w; r++)
      want = fmaxf(want, input_f32(r, 100 + i));
    bad += i == 3 ? !isnan(x[i]) : x[i] != want;
  }
  CHECK_EQ_INT(bad, 0);
  /* Fewer elements than ranks: some blocks are empty. */
  uint64_t bits[3];
  for (size_t i = 0; i < 3; i++)
    bits[i] = input_u64(rank, i);
  CHECK_OK(tagc_comm_allreduce(c, bits, bits, 3, TAGC_DTYPE_U64, TAGC_REDOP_BOR, 0));
  bad = 0;
  for (size_t i = 0; i < 3; i++) {
    uint64_t want = 0;
    for (int r = 0; r < w; r++)
      want |= input_u64(r, i);
    bad += bits[i] != want;
  }
  CHECK_EQ_INT(bad, 0);
  tagc_comm_stats_reset(c);
  free(x);
}

static void test_bad_arguments(tagc_comm *c, int w) {
  uint64_t a[8] = {0}, b[8];
  CHECK_EQ_INT(tagc_comm_reduce_scatter(c, a, b, 1, TAGC_DTYPE_U64, TAGC_REDOP_SUM,
                                        TAGC_WIRE_BF16, 0), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_comm_allreduce(c, a, a, 2, TAGC_DTYPE_F32, TAGC_REDOP_BOR, 0),
               TAGC_EINVAL);
  CHECK_EQ_INT(tagc_comm_broadcast(c, a, 8, w, 0), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_comm_alltoall(c, a, a, 8, 0), TAGC_EINVAL);
  CHECK_EQ_INT(tagc_comm_status(c), TAGC_OK);
  tagc_comm_stats s;
  tagc_comm_stats_get(c, &s);
  CHECK_EQ_INT(s.op[TAGC_COMM_OP_ALLREDUCE].errors, 0);
  tagc_comm_stats_reset(c);
}

static int ops_rank(int rank, int world, const char *dir, void *arg) {
  (void)arg;
  RANK_START();
  tagc_comm *c = harness_comm(rank, world, dir, "ops", 20.0);
  CHECK(c != NULL);
  if (!c)
    return test_failed_;
  CHECK_EQ_INT(tagc_comm_rank(c), rank);
  CHECK_EQ_INT(tagc_comm_world_size(c), world);
  test_bad_arguments(c, world);
  test_first_tiny_allreduce(c, rank, world);
  test_allgather(c, rank, world);
  test_alltoall(c, rank, world);
  test_alltoallv(c, rank, world);
  test_broadcast_barrier(c, rank, world);
  test_reduce_scatter_f32(c, rank, world);
  test_reduce_scatter_bf16(c, rank, world);
  test_reduce_scatter_or(c, rank, world);
  test_allreduce_sum(c, rank, world);
  test_allreduce_max_or(c, rank, world);
  CHECK_EQ_INT(tagc_comm_status(c), TAGC_OK);
  CHECK_EQ_INT(tagc_comm_failed_peer(c), -1);
  tagc_comm_destroy(c);
  if (test_failed_)
    fprintf(stderr, "rank %d of %d: %d checks failed\n", rank, world, test_failed_);
  return test_failed_;
}

/* Bad configurations are refused with TAGC_EINVAL before anything connects. */
static void test_bad_configs(void) {
  tagc_store *store = NULL;
  CHECK_OK(tagc_store_file_new("/tmp", &store));
  tagc_comm_config cfg;
  tagc_comm *c = NULL;
  struct {
    const char *what;
    int version, rank, world, has_store;
    const char *prefix;
    double timeout;
  } cases[] = {
      {"version", 99, 0, 1, 1, "p", 1.0}, {"rank", 1, 2, 2, 1, "p", 1.0},
      {"world", 1, 0, 0, 1, "p", 1.0},    {"store", 1, 0, 1, 0, "p", 1.0},
      {"prefix", 1, 0, 1, 1, "", 1.0},     {"timeout", 1, 0, 1, 1, "p", 0.0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tagc_comm_config_init(&cfg);
    cfg.version = cases[i].version;
    cfg.rank = cases[i].rank;
    cfg.world_size = cases[i].world;
    cfg.store = cases[i].has_store ? store : NULL;
    cfg.prefix = cases[i].prefix;
    cfg.timeout_s = cases[i].timeout;
    CHECK_MSG(tagc_comm_create(&cfg, &c) == TAGC_EINVAL && c == NULL, "bad %s accepted",
              cases[i].what);
  }
  tagc_store_free(store);
}

int main(void) {
  test_bad_configs();
  for (int w = 1; w <= 4; w++) {
    double t0 = tagc_now();
    int bad = harness_run(w, ops_rank, NULL, 60.0);
    CHECK_MSG(bad == 0, "world %d: %d ranks failed", w, bad);
    printf("world %d: all operations in %.2f s\n", w, tagc_now() - t0);
  }
  return TEST_END();
}
