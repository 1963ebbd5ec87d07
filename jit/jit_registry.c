/* jit_registry.c: the table of op families; adding an op family is adding its
 * jit/ops_*.c descriptor and one line here. */
#include "jit_registry.h"

#include <string.h>

static const jit_op *const ops[] = {
    &jit_op_rmsnorm,
};

int jit_registry_count(void) { return (int)(sizeof ops / sizeof ops[0]); }

const jit_op *jit_registry_get(int i) {
  return i >= 0 && i < jit_registry_count() ? ops[i] : NULL;
}

const jit_op *jit_registry_find(const char *name) {
  if (!name) return NULL;
  for (int i = 0; i < jit_registry_count(); i++)
    if (strcmp(ops[i]->name, name) == 0) return ops[i];
  return NULL;
}
