/* jit_dl.c: the dlopen wrapper shared by the device and compiler backends; it
 * never aborts and reports what the loader said for every name it tried. */
#include "jit_dl.h"

#include <dlfcn.h>
#include <errno.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void append(char *err, size_t errlen, const char *fmt, const char *a, const char *b) {
  if (!err || errlen == 0) return;
  size_t used = strlen(err);
  if (used + 1 >= errlen) return;
  snprintf(err + used, errlen - used, fmt, a, b ? b : "");
}

void *jit_dl_open(const char *var, const char *path, const char *const *names, const char **which,
                  char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  const char *env = path;
  if (env && env[0]) {
    /* An explicit choice is honoured or reported, never silently replaced.
     * A path must name a regular file (a link to one is fine): the loader
     * would wait forever on a FIFO and read a device or a directory. A bare
     * name is the loader's to search, in its own directories. */
    struct stat st;
    int found = strchr(env, '/') ? stat(env, &st) : 0;
    if (strchr(env, '/') && (found != 0 || !S_ISREG(st.st_mode))) {
      const char *why = found != 0             ? strerror(errno)
                        : S_ISFIFO(st.st_mode) ? "not a regular file (a FIFO)"
                        : S_ISDIR(st.st_mode)  ? "not a regular file (a directory)"
                        : S_ISSOCK(st.st_mode) ? "not a regular file (a socket)"
                                               : "not a regular file (a device)";
      if (err && errlen) snprintf(err, errlen, "%s: %s: %s", var ? var : "library path", env, why);
      return NULL;
    }
    void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (h) {
      if (which) *which = env;
      return h;
    }
    append(err, errlen, "%s: %s", var ? var : env, dlerror());
    return NULL;
  }
  for (int i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) {
      if (which) *which = names[i];
      return h;
    }
    append(err, errlen, "%s%s", i ? "; " : "", dlerror());
  }
  return NULL;
}

int jit_dl_resolve(void *handle, const jit_dl_sym *syms, int n, const char *libname, char *err,
                   size_t errlen) {
  for (int i = 0; i < n; i++) {
    dlerror();
    void *p = dlsym(handle, syms[i].name);
    if (!p && !syms[i].optional) {
      if (err && errlen) snprintf(err, errlen, "%s has no symbol %s", libname, syms[i].name);
      return -1;
    }
    *syms[i].slot = p;
  }
  return 0;
}

int jit_dl_replace(const jit_dl_sym *syms, int n, const char *name, void *fn, void **old) {
  for (int i = 0; i < n; i++)
    if (strcmp(syms[i].name, name) == 0) {
      if (old) *old = *syms[i].slot;
      *syms[i].slot = fn;
      return 0;
    }
  return -1;
}
