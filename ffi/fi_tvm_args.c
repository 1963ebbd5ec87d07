/* fi_tvm_args.c: decoding a TVM-FFI packed call (argument readers that name the bad
 * argument), raising errors with fi_last_error(), the process's runtime, plan handles. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/ffi/extra/c_env_api.h>

#include "fi_tvm.h"

/* ---- signatures ---- */

static int sig_count(const char *sig) {
  if (!*sig) return 0;
  int n = 1;
  for (const char *p = sig; *p; p++) n += *p == ',';
  return n;
}

/* How many of a signature's last arguments are optional ("x: Tensor?", "x: int?"): a
 * caller may leave those out (the attention exports' trailing `sinks`, the prefill plans'
 * `head_dim_vo`, added after callers existed). */
static int sig_optional_tail(const char *sig) {
  int n = 0;
  const char *end = sig + strlen(sig);
  while (end > sig) {
    const char *p = end;
    while (p > sig && p[-1] != ',') p--;
    const size_t len = (size_t)(end - p), tl = strlen("Tensor?"), il = strlen("int?");
    if (!(len >= tl && memcmp(end - tl, "Tensor?", tl) == 0) && !(len >= il && memcmp(end - il, "int?", il) == 0))
      break;
    n++;
    end = p > sig ? p - 1 : sig;
  }
  return n;
}

/* The name of argument i of a signature "a: T, b: U" into buf. */
static const char *sig_name(const char *sig, int i, char *buf, size_t cap) {
  const char *p = sig;
  for (int k = 0; k < i && p; k++) {
    p = strchr(p, ',');
    if (p) p++;
  }
  if (!p) return "?";
  while (*p == ' ') p++;
  size_t n = strcspn(p, ":,");
  if (n >= cap) n = cap - 1;
  memcpy(buf, p, n);
  buf[n] = 0;
  return buf;
}

static const char *type_name(int32_t t) {
  switch (t) {
  case kTVMFFINone: return "None";
  case kTVMFFIInt: return "int";
  case kTVMFFIBool: return "bool";
  case kTVMFFIFloat: return "float";
  case kTVMFFIOpaquePtr: return "opaque pointer";
  case kTVMFFIDataType: return "dtype";
  case kTVMFFIDevice: return "device";
  case kTVMFFIDLTensorPtr: case kTVMFFITensor: return "Tensor";
  case kTVMFFIRawStr: case kTVMFFISmallStr: case kTVMFFIStr: return "str";
  case kTVMFFIArray: case kTVMFFIList: return "list";
  case kTVMFFIShape: return "Shape";
  case kTVMFFIFunction: return "function";
  default: return "object";
  }
}

int ft_fail(ft_call *c, int i, const char *kind, const char *fmt, ...) {
  if (c->failed) return -1; /* the first error is the one raised */
  c->failed = 1;
  char msg[1024], name[64];
  int n = i >= 0 ? snprintf(msg, sizeof msg, "%s: argument %d '%s': ", c->fn, i,
                            sig_name(c->sig, i, name, sizeof name))
                 : snprintf(msg, sizeof msg, "%s: ", c->fn);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  TVMFFIErrorSetRaisedFromCStr(kind, msg);
  return -1;
}

int ft_begin(ft_call *c, const char *fn, const char *sig, const TVMFFIAny *args, int32_t nargs,
             TVMFFIAny *rv) {
  memset(c, 0, sizeof *c);
  c->fn = fn, c->sig = sig, c->args = args, c->nargs = nargs, c->rv = rv;
  const int want = sig_count(sig), least = want - sig_optional_tail(sig);
  if (nargs > want || nargs < least) {
    if (least == want)
      return ft_fail(c, -1, "TypeError", "takes %d arguments (%s), got %d", want, sig, (int)nargs);
    return ft_fail(c, -1, "TypeError", "takes %d to %d arguments (%s), got %d", least, want, sig, (int)nargs);
  }
  return 0;
}

