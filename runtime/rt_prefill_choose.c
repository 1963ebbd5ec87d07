/* rt_prefill_choose.c: prefill's kernel choice: the wgmma kernel's shape rule on Hopper
 * (rt_prefill_wgmma_key, pure), the KV length a re-plan gives it (rt_prefill_kvsel), and
 * rt_prefill_pick_kernel, which picks between the wgmma and mma.sync kernels for a call. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops_prefill.h"
#include "rt_internal.h"
#include "rt_prefill.h"
#include "rt_prefill_args.h"

/* The q tile for head_dim D and the most packed rows of a request, or FI_PREFILL_QTILE's
 * (16, 64 or 128; 128 only to head_dim 128: the registered tiles), for tuning. */
static int q_tile_for(const rt_tuning *t, int D, int64_t rows) {
  const int v = t->prefill_qtile;
  if (v == 16 || v == 64 || (v == 128 && D <= 128)) return v;
  return jit_prefill_q_tile(D, rows);
}

/* The wgmma kernel's key on a Hopper device (the shape rule and its tuning variables;
 * rt_prefill.h). */
void rt_prefill_wgmma_key(const rt_tuning *t, int single, int dt, int D, int64_t rows, int64_t maxkv, int cap, jit_key *key) {
  /* One consumer warpgroup and 64-token kv tiles (two blocks an SM) for requests of at
   * most 2048 packed rows: on the H200, 16 x 512 causal 32/8 (2048 rows) ran at 159
   * TFLOP/s against 145 with two consumers and 128-token tiles, which win above (238
   * against 221 at 64 x 1024, 424 against 271 at 4 x 8192). (Batch prefill at head_dim
   * 128 with 512-2048 rows now takes two consumers with four stages: below.) */
  int qt = rows <= 2048 ? 64 : 128, kt = rows <= 2048 ? 64 : 128;
  /* head_dim 64 above 2048 rows: three consumers (q tile 192) and 128-token tiles, P
   * through shared memory (with the ping-pong and three stages: below): on the H200, 4 x 8192 32/8
   * 352.7 / 374.8 TFLOP/s causal / full against 318.8 / 327.2 with the 64-token tiles
   * and ping-pong of three it replaced (docs/prefill.md, tenth session). */
  if (D == 64 && rows > 2048) qt = 192, kt = 128;
  /* Batch prefill at head_dim 128 with 512-2048 rows: two consumers, 64-token tiles
   * and four stages: on the H200, causal, 8-23% over one consumer at 512 (64 x 128
   * 32/8, 32 x 512 32/32), 1024 (32 x 256 32/8, 64 x 1024 32/32) and 2048 rows (16 x
   * 512 32/8, 16 x 2048 32/32), e.g. 64 x 1024 32/32 252.0 TFLOP/s against 228.7; at
   * 4096 rows level with two consumers and 128-token tiles, which stay (docs/prefill.md,
   * seventh session, h7pre). Since the ninth session's kernel (shorter unit
   * boundaries), only where no request attends more than 512 tokens (maxkv; -1: not
   * known, CUDA-graph mode, whose key must not change between plans): 64 x 1024 32/32
   * 321.4 TFLOP/s with 2x128 against 306.4, 16 x 2048 32/32 377.8 against 352.7, but 32
   * x 256 32/8 147.4 against 154.6 and 512-token requests level (docs/prefill.md, ninth
   * session). */
  const int mid = !single && D == 128 && rows >= 512 && rows <= 2048, four = mid && maxkv <= 512;
  if (four) qt = 128, kt = 64;
  else if (mid) qt = 128, kt = 128;
  if (t->prefill_wg_q) {
    qt = t->prefill_wg_q;
    kt = t->prefill_wg_kv;
  }
  /* A producer warpgroup and the ping-pong (FI_PREFILL_WS=0 or 1 turns them off). Head_dim
   * 64's three consumers with 128-token tiles also take three K / V stages: on the H200
   * (nvcc harness, 32/8 causal) 4 x 8192 383.2 TFLOP/s against 377.8 without the
   * ping-pong and 380.2 with it on two stages, 64 x 2048 +1.7%, 256 x 1024 +0.9% over
   * the ping-pong on two (docs/prefill.md, fourteenth session). Before, the ping-pong
   * was taken only where no request attended more than 2048 KV tokens (thirteenth
   * session); with three stages it wins at every length, so the rule is gone. */
  const int wsel = t->prefill_ws >= 0 ? t->prefill_ws : 2;
  jit_prefill_wgmma_select(single, dt, D, qt, kt, wsel, key);
  /* FI_PREFILL_STAGES=4 (or 3): that many K / V stages where registered (tuning); 2 keeps
   * two everywhere */
  const int se = t->prefill_stages; /* 0 unset */
  if (se == 4 || (four && !t->prefill_wg_q && !se)) jit_prefill_wgmma_stages(key, 4);
  if (se == 3 || !se) jit_prefill_wgmma_stages(key, 3);
  /* The soft cap's code only in the kernels of calls that have one: without it the
   * 2x128 kernel is 80 KB of code instead of 141 and a unit's first tile takes half
   * the time (docs/prefill.md, ninth session). */
  jit_prefill_wgmma_soft_cap(key, cap);
}

