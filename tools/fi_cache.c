/* fi_cache.c: fi-cache, the command-line client of fi_runtime's kernel cache:
 * prewarm (parallel compile), ls, show, stats, export, import, gc, verify and
 * clear, over fi_admin.h. */
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

#include "fi_admin.h"
#include "fi_runtime.h"

#ifndef FI_VERSION_STRING /* the Makefile passes the library's version */
#define FI_VERSION_STRING "unknown"
#endif
#define EXIT_USAGE 2
#define MAX_LIST 64

/* Everything the command line can say; each command accepts a subset (mask). */
enum {
  O_ARCH = 1, O_OP = 2, O_JOBS = 4, O_JSON = 8, O_SOURCE = 16, O_OUT = 32,
  O_MAX_BYTES = 64, O_STALE = 128, O_REPAIR = 256, O_TO = 512
};

/* What a command's positional argument is. */
enum { P_NONE = 0, P_HASH = 1, P_FILE = 2 };

typedef struct args {
  const char *cache;
  const char *archs[MAX_LIST], *ops[MAX_LIST];
  int narch, nop, jobs, json, source, help, stale, repair;
  int64_t max_bytes; /* gc --max-bytes; -1: the runtime's cap */
  const char *out, *prefix, *to, *file;
} args;

typedef struct command {
  const char *name;
  unsigned opts;
  int positional; /* P_NONE, P_HASH (HASH_PREFIX) or P_FILE */
  int (*run)(fi_runtime *rt, const args *a);
  const char *synopsis, *summary, *about;
} command;

static const char *prog = "fi-cache";

static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", prog);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry '%s --help'.\n", prog);
  return EXIT_USAGE;
}

