/* rt_kernel.c: the slow path behind a memo miss: the store, then a compile with
 * one compile per key in flight, then the device load and the memo entry. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jit_compiler.h"
#include "jit_render.h"
#include "cache_ops.h"
#include "fi_params.h"
#include "jit_templates.h"
#include "rt_internal.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Wall-clock microseconds, comparable between processes: the debug log
 * stamps stores and the waits that end on them with it. */
static long long wall_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static void add_ms(_Atomic double *total, double ms) {
  double old = atomic_load(total);
  while (!atomic_compare_exchange_weak(total, &old, old + ms)) {
  }
}

static int inflight_has(const fi_runtime *rt, const uint8_t h[16]) {
  assert(rt_locked(rt));
  for (const rt_inflight *f = rt->inflight; f; f = f->next)
    if (memcmp(f->key_hash, h, 16) == 0) return 1;
  return 0;
}

/* Claims key_hash for this thread; waits while another thread holds it.
 * Returns 1 if it had to wait. */
static int inflight_claim(fi_runtime *rt, rt_inflight *node, const uint8_t h[16]) {
  int waited = 0;
  rt_lock(rt);
  while (inflight_has(rt, h)) {
    waited = 1;
    rt_wait(rt);
  }
  memcpy(node->key_hash, h, 16);
  node->next = rt->inflight;
  rt->inflight = node;
  rt_unlock(rt);
  return waited;
}

static void inflight_release(fi_runtime *rt, rt_inflight *node) {
  rt_lock(rt);
  for (rt_inflight **p = &rt->inflight; *p; p = &(*p)->next)
    if (*p == node) {
      *p = node->next;
      break;
    }
  pthread_cond_broadcast(&rt->cv);
  rt_unlock(rt);
}

static void note_touch(fi_runtime *rt, const uint8_t hash[16]) {
  rt_lock(rt);
  if (rt->ntouched == rt->captouched) {
    int cap = rt->captouched ? rt->captouched * 2 : 16;
    void *p = realloc(rt->touched, (size_t)cap * 16);
    if (p) {
      rt->touched = p;
      rt->captouched = cap;
    }
  }
  if (rt->ntouched < rt->captouched) memcpy(rt->touched[rt->ntouched++], hash, 16);
  rt_unlock(rt);
}

/* must_store: prewarm's compile is worthless unless it reaches the file, so a
 * failed write is its error; a kernel call runs the binary from memory. */
