/* ft.h: the tiny test framework of fi_runtime's C tests: FT_TEST registers a
 * test, FT_CHECK records a failure and goes on, FT_REQUIRE ends the test. */
#ifndef FT_H
#define FT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*ft_fn)(void);
typedef struct ft_case { const char *name; ft_fn fn; } ft_case;

#define FT_MAX_CASES 512
extern ft_case ft_cases[FT_MAX_CASES];
extern int ft_ncases;
extern int ft_failed_now;

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
      fprintf(stderr, "" __VA_ARGS__);                                      \
      fprintf(stderr, "\n");                                                \
    }                                                                       \
  } while (0)

#define FT_REQUIRE(cond, ...)                                               \
  do {                                                                      \
    FT_CHECK(cond, __VA_ARGS__);                                            \
    if (!(cond)) return;                                                    \
  } while (0)

#endif
