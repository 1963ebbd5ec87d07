/* rt_decode_plan.c: the batch decode planner: how the requests' KV tokens are cut into
 * work items (split-KV when the batch cannot fill the device) and where the tables go.
 * Which kernel runs them: rt_decode_choose.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "decode_params.h"
#include "rt_decode.h"

/* Fewest tokens a split chunk gets: below this the fixed costs of a block (q, the
 * merge of its warps and of the chunks) outweigh what it reads. */
#define MIN_CHUNK_TOKENS 128

static int64_t align256(int64_t x) { return (x + 255) & ~(int64_t)255; }

int64_t rt_decode_target_items(int64_t slots, int num_kv_heads) {
  int64_t t = slots / (num_kv_heads > 0 ? num_kv_heads : 1);
  return t > 0 ? t : 1;
}

int rt_single_decode_chunks(int64_t tokens, int num_kv_heads, int64_t resident, int *chunk_tokens) {
  const int64_t t = tokens > 0 ? tokens : 0;
  int64_t n = t < RT_SINGLE_SPLIT_MIN_TOKENS ? 1 : rt_decode_target_items(resident, num_kv_heads),
          most = t / MIN_CHUNK_TOKENS;
  if (n > most) n = most;
  if (n > 0x7fff) n = 0x7fff;
  if (n < 2) {
    *chunk_tokens = t > INT32_MAX ? INT32_MAX : (int)t;
    return 1;
  }
  int64_t c = (t + n - 1) / n;
  c = (c + 31) & ~(int64_t)31;
  *chunk_tokens = (int)c;
  return (int)((t + c - 1) / c); /* c >= t / n: no empty chunk at the end */
}

/* The 256-aligned end of a region of n x per bytes from at; -1 past 2^63 (or at -1). */
static int64_t region_end(int64_t at, int64_t n, int64_t per) {
  int64_t size, end;
  if (at < 0 || __builtin_mul_overflow(n, per, &size) || __builtin_add_overflow(at, size, &end) ||
      end > INT64_MAX - 255)
    return -1;
  return align256(end);
}

void rt_decode_layout_for(int64_t max_batch, int sms, int num_qo_heads, int num_kv_heads,
                          int head_dim, rt_decode_layout *l) {
  const int64_t target =
      rt_decode_target_items((int64_t)(sms > 0 ? sms : 1) * RT_DECODE_MAX_BLOCKS_PER_SM, num_kv_heads);
  const int64_t cap = max_batch > target ? max_batch : target;
  l->capacity = cap;
  l->items_off = FI_DECODE_HDR_WORDS * 4;
  /* Checked: a huge max_batch with millions of heads passes 2^63 bytes, and a wrapped
   * size would let the plan accept a workspace that is too small. */
  l->counters_off = region_end(l->items_off, cap, FI_DECODE_ITEM_WORDS * 4);
  l->partial_o_off = region_end(l->counters_off, cap, (int64_t)num_kv_heads * 4);
  /* partials in the output dtype (fp16 or bf16) */
  l->partial_lse_off = region_end(l->partial_o_off, cap, (int64_t)num_qo_heads * head_dim * 2);
  l->bytes = region_end(l->partial_lse_off, cap, (int64_t)num_qo_heads * 4);
}

int rt_decode_check_pages_named(int batch, const int32_t *indptr, const int32_t *last_page_len, int page_size,
                                const char *pfx, char *err, size_t errlen) {
  if (indptr[0] < 0) {
    snprintf(err, errlen, "%sindptr[0] is %d; page offsets start at 0 or more", pfx, indptr[0]);
    return -1;
  }
  for (int b = 0; b < batch; b++) {
    const int64_t np = (int64_t)indptr[b + 1] - indptr[b];
    if (np < 0) {
      snprintf(err, errlen, "%sindptr is not monotone: %sindptr[%d] = %d > %sindptr[%d] = %d", pfx,
               pfx, b, indptr[b], pfx, b + 1, indptr[b + 1]);
      return -1;
    }
    const int32_t last = last_page_len[b];
    if (np > 0 && (last < 1 || last > page_size)) {
      snprintf(err, errlen, "%slast_page_len[%d] is %d; 1..page_size (%d) is needed for a request with pages",
               pfx, b, last, page_size);
      return -1;
    }
    if (np == 0 && last != 0) {
      snprintf(err, errlen, "%slast_page_len[%d] is %d but request %d has no pages (0 is needed)", pfx,
               b, last, b);
      return -1;
    }
    if ((np - 1) * page_size + last > INT32_MAX) {
      snprintf(err, errlen, "%sindptr[%d..%d] and %slast_page_len[%d] give request %d more than 2^31-1 tokens",
               pfx, b, b + 1, pfx, b, b);
      return -1;
    }
  }
  return 0;
}

