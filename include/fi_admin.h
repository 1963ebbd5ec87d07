/* fi_admin.h: the small administration API behind fi-cache and fi-bench
 * (prewarm, list, show, export, clear, stats). Serving engines need only fi_runtime.h. */
#ifndef FI_ADMIN_H
#define FI_ADMIN_H

#include "fi_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Number of registered ops (rmsnorm, ...) and the name of op i. */
FI_API int fi_admin_op_count(void);
FI_API const char *fi_admin_op_name(int i);

/** Number of registered configurations of op (what prewarm compiles), or -1
 * if no such op. */
FI_API int fi_admin_config_count(const char *op);

/** Canonical key string of configuration idx of op, written into buf. */
FI_API fi_status fi_admin_config_key(const char *op, int idx, char *buf, size_t buflen);

/** Is arch a target the runtime can compile for ("sm_80", "sm_90", "sm_90a",
 * "gfx90a", "gfx942", ...)? */
FI_API int fi_admin_arch_supported(const char *arch);

/** Model presets (fi-cache prewarm --preset NAME): the kernels one serving step of a
 * model needs, found by asking each op's kernel choice for the model's shapes (batches of
 * 1 to 256, prompts of 1 to 8192 tokens, contexts to 16384). Count, name ("llama3-8b",
 * ...) and a one-line description; NULL for an index out of range. */
FI_API int fi_admin_preset_count(void);
FI_API const char *fi_admin_preset_name(int i);
FI_API const char *fi_admin_preset_about(int i);

/** One registered configuration: what fi_admin_prewarm takes. op is a static string. */
typedef struct fi_preset_config {
  const char *op;
  int idx;
} fi_preset_config;

/** The configurations preset's serving step uses on arch: up to cap into out, the
 * number there are into *n (more than cap: call again with a larger out). */
FI_API fi_status fi_admin_preset_configs(const char *preset, const char *arch, fi_preset_config *out,
                                         int cap, int *n);

/** What fi-cache tune --preset measures for a model at `tokens` tokens: the i-th (op,
 * shape) of fi_autotune, bf16: a mixture-of-experts model's two expert GEMMs (at the tile
 * fi_fused_moe's rule takes there), then, where its attention is this library's, batch
 * decode in CUDA-graph mode (tokens: the batch, up to 512) and causal batch prefill (tokens:
 * the longest request's query tokens), then the serving step's sampler (top-k + top-p from
 * float32 logits over the model's vocabulary; tokens: the batch, up to 512). 0 with *op
 * (static) and shape; 1 where job i measures nothing at this token count (decode and
 * sampling past 512); -1 past the last job, or for bad arguments. */
FI_API int fi_admin_preset_tune_job(const char *preset, int i, int64_t tokens, const char **op, char *shape,
                                    size_t n);

/** Whether the compiler for arch, loaded now if need be, can target it:
 * FI_OK; FI_ERR_UNSUPPORTED with its range in fi_last_error ("nvrtc-13.0 does
 * not support sm_70 (supported: sm_75 to sm_121)"); FI_ERR_COMPILE when no
 * such compiler can be loaded; FI_ERR_INVALID_ARGUMENT for an unknown arch. */
FI_API fi_status fi_admin_arch_check(fi_runtime *rt, const char *arch);

/** Result of one prewarm step. */
typedef enum fi_prewarm_result {
  FI_PREWARM_COMPILED = 0, /* compiled now and stored */
  FI_PREWARM_CACHED = 1,   /* already in the cache: nothing done */
  FI_PREWARM_WAITED = 2,   /* another thread or process compiled it meanwhile */
  FI_PREWARM_SKIPPED = 3   /* the op has no kernel for this arch (wgmma kernels off Hopper) */
} fi_prewarm_result;

/** Ensures configuration idx of op is compiled for arch and stored in the
 * cache. Thread-safe: fi-cache calls it from -j threads on one runtime. */
FI_API fi_status fi_admin_prewarm(fi_runtime *rt, const char *op, int idx, const char *arch,
                                  fi_prewarm_result *result, double *compile_ms);

/** One cache entry as listed. Strings are valid during the callback only. */
typedef struct fi_cache_entry {
  char hash[33];          /* 32 hex digits */
  const char *op;
  const char *key;        /* canonical key string */
  const char *arch;
  const char *compiler;   /* "nvrtc-13.0", "hiprtc-5.2" */
  const char *entry;      /* the kernel's symbol */
  const char *layer;      /* "user" or "system" */
  int64_t bytes;
  int64_t created;        /* unix seconds */
  int64_t last_used;      /* unix seconds */
  int64_t hits;
  double compile_ms;
} fi_cache_entry;

