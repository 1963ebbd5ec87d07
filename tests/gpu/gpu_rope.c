/* gpu_rope.c: fi_apply_rope_pos_ids, fi_apply_llama31_rope_pos_ids and fi_apply_rope_with_cos_sin_cache
 * on the GPU against a float64 reference: fresh random inputs, poisoned outputs, tails, gaps, in place. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ft.h"
#include "gpu_util.h"

static cu_api cu;
static CUcontext ctx;
static fi_runtime *rt;
static uint64_t seed;

static int setup(void) {
  if (rt) return 0;
  if (g_setup(&cu, &ctx, &rt, &seed) != 0) return -1;
  return 0;
}

enum { M_PLAIN = 0, M_LLAMA31 = 1, M_CACHE = 2 };
static const char *const mode_names[3] = {"plain", "llama31", "cos_sin_cache"};

#define MAX_POS 100000
#define THETA 10000.0
#define SCALE 1.0
/* Llama 3.1: factor 8, low 1, high 4, old context 8192, theta 500000. */
#define L_SCALE 8.0
#define L_THETA 500000.0
#define L_LOW 1.0
#define L_HIGH 4.0
#define L_OLD 8192.0

/* The frequencies as the header defines them: in double, rounded once to float. */
static double inv_freq(int mode, int i, int rd) {
  if (mode == M_LLAMA31) {
    double f = pow(L_THETA, -2.0 * i / rd);
    const double wavelen = 2.0 * M_PI / f;
    if (wavelen > L_OLD / L_LOW) {
      f /= L_SCALE;
    } else if (wavelen >= L_OLD / L_HIGH) {
      const double smooth = (L_OLD / wavelen - L_LOW) / (L_HIGH - L_LOW);
      f = (1.0 - smooth) * f / L_SCALE + smooth * f;
    }
    return (float)f;
  }
  return (float)(1.0 / (SCALE * pow(THETA, 2.0 * i / rd)));
}

/* cos_sin_cache [MAX_POS + 1, rd] float32, built in float64 from the plain
 * frequencies; one per rotary_dim, kept for the whole test. */
static struct {
  int rd;
  float *host;
  CUdeviceptr dev;
} caches[8];
static int ncaches;

static int get_cache(int rd) {
  for (int i = 0; i < ncaches; i++)
    if (caches[i].rd == rd) return i;
  const int i = ncaches++;
  const int64_t n = (int64_t)(MAX_POS + 1) * rd;
  caches[i].rd = rd;
  caches[i].host = malloc((size_t)n * 4);
  for (int64_t p = 0; p <= MAX_POS; p++)
    for (int j = 0; j < rd / 2; j++) {
      const double a = (double)p * (1.0 / pow(THETA, 2.0 * j / rd));
      caches[i].host[p * rd + j] = (float)cos(a);
      caches[i].host[p * rd + rd / 2 + j] = (float)sin(a);
    }
  CU_CHECK(&cu, cuMemAlloc(&caches[i].dev, (size_t)n * 4));
  CU_CHECK(&cu, cuMemcpyHtoD(caches[i].dev, caches[i].host, (size_t)n * 4));
  return i;
}

/* One case. Heads are pad elements apart beyond D; off: elements before
 * element 0 (1 or 3 make the accesses narrow). fused: q and k are views of
 * one qkv buffer [nnz, Hq + 2 Hk, D] (in place, as engines call it). */
typedef struct rcase {
  int mode, dt, d, rd, interleave, in_place, hq, hk, nnz, pos64;
  int pad, off, out_pad;
  int fused;
} rcase;

typedef struct result {
  double err;
  int64_t unwritten, tail_wrong, outside;
  int inputs_changed;
  fi_status st;
} result;

/* A [nnz, H, D] view at element off of a buffer, head stride D + pad. */
typedef struct view {
  int64_t off, s0, s1, elems; /* elems: buffer size in elements */
} view;

static view make_view(int nnz, int h, int d, int pad, int off) {
  view v;
  v.off = off;
  v.s1 = d + pad;
  v.s0 = h * v.s1;
  v.elems = off + (int64_t)nnz * v.s0 + 16;
  return v;
}