int rt_decode_check_pages(int batch, const int32_t *indptr, const int32_t *last_page_len, int page_size, char *err,
                          size_t errlen) {
  return rt_decode_check_pages_named(batch, indptr, last_page_len, page_size, "", err, errlen);
}

/* A request's attended tokens [start, len) and its pages [p0, p1). */
static void span(const int32_t *indptr, const int32_t *last, int b, int page_size,
                 int window_left, int64_t *start, int64_t *len, int64_t *p0, int64_t *p1) {
  const int64_t np = (int64_t)indptr[b + 1] - indptr[b];
  *len = np > 0 ? (np - 1) * page_size + last[b] : 0;
  *start = window_left >= 0 && *len - 1 - window_left > 0 ? *len - 1 - window_left : 0;
  *p0 = *start / page_size;
  *p1 = (*len + page_size - 1) / page_size;
}

void rt_decode_token_stats(int batch, const int32_t *indptr, const int32_t *last_page_len, int page_size,
                           int window_left, int64_t *mean_tokens, int64_t *max_tokens) {
  int64_t total = 0, mx = 0;
  for (int b = 0; b < batch; b++) {
    int64_t s, l, p0, p1;
    span(indptr, last_page_len, b, page_size, window_left, &s, &l, &p0, &p1);
    total += l - s;
    if (l - s > mx) mx = l - s;
  }
  *mean_tokens = batch <= 0 ? 0 : total / batch > 0 ? total / batch : 1;
  *max_tokens = mx;
}

int64_t rt_decode_partition(int batch, const int32_t *indptr, const int32_t *last_page_len,
                            int page_size, int window_left, int64_t target, int32_t *items,
                            int64_t max_items, int *chunk_pages) {
  int64_t maxp = 0;
  for (int b = 0; b < batch; b++) {
    int64_t s, l, p0, p1;
    span(indptr, last_page_len, b, page_size, window_left, &s, &l, &p0, &p1);
    if (p1 - p0 > maxp) maxp = p1 - p0;
  }
  /* chunk: pages per item; maxp (or more) means one item per request. */
  int64_t chunk = maxp > 0 ? maxp : 1;
  if (batch < target && maxp > 1) {
    int64_t lo = (MIN_CHUNK_TOKENS + (int64_t)page_size - 1) / page_size, hi = maxp; /* no int overflow */
    if (lo < 1) lo = 1;
    if (lo > hi) lo = hi;
    /* The smallest chunk whose item count fits the target (it falls as chunk grows). */
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      int64_t n = 0;
      for (int b = 0; b < batch && n <= target; b++) {
        int64_t s, l, p0, p1;
        span(indptr, last_page_len, b, page_size, window_left, &s, &l, &p0, &p1);
        n += p1 > p0 ? (p1 - p0 + mid - 1) / mid : 1;
      }
      if (n <= target)
        hi = mid;
      else
        lo = mid + 1;
    }
    chunk = lo;
  }
  if (chunk > INT32_MAX) chunk = INT32_MAX;
  *chunk_pages = (int)chunk;
  int64_t n = 0;
  for (int b = 0; b < batch; b++) {
    int64_t s, l, p0, p1;
    span(indptr, last_page_len, b, page_size, window_left, &s, &l, &p0, &p1);
    const int64_t nc = p1 > p0 ? (p1 - p0 + chunk - 1) / chunk : 1;
    if (nc > 0x7fff || n + nc > max_items) return -1;
    for (int64_t k = 0; k < nc; k++) {
      int64_t t0 = (p0 + k * chunk) * page_size, t1 = (p0 + (k + 1) * chunk) * page_size;
      if (t0 < s) t0 = s;
      if (t1 > l) t1 = l;
      if (l == 0) t0 = t1 = 0;
      int32_t *it = items + FI_DECODE_ITEM_WORDS * n++;
      it[0] = b;
      it[1] = (int32_t)t0;
      it[2] = (int32_t)t1;
      it[3] = (int32_t)(k | (nc << 16));
      it[4] = indptr[b];
      it[5] = (int32_t)l;
      it[6] = it[7] = 0;
    }
  }
  return n;
}
