// prefill_wgmma.cuh: prefill attention for Hopper (sm_90a) on wgmma.mma_async, the
// FlashAttention-3 recipe without TMA (paged K/V rows are gathered by cp.async): a block
// is NWG consumer warpgroups over 64 * NWG packed q rows (row r of a request: token r /
// group, query head hkv * group + r % group; prefill_params.h) and one KV head.
//   S = Q K^T: wgmma m64n{KT}k16, A = Q and B = K from shared-memory descriptors, both
//     K-major (head_dim contiguous), 128-byte swizzle; one wgmma per 16 head dims.
//   online softmax in fp32 and base 2 on S's accumulators (warp w of a warpgroup holds
//     rows 16w .. 16w + 15: per n8 block rows lane / 4 and + 8, columns 2 (lane % 4), + 1).
//   O += P V: wgmma m64n{D}k16, A = P from registers (S's accumulators rounded to 16-bit
//     pairs: the mma.sync m16n8k16 A fragment; or, p_smem, from a shared-memory tile as
//     Q's), B = V [KT tokens][D] from a descriptor, MN-major for this product
//     (imm-trans-b = 1), 128-byte swizzle.
// WS 0: all threads load, Q once, then K and V tiles double-buffered through cp.async
// (the next tile loads while this one is computed), a block barrier a tile. WS 1 and 2 (the
// default, with the ping-pong): a producer warpgroup loads, into NS stages (two; three for
// head_dim 64's three consumers with 128-token tiles, four where registered), on mbarriers
// (prefill_wgmma's comment). OV = 1 overlaps a tile's softmax with the
// previous tile's P V (FA3's intra-warpgroup pipelining: S(t) and P V(t - 1) issued
// together, wait_group 1, softmax, wait_group 0); OV = 0 runs the two products in order.
// (Seen in the SASS of ptxas 13.0: it places OV's WARPGROUP.DEPBAR 0 part-way into the
// softmax rather than after it, so the overlap is partial.) Shared memory is dynamic (above 48 KB:
// the launcher opts in): [Q: NWG x 64 x D][K0][V0][K1][V1] (NS stages: up to [K3][V3]), 16-bit elements, [P: NWG x 64 x KT][2048 bytes of ones] (p_smem), then three
// tables of KT token offsets (int64), at a 1024-byte boundary.
//
// Shared-memory tiles: a [R][D] tile is D / 64 "atom columns" of [R][64] (128 bytes a
// row), column a at byte a * R * 128; in each, row r at r * 128 and its 16-byte chunk c
// at ((c ^ (r % 8)) * 16): the 128-byte swizzle (Swizzle<3,4,3>: address bits 4-6 ^=
// bits 7-9), which the hardware applies to absolute addresses, hence the 1024-byte
// alignment (base offset 0).
//
// Descriptors (PTX ISA "Matrix Descriptor Format"): start address >> 4 in bits 0-13,
// leading-dimension byte offset (LBO) >> 4 in bits 16-29, stride-dimension byte offset
// (SBO) >> 4 in bits 32-45, base offset in bits 49-51 (0), swizzle in bits 62-63 (1 =
// 128B). The encodings are selected by FI_WG_KDESC (K-major Q and K tiles) and
// FI_WG_VDESC (MN-major V tile); the defaults (0) pass every GPU test, and the others are
// kept for lab/gpu/wgmma_attn's --kdesc / --vdesc:
//   FI_WG_KDESC 0: LBO 16 (unused for swizzled K-major; CUTLASS writes 1), SBO 1024 (8 rows
//     of 128 bytes): cute make_gmma_desc, Major::K, B128 ((8,n),2):((8,SBO),1).
//   FI_WG_KDESC 1: LBO = the atom-column stride, SBO 1024.   2: LBO 0, SBO 1024.
//   FI_WG_KDESC 3: LBO 1024, SBO 16 (swapped; expected wrong).
//   A k16 step moves the start address by 32 bytes inside an atom column (4 steps), then
//   to the next atom column.
//   FI_WG_VDESC 0: LBO = the atom-column stride (the next 64 N elements), SBO 1024 (the
//     next 8 K rows): cute make_gmma_desc, Major::MN, swizzled: LBO = stride<0,1>, SBO =
//     stride<1,1> of ((64,n),(8,k)).
//   FI_WG_VDESC 1: swapped (LBO 1024, SBO = the atom-column stride).
//   A k16 step (16 tokens) moves the start address by 16 rows = 2048 bytes.
// Each product forms its descriptors once and steps them by adding (bytes >> 4) to the
// 64-bit value: the start-address field cannot carry (shared addresses stay below 2^18),
// and with the warpgroup index warp-uniform (__shfl_sync) ptxas keeps the stepping on the
// uniform datapath. Rebuilt at every step, the 12 descriptors of a head_dim-64 tile cost
// ~130 integer instructions and 48 bytes of spills a consumer.
#pragma once
#include "mma.cuh"
#include "prefill_item.cuh"

// Three consumers' setmaxnreg split (3 x 152 + 56 = 4 x 128): no spills without
// the ping-pong; with it (128-token tiles, P through shared memory, p_smem) 8 bytes.
#ifndef FI_WG3_PROD
#define FI_WG3_PROD 56
#define FI_WG3_CONS 152
#endif
#ifndef FI_WG_KDESC
#define FI_WG_KDESC 0
#endif
// Phase marks for lab/prefill_trace (an nvcc build that defines FI_WG_TRACE and
// fi_wg_mark); nothing otherwise, so the runtime's kernels are unchanged. Placed only where
// no wgmma is in flight (a branch there would serialize it).
#ifdef FI_WG_TRACE
#define FI_WG_MARK(role, seq, slot, val) fi_wg_mark(role, seq, slot, val)
#else
#define FI_WG_MARK(role, seq, slot, val) ((void)(slot))
#endif
#ifndef FI_WG_VDESC
#define FI_WG_VDESC 0
#endif

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

// Byte offset of 16-byte chunk ch of row r in an [R][D] 16-bit tile (layout above).
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
// descriptors (K-major; TB 1: B MN-major, imm-trans-b). rs_t: A from registers (the mma.sync m16n8k16 A fragment of
// each warp's 16 rows), B from a descriptor, MN-major (imm-trans-b = 1). scale_d 0: D =
// A B. The accumulator operand lists are spelled out once, for 32 and 64 floats.
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
// head_dim 64's P V with the row sums as 8 more columns (p_smem's ones).
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
// head_dim 256's P V (m64n256k16).
FI_WG_MMA(fi_bf16, "bf16", 256, FI_WG_ACC128, FI_WG_OUT128, "%128, %129", "%130", "%131", "{%128, %129, %130, %131}, %132", "%133")
FI_WG_MMA(fi_half, "f16", 256, FI_WG_ACC128, FI_WG_OUT128, "%128, %129", "%130", "%131", "{%128, %129, %130, %131}, %132", "%133")

