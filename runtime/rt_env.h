/* rt_env.h: every FI_* variable the library reads, read once at fi_runtime_create into
 * one struct (rt_env.c), so that a plan or a call never depends on the environment of
 * that moment. One strict parser per kind of value (size, integer, decimal, level, mode);
 * a value it does not take is ignored (the default applies) with a warning naming the
 * variable. The cache-path variables stay with the cache-path resolver (rt_runtime.c). */
#ifndef RT_ENV_H
#define RT_ENV_H

#include <stdint.h>

#include "rt_device.h"

#define RT_ENV_MAX_COMPILERS 4
#define RT_ENV_PATH 4096

/* Tuning of kernel choice (README, Environment): what fi-bench and the tests compare.
 * Each field holds the default when its variable is unset or refused. */
typedef struct rt_tuning {
  int pdl;                  /* FI_PDL: 1; 0 plain launches and no pre-wait prefetch */
  int decode_warps;         /* FI_DECODE_WARPS: 0 the plan's choice, or 1, 2, 4, 8 */
  int decode_pipeline;      /* FI_DECODE_PIPELINE: -1 the plan's choice, or 0..3 */
  int decode_prefetch;      /* FI_DECODE_PREFETCH: -8..8 (clamped), 0 */
  int decode_head_prefetch; /* FI_DECODE_HEAD_PREFETCH: -65536..65536 (clamped), 0 */
  int decode_pre_prefetch;  /* FI_DECODE_PRE_PREFETCH: 0..65536 (clamped), 256 */
  int decode_evict;         /* FI_DECODE_EVICT: 1 evict-first, 0 evict-normal */
  int decode_kv_pair;       /* FI_DECODE_KV_PAIR: 1, 0 off */
  int decode_single_split;  /* FI_DECODE_SINGLE_SPLIT: 1, 0 unsplit */
  double decode_split;      /* FI_DECODE_SPLIT: 1; at most 64, not positive counts as 1 */
  int decode_tc;            /* FI_DECODE_TC: -1 the plan's choice (groups above 16 over a
                               16-bit cache), 0 never, 1 whenever the prefill kernels can */
  int prefill_wgmma;        /* FI_PREFILL_WGMMA: 1, 0 mma.sync everywhere */
  int prefill_qtile;        /* FI_PREFILL_QTILE: 0 unset, or 16, 64, 128 */
  int prefill_wg_q, prefill_wg_kv; /* FI_PREFILL_WG <1|2|3>x<64|128>: 0 unset, or q and kv tiles */
  int prefill_ws;           /* FI_PREFILL_WS: -1 unset, or 0, 1, 2 */
  int prefill_stages;       /* FI_PREFILL_STAGES: 0 unset, 3 or 4, or 2 for any other number */
  int prefill_persist;      /* FI_PREFILL_PERSIST: RT_PERSIST_* */
  int prefill_persist_cap;  /* with RT_PERSIST_CAP: at most this many blocks */
  double prefill_split;     /* FI_PREFILL_SPLIT: 1, >= 0 (0 never splits) */
  int moe_wgmma;            /* FI_MOE_WGMMA: 1, 0 the grouped GEMM on mma.sync everywhere */
  int mla_stages;           /* FI_MLA_STAGES: 0 unset, or 2 or 4: the 16-row MLA tile's KV stages */
  int sampling_select;      /* FI_SAMPLING_SELECT: -1 by op, 0 radix, 1 range */
  int sampling_topp_exact;  /* FI_SAMPLING_TOPP=exact: 1 */
  int autotune;             /* FI_AUTOTUNE: 0; 1 a plan whose bucket has no stored tactic tunes it */
} rt_tuning;

enum { RT_PERSIST_DEFAULT = 0, RT_PERSIST_OFF = 1, RT_PERSIST_FIXED = 2, RT_PERSIST_CAP = 3 };

/* The defaults: what a plan made without a runtime (the offline planners of the tests)
 * and a runtime with none of the variables set use. */
static inline rt_tuning rt_tuning_default(void) {
  rt_tuning t = {0};
  t.pdl = 1;
  t.decode_pipeline = -1;
  t.decode_pre_prefetch = 256;
  t.decode_evict = 1;
  t.decode_kv_pair = 1;
  t.decode_single_split = 1;
  t.decode_split = 1.0;
  t.decode_tc = -1;
  t.prefill_wgmma = 1;
  t.prefill_ws = -1;
  t.prefill_split = 1.0;
  t.moe_wgmma = 1;
  t.sampling_select = -1;
  return t;
}

#define RT_ENV_MAX_WARNINGS 32

typedef struct rt_env {
  int log_level;            /* FI_LOG_LEVEL: -1 unset, else 0..4 */
  int journal;              /* FI_CACHE_JOURNAL: 0 unset, RT_JOURNAL_WAL, RT_JOURNAL_DELETE */
  int64_t max_bytes;        /* FI_CACHE_MAX_BYTES: -1 unset, 0 no cap */
  int64_t claim_timeout_s;  /* FI_CACHE_CLAIM_TIMEOUT: -1 unset, else > 0 */
  int umask;                /* FI_CACHE_UMASK: -1 unset, else 0..0777 */
  /* The strings are malloc'ed (rt_env_free), NULL where unset: fixed 4 KB buffers made the
   * struct 45 KB, and zeroing it cost a fresh process's fi_runtime_create ~30 us of page
   * faults (docs/runtime.md, thirty-ninth session). */
  char *system_path;                        /* FI_CACHE_SYSTEM_PATH */
  char *device_library[RT_MAX_BACKENDS];    /* by device registry slot */
  char *compiler_library[RT_ENV_MAX_COMPILERS]; /* by compiler registry index */
  rt_tuning tune;
  /* What was refused, one line each naming the variable; the runtime logs them. */
  int nwarnings;
  char *warnings[RT_ENV_MAX_WARNINGS];
} rt_env;

enum { RT_JOURNAL_WAL = 1, RT_JOURNAL_DELETE = 2 };

/* Reads every variable into *e (defaults where unset or refused); rt_env_free releases
 * its strings. A value that does not fit in memory is dropped like a refused one. */
void rt_env_read(rt_env *e);
void rt_env_free(rt_env *e);

/* The parsers, each 0 on success, -1 for a value it does not take (*out untouched).
 * Size: decimal digits with an optional binary suffix K, M, G, T (optionally followed by
 * i and/or B, any case) or a bare B; no sign, hex, fraction, exponent or space; overflow
 * of int64 refused. */
int rt_env_parse_size(const char *s, int64_t *out);
/* Integer: an optional sign and decimal digits, within [min, max]. */
int rt_env_parse_int(const char *s, int64_t min, int64_t max, int64_t *out);
/* Decimal: digits with an optional fraction ("1", "0.5", "2."); no sign, exponent,
 * hex, inf or nan. */
int rt_env_parse_decimal(const char *s, double *out);
/* Log level: 0..4 or off, error, warn (warning), info, debug in any case. */
int rt_env_parse_level(const char *s, int *out);
/* Mode: s exactly one of the NULL-terminated names; *out its index. */
int rt_env_parse_mode(const char *s, const char *const *names, int *out);

#endif
