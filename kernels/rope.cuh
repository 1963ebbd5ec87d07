// rope.cuh: rotary position embedding of q and k heads (plain / Llama 3.1 frequencies
// from a table, or a cos_sin_cache), in place or out of place. A pure stream.
#pragma once
#include "fi_params.h"

namespace fi {

// T: element type; P: pos_ids type (int32_t or int64_t); CACHE: cos/sin from
// p.cos_sin_cache instead of p.inv_freq; INTERLEAVE: pairs (2j, 2j+1) instead of
// (i, i + rotary_dim/2); VEC: elements per access (divides every offset the
// host passes); THREADS: block size.
//
// Work item = (token, group of FI_ROPE_HEADS_PER_ITEM heads, lane). A lane
// owns a fixed unit of columns of every head: its cos/sin are computed once
// per item and reused for the group's heads (q heads first, then k), whose
// loads are all issued before any is computed: up to 8 accesses in flight.
// Consecutive threads take consecutive lanes, so a warp reads whole rows.
template <typename T, typename P, int CACHE, int INTERLEAVE, int VEC, int THREADS>
FI_DEVICE void rope(const fi_rope_params &p) {
  constexpr int HB = FI_ROPE_HEADS_PER_ITEM;
  // Rotating unit: interleaved pairs must sit in one unit, so at least 2 elements.
  constexpr int NU = INTERLEAVE ? (VEC < 2 ? 2 : VEC) : VEC;
  constexpr int NS = NU / VEC;  // accesses per unit
  constexpr int NP = INTERLEAVE ? NU / 2 : NU;  // pairs per unit
  __shared__ float sfreq[CACHE ? 1 : FI_ROPE_MAX_PAIRS];
  const int half = p.rotary_dim / 2;
  if (!CACHE) {
    // The table is indexed by lane: from the parameter bank that would be a
    // serialized divergent read per pair, from shared memory one per pair.
    for (int i = threadIdx.x; i < half; i += THREADS) sfreq[i] = p.inv_freq[i];
    __syncthreads();
  }
  const uint32_t groups = (uint32_t)p.head_groups, rot = (uint32_t)p.rot_lanes;
  const uint32_t tail = (uint32_t)p.lanes - rot;
  const int heads = p.heads_q + p.heads_k;
  const P *pos_ids = static_cast<const P *>(p.pos_ids);
  // Row of head h0 + j of a token, h clamped into range (the last group may
  // be short). Computed where used instead of held in 8 64-bit pointers
  // across the loads: with those, an in-place branch with its own loads and
  // the tail in the same loop, the kernel took 128 registers, 2 blocks an SM.
  auto src = [&](int tok, int h0, int j) -> const T * {
    const int h = h0 + j < heads ? h0 + j : heads - 1;
    if (h < p.heads_q) return static_cast<const T *>(p.q) + tok * p.q_stride[0] + h * p.q_stride[1];
    return static_cast<const T *>(p.k) + tok * p.k_stride[0] + (h - p.heads_q) * p.k_stride[1];
  };
  auto dst = [&](int tok, int h0, int j) -> T * {
    const int h = h0 + j < heads ? h0 + j : heads - 1;
    if (h < p.heads_q) return static_cast<T *>(p.q_out) + tok * p.qo_stride[0] + h * p.qo_stride[1];
    return static_cast<T *>(p.k_out) + tok * p.ko_stride[0] + (h - p.heads_q) * p.ko_stride[1];
  };
  // The non-rotary tail (out of place only), its own loop so that its
  // registers do not add to the rotation's: copies of VEC elements.
  const uint32_t total_tail = (uint32_t)p.nnz * groups * tail;  // the host keeps these < 2^31
#pragma unroll 1
  for (uint32_t w = blockIdx.x * THREADS + threadIdx.x; w < total_tail; w += gridDim.x * THREADS) {
    const uint32_t lane = w % tail, tg = w / tail;
    const int g = (int)(tg % groups), tok = (int)(tg / groups);
    const int h0 = g * HB, nh = heads - h0 < HB ? heads - h0 : HB;
    const int col = p.rotary_dim + (int)lane * VEC;
    fi_vec<T, VEC> x[HB];
#pragma unroll
    for (int j = 0; j < HB; j++)
      if (j < nh) x[j] = fi_load_stream<T, VEC, false>(src(tok, h0, j) + col);
#pragma unroll
    for (int j = 0; j < HB; j++)
      if (j < nh) fi_store_stream<T, VEC>(dst(tok, h0, j) + col, x[j]);
  }
  const uint32_t total = (uint32_t)p.nnz * groups * rot;
#pragma unroll 1
  for (uint32_t w = blockIdx.x * THREADS + threadIdx.x; w < total; w += gridDim.x * THREADS) {
    const uint32_t lane = w % rot, tg = w / rot;
    const int g = (int)(tg % groups), tok = (int)(tg / groups);
    const int h0 = g * HB, nh = heads - h0 < HB ? heads - h0 : HB;
    // Columns: a = first element of the unit, b = its partners' (non-interleaved).
    const int a = (int)lane * NU;
    const int b = a + half;
    const int i0 = INTERLEAVE ? a / 2 : a;  // first pair index
    fi_vec<T, VEC> xa[HB][NS], xb[HB][INTERLEAVE ? 1 : NS];
    // One load for both in place and out of place (a thread writes only
    // what it has read, so the coherent path is right for either): two
    // branches, .nc and plain, cost 27 registers.
#pragma unroll
    for (int j = 0; j < HB; j++)
      if (j < nh) {
        const T *row = src(tok, h0, j);
#pragma unroll
        for (int s = 0; s < NS; s++) xa[j][s] = fi_load_stream<T, VEC, false>(row + a + s * VEC);
        if (!INTERLEAVE) xb[j][0] = fi_load_stream<T, VEC, false>(row + b);
      }
    float c[NP], sn[NP];
    const int64_t pos = (int64_t)pos_ids[tok];
    if (CACHE) {
      const float *row = p.cos_sin_cache + pos * p.rotary_dim;
#pragma unroll
      for (int i = 0; i < NP; i++) {
        c[i] = row[i0 + i];
        sn[i] = row[half + i0 + i];
      }
    } else {
      const float fp = (float)pos;
#pragma unroll
      for (int i = 0; i < NP; i++) {
        const float f = sfreq[i0 + i];
        // ang + lo is pos * f exactly: at positions near 1e5 the rounded
        // product alone is off by up to 4e-3 rad.
        const float ang = fp * f;
        const float lo = fmaf(fp, f, -ang);
        // Reduced to [-pi, pi] in double (k 2pi is exact to ~1e-11 rad for
        // any 31-bit position), where the hardware __sincosf is accurate to
        // 2^-21 absolute: the full sincosf's range reduction cost bandwidth
        // against a precomputed cos_sin_cache (docs/ops.md, second session,
        // and figures from comments).
        const float kf = rintf(ang * 0.159154943091895336f);
        const float r = (float)(((double)ang - (double)kf * 6.283185307179586477) + (double)lo);
        __sincosf(r, &sn[i], &c[i]);
      }
    }
#pragma unroll
    for (int j = 0; j < HB; j++) {
      if (j >= nh) continue;
      if (INTERLEAVE) {
        fi_vec<T, VEC> y[NS];
#pragma unroll
        for (int i = 0; i < NP; i++) {
          const int e0 = 2 * i, e1 = 2 * i + 1;
          const float x0 = fi_to_float(xa[j][e0 / VEC].v[e0 % VEC]);
          const float x1 = fi_to_float(xa[j][e1 / VEC].v[e1 % VEC]);
          y[e0 / VEC].v[e0 % VEC] = fi_from_float<T>(x0 * c[i] - x1 * sn[i]);
          y[e1 / VEC].v[e1 % VEC] = fi_from_float<T>(x1 * c[i] + x0 * sn[i]);
        }
#pragma unroll
        for (int s = 0; s < NS; s++) fi_store_stream<T, VEC>(dst(tok, h0, j) + a + s * VEC, y[s]);
      } else {
        fi_vec<T, VEC> ya, yb;
#pragma unroll
        for (int i = 0; i < NP; i++) {
          const float x0 = fi_to_float(xa[j][0].v[i]), x1 = fi_to_float(xb[j][0].v[i]);
          ya.v[i] = fi_from_float<T>(x0 * c[i] - x1 * sn[i]);
          yb.v[i] = fi_from_float<T>(x1 * c[i] + x0 * sn[i]);
        }
        fi_store_stream<T, VEC>(dst(tok, h0, j) + a, ya);
        fi_store_stream<T, VEC>(dst(tok, h0, j) + b, yb);
      }
    }
  }
}

}  // namespace fi