/* ---- argument readers ---- */

static DLTensor *tensor_of(ft_call *c, int i, int optional) {
  if (c->failed) return NULL;
  if (i >= c->nargs) { /* a trailing optional tensor left out (ft_begin allowed it) */
    if (!optional) ft_fail(c, i, "TypeError", "is missing");
    return NULL;
  }
  const TVMFFIAny *a = &c->args[i];
  DLTensor *t = NULL;
  if (a->type_index == kTVMFFITensor)
    t = (DLTensor *)((char *)a->v_obj + sizeof(TVMFFIObject));
  else if (a->type_index == kTVMFFIDLTensorPtr)
    t = (DLTensor *)a->v_ptr;
  else if (a->type_index == kTVMFFINone && optional)
    return NULL;
  if (!t) {
    ft_fail(c, i, "TypeError", "must be a tensor%s, got %s", optional ? " or None" : "",
            type_name(a->type_index));
    return NULL;
  }
  if (!c->have_dev && t->device.device_type != kDLCPU) c->dev = t->device, c->have_dev = 1;
  return t;
}

DLTensor *ft_tensor(ft_call *c, int i) { return tensor_of(c, i, 0); }
DLTensor *ft_tensor_opt(ft_call *c, int i) { return tensor_of(c, i, 1); }

int64_t ft_int_opt(ft_call *c, int i, int64_t absent) {
  if (c->failed) return 0;
  if (i >= c->nargs || c->args[i].type_index == kTVMFFINone) return absent;
  return ft_int(c, i);
}

int64_t ft_int(ft_call *c, int i) {
  if (c->failed) return 0;
  const TVMFFIAny *a = &c->args[i];
  if (a->type_index == kTVMFFIInt || a->type_index == kTVMFFIBool) return a->v_int64;
  ft_fail(c, i, "TypeError", "must be an int, got %s", type_name(a->type_index));
  return 0;
}

double ft_float(ft_call *c, int i) {
  if (c->failed) return 0;
  const TVMFFIAny *a = &c->args[i];
  if (a->type_index == kTVMFFIFloat) return a->v_float64;
  if (a->type_index == kTVMFFIInt || a->type_index == kTVMFFIBool) return (double)a->v_int64;
  ft_fail(c, i, "TypeError", "must be a float, got %s", type_name(a->type_index));
  return 0;
}

/* A string argument's bytes (NULL, after raising, for anything else). */
static const char *str_of(ft_call *c, int i, size_t *len) {
  const TVMFFIAny *a = &c->args[i];
  if (a->type_index == kTVMFFIRawStr) return *len = strlen(a->v_c_str), a->v_c_str;
  if (a->type_index == kTVMFFISmallStr) return *len = a->small_str_len, a->v_bytes;
  if (a->type_index == kTVMFFIStr) {
    const TVMFFIByteArray *b = (const TVMFFIByteArray *)((char *)a->v_obj + sizeof(TVMFFIObject));
    return *len = b->size, b->data;
  }
  return NULL;
}

/* An enum argument: an int in [0, n), or one of the n names. */
static int enum_of(ft_call *c, int i, const char *const *names, int n, const char *what) {
  if (c->failed) return 0;
  const TVMFFIAny *a = &c->args[i];
  if (a->type_index == kTVMFFIInt) {
    if (a->v_int64 >= 0 && a->v_int64 < n) return (int)a->v_int64;
    return ft_fail(c, i, "ValueError", "%s %lld is out of range [0, %d)", what,
                   (long long)a->v_int64, n), 0;
  }
  size_t len;
  const char *s = str_of(c, i, &len);
  if (!s) return ft_fail(c, i, "TypeError", "must be a %s (int or str), got %s", what,
                         type_name(a->type_index)), 0;
  for (int k = 0; k < n; k++)
    if (strlen(names[k]) == len && memcmp(names[k], s, len) == 0) return k;
  return ft_fail(c, i, "ValueError", "unknown %s '%.*s'", what, (int)len, s), 0;
}

