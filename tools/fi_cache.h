/* fi_cache.h: what the files of fi-cache share: the parsed command line, the
 * command table's entry type, output helpers and the commands themselves. */
#pragma once
#include <stdint.h>
#include <stdio.h>

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
  O_MAX_BYTES = 64, O_STALE = 128, O_REPAIR = 256, O_TO = 512, O_PRESET = 1024, O_ALL = 2048,
  O_TACTICS = 4096, O_SHAPE = 8192, O_TOKENS = 16384, O_DEVICE = 32768, O_REPEATS = 65536, O_FORCE = 131072
};

/* What a command's positional argument is. */
enum { P_NONE = 0, P_HASH = 1, P_FILE = 2 };

typedef struct args {
  const char *cache;
  const char *archs[MAX_LIST], *ops[MAX_LIST], *presets[MAX_LIST];
  int narch, nop, npreset, all, jobs, json, source, help, stale, repair, tactics;
  int64_t max_bytes; /* gc --max-bytes; -1: the runtime's cap */
  const char *out, *prefix, *to, *file;
  const char *shapes[MAX_LIST]; /* tune --shape */
  int nshape, ntokens, device, repeats, force;
  int64_t tokens[MAX_LIST]; /* tune --tokens */
} args;

typedef struct command {
  const char *name;
  unsigned opts;
  int positional; /* P_NONE, P_HASH (HASH_PREFIX) or P_FILE */
  int (*run)(fi_runtime *rt, const args *a);
  const char *synopsis, *summary, *about;
} command;

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

extern const char *prog;

int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int fail(const char *what, fi_status st);
double now_s(void);
void json_str(FILE *f, const char *s);
/* s for a terminal: every byte that is not printable ASCII (control
 * characters, escape sequences, bytes above 0x7e) as \xHH, and a backslash
 * doubled, so that a row's text can neither move the cursor nor fake lines
 * and reads back unambiguously. Writes into buf (truncating) and returns it. */
const char *text_safe(const char *s, char *buf, size_t n);
void text_safe_lines(FILE *f, const char *s);
#define TEXT_SAFE(s) text_safe((s), (char[1024]){0}, 1024)
double json_num(double v); /* JSON has no NaN or Infinity: 0 instead */
void local_time(int64_t t, char *buf, size_t n);
/* Copies the entries of every (op, arch) filter combination out of the store. */
int collect(fi_runtime *rt, const args *a, entries *l);
void entries_free(entries *l);

int cmd_prewarm(fi_runtime *rt, const args *a);
int cmd_ls(fi_runtime *rt, const args *a);
int cmd_show(fi_runtime *rt, const args *a);
int cmd_stats(fi_runtime *rt, const args *a);
int cmd_export(fi_runtime *rt, const args *a);
int cmd_import(fi_runtime *rt, const args *a);
int cmd_gc(fi_runtime *rt, const args *a);
int cmd_verify(fi_runtime *rt, const args *a);
int cmd_clear(fi_runtime *rt, const args *a);

/* fi_cache_tactics.c: the stored tactics' side of ls, show and clear (--tactics). */
int cmd_ls_tactics(fi_runtime *rt, const args *a);
/* show of a tactic: 0, 1 on failure; not_found (may be NULL) set when no tactic matched. */
int show_tactic(fi_runtime *rt, const char *prefix, int *not_found);
int cmd_clear_tactics(fi_runtime *rt, const args *a);
int cmd_tune(fi_runtime *rt, const args *a);
/* tune's arguments checked (and --preset list answered) before the cache is opened: the
 * exit status, or -1 to go on. */
int tune_usage(const args *a);
/* The stored tactics of each layer: n[0] the user cache's, n[1] the system layer's. */
int count_tactics(fi_runtime *rt, int64_t n[2]);
/* The report's detail, one problem a line, as text (indented) or a JSON array. */
void print_detail(const char *d, int json);
