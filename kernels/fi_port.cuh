// fi_port.cuh: the portability layer every kernel includes first: fixed-width
// integers, half/bfloat16/fp8 types with their conversions, warp and block reductions.
// Compiled by NVRTC or hiprtc with no toolkit header, so nothing here includes one.
#pragma once

#if defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP_DEVICE_COMPILE__)
#define FI_HIP 1
#define FI_WARP 64
// (HIP's second launch-bounds argument means something else: waves an execution unit)
#define FI_LAUNCH_BOUNDS(threads, min_blocks) __launch_bounds__(threads)
#else
#define FI_CUDA 1
#define FI_WARP 32
// min_blocks resident an SM: ptxas caps the registers so that they fit
#define FI_LAUNCH_BOUNDS(threads, min_blocks) __launch_bounds__(threads, min_blocks)
#endif

// LP64 spellings, the same as glibc's, so a toolkit that predefines them agrees.
// hiprtc predefines the 32- and 64-bit ones (64-bit as long long: same size).
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
#if FI_CUDA
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
#endif

#define FI_DEVICE __device__ __forceinline__

namespace fi {

FI_DEVICE float bits_to_float(uint32_t u) { return __int_as_float((int)u); }
FI_DEVICE uint32_t float_to_bits(float f) { return (uint32_t)__float_as_int(f); }

}  // namespace fi

// Every kernel's first statement. The runtime launches with programmatic
// dependent launch on sm_90 and later, so this grid may start while the
// previous one in the stream is still running: wait for it to finish (and its
// writes to be visible) before any load or store, then let the next grid's
// blocks be scheduled as ours drain. Before sm_90 and on ROCm both compile to
// nothing; on sm_90 launched without the attribute (FI_PDL=0) the wait returns
// at once, and the trigger still lets a next kernel that was launched with it
// (the caller's) start early: fi_runtime.h says it must wait.
FI_DEVICE void fi_pdl_enter() {
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---- 16-bit floats: plain storage structs, arithmetic is always in float ----
struct fi_half {
  uint16_t bits;
};
struct fi_bf16 {
  uint16_t bits;
};

FI_DEVICE float fi_to_float(float x) { return x; }
FI_DEVICE float fi_to_float(fi_half h) {
#if FI_CUDA
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
#else
  return (float)__builtin_bit_cast(_Float16, h.bits);
#endif
}
FI_DEVICE float fi_to_float(fi_bf16 b) { return fi::bits_to_float((uint32_t)b.bits << 16); }

template <typename T>
FI_DEVICE T fi_from_float(float f);
template <>
FI_DEVICE float fi_from_float<float>(float f) {
  return f;
}
template <>
FI_DEVICE fi_half fi_from_float<fi_half>(float f) {
  fi_half h;
#if FI_CUDA
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
#else
  h.bits = __builtin_bit_cast(uint16_t, (_Float16)f);
#endif
  return h;
}
template <>
FI_DEVICE fi_bf16 fi_from_float<fi_bf16>(float f) {
  fi_bf16 b;
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(f));
#else
  // Round to nearest even on the upper half; NaN stays a quiet NaN.
  uint32_t u = fi::float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    b.bits = (uint16_t)((u >> 16) | 0x40u);
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    b.bits = (uint16_t)(u >> 16);
  }
#endif
  return b;
}

// ---- fp8 (OCP e4m3 "fn": no infinities, max 448; e5m2: IEEE-like) ----
struct fi_e4m3 {
  uint8_t bits;
};
struct fi_e5m2 {
  uint8_t bits;
};

// sm_89 and later convert e4m3 in hardware (cvt ... e4m3x2, with the same
// round-to-nearest-even and satfinite rules as the portable code below, which
// is what other targets run): the portable encoder costs ~25 instructions an
// element and held the fp8 cache append far below the 16-bit one (docs/ops.md,
// second session, RoPE and the paged-KV append).
#if FI_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FI_FP8_HW 1
#else
#define FI_FP8_HW 0
#endif

FI_DEVICE float fi_to_float(fi_e4m3 v) {
#if FI_FP8_HW
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((unsigned short)v.bits));
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)(h2 & 0xffffu)));
  return f;
#endif
  uint32_t b = v.bits, s = b >> 7, e = (b >> 3) & 15u, m = b & 7u;
  float mag;
  if (e == 15u && m == 7u) return fi::bits_to_float(0x7fc00000u);
  if (e == 0u)
    mag = (float)m * (1.0f / 512.0f);  // subnormal: m * 2^-9
  else
    mag = fi::bits_to_float(((e + 120u) << 23) | (m << 20));  // exponent bias 7 -> 127
  return s ? -mag : mag;
}
FI_DEVICE float fi_to_float(fi_e5m2 v) {
  fi_half h;
  h.bits = (uint16_t)((uint32_t)v.bits << 8);  // e5m2 is the top byte of an fp16
  return fi_to_float(h);
}
template <>
FI_DEVICE fi_e4m3 fi_from_float<fi_e4m3>(float f) {
  // Round to nearest even, saturating to +-448 (the "satfinite" convention).
  fi_e4m3 r;
#if FI_FP8_HW
  {
    unsigned short d;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(0.0f), "f"(f));
    r.bits = (uint8_t)(d & 0xffu);
    return r;
  }
