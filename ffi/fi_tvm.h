/* fi_tvm.h: the TVM-FFI shim's internals. libfi_runtime_tvm.so exports each public op of
 * libfi_runtime.so as a TVM-FFI packed function (`__tvm_ffi_<name>`, the safe-call
 * signature of tvm/ffi/c_api.h), so tvm_ffi.load_module, TVM and MLC-LLM can call it with
 * DLPack tensors. Plain C over the C ABI: no C++ and no tvm-ffi C++ headers. */
#ifndef FI_TVM_H
#define FI_TVM_H

#include <stdint.h>
#include <tvm/ffi/c_api.h>

#include "fi_runtime.h"

/* One packed call being decoded: the export's name, its signature ("name: Type, ..."),
 * the arguments, and what the readers learned. The first bad argument raises a TVM-FFI
 * error and sets failed; later readers then return defaults, so an op reads all of its
 * arguments and checks failed once. */
typedef struct ft_call {
  const char *fn;
  const char *sig;
  const TVMFFIAny *args;
  int32_t nargs;
  TVMFFIAny *rv;
  DLDevice dev; /* the first non-CPU tensor's device: its stream is the call's */
  int have_dev;
  int failed;
} ft_call;

/* Starts a call: checks the argument count against the signature. 0 when it matches. */
int ft_begin(ft_call *c, const char *fn, const char *sig, const TVMFFIAny *args, int32_t nargs,
             TVMFFIAny *rv);

/* Argument readers (i counts from 0). */
DLTensor *ft_tensor(ft_call *c, int i);     /* a tensor (ffi.Tensor or DLTensor*) */
DLTensor *ft_tensor_opt(ft_call *c, int i); /* a tensor or None (NULL) */
int64_t ft_int(ft_call *c, int i);          /* int or bool */
int64_t ft_int_opt(ft_call *c, int i, int64_t absent); /* int, or absent for None / left out */
double ft_float(ft_call *c, int i);         /* float, int or bool */
DLDataType ft_dtype(ft_call *c, int i);     /* a dtype, or its name ("bfloat16") */
fi_kv_layout ft_layout(ft_call *c, int i);  /* 0 / 1, or "NHD" / "HND" */
int ft_pos_encoding(ft_call *c, int i);     /* 0 / 1, or "NONE" / "ROPE_LLAMA" */
int ft_bitorder(ft_call *c, int i);         /* 0 / 1, or "big" / "little" */
/* A host (CPU) int32 tensor of n entries, contiguous: its data. */
const int32_t *ft_host_i32(ft_call *c, int i, int64_t n);

/* Raises a TVM-FFI error of kind ("TypeError", "ValueError", ...) naming argument i
 * (i < 0: no argument) and marks the call failed; returns -1. */
int ft_fail(ft_call *c, int i, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The process's runtime, created at first use (NULL after raising, on failure). */
fi_runtime *ft_rt(ft_call *c);
/* The caller's stream for the call's device (TVMFFIEnvGetStream: tvm_ffi sets the current
 * torch stream there), NULL with no device tensor. */
void *ft_stream(ft_call *c);
/* Converts an fi_status: 0 for FI_OK, else raises with fi_last_error() and returns -1. */
int ft_status(ft_call *c, fi_status st);

/* Ends an export: raises the first bad argument's error, else runs the C call
 * call(rt, FT_RUN_ARGS, stream) (FT_RUN_ARGS defined around it). */
#define FT_RUN(call)                                                                          \
  do {                                                                                        \
    if (c->failed) return -1;                                                                 \
    fi_runtime *rt_ = ft_rt(c);                                                               \
    if (!rt_) return -1;                                                                      \
    void *stream_ = ft_stream(c);                                                             \
    return ft_status(c, call(rt_, FT_RUN_ARGS, stream_));                                     \
  } while (0)

/* Ends a workspace-size export: call(rt, FT_RUN_ARGS, &bytes), the bytes returned. */
#define FT_RUN_SIZE(call)                                                                     \
  do {                                                                                        \
    if (c->failed) return -1;                                                                 \
    fi_runtime *rt_ = ft_rt(c);                                                               \
    size_t bytes_ = 0;                                                                        \
    if (!rt_ || ft_status(c, call(rt_, FT_RUN_ARGS, &bytes_)) != 0) return -1;                \
    return ft_ret_int(c, (int64_t)bytes_);                                                    \
  } while (0)

/* Results. */
int ft_ret_int(ft_call *c, int64_t v);
int ft_ret_str(TVMFFIAny *rv, const char *s);
int ft_ret_doc(TVMFFIAny *rv, const char *name, const char *sig); /* "name(sig)" */

/* Plans (batch decode / prefill / MLA) cross the ABI as int handles; only live ones are accepted. */
enum { FT_PLAN_DECODE = 1, FT_PLAN_PREFILL = 2, FT_PLAN_MLA = 3 };
int64_t ft_plan_add(void *plan, int kind);
void *ft_plan_get(ft_call *c, int i, int kind); /* argument i as a live plan of kind */
void *ft_plan_take(ft_call *c, int i, int kind); /* the same, forgotten (to destroy it) */

/* The exports: FT_EXPORTS(X) lists X(name, signature) once; the functions, the doc
 * symbols and list_functions are generated from it. */
#include "fi_tvm_list.h"

#define FT_SIG_CONST(name, sig) __attribute__((unused)) static const char ft_sig_##name[] = sig;
FT_EXPORTS(FT_SIG_CONST)
#undef FT_SIG_CONST

/* Defines export `name`: `FT_EXPORT(rmsnorm) { ... c is the ft_call ... }`. */
#define FT_EXPORT(name)                                                                       \
  static int ft_impl_##name(ft_call *c);                                                      \
  TVM_FFI_DLL_EXPORT int __tvm_ffi_##name(void *h, const TVMFFIAny *args, int32_t n,          \
                                          TVMFFIAny *rv) {                                    \
    (void)h;                                                                                  \
    ft_call call;                                                                             \
    if (ft_begin(&call, #name, ft_sig_##name, args, n, rv) != 0) return -1;                   \
    return ft_impl_##name(&call);                                                             \
  }                                                                                           \
  TVM_FFI_DLL_EXPORT int __tvm_ffi__doc_##name(void *h, const TVMFFIAny *args, int32_t n,     \
                                               TVMFFIAny *rv) {                               \
    (void)h, (void)args, (void)n;                                                             \
    return ft_ret_doc(rv, #name, ft_sig_##name);                                              \
  }                                                                                           \
  static int ft_impl_##name(ft_call *c)

#endif /* FI_TVM_H */
