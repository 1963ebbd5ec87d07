// sampling_row.cuh: a row of the sampling kernels as every pass sees it: the layout, the
// element keys and weights, the shared memory, the walk of a CTA over its tiles (with the
// tile-key skips), the row's maximum and sum, the sampling pass and the output pass.
//
// Layout of a row, fixed whatever the launch geometry: tiles of TILE = 128 * PIECES
// elements; in a tile, "lane" l (0..31) owns the group of GROUP = 4 * PIECES elements
// tile * TILE + j * 128 + l * 4 + q (j < PIECES, q < 4). A logical warp of 32 threads
// loads a tile at once (coalesced: PIECES x 512 contiguous bytes for float32).
//
// The first pass also records each tile's largest key; a later pass that only counts or
// draws keys above some floor skips the tiles below it (the late rounds of a search, the
// sampling pass after top-k or min-p: most tiles of a row hold none of the kept tokens).
#pragma once
#include "fi_params.h"
#include "philox.cuh"
#include "reduce.cuh"
#include "sampling_params.h"

namespace fi {
namespace smp {

using namespace red;  // shuffles, block and cluster reductions, cluster addresses
using rng::philox;
using rng::u4;

constexpr int PIECES = 4;           // 4-element pieces per group
constexpr int GROUP = 4 * PIECES;   // elements per group (one lane's share of a tile)
constexpr int TILE = 128 * PIECES;  // elements per tile
constexpr int TCAP = 1024;          // tiles per CTA whose largest key is recorded (skips)
constexpr int KDRAW = 4;            // top-p candidates drawn before the exact search

FI_DEVICE float neg_inf() { return bits_to_float(0xff800000u); }

// ---- element keys and weights ----
// Probabilities: w = max(x, 0) (NaN: 0); key = w's bits (non-negative floats order as uints).
// Logits: NaN is -inf; key = the sign-flipped bits (every float orders as a uint).
template <bool LOGITS>
FI_DEVICE uint32_t key_of(float x) {
  if (LOGITS) {
    uint32_t b = float_to_bits(x);
    if (x != x) b = 0xff800000u;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  }
  return x > 0.0f ? float_to_bits(x) : 0u;
}
FI_DEVICE float prob_w(float x) { return x > 0.0f ? x : 0.0f; }
// Fixed-point mass of a weight (2^-36 units; exact, order-independent sums).
FI_DEVICE u64 fx(float w) { return __float2ull_rn(w * 68719476736.0f); }

// The group of `lane` in `tile` as 32 floats (in element order j-major, q-minor); past
// the row's end: 0 (probabilities) or -inf (logits), which no selection counts as more
// than the smallest real value and no pass gives any weight.
template <typename T, int VEC, bool LOGITS>
FI_DEVICE void load_group(const T *row, int vocab, int tile, int lane, float (&v)[GROUP]) {
  const float pad = LOGITS ? neg_inf() : 0.0f;
  const int base = tile * TILE + lane * 4;
  if (VEC == 4) {
    fi_vec<T, 4> x[PIECES];
#pragma unroll
    for (int j = 0; j < PIECES; j++)
      if (base + j * 128 < vocab) x[j] = fi_load<T, 4>(row + base + j * 128);
#pragma unroll
    for (int j = 0; j < PIECES; j++)
#pragma unroll
      for (int q = 0; q < 4; q++)
        v[4 * j + q] = base + j * 128 < vocab ? fi_to_float(x[j].v[q]) : pad;
  } else {
#pragma unroll
    for (int j = 0; j < PIECES; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) {
        const int e = base + j * 128 + q;
        v[4 * j + q] = e < vocab ? fi_to_float(row[e]) : pad;
      }
  }
}

// Stores 4 consecutive outputs at element e of an output row (those before vocab).
template <typename O, int VEC>
FI_DEVICE void store4(O *row, int vocab, int e, const float (&y)[4]) {
  if (VEC == 4) {
    if (e < vocab) {
      fi_vec<O, 4> o;
#pragma unroll
      for (int q = 0; q < 4; q++) o.v[q] = fi_from_float<O>(y[q]);
      fi_store<O, 4>(row + e, o);
    }
  } else {
#pragma unroll
    for (int q = 0; q < 4; q++)
      if (e + q < vocab) row[e + q] = fi_from_float<O>(y[q]);
  }
}

template <int THREADS, int C>
struct SelSmem {
  // A bin's measure is hi * 2^32 + lo: 32-bit shared atomics are native (64-bit ones are a
  // compare-and-swap loop, hopeless under contention); a wrap of lo is carried into hi by
  // the thread whose add wrapped it, so the sums stay exact and order-independent.
  uint32_t lo[4096];
  uint32_t hi[4096];
  u64 merged[C > 1 ? 4096 / C : 1];
  u64 scr[THREADS / FI_WARP > 0 ? THREADS / FI_WARP : 1];
  u64 slice_tot;
  u64 res_above, res_need, res_total, res_bin;
  uint32_t res_digit, res_slice;
};

struct RedSmem {
  uint32_t k[32];
  uint32_t kslot[2];
  u64 u[32];
  float f[32];
  float f2[32];
  u64 uslot[2];
  float fslot[2];
  float mslot[2], sslot[2];
  // top-p by rejection: the cluster prefix of the CTA masses, the candidates (written by
  // the CTA that drew each, into every CTA), and the masses above them.
  u64 pslot, pres[2];
  uint32_t ckey[KDRAW];
  int32_t cidx[KDRAW];
  u64 aw[32][KDRAW], aslot[KDRAW], ares[KDRAW];
  float af[32][KDRAW], afslot[KDRAW], afres[KDRAW];  // the same in float (TopP::float_test)
};

// The row a CTA works on, and all the state the passes share: the arguments, the shared
// memory, the CTA's tiles [t0, t1), the tile keys and the key range. The pieces (Search,
// TopK, TopP, MinP, draw, write) are functions taking the row by reference.
template <int OP, typename T, int VEC, int THREADS, int C, int SEL>
struct Row {
  static constexpr bool LOGITS =
      OP == FI_SMP_SOFTMAX || OP == FI_SMP_TOPK_TOPP_LOGITS || OP == FI_SMP_TOPK_MASK;
  static constexpr int LW = THREADS / 32;  // logical warps (tiles in flight) per CTA
  static_assert(LW >= KDRAW && LW <= 32, "one logical warp per top-p draw; RedSmem::aw");
  // The template arguments, for the pieces written over any row type.
  typedef T Elem;
  static constexpr int Op = OP, Vec = VEC, Threads = THREADS, Cluster = C, Sel = SEL;

