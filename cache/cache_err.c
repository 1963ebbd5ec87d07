/* cache_err.c: the cache layer's error message helper, shared by every file of the
 * layer (its own file, so that no two files of the layer depend on each other for it). */
#include <stdarg.h>
#include <stdio.h>

#include "cache_internal.h"

void cache_seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  err[errlen - 1] = '\0';
}
