/* cache_err.c: the cache layer's message helpers (an error, a report's detail lines),
 * shared by every file of the layer (their own file, so that no two files of the layer
 * depend on each other for them). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cache_internal.h"

void cache_seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  err[errlen - 1] = '\0';
}

void cache_note(char *detail, size_t cap, const char *fmt, ...) {
  size_t used = strlen(detail);
  if (used + 2 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail + used, cap - used, fmt, ap);
  va_end(ap);
  used = strlen(detail);
  if (used + 1 < cap) strcpy(detail + used, "\n");
}
