/* rt_autotune.c: fi_autotune (issue 43): an op's tactics run on the same inputs, checked
 * against the rule's output, timed with the last-level cache flushed, and the fastest valid
 * one stored in the cache's tactics table. This is the op-independent part (memory,
 * random inputs, validation, timing, storing); each op (rt_tune_op: rt_autotune_moe.c,
 * rt_autotune_decode.c, rt_autotune_prefill.c) brings its shape parser, inputs, tactic list and a run. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache_memo.h"
#include "jit_compiler.h"
#include "rt_autotune.h"
#include "rt_tune.h"

#define MAX_TACTICS RT_TUNE_MAX_TACTICS
typedef rt_tune_dev tune_dev;

#define dev_fail rt_tune_dev_fail
#define dalloc rt_tune_alloc
#define dfree rt_tune_free

/* ---- the harness ---- */

FI_API void fi_autotune_options_init(fi_autotune_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->repeats = 20;
  o->warmup = 3;
}

static void say(const fi_autotune_options *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const fi_autotune_options *o, const char *fmt, ...) {
  if (!o->progress) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  o->progress(line, o->user);
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* How tactic output `got` compares with the rule's `ref` (n 16-bit values, poisoned with
 * 0xffff before either ran): 0 valid, with *bitwise; -1 with why. */
static int compare(const uint16_t *ref, const uint16_t *got, size_t n, int bf16, int *bitwise, double *rel,
                   char *why, size_t whylen) {
  double scale = 0, worst = 0;
  *bitwise = memcmp(ref, got, n * 2) == 0;
  *rel = 0;
  if (*bitwise) return 0;
  for (size_t i = 0; i < n; i++)
    if (ref[i] != 0xffff) {
      const double r = fabs(rt_tune_value(ref[i], bf16));
      if (r > scale && isfinite(r)) scale = r;
    }
  for (size_t i = 0; i < n; i++) {
    if (ref[i] == got[i]) continue;
    if (ref[i] == 0xffff) {
      snprintf(why, whylen, "wrote element %zu, which the rule leaves unwritten (a padding row)", i);
      return -1;
    }
    const double r = rt_tune_value(ref[i], bf16), g = rt_tune_value(got[i], bf16);
    if (got[i] == 0xffff || !isfinite(g)) {
      snprintf(why, whylen, "element %zu is %s where the rule's is %g", i, got[i] == 0xffff ? "unwritten" : "not finite",
               r);
      return -1;
    }
    if (fabs(g - r) > worst) worst = fabs(g - r);
  }
  *rel = scale > 0 ? worst / scale : worst;
  const double tol = bf16 ? 1e-2 : 2e-3;
  if (*rel > tol) {
    snprintf(why, whylen, "differs from the rule's output by %.3g of its largest magnitude (tolerance %.0e)", *rel, tol);
    return -1;
  }
  return 0;
}

/* A tuning variable that sets what op's tactics choose: the rule would then be the
 * variable's choice and the tactics would not run as named, so a measurement would store
 * the variable's kernel as if it were the rule's. NULL where none is set. */
static const char *env_conflict(const rt_tuning *t, const char *op) {
  if (!strcmp(op, "moe_gemm")) return !t->moe_wgmma ? "FI_MOE_WGMMA" : NULL;
  if (!strcmp(op, "batch_decode"))
    return t->decode_warps ? "FI_DECODE_WARPS" : t->decode_pipeline >= 0 ? "FI_DECODE_PIPELINE"
                             : t->decode_split != 1.0               ? "FI_DECODE_SPLIT"
                                                                    : NULL;
  if (!strcmp(op, "batch_prefill"))
    return !t->prefill_wgmma ? "FI_PREFILL_WGMMA" : t->prefill_qtile ? "FI_PREFILL_QTILE"
                           : t->prefill_wg_q                         ? "FI_PREFILL_WG"
                           : t->prefill_ws >= 0                      ? "FI_PREFILL_WS"
                           : t->prefill_stages                       ? "FI_PREFILL_STAGES"
                           : t->prefill_split != 1.0                 ? "FI_PREFILL_SPLIT"
                           : t->prefill_persist != RT_PERSIST_DEFAULT ? "FI_PREFILL_PERSIST"
                                                                      : NULL;
  if (!strcmp(op, "sampling"))
    return t->sampling_select >= 0 ? "FI_SAMPLING_SELECT" : t->sampling_topp_exact ? "FI_SAMPLING_TOPP" : NULL;
  return NULL;
}