static int fail(const char *what, fi_status st) {
  fprintf(stderr, "%s: %s: %s: %s\n", prog, what, fi_status_string(st), fi_last_error());
  return 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void json_str(FILE *f, const char *s) {
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

/* JSON has no NaN or Infinity; a corrupt compile_ms must not break parsers. */
static double json_num(double v) { return isfinite(v) ? v : 0.0; }

static void local_time(int64_t t, char *buf, size_t n) {
  time_t tt = (time_t)t;
  struct tm tm;
  if (t <= 0 || !localtime_r(&tt, &tm) || !strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm))
    snprintf(buf, n, "-");
}

/* ---- collecting entries: fi_admin_list holds the store lock during the
 * callback, so we copy everything out and work on the copies afterwards. ---- */

typedef struct entry {
  char hash[33];
  const char *layer; /* "user" or "system" (static strings) */
  char *op, *key, *arch, *compiler;
  int64_t bytes, created, last_used, hits;
  double compile_ms;
} entry;

typedef struct entries {
  entry *v;
  size_t n, cap;
  int oom;
} entries;

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

static void entries_free(entries *l) {
  for (size_t i = 0; i < l->n; i++) {
    free(l->v[i].op);
    free(l->v[i].key);
    free(l->v[i].arch);
    free(l->v[i].compiler);
  }
  free(l->v);
}

/* Lists every (op, arch) filter combination; no filter given means "any". */
static int collect(fi_runtime *rt, const args *a, entries *l) {
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

/* ---- prewarm ---- */

typedef struct job {
  const char *op, *arch;
  int idx;
} job;

typedef struct prewarm_ctx {
  fi_runtime *rt;
  job *jobs;
  size_t njobs;
  atomic_size_t next, done;
  atomic_int compiled, cached, waited, failed;
  pthread_mutex_t out_mu; /* one writer at a time on stderr: bar and failures */
  int tty;
  double t0;
  char last_err[4096];    /* to collapse a failure repeated for every config */
} prewarm_ctx;

static void draw_bar(prewarm_ctx *c) {
  size_t done = atomic_load(&c->done), w = 30, fill = c->njobs ? done * w / c->njobs : w;
  char bar[64];
  for (size_t i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
  bar[w] = 0;
  fprintf(stderr, "\r[%s] %zu/%zu compiled %d cached %d failed %d  %.1fs\033[K", bar, done,
          c->njobs, atomic_load(&c->compiled), atomic_load(&c->cached) + atomic_load(&c->waited),
          atomic_load(&c->failed), now_s() - c->t0);
  fflush(stderr);
}

static void report_failure(prewarm_ctx *c, const job *j, fi_status st) {
  /* Copy first: every fi_* call, fi_admin_config_key included, resets it. */
  char msg[4096], key[1024];
  snprintf(msg, sizeof msg, "%s", fi_last_error());
  if (fi_admin_config_key(j->op, j->idx, key, sizeof key) != FI_OK)
    snprintf(key, sizeof key, "#%d", j->idx);
  pthread_mutex_lock(&c->out_mu);
  if (c->tty) fputs("\r\033[K", stderr);
  fprintf(stderr, "%s: failed: %s %s on %s: %s\n", prog, j->op, key, j->arch,
          fi_status_string(st));
  if (c->last_err[0] && strcmp(msg, c->last_err) == 0) {
    fputs("    (same error as above)\n", stderr);
  } else {
    snprintf(c->last_err, sizeof c->last_err, "%s", msg);
    /* A compile log can be thousands of lines; the head says what went wrong. */
    int line = 0;
    const char *p = msg;
    while (*p && line < 12) {
      const char *nl = strchr(p, '\n');
      int len = nl ? (int)(nl - p) : (int)strlen(p);
      fprintf(stderr, "    %.*s\n", len, p);
      line++;
      p = nl ? nl + 1 : p + len;
    }
    if (*p) fputs("    ...\n", stderr);
    if (!msg[0]) fputs("    (no message)\n", stderr);
  }
  if (c->tty) draw_bar(c);
  pthread_mutex_unlock(&c->out_mu);
}

static void *prewarm_worker(void *user) {
  prewarm_ctx *c = user;
  for (;;) {
    size_t i = atomic_fetch_add(&c->next, 1);
    if (i >= c->njobs) break;
    const job *j = &c->jobs[i];
    fi_prewarm_result res = FI_PREWARM_COMPILED;
    double ms = 0;
    fi_status st = fi_admin_prewarm(c->rt, j->op, j->idx, j->arch, &res, &ms);
    if (st != FI_OK) {
      atomic_fetch_add(&c->failed, 1);
      report_failure(c, j, st); /* on this thread: the message is thread-local */
    } else if (res == FI_PREWARM_CACHED) {
      atomic_fetch_add(&c->cached, 1);
    } else if (res == FI_PREWARM_WAITED) {
      atomic_fetch_add(&c->waited, 1);
    } else {
      atomic_fetch_add(&c->compiled, 1);
    }
    atomic_fetch_add(&c->done, 1);
  }
  return NULL;
}

static int cmd_prewarm(fi_runtime *rt, const args *a) {
  /* No --op: every registered op, however many the library has. */
  int nop = a->nop ? a->nop : fi_admin_op_count();
  const char **ops = calloc(nop > 0 ? (size_t)nop : 1, sizeof *ops);
  size_t njobs = 0;
  for (int i = 0; ops && i < nop; i++) {
    ops[i] = a->nop ? a->ops[i] : fi_admin_op_name(i);
    int n = ops[i] ? fi_admin_config_count(ops[i]) : -1;
    if (n > 0) njobs += (size_t)n * (size_t)a->narch;
  }
  prewarm_ctx c;
  memset(&c, 0, sizeof c);
  c.rt = rt;
  c.njobs = njobs;
  c.jobs = ops ? calloc(njobs ? njobs : 1, sizeof *c.jobs) : NULL;
  if (!c.jobs) {
    fprintf(stderr, "%s: out of memory\n", prog);
    free(ops);
    return 1;
  }
  /* Arch-major order: the first configurations of every arch do not wait
   * behind the last ones of another, and each compiler is loaded early. */
  size_t k = 0;
  for (int r = 0; r < a->narch; r++)
    for (int i = 0; i < nop; i++)
      for (int x = 0, n = ops[i] ? fi_admin_config_count(ops[i]) : 0; x < n; x++)
        c.jobs[k++] = (job){ops[i], a->archs[r], x};
  pthread_mutex_init(&c.out_mu, NULL);
  c.tty = isatty(STDERR_FILENO);
  c.t0 = now_s();
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int nthreads = a->jobs > 0 ? a->jobs : (ncpu > 0 ? (int)ncpu : 1);
  if ((size_t)nthreads > njobs) nthreads = njobs ? (int)njobs : 1;
  pthread_t *th = calloc((size_t)nthreads, sizeof *th);
  int started = 0;
  for (; th && started < nthreads; started++)
    if (pthread_create(&th[started], NULL, prewarm_worker, &c) != 0) break;
  if (started == 0) prewarm_worker(&c); /* no thread could start: do it here */
  /* The main thread only draws the bar; workers draw on failures. */
  while (c.tty && atomic_load(&c.done) < njobs) {
    pthread_mutex_lock(&c.out_mu);
    draw_bar(&c);
    pthread_mutex_unlock(&c.out_mu);
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  double secs = now_s() - c.t0;
  if (c.tty) {
    draw_bar(&c);
    fputc('\n', stderr);
  }
  int comp = atomic_load(&c.compiled), cach = atomic_load(&c.cached);
  int wait = atomic_load(&c.waited), bad = atomic_load(&c.failed);
  if (a->json)
    printf("{\"compiled\":%d,\"cached\":%d,\"waited\":%d,\"failed\":%d,\"seconds\":%.3f}\n", comp,
           cach, wait, bad, secs);
  else
    printf("compiled %d, cached %d, waited %d, failed %d in %.1f s\n", comp, cach, wait, bad, secs);
  free(th);
  free(c.jobs);
  free(ops);
  pthread_mutex_destroy(&c.out_mu);
  return bad ? 1 : 0;
}

/* ---- ls, show, stats, export, clear ---- */

static int cmd_ls(fi_runtime *rt, const args *a) {
  entries l;
  int rc = collect(rt, a, &l);
  if (rc) {
    entries_free(&l);
    return rc;
  }
  if (a->json) {
    fputc('[', stdout);
    for (size_t i = 0; i < l.n; i++) {
      const entry *e = &l.v[i];
      fputs(i ? ",\n {" : "{", stdout);
      fputs("\"hash\":", stdout), json_str(stdout, e->hash);
      fputs(",\"layer\":", stdout), json_str(stdout, e->layer);
      fputs(",\"op\":", stdout), json_str(stdout, e->op);
      fputs(",\"key\":", stdout), json_str(stdout, e->key);
      fputs(",\"arch\":", stdout), json_str(stdout, e->arch);
      fputs(",\"compiler\":", stdout), json_str(stdout, e->compiler);
      printf(",\"bytes\":%" PRId64 ",\"created\":%" PRId64 ",\"last_used\":%" PRId64
             ",\"hits\":%" PRId64 ",\"compile_ms\":%.3f}",
             e->bytes, e->created, e->last_used, e->hits, json_num(e->compile_ms));
    }
    fputs("]\n", stdout);
  } else {
    int wop = 2, warch = 4, wcc = 8; /* widths of the header words */
    for (size_t i = 0; i < l.n; i++) {
      int n;
      if ((n = (int)strlen(l.v[i].op)) > wop) wop = n;
      if ((n = (int)strlen(l.v[i].arch)) > warch) warch = n;
      if ((n = (int)strlen(l.v[i].compiler)) > wcc) wcc = n;
    }
    printf("%-12s  %-6s  %-*s  %-*s  %-*s  %10s  %6s  %-19s  %s\n", "hash", "layer", wop, "op",
           warch, "arch", wcc, "compiler", "bytes", "hits", "last used", "key");
    for (size_t i = 0; i < l.n; i++) {
      const entry *e = &l.v[i];
      char when[32];
      local_time(e->last_used, when, sizeof when);
      printf("%.12s  %-6s  %-*s  %-*s  %-*s  %10" PRId64 "  %6" PRId64 "  %-19s  %s\n", e->hash,
             e->layer, wop, e->op, warch, e->arch, wcc, e->compiler, e->bytes, e->hits, when,
             e->key);
    }
  }
  entries_free(&l);
  return 0;
}

static int show_cb(const fi_cache_entry *e, void *user) {
  (void)user;
  char created[32], used[32];
  local_time(e->created, created, sizeof created);
  local_time(e->last_used, used, sizeof used);
  printf("hash: %.32s\nop: %s\nkey: %s\narch: %s\ncompiler: %s\nentry: %s\nlayer: %s\n", e->hash,
         e->op ? e->op : "", e->key ? e->key : "", e->arch ? e->arch : "",
         e->compiler ? e->compiler : "", e->entry ? e->entry : "", e->layer ? e->layer : "");
  printf("bytes: %" PRId64 "\ncreated: %" PRId64 " (%s)\nlast_used: %" PRId64
         " (%s)\nhits: %" PRId64 "\ncompile_ms: %.3f\n",
         e->bytes, e->created, created, e->last_used, used, e->hits, e->compile_ms);
  return 0;
}

static int cmd_show(fi_runtime *rt, const args *a) {
  char *src = NULL;
  fi_status st = fi_admin_get(rt, a->prefix, show_cb, NULL, NULL, NULL, a->source ? &src : NULL);
  if (st != FI_OK) return fail("show", st);
  if (a->source) {
    size_t n = src ? strlen(src) : 0;
    printf("source:\n%s%s", src ? src : "", n && src[n - 1] != '\n' ? "\n" : "");
  }
  fi_admin_free(src);
  return 0;
}

typedef struct group {
  const char *layer, *op, *arch;
  int64_t entries, bytes;
} group;

static int cmd_stats(fi_runtime *rt, const args *a) {
  fi_admin_stats s;
  fi_status st = fi_admin_stats_get(rt, &s);
  if (st != FI_OK) return fail("stats", st);
  entries l;
  int rc = collect(rt, a, &l);
  group *g = calloc(l.n ? l.n : 1, sizeof *g);
  size_t ng = 0;
  int64_t hits = 0, n_user = 0, n_system = 0;
  if (!rc && !g) {
    fprintf(stderr, "%s: out of memory\n", prog);
    rc = 1;
  }
  /* list is ordered by layer, then (op, key), not arch: group with a linear
   * search, the number of (layer, op, arch) triples is small. */
  for (size_t i = 0; !rc && i < l.n; i++) {
    const entry *e = &l.v[i];
    size_t k = 0;
    while (k < ng &&
           (strcmp(g[k].layer, e->layer) || strcmp(g[k].op, e->op) || strcmp(g[k].arch, e->arch)))
      k++;
    if (k == ng) g[ng++] = (group){e->layer, e->op, e->arch, 0, 0};
    g[k].entries++;
    g[k].bytes += e->bytes;
    hits += e->hits;
    if (strcmp(e->layer, "system") == 0) n_system++;
    else n_user++;
  }
  /* This process's own work: opening and listing, so mostly zeros. */
  fi_stats ps;
  memset(&ps, 0, sizeof ps);
  ps.struct_size = sizeof ps;
  if (!rc && (st = fi_runtime_stats(rt, &ps)) != FI_OK) rc = fail("stats", st);
  const char *sys = getenv("FI_CACHE_SYSTEM_PATH");
  if (sys && !sys[0]) sys = NULL;
  if (!rc && a->json) {
    fputs("{\"path\":", stdout), json_str(stdout, s.path);
    printf(",\"entries\":%" PRId64 ",\"bytes\":%" PRId64 ",\"file_bytes\":%" PRId64
           ",\"by_op_arch\":[",
           s.entries, s.bytes, s.file_bytes);
    for (size_t k = 0; k < ng; k++) {
      fputs(k ? ",{\"op\":" : "{\"op\":", stdout), json_str(stdout, g[k].op);
      fputs(",\"arch\":", stdout), json_str(stdout, g[k].arch);
      fputs(",\"layer\":", stdout), json_str(stdout, g[k].layer);
      printf(",\"entries\":%" PRId64 ",\"bytes\":%" PRId64 "}", g[k].entries, g[k].bytes);
    }
    fputs("],\"system_path\":", stdout);
    if (sys) json_str(stdout, sys);
    else fputs("null", stdout);
    printf(",\"hits\":%" PRId64 ",\"layers\":{\"user\":%" PRId64 ",\"system\":%" PRId64 "}", hits,
           n_user, n_system);
    printf(",\"process\":{\"memo_hits\":%" PRId64 ",\"cache_hits\":%" PRId64
           ",\"compiles\":%" PRId64 ",\"compile_failures\":%" PRId64
           ",\"compile_ms\":%.3f,\"waits\":%" PRId64 ",\"evictions\":%" PRId64
           ",\"repairs\":%" PRId64 "}}\n",
           ps.memo_hits, ps.cache_hits, ps.compiles, ps.compile_failures,
           json_num(ps.compile_ms), ps.waits, ps.evictions, ps.repairs);
  } else if (!rc) {
    printf("path: %s\nentries: %" PRId64 "\nbytes: %" PRId64 "\nfile_bytes: %" PRId64 "\n",
           s.path ? s.path : "", s.entries, s.bytes, s.file_bytes);
    if (sys) printf("system_path: %s\n", sys);
    printf("hits: %" PRId64 "\nlayers: user %" PRId64 ", system %" PRId64 "\n", hits, n_user,
           n_system);
    for (size_t k = 0; k < ng; k++)
      printf("  %-6s %-20s %-10s %6" PRId64 " entries %10" PRId64 " bytes\n", g[k].layer, g[k].op,
             g[k].arch, g[k].entries, g[k].bytes);
    printf("this process: memo_hits %" PRId64 ", cache_hits %" PRId64 ", compiles %" PRId64
           ", compile_failures %" PRId64 ", compile_ms %.1f, waits %" PRId64
           ", evictions %" PRId64 ", repairs %" PRId64 "\n",
           ps.memo_hits, ps.cache_hits, ps.compiles, ps.compile_failures,
           json_num(ps.compile_ms), ps.waits, ps.evictions, ps.repairs);
  }
  if (!rc && n_user != s.entries) /* another process wrote in between, most likely */
    fprintf(stderr, "%s: note: the listing found %" PRId64 " user entries, the totals %" PRId64 "\n",
            prog, n_user, s.entries);
  free(g);
  entries_free(&l);
  return rc;
}

/* export HASH_PREFIX -o FILE: one raw binary. */
static int export_binary(fi_runtime *rt, const args *a) {
  void *bin = NULL;
  size_t n = 0;
  fi_status st = fi_admin_get(rt, a->prefix, NULL, NULL, &bin, &n, NULL);
  if (st != FI_OK) return fail("export", st);
  /* Write beside the target and rename: a reader never sees half a binary. */
  size_t plen = strlen(a->out) + 5;
  char *tmp = malloc(plen);
  int fd = -1, rc = 1;
  if (!tmp) goto done;
  snprintf(tmp, plen, "%s.tmp", a->out);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "%s: export: %s: %s\n", prog, tmp, strerror(errno));
    goto done;
  }
  for (size_t off = 0; off < n;) {
    ssize_t w = write(fd, (const char *)bin + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      fprintf(stderr, "%s: export: writing %s: %s\n", prog, tmp, strerror(errno));
      goto done;
    }
    off += (size_t)w;
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    fd = -1;
    fprintf(stderr, "%s: export: writing %s: %s\n", prog, tmp, strerror(errno));
    goto done;
  }
  fd = -1;
  if (rename(tmp, a->out) != 0) {
    fprintf(stderr, "%s: export: renaming %s to %s: %s\n", prog, tmp, a->out, strerror(errno));
    goto done;
  }
  printf("wrote %zu bytes to %s\n", n, a->out);
  rc = 0;
done:
  if (!tmp) fprintf(stderr, "%s: out of memory\n", prog);
  if (fd >= 0) close(fd);
  if (rc && tmp) unlink(tmp);
  free(tmp);
  fi_admin_free(bin);
  return rc;
}

/* The user cache file this runtime opened (the library's string, valid while rt lives). */
static const char *user_path(fi_runtime *rt) {
  fi_admin_stats s;
  return fi_admin_stats_get(rt, &s) == FI_OK && s.path ? s.path : "";
}

/* 1 if both paths name the same existing file. */
static int same_file(const char *p, const char *q) {
  struct stat a, b;
  return stat(p, &a) == 0 && stat(q, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* export --to FILE: a standalone cache file, for FI_CACHE_SYSTEM_PATH on other machines. */
static int export_cache(fi_runtime *rt, const args *a) {
  if (same_file(a->to, user_path(rt))) {
    fprintf(stderr, "%s: export: %s is the cache itself\n", prog, a->to);
    return 1;
  }
  int64_t n = 0;
  fi_status st = fi_admin_export_cache(rt, a->to, a->nop ? a->ops[0] : NULL,
                                       a->narch ? a->archs[0] : NULL, &n);
  if (st != FI_OK) return fail("export", st);
  printf("exported %" PRId64 " entries to %s\n", n, a->to);
  return 0;
}

static int cmd_export(fi_runtime *rt, const args *a) {
  return a->to ? export_cache(rt, a) : export_binary(rt, a);
}

static int cmd_import(fi_runtime *rt, const args *a) {
  if (same_file(a->file, user_path(rt))) {
    fprintf(stderr, "%s: import: %s is the cache itself\n", prog, a->file);
    return 1;
  }
  int64_t n = 0, k = 0;
  fi_status st = fi_admin_import_cache(rt, a->file, &n, &k);
  if (st != FI_OK) return fail("import", st);
  printf("imported %" PRId64 ", skipped %" PRId64 "\n", n, k);
  return 0;
}

static int cmd_gc(fi_runtime *rt, const args *a) {
  int64_t evicted = 0, stale = 0;
  fi_status st = fi_admin_gc(rt, a->max_bytes, a->stale, &evicted, &stale);
  if (st != FI_OK) return fail("gc", st);
  if (a->json)
    printf("{\"evicted\":%" PRId64 ",\"stale\":%" PRId64 "}\n", evicted, stale);
  else
    printf("evicted %" PRId64 ", stale %" PRId64 "\n", evicted, stale);
  return 0;
}

/* The report's detail, one problem a line, as text (indented) or a JSON array. */
static void print_detail(const char *d, int json) {
  int first = 1;
  if (json) fputc('[', stdout);
  while (d && *d) {
    const char *nl = strchr(d, '\n');
    size_t len = nl ? (size_t)(nl - d) : strlen(d);
    if (len) {
      char line[sizeof ((fi_verify_report *)0)->detail];
      snprintf(line, sizeof line, "%.*s", (int)len, d);
      if (json) {
        if (!first) fputc(',', stdout);
        json_str(stdout, line);
      } else {
        printf("  %s\n", line);
      }
      first = 0;
    }
    d += len + (nl ? 1 : 0);
  }
  if (json) fputc(']', stdout);
}

static int cmd_verify(fi_runtime *rt, const args *a) {
  /* Opening the cache (before this command ran) may already have mended it:
   * a file that was not a database is moved aside and a new one started. */
  fi_stats ps;
  memset(&ps, 0, sizeof ps);
  ps.struct_size = sizeof ps;
  fi_status st = fi_runtime_stats(rt, &ps);
  if (st != FI_OK) return fail("verify", st);
  int64_t on_open = ps.repairs;
  fi_verify_report r, after;
  st = fi_admin_verify(rt, a->repair, &r);
  if (st != FI_OK) return fail("verify", st);
  int problems = !r.integrity_ok || r.bad_rows > 0 || on_open > 0, ok = !problems, rechecked = 0;
  if (problems && a->repair) {
    /* Whether the repair left a sound file is for a second pass to say. */
    st = fi_admin_verify(rt, 0, &after);
    if (st != FI_OK) return fail("verify after repair", st);
    rechecked = 1;
    ok = after.integrity_ok && after.bad_rows == 0;
  }
  if (a->json) {
    printf("{\"ok\":%s,\"integrity_ok\":%s,\"rows\":%" PRId64 ",\"bad_rows\":%" PRId64
           ",\"repaired\":%" PRId64 ",\"repaired_on_open\":%" PRId64 ",\"detail\":",
           ok ? "true" : "false", r.integrity_ok ? "true" : "false", r.rows, r.bad_rows,
           r.repaired, on_open);
    print_detail(r.detail, 1);
    if (rechecked)
      printf(",\"after_repair\":{\"integrity_ok\":%s,\"rows\":%" PRId64 ",\"bad_rows\":%" PRId64
             "}",
             after.integrity_ok ? "true" : "false", after.rows, after.bad_rows);
    fputs("}\n", stdout);
  } else {
    printf("integrity: %s\nrows: %" PRId64 "\nbad rows: %" PRId64 "\nrepaired: %" PRId64 "\n",
           r.integrity_ok ? "ok" : "FAILED", r.rows, r.bad_rows, r.repaired);
    print_detail(r.detail, 0);
    if (on_open)
      printf("the file could not be read when it was opened and was replaced by a new one "
             "(%" PRId64 " repair%s; see the warning above)\n",
             on_open, on_open == 1 ? "" : "s");
    if (rechecked)
      printf("after repair: integrity %s, rows %" PRId64 ", bad rows %" PRId64 "\n",
             after.integrity_ok ? "ok" : "FAILED", after.rows, after.bad_rows);
    else if (!r.integrity_ok || r.bad_rows > 0)
      printf("not repaired: run '%s verify --repair'\n", prog);
  }
  return ok ? 0 : 1;
}

static int cmd_clear(fi_runtime *rt, const args *a) {
  int64_t total = 0;
  for (int i = 0; i < (a->nop ? a->nop : 1); i++)
    for (int j = 0; j < (a->narch ? a->narch : 1); j++) {
      int64_t n = 0;
      fi_status st = fi_admin_clear(rt, a->nop ? a->ops[i] : NULL, a->narch ? a->archs[j] : NULL, &n);
      if (st != FI_OK) {
        printf("removed %" PRId64 "\n", total);
        return fail("clear", st);
      }
      total += n;
    }
  printf("removed %" PRId64 "\n", total);
  return 0;
}

/* ---- command line ---- */

static const command commands[] = {
    {"prewarm", O_ARCH | O_OP | O_JOBS | O_JSON, P_NONE, cmd_prewarm,
     "prewarm --arch ARCH[,ARCH...] [--op OP]... [-j N] [--json]",
     "compile kernels ahead of time, skipping what is cached",
     "Compile every registered configuration of the ops (all ops if none) for each\n"
     "arch, skipping what is cached (in either layer). -j: worker threads (default:\n"
     "online CPUs). --json: one summary object on the last line.\n"},
    {"ls", O_ARCH | O_OP | O_JSON, P_NONE, cmd_ls,
     "ls [--op OP] [--arch ARCH] [--json]", "list cache entries of both layers",
     "List cache entries, optionally filtered (--op and --arch take comma lists):\n"
     "the system layer (FI_CACHE_SYSTEM_PATH, read-only) first, then the user cache.\n"},
    {"show", O_SOURCE, P_HASH, cmd_show,
     "show HASH_PREFIX [--source]", "print one entry in full",
     "Print every field of one entry (and its source).\n"},
    {"stats", O_JSON, P_NONE, cmd_stats,
     "stats [--json]", "totals of the cache file and counters of this process",
     "Cache path, totals, hits summed over entries, entries per layer and per\n"
     "op/arch, and the runtime counters of this fi-cache process (memo_hits,\n"
     "cache_hits, compiles, compile_failures, compile_ms, waits, evictions, repairs).\n"},
    {"export", O_OUT | O_TO | O_OP | O_ARCH, P_HASH, cmd_export,
     "export (HASH_PREFIX -o FILE | --to FILE [--op OP] [--arch ARCH])",
     "write one binary, or a cache file to ship as a system layer",
     "export HASH_PREFIX -o FILE\n"
     "  Write the entry's raw binary (cubin, hsaco) to FILE.\n"
     "export --to FILE [--op OP] [--arch ARCH]\n"
     "  Write the user cache's entries (those of OP and ARCH if given) to FILE, a\n"
     "  standalone cache file (mode 0644, rollback journal, no -wal/-shm) that\n"
     "  other machines use read-only as FI_CACHE_SYSTEM_PATH. FILE is replaced\n"
     "  atomically.\n"},
    {"import", 0, P_FILE, cmd_import,
     "import FILE", "merge another cache file into the user cache",
     "Copy FILE's entries (checksums verified) into the user cache; entries the\n"
     "user cache already has are kept and counted as skipped.\n"},
    {"gc", O_MAX_BYTES | O_STALE | O_JSON, P_NONE, cmd_gc,
     "gc [--max-bytes N] [--stale] [--json]", "evict least recently used and stale entries",
     "Remove least recently used entries until the cache file is at most N bytes\n"
     "(suffixes K, M, G are powers of 1024; 0: no limit; default: FI_CACHE_MAX_BYTES,\n"
     "else 2G). --stale: also remove entries no runtime here would load (another\n"
     "compiler version, template set or kernel ABI).\n"},
    {"verify", O_REPAIR | O_JSON, P_NONE, cmd_verify,
     "verify [--repair] [--json]", "check the file's integrity and every binary's checksum",
     "Check the database's integrity and every stored binary's checksum. --repair:\n"
     "drop bad entries (rebuild the file if it is damaged), then check again.\n"
     "Exit status 0 if the cache is sound (after --repair, if it mended everything),\n"
     "1 if not.\n"},
    {"clear", O_ARCH | O_OP, P_NONE, cmd_clear,
     "clear [--op OP] [--arch ARCH]", "delete entries from the user cache",
     "Delete matching entries (all if no filter; --op and --arch take comma lists).\n"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void print_usage(FILE *f, const command *only) {
  if (only) {
    fprintf(f, "usage: %s [--cache PATH] %s\n\n%s", prog, only->synopsis, only->about);
    return;
  }
  fprintf(f, "usage: %s [--cache PATH] COMMAND [OPTIONS]\n       %s --version\n\n"
             "Manage fi_runtime's kernel cache. --cache PATH overrides the default\n"
             "($FI_CACHE_PATH, else $XDG_CACHE_HOME/fi_runtime/kernels.db, else\n"
             "~/.cache/fi_runtime/kernels.db).\n\n"
             "commands (%s COMMAND --help for the options of each):\n", prog, prog, prog);
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\nenvironment:\n"
             "  FI_CACHE_PATH         the user cache file (see above)\n"
             "  FI_CACHE_SYSTEM_PATH  a read-only cache searched first, e.g. made by export --to;\n"
             "                        refused if anyone but root or its owner may write it\n"
             "  FI_CACHE_MAX_BYTES    cap of the user cache file, e.g. 500M (default 2G, 0: none);\n"
             "                        also gc's default\n"
             "  FI_CACHE_UMASK        octal umask for a cache shared on purpose (e.g. 007); group\n"
             "                        write is then accepted\n"
             "  FI_CACHE_JOURNAL      wal or delete (rollback journal, no -wal/-shm); default wal,\n"
             "                        delete on network filesystems\n"
             "  FI_LOG_LEVEL          off, error, warn (default), info or debug\n"
             "\nexit status: 0 success, 1 failure, 2 bad usage.\n");
}

/* Splits a comma list into dst (pointers into the caller's argv string). */
static int add_list(const char **dst, int *n, char *s, const char *what) {
  for (char *save = NULL, *t = strtok_r(s, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int dup = 0;
    for (int i = 0; i < *n; i++) dup |= strcmp(dst[i], t) == 0;
    if (dup) continue;
    if (*n == MAX_LIST) return usage_error("too many values of %s (at most %d)", what, MAX_LIST);
    dst[(*n)++] = t;
  }
  return 0;
}

/* Option value: "--opt VALUE", "--opt=VALUE", or "-jN" / "-oFILE" for short ones. */
static const char *opt_value(int argc, char **argv, int *i, const char *lng, const char *shrt,
                             int *matched) {
  const char *arg = argv[*i];
  size_t ll = strlen(lng);
  *matched = 1;
  if (strcmp(arg, lng) == 0 || (shrt && strcmp(arg, shrt) == 0)) {
    if (*i + 1 >= argc) return NULL;
    return argv[++*i];
  }
  if (strncmp(arg, lng, ll) == 0 && arg[ll] == '=') return arg + ll + 1;
  if (shrt && strncmp(arg, shrt, 2) == 0 && arg[2]) return arg + 2;
  *matched = 0;
  return NULL;
}

/* "200K", "500M", "2G", "1048576": bytes (K, M, G are powers of 1024; a
 * trailing B or iB is allowed); -1 if malformed or too large. */
static int64_t parse_size(const char *v) {
  if (!v || *v < '0' || *v > '9') return -1;
  char *end = NULL;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno) return -1;
  int shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
  }
  if (shift && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end || n > ((unsigned long long)INT64_MAX >> shift)) return -1;
  return (int64_t)(n << shift);
}

static int parse(int argc, char **argv, args *a, const command **cmd) {
  for (int i = 1; i < argc; i++) {
    char *arg = argv[i];
    unsigned allowed = *cmd ? (*cmd)->opts : 0;
    int m = 0;
    const char *v;
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      a->help = 1;
      continue;
    }
    if ((v = opt_value(argc, argv, &i, "--cache", NULL, &m)), m) {
      if (!v || !v[0]) return usage_error("--cache needs a PATH");
      a->cache = v;
      continue;
    }
    if ((allowed & O_ARCH) && ((v = opt_value(argc, argv, &i, "--arch", NULL, &m)), m)) {
      int rc = v && v[strspn(v, ",")] ? add_list(a->archs, &a->narch, (char *)v, "--arch")
                                       : usage_error("--arch needs a value");
      if (rc) return rc;
      continue;
    }
    if ((allowed & O_OP) && ((v = opt_value(argc, argv, &i, "--op", NULL, &m)), m)) {
      int rc = v && v[strspn(v, ",")] ? add_list(a->ops, &a->nop, (char *)v, "--op")
                                       : usage_error("--op needs a value");
      if (rc) return rc;
      continue;
    }
    if ((allowed & O_JOBS) && ((v = opt_value(argc, argv, &i, "--jobs", "-j", &m)), m)) {
      char *end = NULL;
      errno = 0;
      long n = v ? strtol(v, &end, 10) : 0;
      if (!v || !*v || *end || errno || n < 1 || n > 1024)
        return usage_error("-j needs a number of threads from 1 to 1024, not '%s'", v ? v : "");
      a->jobs = (int)n;
      continue;
    }
    if ((allowed & O_OUT) && ((v = opt_value(argc, argv, &i, "--output", "-o", &m)), m)) {
      if (!v || !v[0]) return usage_error("-o needs a FILE");
      a->out = v;
      continue;
    }
    if ((allowed & O_TO) && ((v = opt_value(argc, argv, &i, "--to", NULL, &m)), m)) {
      if (!v || !v[0]) return usage_error("--to needs a FILE");
      a->to = v;
      continue;
    }
    if ((allowed & O_MAX_BYTES) && ((v = opt_value(argc, argv, &i, "--max-bytes", NULL, &m)), m)) {
      if ((a->max_bytes = parse_size(v)) < 0)
        return usage_error("--max-bytes needs a size like 200K, 500M or 2G, not '%s'", v ? v : "");
      continue;
    }
    if ((allowed & O_STALE) && strcmp(arg, "--stale") == 0) {
      a->stale = 1;
      continue;
    }
    if ((allowed & O_REPAIR) && strcmp(arg, "--repair") == 0) {
      a->repair = 1;
      continue;
    }
    if ((allowed & O_JSON) && strcmp(arg, "--json") == 0) {
      a->json = 1;
      continue;
    }
    if ((allowed & O_SOURCE) && strcmp(arg, "--source") == 0) {
      a->source = 1;
      continue;
    }
    if (!*cmd && strcmp(arg, "--version") == 0) {
      printf("%s %s (libfi_runtime %s)\n", prog, FI_VERSION_STRING, fi_version());
      exit(0);
    }
    if (arg[0] == '-' && arg[1]) {
      if (*cmd) return usage_error("%s: unknown option '%s'", (*cmd)->name, arg);
      return usage_error("unknown option '%s'", arg);
    }
    if (!*cmd) {
      for (size_t k = 0; k < NCOMMANDS; k++)
        if (strcmp(arg, commands[k].name) == 0) *cmd = &commands[k];
      if (!*cmd && strcmp(arg, "help") == 0) { /* "help [COMMAND]" */
        a->help = 1;
        if (i + 1 < argc) {
          for (size_t k = 0; k < NCOMMANDS; k++)
            if (strcmp(argv[i + 1], commands[k].name) == 0) *cmd = &commands[k];
          if (!*cmd) return usage_error("help: unknown command '%s'", argv[i + 1]);
        }
        return 0;
      }
      if (!*cmd) return usage_error("unknown command '%s'", arg);
      continue;
    }
    if ((*cmd)->positional == P_HASH && !a->prefix) {
      a->prefix = arg;
      continue;
    }
    if ((*cmd)->positional == P_FILE && !a->file) {
      a->file = arg;
      continue;
    }
    return usage_error("%s: unexpected argument '%s'", (*cmd)->name, arg);
  }
  return 0;
}

/* A reason the runtime refuses p (the cache file, or a directory above it):
 * something others could write. 1 if one was found, written into why. */
static int refused_because(const char *p, int is_file, char *why, size_t n) {
  struct stat st;
  if (stat(p, &st) != 0) return 0;
  const char *um = getenv("FI_CACHE_UMASK");
  int group_ok = um && um[0]; /* a cache shared on purpose may be group-writable */
  unsigned mode = (unsigned)(st.st_mode & 07777);
  const char *what = is_file ? "the file" : p;
  if (is_file && !S_ISREG(st.st_mode))
    snprintf(why, n, "it is not a regular file");
  else if (!is_file && !S_ISDIR(st.st_mode))
    snprintf(why, n, "%s is not a directory", p);
  else if (st.st_mode & S_IWOTH)
    snprintf(why, n, "%s is writable by every user (mode %04o), so others could plant code in it",
             what, mode);
  else if ((st.st_mode & S_IWGRP) && !group_ok)
    snprintf(why, n, "%s is group-writable (mode %04o) and FI_CACHE_UMASK does not say the cache "
                     "is shared", what, mode);
  else if (st.st_uid != geteuid() && !(!is_file && st.st_uid == 0))
    snprintf(why, n, "%s belongs to uid %u, not to this user", what, (unsigned)st.st_uid);
  else if (access(p, is_file ? R_OK | W_OK : W_OK | X_OK) != 0)
    snprintf(why, n, "%s: %s", what, strerror(errno));
  else
    return 0;
  return 1;
}

/* Why the runtime fell back to memory: fi_admin_stats says only that it
 * did, and its own warning on stderr may be silenced (FI_LOG_LEVEL). */
static void explain_unusable(const char *path, char *why, size_t n) {
  if (refused_because(path, 1, why, n)) return;
  char p[4096];
  snprintf(p, sizeof p, "%s", path);
  for (int level = 0; level < 256; level++) { /* the nearest existing directory above */
    char *slash = strrchr(p, '/');
    if (!slash) snprintf(p, sizeof p, ".");
    else if (slash == p) p[1] = 0;
    else *slash = 0;
    struct stat st;
    if (stat(p, &st) == 0) {
      if (refused_because(p, 0, why, n)) return;
      break;
    }
    if (strcmp(p, ".") == 0 || strcmp(p, "/") == 0) break;
  }
  snprintf(why, n, "see the runtime's warning above (FI_LOG_LEVEL=warn shows it)");
}

int main(int argc, char **argv) {
  args a;
  memset(&a, 0, sizeof a);
  a.max_bytes = -1;
  const command *cmd = NULL;
  int rc = parse(argc, argv, &a, &cmd);
  if (rc) return rc;
  if (a.help) {
    print_usage(stdout, cmd);
    return 0;
  }
  if (!cmd) {
    print_usage(stderr, NULL);
    return EXIT_USAGE;
  }
  /* Validate everything before opening the cache: bad usage changes nothing. */
  if (a.to) { /* export --to FILE: a cache file, not one binary */
    if (a.prefix) return usage_error("export: --to FILE takes no HASH_PREFIX (-o FILE writes one binary)");
    if (a.out) return usage_error("export: -o and --to do not go together");
    if (a.nop > 1 || a.narch > 1) return usage_error("export --to: at most one --op and one --arch");
  } else if (cmd->positional == P_HASH) {
    if (!a.prefix) return usage_error("%s: missing HASH_PREFIX", cmd->name);
    size_t n = strlen(a.prefix);
    if (n < 1 || n > 32 || strspn(a.prefix, "0123456789abcdefABCDEF") != n)
      return usage_error("%s: '%s' is not a hash prefix (1 to 32 hex digits)", cmd->name,
                         a.prefix);
    if (cmd->opts & O_OUT && !a.out) return usage_error("%s: missing -o FILE (or --to FILE)", cmd->name);
    if (a.nop || a.narch) return usage_error("%s: --op and --arch go with --to FILE", cmd->name);
  }
  if (cmd->positional == P_FILE) {
    if (!a.file) return usage_error("%s: missing FILE", cmd->name);
    struct stat fst;
    int serr = stat(a.file, &fst) != 0 ? errno : 0;
    if (serr || !S_ISREG(fst.st_mode)) { /* said before the cache is touched */
      fprintf(stderr, "%s: %s: %s: %s\n", prog, cmd->name, a.file,
              serr ? strerror(serr) : "not a regular file");
      return 1;
    }
  }
  if (cmd->run == cmd_prewarm) {
    if (!a.narch) return usage_error("prewarm: missing --arch ARCH[,ARCH...]");
    for (int i = 0; i < a.narch; i++)
      if (!fi_admin_arch_supported(a.archs[i]))
        return usage_error("prewarm: unknown arch '%s' (sm_75 ... sm_120, sm_90a, gfx90a, gfx942, ...)",
                           a.archs[i]);
    for (int i = 0; i < a.nop; i++)
      if (fi_admin_config_count(a.ops[i]) < 0) {
        fprintf(stderr, "%s: prewarm: unknown op '%s'; registered ops:", prog, a.ops[i]);
        for (int k = 0; k < fi_admin_op_count(); k++) fprintf(stderr, " %s", fi_admin_op_name(k));
        fputc('\n', stderr);
        return EXIT_USAGE;
      }
  }
  fi_options o;
  fi_options_init(&o);
  o.cache_path = a.cache;
  fi_runtime *rt = NULL;
  fi_status st = fi_runtime_create(&o, &rt);
  if (st != FI_OK) return fail("creating the runtime", st);
  /* The library falls back to an in-memory store when the file cannot be
   * opened; for a tool whose whole job is that file, that is an error. */
  fi_admin_stats s;
  st = fi_admin_stats_get(rt, &s);
  if (st != FI_OK) {
    rc = fail("opening the cache", st);
  } else if (s.fallback) {
    char why[1024];
    explain_unusable(s.path, why, sizeof why);
    fprintf(stderr, "%s: the cache file %s cannot be used (the runtime would keep kernels in "
                    "memory only): %s\n", prog, s.path, why);
    rc = 1;
  } else {
    rc = cmd->run(rt, &a);
  }
  fi_runtime_destroy(rt);
  if (fflush(stdout) != 0 && !rc) {
    fprintf(stderr, "%s: writing stdout: %s\n", prog, strerror(errno));
    rc = 1;
  }
  return rc;
}
