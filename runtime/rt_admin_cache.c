/* rt_admin_cache.c: the maintenance half of the admin API: garbage collection,
 * verify and repair, and moving caches between machines (export, import). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
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
    const char *abi = jit_abi_string();
    if (cache_store_remove_stale(s, nv, hip, jit_template_set_hash(), abi, &m, err, sizeof err) !=
        CACHE_OK)
      return rt_fail(FI_ERR_CACHE, "removing stale entries from %s: %s", rt->cache_path, err);
  }
  int64_t cap = max_bytes < 0 ? rt->max_bytes : max_bytes;
  if (cap > 0 && cache_store_evict(s, cap, &n, err, sizeof err) != CACHE_OK) {
    /* Deleting rows writes pages; with no room for them, say the way out. */
    if (strstr(err, "full"))
      return rt_fail(FI_ERR_CACHE,
                     "evicting from %s: %s. The disk is full, and evicting needs a little "
                     "space: free some on that filesystem, or empty the cache with "
                     "'fi-cache clear' (fi_admin_clear with no op or arch), which needs none",
                     rt->cache_path, err);
    return rt_fail(FI_ERR_CACHE, "evicting from %s: %s", rt->cache_path, err);
  }
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
  rep->tactic_rows = r.tactic_rows;
  rep->tactic_bad_rows = r.tactic_bad_rows;
  snprintf(rep->detail, sizeof rep->detail, "%s", r.detail);
  if (r.repaired) atomic_fetch_add(&rt->repairs, r.repaired);
  return FI_OK;
}

/* Export builds the file in a directory of its own beside FILE,
 * "FILE.tmp-<pid>", made here (mode 0700, exclusively: mkdir never follows
 * a link), so that nothing another user put in FILE's directory can be
 * written through, and SQLite's journal lands there too. The finished file
 * is renamed onto FILE, which replaces a link at FILE, never its target. */

/* Removes dir (opened as dfd) and the files directly in it, which must be
 * this user's; no link is followed. */
static void remove_tmp_dir(int parent, const char *name) {
  int dfd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return;
  struct stat st;
  DIR *d = fstat(dfd, &st) == 0 && st.st_uid == geteuid() ? fdopendir(dfd) : NULL;
  if (!d) {
    close(dfd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      unlinkat(dfd, e->d_name, 0);
  closedir(d);
  unlinkat(parent, name, AT_REMOVEDIR);
}

/* An export killed before its rename (kill -9, OOM) left FILE.tmp-<pid>
 * with a half-written file and journal in it; the next export to the same
 * FILE removes those of this user's processes that are gone. Also the
 * plain FILE.tmp-<pid> and its -journal that earlier versions left. */
static void clean_stale_exports(const char *dir, const char *base) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return;
  }
  size_t bl = strlen(base);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *n = e->d_name;
    if (strncmp(n, base, bl) != 0 || strncmp(n + bl, ".tmp-", 5) != 0) continue;
    char *end;
    long pid = strtol(n + bl + 5, &end, 10);
    if (pid <= 0 || end == n + bl + 5 || (*end && strcmp(end, "-journal") != 0)) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
    struct stat st;
    if (fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != geteuid()) continue;
    if (S_ISDIR(st.st_mode))
      remove_tmp_dir(dfd, n);
    else if (S_ISREG(st.st_mode))
      unlinkat(dfd, n, 0);
  }
  closedir(d);
}

