/* fi_cache_cmds.c: the inspecting and maintaining commands of fi-cache: ls, show,
 * stats, export, import, gc, verify and clear. */
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

/* ---- ls, show, stats, export, clear ---- */

int cmd_ls(fi_runtime *rt, const args *a) {
  if (a->tactics) return cmd_ls_tactics(rt, a);
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
      if ((n = (int)strlen(TEXT_SAFE(l.v[i].op))) > wop) wop = n;
      if ((n = (int)strlen(TEXT_SAFE(l.v[i].arch))) > warch) warch = n;
      if ((n = (int)strlen(TEXT_SAFE(l.v[i].compiler))) > wcc) wcc = n;
    }
    printf("%-12s  %-6s  %-*s  %-*s  %-*s  %10s  %6s  %-19s  %s\n", "hash", "layer", wop, "op",
           warch, "arch", wcc, "compiler", "bytes", "hits", "last used", "key");
    for (size_t i = 0; i < l.n; i++) {
      const entry *e = &l.v[i];
      char when[32];
      local_time(e->last_used, when, sizeof when);
      /* Text from the file goes to a terminal escaped, as JSON escapes it. */
      printf("%.12s  %-6s  %-*s  %-*s  %-*s  %10" PRId64 "  %6" PRId64 "  %-19s  %s\n", e->hash,
             e->layer, wop, TEXT_SAFE(e->op), warch, TEXT_SAFE(e->arch), wcc,
             TEXT_SAFE(e->compiler), e->bytes, e->hits, when, TEXT_SAFE(e->key));
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
         TEXT_SAFE(e->op), TEXT_SAFE(e->key), TEXT_SAFE(e->arch), TEXT_SAFE(e->compiler),
         TEXT_SAFE(e->entry), TEXT_SAFE(e->layer));
  printf("bytes: %" PRId64 "\ncreated: %" PRId64 " (%s)\nlast_used: %" PRId64
         " (%s)\nhits: %" PRId64 "\ncompile_ms: %.3f\n",
         e->bytes, e->created, created, e->last_used, used, e->hits, e->compile_ms);
  return 0;
}

int cmd_show(fi_runtime *rt, const args *a) {
  if (a->tactics) return show_tactic(rt, a->prefix, NULL);
  char *src = NULL;
  fi_status st = fi_admin_get(rt, a->prefix, show_cb, NULL, NULL, NULL, a->source ? &src : NULL);
  if (st == FI_ERR_INVALID_ARGUMENT && strstr(fi_last_error(), "no entry starts with")) {
    /* No kernel: a tactic's hash, perhaps. */
    int not_found = 0, rc = show_tactic(rt, a->prefix, &not_found);
    if (!not_found) return rc;
    fprintf(stderr, "%s: show: no entry or tactic starts with '%s'\n", prog, TEXT_SAFE(a->prefix));
    return 1;
  }
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

int cmd_stats(fi_runtime *rt, const args *a) {
  fi_admin_stats s;
  fi_status st = fi_admin_stats_get(rt, &s);
  if (st != FI_OK) return fail("stats", st);
  entries l;
  int rc = collect(rt, a, &l);
  group *g = calloc(l.n ? l.n : 1, sizeof *g);
  size_t ng = 0;
  int64_t hits = 0, n_user = 0, n_system = 0, t_layers[2] = {0, 0}; /* tactics: user, system */
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
  if (!rc) rc = count_tactics(rt, t_layers);
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
    /* This process's tactic lookups apart from "process", whose keys are fi_stats's. */
    printf(",\"tactics\":{\"user\":%" PRId64 ",\"system\":%" PRId64 "}"
           ",\"tactic_lookups\":{\"hits\":%" PRId64 ",\"misses\":%" PRId64 "}",
           t_layers[0], t_layers[1], s.tactic_hits, s.tactic_misses);
    printf(",\"process\":{\"memo_hits\":%" PRId64 ",\"cache_hits\":%" PRId64
           ",\"compiles\":%" PRId64 ",\"compile_failures\":%" PRId64
           ",\"compile_ms\":%.3f,\"waits\":%" PRId64 ",\"evictions\":%" PRId64
           ",\"repairs\":%" PRId64 "}}\n",
           ps.memo_hits, ps.cache_hits, ps.compiles, ps.compile_failures,
           json_num(ps.compile_ms), ps.waits, ps.evictions, ps.repairs);
  } else if (!rc) {
    printf("path: %s\nentries: %" PRId64 "\nbytes: %" PRId64 "\nfile_bytes: %" PRId64 "\n",
           TEXT_SAFE(s.path), s.entries, s.bytes, s.file_bytes);
    if (sys) printf("system_path: %s\n", TEXT_SAFE(sys));
    printf("hits: %" PRId64 "\nlayers: user %" PRId64 ", system %" PRId64 "\n", hits, n_user,
           n_system);
    for (size_t k = 0; k < ng; k++)
      printf("  %-6s %-20s %-10s %6" PRId64 " entries %10" PRId64 " bytes\n", g[k].layer,
             TEXT_SAFE(g[k].op), TEXT_SAFE(g[k].arch), g[k].entries, g[k].bytes);
    printf("tactics: user %" PRId64 ", system %" PRId64 "\n", t_layers[0], t_layers[1]);
    printf("this process: memo_hits %" PRId64 ", cache_hits %" PRId64 ", compiles %" PRId64
           ", compile_failures %" PRId64 ", compile_ms %.1f, waits %" PRId64
           ", evictions %" PRId64 ", repairs %" PRId64 ", tactic_hits %" PRId64
           ", tactic_misses %" PRId64 "\n",
           ps.memo_hits, ps.cache_hits, ps.compiles, ps.compile_failures,
           json_num(ps.compile_ms), ps.waits, ps.evictions, ps.repairs, s.tactic_hits,
           s.tactic_misses);
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
  /* Write beside the target and rename: a reader never sees half a binary.
   * The temporary is created exclusively and never through a link: whoever
   * else can write that directory could have put one there, to make this
   * process write wherever it points. rename() replaces a link at FILE
   * itself, never its target. */
  size_t plen = strlen(a->out) + 32;
  char *tmp = malloc(plen);
  int fd = -1, rc = 1, created = 0;
  if (!tmp) goto done;
  snprintf(tmp, plen, "%s.tmp-%ld", a->out, (long)getpid());
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "%s: export: %s: %s\n", prog, tmp,
            errno == EEXIST ? "exists already (remove it if it is a leftover)" : strerror(errno));
    goto done;
  }
  created = 1;
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
  if (rc && created) unlink(tmp);
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
  int64_t n = 0, t = 0;
  fi_status st = fi_admin_export(rt, a->to, a->nop ? a->ops[0] : NULL,
                                 a->narch ? a->archs[0] : NULL, &n, &t);
  if (st != FI_OK) return fail("export", st);
  printf("exported %" PRId64 " entries to %s\n", n, a->to);
  printf("exported %" PRId64 " tactics\n", t);
  return 0;
}

