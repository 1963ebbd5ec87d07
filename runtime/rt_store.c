/* rt_store.c: opening the cache layers: the writable user file (permissions,
 * network filesystems, corrupt files moved aside, memory as the last resort)
 * and the optional read-only system file; and starting afresh in a forked child. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache_ops.h"
#include "jit_key.h"
#include "rt_internal.h"

int rt_row_check(const cache_record *r, char *why, size_t whylen) {
  size_t ol = strlen(r->op);
  if (strncmp(r->key, "op=", 3) != 0 || strncmp(r->key + 3, r->op, ol) != 0 ||
      (r->key[3 + ol] != ';' && r->key[3 + ol] != 0)) {
    snprintf(why, whylen, "its op %.64s is not the op of its key", r->op);
    return -1;
  }
  uint8_t kh[16], h[16];
  jit_row_hashes(r->key, r->templates, r->arch, r->options, r->abi, r->compiler, kh, h);
  if (memcmp(kh, r->key_hash, 16) != 0 || memcmp(h, r->hash, 16) != 0) {
    snprintf(why, whylen, "its %s is not the hash of its key, arch and options",
             memcmp(h, r->hash, 16) != 0 ? "hash" : "key hash");
    return -1;
  }
  char entry[160];
  jit_entry_name_op(r->op, r->key_hash, entry, sizeof entry);
  if (strcmp(entry, r->entry) != 0) {
    snprintf(why, whylen, "its entry %.64s is not %s, the name its key gives the kernel",
             r->entry, entry);
    return -1;
  }
  if (r->binary && jit_binary_arch_check(r->binary, r->bytes, r->arch, why, whylen) != 0)
    return -1;
  return 0;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* open_user's fallback, under rt->mu like it. */
static cache_store *open_memory(fi_runtime *rt, const char *why) {
  assert(rt_locked(rt));
  snprintf(rt->fallback_reason, sizeof rt->fallback_reason, "%s", why);
  char err[256];
  cache_store *s = NULL;
  if (cache_store_open(":memory:", 0, &s, err, sizeof err) != CACHE_OK) s = NULL;
  rt->store_is_fallback = 1;
  return s;
}

/* FI_CACHE_UMASK, for a cache shared on purpose: the modes of the cache's own
 * directory and file. 0 with the modes set (private 0700/0600 when unset),
 * -1 when the value is refused (logged). */
static int cache_modes(fi_runtime *rt, mode_t *dir_mode, mode_t *file_mode, int *shared) {
  *dir_mode = 0700;
  *file_mode = 0600;
  *shared = 0;
  const int m = rt->env.umask; /* FI_CACHE_UMASK: -1 unset (rt_env.c warned of a malformed one) */
  if (m < 0) return 0;
  /* Judged before anything is created: a cache every user may write is a
   * way into every process that loads it, and an owner without rwx could
   * not use it. */
  if (!(m & 002) || (m & 0700)) {
    rt_log(rt, RT_LOG_WARN,
           "FI_CACHE_UMASK=%03o refused: %s; kernels are kept in memory only", (unsigned)m,
           !(m & 002) ? "the cache would be writable by every user (007 shares it with the group)"
                      : "the owner would lose access to the cache");
    return -1;
  }
  *dir_mode = 0777 & ~m;
  *file_mode = 0666 & ~m;
  *shared = !(m & 020);
  return 0;
}

