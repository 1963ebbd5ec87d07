/* gpu_packbits.c: fi_packbits and fi_segment_packbits on the GPU against a host packing:
 * fresh random masks (bool and uint8 with values other than 1), both bit orders, lengths
 * that are and are not multiples of 8, ragged segments with empty ones, a strided input,
 * outputs poisoned first (every byte written, nothing past the last); and a segment-packed
 * mask equal to what numpy's packbits(..., bitorder) gives per segment. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ft.h"
#include "gpu_util.h"

static cu_api cu;
static CUcontext ctx;
static fi_runtime *rt;
static uint64_t seed;

static int setup(void) {
  if (rt) return 0;
  return g_setup(&cu, &ctx, &rt, &seed);
}

static uint8_t host_byte(const uint8_t *x, int64_t stride, int64_t len, int64_t j, int little) {
  uint8_t b = 0;
  for (int k = 0; k < 8; k++)
    if (8 * j + k < len && x[(8 * j + k) * stride]) b |= little ? (uint8_t)(1u << k) : (uint8_t)(0x80u >> k);
  return b;
}

static DLTensor t1(CUdeviceptr p, int64_t *shape, int64_t *stride, uint8_t code, int bits) {
  DLTensor t = g_tensor(p, 0, 2, 1, shape, stride);
  t.dtype.code = code;
  t.dtype.bits = (uint8_t)bits;
  return t;
}

FT_TEST(packbits_both_orders_lengths_and_strides) {
  FT_REQUIRE(setup() == 0);
  static const int64_t lens[] = {1, 7, 8, 9, 1000, 65541};
  for (int little = 0; little < 2; little++)
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
      for (int strided = 0; strided < 2; strided++) {
        const int64_t n = lens[li], st = strided ? 3 : 1, nb = (n + 7) / 8;
        uint8_t *x = malloc((size_t)(n * st)), *y = malloc((size_t)nb + 16);
        for (int64_t i = 0; i < n * st; i++) x[i] = (g_rand(&seed) & 3) ? 0 : (uint8_t)(1 + g_rand(&seed) % 200);
        CUdeviceptr dx, dy;
        CU_CHECK(&cu, cuMemAlloc(&dx, (size_t)(n * st)));
        CU_CHECK(&cu, cuMemAlloc(&dy, (size_t)nb + 16));
        CU_CHECK(&cu, cuMemcpyHtoD(dx, x, (size_t)(n * st)));
        CU_CHECK(&cu, cuMemsetD8(dy, 0xa5, (size_t)nb + 16));
        int64_t sx[1] = {n}, ss[1] = {st}, sy[1] = {nb};
        DLTensor tx = t1(dx, sx, ss, strided ? kDLUInt : 6 /* kDLBool */, 8), ty = t1(dy, sy, NULL, kDLUInt, 8);
        fi_status s = fi_packbits(rt, &tx, little ? FI_BITORDER_LITTLE : FI_BITORDER_BIG, &ty, NULL);
        FT_CHECK(s == FI_OK, "%s", fi_last_error());
        CU_CHECK(&cu, cuCtxSynchronize());
        CU_CHECK(&cu, cuMemcpyDtoH(y, dy, (size_t)nb + 16));
        int64_t bad = 0;
        for (int64_t j = 0; j < nb; j++) bad += y[j] != host_byte(x, st, n, j, little);
        for (int j = 0; j < 16; j++) bad += y[nb + j] != 0xa5;
        fprintf(stderr, "  %s packbits %s n=%lld stride %lld: %lld bytes wrong\n", bad ? "FAIL" : "ok  ",
                little ? "little" : "big", (long long)n, (long long)st, (long long)bad);
        FT_CHECK(bad == 0);
        CU_CHECK(&cu, cuMemFree(dx));
        CU_CHECK(&cu, cuMemFree(dy));
        free(x), free(y);
      }
}