static result run_case(const rcase *c, CUstream stream) {
  result res = {0, 0, 0, 0, 0, FI_OK};
  const int dt = c->dt, es = 2, d = c->d, rd = c->rd, half = rd / 2;
  const int nnz = c->nnz, hq = c->hq, hk = c->hk;
  view vq, vk, vqo, vko;
  int64_t in_elems[2];
  if (c->fused) {
    /* One buffer: token stride (hq + 2 hk) (D + pad); k after q's heads. */
    vq = make_view(nnz, hq + 2 * hk, d, c->pad, c->off);
    vk = vq;
    vk.off = vq.off + (int64_t)hq * vq.s1;
    in_elems[0] = in_elems[1] = vq.elems;
  } else {
    vq = make_view(nnz, hq, d, c->pad, c->off);
    vk = make_view(nnz, hk, d, c->pad, c->off);
    in_elems[0] = vq.elems;
    in_elems[1] = vk.elems;
  }
  vqo = c->in_place ? vq : make_view(nnz, hq, d, c->out_pad, c->off);
  vko = c->in_place ? vk : make_view(nnz, hk, d, c->out_pad, c->off);
  const int nb = c->fused ? 1 : 2;
  unsigned char *hin[2], *hout[2], *init[2];
  CUdeviceptr din[2], dout[2];
  for (int b = 0; b < nb; b++) {
    hin[b] = malloc((size_t)(in_elems[b] * es));
    for (int64_t i = 0; i < in_elems[b]; i++) g_put(hin[b], dt, i, g_uniform(&seed) * 4.0 - 2.0);
    CU_CHECK(&cu, cuMemAlloc(&din[b], (size_t)(in_elems[b] * es)));
    CU_CHECK(&cu, cuMemcpyHtoD(din[b], hin[b], (size_t)(in_elems[b] * es)));
  }
  if (c->fused) {
    hin[1] = hin[0];
    din[1] = din[0];
  }
  const view *vo[2] = {&vqo, &vko};
  for (int b = 0; b < 2; b++) {
    if (c->in_place) {
      dout[b] = din[b];
      init[b] = hin[b];
      /* A fused buffer is one output: k's copy is q's. */
      hout[b] = b && c->fused ? NULL : malloc((size_t)(in_elems[b] * es));
      continue;
    }
    init[b] = malloc((size_t)(vo[b]->elems * es));
    hout[b] = malloc((size_t)(vo[b]->elems * es));
    memset(init[b], 0xff, (size_t)(vo[b]->elems * es)); /* NaN in f16 and bf16 */
    CU_CHECK(&cu, cuMemAlloc(&dout[b], (size_t)(vo[b]->elems * es)));
    CU_CHECK(&cu, cuMemcpyHtoD(dout[b], init[b], (size_t)(vo[b]->elems * es)));
  }
  /* Positions: random in [0, MAX_POS], the extremes included. */
  void *hpos = malloc((size_t)nnz * 8 + 8);
  int64_t *pos = malloc((size_t)nnz * 8 + 8);
  for (int t = 0; t < nnz; t++) {
    pos[t] = t == 0 && nnz > 1 ? 0 : t == 1 ? MAX_POS : (int64_t)(g_uniform(&seed) * MAX_POS);
    if (c->pos64)
      ((int64_t *)hpos)[t] = pos[t];
    else
      ((int32_t *)hpos)[t] = (int32_t)pos[t];
  }
  const int pbytes = c->pos64 ? 8 : 4;
  CUdeviceptr dpos;
  CU_CHECK(&cu, cuMemAlloc(&dpos, (size_t)nnz * pbytes + 8));
  CU_CHECK(&cu, cuMemcpyHtoD(dpos, hpos, (size_t)nnz * pbytes));

  int64_t sq[3] = {nnz, hq, d}, sk[3] = {nnz, hk, d};
  int64_t stq[3] = {vq.s0, vq.s1, 1}, stk[3] = {vk.s0, vk.s1, 1};
  int64_t stqo[3] = {vqo.s0, vqo.s1, 1}, stko[3] = {vko.s0, vko.s1, 1};
  DLTensor tq = g_tensor(din[0], vq.off * es, dt, 3, sq, stq);
  DLTensor tk = g_tensor(din[1], vk.off * es, dt, 3, sk, stk);
  DLTensor tqo = g_tensor(dout[0], vqo.off * es, dt, 3, sq, stqo);
  DLTensor tko = g_tensor(dout[1], vko.off * es, dt, 3, sk, stko);
  int64_t spos[1] = {nnz};
  DLTensor tpos = g_tensor(dpos, 0, 0, 1, spos, NULL);
  tpos.dtype.code = kDLInt;
  tpos.dtype.bits = (uint8_t)(pbytes * 8);
  int ci = c->mode == M_CACHE ? get_cache(rd) : -1;
  /* Pageable uploads (and memsets) go out on the legacy stream and may still be in
   * flight: a non-blocking stream does not wait for them. */
  CU_CHECK(&cu, cuCtxSynchronize());
  int64_t scache[2] = {MAX_POS + 1, rd};
  DLTensor tcache = g_tensor(ci >= 0 ? caches[ci].dev : 0, 0, 2, 2, scache, NULL);
  if (c->mode == M_PLAIN)
    res.st = fi_apply_rope_pos_ids(rt, &tq, &tk, &tqo, &tko, &tpos, rd, c->interleave, SCALE,
                                   THETA, stream);
  else if (c->mode == M_LLAMA31)
    res.st = fi_apply_llama31_rope_pos_ids(rt, &tq, &tk, &tqo, &tko, &tpos, rd, c->interleave,
                                           L_SCALE, L_THETA, L_LOW, L_HIGH, L_OLD, stream);
  else
    res.st = fi_apply_rope_with_cos_sin_cache(rt, &tq, &tk, &tqo, &tko, &tcache, &tpos,
                                              c->interleave, stream);
  if (res.st != FI_OK) {
    fprintf(stderr, "%s: %s: %s\n", mode_names[c->mode], fi_status_string(res.st),
            fi_last_error());
    goto done;
  }
  CU_CHECK(&cu, cuStreamSynchronize(stream));
  const int nout = c->in_place && c->fused ? 1 : 2;
  for (int b = 0; b < nout; b++) {
    const int64_t n = c->in_place ? in_elems[b] : vo[b]->elems;
    CU_CHECK(&cu, cuMemcpyDtoH(hout[b], dout[b], (size_t)(n * es)));
  }
  if (c->in_place && c->fused) hout[1] = hout[0];
  if (!c->in_place)
    for (int b = 0; b < nb; b++) {
      unsigned char *back = malloc((size_t)(in_elems[b] * es));
      CU_CHECK(&cu, cuMemcpyDtoH(back, din[b], (size_t)(in_elems[b] * es)));
      res.inputs_changed |= memcmp(back, hin[b], (size_t)(in_elems[b] * es)) != 0;
      free(back);
    }
  /* Expected buffers: start from the bytes before the call, write every
   * output element's reference (rotary part) or input (tail); afterwards
   * every other byte must match exactly. */
  double num = 0, den = 0;
  double *cs = malloc(sizeof(double) * (size_t)half * 2);
  unsigned char *expect[2];
  for (int b = 0; b < nout; b++) {
    const int64_t n = c->in_place ? in_elems[b] : vo[b]->elems;
    expect[b] = malloc((size_t)(n * es));
    memcpy(expect[b], init[b], (size_t)(n * es));
  }
  if (nout == 1) expect[1] = expect[0]; /* q and k rotate one buffer */
  for (int t = 0; t < nnz; t++) {
    for (int j = 0; j < half; j++) {
      if (c->mode == M_CACHE) {
        cs[2 * j] = caches[ci].host[pos[t] * rd + j];
        cs[2 * j + 1] = caches[ci].host[pos[t] * rd + half + j];
      } else {
        const double a = (double)pos[t] * inv_freq(c->mode, j, rd);
        cs[2 * j] = cos(a);
        cs[2 * j + 1] = sin(a);
      }
    }
    for (int h = 0; h < hq + hk; h++) {
      const int b = h < hq ? 0 : 1, hh = h < hq ? h : h - hq;
      const view *vi = b ? &vk : &vq, *vw = b ? &vko : &vqo;
      const int64_t ib = vi->off + t * vi->s0 + hh * vi->s1;
      const int64_t ob = vw->off + t * vw->s0 + hh * vw->s1;
      for (int j = 0; j < half; j++) {
        const int e0 = c->interleave ? 2 * j : j, e1 = c->interleave ? 2 * j + 1 : j + half;
        const double x0 = g_get(hin[b], dt, ib + e0), x1 = g_get(hin[b], dt, ib + e1);
        const double r0 = x0 * cs[2 * j] - x1 * cs[2 * j + 1];
        const double r1 = x1 * cs[2 * j] + x0 * cs[2 * j + 1];
        const double g0 = g_get(hout[b], dt, ob + e0), g1 = g_get(hout[b], dt, ob + e1);
        if (g0 != g0 || g1 != g1) {
          res.unwritten++;
          continue;
        }
        num += (g0 - r0) * (g0 - r0) + (g1 - r1) * (g1 - r1);
        den += r0 * r0 + r1 * r1;
        /* Take what the GPU wrote: the exact check below is for the rest. */
        memcpy(expect[b] + (ob + e0) * es, hout[b] + (ob + e0) * es, (size_t)es);
        memcpy(expect[b] + (ob + e1) * es, hout[b] + (ob + e1) * es, (size_t)es);
      }
      /* The tail: a copy of the input (in place: the input, untouched). */
      for (int e = rd; e < d; e++) {
        res.tail_wrong += memcmp(hout[b] + (ob + e) * es, hin[b] + (ib + e) * es, (size_t)es) != 0;
        memcpy(expect[b] + (ob + e) * es, hin[b] + (ib + e) * es, (size_t)es);
      }
    }
  }
  res.err = den > 0 ? sqrt(num / den) : 0.0;
  for (int b = 0; b < nout; b++) {
    const int64_t n = c->in_place ? in_elems[b] : vo[b]->elems;
    for (int64_t i = 0; i < n * es; i++) res.outside += hout[b][i] != expect[b][i];
  }
  free(cs);
  for (int b = 0; b < nout; b++) free(expect[b]);
done:
  for (int b = 0; b < nb; b++) {
    CU_CHECK(&cu, cuMemFree(din[b]));
    free(hin[b]);
  }
  if (!c->in_place)
    for (int b = 0; b < 2; b++) {
      CU_CHECK(&cu, cuMemFree(dout[b]));
      free(init[b]);
    }
  free(hout[0]);
  if (!(c->in_place && c->fused)) free(hout[1]);
  CU_CHECK(&cu, cuMemFree(dpos));
  free(hpos);
  free(pos);
  return res;
}