static fi_status compile_and_store(fi_runtime *rt, cache_store *store, const jit_key *key,
                                   const jit_compiler *cc, jit_target *t, const char *canon,
                                   int must_store, double *compile_ms, cache_record *rec_out) {
  char err[16384];
  uint8_t key_hash[16], hash[16];
  jit_key_hashes(key, t, key_hash, hash);
  char entry[128];
  jit_entry_name(key, key_hash, entry, sizeof entry);
  char *src = NULL;
  if (jit_render(key, entry, &src, err, sizeof err) != 0)
    return rt_fail(FI_ERR_INTERNAL, "%s: %s", canon, err);
  jit_compile_out co;
  double t0 = now_ms();
  int rc = cc->compile(src, "fi_kernel.cu", t->arch, &co, err, sizeof err);
  double ms = now_ms() - t0;
  if (rc != 0) {
    free(src);
    jit_compile_out_free(&co);
    atomic_fetch_add(&rt->compile_failures, 1);
    rt_log(rt, RT_LOG_ERROR, "compile of %s for %s failed", canon, t->arch);
    return rt_fail(FI_ERR_COMPILE, "compiling %s for %s: %s", canon, t->arch, err);
  }
  atomic_fetch_add(&rt->compiles, 1);
  add_ms(&rt->compile_ms_total, ms);
  if (compile_ms) *compile_ms = ms;
  rt_log(rt, RT_LOG_DEBUG, "compiled %s for %s with %s in %.1f ms (%zu bytes)", canon, t->arch,
         t->compiler, ms, co.bytes);
  cache_record rec;
  memset(&rec, 0, sizeof rec);
  memcpy(rec.hash, hash, 16);
  memcpy(rec.key_hash, key_hash, 16);
  rec.op = key->op->name;
  rec.key = canon;
  rec.arch = t->arch;
  rec.compiler = t->compiler;
  rec.options = t->options;
  rec.entry = entry;
  rec.source = src;
  rec.binary = co.binary;
  rec.bytes = co.bytes;
  rec.compile_ms = ms;
  rec.templates = t->template_hash;
  const char *abi = jit_abi_string();
  rec.abi = abi;
  /* A row the row check would refuse at its next load is not worth storing:
   * it would be dropped and compiled again by every process. A user cache that can
   * only be read (a read-only filesystem) keeps new kernels in memory, as said once
   * when it was opened. */
  char why[256];
  const int ro = cache_store_readonly(store);
  int put_rc = ro ? CACHE_ERR : rt_row_check(&rec, why, sizeof why) == 0 ? CACHE_OK : CACHE_ERR;
  if (ro)
    snprintf(err, sizeof err, "the cache %s can only be read", rt->cache_path);
  else if (put_rc != CACHE_OK)
    snprintf(err, sizeof err, "the compiled binary fails the check of a stored row: %s", why);
  else
    put_rc = cache_store_put(store, &rec, err, sizeof err);
  if (put_rc == CACHE_OK)
    rt_log(rt, RT_LOG_DEBUG, "stored %s at %lld", canon, wall_us());
  if (put_rc != CACHE_OK && ro) {
    rt_log(rt, RT_LOG_DEBUG, "%s compiled; %s", canon, err);
  } else if (put_rc != CACHE_OK) {
    rt_log(rt, RT_LOG_WARN, "storing %s failed (%s); it stays in memory for this process", canon,
           err);
    /* Release the claim, or other processes would wait for a row that never comes. */
    char err2[256];
    cache_store_unclaim(store, key_hash, err2, sizeof err2);
  } else if (rt->max_bytes > 0) {
    int64_t evicted = 0;
    if (cache_store_evict(store, rt->max_bytes, &evicted, err, sizeof err) != CACHE_OK)
      rt_log(rt, RT_LOG_DEBUG, "eviction failed: %s", err);
    if (evicted > 0) {
      atomic_fetch_add(&rt->evictions, evicted);
      rt_log(rt, RT_LOG_INFO, "evicted %lld least recently used kernels (cap %lld bytes)",
             (long long)evicted, (long long)rt->max_bytes);
    }
  }
  fi_status st = FI_OK;
  if (put_rc != CACHE_OK && must_store)
    st = rt_fail(FI_ERR_CACHE, "compiled %s for %s but could not store it in %s: %s", canon,
                 t->arch, rt->cache_path, err);
  if (rec_out && st == FI_OK) {
    /* Hand back owned copies, as cache_store_find would. */
    memset(rec_out, 0, sizeof *rec_out);
    memcpy(rec_out->hash, hash, 16);
    memcpy(rec_out->key_hash, key_hash, 16);
    rec_out->op = strdup(key->op->name);
    rec_out->key = strdup(canon);
    rec_out->arch = strdup(t->arch);
    rec_out->compiler = strdup(t->compiler);
    rec_out->options = strdup(t->options);
    rec_out->entry = strdup(entry);
    rec_out->source = src;
    src = NULL;
    rec_out->binary = co.binary;
    co.binary = NULL;
    rec_out->bytes = co.bytes;
    rec_out->compile_ms = ms;
    if (!rec_out->op || !rec_out->key || !rec_out->arch || !rec_out->compiler ||
        !rec_out->options || !rec_out->entry) {
      cache_record_free(rec_out);
      st = rt_fail(FI_ERR_OUT_OF_MEMORY, "out of memory after compiling %s", canon);
    }
  }
  free(src);
  jit_compile_out_free(&co);
  return st;
}

