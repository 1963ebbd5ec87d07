/* fi_cache_tactics.c: fi-cache's commands on stored tactics (the autotuner's results):
 * ls --tactics, show of a tactic, clear --tactics, and the per-layer count for stats. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fi_cache.h"

/* A copy of one listed tactic (the listing's strings live during its callback only). */
typedef struct tac {
  char hash[33];
  const char *layer; /* static strings */
  char *text[11];    /* op shape arch device driver compiler runtime params runner_up invalid problem */
  int64_t bucket, sms, measured, updated, samples;
  int valid, bad;
  double time_us, default_us, runner_up_us;
} tac;
enum { T_OP, T_SHAPE, T_ARCH, T_DEVICE, T_DRIVER, T_COMPILER, T_RUNTIME, T_PARAMS, T_RUNNER, T_INVALID, T_PROBLEM, T_N };

typedef struct tacs {
  tac *v;
  size_t n, cap;
  int oom;
} tacs;

static int collect_cb(const fi_tactic *t, void *user) {
  tacs *l = user;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 32;
    tac *v = realloc(l->v, cap * sizeof *v);
    if (!v) return l->oom = 1;
    l->v = v;
    l->cap = cap;
  }
  tac *d = &l->v[l->n++];
  memset(d, 0, sizeof *d);
  memcpy(d->hash, t->hash, sizeof d->hash);
  d->hash[32] = 0;
  d->layer = t->layer && strcmp(t->layer, "system") == 0 ? "system" : "user";
  const char *src[T_N] = {t->op, t->shape, t->dev.arch, t->dev.name, t->dev.driver, t->dev.compiler,
                          t->runtime, t->params, t->runner_up, t->invalid, t->problem};
  for (int i = 0; i < T_N; i++)
    if (!(d->text[i] = strdup(src[i] ? src[i] : ""))) l->oom = 1;
  d->bucket = t->bucket;
  d->sms = t->dev.sms;
  d->measured = t->measured;
  d->updated = t->updated;
  d->samples = t->samples;
  d->valid = t->valid;
  d->bad = t->problem != NULL;
  d->time_us = t->time_us;
  d->default_us = t->default_us;
  d->runner_up_us = t->runner_up_us;
  return l->oom;
}

static void tacs_free(tacs *l) {
  for (size_t i = 0; i < l->n; i++)
    for (int k = 0; k < T_N; k++) free(l->v[i].text[k]);
  free(l->v);
}

/* Every (op, arch) filter combination, as collect() does for kernels. */
static int collect_tactics(fi_runtime *rt, const args *a, tacs *l) {
  memset(l, 0, sizeof *l);
  for (int i = 0; i < (a->nop ? a->nop : 1); i++)
    for (int j = 0; j < (a->narch ? a->narch : 1); j++) {
      fi_status st = fi_admin_tactic_list(rt, a->nop ? a->ops[i] : NULL,
                                          a->narch ? a->archs[j] : NULL, collect_cb, l);
      if (l->oom) {
        fprintf(stderr, "%s: out of memory listing the tactics\n", prog);
        return 1;
      }
      if (st != FI_OK) return fail("listing the tactics", st);
    }
  return 0;
}

int count_tactics(fi_runtime *rt, int64_t n[2]) {
  args all;
  memset(&all, 0, sizeof all);
  tacs l;
  int rc = collect_tactics(rt, &all, &l);
  for (size_t i = 0; !rc && i < l.n; i++) n[strcmp(l.v[i].layer, "system") == 0]++;
  tacs_free(&l);
  return rc;
}

static const char *state_of(const tac *t) { return t->bad ? "BAD" : t->valid ? "ok" : "invalid"; }

static void json_tactic(const tac *t) {
  static const char *const names[T_N] = {"op", "shape", "arch", "device", "driver", "compiler",
                                         "runtime", "params", "runner_up", "invalid", "problem"};
  fputs("{\"hash\":", stdout), json_str(stdout, t->hash);
  fputs(",\"layer\":", stdout), json_str(stdout, t->layer);
  fputs(",\"state\":", stdout), json_str(stdout, state_of(t));
  for (int k = 0; k < T_N; k++) {
    if (k == T_PROBLEM && !t->bad) continue;
    printf(",\"%s\":", names[k]), json_str(stdout, t->text[k]);
  }
  printf(",\"bucket\":%" PRId64 ",\"sms\":%" PRId64 ",\"valid\":%s,\"time_us\":%.3f"
         ",\"default_us\":%.3f,\"runner_up_us\":%.3f,\"measured\":%" PRId64 ",\"updated\":%" PRId64
         ",\"samples\":%" PRId64 "}",
         t->bucket, t->sms, t->valid ? "true" : "false", json_num(t->time_us),
         json_num(t->default_us), json_num(t->runner_up_us), t->measured, t->updated, t->samples);
}

