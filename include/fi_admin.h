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
} fi_verify_report;

/** Checks the user cache's integrity and every binary; with repair, mends
 * it (drops bad entries; rebuilds a damaged file from what still reads). */
FI_API fi_status fi_admin_verify(fi_runtime *rt, int repair, fi_verify_report *rep);

/** Writes the user cache's entries matching op and arch (NULL: all) to a new
 * standalone cache file (rollback journal, mode 0644), suitable as a system
 * layer: FI_CACHE_SYSTEM_PATH. Replaces file atomically. */
FI_API fi_status fi_admin_export_cache(fi_runtime *rt, const char *file, const char *op,
                                       const char *arch, int64_t *copied);

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
} fi_import_report;

/** fi_admin_import_cache with the whole story: every entry of file is checked
 * as the runtime checks a row it loads, and the user cache's size cap
 * (FI_CACHE_MAX_BYTES) holds afterwards. */
FI_API fi_status fi_admin_import(fi_runtime *rt, const char *file, fi_import_report *rep);

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