int cmd_export(fi_runtime *rt, const args *a) {
  return a->to ? export_cache(rt, a) : export_binary(rt, a);
}

int cmd_import(fi_runtime *rt, const args *a) {
  if (same_file(a->file, user_path(rt))) {
    fprintf(stderr, "%s: import: %s is the cache itself\n", prog, a->file);
    return 1;
  }
  fi_import_report r;
  fi_status st = fi_admin_import(rt, a->file, &r);
  if (st != FI_OK) return fail("import", st);
  printf("imported %" PRId64 ", skipped %" PRId64 "\n", r.copied, r.present + r.refused);
  if (r.refused || r.evicted)
    printf("  already present %" PRId64 ", refused %" PRId64 ", evicted afterwards %" PRId64
           " (FI_CACHE_MAX_BYTES)\n",
           r.present, r.refused, r.evicted);
  printf("tactics: imported %" PRId64 ", merged %" PRId64 ", present %" PRId64 ", refused %" PRId64
         "\n", r.tactics_copied, r.tactics_merged, r.tactics_present, r.tactics_refused);
  /* Each refused entry, and why: a damaged or mislabelled file is worth knowing about. */
  print_detail(r.detail, 0);
  return r.refused || r.tactics_refused ? 1 : 0;
}

int cmd_gc(fi_runtime *rt, const args *a) {
  int64_t evicted = 0, stale = 0;
  fi_status st = fi_admin_gc(rt, a->max_bytes, a->stale, &evicted, &stale);
  if (st != FI_OK) return fail("gc", st);
  if (a->json)
    printf("{\"evicted\":%" PRId64 ",\"stale\":%" PRId64 "}\n", evicted, stale);
  else
    printf("evicted %" PRId64 ", stale %" PRId64 "\n", evicted, stale);
  return 0;
}

void print_detail(const char *d, int json) {
  int first = 1;
  if (json) fputc('[', stdout);
  while (d && *d) {
    const char *nl = strchr(d, '\n');
    size_t len = nl ? (size_t)(nl - d) : strlen(d);
    if (len) {
      char line[1024];
      snprintf(line, sizeof line, "%.*s", (int)len, d);
      if (json) {
        if (!first) fputc(',', stdout);
        json_str(stdout, line);
      } else {
        printf("  %s\n", TEXT_SAFE(line));
      }
      first = 0;
    }
    d += len + (nl ? 1 : 0);
  }
  if (json) fputc(']', stdout);
}

int cmd_verify(fi_runtime *rt, const args *a) {
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
           ",\"repaired\":%" PRId64 ",\"repaired_on_open\":%" PRId64 ",\"tactic_rows\":%" PRId64
           ",\"tactic_bad_rows\":%" PRId64 ",\"detail\":",
           ok ? "true" : "false", r.integrity_ok ? "true" : "false", r.rows, r.bad_rows,
           r.repaired, on_open, r.tactic_rows, r.tactic_bad_rows);
    print_detail(r.detail, 1);
    if (rechecked)
      printf(",\"after_repair\":{\"integrity_ok\":%s,\"rows\":%" PRId64 ",\"bad_rows\":%" PRId64
             "}",
             after.integrity_ok ? "true" : "false", after.rows, after.bad_rows);
    fputs("}\n", stdout);
  } else {
    printf("integrity: %s\nrows: %" PRId64 "\nbad rows: %" PRId64 "\nrepaired: %" PRId64 "\n",
           r.integrity_ok ? "ok" : "FAILED", r.rows, r.bad_rows, r.repaired);
    if (r.tactic_rows)
      printf("of which tactics: %" PRId64 " rows, %" PRId64 " bad\n", r.tactic_rows,
             r.tactic_bad_rows);
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

int cmd_clear(fi_runtime *rt, const args *a) {
  if (a->tactics) return cmd_clear_tactics(rt, a);
  /* Emptying the whole cache takes its tactics too: said, since they cost GPU time. */
  fi_admin_stats before;
  int64_t tactics = !a->nop && !a->narch && fi_admin_stats_get(rt, &before) == FI_OK ? before.tactics : 0;
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
  if (tactics) printf("removed %" PRId64 " tactics\n", tactics);
  return 0;
}
