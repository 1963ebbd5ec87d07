/* dispatch_loop.c: N memo-hit fi_rmsnorm calls (bf16, 64 x 4096, as fi-bench runtime times
 * them) on the fake driver, for callgrind: instructions a call = (total(N2) - total(N1)) /
 * (N2 - N1). usage: dispatch_loop CACHE N. HOSTCOST_OP=top_k: fi_top_k_sampling_from_probs
 * on float32 64 x 128256 instead (k 50), the sampler call that looks up a stored tactic. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include "fi_runtime.h"
static DLTensor tensor(void *p, int nd, int64_t *shape) {
  DLTensor t = {0};
  t.data = p; t.device.device_type = kDLCUDA; t.device.device_id = 0; t.ndim = nd;
  t.dtype.code = kDLBfloat; t.dtype.bits = 16; t.dtype.lanes = 1; t.shape = shape;
  return t;
}
int main(int argc, char **argv) {
  if (argc < 3) return 2;
  fi_options o;
  fi_options_init(&o);
  o.cache_path = argv[1];
  fi_runtime *rt;
  if (fi_runtime_create(&o, &rt) != FI_OK) { fprintf(stderr, "create: %s\n", fi_last_error()); return 1; }
  int64_t shape[2] = {64, 4096}, ws[1] = {4096};
  void *x = (void *)(uintptr_t)0x7f0000000000ull, *w = (void *)(uintptr_t)0x7f0000100000ull;
  DLTensor tx = tensor(x, 2, shape), tw = tensor(w, 1, ws);
  long n = atol(argv[2]);
  const char *op = getenv("HOSTCOST_OP");
  if (op && !strcmp(op, "top_k")) {
    int64_t ps[2] = {64, 128256}, ss[1] = {64};
    DLTensor tp = tensor(x, 2, ps), ts = tensor((void *)(uintptr_t)0x7f0100000000ull, 1, ss);
    tp.dtype.code = kDLFloat, tp.dtype.bits = 32;
    ts.dtype.code = kDLInt, ts.dtype.bits = 32;
    for (long i = 0; i < n + 1; i++)
      if (fi_top_k_sampling_from_probs(rt, &tp, NULL, 50, &ts, 1, (uint64_t)i, NULL) != FI_OK) {
        fprintf(stderr, "top_k: %s\n", fi_last_error());
        return 1;
      }
    fi_runtime_destroy(rt);
    return 0;
  }
  for (long i = 0; i < n + 1; i++)
    if (fi_rmsnorm(rt, &tx, &tw, 1e-6, &tx, NULL) != FI_OK) { fprintf(stderr, "rmsnorm: %s\n", fi_last_error()); return 1; }
  fi_runtime_destroy(rt);
  return 0;
}
