/* test_packbits_args.c: fi_packbits and fi_segment_packbits on a machine with no GPU: bad
 * arguments refused by name, and the op's registered keys (the kernels: gpu_packbits.c). */
#include <stdint.h>
#include <string.h>

#include "fi_runtime.h"
#include "ft.h"
#include "ops_packbits.h"
#include "test_args_util.h"

#define ADDR(i) ((void *)(uintptr_t)(0x10000000u * (unsigned)((i) + 1)))

typedef struct tens {
  DLTensor t;
  int64_t shape[2];
} tens;
static void mk(tens *x, void *data, uint8_t code, int bits, int ndim, int64_t a) {
  memset(x, 0, sizeof *x);
  x->shape[0] = a, x->shape[1] = 2;
  x->t.data = data;
  x->t.device.device_type = kDLCUDA;
  x->t.ndim = ndim;
  x->t.dtype.code = code;
  x->t.dtype.bits = (uint8_t)bits;
  x->t.dtype.lanes = 1;
  x->t.shape = x->shape;
}


FT_TEST(packbits_bad_arguments_named) {
  fi_runtime *rt = mem_runtime();
  FT_REQUIRE(rt);
  tens x, y, ip, ipn, t;
  mk(&x, ADDR(0), kDLUInt, 8, 1, 100);
  mk(&y, ADDR(1), kDLUInt, 8, 1, 13);
  mk(&ip, ADDR(2), kDLInt, 32, 1, 5);
  mk(&ipn, ADDR(3), kDLInt, 32, 1, 5);
  t = x, t.t.shape = t.shape, t.t.dtype.bits = 16;
  EXPECT_REFUSED(fi_packbits(rt, &t.t, FI_BITORDER_BIG, &y.t, NULL), "x has dtype");
  t = y, t.t.shape = t.shape, t.shape[0] = 12;
  EXPECT_REFUSED(fi_packbits(rt, &x.t, FI_BITORDER_BIG, &t.t, NULL), "y has 12 bytes");
  t = y, t.t.shape = t.shape, t.t.dtype.code = kDLInt;
  EXPECT_REFUSED(fi_packbits(rt, &x.t, FI_BITORDER_LITTLE, &t.t, NULL), "y has dtype");
  EXPECT_REFUSED(fi_packbits(rt, &x.t, (fi_bitorder)2, &y.t, NULL), "bitorder");
  t = y, t.t.shape = t.shape, t.t.data = (char *)ADDR(0) + 50;
  EXPECT_REFUSED(fi_packbits(rt, &x.t, FI_BITORDER_BIG, &t.t, NULL), "y overlaps x");
  t = x, t.t.shape = t.shape, t.t.ndim = 2;
  EXPECT_REFUSED(fi_packbits(rt, &t.t, FI_BITORDER_BIG, &y.t, NULL), "x");
  t = y, t.t.shape = t.shape, t.t.device.device_id = 1;
  EXPECT_REFUSED(fi_packbits(rt, &x.t, FI_BITORDER_BIG, &t.t, NULL), "y");
  EXPECT_REFUSED(fi_packbits(NULL, &x.t, FI_BITORDER_BIG, &y.t, NULL), "rt");

  t = ip, t.t.shape = t.shape, t.t.dtype.bits = 64;
  EXPECT_REFUSED(fi_segment_packbits(rt, &x.t, &t.t, FI_BITORDER_LITTLE, &y.t, &ipn.t, NULL), "indptr has dtype");
  t = ipn, t.t.shape = t.shape, t.shape[0] = 4;
  EXPECT_REFUSED(fi_segment_packbits(rt, &x.t, &ip.t, FI_BITORDER_LITTLE, &y.t, &t.t, NULL), "indptr_new has 4 entries");
  t = ip, t.t.shape = t.shape, t.shape[0] = 0;
  EXPECT_REFUSED(fi_segment_packbits(rt, &x.t, &t.t, FI_BITORDER_LITTLE, &y.t, &ipn.t, NULL), "indptr has 0 entries");
  t = ipn, t.t.shape = t.shape, t.t.data = ADDR(2);
  EXPECT_REFUSED(fi_segment_packbits(rt, &x.t, &ip.t, FI_BITORDER_LITTLE, &y.t, &t.t, NULL), "indptr_new overlaps indptr");
  EXPECT_REFUSED(fi_segment_packbits(rt, &x.t, &ip.t, (fi_bitorder)-1, &y.t, &ipn.t, NULL), "bitorder");
  fi_runtime_destroy(rt);
}

FT_TEST(packbits_keys_registered) {
  for (int seg = 0; seg < 2; seg++)
    for (int little = 0; little < 2; little++) {
      jit_key k;
      jit_packbits_select(seg, little, &k);
      FT_CHECK(op_registers(&jit_op_packbits, &k));
    }
}
