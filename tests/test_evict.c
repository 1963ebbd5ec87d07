/* test_evict.c: tests of taking rows out of the store (cache/cache_evict.c):
 * LRU eviction to a size cap, stale rows, and a full file (page limit). */
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache_ops.h"
#include "ft.h"
#include "test_cache_util.h"

static int64_t file_bytes(cache_store *s, int64_t *entries) {
  char err[256];
  int64_t fb = -1, n = -1;
  if (cache_store_totals(s, &n, NULL, &fb, err, sizeof err) != CACHE_OK) return -1;
  if (entries) *entries = n;
  return fb;
}

static int set_times(const char *path, const uint8_t hash[16], long long last_used,
                     long long created) {
  char sql[256], b[40];
  snprintf(sql, sizeof sql, "UPDATE kernels SET last_used = %lld, created = %lld WHERE hash = %s",
           last_used, created, sql_blob(hash, b));
  return raw_exec(path, sql);
}

enum { NROWS = 50, ROW_BYTES = 64 * 1024 };
#define CAP ((int64_t)1 << 20)

/* Row i was last used at 1000 + rank(i); ranks are a permutation of 0..49. */
static int rank_of(int i) { return (i * 17) % NROWS; }

FT_TEST(evict_lru_to_cap) {
  char dir[64], path[128], err[256] = "";
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  cache_store *s = NULL;
  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  static test_rec t[NROWS + 1];
  for (int i = 0; i < NROWS; i++) {
    rec_make(&t[i], i, "decode", "sm_90", "nvrtc-13.0", ROW_BYTES);
    FT_CHECK(cache_store_put(s, &t[i].r, err, sizeof err) == CACHE_OK, "%s", err);
    FT_CHECK(set_times(path, t[i].r.hash, 1000 + rank_of(i), 500) == SQLITE_OK, "raw update");
  }
  int64_t entries = 0, fb0 = file_bytes(s, &entries), evicted = -1;
  FT_CHECK(entries == NROWS && fb0 > 3 * CAP, "before: %lld rows, %lld bytes",
           (long long)entries, (long long)fb0);
  /* Under the cap: nothing to do. */
  FT_CHECK(cache_store_evict(s, fb0, &evicted, err, sizeof err) == CACHE_OK && evicted == 0,
           "at the cap: %lld %s", (long long)evicted, err);

  FT_CHECK(cache_store_evict(s, CAP, &evicted, err, sizeof err) == CACHE_OK, "%s", err);
  int64_t fb = file_bytes(s, &entries);
  FT_CHECK(fb > 0 && fb <= CAP, "file %lld bytes after eviction to %lld", (long long)fb,
           (long long)CAP);
  FT_CHECK(file_size(path) <= CAP, "file on disk %lld", (long long)file_size(path));
  FT_CHECK(evicted > 0 && entries == NROWS - evicted, "evicted %lld, %lld left",
           (long long)evicted, (long long)entries);
  /* About 14 rows of 64 KiB fit in 1 MiB with the pages around them: no
   * more went than the cap asked for. */
  FT_CHECK(entries >= 13, "only %lld rows kept", (long long)entries);
  int wrong = 0;
  for (int i = 0; i < NROWS; i++)
    if (rec_stored(s, &t[i]) != (rank_of(i) >= evicted)) wrong++;
  FT_CHECK(wrong == 0, "%d rows survived or went against LRU order", wrong);

  /* One more row: exactly the least recently used survivor makes room. */
  rec_make(&t[NROWS], NROWS, "decode", "sm_90", "nvrtc-13.0", ROW_BYTES);
  FT_CHECK(cache_store_put(s, &t[NROWS].r, err, sizeof err) == CACHE_OK, "%s", err);
  int64_t before = evicted, again = -1;
  FT_CHECK(cache_store_evict(s, CAP, &again, err, sizeof err) == CACHE_OK && again == 1,
           "steady state evicted %lld (%s)", (long long)again, err);
  FT_CHECK(file_bytes(s, NULL) <= CAP, "over the cap after the second eviction");
  for (int i = 0; i < NROWS; i++)
    if (rank_of(i) == before) FT_CHECK(!rec_stored(s, &t[i]), "LRU survivor %d kept", i);
  FT_CHECK(rec_stored(s, &t[NROWS]), "the newest row was evicted");

  /* A cap below an empty file empties the table, and stops there. */
  FT_CHECK(cache_store_evict(s, 0, &again, err, sizeof err) == CACHE_OK &&
               again == entries && file_bytes(s, &entries) > 0 && entries == 0,
           "evict to 0: %lld, %lld left (%s)", (long long)again, (long long)entries, err);
  FT_CHECK(cache_store_evict(s, -1, &again, err, sizeof err) == CACHE_ERR, "negative cap");
  cache_store_close(s);
  for (int i = 0; i <= NROWS; i++) rec_done(&t[i]);
  td_end(dir);
}

