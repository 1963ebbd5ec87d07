// sampling.cuh: softmax, sampling from probabilities or logits with top-k / top-p / min-p,
// and the renorm / mask ops. One kernel per op; a row is worked on by a cluster of C CTAs
// (C > 1 only on sm_90, through distributed shared memory) or by one CTA.
//
// Layout of a row, fixed whatever the launch geometry: tiles of TILE = 128 * PIECES
// elements; in a tile, "lane" l (0..31) owns the group of GROUP = 4 * PIECES elements
// tile * TILE + j * 128 + l * 4 + q (j < PIECES, q < 4). A logical warp of 32 threads
// loads a tile at once (coalesced: PIECES x 512 contiguous bytes for float32).
//
// Sampling without a CDF over the row: each group draws its own candidate by inverse CDF
// over its GROUP elements (held in registers) and an exponential E; the candidate with the
// smallest E / S_group (S: the group's mass) wins. min E_g / S_g over independent groups
// picks group g with probability S_g / sum(S) (the exponential race), so the draw is i
// with probability w_i / sum(w). Randomness: Philox4x32-10 keyed by the seed, counter
// (group, row, offset): the draw depends on the seed, offset, row and the row's values
// only, not on the batch, the cluster size or the block size. One Philox call per group
// of 16 elements with any weight.
//
// Thresholds without sorting (top-k: counts, top-p: 64-bit fixed-point masses), exact and
// order-independent, each histogram merged over the cluster; SEL picks the search:
//   0 radix select over fixed bit fields of order-preserving uint32 keys (12 + 12 + 8
//     bits; 12 + 12 + 7 for probabilities, whose sign bit is 0): three histogram passes;
//   1 the same over the row's own key range: one more pass (the smallest and largest key),
//     then rounds of at most 4096 bins over what is left of the range, so a row whose
//     values span few octaves still spreads over many bins.
// Histograms are 32-bit shared-memory counters: a 64-bit shared atomic add is a
// compare-and-swap loop (a first version with 64-bit counters ran these ops much
// slower on the H200, before the warp aggregation and the finer first level were added
// too: docs/sampling.md, figures from comments);
// masses carry into a second 32-bit word. Every pass after the first re-reads the row, which the
// first pass left in L2 (64 rows of 128256 floats: 33 MB of the H200's 60 MB).
//
// The first pass also records each tile's largest key; a later pass that only counts or
// draws keys above some floor skips the tiles below it (the late rounds of a search, the
// sampling pass after top-k or min-p: most tiles of a row hold none of the kept tokens).
// Top-p sampling draws first and searches only when it must: KDRAW draws from the row (an
// exact fixed-point inverse CDF), each accepted iff the mass above it is below the need,
// the first accepted wins (rejection sampling; see topp_sample). Two passes instead of a
// three-round search and a sampling pass; the second sums the masses above the candidates
// in float with a rounding bound and falls back to exact sums only when the bound cannot
// decide (topp_float_test).
#pragma once
#include "fi_params.h"
#include "sampling_params.h"

#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FI_SMP_CLUSTER 1
#else
#define FI_SMP_CLUSTER 0
#endif

namespace fi {
namespace smp {

typedef unsigned long long u64;

constexpr int PIECES = 4;           // 4-element pieces per group
constexpr int GROUP = 4 * PIECES;   // elements per group (one lane's share of a tile)
constexpr int TILE = 128 * PIECES;  // elements per tile
constexpr int TCAP = 1024;          // tiles per CTA whose largest key is recorded (skips)
constexpr int KDRAW = 4;            // top-p candidates drawn before the exact search

FI_DEVICE float neg_inf() { return bits_to_float(0xff800000u); }

// ---- cross-lane ----
FI_DEVICE uint32_t shfl_xor32(uint32_t v, int o) {
#if FI_CUDA
  return __shfl_xor_sync(0xffffffffu, v, o);
#else
  return (uint32_t)__shfl_xor((int)v, o, FI_WARP);
#endif
}
FI_DEVICE uint32_t shfl_down32(uint32_t v, int o) {
#if FI_CUDA
  return __shfl_down_sync(0xffffffffu, v, o);
#else
  return (uint32_t)__shfl_down((int)v, o, FI_WARP);
#endif
}
FI_DEVICE u64 shfl_xor(u64 v, int o) {
  return (u64)shfl_xor32((uint32_t)v, o) | ((u64)shfl_xor32((uint32_t)(v >> 32), o) << 32);
}
FI_DEVICE u64 shfl_down(u64 v, int o) {
  return (u64)shfl_down32((uint32_t)v, o) | ((u64)shfl_down32((uint32_t)(v >> 32), o) << 32);
}
FI_DEVICE float shfl_xor(float v, int o) { return bits_to_float(shfl_xor32(float_to_bits(v), o)); }
FI_DEVICE uint32_t shfl_xor(uint32_t v, int o) { return shfl_xor32(v, o); }

// Within a logical warp of 32 lanes (half a wavefront on ROCm): lane src's v, and the
// v of the lane o below (lanes below o get their own back).
FI_DEVICE uint32_t shfl_idx32(uint32_t v, int src) {
#if FI_CUDA
  return __shfl_sync(0xffffffffu, v, src, 32);
#else
  return (uint32_t)__shfl((int)v, src, 32);
#endif
}
FI_DEVICE uint32_t shfl_up32(uint32_t v, int o) {
#if FI_CUDA
  return __shfl_up_sync(0xffffffffu, v, o, 32);
#else
  return (uint32_t)__shfl_up((int)v, o, 32);
#endif
}
FI_DEVICE u64 shfl_idx64(u64 v, int src) {
  return (u64)shfl_idx32((uint32_t)v, src) | ((u64)shfl_idx32((uint32_t)(v >> 32), src) << 32);
}
// Sum over the 32 lanes (every lane gets it), and the inclusive prefix sum in lane order.
FI_DEVICE u64 lw_sum(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += shfl_xor(v, o);
  return v;
}
FI_DEVICE u64 lw_scan(u64 v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 x = (u64)shfl_up32((uint32_t)v, o) | ((u64)shfl_up32((uint32_t)(v >> 32), o) << 32);
    if (lane >= o) v += x;
  }
  return v;
}
FI_DEVICE uint32_t lw_max(uint32_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint32_t x = shfl_xor32(v, o);
    v = x > v ? x : v;
  }
  return v;
}
// The lowest lane of the 32 whose flag is set (32: none).
FI_DEVICE int lw_first(bool f, int lane) {
  uint32_t m = f ? (uint32_t)lane : 32u;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint32_t x = shfl_xor32(m, o);
    m = x < m ? x : m;
  }
  return (int)m;
}

