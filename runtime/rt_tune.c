/* rt_tune.c: stored tactics on the runtime's side (issue 43): token buckets, the device
 * identity a tactic is keyed by, and the layered lookup the op choosers call at plan time.
 * The GPU half (fi_autotune: validate, time and store each op's tactics) is rt_autotune.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache_memo.h"

#include "jit_compiler.h"
#include "jit_templates.h"
#include "rt_tune.h"

FI_API int64_t fi_tune_bucket(int64_t tokens) {
  if (tokens <= 0) return 0;
  if (tokens > ((int64_t)1 << 62)) return INT64_MAX;
  if (tokens > 256 && tokens <= 4096) return (tokens + 255) / 256 * 256;
  int64_t b = 1;
  while (b < tokens) b <<= 1;
  return b;
}

void rt_tactic_runtime(char *buf, size_t n) {
  /* The kernels' sources are part of what was measured: a changed template set is
   * another runtime for its tactics, as it is for its binaries. */
  snprintf(buf, n, "%s/%.12s", FI_VERSION_STRING, jit_template_set_hash());
}

int rt_tactic_identity(fi_runtime *rt, int devtype, int device, rt_tactic_id *id) {
  memset(id, 0, sizeof *id);
  const rt_device_i *be;
  void *state;
  char err[512];
  int sms = 0;
  if (rt_backend(rt, devtype, &be, &state) != FI_OK) return -1;
  if (be->arch(state, device, id->arch, sizeof id->arch, err, sizeof err) != 0 ||
      be->sm_count(state, device, &sms) != 0) {
    rt_log(rt, RT_LOG_DEBUG, "no stored tactic: %s device %d unknown", be->name, device);
    return -1;
  }
  if (!be->identity) {
    rt_log(rt, RT_LOG_DEBUG, "no stored tactic: the %s backend does not name its devices", be->name);
    return -1;
  }
  if (be->identity(state, device, id->name, sizeof id->name, id->driver, sizeof id->driver, err,
                   sizeof err) != 0) {
    rt_log(rt, RT_LOG_DEBUG, "no stored tactic: %s", err);
    return -1;
  }
  id->sms = sms;
  /* The compiler of this process, if it loaded one; none loaded (every kernel from the
   * cache): a row of any compiler's kernels. Loading it here would cost what a cache hit
   * saves. */
  const jit_compiler *cc = jit_compiler_for_arch(id->arch);
  snprintf(id->compiler, sizeof id->compiler, "%s", cc && cc->identity() ? cc->identity() : "");
  return 0;
}

/* dst = src when it fits (cap bytes with the NUL); 0 when src is NULL or too long. */
static int fit(char *dst, size_t cap, const char *src) {
  if (!src || strlen(src) >= cap) return 0;
  memset(dst, 0, cap);
  memcpy(dst, src, strlen(src));
  return 1;
}

/* The key of a lookup in a cache_tactic; 0 when a field does not fit any row. */
static int lookup_key(cache_tactic *k, const char *op, const char *shape, int64_t bucket,
                      const fi_tactic_device *dev) {
  memset(k, 0, sizeof *k);
  k->bucket = bucket;
  k->sms = dev->sms;
  rt_tactic_runtime(k->runtime, sizeof k->runtime);
  return fit(k->op, sizeof k->op, op) && fit(k->shape, sizeof k->shape, shape) &&
         fit(k->arch, sizeof k->arch, dev->arch) && fit(k->device, sizeof k->device, dev->name) &&
         fit(k->driver, sizeof k->driver, dev->driver) &&
         fit(k->compiler, sizeof k->compiler, dev->compiler ? dev->compiler : "");
}

/* One layer's row of the key, or 0; a bad row is said at debug level (verify reports it). */
static int layer_row(fi_runtime *rt, cache_store *s, const cache_tactic *key, cache_tactic *row) {
  char err[512];
  int rc = s ? cache_tactic_find(s, key, row, err, sizeof err) : CACHE_NOT_FOUND;
  if (rc == CACHE_OK) return 1;
  if (rc != CACHE_NOT_FOUND)
    rt_log(rt, RT_LOG_DEBUG, "stored tactic of %s not used: %s", key->op, err);
  return 0;
}

