/* bench_sampling.c: fi-bench section sampling: the samplers, softmax, renorm and mask at
 * batch 64 x vocab 128256 (float32, a Zipf-shaped distribution), against the copy
 * bandwidth of the same run and FlashInfer's figures on the H200. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { S_SAMPLE, S_TOPK, S_TOPP, S_MINP, S_KPL, S_KPP, S_SLOG, S_SOFTMAX, S_KRENORM, S_PRENORM, S_KMASK, S_N };
static const char *const s_names[S_N] = {"sampling_from_probs",
                                         "top_k_sampling (k=50)",
                                         "top_p_sampling (p=0.9)",
                                         "min_p_sampling (0.05)",
                                         "top_k_top_p_from_logits (50, 0.9)",
                                         "top_k_top_p_from_probs (50, 0.9)",
                                         "sampling_from_logits",
                                         "softmax (T=1)",
                                         "top_k_renorm_probs (k=50)",
                                         "top_p_renorm_probs (p=0.9)",
                                         "top_k_mask_logits (k=50)"};
static const char *const s_keys[S_N] = {"sampling",     "top_k",        "top_p",
                                        "min_p",        "top_k_top_p",  "top_k_top_p_probs",
                                        "sampling_logits", "softmax",
                                        "top_k_renorm", "top_p_renorm", "top_k_mask"};
/* FlashInfer on this H200 at batch 64 x 128256 float32 (the figures), us. */
static const double flashinfer_us[S_N] = {34, 152, 66, 45, 153, 0, 0, 0, 0, 0, 0};

#define SETS 6

typedef struct bset {
  CUdeviceptr probs, logits, out, samples;
  DLTensor tp, tl, to, ts;
} bset;

static fi_status call(fi_runtime *rt, int op, bset *s, uint64_t off) {
  switch (op) {
    case S_SAMPLE:
      return fi_sampling_from_probs(rt, &s->tp, &s->ts, 42, off, NULL);
    case S_TOPK:
      return fi_top_k_sampling_from_probs(rt, &s->tp, NULL, 50, &s->ts, 42, off, NULL);
    case S_TOPP:
      return fi_top_p_sampling_from_probs(rt, &s->tp, NULL, 0.9, &s->ts, 42, off, NULL);
    case S_MINP:
      return fi_min_p_sampling_from_probs(rt, &s->tp, NULL, 0.05, &s->ts, 42, off, NULL);
    case S_KPL:
      return fi_top_k_top_p_sampling_from_logits(rt, &s->tl, NULL, 50, NULL, 0.9, &s->ts, 42, off,
                                                 NULL);
    case S_KPP:
      return fi_top_k_top_p_sampling_from_probs(rt, &s->tp, NULL, 50, NULL, 0.9, &s->ts, 42, off, NULL);
    case S_SLOG:
      return fi_sampling_from_logits(rt, &s->tl, &s->ts, 42, off, NULL);
    case S_SOFTMAX:
      return fi_softmax(rt, &s->tl, NULL, 1.0, &s->to, NULL);
    case S_KRENORM:
      return fi_top_k_renorm_probs(rt, &s->tp, NULL, 50, &s->to, NULL);
    case S_PRENORM:
      return fi_top_p_renorm_probs(rt, &s->tp, NULL, 0.9, &s->to, NULL);
    default:
      return fi_top_k_mask_logits(rt, &s->tl, NULL, 50, &s->to, NULL);
  }
}

/* Call i takes set i % SETS and RNG offset i: a new draw on an input not in L2. */
typedef struct op_ctx {
  fi_runtime *rt;
  int op;
  bset *set;
} op_ctx;
static void op_run(void *c, int i) {
  op_ctx *x = c;
  call(x->rt, x->op, &x->set[i % SETS], (uint64_t)i);
}

/* Chain speculative sampling at batch 64, 4 draft tokens, over rows of the Zipf probabilities
 * (draft and target the same rows shifted by one: the draws reject often). Bytes: the two
 * rows of the final draw read twice (its total, then the scan to the crossing: a bound). */
