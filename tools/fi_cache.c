/* fi_cache.c: fi-cache, the command-line client of fi_runtime's kernel cache: the
 * command table, option parsing, --help and main; the commands are in fi_cache_*.c. */
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

/* ---- command line ---- */

static const command commands[] = {
    {"prewarm", O_ARCH | O_OP | O_JOBS | O_JSON | O_PRESET | O_ALL, P_NONE, cmd_prewarm,
     "prewarm --arch ARCH[,ARCH...] (--preset NAME | --op OP | --all)... [-j N] [--json]",
     "compile kernels ahead of time, skipping what is cached",
     "Compile kernels for each arch, skipping what is cached (in either layer):\n"
     "  --preset NAME  the kernels one serving step of a model needs (norms, RoPE, KV\n"
     "                 append, prefill, decode, SiLU-mul, sampling for its shapes);\n"
     "                 --preset list names the presets (llama3-8b, ...)\n"
     "  --op OP        every registered configuration of the op (a comma list too)\n"
     "  --all          every registered configuration of every op (about 1100 for\n"
     "                 sm_90: tens of minutes on a few cores; see README)\n"
     "An op whose kernels need another GPU is skipped and counted (the wgmma ops:\n"
     "sm_90 only, compiled as sm_90a). Progress and an ETA go to stderr (a bar on a\n"
     "terminal, a line every few seconds otherwise). -j: worker threads (default:\n"
     "online CPUs). --json: one summary object on the last line.\n"},
    {"tune", O_PRESET | O_OP | O_SHAPE | O_TOKENS | O_DEVICE | O_REPEATS | O_FORCE | O_JSON, P_NONE, cmd_tune,
     "tune (--preset NAME | --op OP --shape SHAPE)... [--tokens N,...] [--device N] [--repeats N] [--force] [--json]",
     "measure tactics on this GPU and store the fastest (the autotuner)",
     "Measure an op's tactics on this machine's GPU and store the fastest valid one in\n"
     "the user cache, where every later process's call of that shape and token bucket\n"
     "uses it (fi_autotune; README \"Tuning\"). Each tactic runs on the same random\n"
     "inputs, into its own output poisoned first; one whose output differs from the\n"
     "op's rule (bits, or bf16 1e-2 / f16 2e-3 of the largest value where the sum order\n"
     "differs; sampled tokens bit for bit) is stored as invalid and never used. The\n"
     "valid ones are timed with the L2 cache flushed before each run: median of\n"
     "--repeats runs (default 20). An op is refused while a tuning variable sets what\n"
     "its tactics choose (FI_PREFILL_QTILE, FI_DECODE_WARPS, ...): unset them.\n"
     "  --preset NAME  a model's tuned ops at its shapes: the expert GEMMs of a\n"
     "                 mixture-of-experts model, batch decode (CUDA-graph plans of\n"
     "                 up to 512 requests) and causal batch prefill where the\n"
     "                 attention is this library's, the sampler (top-k + top-p from\n"
     "                 logits, up to 512 rows) (--preset list)\n"
     "  --op OP --shape SHAPE  one op and shape; the ops and their shapes:\n"
     "                 moe_gemm: dtype=bf16|f16;k=K;n=N;experts=E;top_k=K;gated=0|1;\n"
     "                   gather=0|1;tile=64|128|256 (tokens: the layer's tokens)\n"
     "                 batch_decode: q=bf16|f16;kv=(q's);heads=H/K;head_dim=64|128|256;\n"
     "                   page=P;rope=0|1;len=L|graph (tokens: the batch's requests)\n"
     "                 batch_prefill: q=bf16|f16;heads=H/K;head_dim=64|128|256;\n"
     "                   causal=0|1;cap=0|1 (tokens: the longest request's query\n"
     "                   tokens; measured on clamp(16384/tokens, 1, 64) requests)\n"
     "                 sampling: op=sample|top_k|top_p|min_p|top_k_top_p_probs|\n"
     "                   top_k_top_p_logits;\n"
     "                   dtype=f32|bf16|f16;vocab=V (tokens: the batch's rows)\n"
     "  --tokens N,... token counts (each measured at its bucket's bound; default\n"
     "                 1,16,64,256,1024,4096,16384)\n"
     "  --device N     the CUDA device (default 0)\n"
     "  --force        measure again where the user cache has a row\n"
     "A line per tactic goes to stderr; stdout gets a line per shape and bucket (the\n"
     "winner, the rule, the speedup), or with --json one object each. Ship the\n"
     "results with export --to (the tactics go with the kernels). Exit status 1 if\n"
     "any measurement failed.\n"},
    {"ls", O_ARCH | O_OP | O_JSON | O_TACTICS, P_NONE, cmd_ls,
     "ls [--tactics] [--op OP] [--arch ARCH] [--json]", "list cache entries of both layers",
     "List cache entries, optionally filtered (--op and --arch take comma lists):\n"
     "the system layer (FI_CACHE_SYSTEM_PATH, read-only) first, then the user cache.\n"
     "An arch also matches its specific variant (sm_90: the sm_90a wgmma kernels).\n"
     "--tactics: the stored tactics instead (the autotuner's results): for each op,\n"
     "shape and token bucket measured on a device (arch, name, SMs, driver), the\n"
     "fastest valid tactic, its time, the default's time, how often measured, and its\n"
     "state: ok, invalid (every tactic measured was found wrong: the op's rule is\n"
     "used) or BAD (fails its checksum or is not bound to its key: never used).\n"},
    {"show", O_SOURCE | O_TACTICS, P_HASH, cmd_show,
     "show HASH_PREFIX [--source] [--tactics]", "print one entry or tactic in full",
     "Print every field of one entry (and its source). A prefix that names no kernel\n"
     "is looked up among the stored tactics; --tactics looks only there.\n"},
    {"stats", O_JSON, P_NONE, cmd_stats,
     "stats [--json]", "totals of the cache file and counters of this process",
     "Cache path, totals, hits summed over entries, entries per layer and per\n"
     "op/arch, stored tactics per layer, and the runtime counters of this fi-cache\n"
     "process (memo_hits, cache_hits, compiles, compile_failures, compile_ms, waits,\n"
     "evictions, repairs; tactic lookups: hits found a stored tactic, misses found\n"
     "none and left the choice to the op's rule).\n"},
    {"export", O_OUT | O_TO | O_OP | O_ARCH, P_HASH, cmd_export,
     "export (HASH_PREFIX -o FILE | --to FILE [--op OP] [--arch ARCH])",
     "write one binary, or a cache file to ship as a system layer",
     "export HASH_PREFIX -o FILE\n"
     "  Write the entry's raw binary (cubin, hsaco) to FILE.\n"
     "export --to FILE [--op OP] [--arch ARCH]\n"
     "  Write the user cache's entries (those of OP and ARCH if given) to FILE, a\n"
     "  standalone cache file (mode 0644, rollback journal, no -wal/-shm) that\n"
     "  other machines use read-only as FI_CACHE_SYSTEM_PATH. FILE is replaced\n"
     "  atomically. The stored tactics (of OP and ARCH) go with the kernels.\n"},
    {"import", 0, P_FILE, cmd_import,
     "import FILE", "merge another cache file into the user cache",
     "Copy FILE's entries (checksums verified) into the user cache; entries the\n"
     "user cache already has are kept and counted as skipped. FILE's stored tactics\n"
     "are merged into the user cache's: for each key the fastest valid tactic of both\n"
     "is kept, and a tactic either found invalid stays invalid. A bad entry or tactic\n"
     "is refused and named; the exit status is then 1.\n"},
    {"gc", O_MAX_BYTES | O_STALE | O_JSON, P_NONE, cmd_gc,
     "gc [--max-bytes N] [--stale] [--json]", "evict least recently used and stale entries",
     "Remove least recently used entries until the cache file is at most N bytes\n"
     "(suffixes K, M, G are powers of 1024; 0: no limit; default: FI_CACHE_MAX_BYTES,\n"
     "else 2G). --stale: also remove entries no runtime here would load (another\n"
     "compiler version, template set or kernel ABI).\n"},
    {"verify", O_REPAIR | O_JSON, P_NONE, cmd_verify,
     "verify [--repair] [--json]", "check the file's integrity and every binary's checksum",
     "Check the database's integrity, every stored binary's checksum and every stored\n"
     "tactic's (and that each is bound to its key). --repair: drop bad entries and\n"
     "tactics (rebuild the file if it is damaged), then check again.\n"
     "Exit status 0 if the cache is sound (after --repair, if it mended everything),\n"
     "1 if not.\n"},
    {"clear", O_ARCH | O_OP | O_TACTICS, P_NONE, cmd_clear,
     "clear [--tactics] [--op OP] [--arch ARCH]", "delete entries from the user cache",
     "Delete matching entries (all if no filter; --op and --arch take comma lists;\n"
     "an arch also matches its specific variant: sm_90 clears sm_90a entries too).\n"
     "With no filter the whole cache is emptied, stored tactics included.\n"
     "--tactics: delete the matching stored tactics instead, and no kernel.\n"},
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
    if ((allowed & O_PRESET) && ((v = opt_value(argc, argv, &i, "--preset", NULL, &m)), m)) {
      int rc = v && v[strspn(v, ",")] ? add_list(a->presets, &a->npreset, (char *)v, "--preset")
                                       : usage_error("--preset needs a NAME (--preset list names them)");
      if (rc) return rc;
      continue;
    }
    if ((allowed & O_SHAPE) && ((v = opt_value(argc, argv, &i, "--shape", NULL, &m)), m)) {
      if (!v || !v[0]) return usage_error("--shape needs a value (fi-cache tune --help)");
      if (a->nshape == MAX_LIST) return usage_error("too many --shape (at most %d)", MAX_LIST);
      a->shapes[a->nshape++] = v;
      continue;
    }
    if ((allowed & O_TOKENS) && ((v = opt_value(argc, argv, &i, "--tokens", NULL, &m)), m)) {
      char *copy = v ? strdup(v) : NULL, *save = NULL;
      if (!v || !v[0] || !copy) return usage_error("--tokens needs counts, e.g. --tokens 1,64,4096");
      for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end = NULL;
        errno = 0;
        long long n = strtoll(t, &end, 10);
        if (*end || errno || n < 1 || n > (1 << 20)) {
          free(copy);
          return usage_error("--tokens: '%s' is not a count from 1 to 1048576", t);
        }
        if (a->ntokens == MAX_LIST) {
          free(copy);
          return usage_error("too many --tokens (at most %d)", MAX_LIST);
        }
        a->tokens[a->ntokens++] = n;
      }
      free(copy);
      continue;
    }
    if ((allowed & O_DEVICE) && ((v = opt_value(argc, argv, &i, "--device", NULL, &m)), m)) {
      char *end = NULL;
      long n = v ? strtol(v, &end, 10) : -1;
      if (!v || !*v || *end || n < 0 || n > 63) return usage_error("--device needs a CUDA device number, not '%s'", v ? v : "");
      a->device = (int)n;
      continue;
    }
    if ((allowed & O_REPEATS) && ((v = opt_value(argc, argv, &i, "--repeats", NULL, &m)), m)) {
      char *end = NULL;
      long n = v ? strtol(v, &end, 10) : -1;
      if (!v || !*v || *end || n < 1 || n > 10000) return usage_error("--repeats needs 1 to 10000, not '%s'", v ? v : "");
      a->repeats = (int)n;
      continue;
    }
    if ((allowed & O_FORCE) && strcmp(arg, "--force") == 0) {
      a->force = 1;
      continue;
    }
    if ((allowed & O_ALL) && strcmp(arg, "--all") == 0) {
      a->all = 1;
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
    if ((allowed & O_TACTICS) && strcmp(arg, "--tactics") == 0) {
      a->tactics = 1;
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
  if (a.tactics && a.source) return usage_error("show: --source is a kernel's; a tactic has none");
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
  if (cmd->run == cmd_tune) { /* said before the cache is touched */
    const int u = tune_usage(&a);
    if (u >= 0) return u;
  }
  if (cmd->run == cmd_prewarm) {
    for (int i = 0; i < a.npreset; i++)
      if (strcmp(a.presets[i], "list") == 0) {
        for (int k = 0; k < fi_admin_preset_count(); k++)
          printf("%-16s %s\n", fi_admin_preset_name(k), fi_admin_preset_about(k));
        return 0;
      }
    if (!a.narch) return usage_error("prewarm: missing --arch ARCH[,ARCH...]");
  }
  /* The commands that act on what they name refuse a name nothing could
   * match: a typo must not quietly do nothing (clear), compile nothing or
   * ship an empty file (export --to). ls only looks, and may look for rows
   * of ops this version no longer has. */
  if (cmd->run == cmd_prewarm || cmd->run == cmd_clear || cmd->run == cmd_export) {
    for (int i = 0; i < a.narch; i++)
      if (!fi_admin_arch_supported(a.archs[i]))
        return usage_error("%s: unknown arch '%s' (sm_XY from sm_70 on, e.g. sm_80, sm_90, sm_90a, "
                           "sm_120; gfx90a, gfx942, ...)",
                           cmd->name, a.archs[i]);
    if (cmd->run == cmd_prewarm) {
      if (!a.nop && !a.npreset && !a.all)
        return usage_error("prewarm: say what to compile: --preset NAME (--preset list), --op OP or --all");
      if (a.all && (a.nop || a.npreset)) return usage_error("prewarm: --all already takes every op");
      for (int i = 0; i < a.npreset; i++) {
        int known = 0;
        for (int k = 0; k < fi_admin_preset_count(); k++) known |= strcmp(a.presets[i], fi_admin_preset_name(k)) == 0;
        if (!known) {
          fprintf(stderr, "%s: prewarm: unknown preset '%s'; presets:", prog, a.presets[i]);
          for (int k = 0; k < fi_admin_preset_count(); k++) fprintf(stderr, " %s", fi_admin_preset_name(k));
          fputc('\n', stderr);
          return EXIT_USAGE;
        }
      }
    }
    for (int i = 0; i < a.nop; i++)
      if (fi_admin_config_count(a.ops[i]) < 0) {
        fprintf(stderr, "%s: %s: unknown op '%s'; registered ops:", prog, cmd->name, a.ops[i]);
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
  /* verify and clear are how a damaged file is mended: they run on a file
   * whose totals cannot be read; the other commands stop there. */
  int mends = cmd->run == cmd_verify || cmd->run == cmd_clear;
  if (s.fallback && (!s.path || !s.path[0])) {
    fprintf(stderr, "%s: no cache file: %s. Pass --cache PATH or set FI_CACHE_PATH\n", prog,
            s.fallback_reason && s.fallback_reason[0] ? s.fallback_reason : "no path is known");
    rc = 1;
  } else if (s.fallback) {
    char why[1024];
    explain_unusable(s.path, why, sizeof why);
    fprintf(stderr, "%s: the cache file %s cannot be used (the runtime would keep kernels in "
                    "memory only): %s\n", prog, s.path, why);
    rc = 1;
  } else if (st != FI_OK && !mends) {
    rc = fail("opening the cache", st);
    fprintf(stderr, "%s: '%s verify --repair' mends a damaged file; '%s clear' empties it\n",
            prog, prog, prog);
  } else {
    /* Once per arch, before any compile: an arch the loaded compiler cannot
     * target is one error naming its range, not one failure per kernel. A
     * compiler that cannot be loaded is left to the compiles (what is cached
     * needs none). */
    for (int i = 0; cmd->run == cmd_prewarm && i < a.narch && !rc; i++)
      if (fi_admin_arch_check(rt, a.archs[i]) == FI_ERR_UNSUPPORTED) {
        fprintf(stderr, "%s: prewarm: %s\n", prog, fi_last_error());
        rc = 1;
      }
    if (!rc) rc = cmd->run(rt, &a);
  }
  fi_runtime_destroy(rt);
  if (fflush(stdout) != 0 && !rc) {
    fprintf(stderr, "%s: writing stdout: %s\n", prog, strerror(errno));
    rc = 1;
  }
  return rc;
}