typedef int (*fi_cache_entry_fn)(const fi_cache_entry *e, void *user); /* nonzero stops */

/** Lists cache entries, filtered by op and arch when those are non-NULL. */
FI_API fi_status fi_admin_list(fi_runtime *rt, const char *op, const char *arch,
                               fi_cache_entry_fn fn, void *user);

/** Finds the one entry whose hash starts with hex_prefix (FI_ERR_INVALID_ARGUMENT
 * if none or several match). On success *binary / *source are malloc'ed
 * copies the caller frees with fi_admin_free (either may be NULL if unwanted). */
FI_API fi_status fi_admin_get(fi_runtime *rt, const char *hex_prefix, fi_cache_entry_fn fn,
                              void *user, void **binary, size_t *binary_bytes, char **source);
FI_API void fi_admin_free(void *p);

/** Deletes entries matching op and arch (NULL: any); *removed gets the count. */
FI_API fi_status fi_admin_clear(fi_runtime *rt, const char *op, const char *arch,
                                int64_t *removed);

/** Totals of the cache file and of this runtime's activity. */
typedef struct fi_admin_stats {
  int64_t entries, bytes;          /* in the user cache file */
  int64_t file_bytes;              /* size of the database file */
  int64_t memo_hits, cache_hits, compiles, compile_failures;
  double compile_ms;
  const char *path;                /* the user cache path in use */
  int fallback;                    /* 1: that file was unusable; kernels are kept in memory */
  const char *fallback_reason;     /* why, when fallback is 1 ("" otherwise) */
  /* Where this runtime's slow paths spent their time, in total. */
  double store_open_ms, lookup_ms, module_load_ms;
  int64_t tactics;                 /* stored tactics in the user cache file */
  /* Lookups of a stored tactic by this runtime (at plan time): found one, or found none
   * and the op's own rule chose. Both 0: no op asked, the tuner was never engaged. */
  int64_t tactic_hits, tactic_misses;
} fi_admin_stats;
FI_API fi_status fi_admin_stats_get(fi_runtime *rt, fi_admin_stats *st);

/** Garbage collection of the user cache. max_bytes < 0: the runtime's cap
 * (FI_CACHE_MAX_BYTES, default 2 GiB); 0: no size limit; else that cap,
 * least recently used entries first. stale: also remove entries no current
 * runtime would load (another NVRTC or hiprtc version than the one installed
 * here, another template set or kernel ABI). */
FI_API fi_status fi_admin_gc(fi_runtime *rt, int64_t max_bytes, int stale, int64_t *evicted,
                             int64_t *stale_removed);

typedef struct fi_verify_report {
  int integrity_ok;    /* SQLite's integrity_check passed */
  int64_t rows;        /* entries examined */
  int64_t bad_rows;    /* entries whose binary fails its checksum or length */
  int64_t repaired;    /* with repair: entries removed, or the file rebuilt */
  char detail[1024];   /* the first problems, one per line */
  int64_t tactic_rows, tactic_bad_rows; /* the stored tactics' part of rows and bad_rows: a bad
                                           one fails its checksum or is not bound to its key */
} fi_verify_report;

/** Checks the user cache's integrity and every binary; with repair, mends
 * it (drops bad entries; rebuilds a damaged file from what still reads). */
FI_API fi_status fi_admin_verify(fi_runtime *rt, int repair, fi_verify_report *rep);

/** Writes the user cache's entries matching op and arch (NULL: all) to a new
 * standalone cache file (rollback journal, mode 0644), suitable as a system
 * layer: FI_CACHE_SYSTEM_PATH. Replaces file atomically. The stored tactics
 * matching op and arch go with them. */
FI_API fi_status fi_admin_export_cache(fi_runtime *rt, const char *file, const char *op,
                                       const char *arch, int64_t *copied);
/** The same, counting the kernels and the tactics written. */
FI_API fi_status fi_admin_export(fi_runtime *rt, const char *file, const char *op,
                                 const char *arch, int64_t *kernels, int64_t *tactics);

/** Merges another cache file into the user cache (checksums verified;
 * entries already present are kept). skipped counts both the entries
 * present and those refused; fi_admin_import says which and why. */
FI_API fi_status fi_admin_import_cache(fi_runtime *rt, const char *file, int64_t *copied,
                                       int64_t *skipped);