  const fi_sampling_params &p;
  RedSmem &rs;
  SelSmem<THREADS, C> *sel;  // the selection ops only
  // The largest key of each of the CTA's first TCAP tiles, written by the first pass over
  // the row (NULL: the one-pass ops). A later pass that only counts keys >= some floor
  // skips the tiles whose largest key is below it: at the end of a search (or for the
  // handful of tokens a top-k or min-p set keeps) most tiles of a row hold none.
  uint32_t *tkey;
  bool have_tkeys_ = false;
  int row, rank, t0, t1, lw, lane;
  const T *in;
  // The key range of the row (SEL 1), found by the first pass that needs it (Search).
  uint32_t kmin_ = 0, kmax_ = 0;
  bool have_range_ = false;

  FI_DEVICE Row(const fi_sampling_params &pp, RedSmem &r, SelSmem<THREADS, C> *s, uint32_t *tk)
      : p(pp), rs(r), sel(s), tkey(tk) {
    row = (int)(blockIdx.x / C);
    rank = (int)(blockIdx.x % C);
    const int ntiles = (p.vocab + TILE - 1) / TILE;
    t0 = (int)((int64_t)rank * ntiles / C);
    t1 = (int)((int64_t)(rank + 1) * ntiles / C);
    lw = (int)threadIdx.x / 32;
    lane = (int)threadIdx.x % 32;
    in = static_cast<const T *>(p.input) + (int64_t)row * p.in_stride;
  }

  // f(tile, values) for the CTA's tiles that may hold a key >= floor (every tile on the
  // first pass, which records the tile keys when there is room for them). A tile is a
  // logical warp's, the same one in every pass.
  template <typename F>
  FI_DEVICE void for_groups_above(uint32_t floor, F f) {
    const bool rec = tkey != nullptr && !have_tkeys_;
    const bool skip = tkey != nullptr && have_tkeys_ && floor > 0u;
    for (int tile = t0 + lw; tile < t1; tile += LW) {
      const int rel = tile - t0;
      if (skip && rel < TCAP && tkey[rel] < floor) continue;
      float v[GROUP];
      load_group<T, VEC, LOGITS>(in, p.vocab, tile, lane, v);
      if (rec && rel < TCAP) {
        uint32_t m = 0u;
#pragma unroll
        for (int i = 0; i < GROUP; i++) {
          const uint32_t k = key_of<LOGITS>(v[i]);
          m = k > m ? k : m;
        }
        m = lw_max(m);
        if (lane == 0) tkey[rel] = m;
      }
      f(tile, v);
    }
    // Every pass ends in a block barrier (a reduction) before the next one reads tkey.
    if (rec) have_tkeys_ = true;
  }
  template <typename F>
  FI_DEVICE void for_groups(F f) {
    for_groups_above(0u, f);
  }
  FI_DEVICE int elem(int tile, int i) const {
    return tile * TILE + (i >> 2) * 128 + lane * 4 + (i & 3);
  }