FI_API fi_status fi_autotune(fi_runtime *rt, const fi_autotune_options *o, fi_autotune_result *r) {
  const char *fn = "fi_autotune";
  if (!rt || !o || !r) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, !rt ? "rt" : !o ? "o" : "r");
  if (o->struct_size < offsetof(fi_autotune_options, user) + sizeof(void *) || o->struct_size > 4096)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: o->struct_size is %zu; fi_autotune_options_init sets it", fn,
                   o->struct_size);
  memset(r, 0, sizeof *r);
  static const rt_tune_op *const ops[] = {&rt_tune_moe_gemm, &rt_tune_batch_decode, &rt_tune_batch_prefill,
                                          &rt_tune_sampling};
  const rt_tune_op *op = NULL;
  for (size_t i = 0; o->op && i < sizeof ops / sizeof *ops; i++)
    if (strcmp(o->op, ops[i]->name) == 0) op = ops[i];
  if (!op)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: o->op is %s%s%s; the ops it measures: moe_gemm, batch_decode, batch_prefill, sampling", fn,
                   o->op ? "\"" : "", o->op ? o->op : "NULL", o->op ? "\"" : "");
  if (!o->shape) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: o->shape is NULL", fn);
  const char *var = env_conflict(&rt->env.tune, op->name);
  if (var)
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "%s: %s is set for this runtime: it sets what %s's tactics choose, so the rule measured "
                   "would be its choice; tune in a process without the FI_* tuning variables",
                   fn, var, op->name);
  if (o->tokens < 1 || o->tokens > (1 << 20))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: o->tokens is %lld; 1 to 1048576", fn, (long long)o->tokens);
  if (o->repeats < 0 || o->repeats > 10000 || o->warmup < 0 || o->warmup > 1000)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: o->repeats %d or o->warmup %d out of range (0 to 10000, 0 to 1000)",
                   fn, o->repeats, o->warmup);
  if (o->fault_tactic < 0 || o->fault_tactic == 1)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: o->fault_tactic is %d; 0, or 2 and up (the first tactic is the rule, "
                   "the reference the others are checked against)", fn, o->fault_tactic);
  if (o->device < 0 || o->device >= RT_MAX_DEVICES)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: o->device is %d", fn, o->device);
  const int repeats = o->repeats ? o->repeats : 20, warmup = o->warmup ? o->warmup : 3;
  void *c = calloc(1, op->case_size);
  if (!c) return rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  fi_status st = op->parse(o->shape, c, r->shape, sizeof r->shape);
  if (st != FI_OK) {
    free(c);
    return st;
  }
  const int64_t T = fi_tune_bucket(o->tokens);
  r->bucket = T;

  /* The device, its measuring members and identity; the compiler loaded, so that the
   * row names it. */
  tune_dev d;
  memset(&d, 0, sizeof d);
  d.rt = rt, d.dev = o->device;
  rt_tactic_id id;
  const jit_compiler *cc;
  if ((st = rt_backend(rt, kDLCUDA, &d.be, &d.state)) != FI_OK) {
    free(c);
    return st;
  }
  if (!d.be->tune) {
    free(c);
    return rt_fail(FI_ERR_NO_DEVICE, "%s: the %s backend cannot measure", fn, d.be->name);
  }
  d.t = d.be->tune;
  if (rt_tactic_identity(rt, kDLCUDA, o->device, &id) != 0) {
    free(c);
    return rt_fail(FI_ERR_DEVICE, "%s: device %d's name, driver or arch cannot be read", fn, o->device);
  }
  cc = jit_compiler_for_arch(id.arch);
  if (!cc || cc->load(rt_compiler_library(rt, cc), d.err, sizeof d.err) != 0) {
    free(c);
    return rt_fail(FI_ERR_COMPILE, "%s: no compiler for %s: %s", fn, id.arch, cc ? d.err : "none registered");
  }
  snprintf(id.compiler, sizeof id.compiler, "%s", cc->identity());
  const fi_tactic_device tdev = {id.arch, id.name, id.sms, id.driver, id.compiler};

  if (!o->force) {
    cache_tactic have;
    const char *layer = NULL;
    if (rt_tactic_lookup(rt, o->op, r->shape, T, &tdev, &have, &layer) && strcmp(layer, "user") == 0) {
      snprintf(r->winner, sizeof r->winner, "%s", have.params);
      r->winner_us = have.time_us, r->rule_us = have.default_us;
      snprintf(r->runner_up, sizeof r->runner_up, "%s", have.runner_up);
      r->runner_up_us = have.runner_up_us;
      say(o, "%s %s bucket %lld: stored already (%s, %.2f us); force measures again", o->op, r->shape,
          (long long)T, have.params, have.time_us);
      free(c);
      return FI_OK;
    }
  }

  if (rt_device_caps_get(d.be, d.state, o->device, &d.caps, d.err, sizeof d.err) != 0) {
    free(c);
    return dev_fail(&d, "caps");
  }
  char names[MAX_TACTICS][RT_TUNE_NAME];
  int nt = 0;
  void *out[MAX_TACTICS] = {0}, *flush = NULL, *ev[2] = {NULL, NULL};
  uint16_t *ref = NULL, *got = NULL;
  double *times = NULL, med[MAX_TACTICS];
  int valid[MAX_TACTICS] = {0};
  char whys[MAX_TACTICS][160];
  size_t out_n = 0, out_bytes = 0, l2 = 0, flush_bytes;
  if ((st = op->setup(&d, c, T)) != FI_OK) goto done;
  if ((nt = op->tactics(&d, c, names, MAX_TACTICS)) < 1) {
    st = nt < 0 ? FI_ERR_DEVICE : rt_fail(FI_ERR_INTERNAL, "%s: no tactic can run this shape", fn);
    nt = 0;
    goto done;
  }
  r->tactics = nt;
  snprintf(r->rule, sizeof r->rule, "%s", names[0]);
  say(o, "%s %s: %lld tokens (bucket), %d tactics on %s (%s, %lld SMs), %d runs each after %d", o->op, r->shape,
      (long long)T, nt, id.name, id.arch, (long long)id.sms, repeats, warmup);
  out_bytes = op->out_bytes(c), out_n = out_bytes / 2;
  if (d.t->cache_bytes(d.state, d.dev, &l2, d.err, sizeof d.err) != 0) l2 = 0;
  flush_bytes = l2 ? 2 * l2 : ((size_t)128 << 20);
  ref = malloc(out_bytes ? out_bytes : 2), got = malloc(out_bytes ? out_bytes : 2);
  times = calloc((size_t)nt * (size_t)repeats, sizeof *times);
  if (!ref || !got || !times) {
    st = rt_fail(FI_ERR_OUT_OF_MEMORY, "%s: out of host memory (%zu bytes of outputs)", fn, 2 * out_bytes);
    goto done;
  }
  if ((st = dalloc(&d, flush_bytes, &flush, "the cache flush buffer")) != FI_OK) goto done;
  if (d.t->event_new(d.state, d.dev, &ev[0], d.err, sizeof d.err) != 0 ||
      d.t->event_new(d.state, d.dev, &ev[1], d.err, sizeof d.err) != 0) {
    st = dev_fail(&d, "events");
    goto done;
  }

  /* Validation: each tactic into its own buffer, poisoned first; the rule's output is the
   * reference. */
  for (int i = 0; i < nt; i++) {
    if ((st = dalloc(&d, out_bytes, &out[i], "a tactic's output")) != FI_OK) goto done;
    if (d.t->fill32(d.state, d.dev, out[i], 0xffffffffu, out_bytes / 4, NULL, d.err, sizeof d.err) != 0) {
      st = dev_fail(&d, "poisoning an output");
      goto done;
    }
    if ((st = op->run(&d, c, i, out[i])) != FI_OK) {
      /* A tactic that cannot launch here is invalid for this shape, not the tuner's end. */
      snprintf(whys[i], sizeof whys[i], "did not run: %s", fi_last_error());
      valid[i] = 0;
      if (i == 0) goto done;
      continue;
    }
    if (o->fault_tactic == i + 1 &&
        d.t->fill32(d.state, d.dev, out[i], 0x3f803f80u, (out_bytes / 4 + 1) / 2, NULL, d.err, sizeof d.err) != 0) {
      st = dev_fail(&d, "the test's fault");
      goto done;
    }
    if (d.t->copy(d.state, d.dev, i ? got : ref, out[i], out_bytes, RT_COPY_D2H, d.err, sizeof d.err) != 0) {
      st = dev_fail(&d, "copying an output back");
      goto done;
    }
    int bitwise = 1;
    double rel = 0;
    if (i > 0 && op->exact) {
      bitwise = memcmp(ref, got, out_bytes) == 0, rel = 0;
      if (!bitwise) snprintf(whys[i], sizeof whys[i], "its output is not the rule's bit for bit (token ids)");
    }
    valid[i] = i == 0 || (op->exact ? bitwise : compare(ref, got, out_n, op->bf16(c), &bitwise, &rel, whys[i],
                                                           sizeof whys[i]) == 0);
    if (valid[i]) {
      r->valid++;
      r->bitwise += bitwise;
    } else {
      r->invalid++;
    }
    if (i && !valid[i]) say(o, "  %-40s INVALID: %s", names[i], whys[i]);
  }

  /* Timing: warm-up, then rounds in which every valid tactic runs once, the cache flushed
   * before each run, the start rotating from round to round. */
  for (int w = 0; w < warmup; w++)
    for (int i = 0; i < nt; i++)
      if (valid[i] && (st = op->run(&d, c, i, out[i])) != FI_OK) goto done;
  for (int rep = 0; rep < repeats; rep++)
    for (int j = 0; j < nt; j++) {
      const int i = (j + rep) % nt;
      float ms = 0;
      if (!valid[i]) continue;
      if (d.t->fill32(d.state, d.dev, flush, (unsigned)rep, flush_bytes / 4, NULL, d.err, sizeof d.err) != 0 ||
          d.t->event_record(d.state, d.dev, ev[0], NULL, d.err, sizeof d.err) != 0) {
        st = dev_fail(&d, "timing");
        goto done;
      }
      if ((st = op->run(&d, c, i, out[i])) != FI_OK) goto done;
      if (d.t->event_record(d.state, d.dev, ev[1], NULL, d.err, sizeof d.err) != 0 ||
          d.t->event_ms(d.state, d.dev, ev[0], ev[1], &ms, d.err, sizeof d.err) != 0) {
        st = dev_fail(&d, "timing");
        goto done;
      }
      times[(size_t)i * (size_t)repeats + (size_t)rep] = (double)ms * 1e3;
    }
  int best = -1, second = -1;
  for (int i = 0; i < nt; i++) {
    if (!valid[i]) continue;
    qsort(times + (size_t)i * (size_t)repeats, (size_t)repeats, sizeof *times, cmp_double);
    med[i] = times[(size_t)i * (size_t)repeats + (size_t)repeats / 2];
    if (best < 0 || med[i] < med[best]) {
      second = best;
      best = i;
    } else if (second < 0 || med[i] < med[second]) {
      second = i;
    }
  }
  r->rule_us = med[0];
  for (int i = 0; i < nt; i++)
    if (valid[i])
      say(o, "  %-40s %10.2f us  %5.2fx the rule%s", names[i], med[i], med[0] / med[i], i == best ? "  <- chosen" : "");

  /* Store: the winner with its times, then every invalid tactic as invalid. */
  snprintf(r->winner, sizeof r->winner, "%s", names[best]);
  r->winner_us = med[best];
  if (second >= 0) {
    snprintf(r->runner_up, sizeof r->runner_up, "%s", names[second]);
    r->runner_up_us = med[second];
  }
  fi_tactic m;
  memset(&m, 0, sizeof m);
  m.op = o->op, m.shape = r->shape, m.bucket = T, m.dev = tdev;
  m.params = names[best], m.valid = 1, m.time_us = med[best], m.default_us = med[0];
  m.runner_up = r->runner_up, m.runner_up_us = r->runner_up_us;
  m.samples = repeats;
  if ((st = fi_admin_tactic_put(rt, &m)) != FI_OK) goto done;
  for (int i = 1; i < nt; i++)
    if (!valid[i]) {
      fi_tactic bad = m;
      bad.params = names[i], bad.valid = 0, bad.time_us = 0, bad.runner_up = "", bad.runner_up_us = 0;
      if ((st = fi_admin_tactic_put(rt, &bad)) != FI_OK) goto done;
    }
  r->measured = 1;
  rt_log(rt, RT_LOG_INFO, "%s %s bucket %lld: %s %.2f us (rule %s %.2f us), %d valid, %d invalid", o->op, r->shape,
         (long long)T, r->winner, r->winner_us, r->rule, r->rule_us, r->valid, r->invalid);