/* The KV length the shape rule is given (rt_prefill.h). At 512-2048 rows it picks
 * 64-token tiles (four stages where the producer allows) up to 512 tokens; a re-plan
 * keeps the plan's choice instead, read from its kv tile (not its stages: FI_PREFILL_WS=0
 * or 1 keeps two), so that a request growing past that length does not change the key a
 * re-plan must keep. CUDA-graph mode never uses the length. */
int64_t rt_prefill_kvsel(const jit_key *plan_key, int graph, int64_t maxkv) {
  if (graph) return -1;
  if (plan_key && jit_prefill_is_wgmma(plan_key)) return plan_key->v[PREFILL_WG_P_KV_TILE] == 64 ? 0 : INT64_MAX;
  return maxkv;
}

/* The kernel of a call, into key; returns its q tile, read from the key (the wgmma key
 * may override the asked shape, as head_dim 256 does). On a Hopper device (sm_90) the
 * wgmma kernel (prefill_wgmma.cuh) takes head_dims 64, 128 and 256 without RoPE once a
 * request has more than 16 packed rows; everything else runs on mma.sync (prefill.cuh),
 * which every NVIDIA GPU from sm_80 and AMD's run, and every call with a custom mask (the
 * wgmma kernel has none; a stored wgmma tactic is passed over). FI_PREFILL_WGMMA=0 forces mma.sync, as does
 * FI_PREFILL_QTILE (its tuning override); FI_PREFILL_WG=<warpgroups>x<kv tile> (1x64,
 * 2x128, 3x128: head_dim 64 only, else 2, ...) forces the wgmma kernel's shape, FI_PREFILL_WS=0 its every-thread-loads
 * variant (no producer warpgroup), FI_PREFILL_WS=1 a producer without the ping-pong, 2 with it.
 * Read at fi_runtime_create (rt->env.tune); a plan made without a runtime (rt NULL: the
 * tests' offline planning) takes the defaults. */
int rt_prefill_pick_kernel(fi_runtime *rt, int devtype, int device, int single, int dt, int kvdt, int D, int64_t rows,
                           int64_t maxkv, int rope, int cap, int mask, const rt_prefill_tactic *stored,
                           jit_key *key) {
  const rt_tuning def = rt_tuning_default(), *t = rt ? &rt->env.tune : &def;
  if (kvdt != dt) { /* an fp8 cache: mma.sync, the rule's q tile */
    jit_prefill_fp8_select(single, dt, kvdt, D, q_tile_for(t, D, rows), key);
    return jit_prefill_key_q_tile(key);
  }
  const int allow = t->prefill_wgmma && !t->prefill_qtile;
  /* A tuning variable that sets the kernel wins over a stored tactic. */
  const int tuned_by_env = !allow || t->prefill_wg_q || t->prefill_ws >= 0 || t->prefill_stages;
  if (stored && (single || tuned_by_env)) stored = NULL;
  int wgmma = 0;
  if (rt && allow && !rope && !mask && (D == 64 || D == 128 || D == 256) && rows > 16) { /* rt: NULL when planning offline (tests) */
    const rt_device_i *be;
    void *state;
    rt_device_caps caps;
    char err[128];
    wgmma = rt_backend(rt, devtype, &be, &state) == FI_OK &&
            rt_device_caps_get(be, state, device, &caps, err, sizeof err) == 0 && caps.wgmma;
  }
  if (stored && (wgmma || !stored->wgmma) && rt_prefill_tactic_key(stored, dt, D, rope, cap, key) == 0)
    return jit_prefill_key_q_tile(key);
  if (wgmma) {
    rt_prefill_wgmma_key(t, single, dt, D, rows, maxkv, cap, key);
    return jit_prefill_key_q_tile(key);
  }
  jit_prefill_select(single, dt, D, q_tile_for(t, D, rows), rope, key);
  return jit_prefill_key_q_tile(key);
}

