// sm90.cuh: the Hopper (sm_90a) PTX layer of the wgmma kernels: shared-memory matrix
// descriptors and the 128-byte swizzle, cp.async, the async-proxy fence, mbarriers,
// setmaxnreg, and wgmma.mma_async (m64nNk16, f16 / bf16 inputs, fp32 accumulators) with its
// fence / commit / wait. Compiled for sm_90a only (wgmma and setmaxnreg exist nowhere else).
//
// Shared-memory tiles: a [R][D] tile of 16-bit elements is D / 64 "atom columns" of [R][64]
// (128 bytes a row), column a at byte a * R * 128; in each, row r at r * 128 and its
// 16-byte chunk c at ((c ^ (r % 8)) * 16): the 128-byte swizzle (Swizzle<3,4,3>: address
// bits 4-6 ^= bits 7-9), which the hardware applies to absolute addresses, hence the
// 1024-byte alignment (base offset 0).
//
// Descriptors (PTX ISA "Matrix Descriptor Format"): start address >> 4 in bits 0-13,
// leading-dimension byte offset (LBO) >> 4 in bits 16-29, stride-dimension byte offset
// (SBO) >> 4 in bits 32-45, base offset in bits 49-51 (0), swizzle in bits 62-63 (1 =
// 128B). kdesc and vdesc take an encoding (mode); 0 is the one the kernels use, the others
// are kept for lab/gpu/wgmma_attn's --kdesc / --vdesc (prefill_wgmma.cuh's FI_WG_KDESC,
// FI_WG_VDESC):
//   kdesc 0: LBO 16 (unused for swizzled K-major; CUTLASS writes 1), SBO 1024 (8 rows
//     of 128 bytes): cute make_gmma_desc, Major::K, B128 ((8,n),2):((8,SBO),1).
//   kdesc 1: LBO = the atom-column stride, SBO 1024.   2: LBO 0, SBO 1024.
//   kdesc 3: LBO 1024, SBO 16 (swapped; expected wrong).
//   A k16 step moves the start address by 32 bytes inside an atom column (4 steps), then
//   to the next atom column.
//   vdesc 0: LBO = the atom-column stride (the next 64 N elements), SBO 1024 (the
//     next 8 K rows): cute make_gmma_desc, Major::MN, swizzled: LBO = stride<0,1>, SBO =
//     stride<1,1> of ((64,n),(8,k)).
//   vdesc 1: swapped (LBO 1024, SBO = the atom-column stride).
//   A k16 step (16 tokens) moves the start address by 16 rows = 2048 bytes.
// A descriptor may be stepped by adding (bytes >> 4) to the 64-bit value: the
// start-address field cannot carry (shared addresses stay below 2^18).
#pragma once
#include "fi_port.cuh"

