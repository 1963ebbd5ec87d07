/* test_norm_keys.c: keys of the fused_add_rmsnorm, gemma_rmsnorm, gemma_fused_add_rmsnorm
 * and layernorm ops: golden strings and a hash, rendering, parsing, and that every key
 * and block size the selection can return is registered and covers the row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft.h"
#include "jit_registry.h"
#include "jit_render.h"
#include "ops_norm.h"

static const jit_op *const rms_ops[3] = {&jit_op_fused_add_rmsnorm, &jit_op_gemma_rmsnorm,
                                         &jit_op_gemma_fused_add_rmsnorm};

static void canon(const jit_key *k, char *buf, size_t n) {
  if (jit_key_canonical(k, buf, n) < 0) snprintf(buf, n, "(unwritable)");
}

FT_TEST(norm_canonical_strings_golden) {
  jit_key k;
  char c[256];
  int threads;
  /* 8192 = 1024 vectors: 256 threads of 4 (one block a row); input and
   * residual beside them leave no room for the weight. */
  jit_norm_select(&jit_op_fused_add_rmsnorm, JIT_DT_BF16, 8, 8192, 32, &k, &threads);
  canon(&k, c, sizeof c);
  FT_CHECK(strcmp(c, "op=fused_add_rmsnorm;dtype=bf16;vec=8;chunks=4;wreg=0;hint=1") == 0, "%s", c);
  FT_CHECK(threads == 256, "8192: %d threads", threads);
  /* 5120 = 640 vectors: 160 threads of 4, every one busy. */
  jit_norm_select(&jit_op_gemma_fused_add_rmsnorm, JIT_DT_BF16, 8, 5120, 32, &k, &threads);
  canon(&k, c, sizeof c);
  FT_CHECK(strcmp(c, "op=gemma_fused_add_rmsnorm;dtype=bf16;vec=8;chunks=4;wreg=0;hint=1") == 0,
           "%s", c);
  FT_CHECK(threads == 160, "5120: %d threads", threads);
  /* 4 vectors a thread down to blocks of two warps (hidden 2048 bf16: 64
   * threads); below that 2 a thread on resident blocks, the weight kept. */
  jit_norm_select(&jit_op_gemma_rmsnorm, JIT_DT_BF16, 8, 2048, 32, &k, &threads);
  FT_CHECK(k.v[NORM_P_CHUNKS] == 4 && threads == 64, "2048: chunks %lld, %d threads",
           (long long)k.v[NORM_P_CHUNKS], threads);
  jit_norm_select(&jit_op_fused_add_rmsnorm, JIT_DT_BF16, 8, 1024, 32, &k, &threads);
  canon(&k, c, sizeof c);
  FT_CHECK(strcmp(c, "op=fused_add_rmsnorm;dtype=bf16;vec=8;chunks=2;wreg=1;hint=1") == 0, "%s", c);
  FT_CHECK(threads == 64, "1024: %d threads", threads);
  /* 16384: 4 vectors a thread; a residual beside them leaves no room for the weight. */
  jit_norm_select(&jit_op_fused_add_rmsnorm, JIT_DT_F16, 8, 16384, 32, &k, &threads);
  canon(&k, c, sizeof c);
  FT_CHECK(strcmp(c, "op=fused_add_rmsnorm;dtype=f16;vec=8;chunks=4;wreg=0;hint=1") == 0, "%s", c);
  FT_CHECK(threads == 512, "16384: %d threads", threads);
  jit_norm_select(&jit_op_gemma_rmsnorm, JIT_DT_F16, 8, 16384, 32, &k, &threads);
  canon(&k, c, sizeof c);
  FT_CHECK(strcmp(c, "op=gemma_rmsnorm;dtype=f16;vec=8;chunks=4;wreg=0;hint=1") == 0, "%s", c);
  /* An odd hidden size: single elements, two passes, the block trimmed to a warp. */
  jit_norm_select(&jit_op_gemma_rmsnorm, JIT_DT_F32, 1, 3, 32, &k, &threads);
  canon(&k, c, sizeof c);
  FT_CHECK(strcmp(c, "op=gemma_rmsnorm;dtype=f32;vec=1;chunks=0;wreg=0;hint=1") == 0, "%s", c);
  FT_CHECK(threads == 32, "3: %d threads", threads);
  /* 2 bf16 at a time allowed: below 16 bytes, so single elements. */
  jit_norm_select(&jit_op_fused_add_rmsnorm, JIT_DT_BF16, 2, 4098, 32, &k, &threads);
  FT_CHECK(k.v[NORM_P_VEC] == 1 && k.v[NORM_P_CHUNKS] == 0, "vec %lld chunks %lld",
           (long long)k.v[NORM_P_VEC], (long long)k.v[NORM_P_CHUNKS]);
  jit_layernorm_select(JIT_DT_BF16, JIT_DT_F32, 8, 8192, 32, &k, &threads);
  canon(&k, c, sizeof c);
  FT_CHECK(strcmp(c, "op=layernorm;dtype=bf16;wdtype=f32;vec=8;chunks=4;wreg=0;hint=1") == 0, "%s", c);
  FT_CHECK(threads == 256, "layernorm 8192: %d threads", threads);
  jit_layernorm_select(JIT_DT_F16, JIT_DT_F16, 8, 4096, 64, &k, &threads);
  canon(&k, c, sizeof c);
  FT_CHECK(strcmp(c, "op=layernorm;dtype=f16;wdtype=f16;vec=8;chunks=4;wreg=0;hint=1") == 0, "%s", c);
  FT_CHECK(threads == 128, "4096 on a 64-wide warp: %d threads", threads);
  jit_layernorm_select(JIT_DT_BF16, JIT_DT_BF16, 8, 20000, 32, &k, &threads);
  FT_CHECK(k.v[LAYERNORM_P_CHUNKS] == 8 && threads == 320, "20000: chunks %lld, %d threads",
           (long long)k.v[LAYERNORM_P_CHUNKS], threads);
  jit_layernorm_select(JIT_DT_F32, JIT_DT_F32, 4, 100000, 32, &k, &threads);
  canon(&k, c, sizeof c);
  FT_CHECK(strcmp(c, "op=layernorm;dtype=f32;wdtype=f32;vec=4;chunks=0;wreg=0;hint=1") == 0, "%s", c);
  FT_CHECK(threads == 512, "100000: %d threads", threads);
}

