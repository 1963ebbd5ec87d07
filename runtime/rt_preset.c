/* rt_preset.c: model presets for prewarm: the kernels one serving step of a model
 * needs (norms, RoPE, KV append, prefill, decode, activation, sampling) on an arch,
 * found by asking each op's own kernel choice for the model's shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit_compiler.h"
#include "jit_registry.h"
#include "sampling_params.h"
#include "ops_act.h"
#include "moe_params.h"
#include "ops_decode.h"
#include "ops_moe.h"
#include "ops_norm.h"
#include "ops_page.h"
#include "ops_prefill.h"
#include "ops_rope.h"
#include "ops_sampling.h"
#include "rt_decode_choose.h"
#include "rt_env.h"
#include "rt_internal.h"
#include "rt_prefill.h"
#include "rt_sampling.h"
#include "rt_autotune.h"
#include "ops_mla.h"
#include "mla_params.h"

/* A model's attention and MLP shapes on one rank (tensor parallelism divides the heads
 * and the intermediate size; the vocabulary is gathered before sampling). */
typedef struct rt_model {
  const char *name, *about;
  int head_dim, hq, hkv, hidden, inter, vocab;
  int qk_norm; /* RMSNorm over each head of q and k (Qwen3) */
  int experts, routing; /* mixture of experts: routed experts and fi_moe_routing_method; 0 experts: dense */
  int top_k;            /* experts a token; inter is then one expert's intermediate size */
  int mla;              /* multi-head latent attention (DeepSeek): the MLA kernels (both q tiles: 128
                           heads, or 16 a rank under TP8) and their merge; no GQA attention, RoPE or
                           KV-append kernels */
} rt_model;

static const rt_model models[] = {
    {"llama3-8b", "Llama-3-8B: bf16, 32/8 heads of 128, hidden 4096, intermediate 14336, page 16",
     128, 32, 8, 4096, 14336, 128256, 0, 0, 0, 0, 0},
    {"llama3-70b-tp8", "Llama-3-70B on 8 GPUs: bf16, 8/1 heads of 128 a rank, hidden 8192, intermediate 3584 a rank",
     128, 8, 1, 8192, 3584, 128256, 0, 0, 0, 0, 0},
    {"qwen3-30b-a3b", "Qwen3-30B-A3B: bf16, 32/4 heads of 128 with q/k norm, hidden 2048, 128 experts top 8 of "
                      "intermediate 768 (routing, sort, the expert GEMMs, finalize)",
     128, 32, 4, 2048, 768, 151936, 1, 128, FI_MOE_SOFTMAX_TOPK_RENORM, 8, 0},
    {"mixtral-8x7b", "Mixtral-8x7B: bf16, 32/8 heads of 128, hidden 4096, 8 experts top 2 of intermediate 14336",
     128, 32, 8, 4096, 14336, 32000, 0, 8, FI_MOE_RENORMALIZE, 2, 0},
    {"deepseek-v3", "DeepSeek-V3/R1: bf16 experts, hidden 7168, 256 experts top 8 of intermediate 2048 (grouped "
                    "routing with bias), MLA attention (ckv 512 + kpe 64, 128 heads or 16 a rank)",
     0, 0, 0, 7168, 2048, 129280, 0, 256, FI_MOE_DEEPSEEK_V3, 8, 1},
};
#define NMODELS ((int)(sizeof models / sizeof models[0]))

FI_API int fi_admin_preset_count(void) { return NMODELS; }

FI_API const char *fi_admin_preset_name(int i) { return i >= 0 && i < NMODELS ? models[i].name : NULL; }

FI_API const char *fi_admin_preset_about(int i) { return i >= 0 && i < NMODELS ? models[i].about : NULL; }

/* The keys found so far, without repeats. */
typedef struct keyset {
  jit_key *k;
  int n, cap;
} keyset;

static int add(keyset *s, const jit_key *k) {
  for (int i = 0; i < s->n; i++)
    if (s->k[i].op == k->op && memcmp(s->k[i].v, k->v, sizeof k->v) == 0) return 0;
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 64;
    jit_key *p = realloc(s->k, (size_t)cap * sizeof *p);
    if (!p) return -1;
    s->k = p, s->cap = cap;
  }
  s->k[s->n++] = *k;
  return 0;
}

/* Sixteen-byte vectors where the row allows (every preset's rows do). */
static int vec16(int dt, int64_t n) {
  int v = 16 / jit_dtype_bytes(dt);
  while (v > 1 && n % v) v /= 2;
  return v;
}

