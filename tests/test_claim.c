/* test_claim.c: tests of compile claims (cache/cache_claim.c): ownership, the
 * takeover of dead, reused and stale owners, release by put, processes racing. */
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache_ops.h"
#include "ft.h"
#include "test_cache_util.h"

/* Start time of pid (field 22 of /proc/<pid>/stat), parsed here apart from
 * the store's own parser so that the two check each other. */
static long long proc_start(pid_t pid) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  char *save = NULL;
  int field = 2;
  for (char *tok = strtok_r(p + 1, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
    if (++field == 22) return atoll(tok);
  return -1;
}

/* A claims row as another owner would have written it. */
static int put_claim(const char *path, const uint8_t key[16], long long pid, long long start,
                     const char *host, long long started) {
  char sql[600], b[40];
  snprintf(sql, sizeof sql,
           "INSERT OR REPLACE INTO claims(key_hash, pid, start, host, started)"
           " VALUES(%s, %lld, %lld, '%s', %lld)",
           sql_blob(key, b), pid, start, host, started);
  return raw_exec(path, sql);
}

/* The pid in the claim on key; 0 when there is none. */
static long long claim_pid(const char *path, const uint8_t key[16]) {
  char sql[200], b[40];
  snprintf(sql, sizeof sql, "SELECT coalesce(max(pid), 0) FROM claims WHERE key_hash = %s",
           sql_blob(key, b));
  return (long long)raw_int(path, sql);
}

/* A process that stays alive until killed: a live owner with a known pid. */
static pid_t spawn_sleeper(void) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30); /* never outlives a test that stopped half way */
    for (;;) pause();
  }
  return pid;
}

