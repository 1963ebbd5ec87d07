/* cache_held.h: which thread holds a lock, for assert() (SQLite's sqlite3_mutex_held in
 * its debug builds): the locker records itself right after taking a lock and erases
 * itself right before letting go, and a function that must run under the lock says
 * assert(cache_held_by_me(&h)) instead of a comment. Header only; the cache's locks use
 * it, and so does the runtime's (rt_internal.h), which may include cache/ headers.
 * Under NDEBUG the record is left alone (the field stays, so no struct changes size). */
#ifndef CACHE_HELD_H
#define CACHE_HELD_H

#include <pthread.h>
#include <stdatomic.h>

typedef struct cache_held {
  _Atomic(pthread_t) owner; /* meaningful while depth > 0 */
  atomic_int depth;         /* the holder's nesting (a recursive mutex); 0 when free */
} cache_held;

/* Call right after taking the lock h records. */
static inline void cache_held_enter(cache_held *h) {
#ifndef NDEBUG
  /* Owner before depth: a thread that sees depth > 0 sees this owner or a later one. */
  if (atomic_load(&h->depth) == 0) atomic_store(&h->owner, pthread_self());
  atomic_fetch_add(&h->depth, 1);
#else
  (void)h;
#endif
}

/* Call right before letting go of it (also before a pthread_cond_wait on it). */
static inline void cache_held_leave(cache_held *h) {
#ifndef NDEBUG
  atomic_fetch_sub(&h->depth, 1);
#else
  (void)h;
#endif
}

/* Whether this thread holds the lock: for assert() only (always 1 under NDEBUG). */
static inline int cache_held_by_me(const cache_held *h) {
#ifndef NDEBUG
  cache_held *m = (cache_held *)h; /* loads only: the cast is for the atomic builtins */
  return atomic_load(&m->depth) > 0 && pthread_equal(atomic_load(&m->owner), pthread_self());
#else
  (void)h;
  return 1;
#endif
}

#endif