/* The policy around cache_store_open for the user layer: once, under rt->mu. */
static cache_store *open_user(fi_runtime *rt) {
  assert(rt_locked(rt));
  char err[1024] = "";
  cache_store *s = NULL;
  if (!rt->cache_path[0])
    return open_memory(rt, "no cache path: none given, and neither FI_CACHE_PATH, "
                           "XDG_CACHE_HOME nor a home directory (HOME, or this user's passwd "
                           "entry) says where one goes");
  if (strcmp(rt->cache_path, ":memory:") == 0) {
    if (cache_store_open(":memory:", 0, &s, err, sizeof err) != CACHE_OK) s = NULL;
    return s;
  }
  mode_t dmode, fmode;
  int shared;
  if (cache_modes(rt, &dmode, &fmode, &shared) != 0)
    return open_memory(rt, "FI_CACHE_UMASK would make the cache writable by others");
  int pflags = CACHE_PATH_CREATE | (shared ? CACHE_PATH_GROUP_OK : 0);
  /* Code from this file runs in the host process: every directory from
   * the root, the file and its sidecars are checked and what is missing is
   * created, refusing whatever someone else could have written (ssh's
   * StrictModes). SQLite then opens the resolved path, which nobody else
   * can change. */
  char *path = NULL;
  if (cache_path_secure(rt->cache_path, pflags, dmode, fmode, &path, err, sizeof err) != 0 ||
      !path) {
    if (!path && !err[0]) snprintf(err, sizeof err, "the file could not be created");
    rt_log(rt, RT_LOG_WARN, "cache %s refused: %s; kernels are kept in memory only",
           rt->cache_path, err);
    free(path);
    return open_memory(rt, err);
  }
  int flags = rt->store_flags;
  if (!rt->journal_explicit && cache_fs_is_network(path)) {
    /* WAL needs shared memory between processes that NFS, Lustre and the
     * like do not provide: a rollback journal with file locks is safe there. */
    flags |= CACHE_OPEN_ROLLBACK;
    rt_log(rt, RT_LOG_INFO, "cache %s is on a network filesystem: rollback journal, not WAL",
           rt->cache_path);
  }
  int rc = cache_store_open(path, flags, &s, err, sizeof err);
  if (rc == CACHE_ERR_CORRUPT) {
    char moved[4200], err2[512];
    if (cache_move_aside(path, moved, sizeof moved, err2, sizeof err2) == 0) {
      rt_log(rt, RT_LOG_WARN, "cache %s unusable (%s): moved aside to %s, starting a new one",
             rt->cache_path, err, moved);
      atomic_fetch_add(&rt->repairs, 1);
      char *again = NULL;
      rc = cache_path_secure(path, pflags, dmode, fmode, &again, err, sizeof err);
      if (rc == CACHE_OK && again) rc = cache_store_open(again, flags, &s, err, sizeof err);
      else if (rc == CACHE_OK) rc = CACHE_ERR;
      free(again);
    } else {
      snprintf(err + strlen(err), sizeof err - strlen(err), "; moving it aside failed: %s", err2);
    }
  } else if (rc != CACHE_OK) {
    /* A complete cache that cannot be written (a read-only filesystem, a
     * directory of another mode) is still read, as the system layer is:
     * new kernels then stay in memory. */
    char err2[512];
    if (cache_store_open(path, CACHE_OPEN_READONLY, &s, err2, sizeof err2) == CACHE_OK) {
      rt_log(rt, RT_LOG_WARN,
             "cache %s cannot be written (%s): its kernels are used, new ones are kept in memory",
             rt->cache_path, err);
      free(path);
      return s;
    }
  }
  free(path);
  if (rc != CACHE_OK) {
    rt_log(rt, RT_LOG_WARN, "cache %s unusable (%s); kernels are kept in memory only",
           rt->cache_path, err);
    return open_memory(rt, err);
  }
  return s;
}

cache_store *rt_store(fi_runtime *rt) {
  /* Every way to the stores goes through here and rt_system_store: a
   * forked child gets its own, whichever call comes first. */
  rt_fork_check(rt);
  cache_store *s = __atomic_load_n(&rt->store, __ATOMIC_ACQUIRE);
  if (s) return s;
  rt_lock(rt);
  if (!rt->store) {
    double t0 = now_ms();
    cache_store *opened = open_user(rt);
    cache_store_set_row_check(opened, rt_row_check);
    double ms = now_ms() - t0;
    double old = atomic_load(&rt->store_open_ms);
    while (!atomic_compare_exchange_weak(&rt->store_open_ms, &old, old + ms)) {
    }
    __atomic_store_n(&rt->store, opened, __ATOMIC_RELEASE);
  }
  s = rt->store;
  rt_unlock(rt);
  return s;
}

/* A system layer is code somebody else prepared: every directory on its
 * path must be writable only by root or this user, and the file owned by
 * one of them and writable by nobody else. It is opened immutable: SQLite
 * reads the main file alone, so a -wal or -journal beside it, whoever put
 * it there, is never applied. */