  FI_DEVICE float row_max() {  // of the values (logits) or the weights (probabilities)
    float m = LOGITS ? neg_inf() : 0.0f;
    for_groups([&](int, float(&v)[GROUP]) {
#pragma unroll
      for (int i = 0; i < GROUP; i++) m = fmaxf(m, LOGITS ? v[i] : prob_w(v[i]));
    });
    auto mx = [](float a, float b) { return fmaxf(a, b); };
    m = block_reduce<THREADS>(m, mx, rs.f);
    return cluster_reduce<C>(m, mx, rs.fslot);
  }

  template <typename E, typename W>
  FI_DEVICE float row_sum(E elig, W wfun, uint32_t floor) {  // elig(x) implies key >= floor
    float s = 0.0f;
    for_groups_above(floor, [&](int, float(&v)[GROUP]) {
#pragma unroll
      for (int i = 0; i < GROUP; i++) s += elig(v[i]) ? wfun(v[i]) : 0.0f;
    });
    auto add = [](float a, float b) { return a + b; };
    s = block_reduce<THREADS>(s, add, rs.f);
    return cluster_reduce<C>(s, add, rs.fslot);
  }

  FI_DEVICE int top_k() const {
    return p.top_k_arr ? p.top_k_arr[(int64_t)row * p.top_k_stride] : p.top_k;
  }
  FI_DEVICE float top_p() const {
    return p.top_p_arr ? p.top_p_arr[(int64_t)row * p.top_p_stride] : p.top_p;
  }
  FI_DEVICE float min_p() const {  // also softmax's temperature
    return p.min_p_arr ? p.min_p_arr[(int64_t)row * p.min_p_stride] : p.min_p;
  }
};

// Sampling pass: each group's candidate, the row's minimum over the cluster, written
// by rank 0. elig(x): the element may be drawn; wfun(x): its weight.
// elig(x) implies key >= floor (the tiles below it have no candidate).
template <typename R, typename E, typename W>
FI_DEVICE void draw(R &r, E elig, W wfun, uint32_t floor = 0u) {
  constexpr int THREADS = R::Threads, C = R::Cluster;
  u64 best = ~0ull;
  const uint32_t k0 = (uint32_t)r.p.seed, k1 = (uint32_t)(r.p.seed >> 32);
  const uint32_t o0 = (uint32_t)r.p.offset, o1 = (uint32_t)(r.p.offset >> 32);
  r.for_groups_above(floor, [&](int tile, float(&v)[GROUP]) {
    // The weights are recomputed in the second walk (the same operations, so the same
    // values) rather than kept: 32 registers fewer.
    float S = 0.0f;
    int last = 0;
#pragma unroll
    for (int i = 0; i < GROUP; i++) {
      const float wi = elig(v[i]) ? wfun(v[i]) : 0.0f;
      S += wi;
      if (wi > 0.0f) last = i;
    }
    if (S > 0.0f) {
      const u4 x =
          philox(u4{(uint32_t)tile * 32u + (uint32_t)r.lane, (uint32_t)r.row, o0, o1}, k0, k1);
      const float u = (float)(x.x >> 8) * 5.9604644775390625e-8f;                // [0, 1)
      const float e = -logf((float)((x.y >> 8) + 1u) * 5.9604644775390625e-8f);  // Exp(1)
      const float t = u * S;
      float cum = 0.0f;
      int pick = last;
      bool found = false;
#pragma unroll
      for (int i = 0; i < GROUP; i++) {
        cum += elig(v[i]) ? wfun(v[i]) : 0.0f;
        if (!found && cum > t) {
          pick = i;
          found = true;
        }
      }
      const u64 c = ((u64)float_to_bits(e / S) << 32) | (u64)(uint32_t)r.elem(tile, pick);
      best = c < best ? c : best;
    }
  });
  auto mn = [](u64 a, u64 b) { return a < b ? a : b; };
  best = block_reduce<THREADS>(best, mn, r.rs.u);
  best = cluster_reduce<C>(best, mn, r.rs.uslot);
  if (r.rank == 0 && threadIdx.x == 0)
    static_cast<int32_t *>(r.p.out)[(int64_t)r.row * r.p.out_stride] =
        best == ~0ull ? -1 : (int32_t)(uint32_t)best;
}

// Writes f(x, e) for every element of the row to out (element type O).
template <typename O, typename R, typename F>
FI_DEVICE void write(R &r, F f) {
  O *orow = static_cast<O *>(r.p.out) + (int64_t)r.row * r.p.out_stride;
  r.for_groups([&](int tile, float(&v)[GROUP]) {
#pragma unroll
    for (int j = 0; j < PIECES; j++) {
      float y[4];
#pragma unroll
      for (int q = 0; q < 4; q++) y[q] = f(v[4 * j + q]);
      store4<O, R::Vec>(orow, r.p.vocab, tile * TILE + j * 128 + r.lane * 4, y);
    }
  });
}

}  // namespace smp
}  // namespace fi
