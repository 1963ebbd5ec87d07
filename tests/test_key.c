/* test_key.c: kernel keys: canonical strings and hashes pinned by golden vectors
 * (checked against Python's xxhash), parsing, rendering and the rmsnorm registry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft.h"
#include "jit_compiler.h"
#include "jit_registry.h"
#include "jit_render.h"
#include "jit_templates.h"
#include "ops_norm.h"

static void hex(const uint8_t h[16], char out[33]) {
  for (int i = 0; i < 16; i++) sprintf(out + 2 * i, "%02x", h[i]);
}

FT_TEST(canonical_string_golden) {
  jit_key k;
  char c[256];
  jit_rmsnorm_select(JIT_DT_BF16, 8, 8192, &k);
  FT_REQUIRE(jit_key_canonical(&k, c, sizeof c) > 0);
  FT_CHECK(strcmp(c, "op=rmsnorm;dtype=bf16;vec=8;threads=512;chunks=2;minblocks=0;wreg=1;hint=1") == 0, "got %s", c);
  jit_rmsnorm_select(JIT_DT_F32, 1, 3, &k);
  jit_key_canonical(&k, c, sizeof c);
  FT_CHECK(strcmp(c, "op=rmsnorm;dtype=f32;vec=1;threads=32;chunks=1;minblocks=0;wreg=1;hint=1") == 0, "got %s", c);
  jit_rmsnorm_select(JIT_DT_F16, 8, 100000, &k);
  jit_key_canonical(&k, c, sizeof c);
  FT_CHECK(strcmp(c, "op=rmsnorm;dtype=f16;vec=8;threads=512;chunks=0;minblocks=0;wreg=0;hint=1") == 0, "got %s", c);
  FT_CHECK(jit_key_canonical(&k, c, 10) == -1, "a short buffer must fail, not truncate");
}

/* Values computed independently: xxhash.xxh3_128_hexdigest(b"fi_runtime\nkey=...\n...") */
FT_TEST(hash_golden) {
  /* The vectors below hash this ABI string: a version bump changes them (on purpose). */
  FT_CHECK(strcmp(jit_abi_string(), "1.9.3.1") == 0, "abi %s", jit_abi_string());
  jit_key k;
  uint8_t kh[16], h[16];
  char a[33], b[33];
  jit_rmsnorm_select(JIT_DT_BF16, 8, 8192, &k);
  jit_target t = {"sm_90", "-std=c++17", "00000000000000000000000000000000", "nvrtc-13.0"};
  jit_key_hashes(&k, &t, kh, h);
  hex(kh, a);
  hex(h, b);
  FT_CHECK(strcmp(a, "f1f40d6d66a11cd82ac60b49c6ac3ea5") == 0, "key_hash %s", a);
  FT_CHECK(strcmp(b, "a54af26169d09e8c558e9fbb15b48327") == 0, "hash %s", b);
  jit_rmsnorm_select(JIT_DT_F32, 1, 3, &k);
  jit_target t2 = {"gfx90a", "-std=c++17 -O3", "00000000000000000000000000000000", "hiprtc-5.2"};
  jit_key_hashes(&k, &t2, kh, h);
  hex(kh, a);
  hex(h, b);
  FT_CHECK(strcmp(a, "a51b62d5e23c49a5705487af5318ef97") == 0, "key_hash %s", a);
  FT_CHECK(strcmp(b, "488433f26f213e9a60dbe19d1981e5aa") == 0, "hash %s", b);
}

