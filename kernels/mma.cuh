// mma.cuh: the shared MMA/PTX layer of decode and prefill: lane shuffles, byte permutes, the mma.sync
// m16n8k16 tile (emulated with shuffles on ROCm), 16-bit pairs, K/V loads and the fp8
// widening (hardware e4m3 conversion on sm_89+), L1-bypassing and L2-prefetch accesses,
// and RoPE on chunk pairs.
#pragma once

namespace fi {
namespace dec {

#if FI_CUDA
#define DEC_FULL 0xffffffffu
#endif

FI_DEVICE uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
#if FI_CUDA
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
#else
  const uint64_t x = ((uint64_t)b << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; i++) {
    const uint32_t s = (sel >> (4 * i)) & 7u;
    r |= (uint32_t)((x >> (8 * s)) & 0xffu) << (8 * i);
  }
  return r;
#endif
}

FI_DEVICE uint32_t shfl(uint32_t v, int src) {
#if FI_CUDA
  return __shfl_sync(DEC_FULL, v, src);
#else
  return (uint32_t)__shfl((int)v, src, 32);
#endif
}
FI_DEVICE float shfl(float v, int src) {
#if FI_CUDA
  return __shfl_sync(DEC_FULL, v, src);
#else
  return __shfl(v, src, 32);
#endif
}
FI_DEVICE float shfl_xor(float v, int m) {
#if FI_CUDA
  return __shfl_xor_sync(DEC_FULL, v, m);
#else
  return __shfl_xor(v, m, 32);
#endif
}
FI_DEVICE int64_t shfl64(int64_t v, int src) {
  const uint32_t lo = shfl((uint32_t)(uint64_t)v, src), hi = shfl((uint32_t)((uint64_t)v >> 32), src);
  return (int64_t)(((uint64_t)hi << 32) | lo);
}

FI_DEVICE float neg_inf() { return bits_to_float(0xff800000u); }

template <typename A, typename B>
struct same {
  static constexpr bool value = false;
};
template <typename A>
struct same<A, A> {
  static constexpr bool value = true;
};
// The mma's element type: q's with a 16-bit cache, f16 with an fp8 one (exact for both
// fp8 formats; q is rounded to f16 once).
template <typename QT, typename KVT>
struct mma_type {
  typedef QT type;
};
template <typename QT>
struct mma_type<QT, fi_e4m3> {
  typedef fi_half type;
};
template <typename QT>
struct mma_type<QT, fi_e5m2> {
  typedef fi_half type;
};

// Loads that bypass L1: partials written by other blocks of this kernel.
FI_DEVICE float ldcg(const float *p) {
#if FI_CUDA
  float r;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(r) : "l"(p));
  return r;
#else
  return *(volatile const float *)p;
#endif
}
FI_DEVICE void ldcg16(const void *p, uint32_t (&r)[4]) {
#if FI_CUDA
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "l"(p));
#else
  for (int i = 0; i < 4; i++) r[i] = ((volatile const uint32_t *)p)[i];
#endif
}

// An int32 read at L2 (no L1 line is left behind; used before the PDL wait, where L1 could
// otherwise keep a line the previous grid is still writing).
FI_DEVICE int32_t ldcg_i32(const int32_t *p) {
#if FI_CUDA
  int32_t r;
  asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(r) : "l"(p));
  return r;
#else
  return *(volatile const int32_t *)p;
#endif
}

// Two words at p (8-byte aligned) read at this point of the program: never hoisted out
// of a loop nor merged with another read.
FI_DEVICE void lds2_volatile(const void *p, uint32_t &a, uint32_t &b) {
#if FI_CUDA
  asm volatile("ld.v2.u32 {%0, %1}, [%2];" : "=r"(a), "=r"(b) : "l"(p));
#else
  a = ((volatile const uint32_t *)p)[0];
  b = ((volatile const uint32_t *)p)[1];
#endif
}

FI_DEVICE float ex2(float x) {
#if FI_CUDA
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return exp2f(x);
#endif
}

// A learned attention sink (gpt-oss) folded into a query head's final softmax state: x is
// the sink's logit in base 2 (sink * log2 e, the units of the scaled logits the state was
// built from), m the state's max and s its sum of 2^(logit - m) over the keys. Afterwards m
// and s are those of the keys and the sink together; the returned factor multiplies the
// keys' accumulated values before they are divided by the new s (0 when s was: no key).
// A sink of -inf changes nothing. Applied once, where a row's last state is final (never to
// a split's partial, so that merges count it once).
FI_DEVICE float sink_fold(float x, float &m, float &s) {
  if (x == neg_inf()) return 1.0f;
  const bool keys = s > 0.0f;
  const float m2 = keys ? fmaxf(m, x) : x, a = keys ? ex2(m - m2) : 0.0f;
  s = s * a + ex2(x - m2);
  m = m2;
  return a;
}
constexpr float LOG2E_F = 1.4426950408889634f;