fi_kv_layout ft_layout(ft_call *c, int i) {
  static const char *const names[] = {"NHD", "HND"};
  return (fi_kv_layout)enum_of(c, i, names, 2, "kv layout (\"NHD\" or \"HND\")");
}

int ft_bitorder(ft_call *c, int i) {
  static const char *const names[] = {"big", "little"};
  return enum_of(c, i, names, 2, "bit order (\"big\" or \"little\")");
}

int ft_pos_encoding(ft_call *c, int i) {
  static const char *const names[] = {"NONE", "ROPE_LLAMA"};
  return enum_of(c, i, names, 2, "position encoding (\"NONE\" or \"ROPE_LLAMA\")");
}

DLDataType ft_dtype(ft_call *c, int i) {
  DLDataType d = {0, 0, 0};
  if (c->failed) return d;
  const TVMFFIAny *a = &c->args[i];
  if (a->type_index == kTVMFFIDataType) return a->v_dtype;
  size_t len;
  const char *s = str_of(c, i, &len);
  TVMFFIByteArray b = {s, len};
  if (!s) ft_fail(c, i, "TypeError", "must be a dtype, got %s", type_name(a->type_index));
  else if (TVMFFIDataTypeFromString(&b, &d) != 0) {
    TVMFFIObjectHandle err = NULL;
    TVMFFIErrorMoveFromRaised(&err); /* ours replaces tvm-ffi's parse error */
    if (err) TVMFFIObjectDecRef(err);
    ft_fail(c, i, "ValueError", "unknown dtype '%.*s'", (int)len, s);
  }
  return d;
}

const int32_t *ft_host_i32(ft_call *c, int i, int64_t n) {
  DLTensor *t = tensor_of(c, i, 0);
  if (!t) return NULL;
  if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost)
    return ft_fail(c, i, "ValueError", "must be a host (CPU) tensor: the plan reads it on the host"),
           NULL;
  if (t->dtype.code != kDLInt || t->dtype.bits != 32 || t->dtype.lanes != 1)
    return ft_fail(c, i, "ValueError", "must be int32"), NULL;
  if (t->ndim != 1 || t->shape[0] < n)
    return ft_fail(c, i, "ValueError", "must be 1-D with at least %lld entries", (long long)n),
           NULL;
  if (t->strides && t->shape[0] > 1 && t->strides[0] != 1)
    return ft_fail(c, i, "ValueError", "must be contiguous"), NULL;
  return (const int32_t *)((const char *)t->data + t->byte_offset);
}

/* ---- the runtime ---- */

static pthread_mutex_t rt_mu = PTHREAD_MUTEX_INITIALIZER;
static fi_runtime *_Atomic g_rt;
static fi_options g_opts;
static char g_cache_path[4096], g_system_path[4096];
static int g_opts_set;

fi_runtime *ft_rt(ft_call *c) {
  fi_runtime *rt = g_rt;
  if (rt) return rt;
  pthread_mutex_lock(&rt_mu);
  fi_status st = FI_OK;
  if (!g_rt) {
    if (!g_opts_set) fi_options_init(&g_opts);
    st = fi_runtime_create(&g_opts, &rt);
    if (st == FI_OK) g_rt = rt;
  }
  rt = g_rt;
  pthread_mutex_unlock(&rt_mu);
  if (!rt) ft_status(c, st);
  return rt;
}

/* Copies an optional string argument (None: NULL) into buf. */
static const char *opt_path(ft_call *c, int i, char *buf, size_t cap) {
  if (c->failed || c->args[i].type_index == kTVMFFINone) return NULL;
  size_t len;
  const char *s = str_of(c, i, &len);
  if (!s) return ft_fail(c, i, "TypeError", "must be a str or None"), NULL;
  if (len >= cap) return ft_fail(c, i, "ValueError", "is longer than %zu bytes", cap - 1), NULL;
  memcpy(buf, s, len);
  buf[len] = 0;
  return buf;
}

