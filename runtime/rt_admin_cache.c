/* rt_admin_cache.c: the maintenance half of the admin API: garbage collection,
 * verify and repair, and moving caches between machines (export, import). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_ops.h"
#include "fi_params.h"
#include "jit_compiler.h"
#include "jit_templates.h"
#include "rt_internal.h"

static cache_store *user_store(fi_runtime *rt, fi_status *st) {
  cache_store *s = rt ? rt_store(rt) : NULL;
  if (!rt)
    *st = rt_fail(FI_ERR_INVALID_ARGUMENT, "rt is NULL");
  else if (!s || rt->store_is_fallback)
    *st = rt_fail(FI_ERR_CACHE, "the cache file %s could not be opened", rt->cache_path);
  else
    *st = FI_OK;
  return *st == FI_OK ? s : NULL;
}

FI_API fi_status fi_admin_gc(fi_runtime *rt, int64_t max_bytes, int stale, int64_t *evicted,
                             int64_t *stale_removed) {
  fi_status st;
  cache_store *s = user_store(rt, &st);
  if (!s) return st;
  char err[1024];
  int64_t n = 0, m = 0;
  if (stale) {
    /* A compiler that is not installed here says nothing about its rows. The store judges
     * sm_* rows by one identity and gfx* rows by another: the registry says which
     * compiler builds each family. */
    const jit_compiler *ncc = jit_compiler_for_arch("sm_80"), *acc = jit_compiler_for_arch("gfx90a");
    const char *nv = ncc && ncc->load(rt_compiler_library(rt, ncc), err, sizeof err) == 0 ? ncc->identity() : NULL;
    const char *hip = acc && acc->load(rt_compiler_library(rt, acc), err, sizeof err) == 0 ? acc->identity() : NULL;
    char abi[32];
    snprintf(abi, sizeof abi, "%d.%d", FI_KERNEL_ABI_VERSION, JIT_CACHE_FORMAT);
    if (cache_store_remove_stale(s, nv, hip, jit_template_set_hash(), abi, &m, err, sizeof err) !=
        CACHE_OK)
      return rt_fail(FI_ERR_CACHE, "removing stale entries from %s: %s", rt->cache_path, err);
  }
  int64_t cap = max_bytes < 0 ? rt->max_bytes : max_bytes;
  if (cap > 0 && cache_store_evict(s, cap, &n, err, sizeof err) != CACHE_OK)
    return rt_fail(FI_ERR_CACHE, "evicting from %s: %s", rt->cache_path, err);
  atomic_fetch_add(&rt->evictions, n);
  if (evicted) *evicted = n;
  if (stale_removed) *stale_removed = m;
  return FI_OK;
}

FI_API fi_status fi_admin_verify(fi_runtime *rt, int repair, fi_verify_report *rep) {
  if (!rep) return rt_fail(FI_ERR_INVALID_ARGUMENT, "rep is NULL");
  memset(rep, 0, sizeof *rep);
  fi_status st;
  cache_store *s = user_store(rt, &st);
  if (!s) return st;
  cache_verify_report r;
  char err[1024];
  if (cache_store_verify(s, repair, &r, err, sizeof err) != CACHE_OK)
    return rt_fail(FI_ERR_CACHE, "verifying %s: %s", rt->cache_path, err);
  rep->integrity_ok = r.integrity_ok;
  rep->rows = r.rows;
  rep->bad_rows = r.bad_rows;
  rep->repaired = r.repaired;
  snprintf(rep->detail, sizeof rep->detail, "%s", r.detail);
  if (r.repaired) atomic_fetch_add(&rt->repairs, r.repaired);
  return FI_OK;
}

FI_API fi_status fi_admin_export_cache(fi_runtime *rt, const char *file, const char *op,
                                       const char *arch, int64_t *copied) {
  if (!file || !file[0]) return rt_fail(FI_ERR_INVALID_ARGUMENT, "file is empty");
  fi_status st;
  cache_store *s = user_store(rt, &st);
  if (!s) return st;
  char tmp[4200], err[1024];
  /* The file is meant for other machines and users: into a directory that
   * exists, rather than one created here with this cache's private mode. */
  snprintf(tmp, sizeof tmp, "%s", file);
  char *slash = strrchr(tmp, '/');
  if (slash && slash != tmp) {
    *slash = 0;
    struct stat d;
    if (stat(tmp, &d) != 0 || !S_ISDIR(d.st_mode))
      return rt_fail(FI_ERR_INVALID_ARGUMENT, "file: directory %s does not exist", tmp);
  }
  snprintf(tmp, sizeof tmp, "%s.tmp-%d", file, (int)getpid());
  unlink(tmp);
  cache_store *out = NULL;
  if (cache_store_open(tmp, CACHE_OPEN_ROLLBACK, &out, err, sizeof err) != CACHE_OK)
    return rt_fail(FI_ERR_CACHE, "creating %s: %s", tmp, err);
  int64_t n = 0, skipped = 0;
  int rc = cache_store_copy(s, out, op, arch, &n, &skipped, err, sizeof err);
  if (rc == CACHE_OK) rc = cache_store_seal(out, err, sizeof err);
  cache_store_close(out);
  if (rc == CACHE_OK && chmod(tmp, 0644) != 0) rc = CACHE_ERR; /* a system layer others read */
  if (rc == CACHE_OK && rename(tmp, file) != 0) {
    snprintf(err, sizeof err, "rename to %s failed", file);
    rc = CACHE_ERR;
  }
  if (rc != CACHE_OK) {
    unlink(tmp);
    return rt_fail(FI_ERR_CACHE, "exporting to %s: %s", file, err);
  }
  if (copied) *copied = n;
  return FI_OK;
}

FI_API fi_status fi_admin_import_cache(fi_runtime *rt, const char *file, int64_t *copied,
                                       int64_t *skipped) {
  if (!file || !file[0]) return rt_fail(FI_ERR_INVALID_ARGUMENT, "file is empty");
  fi_status st;
  cache_store *s = user_store(rt, &st);
  if (!s) return st;
  char err[1024];
  cache_store *in = NULL;
  if (cache_store_open(file, CACHE_OPEN_READONLY, &in, err, sizeof err) != CACHE_OK)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "file: %s is not a usable cache: %s", file, err);
  int64_t n = 0, k = 0;
  int rc = cache_store_copy(in, s, NULL, NULL, &n, &k, err, sizeof err);
  cache_store_close(in);
  if (rc != CACHE_OK) return rt_fail(FI_ERR_CACHE, "importing %s: %s", file, err);
  if (copied) *copied = n;
  if (skipped) *skipped = k;
  return FI_OK;
}
