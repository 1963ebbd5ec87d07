/* cache_tactic_row.c: one stored tactic as a value, no SQLite: its hash and checksum,
 * the checks a row must pass to be used, a measurement made into a row, and the merge
 * of two rows of one key (the faster wins, an invalid tactic never does). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache_tactics.h"

/* Each text with its NUL, so that no two fields run together. */
static void upd_text(XXH3_state_t *st, const char *s) { XXH3_64bits_update(st, s, strlen(s) + 1); }
static void upd_text128(XXH3_state_t *st, const char *s) { XXH3_128bits_update(st, s, strlen(s) + 1); }

/* Integers and doubles as 8 little-endian bytes (a double by its bits): the same sum on
 * every host. */
static void upd_u64(XXH3_state_t *st, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  XXH3_64bits_update(st, b, 8);
}
static void upd_f64(XXH3_state_t *st, double d) {
  uint64_t v;
  memcpy(&v, &d, sizeof v);
  upd_u64(st, v);
}

void cache_tactic_hash(const cache_tactic *t, uint8_t out[16]) {
  char num[2][24];
  snprintf(num[0], sizeof num[0], "%lld", (long long)t->bucket);
  snprintf(num[1], sizeof num[1], "%lld", (long long)t->sms);
  XXH3_state_t st;
  XXH3_128bits_reset(&st);
  upd_text128(&st, "tactic");
  const char *f[] = {t->op, num[0], t->shape, t->arch, t->device, num[1], t->driver, t->compiler,
                     t->runtime};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) upd_text128(&st, f[i]);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
  memcpy(out, c.digest, 16);
}

uint64_t cache_tactic_checksum(const cache_tactic *t) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, t->hash, 16);
  const char *texts[] = {t->op, t->shape, t->arch, t->device, t->driver, t->compiler, t->runtime,
                         t->params, t->runner_up, t->invalid};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) upd_text(&st, texts[i]);
  const int64_t ints[] = {t->bucket, t->sms, t->valid, t->measured, t->updated, t->samples};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) upd_u64(&st, (uint64_t)ints[i]);
  upd_f64(&st, t->time_us);
  upd_f64(&st, t->default_us);
  upd_f64(&st, t->runner_up_us);
  return XXH3_64bits_digest(&st);
}

static int in_set(char c, const char *set) { return c && strchr(set, c) != NULL; }
#define LOWER_DIGIT "abcdefghijklmnopqrstuvwxyz0123456789_"
#define VALUE_CHARS LOWER_DIGIT "ABCDEFGHIJKLMNOPQRSTUVWXYZ.+-"

/* One tactic of n bytes at p (not NUL-terminated): name=value(;name=value)*. */
static int params_span_ok(const char *p, size_t n) {
  if (n == 0 || n >= CACHE_TACTIC_TEXT) return 0;
  size_t i = 0;
  for (;;) {
    size_t name = i;
    while (i < n && in_set(p[i], LOWER_DIGIT)) i++;
    if (i == name || i >= n || p[i] != '=') return 0;
    size_t value = ++i;
    while (i < n && in_set(p[i], VALUE_CHARS)) i++;
    if (i == value) return 0;
    if (i == n) return 1;
    if (p[i] != ';') return 0;
    i++;
  }
}

int cache_tactic_params_ok(const char *params) {
  return params && params_span_ok(params, strnlen(params, CACHE_TACTIC_TEXT));
}

int cache_tactic_listed(const char *list, const char *p) {
  size_t n = strlen(p);
  if (!n) return 0;
  for (const char *s = list; s && *s;) {
    const char *bar = strchr(s, '|');
    size_t len = bar ? (size_t)(bar - s) : strlen(s);
    if (len == n && memcmp(s, p, n) == 0) return 1;
    s = bar ? bar + 1 : NULL;
  }
  return 0;
}

/* 1 when list is "" or tactics joined by '|'. */
static int list_ok(const char *list) {
  for (const char *s = list; *s;) {
    const char *bar = strchr(s, '|');
    size_t len = bar ? (size_t)(bar - s) : strlen(s);
    if (!params_span_ok(s, len)) return 0;
    if (!bar) break;
    s = bar + 1;
    if (!*s) return 0; /* a trailing '|' */
  }
  return 1;
}

