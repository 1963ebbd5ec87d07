/* jit_nvrtc.c: the NVRTC backend: dlopen'ed at first compile (never on a cache
 * hit: loading its 100 MB library is slow, docs/runtime.md, figures from comments), cubin
 * out, templates as in-memory headers. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit_compiler.h"
#include "jit_dl.h"
#include "jit_fault.h"
#include "jit_templates.h"

typedef int nvrtcResult; /* NVRTC_SUCCESS == 0 */
typedef struct _nvrtcProgram *nvrtcProgram;

/* Every NVRTC entry point the runtime calls, resolved once; tests replace
 * entries through jit_fault_set to inject failures. */
static struct {
  nvrtcResult (*nvrtcVersion)(int *, int *);
  nvrtcResult (*nvrtcGetNumSupportedArchs)(int *);
  nvrtcResult (*nvrtcGetSupportedArchs)(int *);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram *, const char *, const char *, int,
                                    const char *const *, const char *const *);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char *);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t *);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char *);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram *);
  const char *(*nvrtcGetErrorString)(nvrtcResult);
} api;

#define SYM(n, opt) {#n, (void **)&api.n, opt}
static const jit_dl_sym syms[] = {
    SYM(nvrtcVersion, 0),        SYM(nvrtcGetNumSupportedArchs, 1),
    SYM(nvrtcGetSupportedArchs, 1), SYM(nvrtcCreateProgram, 0),
    SYM(nvrtcCompileProgram, 0), SYM(nvrtcGetProgramLogSize, 0),
    SYM(nvrtcGetProgramLog, 0),  SYM(nvrtcGetCUBINSize, 0),
    SYM(nvrtcGetCUBIN, 0),       SYM(nvrtcDestroyProgram, 0),
    SYM(nvrtcGetErrorString, 0),
};
#define NSYMS ((int)(sizeof syms / sizeof syms[0]))

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded; /* 1 ok, -1 failed (message kept), 0 not tried */
static char load_err[1024];
static char ident[64];
static int archs[64], narchs;

static int handles_arch(const char *arch) { return strncmp(arch, "sm_", 3) == 0; }

static const char *options(const char *arch) {
  (void)arch;
  return "-std=c++17";
}

static int load(const char *library, char *err, size_t errlen) {
  pthread_mutex_lock(&load_lock);
  if (loaded == 0) {
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                                        NULL};
    const char *which = NULL;
    void *h = jit_dl_open("FI_NVRTC_LIBRARY", library, names, &which, load_err, sizeof load_err);
    if (!h) {
      char tmp[1100];
      snprintf(tmp, sizeof tmp, "NVRTC not found (set FI_NVRTC_LIBRARY): %s", load_err);
      snprintf(load_err, sizeof load_err, "%.1000s", tmp);
      loaded = -1;
    } else if (jit_dl_resolve(h, syms, NSYMS, which, load_err, sizeof load_err) != 0) {
      loaded = -1;
    } else {
      int maj = 0, min = 0;
      nvrtcResult r = api.nvrtcVersion(&maj, &min);
      if (r != 0) {
        snprintf(load_err, sizeof load_err, "nvrtcVersion failed (%d)", r);
        loaded = -1;
      } else {
        snprintf(ident, sizeof ident, "nvrtc-%d.%d", maj, min);
        if (api.nvrtcGetNumSupportedArchs && api.nvrtcGetSupportedArchs &&
            api.nvrtcGetNumSupportedArchs(&narchs) == 0 && narchs > 0 &&
            narchs <= (int)(sizeof archs / sizeof archs[0])) {
          if (api.nvrtcGetSupportedArchs(archs) != 0) narchs = 0;
        } else {
          narchs = 0;
        }
        loaded = 1;
      }
    }
  }
  int ok = loaded == 1;
  if (!ok && err) snprintf(err, errlen, "%s", load_err);
  pthread_mutex_unlock(&load_lock);
  return ok ? 0 : -1;
}

static const char *identity(void) { return ident; }

static int check_arch(const char *arch, char *err, size_t errlen) {
  if (!handles_arch(arch)) {
    snprintf(err, errlen, "NVRTC cannot target %s", arch);
    return -1;
  }
  int v = atoi(arch + 3);
  if (narchs == 0) return 0; /* old NVRTC: let the compile itself decide */
  for (int i = 0; i < narchs; i++)
    if (archs[i] == v) return 0;
  snprintf(err, errlen, "%s does not support %s (supported: sm_%d to sm_%d)", ident, arch,
           archs[0], archs[narchs - 1]);
  return -1;
}

static char *get_log(nvrtcProgram p) {
  size_t n = 0;
  if (api.nvrtcGetProgramLogSize(p, &n) != 0 || n <= 1) return NULL;
  char *log = malloc(n + 1);
  if (!log) return NULL;
  if (api.nvrtcGetProgramLog(p, log) != 0) {
    free(log);
    return NULL;
  }
  log[n] = 0;
  return log;
}

static int compile(const char *src, const char *name, const char *arch, jit_compile_out *out,
                   char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  /* The caller loaded the library first, with its choice of path; this only reports a
   * load that failed. */
  if (load(NULL, err, errlen) != 0) return -1;
  const char *hnames[128], *htexts[128];
  int nh = jit_template_headers(hnames, htexts, 128);
  nvrtcProgram prog = NULL;
  nvrtcResult r = api.nvrtcCreateProgram(&prog, src, name, nh, htexts, hnames);
  if (r != 0) {
    snprintf(err, errlen, "nvrtcCreateProgram: %s", api.nvrtcGetErrorString(r));
    return -1;
  }
  char archopt[64];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
  const char *opts[] = {archopt, options(arch)};
  r = api.nvrtcCompileProgram(prog, 2, opts);
  out->log = get_log(prog);
  int rc = -1;
  if (r != 0) {
    snprintf(err, errlen, "NVRTC (%s, %s) failed to compile %s: %s%s%s", ident, arch, name,
             api.nvrtcGetErrorString(r), out->log ? "\n" : "", out->log ? out->log : "");
    goto done;
  }
  size_t n = 0;
  r = api.nvrtcGetCUBINSize(prog, &n);
  if (r != 0 || n == 0) {
    snprintf(err, errlen, "nvrtcGetCUBINSize: %s", r ? api.nvrtcGetErrorString(r) : "empty");
    goto done;
  }
  out->binary = malloc(n);
  if (!out->binary) {
    snprintf(err, errlen, "out of memory for a %zu-byte cubin", n);
    goto done;
  }
  r = api.nvrtcGetCUBIN(prog, out->binary);
  if (r != 0) {
    snprintf(err, errlen, "nvrtcGetCUBIN: %s", api.nvrtcGetErrorString(r));
    free(out->binary);
    out->binary = NULL;
    goto done;
  }
  out->bytes = n;
  rc = 0;
done:
  api.nvrtcDestroyProgram(&prog);
  return rc;
}

int jit_nvrtc_fault(const char *name, void *fn, void **old) {
  return jit_dl_replace(syms, NSYMS, name, fn, old);
}

const jit_compiler jit_nvrtc = {
    JIT_COMPILER_IFACE_VERSION, "nvrtc", "FI_NVRTC_LIBRARY", handles_arch, options, load, identity, check_arch,
    compile,
};
