/* ft.h: the tiny test framework of fi_runtime's C tests: FT_TEST registers a
 * test, FT_CHECK records a failure and goes on, FT_REQUIRE ends the test, and
 * FT_CHECK_EQ_INT / _EQ_STR / _STR_HAS (and FT_REQUIRE_...) print both operands. */
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

/* Comparisons that print both operands when they differ (libuv's ASSERT_EQ):
 * "check failed: st == FI_OK: got -1, expected 0", then the optional message.
 * Each operand is evaluated once; got comes first, the expected value second.
 *   FT_CHECK_EQ_INT(got, want, ...)    integers, compared as long long
 *   FT_CHECK_EQ_NAMED(got, want, name, ...)  the same, each value also shown as
 *                                      name(value) (name: const char *(*)(long long))
 *   FT_CHECK_EQ_STR(got, want, ...)    strings by strcmp (NULL equals only NULL)
 *   FT_CHECK_STR_HAS(s, part, ...)     s contains part (s NULL: a failure)
 * FT_REQUIRE_EQ_INT, FT_REQUIRE_EQ_NAMED, FT_REQUIRE_EQ_STR and FT_REQUIRE_STR_HAS
 * end the test instead. */
typedef const char *(*ft_namer)(long long);

static inline int ft_fail_head_(const char *kind, const char *file, int line, const char *a,
                                const char *op, const char *b) {
  ft_failed_now = 1;
  fprintf(stderr, "  %s:%d: %s: %s %s %s: ", file, line, kind, a, op, b);
  return 0;
}

static inline int ft_eq_int_(long long got, long long want, ft_namer name, const char *kind,
                             const char *file, int line, const char *gs, const char *ws) {
  if (got == want) return 1;
  ft_fail_head_(kind, file, line, gs, "==", ws);
  if (name) {
    const char *g = name(got), *w = name(want);
    fprintf(stderr, "got %s (%lld), expected %s (%lld)", g ? g : "?", got, w ? w : "?", want);
  } else {
    fprintf(stderr, "got %lld, expected %lld", got, want);
  }
  return 0;
}

static inline int ft_eq_str_(const char *got, const char *want, const char *kind, const char *file,
                             int line, const char *gs, const char *ws) {
  if (got == want || (got && want && strcmp(got, want) == 0)) return 1;
  ft_fail_head_(kind, file, line, gs, "==", ws);
  fprintf(stderr, "got %s%s%s, expected %s%s%s", got ? "\"" : "", got ? got : "NULL",
          got ? "\"" : "", want ? "\"" : "", want ? want : "NULL", want ? "\"" : "");
  return 0;
}

static inline int ft_str_has_(const char *s, const char *part, const char *kind, const char *file,
                              int line, const char *ss, const char *ps) {
  if (s && part && strstr(s, part)) return 1;
  ft_fail_head_(kind, file, line, ss, "contains", ps);
  fprintf(stderr, "\"%s\" does not contain \"%s\"", s ? s : "(NULL)", part ? part : "(NULL)");
  return 0;
}

/* The optional message of a comparison, after ": " when there is one. */
static inline void ft_vmsg_tail_(const char *fmt, ...) {
  if (!fmt[0]) return;
  fputs(": ", stderr);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
}

/* on_fail: nothing (a check) or `return` (a requirement). */
#define FT_CMP_(test, on_fail, ...)                                                         \
  do {                                                                                      \
    if (!(test)) {                                                                          \
      ft_vmsg_tail_("" __VA_ARGS__);                                                        \
      fprintf(stderr, "\n");                                                                \
      on_fail;                                                                              \
    }                                                                                       \
  } while (0)
#define FT_EQ_INT_(kind, on_fail, got, want, name, ...)                                      \
  FT_CMP_(ft_eq_int_((long long)(got), (long long)(want), (name), kind, __FILE__, __LINE__, #got, \
                     #want),                                                                \
          on_fail, __VA_ARGS__)
#define FT_CHECK_EQ_INT(got, want, ...) FT_EQ_INT_("check failed", (void)0, got, want, NULL, __VA_ARGS__)
#define FT_REQUIRE_EQ_INT(got, want, ...) FT_EQ_INT_("required", return, got, want, NULL, __VA_ARGS__)
#define FT_CHECK_EQ_NAMED(got, want, name, ...) \
  FT_EQ_INT_("check failed", (void)0, got, want, name, __VA_ARGS__)
#define FT_REQUIRE_EQ_NAMED(got, want, name, ...) \
  FT_EQ_INT_("required", return, got, want, name, __VA_ARGS__)
#define FT_CHECK_EQ_STR(got, want, ...) \
  FT_CMP_(ft_eq_str_((got), (want), "check failed", __FILE__, __LINE__, #got, #want), (void)0, __VA_ARGS__)
#define FT_REQUIRE_EQ_STR(got, want, ...) \
  FT_CMP_(ft_eq_str_((got), (want), "required", __FILE__, __LINE__, #got, #want), return, __VA_ARGS__)
#define FT_CHECK_STR_HAS(s, part, ...) \
  FT_CMP_(ft_str_has_((s), (part), "check failed", __FILE__, __LINE__, #s, #part), (void)0, __VA_ARGS__)
#define FT_REQUIRE_STR_HAS(s, part, ...) \
  FT_CMP_(ft_str_has_((s), (part), "required", __FILE__, __LINE__, #s, #part), return, __VA_ARGS__)

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
