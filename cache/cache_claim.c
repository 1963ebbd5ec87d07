/* cache_claim.c: compile claims, one row per key being compiled, so that
 * processes sharing a cache file compile each kernel once (single flight). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "cache_internal.h"
#include "cache_ops.h"

static const char *const SQL_READY =
    "SELECT 1 FROM kernels WHERE key_hash = ?1 AND (?2 IS NULL OR compiler = ?2) LIMIT 1";
static const char *const SQL_GET =
    "SELECT pid, start, host, started FROM claims WHERE key_hash = ?1";
static const char *const SQL_SET =
    "INSERT OR REPLACE INTO claims(key_hash, pid, start, host, started)"
    " VALUES(?1, ?2, ?3, ?4, ?5)";
static const char *const SQL_DROP =
    "DELETE FROM claims WHERE key_hash = ?1 AND pid = ?2 AND start = ?3 AND host = ?4";

/* Start time of a process in clock ticks since boot (field 22 of
 * /proc/<pid>/stat), or -1. With the pid it names one process for good: a
 * reused pid comes with another start time. The command name (field 2) may
 * hold spaces and parentheses, so fields are counted after the last ')'. */
static int64_t claim_proc_start(int64_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  p++;
  /* After ')' come fields 3 (state), 4, ...: field 22 is the 20th. */
  for (int field = 3; field < 22; field++) {
    while (*p == ' ') p++;
    while (*p && *p != ' ') p++;
    if (!*p) return -1;
  }
  char *end = NULL;
  long long v = strtoll(p, &end, 10);
  return end == p || v < 0 ? -1 : (int64_t)v;
}

/* Who we are as a claim owner; again after a fork (another pid). */
static void claim_self(cache_store *s) {
  int64_t pid = (int64_t)getpid();
  if (s->self_pid == pid) return;
  s->self_pid = pid;
  int64_t start = claim_proc_start(pid);
  /* 0 means "unknown": others then judge the claim by its pid alone. */
  s->self_start = start > 0 ? start : 0;
  if (gethostname(s->host, sizeof s->host - 1) != 0) snprintf(s->host, sizeof s->host, "?");
  s->host[sizeof s->host - 1] = '\0';
}

/* Whether the owner of a claim is gone: on this host, its pid is free or
 * names a process started at another time; anywhere, the claim is older
 * than stale_after_s (when positive). */
static int claim_owner_gone(cache_store *s, int64_t pid, int64_t start, const char *host,
                            int64_t started, int64_t stale_after_s) {
  if (stale_after_s > 0 && cache_now() - started > stale_after_s) return 1;
  if (!host || strcmp(host, s->host) != 0) return 0; /* its pids are not ours to see */
  /* pid 0 or negative would make kill() signal a process group. */
  if (pid <= 0 || pid > INT_MAX) return 1;
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 1; /* EPERM: it exists */
  int64_t now_start = claim_proc_start(pid);
  return start > 0 && now_start >= 0 && now_start != start;
}

enum { LOOK_READY, LOOK_FREE, LOOK_GONE, LOOK_MINE, LOOK_BUSY };

/* What the file says about key_hash now: a row, no claim, a dead owner's
 * claim, our own claim, or a live owner's claim. */
static int claim_look(cache_store *s, const uint8_t key_hash[16], const char *compiler,
                      int64_t stale_after_s, int *look, char *err, size_t errlen) {
  sqlite3_stmt *ready = cache_stmt_sql(s, ST_CLAIM_READY, SQL_READY, err, errlen);
  sqlite3_stmt *get = ready ? cache_stmt_sql(s, ST_CLAIM_GET, SQL_GET, err, errlen) : NULL;
  if (!get) return CACHE_ERR;
  int rc = sqlite3_bind_blob(ready, 1, key_hash, 16, SQLITE_STATIC);
  if (rc == SQLITE_OK)
    rc = compiler ? sqlite3_bind_text(ready, 2, compiler, -1, SQLITE_STATIC)
                  : sqlite3_bind_null(ready, 2);
  if (rc == SQLITE_OK) rc = sqlite3_step(ready);
  cache_stmt_done(ready);
  if (rc == SQLITE_ROW) {
    *look = LOOK_READY;
    return CACHE_OK;
  }
  if (rc != SQLITE_DONE) return cache_sqerr(s, rc, "claim: looking for the kernel", err, errlen);
  rc = sqlite3_bind_blob(get, 1, key_hash, 16, SQLITE_STATIC);
  if (rc == SQLITE_OK) rc = sqlite3_step(get);
  if (rc == SQLITE_DONE) {
    *look = LOOK_FREE;
  } else if (rc == SQLITE_ROW) {
    int64_t pid = sqlite3_column_int64(get, 0), start = sqlite3_column_int64(get, 1);
    const char *host = (const char *)sqlite3_column_text(get, 2);
    int64_t started = sqlite3_column_int64(get, 3);
    if (pid == s->self_pid && start == s->self_start && host && strcmp(host, s->host) == 0)
      *look = LOOK_MINE;
    else
      *look = claim_owner_gone(s, pid, start, host, started, stale_after_s) ? LOOK_GONE
                                                                            : LOOK_BUSY;
    rc = SQLITE_DONE;
  }
  cache_stmt_done(get);
  return rc == SQLITE_DONE ? CACHE_OK : cache_sqerr(s, rc, "claim: reading", err, errlen);
}