// ---- 16-bit pairs: a 32-bit word holds two elements, the lower index in the low half ----
template <typename MT>
struct w16;
template <>
struct w16<fi_bf16> {
  static FI_DEVICE float lo(uint32_t w) { return bits_to_float(w << 16); }
  static FI_DEVICE float hi(uint32_t w) { return bits_to_float(w & 0xffff0000u); }
  static FI_DEVICE uint32_t pack(float l, float h) {
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(h), "f"(l));
    return r;
#else
    return (uint32_t)fi_from_float<fi_bf16>(l).bits | ((uint32_t)fi_from_float<fi_bf16>(h).bits << 16);
#endif
  }
};
template <>
struct w16<fi_half> {
  static FI_DEVICE float lo(uint32_t w) { return fi_to_float(fi_half{(uint16_t)(w & 0xffffu)}); }
  static FI_DEVICE float hi(uint32_t w) { return fi_to_float(fi_half{(uint16_t)(w >> 16)}); }
  static FI_DEVICE uint32_t pack(float l, float h) {
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(h), "f"(l));
    return r;
#else
    return (uint32_t)fi_from_float<fi_half>(l).bits | ((uint32_t)fi_from_float<fi_half>(h).bits << 16);
#endif
  }
};

// d += A (16x16, row) * B (16x8, col), fp32 accumulators; MT is bf16 or f16.
template <typename MT>
FI_DEVICE void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                   uint32_t b1) {
#if FI_CUDA
  if constexpr (same<MT, fi_bf16>::value) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
#else
  // The same fragment semantics from lane shuffles (32-lane groups).
  typedef w16<MT> W;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll 1
  for (int q = 0; q < 4; q++) {
    const uint32_t A0 = shfl(a0, 4 * g + q), A1 = shfl(a1, 4 * g + q);
    const uint32_t A2 = shfl(a2, 4 * g + q), A3 = shfl(a3, 4 * g + q);
    for (int e = 0; e < 2; e++) {
      const int src = 4 * (2 * c + e) + q;
      const uint32_t B0 = shfl(b0, src), B1 = shfl(b1, src);
      d[e] += W::lo(A0) * W::lo(B0) + W::hi(A0) * W::hi(B0) + W::lo(A2) * W::lo(B1) +
              W::hi(A2) * W::hi(B1);
      d[2 + e] += W::lo(A1) * W::lo(B0) + W::hi(A1) * W::hi(B0) + W::lo(A3) * W::lo(B1) +
                  W::hi(A3) * W::hi(B1);
    }
  }
#endif
}

// ---- KV element access ----
// Raw loads of N 32-bit words (N = 2: 8 bytes, N = 4: 16 bytes) that bypass L1: the
// cache is read once.
template <int N>
FI_DEVICE void ldg_nc(const void *p, uint32_t (&r)[N]) {
  static_assert(N == 2 || N == 4, "8- or 16-byte loads");
#if FI_CUDA
  if constexpr (N == 4) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "l"(p));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "l"(p));
  }
#else
  const fi_vec<uint32_t, N> x = *reinterpret_cast<const fi_vec<uint32_t, N> *>(p);
  for (int i = 0; i < N; i++) r[i] = x.v[i];
#endif
}

// ldg_nc with an L2 cache-hint policy (evict-first: the KV cache is read once a run, and
// should not push out what is read again). On the H200 the nvcc-built decode ran faster
// with the hinted load than with the plain one (B=64 and B=128 bf16, level with its loads
// alone), an fp8 cache slower; in fi-bench evict-first and evict-normal through this
// instruction measured level, so the gain is the instruction's, not the policy's (not
// understood; docs/decode.md, eighth session, the KV loads under an L2 evict-first
// policy). Only 16-bit caches use it, and not every block size (decode.cuh).
// ROCm: plain loads. The policy: evict-first, or evict-normal (a plain load's).
FI_DEVICE uint64_t l2_kv_policy(int evict_first) {
  uint64_t pol = 0;
#if FI_CUDA
  if (evict_first)
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  else
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
#else
  (void)evict_first;
#endif
  return pol;
}
template <int N>
FI_DEVICE void ldg_nc_ef(const void *p, uint32_t (&r)[N], uint64_t pol) {
  static_assert(N == 2 || N == 4, "8- or 16-byte loads");
#if FI_CUDA
  if constexpr (N == 4) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "l"(p), "l"(pol));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
                 : "=r"(r[0]), "=r"(r[1])
                 : "l"(p), "l"(pol));
  }