// P through shared memory (FA3's hdim-64 choice, MmaPV_is_RS = false): the three-consumer
// shape with 128-token tiles writes each tile's P [64][KT] per warpgroup to shared memory
// and takes P V's A operand from a descriptor, because P in registers beside S and O
// spilled 164 bytes at 152 registers a consumer and made ptxas serialize every wgmma
// (C7512). Two or three stages (198 KB with three); four leave no room.
// P V there is m64n72: V's 64 columns and 8 of ones (2048 bytes, 16 rows of an atom
// column; the descriptor's LBO reaches them from every k16 step), so O's last 8 columns
// hold each row's sum of P as the tensor cores took it, and the softmax does no sums
// (at head_dim 64 its FADD were 64 of ~380 instructions a tile).
template <int KT, int NWG, int NS>
struct p_smem {
  static constexpr bool on = NWG == 3 && KT == 128 && NS <= 3;
  static constexpr int bytes = on ? NWG * 64 * KT * 2 + 2048 : 0;  // and the ones (below)
};
// The shared memory prefill_wgmma needs (bytes: the tiles, P's where p_smem is on, three
// offset tables, the mbarriers and the unit slot (64 + 32 NS), the 1024-byte alignment
// slack).
template <int D, int KT, int NWG, int WS, int NS = 2>
struct smem_size {
  static constexpr int value = ((WS ? 2 : 1) * NWG * 64 * D + 2 * NS * KT * D) * 2 + p_smem<KT, NWG, NS>::bytes +
                               3 * KT * 8 + 64 + 32 * NS + 1024;
};

