// test_copy_emu.cc: the data-movement kernels without a tensor core, run from their own
// source on the host (emu.h: every thread a cooperative context, blocks one at a time):
// the MLA cache append (kernels/mla_append.cuh: 4 vectors a thread, the row's page lookup
// once) into shuffled pages of sizes 1, 16 and 64, separate caches and one 576-wide buffer,
// checked bit for bit with every other slot untouched; and bit packing
// (kernels/packbits.cuh) in both orders, unsegmented over a grid and segmented with the
// block reduction of the segments' byte offsets, checked against a host packing with the
// output's tail untouched. Their GPU tests: gpu_mla.c (append), gpu_packbits.c.
//
// Built and run by `make test` (not by `make test-asan`: ucontext stacks).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "emu.h"

#include "fi_port.cuh"
#include "mla_append.cuh"
#include "packbits.cuh"
#include "emu_host.h"

static int fails = 0;
static void report(bool ok, const char *what) {
  printf("%s %s\n", ok ? "PASS" : "FAIL", what);
  fails += !ok;
}

// The append: B requests of lkv tokens (the last lq of each appended), pages of ps.
static void append_case(int ps, int fused) {
  const int B = 4, lq[B] = {1, 5, 0, 33}, lkv[B] = {40, 5, 3, 200};
  std::vector<int32_t> kvp(B + 1, 0);
  for (int b = 0; b < B; b++) kvp[b + 1] = kvp[b] + (lkv[b] + ps - 1) / ps;
  const int64_t pages = kvp[B] + 3, rows = pages * ps, rw = fused ? 576 : 512;
  std::vector<int32_t> perm(pages);
  for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
  for (int64_t i = pages - 1; i > 0; i--) std::swap(perm[i], perm[(int64_t)(urand() * (i + 1)) % (i + 1)]);
  std::vector<int32_t> bi, pos;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < lq[b]; t++) bi.push_back(b), pos.push_back(lkv[b] - lq[b] + t);
  const int nnz = (int)bi.size();
  std::vector<uint16_t> ack((size_t)nnz * 512), akp((size_t)nnz * 64);
  for (auto &x : ack) x = (uint16_t)(rs >> 7), urand();
  for (auto &x : akp) x = (uint16_t)(rs >> 9), urand();
  // the caches, poisoned; fused: rows of 576 (ckv then kpe)
  std::vector<uint16_t> ckv((size_t)rows * rw, 0xdead), kpe(fused ? 0 : (size_t)rows * 64, 0xdead);
  std::vector<uint16_t> want_c = ckv, want_k = kpe;
  uint16_t *kbase = fused ? ckv.data() + 512 : kpe.data(), *wk = fused ? want_c.data() + 512 : want_k.data();
  const int64_t kstride = fused ? 576 : 64;
  for (int i = 0; i < nnz; i++) {
    const int64_t page = perm[kvp[bi[i]] + pos[i] / ps], slot = pos[i] % ps, r = page * ps + slot;
    memcpy(&want_c[r * rw], &ack[(size_t)i * 512], 1024);
    memcpy(wk + r * kstride, &akp[(size_t)i * 64], 128);
  }
  fi_append_mla_params p;
  memset(&p, 0, sizeof p);
  p.append_ckv = ack.data(), p.append_kpe = akp.data(), p.ckv_cache = ckv.data(), p.kpe_cache = kbase;
  p.batch_indices = bi.data(), p.positions = pos.data(), p.kv_indices = perm.data(), p.kv_indptr = kvp.data();
  p.ackv_stride = 512, p.akpe_stride = 64;
  p.ckv_stride_page = (int64_t)ps * rw, p.ckv_stride_slot = rw;
  p.kpe_stride_page = (int64_t)ps * kstride, p.kpe_stride_slot = kstride;
  p.bi_stride = p.pos_stride = p.indices_stride = p.indptr_stride = 1;
  p.nnz = nnz, p.page_size = ps;
  const int threads = 256, work = nnz * 18;
  emu::launch((unsigned)((work + threads - 1) / threads), 1, threads, [&] { fi::append_paged_mla<fi_bf16, 256>(p); });
  const bool ok = ckv == want_c && kpe == want_k;
  char what[96];
  snprintf(what, sizeof what, "mla_append_emulation page=%d %s: %d tokens", ps, fused ? "one 576 buffer" : "two caches", nnz);
  report(ok, what);
}

static uint8_t host_byte(const std::vector<uint8_t> &x, int64_t start, int64_t len, int64_t j, int little) {
  uint8_t b = 0;
  for (int k = 0; k < 8; k++)
    if (8 * j + k < len && x[start + 8 * j + k]) b |= little ? (uint8_t)(1u << k) : (uint8_t)(0x80u >> k);
  return b;
}

static void packbits_case(int segmented, int little) {
  std::vector<int32_t> ip{0};
  const int S = segmented ? 9 : 1;
  for (int s = 0; s < S; s++) ip.push_back(ip.back() + (s == 3 ? 0 : (int)(urand() * (segmented ? 300 : 5000))));
  const int64_t n = ip.back();
  std::vector<uint8_t> x((size_t)n + 1);
  for (auto &v : x) v = urand() < 0.4 ? (uint8_t)(1 + urand() * 200) : 0;
  std::vector<int32_t> want_ip{0};
  for (int s = 0; s < S; s++) want_ip.push_back(want_ip.back() + (ip[s + 1] - ip[s] + 7) / 8);
  const int64_t nb = want_ip.back();
  std::vector<uint8_t> y((size_t)nb + 16, 0x5a), want = y;
  for (int s = 0; s < S; s++)
    for (int64_t j = 0; j < want_ip[s + 1] - want_ip[s]; j++) want[want_ip[s] + j] = host_byte(x, ip[s], ip[s + 1] - ip[s], j, little);
  std::vector<int32_t> got_ip(S + 1, -7);
  fi_packbits_params p;
  memset(&p, 0, sizeof p);
  p.x = x.data(), p.y = y.data(), p.x_stride = 1, p.n = n, p.y_len = nb;
  if (segmented) {
    p.indptr = ip.data(), p.indptr_new = got_ip.data(), p.indptr_stride = p.indptr_new_stride = 1, p.segments = S;
    if (little) emu::launch((unsigned)S, 1, 256, [&] { fi::packbits<1, 1, 256>(p); });
    else emu::launch((unsigned)S, 1, 256, [&] { fi::packbits<1, 0, 256>(p); });
  } else {
    // a grid smaller than the bytes: the grid-stride loop covers the rest
    if (little) emu::launch(2, 1, 256, [&] { fi::packbits<0, 1, 256>(p); });
    else emu::launch(2, 1, 256, [&] { fi::packbits<0, 0, 256>(p); });
  }
  const bool ok = y == want && (!segmented || got_ip == want_ip);
  char what[96];
  snprintf(what, sizeof what, "packbits_emulation %s %s: %lld bits in %d segments", segmented ? "segmented" : "flat",
           little ? "little" : "big", (long long)n, S);
  report(ok, what);
}

int main() {
  for (int ps : {1, 16, 64})
    for (int fused = 0; fused < 2; fused++) append_case(ps, fused);
  for (int seg = 0; seg < 2; seg++)
    for (int little = 0; little < 2; little++) packbits_case(seg, little);
  fprintf(stderr, "test_copy_emu: %s\n", fails ? "FAILED" : "all passed");
  return fails != 0;
}
