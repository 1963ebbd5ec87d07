// cascade.cuh: merging partial attention states (v, LSE). A row is one (seq, head) pair of
// head_dim elements, handled by a group of G lanes of one warp; blocks walk rows grid-stride.
#pragma once
#include "fi_params.h"

// The numerics, shared by both kernels. A state is (v, s), s the natural-log
// sum of exp of that part's scores. With m = max of the parts' s, each part
// weighs w = exp(s - m) and
//   s_out = m + log(sum w),   v_out = sum(w v) / sum(w),
// computed in float, so no exp overflows whatever the LSEs' magnitude.
// An empty part (s = -inf) weighs exactly 0 and its v is never multiplied:
// it may hold anything, even NaN, and merging with it returns the other part
// bit for bit (w = 1, 1 * v / 1; a -0.0 becomes +0.0). Every part empty
// gives v = 0, s = -inf. A NaN LSE gives NaN (never hidden).
// In place (v_out is v_a), each element is read once, by the lane that then
// writes it, so the streaming loads (the non-coherent path) never see a
// value this kernel wrote.

namespace fi {

FI_DEVICE float cas_neg_inf() { return bits_to_float(0xff800000u); }

template <int HINT, typename T, int VEC>
FI_DEVICE fi_vec<T, VEC> cas_load(const T *p) {
  return HINT ? fi_load_stream<T, VEC>(p) : fi_load<T, VEC>(p);
}
template <int HINT, typename T, int VEC>
FI_DEVICE void cas_store(T *p, const fi_vec<T, VEC> &x) {
  if (HINT)
    fi_store_stream<T, VEC>(p, x);
  else
    fi_store<T, VEC>(p, x);
}

// w * x, but 0 when the part weighs 0: an empty part's v (garbage, NaN) must
// not reach the sum. A NaN weight (NaN LSE) still propagates.
FI_DEVICE float cas_term(float w, float x) { return w != 0.0f ? w * x : 0.0f; }

// In place (s_out is s_a), every lane of a group reads the row's LSE and one
// lane then overwrites it: on CUDA the lanes of a warp need not run in step,
// so the group meets first. AMD wavefronts run in step.
template <int G>
FI_DEVICE void cas_group_sync() {
#if FI_CUDA
  if (G > 1) {
    const unsigned lane = threadIdx.x % 32u;
    const unsigned mask =
        G >= 32 ? 0xffffffffu : ((1u << (G & 31)) - 1u) << (lane & ~(unsigned)(G - 1));
    __syncwarp(mask);
  }
#endif
}

// Normalized weights of a two-part merge and the merged LSE.
struct cas_w2 {
  float wa, wb, s;
};
FI_DEVICE cas_w2 cas_weights2(float sa, float sb) {
  cas_w2 r;
  const float m = fmaxf(sa, sb);
  if (m == cas_neg_inf()) {  // both empty
    r.wa = r.wb = 0.0f;
    r.s = m;
    return r;
  }
  const float ea = expf(sa - m), eb = expf(sb - m), sum = ea + eb, inv = 1.0f / sum;
  r.wa = ea * inv;
  r.wb = eb * inv;
  r.s = m + logf(sum);
  return r;
}

// 16 bytes of T held in registers as 4 raw words and converted only where
// used. Split into 16-bit halves at its load, a vector puts the load's first
// consumer (and the stall for it) right after the load, and takes twice the
// registers: measured with the prefetching kernel, bf16 ran slower that way
// (80 registers) than as words (58), like f32 (docs/ops.md, figures from
// comments).
typedef fi_vec<uint32_t, 4> cas_w16;

// EPW elements of T per word: get() unpacks a word to floats, put() packs.
template <typename T>
struct cas_cvt;
template <>
struct cas_cvt<float> {
  static constexpr int EPW = 1;
  static FI_DEVICE void get(uint32_t w, float *f) { f[0] = bits_to_float(w); }
  static FI_DEVICE uint32_t put(const float *f) { return float_to_bits(f[0]); }
};
template <>
struct cas_cvt<fi_half> {
  static constexpr int EPW = 2;
  static FI_DEVICE void get(uint32_t w, float *f) {
    f[0] = fi_to_float(fi_half{(uint16_t)(w & 0xffffu)});
    f[1] = fi_to_float(fi_half{(uint16_t)(w >> 16)});
  }
  static FI_DEVICE uint32_t put(const float *f) {
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(f[1]), "f"(f[0]));
    return r;
#else
    return (uint32_t)fi_from_float<fi_half>(f[0]).bits |
           ((uint32_t)fi_from_float<fi_half>(f[1]).bits << 16);
#endif
  }
};
template <>
struct cas_cvt<fi_bf16> {
  static constexpr int EPW = 2;
  static FI_DEVICE void get(uint32_t w, float *f) {
    f[0] = bits_to_float(w << 16);
    f[1] = bits_to_float(w & 0xffff0000u);
  }
  static FI_DEVICE uint32_t put(const float *f) {
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(f[1]), "f"(f[0]));
    return r;
#else
    return (uint32_t)fi_from_float<fi_bf16>(f[0]).bits |
           ((uint32_t)fi_from_float<fi_bf16>(f[1]).bits << 16);
#endif
  }
};

