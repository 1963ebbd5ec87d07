/* cache_tactics.h: stored tactics (issue 43), rows of the cache's tactics table: which
 * parameters of an op ran fastest for one shape bucket on one kind of device, driver,
 * compiler and runtime. One row a key; writes merge into it (the faster measurement wins,
 * a tactic found invalid is never chosen). Knows SQLite and nothing of CUDA or the ops. */
#ifndef CACHE_TACTICS_H
#define CACHE_TACTICS_H

#include <stdint.h>

#include "cache_store.h"

/* Longest text of each kind, terminating NUL included: a longer one is refused by put
 * and makes a stored row bad. */
enum {
  CACHE_TACTIC_SHORT = 64,  /* op, arch, driver, compiler, runtime */
  CACHE_TACTIC_NAME = 128,  /* device name */
  CACHE_TACTIC_TEXT = 256,  /* shape key, params, runner_up */
  CACHE_TACTIC_LIST = 2048, /* invalid: the tactics found invalid, '|' between them */
};

/* One row. The key (op .. runtime) says what was measured where; hash is XXH3-128 over
 * the key's fields, so that a row is found by it and bound to it. */
typedef struct cache_tactic {
  /* key */
  char op[CACHE_TACTIC_SHORT];
  int64_t bucket; /* token bucket (fi_tune_bucket): its upper bound */
  char shape[CACHE_TACTIC_TEXT]; /* the rest of the shape and the dtypes, canonical */
  char arch[CACHE_TACTIC_SHORT];
  char device[CACHE_TACTIC_NAME]; /* "NVIDIA H100 80GB HBM3" */
  int64_t sms;
  char driver[CACHE_TACTIC_SHORT];   /* "cuda-12.4" */
  char compiler[CACHE_TACTIC_SHORT]; /* that built the measured kernels; "" in a lookup: any */
  char runtime[CACHE_TACTIC_SHORT];  /* fi_runtime version and template set */
  uint8_t hash[16];
  /* value */
  char params[CACHE_TACTIC_TEXT]; /* the winner, "bm=128;bn=64;stages=3"; "" when none is valid */
  int valid;                      /* 1: params was validated and may be chosen */
  double time_us;                 /* the winner's time (median of its repeats) */
  double default_us;              /* the default tactic's time in the same measurement; 0 unknown */
  char runner_up[CACHE_TACTIC_TEXT]; /* the second fastest valid tactic, "" none */
  double runner_up_us;
  char invalid[CACHE_TACTIC_LIST]; /* tactics found invalid: never chosen */
  int64_t measured, updated;       /* unix seconds: first and last measurement */
  int64_t samples;                 /* measurements merged into the row */
  uint64_t checksum;               /* cache_tactic_checksum */
} cache_tactic;

/* The key fields of t hashed (XXH3-128, each field with its NUL, integers as decimal). */
void cache_tactic_hash(const cache_tactic *t, uint8_t out[16]);
/* XXH3-64 over the hash and every field, key and value (not the checksum itself). */
uint64_t cache_tactic_checksum(const cache_tactic *t);

/* 1 when params is a canonical tactic: "name=value" items joined by ';', names of
 * [a-z0-9_], values of [A-Za-z0-9_.+-], at most CACHE_TACTIC_TEXT - 1 bytes. */
int cache_tactic_params_ok(const char *params);

/* 0 when t is a well-formed row bound to its key: every text printable and within its
 * size, params canonical, times finite and not negative, valid 0 or 1 and true exactly
 * when params names a tactic not in invalid, hash the hash of its key and checksum its
 * checksum (when check_sums); else -1 with the reason in why. */
int cache_tactic_check(const cache_tactic *t, int check_sums, char *why, size_t whylen);

/* Fills *row from one measurement of the key in *key (its key fields are copied): params
 * with valid 1, or params found invalid with valid 0 (the row then records it in invalid
 * and names no winner), at now; hash and checksum set. -1 with why for bad input. */
int cache_tactic_measurement(cache_tactic *row, const cache_tactic *key, const char *params,
                             int valid, double time_us, double default_us,
                             const char *runner_up, double runner_up_us, int64_t now,
                             char *why, size_t whylen);

/* Merges row `in` into `into` (both of the same key, both checked): the invalid lists
 * joined; among both rows' winners and runners-up not found invalid, the fastest becomes
 * the winner (with the default's time of the row it came from) and the next one the
 * runner-up; samples added, measured the earlier, updated the later. A pure function.
 * -1 with why when the joined invalid list does not fit. */
int cache_tactic_merge(cache_tactic *into, const cache_tactic *in, char *why, size_t whylen);

/* Whether tactic p is in the '|'-separated list. */
int cache_tactic_listed(const char *list, const char *p);

/* Merges `in` (checked: a bad row is refused) into the row of its key in one write
 * transaction (BEGIN IMMEDIATE: processes writing the same key take turns, and none
 * loses another's measurement); a stored row that fails its check is replaced. */
int cache_tactic_put(cache_store *s, const cache_tactic *in, char *err, size_t errlen);

/* The row of key's key fields (compiler "": a row of any compiler, the latest updated).
 * Rows that fail cache_tactic_check are skipped. CACHE_OK with *out (which may name no
 * valid tactic), CACHE_NOT_FOUND, CACHE_ERR_CORRUPT when every matching row was bad
 * (the reason in err), CACHE_ERR. */
int cache_tactic_find(cache_store *s, const cache_tactic *key, cache_tactic *out, char *err,
                      size_t errlen);

/* Calls fn for each row matching op and arch (NULL: any; an arch matches its 'a' variant,
 * as for kernels), ordered by op, shape, bucket. A row that fails its check is passed
 * too, with its reason in why (NULL for a good row); fn returning nonzero stops. */
typedef int (*cache_tactic_fn)(const cache_tactic *t, const char *why, void *user);
int cache_tactic_list(cache_store *s, const char *op, const char *arch, cache_tactic_fn fn,
                      void *user, char *err, size_t errlen);

/* The single row whose hex hash starts with hex_prefix: CACHE_OK (*why_bad gets "" or
 * the reason the row is bad), CACHE_NOT_FOUND, CACHE_ERR ("ambiguous" for several). */
int cache_tactic_get_prefix(cache_store *s, const char *hex_prefix, cache_tactic *out,
                            char *why_bad, size_t whylen, char *err, size_t errlen);

/* Deletes rows matching op and arch (NULL: any); *removed gets the count. */
int cache_tactic_delete(cache_store *s, const char *op, const char *arch, int64_t *removed,
                        char *err, size_t errlen);

/* Number of rows. */
int cache_tactic_count(cache_store *s, int64_t *n, char *err, size_t errlen);

#endif