done:
  for (int i = 0; i < nt; i++) dfree(&d, out[i]);
  dfree(&d, flush);
  for (int i = 0; i < 2; i++)
    if (ev[i]) d.t->event_free(d.state, d.dev, ev[i]);
  op->release(&d, c);
  free(c);
  free(ref);
  free(got);
  free(times);
  return st;
}

/* ---- on-line tuning at plan time (FI_AUTOTUNE=1) ---- */

int rt_tactic_plan(fi_runtime *rt, const char *op, const int64_t *fields, int nfields, int64_t bucket, int devtype,
                   int device, void (*shape_fn)(const int64_t *fields, char *buf, size_t n), void *stream,
                   const char **params) {
  int first = 0;
  if (rt_tactic_cached(rt, op, fields, nfields, bucket, devtype, device, shape_fn, params, &first)) return 1;
  if (!rt->env.tune.autotune || bucket < 1 || nfields > 16) return 0;
  /* Measured once a process per key, whatever came of it (a key that cannot be measured
   * is not tried again at every plan); a key seen while a capture runs waits for a plan
   * outside it. */
  int64_t blob[20];
  blob[0] = (int64_t)XXH3_64bits(op, strlen(op)), blob[1] = bucket, blob[2] = devtype;
  memcpy(blob + 3, fields, sizeof(int64_t) * (size_t)nfields);
  const XXH128_hash_t h = XXH3_128bits(blob, sizeof(int64_t) * (size_t)(3 + nfields));
  if (cache_memo_get(rt->autotune_tried, h.low64, h.high64, device)) return 0;
  char shape[CACHE_TACTIC_TEXT], err[256];
  shape_fn(fields, shape, sizeof shape);
  const rt_device_i *be = NULL;
  void *state = NULL;
  const int have = rt_backend(rt, devtype, &be, &state) == FI_OK;
  if (!have || !be->tune || !be->tune->capturing) {
    if (first)
      rt_log(rt, RT_LOG_WARN, "FI_AUTOTUNE: %s %s bucket %lld not measured: %s", op, shape, (long long)bucket,
             have ? "this backend does not measure" : fi_last_error());
    return 0;
  }
  /* The plan's stream, and the legacy stream (which reports a global-mode capture on
   * another stream): measuring would break a capture. */
  int cap_plan = 1, cap_legacy = 1;
  if (be->tune->capturing(state, device, stream, &cap_plan, err, sizeof err) != 0 ||
      be->tune->capturing(state, device, NULL, &cap_legacy, err, sizeof err) != 0 || cap_plan || cap_legacy) {
    if (first)
      rt_log(rt, RT_LOG_WARN, "FI_AUTOTUNE: %s %s bucket %lld not measured now: a graph is being captured (or "
             "the driver cannot say); a plan outside the capture measures it", op, shape, (long long)bucket);
    return 0;
  }
  static char tried = 1;
  if (cache_memo_put(rt->autotune_tried, h.low64, h.high64, device, &tried) != &tried) return 0; /* another thread */
  fi_autotune_options o;
  fi_autotune_options_init(&o);
  o.op = op, o.shape = shape, o.tokens = bucket, o.device = device;
  fi_autotune_result r;
  rt_log(rt, RT_LOG_INFO, "FI_AUTOTUNE: measuring %s %s at %lld tokens (no stored tactic)", op, shape,
         (long long)bucket);
  if (fi_autotune(rt, &o, &r) != FI_OK) {
    rt_log(rt, RT_LOG_WARN, "FI_AUTOTUNE: %s %s bucket %lld not measured: %s; the rule chooses", op, shape,
           (long long)bucket, fi_last_error());
    return 0;
  }
  return rt_tactic_cached(rt, op, fields, nfields, bucket, devtype, device, shape_fn, params, NULL);
}