FI_API fi_status fi_admin_export(fi_runtime *rt, const char *file, const char *op,
                                 const char *arch, int64_t *kernels, int64_t *tactics) {
  if (!file || !file[0]) return rt_fail(FI_ERR_INVALID_ARGUMENT, "file is empty");
  fi_status st;
  cache_store *s = user_store(rt, &st);
  if (!s) return st;
  char dir[4200], tmpdir[4200], tmp[4300], err[1024];
  /* The file is meant for other machines and users: into a directory that
   * exists, rather than one created here with this cache's private mode. */
  snprintf(dir, sizeof dir, "%s", file);
  char *slash = strrchr(dir, '/');
  const char *base = slash ? slash + 1 : file;
  if (!base[0]) return rt_fail(FI_ERR_INVALID_ARGUMENT, "file: %s names a directory", file);
  if (slash == dir)
    dir[1] = 0;
  else if (slash)
    *slash = 0;
  else
    snprintf(dir, sizeof dir, ".");
  struct stat d;
  if (stat(dir, &d) != 0 || !S_ISDIR(d.st_mode))
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "file: directory %s does not exist", dir);
  clean_stale_exports(dir, base);
  snprintf(tmpdir, sizeof tmpdir, "%s.tmp-%d", file, (int)getpid());
  if (mkdir(tmpdir, 0700) != 0)
    return rt_fail(FI_ERR_CACHE, "exporting to %s: cannot create %s: %s", file, tmpdir,
                   strerror(errno));
  snprintf(tmp, sizeof tmp, "%s/%s", tmpdir, base);
  cache_store *out = NULL;
  int rc = cache_store_open(tmp, CACHE_OPEN_ROLLBACK, &out, err, sizeof err);
  cache_copy_report r;
  memset(&r, 0, sizeof r);
  if (rc == CACHE_OK) rc = cache_store_copy_checked(s, out, op, arch, 0, &r, err, sizeof err);
  if (rc == CACHE_OK) rc = cache_store_seal(out, err, sizeof err);
  cache_store_close(out);
  if (rc == CACHE_OK && chmod(tmp, 0644) != 0) { /* a system layer others read */
    snprintf(err, sizeof err, "chmod %.900s: %s", tmp, strerror(errno));
    rc = CACHE_ERR;
  }
  if (rc == CACHE_OK && rename(tmp, file) != 0) {
    snprintf(err, sizeof err, "rename to %.900s failed: %s", file, strerror(errno));
    rc = CACHE_ERR;
  }
  int pfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (pfd >= 0) {
    remove_tmp_dir(pfd, strrchr(tmpdir, '/') ? strrchr(tmpdir, '/') + 1 : tmpdir);
    close(pfd);
  }
  if (rc != CACHE_OK) return rt_fail(FI_ERR_CACHE, "exporting to %s: %s", file, err);
  if (kernels) *kernels = r.copied;
  if (tactics) *tactics = r.tactics_copied + r.tactics_merged;
  return FI_OK;
}

FI_API fi_status fi_admin_export_cache(fi_runtime *rt, const char *file, const char *op,
                                       const char *arch, int64_t *copied) {
  return fi_admin_export(rt, file, op, arch, copied, NULL);
}

FI_API fi_status fi_admin_import(fi_runtime *rt, const char *file, fi_import_report *rep) {
  if (!rep) return rt_fail(FI_ERR_INVALID_ARGUMENT, "rep is NULL");
  memset(rep, 0, sizeof *rep);
  if (!file || !file[0]) return rt_fail(FI_ERR_INVALID_ARGUMENT, "file is empty");
  fi_status st;
  cache_store *s = user_store(rt, &st);
  if (!s) return st;
  char err[1024];
  cache_store *in = NULL;
  if (cache_store_open(file, CACHE_OPEN_READONLY, &in, err, sizeof err) != CACHE_OK)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "file: %s is not a usable cache: %s", file, err);
  /* Rows from elsewhere are judged as the runtime judges a row it loads. */
  cache_store_set_row_check(in, rt_row_check);
  cache_copy_report r;
  int rc = cache_store_copy_checked(in, s, NULL, NULL, rt->max_bytes, &r, err, sizeof err);
  cache_store_close(in);
  rep->copied = r.copied;
  rep->present = r.present;
  rep->refused = r.refused;
  rep->tactics_copied = r.tactics_copied;
  rep->tactics_merged = r.tactics_merged;
  rep->tactics_present = r.tactics_present;
  rep->tactics_refused = r.tactics_refused;
  snprintf(rep->detail, sizeof rep->detail, "%s", r.detail);
  if (rc != CACHE_OK) return rt_fail(FI_ERR_CACHE, "importing %s: %s", file, err);
  /* The cap holds for imported entries as for compiled ones. */
  int64_t n = 0;
  if (rt->max_bytes > 0 && cache_store_evict(s, rt->max_bytes, &n, err, sizeof err) != CACHE_OK)
    return rt_fail(FI_ERR_CACHE, "imported %s, but evicting down to the cap failed: %s", file,
                   err);
  atomic_fetch_add(&rt->evictions, n);
  rep->evicted = n;
  return FI_OK;
}

FI_API fi_status fi_admin_import_cache(fi_runtime *rt, const char *file, int64_t *copied,
                                       int64_t *skipped) {
  fi_import_report r;
  fi_status st = fi_admin_import(rt, file, &r);
  if (st != FI_OK) return st;
  if (copied) *copied = r.copied;
  if (skipped) *skipped = r.present + r.refused;
  return FI_OK;
}
