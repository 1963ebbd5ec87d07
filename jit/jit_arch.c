/* jit_arch.c: target arch hooks shared by op descriptors (jit_arch.h). */
#include "jit_arch.h"

#include <string.h>

const char *jit_arch_sm90a(const char *arch) {
  return strcmp(arch, "sm_90") == 0 || strcmp(arch, "sm_90a") == 0 ? "sm_90a" : NULL;
}
