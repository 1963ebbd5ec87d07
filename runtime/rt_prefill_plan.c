/* rt_prefill_plan.c: the batch prefill planner: how the requests' packed query rows are
 * cut into q tiles, each tile's KV range (causal diagonal and window applied), split-KV
 * chunks when the batch cannot fill the device, and where the tables go. */
#include <stdio.h>

#include "prefill_params.h"
#include "rt_prefill.h"

static int64_t align256(int64_t x) { return (x + 255) & ~(int64_t)255; }

void rt_prefill_layout_for(int64_t max_batch, int64_t max_qo_tokens, int sms, int num_qo_heads,
                           int num_kv_heads, int head_dim, rt_prefill_layout *l) {
  const int hkv = num_kv_heads > 0 ? num_kv_heads : 1;
  const int64_t group = num_qo_heads / hkv > 0 ? num_qo_heads / hkv : 1;
  int64_t slots = (int64_t)(sms > 0 ? sms : 1) * RT_PREFILL_BLOCKS_PER_SM / hkv;
  if (slots < 1) slots = 1;
  /* Tiles of at least 16 rows: at most rows / 16 + one partial tile per request. */
  const int64_t tiles = (max_qo_tokens * group + 15) / 16 + max_batch;
  l->slots = slots;
  l->capacity = tiles + slots;
  l->items_off = FI_PREFILL_HDR_WORDS * 4;
  l->partial_o_off = align256(l->items_off + l->capacity * FI_PREFILL_ITEM_WORDS * 4);
  l->partial_lse_off =
      align256(l->partial_o_off + slots * hkv * RT_PREFILL_SLOT_ROWS * (int64_t)head_dim * 4);
  l->bytes = align256(l->partial_lse_off + slots * hkv * RT_PREFILL_SLOT_ROWS * 4);
}

void rt_prefill_tile_range(int64_t r0, int64_t rows, int group, int64_t lq, int64_t lkv,
                           int causal, int window_left, int64_t *lo, int64_t *hi) {
  const int64_t off = lkv - lq, tq0 = r0 / group, tq1 = (r0 + rows - 1) / group;
  *lo = window_left >= 0 && tq0 + off - window_left > 0 ? tq0 + off - window_left : 0;
  *hi = causal && tq1 + off + 1 < lkv ? tq1 + off + 1 : lkv;
  if (*hi < *lo) *hi = *lo;
}

int rt_prefill_check_batch(int batch, const int32_t *qo_indptr, const int64_t *kv_len,
                           int causal, int64_t max_qo_tokens, char *err, size_t errlen) {
  if (qo_indptr[0] < 0) {
    snprintf(err, errlen, "qo_indptr[0] is %d; offsets start at 0 or more", qo_indptr[0]);
    return -1;
  }
  for (int b = 0; b < batch; b++) {
    const int64_t lq = (int64_t)qo_indptr[b + 1] - qo_indptr[b];
    if (lq < 0) {
      snprintf(err, errlen, "qo_indptr is not monotone: qo_indptr[%d] = %d > qo_indptr[%d] = %d", b,
               qo_indptr[b], b + 1, qo_indptr[b + 1]);
      return -1;
    }
    if (causal && lq > kv_len[b]) {
      snprintf(err, errlen,
               "request %d has %lld query tokens but %lld KV tokens; a causal prefill needs "
               "L_q <= L_kv (the query tokens are the last of the KV)",
               b, (long long)lq, (long long)kv_len[b]);
      return -1;
    }
  }
  const int64_t total = (int64_t)qo_indptr[batch] - qo_indptr[0];
  if (max_qo_tokens > 0 && total > max_qo_tokens) {
    snprintf(err, errlen, "the batch has %lld query tokens, more than max_qo_tokens %lld",
             (long long)total, (long long)max_qo_tokens);
    return -1;
  }
  return 0;
}

