/* cache_fork.c: fork() while threads use the stores: the child inherits no
 * thread inside SQLite, and closes every connection it inherited.
 *
 * SQLite's global mutexes (its allocator's, its VFS's) and a connection's
 * state are whatever the parent's threads made of them at the instant of
 * fork(); in the child those threads are gone. A gate, one read-write lock
 * for the process, is held for reading by every thread using a store and
 * for writing by fork() itself (pthread_atfork), so fork() happens between
 * SQLite calls, never during one. Stores stay concurrent with each other
 * (readers share the gate), and a waiting fork() stops new readers, so busy
 * threads cannot starve it. In the child, each inherited connection is idle
 * and consistent, and is closed: its POSIX locks were never the child's
 * (they stay the parent's), and SQLite's per-process lock bookkeeping for
 * the file, which a new connection in the child would otherwise share, goes
 * with it. */
#include <assert.h>
#include <pthread.h>
#include <sqlite3.h>

#include "cache_internal.h"

/* Writer-preferring: a thread takes it once, at its outermost cache_lock
 * (gate_depth), never recursively, so a waiting writer cannot deadlock it. */
static pthread_rwlock_t gate = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static _Thread_local int gate_depth; /* this thread's nesting of cache_lock */
/* The open stores; changed under the gate (read) and list_mu, so never in
 * the middle of a change when fork() holds the gate. */
static cache_store *open_stores;
static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int prepared_here; /* the forking thread took the gate in prepare */

/* Closes a store's connection and its statements: the store's own close and repair
 * call it, and so does the child after fork() for every connection it inherited. */
void cache_disconnect(cache_store *s) {
  for (int i = 0; i < ST_COUNT; i++) {
    sqlite3_finalize(s->st[i]);
    s->st[i] = NULL;
  }
  /* Every statement is finalized, so close cannot fail with SQLITE_BUSY. */
  sqlite3_close(s->db);
  s->db = NULL;
}

static void fork_prepare(void) {
  prepared_here = gate_depth == 0; /* fork() from inside a store call: held already */
  if (prepared_here) pthread_rwlock_wrlock(&gate);
}

static void fork_parent(void) {
  if (prepared_here) pthread_rwlock_unlock(&gate);
}

static void fork_child(void) {
  /* fork() from inside a store call (a listing's callback) took no gate and
   * closes nothing: that call returns into its connection. */
  if (!prepared_here) return;
  /* The only thread now, holding the gate: nobody was inside SQLite, so
   * every inherited connection is idle and whole. Close them; no other
   * lock can be held (each is taken only under the gate). */
  for (cache_store *s = open_stores; s; s = s->fork_next)
    if (s->db) cache_disconnect(s);
  /* Made anew rather than unlocked: the lock knows its writer by thread
   * id, and this thread's id is not the one that took it. */
  pthread_rwlock_t fresh = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
  gate = fresh;
}

static void register_atfork(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

void cache_lock(cache_store *s) {
  if (gate_depth++ == 0) pthread_rwlock_rdlock(&gate);
  pthread_mutex_lock(&s->mu);
  cache_held_enter(&s->held);
}

void cache_unlock(cache_store *s) {
  assert(cache_locked(s) && gate_depth > 0); /* one unlock per lock, by the thread that locked */
  cache_held_leave(&s->held);
  pthread_mutex_unlock(&s->mu);
  if (--gate_depth == 0) pthread_rwlock_unlock(&gate);
}

void cache_fork_register(cache_store *s) {
  assert(cache_locked(s));
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&list_mu);
  s->fork_prev = NULL;
  s->fork_next = open_stores;
  if (open_stores) open_stores->fork_prev = s;
  open_stores = s;
  pthread_mutex_unlock(&list_mu);
}

void cache_fork_unregister(cache_store *s) {
  assert(cache_locked(s));
  pthread_mutex_lock(&list_mu);
  if (s->fork_prev)
    s->fork_prev->fork_next = s->fork_next;
  else if (open_stores == s)
    open_stores = s->fork_next;
  if (s->fork_next) s->fork_next->fork_prev = s->fork_prev;
  s->fork_prev = s->fork_next = NULL;
  pthread_mutex_unlock(&list_mu);
}
