/* rt_runtime.c: creating and destroying the runtime: options, the cache path
 * and its fallback to memory, device backends at first use. */
#include <errno.h>
#include <stddef.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlpack/dlpack.h"
#include "jit_compiler.h"
#include "rt_internal.h"

FI_API void fi_options_init(fi_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->log_level = -1;
}

static int resolve_cache_path(const char *given, char *out, size_t n) {
  const char *env;
  if (given && given[0]) return snprintf(out, n, "%s", given) < (int)n ? 0 : -1;
  if ((env = getenv("FI_CACHE_PATH")) && env[0])
    return snprintf(out, n, "%s", env) < (int)n ? 0 : -1;
  /* The XDG spec: a relative XDG_CACHE_HOME is invalid and is ignored. */
  if ((env = getenv("XDG_CACHE_HOME")) && env[0] == '/')
    return snprintf(out, n, "%s/fi_runtime/kernels.db", env) < (int)n ? 0 : -1;
  const char *home = getenv("HOME");
  if (!home || !home[0]) {
    struct passwd *pw = getpwuid(getuid());
    home = pw ? pw->pw_dir : NULL;
  }
  if (!home || !home[0]) return -1;
  return snprintf(out, n, "%s/.cache/fi_runtime/kernels.db", home) < (int)n ? 0 : -1;
}

FI_API fi_status fi_runtime_create(const fi_options *opts, fi_runtime **out) {
  if (!out) return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_runtime_create: out is NULL");
  *out = NULL;
  fi_options o;
  fi_options_init(&o);
  if (opts) {
    /* A size a caller's fi_options can have: this header's, or one that ends where a field
     * of it starts (a header before that field was added; at least cache_path). Any other
     * value is a struct that fi_options_init did not fill. */
    static const size_t known[] = {offsetof(fi_options, system_cache_path), offsetof(fi_options, log_level),
                                   sizeof(fi_options)};
    int ok = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= opts->struct_size == known[i];
    if (!ok)
      return rt_fail(FI_ERR_INVALID_ARGUMENT,
                     "fi_runtime_create: opts->struct_size is %zu, not the size of an fi_options (%zu); "
                     "call fi_options_init first",
                     opts->struct_size, sizeof(fi_options));
    memcpy(&o, opts, opts->struct_size);
  }
  fi_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) return rt_fail(FI_ERR_OUT_OF_MEMORY, "fi_runtime_create: out of memory");
  rt_env_read(&rt->env);
  rt->log_level = o.log_level;
  if (rt->log_level < 0) rt->log_level = rt->env.log_level >= 0 ? rt->env.log_level : RT_LOG_WARN;
  for (int i = 0; i < rt->env.nwarnings; i++) rt_log(rt, RT_LOG_WARN, "%s", rt->env.warnings[i]);
  if (resolve_cache_path(o.cache_path, rt->cache_path, sizeof rt->cache_path) != 0) {
    rt_log(rt, RT_LOG_WARN, "no cache path (no HOME, XDG_CACHE_HOME or FI_CACHE_PATH): "
                            "kernels are kept in memory only");
    /* Empty: the store opens in memory as a fallback, which fi_admin_stats
     * reports, so that a tool meant to fill the file can refuse to run. */
    rt->cache_path[0] = 0;
  }
  if (rt->env.journal == RT_JOURNAL_DELETE) rt->store_flags |= CACHE_OPEN_ROLLBACK;
  rt->journal_explicit = rt->env.journal != 0;
  const char *sys = o.system_cache_path ? o.system_cache_path : rt->env.system_path;
  if (sys && sys[0]) snprintf(rt->system_path, sizeof rt->system_path, "%s", sys);
  rt->max_bytes = (int64_t)2 << 30; /* 2 GiB: hundreds of op configurations with room */
  if (rt->env.max_bytes >= 0) rt->max_bytes = rt->env.max_bytes; /* 0: no cap */
  rt->claim_timeout_s = rt->env.claim_timeout_s > 0 ? rt->env.claim_timeout_s : 300;
  rt->fork_gen = rt_fork_generation_init();
  pthread_mutex_init(&rt->mu, NULL);
  pthread_cond_init(&rt->cv, NULL);
  rt->memo = cache_memo_create();
  rt->tactic_memo = cache_memo_create();
  rt->autotune_tried = cache_memo_create();
  if (!rt->memo || !rt->tactic_memo || !rt->autotune_tried) {
    fi_runtime_destroy(rt);
    return rt_fail(FI_ERR_OUT_OF_MEMORY, "fi_runtime_create: out of memory");
  }
  rt_log(rt, RT_LOG_DEBUG, "runtime %s created, cache %s", FI_VERSION_STRING, rt->cache_path);
  *out = rt;
  return FI_OK;
}

