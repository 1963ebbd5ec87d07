/* rt_autotune.h: the autotuner's view of the ops it measures (rt_autotune.c): each op's
 * entry point with a tactic forced, and its stored-tactic shape text. */
#ifndef RT_AUTOTUNE_H
#define RT_AUTOTUNE_H

#include <stddef.h>
#include <stdint.h>

#include "ops_moe.h"
#include "rt_decode_choose.h"
#include "rt_prefill_args.h"
#include "rt_internal.h"
#include "rt_device.h"

/* fi_moe_grouped_gemm with the kernel of tactic force (NULL: the stored tactic or the
 * rule, as the public call chooses); a tactic that cannot run the call is
 * FI_ERR_INVALID_ARGUMENT. */
fi_status rt_moe_gemm(fi_runtime *rt, const DLTensor *a, const DLTensor *weights, const fi_moe_sort_outputs *tables,
                      const fi_moe_gemm_params *p, DLTensor *out, void *stream, const jit_moe_gemm_tactic *force);
/* The grouped GEMM's shape as its stored tactics name it ("dtype=bf16;k=7168;n=2048;
 * experts=256;top_k=8;gated=1;gather=1;tile=128"); its bucket is the token count's. */
void rt_moe_gemm_shape(int dtype, int64_t k, int64_t n, int64_t experts, int64_t top_k, int gated, int gather,
                       int tile, char *buf, size_t len);

/* fi_batch_decode_plan with the stored tactic (use_stored 1, force NULL: the public
 * call), the rule alone (use_stored 0, force NULL: the tuner's reference), or the tactic
 * force; and a plan's kernel key. */
fi_status rt_decode_plan_tactic(fi_runtime *rt, const fi_batch_decode_info *info, const fi_attention_params *p,
                                DLTensor *workspace, void *stream, fi_decode_plan **plan, int use_stored,
                                const rt_decode_tactic *force);
const jit_key *rt_decode_plan_key(const fi_decode_plan *pl);

/* fi_batch_prefill_{ragged,paged}_plan (paged 0 or 1) as rt_decode_plan_tactic: the stored
 * tactic, the rule alone, or the tactic force; and a plan's kernel key. */
fi_status rt_prefill_plan_tactic(fi_runtime *rt, const fi_batch_prefill_info *info, const fi_prefill_params *p,
                                 int paged, DLTensor *workspace, void *stream, fi_prefill_plan **plan, int use_stored,
                                 const rt_prefill_tactic *force);
const jit_key *rt_prefill_plan_key(const fi_prefill_plan *pl);
/* fi_batch_prefill_paged_run_ex past its checks (the caller made them: batch decode's
 * tensor-core route, whose run checks the same tensors), sinks and lse_base2 from the checked
 * extras. */
fi_status rt_prefill_paged_launch(fi_runtime *rt, const fi_prefill_plan *pl, const DLTensor *q, const DLTensor *kc,
                                  const DLTensor *vc, const DLTensor *kv_indices, fi_kv_layout layout, DLTensor *out,
                                  DLTensor *lse, const float *sinks, int lse_base2, void *stream);

/* ---- the tuner's pieces (rt_autotune.c: the harness; rt_autotune_moe.c,
 * rt_autotune_decode.c and rt_autotune_prefill.c: the ops it measures; rt_autotune_util.c:
 * what both sides use) ---- */

#define RT_TUNE_MAX_TACTICS 32
#define RT_TUNE_NAME 64

/* The device the tuner measures on, and its last error. */
typedef struct rt_tune_dev {
  fi_runtime *rt;
  const rt_device_i *be;
  void *state;
  const rt_device_tune_i *t;
  int dev;
  rt_device_caps caps;
  char err[512];
} rt_tune_dev;

fi_status rt_tune_dev_fail(rt_tune_dev *d, const char *what);
fi_status rt_tune_alloc(rt_tune_dev *d, size_t bytes, void **p, const char *what);
void rt_tune_free(rt_tune_dev *d, void *p);
/* bytes of random 16-bit floats (scale x uniform [-1, 1), bf16 or f16) at p. */
fi_status rt_tune_fill(rt_tune_dev *d, void *p, size_t bytes, int bf16, float scale, uint64_t seed);
/* bytes of uniform [lo, hi) values of dtype dt (JIT_DT_F32, _BF16 or _F16) at p. */
fi_status rt_tune_fill_as(rt_tune_dev *d, void *p, size_t bytes, int dt, float lo, float hi, uint64_t seed);
uint64_t rt_tune_rand(uint64_t *s);
/* A 16-bit float's value (bf16 or f16). */
double rt_tune_value(uint16_t h, int bf16);
DLTensor rt_tune_tensor(void *p, int code, int bits, int nd, int64_t *shape, int dev);
/* "key=value;..." split: calls item(key, value, user) for each; -1 when an item has no '='. */
int rt_tune_items(const char *shape, char *buf, size_t n, int (*item)(const char *k, const char *v, void *u),
                  void *user);
/* An op's shape text of exactly the items names[0..n) (n <= 16), each once, in any order:
 * value(i, text, c) parses item i into c (0, or -1: out of range). FI_ERR_INVALID_ARGUMENT
 * naming the item (unknown, twice, not key=value, out of range, missing) and ending with
 * want, the op's own description of its shape. */
fi_status rt_tune_parse_shape(const char *shape, const char *const *names, int n,
                              int (*value)(int i, const char *v, void *c), void *c, const char *want);

/* One op the tuner measures. Its case (case_size bytes, zeroed) holds the parsed shape,
 * the inputs and per-tactic state. */
typedef struct rt_tune_op {
  const char *name;
  size_t case_size;
  /* The shape text parsed and checked (FI_ERR_INVALID_ARGUMENT naming the item), and its
   * canonical text: the tactics table's key. */
  fi_status (*parse)(const char *shape, void *c, char *canon, size_t n);
  /* Inputs for `tokens` tokens (the bucket's bound), on d. */
  fi_status (*setup)(rt_tune_dev *d, void *c, int64_t tokens);
  /* The tactics that can run the call, the rule's first: names (RT_TUNE_NAME each); the
   * count, or -1 with the error reported. */
  int (*tactics)(rt_tune_dev *d, void *c, char (*names)[RT_TUNE_NAME], int max);
  size_t (*out_bytes)(const void *c); /* of 16-bit values */
  int (*bf16)(const void *c);
  /* Tactic i into out (the stream's order). */
  fi_status (*run)(rt_tune_dev *d, void *c, int i, void *out);
  void (*release)(rt_tune_dev *d, void *c);
  /* 1: the outputs are not floats (sampled token ids): a tactic is valid only where its
   * output is the rule's bit for bit. */
  int exact;
} rt_tune_op;

/* A plan's stored tactic for (op, fields, bucket) on (devtype, device), as rt_tactic_cached;
 * with FI_AUTOTUNE=1, the key's first lookup that finds none measures it first (fi_autotune
 * at the bucket's bound), unless the plan's stream is being captured into a graph. Never
 * fails the plan: a measurement that fails is a warning, and the rule chooses. 1 with
 * *params, or 0. */
int rt_tactic_plan(fi_runtime *rt, const char *op, const int64_t *fields, int nfields, int64_t bucket, int devtype,
                   int device, void (*shape_fn)(const int64_t *fields, char *buf, size_t n), void *stream,
                   const char **params);

extern const rt_tune_op rt_tune_moe_gemm, rt_tune_batch_decode, rt_tune_batch_prefill, rt_tune_sampling;

#endif
