/* test_api_errors.c: how the public API reports failure: the status names of
 * fi_status_string and the thread-local message of fi_last_error (one per thread,
 * kept by calls that succeed). */
#include <pthread.h>

#include "test_api_util.h"

FT_TEST(status_strings_distinct_and_named) {
  const fi_status all[] = {FI_OK,           FI_ERR_INVALID_ARGUMENT, FI_ERR_UNSUPPORTED,
                           FI_ERR_NO_DEVICE, FI_ERR_COMPILE,         FI_ERR_CACHE,
                           FI_ERR_DEVICE,   FI_ERR_OUT_OF_MEMORY,    FI_ERR_INTERNAL};
  const int n = (int)(sizeof all / sizeof all[0]);
  FT_CHECK_EQ_INT(FI_OK, 0);
  for (int i = 0; i < n; i++) {
    const char *s = fi_status_string(all[i]);
    FT_REQUIRE(s != NULL, "status %d: NULL", (int)all[i]);
    FT_CHECK(strncmp(s, "FI_", 3) == 0, "status %d: '%s'", (int)all[i], s);
    for (int j = 0; j < i; j++)
      FT_CHECK(strcmp(s, fi_status_string(all[j])) != 0, "%d and %d both '%s'", (int)all[i],
               (int)all[j], s);
  }
  FT_CHECK_EQ_STR(fi_status_string(FI_ERR_INVALID_ARGUMENT), "FI_ERR_INVALID_ARGUMENT");
  FT_CHECK_EQ_STR(fi_status_string(FI_OK), "FI_OK");
  const int unknown[] = {1, 42, -9, -1000, INT32_MIN};
  for (int i = 0; i < 5; i++) {
    const char *s = fi_status_string((fi_status)unknown[i]);
    FT_CHECK(s != NULL && s[0], "unknown status %d: NULL or empty", unknown[i]);
    for (int j = 0; s && j < n; j++)
      FT_CHECK(strcmp(s, fi_status_string(all[j])) != 0, "unknown %d reads as '%s'", unknown[i],
               s);
  }
}

typedef struct err_thread {
  fi_runtime *rt;
  pthread_barrier_t *bar;
  int which; /* 0: eps NaN, 1: weight length */
  int bad, initial_not_empty;
  char seen[256];
} err_thread;

static void *err_worker(void *arg) {
  err_thread *e = arg;
  e->initial_not_empty = fi_last_error()[0] != 0;
  call c;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);
  if (e->which == 0)
    c.eps = __builtin_nan("");
  else
    c.w.shape[0] = 1234;
  pthread_barrier_wait(e->bar);
  for (int i = 0; i < 20000; i++) {
    fi_status st = fi_rmsnorm(e->rt, &c.in.t, &c.w.t, c.eps, &c.out.t, NULL);
    const char *m = fi_last_error();
    int ok = st == FI_ERR_INVALID_ARGUMENT &&
             (e->which == 0 ? strstr(m, "eps") && !strstr(m, "1234")
                            : strstr(m, "1234") && !strstr(m, "eps"));
    if (!ok && !e->bad++) snprintf(e->seen, sizeof e->seen, "%s", m);
  }
  return NULL;
}

FT_TEST(last_error_is_thread_local) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  poison_error();
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 2);
  err_thread e[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    memset(&e[i], 0, sizeof e[i]);
    e[i].rt = rt, e[i].bar = &bar, e[i].which = i;
    FT_REQUIRE_EQ_INT(pthread_create(&t[i], NULL, err_worker, &e[i]), 0);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  for (int i = 0; i < 2; i++) {
    FT_CHECK(!e[i].initial_not_empty, "thread %d: a new thread's message is not empty", i);
    FT_CHECK_EQ_INT(e[i].bad, 0, "thread %d: wrong messages, first: %s", i, e[i].seen);
  }
  /* The main thread's message was not touched by either. */
  FT_CHECK_EQ_STR(fi_last_error(), "(poison: no call failed)", "main thread");
  fi_runtime_destroy(rt);
}

FT_TEST(last_error_kept_by_successful_calls) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt != NULL);
  call c;
  call_make(&c, kDLCUDA, kDLBfloat, 16, 4, 4096);
  REQUIRE_ST(fi_rmsnorm(rt, &c.in.t, &c.w.t, -3.0, &c.out.t, NULL), FI_ERR_INVALID_ARGUMENT);
  char before[512];
  snprintf(before, sizeof before, "%s", fi_last_error());
  FT_REQUIRE_STR_HAS(before, "eps");

  c.in.shape[0] = c.out.shape[0] = 0;
  CHECK_ST(fi_rmsnorm(rt, &c.in.t, &c.w.t, 1e-5, &c.out.t, NULL), FI_OK);
  FT_CHECK_EQ_STR(fi_last_error(), before, "after fi_rmsnorm OK");
  fi_runtime *rt2 = mem_runtime();
  FT_CHECK(rt2 != NULL);
  fi_runtime_destroy(rt2);
  FT_CHECK_EQ_STR(fi_last_error(), before, "after create OK");
  char key[256];
  CHECK_ST(fi_admin_config_key("rmsnorm", 0, key, sizeof key), FI_OK);
  fi_admin_stats s;
  CHECK_ST(fi_admin_stats_get(rt, &s), FI_OK);
  FT_CHECK_EQ_STR(fi_last_error(), before, "after admin calls OK");
  fi_runtime_destroy(rt);
}