/* The norms, RoPE, append, activation and sampling kernels of one step. */
static int small_ops(const rt_model *m, int dt, int warp, int hopper, keyset *s) {
  jit_key k;
  int threads, rc = 0;
  jit_rmsnorm_select(dt, vec16(dt, m->hidden), m->hidden, &k);
  rc |= add(s, &k);
  jit_norm_select(&jit_op_fused_add_rmsnorm, dt, vec16(dt, m->hidden), m->hidden, warp, &k, &threads);
  rc |= add(s, &k);
  if (!m->mla && m->qk_norm) {
    jit_rmsnorm_select(dt, vec16(dt, m->head_dim), m->head_dim, &k);
    rc |= add(s, &k);
  }
  /* RoPE from positions (int32 or int64 ids) and from a cos/sin cache, as engines call it. */
  for (int pos = 0; !m->mla && pos < 2; pos++)
    for (int mode = 0; mode < JIT_ROPE_MODE_COUNT; mode++) {
      jit_rope_select(dt, pos ? JIT_DT_I64 : JIT_DT_I32, mode, 0, vec16(dt, m->head_dim), &k);
      rc |= add(s, &k);
    }
  if (!m->mla) {
    jit_page_select(dt, dt, 0, vec16(dt, m->head_dim), &k); /* NHD */
    rc |= add(s, &k);
    jit_page_select(dt, dt, 1, vec16(dt, m->head_dim), &k); /* HND */
    rc |= add(s, &k);
    jit_bip_select(&k);
    rc |= add(s, &k);
  }
  jit_act_select(JIT_ACT_SILU, dt, vec16(dt, m->inter), &k);
  rc |= add(s, &k);
  /* MoE routing on router logits of float32 or bfloat16 */
  for (int i = 0; m->experts && i < 2; i++) {
    jit_moe_routing_select(i ? JIT_DT_BF16 : JIT_DT_F32, m->routing, m->experts, warp, &k);
    rc |= add(s, &k);
  }
  /* Sampling on float32 logits: softmax, sampling from probs, top-k/top-p from logits;
   * a cluster of 8 or 4 blocks a row on Hopper for small batches (rt_sampling.c). */
  static const int kinds[] = {FI_SMP_SOFTMAX, FI_SMP_SAMPLE, FI_SMP_TOPK_TOPP_LOGITS};
  static const int clusters[] = {1, 4, 8};
  for (int i = 0; i < 3; i++)
    for (int c = 0; c < (hopper ? 3 : 1); c++) {
      const int op = kinds[i];
      const int sel = op == FI_SMP_TOPK || op == FI_SMP_TOPK_TOPP_LOGITS;
      jit_sampling_select(op, JIT_DT_F32, m->vocab % 4 ? 1 : 4, clusters[c], sel, &k);
      rc |= add(s, &k);
    }
  return rc;
}

/* Batch decode's kernels for batches from 1 to 256 and short and long contexts, as the
 * planner's choice (rt_decode_choose) picks them on a model of a device of sms SMs. */
static int decode_ops(const rt_model *m, int sms, keyset *s) {
  const rt_tuning tune = rt_tuning_default(); /* a preset is the rule's choice, no override */
  const rt_decode_device dev = rt_decode_device_model(sms);
  static const int batches[] = {1, 4, 16, 64, 128, 256};
  static const int lens[] = {256, 2048, 16384};
  const int page = 16;
  int32_t *ip = malloc(257 * sizeof *ip), *lp = malloc(256 * sizeof *lp);
  int rc = ip && lp ? 0 : -1;
  for (size_t b = 0; !rc && b < sizeof batches / sizeof *batches; b++)
    for (size_t l = 0; !rc && l < sizeof lens / sizeof *lens; l++) {
      const int B = batches[b], pages = (lens[l] + page - 1) / page;
      for (int i = 0; i <= B; i++) ip[i] = i * pages;
      for (int i = 0; i < B; i++) lp[i] = lens[l] - (pages - 1) * page;
      fi_batch_decode_info info;
      memset(&info, 0, sizeof info);
      info.batch = B;
      info.indptr = ip;
      info.last_page_len = lp;
      info.num_qo_heads = m->hq;
      info.num_kv_heads = m->hkv;
      info.head_dim = m->head_dim;
      info.page_size = page;
      info.q_dtype = info.kv_dtype = (DLDataType){kDLBfloat, 16, 1};
      fi_attention_params p;
      fi_attention_params_init(&p);
      rt_decode_choice c;
      if (rt_decode_choose("preset", &info, &p, INT64_MAX, &tune, &dev, NULL, &c) != FI_OK) {
        rc = -1;
        break;
      }
      free(c.tab);
      rc |= add(s, &c.key);
    }
  free(ip);
  free(lp);
  jit_key k;
  jit_decode_upload_select(&k);
  return rc | add(s, &k);
}

/* Batch prefill's kernels for prompts of 1 to 8192 tokens a request (packed rows: tokens
 * x group), fresh plans and CUDA-graph mode, and the merge of split-KV partials. */