int cmd_ls_tactics(fi_runtime *rt, const args *a) {
  tacs l;
  int rc = collect_tactics(rt, a, &l);
  if (rc) {
    tacs_free(&l);
    return rc;
  }
  if (a->json) {
    fputc('[', stdout);
    for (size_t i = 0; i < l.n; i++) {
      fputs(i ? ",\n " : "", stdout);
      json_tactic(&l.v[i]);
    }
    fputs("]\n", stdout);
  } else {
    int w[3] = {2, 4, 6}; /* op, arch, params */
    for (size_t i = 0; i < l.n; i++) {
      const int k[3] = {T_OP, T_ARCH, T_PARAMS};
      for (int j = 0; j < 3; j++) {
        int n = (int)strlen(TEXT_SAFE(l.v[i].text[k[j]]));
        if (n > w[j]) w[j] = n;
      }
    }
    printf("%-12s  %-6s  %-*s  %8s  %-*s  %-*s  %9s  %10s  %7s  %-7s  %s\n", "hash", "layer", w[0],
           "op", "bucket", w[1], "arch", w[2], "params", "time_us", "default_us", "samples",
           "state", "device, SMs, driver | shape");
    for (size_t i = 0; i < l.n; i++) {
      const tac *t = &l.v[i];
      char dev[512];
      snprintf(dev, sizeof dev, "%s", TEXT_SAFE(t->text[T_DEVICE]));
      printf("%.12s  %-6s  %-*s  %8" PRId64 "  %-*s  %-*s  %9.2f  %10.2f  %7" PRId64 "  %-7s  %s, %" PRId64
             ", %s | %s\n",
             t->hash, t->layer, w[0], TEXT_SAFE(t->text[T_OP]), t->bucket, w[1],
             TEXT_SAFE(t->text[T_ARCH]), w[2], t->text[T_PARAMS][0] ? TEXT_SAFE(t->text[T_PARAMS]) : "-",
             json_num(t->time_us), json_num(t->default_us), t->samples, state_of(t), dev, t->sms,
             TEXT_SAFE(t->text[T_DRIVER]), TEXT_SAFE(t->text[T_SHAPE]));
    }
  }
  tacs_free(&l);
  return 0;
}

static int show_cb(const fi_tactic *t, void *user) {
  tacs *l = user;
  return collect_cb(t, l);
}

int show_tactic(fi_runtime *rt, const char *prefix, int *not_found) {
  tacs l;
  memset(&l, 0, sizeof l);
  fi_status st = fi_admin_tactic_get(rt, prefix, show_cb, &l);
  if (not_found) *not_found = st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "no tactic starts with");
  if (not_found && *not_found) {
    tacs_free(&l);
    return 1;
  }
  if (st != FI_OK || l.oom || l.n != 1) {
    tacs_free(&l);
    return st != FI_OK ? fail("show", st) : (fprintf(stderr, "%s: out of memory\n", prog), 1);
  }
  const tac *t = &l.v[0];
  char measured[32], updated[32];
  local_time(t->measured, measured, sizeof measured);
  local_time(t->updated, updated, sizeof updated);
  printf("tactic: %.32s\nlayer: %s\nstate: %s\n", t->hash, t->layer, state_of(t));
  if (t->bad) printf("problem: %s (this row is never used; fi-cache verify --repair drops it)\n", TEXT_SAFE(t->text[T_PROBLEM]));
  printf("op: %s\nshape: %s\nbucket: %" PRId64 "\narch: %s\n", TEXT_SAFE(t->text[T_OP]),
         TEXT_SAFE(t->text[T_SHAPE]), t->bucket, TEXT_SAFE(t->text[T_ARCH]));
  printf("device: %s\nsms: %" PRId64 "\ndriver: %s\n", TEXT_SAFE(t->text[T_DEVICE]), t->sms,
         TEXT_SAFE(t->text[T_DRIVER]));
  printf("compiler: %s\nruntime: %s\n", TEXT_SAFE(t->text[T_COMPILER]), TEXT_SAFE(t->text[T_RUNTIME]));
  printf("params: %s\ntime_us: %.3f\ndefault_us: %.3f\n", TEXT_SAFE(t->text[T_PARAMS]),
         json_num(t->time_us), json_num(t->default_us));
  printf("runner_up: %s\nrunner_up_us: %.3f\ninvalid: %s\n", TEXT_SAFE(t->text[T_RUNNER]),
         json_num(t->runner_up_us), TEXT_SAFE(t->text[T_INVALID]));
  printf("measured: %" PRId64 " (%s)\nupdated: %" PRId64 " (%s)\nsamples: %" PRId64 "\n",
         t->measured, measured, t->updated, updated, t->samples);
  tacs_free(&l);
  return 0;
}

int cmd_clear_tactics(fi_runtime *rt, const args *a) {
  int64_t total = 0;
  for (int i = 0; i < (a->nop ? a->nop : 1); i++)
    for (int j = 0; j < (a->narch ? a->narch : 1); j++) {
      int64_t n = 0;
      fi_status st = fi_admin_tactic_clear(rt, a->nop ? a->ops[i] : NULL,
                                           a->narch ? a->archs[j] : NULL, &n);
      total += n;
      if (st != FI_OK) {
        printf("removed %" PRId64 " tactics\n", total);
        return fail("clear", st);
      }
    }
  printf("removed %" PRId64 " tactics\n", total);
  return 0;
}
