/* jit_arch.h: target arch hooks shared by op descriptors (jit_op.target_arch). */
#ifndef JIT_ARCH_H
#define JIT_ARCH_H

/* The wgmma ops': wgmma exists on sm_90a alone, so a Hopper device (sm_90) runs the sm_90a
 * binary; no other arch has one (NULL). */
const char *jit_arch_sm90a(const char *arch);

#endif