// The CH 16-byte vectors lane `lane` holds of a row of nv vectors: vector
// c * G + lane, so for each c the G lanes of a group read G adjacent vectors.
template <int HINT, typename T, int VEC, int G, int CH>
FI_DEVICE void cas_load_words(const T *row, int lane, int nv, cas_w16 (&x)[CH]) {
#pragma unroll
  for (int c = 0; c < CH; c++) {
    const int j = c * G + lane;
    if (j < nv)
      x[c] = cas_load<HINT, uint32_t, 4>(reinterpret_cast<const uint32_t *>(row + (int64_t)j * VEC));
  }
}

// ---- merge_state: (v_a, s_a) + (v_b, s_b) -> (v_out, s_out) ----

// T: element type; VEC: elements per access; THREADS: block size; G: lanes
// per row (a power of two, at most 32); CH: vectors per lane held in
// registers (G * CH * VEC >= head_dim), or 0 for a loop over any head_dim;
// PF: prefetch the next row (persistent grid); HINT: streaming cache hints
// on v (every element is touched once).
template <typename T, int VEC, int THREADS, int G, int CH, int PF, int HINT>
FI_DEVICE void merge_state(const fi_merge_state_params &p) {
  constexpr int GROUPS = THREADS / G;  // rows a block works on at once
  const int lane = threadIdx.x % G, group = threadIdx.x / G;
  const int nv = p.head_dim / VEC;
  const unsigned heads = (unsigned)p.heads;
  const int64_t rows = (int64_t)p.seq * p.heads;  // < 2^31: checked by the runtime
  const int64_t step = (int64_t)gridDim.x * GROUPS;
  const T *va = static_cast<const T *>(p.v_a);
  const T *vb = static_cast<const T *>(p.v_b);
  T *vo = static_cast<T *>(p.v_out);

  if constexpr (CH > 0) {
    // Register-resident rows. PF: the next row is loaded while this one is
    // merged and stored (two rows of both inputs in flight per lane, on a
    // persistent grid); else a grid as large as the rows, one row per group.
    static_assert(VEC * sizeof(T) == 16, "register rows are moved 16 bytes at a time");
    typedef cas_cvt<T> cv;
    constexpr int C = CH;
    cas_w16 a[C], b[C], an[C], bn[C];
    float sa = 0.0f, sb = 0.0f, san = 0.0f, sbn = 0.0f;
    int keep = 1, keepn = 1;
    // Loads row r's LSEs, mask and vectors into the given registers.
    auto load = [&](int64_t r, cas_w16(&x)[C], cas_w16(&z)[C], float &lx, float &lz, int &k) {
      const unsigned i = (unsigned)r / heads, h = (unsigned)r - i * heads;
      lx = p.s_a[i * p.sa_stride[0] + h * p.sa_stride[1]];
      lz = p.s_b[i * p.sb_stride[0] + h * p.sb_stride[1]];
      if (p.mask) k = p.mask[i * p.mask_stride] != 0;
      cas_load_words<HINT, T, VEC, G, C>(va + i * p.va_stride[0] + h * p.va_stride[1], lane, nv, x);
      cas_load_words<HINT, T, VEC, G, C>(vb + i * p.vb_stride[0] + h * p.vb_stride[1], lane, nv, z);
    };
    int64_t row = (int64_t)blockIdx.x * GROUPS + group;
    if (row < rows) load(row, a, b, sa, sb, keep);
    for (; row < rows; row += step) {
      const int64_t next = row + step;
      if (PF && next < rows) load(next, an, bn, san, sbn, keepn);
      // A masked row was read (that keeps the mask load off the loads'
      // critical path) but is not written.
      if (keep) {
        const unsigned i = (unsigned)row / heads, h = (unsigned)row - i * heads;
        const cas_w2 w = cas_weights2(sa, sb);
        T *o = vo + i * p.vo_stride[0] + h * p.vo_stride[1];
#pragma unroll
        for (int c = 0; c < C; c++) {
          const int j = c * G + lane;
          if (j < nv) {
            cas_w16 y;
#pragma unroll
            for (int q = 0; q < 4; q++) {
              float fa[cv::EPW], fb[cv::EPW], fy[cv::EPW];
              cv::get(a[c].v[q], fa);
              cv::get(b[c].v[q], fb);
#pragma unroll
              for (int e = 0; e < cv::EPW; e++) fy[e] = cas_term(w.wa, fa[e]) + cas_term(w.wb, fb[e]);
              y.v[q] = cv::put(fy);
            }
            cas_store<HINT, uint32_t, 4>(reinterpret_cast<uint32_t *>(o + (int64_t)j * VEC), y);
          }
        }
        if (p.s_out) {
          cas_group_sync<G>();
          if (lane == 0) p.s_out[i * p.so_stride[0] + h * p.so_stride[1]] = w.s;
        }
      }
      if (PF) {
#pragma unroll
        for (int c = 0; c < C; c++) {
          a[c] = an[c];
          b[c] = bn[c];
        }
        sa = san;
        sb = sbn;
        keep = keepn;
      } else if (next < rows) {
        load(next, a, b, sa, sb, keep);
      }
    }
  } else {
    // Any head_dim: the group walks its row G vectors at a time.
    for (int64_t row = (int64_t)blockIdx.x * GROUPS + group; row < rows; row += step) {
      const unsigned i = (unsigned)row / heads, h = (unsigned)row - i * heads;
      if (p.mask && p.mask[i * p.mask_stride] == 0) continue;
      const cas_w2 w = cas_weights2(p.s_a[i * p.sa_stride[0] + h * p.sa_stride[1]],
                                    p.s_b[i * p.sb_stride[0] + h * p.sb_stride[1]]);
      const T *ra = va + i * p.va_stride[0] + h * p.va_stride[1];
      const T *rb = vb + i * p.vb_stride[0] + h * p.vb_stride[1];
      T *o = vo + i * p.vo_stride[0] + h * p.vo_stride[1];
      for (int j = lane; j < nv; j += G) {
        const fi_vec<T, VEC> x = cas_load<HINT, T, VEC>(ra + (int64_t)j * VEC);
        const fi_vec<T, VEC> z = cas_load<HINT, T, VEC>(rb + (int64_t)j * VEC);
        fi_vec<T, VEC> y;
#pragma unroll
        for (int k = 0; k < VEC; k++)
          y.v[k] = fi_from_float<T>(cas_term(w.wa, fi_to_float(x.v[k])) +
                                    cas_term(w.wb, fi_to_float(z.v[k])));
        cas_store<HINT, T, VEC>(o + (int64_t)j * VEC, y);
      }
      if (p.s_out) {
        cas_group_sync<G>();
        if (lane == 0) p.s_out[i * p.so_stride[0] + h * p.so_stride[1]] = w.s;
      }
    }
  }
}

