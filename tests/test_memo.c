/* test_memo.c: tests of the in-process memo (cache/cache_memo.c): lookups,
 * first-writer-wins, growth, lock-free reads during inserts, destroy. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cache_memo.h"
#include "ft.h"

/* FT_REQUIRE evaluates its condition twice; this evaluates it once. */
#define REQUIRE(cond, ...)                       \
  do {                                           \
    int req_ok_ = 0;                             \
    FT_CHECK((req_ok_ = !!(cond)), __VA_ARGS__); \
    if (!req_ok_) return;                        \
  } while (0)

/* Key i of the tests and the value that encodes it, so a reader can tell a
 * wrong value from the right one. */
static uint64_t key0(uint64_t i) { return i * 0x9e3779b97f4a7c15ull; }
static uint64_t key1(uint64_t i) { return ~i; }
static int key_dev(uint64_t i) { return (int)(i % 3); }
static void *enc(uint64_t i) { return (void *)(uintptr_t)((i + 1) * 8); }

FT_TEST(memo_put_get) {
  cache_memo *m = cache_memo_create();
  REQUIRE(m != NULL, "create");
  int a, b, c;
  FT_CHECK(cache_memo_get(m, 1, 2, 0) == NULL, "empty memo");
  FT_CHECK(cache_memo_put(m, 1, 2, 0, &a) == &a, "put returns the stored value");
  FT_CHECK(cache_memo_get(m, 1, 2, 0) == &a, "get after put");
  FT_CHECK(cache_memo_get(m, 2, 1, 0) == NULL, "swapped halves are another key");
  FT_CHECK(cache_memo_get(m, 1, 3, 0) == NULL, "k1 differs");
  /* The first value wins; the second caller learns it and keeps its own. */
  FT_CHECK(cache_memo_put(m, 1, 2, 0, &b) == &a, "existing key returns the first value");
  FT_CHECK(cache_memo_get(m, 1, 2, 0) == &a, "first value kept");
  FT_CHECK(cache_memo_count(m) == 1, "count %lld", (long long)cache_memo_count(m));
  /* Another device is another key. */
  FT_CHECK(cache_memo_get(m, 1, 2, 1) == NULL, "device 1 absent");
  FT_CHECK(cache_memo_put(m, 1, 2, 1, &c) == &c, "device 1 put");
  FT_CHECK(cache_memo_get(m, 1, 2, 1) == &c && cache_memo_get(m, 1, 2, 0) == &a,
           "both devices kept apart");
  FT_CHECK(cache_memo_count(m) == 2, "count %lld", (long long)cache_memo_count(m));
  FT_CHECK(cache_memo_put(m, 5, 5, 0, NULL) == NULL && cache_memo_get(m, 5, 5, 0) == NULL,
           "a NULL value is refused");
  FT_CHECK(cache_memo_count(m) == 2, "count after NULL put");
  cache_memo_destroy(m, NULL, NULL);
}

FT_TEST(memo_growth) {
  cache_memo *m = cache_memo_create();
  REQUIRE(m != NULL, "create");
  const uint64_t n = 10000;
  for (uint64_t i = 0; i < n; i++) {
    if (cache_memo_put(m, key0(i), key1(i), key_dev(i), enc(i)) != enc(i)) {
      FT_CHECK(0, "put %llu", (unsigned long long)i);
      break;
    }
  }
  FT_CHECK(cache_memo_count(m) == (int64_t)n, "count %lld", (long long)cache_memo_count(m));
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (cache_memo_get(m, key0(i), key1(i), key_dev(i)) != enc(i)) wrong++;
    /* Same halves, other device: never stored. */
    if (cache_memo_get(m, key0(i), key1(i), key_dev(i) + 3) != NULL) wrong++;
  }
  for (uint64_t i = n; i < 2 * n; i++)
    if (cache_memo_get(m, key0(i), key1(i), key_dev(i)) != NULL) wrong++;
  FT_CHECK(wrong == 0, "%llu wrong lookups after growth", (unsigned long long)wrong);
  cache_memo_destroy(m, NULL, NULL);
}

typedef struct hammer {
  cache_memo *m;
  _Atomic uint64_t published; /* keys [0, published) are stored */
  atomic_int done, ready;
  uint64_t total;
} hammer;

typedef struct reader_res {
  hammer *h;
  uint64_t lookups, overlapped, wrong, missing;
} reader_res;

