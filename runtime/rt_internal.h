/* rt_internal.h: the runtime object and what the runtime/ files share: errors,
 * logging, the kernel lookup path (memo -> store -> compile -> load). */
#ifndef RT_INTERNAL_H
#define RT_INTERNAL_H

#include <assert.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "cache_held.h"
#include "cache_memo.h"
#include "cache_store.h"
#include "fi_admin.h"
#include "fi_runtime.h"
#include "jit_key.h"
#include "rt_device.h"
#include "rt_env.h"

#ifndef FI_VERSION_STRING
#define FI_VERSION_STRING "0.0.0"
#endif

enum { RT_LOG_OFF = 0, RT_LOG_ERROR = 1, RT_LOG_WARN = 2, RT_LOG_INFO = 3, RT_LOG_DEBUG = 4 };

/* A kernel loaded on one device: what a memo hit hands to the launch. */
typedef struct rt_kernel {
  void *fn;          /* CUfunction / hipFunction_t */
  void *module;
  int device;        /* ordinal */
  const rt_device_i *backend;
  int resident;      /* blocks of the op's block size resident on the whole device; 0 = not asked yet */
  unsigned dyn_smem; /* dynamic shared memory bytes of every launch (jit_op.dyn_smem) */
  char key[256];     /* canonical key, for error messages */
} rt_kernel;

/* One compile in progress in this process (single flight between threads). */
typedef struct rt_inflight {
  uint8_t key_hash[16];
  struct rt_inflight *next;
} rt_inflight;

struct fi_runtime {
  int log_level;
  rt_env env;                /* every FI_* variable, read at create (rt_env.h) */
  char cache_path[4096];
  char system_path[4096];    /* read-only layer searched first; "" for none */
  cache_store *store;        /* the user layer; ":memory:" if the file was unusable */
  cache_store *system_store;
  int system_failed;         /* the system layer was refused (warned once) */
  int store_is_fallback;
  char fallback_reason[512];
  int store_flags;           /* CACHE_OPEN_ROLLBACK when FI_CACHE_JOURNAL=delete */
  int journal_explicit;      /* FI_CACHE_JOURNAL was set: no automatic choice */
  int64_t max_bytes;         /* FI_CACHE_MAX_BYTES: the user file's cap */
  int64_t claim_timeout_s;   /* FI_CACHE_CLAIM_TIMEOUT: last-resort takeover of a claim */
  unsigned fork_gen;         /* rt_fork_generation when this state was made */
  cache_memo *memo;
  /* Stored tactics found for per-call ops' keys (rt_tactic_cached): found once, as a plan
   * would, then read without a lock. tactic_gen moves on when this runtime stores or
   * clears tactics, so that a lookup made before is made again. */
  cache_memo *tactic_memo;
  atomic_llong tactic_gen;
  /* FI_AUTOTUNE=1: the keys this runtime has tried to measure (rt_tactic_plan), so that
   * each is measured once a process, whether or not it succeeded. */
  cache_memo *autotune_tried;
  pthread_mutex_t mu;        /* guards inflight, the device state load, store switch */
  cache_held mu_held;        /* who holds mu, for assert(rt_locked(rt)): rt_lock, rt_unlock */
  pthread_cond_t cv;
  rt_inflight *inflight;
  /* Device backends, by registry slot (rt_device.h): state created at first use. */
  struct rt_backend_state {
    void *state;
    int loaded; /* 0 not tried, 1 ok, -1 failed */
    char err[512];
  } dev[RT_MAX_BACKENDS];
  /* Statistics. */
  atomic_llong memo_hits, cache_hits, compiles, compile_failures, waits, evictions, repairs;
  atomic_llong tactic_hits, tactic_misses; /* rt_tactic_find: a stored tactic, or the rule */
  _Atomic double compile_ms_total, store_open_ms, lookup_ms, module_load_ms;
  /* Uses of stored binaries not yet written back (hits, last_used). */
  uint8_t (*touched)[16];
  int ntouched, captouched;
};

/* rt->mu, taken and let go only through these, so that a function that must run under
 * it can assert(rt_locked(rt)) (checked unless NDEBUG; cache_held.h). */
static inline void rt_lock(fi_runtime *rt) {
  pthread_mutex_lock(&rt->mu);
  cache_held_enter(&rt->mu_held);
}
static inline void rt_unlock(fi_runtime *rt) {
  assert(cache_held_by_me(&rt->mu_held));
  cache_held_leave(&rt->mu_held);
  pthread_mutex_unlock(&rt->mu);
}
/* Waits on rt->cv; the caller holds rt->mu (and holds it again on return). */
static inline void rt_wait(fi_runtime *rt) {
  assert(cache_held_by_me(&rt->mu_held));
  cache_held_leave(&rt->mu_held);
  pthread_cond_wait(&rt->cv, &rt->mu);
  cache_held_enter(&rt->mu_held);
}
static inline int rt_locked(const fi_runtime *rt) { return cache_held_by_me(&rt->mu_held); }

