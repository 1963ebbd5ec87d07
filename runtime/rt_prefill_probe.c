/* rt_prefill_probe.c: fi-bench's tensor-core probes (fi_admin_mma_probe: mma.sync
 * m16n8k16 from registers, the prefill kernel's instruction; fi_admin_wgmma_probe: wgmma
 * from shared memory, Hopper): resident blocks of independent mma chains, their FLOPs. */
#include <math.h>
#include <string.h>

#include "fi_admin.h"
#include "ops_prefill.h"
#include "prefill_params.h"
#include "rt_internal.h"

static fi_status probe(fi_runtime *rt, DLDevice device, int grid, int iters, void *stream, double *flops,
                       int wgmma) {
  const char *fn = wgmma ? "fi_admin_wgmma_probe" : "fi_admin_mma_probe";
  fi_status st;
  if (!rt) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: rt is NULL", fn);
  if (iters < 1) return rt_fail(FI_ERR_INVALID_ARGUMENT, "%s: iters is %d; >= 1 is needed", fn, iters);
  jit_key key;
  if (wgmma)
    jit_wgmma_probe_select(&key);
  else
    jit_mma_probe_select(&key);
  const rt_device_i *be;
  void *state;
  if ((st = rt_backend(rt, device.device_type, &be, &state)) != FI_OK) return st;
  rt_kernel *k;
  if ((st = rt_kernel_get(rt, &key, be, device.device_id, &k)) != FI_OK) return st;
  if (grid <= 0 && (st = rt_kernel_resident(rt, k, wgmma ? WGMMA_PROBE_THREADS : MMA_PROBE_THREADS, &grid)) != FI_OK) return st;
  fi_mma_probe_params p;
  memset(&p, 0, sizeof p);
  p.sink = NULL;
  p.iters = iters;
  p.never = NAN; /* no sum equals NaN: the store never happens, the work must */
  if (flops)
    *flops = wgmma ? (double)grid * (WGMMA_PROBE_THREADS / 128) * (double)iters * 4.0 * (2.0 * 64 * 128 * 16)
                   : (double)grid * (MMA_PROBE_THREADS / 32) * (double)iters * 8.0 * (2.0 * 16 * 8 * 16);
  rt_launch l = {{(unsigned)grid, 1, 1}, {wgmma ? WGMMA_PROBE_THREADS : MMA_PROBE_THREADS, 1, 1}, 0};
  return rt_launch_kernel(rt, k, &l, stream, &p, sizeof p);
}

FI_API fi_status fi_admin_mma_probe(fi_runtime *rt, DLDevice device, int grid, int iters,
                                    void *stream, double *flops) {
  return probe(rt, device, grid, iters, stream, flops, 0);
}

FI_API fi_status fi_admin_wgmma_probe(fi_runtime *rt, DLDevice device, int grid, int iters,
                                      void *stream, double *flops) {
  return probe(rt, device, grid, iters, stream, flops, 1);
}