typedef struct fi_import_report {
  int64_t copied;    /* entries added to the user cache */
  int64_t present;   /* entries the user cache already had */
  int64_t refused;   /* entries left out: damaged, not bound to their key (checksum, hash,
                        entry name or the binary's own arch), or larger than the cap */
  int64_t evicted;   /* entries evicted afterwards to keep the file under FI_CACHE_MAX_BYTES */
  char detail[1024]; /* the first refused entries, one a line, each with its reason */
  /* The file's stored tactics: new here, merged into a row of the same key (the faster
   * measurement kept, invalid tactics of both kept invalid), here already as they are,
   * refused (checksum, not bound to their key). */
  int64_t tactics_copied, tactics_merged, tactics_present, tactics_refused;
} fi_import_report;

/** fi_admin_import_cache with the whole story: every entry of file is checked
 * as the runtime checks a row it loads, and the user cache's size cap
 * (FI_CACHE_MAX_BYTES) holds afterwards. */
FI_API fi_status fi_admin_import(fi_runtime *rt, const char *file, fi_import_report *rep);

/* ---- stored tactics (the autotuner's results, issue 43) ----
 * A tactic is the set of an op's tuning parameters ("bm=128;bn=64;stages=3"), stored in
 * the cache's tactics table for one key: op, shape, token bucket, and what it was measured
 * on (arch, device name, SM count, driver, compiler, runtime). One row a key: the fastest
 * valid tactic measured, its time, the default's time, the runner-up; a tactic found
 * invalid (wrong output) is listed as such and never chosen. Ops look tactics up when
 * they plan, the read-only system layer first, then the user cache; a row of another
 * device name, SM count, driver or runtime is never used. fi_autotune (below) measures. */

/** The token bucket of a call with `tokens` tokens (rows, queries, routed tokens): the
 * upper bound of its bucket, to which a count rounds up. Powers of two up to 256 (1, 2,
 * 4, ..., 256); then steps of 256 up to 4096 (512, 768, ..., 4096); then powers of two
 * with no cap (8192, 16384, 32768, ...): 16384 tokens has a bucket of its own, 16385
 * rounds to 32768. 0 for tokens <= 0, INT64_MAX above 2^62. A pure function of the
 * count: a call's bucket depends on its shape alone, and a tactic is measured at its
 * bucket's bound, the largest count it serves. */
FI_API int64_t fi_tune_bucket(int64_t tokens);

/** What a tactic was measured on. */
typedef struct fi_tactic_device {
  const char *arch;     /* "sm_90" */
  const char *name;     /* "NVIDIA H100 80GB HBM3" */
  int64_t sms;          /* SM count */
  const char *driver;   /* "cuda-12.4" */
  const char *compiler; /* that built the measured kernels ("nvrtc-13.0"); in a lookup,
                           NULL or "" accepts any (a process that loaded no compiler) */
} fi_tactic_device;

/** One stored tactic. Strings are valid during the callback only. As the input of
 * fi_admin_tactic_put, one measurement: op, shape, bucket, dev, params, valid, the times
 * and runner_up are read, the rest ignored. */
typedef struct fi_tactic {
  char hash[33];         /* 32 hex digits: the key's hash */
  const char *layer;     /* "user" or "system" */
  const char *op;
  const char *shape;     /* the dtypes and the shape but the token count, canonical
                            ("dtype=bf16;heads=32/8;head_dim=128") */
  int64_t bucket;        /* fi_tune_bucket */
  fi_tactic_device dev;
  const char *runtime;   /* fi_runtime version / template set of the measured kernels */
  const char *params;    /* the winner; "" when no valid tactic is known */
  int valid;             /* params may be chosen (put: 0 records params as invalid) */
  double time_us;        /* the winner's time */
  double default_us;     /* the default tactic's time in the same measurement (0: unknown) */
  const char *runner_up; /* the next fastest valid tactic, "" none */
  double runner_up_us;
  const char *invalid;   /* the tactics found invalid, '|' between them: never chosen */
  int64_t measured, updated; /* unix seconds: first and last measurement */
  int64_t samples;       /* measurements merged into the row */
  const char *problem;   /* NULL; or why the row is bad (checksum, hash not its key's):
                            such a row is never used, and verify reports it */
} fi_tactic;

typedef int (*fi_tactic_fn)(const fi_tactic *t, void *user); /* nonzero stops */

