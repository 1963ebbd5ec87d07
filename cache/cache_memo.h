/* cache_memo.h: the in-process memo, (128-bit key, device) -> loaded kernel.
 * Lookups take no lock and allocate nothing; inserts are serialized. */
#ifndef CACHE_MEMO_H
#define CACHE_MEMO_H

#include <stdint.h>

typedef struct cache_memo cache_memo;

cache_memo *cache_memo_create(void);

/* Calls free_value(value, user) for every stored value, then frees the memo. */
void cache_memo_destroy(cache_memo *m, void (*free_value)(void *value, void *user), void *user);

/* Returns the value stored for (k0, k1, device) or NULL. Lock-free, safe
 * against concurrent inserts: a published value is never moved or freed
 * while the memo lives. */
void *cache_memo_get(const cache_memo *m, uint64_t k0, uint64_t k1, int device);

/* Stores value for (k0, k1, device) unless a value is already there. Returns
 * the value now stored (the existing one if another thread won the race; the
 * caller then frees its own), or NULL on allocation failure. */
void *cache_memo_put(cache_memo *m, uint64_t k0, uint64_t k1, int device, void *value);

/* Number of stored values. */
int64_t cache_memo_count(const cache_memo *m);

#endif /* CACHE_MEMO_H */
