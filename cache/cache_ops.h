/* cache_ops.h: what the store does beyond get and put: cross-process compile
 * claims, eviction, stale entries, verify and repair, copying between files. */
#ifndef CACHE_OPS_H
#define CACHE_OPS_H

#include <stdint.h>
#include <sys/types.h>

#include "cache_store.h"

/* ---- claims (cache_claim.c): one compile per key across processes ----
 * A claim row (key_hash, pid, process start time, host, started) says "this
 * process is compiling that key". cache_store_put deletes the claim of the
 * record's key_hash in the same transaction that inserts the row. */
enum {
  CACHE_CLAIM_OURS = 0,  /* we hold the claim: compile, then put (or unclaim on failure) */
  CACHE_CLAIM_READY = 1, /* a row for key_hash (of compiler, if non-NULL) exists: load it */
  CACHE_CLAIM_BUSY = 2   /* a live process holds the claim: wait and ask again */
};

/* READY if a matching row exists; else if no claim or the claim's owner is
 * gone, take it (OURS; *took_over = 1 when an old claim was replaced), in a
 * write transaction that checks again; else BUSY. READY and BUSY are read
 * without the write lock, so polling waiters do not queue behind writers.
 * The owner is gone when it is on this host and its pid no longer exists
 * or now belongs to a process with another start time (pid reuse), or when
 * its claim is older than stale_after_s (the last resort for owners on
 * other hosts; <= 0: never by age). Our own claim (same pid, start time
 * and host) is OURS again. A read-only store cannot take claims: CACHE_ERR. */
int cache_store_claim(cache_store *s, const uint8_t key_hash[16], const char *compiler,
                      int64_t stale_after_s, int *outcome, int *took_over, char *err,
                      size_t errlen);

/* Drops this process's claim on key_hash (after a failed compile). */
int cache_store_unclaim(cache_store *s, const uint8_t key_hash[16], char *err, size_t errlen);

/* ---- eviction and stale entries (cache_evict.c) ---- */

/* If the file is larger than max_bytes, deletes least-recently-used rows
 * (last_used, then created) until it is not, reclaiming the space.
 * *evicted gets the number of rows removed. */
int cache_store_evict(cache_store *s, int64_t max_bytes, int64_t *evicted, char *err,
                      size_t errlen);

/* Empties the store: its content is replaced in place by an empty cache's
 * (cache_store_replace_from), which works where a DELETE cannot: on a
 * damaged file, and on a full disk as long as the journal has the few
 * pages it needs. *removed gets the rows there were (0 if uncountable). */
int cache_store_reset(cache_store *s, int64_t *removed, char *err, size_t errlen);

/* Deletes the row of one hash (a binary the driver rejected). */
int cache_store_remove(cache_store *s, const uint8_t hash[16], char *err, size_t errlen);

/* Deletes rows no current runtime would look up: built by another NVRTC
 * (rows of arch sm_*, when nvrtc is non-NULL, e.g. "nvrtc-13.0") or another
 * hiprtc (gfx*, when hiprtc is non-NULL), or with another template set or
 * ABI (when non-NULL). NULL means "unknown here: keep those rows". */
int cache_store_remove_stale(cache_store *s, const char *nvrtc, const char *hiprtc,
                             const char *templates, const char *abi, int64_t *removed,
                             char *err, size_t errlen);

/* ---- verify and repair (cache_verify.c) ---- */
typedef struct cache_verify_report {
  int integrity_ok;     /* PRAGMA integrity_check said "ok" */
  int64_t rows;         /* rows examined */
  int64_t bad_rows;     /* checksum or length mismatches, unreadable rows */
  int64_t repaired;     /* repair mode: rows deleted, plus 1 when the file was rebuilt */
  char detail[1024];    /* the first problems, one per line */
  int64_t tactic_rows, tactic_bad_rows; /* the tactics table's part of rows and bad_rows */
} cache_verify_report;

/* Checks the database's integrity and every row's checksum, the tactics' too
 * (cache_tactic_check). With repair, deletes bad rows; if the database itself
 * is damaged, rebuilds the file from every row that still reads back
 * correctly (copy to a new file, rename over the old one). CACHE_OK when the
 * check ran (read the report). */
int cache_store_verify(cache_store *s, int repair, cache_verify_report *rep, char *err,
                       size_t errlen);

/* Replaces s's whole content by src's, in place: the file keeps its inode,
 * so other processes' connections stay valid and see the new content. The
 * write lock is taken first and held throughout; fill(user), if non-NULL,
 * runs while it is held (to fill src from what s holds at that moment).
 * Ends any transaction open on s. Used by repair, clear and gc. */