static double tol(int dt) { return dt == 0 ? 1e-3 : 1e-2; }

static void check(const rcase *c, CUstream stream) {
  result r = run_case(c, stream);
  char what[200];
  snprintf(what, sizeof what,
           "%s %s D=%d rd=%d il=%d %s H=%d/%d nnz=%d pos%s pad=%d off=%d out_pad=%d fused=%d",
           mode_names[c->mode], g_dtname(c->dt), c->d, c->rd, c->interleave,
           c->in_place ? "in-place" : "out", c->hq, c->hk, c->nnz, c->pos64 ? "64" : "32",
           c->pad, c->off, c->out_pad, c->fused);
  fprintf(stderr, "  %s: err %.3g\n", what, r.err);
  FT_CHECK(r.st == FI_OK, "%s: %s", what, fi_status_string(r.st));
  if (r.st != FI_OK) return;
  FT_CHECK(r.err < tol(c->dt), "%s: relative error %.3g over %.1g", what, r.err, tol(c->dt));
  FT_CHECK(r.unwritten == 0, "%s: %lld pairs never written", what, (long long)r.unwritten);
  FT_CHECK(r.tail_wrong == 0, "%s: %lld tail elements not the input", what,
           (long long)r.tail_wrong);
  FT_CHECK(r.outside == 0, "%s: %lld bytes outside the outputs changed", what,
           (long long)r.outside);
  FT_CHECK(!r.inputs_changed, "%s: an input was modified", what);
}

