/* fi_example.c: what a serving engine does: dlopen libfi_runtime.so, create a runtime on
 * the default cache, and run one serving step of a Llama-3-8B-class model's kernels on
 * the GPU (fi_example_step.c), or say in one line why it cannot and exit 0.
 *
 *   fi-example [--expect-no-compile] [--reps N] [path/to/libfi_runtime.so]
 *
 * --expect-no-compile (or FI_EXAMPLE_EXPECT_NO_COMPILE=1): exit 3 if the step compiled
 * anything, i.e. if the cache (prewarmed with `fi-cache prewarm --preset llama3-8b`) did
 * not hold every kernel the step ran. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fi_example.h"

/* A name and the field its address goes to. The sizeof term is never evaluated (so it
 * does not link fi_runtime): it only makes the compiler check that the field's type is
 * the header's prototype, which a dlsym'ed pointer would otherwise bypass. */
typedef struct sym {
  const char *name;
  void *slot;
  size_t check;
} sym;
#define SYM(api, f) {"fi_" #f, (void *)&(api)->f, sizeof((api)->f = fi_##f)}

static int load_api(void *h, const char *lib, fi_api *fi) {
  const sym syms[] = {
      SYM(fi, options_init),
      SYM(fi, runtime_create),
      SYM(fi, runtime_destroy),
      SYM(fi, runtime_stats),
      SYM(fi, last_error),
      SYM(fi, status_string),
      SYM(fi, version),
      SYM(fi, fused_add_rmsnorm),
      SYM(fi, get_batch_indices_positions),
      SYM(fi, apply_llama31_rope_pos_ids),
      SYM(fi, append_paged_kv_cache),
      SYM(fi, prefill_params_init),
      SYM(fi, batch_prefill_workspace_size),
      SYM(fi, batch_prefill_paged_plan),
      SYM(fi, batch_prefill_paged_run),
      SYM(fi, batch_prefill_plan_destroy),
      SYM(fi, attention_params_init),
      SYM(fi, batch_decode_workspace_size),
      SYM(fi, batch_decode_plan),
      SYM(fi, batch_decode_run),
      SYM(fi, batch_decode_plan_destroy),
      SYM(fi, silu_and_mul),
      SYM(fi, top_k_top_p_sampling_from_logits),
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *p = dlsym(h, syms[i].name);
    if (!p) {
      fprintf(stderr, "fi-example: %s lacks %s\n", lib, syms[i].name);
      return -1;
    }
    /* POSIX guarantees a function's address survives the trip through void *. */
    memcpy(syms[i].slot, &p, sizeof p);
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: fi-example [--expect-no-compile] [--reps N] [path/to/libfi_runtime.so]\n"
          "  runs one serving step of a Llama-3-8B-class model's kernels on random data\n"
          "  --expect-no-compile  exit 3 if any kernel had to be compiled (also\n"
          "                       FI_EXAMPLE_EXPECT_NO_COMPILE=1)\n"
          "  --reps N             warm repetitions timed per kernel (1 to 1000; default 5)\n");
}

int main(int argc, char **argv) {
  const char *lib = "libfi_runtime.so";
  const char *env = getenv("FI_EXAMPLE_EXPECT_NO_COMPILE");
  int expect_no_compile = env && env[0] && strcmp(env, "0") != 0;
  fi_step_opts opts = {5};
  int have_lib = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--expect-no-compile") == 0) {
      expect_no_compile = 1;
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      char *end;
      long n = strtol(argv[++i], &end, 10);
      if (*end || end == argv[i] || n < 1 || n > 1000) {
        fprintf(stderr, "fi-example: --reps: '%s' is not a count from 1 to 1000\n", argv[i]);
        return 2;
      }
      opts.reps = (int)n;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (argv[i][0] == '-' || have_lib) {
      fprintf(stderr, "fi-example: unexpected argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    } else {
      lib = argv[i];
      have_lib = 1;
    }
  }

  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "fi-example: %s\n", dlerror());
    return 1;
  }
  fi_api fi;
  if (load_api(h, lib, &fi) != 0) return 1;
  printf("fi_runtime %s\n", fi.version());

  fi_options o;
  fi.options_init(&o); /* default cache: $FI_CACHE_PATH or ~/.cache/fi_runtime/kernels.db */
  fi_runtime *rt;
  fi_status st = fi.runtime_create(&o, &rt);
  if (st != FI_OK) {
    fprintf(stderr, "fi-example: fi_runtime_create: %s: %s\n", fi.status_string(st), fi.last_error());
    return 1;
  }

  cu_api cu;
  CUcontext ctx;
  char err[256];
  if (cu_min_init(&cu, &ctx, err, sizeof err) != 0) {
    printf("no CUDA GPU here (%s): the serving step is skipped\n", err);
    fi.runtime_destroy(rt);
    return 0;
  }

  fi_step_result res;
  memset(&res, 0, sizeof res);
  int rc = fi_example_step(&fi, rt, &cu, &opts, &res);

  fi_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  st = fi.runtime_stats(rt, &s);
  if (st != FI_OK) {
    fprintf(stderr, "fi-example: fi_runtime_stats: %s: %s\n", fi.status_string(st), fi.last_error());
    rc = 1;
  } else {
    printf("runtime stats: %lld kernels loaded from the cache, %lld compiled (%.0f ms in the "
           "compiler, %lld failed), %lld calls served from memory, %lld waits for another "
           "compile, %lld repairs\n",
           (long long)s.cache_hits, (long long)s.compiles, s.compile_ms,
           (long long)s.compile_failures, (long long)s.memo_hits, (long long)s.waits,
           (long long)s.repairs);
  }
  fi.runtime_destroy(rt);
  if (rc) return rc;
  if (expect_no_compile && res.compiles > 0) {
    fprintf(stderr,
            "fi-example: expected no compile, but the step compiled %lld kernel%s (%s): the "
            "cache did not hold them; FI_LOG_LEVEL=debug names their keys\n",
            res.compiles, res.compiles == 1 ? "" : "s", res.compiled_by);
    return 3;
  }
  if (expect_no_compile) printf("every kernel of the step came from the cache, as expected\n");
  return 0;
}
