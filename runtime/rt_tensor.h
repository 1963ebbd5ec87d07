/* rt_tensor.h: DLTensor checks shared by the op entry points; every failure
 * names the function, the argument and what was expected. */
#ifndef RT_TENSOR_H
#define RT_TENSOR_H

#include <stdint.h>

#include "fi_runtime.h"

/* The jit dtype (JIT_DT_*) of t, or JIT_DT_NONE. */
int rt_tensor_dtype(const DLTensor *t);
const char *rt_dtype_string(DLDataType d, char *buf, size_t n);

/* t is non-NULL, has data, lives on a CUDA or ROCm device, has ndim dims
 * with non-negative sizes. */
fi_status rt_check_tensor(const char *fn, const char *name, const DLTensor *t, int ndim);

/* Stride of dimension i in elements (compact row-major when strides is NULL). */
int64_t rt_stride(const DLTensor *t, int i);

/* Address of element 0. */
static inline char *rt_data(const DLTensor *t) { return (char *)t->data + t->byte_offset; }

/* Both on the same device (type and ordinal). */
fi_status rt_check_same_device(const char *fn, const char *a_name, const DLTensor *a,
                               const char *b_name, const DLTensor *b);

/* Do the byte ranges [first element, last element] of a and b intersect?
 * Conservative for strided views; 0 when either is empty or too large. */
int rt_tensors_overlap(const DLTensor *a, const DLTensor *b);

/* Widest access (elements of es bytes, up to 16 bytes) that a row of n
 * elements, every start address and every stride (in elements) allow. */
int rt_pick_vec(int es, int64_t n, const void *const *ptrs, int nptrs, const int64_t *strides,
                int nstrides);

/* Number of bytes from the first to one past the last element; -1 if that
 * does not fit in 63 bits (a shape or stride no real tensor has). */
int64_t rt_extent_bytes(const DLTensor *t);

/* t's first element is aligned to `bytes` (a power of two): what the kernels' narrowest
 * load of it assumes. */
fi_status rt_check_aligned(const char *fn, const char *name, const DLTensor *t, int bytes);

#endif