/* Every mode, dtype, head_dim, rotary_dim (D and D/2) and layout, each in
 * place and out of place over three geometries: 2001 tokens of 32/8
 * heads, 1 token of 32/8, 2003 tokens of 1/1 heads; int32 and int64
 * positions alternate. */
FT_TEST(rope_modes_dtypes_dims) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  static const int ds[3] = {64, 128, 256};
  static const int geo[3][3] = {{32, 8, 2001}, {32, 8, 1}, {1, 1, 2003}};
  int n = 0;
  for (int mode = 0; mode < 3; mode++)
    for (int dt = 0; dt < 2; dt++)
      for (int di = 0; di < 3; di++)
        for (int half_rd = 0; half_rd < 2; half_rd++)
          for (int il = 0; il < 2; il++)
            for (int ip = 0; ip < 2; ip++)
              for (int g = 0; g < 3; g++, n++) {
                rcase c = {mode, dt, ds[di], half_rd ? ds[di] / 2 : ds[di], il, ip,
                           geo[g][0], geo[g][1], geo[g][2], n & 1, 0, 0, 0, 0};
                check(&c, NULL);
              }
}

/* Padded heads (gaps must stay untouched), misaligned starts (4- and
 * 1-element accesses), a fused qkv buffer in place, and a stream. */