FT_TEST(hash_changes_with_every_input) {
  jit_key k;
  jit_rmsnorm_select(JIT_DT_BF16, 8, 8192, &k);
  jit_target base = {"sm_90", "-std=c++17", "0123", "nvrtc-13.0"};
  uint8_t kh0[16], h0[16], kh[16], h[16];
  jit_key_hashes(&k, &base, kh0, h0);
  jit_target v[4] = {base, base, base, base};
  v[0].arch = "sm_90a";
  v[1].options = "-std=c++17 -G";
  v[2].template_hash = "0124";
  v[3].compiler = "nvrtc-13.1";
  for (int i = 0; i < 4; i++) {
    jit_key_hashes(&k, &v[i], kh, h);
    FT_CHECK(memcmp(h, h0, 16) != 0, "variant %d left the hash unchanged", i);
    if (i < 3) FT_CHECK(memcmp(kh, kh0, 16) != 0, "variant %d left key_hash unchanged", i);
    else FT_CHECK(memcmp(kh, kh0, 16) == 0, "the compiler must not change key_hash");
  }
  jit_key k2 = k;
  k2.v[RMSNORM_P_THREADS] = 128;
  jit_key_hashes(&k2, &base, kh, h);
  FT_CHECK(memcmp(kh, kh0, 16) != 0, "a parameter change must change key_hash");
}

FT_TEST(fast_key_distinguishes_configs) {
  int n = jit_op_rmsnorm.config_count();
  uint64_t (*seen)[2] = calloc((size_t)n, sizeof *seen);
  for (int i = 0; i < n; i++) {
    jit_key k;
    jit_op_rmsnorm.config(i, &k);
    jit_key_fast(&k, &seen[i][0], &seen[i][1]);
    for (int j = 0; j < i; j++)
      FT_CHECK(seen[i][0] != seen[j][0] || seen[i][1] != seen[j][1], "configs %d and %d collide", i, j);
  }
  free(seen);
}

FT_TEST(parse_round_trip_every_config) {
  int n = jit_op_rmsnorm.config_count();
  FT_REQUIRE(n > 0);
  for (int i = 0; i < n; i++) {
    jit_key k, back;
    char c[256], c2[256];
    jit_op_rmsnorm.config(i, &k);
    jit_key_canonical(&k, c, sizeof c);
    FT_CHECK(jit_key_parse(c, &back) == 0, "parse of %s", c);
    jit_key_canonical(&back, c2, sizeof c2);
    FT_CHECK(strcmp(c, c2) == 0, "%s != %s", c, c2);
  }
  jit_key k;
  FT_CHECK(jit_key_parse("op=nosuch;dtype=bf16", &k) != 0, "unknown op accepted");
  FT_CHECK(jit_key_parse("op=rmsnorm;dtype=q4;vec=8;threads=256;chunks=4", &k) != 0, "bad dtype accepted");
  FT_CHECK(jit_key_parse("op=rmsnorm;dtype=bf16;vec=8;threads=256", &k) != 0, "missing param accepted");
  FT_CHECK(jit_key_parse("op=rmsnorm;dtype=bf16;vec=8;threads=256;chunks=4;x=1", &k) != 0, "extra accepted");
}

/* Every key fi_rmsnorm can choose must be registered, or prewarm misses it. */
FT_TEST(rmsnorm_selection_is_always_registered) {
  int n = jit_op_rmsnorm.config_count();
  const int dts[3] = {JIT_DT_F16, JIT_DT_BF16, JIT_DT_F32};
  int missing = 0;
  for (int d = 0; d < 3; d++)
    for (int vec = 1; vec <= (dts[d] == JIT_DT_F32 ? 4 : 8); vec *= 2)
      for (int hidden = vec; hidden <= 140000; hidden += (hidden < 20000 ? vec : 97 * vec)) {
        jit_key k;
        jit_rmsnorm_select(dts[d], vec, hidden, &k);
        int found = 0;
        for (int i = 0; i < n && !found; i++) {
          jit_key r;
          jit_op_rmsnorm.config(i, &r);
          found = memcmp(r.v, k.v, sizeof r.v) == 0;
        }
        if (!found && missing++ < 5) FT_CHECK(found, "dtype %d vec %d hidden %d not registered", dts[d], vec, hidden);
        /* The registers hold the whole row, or the two-pass path runs. */
        long long cap = k.v[RMSNORM_P_THREADS] * k.v[RMSNORM_P_CHUNKS] * vec;
        FT_CHECK(k.v[RMSNORM_P_CHUNKS] == 0 || cap >= hidden, "hidden %d exceeds %lld", hidden, cap);
      }
  FT_CHECK(missing == 0, "%d selections not registered", missing);
}