/* A text of the row: NUL-terminated within cap, printable ASCII, nonempty unless may_be_empty. */
static int text_ok(const char *s, size_t cap, int may_be_empty) {
  size_t n = strnlen(s, cap);
  if (n == cap || (n == 0 && !may_be_empty)) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return 0;
  return 1;
}

static int time_ok(double t) { return isfinite(t) && t >= 0; }

#define WHY(...) (snprintf(why, whylen, __VA_ARGS__), -1)

int cache_tactic_check(const cache_tactic *t, int check_sums, char *why, size_t whylen) {
  char spare[8];
  if (!why || !whylen) why = spare, whylen = sizeof spare;
  why[0] = 0;
  const struct {
    const char *name, *s;
    size_t cap;
  } texts[] = {{"op", t->op, sizeof t->op},          {"shape", t->shape, sizeof t->shape},
               {"arch", t->arch, sizeof t->arch},    {"device", t->device, sizeof t->device},
               {"driver", t->driver, sizeof t->driver}, {"compiler", t->compiler, sizeof t->compiler},
               {"runtime", t->runtime, sizeof t->runtime}};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
    if (!text_ok(texts[i].s, texts[i].cap, 0))
      return WHY("its %s is empty, too long or not printable text", texts[i].name);
  for (const char *p = t->op; *p; p++)
    if (!in_set(*p, LOWER_DIGIT)) return WHY("its op is not a name of [a-z0-9_]");
  if (t->bucket < 0 || t->sms <= 0) return WHY("bucket %lld or SM count %lld out of range",
                                                (long long)t->bucket, (long long)t->sms);
  if (!text_ok(t->invalid, sizeof t->invalid, 1) || !list_ok(t->invalid))
    return WHY("its list of invalid tactics is malformed");
  if (t->params[0] && !(text_ok(t->params, sizeof t->params, 0) && cache_tactic_params_ok(t->params)))
    return WHY("its params are not a canonical tactic (name=value;...)");
  if (t->runner_up[0] &&
      !(text_ok(t->runner_up, sizeof t->runner_up, 0) && cache_tactic_params_ok(t->runner_up)))
    return WHY("its runner-up is not a canonical tactic (name=value;...)");
  if (!time_ok(t->time_us) || !time_ok(t->default_us) || !time_ok(t->runner_up_us))
    return WHY("a time is negative or not a number");
  if (t->valid != (t->params[0] != 0) || (t->valid != 0 && t->valid != 1))
    return WHY("valid is %d while params %s", t->valid, t->params[0] ? "name a tactic" : "are empty");
  if (cache_tactic_listed(t->invalid, t->params))
    return WHY("its winner %s is on its own list of invalid tactics", t->params);
  if (t->runner_up[0] && (strcmp(t->runner_up, t->params) == 0 || cache_tactic_listed(t->invalid, t->runner_up)))
    return WHY("its runner-up is its winner or an invalid tactic");
  if (t->samples < 1 || t->measured < 0 || t->updated < t->measured)
    return WHY("samples %lld or times measured %lld, updated %lld out of range",
               (long long)t->samples, (long long)t->measured, (long long)t->updated);
  if (!check_sums) return 0;
  uint8_t h[16];
  cache_tactic_hash(t, h);
  if (memcmp(h, t->hash, 16) != 0) return WHY("its hash is not the hash of its key");
  if (cache_tactic_checksum(t) != t->checksum) return WHY("checksum mismatch");
  return 0;
}

static void seal(cache_tactic *t) {
  cache_tactic_hash(t, t->hash);
  t->checksum = cache_tactic_checksum(t);
}

