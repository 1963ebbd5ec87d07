// prefill_wgmma_unit.cuh: what the phases of the wgmma prefill kernel (prefill_wgmma.cuh)
// share: its compile-time shape and shared-memory layout, the block (this thread's place,
// the mbarriers), a work unit (its rows, the KV ranges they attend, its tiles' token
// offsets and stages) and a consumer's running state.
#pragma once
#include "mma.cuh"
#include "sm90.cuh"
#include "prefill_item.cuh"

// Three consumers' setmaxnreg split (3 x 152 + 56 = 4 x 128): no spills without
// the ping-pong; with it (128-token tiles, P through shared memory, p_smem) 8 bytes.
#ifndef FI_WG3_PROD
#define FI_WG3_PROD 56
#define FI_WG3_CONS 152
#endif
// The descriptor encodings of the K-major (Q, K, P) and MN-major (V) tiles: kdesc's and
// vdesc's mode (sm90.cuh); 0 passes every GPU test, the others are for lab/gpu/wgmma_attn.
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

// The kernel's template parameters (prefill_wgmma) and what follows from them.
template <typename T_, int D_, int KT_, int NWG_, int SINGLE_, int OV_, int WS_, int NS_, int CAP_>
struct shape {
  typedef T_ T;
  typedef dec::w16<T_> W;
  // (enumerators, not static members: those would each leave a global in the binary)
  enum : int { D = D_, KT = KT_, NWG = NWG_, SINGLE = SINGLE_, OV = OV_, WS = WS_, NS = NS_, CAP = CAP_ };
  // ping-pong: 2 consumers take turns; 3 (head_dim 64) a round robin, as FA3's hdim-64 shape
  enum : bool { PP = WS == 2 && NWG >= 2 };
  // THREADS: the threads that load (all, or the producer warpgroup alone)
  enum : int { THREADS = WS ? 128 : NWG * 128, QT = 64 * NWG, CH = D / 8 };
  enum : uint32_t { QWG_BYTES = 64 * D * 2, Q_BYTES = NWG * QWG_BYTES, KV_BYTES = KT * D * 2 };
  enum : uint32_t { QREG = (WS ? 2 : 1) * Q_BYTES };  // the Q buffers (two with a producer)
  enum : bool { PS = p_smem<KT, NWG, NS>::on };
  enum : uint32_t { PREG = p_smem<KT, NWG, NS>::bytes };  // P's tiles after the K / V stages
  // O's width: with PS, P V also multiplies P by 8 columns of ones, so that the tensor
  // cores add up each row's P (the softmax's 64 FADD a tile a thread, at head_dim 64)
  enum : int { ON = PS ? D + 8 : D };
  static_assert(!PS || FI_WG_VDESC == 0, "the ones' descriptor assumes FI_WG_VDESC 0");
  static_assert(D == 64 || D == 128 || D == 256, "head_dim 64, 128 or 256");
  static_assert(KT == 64 || (KT == 128 && D <= 128), "kv tile 64 or 128 (64 at head_dim 256)");
  static_assert(SINGLE || QT <= FI_PREFILL_SLOT_ROWS, "partial slots hold 192 rows");
  static_assert(NWG <= 2 || (D == 64 && WS), "three consumers: head_dim 64 with a producer (152 registers a consumer)");
  static_assert(!WS || OV, "the producer feeds the overlapped loop");
  static_assert(NS == 2 || (WS && NS >= 2 && NS <= 4), "more than two stages need the producer");
  static_assert(KT <= THREADS, "one offset table row a thread");
};

// The dynamic shared memory (the kernel's one allocation; used from its first 1024-byte
// boundary).
extern __shared__ __align__(1024) uint8_t wg_smem[];

// The block: where its shared memory is, [Q buffers][K / V stages][P tiles][2048 bytes of
// ones] (p_smem), three tables of KT token offsets (int64), the mbarriers, the unit slots;
// and this thread's place in it.
template <class S>
struct block {
  uint32_t sbase, ones_base, bars;
  // tid, lane; wgi: the warpgroup (NWG: the producer); wwarp: the warp in it; g, c: lane / 4
  // and lane % 4 (an mma fragment's row and column pair); lt: the index among the loading
  // threads (producer: 0..127); G: the group (q heads a KV head)
  int tid, lane, wgi, wwarp, g, c, lt, G;

  FI_DEVICE explicit block(const fi_prefill_kparams &p) {
    sbase = (smem_addr(wg_smem) + 1023u) & ~1023u;
    ones_base = sbase + S::QREG + 2 * S::NS * S::KV_BYTES + S::NWG * 64 * S::KT * 2;  // PS only
    tid = threadIdx.x;
    lane = tid & 31;
    // the warpgroup index through a shuffle: warp-uniform to ptxas (prefill_wgmma.cuh)
    wgi = __shfl_sync(0xffffffffu, tid >> 7, 0);
    wwarp = (tid >> 5) & 3;
    g = lane >> 2;
    c = lane & 3;
    lt = S::WS ? tid - S::NWG * 128 : tid;
    G = p.group;
    bars = sbase + S::QREG + 2 * S::NS * S::KV_BYTES + S::PREG + 3 * S::KT * 8;
  }

