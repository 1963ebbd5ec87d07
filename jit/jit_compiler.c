/* jit_compiler.c: picks the compiler backend for a target arch and holds what
 * the backends share (arch syntax, output cleanup). */
#include "jit_compiler.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

extern const jit_compiler jit_nvrtc;
extern const jit_compiler jit_hiprtc;

/* A compiler for another vendor is one more line here and its own file. */
static const jit_compiler *const all[] = {
    &jit_nvrtc,
    &jit_hiprtc,
};
#define NCOMPILERS ((int)(sizeof all / sizeof all[0]))

int jit_compiler_count(void) { return NCOMPILERS; }

const jit_compiler *jit_compiler_at(int i) { return i >= 0 && i < NCOMPILERS ? all[i] : NULL; }

const jit_compiler *jit_compiler_for_arch(const char *arch) {
  if (!jit_arch_valid(arch)) return NULL;
  for (int i = 0; i < NCOMPILERS; i++)
    if (all[i]->handles_arch(arch)) return all[i];
  return NULL;
}

int jit_arch_valid(const char *arch) {
  if (!arch) return 0;
  if (strncmp(arch, "sm_", 3) == 0) {
    const char *p = arch + 3;
    int digits = 0, v = 0;
    while (isdigit((unsigned char)*p)) v = v * 10 + (*p++ - '0'), digits++;
    if (digits < 2 || digits > 3 || v < 70) return 0;
    /* Arch-specific (sm_90a, Hopper on) and family-specific (sm_100f, Blackwell on) targets. */
    if ((*p == 'a' && v >= 90) || (*p == 'f' && v >= 100)) p++;
    return *p == 0;
  }
  if (strncmp(arch, "gfx", 3) == 0) {
    const char *p = arch + 3;
    int n = 0;
    while (isxdigit((unsigned char)*p)) p++, n++;
    if (n < 3 || n > 4) return 0;
    /* Target features as AMD spells them (gfx90a:sramecc+:xnack-): only the
     * two that exist, each at most once. hiprtc 5.2 aborts the process on a
     * feature it does not know, so nothing else may reach it. */
    int seen_xnack = 0, seen_sramecc = 0;
    while (*p == ':') {
      p++;
      if (strncmp(p, "xnack", 5) == 0 && !seen_xnack) {
        seen_xnack = 1;
        p += 5;
      } else if (strncmp(p, "sramecc", 7) == 0 && !seen_sramecc) {
        seen_sramecc = 1;
        p += 7;
      } else {
        return 0;
      }
      if (*p != '+' && *p != '-') return 0;
      p++;
    }
    return *p == 0;
  }
  return 0;
}

void jit_compile_out_free(jit_compile_out *o) {
  free(o->binary);
  free(o->log);
  o->binary = NULL;
  o->log = NULL;
  o->bytes = 0;
}