cache_store *rt_system_store(fi_runtime *rt) {
  if (!rt->system_path[0]) return NULL;
  rt_fork_check(rt);
  cache_store *s = __atomic_load_n(&rt->system_store, __ATOMIC_ACQUIRE);
  if (s || __atomic_load_n(&rt->system_failed, __ATOMIC_ACQUIRE)) return s;
  rt_lock(rt);
  if (!rt->system_store && !rt->system_failed) {
    char err[1024] = "";
    char *path = NULL;
    cache_store *opened = NULL;
    int rc = cache_path_secure(rt->system_path, CACHE_PATH_ROOT_OK | CACHE_PATH_NO_SIDECARS, 0, 0,
                               &path, err, sizeof err);
    if (rc == CACHE_OK && !path) {
      snprintf(err, sizeof err, "no such file");
      rc = CACHE_ERR;
    }
    if (rc == CACHE_OK)
      rc = cache_store_open(path, CACHE_OPEN_IMMUTABLE, &opened, err, sizeof err);
    if (rc != CACHE_OK) {
      rt_log(rt, RT_LOG_WARN, "system cache %s not used: %s", rt->system_path, err);
      __atomic_store_n(&rt->system_failed, 1, __ATOMIC_RELEASE);
    } else {
      cache_store_set_row_check(opened, rt_row_check);
      char side[4200];
      struct stat st;
      for (int i = 0; i < 2; i++) {
        snprintf(side, sizeof side, "%s%s", path, i ? "-journal" : "-wal");
        if (lstat(side, &st) == 0 && st.st_size > 0)
          rt_log(rt, RT_LOG_WARN,
                 "system cache %s: %s is ignored (the system layer is read as one file; "
                 "`fi-cache export --to` makes one)",
                 rt->system_path, side);
      }
      __atomic_store_n(&rt->system_store, opened, __ATOMIC_RELEASE);
    }
    free(path);
  }
  s = rt->system_store;
  rt_unlock(rt);
  return s;
}

/* ---- fork ----
 * SQLite forbids using a connection in a child, and CUDA state does not
 * survive fork. A child starts over: new connections, an empty memo, the
 * device backends loaded anew (CUDA then reports, in a clear error, that it
 * cannot be used in a child of a process that initialized it). The parent's
 * connections were already closed by the cache's own fork handler
 * (cache_fork.c), which made sure no thread was inside SQLite at fork();
 * the stores that held them are freed here. Device modules are abandoned. */
atomic_uint rt_fork_generation;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void) { atomic_fetch_add(&rt_fork_generation, 1); }
static void register_atfork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

unsigned rt_fork_generation_init(void) {
  pthread_once(&atfork_once, register_atfork);
  return atomic_load(&rt_fork_generation);
}

void rt_after_fork(fi_runtime *rt) {
  unsigned gen = atomic_load(&rt_fork_generation);
  if (rt->fork_gen == gen) return;
  /* Only this thread exists in the child: no lock is needed, and a lock the
   * parent's other threads held at fork time must be made anew. */
  pthread_mutex_init(&rt->mu, NULL);
  memset(&rt->mu_held, 0, sizeof rt->mu_held);
  pthread_cond_init(&rt->cv, NULL);
  rt->inflight = NULL;
  if (rt->store) cache_store_close(rt->store);
  if (rt->system_store) cache_store_close(rt->system_store);
  rt->store = NULL;
  rt->system_store = NULL;
  rt->system_failed = 0;
  rt->store_is_fallback = 0;
  rt->ntouched = 0;
  cache_memo *fresh = cache_memo_create();
  if (fresh) rt->memo = fresh;
  memset(rt->dev, 0, sizeof rt->dev);
  rt->fork_gen = gen;
  rt_log(rt, RT_LOG_DEBUG, "runtime used in a forked child: cache reopened, kernels reloaded");
}

/* Writes the hits noted since the last flush (rt_kernel.c notes them) to the store. */
void rt_flush_touches(fi_runtime *rt) {
  rt_lock(rt);
  int n = rt->ntouched;
  rt->ntouched = 0;
  if (n > 0 && rt->store) {
    char err[512];
    if (cache_store_touch(rt->store, (const uint8_t(*)[16])rt->touched, n, err, sizeof err) !=
        CACHE_OK)
      rt_log(rt, RT_LOG_DEBUG, "recording cache use failed: %s", err);
  }
  rt_unlock(rt);
}
