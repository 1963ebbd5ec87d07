/* jit_dl.h: dlopen of vendor libraries at first use, keeping the loader's message,
 * and symbol tables in SQLite's aSyscall[] style so tests can inject faults. */
#ifndef JIT_DL_H
#define JIT_DL_H

#include <stddef.h>

/* One resolved symbol: the name, where the pointer goes, whether it may be missing. */
typedef struct jit_dl_sym {
  const char *name;
  void **slot;
  int optional;
} jit_dl_sym;

/* Tries path (the value of the variable var, read by the caller; when non-NULL and
 * non-empty, the only choice), else each name in turn (a NULL-terminated list); returns
 * the first handle that opens. On failure, writes every loader message into err (an
 * explicit path's prefixed by var) and returns NULL. *which gets the name that opened
 * (may be NULL). */
void *jit_dl_open(const char *var, const char *path, const char *const *names, const char **which,
                  char *err, size_t errlen);

/* Resolves every symbol of the table; a missing required one fails with its
 * name in err. */
int jit_dl_resolve(void *handle, const jit_dl_sym *syms, int n, const char *libname, char *err,
                   size_t errlen);

/* Replaces the entry point called name in a resolved table (fault injection
 * in tests); the old pointer goes to *old. 0, or -1 if no such symbol. */
int jit_dl_replace(const jit_dl_sym *syms, int n, const char *name, void *fn, void **old);

#endif
