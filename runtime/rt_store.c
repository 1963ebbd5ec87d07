/* rt_store.c: opening the cache layers: the writable user file (permissions,
 * network filesystems, corrupt files moved aside, memory as the last resort)
 * and the optional read-only system file; and starting afresh in a forked child. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache_ops.h"
#include "rt_internal.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* With FI_CACHE_UMASK (a cache shared on purpose) the directory and file are
 * created here with that umask; cache_store_open then finds them existing
 * and keeps their modes (SQLite gives -wal and -shm the file's mode). */
static void create_shared(const char *path, mode_t mask) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(dir, 0777 & ~mask) == 0) chmod(dir, 0777 & ~mask);
      *p = '/';
    }
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666 & ~mask);
  if (fd >= 0) {
    if (fchmod(fd, 0666 & ~mask) != 0) { /* best effort: the open below reports problems */
    }
    close(fd);
  }
}

static cache_store *open_memory(fi_runtime *rt, const char *why) {
  snprintf(rt->fallback_reason, sizeof rt->fallback_reason, "%s", why);
  char err[256];
  cache_store *s = NULL;
  if (cache_store_open(":memory:", 0, &s, err, sizeof err) != CACHE_OK) s = NULL;
  rt->store_is_fallback = 1;
  return s;
}

/* The policy around cache_store_open for the user layer. Called once, under rt->mu. */
static cache_store *open_user(fi_runtime *rt) {
  char err[1024] = "";
  cache_store *s = NULL;
  if (strcmp(rt->cache_path, ":memory:") == 0) {
    if (cache_store_open(":memory:", 0, &s, err, sizeof err) != CACHE_OK) s = NULL;
    return s;
  }
  const int m = rt->env.umask; /* FI_CACHE_UMASK, -1 unset (rt_env.c warned of a bad one) */
  int shared = 0;
  if (m >= 0) {
    shared = (m & 020) == 0; /* group may write */
    create_shared(rt->cache_path, (mode_t)m);
  }
  /* Code from this file runs in the host process: refuse a file or
   * directory that someone else could have written (ssh's StrictModes). */
  if (cache_check_permissions(rt->cache_path, shared, err, sizeof err) != 0) {
    rt_log(rt, RT_LOG_WARN, "cache %s refused: %s; kernels are kept in memory only",
           rt->cache_path, err);
    return open_memory(rt, err);
  }
  int flags = rt->store_flags;
  if (!rt->journal_explicit && cache_fs_is_network(rt->cache_path)) {
    /* WAL needs shared memory between processes that NFS, Lustre and the
     * like do not provide: a rollback journal with file locks is safe there. */
    flags |= CACHE_OPEN_ROLLBACK;
    rt_log(rt, RT_LOG_INFO, "cache %s is on a network filesystem: rollback journal, not WAL",
           rt->cache_path);
  }
  int rc = cache_store_open(rt->cache_path, flags, &s, err, sizeof err);
  if (rc == CACHE_ERR_CORRUPT) {
    char moved[4200], err2[512];
    if (cache_move_aside(rt->cache_path, moved, sizeof moved, err2, sizeof err2) == 0) {
      rt_log(rt, RT_LOG_WARN, "cache %s unusable (%s): moved aside to %s, starting a new one",
             rt->cache_path, err, moved);
      atomic_fetch_add(&rt->repairs, 1);
      rc = cache_store_open(rt->cache_path, flags, &s, err, sizeof err);
    } else {
      snprintf(err + strlen(err), sizeof err - strlen(err), "; moving it aside failed: %s", err2);
    }
  }
  if (rc != CACHE_OK) {
    rt_log(rt, RT_LOG_WARN, "cache %s unusable (%s); kernels are kept in memory only",
           rt->cache_path, err);
    return open_memory(rt, err);
  }
  return s;
}

cache_store *rt_store(fi_runtime *rt) {
  cache_store *s = __atomic_load_n(&rt->store, __ATOMIC_ACQUIRE);
  if (s) return s;
  pthread_mutex_lock(&rt->mu);
  if (!rt->store) {
    double t0 = now_ms();
    cache_store *opened = open_user(rt);
    double ms = now_ms() - t0;
    double old = atomic_load(&rt->store_open_ms);
    while (!atomic_compare_exchange_weak(&rt->store_open_ms, &old, old + ms)) {
    }
    __atomic_store_n(&rt->store, opened, __ATOMIC_RELEASE);
  }
  s = rt->store;
  pthread_mutex_unlock(&rt->mu);
  return s;
}

/* A system layer is code somebody else prepared: it must not be writable by
 * anyone but its owner, who must be root or this user. */
static int system_file_ok(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) != 0) {
    snprintf(err, errlen, "%s", strerror(errno));
    return 0;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "not a regular file");
    return 0;
  }
  if (st.st_mode & 022) {
    snprintf(err, errlen, "group- or world-writable (mode %03o)", (unsigned)(st.st_mode & 0777));
    return 0;
  }
  if (st.st_uid != 0 && st.st_uid != getuid()) {
    snprintf(err, errlen, "owned by uid %u, neither root nor this user", (unsigned)st.st_uid);
    return 0;
  }
  return 1;
}

cache_store *rt_system_store(fi_runtime *rt) {
  if (!rt->system_path[0]) return NULL;
  cache_store *s = __atomic_load_n(&rt->system_store, __ATOMIC_ACQUIRE);
  if (s || __atomic_load_n(&rt->system_failed, __ATOMIC_ACQUIRE)) return s;
  pthread_mutex_lock(&rt->mu);
  if (!rt->system_store && !rt->system_failed) {
    char err[1024] = "";
    cache_store *opened = NULL;
    if (!system_file_ok(rt->system_path, err, sizeof err) ||
        cache_store_open(rt->system_path, CACHE_OPEN_READONLY, &opened, err, sizeof err) !=
            CACHE_OK) {
      rt_log(rt, RT_LOG_WARN, "system cache %s not used: %s", rt->system_path, err);
      __atomic_store_n(&rt->system_failed, 1, __ATOMIC_RELEASE);
    } else {
      __atomic_store_n(&rt->system_store, opened, __ATOMIC_RELEASE);
    }
  }
  s = rt->system_store;
  pthread_mutex_unlock(&rt->mu);
  return s;
}

/* ---- fork ----
 * SQLite forbids using a connection in a child, and CUDA state does not
 * survive fork. A child starts over: new connections, an empty memo, the
 * device backends loaded anew (CUDA then reports, in a clear error, that it
 * cannot be used in a child of a process that initialized it). The parent's
 * objects are abandoned, not closed: closing a connection in the child
 * would touch locks the parent holds. */
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
  pthread_cond_init(&rt->cv, NULL);
  rt->inflight = NULL;
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
