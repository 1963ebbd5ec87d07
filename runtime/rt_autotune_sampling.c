/* rt_autotune_sampling.c: the samplers as fi_autotune measures them. Shape text as a call
 * keys its stored tactic (rt_sampling_tactic_shape): "op=top_k;dtype=f32;vocab=128256",
 * the op one of sample, top_k, top_p, min_p, top_k_top_p_probs (from probabilities) or
 * top_k_top_p_logits (from logits); tokens are the batch's rows. Inputs: probabilities uniform in [0, 1) (not
 * normalized: every sampler is relative to the row's total) or logits uniform in [-8, 8),
 * top_k 50, top_p 0.9, min_p 0.05, one seed and offset for every run, so that every tactic
 * draws the same tokens: the output is the samples, which must be the rule's bit for bit.
 * Tactics: CTAs per row (1, and 4 and 8 on a device with clusters) x the threshold search
 * (radix, and the key-range one for float32 inputs of the ops that search), the rule's
 * first. The renorm and mask ops are not tuned (the rule chooses). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_sampling.h"
#include "rt_autotune.h"
#include "rt_sampling.h"
#include "sampling_params.h"

#define TOP_K 50
#define TOP_P 0.9
#define MIN_P 0.05
#define SEED 1234
#define OFFSET 7

typedef struct smp_case {
  int64_t f[RT_SAMPLING_TACTIC_FIELDS]; /* op, dtype, vocab */
  int64_t B;
  void *in;
  int64_t s_in[2], s_out[1];
  DLTensor in_t;
  int n;
  rt_sampling_tactic tac[RT_TUNE_MAX_TACTICS];
} smp_case;

static const char *const names[3] = {"op", "dtype", "vocab"};

static int value(int i, const char *v, void *cv) {
  int64_t *f = ((smp_case *)cv)->f;
  if (i == 0) {
    f[0] = rt_sampling_op_of(v);
    return rt_sampling_tuned((int)f[0]) ? 0 : -1;
  }
  if (i == 1) {
    f[1] = strcmp(v, "f32") == 0 ? JIT_DT_F32 : strcmp(v, "bf16") == 0 ? JIT_DT_BF16 : JIT_DT_F16;
    return strcmp(v, "f32") == 0 || strcmp(v, "bf16") == 0 || strcmp(v, "f16") == 0 ? 0 : -1;
  }
  char *end = NULL;
  const long long a = strtoll(v, &end, 10);
  f[2] = a;
  return end != v && !*end && a >= 1 && a <= (1 << 30) ? 0 : -1;
}

static fi_status parse(const char *shape, void *cv, char *canon, size_t n) {
  smp_case *c = cv;
  static const char *const want =
      "sampling takes op (sample, top_k, top_p, min_p, top_k_top_p_probs or top_k_top_p_logits), dtype (f32, bf16 "
      "or f16) and vocab: "
      "\"op=top_k;dtype=f32;vocab=128256\"";
  fi_status st = rt_tune_parse_shape(shape, names, 3, value, c, want);
  if (st != FI_OK) return st;
  rt_sampling_tactic_shape(c->f, canon, n);
  return FI_OK;
}

static fi_status setup(rt_tune_dev *d, void *cv, int64_t tokens) {
  smp_case *c = cv;
  const int dt = (int)c->f[1];
  const size_t es = dt == JIT_DT_F32 ? 4 : 2;
  c->B = tokens;
  if (c->B * c->f[2] > ((int64_t)1 << 34))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_autotune: %lld rows of %lld are too many to sample", (long long)c->B,
                   (long long)c->f[2]);
  const size_t bytes = (size_t)(c->B * c->f[2]) * es;
  fi_status st = rt_tune_alloc(d, bytes, &c->in, "the sampler's input");
  if (st != FI_OK) return st;
  const int logits = c->f[0] == FI_SMP_TOPK_TOPP_LOGITS;
  if ((st = rt_tune_fill_as(d, c->in, bytes, dt, logits ? -8.0f : 0.0f, logits ? 8.0f : 1.0f, 31)) != FI_OK) return st;
  c->s_in[0] = c->B, c->s_in[1] = c->f[2], c->s_out[0] = c->B;
  c->in_t = rt_tune_tensor(c->in, dt == JIT_DT_F32 ? kDLFloat : dt == JIT_DT_BF16 ? kDLBfloat : kDLFloat,
                           dt == JIT_DT_F32 ? 32 : 16, 2, c->s_in, d->dev);
  return FI_OK;
}

