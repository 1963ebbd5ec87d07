/* jit_render.h: turns a kernel key into the CUDA/HIP source that is compiled:
 * the portability header, the op's template and a generated extern "C" entry. */
#ifndef JIT_RENDER_H
#define JIT_RENDER_H

#include "jit_key.h"

/* Renders the source for key with the given entry symbol into a malloc'ed
 * string (*out, freed by the caller). 0 on success, -1 with err filled. */
int jit_render(const jit_key *key, const char *entry, char **out, char *err, size_t errlen);

#endif