FT_TEST(segment_packbits_ragged_segments) {
  FT_REQUIRE(setup() == 0);
  for (int little = 0; little < 2; little++)
    for (int round = 0; round < 3; round++) {
      const int S = round == 0 ? 1 : round == 1 ? 7 : 300;
      int32_t *ip = malloc((size_t)(S + 1) * 4), *ipn = malloc((size_t)(S + 1) * 4), *want = malloc((size_t)(S + 1) * 4);
      ip[0] = 0;
      for (int s = 0; s < S; s++) {
        const int len = (s % 5 == 3) ? 0 : (int)(g_rand(&seed) % (round == 2 ? 300 : 40000));
        ip[s + 1] = ip[s] + len;
      }
      const int64_t n = ip[S];
      want[0] = 0;
      for (int s = 0; s < S; s++) want[s + 1] = want[s] + (ip[s + 1] - ip[s] + 7) / 8;
      const int64_t nb = want[S], cap = nb + 32;
      uint8_t *x = malloc((size_t)n + 1), *y = malloc((size_t)cap);
      for (int64_t i = 0; i < n; i++) x[i] = (uint8_t)((g_rand(&seed) % 3) == 0);
      CUdeviceptr dx, dy, dip, dipn;
      CU_CHECK(&cu, cuMemAlloc(&dx, (size_t)n + 1));
      CU_CHECK(&cu, cuMemAlloc(&dy, (size_t)cap));
      CU_CHECK(&cu, cuMemAlloc(&dip, (size_t)(S + 1) * 4));
      CU_CHECK(&cu, cuMemAlloc(&dipn, (size_t)(S + 1) * 4));
      CU_CHECK(&cu, cuMemcpyHtoD(dx, x, (size_t)n + 1));
      CU_CHECK(&cu, cuMemcpyHtoD(dip, ip, (size_t)(S + 1) * 4));
      CU_CHECK(&cu, cuMemsetD8(dy, 0x5a, (size_t)cap));
      CU_CHECK(&cu, cuMemsetD8(dipn, 0xff, (size_t)(S + 1) * 4));
      int64_t sx[1] = {n}, sy[1] = {nb}, si[1] = {S + 1};
      DLTensor tx = t1(dx, sx, NULL, kDLUInt, 8), ty = t1(dy, sy, NULL, kDLUInt, 8);
      DLTensor tip = t1(dip, si, NULL, kDLInt, 32), tipn = t1(dipn, si, NULL, kDLInt, 32);
      fi_status s = fi_segment_packbits(rt, &tx, &tip, little ? FI_BITORDER_LITTLE : FI_BITORDER_BIG, &ty, &tipn, NULL);
      FT_CHECK(s == FI_OK, "%s", fi_last_error());
      CU_CHECK(&cu, cuCtxSynchronize());
      CU_CHECK(&cu, cuMemcpyDtoH(y, dy, (size_t)cap));
      CU_CHECK(&cu, cuMemcpyDtoH(ipn, dipn, (size_t)(S + 1) * 4));
      int64_t bad = 0, badp = 0;
      for (int sg = 0; sg < S; sg++)
        for (int64_t j = 0; j < want[sg + 1] - want[sg]; j++)
          bad += y[want[sg] + j] != host_byte(x + ip[sg], 1, ip[sg + 1] - ip[sg], j, little);
      for (int j = 0; j < 32; j++) bad += y[nb + j] != 0x5a;
      for (int sg = 0; sg <= S; sg++) badp += ipn[sg] != want[sg];
      fprintf(stderr, "  %s segment_packbits %s %d segments, %lld bits: %lld bytes, %lld offsets wrong\n",
              bad || badp ? "FAIL" : "ok  ", little ? "little" : "big", S, (long long)n, (long long)bad, (long long)badp);
      FT_CHECK(bad == 0 && badp == 0);
      CUdeviceptr fr[4] = {dx, dy, dip, dipn};
      for (int i = 0; i < 4; i++) CU_CHECK(&cu, cuMemFree(fr[i]));
      free(ip), free(ipn), free(want), free(x), free(y);
    }
}
