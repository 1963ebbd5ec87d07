/* rt_admin.c: the administration API used by fi-cache: the registry of ops and
 * configurations, prewarm of one configuration, and listing and clearing the store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_ops.h"
#include "cache_tactics.h"
#include "jit_compiler.h"
#include "jit_registry.h"
#include "rt_internal.h"

FI_API int fi_admin_op_count(void) { return jit_registry_count(); }

FI_API const char *fi_admin_op_name(int i) {
  const jit_op *op = jit_registry_get(i);
  return op ? op->name : NULL;
}

FI_API int fi_admin_config_count(const char *op) {
  const jit_op *o = jit_registry_find(op);
  return o ? o->config_count() : -1;
}

FI_API fi_status fi_admin_config_key(const char *op, int idx, char *buf, size_t buflen) {
  const jit_op *o = jit_registry_find(op);
  if (!o) return rt_fail(FI_ERR_INVALID_ARGUMENT, "op: no op named '%s'", op ? op : "(null)");
  if (idx < 0 || idx >= o->config_count())
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "idx: %d is not in [0, %d)", idx, o->config_count());
  if (!buf) return rt_fail(FI_ERR_INVALID_ARGUMENT, "buf is NULL");
  jit_key k;
  o->config(idx, &k);
  if (jit_key_canonical(&k, buf, buflen) < 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "buflen: %zu is too small", buflen);
  return FI_OK;
}

FI_API int fi_admin_arch_supported(const char *arch) {
  return jit_compiler_for_arch(arch) != NULL;
}

FI_API fi_status fi_admin_arch_check(fi_runtime *rt, const char *arch) {
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "rt is NULL");
  const jit_compiler *cc = jit_compiler_for_arch(arch);
  if (!cc)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "arch: '%s' is not a target", arch ? arch : "(null)");
  char err[1024];
  if (cc->load(rt_compiler_library(rt, cc), err, sizeof err) != 0) return rt_fail(FI_ERR_COMPILE, "%s", err);
  if (cc->check_arch(arch, err, sizeof err) != 0) return rt_fail(FI_ERR_UNSUPPORTED, "%s", err);
  return FI_OK;
}

FI_API fi_status fi_admin_prewarm(fi_runtime *rt, const char *op, int idx, const char *arch,
                                  fi_prewarm_result *result, double *compile_ms) {
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "rt is NULL");
  const jit_op *o = jit_registry_find(op);
  if (!o) return rt_fail(FI_ERR_INVALID_ARGUMENT, "op: no op named '%s'", op ? op : "(null)");
  if (idx < 0 || idx >= o->config_count())
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "idx: %d is not in [0, %d)", idx, o->config_count());
  if (!jit_compiler_for_arch(arch))
    return rt_fail(FI_ERR_INVALID_ARGUMENT,
                   "arch: '%s' is not a target (sm_XY with XY >= 70, sm_90a, gfx90a, gfx942, ...)",
                   arch ? arch : "(null)");
  jit_key k;
  o->config(idx, &k);
  if (o->target_arch && !o->target_arch(arch)) {
    if (result) *result = FI_PREWARM_SKIPPED;
    if (compile_ms) *compile_ms = 0;
    return FI_OK;
  }
  return rt_binary_ensure(rt, &k, arch, 1, result, compile_ms, NULL);
}

typedef struct list_ctx {
  fi_cache_entry_fn fn;
  void *user;
  const char *layer;
  int stopped;
} list_ctx;

static void to_entry(const cache_record *r, fi_cache_entry *e, const char *layer) {
  memset(e, 0, sizeof *e);
  cache_hash_hex(r->hash, e->hash);
  e->op = r->op;
  e->key = r->key;
  e->arch = r->arch;
  e->compiler = r->compiler;
  e->entry = r->entry;
  e->layer = layer;
  e->bytes = (int64_t)r->bytes;
  e->created = r->created;
  e->last_used = r->last_used;
  e->hits = r->hits;
  e->compile_ms = r->compile_ms;
}

static int list_cb(const cache_record *r, void *user) {
  list_ctx *c = user;
  fi_cache_entry e;
  to_entry(r, &e, c->layer);
  c->stopped = c->fn(&e, c->user);
  return c->stopped;
}

FI_API fi_status fi_admin_list(fi_runtime *rt, const char *op, const char *arch,
                               fi_cache_entry_fn fn, void *user) {
  if (!rt || !fn) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s is NULL", rt ? "fn" : "rt");
  cache_store *s = rt_store(rt);
  if (!s) return rt_fail(FI_ERR_CACHE, "no cache store");
  char err[1024];
  /* The system layer first: it is searched first. */
  cache_store *sys = rt_system_store(rt);
  list_ctx c = {fn, user, "system", 0};
  if (sys && cache_store_list(sys, op, arch, list_cb, &c, err, sizeof err) != CACHE_OK)
    return rt_fail(FI_ERR_CACHE, "listing %s: %s", rt->system_path, err);
  if (c.stopped) return FI_OK;
  c.layer = "user";
  if (cache_store_list(s, op, arch, list_cb, &c, err, sizeof err) != CACHE_OK)
    return rt_fail(FI_ERR_CACHE, "listing %s: %s", rt->cache_path, err);
  return FI_OK;
}

