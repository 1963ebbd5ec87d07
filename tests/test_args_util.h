/* test_args_util.h: what the argument-check tests share: a runtime on an
 * in-memory cache, a poisoned last error, and checks that a message names things. */
#pragma once
#include <string.h>

#include "fi_runtime.h"
#include "jit_registry.h"
#include "rt_env.h"
#include "rt_internal.h"

/* A quiet runtime whose cache lives in memory; NULL if it cannot be made. */
static inline fi_runtime *mem_runtime(void) {
  fi_options o;
  fi_options_init(&o);
  o.cache_path = ":memory:";
  o.log_level = 0;
  fi_runtime *rt = NULL;
  return fi_runtime_create(&o, &rt) == FI_OK ? rt : NULL;
}

/* Sets the last error to a known text, so a check cannot pass on an old message. */
static inline void poison_error(void) { rt_fail(FI_OK, "(poison: no call failed)"); }

/* Whether msg contains every string of the NULL-terminated list names. */
static inline int names_all(const char *msg, const char *const *names) {
  for (int i = 0; names[i]; i++)
    if (!strstr(msg, names[i])) return 0;
  return 1;
}
#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Whether op registers a configuration with exactly k's values (prewarm compiles it). */
static inline int op_registers(const jit_op *op, const jit_key *k) {
  for (int i = 0; i < op->config_count(); i++) {
    jit_key r;
    op->config(i, &r);
    if (memcmp(r.v, k->v, sizeof r.v) == 0) return 1;
  }
  return 0;
}

/* The tuning the runtime would read from the environment now (rt_env_read, as
 * fi_runtime_create does): a test sets a variable, then reads it this way. */
static inline rt_tuning env_tuning(void) {
  rt_env e;
  rt_env_read(&e);
  const rt_tuning t = e.tune;
  rt_env_free(&e);
  return t;
}
static inline const rt_tuning *env_tuning_p(void) {
  static rt_tuning t;
  t = env_tuning();
  return &t;
}

/* call must fail with FI_ERR_INVALID_ARGUMENT and a message containing needle (the last
 * error is poisoned first, so an old message cannot pass). Needs ft.h. */
#define EXPECT_REFUSED(call, needle)                                                             \
  do {                                                                                           \
    poison_error();                                                                              \
    fi_status s_ = (call);                                                                       \
    FT_CHECK(s_ == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), needle),                  \
             "%s: status %d, message: %s (wanted \"%s\")", #call, s_, fi_last_error(), needle); \
  } while (0)