/* Looks key_hash up in the system layer, then the user layer. */
static int find_layers(fi_runtime *rt, cache_store *sys, cache_store *user,
                       const uint8_t key_hash[16], const char *prefer, const char *need,
                       const char *canon, const char *want_entry, const char *arch,
                       cache_record *found) {
  cache_store *layers[2] = {sys, user};
  char err[1024];
  for (int i = 0; i < 2; i++) {
    if (!layers[i]) continue;
    double t0 = now_ms();
    int r = cache_store_find(layers[i], key_hash, prefer, found, err, sizeof err);
    add_ms(&rt->lookup_ms, now_ms() - t0);
    if (r == CACHE_OK && need && strcmp(found->compiler, need) != 0) {
      cache_record_free(found); /* another compiler's binary: prewarm builds our own */
      r = CACHE_NOT_FOUND;
    }
    /* The store's row check bound the row to its own key; this binds it to
     * the key asked for: the entry this key's kernel has and the arch
     * compiled for. Once per load from the file, never on a memo hit. */
    if (r == CACHE_OK && (strcmp(found->entry, want_entry) != 0 || strcmp(found->arch, arch) != 0)) {
      snprintf(err, sizeof err, "row %s for %s (%s) is not the kernel %s for %s", found->entry,
               found->arch, found->key, want_entry, arch);
      cache_record_free(found);
      r = CACHE_ERR_CORRUPT;
    }
    if (r == CACHE_OK) return i;
    if (r == CACHE_ERR_CORRUPT) {
      atomic_fetch_add(&rt->repairs, 1);
      rt_log(rt, RT_LOG_WARN, "cached binary of %s dropped and rebuilt: %s", canon, err);
    } else if (r != CACHE_NOT_FOUND) {
      rt_log(rt, RT_LOG_WARN, "cache lookup of %s failed: %s", canon, err);
    }
  }
  return -1;
}

/* Sleeps with a growing step while another process compiles: short at
 * first (its compile may be about to finish), never more than 16 ms, which
 * bounds how late a waiter notices the binary. */
static void backoff(int *step_us) {
  struct timespec ts = {0, (long)*step_us * 1000};
  nanosleep(&ts, NULL);
  if (*step_us < 16000) *step_us *= 2;
}