/* Items and partial slots with chunks of `chunk` KV tokens (0: no split). */
static void count(const rt_prefill_batch *bt, int64_t chunk, int64_t *items, int64_t *slots) {
  *items = 0;
  *slots = 0;
  for (int b = 0; b < bt->batch; b++) {
    const int64_t lq = (int64_t)bt->qo_indptr[b + 1] - bt->qo_indptr[b], rows = lq * bt->group;
    for (int64_t r0 = 0; r0 < rows; r0 += bt->q_tile) {
      const int64_t nr = rows - r0 < bt->q_tile ? rows - r0 : bt->q_tile;
      int64_t lo, hi;
      rt_prefill_tile_range(r0, nr, bt->group, lq, bt->kv_len[b], bt->causal, bt->window_left, &lo, &hi);
      const int64_t nc = chunk > 0 && hi - lo > chunk ? (hi - lo + chunk - 1) / chunk : 1;
      *items += nc;
      if (nc > 1) *slots += nc;
    }
  }
}

int64_t rt_prefill_partition(const rt_prefill_batch *bt, int64_t target, int32_t *items,
                             int64_t max_items, int64_t max_slots, int64_t *chunk_out,
                             int64_t *slots_used) {
  int64_t n0, s0, maxlen = 0;
  count(bt, 0, &n0, &s0);
  for (int b = 0; b < bt->batch; b++)
    if (bt->kv_len[b] > maxlen) maxlen = bt->kv_len[b];
  const int64_t kt = bt->kv_tile;
  int64_t chunk = 0; /* no split */
  if (n0 > 0 && n0 * bt->num_kv_heads < target && maxlen > RT_PREFILL_MIN_CHUNK) {
    /* The smallest chunk (in kv tiles) whose items fit the target and the slots. */
    int64_t lo = (RT_PREFILL_MIN_CHUNK + kt - 1) / kt, hi = (maxlen + kt - 1) / kt;
    if (lo > hi) lo = hi;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      int64_t n, s;
      count(bt, mid * kt, &n, &s);
      if (n * bt->num_kv_heads <= target && s <= max_slots && n <= max_items)
        hi = mid;
      else
        lo = mid + 1;
    }
    int64_t n, s;
    count(bt, lo * kt, &n, &s);
    if (s <= max_slots && n <= max_items) chunk = lo * kt;
  }
  int64_t n = 0, slot = 0;
  for (int b = 0; b < bt->batch; b++) {
    const int64_t lq = (int64_t)bt->qo_indptr[b + 1] - bt->qo_indptr[b], rows = lq * bt->group;
    /* The last tile first: under a causal mask it has the most work, and blocks start
     * roughly in grid order, so the long ones do not trail. */
    for (int64_t r0 = rows > 0 ? (rows - 1) / bt->q_tile * bt->q_tile : -1; r0 >= 0; r0 -= bt->q_tile) {
      const int64_t nr = rows - r0 < bt->q_tile ? rows - r0 : bt->q_tile;
      int64_t lo, hi;
      rt_prefill_tile_range(r0, nr, bt->group, lq, bt->kv_len[b], bt->causal, bt->window_left, &lo, &hi);
      const int64_t nc = chunk > 0 && hi - lo > chunk ? (hi - lo + chunk - 1) / chunk : 1;
      if (nc > 0x7fff || n + nc > max_items || (nc > 1 && slot + nc > max_slots)) return -1;
      for (int64_t k = 0; k < nc; k++) {
        int32_t *it = items + FI_PREFILL_ITEM_WORDS * n++;
        const int64_t c0 = nc > 1 ? lo + k * chunk : lo, c1 = nc > 1 && lo + (k + 1) * chunk < hi ? lo + (k + 1) * chunk : hi;
        it[0] = b;
        it[1] = (int32_t)r0;
        it[2] = (int32_t)nr;
        it[3] = (int32_t)c0;
        it[4] = (int32_t)c1;
        it[5] = (int32_t)(k | (nc << 16));
        it[6] = bt->qo_indptr[b];
        it[7] = (int32_t)lq;
        it[8] = bt->kv_base[b];
        it[9] = (int32_t)bt->kv_len[b];
        it[10] = nc > 1 ? (int32_t)slot : 0;
        it[11] = 0;
      }
      if (nc > 1) slot += nc;
    }
  }
  *chunk_out = chunk;
  *slots_used = slot;
  return n;
}
