/* rt_device_reg.c: the registry of device backends, one line per backend, and the
 * dispatch of what a backend may leave out. The only file besides the backends' own that
 * names one. */
#include <stdio.h>
#include <string.h>

#include "rt_device.h"

extern const rt_device_i rt_device_cuda;
extern const rt_device_i rt_device_hip;

/* A third vendor is one more line here and its own file. */
const rt_device_i *const rt_device_registry[] = {
    &rt_device_cuda,
    &rt_device_hip,
};
#define NREG ((int)(sizeof rt_device_registry / sizeof rt_device_registry[0]))
_Static_assert(NREG <= RT_MAX_BACKENDS, "raise RT_MAX_BACKENDS");
const int rt_device_registered = NREG;

int rt_device_slot_for(int dlpack_type) {
  for (int i = 0; i < NREG; i++)
    if (rt_device_registry[i]->dlpack_type == dlpack_type) return i;
  return -1;
}

int rt_device_caps_get(const rt_device_i *be, void *state, int dev, rt_device_caps *caps,
                       char *err, size_t errlen) {
  memset(caps, 0, sizeof *caps);
  caps->warp_size = be->warp_size;
  caps->scratch_pool = be->scratch_alloc != NULL;
  caps->smem_block_kb = 64;
  if (!be->arch_caps) return 0;
  char arch[32];
  if (be->arch(state, dev, arch, sizeof arch, err, errlen) != 0) return -1;
  be->arch_caps(arch, caps);
  return 0;
}

int rt_device_scratch_alloc(const rt_device_i *be, void *state, int dev, size_t bytes,
                            void *stream, void **ptr, char *err, size_t errlen) {
  if (!be->scratch_alloc) return 1;
  return be->scratch_alloc(state, dev, bytes, stream, ptr, err, errlen);
}

int rt_device_scratch_free(const rt_device_i *be, void *state, int dev, void *ptr, void *stream,
                           char *err, size_t errlen) {
  if (!be->scratch_free) {
    snprintf(err, errlen, "%s: no scratch memory", be->name);
    return -1;
  }
  return be->scratch_free(state, dev, ptr, stream, err, errlen);
}