FT_TEST(evict_ties_by_created) {
  char dir[64], path[128], err[256] = "";
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  cache_store *s = NULL;
  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  test_rec t[3];
  long long created[3] = {30, 10, 20};
  for (int i = 0; i < 3; i++) {
    rec_make(&t[i], i, "rope", "sm_80", "nvrtc-13.0", ROW_BYTES);
    FT_CHECK(cache_store_put(s, &t[i].r, err, sizeof err) == CACHE_OK, "%s", err);
    FT_CHECK(set_times(path, t[i].r.hash, 5000, created[i]) == SQLITE_OK, "raw update");
  }
  /* The updates above left free pages: give them back first (a delete of
   * nothing vacuums), then one byte over the size means one row must go,
   * the oldest created among equals. */
  int64_t none = -1, evicted = -1;
  FT_CHECK(cache_store_delete(s, "nosuch", NULL, &none, err, sizeof err) == CACHE_OK, "%s", err);
  int64_t fb = file_bytes(s, NULL);
  FT_CHECK(cache_store_evict(s, fb - 1, &evicted, err, sizeof err) == CACHE_OK && evicted == 1,
           "evicted %lld (%s)", (long long)evicted, err);
  FT_CHECK(rec_stored(s, &t[0]) && !rec_stored(s, &t[1]) && rec_stored(s, &t[2]),
           "the row created first should have gone");
  cache_store_close(s);

  /* A read-only store evicts nothing. */
  FT_REQUIRE(cache_store_open(path, CACHE_OPEN_READONLY, &s, err, sizeof err) == CACHE_OK, "%s",
             err);
  FT_CHECK(cache_store_evict(s, 0, &evicted, err, sizeof err) == CACHE_ERR && evicted == 0,
           "read-only evict");
  cache_store_close(s);
  for (int i = 0; i < 3; i++) rec_done(&t[i]);
  td_end(dir);
}