// T: f16 or bf16; D: head_dim (64, 128 or 256); KT: kv tokens a tile (64 or 128); NWG:
// consumer warpgroups (q tile 64 * NWG rows; 3 at head_dim 64 only, with a producer: more
// softmax in flight where the products are half as long as at 128, FA3's hdim-64 shape); SINGLE: one contiguous (or paged, p.indices) request,
// no plan tables; OV: overlap each tile's softmax with the previous tile's P V (FA3's
// intra-warpgroup pipelining) instead of running the two products in order; WS 1: one
// more warpgroup, the producer, does every load (FA3's warp specialization; needs OV), and
// the consumers wait on mbarriers instead of block-wide barriers; WS 2: also FA3's
// ping-pong of two consumer warpgroups (named barriers make them take turns issuing their
// wgmma, so one's softmax runs while the other's products are on the tensor cores).
// Launch: (NWG + (WS > 0)) * 128 threads, smem_size bytes of dynamic shared memory, grid
// (q tiles, H_kv) or, batch only, (any, 1): then block b takes the work units b, b +
// gridDim.x, ... of the (item, KV head) pairs, the head fastest (a persistent grid of a
// wave: with a producer, the next unit's Q and first K / V tiles load while the consumers
// finish this one, which short items need; two Q buffers for it). No RoPE (ROPE kernels
// stay on prefill.cuh).
// NS: K / V stages (2; more with a producer where shared memory allows: the producer runs
// up to NS - 1 tiles ahead).
template <typename T, int D, int KT, int NWG, int SINGLE, int OV, int WS, int NS = 2, int CAP = 1>
FI_DEVICE void prefill_wgmma(const fi_prefill_kparams &p) {
  // ping-pong: 2 consumers take turns; 3 (head_dim 64) a round robin, as FA3's hdim-64 shape
  constexpr bool PP = WS == 2 && NWG >= 2;
  typedef dec::w16<T> W;
  using dec::neg_inf;
  using dec::ex2;
  using dec::shfl_xor;
  // THREADS: the threads that load (all, or the producer warpgroup alone)
  constexpr int THREADS = WS ? 128 : NWG * 128, QT = 64 * NWG, CH = D / 8;
  constexpr uint32_t QWG_BYTES = 64 * D * 2, Q_BYTES = NWG * QWG_BYTES, KV_BYTES = KT * D * 2;
  constexpr uint32_t QREG = (WS ? 2 : 1) * Q_BYTES;  // the Q buffers (two with a producer)
  constexpr bool PS = p_smem<KT, NWG, NS>::on;
  constexpr uint32_t PREG = p_smem<KT, NWG, NS>::bytes;  // P's tiles after the K / V stages
  // O's width: with PS, P V also multiplies P by 8 columns of ones, so that the tensor
  // cores add up each row's P (the softmax's 64 FADD a tile a thread, at head_dim 64)
  constexpr int ON = PS ? D + 8 : D;
  static_assert(!PS || FI_WG_VDESC == 0, "the ones' descriptor assumes FI_WG_VDESC 0");
  static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");
  static_assert(KT == 64 || (KT == 128 && D <= 128), "kv tile 64 or 128 (64 at head_dim 256)");
  static_assert(SINGLE || QT <= FI_PREFILL_SLOT_ROWS, "partial slots hold 192 rows");
  static_assert(NWG <= 2 || (D == 64 && WS), "three consumers: head_dim 64 with a producer (152 registers a consumer)");
  static_assert(!WS || OV, "the producer feeds the overlapped loop");
  static_assert(NS == 2 || (WS && NS >= 2 && NS <= 4), "more than two stages need the producer");

  extern __shared__ __align__(1024) uint8_t wg_smem[];
  const uint32_t sbase = (smem_addr(wg_smem) + 1023u) & ~1023u;
  const uint32_t ones_base = sbase + QREG + 2 * NS * KV_BYTES + NWG * 64 * KT * 2;  // PS only

  // The warpgroup index through a shuffle: warp-uniform to ptxas (descriptors above).
  const int tid = threadIdx.x, lane = tid & 31, wgi = __shfl_sync(0xffffffffu, tid >> 7, 0), wwarp = (tid >> 5) & 3;
  const int g = lane >> 2, c = lane & 3;
  const int lt = WS ? tid - NWG * 128 : tid;  // index among the loading threads (producer: 0..127)
  const int G = p.group;

  // ---- warp specialization: mbarriers after the offset tables ----
  // bar_q(i): Q buffer i landed and its unit published (128 producer arrivals and
  // thread 0's for slot_u[i]); full_k/full_v(b): K / V of stage b
  // landed (128); empty_k/empty_v(b): every consumer warp is done reading it (4 NWG);
  // empty_q(i): every consumer thread is done with it (128 NWG: its unit's products and
  // the output staged there, below). Stages and Q buffers alternate over the block's whole sequence of tiles and
  // of work units, so the phases carry from one unit to the next.
  const uint32_t bars = sbase + QREG + 2 * NS * KV_BYTES + PREG + 3 * KT * 8;
  auto bar_q = [&](int i) -> uint32_t { return bars + 8 * i; };
  auto full_k = [&](int b) -> uint32_t { return bars + 16 + 8 * b; };
  auto full_v = [&](int b) -> uint32_t { return bars + 16 + 8 * NS + 8 * b; };
  auto empty_k = [&](int b) -> uint32_t { return bars + 16 + 16 * NS + 8 * b; };
  auto empty_v = [&](int b) -> uint32_t { return bars + 16 + 24 * NS + 8 * b; };
  auto empty_q = [&](int i) -> uint32_t { return bars + 16 + 32 * NS + 8 * i; };
  auto release = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  // Ping-pong: warpgroup w issues after named barrier 2 + w, which the previous one (w - 1
  // mod NWG) arrives at once it has issued its own (the last warpgroup arrives first, so
  // warpgroup 0 starts; with three, a round robin 0, 1, 2, 0, ...).
  // (Immediate barrier ids: a register id makes ptxas reserve all sixteen. 1: the producer
  // warpgroup; 2-4: the turns; 5-7: a consumer's P tile stored, p_smem.)
  auto turn_wait = [&]() {
    if (PP && wgi == 0) asm volatile("bar.sync 2, 256;" ::: "memory");
    if (PP && wgi == 1) asm volatile("bar.sync 3, 256;" ::: "memory");
    if (PP && NWG == 3 && wgi == 2) asm volatile("bar.sync 4, 256;" ::: "memory");
  };
  auto turn_pass = [&]() {
    if (PP && wgi == 0) asm volatile("bar.arrive 3, 256;" ::: "memory");
    if (PP && NWG == 2 && wgi == 1) asm volatile("bar.arrive 2, 256;" ::: "memory");
    if (PP && NWG == 3 && wgi == 1) asm volatile("bar.arrive 4, 256;" ::: "memory");
    if (PP && NWG == 3 && wgi == 2) asm volatile("bar.arrive 2, 256;" ::: "memory");
  };
  if (WS) {
    if (tid == 0) {
      for (int b = 0; b < 2; b++) {
        mbar_init(bar_q(b), 129);
        mbar_init(empty_q(b), 128 * NWG);  // every consumer thread (branch-free arrivals)
      }
      for (int b = 0; b < NS; b++) {
        mbar_init(full_k(b), 128);
        mbar_init(full_v(b), 128);
        mbar_init(empty_k(b), 4 * NWG);
        mbar_init(empty_v(b), 4 * NWG);
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if constexpr (PS) {
      if (tid < 128) {  // the ones: 2048 bytes of 1.0 (what V's rows 64-71 read, p_smem)
        const uint32_t one = (uint32_t)W::pack(1.0f, 1.0f);
        asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(ones_base + 16u * (uint32_t)tid), "r"(one) : "memory");
        fence_proxy_async();
      }
    }
    __syncthreads();
  }

  // The work units: one (blockIdx), or on a linear grid the (item, KV head) pairs, unit u
  // = item u % items of head u / items (the order a (items, heads) grid starts its
  // blocks in, which keeps one head's K / V shared in L2). A block's first unit is its
  // blockIdx.x; then, with a producer, the next unit is taken from the plan header's
  // counter (dynamic: the blocks that finish first take more, as the hardware's block
  // scheduler would) or is this one + gridDim.x (header[6] 0: static). The producer's
  // thread 0 takes it and publishes it in slot[i] with Q buffer i (bar_q(i) counts its
  // extra arrival): the consumers read it there; a unit >= units ends the loop. The last
  // block to finish resets the counters for the next launch. Without a producer every
  // thread steps by gridDim.x. tbase: the tiles of the block's units before this one,
  // qn: its units so far (the Q buffers). run_unit(u, prod) does unit u as the producer
  // (prod) or as a consumer; false: no unit (CUDA-graph mode's spare blocks). prod is a
  // literal at each call, so each role's loop holds only its own code (setmaxnreg gives
  // the two different register budgets).
  const bool lin = !SINGLE && gridDim.y == 1;
  const int H = p.num_kv_heads > 0 ? p.num_kv_heads : 1;
  const int nit = lin ? (p.num_items >= 0 ? p.num_items : p.header[0]) : 1, units = lin ? nit * H : 1;
  const bool dyn = WS && lin && p.header[6] != 0;
  const int u0 = lin ? (int)blockIdx.x : 0, ustep = lin ? (int)gridDim.x : 1;
  int32_t *const slot_u = reinterpret_cast<int32_t *>(wg_smem + (bars - smem_addr(wg_smem)) + 32 + 32 * NS);
  int tbase = 0, qn = 0;
  // The staged output of the unit before (consumers, WS): this lane's first shared-memory
  // chunk, the Q buffer's empty barrier, its first row's global address, packed row and
  // head remainder, and the unit's last row (-1: nothing pending).
  uint32_t pend_sm = 0, pend_bar = 0;
  T *pend_ptr = nullptr;
  int pend_rem = 0, pend_r = 0, pend_rlast = -1;
  // Copies it out and releases its Q buffer; branch-free (predicated), so that it can run
  // while a wgmma is in flight (a branch there makes ptxas serialize the wgmma): lane
  // copies chunk lane % CH of rows lane / CH + RS k of the warp's 16; all loads first, then
  // the release (an mbarrier arrive: release semantics, so it waits for the loads, not
  // for these stores), then the stores.
  auto copy_out = [&]() {
    constexpr int RS = 32 / (D / 8), NK = 16 / RS;
    static_assert(!WS || (RS >= 1 && 16 % RS == 0), "output rows a step");
    const int G_ = p.group;
    const int dq = RS / G_, dr = RS - dq * G_;
    const int64_t st = p.out_stride_tok, sh = p.out_stride_head;
    const int64_t step = (int64_t)dq * st + (int64_t)dr * sh, wrap = st - (int64_t)G_ * sh;
    const int ch = lane % (D / 8), xb = lane / (D / 8);  // row lr0 = 16 wwarp + xb: lr0 % 8 = xb
    uint32_t x[NK][4];
#pragma unroll
    for (int k = 0; k < NK; k++)
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(x[k][0]), "=r"(x[k][1]), "=r"(x[k][2]), "=r"(x[k][3])
                   : "r"(pend_sm + (uint32_t)(RS * k * 128) + (uint32_t)(((ch & 7) ^ ((xb + RS * k) & 7)) << 4)));
    asm volatile("{ .reg .pred p; .reg .b64 st; setp.ge.s32 p, %1, 0; @p mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(pend_bar),
                 "r"(pend_rlast)
                 : "memory");
    int r = pend_r, rem = pend_rem;
    T *ptr = pend_ptr;
#pragma unroll
    for (int k = 0; k < NK; k++) {
      asm volatile("{ .reg .pred p; setp.le.s32 p, %5, %6; @p st.global.v4.b32 [%0], {%1, %2, %3, %4}; }" ::"l"(ptr),
                   "r"(x[k][0]), "r"(x[k][1]), "r"(x[k][2]), "r"(x[k][3]), "r"(r), "r"(pend_rlast)
                   : "memory");
      r += RS;
      rem += dr;
      const bool cy = rem >= G_;
      rem = cy ? rem - G_ : rem;
      ptr += cy ? step + wrap : step;
    }
    pend_rlast = -1;
  };
  auto run_unit = [&](int u, const bool prod) -> bool {
    const int item = lin ? u % nit : SINGLE && p.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int hkv = lin ? u / nit : (int)blockIdx.y;
    const int qi = WS ? qn & 1 : 0;
    if (!WS && u != u0) __syncthreads();  // every warp is done with the last unit's tiles

    // ---- the work item ----
    pf::work_item w;
    if (!pf::load_item<SINGLE>(p, item, QT, w)) {
      if (prod) {  // the consumers wait for this unit's Q: an empty one
        mbar_arrive(bar_q(qi));
        if (lt == 0) mbar_arrive(bar_q(qi));
      }
      return false;
    }
    FI_WG_MARK(prod ? NWG : wgi, qn, 1, 0);
    const int r0 = w.r0, rows = w.rows, kv_lo = w.kv_lo, kv_hi = w.kv_hi, Lq = w.Lq, Lkv = w.Lkv;
    const int chunk = w.chunk, nchunks = w.nchunks, slot = w.slot;
    const int64_t q_start = w.q_start, kv_base = w.kv_base;
    const int off = Lkv - Lq;
    const int rlast = r0 + rows - 1;

    // ---- this warpgroup's rows and attended ranges ----
    const int wr0 = r0 + 64 * wgi;
    const bool wg_rows = wr0 <= rlast;  // warpgroup-uniform
    const int wrl = wr0 + 63 < rlast ? wr0 + 63 : rlast;
    const int wt0 = (wg_rows ? wr0 : rlast) / G, wt1 = wrl / G;
    // every row of the warpgroup attends inside [wg_lo, wg_hi); all of them attend [in_lo, in_hi)
    const int wg_hi = p.causal && wt1 + off + 1 < kv_hi ? wt1 + off + 1 : kv_hi;
    const int wg_lo = p.window_left >= 0 && wt0 + off - p.window_left > kv_lo ? wt0 + off - p.window_left : kv_lo;
    const int in_hi = p.causal && wt0 + off + 1 < kv_hi ? wt0 + off + 1 : kv_hi;
    const int in_lo = p.window_left >= 0 && wt1 + off - p.window_left > kv_lo ? wt1 + off - p.window_left : kv_lo;
    int lim_lo[2], lim_hi[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int r = wr0 + 16 * wwarp + g + 8 * h, tq = (r < rlast ? r : rlast) / G;
      lim_hi[h] = p.causal && tq + off + 1 < kv_hi ? tq + off + 1 : kv_hi;
      lim_lo[h] = p.window_left >= 0 && tq + off - p.window_left > kv_lo ? tq + off - p.window_left : kv_lo;
    }

    const int ntiles_ = kv_hi > kv_lo ? (kv_hi - kv_lo + KT - 1) / KT : 0;
    FI_WG_MARK(prod ? NWG : wgi, qn, 59, ntiles_);
    const T *qb = static_cast<const T *>(p.q);
    const T *kg = static_cast<const T *>(p.k) + (int64_t)hkv * p.kv_stride_head;
    const T *vg = static_cast<const T *>(p.v) + (int64_t)hkv * p.kv_stride_head;
    // Token offsets of tile t's rows (tokens past kv_hi repeat the last one: finite values,
    // masked out) in s_off[t % 3], written two tiles ahead from page ids read before the
    // barrier, so no load of a tile waits on the page table (read per 16-byte chunk, with a
    // division, it held paged K/V far below contiguous: docs/prefill.md, figures from
    // comments). Three tables:
    // tile t's is read at iterations t - 1 and t (K, then V, when overlapped).
    int64_t *const s_off =
        reinterpret_cast<int64_t *>(wg_smem + (sbase - smem_addr(wg_smem)) + QREG + 2 * NS * KV_BYTES + PREG);
    const bool paged = p.indices != nullptr;
    auto clampj = [&](int j) { return j < kv_hi - 1 ? j : kv_hi - 1; };
    auto page_of = [&](int j) -> int32_t { return paged ? p.indices[kv_base + j / p.page_size] : 0; };
    auto tok_off = [&](int j, int32_t page) -> int64_t {
      if (paged) return (int64_t)page * p.kv_stride_page + (int64_t)(j % p.page_size) * p.kv_stride_slot;
      return (kv_base + j) * p.kv_stride_slot;
    };
    // Reads tile t + 2's page id of this thread's row (tid < KT) now; note_ahead() stores
    // its offset after the barrier.
    static_assert(KT <= THREADS, "one table row a thread");
    int32_t pg_ahead = 0;
    auto read_ahead = [&](int t) {
      if (lt < KT && t + 2 < ntiles_) pg_ahead = page_of(clampj(kv_lo + (t + 2) * KT + lt));
    };
    auto note_ahead = [&](int t) {
      if (lt < KT && t + 2 < ntiles_) {
        const int j = clampj(kv_lo + (t + 2) * KT + lt);
        s_off[((t + 2) % 3) * KT + lt] = tok_off(j, pg_ahead);
      }
    };
    // Tile t of K (or V) into buffer b (its offsets in table t % 3), by every thread.
    auto load_kv = [&](int b, int t, bool do_k, bool do_v) {
      const uint32_t kd = sbase + QREG + (uint32_t)b * 2 * KV_BYTES, vd = kd + KV_BYTES;
      const int64_t *to = s_off + (t % 3) * KT;
      for (int i = lt; i < KT * CH; i += THREADS) {
        const int row = i / CH, ch = i % CH;
        const int64_t go = to[row] + 8 * ch;
        const uint32_t so = sw128(row, ch, KT);
        if (do_k) cp16(kd + so, kg + go);
        if (do_v) cp16(vd + so, vg + go);
      }
    };
    // WS: the stage of the unit's tile t continues the block's sequence (tbase); without a
    // producer every unit starts at stage 0.
    const int tb0 = WS ? tbase : 0;
    auto stg = [&](int t) -> int { return NS == 2 ? (tb0 + t) & 1 : (tb0 + t) % NS; };
    auto par = [&](int t) -> int { return ((tb0 + t) / NS) & 1; };
    auto kbuf = [&](int t) -> uint32_t { return sbase + QREG + (uint32_t)stg(t) * 2 * KV_BYTES; };
    auto load_q = [&]() {
      for (int i = lt; i < QT * CH; i += THREADS) {
        const int row = i / CH, ch = i % CH;
        const int r = r0 + row < rlast ? r0 + row : rlast;
        const int tq = r / G, h = hkv * G + (r - tq * G);
        cp16(sbase + (uint32_t)qi * Q_BYTES + (uint32_t)(row >> 6) * QWG_BYTES + sw128(row & 63, ch, 64),
             qb + (q_start + tq) * p.q_stride_tok + (int64_t)h * p.q_stride_head + 8 * ch);
      }
    };
    // The producer's Q: thread lt copies chunk lt % CH of rows lt / CH + RS k (RS = 128 /
    // CH rows a step), so the row's swizzle (row % 8) is fixed a thread and each
    // destination an immediate offset; the source row (token r / G, head r % G) advances
    // by RS packed rows a step without a division (once a unit: the unit boundary is on
    // the consumers' path, and the per-chunk form was slow there: docs/prefill.md,
    // figures from comments).
    auto load_q_prod = [&]() {
      constexpr int RS = 128 / CH, NQ = QT / RS;
      static_assert(!WS || (128 % CH == 0 && RS % 8 == 0 && 64 % RS == 0), "Q rows a step");
      const int ch = lt % CH, rbase = lt / CH;
      const uint32_t dst = sbase + (uint32_t)qi * Q_BYTES + (uint32_t)((ch >> 3) * 64 * 128 + rbase * 128) +
                           (uint32_t)(((ch & 7) ^ (rbase & 7)) << 4);
      const int dq = RS / G, dr = RS - dq * G;
      int r = r0 + rbase, tq = r / G, rem = r - tq * G;
      const int tql = rlast / G, reml = rlast - tql * G;
#pragma unroll
      for (int k = 0; k < NQ; k++) {
        const bool in = r <= rlast;
        const T *src = qb + (q_start + (in ? tq : tql)) * p.q_stride_tok +
                       (int64_t)(hkv * G + (in ? rem : reml)) * p.q_stride_head + 8 * ch;
        const int row = RS * k;  // + rbase
        cp16(dst + (uint32_t)((row >> 6) * QWG_BYTES + (row & 63) * 128), src);
        r += RS;
        tq += dq;
        rem += dr;
        if (rem >= G) {
          rem -= G;
          tq++;
        }
      }
    };
    const int ntiles = ntiles_;

    // ---- the producer's part ----
    if (prod) {
      // The producer: Q (once the consumers have released its buffer, two units back),
      // then K(t) and V(t) into their stage once the consumers have released it (two
      // tiles back), each signalled by its cp.async landing. Thread lt copies
      // rows lt / 2 (+ 64) of a tile, the 16-byte chunks 2 j + lt % 2 of each (a lane
      // pair: one 32-byte sector), so a row's address is computed once a tile and each
      // copy is an immediate offset from it; the swizzled column (row % 8 is the same for
      // both rows) once a thread. The page ids of tile t + 1 are read while t loads, tile
      // 0's before Q is issued (their latency then overlaps it).
      constexpr int RP = KT / 64;  // rows a thread a tile
      const int half = lt & 1, rb = lt >> 1;
      int32_t pg[RP];
      if (ntiles > 0) {
#pragma unroll
        for (int q = 0; q < RP; q++) pg[q] = page_of(clampj(kv_lo + rb + 64 * q));
        load_q_prod();
        mbar_arrive_cp(bar_q(qi));
      } else {
        mbar_arrive(bar_q(qi));
      }
      if (lt == 0) mbar_arrive(bar_q(qi));  // slot_u[qi], written before it
      FI_WG_MARK(NWG, qn, 2, ntiles);
      if (ntiles > 0) {
        // chunk 2 j + half of row rb + 64 q: byte (2j + half) / 8 * KT * 128 + row * 128 +
        // (((2j + half) % 8) ^ (rb % 8)) * 16 of the tile
        auto copy_rows = [&](uint32_t dst, const T *src, const int64_t (&ro)[RP]) {
#pragma unroll
          for (int q = 0; q < RP; q++) {
            const T *g = src + ro[q] + 8 * half;
            const uint32_t d = dst + (uint32_t)(rb + 64 * q) * 128;
#pragma unroll
            for (int j = 0; j < CH / 2; j++) {
              const int cc = 2 * j + half;
              cp16(d + (uint32_t)((cc >> 3) * KT * 128) + (uint32_t)(((cc & 7) ^ (rb & 7)) << 4), g + 16 * j);
            }
          }
        };
        for (int t = 0; t < ntiles; t++) {
          const int b = stg(t), ep = par(t) ^ 1;
          int64_t ro[RP];
#pragma unroll
          for (int q = 0; q < RP; q++) {
            ro[q] = tok_off(clampj(kv_lo + t * KT + rb + 64 * q), pg[q]);
            if (t + 1 < ntiles) pg[q] = page_of(clampj(kv_lo + (t + 1) * KT + rb + 64 * q));
          }
          const uint32_t kd = sbase + QREG + (uint32_t)b * 2 * KV_BYTES;
          mbar_wait(empty_k(b), ep);
          FI_WG_MARK(NWG, qn, 3 + (t < 40 ? t : 40), 0);
          copy_rows(kd, kg, ro);
          mbar_arrive_cp(full_k(b));
          mbar_wait(empty_v(b), ep);
          copy_rows(kd + KV_BYTES, vg, ro);
          mbar_arrive_cp(full_v(b));
        }
      }
      FI_WG_MARK(NWG, qn, 50, 0);
      tbase += ntiles;
      return true;
    }

    float o[ON / 2];
    float m[2] = {neg_inf(), neg_inf()}, dsum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < ON / 2; i++) o[i] = 0.0f;

    if (!WS && ntiles > 0) {
      for (int i = tid; i < 2 * KT; i += THREADS) {  // the offsets of tiles 0 and 1
        const int j = clampj(kv_lo + i);
        s_off[i] = tok_off(j, page_of(j));
      }
      __syncthreads();
      load_q();
      load_kv(0, 0, true, !OV);  // OV: V tiles trail K tiles by one iteration
      cp_commit();
    }
    const uint32_t qs = sbase + (uint32_t)qi * Q_BYTES + (uint32_t)wgi * QWG_BYTES;
    // does this warpgroup attend anything in tile t (warpgroup-uniform)
    auto active = [&](int t) -> bool {
      const int j0 = kv_lo + t * KT;
      return wg_rows && j0 < wg_hi && j0 + KT > wg_lo;
    };

    // S = Q K^T of tile t: issued and committed (one group), not waited for.
    float s[KT / 2];
    auto issue_s = [&](int t) {
      const uint64_t da0 = kdesc(qs, 64 * 128, FI_WG_KDESC), db0 = kdesc(kbuf(t), KT * 128, FI_WG_KDESC);
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        const uint64_t da = da0 + (uint64_t)((kk >> 2) * (64 * 128 / 16) + (kk & 3) * 2);
        const uint64_t db = db0 + (uint64_t)((kk >> 2) * (KT * 128 / 16) + (kk & 3) * 2);
        mma<T, KT>::ss(s, da, db, kk > 0);  // scale-d 0 on the first step: S = 0 + ...
      }
      wg_commit();
    };
    // O += P V of tile t (P in pa, or PS: in this warpgroup's P tile, [64][KT] K-major as
    // Q's): issued and committed (one group), not waited for.
    uint32_t pa[KT / 16][4];  // unused (dead) with PS
    const uint32_t ps_base = sbase + QREG + 2 * NS * KV_BYTES + (uint32_t)wgi * (64 * KT * 2);
    // NARROW (a literal): the tile's first KT / 2 tokens only (NAR below).
    auto issue_pv = [&](int t, const bool NARROW) {
      const uint32_t vs = kbuf(t) + KV_BYTES;
      // PS: V's columns 64-71 are the ones, LBO bytes on (the next atom column), so each
      // step moves the start address on and LBO back by the same 2048 bytes
      const uint64_t dv0 = vdesc(vs, PS ? ones_base - vs : KT * 128, FI_WG_VDESC),
                     dp0 = kdesc(ps_base, 64 * 128, FI_WG_KDESC);
#pragma unroll
      for (int kk = 0; kk < (NARROW ? KT / 32 : KT / 16); kk++) {
        const uint64_t dv = dv0 + (uint64_t)(kk * (2048 / 16)) - (PS ? (uint64_t)(kk * (2048 / 16)) << 16 : 0);
        if constexpr (PS)
          mma<T, ON>::template ss<1>(o, dp0 + (uint64_t)((kk >> 2) * (64 * 128 / 16) + (kk & 3) * 2), dv, 1);
        else
          mma<T, D>::rs_t(o, pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], dv, 1);
      }
      wg_commit();
    };
    // Online softmax (base 2) of tile t on s (in place: s becomes P, fp32); m and dsum
    // updated, the factor O must be scaled by returned in alpha. O is not touched.
    // MM: 0 no mask, 1 the mask on every column, 2 decided here (warpgroup-uniform); CAPOK:
    // the soft cap may apply (checked here). With a wgmma in flight across it (the
    // overlapped path) both must be literals deciding everything: ptxas serializes the
    // in-flight wgmma on any branch. (Literals at every call, folded once the lambda is
    // inlined; a generic lambda would make them types, but NVRTC takes those for host code
    // without -default-device.) Without the cap, S stays unscaled: the max is taken on raw
    // scores (sm_scale > 0) and the scale folds into the exponent's FFMA. Two partial maxima
    // and sums a row halve the dependent chains.
    auto softmax = [&](int t, float (&alpha)[2], const int MM, const bool CAPOK) {
      // t made opaque: at the first turn (t == ta, invariant in the unit's loop) ptxas
      // otherwise hoists the whole mask (~650 instructions of bit-packed predicates) to
      // the unit's start, where every unit paid for it, masked or not (docs/prefill.md,
      // figures from comments).
      asm volatile("" : "+r"(t));
      const int j0 = kv_lo + t * KT;
      const bool masked = MM == 1 || (MM == 2 && (j0 < in_lo || j0 + KT > in_hi));
      const bool cap = CAP && CAPOK && p.cap_log2 != 0.0f;
      const float sc = cap ? 1.0f : p.scale_log2;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        // this row's attended columns of the tile, relative to the thread's column 2 c:
        // column 8 nb + e (an immediate) is in iff lo <= 8 nb + e < hi
        const int lo = lim_lo[h] - j0 - 2 * c, hi = lim_hi[h] - j0 - 2 * c;
        float mx2[2] = {neg_inf(), neg_inf()};
#pragma unroll
        for (int nb = 0; nb < KT / 8; nb++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            float x = s[4 * nb + 2 * h + e];
            if (cap) x = p.cap_log2 * tanhf(x * p.cap_pre);
            if (masked) x = 8 * nb + e < lo || 8 * nb + e >= hi ? neg_inf() : x;
            s[4 * nb + 2 * h + e] = x;
            mx2[e] = fmaxf(mx2[e], x);
          }
        float mx = fmaxf(mx2[0], mx2[1]);
        mx = fmaxf(mx, shfl_xor(mx, 1));
        mx = fmaxf(mx, shfl_xor(mx, 2));
        const float mn = fmaxf(m[h], mx * sc), mu = mn == neg_inf() ? 0.0f : mn;
        alpha[h] = ex2(m[h] - mu);
        m[h] = mn;
        float ps[2] = {0.0f, 0.0f};
#pragma unroll
        for (int nb = 0; nb < KT / 8; nb++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const float pv = ex2(fmaf(s[4 * nb + 2 * h + e], sc, -mu));
            s[4 * nb + 2 * h + e] = pv;
            if constexpr (!PS) ps[e] += pv;
          }
        if constexpr (!PS) dsum[h] = dsum[h] * alpha[h] + (ps[0] + ps[1]);
      }
    };
    auto rescale_pack = [&](const float (&alpha)[2]) {
#pragma unroll
      for (int j = 0; j < ON / 8; j++) {
        o[4 * j + 0] *= alpha[0];
        o[4 * j + 1] *= alpha[0];
        o[4 * j + 2] *= alpha[1];
        o[4 * j + 3] *= alpha[1];
      }
      if constexpr (PS) {
        // P into the warpgroup's tile (P V of the tile before has completed: its wait is
        // behind us): per k16 block four 8 x 8 matrices by stmatrix, the A fragment's
        // order (rows 0-7 and 8-15 of chunk 2 kk, then of chunk 2 kk + 1); lane l gives
        // the row address of matrix l / 8, row l % 8.
        const int pr = 16 * wwarp + ((lane >> 3) & 1) * 8 + (lane & 7), hb = lane >> 4;
        const uint32_t prow = ps_base + (uint32_t)pr * 128;
#pragma unroll
        for (int kk = 0; kk < KT / 16; kk++) {
          const uint32_t a = prow + (uint32_t)(kk >> 2) * (64 * 128) + (uint32_t)((((2 * (kk & 3)) | hb) ^ (pr & 7)) << 4);
          asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(a),
                       "r"(W::pack(s[8 * kk + 0], s[8 * kk + 1])), "r"(W::pack(s[8 * kk + 2], s[8 * kk + 3])),
                       "r"(W::pack(s[8 * kk + 4], s[8 * kk + 5])), "r"(W::pack(s[8 * kk + 6], s[8 * kk + 7]))
                       : "memory");
        }
        // visible to the async proxy, and every warp's rows stored, before P V is issued
        fence_proxy_async();
        if (wgi == 0) asm volatile("bar.sync 5, 128;" ::: "memory");
        if (wgi == 1) asm volatile("bar.sync 6, 128;" ::: "memory");
        if (wgi == 2) asm volatile("bar.sync 7, 128;" ::: "memory");
      } else {
#pragma unroll
        for (int kk = 0; kk < KT / 16; kk++) {
          pa[kk][0] = W::pack(s[8 * kk + 0], s[8 * kk + 1]);
          pa[kk][1] = W::pack(s[8 * kk + 2], s[8 * kk + 3]);
          pa[kk][2] = W::pack(s[8 * kk + 4], s[8 * kk + 5]);
          pa[kk][3] = W::pack(s[8 * kk + 6], s[8 * kk + 7]);
        }
      }
    };

    if (!OV) {
      // In order: S(t), wait, softmax, O *= alpha, O += P V(t), wait. K and V of tile t + 1
      // load during tile t.
      for (int t = 0; t < ntiles; t++) {
        read_ahead(t);
        cp_wait<0>();  // tile t (and Q)
        fence_proxy_async();
        __syncthreads();   // ... visible to all; every warpgroup is done with tile t - 1
        if (t + 1 < ntiles) load_kv((t + 1) & 1, t + 1, true, true);
        cp_commit();
        note_ahead(t);
        if (!active(t)) continue;
        fence_regs(o);
        wg_fence();
        issue_s(t);
        wg_wait<0>();
        fence_regs(s);
        float alpha[2];
        softmax(t, alpha, 2, true);
        rescale_pack(alpha);
        fence_regs(o);
        wg_fence();
        issue_pv(t, false);
        wg_wait<0>();
        fence_regs(o);
      }
    } else {
      // Overlapped (FA3's intra-warpgroup pipelining): iteration t issues S(t) and then
      // O += P V(t - 1), and runs tile t's softmax while P V(t - 1) is in flight; O is
      // rescaled once P V(t - 1) has landed. K of tile t + 1 and V of tile t load during
      // iteration t; iteration ntiles only finishes P V(ntiles - 1). The warpgroup's
      // active tiles are [ta, tb): ta runs S alone, tb P V alone.
      const int ta = wg_lo > kv_lo ? (wg_lo - kv_lo) / KT : 0;
      int tb = wg_rows ? (wg_hi - kv_lo + KT - 1) / KT : 0;
      if (tb > ntiles) tb = ntiles;
      const bool bl_ok = !CAP || p.cap_log2 == 0.0f;
      // NAR: the warpgroup attends only the first half of its last tile (causal, where the
      // diagonal ends early in the tile: half of 64 x 1024's last tiles at 32 / 8; or a
      // request's or chunk's short tail), so that tile's P V, which runs alone at the
      // unit's end, takes half the k16 steps (P is 0 past them: that tile is always
      // softmaxed with the mask). Warpgroup-uniform. (Narrowing S and the softmax as well
      // gained nothing more at head_dim 128 and made ptxas serialize head_dim 64's wgmma:
      // branch h15nar.)
      const bool NAR = KT == 128 && !CAP && ta < tb && wg_hi - (kv_lo + (tb - 1) * KT) <= KT / 2;
      FI_WG_MARK(wgi, qn, 55, ntiles);
      FI_WG_MARK(wgi, qn, 56, u);
      FI_WG_MARK(wgi, qn, 57, ta);
      FI_WG_MARK(wgi, qn, 58, tb);
      FI_WG_MARK(wgi, qn, 60, 0);
      // WS: K(t) and V(t - 1) are waited for at the top, and each stage is released once
      // the wgmma that read it has completed (at the top when this warpgroup skips it).
      for (int t = 0; t <= ntiles; t++) {
        if (!WS) {
          read_ahead(t);
          cp_wait<0>();  // K(t), V(t - 1) (and Q)
          fence_proxy_async();
          __syncthreads();  // ... visible to all; all of iteration t - 1's wgmma done
          if (t + 1 < ntiles) load_kv((t + 1) & 1, t + 1, true, false);
          if (t < ntiles) load_kv(t & 1, t, false, true);
          cp_commit();
          note_ahead(t);
        } else {
          const bool act = ta < tb, useK = act && ta <= t && t < tb, useV = act && ta < t && t <= tb;
          if (t < ntiles) mbar_wait(full_k(stg(t)), par(t));
          if (t >= 1) mbar_wait(full_v(stg(t - 1)), par(t - 1));
          fence_proxy_async();  // the producer's cp.async writes, before wgmma reads them
          if (t < ntiles && !useK) release(empty_k(stg(t)));
          if (t >= 1 && !useV) release(empty_v(stg(t - 1)));
        }
        if (t < ta || t > tb || ta >= tb) {  // warpgroup-uniform
          turn_wait();
          turn_pass();
          continue;
        }
        float alpha[2];
        const int mt = t < 16 ? t : 16;
        FI_WG_MARK(wgi, qn, 2 + 3 * mt, 0);
        turn_wait();
        FI_WG_MARK(wgi, qn, 3 + 3 * mt, 0);
        if (t == ta) {
          fence_regs(o);
          wg_fence();
          issue_s(t);
          turn_pass();
          if (WS) copy_out();  // the unit before's output, while S(ta) runs
          wg_wait<0>();
          if (WS) release(empty_k(stg(t)));
          fence_regs(s);
          softmax(t, alpha, 2, true);
          rescale_pack(alpha);
        } else if (t < tb && bl_ok) {
          // S(t) and P V(t - 1) in flight, then tile t's softmax while P V(t - 1) runs. The
          // two copies differ in the mask, chosen here while no wgmma is in flight.
          auto overlapped = [&](const int MM) {
            fence_regs(o);
            fence_regs(s);
            wg_fence();
            issue_s(t);
            issue_pv(t - 1, false);
            turn_pass();
            wg_wait<1>();  // S(t); P V(t - 1) may still run
            if (WS) release(empty_k(stg(t)));
            fence_regs(s);
            softmax(t, alpha, MM, false);
            wg_wait<0>();
            if (WS) release(empty_v(stg(t - 1)));
            fence_regs(o);
          };
          const int j0 = kv_lo + t * KT;
          if (j0 < in_lo || j0 + KT > in_hi)
            overlapped(1);
          else
            overlapped(0);
          rescale_pack(alpha);
        } else if (t < tb) {  // soft cap: in order
          fence_regs(o);
          wg_fence();
          issue_pv(t - 1, false);
          wg_wait<0>();
          if (WS) release(empty_v(stg(t - 1)));
          fence_regs(o);
          fence_regs(s);
          wg_fence();
          issue_s(t);
          wg_wait<0>();
          turn_pass();
          if (WS) release(empty_k(stg(t)));
          fence_regs(s);
          softmax(t, alpha, 2, true);
          rescale_pack(alpha);
        } else {
          fence_regs(o);
          wg_fence();
          if (NAR)
            issue_pv(t - 1, true);
          else
            issue_pv(t - 1, false);
          turn_pass();
          wg_wait<0>();
          if (WS) release(empty_v(stg(t - 1)));
          fence_regs(o);
        }
        FI_WG_MARK(wgi, qn, 4 + 3 * mt, 0);
      }
    }
    cp_wait<0>();
    FI_WG_MARK(wgi, qn, 53, 0);

    // ---- out / lse, or this chunk's partial (as prefill.cuh) ----
    // With a producer and no split, O goes through this warpgroup's slice of the unit's Q
    // buffer (free: every wgmma of the unit has completed), so that each warp stores its
    // 16 rows with 16-byte stores, a row's bytes by consecutive lanes, instead of 4-byte
    // pieces of 8 rows an instruction (which held a unit's epilogue long: docs/prefill.md,
    // ninth session, and figures from comments); the
    // buffer goes back to the producer (the unit after next) once copied out.
    if (WS && pend_rlast >= 0) copy_out();  // this warpgroup had no turn in this unit
    const bool staged = WS && nchunks <= 1;
    const uint32_t qslice = sbase + (uint32_t)qi * Q_BYTES + (uint32_t)wgi * QWG_BYTES;
    const float LN2 = 0.6931471805599453f;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      if constexpr (PS) {
        dsum[h] = o[D / 2 + 2 * h];  // the row's sum, from the ones' columns
      } else {
        dsum[h] += shfl_xor(dsum[h], 1);
        dsum[h] += shfl_xor(dsum[h], 2);
      }
      const int rt = 64 * wgi + 16 * wwarp + g + 8 * h;  // row in the tile
      if (rt >= rows) continue;
      const int r = r0 + rt, tq = r / G, head = hkv * G + (r - tq * G);
      // (the fast division: ds >= 1 whenever a column is attended, and an IEEE one costs
      // a slow-path branch in this once-a-unit code)
      const float ds = dsum[h], inv = ds > 0.0f ? __fdividef(p.v_scale, ds) : 0.0f;
      if (staged) {
        // row lr of the slice, 16-byte chunk j: the Q tile's swizzled layout (conflict-free:
        // the 8 rows of an instruction land in 8 different 16-byte columns)
        const int lr = 16 * wwarp + g + 8 * h;
#pragma unroll
        for (int j = 0; j < D / 8; j++)
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(qslice + sw128(lr, j, 64) + 4 * c),
                       "r"(W::pack(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv))
                       : "memory");
      } else if (nchunks <= 1) {
        T *orow = static_cast<T *>(p.out) + (q_start + tq) * p.out_stride_tok + (int64_t)head * p.out_stride_head;
#pragma unroll
        for (int j = 0; j < D / 8; j++)
          *reinterpret_cast<uint32_t *>(orow + 8 * j + 2 * c) = W::pack(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
      }
      if (nchunks <= 1) {
        if (p.lse && c == 0)
          p.lse[(q_start + tq) * p.lse_stride_tok + (int64_t)head * p.lse_stride_head] =
              ds > 0.0f ? (m[h] + log2f(ds)) * LN2 : neg_inf();
      } else {
        const int64_t prow = ((int64_t)(slot + chunk) * p.num_kv_heads + hkv) * FI_PREFILL_SLOT_ROWS + rt;
        float *po = p.partial_o + prow * D;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
          fi_vec<float, 2> y;
          y.v[0] = o[4 * j + 2 * h] * inv;
          y.v[1] = o[4 * j + 2 * h + 1] * inv;
          *reinterpret_cast<fi_vec<float, 2> *>(po + 8 * j + 2 * c) = y;
        }
        if (c == 0) p.partial_lse[prow] = ds > 0.0f ? m[h] + log2f(ds) : neg_inf();
      }
      if (h == 0) FI_WG_MARK(wgi, qn, 62, 0);
    }
    if (staged) {
      // Copied out by copy_out during this warpgroup's next unit's first product (or at the
      // end): this lane's rows lr0 + RS k (lr0 = 16 wwarp + lane / CH, RS = 32 / CH), chunk
      // lane % CH.
      __syncwarp();
      const int ch = lane % CH, lr0 = 16 * wwarp + lane / CH;
      const int r = r0 + 64 * wgi + lr0, tq = r / G, rem = r - tq * G;
      pend_sm = qslice + (uint32_t)((ch >> 3) * 64 * 128 + lr0 * 128);
      pend_bar = empty_q(qi);
      pend_ptr = static_cast<T *>(p.out) + (q_start + tq) * p.out_stride_tok + (int64_t)(hkv * G + rem) * p.out_stride_head +
                 8 * ch;
      pend_rem = rem;
      pend_r = r;
      pend_rlast = rlast;
    } else if (WS) {
      // every wgmma of the unit has completed: the Q buffer is free (every thread arrives)
      mbar_arrive(empty_q(qi));
    }
    FI_WG_MARK(wgi, qn, 54, 0);
    tbase += ntiles;
    return true;
  };  // run_unit

  if (WS && wgi == NWG) {
    // Registers to the consumers: 2 x 224 + 56 is the 3 x 168 of the launch bound; with
    // one consumer, two blocks an SM: 208 + 48 is 2 x 128; three consumers (head_dim 64):
    // 3 x 152 + 56 is 4 x 128. (At 40 the producer's loop over units spilled 12-36 bytes;
    // 224, 208 and 152 hold the consumers' loops without spills, ptxas -v, except three
    // consumers with 128-token tiles: 40-48 bytes, one reload a tile.)
    reg_dealloc<(NWG == 3 ? FI_WG3_PROD : NWG == 2 ? 56 : 48)>();
    int32_t *const ctr = const_cast<int32_t *>(p.header) + 4;  // [4] next unit, [5] blocks done
    for (int u = u0;; qn++) {
      const int qi = qn & 1;
      mbar_wait(empty_q(qi), ((qn >> 1) & 1) ^ 1);
      if (lt == 0) slot_u[qi] = u;
      FI_WG_MARK(NWG, qn, 0, 0);
      if (u >= units) {  // the end, for the consumers
        mbar_arrive(bar_q(qi));
        if (lt == 0) mbar_arrive(bar_q(qi));
        break;
      }
      if (!run_unit(u, true)) break;
      FI_WG_MARK(NWG, qn, 51, 0);
      if (!dyn) {
        u += ustep;
        continue;
      }
      // thread 0 takes the next unit; the producer warpgroup's named barrier 1 shares it
      if (lt == 0) slot_u[2] = ustep + atomicAdd(ctr, 1);
      asm volatile("bar.sync 1, 128;" ::: "memory");
      u = slot_u[2];
      asm volatile("bar.sync 1, 128;" ::: "memory");  // read by all before the next write
    }
    if (dyn && lt == 0 && atomicAdd(ctr + 1, 1) == ustep - 1) {  // every block is past its last take
      atomicExch(ctr, 0);
      atomicExch(ctr + 1, 0);
    }
    cp_wait<0>();
    return;
  }
  if (WS) {
    if (NWG == 3)
      reg_alloc<FI_WG3_CONS>();
    else if (NWG == 2)
      reg_alloc<224>();
    else
      reg_alloc<208>();
  }
  if (PP && wgi == NWG - 1) turn_pass();
  for (int u = u0;; qn++) {
    if (WS) {
      mbar_wait(bar_q(qn & 1), (qn >> 1) & 1);
      u = *reinterpret_cast<volatile int32_t *>(slot_u + (qn & 1));
    }
    FI_WG_MARK(wgi, qn, 0, 0);
    if (u >= units || !run_unit(u, false)) break;
    if (!WS) u += ustep;
  }
  if (WS && pend_rlast >= 0) copy_out();  // the last unit's output
}