static int prefill_ops(const rt_model *m, int dt, int hopper, keyset *s) {
  static const int tokens[] = {1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
  const int group = m->hq / m->hkv, D = m->head_dim;
  const rt_tuning tune = rt_tuning_default(); /* a preset is the rule's choice, no override */
  jit_key k;
  int rc = 0;
  for (size_t t = 0; t < sizeof tokens / sizeof *tokens; t++) {
    const int64_t rows = (int64_t)tokens[t] * group;
    if (hopper && rows > 16) {
      const int64_t kvs[] = {-1, tokens[t], 16384};
      for (int i = 0; i < 3; i++) {
        rt_prefill_wgmma_key(&tune, 0, dt, D, rows, rt_prefill_kvsel(NULL, kvs[i] < 0, kvs[i]), 0, &k);
        rc |= add(s, &k);
      }
    } else {
      jit_prefill_select(0, dt, D, jit_prefill_q_tile(D, rows), 0, &k);
      rc |= add(s, &k);
    }
  }
  jit_prefill_merge_select(dt, D, &k);
  return rc | add(s, &k);
}

/* The fused layer's tile (rt_moe_fused.c's rule) at T tokens. */
static int moe_tile(const rt_model *m, int64_t T) { return fi_moe_default_tile(T, m->top_k, m->experts); }

/* Token counts the MoE kernels and tactics of a preset are found for. */
static const int64_t moe_tokens[] = {1, 16, 64, 256, 1024, 4096, 16384};
#define NMOE_TOKENS ((int)(sizeof moe_tokens / sizeof moe_tokens[0]))

/* The MoE layer's kernels (fi_fused_moe on all of the model's experts): the sort, both
 * grouped GEMMs as the rule picks them for 1 to 16384 tokens, the finalize. */
static int moe_ops(const rt_model *m, int dt, int smem_kb, int wgmma, keyset *s) {
  jit_key k;
  int rc = 0;
  for (int phase = 0; phase < 2; phase++) {
    jit_moe_sort_select(phase, &k);
    rc |= add(s, &k);
  }
  jit_moe_combine_select(1, dt, vec16(dt, m->hidden), &k);
  rc |= add(s, &k);
  for (int t = 0; t < NMOE_TOKENS; t++) {
    const int64_t T = moe_tokens[t], routes = T * m->top_k;
    const int tile = moe_tile(m, T);
    jit_moe_gemm_choose(dt, routes, m->experts, tile, 0, 1, 1, m->inter, smem_kb, wgmma, &k);
    rc |= add(s, &k);
    jit_moe_gemm_choose(dt, routes, m->experts, tile, 0, 0, 0, m->hidden, smem_kb, wgmma, &k);
    rc |= add(s, &k);
  }
  return rc;
}

/* Decode is tuned for CUDA-graph plans (the mode engines capture decode in: the tactic's
 * key is the batch, fixed by max_batch) up to this many requests, each measured with 2048
 * KV tokens (rt_autotune_decode.c). */
#define TUNE_DECODE_MAX_BATCH 512

FI_API int fi_admin_preset_tune_job(const char *preset, int i, int64_t tokens, const char **op, char *shape,
                                    size_t n) {
  const rt_model *m = NULL;
  for (int j = 0; preset && j < NMODELS; j++)
    if (strcmp(models[j].name, preset) == 0) m = &models[j];
  if (!m || i < 0 || tokens < 1 || !op || !shape || !n) return -1;
  /* The jobs: a mixture-of-experts model's two expert GEMMs (0: the first, gathered tokens
   * and SwiGLU; 1: the second), then, where the attention is this library's, batch decode
   * and batch prefill. */
  enum { GEMM1, GEMM2, DECODE, PREFILL, SAMPLING };
  int jobs[5], nj = 0;
  if (m->experts) jobs[nj++] = GEMM1, jobs[nj++] = GEMM2;
  if (!m->mla) jobs[nj++] = DECODE, jobs[nj++] = PREFILL;
  jobs[nj++] = SAMPLING;
  if (i >= nj) return -1;
  char buf[256];
  switch (jobs[i]) {
    case GEMM1:
    case GEMM2: {
      const int second = jobs[i] == GEMM2;
      rt_moe_gemm_shape(JIT_DT_BF16, second ? m->inter : m->hidden, second ? m->hidden : m->inter, m->experts,
                        m->top_k, !second, !second, moe_tile(m, fi_tune_bucket(tokens)), buf, sizeof buf);
      *op = "moe_gemm";
      break;
    }
    case DECODE:
      if (tokens > TUNE_DECODE_MAX_BATCH) return 1;
      rt_decode_tactic_shape((const int64_t[RT_DECODE_TACTIC_FIELDS]){JIT_DT_BF16, JIT_DT_BF16, m->hq, m->hkv,
                                                                       m->head_dim, 16, 0, -1},
                             buf, sizeof buf);
      *op = "batch_decode";
      break;
    case PREFILL: {
      int64_t f[RT_PREFILL_TACTIC_FIELDS];
      rt_prefill_tactic_fields(JIT_DT_BF16, m->hq, m->hkv, m->head_dim, 1, 0, f);
      rt_prefill_tactic_shape(f, buf, sizeof buf);
      *op = "batch_prefill";
      break;
    }
    default: /* the serving step's sampler (fi-example's): top-k + top-p from float32 logits */
      if (tokens > TUNE_DECODE_MAX_BATCH) return 1;
      rt_sampling_tactic_shape((const int64_t[RT_SAMPLING_TACTIC_FIELDS]){FI_SMP_TOPK_TOPP_LOGITS, JIT_DT_F32,
                                                                           m->vocab},
                               buf, sizeof buf);
      *op = "sampling";
  }
  if (strlen(buf) >= n) return -1;
  memcpy(shape, buf, strlen(buf) + 1);
  return 0;
}

static const rt_model *find(const char *name) {
  for (int i = 0; name && i < NMODELS; i++)
    if (strcmp(models[i].name, name) == 0) return &models[i];
  return NULL;
}

FI_API fi_status fi_admin_preset_configs(const char *preset, const char *arch, fi_preset_config *out,
                                         int cap, int *n) {
  const rt_model *m = find(preset);
  if (!m) return rt_fail(FI_ERR_INVALID_ARGUMENT, "preset: no preset named '%s'", preset ? preset : "(null)");
  if (!n) return rt_fail(FI_ERR_INVALID_ARGUMENT, "n is NULL");
  if (cap < 0 || (cap > 0 && !out)) return rt_fail(FI_ERR_INVALID_ARGUMENT, "out/cap: %d entries at %p", cap, (void *)out);
  const jit_compiler *cc = jit_compiler_for_arch(arch);
  if (!cc)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "arch: '%s' is not a target (sm_XY with XY >= 70, sm_90a, gfx90a, ...)",
                   arch ? arch : "(null)");
  const int amd = strncmp(arch, "gfx", 3) == 0;
  const int hopper = strcmp(arch, "sm_90") == 0 || strcmp(arch, "sm_90a") == 0;
  const int sms = amd ? 104 : hopper ? 132 : 108;
  keyset s = {0};
  const int dt = JIT_DT_BF16;
  int rc = small_ops(m, dt, amd ? 64 : 32, hopper, &s);
  if (!m->mla) {
    rc |= decode_ops(m, sms, &s);
    rc |= prefill_ops(m, dt, hopper, &s);
  }
  /* Shared memory a block may use on the arch (the device layer's table) and wgmma on sm_90. */
  const int smem_kb = hopper ? 227 : amd ? 64 : strcmp(arch, "sm_80") == 0 || strcmp(arch, "sm_87") == 0 ? 163 : 99;
  if (m->mla && smem_kb * 1024 >= FI_MLA_SMEM(64)) { /* the tiles the MLA plan can choose there */
    jit_key k;
    if (smem_kb * 1024 >= FI_MLA_SMEM(16)) {
      jit_mla_select(dt, 16, 0, &k);
      rc |= add(&s, &k);
    }
    jit_mla_select(dt, 64, 0, &k);
    rc |= add(&s, &k);
    jit_mla_merge_select(dt, &k);
    rc |= add(&s, &k);
  }
  if (m->mla) {
    jit_key k;
    jit_mla_append_select(dt, &k);
    rc |= add(&s, &k);
  }
  if (m->experts) {
    rc |= moe_ops(m, dt, smem_kb, hopper, &s);
  }
  if (rc) {
    free(s.k);
    return rt_fail(FI_ERR_OUT_OF_MEMORY, "preset %s: out of memory", m->name);
  }
  /* Each key as an (op, registered configuration) pair, which prewarm compiles. */
  fi_status st = FI_OK;
  int found = 0;
  for (int i = 0; i < s.n && st == FI_OK; i++) {
    const jit_op *op = s.k[i].op;
    int idx = -1;
    for (int c = 0, nc = op->config_count(); c < nc && idx < 0; c++) {
      jit_key r;
      op->config(c, &r);
      if (memcmp(r.v, s.k[i].v, sizeof r.v) == 0) idx = c;
    }
    if (idx < 0) {
      char key[512];
      jit_key_canonical(&s.k[i], key, sizeof key);
      st = rt_fail(FI_ERR_INTERNAL, "preset %s: the kernel %s is not a registered configuration", m->name, key);
    } else if (found < cap) {
      out[found++] = (fi_preset_config){op->name, idx};
    } else {
      found++;
    }
  }
  free(s.k);
  *n = found;
  return st;
}
