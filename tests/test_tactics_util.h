/* test_tactics_util.h: what the tests of stored tactics share: a runtime on a cache file
 * (and a system layer), the device they plant rows for, and planting one measurement.
 * Rows are planted, not measured: timing a tactic needs a GPU, and these tests run on CPUs. */
#ifndef TEST_TACTICS_UTIL_H
#define TEST_TACTICS_UTIL_H

#include "cache_tactics.h"
#include "fi_admin.h"
#include "fi_runtime.h"
#include "test_cache_util.h"

/* A fresh directory and three cache paths in it (td_end(d.dir) removes them). */
typedef struct tt_dir {
  char dir[64], a[128], b[128], ship[128];
} tt_dir;
static inline void tt_dir_begin(tt_dir *d) {
  td_begin(d->dir);
  snprintf(d->a, sizeof d->a, "%s/a.db", d->dir);
  snprintf(d->b, sizeof d->b, "%s/b.db", d->dir);
  snprintf(d->ship, sizeof d->ship, "%s/ship.db", d->dir);
}

/* A runtime on the user cache at path, with the system layer sys ("" or NULL: none). */
static inline fi_runtime *tt_rt(const char *path, const char *sys) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = path;
  o.system_cache_path = sys ? sys : "";
  fi_runtime *rt = NULL;
  return fi_runtime_create(&o, &rt) == FI_OK ? rt : NULL;
}

/* tt_dir_begin, and a runtime on its first cache (a), no system layer. */
static inline fi_runtime *tt_open(tt_dir *d) {
  tt_dir_begin(d);
  return tt_rt(d->a, NULL);
}

/* The card the planted rows say they were measured on. */
static const fi_tactic_device TT_H100 = {"sm_90", "NVIDIA H100 80GB HBM3", 132, "cuda-12.4",
                                         "nvrtc-13.0"};

/* One measurement of (op, shape, bucket) on dev: params valid or found invalid. */
static inline fi_status tt_put(fi_runtime *rt, const char *op, const char *shape, int64_t bucket,
                               const fi_tactic_device *dev, const char *params, int valid,
                               double us, double default_us, const char *runner_up,
                               double runner_up_us) {
  const fi_tactic m = {.op = op, .shape = shape, .bucket = bucket, .dev = *dev, .params = params,
                       .valid = valid, .time_us = us, .default_us = default_us,
                       .runner_up = runner_up, .runner_up_us = runner_up_us};
  return fi_admin_tactic_put(rt, &m);
}

/* What a lookup found: the winner's params ("" none) and its layer. */
typedef struct tt_found {
  char params[CACHE_TACTIC_TEXT], layer[16];
  double time_us;
  int64_t samples;
} tt_found;

static inline int tt_found_cb(const fi_tactic *t, void *user) {
  tt_found *f = user;
  snprintf(f->params, sizeof f->params, "%s", t->params);
  snprintf(f->layer, sizeof f->layer, "%s", t->layer);
  f->time_us = t->time_us;
  f->samples = t->samples;
  return 0;
}

/* The params the ops would use for (op, shape, bucket) on dev; "" when none. */
static inline const char *tt_find(fi_runtime *rt, const char *op, const char *shape,
                                  int64_t bucket, const fi_tactic_device *dev, tt_found *f) {
  memset(f, 0, sizeof *f);
  int found = 0;
  if (fi_admin_tactic_find(rt, op, shape, bucket, dev, &found, tt_found_cb, f) != FI_OK) return "(error)";
  return found ? f->params : "";
}

#endif