static int tactics(rt_tune_dev *d, void *cv, char (*out)[RT_TUNE_NAME], int max) {
  smp_case *c = cv;
  const int op = (int)c->f[0];
  if (rt_sampling_rule(d->rt, kDLCUDA, d->dev, op, c->B, &c->tac[0]) != 0) return -1;
  /* The search the kernel key keeps (the key-range one only for float32 inputs of the
   * ops that search). */
  const int searches = jit_sampling_has_select(op) && c->f[1] == JIT_DT_F32;
  if (!searches) c->tac[0].select = 0;
  c->n = 1;
  static const int clusters[3] = {1, 4, 8};
  for (int k = 0; k < 3; k++)
    for (int s = 0; s <= searches; s++) {
      const rt_sampling_tactic t = {clusters[k], s};
      if (t.cluster > 1 && !d->caps.clusters) continue;
      if (t.cluster == c->tac[0].cluster && t.select == c->tac[0].select) continue;
      if (c->n < max) c->tac[c->n++] = t;
    }
  for (int i = 0; i < c->n; i++) rt_sampling_tactic_format(&c->tac[i], out[i], RT_TUNE_NAME);
  return c->n;
}

static size_t out_bytes(const void *cv) { return (size_t)((const smp_case *)cv)->B * 4; }

static int is_bf16(const void *cv) {
  (void)cv;
  return 0;
}

static fi_status run(rt_tune_dev *d, void *cv, int i, void *out) {
  smp_case *c = cv;
  DLTensor s = rt_tune_tensor(out, kDLInt, 32, 1, c->s_out, d->dev);
  rt_sampling_force(&c->tac[i]);
  fi_status st;
  switch (c->f[0]) {
    case FI_SMP_SAMPLE:
      st = fi_sampling_from_probs(d->rt, &c->in_t, &s, SEED, OFFSET, NULL);
      break;
    case FI_SMP_TOPK:
      st = fi_top_k_sampling_from_probs(d->rt, &c->in_t, NULL, TOP_K, &s, SEED, OFFSET, NULL);
      break;
    case FI_SMP_TOPP:
      st = fi_top_p_sampling_from_probs(d->rt, &c->in_t, NULL, TOP_P, &s, SEED, OFFSET, NULL);
      break;
    case FI_SMP_MINP:
      st = fi_min_p_sampling_from_probs(d->rt, &c->in_t, NULL, MIN_P, &s, SEED, OFFSET, NULL);
      break;
    case FI_SMP_TOPK_TOPP_PROBS:
      st = fi_top_k_top_p_sampling_from_probs(d->rt, &c->in_t, NULL, TOP_K, NULL, TOP_P, &s, SEED, OFFSET, NULL);
      break;
    default:
      st = fi_top_k_top_p_sampling_from_logits(d->rt, &c->in_t, NULL, TOP_K, NULL, TOP_P, &s, SEED, OFFSET, NULL);
  }
  rt_sampling_force(NULL);
  return st;
}

static void release(rt_tune_dev *d, void *cv) { rt_tune_free(d, ((smp_case *)cv)->in); }

const rt_tune_op rt_tune_sampling = {"sampling", sizeof(smp_case), parse, setup, tactics, out_bytes, is_bf16, run,
                                     release, 1};