// Lanes of the warp holding the same v (sm_70 and newer; every lane must call it).
FI_DEVICE uint32_t match_any(uint32_t v) {
#if FI_CUDA
  uint32_t m;
  asm volatile("match.any.sync.b32 %0, %1, 0xffffffff;" : "=r"(m) : "r"(v));
  return m;
#else
  (void)v;
  return 0u;
#endif
}

// ---- clusters (sm_90): barrier and the address of a shared variable in CTA `rank` ----
FI_DEVICE void cluster_sync() {
#if FI_SMP_CLUSTER
  asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
#else
  __syncthreads();
#endif
}
template <typename V>
FI_DEVICE V *remote(V *p, uint32_t rank) {
#if FI_SMP_CLUSTER
  u64 r;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(p), "r"(rank));
  return reinterpret_cast<V *>(r);
#else
  (void)rank;
  return p;
#endif
}

// A shared variable of CTA `rank` of a C-CTA cluster (this CTA's own when C is 1: no
// cluster instruction runs in a launch without clusters).
template <int C, typename V>
FI_DEVICE V *at_rank(V *p, int rank) {
  return C == 1 ? p : remote(p, (uint32_t)rank);
}

// ---- block reductions: every thread gets the result; deterministic order ----
template <int THREADS, typename V, typename F>
FI_DEVICE V block_reduce(V v, F op, V *scratch) {
#pragma unroll
  for (int o = FI_WARP / 2; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
  constexpr int W = THREADS / FI_WARP;
  if (W <= 1) return v;
  __syncthreads();
  if (threadIdx.x % FI_WARP == 0) scratch[threadIdx.x / FI_WARP] = v;
  __syncthreads();
  V r = scratch[0];
#pragma unroll
  for (int i = 1; i < W; i++) r = op(r, scratch[i]);
  return r;
}

// One value per CTA combined over the cluster in rank order (the same result in every CTA).
template <int C, typename V, typename F>
FI_DEVICE V cluster_reduce(V v, F op, V *slot) {
  if (C == 1) return v;
  __syncthreads();
  if (threadIdx.x == 0) *slot = v;
  cluster_sync();
  if (threadIdx.x == 0) {
    V r = *remote(slot, 0);
    for (int c = 1; c < C; c++) r = op(r, *remote(slot, (uint32_t)c));
    slot[1] = r;
  }
  cluster_sync();  // every CTA has read every slot before any slot is written again
  return slot[1];
}

// ---- Philox4x32-10 ----
struct u4 {
  uint32_t x, y, z, w;
};
FI_DEVICE u4 philox(u4 c, uint32_t k0, uint32_t k1) {
#pragma unroll
  for (int i = 0; i < 10; i++) {
    const uint32_t lo0 = 0xD2511F53u * c.x, hi0 = __umulhi(0xD2511F53u, c.x);
    const uint32_t lo1 = 0xCD9E8D57u * c.z, hi1 = __umulhi(0xCD9E8D57u, c.z);
    c = u4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

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
  float af[32][KDRAW], afslot[KDRAW], afres[KDRAW];  // the same in float (topp_float_test)
};

// SEL: the threshold search. 0: radix select over fixed bit fields of the keys (12 + 12 +
// 8 bits). 1: over the row's own key range: a first pass finds the smallest and largest
// key above the floor, and each round splits the remaining range into at most 4096 bins,
// so a row whose values span few octaves still spreads over many bins (fewer colliding
// shared-memory atomics).
template <int OP, typename T, int VEC, int THREADS, int C, int SEL>
struct Row {
  static constexpr bool LOGITS =
      OP == FI_SMP_SOFTMAX || OP == FI_SMP_TOPK_TOPP_LOGITS || OP == FI_SMP_TOPK_MASK;
  static constexpr int LW = THREADS / 32;  // logical warps (tiles in flight) per CTA
  static_assert(LW >= KDRAW && LW <= 32, "one logical warp per top-p draw; RedSmem::aw");

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

  // The largest d in [0, n) with sum(arr[d..n)) >= need, and that sum less arr[d]
  // (the mass above d). need_of(total) gives need (0: no threshold). arr may be remote.
  template <typename G, typename N>
  FI_DEVICE bool find_pivot(SelSmem<THREADS, C> &sm, G arr, int n, N need_of, uint32_t &digit,
                            u64 &above, u64 &bin, u64 &total) {
    const int tid = (int)threadIdx.x, l = tid % FI_WARP, w = tid / FI_WARP;
    constexpr int W = THREADS / FI_WARP;
    const int seg = (n + THREADS - 1) / THREADS, lo = tid * seg;
    const int hi = lo + seg < n ? lo + seg : n;
    u64 s = 0;
    for (int b = lo; b < hi; b++) s += arr(b);
    u64 v = s;  // inclusive suffix sum over the warp's lanes
#pragma unroll
    for (int o = 1; o < FI_WARP; o <<= 1) {
      const u64 x = shfl_down(v, o);
      if (l + o < FI_WARP) v += x;
    }
    __syncthreads();
    if (l == 0) sm.scr[w] = v;
    __syncthreads();
    u64 later = 0, tot = 0;
#pragma unroll
    for (int i = 0; i < W; i++) {
      tot += sm.scr[i];
      if (i > w) later += sm.scr[i];
    }
    total = tot;
    const u64 need = need_of(tot);
    if (need == 0) return false;
    const u64 suf = v + later, excl = suf - s;
    if (s > 0 && excl < need && need <= suf) {
      u64 acc = excl;
      for (int b = hi - 1; b >= lo; b--) {
        const u64 a = arr(b);
        if (acc + a >= need) {
          sm.res_digit = (uint32_t)b;
          sm.res_above = acc;
          sm.res_bin = a;
          break;
        }
        acc += a;
      }
    }
    __syncthreads();
    digit = sm.res_digit;
    above = sm.res_above;
    bin = sm.res_bin;
    return true;
  }

  // Radix select: the largest key tau with (measure of keys >= tau, among keys >= lower)
  // >= need, need = need_of(measure of all keys >= lower); MASS: fixed-point weights,
  // else counts. Returns `lower` when need_of says there is no threshold. EXACT (counts):
  // stops early when a whole bin is needed (the same set, a lower tau).
  template <bool MASS, typename W, typename N>
  FI_DEVICE uint32_t select(uint32_t lower, W wfun, N need_of) {
    SelSmem<THREADS, C> &sm = *sel;
    const int tid = (int)threadIdx.x;
    // Digits: 12 + 12 + 8 bits of a logit key; probability keys have no sign bit, so
    // 12 + 12 + 7 bits (the first level 1/16 of an octave: the tail spreads over more bins).
    constexpr int S0 = LOGITS ? 20 : 19, S1 = LOGITS ? 8 : 7;
    uint32_t prefix = 0;
    u64 need = 0;
    for (int round = 0; round < 3; round++) {
      const int shift = round == 0 ? S0 : round == 1 ? S1 : 0;
      const int nb = round == 2 ? (1 << S1) : 4096;
      const int pshift = round == 1 ? S0 : S1;
      for (int b = tid; b < nb; b += THREADS) sm.lo[b] = sm.hi[b] = 0u;
      __syncthreads();
      // The counted keys of this round are >= lower and start with prefix.
      const uint32_t pfloor = round == 0 ? 0u : prefix << pshift;
      for_groups_above(pfloor > lower ? pfloor : lower, [&](int, float(&v)[GROUP]) {
#pragma unroll
        for (int i = 0; i < GROUP; i++) {
          const uint32_t k = key_of<LOGITS>(v[i]);
          const bool act = k >= lower && (round == 0 || (k >> pshift) == prefix);
          const uint32_t b = (k >> shift) & (uint32_t)(nb - 1);
          if (MASS) {
            const u64 inc = act ? fx(wfun(v[i])) : 0ull;
            if (inc) {
              const uint32_t l = (uint32_t)inc, old = atomicAdd(&sm.lo[b], l);
              const uint32_t h = (uint32_t)(inc >> 32) + (old + l < old ? 1u : 0u);
              if (h) atomicAdd(&sm.hi[b], h);
            }
          } else {
#if FI_CUDA
            // One add per distinct bin of the warp: lanes in the same bin (a concentrated
            // distribution puts most of a warp in a few) would serialize on one address.
            // match.any is not cheap: skipped when no lane of the warp counts anything (most
            // warps of rounds 1 and 2).
            if (__ballot_sync(0xffffffffu, act)) {
              const uint32_t peers = match_any(act ? b : 0xffffffffu);
              if (act && (peers & ((1u << lane) - 1u)) == 0u) atomicAdd(&sm.lo[b], __popc(peers));
            }
#else
            if (act) atomicAdd(&sm.lo[b], 1u);
#endif
          }
        }
      });
      uint32_t digit;
      u64 above, bin, total;
      const u64 need_now = need;
      auto need_fn = [&](u64 tot) -> u64 { return round == 0 ? need_of(tot) : need_now; };
      if (C == 1) {
        __syncthreads();
        auto get = [&](int b) -> u64 { return ((u64)sm.hi[b] << 32) | sm.lo[b]; };
        if (!find_pivot(sm, get, nb, need_fn, digit, above, bin, total)) return lower;
        if (round == 0) need = need_of(total);
      } else {
        // Each CTA merges one slice of the bins over the cluster, then every CTA finds
        // the slice holding the pivot from the slice totals, and the bin in it.
        cluster_sync();
        const int S = nb / C, s0 = rank * S;
        u64 mine = 0;
        for (int b = tid; b < S; b += THREADS) {
          u64 x = 0;
          for (int c = 0; c < C; c++)
            x += ((u64)*remote(&sm.hi[s0 + b], (uint32_t)c) << 32) |
                 *remote(&sm.lo[s0 + b], (uint32_t)c);
          sm.merged[b] = x;
          mine += x;
        }
        auto add = [](u64 a, u64 b) { return a + b; };
        mine = block_reduce<THREADS>(mine, add, sm.scr);
        if (tid == 0) sm.slice_tot = mine;
        cluster_sync();
        if (tid == 0) {
          u64 tot[C], all = 0;
          for (int c = 0; c < C; c++) all += (tot[c] = *remote(&sm.slice_tot, (uint32_t)c));
          const u64 nd = round == 0 ? need_of(all) : need;
          uint32_t s = 0;
          u64 acc = 0;
          if (nd) {
            for (s = C - 1; s > 0; s--) {
              if (acc + tot[s] >= nd) break;
              acc += tot[s];
            }
          }
          sm.res_need = nd;
          sm.res_slice = s;
          sm.res_above = acc;
          sm.res_total = all;
        }
        __syncthreads();
        const u64 nd = sm.res_need, acc = sm.res_above;
        const uint32_t s = sm.res_slice;
        if (nd == 0) return lower;
        if (round == 0) need = nd;
        __syncthreads();
        const u64 rest = nd - acc;
        const u64 *m = remote(sm.merged, s);
        find_pivot(
            sm, [m](int b) { return m[b]; }, S, [&](u64) { return rest; }, digit, above, bin,
            total);
        digit += s * (uint32_t)S;
        above += acc;
      }
      prefix = round == 0 ? digit : round == 1 ? (prefix << 12) | digit : (prefix << S1) | digit;
      need -= above;  // still needed from the pivot bin
      __syncthreads();
      if (!MASS && round < 2 && bin == need) {
        // All of the pivot bin is in: its lower edge selects the same set.
        const uint32_t edge = prefix << shift;
        return edge > lower ? edge : lower;
      }
    }
    return prefix > lower ? prefix : lower;
  }

  // ---- SEL 1: selection over the row's key range ----

  // The key every "nothing" maps to: 0 for probabilities (zero, negative, NaN, padding),
  // the key of -inf for logits (also NaN and padding). No key is below it.
  static FI_DEVICE uint32_t floor_key() { return key_of<LOGITS>(LOGITS ? neg_inf() : 0.0f); }

  // Smallest and largest key above the floor over the row (both the floor if none).
  FI_DEVICE void key_range(uint32_t &kmin, uint32_t &kmax) {
    const uint32_t fl = floor_key();
    uint32_t mn = 0xffffffffu, mx = 0u;
    for_groups([&](int, float(&v)[GROUP]) {
#pragma unroll
      for (int i = 0; i < GROUP; i++) {
        const uint32_t k = key_of<LOGITS>(v[i]);
        if (k > fl) {
          mn = k < mn ? k : mn;
          mx = k > mx ? k : mx;
        }
      }
    });
    auto umin = [](uint32_t a, uint32_t b) { return a < b ? a : b; };
    auto umax = [](uint32_t a, uint32_t b) { return a > b ? a : b; };
    mn = cluster_reduce<C>(block_reduce<THREADS>(mn, umin, rs.k), umin, rs.kslot);
    mx = cluster_reduce<C>(block_reduce<THREADS>(mx, umax, rs.k), umax, rs.kslot);
    if (mx == 0u) mn = mx = fl;
    kmin = mn;
    kmax = mx;
  }

  // The logit of a key (the inverse of key_of<true>).
  static FI_DEVICE float key_value(uint32_t k) {
    return bits_to_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
  }

  // As select(), over the keys in [max(kmin, lower), kmax] above the floor: each round
  // splits the remaining range of width 2^w into 2^min(w, 12) bins; at most 3 rounds.
  // Floor keys are never counted: a count need beyond the counted keys means the floor
  // itself is the threshold (every element is in).
  template <bool MASS, typename W, typename N>
  FI_DEVICE uint32_t select_range(uint32_t lower, uint32_t kmin, uint32_t kmax, W wfun, N need_of) {
    SelSmem<THREADS, C> &sm = *sel;
    const int tid = (int)threadIdx.x;
    const uint32_t fl = floor_key();
    uint32_t base = kmin > lower ? kmin : lower;
    if (kmax == fl || kmax < base) {  // nothing counted: no threshold (need_of(0) for mass)
      return lower;
    }
    int w = 32 - __clz(kmax - base);  // kmax - base < 2^w
    u64 need = 0;
    for (int round = 0;; round++) {
      const int shift = w > 12 ? w - 12 : 0;
      const int nb = 1 << (w - shift);
      const u64 width = (u64)1 << w;
      for (int b = tid; b < nb; b += THREADS) sm.lo[b] = sm.hi[b] = 0u;
      __syncthreads();
      for_groups_above(base > lower ? base : lower, [&](int, float(&v)[GROUP]) {
#pragma unroll
        for (int i = 0; i < GROUP; i++) {
          const uint32_t k = key_of<LOGITS>(v[i]);
          const bool act = k > fl && k >= lower && k >= base && (u64)(k - base) < width;
          if (!act) continue;
          const uint32_t b = (k - base) >> shift;
          if (MASS) {
            const u64 inc = fx(wfun(v[i]));
            if (inc) {
              const uint32_t l = (uint32_t)inc, old = atomicAdd(&sm.lo[b], l);
              const uint32_t h = (uint32_t)(inc >> 32) + (old + l < old ? 1u : 0u);
              if (h) atomicAdd(&sm.hi[b], h);
            }
          } else {
            atomicAdd(&sm.lo[b], 1u);
          }
        }
      });
      uint32_t digit;
      u64 above, bin, total;
      const u64 need_now = need;
      // Round 0: the need from the total; past the counted keys (counts) there is none.
      auto first_need = [&](u64 tot) -> u64 {
        const u64 nd = need_of(tot);
        return nd > tot ? 0ull : nd;
      };
      if (C == 1) {
        __syncthreads();
        auto get = [&](int b) -> u64 { return ((u64)sm.hi[b] << 32) | sm.lo[b]; };
        auto need_fn = [&](u64 tot) -> u64 { return round == 0 ? first_need(tot) : need_now; };
        if (!find_pivot(sm, get, nb, need_fn, digit, above, bin, total)) return lower;
        if (round == 0) need = first_need(total);
      } else {
        cluster_sync();
        const int S = (nb + C - 1) / C, s0 = rank * S;
        const int n_mine = nb - s0 < S ? (nb - s0 > 0 ? nb - s0 : 0) : S;
        u64 mine = 0;
        for (int b = tid; b < n_mine; b += THREADS) {
          u64 x = 0;
          for (int c = 0; c < C; c++)
            x += ((u64)*remote(&sm.hi[s0 + b], (uint32_t)c) << 32) |
                 *remote(&sm.lo[s0 + b], (uint32_t)c);
          sm.merged[b] = x;
          mine += x;
        }
        auto add = [](u64 a, u64 b) { return a + b; };
        mine = block_reduce<THREADS>(mine, add, sm.scr);
        if (tid == 0) sm.slice_tot = mine;
        cluster_sync();
        if (tid == 0) {
          u64 tot[C], all = 0;
          for (int c = 0; c < C; c++) all += (tot[c] = *remote(&sm.slice_tot, (uint32_t)c));
          const u64 nd = round == 0 ? first_need(all) : need;
          uint32_t s = 0;
          u64 acc = 0;
          if (nd) {
            for (s = C - 1; s > 0; s--) {
              if (acc + tot[s] >= nd) break;
              acc += tot[s];
            }
          }
          sm.res_need = nd;
          sm.res_slice = s;
          sm.res_above = acc;
          sm.res_total = all;
        }
        __syncthreads();
        const u64 nd = sm.res_need, acc = sm.res_above;
        const uint32_t s = sm.res_slice;
        if (nd == 0) return lower;
        if (round == 0) need = nd;
        __syncthreads();
        const u64 rest = nd - acc;
        const u64 *m = remote(sm.merged, s);
        const int n_s = nb - (int)s * S < S ? nb - (int)s * S : S;
        find_pivot(
            sm, [m](int b) { return m[b]; }, n_s, [&](u64) { return rest; }, digit, above, bin,
            total);
        digit += s * (uint32_t)S;
        above += acc;
      }
      base += digit << shift;
      w = shift;
      need -= above;
      __syncthreads();
      if (w == 0 || (!MASS && bin == need)) return base;  // exact key, or the whole bin is in
    }
  }

  // Sampling pass: each group's candidate, the row's minimum over the cluster, written
  // by rank 0. elig(x): the element may be drawn; wfun(x): its weight.
  // elig(x) implies key >= floor (the tiles below it have no candidate).
  template <typename E, typename W>
  FI_DEVICE void sample(E elig, W wfun, uint32_t floor = 0u) {
    u64 best = ~0ull;
    const uint32_t k0 = (uint32_t)p.seed, k1 = (uint32_t)(p.seed >> 32);
    const uint32_t o0 = (uint32_t)p.offset, o1 = (uint32_t)(p.offset >> 32);
    for_groups_above(floor, [&](int tile, float(&v)[GROUP]) {
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
        const u4 r =
            philox(u4{(uint32_t)tile * 32u + (uint32_t)lane, (uint32_t)row, o0, o1}, k0, k1);
        const float u = (float)(r.x >> 8) * 5.9604644775390625e-8f;                // [0, 1)
        const float e = -logf((float)((r.y >> 8) + 1u) * 5.9604644775390625e-8f);  // Exp(1)
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
        const u64 c = ((u64)float_to_bits(e / S) << 32) | (u64)(uint32_t)elem(tile, pick);
        best = c < best ? c : best;
      }
    });
    auto mn = [](u64 a, u64 b) { return a < b ? a : b; };
    best = block_reduce<THREADS>(best, mn, rs.u);
    best = cluster_reduce<C>(best, mn, rs.uslot);
    if (rank == 0 && threadIdx.x == 0)
      static_cast<int32_t *>(p.out)[(int64_t)row * p.out_stride] =
          best == ~0ull ? -1 : (int32_t)(uint32_t)best;
  }

  // Writes f(x, e) for every element of the row to out (element type O).
  template <typename O, typename F>
  FI_DEVICE void write(F f) {
    O *orow = static_cast<O *>(p.out) + (int64_t)row * p.out_stride;
    for_groups([&](int tile, float(&v)[GROUP]) {
#pragma unroll
      for (int j = 0; j < PIECES; j++) {
        float y[4];
#pragma unroll
        for (int q = 0; q < 4; q++) y[q] = f(v[4 * j + q]);
        store4<O, VEC>(orow, p.vocab, tile * TILE + j * 128 + lane * 4, y);
      }
    });
  }

  // ---- top-p sampling by rejection ----
  // Draws from the row restricted to a set T containing the top-p set S are, when they
  // fall in S, draws from S: so KDRAW independent draws from T are tested against S in
  // order and the first inside wins. Each is inside with probability M(S) / M(T) >= top_p,
  // so at top_p 0.9 all KDRAW miss once in 10^4 rows. A candidate c is in S iff the mass
  // of the keys above it is below the need (the same fixed-point measure and need as
  // topp_tau's search), so no threshold is searched for: one pass to draw (the masses of
  // the tiles, then an exact integer inverse CDF over tiles, lanes and elements), one pass
  // for the masses above the candidates. When all miss, the exact search runs over the keys
  // above the largest miss and the row is sampled as before (fresh Philox counters).

  // The weight of an element in the draw: its fixed-point mass (exact, order-independent,
  // so the draw does not depend on the cluster size).
  template <typename W>
  FI_DEVICE u64 mass(float x, uint32_t lower, W wfun) const {
    return key_of<LOGITS>(x) >= lower ? fx(wfun(x)) : 0ull;
  }

  // Candidate j of the draw at position t of this CTA's mass: the tile, then the lane, then
  // the element (lane j-th logical warp does it); written into every CTA of the cluster.
  template <typename W>
  FI_DEVICE void locate(int j, u64 t, int nt, uint32_t lower, W wfun) {
    SelSmem<THREADS, C> &sm = *sel;
    int rel = -1;
    u64 acc = 0;
    for (int c0 = 0; c0 < nt; c0 += 32) {
      const int b = c0 + lane;
      const u64 x = b < nt ? ((u64)sm.hi[b] << 32) | sm.lo[b] : 0ull;
      const u64 incl = lw_scan(x, lane);
      const u64 ctot = shfl_idx64(incl, 31);
      if (acc + ctot > t) {
        const int f = lw_first(acc + incl > t, lane);
        const u64 excl = shfl_idx64(incl - x, f);
        rel = c0 + f;
        t -= acc + excl;
        break;
      }
      acc += ctot;
    }
    if (rel < 0) return;  // not reached: t is below this CTA's mass
    const int tile = t0 + rel;
    float v[GROUP];
    load_group<T, VEC, LOGITS>(in, p.vocab, tile, lane, v);
    u64 s = 0;
#pragma unroll
    for (int i = 0; i < GROUP; i++) s += mass(v[i], lower, wfun);
    const u64 incl = lw_scan(s, lane);
    const int f = lw_first(incl > t, lane);
    if (lane != f) return;
    u64 a = incl - s;
    int pick = -1;
#pragma unroll
    for (int i = 0; i < GROUP; i++) {
      a += mass(v[i], lower, wfun);
      if (pick < 0 && a > t) pick = i;
    }
    if (pick < 0) return;
    const int e = elem(tile, pick);
    float xv = v[0];
#pragma unroll
    for (int i = 1; i < GROUP; i++)
      if (i == pick) xv = v[i];
    const uint32_t key = key_of<LOGITS>(xv);
    for (int c = 0; c < C; c++) {
      *at_rank<C>(&rs.ckey[j], c) = key;
      *at_rank<C>(&rs.cidx[j], c) = e;
    }
  }

  // A[j]: this thread's sum of conv(weight) over its keys above candidate j (pass 2 of
  // top-p; only keys above the smallest candidate count).
  template <typename V, typename W, typename F>
  FI_DEVICE void cand_above(const uint32_t (&ck)[KDRAW], uint32_t cmin, W wfun, F conv,
                            V (&A)[KDRAW]) {
#pragma unroll
    for (int j = 0; j < KDRAW; j++) A[j] = 0;
    for_groups_above(cmin + 1u, [&](int, float(&v)[GROUP]) {
#pragma unroll
      for (int i = 0; i < GROUP; i++) {
        const uint32_t k = key_of<LOGITS>(v[i]);
        if (k > cmin) {
          const V f = conv(wfun(v[i]));
#pragma unroll
          for (int j = 0; j < KDRAW; j++) A[j] += k > ck[j] ? f : V(0);
        }
      }
    });
  }

  // The candidates' sums A (per thread) added over the row into res, in every CTA: the lane
  // tree, the warps in order, the CTAs in rank order (the same float sums in every CTA).
  template <typename V>
  FI_DEVICE void cand_sum(V (&A)[KDRAW], V (&wv)[32][KDRAW], V (&slot)[KDRAW], V (&res)[KDRAW]) {
    const int tid = (int)threadIdx.x;
#pragma unroll
    for (int j = 0; j < KDRAW; j++)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) A[j] += shfl_xor(A[j], o);
    if (lane == 0)
#pragma unroll
      for (int j = 0; j < KDRAW; j++) wv[lw][j] = A[j];
    __syncthreads();
    if (tid < KDRAW) {
      V x = 0;
      for (int w = 0; w < LW; w++) x += wv[w][tid];
      slot[tid] = x;
    }
    if (C > 1)
      cluster_sync();
    else
      __syncthreads();
    if (tid < KDRAW) {
      V x = 0;
      for (int c = 0; c < C; c++) x += *at_rank<C>(&slot[tid], c);
      res[tid] = x;
    }
    __syncthreads();
  }

  // The membership test of the candidates with float sums: per element a compare and a
  // float add per candidate, where the exact test converts to 64-bit fixed point (a
  // quarter-rate conversion) and adds in two 32-bit halves. The float sum F of the weights
  // above a candidate bounds the exact fixed-point mass X: summing nonnegative terms through
  // at most d additions errs by at most g S (g = 2 d 2^-24 >= d u / (1 - d u)), and each
  // element's fixed point differs from w 2^36 by at most half a unit. A candidate is decided
  // only when the whole interval for X lies on one side of the need; otherwise (or when F
  // is not small and finite) the answer is -2 and the exact pass decides. Every CTA of the
  // cluster adds the same values in the same order, so all take the same branch.
  // Returns the token of the first candidate inside S, -1 when every drawn candidate is
  // outside (miss: the largest of them), -2 when undecided.
  template <typename W>
  FI_DEVICE int topp_float_test(const uint32_t (&ck)[KDRAW], uint32_t cmin, u64 need, W wfun,
                                uint32_t &miss) {
    float A[KDRAW];
    cand_above(ck, cmin, wfun, [](float w) { return w; }, A);
    cand_sum(A, rs.af, rs.afslot, rs.afres);
    // d: the additions a term goes through (a lane's elements, the lane tree, the warps, the
    // cluster), counted from the largest CTA share of the row.
    const int ntiles = (p.vocab + TILE - 1) / TILE;
    const double d = 16.0 * (double)(((ntiles + C - 1) / C + LW - 1) / LW) + 5 + LW + C + 1;
    const double u = d * 5.9604644775390625e-8;
    if (u >= 0.25) return -2;
    const double g = 2.0 * u + 1e-12, slack = 0.5 * (double)p.vocab + 16.0;
    const double dn = (double)need, nlo = dn * (1.0 - 0x1p-50) - 1.0,
                 nhi = dn * (1.0 + 0x1p-50) + 1.0;
    uint32_t m = miss;
    for (int j = 0; j < KDRAW; j++) {
      if (rs.cidx[j] < 0) continue;
      const double F = (double)rs.afres[j];
      if (!(F <= 1048576.0)) return -2;  // inf, NaN or large: terms may pass fixed point's range
      const double xs = F * 68719476736.0;
      if (xs * (1.0 + 2.0 * g) + slack < nlo) return rs.cidx[j];  // X < need: in S
      if (!(xs * (1.0 - g) - slack >= nhi)) return -2;            // not surely X >= need
      m = ck[j] > m ? ck[j] : m;
    }
    miss = m;
    return -1;
  }

  // Samples from the top-p set among the keys >= lower (weights wfun), as
  // sample(key >= topp_tau(lower, wfun)) does, drawing by rejection first.
  template <typename W>
  FI_DEVICE void topp_sample(uint32_t lower, W wfun) {
    auto ge = [lower](float x) { return key_of<LOGITS>(x) >= lower; };
    const float tp = top_p();
    const int nt = t1 - t0, tid = (int)threadIdx.x;
    if (!(tp < 1.0f)) return sample(ge, wfun, lower);
    if (nt > 4096) {  // the tile masses would not fit the histogram arrays: search first
      const uint32_t tau = topp_tau(lower, wfun);
      return sample([tau](float x) { return key_of<LOGITS>(x) >= tau; }, wfun, tau);
    }
    SelSmem<THREADS, C> &sm = *sel;
    // Pass 1: the mass of every tile (0 for the skipped ones) and of the CTA.
    for (int b = tid; b < nt; b += THREADS) sm.lo[b] = sm.hi[b] = 0u;
    if (tid < KDRAW) rs.cidx[tid] = -1;
    __syncthreads();
    u64 mine = 0;
    for_groups_above(lower, [&](int tile, float(&v)[GROUP]) {
      u64 s = 0;
#pragma unroll
      for (int i = 0; i < GROUP; i++) s += mass(v[i], lower, wfun);
      s = lw_sum(s);
      if (lane == 0) {
        sm.lo[tile - t0] = (uint32_t)s;
        sm.hi[tile - t0] = (uint32_t)(s >> 32);
        mine += s;
      }
    });
    auto add = [](u64 a, u64 b) { return a + b; };
    mine = block_reduce<THREADS>(mine, add, rs.u);
    u64 before = 0, total = mine;
    if (C > 1) {
      if (tid == 0) rs.pslot = mine;
      cluster_sync();
      if (tid == 0) {
        u64 b = 0, a = 0;
        for (int c = 0; c < C; c++) {
          const u64 x = *remote(&rs.pslot, (uint32_t)c);
          if (c < rank) b += x;
          a += x;
        }
        rs.pres[0] = b;
        rs.pres[1] = a;
      }
      __syncthreads();
      before = rs.pres[0];
      total = rs.pres[1];
    }
    // No mass in fixed point (weights all below 2^-37): no threshold, as topp_tau.
    if (total == 0) return sample(ge, wfun, lower);
    const double xn = ceil((double)tp * (double)total);
    const u64 need = xn < 1.0 ? 1ull : (xn > (double)total ? total : (u64)xn);
    // The draws: uniform integers below the total, from Philox counters no group uses.
    if (lw < KDRAW) {
      const u4 r = philox(u4{0x80000000u | (uint32_t)(lw >> 1), (uint32_t)row, (uint32_t)p.offset,
                             (uint32_t)(p.offset >> 32)},
                          (uint32_t)p.seed, (uint32_t)(p.seed >> 32));
      const u64 r64 = (lw & 1) ? ((u64)r.z << 32) | r.w : ((u64)r.x << 32) | r.y;
      const u64 t = __umul64hi(r64, total);
      if (t >= before && t - before < mine) locate(lw, t - before, nt, lower, wfun);
    }
    if (C > 1)
      cluster_sync();
    else
      __syncthreads();
    uint32_t ck[KDRAW], cmin = 0xffffffffu;
    bool any = false;
#pragma unroll
    for (int j = 0; j < KDRAW; j++) {
      const bool ok = rs.cidx[j] >= 0;
      ck[j] = ok ? rs.ckey[j] : 0xffffffffu;
      cmin = ok && ck[j] < cmin ? ck[j] : cmin;
      any = any || ok;
    }
    uint32_t miss = lower;  // the largest candidate outside S
    // Pass 2 in float first: decides every candidate but those whose mass above lies within
    // its rounding bound of the need (about 1e-5 of them); then the exact pass.
    const int fv = any && p.topp_variant == FI_SMP_TOPP_FLOAT
                       ? topp_float_test(ck, cmin, need, wfun, miss)
                       : -2;
    if (fv >= 0) {
      if (rank == 0 && tid == 0) static_cast<int32_t *>(p.out)[(int64_t)row * p.out_stride] = fv;
      return;
    }
    if (fv == -1) miss += 1u;  // every candidate decided outside S
    if (any && fv == -2) {
      // Pass 2, exact: the mass above each candidate (only keys above the smallest count).
      u64 A[KDRAW];
      cand_above(ck, cmin, wfun, [](float w) { return fx(w); }, A);
      cand_sum(A, rs.aw, rs.aslot, rs.ares);
      for (int j = 0; j < KDRAW; j++) {
        if (rs.cidx[j] < 0) continue;
        if (rs.ares[j] < need) {  // in S: the first such draw is the sample
          if (rank == 0 && tid == 0)
            static_cast<int32_t *>(p.out)[(int64_t)row * p.out_stride] = rs.cidx[j];
          return;
        }
        miss = ck[j] > miss ? ck[j] : miss;
      }
      miss += 1u;  // S lies above every miss (keys stay below 0xffffffff)
    }
    // Every draw missed: the exact threshold among the keys above the misses (S is there,
    // and the need stays that of the mass above lower), then the row is sampled above it.
    auto fixed = [need](u64) { return need; };
    uint32_t tau;
    if constexpr (SEL == 1) {
      need_range();
      tau = select_range<true>(miss, kmin_, kmax_, wfun, fixed);
    } else {
      tau = select<true>(miss, wfun, fixed);
    }
    sample([tau](float x) { return key_of<LOGITS>(x) >= tau; }, wfun, tau);
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

  // The key range of the row (SEL 1), found by the first pass that needs it.
  uint32_t kmin_ = 0, kmax_ = 0;
  bool have_range_ = false;
  FI_DEVICE void need_range() {
    if (!have_range_) key_range(kmin_, kmax_);
    have_range_ = true;
  }

  // tau of top-k over all keys (0: every key).
  FI_DEVICE uint32_t topk_tau() {
    const int k = top_k();
    if (k <= 0 || k >= p.vocab) return 0u;
    auto nofn = [](float) { return 0.0f; };
    auto need = [k](u64) -> u64 { return (u64)k; };
    if constexpr (SEL == 1) {
      need_range();
      return select_range<false>(0u, kmin_, kmax_, nofn, need);
    } else {
      return select<false>(0u, nofn, need);
    }
  }
  // tau of top-p among keys >= lower with weights wfun (lower: no threshold).
  template <typename W>
  FI_DEVICE uint32_t topp_tau(uint32_t lower, W wfun) {
    const float tp = top_p();
    if (!(tp < 1.0f)) return lower;
    auto need = [tp](u64 tot) -> u64 {
      if (tot == 0) return 0;
      const double x = ceil((double)tp * (double)tot);
      return x < 1.0 ? 1ull : (x > (double)tot ? tot : (u64)x);
    };
    if constexpr (SEL == 1) {
      need_range();
      return select_range<true>(lower, kmin_, kmax_, wfun, need);
    } else {
      return select<true>(lower, wfun, need);
    }
  }

  FI_DEVICE void run() {
    if constexpr (OP == FI_SMP_SOFTMAX) {
      const float inv_t = 1.0f / min_p();
      float m = neg_inf(), s = 0.0f;
      for_groups([&](int, float(&v)[GROUP]) {
        float gm = neg_inf();
#pragma unroll
        for (int i = 0; i < GROUP; i++) gm = fmaxf(gm, v[i] * inv_t);
        if (gm > neg_inf()) {
          float gs = 0.0f;
#pragma unroll
          for (int i = 0; i < GROUP; i++) gs += __expf(v[i] * inv_t - gm);
          if (gm > m) {
            s = s * __expf(m - gm) + gs;
            m = gm;
          } else {
            s += gs * __expf(gm - m);
          }
        }
      });
      // (m, s) pairs: the maximum first, then the sums rescaled to it.
      auto mx = [](float a, float b) { return fmaxf(a, b); };
      auto add = [](float a, float b) { return a + b; };
      const float bm = cluster_reduce<C>(block_reduce<THREADS>(m, mx, rs.f), mx, rs.mslot);
      float sc = m > neg_inf() ? s * __expf(m - bm) : 0.0f;
      sc = block_reduce<THREADS>(sc, add, rs.f2);
      const float bs = cluster_reduce<C>(sc, add, rs.sslot);
      const float inv_s = bm > neg_inf() && bs > 0.0f ? 1.0f / bs : 0.0f;
      write<float>([&](float x) { return bm > neg_inf() ? __expf(x * inv_t - bm) * inv_s : 0.0f; });
    } else if constexpr (OP == FI_SMP_SAMPLE) {
      sample([](float) { return true; }, [](float x) { return prob_w(x); });
    } else if constexpr (OP == FI_SMP_TOPK) {
      const uint32_t tau = topk_tau();
      sample([tau](float x) { return key_of<false>(x) >= tau; }, [](float x) { return prob_w(x); },
             tau);
    } else if constexpr (OP == FI_SMP_TOPP) {
      topp_sample(0u, [](float x) { return prob_w(x); });
    } else if constexpr (OP == FI_SMP_MINP) {
      float mp = min_p();
      mp = mp > 0.0f ? (mp < 1.0f ? mp : 1.0f) : 0.0f;  // NaN: 0
      const float thr = mp * row_max();
      // thr > 0: the eligible values are positive, so their keys are >= thr's bits.
      sample([thr](float x) { return prob_w(x) >= thr; }, [](float x) { return prob_w(x); },
             thr > 0.0f ? float_to_bits(thr) : 0u);
    } else if constexpr (OP == FI_SMP_TOPK_TOPP_LOGITS) {
      float m;
      if constexpr (SEL == 1) {  // the key range gives the largest logit too
        need_range();
        m = kmax_ == floor_key() ? neg_inf() : key_value(kmax_);
      } else {
        m = row_max();
      }
      const float ninf = neg_inf();
      auto wl = [m, ninf](float x) { return x > ninf ? __expf(x - m) : 0.0f; };
      topp_sample(topk_tau(), wl);
    } else if constexpr (OP == FI_SMP_TOPK_RENORM || OP == FI_SMP_TOPP_RENORM) {
      uint32_t tau;
      if constexpr (OP == FI_SMP_TOPK_RENORM)
        tau = topk_tau();
      else
        tau = topp_tau(0u, [](float x) { return prob_w(x); });
      auto el = [tau](float x) { return key_of<false>(x) >= tau; };
      const float s = row_sum(el, [](float x) { return prob_w(x); }, tau);
      const float inv = s > 0.0f ? 1.0f / s : 0.0f;
      write<T>([&](float x) { return el(x) ? prob_w(x) * inv : 0.0f; });
    } else if constexpr (OP == FI_SMP_TOPK_MASK) {
      const uint32_t tau = topk_tau();
      const float ninf = neg_inf();
      write<T>([tau, ninf](float x) { return key_of<true>(x) >= tau ? x : ninf; });
    }
    if (C > 1) cluster_sync();  // no CTA leaves while another may still read its shared memory
  }
};

template <int OP, typename T, int VEC, int THREADS, int C, int SEL>
FI_DEVICE void sampling_op(const fi_sampling_params &p) {
  __shared__ RedSmem rs;
  if constexpr (OP == FI_SMP_SOFTMAX || OP == FI_SMP_SAMPLE) {
    Row<OP, T, VEC, THREADS, C, SEL> r(p, rs, nullptr, nullptr);
    r.run();
  } else if constexpr (OP == FI_SMP_MINP) {
    __shared__ uint32_t tkey[TCAP];
    Row<OP, T, VEC, THREADS, C, SEL> r(p, rs, nullptr, tkey);
    r.run();
  } else {
    __shared__ SelSmem<THREADS, C> sel;
    __shared__ uint32_t tkey[TCAP];
    Row<OP, T, VEC, THREADS, C, SEL> r(p, rs, &sel, tkey);
    r.run();
  }
}

// A cluster configuration compiled for a target without clusters: never launched there.
FI_DEVICE void no_clusters() {
#if FI_CUDA
  asm volatile("trap;");
#else
  __builtin_trap();
#endif
}

}  // namespace smp
}  // namespace fi
