/* jit_fault.h: fault injection for tests: replaces one resolved vendor entry
 * point (after the library is loaded) and hands back the old one to restore. */
#ifndef JIT_FAULT_H
#define JIT_FAULT_H

int jit_nvrtc_fault(const char *name, void *fn, void **old);
int jit_hiprtc_fault(const char *name, void *fn, void **old);

#endif
