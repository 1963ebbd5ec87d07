/* jit_hiprtc.c: the hiprtc backend (ROCm): dlopen'ed at first compile, code objects
 * out, and a guard on target names, since an unknown target aborts inside hiprtc 5.x. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit_compiler.h"
#include "jit_dl.h"
#include "jit_fault.h"
#include "jit_templates.h"

typedef int hiprtcResult;
typedef struct _hiprtcProgram *hiprtcProgram;

static struct {
  hiprtcResult (*hiprtcCreateProgram)(hiprtcProgram *, const char *, const char *, int,
                                      const char **, const char **);
  hiprtcResult (*hiprtcCompileProgram)(hiprtcProgram, int, const char **);
  hiprtcResult (*hiprtcGetProgramLogSize)(hiprtcProgram, size_t *);
  hiprtcResult (*hiprtcGetProgramLog)(hiprtcProgram, char *);
  hiprtcResult (*hiprtcGetCodeSize)(hiprtcProgram, size_t *);
  hiprtcResult (*hiprtcGetCode)(hiprtcProgram, char *);
  hiprtcResult (*hiprtcDestroyProgram)(hiprtcProgram *);
  const char *(*hiprtcGetErrorString)(hiprtcResult);
  int (*hipRuntimeGetVersion)(int *);
} api;

#define SYM(n, opt) {#n, (void **)&api.n, opt}
static const jit_dl_sym syms[] = {
    SYM(hiprtcCreateProgram, 0),  SYM(hiprtcCompileProgram, 0), SYM(hiprtcGetProgramLogSize, 0),
    SYM(hiprtcGetProgramLog, 0),  SYM(hiprtcGetCodeSize, 0),    SYM(hiprtcGetCode, 0),
    SYM(hiprtcDestroyProgram, 0), SYM(hiprtcGetErrorString, 0), SYM(hipRuntimeGetVersion, 1),
};
#define NSYMS ((int)(sizeof syms / sizeof syms[0]))

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
/* hiprtc 5.2 crashed (SIGSEGV inside hiprtcCompileProgram) when two threads
 * compiled at once; NVRTC is documented thread-safe, hiprtc is not, so its
 * compiles run one at a time per process (processes still run in parallel). */
static pthread_mutex_t compile_lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded;
static char load_err[1024];
static char ident[64];
static int ver_major, ver_minor;

/* The first ROCm release whose compiler knows each target. hiprtc 5.2 was
 * seen to abort the process (a double free in comgr) when asked for gfx940,
 * gfx942 or gfx1100, so targets are checked here before hiprtc sees them. */
static const struct {
  const char *arch;
  int major, minor;
} known[] = {
    {"gfx900", 4, 0},  {"gfx906", 4, 0},  {"gfx908", 4, 0},  {"gfx90a", 5, 0},
    {"gfx1030", 5, 0}, {"gfx940", 5, 5},  {"gfx941", 5, 5},  {"gfx942", 5, 5},
    {"gfx1100", 5, 5}, {"gfx1101", 5, 5}, {"gfx950", 6, 3},  {"gfx1200", 6, 3},
};

static int handles_arch(const char *arch) { return strncmp(arch, "gfx", 3) == 0; }

static const char *options(const char *arch) {
  (void)arch;
  return "-std=c++17 -O3";
}

static int load(const char *library, char *err, size_t errlen) {
  pthread_mutex_lock(&load_lock);
  if (loaded == 0) {
    /* ROCm 6 ships hiprtc as its own library; ROCm 5 keeps it in libamdhip64. */
    static const char *const names[] = {"libhiprtc.so.6", "libhiprtc.so", "libamdhip64.so.6",
                                        "libamdhip64.so.5", "libamdhip64.so", NULL};
    const char *which = NULL;
    void *h = jit_dl_open("FI_HIPRTC_LIBRARY", library, names, &which, load_err, sizeof load_err);
    if (!h) {
      char tmp[1100];
      snprintf(tmp, sizeof tmp, "hiprtc not found (set FI_HIPRTC_LIBRARY): %s", load_err);
      snprintf(load_err, sizeof load_err, "%.1000s", tmp);
      loaded = -1;
    } else if (jit_dl_resolve(h, syms, NSYMS, which, load_err, sizeof load_err) != 0) {
      loaded = -1;
    } else {
      /* hiprtcVersion answers 9.0 on ROCm 5.2; the HIP runtime's version is
       * the one that tells which compiler is inside. */
      int v = 0;
      if (api.hipRuntimeGetVersion && api.hipRuntimeGetVersion(&v) == 0 && v > 0) {
        ver_major = v / 10000000;
        ver_minor = (v / 100000) % 100;
      } else {
        ver_major = 6; /* a separate libhiprtc without the HIP runtime: ROCm 6+ */
        ver_minor = 0;
      }
      snprintf(ident, sizeof ident, "hiprtc-%d.%d", ver_major, ver_minor);
      loaded = 1;
    }
  }
  int ok = loaded == 1;
  if (!ok && err) snprintf(err, errlen, "%s", load_err);
  pthread_mutex_unlock(&load_lock);
  return ok ? 0 : -1;
}

