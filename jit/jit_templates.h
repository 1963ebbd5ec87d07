/* jit_templates.h: the kernel templates embedded at build time (generated from
 * kernels/ by tools/embed_kernels.c) and the hash of the whole set. */
#ifndef JIT_TEMPLATES_H
#define JIT_TEMPLATES_H

#include <stddef.h>

typedef struct jit_template {
  const char *name; /* file name under kernels/, also its #include name */
  const char *text;
  size_t len;
} jit_template;

extern const jit_template jit_templates[];
extern const int jit_template_count;

/* The template named name, or NULL. */
const jit_template *jit_template_find(const char *name);

/* 32 hex digits of XXH3-128 over every template's name and text; part of
 * every cache key, so editing any template retires the old binaries. */
const char *jit_template_set_hash(void);

/* The templates as a compiler's in-memory headers: names and texts (at most
 * max of each); returns how many. */
int jit_template_headers(const char **names, const char **texts, int max);

#endif
