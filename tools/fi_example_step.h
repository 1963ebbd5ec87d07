/* fi_example_step.h: the serving step's state, shared by fi_example_step.c (the batch, the
 * calls and their timing) and fi_example_check.c (what each call wrote, against the host). */
#ifndef FI_EXAMPLE_STEP_H
#define FI_EXAMPLE_STEP_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fi_example.h"

/* The model, one layer on one GPU: Llama-3-8B. */
enum { HIDDEN = 4096, INTER = 14336, HQ = 32, HKV = 8, HD = 128, PAGE = 16, VOCAB = 128256 };
#define RMS_EPS 1e-5
#define ROPE_THETA 500000.0 /* Llama 3.1's RoPE: factor 8, low 1, high 4, context 8192 */
#define ROPE_FACTOR 8.0
#define TOP_K 50
#define TOP_P 0.9

/* The batch: KV lengths after this step's tokens are appended, and the new tokens of
 * each request. The first NPRE requests are prompts (a whole prompt of 100 tokens, a
 * chunk of 32 of a longer one), the others decode one token each. */
enum { NREQ = 4, NPRE = 2, NDEC = NREQ - NPRE, POOL_PAGES = 256, MAX_REPS = 1000 };
static const int kv_len[NREQ] = {100, 500, 1000, 2000};
static const int q_len[NREQ] = {100, 32, 1, 1};

typedef struct step {
  const fi_api *fi;
  fi_runtime *rt;
  cu_api *cu;
  fi_step_result *res;
  int reps, failed;
  char notes[2048]; /* the current call's verdicts, printed under its line */
  double gpu_us, host_us; /* the warm medians, summed */
  uint64_t rng;
  CUevent e0, e1;
  /* The batch on the host. */
  int T;                                        /* new tokens in all */
  int32_t qo[NREQ + 1], seq[NREQ];              /* token offsets; KV lengths */
  int32_t kv_indptr[NREQ + 1], kv_last[NREQ];   /* pages of each request, last page's fill */
  int32_t kv_indices[POOL_PAGES];               /* page ids, shuffled */
  int32_t dec_indptr[NDEC + 1];                 /* the decode requests' own page table */
  /* Host copies kept for the checks. */
  uint16_t *h_hidden, *h_resid, *h_normw, *h_q0, *h_k0, *h_gu;
  float *h_logits, *kf, *vf; /* logits; the caches after the append, as float */
  uint16_t *h_q;             /* q after RoPE */
  int32_t first_samples[NREQ];
  /* Device memory, freed at the end. */
  CUdeviceptr mem[32];
  int nmem;
  CUdeviceptr hidden, resid, normw, q, k, v, aip, seqlen, bidx, pos, kvip, kvidx, kvlast, kc, vc;
  CUdeviceptr out, lse, pws, dws, dip, didx, dlast, gu, act, logits, samples;
  /* Tensors; their shapes live in dims. */
  int64_t dims[40][4];
  int ndims;
  DLTensor t_hidden, t_resid, t_normw, t_q, t_k, t_v, t_aip, t_seq, t_bidx, t_pos, t_kvip, t_kvidx,
      t_kvlast, t_kc, t_vc, t_pws, t_pq, t_pout, t_plse, t_dws, t_dq, t_dout, t_dlse, t_dip, t_didx,
      t_dlast, t_gu, t_act, t_logits, t_samples;
  fi_batch_prefill_info pinfo;
  fi_prefill_params pparams;
  fi_prefill_plan *pplan;
  fi_batch_decode_info dinfo;
  fi_attention_params dparams;
  fi_decode_plan *dplan;
} step;

/* bf16 <-> float on the host. */
static inline float bf(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t to_bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even (the inputs are finite) */
  return (uint16_t)(u >> 16);
}
static inline int bf_finite(uint16_t b) { return (b & 0x7f80u) != 0x7f80u; }
static inline void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "fi-example: out of host memory (%zu bytes)\n", n);
    exit(1);
  }
  return p;
}

/* The sampling call (fi_example_step.c), which check_sample repeats. */
fi_status op_sample(step *s, int rep);

/* The checks (fi_example_check.c): each prints one verdict line and sets s->failed on a
 * failure. after_first ones run right after a call's first run, the others after its
 * warm repetitions. */
void check_norm(step *s);         /* after_first: fused add + RMSNorm against float64 */
void check_bip(step *s);          /* batch indices and positions, exactly */
void check_rope(step *s);         /* after_first: every rotated pair keeps its length */
void keep_q(step *s);             /* q after every rotation, kept for attention */
void check_append(step *s);       /* the new K/V rows in their slots; the caches kept */
void check_prefill(step *s);      /* the prompt rows against float64 attention */
void check_decode(step *s);       /* the decode rows likewise */
void check_silu(step *s);         /* SiLU-and-mul against float64 */
void check_sample_first(step *s); /* after_first: keeps the first draws */
void check_sample(step *s);       /* the draws valid, and repeatable */

#endif
