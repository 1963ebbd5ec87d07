/* gpu_autotune.c: fi_autotune on the GPU (issue 43) with the MoE grouped GEMM, the first
 * op it measures: a tuned bucket stores its fastest valid tactic with the rule's time and
 * the runner-up, and a second call finds the row instead of measuring; a tactic whose
 * output is wrong (the options' test fault, which corrupts one tactic's output after it
 * runs: no real tactic is known to be wrong, so the fault is injected) is stored as
 * invalid and never chosen; a stored tactic is what a fresh runtime's fi_moe_grouped_gemm
 * runs (its kernel the only GEMM kernel compiled into a fresh cache, one lookup for two
 * calls, counted), and its output matches the rule's kernel's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fi_admin.h"
#include "ft.h"
#include "gpu_util.h"

static cu_api cu;
static CUcontext ctx;
static fi_runtime *rt;
static uint64_t seed;

static int setup(void) {
  if (rt) return 0;
  return g_setup(&cu, &ctx, &rt, &seed);
}

/* Compute capability 9 or more: wgmma (sm_90a) and thread-block clusters. */
static int hopper(void) {
  int major = 0;
  return cu.cuDeviceGetAttribute(&major, 75 /* COMPUTE_CAPABILITY_MAJOR */, 0) == 0 && major >= 9;
}

/* The progress lines of one fi_autotune call. */
typedef struct lines {
  char text[64][256];
  int n;
} lines;

static void collect(const char *line, void *user) {
  lines *l = user;
  fprintf(stderr, "  | %s\n", line);
  if (l->n < 64) snprintf(l->text[l->n++], sizeof l->text[0], "%s", line);
}

static fi_status tune(fi_runtime *r, const char *shape, int64_t tokens, int force, int fault, fi_autotune_result *res,
                      lines *l) {
  fi_autotune_options o;
  fi_autotune_options_init(&o);
  o.op = "moe_gemm", o.shape = shape, o.tokens = tokens, o.force = force, o.fault_tactic = fault;
  o.repeats = 5, o.warmup = 1;
  o.progress = collect, o.user = l;
  memset(l, 0, sizeof *l);
  return fi_autotune(r, &o, res);
}

/* The stored row of (shape, bucket), copied. */
typedef struct row {
  const char *shape;
  int64_t bucket;
  int found, valid;
  char params[256], invalid[2048], arch[32], name[128], driver[64], compiler[64];
  int64_t sms;
  double time_us, default_us;
} row;

static int find_row(const fi_tactic *t, void *user) {
  row *w = user;
  if (strcmp(t->shape, w->shape) != 0 || t->bucket != w->bucket || strcmp(t->layer, "user") != 0) return 0;
  w->found = 1, w->valid = t->valid;
  snprintf(w->params, sizeof w->params, "%s", t->params);
  snprintf(w->invalid, sizeof w->invalid, "%s", t->invalid ? t->invalid : "");
  snprintf(w->arch, sizeof w->arch, "%s", t->dev.arch);
  snprintf(w->name, sizeof w->name, "%s", t->dev.name);
  snprintf(w->driver, sizeof w->driver, "%s", t->dev.driver);
  snprintf(w->compiler, sizeof w->compiler, "%s", t->dev.compiler ? t->dev.compiler : "");
  w->sms = t->dev.sms, w->time_us = t->time_us, w->default_us = t->default_us;
  return 1;
}

static row get_op_row(fi_runtime *r, const char *op, const char *shape, int64_t bucket) {
  row w;
  memset(&w, 0, sizeof w);
  w.shape = shape, w.bucket = bucket;
  if (fi_admin_tactic_list(r, op, NULL, find_row, &w) != FI_OK) w.found = -1;
  return w;
}
static row get_row(fi_runtime *r, const char *shape, int64_t bucket) { return get_op_row(r, "moe_gemm", shape, bucket); }