/* Errors: set the thread's message and return the status. */
fi_status rt_fail(fi_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Logging to stderr at or below the runtime's level. */
void rt_log(const fi_runtime *rt, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Ensures a binary for (key, arch) is in the store, compiling it if needed.
 * exact_compiler: only a binary of the installed compiler counts (prewarm);
 * otherwise any compiler's binary is used without loading a compiler.
 * *result (optional) says whether it was cached, compiled or waited for;
 * rec (optional) gets the record (free with cache_record_free). */
fi_status rt_binary_ensure(fi_runtime *rt, const jit_key *key, const char *arch, int exact_compiler,
                           fi_prewarm_result *result, double *compile_ms, cache_record *rec);

/* The loaded kernel for key on a device of the given backend: memo hit, or
 * the slow path (store, compile, load). */
fi_status rt_kernel_get_slow(fi_runtime *rt, const jit_key *key, const rt_device_i *be,
                             int device, uint64_t k0, uint64_t k1, rt_kernel **out);

/* fork(): bumped in every child by a pthread_atfork handler. A runtime whose
 * fork_gen differs is being used in a child and starts over (rt_after_fork). */
extern atomic_uint rt_fork_generation;
unsigned rt_fork_generation_init(void);
void rt_after_fork(fi_runtime *rt);
static inline void rt_fork_check(fi_runtime *rt) {
  if (atomic_load_explicit(&rt_fork_generation, memory_order_relaxed) != rt->fork_gen)
    rt_after_fork(rt);
}

/* The read-only system layer, opened at first need; NULL if none or refused. */
cache_store *rt_system_store(fi_runtime *rt);

static inline fi_status rt_kernel_get(fi_runtime *rt, const jit_key *key, const rt_device_i *be,
                                      int device, rt_kernel **out) {
  rt_fork_check(rt);
  uint64_t k0, k1;
  jit_key_fast(key, &k0, &k1);
  /* Backends share the memo; their device ordinals are kept apart by registry slot. */
  int slot = rt_device_slot(be) * RT_MAX_DEVICES + device;
  rt_kernel *k = (rt_kernel *)cache_memo_get(rt->memo, k0, k1, slot);
  if (k) {
    atomic_fetch_add_explicit(&rt->memo_hits, 1, memory_order_relaxed);
    *out = k;
    return FI_OK;
  }
  return rt_kernel_get_slow(rt, key, be, device, k0, k1, out);
}

/* The backend for a DLPack device type, loading it at first use;
 * FI_ERR_NO_DEVICE when its driver is missing. */
fi_status rt_backend(fi_runtime *rt, int dlpack_type, const rt_device_i **be, void **state);

/* The library path the environment gave compiler cc (NULL: its default names). */
const char *rt_compiler_library(const fi_runtime *rt, const void *cc);

/* The runtime's state of a registered backend (NULL before its first use). */
static inline void *rt_backend_state(const fi_runtime *rt, const rt_device_i *be) {
  return rt->dev[rt_device_slot(be)].state;
}

/* Launches a loaded kernel with params; reports failures with its key. */
fi_status rt_launch_kernel(fi_runtime *rt, const rt_kernel *k, const rt_launch *l, void *stream,
                           void *params, size_t bytes);

/* The one way an op whose key needs nothing of the device gets its kernel: the backend
 * of DLPack device type devtype (loaded at first use), then the memo, then the slow
 * path (store, compile, load). be and state (may be NULL) get the backend and its state. */
fi_status rt_kernel_for(fi_runtime *rt, int devtype, int device, const jit_key *key, rt_kernel **k,
                        const rt_device_i **be, void **state);

/* A 1-D launch of k: `blocks` blocks of `threads` threads, params its only argument. */
static inline fi_status rt_launch_1d(fi_runtime *rt, const rt_kernel *k, int64_t blocks, unsigned threads,
                                     void *stream, void *params, size_t bytes) {
  const rt_launch l = {{(unsigned)blocks, 1, 1}, {threads, 1, 1}, 0};
  return rt_launch_kernel(rt, k, &l, stream, params, bytes);
}

/* The user store, opened at first need (memory if the file is unusable). */
cache_store *rt_store(fi_runtime *rt);

/* The check every store the runtime opens applies to each row it reads from
 * a file (cache_row_check_fn): the row's hash and key_hash are those of its
 * own key, templates, arch, options, ABI and compiler; its entry is the name
 * that key gives its kernel; its binary says it was built for its arch. */
int rt_row_check(const cache_record *rec, char *why, size_t whylen);

/* How many blocks of `threads` threads of k fit on its whole device at once
 * (SMs x blocks per SM), asked of the driver once and remembered. */
fi_status rt_kernel_resident(fi_runtime *rt, rt_kernel *k, int threads, int *resident);

/* Writes pending hit counts to the store. */
void rt_flush_touches(fi_runtime *rt);

#endif
