/* rt_sampling.h: the sampling ops' stored tactics (issue 43; rt_sampling.c): CTAs per row
 * (a cluster of 1, 4 or 8) and the threshold search (0 radix, 1 key range: float32 inputs
 * of the ops with a top-k or top-p set; elsewhere the kernel key keeps the radix one), text
 * "cluster=8;select=1". A call looks its tactic up by op, dtype and vocab, bucketed by the
 * batch (memoized), and the tuner measures the samplers (rt_autotune_sampling.c). */
#ifndef RT_SAMPLING_H
#define RT_SAMPLING_H

#include <stddef.h>
#include <stdint.h>

#include "fi_runtime.h"

typedef struct rt_sampling_tactic {
  int cluster, select;
} rt_sampling_tactic;

int rt_sampling_tactic_parse(const char *s, rt_sampling_tactic *t);
int rt_sampling_tactic_format(const rt_sampling_tactic *t, char *buf, size_t n);

/* The key's fields: the op (FI_SMP_*), the input's dtype, the vocab; the shape text
 * "op=top_k;dtype=f32;vocab=128256". */
#define RT_SAMPLING_TACTIC_FIELDS 3
void rt_sampling_tactic_shape(const int64_t *f, char *buf, size_t n);
/* FI_SMP_* op names as the shape text spells them ("sample", "top_k", "top_p", "min_p",
 * "top_k_top_p_logits", ...), and back (-1 unknown). */
const char *rt_sampling_op_name(int op);
int rt_sampling_op_of(const char *name);

/* Whether op's calls take a stored tactic (the samplers: sample, top_k, top_p, min_p,
 * top_k_top_p_logits and _probs; not softmax, the renorm and mask ops). */
int rt_sampling_tuned(int op);
/* The rule's tactic for op at batch rows on (devtype, device): 0, or -1 (no backend). */
int rt_sampling_rule(fi_runtime *rt, int devtype, int device, int op, int64_t batch, rt_sampling_tactic *t);
/* The tuner's seam: this thread's sampling calls run tactic t (NULL: choose again). */
void rt_sampling_force(const rt_sampling_tactic *t);

#endif
