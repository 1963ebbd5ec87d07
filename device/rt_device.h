/* rt_device.h: the device backend interface (CUDA driver, HIP), one table of
 * function pointers per backend plus its state; the runtime never calls cu* or hip* directly. */
#ifndef RT_DEVICE_H
#define RT_DEVICE_H

#include <stddef.h>
#include <stdlib.h>

#define RT_DEVICE_IFACE_VERSION 3
#define RT_MAX_DEVICES 64

/* Launch geometry of one call. */
typedef struct rt_launch {
  unsigned grid[3], block[3], shared_bytes;
} rt_launch;

typedef struct rt_device_i {
  int iface_version;
  const char *name;     /* "cuda", "hip" */
  int dlpack_type;      /* kDLCUDA, kDLROCM: tensors of this type go here */
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
  /* Stream-ordered scratch memory (single decode's split partials): allocated and freed
   * on the caller's stream, from a pool of the backend's own that keeps what is freed, so
   * calls on concurrent streams each get their own. 0 on success; 1: none here (no pool
   * support, or the stream is being captured into a graph: the caller goes without);
   * -1 with err. */
  int (*scratch_alloc)(void *state, int dev, size_t bytes, void *stream, void **ptr, char *err,
                       size_t errlen);
  int (*scratch_free)(void *state, int dev, void *ptr, void *stream, char *err, size_t errlen);
  /* Creates and frees the backend's per-runtime state. */
  void *(*create)(void);
  void (*destroy)(void *state);
} rt_device_i;

extern const rt_device_i rt_device_cuda;
extern const rt_device_i rt_device_hip;

/* FI_PDL=0 in the environment: the CUDA backend launches without programmatic
 * dependent launch, and decode plans take no pre-wait prefetch (nothing to overlap). */
static inline int rt_pdl_env_off(void) {
  const char *e = getenv("FI_PDL");
  return e && e[0] == '0' && !e[1];
}

/* Fault injection for tests: replaces one resolved driver entry point. */
int rt_cuda_fault(const char *name, void *fn, void **old);

#endif