fi_status rt_binary_ensure(fi_runtime *rt, const jit_key *key, const char *arch, int exact_compiler,
                           fi_prewarm_result *result, double *compile_ms, cache_record *rec) {
  if (key->op->target_arch) {
    const char *a = key->op->target_arch(arch);
    if (!a) return rt_fail(FI_ERR_UNSUPPORTED, "op %s has no kernel for %s", key->op->name, arch);
    arch = a;
  }
  const jit_compiler *cc = jit_compiler_for_arch(arch);
  if (!cc) return rt_fail(FI_ERR_UNSUPPORTED, "arch %s: no compiler targets it", arch);
  char canon[512];
  if (jit_key_canonical(key, canon, sizeof canon) < 0)
    return rt_fail(FI_ERR_INTERNAL, "key of op %s cannot be written", key->op->name);
  rt_fork_check(rt);
  jit_target t = {arch, cc->options(arch), jit_template_set_hash(), NULL};
  uint8_t key_hash[16];
  jit_key_hashes(key, &t, key_hash, NULL);
  cache_store *user = rt_store(rt);
  if (!user) return rt_fail(FI_ERR_CACHE, "no cache store could be opened, not even in memory");
  cache_store *sys = rt_system_store(rt);
  if (compile_ms) *compile_ms = 0;

  char err[1024];
  if (exact_compiler && cc->load(rt_compiler_library(rt, cc), err, sizeof err) != 0)
    return rt_fail(FI_ERR_COMPILE, "compiler for %s unavailable: %s", arch, err);
  rt_inflight node;
  int waited = inflight_claim(rt, &node, key_hash);
  fi_status st = FI_OK;
  cache_record found;
  memset(&found, 0, sizeof found);
  /* Prefer the binary of the compiler this process has loaded, if it has
   * loaded one; a cache hit must not load a 100 MB compiler just to ask it
   * its version. */
  const char *prefer = cc->identity()[0] ? cc->identity() : NULL;
  const char *need = exact_compiler ? cc->identity() : NULL;
  char want_entry[128];
  jit_entry_name(key, key_hash, want_entry, sizeof want_entry);
  int layer = find_layers(rt, sys, user, key_hash, prefer, need, canon, want_entry, arch, &found);
  if (layer < 0) {
    if (cc->load(rt_compiler_library(rt, cc), err, sizeof err) != 0) {
      st = rt_fail(FI_ERR_COMPILE, "%s is not cached for %s and no compiler is available: %s",
                   canon, arch, err);
      goto out;
    }
    if (cc->check_arch(arch, err, sizeof err) != 0) {
      st = rt_fail(FI_ERR_UNSUPPORTED, "%s", err);
      goto out;
    }
    t.compiler = cc->identity();
    /* One compile per key across processes: a claim row in the user file.
     * A process that finds the claim held waits for the binary instead. */
    int step_us = 500, outcome = CACHE_CLAIM_OURS, took_over = 0, counted = 0;
    for (;;) {
      if (cache_store_claim(user, key_hash, need, rt->claim_timeout_s, &outcome, &took_over, err,
                            sizeof err) != CACHE_OK) {
        /* The file cannot take claims (read-only, full): compile anyway. */
        rt_log(rt, RT_LOG_DEBUG, "claim of %s failed (%s); compiling without one", canon, err);
        outcome = CACHE_CLAIM_OURS;
      }
      if (outcome != CACHE_CLAIM_BUSY) break;
      if (!counted) {
        counted = waited = 1;
        rt_log(rt, RT_LOG_DEBUG, "waiting for another process compiling %s", canon);
      }
      backoff(&step_us);
    }
    if (took_over)
      rt_log(rt, RT_LOG_INFO, "took over the compile of %s from a process that is gone", canon);
    if (outcome == CACHE_CLAIM_READY) {
      layer = find_layers(rt, NULL, user, key_hash, prefer, need, canon, want_entry, arch, &found);
      if (counted && layer >= 0)
        rt_log(rt, RT_LOG_DEBUG, "loaded %s after waiting, at %lld", canon, wall_us());
    }
    if (layer < 0) {
      st = compile_and_store(rt, user, key, cc, &t, canon, exact_compiler, compile_ms, rec);
      if (st != FI_OK) cache_store_unclaim(user, key_hash, err, sizeof err);
      if (st == FI_OK && result) *result = FI_PREWARM_COMPILED;
      goto out;
    }
  }
  atomic_fetch_add(&rt->cache_hits, 1);
  if (!exact_compiler && layer == 1) note_touch(rt, found.hash); /* prewarm finding it is not a use */
  if (result) *result = waited ? FI_PREWARM_WAITED : FI_PREWARM_CACHED;
  if (rec)
    *rec = found;
  else
    cache_record_free(&found);
out:
  if (waited) atomic_fetch_add(&rt->waits, 1);
  inflight_release(rt, &node);
  return st;
}