  // ---- warp specialization: mbarriers after the offset tables ----
  // bar_q(i): Q buffer i landed and its unit published (128 producer arrivals and
  // thread 0's for slot_u[i]); full_k/full_v(b): K / V of stage b
  // landed (128); empty_k/empty_v(b): every consumer warp is done reading it (4 NWG);
  // empty_q(i): every consumer thread is done with it (128 NWG: its unit's products and
  // the output staged there, prefill_wgmma_epilogue.cuh). Stages and Q buffers alternate
  // over the block's whole sequence of tiles and of work units, so the phases carry from
  // one unit to the next.
  FI_DEVICE uint32_t bar_q(int i) const { return bars + 8 * i; }
  FI_DEVICE uint32_t full_k(int b) const { return bars + 16 + 8 * b; }
  FI_DEVICE uint32_t full_v(int b) const { return bars + 16 + 8 * S::NS + 8 * b; }
  FI_DEVICE uint32_t empty_k(int b) const { return bars + 16 + 16 * S::NS + 8 * b; }
  FI_DEVICE uint32_t empty_v(int b) const { return bars + 16 + 24 * S::NS + 8 * b; }
  FI_DEVICE uint32_t empty_q(int i) const { return bars + 16 + 32 * S::NS + 8 * i; }
  // Q buffer qi's slice of this warpgroup; K / V stage b (K, then V KV_BYTES on).
  FI_DEVICE uint32_t q_slice(int qi) const {
    return sbase + (uint32_t)qi * S::Q_BYTES + (uint32_t)wgi * S::QWG_BYTES;
  }
  FI_DEVICE uint32_t kv_stage(int b) const { return sbase + S::QREG + (uint32_t)b * 2 * S::KV_BYTES; }
  // Arrives once a warp (the empty_k / empty_v counts) when its lanes are done.
  FI_DEVICE void release(uint32_t bar) const {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  }
};

// A work unit as this warpgroup sees it: a copy of the values prefill_wgmma's run_unit
// derives from the unit's work item, for the phases (the work item's rows and KV range, the
// ranges its rows attend, its tiles: their token offsets, stages and phases).
template <class S>
struct unit {
  typedef typename S::T T;
  int item, hkv, qi;  // qi: its Q buffer
  int r0, rows, kv_lo, kv_hi, Lq, Lkv, chunk, nchunks, slot;
  int64_t q_start, kv_base;
  int off, rlast;  // off: the query's position in the KV range (Lkv - Lq); rlast: the last row
  // This warpgroup's rows (wg_rows: any, warpgroup-uniform): every row of the warpgroup
  // attends inside [wg_lo, wg_hi); all of them attend [in_lo, in_hi); this thread's rows
  // h (16 wwarp + g + 8 h) attend [lim_lo[h], lim_hi[h]).
  int wr0;
  bool wg_rows;
  int wrl, wt0, wt1, wg_hi, wg_lo, in_hi, in_lo;
  int lim_lo[2], lim_hi[2];
  int ntiles;
  const T *qb, *kg, *vg;
  int64_t *s_off;    // the three token-offset tables (prefill_wgmma's run_unit)
  bool paged;
  int32_t pg_ahead;  // WS 0: tile t + 2's page id of this thread's table row (read_ahead)
  int tb0;           // the stage sequence's position of tile 0 (stg)

  FI_DEVICE int clampj(int j) const { return j < kv_hi - 1 ? j : kv_hi - 1; }
  FI_DEVICE int32_t page_of(const fi_prefill_kparams &p, int j) const {
    return paged ? p.indices[kv_base + j / p.page_size] : 0;
  }
  FI_DEVICE int64_t tok_off(const fi_prefill_kparams &p, int j, int32_t page) const {
    if (paged) return (int64_t)page * p.kv_stride_page + (int64_t)(j % p.page_size) * p.kv_stride_slot;
    return (kv_base + j) * p.kv_stride_slot;
  }
  // Tile t's stage and the parity of its fill there (WS: the stages continue over the
  // block's units; without a producer every unit starts at stage 0).
  FI_DEVICE int stg(int t) const { return S::NS == 2 ? (tb0 + t) & 1 : (tb0 + t) % S::NS; }
  FI_DEVICE int par(int t) const { return ((tb0 + t) / S::NS) & 1; }
};

// A consumer warpgroup's running state: each row's sum and max (base 2) and O. (The fields
// in this order, and S and P of the tile in flight kept out of it, as prefill_wgmma's
// locals they were: the compiler's passes number their registers in that order, and ptxas
// allocates by it; prefill_wgmma.cuh, the machine code.)
template <class S>
struct acc {
  float dsum[2];
  float m[2];
  float o[S::ON / 2];
  FI_DEVICE void clear() {
    m[0] = m[1] = dec::neg_inf();
    dsum[0] = dsum[1] = 0.0f;
#pragma unroll
    for (int i = 0; i < S::ON / 2; i++) o[i] = 0.0f;
  }
};

}  // namespace wg
}  // namespace fi