FT_TEST(render_has_entry_and_includes) {
  jit_key k;
  jit_rmsnorm_select(JIT_DT_BF16, 8, 8192, &k);
  char *src = NULL, err[256];
  FT_REQUIRE(jit_render(&k, "fi_rmsnorm_0011223344556677", &src, err, sizeof err) == 0, "%s", err);
  FT_CHECK(strstr(src, "extern \"C\" __global__ void __launch_bounds__(512)") != NULL, "%s", src);
  FT_CHECK(strstr(src, "fi_rmsnorm_0011223344556677(fi_rmsnorm_params p)") != NULL, "%s", src);
  FT_CHECK(strstr(src, "fi::rmsnorm<fi_bf16, 8, 512, 2, 1, 1>(p);") != NULL, "%s", src);
  FT_CHECK(strstr(src, "#include \"fi_port.cuh\"") != NULL, "%s", src);
  FT_CHECK(strstr(src, "// fi_runtime kernel: op=rmsnorm;dtype=bf16;vec=8;threads=512;chunks=2;minblocks=0;wreg=1;hint=1") == src, "%s", src);
  free(src);
}

/* The runtime launches with programmatic dependent launch on sm_90: a kernel's blocks may
 * start while the previous kernel in the stream still runs, so every entry of every
 * registered configuration must open with fi_pdl_enter() (its griddepcontrol.wait) before
 * any load or store. A new op's wrapper without it would read stale data only on Hopper. */
FT_TEST(every_kernel_entry_waits_for_the_previous_grid) {
  int entries = 0, bad = 0;
  for (int o = 0; o < jit_registry_count(); o++) {
    const jit_op *op = jit_registry_get(o);
    for (int i = 0; i < op->config_count(); i++) {
      jit_key k;
      op->config(i, &k);
      char *src = NULL, err[256];
      if (jit_render(&k, "fi_entry", &src, err, sizeof err) != 0) {
        FT_CHECK(0, "%s config %d: %s", op->name, i, err);
        bad++;
        continue;
      }
      for (const char *g = strstr(src, "__global__"); g; g = strstr(g + 1, "__global__")) {
        static const char want[] = "{\n  fi_pdl_enter();\n";
        /* Decode's entry waits inside the template (decode_enter, after a prefetch that
         * reads only clamped table entries); decode_waits_before_its_first_real_read
         * checks the template side. */
        static const char dec[] = "{\n  fi::dec::decode<", simt[] = "{\n  fi::dec::decode_simt<";
        const char *body = strchr(g, '{');
        entries++;
        if (!body || (strncmp(body, want, sizeof want - 1) != 0 && strncmp(body, dec, sizeof dec - 1) != 0 &&
                      strncmp(body, simt, sizeof simt - 1) != 0)) {
          if (bad++ < 5) FT_CHECK(0, "%s config %d: an entry does not open with fi_pdl_enter():\n%s", op->name, i, g);
        }
      }
      free(src);
    }
  }
  FT_CHECK(entries > 0 && bad == 0, "%d of %d entries without fi_pdl_enter()", bad, entries);
}

/* The decode kernel's body must reach decode_enter before its first load that the previous
 * grid could be writing: decode_heads calls it before its first shared declaration, and
 * every path through decode_enter (decode_enter.cuh, included by decode.cuh) executes
 * griddepcontrol.wait (its own or fi_pdl_enter's). A textual check, so a reordering of the
 * templates fails here rather than as a rare race on the GPU. */