// ---- merge_states: N states v [seq, N, H, D], s [seq, N, H] -> [seq, H, D], [seq, H] ----

// One batch of NB states of a row: their LSEs (-inf past the last state, so
// those slots weigh 0) and the CH vectors this lane holds of each.
template <int HINT, typename T, int VEC, int G, int CH, int NB>
FI_DEVICE void cas_load_batch(const fi_merge_states_params &p, int64_t row, int n0, int lane,
                              int nv, cas_w16 (&x)[NB][CH], float (&s)[NB]) {
  const unsigned heads = (unsigned)p.heads;
  const unsigned i = (unsigned)row / heads, h = (unsigned)row - i * heads;
  const T *v = static_cast<const T *>(p.v) + i * p.v_stride[0] + h * p.v_stride[2];
  const float *ls = p.s + i * p.s_stride[0] + h * p.s_stride[2];
#pragma unroll
  for (int b = 0; b < NB; b++) {
    const int n = n0 + b;
    if (n < p.num_states) {
      s[b] = ls[n * p.s_stride[1]];
      cas_load_words<HINT, T, VEC, G, CH>(v + n * p.v_stride[1], lane, nv, x[b]);
    } else {
      s[b] = cas_neg_inf();
    }
  }
}

// T, VEC, THREADS, G, CH, PF, HINT as for merge_state; NB: states loaded at
// once. A row's states are folded in batch by batch with a running maximum
// (the online softmax rescale), so any N works with NB states in registers.
template <typename T, int VEC, int THREADS, int G, int CH, int NB, int PF, int HINT>
FI_DEVICE void merge_states(const fi_merge_states_params &p) {
  constexpr int GROUPS = THREADS / G;
  const int lane = threadIdx.x % G, group = threadIdx.x / G;
  const int nv = p.head_dim / VEC;
  const int nstates = p.num_states;
  const unsigned heads = (unsigned)p.heads;
  const int64_t rows = (int64_t)p.seq * p.heads;
  const int64_t step = (int64_t)gridDim.x * GROUPS;
  T *vo = static_cast<T *>(p.v_out);

  if constexpr (CH > 0) {
    static_assert(VEC * sizeof(T) == 16, "register rows are moved 16 bytes at a time");
    typedef cas_cvt<T> cv;
    constexpr int C = CH;
    // A work item is (row, first state of the batch). PF: the next item's
    // batch is loaded while this one is folded in (persistent grid); else
    // the grid is as large as the rows.
    cas_w16 x[NB][C], xn[NB][C];
    float s[NB], sn[NB];
    float acc[C][VEC];
    float m = cas_neg_inf(), d = 0.0f;
#pragma unroll
    for (int c = 0; c < C; c++)
#pragma unroll
      for (int k = 0; k < VEC; k++) acc[c][k] = 0.0f;
    int64_t row = (int64_t)blockIdx.x * GROUPS + group;
    int n0 = 0;
    if (row < rows) cas_load_batch<HINT, T, VEC, G, C, NB>(p, row, 0, lane, nv, x, s);
    while (row < rows) {
      int64_t nrow = row;
      int nn0 = n0 + NB;
      if (nn0 >= nstates) {
        nrow = row + step;
        nn0 = 0;
      }
      if (PF && nrow < rows) cas_load_batch<HINT, T, VEC, G, C, NB>(p, nrow, nn0, lane, nv, xn, sn);
      float mb = m;
#pragma unroll
      for (int b = 0; b < NB; b++) mb = fmaxf(mb, s[b]);
      if (mb != cas_neg_inf()) {  // else: every state so far is empty
        const float scale = expf(m - mb);  // 0 while m is -inf (acc and d are 0 then)
        d *= scale;
#pragma unroll
        for (int c = 0; c < C; c++)
#pragma unroll
          for (int k = 0; k < VEC; k++) acc[c][k] *= scale;
        m = mb;
#pragma unroll
        for (int b = 0; b < NB; b++) {
          const float w = expf(s[b] - m);
          d += w;
#pragma unroll
          for (int c = 0; c < C; c++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
              float f[cv::EPW];
              cv::get(x[b][c].v[q], f);
#pragma unroll
              for (int e = 0; e < cv::EPW; e++) acc[c][q * cv::EPW + e] += cas_term(w, f[e]);
            }
        }
      }
      if (n0 + NB >= nstates) {  // the row's last batch: write it out
        const unsigned i = (unsigned)row / heads, h = (unsigned)row - i * heads;
        const int empty = m == cas_neg_inf();
        const float inv = empty ? 0.0f : 1.0f / d;
        T *o = vo + i * p.vo_stride[0] + h * p.vo_stride[1];
#pragma unroll
        for (int c = 0; c < C; c++) {
          const int j = c * G + lane;
          if (j < nv) {
            cas_w16 y;
#pragma unroll
            for (int q = 0; q < 4; q++) {
              float f[cv::EPW];
#pragma unroll
              for (int e = 0; e < cv::EPW; e++) f[e] = acc[c][q * cv::EPW + e] * inv;
              y.v[q] = cv::put(f);
            }
            cas_store<HINT, uint32_t, 4>(reinterpret_cast<uint32_t *>(o + (int64_t)j * VEC), y);
          }
#pragma unroll
          for (int k = 0; k < VEC; k++) acc[c][k] = 0.0f;
        }
        if (p.s_out && lane == 0)
          p.s_out[i * p.so_stride[0] + h * p.so_stride[1]] = empty ? m : m + logf(d);
        m = cas_neg_inf();
        d = 0.0f;
      }
      if (PF) {
#pragma unroll
        for (int b = 0; b < NB; b++) {
          s[b] = sn[b];
#pragma unroll
          for (int c = 0; c < C; c++) x[b][c] = xn[b][c];
        }
      } else if (nrow < rows) {
        cas_load_batch<HINT, T, VEC, G, C, NB>(p, nrow, nn0, lane, nv, x, s);
      }
      row = nrow;
      n0 = nn0;
    }
  } else {
    // Any head_dim: the maximum and the sum of weights first, then each
    // vector of the row gathers its N states.
    for (int64_t row = (int64_t)blockIdx.x * GROUPS + group; row < rows; row += step) {
      const unsigned i = (unsigned)row / heads, h = (unsigned)row - i * heads;
      const float *ls = p.s + i * p.s_stride[0] + h * p.s_stride[2];
      const T *v = static_cast<const T *>(p.v) + i * p.v_stride[0] + h * p.v_stride[2];
      float m = cas_neg_inf(), d = 0.0f;
      for (int n = 0; n < nstates; n++) m = fmaxf(m, ls[n * p.s_stride[1]]);
      const int empty = m == cas_neg_inf();
      if (!empty)
        for (int n = 0; n < nstates; n++) d += expf(ls[n * p.s_stride[1]] - m);
      const float inv = empty ? 0.0f : 1.0f / d;
      T *o = vo + i * p.vo_stride[0] + h * p.vo_stride[1];
      for (int j = lane; j < nv; j += G) {
        float acc[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] = 0.0f;
        if (!empty)
          for (int n = 0; n < nstates; n++) {
            const float w = expf(ls[n * p.s_stride[1]] - m);
            const fi_vec<T, VEC> x = cas_load<HINT, T, VEC>(v + n * p.v_stride[1] + (int64_t)j * VEC);
#pragma unroll
            for (int k = 0; k < VEC; k++) acc[k] += cas_term(w, fi_to_float(x.v[k]));
          }
        fi_vec<T, VEC> y;
#pragma unroll
        for (int k = 0; k < VEC; k++) y.v[k] = fi_from_float<T>(acc[k] * inv);
        cas_store<HINT, T, VEC>(o + (int64_t)j * VEC, y);
      }
      if (p.s_out && lane == 0)
        p.s_out[i * p.so_stride[0] + h * p.so_stride[1]] = empty ? m : m + logf(d);
    }
  }
}

}  // namespace fi