FT_TEST(rope_strided_misaligned_fused) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUstream s;
  CU_CHECK(&cu, cuStreamCreate(&s, 1 /* non-blocking */));
  for (int mode = 0; mode < 3; mode++)
    for (int dt = 0; dt < 2; dt++)
      for (int il = 0; il < 2; il++) {
        /* 16-byte aligned padding: wide accesses, gaps between heads. */
        rcase a = {mode, dt, 128, 128, il, 0, 32, 8, 777, 1, 8, 0, 16, 0};
        check(&a, s);
        /* Start 8 bytes in: 4-element accesses; rotary_dim 64 of 128 with a tail. */
        rcase b = {mode, dt, 128, 64, il, 0, 4, 2, 301, 0, 4, 4, 4, 0};
        check(&b, s);
        /* Odd start and pad: 1-element accesses (interleave takes pairs). */
        rcase e = {mode, dt, 64, 32, il, 0, 3, 1, 129, 1, 1, 1, 3, 0};
        check(&e, s);
        rcase f = {mode, dt, 64, 64, il, 1, 3, 1, 129, 0, 3, 1, 0, 0};
        check(&f, s);
        /* q and k views of one [nnz, 32 + 2*8, 128] qkv buffer, in place: v untouched. */
        rcase q = {mode, dt, 128, 128, il, 1, 32, 8, 1000, 1, 0, 0, 0, 1};
        check(&q, s);
        rcase r = {mode, dt, 256, 128, il, 1, 8, 2, 65, 0, 0, 0, 0, 1};
        check(&r, s);
        /* Odd rotary_dim/2 (rd 2 and 6): rotating units narrower than a vector. */
        rcase t = {mode, dt, 64, 6, il, 0, 2, 2, 33, 1, 0, 0, 0, 0};
        check(&t, s);
        rcase u = {mode, dt, 8, 2, il, 1, 2, 1, 17, 0, 0, 0, 0, 0};
        check(&u, s);
      }
  CU_CHECK(&cu, cuStreamDestroy(s));
}

FT_TEST(rope_zero_tokens_launch_nothing) {
  FT_REQUIRE(setup() == 0, "CUDA or runtime set-up failed");
  CUdeviceptr d;
  CU_CHECK(&cu, cuMemAlloc(&d, 8192));
  CU_CHECK(&cu, cuMemsetD8(d, 0xff, 8192));
  int64_t sq[3] = {0, 4, 128}, sk[3] = {0, 1, 128}, sp[1] = {0};
  DLTensor q = g_tensor(d, 0, 1, 3, sq, NULL), k = g_tensor(d, 2048, 1, 3, sk, NULL);
  DLTensor qo = g_tensor(d, 4096, 1, 3, sq, NULL), ko = g_tensor(d, 6144, 1, 3, sk, NULL);
  DLTensor p = g_tensor(d, 7168, 0, 1, sp, NULL);
  p.dtype.code = kDLInt;
  p.dtype.bits = 32;
  FT_CHECK(fi_apply_rope_pos_ids(rt, &q, &k, &qo, &ko, &p, 128, 0, 1, 1e4, NULL) == FI_OK, "%s",
           fi_last_error());
  CU_CHECK(&cu, cuCtxSynchronize());
  unsigned char h[8192];
  CU_CHECK(&cu, cuMemcpyDtoH(h, d, sizeof h));
  int64_t changed = 0;
  for (int i = 0; i < 8192; i++) changed += h[i] != 0xff;
  FT_CHECK(changed == 0, "%lld bytes written with 0 tokens", (long long)changed);
  CU_CHECK(&cu, cuMemFree(d));
}