static void reap(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

FT_TEST(claim_owners) {
  char dir[64], path[128], err[256] = "", host[256] = "";
  td_begin(dir);
  snprintf(path, sizeof path, "%s/k.db", dir);
  gethostname(host, sizeof host - 1);
  cache_store *s = NULL;
  FT_REQUIRE(cache_store_open(path, 0, &s, err, sizeof err) == CACHE_OK, "%s", err);
  test_rec t;
  rec_make(&t, 1, "decode", "sm_90", "nvrtc-13.0", 2000);
  const uint8_t *key = t.r.key_hash;
  int out = -1, took = -1;
  long long now = (long long)time(NULL), me = (long long)getpid();
#define CLAIM(stale) cache_store_claim(s, key, "nvrtc-13.0", stale, &out, &took, err, sizeof err)

  FT_CHECK(CLAIM(60) == CACHE_OK && out == CACHE_CLAIM_OURS && took == 0, "first: %d %d %s", out,
           took, err);
  FT_CHECK(claim_pid(path, key) == me, "claim row pid %lld", claim_pid(path, key));
  FT_CHECK(CLAIM(60) == CACHE_OK && out == CACHE_CLAIM_OURS && took == 0, "re-entrant: %d %d",
           out, took);

  /* A live process on this host with its real start time holds it. */
  pid_t live = spawn_sleeper();
  FT_REQUIRE(live > 0, "fork");
  long long live_start = proc_start(live);
  FT_CHECK(live_start > 0, "start time of %d", (int)live);
  FT_REQUIRE(put_claim(path, key, live, live_start, host, now) == SQLITE_OK, "raw insert");
  FT_CHECK(CLAIM(60) == CACHE_OK && out == CACHE_CLAIM_BUSY, "live owner: %d %s", out, err);
  FT_CHECK(claim_pid(path, key) == live, "a busy claim must stay its owner's");
  /* Its pid with another start time: the pid was reused, the owner is gone. */
  FT_REQUIRE(put_claim(path, key, live, live_start + 12345, host, now) == SQLITE_OK, "raw");
  FT_CHECK(CLAIM(60) == CACHE_OK && out == CACHE_CLAIM_OURS && took == 1, "reused pid: %d %d",
           out, took);
  FT_CHECK(claim_pid(path, key) == me, "taken over: pid %lld", claim_pid(path, key));
  /* A live owner whose claim is older than stale_after_s: taken over; with
   * no age limit (0) it stays busy. */
  FT_REQUIRE(put_claim(path, key, live, live_start, host, now - 1000) == SQLITE_OK, "raw");
  FT_CHECK(CLAIM(0) == CACHE_OK && out == CACHE_CLAIM_BUSY, "no age limit: %d", out);
  FT_CHECK(CLAIM(60) == CACHE_OK && out == CACHE_CLAIM_OURS && took == 1, "stale: %d %d", out,
           took);
  /* The same owner once it died. */
  FT_REQUIRE(put_claim(path, key, live, live_start, host, now) == SQLITE_OK, "raw");
  reap(live);
  FT_CHECK(CLAIM(60) == CACHE_OK && out == CACHE_CLAIM_OURS && took == 1, "dead owner: %d %d",
           out, took);

  /* Another host: its pids mean nothing here, only the age counts. */
  FT_REQUIRE(put_claim(path, key, me, proc_start(getpid()) + 1, "fi-other-host", now) ==
                 SQLITE_OK,
             "raw");
  FT_CHECK(CLAIM(60) == CACHE_OK && out == CACHE_CLAIM_BUSY, "other host, fresh: %d", out);
  FT_REQUIRE(put_claim(path, key, 1, 1, "fi-other-host", now - 1000) == SQLITE_OK, "raw");
  FT_CHECK(CLAIM(60) == CACHE_OK && out == CACHE_CLAIM_OURS && took == 1,
           "other host, stale: %d %d", out, took);

  /* put stores the kernel and ends the claim in one transaction. */
  FT_CHECK(cache_store_put(s, &t.r, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(claim_pid(path, key) == 0, "put left the claim of pid %lld", claim_pid(path, key));
  FT_CHECK(CLAIM(60) == CACHE_OK && out == CACHE_CLAIM_READY && took == 0, "ready: %d", out);
  FT_CHECK(cache_store_claim(s, key, NULL, 60, &out, NULL, err, sizeof err) == CACHE_OK &&
               out == CACHE_CLAIM_READY,
           "ready, any compiler: %d", out);
  FT_CHECK(claim_pid(path, key) == 0, "READY must not claim");
  /* Another compiler's binary does not make the key ready for us. */
  FT_CHECK(cache_store_claim(s, key, "nvrtc-12.8", 60, &out, &took, err, sizeof err) ==
                   CACHE_OK &&
               out == CACHE_CLAIM_OURS,
           "other compiler: %d", out);
  FT_CHECK(cache_store_unclaim(s, key, err, sizeof err) == CACHE_OK && claim_pid(path, key) == 0,
           "unclaim: %s", err);
  /* put removes the claim on its key whoever holds it. */
  FT_REQUIRE(put_claim(path, key, 1, 1, "fi-other-host", now) == SQLITE_OK, "raw");
  FT_CHECK(cache_store_put(s, &t.r, err, sizeof err) == CACHE_OK && claim_pid(path, key) == 0,
           "put with a foreign claim: %s", err);

  /* unclaim drops our claim only. */
  test_rec u, v;
  rec_make(&u, 2, "decode", "sm_90", "nvrtc-13.0", 100);
  rec_make(&v, 3, "decode", "sm_90", "nvrtc-13.0", 100);
  FT_REQUIRE(put_claim(path, u.r.key_hash, 1, 1, "fi-other-host", now) == SQLITE_OK, "raw");
  FT_CHECK(cache_store_unclaim(s, u.r.key_hash, err, sizeof err) == CACHE_OK, "%s", err);
  FT_CHECK(claim_pid(path, u.r.key_hash) == 1, "unclaim removed another owner's claim");
  FT_CHECK(cache_store_claim(s, v.r.key_hash, NULL, 60, &out, &took, err, sizeof err) ==
                   CACHE_OK &&
               out == CACHE_CLAIM_OURS && claim_pid(path, v.r.key_hash) == me,
           "claim v: %d", out);
  FT_CHECK(cache_store_unclaim(s, v.r.key_hash, err, sizeof err) == CACHE_OK &&
               claim_pid(path, v.r.key_hash) == 0,
           "unclaim v: %s", err);
  FT_CHECK(claim_pid(path, u.r.key_hash) == 1, "the other claim must stay");
  cache_store_close(s);

  /* A read-only store takes no claims. */
  FT_REQUIRE(cache_store_open(path, CACHE_OPEN_READONLY, &s, err, sizeof err) == CACHE_OK, "%s",
             err);
  FT_CHECK(cache_store_claim(s, v.r.key_hash, NULL, 60, &out, &took, err, sizeof err) ==
               CACHE_ERR,
           "read-only claim");
  cache_store_close(s);
#undef CLAIM
  rec_done(&t);
  rec_done(&u);
  rec_done(&v);
  td_end(dir);
}

/* Keys the children race for, all in the same order so that they collide;
 * the first is held long enough that the others must wait for it. */
enum { NKEYS = 16 };

/* Shared between the racing children (MAP_SHARED). */
typedef struct race {
  atomic_int holders[NKEYS], max_holders[NKEYS], ours[NKEYS], ready, busy, errors;
} race;

static int race_key(cache_store *s, race *r, int id, int k, int *saw_busy) {
  char err[256];
  test_rec t;
  rec_make(&t, 7 + k, "prefill", "sm_90", "nvrtc-13.0", 30000);
  int rc = 1;
  for (int tries = 0; tries < 20000; tries++) {
    int out = -1, took = 0;
    if (cache_store_claim(s, t.r.key_hash, "nvrtc-13.0", 300, &out, &took, err, sizeof err) !=
        CACHE_OK) {
      fprintf(stderr, "  child %d key %d: claim: %s\n", id, k, err);
      break;
    }
    if (out == CACHE_CLAIM_BUSY) {
      *saw_busy = 1;
      usleep(1000);
      continue;
    }
    rc = 0;
    if (out == CACHE_CLAIM_OURS) {
      int h = atomic_fetch_add(&r->holders[k], 1) + 1;
      int m = atomic_load(&r->max_holders[k]);
      while (h > m && !atomic_compare_exchange_weak(&r->max_holders[k], &m, h)) {
      }
      atomic_fetch_add(&r->ours[k], 1);
      usleep(k == 0 ? 300 * 1000 : 5000); /* "compiling" while the others poll */
      if (cache_store_put(s, &t.r, err, sizeof err) != CACHE_OK) {
        fprintf(stderr, "  child %d key %d: put: %s\n", id, k, err);
        rc = 1;
      }
      atomic_fetch_sub(&r->holders[k], 1);
    } else {
      cache_record got;
      if (cache_store_find(s, t.r.key_hash, "nvrtc-13.0", &got, err, sizeof err) != CACHE_OK ||
          !rec_same(&got, &t)) {
        fprintf(stderr, "  child %d key %d: READY but find failed: %s\n", id, k, err);
        rc = 1;
      }
      cache_record_free(&got);
      atomic_fetch_add(&r->ready, 1);
    }
    break;
  }
  rec_done(&t);
  return rc;
}

static int race_child(const char *path, race *r, int id) {
  char err[256];
  cache_store *s = NULL;
  if (cache_store_open(path, 0, &s, err, sizeof err) != CACHE_OK) {
    fprintf(stderr, "  child %d: open: %s\n", id, err);
    atomic_fetch_add(&r->errors, 1);
    return 1;
  }
  int rc = 0, saw_busy = 0;
  for (int k = 0; k < NKEYS && rc == 0; k++) rc = race_key(s, r, id, k, &saw_busy);
  if (saw_busy) atomic_fetch_add(&r->busy, 1);
  if (rc) atomic_fetch_add(&r->errors, 1);
  cache_store_close(s);
  return rc;
}

FT_TEST(claim_processes_race) {
  char dir[64], path[128];
  td_begin(dir);
  snprintf(path, sizeof path, "%s/fresh/k.db", dir);
  race *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  FT_REQUIRE(r != MAP_FAILED, "mmap");
  memset(r, 0, sizeof *r);
  enum { N = 8 };
  pid_t pids[N];
  for (int i = 0; i < N; i++) {
    fflush(NULL);
    pids[i] = fork();
    FT_REQUIRE(pids[i] >= 0, "fork");
    if (pids[i] == 0) _exit(race_child(path, r, i));
  }
  for (int i = 0; i < N; i++) {
    int status = -1;
    FT_CHECK(waitpid(pids[i], &status, 0) == pids[i] && WIFEXITED(status) &&
                 WEXITSTATUS(status) == 0,
             "child %d status %d", i, status);
  }
  FT_CHECK(atomic_load(&r->errors) == 0, "%d children failed", atomic_load(&r->errors));
  for (int k = 0; k < NKEYS; k++) {
    FT_CHECK(atomic_load(&r->ours[k]) == 1, "key %d: %d children compiled", k,
             atomic_load(&r->ours[k]));
    FT_CHECK(atomic_load(&r->max_holders[k]) == 1, "key %d: %d held the claim at once", k,
             atomic_load(&r->max_holders[k]));
  }
  FT_CHECK(atomic_load(&r->ready) == NKEYS * (N - 1), "%d found it ready",
           atomic_load(&r->ready));
  FT_CHECK(atomic_load(&r->busy) >= 1, "no child ever waited");
  FT_CHECK(raw_int(path, "SELECT count(*) FROM claims") == 0, "claims left behind");
  FT_CHECK(raw_int(path, "SELECT count(*) FROM kernels") == NKEYS, "kernels %lld",
           (long long)raw_int(path, "SELECT count(*) FROM kernels"));
  munmap(r, sizeof *r);
  td_end(dir);
}