int cache_tactic_measurement(cache_tactic *row, const cache_tactic *key, const char *params,
                             int valid, double time_us, double default_us,
                             const char *runner_up, double runner_up_us, int64_t now,
                             char *why, size_t whylen) {
  char spare[8];
  if (!why || !whylen) why = spare, whylen = sizeof spare;
  if (row != key) *row = *key;
  if (!cache_tactic_params_ok(params)) return WHY("params '%.80s' are not a canonical tactic (name=value;...)", params ? params : "");
  if (runner_up && runner_up[0] && !cache_tactic_params_ok(runner_up))
    return WHY("runner-up '%.80s' is not a canonical tactic", runner_up);
  if (!time_ok(time_us) || !time_ok(default_us) || !time_ok(runner_up_us))
    return WHY("a time is negative or not a number");
  if (valid != 0 && valid != 1) return WHY("valid must be 0 or 1");
  char p[CACHE_TACTIC_TEXT], r[CACHE_TACTIC_TEXT];
  snprintf(p, sizeof p, "%s", params);
  snprintf(r, sizeof r, "%s", runner_up && valid && strcmp(runner_up, params) != 0 ? runner_up : "");
  memset(row->params, 0, sizeof row->params);
  memset(row->runner_up, 0, sizeof row->runner_up);
  memset(row->invalid, 0, sizeof row->invalid);
  snprintf(valid ? row->params : row->invalid, CACHE_TACTIC_TEXT, "%s", p);
  snprintf(row->runner_up, sizeof row->runner_up, "%s", r);
  row->valid = valid;
  row->time_us = valid ? time_us : 0;
  row->default_us = valid ? default_us : 0;
  row->runner_up_us = r[0] ? runner_up_us : 0;
  row->measured = row->updated = now;
  row->samples = 1;
  seal(row);
  return cache_tactic_check(row, 1, why, whylen);
}

typedef struct cand {
  const char *params;
  double us;
  int from_in; /* the time came from row `in` */
} cand;

int cache_tactic_merge(cache_tactic *into, const cache_tactic *in, char *why, size_t whylen) {
  char spare[8];
  if (!why || !whylen) why = spare, whylen = sizeof spare;
  /* The invalid lists joined, each tactic once. */
  char inv[CACHE_TACTIC_LIST];
  snprintf(inv, sizeof inv, "%s", into->invalid);
  for (const char *s = in->invalid; *s;) {
    const char *bar = strchr(s, '|');
    size_t len = bar ? (size_t)(bar - s) : strlen(s);
    char one[CACHE_TACTIC_TEXT];
    snprintf(one, sizeof one, "%.*s", (int)(len < sizeof one ? len : sizeof one - 1), s);
    if (!cache_tactic_listed(inv, one)) {
      size_t used = strlen(inv);
      if (used + (used ? 1 : 0) + strlen(one) + 1 > sizeof inv)
        return WHY("too many invalid tactics for one row (%zu bytes at most)", sizeof inv - 1);
      snprintf(inv + used, sizeof inv - used, "%s%s", used ? "|" : "", one);
    }
    s = bar ? bar + 1 : s + len;
  }
  /* Candidates: both winners and both runners-up, not invalid; the fastest time of each. */
  cand c[4];
  int n = 0;
  const cand all[4] = {{into->params, into->time_us, 0}, {into->runner_up, into->runner_up_us, 0},
                       {in->params, in->time_us, 1}, {in->runner_up, in->runner_up_us, 1}};
  for (int i = 0; i < 4; i++) {
    if (!all[i].params[0] || cache_tactic_listed(inv, all[i].params)) continue;
    int k = 0;
    while (k < n && strcmp(c[k].params, all[i].params) != 0) k++;
    if (k == n) c[n++] = all[i];
    else if (all[i].us < c[k].us) c[k] = all[i];
  }
  int w = -1, r = -1; /* the fastest and the next; on a tie the earlier (the stored row's) */
  for (int i = 0; i < n; i++)
    if (w < 0 || c[i].us < c[w].us) w = i;
  for (int i = 0; i < n; i++)
    if (i != w && (r < 0 || c[i].us < c[r].us)) r = i;
  cache_tactic out = *into;
  memset(out.params, 0, sizeof out.params);
  memset(out.runner_up, 0, sizeof out.runner_up);
  memset(out.invalid, 0, sizeof out.invalid);
  snprintf(out.invalid, sizeof out.invalid, "%s", inv);
  if (w >= 0) {
    snprintf(out.params, sizeof out.params, "%s", c[w].params);
    out.time_us = c[w].us;
    /* The default was timed in the same run as the winner: from the same row. */
    out.default_us = c[w].from_in ? in->default_us : into->default_us;
  } else {
    out.time_us = out.default_us = 0;
  }
  out.valid = w >= 0;
  if (r >= 0) snprintf(out.runner_up, sizeof out.runner_up, "%s", c[r].params);
  out.runner_up_us = r >= 0 ? c[r].us : 0;
  out.samples = into->samples + in->samples;
  out.measured = into->measured < in->measured ? into->measured : in->measured;
  out.updated = into->updated > in->updated ? into->updated : in->updated;
  seal(&out);
  *into = out;
  return 0;
}
