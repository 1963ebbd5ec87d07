/* fi_cache_prewarm.c: `fi-cache prewarm`: every registered configuration of the
 * chosen ops and arches compiled by a pool of threads, with progress and a summary. */
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
  atomic_int compiled, cached, waited, failed, skipped;
  pthread_mutex_t out_mu; /* one writer at a time on stderr: bar and failures */
  int tty;
  double t0;
  char last_err[4096];    /* to collapse a failure repeated for every config */
} prewarm_ctx;

/* "ETA 12s" from the pace so far (the first configurations compile on every thread at
 * once, so the pace settles after a few). */
static void eta(const prewarm_ctx *c, size_t done, char *buf, size_t n) {
  const double el = now_s() - c->t0;
  if (done == 0 || done >= c->njobs) {
    snprintf(buf, n, "%s", done ? "" : "ETA ?");
    return;
  }
  snprintf(buf, n, "ETA %.0fs", el / (double)done * (double)(c->njobs - done));
}

/* On a terminal a bar redrawn in place; otherwise (make run, a log) a plain line. */
static void draw_bar(prewarm_ctx *c) {
  size_t done = atomic_load(&c->done), w = 30, fill = c->njobs ? done * w / c->njobs : w;
  char bar[64], e[32];
  for (size_t i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
  bar[w] = 0;
  eta(c, done, e, sizeof e);
  if (c->tty)
    fprintf(stderr, "\r[%s] %zu/%zu compiled %d cached %d failed %d  %.1fs %s\033[K", bar, done,
            c->njobs, atomic_load(&c->compiled), atomic_load(&c->cached) + atomic_load(&c->waited),
            atomic_load(&c->failed), now_s() - c->t0, e);
  else
    fprintf(stderr, "%s: prewarm: %zu/%zu done (compiled %d, cached %d, failed %d) in %.0fs %s\n", prog,
            done, c->njobs, atomic_load(&c->compiled), atomic_load(&c->cached) + atomic_load(&c->waited),
            atomic_load(&c->failed), now_s() - c->t0, e);
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
      char text[4096];
      snprintf(text, sizeof text, "%.*s", len, p);
      fputs("    ", stderr);
      text_safe_lines(stderr, text);
      fputc('\n', stderr);
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
    } else if (res == FI_PREWARM_SKIPPED) {
      atomic_fetch_add(&c->skipped, 1);
    } else {
      atomic_fetch_add(&c->compiled, 1);
    }
    atomic_fetch_add(&c->done, 1);
  }
  return NULL;
}

/* Appends (op, idx, arch) unless it is there already (a preset and --op may overlap). */
static int add_job(prewarm_ctx *c, size_t *cap, const char *op, int idx, const char *arch) {
  for (size_t i = 0; i < c->njobs; i++)
    if (c->jobs[i].idx == idx && strcmp(c->jobs[i].op, op) == 0 && strcmp(c->jobs[i].arch, arch) == 0) return 0;
  if (c->njobs == *cap) {
    size_t n = *cap ? 2 * *cap : 256;
    job *p = realloc(c->jobs, n * sizeof *p);
    if (!p) return -1;
    c->jobs = p, *cap = n;
  }
  c->jobs[c->njobs++] = (job){op, arch, idx};
  return 0;
}

/* The jobs, arch-major: the first configurations of every arch do not wait behind the
 * last ones of another, and each compiler is loaded early. */
static int make_jobs(prewarm_ctx *c, const args *a) {
  size_t cap = 0;
  for (int r = 0; r < a->narch; r++) {
    for (int p = 0; p < a->npreset; p++) {
      int n = 0;
      fi_status st = fi_admin_preset_configs(a->presets[p], a->archs[r], NULL, 0, &n);
      fi_preset_config *pc = st == FI_OK ? calloc(n ? (size_t)n : 1, sizeof *pc) : NULL;
      if (st == FI_OK && !pc) return -1;
      if (st == FI_OK) st = fi_admin_preset_configs(a->presets[p], a->archs[r], pc, n, &n);
      if (st != FI_OK) {
        fprintf(stderr, "%s: prewarm: preset %s on %s: %s\n", prog, a->presets[p], a->archs[r], fi_last_error());
        free(pc);
        return -2;
      }
      for (int i = 0; i < n; i++)
        if (add_job(c, &cap, pc[i].op, pc[i].idx, a->archs[r])) return -1;
      free(pc);
    }
    const int nop = a->all ? fi_admin_op_count() : a->nop;
    for (int i = 0; i < nop; i++) {
      const char *op = a->all ? fi_admin_op_name(i) : a->ops[i];
      for (int x = 0, n = fi_admin_config_count(op); x < n; x++)
        if (add_job(c, &cap, op, x, a->archs[r])) return -1;
    }
  }
  return 0;
}

int cmd_prewarm(fi_runtime *rt, const args *a) {
  prewarm_ctx c;
  memset(&c, 0, sizeof c);
  c.rt = rt;
  int mj = make_jobs(&c, a);
  if (mj) {
    if (mj == -1) fprintf(stderr, "%s: out of memory\n", prog);
    free(c.jobs);
    return 1;
  }
  const size_t njobs = c.njobs;
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
  /* The main thread only draws the progress; workers draw on failures. Off a terminal
   * a line every 5 s, and none for work done in less. */
  for (int tick = 0; atomic_load(&c.done) < njobs; tick++) {
    if (c.tty || (tick > 0 && tick % 50 == 0)) {
      pthread_mutex_lock(&c.out_mu);
      draw_bar(&c);
      pthread_mutex_unlock(&c.out_mu);
    }
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  double secs = now_s() - c.t0;
  if (c.tty) {
    draw_bar(&c);
    fputc('\n', stderr);
  }
  int comp = atomic_load(&c.compiled), cach = atomic_load(&c.cached);
  int wait = atomic_load(&c.waited), bad = atomic_load(&c.failed), skip = atomic_load(&c.skipped);
  if (a->json)
    printf("{\"compiled\":%d,\"cached\":%d,\"waited\":%d,\"failed\":%d,\"skipped\":%d,\"seconds\":%.3f}\n",
           comp, cach, wait, bad, skip, secs);
  else if (skip)
    printf("compiled %d, cached %d, waited %d, failed %d, skipped %d (no kernel for the arch) in %.1f s\n",
           comp, cach, wait, bad, skip, secs);
  else
    printf("compiled %d, cached %d, waited %d, failed %d in %.1f s\n", comp, cach, wait, bad, secs);
  free(th);
  free(c.jobs);
  pthread_mutex_destroy(&c.out_mu);
  return bad ? 1 : 0;
}