/* ---- stored tactics ---- */

int rt_prefill_tactic_parse(const char *s, rt_prefill_tactic *t) {
  int q = 0, kv = 0, pr = 0, st = 0, used = 0;
  if (!s) return -1;
  if (sscanf(s, "kernel=mma;q_tile=%d%n", &q, &used) == 1 && !s[used]) {
    if (q != 16 && q != 64 && q != 128) return -1;
    *t = (rt_prefill_tactic){0, q, 0, 0, 0};
    return 0;
  }
  used = 0;
  if (sscanf(s, "kernel=wgmma;q_tile=%d;kv_tile=%d;producer=%d;stages=%d%n", &q, &kv, &pr, &st, &used) != 4 || s[used])
    return -1;
  if ((q != 64 && q != 128 && q != 192) || (kv != 64 && kv != 128) || pr < 0 || pr > 2 || st < 2 || st > 4) return -1;
  *t = (rt_prefill_tactic){1, q, kv, pr, st};
  return 0;
}

int rt_prefill_tactic_format(const rt_prefill_tactic *t, char *buf, size_t n) {
  const int w = t->wgmma ? snprintf(buf, n, "kernel=wgmma;q_tile=%d;kv_tile=%d;producer=%d;stages=%d", t->q_tile,
                                    t->kv_tile, t->producer, t->stages)
                         : snprintf(buf, n, "kernel=mma;q_tile=%d", t->q_tile);
  return w < 0 || (size_t)w >= n ? -1 : 0;
}

void rt_prefill_tactic_of_key(const jit_key *k, rt_prefill_tactic *t) {
  if (jit_prefill_is_wgmma(k))
    *t = (rt_prefill_tactic){1, (int)k->v[PREFILL_WG_P_WARPGROUPS] * 64, (int)k->v[PREFILL_WG_P_KV_TILE],
                             (int)k->v[PREFILL_WG_P_PRODUCER], (int)k->v[PREFILL_WG_P_STAGES]};
  else
    *t = (rt_prefill_tactic){0, (int)k->v[PREFILL_P_Q_TILE], 0, 0, 0};
}

static int registered(const jit_key *k) {
  for (int c = 0, nc = k->op->config_count(); c < nc; c++) {
    jit_key r;
    k->op->config(c, &r);
    if (memcmp(r.v, k->v, sizeof r.v) == 0) return 1;
  }
  return 0;
}

int rt_prefill_tactic_key(const rt_prefill_tactic *t, int dt, int D, int rope, int cap, jit_key *key) {
  jit_key k;
  if (t->wgmma) {
    if (rope) return -1;
    jit_prefill_wgmma_select(0, dt, D, t->q_tile, t->kv_tile, t->producer, &k);
    jit_prefill_wgmma_stages(&k, t->stages);
    jit_prefill_wgmma_soft_cap(&k, cap);
  } else {
    jit_prefill_select(0, dt, D, t->q_tile, rope, &k);
  }
  /* The selectors adjust a shape they do not take (head_dim 256's one shape, a producer of
   * 2 at q tile 64): such a tactic is not what it says. */
  rt_prefill_tactic back;
  rt_prefill_tactic_of_key(&k, &back);
  if (memcmp(&back, t, sizeof back) != 0 || !registered(&k)) return -1;
  *key = k;
  return 0;
}

void rt_prefill_tactic_fields(int dt, int hq, int hkv, int D, int causal, int cap, int64_t *f) {
  f[0] = dt, f[1] = hq, f[2] = hkv, f[3] = D, f[4] = causal != 0, f[5] = cap != 0;
}

void rt_prefill_tactic_shape(const int64_t *f, char *buf, size_t n) {
  const char *q = jit_dtype_name((int)f[0]);
  snprintf(buf, n, "q=%s;heads=%lld/%lld;head_dim=%lld;causal=%lld;cap=%lld", q ? q : "?", (long long)f[1],
           (long long)f[2], (long long)f[3], (long long)f[4], (long long)f[5]);
}