static const char *identity(void) { return ident; }

static int check_arch(const char *arch, char *err, size_t errlen) {
  char base[32];
  snprintf(base, sizeof base, "%s", arch);
  char *colon = strchr(base, ':'); /* feature suffixes like gfx90a:xnack- */
  if (colon) *colon = 0;
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    if (strcmp(known[i].arch, base) != 0) continue;
    if (ver_major > known[i].major || (ver_major == known[i].major && ver_minor >= known[i].minor))
      return 0;
    snprintf(err, errlen,
             "%s does not know %s (needs ROCm %d.%d or newer); not attempted, since an "
             "unknown target aborts the process inside hiprtc",
             ident, arch, known[i].major, known[i].minor);
    return -1;
  }
  snprintf(err, errlen, "%s: target %s is not in fi_runtime's list of known AMD targets", ident,
           arch);
  return -1;
}

static int compile(const char *src, const char *name, const char *arch, jit_compile_out *out,
                   char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  /* The caller loaded the library first, with its choice of path; this only reports a
   * load that failed. */
  if (load(NULL, err, errlen) != 0) return -1;
  if (check_arch(arch, err, errlen) != 0) return -1;
  const char *hnames[128], *htexts[128];
  int nh = jit_template_headers(hnames, htexts, 128);
  pthread_mutex_lock(&compile_lock);
  hiprtcProgram prog = NULL;
  hiprtcResult r = api.hiprtcCreateProgram(&prog, src, name, nh, htexts, hnames);
  if (r != 0) {
    snprintf(err, errlen, "hiprtcCreateProgram: %s", api.hiprtcGetErrorString(r));
    pthread_mutex_unlock(&compile_lock);
    return -1;
  }
  char archopt[64];
  snprintf(archopt, sizeof archopt, "--offload-arch=%s", arch);
  const char *opts[] = {archopt, "-std=c++17", "-O3"};
  r = api.hiprtcCompileProgram(prog, 3, opts);
  size_t ln = 0;
  /* A successful compile may report a log size of 0 with nothing written. */
  if (api.hiprtcGetProgramLogSize(prog, &ln) == 0 && ln > 1) {
    out->log = calloc(ln + 1, 1);
    if (out->log && api.hiprtcGetProgramLog(prog, out->log) != 0) {
      free(out->log);
      out->log = NULL;
    }
  }
  int rc = -1;
  if (r != 0) {
    snprintf(err, errlen, "hiprtc (%s, %s) failed to compile %s: %s%s%s", ident, arch, name,
             api.hiprtcGetErrorString(r), out->log ? "\n" : "", out->log ? out->log : "");
    goto done;
  }
  size_t n = 0;
  r = api.hiprtcGetCodeSize(prog, &n);
  if (r != 0 || n == 0) {
    snprintf(err, errlen, "hiprtcGetCodeSize: %s", r ? api.hiprtcGetErrorString(r) : "empty");
    goto done;
  }
  out->binary = malloc(n);
  if (!out->binary) {
    snprintf(err, errlen, "out of memory for a %zu-byte code object", n);
    goto done;
  }
  r = api.hiprtcGetCode(prog, out->binary);
  if (r != 0) {
    snprintf(err, errlen, "hiprtcGetCode: %s", api.hiprtcGetErrorString(r));
    free(out->binary);
    out->binary = NULL;
    goto done;
  }
  out->bytes = n;
  rc = 0;
done:
  api.hiprtcDestroyProgram(&prog);
  pthread_mutex_unlock(&compile_lock);
  return rc;
}

int jit_hiprtc_fault(const char *name, void *fn, void **old) {
  return jit_dl_replace(syms, NSYMS, name, fn, old);
}

const jit_compiler jit_hiprtc = {
    JIT_COMPILER_IFACE_VERSION, "hiprtc", "FI_HIPRTC_LIBRARY", handles_arch, options, load, identity, check_arch,
    compile,
};