FI_API fi_status fi_admin_get(fi_runtime *rt, const char *hex_prefix, fi_cache_entry_fn fn,
                              void *user, void **binary, size_t *binary_bytes, char **source) {
  if (binary) *binary = NULL;
  if (source) *source = NULL;
  if (!rt || !hex_prefix || !hex_prefix[0])
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s is empty", rt ? "hash prefix" : "rt");
  cache_store *s = rt_store(rt);
  if (!s) return rt_fail(FI_ERR_CACHE, "no cache store");
  cache_record r;
  char err[1024];
  const char *layer = "user";
  int rc = cache_store_get_prefix(s, hex_prefix, &r, err, sizeof err);
  cache_store *sys = rc == CACHE_NOT_FOUND ? rt_system_store(rt) : NULL;
  if (sys) {
    rc = cache_store_get_prefix(sys, hex_prefix, &r, err, sizeof err);
    layer = "system";
  }
  if (rc == CACHE_NOT_FOUND)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "hash prefix: no entry starts with '%s'", hex_prefix);
  if (rc != CACHE_OK) return rt_fail(rc == CACHE_ERR_CORRUPT ? FI_ERR_CACHE : FI_ERR_INVALID_ARGUMENT,
                                     "hash prefix '%s': %s", hex_prefix, err);
  if (fn) {
    fi_cache_entry e;
    to_entry(&r, &e, layer);
    fn(&e, user);
  }
  if (binary) {
    *binary = (void *)r.binary;
    r.binary = NULL;
    if (binary_bytes) *binary_bytes = r.bytes;
  }
  if (source) {
    *source = (char *)r.source;
    r.source = NULL;
  }
  cache_record_free(&r);
  return FI_OK;
}

FI_API void fi_admin_free(void *p) { free(p); }

FI_API fi_status fi_admin_clear(fi_runtime *rt, const char *op, const char *arch,
                                int64_t *removed) {
  if (removed) *removed = 0;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "rt is NULL");
  cache_store *s = rt_store(rt);
  if (!s) return rt_fail(FI_ERR_CACHE, "no cache store");
  int64_t n = 0;
  char err[1024];
  int rc;
  if (!op && !arch) {
    /* Everything: the content replaced by an empty cache's, which needs
     * neither a readable file nor free disk space for a delete. */
    rc = cache_store_reset(s, &n, err, sizeof err);
  } else {
    rc = cache_store_delete(s, op, arch, &n, err, sizeof err);
    if (rc == CACHE_ERR_CORRUPT) {
      /* A damaged file: mended first (what reads back is kept), then cleared. */
      cache_verify_report r;
      char err2[1024];
      if (cache_store_verify(s, 1, &r, err2, sizeof err2) == CACHE_OK) {
        atomic_fetch_add(&rt->repairs, r.repaired);
        rc = cache_store_delete(s, op, arch, &n, err, sizeof err);
      }
    }
  }
  if (rc != CACHE_OK) {
    if (strstr(err, "full"))
      return rt_fail(FI_ERR_CACHE,
                     "clearing %s: %s. The disk is full: clearing everything (no op or arch) "
                     "needs no free space; else free space on its filesystem",
                     rt->cache_path, err);
    return rt_fail(FI_ERR_CACHE, "clearing %s: %s", rt->cache_path, err);
  }
  if (removed) *removed = n;
  return FI_OK;
}

FI_API fi_status fi_admin_stats_get(fi_runtime *rt, fi_admin_stats *st) {
  if (!rt || !st) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s is NULL", rt ? "st" : "rt");
  memset(st, 0, sizeof *st);
  cache_store *s = rt_store(rt);
  if (!s) return rt_fail(FI_ERR_CACHE, "no cache store");
  char err[1024];
  /* Everything but the totals first: a caller that gets the error still
   * learns the path and whether the file is in use at all. */
  st->path = rt->cache_path;
  st->fallback = rt->store_is_fallback;
  st->fallback_reason = rt->fallback_reason;
  if (cache_store_totals(s, &st->entries, &st->bytes, &st->file_bytes, err, sizeof err) != CACHE_OK)
    return rt_fail(FI_ERR_CACHE, "reading totals of %s: %s", rt->cache_path, err);
  st->memo_hits = atomic_load(&rt->memo_hits);
  st->cache_hits = atomic_load(&rt->cache_hits);
  st->compiles = atomic_load(&rt->compiles);
  st->compile_failures = atomic_load(&rt->compile_failures);
  st->compile_ms = atomic_load(&rt->compile_ms_total);
  st->store_open_ms = atomic_load(&rt->store_open_ms);
  st->lookup_ms = atomic_load(&rt->lookup_ms);
  st->module_load_ms = atomic_load(&rt->module_load_ms);
  st->tactic_hits = atomic_load(&rt->tactic_hits);
  st->tactic_misses = atomic_load(&rt->tactic_misses);
  if (cache_tactic_count(s, &st->tactics, err, sizeof err) != CACHE_OK)
    return rt_fail(FI_ERR_CACHE, "counting the tactics of %s: %s", rt->cache_path, err);
  return FI_OK;
}
