/* ops_packbits.c: the bit-packing op family (packbits): its keys, entry wrapper and
 * registered configurations (segmented or not, either bit order). */
#include "ops_packbits.h"

#include <stdio.h>

#include "jit_registry.h"

#define PACKBITS_THREADS 256

void jit_packbits_select(int segmented, int little, jit_key *out) {
  out->op = &jit_op_packbits;
  for (int i = 0; i < JIT_MAX_PARAMS; i++) out->v[i] = 0;
  out->v[PACKBITS_P_SEGMENTED] = segmented ? 1 : 0;
  out->v[PACKBITS_P_LITTLE] = little ? 1 : 0;
  out->v[PACKBITS_P_THREADS] = PACKBITS_THREADS;
}

static int render(const jit_key *k, const char *entry, char *buf, size_t n) {
  int w = snprintf(buf, n,
                   "extern \"C\" __global__ void __launch_bounds__(%d)\n"
                   "%s(fi_packbits_params p) {\n"
                   "  fi_pdl_enter();\n"
                   "  fi::packbits<%d, %d, %d>(p);\n"
                   "}\n",
                   (int)k->v[PACKBITS_P_THREADS], entry, (int)k->v[PACKBITS_P_SEGMENTED],
                   (int)k->v[PACKBITS_P_LITTLE], (int)k->v[PACKBITS_P_THREADS]);
  return w < 0 || (size_t)w >= n ? -1 : w;
}
static int count(void) { return 4; }
static void config(int idx, jit_key *out) { jit_packbits_select(idx / 2, idx % 2, out); }

const jit_op jit_op_packbits = {
    .name = "packbits",
    .template_name = "packbits.cuh",
    .nparams = 3,
    .params = {{"segmented", JIT_P_INT}, {"little", JIT_P_INT}, {"threads", JIT_P_INT}},
    .render_entry = render,
    .config_count = count,
    .config = config,
};
