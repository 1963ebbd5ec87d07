/* bench.h: what fi-bench's sections share: the driver table, the output
 * switches, timing helpers, and the section table each bench_*.c adds to. */
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "fi_admin.h"
#include "fi_cuda_min.h"
#include "fi_runtime.h"

extern cu_api cu;
extern CUcontext ctx;
extern FILE *json; /* --json FILE: one object per measurement, one per line */
extern int quick;  /* --quick: fewer repetitions */
extern const char *bench_self; /* this executable, for sections that start children */

double now_us(void);
double median(double *v, int n); /* sorts v */
/* The median over reps (<= 64) timings of n back-to-back run(ctx, call) calls between two
 * events, in ms a call. call counts every call of the time_runs (r * n + k for call k of
 * repetition r), so a run can rotate its inputs across repetitions, not only within one. */
typedef void (*run_fn)(void *ctx, int call);
double time_runs(run_fn run, void *ctx, int n, int reps);
/* Back-to-back runs a timing of a kernel moving `bytes` a run takes: about 200 MB in all,
 * 3 to 50 runs. */
int runs_for_bytes(double bytes);
/* A device tensor of f16 (dt 0), bf16 (1) or f32 (2); shape is kept, not copied. */
DLTensor tensor(CUdeviceptr p, int dt, int ndim, int64_t *shape);
const char *dtname(int dt);
/* A uint8 workspace tensor of bytes (at least 256 allocated) at *ws, freed by the caller;
 * shape must outlive the tensor. */
DLTensor bench_workspace(size_t bytes, CUdeviceptr *ws, int64_t shape[1]);
/* The device's read bandwidth (TB/s): 1 GiB read once a launch with 16-byte streaming
 * loads (bench_decode.c; also the single decode section's roofline). */
double bench_read(fi_runtime *rt);
/* A runtime like the one each section gets, made now: the library reads the FI_* tuning
 * variables at fi_runtime_create, so a comparison that sets one makes a runtime after
 * (and destroys it once its work on the device is done). Exits on failure. */
fi_runtime *bench_env_runtime(void);

/* A tensor-core probe of fi_admin.h (fi_admin_mma_probe, fi_admin_wgmma_probe) and its
 * rate in TFLOP/s, printed with `what` (bench_prefill.c); 0 where it cannot run. */
typedef fi_status (*probe_fn)(fi_runtime *, DLDevice, int, int, void *, double *);
double bench_probe(fi_runtime *rt, probe_fn fn, int iters, const char *what, const char *jname);
/* n bytes of random bf16 in [-1, 1) at d (bench_prefill.c). */
void fill_random(CUdeviceptr d, size_t n);
/* Attention sinks for hq query heads on the device (each 0.5: a sink of about one key's
 * weight) and the extras passing them; bench_sinks_free releases the buffer. */
typedef struct bench_sinks {
  CUdeviceptr dev;
  int64_t shape[1];
  DLTensor t;
  fi_attention_extras x;
} bench_sinks;
void bench_sinks_make(bench_sinks *s, int hq);
void bench_sinks_free(bench_sinks *s);

/* One fi-bench section. run gets a runtime on an in-memory cache and the copy
 * bandwidth measured at start. */
typedef struct bench_section {
  const char *name;
  const char *help;  /* lines for --help, each indented by 12 */
  int by_default;    /* run when no section is named */
  void (*run)(fi_runtime *rt, double copy_tbs);
} bench_section;

extern const bench_section bench_rmsnorm_section, bench_norms_section, bench_tune_section;
extern const bench_section bench_act_section, bench_cascade_section, bench_page_section,
    bench_rope_section, bench_runtime_section;
extern const bench_section bench_decode_section, bench_single_section;
extern const bench_section bench_prefill_section;
extern const bench_section bench_sampling_section;
extern const bench_section bench_moe_section, bench_moe_route_section, bench_tactics_section;
extern const bench_section bench_mla_section;