/* Computed independently with Python:
 * xxhash.xxh3_128_hexdigest(b"fi_runtime\nkey=op=fused_add_rmsnorm;dtype=bf16;vec=8;chunks=2;"
 *   b"wreg=1;hint=1\ntemplates=00000000000000000000000000000000\narch=sm_90\n"
 *   b"options=-std=c++17\nabi=1.9.3.1\n") and the same with b"compiler=nvrtc-13.0\n" appended. */
FT_TEST(norm_hash_golden) {
  jit_key k;
  int threads;
  uint8_t kh[16], h[16];
  char a[33], b[33];
  jit_norm_select(&jit_op_fused_add_rmsnorm, JIT_DT_BF16, 8, 1024, 32, &k, &threads);
  jit_target t = {"sm_90", "-std=c++17", "00000000000000000000000000000000", "nvrtc-13.0"};
  jit_key_hashes(&k, &t, kh, h);
  for (int i = 0; i < 16; i++) sprintf(a + 2 * i, "%02x", kh[i]), sprintf(b + 2 * i, "%02x", h[i]);
  FT_CHECK(strcmp(a, "93c417b5d9f0125f217d5adfa69f54a1") == 0, "key_hash %s", a);
  FT_CHECK(strcmp(b, "8ae7f5c445e777b6defacea60c66bc6a") == 0, "hash %s", b);
}

FT_TEST(norm_render) {
  jit_key k;
  int threads;
  char *src = NULL, err[256];
  jit_norm_select(&jit_op_gemma_fused_add_rmsnorm, JIT_DT_BF16, 8, 8192, 32, &k, &threads);
  FT_REQUIRE(jit_render(&k, "fi_gemma_fused_add_rmsnorm_0011", &src, err, sizeof err) == 0, "%s", err);
  FT_CHECK(strstr(src, "extern \"C\" __global__ void __launch_bounds__(512)") != NULL, "%s", src);
  FT_CHECK(strstr(src, "fi_gemma_fused_add_rmsnorm_0011(fi_norm_params p)") != NULL, "%s", src);
  FT_CHECK(strstr(src, "fi::rmsnorm_ext<fi_bf16, 8, 4, 0, 1, 1, 1>(p);") != NULL, "%s", src);
  FT_CHECK(strstr(src, "#include \"rmsnorm.cuh\"") != NULL, "%s", src);
  free(src);
  jit_norm_select(&jit_op_fused_add_rmsnorm, JIT_DT_F16, 1, 8191, 32, &k, &threads);
  FT_REQUIRE(jit_render(&k, "e", &src, err, sizeof err) == 0, "%s", err);
  FT_CHECK(strstr(src, "fi::rmsnorm_ext<fi_half, 1, 0, 0, 1, 1, 0>(p);") != NULL, "%s", src);
  free(src);
  jit_norm_select(&jit_op_gemma_rmsnorm, JIT_DT_F32, 4, 4096, 32, &k, &threads);
  FT_REQUIRE(jit_render(&k, "e", &src, err, sizeof err) == 0, "%s", err);
  FT_CHECK(strstr(src, "fi::rmsnorm_ext<float, 4, 4, 0, 1, 0, 1>(p);") != NULL, "%s", src);
  free(src);
  jit_layernorm_select(JIT_DT_BF16, JIT_DT_F32, 8, 8192, 32, &k, &threads);
  FT_REQUIRE(jit_render(&k, "fi_layernorm_42", &src, err, sizeof err) == 0, "%s", err);
  FT_CHECK(strstr(src, "fi_layernorm_42(fi_norm_params p)") != NULL, "%s", src);
  FT_CHECK(strstr(src, "fi::layernorm<fi_bf16, float, 8, 4, 0, 1>(p);") != NULL, "%s", src);
  FT_CHECK(strstr(src, "#include \"layernorm.cuh\"") != NULL, "%s", src);
  free(src);
}