static void *reader_main(void *p) {
  reader_res *r = p;
  hammer *h = r->h;
  uint64_t x = (uint64_t)(uintptr_t)p | 1;
  atomic_fetch_add(&h->ready, 1);
  while (!atomic_load(&h->done)) {
    uint64_t pub = atomic_load(&h->published);
    for (int k = 0; k < 256; k++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      /* Mostly published keys, some not yet (or never) stored. */
      uint64_t i = x % (pub + pub / 8 + 1);
      void *v = cache_memo_get(h->m, key0(i), key1(i), key_dev(i));
      r->lookups++;
      if (v != NULL && v != enc(i)) r->wrong++;
      if (v == NULL && i < pub) r->missing++;
    }
    if (pub < h->total) r->overlapped++;
  }
  return NULL;
}

/* One round: 4 readers hammer get while this thread inserts 20000 keys. */
static void hammer_round(uint64_t *overlapped) {
  hammer h = {cache_memo_create(), 0, 0, 0, 20000};
  REQUIRE(h.m != NULL, "create");
  pthread_t th[4];
  reader_res res[4];
  int started = 0;
  for (int i = 0; i < 4; i++) {
    res[i] = (reader_res){&h, 0, 0, 0, 0};
    if (pthread_create(&th[i], NULL, reader_main, &res[i]) != 0) break;
    started++;
  }
  FT_CHECK(started == 4, "pthread_create");
  while (atomic_load(&h.ready) < started) sched_yield();
  uint64_t put_wrong = 0;
  for (uint64_t i = 0; i < h.total; i++) {
    if (cache_memo_put(h.m, key0(i), key1(i), key_dev(i), enc(i)) != enc(i)) put_wrong++;
    atomic_store(&h.published, i + 1);
    /* On 2 cores, let readers run between growths. */
    if (i % 512 == 0) sched_yield();
  }
  atomic_store(&h.done, 1);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  FT_CHECK(put_wrong == 0, "%llu puts failed", (unsigned long long)put_wrong);
  for (int i = 0; i < started; i++) {
    *overlapped += res[i].overlapped;
    FT_CHECK(res[i].wrong == 0, "reader %d saw %llu wrong values", i,
             (unsigned long long)res[i].wrong);
    FT_CHECK(res[i].missing == 0, "reader %d missed %llu published keys", i,
             (unsigned long long)res[i].missing);
  }
  FT_CHECK(cache_memo_count(h.m) == (int64_t)h.total, "count %lld",
           (long long)cache_memo_count(h.m));
  cache_memo_destroy(h.m, NULL, NULL);
}

FT_TEST(memo_concurrent_readers) {
  uint64_t overlapped = 0;
  for (int round = 0; round < 10; round++) hammer_round(&overlapped);
  /* Batches of lookups that ran while inserts were still going on. */
  FT_CHECK(overlapped > 0, "readers never overlapped the writer");
  fprintf(stderr, "  %llu lookup batches overlapped inserts\n", (unsigned long long)overlapped);
}

typedef struct free_log {
  int calls;
  int *seen; /* times each value was freed */
} free_log;

static void free_value(void *value, void *user) {
  free_log *log = user;
  if (!log) return;
  int *v = value;
  log->calls++;
  log->seen[*v]++;
  free(v);
}

FT_TEST(memo_destroy_frees_once) {
  enum { N = 3000 };
  cache_memo *m = cache_memo_create();
  REQUIRE(m != NULL, "create");
  free_log log = {0, calloc(N + 1, sizeof(int))};
  REQUIRE(log.seen != NULL, "calloc");
  for (int i = 0; i < N; i++) {
    int *v = malloc(sizeof *v);
    *v = i;
    if (cache_memo_put(m, key0((uint64_t)i), key1((uint64_t)i), 0, v) != v) free(v);
  }
  /* A losing duplicate stays the caller's: destroy must not free it. */
  int *dup = malloc(sizeof *dup);
  *dup = N;
  FT_CHECK(cache_memo_put(m, key0(7), key1(7), 0, dup) != dup, "duplicate won");
  free(dup);
  cache_memo_destroy(m, free_value, &log);
  int twice = 0, never = 0;
  for (int i = 0; i < N; i++) {
    if (log.seen[i] > 1) twice++;
    if (log.seen[i] == 0) never++;
  }
  FT_CHECK(log.calls == N, "free_value called %d times for %d values", log.calls, N);
  FT_CHECK(twice == 0 && never == 0, "%d freed twice, %d never", twice, never);
  FT_CHECK(log.seen[N] == 0, "the rejected duplicate was freed");
  free(log.seen);
  cache_memo_destroy(NULL, free_value, NULL); /* no-op */
}
