/* fi_cache.c: fi-cache, the command-line client of fi_runtime's kernel cache:
 * prewarm (parallel compile), ls, show, stats, export and clear, over fi_admin.h. */
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
enum { O_ARCH = 1, O_OP = 2, O_JOBS = 4, O_JSON = 8, O_SOURCE = 16, O_OUT = 32 };

typedef struct args {
  const char *cache;
  const char *archs[MAX_LIST], *ops[MAX_LIST];
  int narch, nop, jobs, json, source, help;
  const char *out, *prefix;
} args;

typedef struct command {
  const char *name;
  unsigned opts;
  int positional; /* 1: takes HASH_PREFIX */
  int (*run)(fi_runtime *rt, const args *a);
  const char *synopsis, *about;
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
    printf("%-12s  %-*s  %-*s  %-*s  %10s  %6s  %-19s  %s\n", "hash", wop, "op", warch, "arch",
           wcc, "compiler", "bytes", "hits", "last used", "key");
    for (size_t i = 0; i < l.n; i++) {
      const entry *e = &l.v[i];
      char when[32];
      local_time(e->last_used, when, sizeof when);
      printf("%.12s  %-*s  %-*s  %-*s  %10" PRId64 "  %6" PRId64 "  %-19s  %s\n", e->hash, wop,
             e->op, warch, e->arch, wcc, e->compiler, e->bytes, e->hits, when, e->key);
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
  const char *op, *arch;
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
  if (!rc && !g) {
    fprintf(stderr, "%s: out of memory\n", prog);
    rc = 1;
  }
  /* list is ordered by (op, key), not arch: group with a linear search, the
   * number of (op, arch) pairs is small. */
  for (size_t i = 0; !rc && i < l.n; i++) {
    size_t k = 0;
    while (k < ng && (strcmp(g[k].op, l.v[i].op) || strcmp(g[k].arch, l.v[i].arch))) k++;
    if (k == ng) g[ng++] = (group){l.v[i].op, l.v[i].arch, 0, 0};
    g[k].entries++;
    g[k].bytes += l.v[i].bytes;
  }
  if (!rc && a->json) {
    fputs("{\"path\":", stdout), json_str(stdout, s.path);
    printf(",\"entries\":%" PRId64 ",\"bytes\":%" PRId64 ",\"file_bytes\":%" PRId64
           ",\"by_op_arch\":[",
           s.entries, s.bytes, s.file_bytes);
    for (size_t k = 0; k < ng; k++) {
      fputs(k ? ",{\"op\":" : "{\"op\":", stdout), json_str(stdout, g[k].op);
      fputs(",\"arch\":", stdout), json_str(stdout, g[k].arch);
      printf(",\"entries\":%" PRId64 ",\"bytes\":%" PRId64 "}", g[k].entries, g[k].bytes);
    }
    fputs("]}\n", stdout);
  } else if (!rc) {
    printf("path: %s\nentries: %" PRId64 "\nbytes: %" PRId64 "\nfile_bytes: %" PRId64 "\n",
           s.path ? s.path : "", s.entries, s.bytes, s.file_bytes);
    for (size_t k = 0; k < ng; k++)
      printf("  %-20s %-10s %6" PRId64 " entries %10" PRId64 " bytes\n", g[k].op, g[k].arch,
             g[k].entries, g[k].bytes);
  }
  if (!rc && (int64_t)l.n != s.entries) /* another process wrote in between, most likely */
    fprintf(stderr, "%s: note: the listing found %zu entries, the totals %" PRId64 "\n", prog,
            l.n, s.entries);
  free(g);
  entries_free(&l);
  return rc;
}

static int cmd_export(fi_runtime *rt, const args *a) {
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
    {"prewarm", O_ARCH | O_OP | O_JOBS | O_JSON, 0, cmd_prewarm,
     "prewarm --arch ARCH[,ARCH...] [--op OP]... [-j N] [--json]",
     "Compile every registered configuration of the ops (all ops if none) for each\n"
     "arch, skipping what is cached. -j: worker threads (default: online CPUs).\n"},
    {"ls", O_ARCH | O_OP | O_JSON, 0, cmd_ls,
     "ls [--op OP] [--arch ARCH] [--json]", "List cache entries, optionally filtered (--op and --arch take comma lists).\n"},
    {"show", O_SOURCE, 1, cmd_show,
     "show HASH_PREFIX [--source]", "Print every field of one entry (and its source).\n"},
    {"stats", O_JSON, 0, cmd_stats,
     "stats [--json]", "Cache path, totals and per op/arch counts.\n"},
    {"export", O_OUT, 1, cmd_export,
     "export HASH_PREFIX -o FILE", "Write the entry's binary (cubin, hsaco) to FILE.\n"},
    {"clear", O_ARCH | O_OP, 0, cmd_clear,
     "clear [--op OP] [--arch ARCH]", "Delete matching entries (all if no filter; --op and --arch take comma lists).\n"},
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
             "~/.cache/fi_runtime/kernels.db).\n\ncommands:\n", prog, prog);
  for (size_t i = 0; i < NCOMMANDS; i++) fprintf(f, "  %s\n", commands[i].synopsis);
  fprintf(f, "\nexit status: 0 success, 1 failure, 2 bad usage.\n");
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
    if ((*cmd)->positional && !a->prefix) {
      a->prefix = arg;
      continue;
    }
    return usage_error("%s: unexpected argument '%s'", (*cmd)->name, arg);
  }
  return 0;
}

int main(int argc, char **argv) {
  args a;
  memset(&a, 0, sizeof a);
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
  if (cmd->positional) {
    if (!a.prefix) return usage_error("%s: missing HASH_PREFIX", cmd->name);
    size_t n = strlen(a.prefix);
    if (n < 1 || n > 32 || strspn(a.prefix, "0123456789abcdefABCDEF") != n)
      return usage_error("%s: '%s' is not a hash prefix (1 to 32 hex digits)", cmd->name,
                         a.prefix);
  }
  if (cmd->opts & O_OUT && !a.out) return usage_error("%s: missing -o FILE", cmd->name);
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
    fprintf(stderr, "%s: the cache file %s could not be opened or created\n", prog, s.path);
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