namespace fi {
namespace wg {

FI_DEVICE uint64_t make_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((saddr & 0x3ffffu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3fffu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3fffu) << 32) | ((uint64_t)1 << 62);
}
// K-major (Q, K) tile, 128-byte swizzle; colstride: bytes between atom columns.
FI_DEVICE uint64_t kdesc(uint32_t saddr, uint32_t colstride, int mode) {
  switch (mode) {
    case 1: return make_desc(saddr, colstride, 1024);
    case 2: return make_desc(saddr, 0, 1024);
    case 3: return make_desc(saddr, 1024, 16);
    default: return make_desc(saddr, 16, 1024);
  }
}
// MN-major (V) tile, 128-byte swizzle.
FI_DEVICE uint64_t vdesc(uint32_t saddr, uint32_t colstride, int mode) {
  switch (mode) {
    case 1: return make_desc(saddr, 1024, colstride);
    default: return make_desc(saddr, colstride, 1024);
  }
}

// Byte offset of 16-byte chunk ch of row r in an [R][D] 16-bit tile (the swizzle above).
FI_DEVICE uint32_t sw128(int r, int ch, int R) {
  return (uint32_t)((ch >> 3) * R * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

FI_DEVICE uint32_t smem_addr(const void *ptr) {
  uint32_t r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(ptr));
  return r;
}
FI_DEVICE void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
FI_DEVICE void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
FI_DEVICE void cp16(uint32_t saddr, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr), "l"(src) : "memory");
}
// Generic-proxy writes (cp.async, st.shared) made visible to wgmma's async-proxy reads;
// each writing thread runs it before the barrier.
FI_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
FI_DEVICE void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
FI_DEVICE void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
FI_DEVICE void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// mbarriers (PTX "mbarrier"): the warp-specialized pipeline's full / empty signals.
FI_DEVICE void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
FI_DEVICE void mbar_arrive(uint32_t bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(bar) : "memory");
}
// Arrives once every cp.async this thread issued so far has landed (the count excludes it:
// noinc).
FI_DEVICE void mbar_arrive_cp(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// Waits until the phase of the given parity has completed (a fresh barrier is in phase 0,
// so parity 1 passes at once: the producer's first wait on an empty stage).
FI_DEVICE void mbar_wait(uint32_t bar, int parity) {
  uint32_t ok = 0;
  do
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
  while (!ok);
}
template <int N>
FI_DEVICE void reg_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
FI_DEVICE void reg_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
// Pins accumulators in place around asynchronous wgmma (no reads hoisted above the wait).
template <int N>
FI_DEVICE void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// wgmma wrappers: T the 16-bit input type, N the tile width (the accumulator holds N / 2
// floats a thread). ss: D[64][N] += A[64][16] B[16][N], A and B from shared-memory
// descriptors (K-major; TB 1: B MN-major, imm-trans-b). rs_t: A from registers (the
// mma.sync m16n8k16 A fragment of each warp's 16 rows), B from a descriptor, MN-major
// (imm-trans-b = 1). scale_d 0: D = A B. The accumulator operand lists are spelled out
// once a width (32, 36, 64 and 128 floats).
template <typename T, int N>
struct mma;

#define FI_WG_R10(t) "%" #t "0, %" #t "1, %" #t "2, %" #t "3, %" #t "4, %" #t "5, %" #t "6, %" #t "7, %" #t "8, %" #t "9"
#define FI_WG_ACC32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, " FI_WG_R10(1) ", " FI_WG_R10(2) ", %30, %31}"
#define FI_WG_ACC64                                                                             \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, " FI_WG_R10(1) ", " FI_WG_R10(2) ", " FI_WG_R10(3) ", " \
  FI_WG_R10(4) ", " FI_WG_R10(5) ", %60, %61, %62, %63}"
#define FI_WG_F8(d, i)                                                                          \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),     \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define FI_WG_OUT32(d) FI_WG_F8(d, 0), FI_WG_F8(d, 8), FI_WG_F8(d, 16), FI_WG_F8(d, 24)
#define FI_WG_OUT64(d) FI_WG_OUT32(d), FI_WG_F8(d, 32), FI_WG_F8(d, 40), FI_WG_F8(d, 48), FI_WG_F8(d, 56)
#define FI_WG_ACC36 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, " FI_WG_R10(1) ", " FI_WG_R10(2) ", %30, %31, %32, %33, %34, %35}"
#define FI_WG_OUT36(d) FI_WG_OUT32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
// CT the C++ type, TY the PTX one; SS / RS the input operands after the accumulators
// (descriptors; A registers and B's descriptor), SSP / RSP the scale_d operand, SST ss's
// imm-trans-b.
#define FI_WG_MMA(CT, TY, N, ACC, OUT, SS, SSP, SST, RS, RSP)                                       \
  template <>                                                                                 \
  struct mma<CT, N> {                                                                         \
    template <int TB = 0>                                                                     \
    static FI_DEVICE void ss(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {     \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SSP ", 0;\n"                             \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " ACC ", " SS  \
                   ", p, 1, 1, 0, " SST ";\n}\n"                                              \
                   : OUT(d)                                                                   \
                   : "l"(da), "l"(db), "r"(scale_d), "n"(TB));                                \
    }                                                                                         \
    static FI_DEVICE void rs_t(float (&d)[N / 2], uint32_t a0, uint32_t a1, uint32_t a2,     \
                               uint32_t a3, uint64_t db, int scale_d) {                       \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " RSP ", 0;\n"                             \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " ACC ", " RS  \
                   ", p, 1, 1, 1;\n}\n"                                                       \
                   : OUT(d)                                                                   \
                   : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(scale_d));              \
    }                                                                                         \
  };
FI_WG_MMA(fi_bf16, "bf16", 64, FI_WG_ACC32, FI_WG_OUT32, "%32, %33", "%34", "%35", "{%32, %33, %34, %35}, %36", "%37")
FI_WG_MMA(fi_half, "f16", 64, FI_WG_ACC32, FI_WG_OUT32, "%32, %33", "%34", "%35", "{%32, %33, %34, %35}, %36", "%37")
// n72: 64 columns and 8 more (prefill_wgmma's row sums through P V, p_smem).
FI_WG_MMA(fi_bf16, "bf16", 72, FI_WG_ACC36, FI_WG_OUT36, "%36, %37", "%38", "%39", "{%36, %37, %38, %39}, %40", "%41")
FI_WG_MMA(fi_half, "f16", 72, FI_WG_ACC36, FI_WG_OUT36, "%36, %37", "%38", "%39", "{%36, %37, %38, %39}, %40", "%41")
FI_WG_MMA(fi_bf16, "bf16", 128, FI_WG_ACC64, FI_WG_OUT64, "%64, %65", "%66", "%67", "{%64, %65, %66, %67}, %68", "%69")
FI_WG_MMA(fi_half, "f16", 128, FI_WG_ACC64, FI_WG_OUT64, "%64, %65", "%66", "%67", "{%64, %65, %66, %67}, %68", "%69")
#define FI_WG_ACC128 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, " \
  "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, " \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, " \
  "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, " \
  "%87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, " \
  "%103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, " \
  "%117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define FI_WG_OUT128(d) FI_WG_OUT64(d), FI_WG_F8(d, 64), FI_WG_F8(d, 72), FI_WG_F8(d, 80), FI_WG_F8(d, 88), \
  FI_WG_F8(d, 96), FI_WG_F8(d, 104), FI_WG_F8(d, 112), FI_WG_F8(d, 120)
// n256 (head_dim 256's P V).
FI_WG_MMA(fi_bf16, "bf16", 256, FI_WG_ACC128, FI_WG_OUT128, "%128, %129", "%130", "%131", "{%128, %129, %130, %131}, %132", "%133")
FI_WG_MMA(fi_half, "f16", 256, FI_WG_ACC128, FI_WG_OUT128, "%128, %129", "%130", "%131", "{%128, %129, %130, %131}, %132", "%133")

}  // namespace wg
}  // namespace fi