/** Stores one measurement into the user cache, merged with the row of its key in one
 * transaction (processes storing the same key at once each keep the other's: the
 * fastest valid tactic wins, samples add up); the runtime's own version goes into the
 * key. The tuner's write; the CPU tests plant rows with it, since timing needs a GPU. */
FI_API fi_status fi_admin_tactic_put(fi_runtime *rt, const fi_tactic *m);

/** The tactic the ops would use for (op, shape, bucket) on dev: *found 1 and fn called
 * with it, or *found 0 (the op's rule chooses). Counted in tactic_hits/tactic_misses. */
FI_API fi_status fi_admin_tactic_find(fi_runtime *rt, const char *op, const char *shape,
                                      int64_t bucket, const fi_tactic_device *dev, int *found,
                                      fi_tactic_fn fn, void *user);

/** Lists stored tactics of op and arch (NULL: any), the system layer first, bad rows
 * included (their problem set). */
FI_API fi_status fi_admin_tactic_list(fi_runtime *rt, const char *op, const char *arch,
                                      fi_tactic_fn fn, void *user);

/** The one tactic whose hash starts with hex_prefix (user cache, then system layer). */
FI_API fi_status fi_admin_tactic_get(fi_runtime *rt, const char *hex_prefix, fi_tactic_fn fn,
                                     void *user);

/** Deletes the user cache's tactics of op and arch (NULL: any); kernels stay. */
FI_API fi_status fi_admin_tactic_clear(fi_runtime *rt, const char *op, const char *arch,
                                       int64_t *removed);

/* ---- the autotuner (issue 43): measure an op's tactics on this GPU and store the winner ----
 * For one op and shape at one token bucket: every tactic that can run the call is run
 * on the same random inputs, each into its own output buffer poisoned first, and its
 * output compared with the rule's (the default tactic's): equal bits, or within the
 * stated tolerance where the summation order differs (bf16 1e-2, f16 2e-3 of the
 * output's largest magnitude; a NaN, an unwritten row or a written padding row fails);
 * sampled token ids must be the rule's bit for bit.
 * A tactic that fails is stored as invalid and never chosen. The valid ones are timed
 * with CUDA events, the last-level cache flushed before every run (a write of twice its
 * size), after warm-up runs, taking turns round by round; each time is the median of
 * its runs. The fastest goes into the user cache's tactics table with its time, the
 * rule's time and the runner-up, for the device's name, SM count, driver, compiler and
 * this runtime (fi_admin_tactic_*), where every later process's call of that shape and
 * bucket finds it. Needs a CUDA device; minutes for a model's shapes. */

/** Ops fi_autotune measures, and the shape text each takes (keys in any order):
 *  "moe_gemm": dtype=bf16|f16;k=K;n=N;experts=E;top_k=TOPK;gated=0|1;gather=0|1;tile=64|128|256
 *    (fi_moe_grouped_gemm: k the input width, n the output width, SwiGLU when gated,
 *    the tokens' rows gathered when gather; routes drawn uniformly, top_k distinct
 *    experts a token; tokens: the layer's). Tactics: mma.sync block rows x columns x
 *    stages, wgmma on sm_90.
 *  "batch_decode": q=bf16|f16;kv=(q's);heads=H/K;head_dim=64|128|256;page=P;rope=0|1;len=L|graph
 *    (tokens: the batch's requests, each len KV tokens, 2048 for graph). Tactics: the
 *    block's warps x pipelines, the split halved and doubled.
 *  "batch_prefill": q=bf16|f16;heads=H/K;head_dim=64|128|256;causal=0|1;cap=0|1 (tokens: the
 *    longest request's query tokens; clamp(16384 / tokens, 1, 64) such requests over as
 *    many KV tokens). Tactics: the registered wgmma kernels (sm_90), mma.sync's q tiles.
 *  "sampling": op=sample|top_k|top_p|min_p|top_k_top_p_logits;dtype=f32|bf16|f16;vocab=V
 *    (tokens: the rows). Tactics: CTAs a row (clusters on sm_90) x the threshold search.
 * A tuning variable that sets what an op's tactics choose (FI_PREFILL_QTILE, ...) makes
 * fi_autotune refuse that op (FI_ERR_INVALID_ARGUMENT naming it). */
