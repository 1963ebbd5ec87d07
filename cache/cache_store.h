/* cache_store.h: the on-disk kernel store, one SQLite file of compiled binaries
 * keyed by a 128-bit hash. Knows SQLite and nothing of CUDA, NVRTC or DLPack. */
#ifndef CACHE_STORE_H
#define CACHE_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct cache_store cache_store;

/* Schema version kept in the meta table. A file with another version is
 * refused with CACHE_ERR_CORRUPT ("older schema" or "newer"): the runtime
 * moves it aside and starts a new one (a cache refills itself; no row is
 * migrated, since an old row's checksum does not bind it to its key).
 * 2: templates, abi, claims. 3: the checksum covers the row's identity.
 * 4: the tactics table (cache_tactics.h). */
#define CACHE_SCHEMA_VERSION 4

enum {
  CACHE_OK = 0,
  CACHE_NOT_FOUND = 1,   /* lookups: no such entry */
  CACHE_ERR = -1,        /* SQLite or I/O failure; message in the err buffer */
  CACHE_ERR_CORRUPT = -2 /* not a database, malformed, newer schema, bad checksum */
};

/* Open flags. */
#define CACHE_OPEN_READONLY 1 /* never writes; used for the system layer */
/* Rollback journal instead of WAL: no -wal/-shm files, the mode that is safe
 * on network filesystems, and a cheaper open where file locking is slow. */
#define CACHE_OPEN_ROLLBACK 2
/* Read-only, and only the main file: no lock is taken and no -wal, -shm or
 * -journal beside it is ever read, so nothing planted there can change what
 * is read (SQLite's immutable=1). For a file nobody writes while it is
 * open: the system layer. */
#define CACHE_OPEN_IMMUTABLE 4

/* One stored binary. On input to cache_store_put every field is read; on
 * output from lookups the pointers stay valid until the next call on the
 * same store from the same thread, or are copies where the function says so. */
typedef struct cache_record {
  uint8_t hash[16];     /* full identity: key + templates + compiler + arch + options + ABI */
  uint8_t key_hash[16]; /* the same without the compiler: what the hot path looks up */
  const char *op;
  const char *key;      /* canonical key string */
  const char *arch;     /* "sm_90", "gfx942" */
  const char *compiler; /* "nvrtc-13.0" */
  const char *options;  /* compile options as one string */
  const char *entry;    /* kernel symbol in the binary */
  const char *source;   /* the rendered source that was compiled (may be NULL) */
  const char *templates; /* hash of the template set it was rendered from (put: NULL = "") */
  const char *abi;       /* kernel ABI / cache format version (put: NULL = "") */
  const void *binary;
  size_t bytes;
  uint64_t checksum;    /* cache_row_checksum; computed by put, checked by reads */
  double compile_ms;
  int64_t created, last_used, hits; /* unix seconds; filled by put and lookups */
} cache_record;

/* Opens (creating if needed, unless read-only) the store at path; ":memory:"
 * is a private in-memory store. Creates the parent directory (0700) when
 * missing. WAL journal, busy_timeout, schema created or checked. On failure
 * returns CACHE_ERR or CACHE_ERR_CORRUPT and writes a message into err.
 * Read-only: a missing file is CACHE_ERR; a WAL file in a directory that
 * cannot be written (no -shm possible) is opened immutable when its WAL
 * holds nothing, else refused. */
int cache_store_open(const char *path, int flags, cache_store **out, char *err, size_t errlen);
void cache_store_close(cache_store *s);
const char *cache_store_path(const cache_store *s);
/* 1 when the store was opened read-only (or immutable). */
int cache_store_readonly(const cache_store *s);