#endif
  uint32_t u = fi::float_to_bits(f), s = (u >> 31) << 7;
  float a = fabsf(f);
  if (a != a) {
    r.bits = 0x7f;
    return r;
  }
  if (a >= 448.0f) {
    r.bits = (uint8_t)(s | 0x7eu);
    return r;
  }
  int e = (int)((fi::float_to_bits(a) >> 23) & 0xffu) - 127;
  uint32_t code;
  if (e < -6) {
    code = (uint32_t)rintf(a * 512.0f);  // subnormals, units of 2^-9; 8 is the smallest normal
  } else {
    uint32_t m23 = fi::float_to_bits(a) & 0x7fffffu;
    uint32_t m = (m23 + 0x7ffffu + ((m23 >> 20) & 1u)) >> 20;
    if (m == 8u) {
      m = 0u;
      e += 1;
    }
    code = ((uint32_t)(e + 7) << 3) | m;
    if (code > 0x7eu) code = 0x7eu;
  }
  r.bits = (uint8_t)(s | code);
  return r;
}
template <>
FI_DEVICE fi_e5m2 fi_from_float<fi_e5m2>(float f) {
  // Not the hardware cvt: it saturates (satfinite is mandatory there), while
  // e5m2 keeps IEEE overflow to infinity. Cheap anyway: through fp16.
  uint32_t h = fi_from_float<fi_half>(f).bits, lo = h & 0xffu, hi = h >> 8;
  fi_e5m2 r;
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) {
    r.bits = (uint8_t)(hi | 0x02u);  // keep NaN a NaN after truncation
    return r;
  }
  if (lo > 0x80u || (lo == 0x80u && (hi & 1u))) hi += 1u;
  r.bits = (uint8_t)hi;
  return r;
}

// ---- vectors: N elements moved as one aligned load or store ----
template <typename T, int N>
struct alignas(sizeof(T) * N) fi_vec {
  T v[N];
};

template <typename T, int N>
FI_DEVICE fi_vec<T, N> fi_load(const T *p) {
  return *reinterpret_cast<const fi_vec<T, N> *>(p);
}
template <typename T, int N>
FI_DEVICE void fi_store(T *p, const fi_vec<T, N> &x) {
  *reinterpret_cast<fi_vec<T, N> *>(p) = x;
}

// Streaming variants for data touched once: loads skip L1 (the row is not
// read again by this SM), stores are marked evict-first in L2. NC: through
// the read-only path, for data no thread writes during the kernel; without
// it the load suits a thread that later overwrites what it read (in place).
template <typename T, int N, bool NC = true>
FI_DEVICE fi_vec<T, N> fi_load_stream(const T *p) {
#if FI_CUDA
  if (sizeof(T) * N == 16) {
    fi_vec<T, N> r;
    uint32_t *u = reinterpret_cast<uint32_t *>(&r);
    if (NC)
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3])
                   : "l"(p));
    else
      asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3])
                   : "l"(p));
    return r;
  }
#endif
  return fi_load<T, N>(p);
}
template <typename T, int N>
FI_DEVICE void fi_store_stream(T *p, const fi_vec<T, N> &x) {
#if FI_CUDA
  if (sizeof(T) * N == 16) {
    const uint32_t *u = reinterpret_cast<const uint32_t *>(&x);
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(u[0]), "r"(u[1]),
                 "r"(u[2]), "r"(u[3])
                 : "memory");
    return;
  }
#endif
  fi_store<T, N>(p, x);
}

// ---- reductions ----
// Sum over groups of W lanes (W a power of two, at most the warp).
template <int W = FI_WARP>
FI_DEVICE float fi_warp_sum(float v) {
#pragma unroll
  for (int o = W / 2; o > 0; o >>= 1) {
#if FI_CUDA
    v += __shfl_xor_sync(0xffffffffu, v, o);
#else
    v += __shfl_xor(v, o, W);
#endif
  }
  return v;
}

// Sum over a block of THREADS threads; every thread gets the total.
// scratch holds at least THREADS / FI_WARP floats.
template <int THREADS>
FI_DEVICE float fi_block_sum(float v, float *scratch) {
  constexpr int W = THREADS < FI_WARP ? THREADS : FI_WARP;
  v = fi_warp_sum<W>(v);
  if (THREADS <= FI_WARP) return v;
  constexpr int WARPS = THREADS / FI_WARP > 0 ? THREADS / FI_WARP : 1;
  const int lane = threadIdx.x % FI_WARP, warp = threadIdx.x / FI_WARP;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < WARPS ? scratch[lane] : 0.0f;
  t = fi_warp_sum<FI_WARP>(t);
  return t;
}