typedef struct fi_autotune_options {
  size_t struct_size;   /**< sizeof(fi_autotune_options) (fi_autotune_options_init sets it) */
  const char *op;       /**< "moe_gemm", "batch_decode", "batch_prefill", "sampling" */
  const char *shape;    /**< the op's shape text */
  int64_t tokens;       /**< measured at fi_tune_bucket(tokens), the largest count the row serves */
  int device;           /**< CUDA device ordinal */
  int repeats;          /**< timed runs a tactic (median); 0: 20 */
  int warmup;           /**< untimed runs a tactic first; 0: 3 */
  int force;            /**< 1: measure although the user cache has a row for the key */
  int fault_tactic;     /**< tests only: n >= 2 corrupts the output of the n-th tactic tried
                             after it runs (a fault no real tactic is known to make), so
                             that a test sees validation refuse it; the first is the rule,
                             the reference; 0 in every real use */
  void (*progress)(const char *line, void *user); /**< a line per tactic measured; NULL: none */
  void *user;
} fi_autotune_options;

/** What one fi_autotune call found. */
typedef struct fi_autotune_result {
  char shape[256];        /**< the shape's canonical text (the row's key) */
  int64_t bucket;         /**< the token count measured */
  int tactics;            /**< tactics that could run the call */
  int valid, invalid;     /**< how many passed and failed validation */
  int bitwise;            /**< how many valid ones gave the rule's bits exactly */
  char rule[256];         /**< the rule's tactic */
  double rule_us;
  char winner[256];       /**< the fastest valid tactic */
  double winner_us;
  char runner_up[256];    /**< the second fastest, "" none */
  double runner_up_us;
  int measured;           /**< 1: measured and stored now; 0: the user cache had a row (force 0) */
} fi_autotune_result;

/** Sets struct_size and the defaults (repeats 20, warmup 3). */
FI_API void fi_autotune_options_init(fi_autotune_options *o);

/** Measures and stores (see above). FI_ERR_INVALID_ARGUMENT names a bad op, shape or
 * count; FI_ERR_NO_DEVICE or FI_ERR_DEVICE when nothing can be measured; FI_ERR_CACHE
 * when the result cannot be stored. */
FI_API fi_status fi_autotune(fi_runtime *rt, const fi_autotune_options *o, fi_autotune_result *r);

/** For fi-bench: the loaded function (CUfunction) and launch geometry that
 * fi_rmsnorm would use for these tensors; lets a benchmark compare a bare
 * cuLaunchKernel of the same kernel with the runtime's dispatch. */
FI_API fi_status fi_admin_rmsnorm_kernel(fi_runtime *rt, const DLTensor *input,
                                         const DLTensor *weight, double eps, DLTensor *out,
                                         void **function, unsigned grid[3], unsigned block[3],
                                         unsigned *shared_bytes);

/** For fi-bench's tuning sweeps: fi_rmsnorm with the kernel configuration
 * named by its canonical key (as fi-cache ls shows it) instead of the one
 * the runtime would choose. The key must be an rmsnorm key of the tensors'
 * dtype whose access width the tensors' alignment allows and whose block
 * covers the row; FI_ERR_INVALID_ARGUMENT names what does not fit. */
FI_API fi_status fi_admin_rmsnorm_with_key(fi_runtime *rt, const DLTensor *input,
                                           const DLTensor *weight, double eps, DLTensor *out,
                                           void *stream, const char *key);

/** For fi-bench: reads the bytes of buf (a 1-D device tensor, 16-byte aligned, a
 * multiple of 16 bytes) once with 16-byte streaming loads, as decode attention reads its
 * cache, on grid blocks (0: as many as are resident); the read-bandwidth roofline. */
FI_API fi_status fi_admin_read_probe(fi_runtime *rt, const DLTensor *buf, int grid, void *stream);

/** For fi-bench: register-only bf16 mma.sync m16n8k16 on grid blocks of 256 threads (0: as
 * many as are resident), iters rounds of 8 mmas a warp; *flops gets the FLOPs one launch
 * does (2 * 16 * 8 * 16 an mma); the tensor-core roofline of prefill. */
FI_API fi_status fi_admin_mma_probe(fi_runtime *rt, DLDevice device, int grid, int iters,
                                    void *stream, double *flops);

/** The same with wgmma (Hopper: sm_90 devices): bf16 m64n128k16 from shared memory, 256
 * threads a block, iters rounds of 4 wgmma a warpgroup of 2 * 64 * 128 * 16 FLOPs; the
 * roofline of the wgmma prefill. FI_ERR_UNSUPPORTED on other GPUs. */
FI_API fi_status fi_admin_wgmma_probe(fi_runtime *rt, DLDevice device, int grid, int iters,
                                      void *stream, double *flops);

#ifdef __cplusplus
}
#endif
#endif /* FI_ADMIN_H */
