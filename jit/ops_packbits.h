/* ops_packbits.h: compile-time choices of the bit-packing op (packbits). */
#ifndef OPS_PACKBITS_H
#define OPS_PACKBITS_H

#include "jit_key.h"

enum { PACKBITS_P_SEGMENTED, PACKBITS_P_LITTLE, PACKBITS_P_THREADS };
void jit_packbits_select(int segmented, int little, jit_key *out);
extern const jit_op jit_op_packbits;

#endif
