/* rt_device.h: the device backend interface (CUDA driver, HIP), one table of
 * function pointers per backend plus its state, and the registry that lists the backends;
 * the runtime never calls cu* or hip* directly, and never names a backend: what differs
 * between vendors is a capability (rt_device_caps) or an optional member left NULL. */
#ifndef RT_DEVICE_H
#define RT_DEVICE_H

#include <stddef.h>

#define RT_DEVICE_IFACE_VERSION 6
#define RT_MAX_DEVICES 64
#define RT_MAX_BACKENDS 4 /* registry slots the runtime keeps state for */

/* Launch geometry of one call. */
typedef struct rt_launch {
  unsigned grid[3], block[3], shared_bytes;
} rt_launch;

/* What the runtime tells a backend's state at create, from the environment it read once
 * (rt_env.h); the backend reads no variable itself. */
typedef struct rt_device_config {
  const char *library; /* library_env's value: the library to load instead of the default names; NULL for those */
  int pdl;             /* 0: no programmatic dependent launch (FI_PDL=0) */
} rt_device_config;

/* What differs between backends and devices, as fields a caller reads. */
typedef struct rt_device_caps {
  int warp_size;    /* threads that shuffle together: blocks are whole warps */
  int clusters;     /* thread-block clusters (distributed shared memory) */
  int pdl;          /* programmatic dependent launch */
  int wgmma;        /* the warpgroup-MMA kernels (prefill_wgmma.cuh) run on this arch */
  int scratch_pool; /* stream-ordered scratch memory (scratch_alloc) */
  int smem_block_kb; /* shared memory one block may use, KiB (64 unless the arch says more) */
} rt_device_caps;

/* What the autotuner (rt_autotune.c) needs of a device besides launches: memory of its
 * own, copies, a stream-ordered fill (the cold-L2 flush), events to time launches with,
 * and a wait. Every member returns 0, or -1 with err; none is on the hot path. */
enum { RT_COPY_H2D, RT_COPY_D2H, RT_COPY_D2D };
typedef struct rt_device_tune_i {
  int (*mem_alloc)(void *state, int dev, size_t bytes, void **ptr, char *err, size_t errlen);
  void (*mem_free)(void *state, int dev, void *ptr);
  /* Synchronous: the copy is done when it returns (and the device idle before it). */
  int (*copy)(void *state, int dev, void *dst, const void *src, size_t bytes, int kind, char *err,
              size_t errlen);
  /* words 32-bit words at dst set to value, on stream. */
  int (*fill32)(void *state, int dev, void *dst, unsigned value, size_t words, void *stream,
                char *err, size_t errlen);
  int (*event_new)(void *state, int dev, void **ev, char *err, size_t errlen);
  void (*event_free)(void *state, int dev, void *ev);
  int (*event_record)(void *state, int dev, void *ev, void *stream, char *err, size_t errlen);
  /* Milliseconds from start to end, once end has happened (it waits for end). */
  int (*event_ms)(void *state, int dev, void *start, void *end, float *ms, char *err, size_t errlen);
  int (*sync)(void *state, int dev, void *stream, char *err, size_t errlen);
  /* The device's last-level cache, bytes (0 unknown). */
  int (*cache_bytes)(void *state, int dev, size_t *bytes, char *err, size_t errlen);
  /* Whether work on stream is being captured into a graph (*yes 1 also where the driver
   * cannot say): measuring then would break the capture. */
  int (*capturing)(void *state, int dev, void *stream, int *yes, char *err, size_t errlen);
} rt_device_tune_i;