FT_TEST(tune_stores_the_fastest_valid_tactic) {
  FT_REQUIRE(setup() == 0);
  const char *shape = "dtype=bf16;k=512;n=256;experts=8;top_k=2;gated=1;gather=1;tile=128";
  fi_autotune_result r;
  lines l;
  fi_status st = tune(rt, shape, 200, 1, 0, &r, &l);
  FT_REQUIRE(st == FI_OK, "%s", fi_last_error());
  FT_CHECK_EQ_INT(r.measured, 1);
  FT_CHECK_EQ_INT(r.bucket, 256);
  FT_CHECK(r.tactics >= 3, "%d tactics", r.tactics);
  FT_CHECK_EQ_INT(r.valid, r.tactics, "every real tactic computes the same GEMM");
  FT_CHECK_EQ_INT(r.invalid, 0);
  FT_CHECK(r.winner_us > 0 && r.winner_us <= r.rule_us, "winner %.2f us, rule %.2f us", r.winner_us, r.rule_us);
  FT_CHECK(!r.runner_up[0] || r.winner_us <= r.runner_up_us, "runner-up %.2f us", r.runner_up_us);
  row w = get_row(rt, r.shape, 256);
  FT_REQUIRE(w.found == 1, "no stored row for %s bucket 256", r.shape);
  FT_CHECK_EQ_STR(w.params, r.winner);
  FT_CHECK_EQ_INT(w.valid, 1);
  FT_CHECK(w.time_us == r.winner_us && w.default_us == r.rule_us, "row %.3f/%.3f us, result %.3f/%.3f", w.time_us,
           w.default_us, r.winner_us, r.rule_us);
  FT_CHECK(w.name[0] && w.driver[0] && w.compiler[0] && w.sms > 0, "device '%s' driver '%s' compiler '%s' sms %lld",
           w.name, w.driver, w.compiler, (long long)w.sms);
  /* Again without force: the row is found, nothing measured. */
  fi_autotune_result again;
  st = tune(rt, shape, 150, 0, 0, &again, &l);
  FT_REQUIRE(st == FI_OK, "%s", fi_last_error());
  FT_CHECK_EQ_INT(again.measured, 0);
  FT_CHECK_EQ_STR(again.winner, r.winner);
}

FT_TEST(a_tactic_with_a_wrong_output_is_stored_invalid) {
  FT_REQUIRE(setup() == 0);
  const char *shape = "dtype=f16;k=256;n=256;experts=4;top_k=2;gated=0;gather=0;tile=64";
  fi_autotune_result r;
  lines l;
  fi_status st = tune(rt, shape, 64, 1, 2, &r, &l);
  FT_REQUIRE(st == FI_OK, "%s", fi_last_error());
  FT_REQUIRE(r.tactics >= 2, "%d tactics", r.tactics);
  FT_CHECK_EQ_INT(r.invalid, 1);
  FT_CHECK_EQ_INT(r.valid, r.tactics - 1);
  char bad[128] = "";
  for (int i = 0; i < l.n; i++) {
    const char *p = strstr(l.text[i], "INVALID");
    if (p) sscanf(l.text[i], " %127s", bad);
  }
  FT_REQUIRE(bad[0], "no INVALID line");
  FT_CHECK(strcmp(r.winner, bad) != 0, "the invalid tactic %s won", bad);
  row w = get_row(rt, r.shape, 64);
  FT_REQUIRE(w.found == 1);
  FT_CHECK_STR_HAS(w.invalid, bad);
  FT_CHECK(strcmp(w.params, bad) != 0);
  /* fault_tactic 1 would corrupt the reference itself: refused. */
  st = tune(rt, shape, 64, 1, 1, &r, &l);
  FT_CHECK_EQ_INT(st, FI_ERR_INVALID_ARGUMENT);
  FT_CHECK_STR_HAS(fi_last_error(), "fault_tactic");
}

/* A test's cache file, its sidecars and its directory, gone. */
static void remove_cache(const char *path, const char *dir) {
  char side[96];
  const char *sfx[3] = {"", "-wal", "-shm"};
  for (int i = 0; i < 3; i++) {
    snprintf(side, sizeof side, "%s%s", path, sfx[i]);
    unlink(side);
  }
  rmdir(dir);
}

static int has_kernel(const fi_cache_entry *e, void *user) {
  int *n = user;
  fprintf(stderr, "  kernel %s\n", e->key);
  n[0]++;
  if (strstr(e->key, "bm=16;") && strstr(e->key, "stages=2")) n[1]++;
  return 0;
}