fi_status rt_kernel_get_slow(fi_runtime *rt, const jit_key *key, const rt_device_i *be,
                             int device, uint64_t k0, uint64_t k1, rt_kernel **out) {
  void *state = rt_backend_state(rt, be);
  char arch[32], err[1024];
  if (be->arch(state, device, arch, sizeof arch, err, sizeof err) != 0)
    return rt_fail(FI_ERR_NO_DEVICE, "%s device %d: %s", be->name, device, err);
  rt_kernel *k = calloc(1, sizeof *k);
  if (!k) return rt_fail(FI_ERR_OUT_OF_MEMORY, "out of memory loading a kernel");
  k->device = device;
  k->backend = be;
  k->dyn_smem = key->op->dyn_smem ? key->op->dyn_smem(key) : 0;
  fi_status st = FI_OK;
  /* Two attempts: a cached binary the driver rejects (built for a driver
   * newer than this one, damaged in a way its checksum cannot see) is
   * dropped from the cache and compiled again, once. */
  for (int attempt = 0; attempt < 2; attempt++) {
    cache_record rec;
    fi_prewarm_result how = FI_PREWARM_CACHED;
    st = rt_binary_ensure(rt, key, arch, attempt, &how, NULL, &rec);
    if (st != FI_OK) break;
    snprintf(k->key, sizeof k->key, "%s", rec.key);
    double t0 = now_ms();
    int lrc = be->module_load(state, device, rec.binary, rec.bytes, rec.entry, k->dyn_smem, &k->module,
                              &k->fn, err, sizeof err);
    add_ms(&rt->module_load_ms, now_ms() - t0);
    if (lrc == 0) {
      cache_record_free(&rec);
      st = FI_OK;
      break;
    }
    st = rt_fail(FI_ERR_DEVICE, "loading %s (%s, %s) on %s device %d: %s", rec.key, rec.arch,
                 rec.compiler, be->name, device, err);
    if (attempt == 0 && how != FI_PREWARM_COMPILED) {
      char err2[512];
      rt_log(rt, RT_LOG_WARN, "the driver rejected the cached binary of %s (%s): rebuilding it",
             rec.key, err);
      if (rt_store(rt)) cache_store_remove(rt_store(rt), rec.hash, err2, sizeof err2);
      atomic_fetch_add(&rt->repairs, 1);
      cache_record_free(&rec);
      continue;
    }
    cache_record_free(&rec);
    break;
  }
  if (st != FI_OK) {
    free(k);
    return st;
  }
  int slot = rt_device_slot(be) * RT_MAX_DEVICES + device;
  rt_kernel *stored = cache_memo_put(rt->memo, k0, k1, slot, k);
  if (stored != k) {
    be->module_unload(state, device, k->module);
    free(k);
    if (!stored) return rt_fail(FI_ERR_OUT_OF_MEMORY, "out of memory in the kernel memo");
  }
  *out = stored;
  return FI_OK;
}

fi_status rt_kernel_resident(fi_runtime *rt, rt_kernel *k, int threads, int *resident) {
  int r = __atomic_load_n(&k->resident, __ATOMIC_RELAXED);
  if (r > 0) {
    *resident = r;
    return FI_OK;
  }
  void *state = rt_backend_state(rt, k->backend);
  char err[512];
  int bps = 0, sms = 0;
  if (k->backend->occupancy(state, k->device, k->fn, threads, k->dyn_smem, &bps, err, sizeof err) != 0)
    return rt_fail(FI_ERR_DEVICE, "occupancy of %s: %s", k->key, err);
  if (k->backend->sm_count(state, k->device, &sms) != 0 || sms <= 0)
    return rt_fail(FI_ERR_DEVICE, "SM count of %s device %d unknown", k->backend->name, k->device);
  r = (bps > 0 ? bps : 1) * sms;
  /* Every thread computes the same value: a plain store is enough. */
  __atomic_store_n(&k->resident, r, __ATOMIC_RELAXED);
  *resident = r;
  return FI_OK;
}

fi_status rt_kernel_for(fi_runtime *rt, int devtype, int device, const jit_key *key, rt_kernel **k,
                        const rt_device_i **be, void **state) {
  const rt_device_i *b;
  void *s;
  fi_status st = rt_backend(rt, devtype, &b, &s);
  if (st != FI_OK) return st;
  if (be) *be = b;
  if (state) *state = s;
  return rt_kernel_get(rt, key, b, device, k);
}

fi_status rt_launch_kernel(fi_runtime *rt, const rt_kernel *k, const rt_launch *l, void *stream,
                           void *params, size_t bytes) {
  void *state = rt_backend_state(rt, k->backend);
  char err[512];
  rt_launch dl;
  if (k->dyn_smem > l->shared_bytes) { /* the kernel's own need, whatever the caller set */
    dl = *l;
    dl.shared_bytes = k->dyn_smem;
    l = &dl;
  }
  if (k->backend->launch(state, k->device, k->fn, l, stream, params, bytes, err, sizeof err) != 0)
    return rt_fail(FI_ERR_DEVICE, "launch of %s on %s device %d failed: %s", k->key,
                   k->backend->name, k->device, err);
  return FI_OK;
}
