/* rt_error.c: status names and the thread-local message of the last failing
 * call; one buffer per thread, so concurrent callers never overwrite each other's. */
#include <stdio.h>
#include <string.h>

#include "rt_internal.h"

/* Large enough for a compiler log of a failed template. */
static _Thread_local char last_error[16384];

fi_status rt_fail(fi_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  if (n >= (int)sizeof last_error) memcpy(last_error + sizeof last_error - 16, "...[truncated]", 15);
  return s;
}


FI_API const char *fi_last_error(void) { return last_error; }

FI_API const char *fi_status_string(fi_status s) {
  switch (s) {
    case FI_OK: return "FI_OK";
    case FI_ERR_INVALID_ARGUMENT: return "FI_ERR_INVALID_ARGUMENT";
    case FI_ERR_UNSUPPORTED: return "FI_ERR_UNSUPPORTED";
    case FI_ERR_NO_DEVICE: return "FI_ERR_NO_DEVICE";
    case FI_ERR_COMPILE: return "FI_ERR_COMPILE";
    case FI_ERR_CACHE: return "FI_ERR_CACHE";
    case FI_ERR_DEVICE: return "FI_ERR_DEVICE";
    case FI_ERR_OUT_OF_MEMORY: return "FI_ERR_OUT_OF_MEMORY";
    case FI_ERR_INTERNAL: return "FI_ERR_INTERNAL";
  }
  return "FI_ERR_UNKNOWN";
}

FI_API const char *fi_version(void) { return FI_VERSION_STRING; }