int rt_tactic_lookup(fi_runtime *rt, const char *op, const char *shape, int64_t bucket,
                     const fi_tactic_device *dev, cache_tactic *out, const char **layer) {
  cache_tactic key, row[2];
  int have[2] = {0, 0}, pick = -1;
  rt_fork_check(rt);
  if (dev && lookup_key(&key, op, shape, bucket, dev)) {
    /* The order of kernel lookups: the shipped system layer, then the user cache. */
    cache_store *layers[2] = {rt_system_store(rt), rt_store(rt)};
    for (int i = 0; i < 2; i++) have[i] = layer_row(rt, layers[i], &key, &row[i]);
    /* A tactic either layer found invalid is never chosen, whichever layer names it. */
    for (int i = 0; i < 2 && pick < 0; i++)
      if (have[i] && row[i].valid && !(have[1 - i] && cache_tactic_listed(row[1 - i].invalid, row[i].params)))
        pick = i;
  }
  static const char *const names[2] = {"system", "user"};
  if (pick < 0) {
    atomic_fetch_add(&rt->tactic_misses, 1);
    rt_log(rt, RT_LOG_DEBUG, "tactic of %s %s bucket %lld: none stored%s, the rule chooses",
           op ? op : "?", shape ? shape : "?", (long long)bucket,
           have[0] || have[1] ? " (only invalid ones)" : "");
    return 0;
  }
  atomic_fetch_add(&rt->tactic_hits, 1);
  rt_log(rt, RT_LOG_DEBUG, "tactic of %s %s bucket %lld: %s from the %s layer (%.2f us, default %.2f us)",
         op, shape, (long long)bucket, row[pick].params, names[pick], row[pick].time_us,
         row[pick].default_us);
  if (out) *out = row[pick];
  if (layer) *layer = names[pick];
  return 1;
}

int rt_tactic_find(fi_runtime *rt, const char *op, const char *shape_key, int64_t bucket,
                   int devtype, int device, char *params, size_t n) {
  rt_tactic_id id;
  cache_tactic t;
  if (rt_tactic_identity(rt, devtype, device, &id) != 0) {
    atomic_fetch_add(&rt->tactic_misses, 1);
    return 0;
  }
  const fi_tactic_device dev = {id.arch, id.name, id.sms, id.driver, id.compiler};
  if (!rt_tactic_lookup(rt, op, shape_key, bucket, &dev, &t, NULL)) return 0;
  if (!params || strlen(t.params) >= n) return 0;
  memcpy(params, t.params, strlen(t.params) + 1);
  return 1;
}

void rt_tactic_changed(fi_runtime *rt) { atomic_fetch_add(&rt->tactic_gen, 1); }

/* A memoized lookup: found or not, and the params. */
typedef struct tactic_memo_v {
  int found;
  char params[CACHE_TACTIC_TEXT];
} tactic_memo_v;

int rt_tactic_cached(fi_runtime *rt, const char *op, const int64_t *fields, int nfields, int64_t bucket,
                     int devtype, int device, void (*shape_fn)(const int64_t *fields, char *buf, size_t n),
                     const char **params, int *first) {
  if (first) *first = 0;
  /* The key: the op's name, its shape's numbers, the bucket, the device type and the
   * generation of this runtime's stored tactics. */
  int64_t blob[24];
  if (nfields > 18) return 0;
  XXH64_hash_t name = XXH3_64bits(op, strlen(op));
  blob[0] = (int64_t)name, blob[1] = bucket, blob[2] = devtype, blob[3] = atomic_load(&rt->tactic_gen);
  memcpy(blob + 4, fields, sizeof(int64_t) * (size_t)nfields);
  const XXH128_hash_t h = XXH3_128bits(blob, sizeof(int64_t) * (size_t)(4 + nfields));
  const tactic_memo_v *v = cache_memo_get(rt->tactic_memo, h.low64, h.high64, device);
  if (!v) {
    tactic_memo_v *n = calloc(1, sizeof *n);
    if (!n) return 0;
    char shape[CACHE_TACTIC_TEXT];
    shape_fn(fields, shape, sizeof shape);
    n->found = rt_tactic_find(rt, op, shape, bucket, devtype, device, n->params, sizeof n->params);
    v = cache_memo_put(rt->tactic_memo, h.low64, h.high64, device, n);
    if (v != n) free(n);
    if (!v) return 0;
    if (first) *first = v == n;
  }
  if (!v->found) return 0;
  *params = v->params;
  return 1;
}
