/* bench_tactics.c: fi-bench's tactics section (issue 43's table): the autotuner on each
 * tuned op's benchmark shapes in one run, every tactic's median time against the rule's,
 * the winner and whether it differs from the rule. Shapes: the qwen3-30b-a3b preset's two
 * expert GEMMs at 64 and 4096 tokens; the llama3-8b preset's CUDA-graph decode at 64
 * requests and causal prefill at 512 and 8192 tokens; batch decode B=64 at 4096 KV tokens
 * (32/8, D=128); top-k sampling (float32, vocab 128256) at 1 and 64 rows, top-k + top-p from
 * logits at 64. Each is measured again (force) into the section's cache. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static void line(const char *text, void *user) {
  (void)user;
  if (strncmp(text, "  ", 2) == 0) printf("      %s\n", text + 2); /* a tactic's time */
}

static void one(fi_runtime *rt, const char *op, const char *shape, int64_t tokens) {
  fi_autotune_options o;
  fi_autotune_options_init(&o);
  o.op = op, o.shape = shape, o.tokens = tokens, o.force = 1;
  o.repeats = quick ? 7 : 20;
  o.progress = line;
  printf("  %s %s, %lld tokens:\n", op, shape, (long long)tokens);
  fflush(stdout);
  fi_autotune_result r;
  const double t0 = now_us();
  if (fi_autotune(rt, &o, &r) != FI_OK) {
    printf("    failed: %s\n", fi_last_error());
    return;
  }
  const double s = (now_us() - t0) * 1e-6;
  printf("    bucket %lld: %d tactics, %d valid (%d bit for bit the rule's), %d invalid; winner %s %.2f us, rule %s "
         "%.2f us: %.3fx%s (%.1f s)\n",
         (long long)r.bucket, r.tactics, r.valid, r.bitwise, r.invalid, r.winner, r.winner_us, r.rule, r.rule_us,
         r.winner_us > 0 ? r.rule_us / r.winner_us : 0, strcmp(r.winner, r.rule) ? ", not the rule's" : "", s);
  if (json)
    fprintf(json,
            "{\"bench\":\"tactics\",\"op\":\"%s\",\"shape\":\"%s\",\"bucket\":%lld,\"tactics\":%d,\"valid\":%d,"
            "\"invalid\":%d,\"winner\":\"%s\",\"winner_us\":%.3f,\"rule\":\"%s\",\"rule_us\":%.3f,\"runner_up\":\"%s\","
            "\"runner_up_us\":%.3f,\"seconds\":%.1f}\n",
            op, r.shape, (long long)r.bucket, r.tactics, r.valid, r.invalid, r.winner, r.winner_us, r.rule, r.rule_us,
            r.runner_up, r.runner_up_us, s);
}

/* Every job of preset at tokens (fi_admin_preset_tune_job) whose op is op. */
static void preset(fi_runtime *rt, const char *name, const char *op, int64_t tokens) {
  const char *jop;
  char shape[256];
  int rc;
  for (int j = 0; (rc = fi_admin_preset_tune_job(name, j, tokens, &jop, shape, sizeof shape)) >= 0; j++)
    if (rc == 0 && strcmp(jop, op) == 0) one(rt, op, shape, tokens);
}

static void bench_tactics(fi_runtime *rt, double copy_tbs) {
  (void)copy_tbs;
  printf("tactics (fi_autotune: each tactic's median with the L2 flushed, against the rule's)\n");
  preset(rt, "qwen3-30b-a3b", "moe_gemm", 64);
  preset(rt, "qwen3-30b-a3b", "moe_gemm", 4096);
  preset(rt, "llama3-8b", "batch_decode", 64);
  one(rt, "batch_decode", "q=bf16;kv=bf16;heads=32/8;head_dim=128;page=16;rope=0;len=4096", 64);
  preset(rt, "llama3-8b", "batch_prefill", 512);
  preset(rt, "llama3-8b", "batch_prefill", 8192);
  one(rt, "sampling", "op=top_k;dtype=f32;vocab=128256", 1);
  one(rt, "sampling", "op=top_k;dtype=f32;vocab=128256", 64);
  one(rt, "sampling", "op=top_k_top_p_logits;dtype=f32;vocab=128256", 64);
}

const bench_section bench_tactics_section = {
    "tactics",
    "the autotuner on each tuned op's benchmark shapes: every tactic against the rule\n"
    "(MoE GEMMs, decode, prefill, sampling); stores into the run's cache",
    0, bench_tactics};
