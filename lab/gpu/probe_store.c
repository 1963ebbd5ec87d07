/* probe_store.c: times each step of opening the kernel cache and reading one
 * entry in a fresh process, to find where a first call's time goes. Not a test. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cache_store.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *path = argv[1];
  double t[16];
  int n = 0;
  const char *names[16];
#define MARK(s) (names[n] = (s), t[n++] = now_us())
  MARK("start");
  sqlite3_initialize();
  MARK("sqlite3_initialize");
  sqlite3 *db;
  sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
  int persist = 1;
  sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
  MARK("sqlite3_open_v2");
  sqlite3_exec(db, "PRAGMA busy_timeout=10000", NULL, NULL, NULL);
  MARK("busy_timeout");
  sqlite3_stmt *st;
  sqlite3_prepare_v2(db, "SELECT v FROM meta WHERE k='schema_version'", -1, &st, NULL);
  MARK("prepare (schema parse)");
  sqlite3_step(st);
  MARK("step (read txn)");
  sqlite3_finalize(st);
  sqlite3_exec(db, "PRAGMA journal_mode", NULL, NULL, NULL);
  MARK("journal_mode");
  sqlite3_prepare_v2(db, "SELECT count(*) FROM kernels", -1, &st, NULL);
  sqlite3_step(st);
  sqlite3_finalize(st);
  MARK("second read txn");
  sqlite3_close(db);
  MARK("close");
  char err[256];
  cache_store *s;
  int rc = cache_store_open(path, 0, &s, err, sizeof err);
  MARK("cache_store_open (2nd)");
  uint8_t kh[16] = {0};
  cache_record rec;
  rc = cache_store_find(s, kh, NULL, &rec, err, sizeof err);
  MARK("cache_store_find");
  cache_store_close(s);
  MARK("cache_store_close");
  for (int i = 1; i < n; i++) printf("%s=%.0f ", names[i], t[i] - t[i - 1]);
  printf("(rc %d %s)\n", rc, err);
  return 0;
}
