/* rt_tune.h: stored tactics for the ops' kernel choosers (issue 43): the identity of a
 * device a tactic is keyed by, and the lookup an op makes when it plans (the read-only
 * system layer, then the user cache; never on the hot path). The bucket of a token count
 * is fi_tune_bucket (fi_admin.h). Measuring tactics on the GPU (fi_autotune) is not here:
 * the seam is fi_admin_tactic_put, which stores a measurement. */
#ifndef RT_TUNE_H
#define RT_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "cache_tactics.h"
#include "rt_internal.h"

/* What a tactic is measured on, read from the device backend and the compiler. */
typedef struct rt_tactic_id {
  char arch[32];
  char name[CACHE_TACTIC_NAME];
  char driver[CACHE_TACTIC_SHORT];
  char compiler[CACHE_TACTIC_SHORT]; /* "" when this process has loaded no compiler */
  int64_t sms;
} rt_tactic_id;

/* The identity of device ordinal `device` of DLPack device type devtype. 0, or -1 when a
 * part is unknown (no driver, a backend without `identity`): no tactic is used then. */
int rt_tactic_identity(fi_runtime *rt, int devtype, int device, rt_tactic_id *id);

/* This runtime's part of a tactic's key: its version and its template set's hash. */
void rt_tactic_runtime(char *buf, size_t n);

/* The stored tactic for (op, shape, bucket) measured on dev (dev->compiler NULL or "":
 * any): the system layer's row first, then the user cache's; a row whose winner the other
 * layer lists as invalid is passed over, a bad row (checksum, key) ignored. 1 with *out and
 * *layer ("system", "user") set, or 0 (the rule chooses); counted in rt->tactic_hits /
 * tactic_misses and said at FI_LOG_LEVEL=debug. Never fails a caller: errors read as 0. */
int rt_tactic_lookup(fi_runtime *rt, const char *op, const char *shape, int64_t bucket,
                     const fi_tactic_device *dev, cache_tactic *out, const char **layer);

/* The seam for the per-op choosers, called at plan time: the winner's params of the stored
 * tactic for (op, shape_key, bucket) on the device (devtype, device) copied into params
 * (n bytes), 1; or 0 when there is none (or it does not fit), and the op's rule chooses. */
int rt_tactic_find(fi_runtime *rt, const char *op, const char *shape_key, int64_t bucket,
                   int devtype, int device, char *params, size_t n);

/* For ops without a plan (a call chooses its kernel, as the MoE GEMM does): the stored
 * tactic's params for (op, the shape whose numbers are fields[0..nfields), bucket) on
 * (devtype, device), found in the cache at the first call of a key and memoized; later
 * calls read the memo (no lock, no allocation, no formatting). shape_fn writes the
 * shape's canonical text from the fields, called on the first call only. 1 with *params
 * (valid while the runtime lives), or 0: the rule chooses. *first (may be NULL): 1 when
 * this call looked in the cache (the key's first lookup since tactics last changed). */
int rt_tactic_cached(fi_runtime *rt, const char *op, const int64_t *fields, int nfields, int64_t bucket,
                     int devtype, int device, void (*shape_fn)(const int64_t *fields, char *buf, size_t n),
                     const char **params, int *first);

/* A tactic was stored or cleared through this runtime: memoized lookups are made again. */
void rt_tactic_changed(fi_runtime *rt);

#endif
