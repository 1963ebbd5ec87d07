/* rt_env.c: the one place the library reads FI_* variables (besides the cache-path
 * resolver), at fi_runtime_create; strict parsers, and a warning naming the variable for
 * every value they refuse. */
#include "rt_env.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jit_compiler.h"

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Decimal digits into *v; -1 on none or on overflow of INT64_MAX. *end after them. */
static int digits(const char *s, int64_t *v, const char **end) {
  int64_t x = 0;
  const char *p = s;
  if (!is_digit(*p)) return -1;
  for (; is_digit(*p); p++) {
    const int d = *p - '0';
    if (x > (INT64_MAX - d) / 10) return -1;
    x = x * 10 + d;
  }
  *v = x;
  *end = p;
  return 0;
}

int rt_env_parse_size(const char *s, int64_t *out) {
  int64_t v;
  const char *p;
  if (!s || digits(s, &v, &p) != 0) return -1;
  int shift = 0;
  switch (*p) {
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    case 't': case 'T': shift = 40; p++; break;
    default: break;
  }
  if (shift && (*p == 'i' || *p == 'I')) p++;
  if (*p == 'b' || *p == 'B') p++;
  if (*p) return -1;
  if (shift && v > (INT64_MAX >> shift)) return -1;
  *out = v << shift;
  return 0;
}

int rt_env_parse_int(const char *s, int64_t min, int64_t max, int64_t *out) {
  if (!s) return -1;
  int neg = 0;
  if (*s == '-' || *s == '+') neg = *s++ == '-';
  int64_t v;
  const char *p;
  if (digits(s, &v, &p) != 0 || *p) return -1;
  if (neg) v = -v;
  if (v < min || v > max) return -1;
  *out = v;
  return 0;
}

int rt_env_parse_decimal(const char *s, double *out) {
  if (!s || !is_digit(*s)) return -1;
  const char *p = s;
  while (is_digit(*p)) p++;
  if (*p == '.') {
    p++;
    while (is_digit(*p)) p++;
  }
  if (*p) return -1;
  /* Only digits and one point: strtod reads it all, and the value is finite. */
  *out = strtod(s, NULL);
  return 0;
}

int rt_env_parse_level(const char *s, int *out) {
  static const char *const names[] = {"off", "error", "warn", "info", "debug"};
  int64_t v;
  if (rt_env_parse_int(s, 0, 4, &v) == 0) {
    *out = (int)v;
    return 0;
  }
  if (!s) return -1;
  for (int i = 0; i < 5; i++)
    if (strcasecmp(s, names[i]) == 0) {
      *out = i;
      return 0;
    }
  if (strcasecmp(s, "warning") == 0) {
    *out = 2;
    return 0;
  }
  return -1;
}

int rt_env_parse_mode(const char *s, const char *const *names, int *out) {
  if (!s) return -1;
  for (int i = 0; names[i]; i++)
    if (strcmp(s, names[i]) == 0) {
      *out = i;
      return 0;
    }
  return -1;
}

static void warn(rt_env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(rt_env *e, const char *fmt, ...) {
  if (e->nwarnings >= RT_ENV_MAX_WARNINGS) return;
  char *w = malloc(256);
  if (!w) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w, 256, fmt, ap);
  va_end(ap);
  e->warnings[e->nwarnings++] = w;
}

/* The variable's value, or NULL when unset or empty (empty counts as unset everywhere). */
static const char *var(const char *name) {
  const char *v = getenv(name);
  return v && v[0] ? v : NULL;
}

/* An integer variable clamped to [lo, hi] (a number beyond is taken as the bound, as
 * documented for the tuning knobs); anything that is not an integer is refused. */
static void int_clamped(rt_env *e, const char *name, int lo, int hi, int *out) {
  const char *v = var(name);
  int64_t x;
  if (!v) return;
  if (rt_env_parse_int(v, INT64_MIN + 1, INT64_MAX, &x) != 0) {
    warn(e, "%s=%.64s ignored: an integer is expected", name, v);
    return;
  }
  *out = x < lo ? lo : x > hi ? hi : (int)x;
}

/* 0 or 1. */
static void boolean(rt_env *e, const char *name, int *out) {
  static const char *const names[] = {"0", "1", NULL};
  const char *v = var(name);
  int m;
  if (!v) return;
  if (rt_env_parse_mode(v, names, &m) != 0)
    warn(e, "%s=%.64s ignored: 0 or 1 is expected", name, v);
  else
    *out = m;
}

