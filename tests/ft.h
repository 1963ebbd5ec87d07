/* ft.h: the tiny test framework of fi_runtime's C tests: FT_TEST registers a
 * test, FT_CHECK records a failure and goes on, FT_REQUIRE ends the test. */
#ifndef FT_H
#define FT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*ft_fn)(void);
typedef struct ft_case { const char *name; ft_fn fn; } ft_case;

#include <stdarg.h>

/* Not declared printf-like: FT_CHECK(cond) with no message passes "". */
static inline void ft_vmsg(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
}

#define FT_MAX_CASES 512
extern ft_case ft_cases[FT_MAX_CASES];
extern int ft_ncases;
extern int ft_failed_now;
extern int ft_skipped_now;

#define FT_TEST(name)                                                       \
  static void ft_##name(void);                                              \
  __attribute__((constructor)) static void ft_reg_##name(void) {            \
    if (ft_ncases < FT_MAX_CASES) ft_cases[ft_ncases++] = (ft_case){#name, ft_##name}; \
  }                                                                         \
  static void ft_##name(void)

#define FT_CHECK(cond, ...)                                                 \
  do {                                                                      \
    if (!(cond)) {                                                          \
      ft_failed_now = 1;                                                    \
      fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      ft_vmsg("" __VA_ARGS__);                                      \
      fprintf(stderr, "\n");                                                \
    }                                                                       \
  } while (0)

/* cond is evaluated once: it may have side effects (a create, a fault hook). */
#define FT_REQUIRE(cond, ...)                                               \
  do {                                                                      \
    int ft_ok_ = !!(cond);                                                  \
    if (!ft_ok_) {                                                          \
      ft_failed_now = 1;                                                    \
      fprintf(stderr, "  %s:%d: required: %s: ", __FILE__, __LINE__, #cond); \
      ft_vmsg("" __VA_ARGS__);                                              \
      fprintf(stderr, "\n");                                                \
      return;                                                               \
    }                                                                       \
  } while (0)

/* Ends the test as skipped: a "SKIP name" line, counted neither as passed nor
 * as failed, with the reason on stderr. For what this machine cannot do. */
#define FT_SKIP(...)                                                        \
  do {                                                                      \
    ft_skipped_now = 1;                                                     \
    fprintf(stderr, "  skipped: ");                                         \
    ft_vmsg("" __VA_ARGS__);                                                \
    fprintf(stderr, "\n");                                                  \
    return;                                                                 \
  } while (0)

#endif
