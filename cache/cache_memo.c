/* cache_memo.c: the in-process memo, an open-addressing table of pointers to
 * immutable nodes; readers take no lock, writers take a mutex and grow by copying. */
#include "cache_memo.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cache_held.h"

typedef struct cache_memo_node {
  uint64_t k0, k1;
  int device;
  void *value;
} cache_memo_node;

/* A table is never freed or shrunk while the memo lives: a reader that
 * loaded an old table keeps probing valid memory. */
typedef struct cache_memo_table {
  size_t mask; /* capacity - 1; capacity is a power of two */
  struct cache_memo_table *older;
  _Atomic(cache_memo_node *) slots[];
} cache_memo_table;

struct cache_memo {
  _Atomic(cache_memo_table *) cur;
  pthread_mutex_t mu; /* writers: cache_memo_put */
  cache_held held;    /* who holds mu, for assert() */
  _Atomic int64_t count;
};

#define CACHE_MEMO_MIN_CAP 64

/* Keys are usually hash halves already, but tests and devices are small
 * integers: mix all three (splitmix64 finalizer) so probes stay short. */
static size_t cache_memo_slot(uint64_t k0, uint64_t k1, int device) {
  uint64_t h = k0 ^ (k1 * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(uint32_t)device << 32);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return (size_t)h;
}

static cache_memo_table *cache_memo_table_new(size_t cap) {
  cache_memo_table *t = malloc(sizeof *t + cap * sizeof(t->slots[0]));
  if (!t) return NULL;
  t->mask = cap - 1;
  t->older = NULL;
  for (size_t i = 0; i < cap; i++) atomic_init(&t->slots[i], NULL);
  return t;
}

cache_memo *cache_memo_create(void) {
  cache_memo *m = malloc(sizeof *m);
  if (!m) return NULL;
  cache_memo_table *t = cache_memo_table_new(CACHE_MEMO_MIN_CAP);
  if (!t || pthread_mutex_init(&m->mu, NULL) != 0) {
    free(t);
    free(m);
    return NULL;
  }
  atomic_init(&m->cur, t);
  atomic_init(&m->count, 0);
  atomic_init(&m->held.depth, 0);
  return m;
}

void cache_memo_destroy(cache_memo *m, void (*free_value)(void *value, void *user), void *user) {
  if (!m) return;
  cache_memo_table *t = atomic_load_explicit(&m->cur, memory_order_acquire);
  /* The newest table holds every node; the older ones share those nodes. */
  for (size_t i = 0; i <= t->mask; i++) {
    cache_memo_node *n = atomic_load_explicit(&t->slots[i], memory_order_relaxed);
    if (!n) continue;
    if (free_value) free_value(n->value, user);
    free(n);
  }
  while (t) {
    cache_memo_table *older = t->older;
    free(t);
    t = older;
  }
  pthread_mutex_destroy(&m->mu);
  free(m);
}

void *cache_memo_get(const cache_memo *cm, uint64_t k0, uint64_t k1, int device) {
  if (!cm) return NULL;
  /* Only loads: the cast drops const for the atomic builtins' sake. */
  cache_memo *m = (cache_memo *)cm;
  cache_memo_table *t = atomic_load_explicit(&m->cur, memory_order_acquire);
  /* Load stays under half, so an empty slot always ends the probe. */
  for (size_t i = cache_memo_slot(k0, k1, device) & t->mask;; i = (i + 1) & t->mask) {
    cache_memo_node *n = atomic_load_explicit(&t->slots[i], memory_order_acquire);
    if (!n) return NULL;
    if (n->k0 == k0 && n->k1 == k1 && n->device == device) return n->value;
  }
}

/* Under m->mu: the slot holding the key, or the empty slot where it goes. */
static size_t cache_memo_probe(cache_memo_table *t, uint64_t k0, uint64_t k1, int device,
                               cache_memo_node **found) {
  size_t i = cache_memo_slot(k0, k1, device) & t->mask;
  for (;; i = (i + 1) & t->mask) {
    cache_memo_node *n = atomic_load_explicit(&t->slots[i], memory_order_relaxed);
    if (!n || (n->k0 == k0 && n->k1 == k1 && n->device == device)) {
      *found = n;
      return i;
    }
  }
}

/* Under m->mu: copies the node pointers into a table twice the size and
 * publishes it; the old table stays reachable through ->older. */
static cache_memo_table *cache_memo_grow(cache_memo *m, cache_memo_table *t) {
  assert(cache_held_by_me(&m->held));
  cache_memo_table *nt = cache_memo_table_new((t->mask + 1) * 2);
  if (!nt) return NULL;
  for (size_t i = 0; i <= t->mask; i++) {
    cache_memo_node *n = atomic_load_explicit(&t->slots[i], memory_order_relaxed), *dummy;
    if (!n) continue;
    size_t j = cache_memo_probe(nt, n->k0, n->k1, n->device, &dummy);
    atomic_store_explicit(&nt->slots[j], n, memory_order_relaxed);
  }
  nt->older = t;
  /* Release: a reader that sees nt sees every slot filled above. */
  atomic_store_explicit(&m->cur, nt, memory_order_release);
  return nt;
}

void *cache_memo_put(cache_memo *m, uint64_t k0, uint64_t k1, int device, void *value) {
  /* NULL is get's "absent", so it cannot be stored. */
  if (!m || !value) return NULL;
  pthread_mutex_lock(&m->mu);
  cache_held_enter(&m->held);
  cache_memo_table *t = atomic_load_explicit(&m->cur, memory_order_relaxed);
  cache_memo_node *found;
  size_t i = cache_memo_probe(t, k0, k1, device, &found);
  void *ret = NULL;
  if (found) {
    ret = found->value;
  } else {
    cache_memo_node *n = malloc(sizeof *n);
    int64_t count = atomic_load_explicit(&m->count, memory_order_relaxed);
    if (n && (size_t)(count + 1) * 2 > t->mask + 1) {
      cache_memo_table *nt = cache_memo_grow(m, t);
      if (nt) {
        t = nt;
        i = cache_memo_probe(t, k0, k1, device, &found);
      } else {
        /* Keeping the load under half is what bounds a reader's probe. */
        free(n);
        n = NULL;
      }
    }
    if (n) {
      *n = (cache_memo_node){k0, k1, device, value};
      /* Release: a reader that sees the pointer sees the node's fields. */
      atomic_store_explicit(&t->slots[i], n, memory_order_release);
      atomic_store_explicit(&m->count, count + 1, memory_order_relaxed);
      ret = value;
      assert((size_t)(count + 1) * 2 <= t->mask + 1); /* the load stays at most half */
    }
  }
  cache_held_leave(&m->held);
  pthread_mutex_unlock(&m->mu);
  return ret;
}

int64_t cache_memo_count(const cache_memo *cm) {
  if (!cm) return 0;
  cache_memo *m = (cache_memo *)cm;
  return atomic_load_explicit(&m->count, memory_order_relaxed);
}
