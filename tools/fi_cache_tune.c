/* fi_cache_tune.c: fi-cache tune, the command line of the autotuner (fi_autotune): a
 * model preset's tuned ops, or one op and shape, at a list of token counts; a line per
 * shape and bucket on stdout (or one JSON object), a line per tactic on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fi_cache.h"

static void progress(const char *line, void *user) {
  (void)user;
  fprintf(stderr, "%s\n", line);
}

/* One fi_autotune call and its summary line. 0, or 1 when it failed. */
static int tune_one(fi_runtime *rt, const args *a, const char *op, const char *shape, int64_t tokens) {
  fi_autotune_options o;
  fi_autotune_options_init(&o);
  o.op = op, o.shape = shape, o.tokens = tokens, o.device = a->device, o.force = a->force;
  if (a->repeats) o.repeats = a->repeats;
  o.progress = progress;
  fi_autotune_result r;
  const double t0 = now_s();
  fi_status st = fi_autotune(rt, &o, &r);
  const double secs = now_s() - t0;
  if (st != FI_OK) {
    fprintf(stderr, "%s: tune %s %s at %lld tokens: %s: %s\n", prog, op, shape, (long long)tokens,
            fi_status_string(st), fi_last_error());
    if (a->json) {
      printf("{\"op\":");
      json_str(stdout, op);
      printf(",\"shape\":");
      json_str(stdout, shape);
      printf(",\"tokens\":%lld,\"error\":", (long long)tokens);
      json_str(stdout, fi_last_error());
      printf("}\n");
    }
    return 1;
  }
  if (a->json) {
    printf("{\"op\":");
    json_str(stdout, op);
    printf(",\"shape\":");
    json_str(stdout, r.shape);
    printf(",\"bucket\":%lld,\"measured\":%d,\"tactics\":%d,\"valid\":%d,\"invalid\":%d,\"bitwise\":%d,\"winner\":",
           (long long)r.bucket, r.measured, r.tactics, r.valid, r.invalid, r.bitwise);
    json_str(stdout, r.winner);
    printf(",\"winner_us\":%.3f,\"rule\":", r.winner_us);
    json_str(stdout, r.rule);
    printf(",\"rule_us\":%.3f,\"runner_up\":", r.rule_us);
    json_str(stdout, r.runner_up);
    printf(",\"runner_up_us\":%.3f,\"seconds\":%.2f}\n", r.runner_up_us, secs);
  } else if (!r.measured) {
    printf("%-8s %-78s %6lld  stored: %s %.2f us\n", op, r.shape, (long long)r.bucket, r.winner, r.winner_us);
  } else {
    printf("%-8s %-78s %6lld  %s %.2f us, rule %s %.2f us: %.2fx; %d/%d valid (%.1f s)\n", op, r.shape,
           (long long)r.bucket, r.winner, r.winner_us, r.rule, r.rule_us, r.winner_us > 0 ? r.rule_us / r.winner_us : 0,
           r.valid, r.tactics, secs);
  }
  fflush(stdout);
  return 0;
}

int tune_usage(const args *a) {
  if (!a->npreset && !a->nop) return usage_error("tune: say what to measure: --preset NAME or --op OP --shape SHAPE");
  if (a->nop && !a->nshape) return usage_error("tune: --op needs --shape (fi-cache tune --help names the keys)");
  if (a->nshape && !a->nop) return usage_error("tune: --shape needs --op");
  if (a->nop > 1) return usage_error("tune: one --op at a time (its --shape values are its shapes)");
  for (int p = 0; p < a->npreset; p++) {
    const char *op;
    char shape[256];
    if (strcmp(a->presets[p], "list") == 0) {
      for (int i = 0; i < fi_admin_preset_count(); i++)
        if (fi_admin_preset_tune_job(fi_admin_preset_name(i), 0, 1, &op, shape, sizeof shape) == 0)
          printf("%-16s %s\n", fi_admin_preset_name(i), fi_admin_preset_about(i));
      return 0;
    }
    int known = 0;
    for (int i = 0; i < fi_admin_preset_count(); i++) known |= strcmp(fi_admin_preset_name(i), a->presets[p]) == 0;
    if (!known) return usage_error("tune: no preset named '%s' (--preset list)", a->presets[p]);
    if (fi_admin_preset_tune_job(a->presets[p], 0, 1, &op, shape, sizeof shape) != 0)
      return usage_error("tune: preset '%s' has no tuned op (--preset list names those that do)", a->presets[p]);
  }
  return -1;
}

int cmd_tune(fi_runtime *rt, const args *a) {
  static const int64_t default_tokens[] = {1, 16, 64, 256, 1024, 4096, 16384};
  const int64_t *tokens = a->ntokens ? a->tokens : default_tokens;
  const int ntok = a->ntokens ? a->ntokens : (int)(sizeof default_tokens / sizeof *default_tokens);
  int failed = 0, done = 0;
  const double t0 = now_s();
  for (int p = 0; p < a->npreset; p++)
    for (int t = 0; t < ntok; t++) {
      const char *op;
      char shape[256];
      int rc;
      for (int j = 0; (rc = fi_admin_preset_tune_job(a->presets[p], j, tokens[t], &op, shape, sizeof shape)) >= 0;
           j++) {
        if (rc > 0) continue; /* nothing of this job at this token count */
        failed += tune_one(rt, a, op, shape, tokens[t]);
        done++;
      }
    }
  for (int s = 0; s < a->nshape; s++)
    for (int t = 0; t < ntok; t++) {
      failed += tune_one(rt, a, a->ops[0], a->shapes[s], tokens[t]);
      done++;
    }
  if (!a->json)
    fprintf(stderr, "%s: tune: %d measurements, %d failed, %.1f s\n", prog, done, failed, now_s() - t0);
  return failed ? 1 : 0;
}