FT_TEST(evict_remove_stale) {
  char err[256] = "";
  cache_store *s = NULL;
  FT_REQUIRE(cache_store_open(":memory:", 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  struct {
    const char *arch, *compiler, *templates, *abi;
  } rows[] = {
      {"sm_90", "nvrtc-13.0", "tmpl-1", "1.1"},   /* 0: current */
      {"sm_90", "nvrtc-12.8", "tmpl-1", "1.1"},   /* 1: another NVRTC */
      {"gfx942", "hiprtc-5.2", "tmpl-1", "1.1"},  /* 2: current */
      {"gfx942", "hiprtc-6.0", "tmpl-1", "1.1"},  /* 3: another hiprtc */
      {"sm_80", "nvrtc-13.0", "tmpl-0", "1.1"},   /* 4: other templates */
      {"sm_80", "nvrtc-13.0", "tmpl-1", "1.0"},   /* 5: other ABI */
      {"sm_90a", "nvrtc-13.0", "tmpl-1", "1.1"},  /* 6: current */
  };
  enum { N = sizeof rows / sizeof rows[0] };
  test_rec t[N];
  for (int i = 0; i < N; i++) {
    rec_make(&t[i], i, "norm", rows[i].arch, rows[i].compiler, 500);
    t[i].r.templates = rows[i].templates;
    t[i].r.abi = rows[i].abi;
    FT_CHECK(cache_store_put(s, &t[i].r, err, sizeof err) == CACHE_OK, "%s", err);
  }
  int64_t removed = -1, n = 0;
  FT_CHECK(cache_store_remove_stale(s, NULL, NULL, NULL, NULL, &removed, err, sizeof err) ==
                   CACHE_OK &&
               removed == 0,
           "nothing known: removed %lld", (long long)removed);
  /* Knowing NVRTC says nothing about hiprtc's rows, and the reverse. */
  FT_CHECK(cache_store_remove_stale(s, "nvrtc-13.0", NULL, NULL, NULL, &removed, err,
                                    sizeof err) == CACHE_OK &&
               removed == 1 && !rec_stored(s, &t[1]),
           "nvrtc: removed %lld", (long long)removed);
  FT_CHECK(cache_store_remove_stale(s, NULL, "hiprtc-5.2", NULL, NULL, &removed, err,
                                    sizeof err) == CACHE_OK &&
               removed == 1 && !rec_stored(s, &t[3]),
           "hiprtc: removed %lld", (long long)removed);
  FT_CHECK(cache_store_remove_stale(s, "nvrtc-13.0", "hiprtc-5.2", "tmpl-1", "1.1", &removed, err,
                                    sizeof err) == CACHE_OK &&
               removed == 2,
           "templates and abi: removed %lld", (long long)removed);
  FT_CHECK(cache_store_totals(s, &n, NULL, NULL, err, sizeof err) == CACHE_OK && n == 3,
           "%lld rows left", (long long)n);
  FT_CHECK(rec_stored(s, &t[0]) && rec_stored(s, &t[2]) && rec_stored(s, &t[6]),
           "a current row was removed");
  for (int i = 0; i < N; i++) rec_done(&t[i]);
  cache_store_close(s);
}

FT_TEST(evict_full_file) {
  char dir[64], path[128], err[256] = "";
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  cache_store *s = NULL;
  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  test_rec t[3], big;
  for (int i = 0; i < 3; i++) {
    rec_make(&t[i], i, "silu", "sm_90", "nvrtc-13.0", 1000);
    FT_CHECK(cache_store_put(s, &t[i].r, err, sizeof err) == CACHE_OK, "%s", err);
  }
  int64_t fb = file_bytes(s, NULL), n = 0;
  FT_CHECK(cache_store_limit_pages(s, fb / 4096 + 4, err, sizeof err) == CACHE_OK, "%s", err);
  rec_make(&big, 9, "silu", "sm_90", "nvrtc-13.0", 256 * 1024);
  err[0] = '\0';
  FT_CHECK(cache_store_put(s, &big.r, err, sizeof err) == CACHE_ERR, "a put past the limit");
  FT_CHECK(strstr(err, "full") != NULL, "message: %s", err);
  /* Still readable, the earlier rows whole, the failed one absent. */
  for (int i = 0; i < 3; i++) FT_CHECK(rec_stored(s, &t[i]), "row %d after the failed put", i);
  FT_CHECK(!rec_stored(s, &big), "half a put is visible");
  FT_CHECK(cache_store_totals(s, &n, NULL, NULL, err, sizeof err) == CACHE_OK && n == 3,
           "totals: %lld %s", (long long)n, err);
  cache_store_close(s);
  /* The limit belongs to the connection, not the file. */
  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(cache_store_put(s, &big.r, err, sizeof err) == CACHE_OK && rec_stored(s, &big),
           "after reopening: %s", err);
  cache_store_close(s);
  for (int i = 0; i < 3; i++) rec_done(&t[i]);
  rec_done(&big);
  td_end(dir);
}
