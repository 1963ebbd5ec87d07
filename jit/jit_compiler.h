/* jit_compiler.h: the compiler backend interface (NVRTC, hiprtc), a table of
 * function pointers filled by one file each; the runtime picks one by target arch. */
#ifndef JIT_COMPILER_H
#define JIT_COMPILER_H

#include <stddef.h>

#define JIT_COMPILER_IFACE_VERSION 2

typedef struct jit_compile_out {
  void *binary;   /* malloc'ed cubin / code object */
  size_t bytes;
  char *log;      /* malloc'ed compiler log (may be NULL); kept on failure too */
} jit_compile_out;

typedef struct jit_compiler {
  int iface_version;
  const char *name; /* "nvrtc", "hiprtc" */
  /* The variable naming the library to load instead of the default names
   * ("FI_NVRTC_LIBRARY"): the runtime reads it with the rest of the environment. */
  const char *library_env;
  /* Does this backend target arch ("sm_90", "gfx90a")? Needs no library. */
  int (*handles_arch)(const char *arch);
  /* Compile options for arch, as one string: part of the cache key. */
  const char *(*options)(const char *arch);
  /* Loads the library at first use (thread-safe, idempotent: the first call's choice
   * stays for the process); library: library_env's value, or NULL for the default
   * names. 0 on success. */
  int (*load)(const char *library, char *err, size_t errlen);
  /* "nvrtc-13.0": valid after a successful load. */
  const char *(*identity)(void);
  /* Can this loaded compiler build for arch? 0 yes; -1 with a reason. */
  int (*check_arch)(const char *arch, char *err, size_t errlen);
  /* Compiles src (named name) with the embedded templates as in-memory
   * headers. 0 on success; -1 with err filled and out->log set if any. */
  int (*compile)(const char *src, const char *name, const char *arch, jit_compile_out *out,
                 char *err, size_t errlen);
} jit_compiler;

/* The registry (jit_compiler.c): every compiler, one line each; nothing outside a
 * compiler's own file and the registry names one. */
int jit_compiler_count(void);
const jit_compiler *jit_compiler_at(int i);

/* The backend for arch, or NULL if no backend knows it. */
const jit_compiler *jit_compiler_for_arch(const char *arch);

/* Is arch well-formed and known ("sm_XY[a]" with XY >= 70, "gfxNNN[x]")? */
int jit_arch_valid(const char *arch);

void jit_compile_out_free(jit_compile_out *o);

#endif