typedef struct spec_ctx {
  fi_runtime *rt;
  DLTensor d, ids, t, out;
} spec_ctx;
static void spec_run(void *c, int i) {
  spec_ctx *x = c;
  fi_chain_speculative_sampling(x->rt, &x->d, &x->ids, &x->t, &x->out, NULL, NULL, 42, (uint64_t)i, NULL);
}
static void spec_bench(CUdeviceptr probs, int64_t batch, int64_t vocab, double copy) {
  enum { S = 4 };
  const size_t row = (size_t)vocab * 4;
  CUdeviceptr d, t, ids, out;
  CU_CHECK(&cu, cuMemAlloc(&d, row * (size_t)(batch * S)));
  CU_CHECK(&cu, cuMemAlloc(&t, row * (size_t)(batch * (S + 1))));
  CU_CHECK(&cu, cuMemAlloc(&ids, (size_t)(batch * S) * 4));
  CU_CHECK(&cu, cuMemAlloc(&out, (size_t)(batch * (S + 1)) * 4));
  for (int64_t r = 0; r < batch * S; r++)
    CU_CHECK(&cu, cuMemcpyDtoDAsync(d + row * (size_t)r, probs + row * (size_t)(r % batch), row, NULL));
  for (int64_t r = 0; r < batch * (S + 1); r++)
    CU_CHECK(&cu, cuMemcpyDtoDAsync(t + row * (size_t)r, probs + row * (size_t)((r + 1) % batch), row, NULL));
  int32_t *hid = malloc((size_t)(batch * S) * 4);
  for (int64_t i = 0; i < batch * S; i++) hid[i] = (int32_t)(((uint32_t)i * 2654435761u) % (uint32_t)vocab);
  CU_CHECK(&cu, cuMemcpyHtoD(ids, hid, (size_t)(batch * S) * 4));
  free(hid);
  int64_t sd[3] = {batch, S, vocab}, si[2] = {batch, S}, st[3] = {batch, S + 1, vocab}, so[2] = {batch, S + 1};
  fi_runtime *rt = bench_env_runtime();
  spec_ctx x = {rt, tensor(d, 2, 3, sd), tensor(ids, 2, 2, si), tensor(t, 2, 3, st), tensor(out, 2, 2, so)};
  x.ids.dtype = x.out.dtype = (DLDataType){kDLInt, 32, 1};
  fi_status stt = fi_chain_speculative_sampling(rt, &x.d, &x.ids, &x.t, &x.out, NULL, NULL, 42, 0, NULL);
  if (stt != FI_OK) {
    fprintf(stderr, "chain_speculative_sampling: %s\n", fi_last_error());
  } else {
    CU_CHECK(&cu, cuCtxSynchronize());
    const double us = time_runs(spec_run, &x, 30, quick ? 3 : 11) * 1e3;
    const double tbs = 4.0 * (double)row * (double)batch / (us * 1e-6) / 1e12;
    printf("\nchain_speculative_sampling, batch %lld, %d draft tokens, vocab %lld: %.1f us (%.0f GB/s of the final "
           "draw's two rows read twice, %.1f%% of copy)\n",
           (long long)batch, S, (long long)vocab, us, tbs * 1e3, 100.0 * tbs / copy);
    if (json)
      fprintf(json, "{\"bench\":\"chain_speculative_sampling\",\"batch\":%lld,\"draft\":%d,\"vocab\":%lld,"
              "\"us\":%.3f}\n", (long long)batch, S, (long long)vocab, us);
  }
  CU_CHECK(&cu, cuCtxSynchronize());
  fi_runtime_destroy(rt);
  CUdeviceptr all[4] = {d, t, ids, out};
  for (int i = 0; i < 4; i++) CU_CHECK(&cu, cuMemFree(all[i]));
}