FT_EXPORT(init) {
  char cache[sizeof g_cache_path], sys[sizeof g_system_path];
  const char *cp = opt_path(c, 0, cache, sizeof cache), *sp = opt_path(c, 1, sys, sizeof sys);
  int64_t level = ft_int(c, 2);
  if (c->failed) return -1;
  pthread_mutex_lock(&rt_mu);
  int exists = g_rt != NULL;
  if (!exists) {
    fi_options_init(&g_opts);
    if (cp) g_opts.cache_path = strcpy(g_cache_path, cp);
    if (sp) g_opts.system_cache_path = strcpy(g_system_path, sp);
    g_opts.log_level = (int)level;
    g_opts_set = 1;
  }
  pthread_mutex_unlock(&rt_mu);
  if (exists)
    return ft_fail(c, -1, "RuntimeError", "the runtime already exists: call init before any op");
  return 0;
}

void *ft_stream(ft_call *c) {
  return c->have_dev ? TVMFFIEnvGetStream(c->dev.device_type, c->dev.device_id) : NULL;
}

int ft_status(ft_call *c, fi_status st) {
  if (st == FI_OK) return 0;
  return ft_fail(c, -1, st == FI_ERR_INVALID_ARGUMENT ? "ValueError" : "RuntimeError", "%s: %s",
                 fi_status_string(st), fi_last_error());
}

/* ---- results ---- */

int ft_ret_int(ft_call *c, int64_t v) {
  c->rv->type_index = kTVMFFIInt;
  c->rv->zero_padding = 0;
  c->rv->v_int64 = v;
  return 0;
}

int ft_ret_str(TVMFFIAny *rv, const char *s) {
  TVMFFIByteArray b = {s, strlen(s)};
  return TVMFFIStringFromByteArray(&b, rv);
}

int ft_ret_doc(TVMFFIAny *rv, const char *name, const char *sig) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s(%s)", name, sig);
  return ft_ret_str(rv, buf);
}

/* ---- plan handles: a small table of the live ones, so a stale or made-up handle is an
 * error instead of a wild pointer. ---- */

typedef struct plan_slot {
  void *plan;
  int kind;
} plan_slot;
static pthread_mutex_t plans_mu = PTHREAD_MUTEX_INITIALIZER;
static plan_slot *plans;
static size_t nplans, capplans;

int64_t ft_plan_add(void *plan, int kind) {
  pthread_mutex_lock(&plans_mu);
  int ok = 1;
  if (nplans == capplans) {
    size_t cap = capplans ? 2 * capplans : 16;
    plan_slot *p = realloc(plans, cap * sizeof *p);
    if (p) plans = p, capplans = cap;
    else ok = 0;
  }
  if (ok) plans[nplans++] = (plan_slot){plan, kind};
  pthread_mutex_unlock(&plans_mu);
  return ok ? (int64_t)(intptr_t)plan : 0;
}

static void *plan_find(ft_call *c, int i, int kind, int take) {
  int64_t h = ft_int(c, i);
  if (c->failed) return NULL;
  void *found = NULL;
  pthread_mutex_lock(&plans_mu);
  for (size_t k = 0; k < nplans; k++)
    if ((int64_t)(intptr_t)plans[k].plan == h && plans[k].kind == kind) {
      found = plans[k].plan;
      if (take) plans[k] = plans[--nplans];
      break;
    }
  pthread_mutex_unlock(&plans_mu);
  if (!found)
    ft_fail(c, i, "ValueError", "%lld is not a live %s plan handle", (long long)h,
            kind == FT_PLAN_DECODE ? "batch decode" : kind == FT_PLAN_MLA ? "batch MLA" : "batch prefill");
  return found;
}

void *ft_plan_get(ft_call *c, int i, int kind) { return plan_find(c, i, kind, 0); }
void *ft_plan_take(ft_call *c, int i, int kind) { return plan_find(c, i, kind, 1); }
