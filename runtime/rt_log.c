/* rt_log.c: logging to stderr at the runtime's level (FI_LOG_LEVEL, read in rt_env.c); the library never writes to
 * stdout, which belongs to the host program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "rt_internal.h"

void rt_log(const fi_runtime *rt, int level, const char *fmt, ...) {
  if (!rt || level > rt->log_level) return;
  static const char *const tags[] = {"", "error", "warn", "info", "debug"};
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* One write per line so lines from several processes do not interleave. */
  char line[2200];
  int n = snprintf(line, sizeof line, "fi_runtime[%d] %s: %s\n", (int)getpid(),
                   tags[level < 0 ? 0 : level > 4 ? 4 : level], msg);
  if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
  ssize_t w = write(2, line, (size_t)n);
  (void)w;
}
