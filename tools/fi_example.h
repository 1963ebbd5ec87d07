/* fi_example.h: what the two halves of fi-example share: the runtime's entry points
 * looked up by name (as an engine written in any language would find them), and the step. */
#ifndef FI_EXAMPLE_H
#define FI_EXAMPLE_H

#include <stddef.h>

#include "fi_cuda_min.h"
#include "fi_runtime.h"

/* One field per entry point, each with the prototype of fi_runtime.h (fi_example.c checks
 * every field's type against the header's declaration at compile time). */
typedef struct fi_api {
  void (*options_init)(fi_options *);
  fi_status (*runtime_create)(const fi_options *, fi_runtime **);
  void (*runtime_destroy)(fi_runtime *);
  fi_status (*runtime_stats)(fi_runtime *, fi_stats *);
  const char *(*last_error)(void);
  const char *(*status_string)(fi_status);
  const char *(*version)(void);
  fi_status (*fused_add_rmsnorm)(fi_runtime *, DLTensor *, DLTensor *, const DLTensor *, double,
                                 void *);
  fi_status (*get_batch_indices_positions)(fi_runtime *, const DLTensor *, const DLTensor *,
                                           DLTensor *, DLTensor *, void *);
  fi_status (*apply_llama31_rope_pos_ids)(fi_runtime *, const DLTensor *, const DLTensor *,
                                          DLTensor *, DLTensor *, const DLTensor *, int, int,
                                          double, double, double, double, double, void *);
  fi_status (*append_paged_kv_cache)(fi_runtime *, const DLTensor *, const DLTensor *,
                                     const DLTensor *, const DLTensor *, DLTensor *, DLTensor *,
                                     const DLTensor *, const DLTensor *, const DLTensor *,
                                     fi_kv_layout, double, double, void *);
  void (*prefill_params_init)(fi_prefill_params *);
  fi_status (*batch_prefill_workspace_size)(fi_runtime *, DLDevice, int, int, int, int, int,
                                            size_t *);
  fi_status (*batch_prefill_paged_plan)(fi_runtime *, const fi_batch_prefill_info *,
                                        const fi_prefill_params *, DLTensor *, void *,
                                        fi_prefill_plan **);
  fi_status (*batch_prefill_paged_run)(fi_runtime *, const fi_prefill_plan *, const DLTensor *,
                                       const DLTensor *, const DLTensor *, const DLTensor *,
                                       fi_kv_layout, DLTensor *, DLTensor *, void *);
  void (*batch_prefill_plan_destroy)(fi_prefill_plan *);
  void (*attention_params_init)(fi_attention_params *);
  fi_status (*batch_decode_workspace_size)(fi_runtime *, DLDevice, int, int, int, int, size_t *);
  fi_status (*batch_decode_plan)(fi_runtime *, const fi_batch_decode_info *,
                                 const fi_attention_params *, DLTensor *, void *,
                                 fi_decode_plan **);
  fi_status (*batch_decode_run)(fi_runtime *, const fi_decode_plan *, const DLTensor *,
                                const DLTensor *, const DLTensor *, const DLTensor *,
                                const DLTensor *, const DLTensor *, fi_kv_layout, DLTensor *,
                                DLTensor *, void *);
  void (*batch_decode_plan_destroy)(fi_decode_plan *);
  fi_status (*silu_and_mul)(fi_runtime *, const DLTensor *, DLTensor *, void *);
  fi_status (*top_k_top_p_sampling_from_logits)(fi_runtime *, const DLTensor *, const DLTensor *,
                                                int, const DLTensor *, double, DLTensor *,
                                                uint64_t, uint64_t, void *);
} fi_api;

/* How the step is run: warm repetitions per kernel (their median is printed). */
typedef struct fi_step_opts {
  int reps;
} fi_step_opts;

/* What the step did: kernels compiled during it, and the names of the calls that
 * compiled (comma-separated, for the FI_EXAMPLE_EXPECT_NO_COMPILE message). */
typedef struct fi_step_result {
  long long compiles;
  char compiled_by[512];
} fi_step_result;

/* One serving step of a Llama-3-8B-class model's kernels on random data, on device 0's
 * current context and the legacy default stream; prints a line per kernel and the checks.
 * 0 when every call succeeded and every check passed, else 1 (the reason printed). */
int fi_example_step(const fi_api *fi, fi_runtime *rt, cu_api *cu, const fi_step_opts *opts,
                    fi_step_result *res);

#endif