FT_TEST(decode_waits_before_its_first_real_read) {
  const jit_template *tp = jit_template_find("decode.cuh"), *te = jit_template_find("decode_enter.cuh");
  FT_CHECK(tp != NULL && te != NULL);
  if (!tp || !te) return;
  const char *t = tp->text;
  const char *en = strstr(te->text, "FI_DEVICE void decode_enter(");
  const char *heads = strstr(t, "FI_DEVICE void decode_heads(");
  const char *inc = strstr(t, "#include \"decode_enter.cuh\"");
  FT_CHECK(en && heads && inc && inc < heads, "decode_enter (in decode_enter.cuh, included before decode_heads) not found");
  if (!en || !heads) return;
  const char *call = strstr(heads, "decode_enter<");
  const char *first_shared = strstr(heads, "__shared__");
  const char *first_p = strstr(heads, "p.");
  FT_CHECK(call && first_shared && call < first_shared, "decode_heads: decode_enter not first");
  FT_CHECK(call && first_p && call < first_p, "decode_heads reads p before decode_enter");
  /* the CUDA-core kernel's body (decode_simt.cuh) the same way */
  const jit_template *ts = jit_template_find("decode_simt.cuh");
  const char *sb = ts ? strstr(ts->text, "FI_DEVICE void decode_simt(") : NULL;
  FT_CHECK(sb != NULL, "decode_simt not found");
  if (sb) {
    const char *sc = strstr(sb, "decode_enter<"), *ss = strstr(sb, "__shared__"), *sp = strstr(sb, "p.");
    FT_CHECK(sc && ss && sc < ss, "decode_simt: decode_enter not first");
    FT_CHECK(sc && sp && sc < sp, "decode_simt reads p before decode_enter");
  }
  /* decode_enter: an early-return branch that waits, then fi_pdl_enter() for the rest. */
  const char *end = strstr(en, "\n}\n");
  FT_CHECK(end != NULL);
  if (!end) return;
  const char *w = strstr(en, "griddepcontrol.wait"), *ret = strstr(en, "return;");
  const char *fall = strstr(en, "fi_pdl_enter();");
  FT_CHECK(w && ret && w < ret && ret < end, "the pre-wait branch must wait before it returns");
  FT_CHECK(fall && ret < fall && fall < end, "decode_enter must end in fi_pdl_enter()");
}

FT_TEST(templates_embedded_and_hashed) {
  FT_CHECK(jit_template_find("fi_port.cuh") != NULL);
  FT_CHECK(jit_template_find("rmsnorm.cuh") != NULL);
  FT_CHECK(jit_template_find("fi_params.h") != NULL);
  FT_CHECK(jit_template_find("nosuch.cuh") == NULL);
  const char *h = jit_template_set_hash();
  FT_CHECK(strlen(h) == 32, "%s", h);
  FT_CHECK(strcmp(h, jit_template_set_hash()) == 0, "not stable");
  /* No template may pull in a toolkit header: NVRTC runs with no include path. */
  for (int i = 0; i < jit_template_count; i++) {
    const char *t = jit_templates[i].text;
    for (const char *p = strstr(t, "#include <"); p; p = strstr(p + 1, "#include <")) {
      /* fi_params.h includes <stdint.h> only on the host side of an #if. */
      FT_CHECK(strcmp(jit_templates[i].name, "fi_params.h") == 0, "%s includes a system header",
               jit_templates[i].name);
    }
  }
}

FT_TEST(arch_names) {
  FT_CHECK(jit_arch_valid("sm_90"));
  FT_CHECK(jit_arch_valid("sm_90a"));
  FT_CHECK(jit_arch_valid("sm_100"));
  FT_CHECK(jit_arch_valid("gfx90a"));
  FT_CHECK(jit_arch_valid("gfx942"));
  FT_CHECK(jit_arch_valid("gfx1100"));
  FT_CHECK(!jit_arch_valid("sm_9"));
  FT_CHECK(!jit_arch_valid("sm_60"));
  FT_CHECK(!jit_arch_valid("sm_90;rm -rf"));
  FT_CHECK(!jit_arch_valid("gfx"));
  FT_CHECK(!jit_arch_valid(""));
  FT_CHECK(!jit_arch_valid(NULL));
  FT_CHECK(jit_compiler_for_arch("sm_90") && strcmp(jit_compiler_for_arch("sm_90")->name, "nvrtc") == 0);
  FT_CHECK(jit_compiler_for_arch("gfx942") && strcmp(jit_compiler_for_arch("gfx942")->name, "hiprtc") == 0);
  FT_CHECK(jit_compiler_for_arch("x86") == NULL);
}