/* Looks up a binary by key_hash (the compiler-independent hash). Among
 * several rows with that key_hash (several compiler versions) the one whose
 * compiler equals prefer_compiler wins, else the newest created. On
 * CACHE_OK fills *rec with malloc'ed copies owned by the caller, freed with
 * cache_record_free. Verifies the checksum: a mismatch deletes the row
 * (unless read-only) and returns CACHE_ERR_CORRUPT. Does not write
 * last_used/hits: see cache_store_touch. */
int cache_store_find(cache_store *s, const uint8_t key_hash[16], const char *prefer_compiler,
                     cache_record *rec, char *err, size_t errlen);

/* Same, by full hash. */
int cache_store_get(cache_store *s, const uint8_t hash[16], cache_record *rec, char *err,
                    size_t errlen);

/* Finds the single row whose hex hash starts with hex_prefix (case-insensitive).
 * CACHE_NOT_FOUND if none, CACHE_ERR with "ambiguous" in err if several. */
int cache_store_get_prefix(cache_store *s, const char *hex_prefix, cache_record *rec,
                           char *err, size_t errlen);

void cache_record_free(cache_record *rec);

/* Inserts or replaces the row for rec->hash in one transaction (a reader
 * never sees half of it), computes the checksum, sets created/last_used to
 * now and hits to 0, deletes the compile claim on rec->key_hash (see
 * cache_ops.h) in the same transaction, then checkpoints the WAL (PASSIVE)
 * so fresh readers do not rebuild a large WAL index. Every string but
 * source, templates and abi must be non-NULL and the binary non-empty. */
int cache_store_put(cache_store *s, const cache_record *rec, char *err, size_t errlen);

/* Records uses: hits += 1 and last_used = now for each hash, in one
 * transaction. Meant to be called rarely (batched by the caller). */
int cache_store_touch(cache_store *s, const uint8_t (*hashes)[16], int n, char *err,
                      size_t errlen);

/* Calls fn for each row matching op and arch (NULL: any), ordered by op then
 * key. Records passed to fn hold no binary (binary NULL, bytes set) and no
 * source (NULL: read them with cache_store_get), and are valid during the
 * call only. fn returning nonzero stops the walk. fn may call other
 * functions on the same store (not close). */
typedef int (*cache_record_fn)(const cache_record *rec, void *user);
int cache_store_list(cache_store *s, const char *op, const char *arch, cache_record_fn fn,
                     void *user, char *err, size_t errlen);

/* Deletes rows matching op and arch (NULL: any) and reclaims the space
 * (incremental vacuum); *removed gets the count. */
int cache_store_delete(cache_store *s, const char *op, const char *arch, int64_t *removed,
                       char *err, size_t errlen);

/* Totals: entries, sum of binary bytes, file size in bytes (page_count * page_size). */
int cache_store_totals(cache_store *s, int64_t *entries, int64_t *bytes, int64_t *file_bytes,
                       char *err, size_t errlen);

/* A row's checksum: XXH3-64 over its hash, key_hash, arch, entry and binary,
 * so that a binary moved to another row, or relabelled, no longer matches.
 * It guards against damage and mix-ups, not against someone who may write
 * the file (they can recompute it): see cache_store_set_row_check. */
uint64_t cache_row_checksum(const uint8_t hash[16], const uint8_t key_hash[16], const char *arch,
                            const char *entry, const void *binary, size_t bytes);

/* A check of a whole row (binary included) that the store cannot make
 * itself: that the row belongs to its key (hashes recomputed from its
 * fields, the entry name the key implies, the binary's own arch). 0: the
 * row is good; else the reason in why. Called once per row read from the
 * file (lookups, verify, copy), never on the in-process memo. */
typedef int (*cache_row_check_fn)(const cache_record *rec, char *why, size_t whylen);
/* Installs fn on s (NULL: none); set it before s is shared between threads. */
void cache_store_set_row_check(cache_store *s, cache_row_check_fn fn);

/* Hex helpers: 32 lowercase digits plus NUL. */
void cache_hash_hex(const uint8_t hash[16], char out[33]);

#endif /* CACHE_STORE_H */