int cache_store_replace_from(cache_store *s, cache_store *src, int (*fill)(void *), void *user,
                             char *err, size_t errlen);

/* ---- copying (cache_copy.c): fleet export and import ---- */

/* Copies rows matching op and arch (NULL: any) from `from` into `to`
 * verbatim (history included), verifying each checksum and skipping hashes
 * `to` already has. *skipped counts both kinds of rows left out. The
 * tactics matching op and arch go too, each merged into `to`'s row of its
 * key (cache_tactic_merge); copied and skipped count kernels only. */
int cache_store_copy(cache_store *from, cache_store *to, const char *op, const char *arch,
                     int64_t *copied, int64_t *skipped, char *err, size_t errlen);

typedef struct cache_copy_report {
  int64_t copied;    /* rows inserted */
  int64_t present;   /* rows `to` already had */
  int64_t refused;   /* rows left out: damaged, not bound to their key, over the cap */
  char detail[1024]; /* the first refused rows, one a line, each with its reason */
  /* The tactics (matching op and arch too): new in `to`, merged into a row of the same
   * key (cache_tactic_merge), already there as they are, left out as bad. */
  int64_t tactics_copied, tactics_merged, tactics_present, tactics_refused;
} cache_copy_report;

/* The same, judging each row by `from`'s checks (cache_store_set_row_check)
 * and refusing one whose binary is larger than max_row_bytes (<= 0: no cap). */
int cache_store_copy_checked(cache_store *from, cache_store *to, const char *op,
                             const char *arch, int64_t max_row_bytes, cache_copy_report *rep,
                             char *err, size_t errlen);

/* Prepares a freshly written store to be shipped read-only: checkpoint,
 * rollback journal (no -wal/-shm needed by readers), VACUUM. Fails when
 * another connection has the file open (it would stay in WAL). */
int cache_store_seal(cache_store *s, char *err, size_t errlen);

/* ---- files (cache_fs.c) ---- */

/* Renames path to "<path>.corrupt-<unix time>" (with "-N" added if that
 * exists) and removes its -wal/-shm/-journal; the new name goes to moved. */
int cache_move_aside(const char *path, char *moved, size_t movedlen, char *err, size_t errlen);

/* 1 if path (or its nearest existing parent directory) is on NFS, Lustre,
 * GPFS, CIFS/SMB, CephFS, 9p, FUSE or another filesystem where WAL's shared
 * memory is unsafe; 0 otherwise. */
int cache_fs_is_network(const char *path);

/* The one way to a cache-owned path: walks path from the root (a relative
 * one from the working directory's path), each component opened relative to
 * the one before without following links, and refuses (CACHE_ERR with a
 * message) what another user could change:
 * - a directory not owned by this user or root, or writable by others;
 *   above the file's own directory a sticky one (/tmp) is fine where the
 *   next entry is this user's or root's;
 * - a link not owned by this user or root (others are followed by hand);
 * - the file or a -wal/-shm/-journal beside it not owned by this user (or
 *   root, with CACHE_PATH_ROOT_OK), not a regular file, or writable by
 *   others.
 * Group write passes with CACHE_PATH_GROUP_OK, world write never.
 * With CACHE_PATH_CREATE, missing directories are made (the file's own
 * with dir_mode, those above it with dir_mode & 0750) and a missing file
 * is created exclusively with file_mode, each chmod'ed past the umask;
 * modes writable by others are refused. *resolved (optional, malloc'ed)
 * gets the absolute path without links, set once the walk reached the
 * file's directory (the file itself may be missing without
 * CACHE_PATH_CREATE). A path that does not exist yet passes. */
#define CACHE_PATH_GROUP_OK 1
#define CACHE_PATH_ROOT_OK 2
#define CACHE_PATH_CREATE 4
#define CACHE_PATH_NO_SIDECARS 8 /* opened immutable: sidecars are never read */
int cache_path_secure(const char *path, int flags, mode_t dir_mode, mode_t file_mode,
                      char **resolved, char *err, size_t errlen);

/* cache_path_secure with no creation: 0 or -1 with a message. */
int cache_check_permissions(const char *path, int allow_group_write, char *err, size_t errlen);

/* Test hook: caps the database at max_pages pages (PRAGMA max_page_count),
 * which makes writes fail with SQLITE_FULL like a full disk. */
int cache_store_limit_pages(cache_store *s, int64_t max_pages, char *err, size_t errlen);

#endif