/* One of a list of integers. */
static void one_of(rt_env *e, const char *name, const int *allowed, int n, const char *expect,
                   int *out) {
  const char *v = var(name);
  int64_t x;
  if (!v) return;
  if (rt_env_parse_int(v, INT32_MIN, INT32_MAX, &x) == 0)
    for (int i = 0; i < n; i++)
      if (x == allowed[i]) {
        *out = (int)x;
        return;
      }
  warn(e, "%s=%.64s ignored: %s is expected", name, v, expect);
}

static void path(rt_env *e, const char *name, char **out) {
  const char *v = var(name);
  if (!v) return;
  if (strlen(v) >= RT_ENV_PATH)
    warn(e, "%s ignored: longer than %d bytes", name, RT_ENV_PATH - 1);
  else if (!(*out = strdup(v)))
    warn(e, "%s ignored: out of memory", name);
}

static void read_tuning(rt_env *e, rt_tuning *t) {
  const char *v;
  boolean(e, "FI_PDL", &t->pdl);
  static const int warps[] = {1, 2, 4, 8};
  one_of(e, "FI_DECODE_WARPS", warps, 4, "1, 2, 4 or 8", &t->decode_warps);
  static const int pipes[] = {0, 1, 2, 3};
  one_of(e, "FI_DECODE_PIPELINE", pipes, 4, "0, 1, 2 or 3", &t->decode_pipeline);
  int_clamped(e, "FI_DECODE_PREFETCH", -8, 8, &t->decode_prefetch);
  int_clamped(e, "FI_DECODE_HEAD_PREFETCH", -65536, 65536, &t->decode_head_prefetch);
  int_clamped(e, "FI_DECODE_PRE_PREFETCH", 0, 65536, &t->decode_pre_prefetch);
  boolean(e, "FI_DECODE_EVICT", &t->decode_evict);
  boolean(e, "FI_DECODE_KV_PAIR", &t->decode_kv_pair);
  boolean(e, "FI_DECODE_SINGLE_SPLIT", &t->decode_single_split);
  if ((v = var("FI_DECODE_SPLIT"))) {
    double x;
    if (rt_env_parse_decimal(v, &x) != 0)
      warn(e, "FI_DECODE_SPLIT=%.64s ignored: a number like 2 or 1.5 is expected", v);
    else /* not positive counts as 1; at most 64: the workspace stays within reason */
      t->decode_split = x > 0 ? (x < 64 ? x : 64) : 1.0;
  }
  boolean(e, "FI_DECODE_TC", &t->decode_tc);
  boolean(e, "FI_PREFILL_WGMMA", &t->prefill_wgmma);
  boolean(e, "FI_MOE_WGMMA", &t->moe_wgmma);
  static const int mla_stages[] = {2, 4};
  one_of(e, "FI_MLA_STAGES", mla_stages, 2, "2 or 4", &t->mla_stages);
  boolean(e, "FI_AUTOTUNE", &t->autotune);
  static const int qtiles[] = {16, 64, 128};
  one_of(e, "FI_PREFILL_QTILE", qtiles, 3, "16, 64 or 128", &t->prefill_qtile);
  if ((v = var("FI_PREFILL_WG"))) {
    if (v[0] >= '1' && v[0] <= '3' && v[1] == 'x' && (!strcmp(v + 2, "64") || !strcmp(v + 2, "128"))) {
      t->prefill_wg_q = 64 * (v[0] - '0');
      t->prefill_wg_kv = atoi(v + 2);
    } else {
      warn(e, "FI_PREFILL_WG=%.64s ignored: <warpgroups 1-3>x<64|128> is expected", v);
    }
  }
  static const int ws[] = {0, 1, 2};
  one_of(e, "FI_PREFILL_WS", ws, 3, "0, 1 or 2", &t->prefill_ws);
  if ((v = var("FI_PREFILL_STAGES"))) {
    int64_t x;
    /* 3 and 4 where registered; any other number two stages (README) */
    if (rt_env_parse_int(v, INT64_MIN + 1, INT64_MAX, &x) != 0)
      warn(e, "FI_PREFILL_STAGES=%.64s ignored: 2, 3 or 4 is expected", v);
    else
      t->prefill_stages = x == 3 || x == 4 ? (int)x : 2;
  }
  if ((v = var("FI_PREFILL_PERSIST"))) {
    int64_t x;
    if (strcmp(v, "0") == 0) {
      t->prefill_persist = RT_PERSIST_OFF;
    } else if (strcmp(v, "s") == 0) {
      t->prefill_persist = RT_PERSIST_FIXED;
    } else if (rt_env_parse_int(v, 1, INT32_MAX, &x) == 0) {
      t->prefill_persist = RT_PERSIST_CAP;
      t->prefill_persist_cap = (int)x;
    } else {
      warn(e, "FI_PREFILL_PERSIST=%.64s ignored: 0, s or a number of blocks is expected", v);
    }
  }
  if ((v = var("FI_PREFILL_SPLIT"))) {
    double x;
    if (rt_env_parse_decimal(v, &x) != 0)
      warn(e, "FI_PREFILL_SPLIT=%.64s ignored: a number like 0, 2 or 1.5 is expected", v);
    else
      t->prefill_split = x;
  }
  if ((v = var("FI_SAMPLING_SELECT"))) {
    static const char *const names[] = {"radix", "range", NULL};
    if (rt_env_parse_mode(v, names, &t->sampling_select) != 0)
      warn(e, "FI_SAMPLING_SELECT=%.64s ignored: range or radix is expected", v);
  }
  if ((v = var("FI_SAMPLING_TOPP"))) {
    static const char *const names[] = {"float", "exact", NULL};
    if (rt_env_parse_mode(v, names, &t->sampling_topp_exact) != 0)
      warn(e, "FI_SAMPLING_TOPP=%.64s ignored: exact or float is expected", v);
  }
}

