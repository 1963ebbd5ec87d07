/* rt_norm.h: what the norm entry points (rt_norm.c, rt_layernorm.c) share: checks of
 * row tensors, the access width, and the launch of the kernels sized at launch. */
#ifndef RT_NORM_H
#define RT_NORM_H

#include <stdint.h>

#include "fi_params.h"
#include "fi_runtime.h"
#include "jit_key.h"

/* input is [rows, hidden] of float16, bfloat16 or float32 with 0 < hidden,
 * rows and hidden < 2^31; *dtype gets its JIT_DT_*. */
fi_status rt_norm_check_input(const char *fn, const DLTensor *input, int *dtype);

/* t has the dtype dt (input's, named in the message). */
fi_status rt_norm_check_dtype(const char *fn, const char *name, const DLTensor *t, int dt,
                              const DLTensor *input);

/* t is [rows, hidden] like input, with contiguous rows that do not overlap. */
fi_status rt_norm_check_rows(const char *fn, const char *name, const DLTensor *t, int64_t rows,
                             int64_t hidden);

/* t is a contiguous [hidden]. */
fi_status rt_norm_check_vector(const char *fn, const char *name, const DLTensor *t,
                               int64_t hidden);

fi_status rt_norm_check_eps(const char *fn, double eps);

/* Bytes spanned by t; fails naming t when it spans more than 2^63. */
fi_status rt_norm_extent(const char *fn, const char *name, const DLTensor *t, int64_t *bytes);

/* Do [a, a + an) and [b, b + bn) share a byte? */
static inline int rt_norm_overlap(const char *a, int64_t an, const char *b, int64_t bn) {
  return a < b + bn && b < a + an;
}

/* A call of a kernel whose block size is set at launch: everything the
 * launch needs once the arguments are checked. */
typedef struct rt_norm_call {
  const jit_op *op; /* jit_op_layernorm or an rmsnorm variant */
  int dtype, wdtype, vec;
  int device_type, device;
  fi_norm_params p;
} rt_norm_call;

/* Loads the backend, picks the key and block size for its warp, gets the
 * kernel and launches a persistent grid on stream. rows must be > 0. */
fi_status rt_norm_launch(fi_runtime *rt, rt_norm_call *c, void *stream);

#endif
