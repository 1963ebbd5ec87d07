/* fi_example_check.c: what each call of the serving step wrote, copied back and checked on
 * the host: finite everywhere, exact where the op only moves data, and against float64
 * references where that is cheap (the norm, attention, SiLU-and-mul). */
#include <math.h>
#include <stdarg.h>

#include "fi_example_step.h"

static void *fetch(step *s, CUdeviceptr p, size_t bytes) {
  void *h = xmalloc(bytes);
  CU_CHECK(s->cu, cuMemcpyDtoH(h, p, bytes)); /* synchronous, after the legacy stream's work */
  return h;
}

/* A check's verdict: a line kept in s->notes, printed under the call's own line (a check
 * after the first call runs before that line is printed). */
static void verdict(step *s, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void verdict(step *s, int ok, const char *fmt, ...) {
  const size_t cap = sizeof s->notes;
  size_t used = strlen(s->notes);
  used += (size_t)snprintf(s->notes + used, cap - used, "    %s: ", ok ? "ok" : "FAILED");
  if (used < cap) {
    va_list ap;
    va_start(ap, fmt);
    used += (size_t)vsnprintf(s->notes + used, cap - used, fmt, ap);
    va_end(ap);
  }
  if (used < cap) snprintf(s->notes + used, cap - used, "\n");
  if (!ok) s->failed = 1;
}

void check_norm(step *s) {
  const int T = s->T;
  uint16_t *x = fetch(s, s->hidden, (size_t)T * HIDDEN * 2), *r = fetch(s, s->resid, (size_t)T * HIDDEN * 2);
  double num = 0, den = 0, rnum = 0, rden = 0;
  long long bad = 0;
  for (int t = 0; t < T; t++) {
    const size_t o = (size_t)t * HIDDEN;
    double ss = 0;
    for (int c = 0; c < HIDDEN; c++) {
      const double a = (double)bf(s->h_hidden[o + c]) + bf(s->h_resid[o + c]);
      ss += a * a;
    }
    const double inv = 1.0 / sqrt(ss / HIDDEN + RMS_EPS);
    for (int c = 0; c < HIDDEN; c++) {
      const double a = (double)bf(s->h_hidden[o + c]) + bf(s->h_resid[o + c]);
      const double want = a * inv * bf(s->h_normw[c]);
      bad += !bf_finite(x[o + c]) || !bf_finite(r[o + c]);
      num += pow(bf(x[o + c]) - want, 2), den += want * want;
      rnum += pow(bf(r[o + c]) - a, 2), rden += a * a;
    }
  }
  const double e = sqrt(num / den), re = sqrt(rnum / rden);
  verdict(s, bad == 0 && e < 1e-2 && re < 1e-2,
          "first call against float64: output error %.2e, residual error %.2e (tolerance 1e-2); "
          "%lld values not finite", e, re, bad);
  free(x);
  free(r);
}

void check_bip(step *s) {
  int32_t *bi = fetch(s, s->bidx, (size_t)s->T * 4), *ps = fetch(s, s->pos, (size_t)s->T * 4);
  int wrong = 0;
  for (int b = 0; b < NREQ; b++)
    for (int i = s->qo[b]; i < s->qo[b + 1]; i++)
      wrong += bi[i] != b || ps[i] != s->seq[b] - q_len[b] + (i - s->qo[b]);
  verdict(s, wrong == 0, "%d of %d tokens with a wrong request or position", wrong, s->T);
  free(bi);
  free(ps);
}

/* After the first call: RoPE turns each pair (i, i + 64) of a head by an angle, so every
 * pair keeps its length (up to bf16 rounding), and pairs past position 0 move. */
void check_rope(step *s) {
  const size_t qe = (size_t)s->T * HQ * HD, ke = (size_t)s->T * HKV * HD;
  uint16_t *q = fetch(s, s->q, qe * 2), *k = fetch(s, s->k, ke * 2);
  double num = 0, den = 0;
  long long bad = 0, moved = 0;
  for (int which = 0; which < 2; which++) {
    const uint16_t *a = which ? s->h_k0 : s->h_q0, *b = which ? k : q;
    const size_t heads = which ? ke / HD : qe / HD;
    for (size_t h = 0; h < heads; h++)
      for (int i = 0; i < HD / 2; i++) {
        const size_t x = h * HD + i, y = x + HD / 2;
        const double l0 = pow(bf(a[x]), 2) + pow(bf(a[y]), 2), l1 = pow(bf(b[x]), 2) + pow(bf(b[y]), 2);
        num += fabs(l1 - l0), den += l0;
        bad += !bf_finite(b[x]) || !bf_finite(b[y]);
        moved += a[x] != b[x] || a[y] != b[y];
      }
  }
  const double e = num / den;
  verdict(s, bad == 0 && e < 1e-2 && moved > 0,
          "first call: pairs keep their length within %.2e (tolerance 1e-2); %lld of %zu pairs "
          "turned; %lld values not finite",
          e, moved, (qe + ke) / 2, bad);
  free(q);
  free(k);
}
/* After the repetitions (each turned q and k again in place): q as attention reads it. */
void keep_q(step *s) {
  const size_t qe = (size_t)s->T * HQ * HD;
  s->h_q = fetch(s, s->q, qe * 2);
  long long bad = 0;
  for (size_t i = 0; i < qe; i++) bad += !bf_finite(s->h_q[i]);
  verdict(s, bad == 0, "after %d more rotations in place: %lld values of q not finite", s->reps, bad);
}

/* Each new token's K and V rows are in its page slot, bit for bit; the caches are kept
 * as float for the attention references. */
void check_append(step *s) {
  const size_t ke = (size_t)s->T * HKV * HD, ce = (size_t)POOL_PAGES * PAGE * HKV * HD;
  uint16_t *k = fetch(s, s->k, ke * 2), *v = fetch(s, s->v, ke * 2);
  uint16_t *kc = fetch(s, s->kc, ce * 2), *vc = fetch(s, s->vc, ce * 2);
  long long wrong = 0, bad = 0;
  for (int b = 0; b < NREQ; b++)
    for (int i = s->qo[b]; i < s->qo[b + 1]; i++) {
      const int p = s->seq[b] - q_len[b] + (i - s->qo[b]);
      const size_t page = (size_t)s->kv_indices[s->kv_indptr[b] + p / PAGE];
      const size_t at = (page * PAGE + (size_t)(p % PAGE)) * HKV * HD;
      wrong += memcmp(kc + at, k + (size_t)i * HKV * HD, HKV * HD * 2) != 0;
      wrong += memcmp(vc + at, v + (size_t)i * HKV * HD, HKV * HD * 2) != 0;
    }
  s->kf = xmalloc(ce * sizeof(float));
  s->vf = xmalloc(ce * sizeof(float));
  for (size_t i = 0; i < ce; i++) {
    bad += !bf_finite(kc[i]) || !bf_finite(vc[i]);
    s->kf[i] = bf(kc[i]);
    s->vf[i] = bf(vc[i]);
  }
  verdict(s, wrong == 0 && bad == 0, "%lld of %d K/V rows not where they belong; %lld cache values not finite",
          wrong, 2 * s->T, bad);
  free(k);
  free(v);
  free(kc);
  free(vc);
}

/* Requests [b0, b1) against a float64 attention: causal, the new tokens last, GQA,
 * scale 1/sqrt(128); out's relative error and lse's largest difference (natural log). */
static void check_attention(step *s, int b0, int b1, const char *what) {
  const size_t qe = (size_t)s->T * HQ * HD;
  uint16_t *out = fetch(s, s->out, qe * 2);
  float *lse = fetch(s, s->lse, (size_t)s->T * HQ * 4);
  double *sc = xmalloc(sizeof(double) * (size_t)kv_len[NREQ - 1]), o[HD], qv[HD];
  double num = 0, den = 0, lerr = 0;
  long long bad = 0;
  const double scale = 1.0 / sqrt((double)HD);
  for (int b = b0; b < b1; b++)
    for (int t = 0; t < q_len[b]; t++) {
      const int row = s->qo[b] + t, n = kv_len[b] - q_len[b] + t + 1; /* KV tokens it sees */
      for (int h = 0; h < HQ; h++) {
        const int kh = h / (HQ / HKV);
        for (int x = 0; x < HD; x++) qv[x] = bf(s->h_q[((size_t)row * HQ + h) * HD + x]);
        double m = -INFINITY;
        for (int j = 0; j < n; j++) {
          const size_t page = (size_t)s->kv_indices[s->kv_indptr[b] + j / PAGE];
          const float *kr = s->kf + ((page * PAGE + (size_t)(j % PAGE)) * HKV + kh) * HD;
          double d = 0;
          for (int x = 0; x < HD; x++) d += qv[x] * kr[x];
          sc[j] = d * scale;
          if (sc[j] > m) m = sc[j];
        }
        double sum = 0;
        memset(o, 0, sizeof o);
        for (int j = 0; j < n; j++) {
          const size_t page = (size_t)s->kv_indices[s->kv_indptr[b] + j / PAGE];
          const float *vr = s->vf + ((page * PAGE + (size_t)(j % PAGE)) * HKV + kh) * HD;
          const double p = exp(sc[j] - m);
          sum += p;
          for (int x = 0; x < HD; x++) o[x] += p * vr[x];
        }
        const uint16_t *got = out + ((size_t)row * HQ + h) * HD;
        for (int x = 0; x < HD; x++) {
          const double want = o[x] / sum;
          bad += !bf_finite(got[x]);
          num += pow(bf(got[x]) - want, 2), den += want * want;
        }
        const float gl = lse[(size_t)row * HQ + h];
        bad += !isfinite(gl);
        if (fabs(gl - (m + log(sum))) > lerr) lerr = fabs(gl - (m + log(sum)));
      }
    }
  const double e = sqrt(num / den);
  verdict(s, bad == 0 && e < 2e-2 && lerr < 1e-2,
          "%s against float64: output error %.2e (tolerance 2e-2), largest lse difference %.2e "
          "(tolerance 1e-2); %lld values not finite",
          what, e, lerr, bad);
  free(out);
  free(lse);
  free(sc);
}
void check_prefill(step *s) { check_attention(s, 0, NPRE, "prompt rows"); }
void check_decode(step *s) { check_attention(s, NPRE, NREQ, "decode rows"); }

void check_silu(step *s) {
  const size_t n = (size_t)s->T * INTER;
  uint16_t *a = fetch(s, s->act, n * 2);
  double num = 0, den = 0;
  long long bad = 0;
  for (int t = 0; t < s->T; t++)
    for (int c = 0; c < INTER; c++) {
      const double g = bf(s->h_gu[(size_t)t * 2 * INTER + c]), u = bf(s->h_gu[(size_t)t * 2 * INTER + INTER + c]);
      const double want = g / (1.0 + exp(-g)) * u;
      const uint16_t got = a[(size_t)t * INTER + c];
      bad += !bf_finite(got);
      num += pow(bf(got) - want, 2), den += want * want;
    }
  const double e = sqrt(num / den);
  verdict(s, bad == 0 && e < 1e-2, "against float64: error %.2e (tolerance 1e-2); %lld values not finite", e,
          bad);
  free(a);
}

/* Each id in [0, vocab) and inside its row's top-k set (fewer than k logits above it). */
static int samples_ok(step *s, const int32_t *id, char *why, size_t n) {
  for (int b = 0; b < NREQ; b++) {
    if (id[b] < 0 || id[b] >= VOCAB) {
      snprintf(why, n, "request %d: token %d is not in [0, %d)", b, id[b], VOCAB);
      return 0;
    }
    const float *row = s->h_logits + (size_t)b * VOCAB;
    const float x = row[id[b]];
    int above = 0;
    for (int i = 0; i < VOCAB; i++) above += row[i] > x;
    if (above >= TOP_K) {
      snprintf(why, n, "request %d: token %d has %d logits above it (top-k %d)", b, id[b], above, TOP_K);
      return 0;
    }
  }
  return 1;
}
void check_sample_first(step *s) {
  CU_CHECK(s->cu, cuMemcpyDtoH(s->first_samples, s->samples, sizeof s->first_samples));
}
/* The first call's draws are valid, and the same (seed, offset) draws them again. */
void check_sample(step *s) {
  char why[160] = "";
  int ok = samples_ok(s, s->first_samples, why, sizeof why);
  fi_status st = op_sample(s, -1);
  if (st != FI_OK) {
    verdict(s, 0, "the repeated call failed: %s: %s", s->fi->status_string(st), s->fi->last_error());
    return;
  }
  int32_t again[NREQ];
  CU_CHECK(s->cu, cuMemcpyDtoH(again, s->samples, sizeof again)); /* synchronous on the legacy stream */
  const int same = memcmp(again, s->first_samples, sizeof again) == 0;
  char what[96];
  if (ok) snprintf(what, sizeof what, "each among its row's top %d logits", TOP_K);
  verdict(s, ok && same, "tokens %d %d %d %d: %s; %s for the same seed and offset", s->first_samples[0],
          s->first_samples[1], s->first_samples[2], s->first_samples[3], ok ? what : why,
          same ? "the same draws" : "OTHER draws");
}
