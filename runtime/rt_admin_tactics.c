/* rt_admin_tactics.c: the admin API of stored tactics: storing a measurement, the lookup
 * the ops make (with an explicit device), listing, showing and clearing rows. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cache_tactics.h"
#include "rt_tune.h"

/* A stored row as the public struct; its strings point into t. */
static void to_public(const cache_tactic *t, const char *layer, const char *problem, fi_tactic *p) {
  memset(p, 0, sizeof *p);
  cache_hash_hex(t->hash, p->hash);
  p->layer = layer;
  p->op = t->op;
  p->shape = t->shape;
  p->bucket = t->bucket;
  p->dev = (fi_tactic_device){t->arch, t->device, t->sms, t->driver, t->compiler};
  p->runtime = t->runtime;
  p->params = t->params;
  p->valid = t->valid;
  p->time_us = t->time_us;
  p->default_us = t->default_us;
  p->runner_up = t->runner_up;
  p->runner_up_us = t->runner_up_us;
  p->invalid = t->invalid;
  p->measured = t->measured;
  p->updated = t->updated;
  p->samples = t->samples;
  p->problem = problem;
}

/* Copies a string field of a measurement into the row; a message when it cannot. */
static fi_status field(char *dst, size_t cap, const char *src, const char *name) {
  if (!src || !src[0]) return rt_fail(FI_ERR_INVALID_ARGUMENT, "tactic: %s is empty", name);
  if (strlen(src) >= cap)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "tactic: %s is longer than %zu bytes", name, cap - 1);
  snprintf(dst, cap, "%s", src);
  return FI_OK;
}

FI_API fi_status fi_admin_tactic_put(fi_runtime *rt, const fi_tactic *m) {
  if (!rt || !m) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s is NULL", rt ? "m" : "rt");
  cache_tactic key, row;
  memset(&key, 0, sizeof key);
  fi_status st = field(key.op, sizeof key.op, m->op, "op");
  if (st == FI_OK) st = field(key.shape, sizeof key.shape, m->shape, "shape");
  if (st == FI_OK) st = field(key.arch, sizeof key.arch, m->dev.arch, "dev.arch");
  if (st == FI_OK) st = field(key.device, sizeof key.device, m->dev.name, "dev.name");
  if (st == FI_OK) st = field(key.driver, sizeof key.driver, m->dev.driver, "dev.driver");
  if (st == FI_OK) st = field(key.compiler, sizeof key.compiler, m->dev.compiler, "dev.compiler");
  if (st != FI_OK) return st;
  key.bucket = m->bucket;
  key.sms = m->dev.sms;
  rt_tactic_runtime(key.runtime, sizeof key.runtime);
  char why[256];
  if (cache_tactic_measurement(&row, &key, m->params, m->valid, m->time_us, m->default_us,
                               m->runner_up, m->runner_up_us, (int64_t)time(NULL), why, sizeof why) != 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "tactic: %s", why);
  cache_store *s = rt_store(rt);
  if (!s) return rt_fail(FI_ERR_CACHE, "no cache store");
  char err[1024];
  if (cache_tactic_put(s, &row, err, sizeof err) != CACHE_OK)
    return rt_fail(FI_ERR_CACHE, "storing a tactic of %s in %s: %s", key.op, rt->cache_path, err);
  rt_log(rt, RT_LOG_DEBUG, "stored tactic %s of %s %s bucket %lld (%s)", row.params[0] ? row.params : row.invalid,
         key.op, key.shape, (long long)key.bucket, row.valid ? "valid" : "invalid");
  rt_tactic_changed(rt);
  return FI_OK;
}

FI_API fi_status fi_admin_tactic_find(fi_runtime *rt, const char *op, const char *shape,
                                      int64_t bucket, const fi_tactic_device *dev, int *found,
                                      fi_tactic_fn fn, void *user) {
  if (found) *found = 0;
  if (!rt || !dev || !found)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s is NULL", !rt ? "rt" : !dev ? "dev" : "found");
  cache_tactic t;
  const char *layer = NULL;
  *found = rt_tactic_lookup(rt, op, shape, bucket, dev, &t, &layer);
  if (*found && fn) {
    fi_tactic p;
    to_public(&t, layer, NULL, &p);
    fn(&p, user);
  }
  return FI_OK;
}

typedef struct list_ctx {
  fi_tactic_fn fn;
  void *user;
  const char *layer;
  int stopped;
} list_ctx;

static int list_cb(const cache_tactic *t, const char *why, void *user) {
  list_ctx *c = user;
  fi_tactic p;
  to_public(t, c->layer, why, &p);
  return c->stopped = c->fn(&p, c->user);
}

FI_API fi_status fi_admin_tactic_list(fi_runtime *rt, const char *op, const char *arch,
                                      fi_tactic_fn fn, void *user) {
  if (!rt || !fn) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s is NULL", rt ? "fn" : "rt");
  cache_store *layers[2] = {rt_system_store(rt), rt_store(rt)};
  const char *names[2] = {"system", "user"};
  if (!layers[1]) return rt_fail(FI_ERR_CACHE, "no cache store");
  list_ctx c = {fn, user, NULL, 0};
  char err[1024];
  for (int i = 0; i < 2 && !c.stopped; i++) {
    if (!layers[i]) continue;
    c.layer = names[i];
    if (cache_tactic_list(layers[i], op, arch, list_cb, &c, err, sizeof err) != CACHE_OK)
      return rt_fail(FI_ERR_CACHE, "listing the tactics of %s: %s",
                     i ? rt->cache_path : rt->system_path, err);
  }
  return FI_OK;
}

FI_API fi_status fi_admin_tactic_get(fi_runtime *rt, const char *hex_prefix, fi_tactic_fn fn,
                                     void *user) {
  if (!rt || !hex_prefix || !hex_prefix[0])
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s is empty", rt ? "hash prefix" : "rt");
  cache_store *layers[2] = {rt_store(rt), rt_system_store(rt)};
  const char *names[2] = {"user", "system"};
  if (!layers[0]) return rt_fail(FI_ERR_CACHE, "no cache store");
  char err[1024], why[256];
  cache_tactic t;
  for (int i = 0; i < 2; i++) {
    int rc = layers[i] ? cache_tactic_get_prefix(layers[i], hex_prefix, &t, why, sizeof why, err, sizeof err)
                       : CACHE_NOT_FOUND;
    if (rc == CACHE_NOT_FOUND) continue;
    if (rc != CACHE_OK) return rt_fail(FI_ERR_INVALID_ARGUMENT, "tactic hash prefix '%s': %s", hex_prefix, err);
    if (fn) {
      fi_tactic p;
      to_public(&t, names[i], why[0] ? why : NULL, &p);
      fn(&p, user);
    }
    return FI_OK;
  }
  return rt_fail(FI_ERR_INVALID_ARGUMENT, "hash prefix: no tactic starts with '%s'", hex_prefix);
}

FI_API fi_status fi_admin_tactic_clear(fi_runtime *rt, const char *op, const char *arch,
                                       int64_t *removed) {
  if (removed) *removed = 0;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "rt is NULL");
  cache_store *s = rt_store(rt);
  if (!s) return rt_fail(FI_ERR_CACHE, "no cache store");
  char err[1024];
  if (cache_tactic_delete(s, op, arch, removed, err, sizeof err) != CACHE_OK)
    return rt_fail(FI_ERR_CACHE, "clearing the tactics of %s: %s", rt->cache_path, err);
  rt_tactic_changed(rt);
  return FI_OK;
}