FT_TEST(a_fresh_runtime_runs_the_stored_tactic) {
  FT_REQUIRE(setup() == 0);
  char dir[] = "/tmp/fi-gpu-tune-XXXXXX", path[64];
  FT_REQUIRE(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/k.db", dir);
  /* The device's identity, from a row this process measures. */
  fi_autotune_result r;
  lines l;
  const char *probe = "dtype=bf16;k=256;n=128;experts=4;top_k=1;gated=0;gather=0;tile=64";
  FT_REQUIRE(tune(rt, probe, 16, 1, 0, &r, &l) == FI_OK, "%s", fi_last_error());
  row id = get_row(rt, r.shape, 16);
  FT_REQUIRE(id.found == 1);

  /* Plant a tactic the rule would not pick (16-row blocks, two stages) for a shape whose
   * calls have 64 rows an expert on average. */
  const int64_t T = 100, K = 2, E = 4, H = 256, N = 128, tile = 64;
  char shape[256];
  snprintf(shape, sizeof shape, "dtype=bf16;k=%lld;n=%lld;experts=%lld;top_k=%lld;gated=1;gather=1;tile=%lld",
           (long long)H, (long long)N, (long long)E, (long long)K, (long long)tile);
  fi_options o;
  fi_options_init(&o);
  o.cache_path = path;
  fi_runtime *plant = NULL, *fresh = NULL;
  FT_REQUIRE(fi_runtime_create(&o, &plant) == FI_OK, "%s", fi_last_error());
  fi_tactic m;
  memset(&m, 0, sizeof m);
  m.op = "moe_gemm", m.shape = shape, m.bucket = fi_tune_bucket(T);
  m.dev = (fi_tactic_device){id.arch, id.name, id.sms, id.driver, id.compiler};
  m.params = "kernel=mma;bm=16;bn=64;stages=2", m.valid = 1, m.time_us = 1.0, m.default_us = 2.0, m.runner_up = "";
  FT_REQUIRE(fi_admin_tactic_put(plant, &m) == FI_OK, "%s", fi_last_error());
  fi_runtime_destroy(plant);
  FT_REQUIRE(fi_runtime_create(&o, &fresh) == FI_OK, "%s", fi_last_error());

  /* Inputs, the sort's tables, two outputs poisoned. */
  const int64_t MT = fi_moe_max_tiles(T, (int)K, (int)E, (int)tile), rows = MT * tile;
  const fi_moe_sort_params sp = {(int)E, 0, (int)E, (int)tile};
  size_t wsb = 0;
  FT_REQUIRE(fi_moe_sort_workspace_size(fresh, T, (int)K, &sp, &wsb) == FI_OK);
  uint16_t *hx = malloc((size_t)(T * H) * 2), *hw = malloc((size_t)(E * 2 * N * H) * 2);
  int32_t *ids = malloc((size_t)(T * K) * 4);
  for (int64_t i = 0; i < T * H; i++) g_put(hx, 1, i, g_normal(&seed));
  for (int64_t i = 0; i < E * 2 * N * H; i++) g_put(hw, 1, i, g_normal(&seed) / 16.0);
  for (int64_t t = 0; t < T; t++) {
    ids[t * K] = (int32_t)(g_rand(&seed) % (uint64_t)E);
    ids[t * K + 1] = (int32_t)((ids[t * K] + 1 + (int64_t)(g_rand(&seed) % (uint64_t)(E - 1))) % E);
  }
  CUdeviceptr d_x, d_w, d_ids, d_ws, d_te, d_mn, d_e2p, d_p2e, d_n, d_h[2];
  CU_CHECK(&cu, cuMemAlloc(&d_x, (size_t)(T * H) * 2));
  CU_CHECK(&cu, cuMemAlloc(&d_w, (size_t)(E * 2 * N * H) * 2));
  CU_CHECK(&cu, cuMemAlloc(&d_ids, (size_t)(T * K) * 4));
  CU_CHECK(&cu, cuMemAlloc(&d_ws, wsb ? wsb : 16));
  CU_CHECK(&cu, cuMemAlloc(&d_te, (size_t)MT * 4));
  CU_CHECK(&cu, cuMemAlloc(&d_mn, (size_t)MT * 4));
  CU_CHECK(&cu, cuMemAlloc(&d_e2p, (size_t)(T * K) * 4));
  CU_CHECK(&cu, cuMemAlloc(&d_p2e, (size_t)rows * 4));
  CU_CHECK(&cu, cuMemAlloc(&d_n, 8));
  for (int i = 0; i < 2; i++) {
    CU_CHECK(&cu, cuMemAlloc(&d_h[i], (size_t)(rows * N) * 2));
    CU_CHECK(&cu, cuMemsetD8(d_h[i], 0xff, (size_t)(rows * N) * 2));
  }
  CU_CHECK(&cu, cuMemcpyHtoD(d_x, hx, (size_t)(T * H) * 2));
  CU_CHECK(&cu, cuMemcpyHtoD(d_w, hw, (size_t)(E * 2 * N * H) * 2));
  CU_CHECK(&cu, cuMemcpyHtoD(d_ids, ids, (size_t)(T * K) * 4));
  int64_t s_x[2] = {T, H}, s_w[3] = {E, 2 * N, H}, s_ids[2] = {T, K}, s_t[1] = {MT}, s_rows[1] = {rows};
  int64_t s_one[1] = {1}, s_ws[1] = {(int64_t)wsb}, s_h[2] = {rows, N};
  DLTensor t_x = g_tensor(d_x, 0, 1, 2, s_x, NULL), t_w = g_tensor(d_w, 0, 1, 3, s_w, NULL);
  DLTensor t_ids = g_tensor(d_ids, 0, 2, 2, s_ids, NULL), t_ws = g_tensor(d_ws, 0, 2, 1, s_ws, NULL);
  DLTensor t_te = g_tensor(d_te, 0, 2, 1, s_t, NULL), t_mn = g_tensor(d_mn, 0, 2, 1, s_t, NULL);
  DLTensor t_e2p = g_tensor(d_e2p, 0, 2, 2, s_ids, NULL), t_p2e = g_tensor(d_p2e, 0, 2, 1, s_rows, NULL);
  DLTensor t_nt = g_tensor(d_n, 0, 2, 1, s_one, NULL), t_tp = g_tensor(d_n, 4, 2, 1, s_one, NULL);
  DLTensor t_h0 = g_tensor(d_h[0], 0, 1, 2, s_h, NULL), t_h1 = g_tensor(d_h[1], 0, 1, 2, s_h, NULL);
  DLTensor *i32[] = {&t_ids, &t_te, &t_mn, &t_e2p, &t_p2e, &t_nt, &t_tp};
  for (size_t i = 0; i < sizeof i32 / sizeof *i32; i++) i32[i]->dtype = (DLDataType){kDLInt, 32, 1};
  t_ws.dtype = (DLDataType){kDLUInt, 8, 1};
  fi_moe_sort_outputs so = {&t_te, &t_mn, &t_e2p, &t_p2e, &t_nt, &t_tp};
  FT_REQUIRE(fi_moe_sort(fresh, &t_ids, &sp, &t_ws, &so, NULL) == FI_OK, "%s", fi_last_error());
  fi_moe_gemm_params gp;
  fi_moe_gemm_params_init(&gp);
  gp.tile_size = (int)tile, gp.activation = FI_MOE_GEMM_SWIGLU, gp.gather = 1;

  /* Two calls with the rule left to choose: one lookup, a hit; the planted kernel is the
   * only GEMM kernel in the fresh cache. */
  fi_admin_stats s0, s1;
  FT_REQUIRE(fi_admin_stats_get(fresh, &s0) == FI_OK);
  FT_REQUIRE(fi_moe_grouped_gemm(fresh, &t_x, &t_w, &so, &gp, &t_h0, NULL) == FI_OK, "%s", fi_last_error());
  FT_REQUIRE(fi_moe_grouped_gemm(fresh, &t_x, &t_w, &so, &gp, &t_h0, NULL) == FI_OK, "%s", fi_last_error());
  FT_REQUIRE(fi_admin_stats_get(fresh, &s1) == FI_OK);
  FT_CHECK_EQ_INT(s1.tactic_hits - s0.tactic_hits, 1, "one lookup for two calls of one bucket");
  FT_CHECK_EQ_INT(s1.tactic_misses - s0.tactic_misses, 0);
  int n[2] = {0, 0};
  FT_REQUIRE(fi_admin_list(fresh, "moe_gemm", NULL, has_kernel, n) == FI_OK);
  FT_CHECK_EQ_INT(n[0], 1, "GEMM kernels in the fresh cache");
  FT_CHECK_EQ_INT(n[1], 1, "the planted tactic's kernel (bm=16, stages=2)");

  /* The rule's kernel (block_m given: no stored tactic) on the same inputs. */
  gp.block_m = 64;
  FT_REQUIRE(fi_moe_grouped_gemm(fresh, &t_x, &t_w, &so, &gp, &t_h1, NULL) == FI_OK, "%s", fi_last_error());
  CU_CHECK(&cu, cuCtxSynchronize());
  uint16_t *a = malloc((size_t)(rows * N) * 2), *b = malloc((size_t)(rows * N) * 2);
  CU_CHECK(&cu, cuMemcpyDtoH(a, d_h[0], (size_t)(rows * N) * 2));
  CU_CHECK(&cu, cuMemcpyDtoH(b, d_h[1], (size_t)(rows * N) * 2));
  double worst = 0, scale = 0;
  int64_t live = 0, mismatch = 0;
  for (int64_t i = 0; i < rows * N; i++) {
    if ((a[i] == 0xffff) != (b[i] == 0xffff)) mismatch++;
    if (a[i] == 0xffff || b[i] == 0xffff) continue;
    live++;
    const double x = g_bf16_to_f32(a[i]), y = g_bf16_to_f32(b[i]);
    if (fabs(y) > scale) scale = fabs(y);
    if (fabs(x - y) > worst) worst = fabs(x - y);
  }
  FT_CHECK_EQ_INT(mismatch, 0, "rows written by one kernel and not the other");
  FT_CHECK_EQ_INT(live, T * K * N, "live elements");
  FT_CHECK(worst <= 1e-2 * scale, "max difference %.4g of scale %.4g", worst, scale);
  free(a), free(b), free(hx), free(hw), free(ids);
  CUdeviceptr all[] = {d_x, d_w, d_ids, d_ws, d_te, d_mn, d_e2p, d_p2e, d_n, d_h[0], d_h[1]};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) cu.cuMemFree(all[i]);
  fi_runtime_destroy(fresh);
  remove_cache(path, dir);
}