static const jit_op *my_ops[4];

static void init_ops(void) {
  for (int i = 0; i < 3; i++) my_ops[i] = rms_ops[i];
  my_ops[3] = &jit_op_layernorm;
}

/* Registered by name (prewarm, fi-cache --op), and small: these four ops
 * compile in make test's sm_90 pass. */
FT_TEST(norm_ops_registered_and_small) {
  init_ops();
  int total = 0;
  for (int i = 0; i < 4; i++) {
    FT_CHECK(jit_registry_find(my_ops[i]->name) == my_ops[i], "%s not registered", my_ops[i]->name);
    total += my_ops[i]->config_count();
  }
  FT_CHECK(total == 56, "%d configurations", total);
}

FT_TEST(norm_parse_round_trip_and_distinct) {
  init_ops();
  uint64_t seen[64][2];
  int n = 0;
  for (int o = 0; o < 4; o++)
    for (int i = 0; i < my_ops[o]->config_count(); i++) {
      jit_key k, back;
      char c[256], c2[256];
      my_ops[o]->config(i, &k);
      canon(&k, c, sizeof c);
      FT_CHECK(jit_key_parse(c, &back) == 0 && back.op == my_ops[o], "parse of %s", c);
      canon(&back, c2, sizeof c2);
      FT_CHECK(strcmp(c, c2) == 0, "%s != %s", c, c2);
      FT_REQUIRE(n < 64);
      jit_key_fast(&k, &seen[n][0], &seen[n][1]);
      for (int j = 0; j < n; j++)
        FT_CHECK(seen[n][0] != seen[j][0] || seen[n][1] != seen[j][1], "%s collides with config %d", c, j);
      n++;
    }
  jit_key k;
  FT_CHECK(jit_key_parse("op=layernorm;dtype=bf16;vec=8;chunks=2;wreg=0;hint=1", &k) != 0,
           "layernorm key without wdtype accepted");
  FT_CHECK(jit_key_parse("op=fused_add_rmsnorm;dtype=bf16;vec=8;threads=512;chunks=2;wreg=1;hint=1",
                         &k) != 0,
           "a threads parameter accepted");
}

static int registered(const jit_op *op, const jit_key *k) {
  for (int i = 0; i < op->config_count(); i++) {
    jit_key r;
    op->config(i, &r);
    if (memcmp(r.v, k->v, sizeof r.v) == 0) return 1;
  }
  return 0;
}

/* Every key the runtime can pick is registered (else prewarm misses it), and
 * the block it picks is whole warps, at most 512, and covers the row. */
static int check_selection(const jit_op *op, int dtype, int wdtype, int vec, int hidden, int warp) {
  jit_key k;
  int threads;
  if (op == &jit_op_layernorm)
    jit_layernorm_select(dtype, wdtype, vec, hidden, warp, &k, &threads);
  else
    jit_norm_select(op, dtype, vec, hidden, warp, &k, &threads);
  int ok = registered(op, &k);
  FT_CHECK(ok, "%s dtype %d vec %d hidden %d not registered", op->name, dtype, vec, hidden);
  const int chunks = (int)k.v[op == &jit_op_layernorm ? LAYERNORM_P_CHUNKS : NORM_P_CHUNKS];
  const int kvec = (int)k.v[op == &jit_op_layernorm ? LAYERNORM_P_VEC : NORM_P_VEC];
  const int shape_ok = threads >= warp && threads <= JIT_NORM_MAX_THREADS && threads % warp == 0 &&
                       kvec <= vec && hidden % kvec == 0 &&
                       (chunks == 0 || (long long)threads * chunks * kvec >= hidden);
  FT_CHECK(shape_ok, "%s hidden %d vec %d: %d threads x %d chunks x %d", op->name, hidden, vec,
           threads, chunks, kvec);
  return ok && shape_ok;
}

FT_TEST(norm_selection_is_always_registered) {
  init_ops();
  const int dts[3] = {JIT_DT_F16, JIT_DT_BF16, JIT_DT_F32};
  int bad = 0;
  for (int o = 0; o < 4 && bad < 5; o++)
    for (int d = 0; d < 3; d++)
      for (int w = 0; w < (o == 3 && d < 2 ? 2 : 1); w++) /* layernorm: gamma as input, or f32 */
        for (int vec = 1; vec <= (dts[d] == JIT_DT_F32 ? 4 : 8); vec *= 2)
          for (int warp = 32; warp <= 64; warp *= 2)
            for (int h = vec; h <= 140000 && bad < 5; h += (h < 20000 ? vec : 97 * vec))
              bad += !check_selection(my_ops[o], dts[d], w ? JIT_DT_F32 : dts[d], vec, h, warp);
  FT_CHECK(bad == 0, "%d selections wrong", bad);
}