typedef struct rt_device_i {
  int iface_version;
  const char *name;     /* "cuda", "hip" */
  int dlpack_type;      /* kDLCUDA, kDLROCM: tensors of this type go here */
  const char *library_env; /* the variable naming its library ("FI_CUDA_LIBRARY") */
  int warp_size;        /* of every device of this backend */
  /* Optional (NULL: none of the arch-dependent capabilities): fills clusters, pdl and
   * wgmma for a device of arch (as arch() writes it). */
  void (*arch_caps)(const char *arch, rt_device_caps *caps);
  /* Loads the driver at first use and initializes it. Thread-safe and
   * idempotent. 0 on success; -1 with err (no library, no device, ...). */
  int (*load)(void *state, char *err, size_t errlen);
  /* Compile target for device ordinal dev ("sm_90", "gfx90a"), and SM count. */
  int (*arch)(void *state, int dev, char *buf, size_t buflen, char *err, size_t errlen);
  int (*sm_count)(void *state, int dev, int *n);
  /* Loads a binary on dev; *fn gets the entry's function handle and *module
   * what module_unload later frees. Raises the function's dynamic shared
   * memory limit to max_dyn_smem when nonzero. */
  int (*module_load)(void *state, int dev, const void *binary, size_t bytes, const char *entry,
                     unsigned max_dyn_smem, void **module, void **fn, char *err, size_t errlen);
  void (*module_unload)(void *state, int dev, void *module);
  /* Blocks of `threads` threads (with dyn_smem bytes) that fit on one SM. */
  int (*occupancy)(void *state, int dev, void *fn, int threads, unsigned dyn_smem,
                   int *blocks_per_sm, char *err, size_t errlen);
  /* Launches fn on dev's primary context on stream, with the parameter
   * struct params (size bytes) as its only argument. The hot path: no
   * allocation, no synchronization. Returns 0, or -1 with err. */
  int (*launch)(void *state, int dev, void *fn, const rt_launch *l, void *stream,
                void *params, size_t bytes, char *err, size_t errlen);
  /* Optional (NULL: no scratch pool; call through rt_device_scratch_alloc/free).
   * Stream-ordered scratch memory (single decode's split partials): allocated and freed
   * on the caller's stream, from a pool of the backend's own that keeps what is freed, so
   * calls on concurrent streams each get their own. 0 on success; 1: none here (no pool
   * support, or the stream is being captured into a graph: the caller goes without);
   * -1 with err. */
  int (*scratch_alloc)(void *state, int dev, size_t bytes, void *stream, void **ptr, char *err,
                       size_t errlen);
  int (*scratch_free)(void *state, int dev, void *ptr, void *stream, char *err, size_t errlen);
  /* Creates and frees the backend's per-runtime state; cfg is read during the call.
   * The driver library is process-wide: the first load's choice of path stays. */
  void *(*create)(const rt_device_config *cfg);
  void (*destroy)(void *state);
  /* Optional (NULL: unknown, and stored tactics are then never used on this backend's
   * devices): the name of device ordinal dev ("NVIDIA H100 80GB HBM3") and the driver's
   * version ("cuda-12.4"), which key a stored tactic with the arch and SM count (a tactic
   * is measured on one kind of card under one driver). 0, or -1 with err. */
  int (*identity)(void *state, int dev, char *name, size_t namelen, char *driver,
                  size_t driverlen, char *err, size_t errlen);
  /* Optional (NULL: fi_autotune says this backend cannot measure): rt_device_tune_i. */
  const rt_device_tune_i *tune;
} rt_device_i;

/* The registry (rt_device_reg.c): every backend, one line each. A slot is a backend's
 * index in it; the runtime keeps each backend's state in an array by slot. */
extern const rt_device_i *const rt_device_registry[];
extern const int rt_device_registered;
static inline int rt_device_count(void) { return rt_device_registered; }
static inline const rt_device_i *rt_device_at(int slot) {
  return slot >= 0 && slot < rt_device_registered ? rt_device_registry[slot] : NULL;
}
/* The slot of a registered backend, -1 for one not in the registry (on the hot path:
 * a compare or two). */
static inline int rt_device_slot(const rt_device_i *be) {
  for (int i = 0; i < rt_device_registered; i++)
    if (rt_device_registry[i] == be) return i;
  return -1;
}
/* The slot of the backend for tensors of a DLPack device type, -1 if none takes them. */
int rt_device_slot_for(int dlpack_type);

/* A device's capabilities: the backend's warp size and scratch pool, then what its arch
 * allows (arch_caps). 0, or -1 with err when the device's arch cannot be read (caps then
 * holds the arch-independent fields, the rest 0). */
int rt_device_caps_get(const rt_device_i *be, void *state, int dev, rt_device_caps *caps,
                       char *err, size_t errlen);

/* Dispatch of the optional scratch members: without a pool, alloc answers 1 (go without). */
int rt_device_scratch_alloc(const rt_device_i *be, void *state, int dev, size_t bytes,
                            void *stream, void **ptr, char *err, size_t errlen);
int rt_device_scratch_free(const rt_device_i *be, void *state, int dev, void *ptr, void *stream,
                           char *err, size_t errlen);

/* Fault injection for tests: replaces one resolved driver entry point. */
int rt_cuda_fault(const char *name, void *fn, void **old);

#endif