static void run_sampling(fi_runtime *rt, double copy) {
  (void)rt; /* each pass below makes its own: FI_SAMPLING_SELECT is read at create */
  const int64_t batch = 64, vocab = 128256;
  const size_t bytes = (size_t)(batch * vocab) * 4;
  /* Zipf: p_i ~ 1 / rank^1.0 over a shuffled vocabulary, a different shuffle per row. */
  float *hp = malloc(bytes), *hl = malloc(bytes);
  uint64_t lcg = 88172645463325252ull;
  double h = 0;
  for (int64_t i = 0; i < vocab; i++) h += 1.0 / (double)(i + 1);
  for (int64_t b = 0; b < batch; b++) {
    float *r = hp + b * vocab;
    for (int64_t i = 0; i < vocab; i++) r[i] = (float)(1.0 / ((double)(i + 1) * h));
    for (int64_t i = vocab - 1; i > 0; i--) {
      lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
      const int64_t j = (int64_t)((lcg >> 33) % (uint64_t)(i + 1));
      const float t = r[i];
      r[i] = r[j];
      r[j] = t;
    }
    for (int64_t i = 0; i < vocab; i++) hl[b * vocab + i] = logf(r[i]);
  }
  int64_t shape[2] = {batch, vocab}, sshape[1] = {batch};
  bset set[SETS];
  for (int s = 0; s < SETS; s++) {
    CU_CHECK(&cu, cuMemAlloc(&set[s].probs, bytes));
    CU_CHECK(&cu, cuMemAlloc(&set[s].logits, bytes));
    CU_CHECK(&cu, cuMemAlloc(&set[s].out, bytes));
    CU_CHECK(&cu, cuMemAlloc(&set[s].samples, (size_t)batch * 4));
    CU_CHECK(&cu, cuMemcpyHtoD(set[s].probs, hp, bytes));
    CU_CHECK(&cu, cuMemcpyHtoD(set[s].logits, hl, bytes));
    set[s].tp = tensor(set[s].probs, 2, 2, shape);
    set[s].tl = tensor(set[s].logits, 2, 2, shape);
    set[s].to = tensor(set[s].out, 2, 2, shape);
    set[s].ts = tensor(set[s].samples, 2, 1, sshape);
    set[s].ts.dtype.code = kDLInt;
  }
  printf(
      "\nsampling: batch %lld x vocab %lld float32, Zipf (1/rank) rows; reading the input once "
      "is %.1f MB = %.2f us at the copy rate\n",
      (long long)batch, (long long)vocab, (double)bytes / 1e6, (double)bytes / (copy * 1e12) * 1e6);
  printf(
      "\n| op | us | GB/s read+written | of copy | FlashInfer us | speed-up |\n"
      "|---|---|---|---|---|---|\n");
  /* Every op with the radix threshold search (FI_SAMPLING_SELECT=radix), then the
   * top-k / top-p ops again with the key-range search (=range). Without the variable the
   * top-k ops use the range search and top-p alone the radix one (rt_sampling.c). */
  for (int pass = 0; pass < 2; pass++) {
    setenv("FI_SAMPLING_SELECT", pass ? "range" : "radix", 1);
    fi_runtime *prt = bench_env_runtime(); /* FI_SAMPLING_SELECT is read at create */
    for (int op = 0; op < S_N; op++) {
      const int has_select = op == S_TOPK || op == S_TOPP || op == S_KPL || op == S_KPP || op == S_SLOG ||
                             op == S_KRENORM || op == S_PRENORM || op == S_KMASK;
      if (pass && !has_select) continue;
      fi_status st = call(prt, op, &set[0], 0);
      if (st != FI_OK) {
        fprintf(stderr, "%s: %s\n", s_names[op], fi_last_error());
        continue;
      }
      CU_CHECK(&cu, cuCtxSynchronize());
      op_ctx oc = {prt, op, set};
      const double us = time_runs(op_run, &oc, 30, quick ? 3 : 11) * 1e3;
      const double moved = (double)bytes * (op >= S_SOFTMAX ? 2.0 : 1.0);
      const double tbs = moved / (us * 1e-6) / 1e12;
      char fi[32] = "", sp[32] = "";
      if (flashinfer_us[op] > 0) {
        snprintf(fi, sizeof fi, "%.0f", flashinfer_us[op]);
        snprintf(sp, sizeof sp, "%.2fx", flashinfer_us[op] / us);
      }
      printf("| %s%s | %.1f | %.0f | %.1f%% | %s | %s |\n", s_names[op],
             has_select ? (pass ? ", range search" : ", radix search") : "", us, tbs * 1e3, 100.0 * tbs / copy, fi, sp);
      if (json)
        fprintf(json,
                "{\"bench\":\"sampling\",\"op\":\"%s\",\"select\":\"%s\",\"batch\":%lld,"
                "\"vocab\":%lld,\"us\":%.3f,\"tbs\":%.4f,\"of_copy\":%.4f,"
                "\"flashinfer_us\":%.1f}\n",
                s_keys[op], pass ? "range" : "radix", (long long)batch, (long long)vocab, us, tbs,
                tbs / copy, flashinfer_us[op]);
    }
    CU_CHECK(&cu, cuCtxSynchronize());
    fi_runtime_destroy(prt);
  }
  unsetenv("FI_SAMPLING_SELECT");
  spec_bench(set[0].probs, batch, vocab, copy);
  for (int s = 0; s < SETS; s++) {
    CU_CHECK(&cu, cuMemFree(set[s].probs));
    CU_CHECK(&cu, cuMemFree(set[s].logits));
    CU_CHECK(&cu, cuMemFree(set[s].out));
    CU_CHECK(&cu, cuMemFree(set[s].samples));
  }
  free(hp);
  free(hl);
}

const bench_section bench_sampling_section = {
    "sampling",
    "the samplers (plain, top-k 50, top-p 0.9, min-p 0.05, top-k + top-p from logits),\n"
    "softmax, renorm and mask at batch 64 x vocab 128256 float32, Zipf-shaped rows,\n"
    "against FlashInfer's figures on the H200; chain speculative sampling (4 drafts)",
    1, run_sampling};