void rt_env_read(rt_env *e) {
  memset(e, 0, sizeof *e);
  e->log_level = -1;
  e->max_bytes = -1;
  e->claim_timeout_s = -1;
  e->umask = -1;
  e->tune = rt_tuning_default();
  const char *v;
  if ((v = var("FI_LOG_LEVEL")) && rt_env_parse_level(v, &e->log_level) != 0)
    warn(e, "FI_LOG_LEVEL=%.64s ignored: off, error, warn, info, debug or 0-4 is expected", v);
  if ((v = var("FI_CACHE_JOURNAL"))) {
    static const char *const names[] = {"", "wal", "delete", NULL};
    if (rt_env_parse_mode(v, names, &e->journal) != 0)
      warn(e, "FI_CACHE_JOURNAL=%.64s ignored: wal or delete is expected", v);
  }
  if ((v = var("FI_CACHE_MAX_BYTES")) && rt_env_parse_size(v, &e->max_bytes) != 0)
    warn(e, "FI_CACHE_MAX_BYTES=%.64s ignored: a size like 2G, 500M or 1048576 (0: no cap) is expected", v);
  if ((v = var("FI_CACHE_CLAIM_TIMEOUT")) &&
      rt_env_parse_int(v, 1, INT64_MAX / 1000, &e->claim_timeout_s) != 0)
    warn(e, "FI_CACHE_CLAIM_TIMEOUT=%.64s ignored: a positive number of seconds is expected", v);
  if ((v = var("FI_CACHE_UMASK"))) {
    const char *p = v;
    int m = 0;
    while (*p >= '0' && *p <= '7' && m <= 0777) m = m * 8 + (*p++ - '0');
    if (*p || m > 0777)
      warn(e, "FI_CACHE_UMASK=%.64s ignored: an octal umask like 007 is expected", v);
    else
      e->umask = m;
  }
  path(e, "FI_CACHE_SYSTEM_PATH", &e->system_path);
  /* The vendor libraries: each backend and compiler names its own variable. */
  for (int i = 0; i < rt_device_count() && i < RT_MAX_BACKENDS; i++)
    path(e, rt_device_at(i)->library_env, &e->device_library[i]);
  for (int i = 0; i < jit_compiler_count() && i < RT_ENV_MAX_COMPILERS; i++)
    path(e, jit_compiler_at(i)->library_env, &e->compiler_library[i]);
  read_tuning(e, &e->tune);
}

void rt_env_free(rt_env *e) {
  free(e->system_path);
  for (int i = 0; i < RT_MAX_BACKENDS; i++) free(e->device_library[i]);
  for (int i = 0; i < RT_ENV_MAX_COMPILERS; i++) free(e->compiler_library[i]);
  for (int i = 0; i < e->nwarnings; i++) free(e->warnings[i]);
  memset(e, 0, sizeof *e);
}