#else
  (void)pol;
  ldg_nc<N>(p, r);
#endif
}

// A KV load: evict-first under pol (EF), else plain.
template <bool EF, int N>
FI_DEVICE void ldg_kv(const void *p, uint32_t (&r)[N], uint64_t pol) {
  if constexpr (EF)
    ldg_nc_ef<N>(p, r, pol);
  else
    ldg_nc<N>(p, r);
}

// What the kernel needs of the cache's element type: FP8 (1: a byte an element, widened
// to f16 in registers) and cvt2, which widens 4 fp8 bytes to two f16 pairs (bytes 0, 1
// to the first word, 2, 3 to the second; the lower byte in the lower half).
template <typename KVT>
struct kv {
  static constexpr int FP8 = 0;
};
// e5m2 is the top byte of an f16.
template <>
struct kv<fi_e5m2> {
  static constexpr int FP8 = 1;
  static FI_DEVICE void cvt2(uint32_t w, uint32_t &lo, uint32_t &hi) {
    lo = prmt(w, 0u, 0x1404u);
    hi = prmt(w, 0u, 0x3424u);
  }
};
// e4m3: one cvt per pair on sm_89 and later (the exact value); elsewhere integer ops
// that give the value / 256 (the byte in the high half, exponent and mantissa moved
// down a bit). E4M3_WIDE says which: the kernel multiplies its scales by it.
template <>
struct kv<fi_e4m3> {
  static constexpr int FP8 = 1;
#if FI_FP8_HW
  static constexpr float E4M3_WIDE = 1.0f / 256.0f;  // the host's scales assume value / 256
  static FI_DEVICE void cvt2(uint32_t w, uint32_t &lo, uint32_t &hi) {
    asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\t"
        "cvt.rn.f16x2.e4m3x2 %1, h;}"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
  }
#else
  static constexpr float E4M3_WIDE = 1.0f;
  static FI_DEVICE uint32_t down(uint32_t x) { return (x & 0x80008000u) | ((x >> 1) & 0x3f803f80u); }
  static FI_DEVICE void cvt2(uint32_t w, uint32_t &lo, uint32_t &hi) {
    lo = down(prmt(w, 0u, 0x1404u));
    hi = down(prmt(w, 0u, 0x3424u));
  }
#endif
};

// Starts moving bytes (a multiple of 16, 16-byte aligned) of global memory into L2: on
// sm_90 one bulk prefetch unless `lines`, else one prefetch per 128-byte line; nothing
// on ROCm.
FI_DEVICE void prefetch_l2(const void *ptr, uint32_t bytes, bool lines) {
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (!lines) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(ptr), "r"(bytes));
    return;
  }
#endif
#if FI_CUDA
  for (uint32_t o = 0; o < bytes; o += 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char *>(ptr) + o));
#else
  (void)ptr;
  (void)bytes;
  (void)lines;
#endif
}

// Rotates a pair of chunks of NW words (dims x = 2 NW cx + e and y = x + D / 2) by pos * freq.
template <typename MT, int NW>
FI_DEVICE void rope_pair(uint32_t (&x)[NW], uint32_t (&y)[NW], float pos, const float *freq, int cx) {
  typedef w16<MT> W;
#pragma unroll
  for (int w = 0; w < NW; w++) {
    float xs[2] = {W::lo(x[w]), W::hi(x[w])}, ys[2] = {W::lo(y[w]), W::hi(y[w])};
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const float f = freq[2 * NW * cx + 2 * w + e];
      // The angle's rounding error, exact from the fma, corrects sin and cos.
      const float a = pos * f, da = fmaf(pos, f, -a);
      float s, co;
      sincosf(a, &s, &co);
      const float sn = fmaf(da, co, s), cn = fmaf(-da, s, co);
      const float nx = xs[e] * cn - ys[e] * sn, ny = ys[e] * cn + xs[e] * sn;
      xs[e] = nx;
      ys[e] = ny;
    }
    x[w] = W::pack(xs[0], xs[1]);
    y[w] = W::pack(ys[0], ys[1]);
  }
}

}  // namespace dec
}  // namespace fi