// fi-bench's wgmma probe: each warpgroup issues iters rounds of four bf16 m64n128k16
// wgmma (A [64][64] and B [128][64] in shared memory, zeros; two accumulators), at most
// two rounds in flight: the tensor cores' rate with nothing else in the loop. 256
// threads, WG_PROBE_SMEM bytes of dynamic shared memory.
#define WG_PROBE_SMEM (3 * 8192 + 1024)
FI_DEVICE void wgmma_probe(const fi_mma_probe_params &p) {
  extern __shared__ __align__(1024) uint8_t wg_smem[];
  const uint32_t base = smem_addr(wg_smem), sb = (base + 1023u) & ~1023u;
  fi_vec<uint32_t, 4> *z = reinterpret_cast<fi_vec<uint32_t, 4> *>(wg_smem + (sb - base));
  for (int i = threadIdx.x; i < 3 * 8192 / 16; i += blockDim.x) z[i].v[0] = z[i].v[1] = z[i].v[2] = z[i].v[3] = 0u;
  fence_proxy_async();
  __syncthreads();
  float d0[64], d1[64];
#pragma unroll
  for (int i = 0; i < 64; i++) d0[i] = d1[i] = 0.0f;
  const uint64_t da = kdesc(sb, 64 * 128, FI_WG_KDESC), db = kdesc(sb + 8192, 128 * 128, FI_WG_KDESC);
  fence_regs(d0);
  fence_regs(d1);
  wg_fence();
  for (int i = 0; i < p.iters; i++) {
    mma<fi_bf16, 128>::ss(d0, da, db, 1);
    mma<fi_bf16, 128>::ss(d1, da + 2, db + 2, 1);  // the next k16 step: 32 bytes on
    mma<fi_bf16, 128>::ss(d0, da + 4, db + 4, 1);
    mma<fi_bf16, 128>::ss(d1, da + 6, db + 6, 1);
    wg_commit();
    wg_wait<1>();
  }
  wg_wait<0>();
  fence_regs(d0);
  fence_regs(d1);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 64; i++) sum += d0[i] + d1[i];
  if (sum == p.never) p.sink[0] = sum;
}

}  // namespace wg
}  // namespace fi
