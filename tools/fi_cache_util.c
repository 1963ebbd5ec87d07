/* fi_cache_util.c: fi-cache's shared helpers: error and usage messages, JSON
 * output, times, and copying the cache's entry list out of the store. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fi_cache.h"

const char *prog = "fi-cache";

int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", prog);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry '%s --help'.\n", prog);
  return EXIT_USAGE;
}

/* A message that may quote a row (its key, its entry) or a compiler log, for
 * a terminal: line breaks and tabs kept, every other control byte as \xHH. */
void text_safe_lines(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
      fprintf(f, "\\x%02x", *p);
    else
      fputc(*p, f);
  }
}

int fail(const char *what, fi_status st) {
  fprintf(stderr, "%s: %s: %s: ", prog, what, fi_status_string(st));
  text_safe_lines(stderr, fi_last_error());
  fputc('\n', stderr);
  return 1;
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p == '\n') fputs("\\n", f);
    else if (*p == '\t') fputs("\\t", f);
    else if (*p == '\r') fputs("\\r", f);
    else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

const char *text_safe(const char *s, char *buf, size_t n) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  if (n == 0) return "";
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p && o + 5 < n; p++) {
    if (*p < 0x20 || *p >= 0x7f || *p == '\\') {
      buf[o++] = '\\';
      if (*p == '\\') {
        buf[o++] = '\\';
        continue;
      }
      buf[o++] = 'x';
      buf[o++] = hex[*p >> 4];
      buf[o++] = hex[*p & 15];
    } else {
      buf[o++] = (char)*p;
    }
  }
  buf[o] = 0;
  return buf;
}

/* JSON has no NaN or Infinity; a corrupt compile_ms must not break parsers. */
double json_num(double v) { return isfinite(v) ? v : 0.0; }

void local_time(int64_t t, char *buf, size_t n) {
  time_t tt = (time_t)t;
  struct tm tm;
  if (t <= 0 || !localtime_r(&tt, &tm) || !strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm))
    snprintf(buf, n, "-");
}

/* ---- collecting entries: fi_admin_list holds the store lock during the
 * callback, so we copy everything out and work on the copies afterwards. ---- */



static int collect_cb(const fi_cache_entry *e, void *user) {
  entries *l = user;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    entry *v = realloc(l->v, cap * sizeof *v);
    if (!v) return l->oom = 1;
    l->v = v;
    l->cap = cap;
  }
  entry *d = &l->v[l->n];
  memcpy(d->hash, e->hash, sizeof d->hash);
  d->hash[32] = 0;
  d->layer = e->layer && strcmp(e->layer, "system") == 0 ? "system" : "user";
  d->op = strdup(e->op ? e->op : "");
  d->key = strdup(e->key ? e->key : "");
  d->arch = strdup(e->arch ? e->arch : "");
  d->compiler = strdup(e->compiler ? e->compiler : "");
  d->bytes = e->bytes;
  d->created = e->created;
  d->last_used = e->last_used;
  d->hits = e->hits;
  d->compile_ms = e->compile_ms;
  l->n++;
  if (!d->op || !d->key || !d->arch || !d->compiler) return l->oom = 1;
  return 0;
}

void entries_free(entries *l) {
  for (size_t i = 0; i < l->n; i++) {
    free(l->v[i].op);
    free(l->v[i].key);
    free(l->v[i].arch);
    free(l->v[i].compiler);
  }
  free(l->v);
}

/* Lists every (op, arch) filter combination; no filter given means "any". */
int collect(fi_runtime *rt, const args *a, entries *l) {
  memset(l, 0, sizeof *l);
  for (int i = 0; i < (a->nop ? a->nop : 1); i++)
    for (int j = 0; j < (a->narch ? a->narch : 1); j++) {
      fi_status st = fi_admin_list(rt, a->nop ? a->ops[i] : NULL, a->narch ? a->archs[j] : NULL,
                                   collect_cb, l);
      if (l->oom) {
        fprintf(stderr, "%s: out of memory listing the cache\n", prog);
        return 1;
      }
      if (st != FI_OK) return fail("listing the cache", st);
    }
  return 0;
}