FT_TEST(bad_options_are_named) {
  FT_REQUIRE(setup() == 0);
  fi_autotune_options o;
  fi_autotune_result r;
  struct {
    const char *op, *shape;
    int64_t tokens;
    const char *named;
  } bad[] = {
      {"moe_gem", "x", 16, "o->op"},
      {"moe_gemm", "dtype=bf16;k=100;n=128;experts=4;top_k=1;gated=0;gather=0;tile=64", 16, "k ("},
      {"moe_gemm", "dtype=bf16;k=128;n=128;experts=4;top_k=5;gated=0;gather=0;tile=64", 16, "top_k"},
      {"moe_gemm", "dtype=bf16;k=128;n=128;experts=4;top_k=1;gated=0;gather=0", 16, "no tile"},
      {"moe_gemm", "dtype=fp8;k=128;n=128;experts=4;top_k=1;gated=0;gather=0;tile=64", 16, "dtype=fp8"},
      {"moe_gemm", "dtype=bf16;k=128;n=128;experts=4;top_k=1;gated=0;gather=0;tile=64;bm=3", 16, "unknown"},
      {"moe_gemm", "dtype=bf16;k=128;n=128;experts=4;top_k=1;gated=0;gather=0;tile=64", 0, "o->tokens"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    fi_autotune_options_init(&o);
    o.op = bad[i].op, o.shape = bad[i].shape, o.tokens = bad[i].tokens;
    FT_CHECK_EQ_INT(fi_autotune(rt, &o, &r), FI_ERR_INVALID_ARGUMENT, "case %zu", i);
    FT_CHECK_STR_HAS(fi_last_error(), bad[i].named, "case %zu", i);
  }
  fi_autotune_options_init(&o);
  o.struct_size = 8;
  FT_CHECK_EQ_INT(fi_autotune(rt, &o, &r), FI_ERR_INVALID_ARGUMENT);
  FT_CHECK_STR_HAS(fi_last_error(), "struct_size");
}

/* A plan-time op's case: op's shape tuned at tokens (bucket) in a fresh cache under dir,
 * tactic 3 faulted: at least min_tactics, that one invalid, every other valid, the winner
 * stored. The cache's options into *o for the fresh runtime that plans next; a required
 * check that fails ends the helper with ft_failed_now set. */
static void tune_fresh(const char *op, const char *shape, int64_t tokens, int64_t bucket, int min_tactics, char *dir,
                      char *path, size_t n, fi_options *o) {
  FT_REQUIRE(mkdtemp(dir));
  snprintf(path, n, "%s/t.db", dir);
  fi_options_init(o);
  o->cache_path = path;
  fi_runtime *a = NULL;
  FT_REQUIRE(fi_runtime_create(o, &a) == FI_OK, "%s", fi_last_error());
  fi_autotune_options to;
  fi_autotune_options_init(&to);
  lines l;
  memset(&l, 0, sizeof l);
  to.op = op, to.shape = shape, to.tokens = tokens, to.repeats = 5, to.warmup = 1, to.fault_tactic = 3;
  to.progress = collect, to.user = &l;
  fi_autotune_result r;
  FT_REQUIRE(fi_autotune(a, &to, &r) == FI_OK, "%s", fi_last_error());
  FT_CHECK_EQ_INT(r.bucket, bucket);
  FT_CHECK(r.tactics >= min_tactics, "%d tactics", r.tactics);
  FT_CHECK_EQ_INT(r.invalid, 1, "the faulted tactic");
  FT_CHECK_EQ_INT(r.valid, r.tactics - 1, "every other %s tactic agrees with the rule", op);
  FT_CHECK_EQ_STR(r.shape, shape);
  row w = get_op_row(a, op, shape, bucket);
  FT_REQUIRE(w.found == 1, "no stored %s row for %s bucket %lld", op, shape, (long long)bucket);
  FT_CHECK_EQ_STR(w.params, r.winner);
  fi_runtime_destroy(a);
}

/* plan(b, workspace of wsb bytes, u) plans (or calls) twice (and destroys its plan): one
 * tactic lookup for both, a hit. */
static void one_hit_for_two_plans(fi_runtime *b, size_t wsb, fi_status (*plan)(fi_runtime *, DLTensor *, void *),
                                  void *u) {
  CUdeviceptr d_ws;
  CU_CHECK(&cu, cuMemAlloc(&d_ws, wsb));
  int64_t s_ws[1] = {(int64_t)wsb};
  DLTensor t_ws = g_tensor(d_ws, 0, 2, 1, s_ws, NULL);
  t_ws.dtype = (DLDataType){kDLUInt, 8, 1};
  fi_admin_stats s0, s1;
  FT_CHECK(fi_admin_stats_get(b, &s0) == FI_OK);
  FT_CHECK(plan(b, &t_ws, u) == FI_OK, "%s", fi_last_error());
  FT_CHECK(fi_admin_stats_get(b, &s1) == FI_OK);
  FT_CHECK_EQ_INT(s1.tactic_hits - s0.tactic_hits, 1, "one lookup for two plans, a hit");
  FT_CHECK_EQ_INT(s1.tactic_misses - s0.tactic_misses, 0);
  cu.cuMemFree(d_ws);
}

static fi_status decode_twice(fi_runtime *b, DLTensor *ws, void *u) {
  fi_decode_plan *plan = NULL;
  fi_status st = fi_batch_decode_plan(b, u, NULL, ws, NULL, &plan);
  if (st == FI_OK) st = fi_batch_decode_plan(b, u, NULL, ws, NULL, &plan);
  fi_batch_decode_plan_destroy(plan);
  return st;
}

static fi_status prefill_twice(fi_runtime *b, DLTensor *ws, void *u) {
  fi_prefill_plan *plan = NULL;
  fi_status st = fi_batch_prefill_ragged_plan(b, u, NULL, ws, NULL, &plan);
  if (st == FI_OK) st = fi_batch_prefill_ragged_plan(b, u, NULL, ws, NULL, &plan);
  fi_batch_prefill_plan_destroy(plan);
  return st;
}

/* 7 requests of 512 tokens (32 full pages of 16), 8/2 heads of 128, bf16: batch bucket 8,
 * KV length bucket 512. */
static void decode_batch(fi_batch_decode_info *info, int32_t *ip, int32_t *ll) {
  for (int i = 0; i <= 8; i++) ip[i] = i * 32;
  for (int i = 0; i < 8; i++) ll[i] = 16;
  memset(info, 0, sizeof *info);
  info->batch = 7, info->indptr = ip, info->last_page_len = ll;
  info->num_qo_heads = 8, info->num_kv_heads = 2, info->head_dim = 128, info->page_size = 16;
  info->q_dtype = info->kv_dtype = (DLDataType){kDLBfloat, 16, 1};
}

/* Batch decode: every tactic (warps x pipelines the plan takes, the rule's split halved and
 * doubled) computes the same attention, the fastest is stored, a faulted tactic is refused;
 * a fresh runtime's plan of that shape and batch finds the stored row (one lookup, a hit). */
FT_TEST(decode_tactics_measured_and_used_by_a_plan) {
  FT_REQUIRE(setup() == 0);
  char dir[] = "/tmp/fi-gpu-tune-XXXXXX", path[64];
  fi_options o;
  fi_runtime *b = NULL;
  tune_fresh("batch_decode", "q=bf16;kv=bf16;heads=8/2;head_dim=128;page=16;rope=0;len=512", 8, 8, 4, dir, path,
             sizeof path, &o);
  if (ft_failed_now) return;

  /* A fresh runtime's plan of the same shape and batch bucket finds it. */
  FT_REQUIRE(fi_runtime_create(&o, &b) == FI_OK, "%s", fi_last_error());
  int32_t ip[9], ll[8];
  fi_batch_decode_info info;
  decode_batch(&info, ip, ll);
  size_t wsb = 0;
  const DLDevice dv = {kDLCUDA, 0};
  FT_REQUIRE(fi_batch_decode_workspace_size(b, dv, 8, 8, 2, 128, &wsb) == FI_OK);
  one_hit_for_two_plans(b, wsb, decode_twice, &info);
  fi_runtime_destroy(b);
  remove_cache(path, dir);
}

/* Batch prefill at head_dim 256 on Hopper (three tactics: the wgmma kernel's one shape, the
 * rule's, and mma.sync's q tiles 16 and 64): each computes the same attention, the fastest
 * is stored, a faulted tactic is refused; a fresh runtime's plan whose longest request
 * falls in that bucket finds the row (one lookup for two plans, a hit). */
FT_TEST(prefill_tactics_measured_and_used_by_a_plan) {
  FT_REQUIRE(setup() == 0);
  if (!hopper()) FT_SKIP("three tactics need the wgmma kernel (sm_90)");
  char dir[] = "/tmp/fi-gpu-tune-XXXXXX", path[64];
  fi_options o;
  fi_runtime *b = NULL;
  tune_fresh("batch_prefill", "q=bf16;heads=8/2;head_dim=256;causal=1;cap=0", 200, 256, 3, dir, path, sizeof path,
             &o);
  if (ft_failed_now) return;

  /* A fresh runtime's plan: 3 requests, the longest 190 query tokens (bucket 256). */
  FT_REQUIRE(fi_runtime_create(&o, &b) == FI_OK, "%s", fi_last_error());
  int32_t qi[4] = {0, 100, 290, 300}, ki[4] = {0, 100, 290, 300};
  fi_batch_prefill_info info;
  memset(&info, 0, sizeof info);
  info.batch = 3, info.qo_indptr = qi, info.kv_indptr = ki;
  info.num_qo_heads = 8, info.num_kv_heads = 2, info.head_dim = 256;
  info.q_dtype = info.kv_dtype = (DLDataType){kDLBfloat, 16, 1};
  size_t wsb = 0;
  const DLDevice dv = {kDLCUDA, 0};
  FT_REQUIRE(fi_batch_prefill_workspace_size(b, dv, 3, 300, 8, 2, 256, &wsb) == FI_OK, "%s", fi_last_error());
  one_hit_for_two_plans(b, wsb, prefill_twice, &info);
  fi_runtime_destroy(b);
  remove_cache(path, dir);
}

/* FI_AUTOTUNE=1: a runtime's first decode plan of a shape and bucket with no stored row
 * measures it (fi_autotune at the bucket's bound) and plans with the winner; the row is
 * there for a fresh runtime without the variable, whose plans find it (one lookup, a hit). */
FT_TEST(autotune_env_measures_at_the_first_plan) {
  FT_REQUIRE(setup() == 0);
  char dir[] = "/tmp/fi-gpu-tune-XXXXXX", path[64];
  FT_REQUIRE(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/e.db", dir);
  fi_options o;
  fi_options_init(&o);
  o.cache_path = path;
  fi_runtime *a = NULL, *b = NULL;
  setenv("FI_AUTOTUNE", "1", 1);
  const fi_status created = fi_runtime_create(&o, &a);
  unsetenv("FI_AUTOTUNE");
  FT_REQUIRE(created == FI_OK, "%s", fi_last_error());
  int32_t ip[9], ll[8];
  fi_batch_decode_info info;
  decode_batch(&info, ip, ll);
  size_t wsb = 0;
  const DLDevice dv = {kDLCUDA, 0};
  FT_REQUIRE(fi_batch_decode_workspace_size(a, dv, 8, 8, 2, 128, &wsb) == FI_OK);
  CUdeviceptr d_ws;
  CU_CHECK(&cu, cuMemAlloc(&d_ws, wsb));
  int64_t s_ws[1] = {(int64_t)wsb};
  DLTensor t_ws = g_tensor(d_ws, 0, 2, 1, s_ws, NULL);
  t_ws.dtype = (DLDataType){kDLUInt, 8, 1};
  FT_CHECK(decode_twice(a, &t_ws, &info) == FI_OK, "%s", fi_last_error());
  cu.cuMemFree(d_ws);
  const char *shape = "q=bf16;kv=bf16;heads=8/2;head_dim=128;page=16;rope=0;len=512";
  row w = get_op_row(a, "batch_decode", shape, 8);
  FT_CHECK(w.found == 1 && w.valid == 1, "no row for %s bucket 8 after the plan", shape);
  fi_admin_stats s;
  FT_CHECK(fi_admin_stats_get(a, &s) == FI_OK && s.tactic_hits >= 1, "the plan took the measured tactic");
  fi_runtime_destroy(a);
  FT_REQUIRE(fi_runtime_create(&o, &b) == FI_OK, "%s", fi_last_error());
  one_hit_for_two_plans(b, wsb, decode_twice, &info);
  fi_runtime_destroy(b);
  remove_cache(path, dir);
}

/* The samplers: every tactic (CTAs per row x the threshold search) draws the same tokens
 * as the rule (the Philox contract: the same seed and offset, the same draws, whatever the
 * launch shape), a faulted one is refused, the fastest stored; a fresh runtime's call of
 * that op, dtype, vocab and batch bucket finds it (one lookup for two calls, a hit). */
static fi_status top_k_twice(fi_runtime *b, DLTensor *ws, void *u) {
  (void)ws;
  DLTensor *t = u; /* probs, samples */
  fi_status st = fi_top_k_sampling_from_probs(b, &t[0], NULL, 50, &t[1], 1, 2, NULL);
  if (st == FI_OK) st = fi_top_k_sampling_from_probs(b, &t[0], NULL, 50, &t[1], 3, 4, NULL);
  if (st == FI_OK && cu.cuCtxSynchronize() != 0) st = FI_ERR_DEVICE;
  return st;
}

FT_TEST(sampling_tactics_measured_and_used_by_a_call) {
  FT_REQUIRE(setup() == 0);
  if (!hopper()) FT_SKIP("more than two tactics need clusters (sm_90)");
  char dir[] = "/tmp/fi-gpu-tune-XXXXXX", path[64];
  fi_options o;
  fi_runtime *b = NULL;
  tune_fresh("sampling", "op=top_k;dtype=f32;vocab=32000", 12, 16, 3, dir, path, sizeof path, &o);
  if (ft_failed_now) return;
  FT_REQUIRE(fi_runtime_create(&o, &b) == FI_OK, "%s", fi_last_error());
  const int64_t B = 10, V = 32000; /* bucket 16 */
  float *h = malloc((size_t)(B * V) * 4);
  FT_REQUIRE(h);
  for (int64_t i = 0; i < B * V; i++) h[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
  CUdeviceptr d_p, d_s;
  CU_CHECK(&cu, cuMemAlloc(&d_p, (size_t)(B * V) * 4));
  CU_CHECK(&cu, cuMemAlloc(&d_s, (size_t)B * 4));
  CU_CHECK(&cu, cuMemcpyHtoD(d_p, h, (size_t)(B * V) * 4));
  free(h);
  int64_t sp[2] = {B, V}, ss[1] = {B};
  DLTensor t[2] = {g_tensor(d_p, 0, 3, 2, sp, NULL), g_tensor(d_s, 0, 4, 1, ss, NULL)};
  t[0].dtype = (DLDataType){kDLFloat, 32, 1};
  t[1].dtype = (DLDataType){kDLInt, 32, 1};
  one_hit_for_two_plans(b, 256, top_k_twice, t);
  int32_t s[10];
  CU_CHECK(&cu, cuMemcpyDtoH(s, d_s, sizeof s));
  for (int i = 0; i < 10; i++) FT_CHECK(s[i] >= 0 && s[i] < V, "sample %d is %d", i, s[i]);
  cu.cuMemFree(d_p);
  cu.cuMemFree(d_s);
  fi_runtime_destroy(b);
  remove_cache(path, dir);
}