typedef struct unload_ctx {
  fi_runtime *rt;
} unload_ctx;

static void unload_kernel(void *value, void *user) {
  unload_ctx *u = user;
  rt_kernel *k = value;
  if (k->backend && k->module) {
    k->backend->module_unload(rt_backend_state(u->rt, k->backend), k->device, k->module);
  }
  free(k);
}

static void free_value(void *value, void *user) {
  (void)user;
  free(value);
}

FI_API void fi_runtime_destroy(fi_runtime *rt) {
  if (!rt) return;
  if (atomic_load(&rt_fork_generation) != rt->fork_gen) {
    /* Destroyed in a forked child before any use there: what it holds is
     * the parent's (connections, modules) and must not be closed here. */
    rt_env_free(&rt->env); /* (plain heap strings: the child's copies) */
    free(rt);
    return;
  }
  rt_flush_touches(rt);
  if (rt->memo) {
    unload_ctx u = {rt};
    cache_memo_destroy(rt->memo, unload_kernel, &u);
  }
  if (rt->tactic_memo) cache_memo_destroy(rt->tactic_memo, free_value, NULL);
  if (rt->autotune_tried) cache_memo_destroy(rt->autotune_tried, NULL, NULL);
  if (rt->store) cache_store_close(rt->store);
  if (rt->system_store) cache_store_close(rt->system_store);
  for (int i = 0; i < rt_device_count(); i++)
    if (rt->dev[i].state) rt_device_at(i)->destroy(rt->dev[i].state);
  free(rt->touched);
  pthread_cond_destroy(&rt->cv);
  pthread_mutex_destroy(&rt->mu);
  rt_env_free(&rt->env);
  free(rt);
}

fi_status rt_backend(fi_runtime *rt, int dlpack_type, const rt_device_i **be, void **state) {
  rt_fork_check(rt); /* in a forked child the parent's device state is void */
  /* A type no backend takes goes to the first one, which reports the device it lacks
   * (the tensor checks have refused every type but the registered ones before). */
  int slot = rt_device_slot_for(dlpack_type);
  if (slot < 0) slot = 0;
  const rt_device_i *b = rt_device_at(slot);
  struct rt_backend_state *bs = &rt->dev[slot];
  int *loaded = &bs->loaded;
  void **st = &bs->state;
  char *err = bs->err;
  if (__atomic_load_n(loaded, __ATOMIC_ACQUIRE) == 1) {
    *be = b;
    *state = *st;
    return FI_OK;
  }
  rt_lock(rt);
  if (*loaded == 0) {
    const rt_device_config cfg = {rt->env.device_library[slot],
                                  rt->env.tune.pdl};
    *st = b->create(&cfg);
    if (!*st) {
      snprintf(err, sizeof bs->err, "out of memory");
      *loaded = -1;
    } else if (b->load(*st, err, sizeof bs->err) != 0) {
      *loaded = -1;
    } else {
      __atomic_store_n(loaded, 1, __ATOMIC_RELEASE);
    }
  }
  int ok = *loaded == 1;
  rt_unlock(rt);
  if (!ok) return rt_fail(FI_ERR_NO_DEVICE, "no %s device: %s", b->name, err);
  *be = b;
  *state = *st;
  return FI_OK;
}

FI_API fi_status fi_runtime_stats(fi_runtime *rt, fi_stats *st) {
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_runtime_stats: rt is NULL");
  if (!st || st->struct_size < sizeof(size_t) || st->struct_size > sizeof(fi_stats))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "fi_runtime_stats: st is NULL or st->struct_size is not sizeof(fi_stats)");
  fi_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = st->struct_size;
  s.memo_hits = atomic_load(&rt->memo_hits);
  s.cache_hits = atomic_load(&rt->cache_hits);
  s.compiles = atomic_load(&rt->compiles);
  s.compile_failures = atomic_load(&rt->compile_failures);
  s.compile_ms = atomic_load(&rt->compile_ms_total);
  s.waits = atomic_load(&rt->waits);
  s.evictions = atomic_load(&rt->evictions);
  s.repairs = atomic_load(&rt->repairs);
  memcpy(st, &s, st->struct_size);
  return FI_OK;
}

const char *rt_compiler_library(const fi_runtime *rt, const void *cc) {
  for (int i = 0; i < jit_compiler_count() && i < RT_ENV_MAX_COMPILERS; i++)
    if (jit_compiler_at(i) == cc) return rt->env.compiler_library[i];
  return NULL;
}