static int claim_write(cache_store *s, const uint8_t key_hash[16], char *err, size_t errlen) {
  sqlite3_stmt *set = cache_stmt_sql(s, ST_CLAIM_SET, SQL_SET, err, errlen);
  if (!set) return CACHE_ERR;
  int rc = sqlite3_bind_blob(set, 1, key_hash, 16, SQLITE_STATIC);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(set, 2, s->self_pid);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(set, 3, s->self_start);
  if (rc == SQLITE_OK) rc = sqlite3_bind_text(set, 4, s->host, -1, SQLITE_STATIC);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(set, 5, cache_now());
  if (rc == SQLITE_OK) rc = sqlite3_step(set);
  cache_stmt_done(set);
  return rc == SQLITE_DONE ? CACHE_OK : cache_sqerr(s, rc, "claim: writing", err, errlen);
}

static int claim_outcome(int look) {
  return look == LOOK_READY ? CACHE_CLAIM_READY : look == LOOK_BUSY ? CACHE_CLAIM_BUSY
                                                                     : CACHE_CLAIM_OURS;
}

int cache_store_claim(cache_store *s, const uint8_t key_hash[16], const char *compiler,
                      int64_t stale_after_s, int *outcome, int *took_over, char *err,
                      size_t errlen) {
  if (took_over) *took_over = 0;
  if (!key_hash || !outcome) {
    cache_seterr(err, errlen, "claim: NULL argument");
    return CACHE_ERR;
  }
  *outcome = CACHE_CLAIM_BUSY;
  if (!cache_writable(s, "claim", err, errlen)) return CACHE_ERR;
  cache_lock(s);
  claim_self(s);
  /* First without the write lock: waiters polling a busy key, and callers
   * finding the kernel there, never queue behind the compiling writer. */
  int look = LOOK_BUSY;
  int ret = claim_look(s, key_hash, compiler, stale_after_s, &look, err, errlen);
  if (ret == CACHE_OK && (look == LOOK_FREE || look == LOOK_GONE)) {
    /* Again inside the write transaction: another process may have
     * claimed or stored the key since. */
    ret = cache_exec(s, "BEGIN IMMEDIATE", "claim: begin", err, errlen);
    if (ret == CACHE_OK) ret = claim_look(s, key_hash, compiler, stale_after_s, &look, err, errlen);
    if (ret == CACHE_OK && (look == LOOK_FREE || look == LOOK_GONE))
      ret = claim_write(s, key_hash, err, errlen);
    if (ret == CACHE_OK) ret = cache_exec(s, "COMMIT", "claim: commit", err, errlen);
    if (ret != CACHE_OK) cache_rollback(s);
  }
  if (ret == CACHE_OK) {
    *outcome = claim_outcome(look);
    if (took_over) *took_over = look == LOOK_GONE;
  }
  cache_unlock(s);
  return ret;
}

int cache_store_unclaim(cache_store *s, const uint8_t key_hash[16], char *err, size_t errlen) {
  if (!key_hash) {
    cache_seterr(err, errlen, "unclaim: NULL key hash");
    return CACHE_ERR;
  }
  if (!cache_writable(s, "unclaim", err, errlen)) return CACHE_ERR;
  cache_lock(s);
  claim_self(s);
  sqlite3_stmt *drop = cache_stmt_sql(s, ST_CLAIM_DROP, SQL_DROP, err, errlen);
  int ret = CACHE_ERR;
  if (drop) {
    /* Only our own claim: another owner's, even one we think is gone, is
     * left for cache_store_claim to judge. */
    int rc = sqlite3_bind_blob(drop, 1, key_hash, 16, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(drop, 2, s->self_pid);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(drop, 3, s->self_start);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(drop, 4, s->host, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(drop);
    cache_stmt_done(drop);
    ret = rc == SQLITE_DONE ? CACHE_OK : cache_sqerr(s, rc, "unclaim", err, errlen);
  }
  cache_unlock(s);
  return ret;
}
