// emu.h: the device environment of the host emulators (test_prefill_emu.cc, test_moe_emu.cc):
// the kernels' own source compiled as HIP code for the host, every thread of a block a
// cooperative context (ucontext) switched at barriers and shuffles, blocks one at a time.
// EMU_WARP lanes a warp (32 or 64), at most EMU_MAX_WARPS warps a block, EMU_STACK bytes of
// stack a thread: defined before including this file, or these defaults.
#pragma once
#include <stdint.h>
#include <string.h>
#include <setjmp.h>
#include <ucontext.h>

#include <functional>
#include <vector>

#ifndef EMU_WARP
#define EMU_WARP 32
#endif
#ifndef EMU_MAX_WARPS
#define EMU_MAX_WARPS 8
#endif
#ifndef EMU_STACK
#define EMU_STACK (1 << 18)
#endif

// ---- the device environment, emulated ----
#define __HIP_DEVICE_COMPILE__ 1
#define __device__
#define __forceinline__ inline
#define __global__
#define __shared__ static
struct emu_dim {
  unsigned x, y, z;
};
static emu_dim threadIdx, blockIdx, blockDim, gridDim;
static inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
static inline int __float_as_int(float f) {
  int i;
  memcpy(&i, &f, 4);
  return i;
}

namespace emu {
struct bar {
  int count, arrived, gen;
};
static int nthreads, cur;
// A thread starts on its own stack through makecontext/swapcontext once; after that
// every switch is _setjmp/_longjmp, which saves no signal mask (swapcontext makes two
// sigprocmask system calls a switch, most of the emulators' time).
struct jb {
  jmp_buf b;
};
static ucontext_t sched;
static jmp_buf sched_jb;
static std::vector<ucontext_t> ctx;
static std::vector<jb> th;
static std::vector<char> done, started;
static std::vector<std::vector<char>> stacks;
static bar block_bar, warp_bar[EMU_MAX_WARPS];
static uint32_t xbuf[EMU_MAX_WARPS][EMU_WARP];
static std::function<void()> body;
static long rounds;
static void yield() {
  if (!_setjmp(th[cur].b)) _longjmp(sched_jb, 1);
}
static void wait(bar &b) {
  const int g = b.gen;
  if (++b.arrived == b.count) {
    b.arrived = 0;
    b.gen++;
  } else {
    while (b.gen == g) yield();
  }
}
static uint32_t shfl_bits(uint32_t v, int src) {
  const int w = threadIdx.x / EMU_WARP, l = threadIdx.x % EMU_WARP;
  xbuf[w][l] = v;
  wait(warp_bar[w]);
  const uint32_t r = xbuf[w][src & (EMU_WARP - 1)];
  wait(warp_bar[w]);
  return r;
}
static void trampoline() {
  body();
  done[cur] = 1;
  _longjmp(sched_jb, 1);
}
// Runs body on every block of grid with `threads` threads each.
static void launch(unsigned gx, unsigned gy, int threads, std::function<void()> f) {
  body = f;
  nthreads = threads;
  ctx.assign(threads, ucontext_t());
  th.assign(threads, jb());
  done.assign(threads, 0);
  started.assign(threads, 0);
  stacks.assign(threads, std::vector<char>(EMU_STACK));
  gridDim = {gx, gy, 1};
  blockDim = {(unsigned)threads, 1, 1};
  for (unsigned by = 0; by < gy; by++)
    for (unsigned bx = 0; bx < gx; bx++) {
      blockIdx = {bx, by, 0};
      block_bar = {threads, 0, 0};
      for (int w = 0; w < EMU_MAX_WARPS; w++) warp_bar[w] = {EMU_WARP, 0, 0};
      for (int t = 0; t < threads; t++) {
        done[t] = 0;
        started[t] = 0;
        getcontext(&ctx[t]);
        ctx[t].uc_stack.ss_sp = stacks[t].data();
        ctx[t].uc_stack.ss_size = stacks[t].size();
        ctx[t].uc_link = nullptr;
        makecontext(&ctx[t], trampoline, 0);
      }
      for (;;) {
        int alive = 0;
        for (int t = 0; t < threads; t++) {
          if (done[t]) continue;
          alive++;
          cur = t;
          threadIdx = {(unsigned)t, 0, 0};
          if (!_setjmp(sched_jb)) {
            if (started[t]) _longjmp(th[t].b, 1);
            started[t] = 1;
            swapcontext(&sched, &ctx[t]);
          }
        }
        if (!alive) break;
        if (++rounds > 4000000000L) {
          fprintf(stderr, "deadlock?\n");
          exit(2);
        }
      }
    }
}
}  // namespace emu

// The intrinsics the kernels' portable path calls, over the emulated warps.
static inline void __syncthreads() { emu::wait(emu::block_bar); }
static inline int __shfl(int v, int src, int width) {
  (void)width;
  return (int)emu::shfl_bits((uint32_t)v, src);
}
static inline float __shfl(float v, int src, int width) {
  (void)width;
  return __int_as_float((int)emu::shfl_bits((uint32_t)__float_as_int(v), src));
}
static inline float __shfl_xor(float v, int m, int width) {
  (void)width;
  return __shfl(v, (int)(threadIdx.x % EMU_WARP) ^ m, EMU_WARP);
}
static inline int __shfl_xor(int v, int m, int width) {
  (void)width;
  return __shfl(v, (int)(threadIdx.x % EMU_WARP) ^ m, EMU_WARP);
}

// The lanes of this warp whose pred is nonzero (AMD's __ballot: bit l for lane l).
static inline unsigned long long __ballot(int pred) {
  const int w = threadIdx.x / EMU_WARP;
  emu::xbuf[w][threadIdx.x % EMU_WARP] = pred != 0;
  emu::wait(emu::warp_bar[w]);
  unsigned long long m = 0;
  for (int l = 0; l < EMU_WARP; l++)
    if (emu::xbuf[w][l]) m |= 1ull << l;
  emu::wait(emu::warp_bar[w]);
  return m;
}

static inline void __threadfence() {}
static inline int atomicAdd(int *p, int v) {
  const int o = *p;
  *p += v;
  return o;
}
