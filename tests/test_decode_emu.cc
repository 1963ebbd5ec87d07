// test_decode_emu.cc: batch decode's kernels (kernels/decode.cuh and decode_simt.cuh, their
// portable paths) through the real planner with every cache type's load and widening
// layout (fp8 widened the portable way), 1, 2 and 4 warps, split or not, groups above 16,
// KV head pairs, sinks, lse in base 2; and L_q = 1 prefill against decode (single decode's
// split and merge launch), on the host emulator against float64 (emu_prefill.h, shared
// with test_prefill_emu.cc). Built and run by `make test` (not by `make test-asan`: the
// emulated threads switch stacks with ucontext); alone:
// make build/tests/test_decode_emu && build/tests/test_decode_emu
#include "emu_prefill.h"

int main() {
  // Batch decode: 16-bit caches with 1, 2 and 4 warps, split or not; fp8 (16-byte K and
  // V loads, two 16-token sub-steps a step; 8-byte V loads at head_dim 64); 16 rows
  // (group > 8); one buffer (PF = 0); RoPE, window and soft cap; group 1 (the merge's
  // shared partial sums).
  decode_batch<fi_bf16, fi_bf16, 128, 8, 1, 0, 2>(8, 2, 16, {300, 1, 0, 47}, -1, 0.0, 0);
  decode_batch<fi_bf16, fi_bf16, 128, 8, 1, 0, 1>(8, 2, 16, {300, 1, 0, 47}, -1, 0.0, 1);
  decode_batch<fi_half, fi_half, 128, 8, 1, 0, 4>(8, 2, 7, {333, 170}, -1, 0.0, 1);
  decode_batch<fi_half, fi_e4m3, 128, 8, 1, 0, 2>(8, 1, 16, {300, 33}, -1, 0.0, 1);
  decode_batch<fi_bf16, fi_e4m3, 128, 8, 1, 0, 1>(8, 1, 5, {150, 31}, -1, 0.0, 0);
  decode_batch<fi_half, fi_e4m3, 64, 8, 1, 0, 2>(6, 2, 3, {280, 17}, -1, 0.0, 1);
  decode_batch<fi_bf16, fi_e5m2, 64, 8, 1, 0, 4>(3, 1, 16, {90}, -1, 0.0, 0);
  decode_batch<fi_half, fi_e5m2, 256, 16, 0, 0, 2>(16, 1, 8, {270, 40}, -1, 0.0, 1);
  decode_batch<fi_bf16, fi_bf16, 256, 16, 0, 0, 2>(12, 1, 16, {100}, -1, 0.0, 0);
  // 16 rows on two buffers (batch decode's choice at head_dim <= 128 without RoPE).
  decode_batch<fi_bf16, fi_bf16, 128, 16, 1, 0, 4>(16, 1, 16, {300, 47}, -1, 0.0, 1);
  decode_batch<fi_half, fi_half, 64, 16, 1, 0, 2>(24, 2, 8, {200, 1}, -1, 0.0, 0);
  decode_batch<fi_bf16, fi_e4m3, 128, 16, 1, 0, 4>(20, 2, 16, {250, 33}, -1, 0.0, 1);
  decode_batch<fi_bf16, fi_bf16, 128, 16, 1, 0, 1>(10, 1, 16, {150, 16}, -1, 0.0, 1);
  decode_batch<fi_half, fi_e4m3, 128, 8, 1, 1, 2>(4, 2, 16, {260}, 150, 20.0, 1);
  decode_batch<fi_bf16, fi_bf16, 64, 8, 1, 1, 4>(2, 2, 1, {290, 3}, -1, 0.0, 1);
  // More than 16 chunks a request (the merge's batches of 16 loads, two threads a unit),
  // with the head prefetch over whole items and over part of them, lines or bulk.
  decode_batch<fi_bf16, fi_bf16, 128, 8, 1, 0, 4>(16, 4, 16, {4200, 40}, -1, 0.0, 1, 256);
  decode_batch<fi_half, fi_half, 64, 8, 1, 0, 1>(4, 2, 16, {2500, 7, 0}, 1000, 0.0, 1, -64);
  decode_batch<fi_half, fi_e4m3, 128, 8, 1, 1, 4>(8, 2, 16, {2300}, -1, 0.0, 1, -4096);
  // Groups above 16 (MQA, wide GQA), each KV head's group cut into grid heads of at most 16
  // rows: 32/1 and 64/1 (two and four heads of 16), 48/2 (two of 12 a KV head), 34/1
  // (seventeen of 2, on the CUDA-core kernel); 16-bit and fp8 caches, split or not.
  decode_batch<fi_bf16, fi_bf16, 128, 16, 1, 0, 4>(32, 1, 16, {300, 47}, -1, 0.0, 1, 0, 1, 2);
  decode_batch<fi_half, fi_half, 64, 16, 1, 0, 2>(64, 1, 16, {200, 1}, -1, 0.0, 0, 0, 1, 4);
  decode_batch<fi_bf16, fi_e4m3, 128, 16, 1, 0, 4>(48, 2, 16, {250, 33}, -1, 0.0, 1, 0, 1, 2);
  decode_batch<fi_bf16, fi_bf16, 128, 2, 0, 0, 2, 1>(34, 1, 16, {150, 20}, -1, 0.0, 1, 0, 1, 17);
  // KV head pairs (fp8, head_dim 128, group <= 4): groups 4, 2, 3, 1; split or not; an
  // empty request; window and soft cap; one buffer; the head prefetch.
  decode_batch<fi_half, fi_e4m3, 128, 8, 1, 0, 4>(8, 2, 16, {300, 33}, -1, 0.0, 1, 0, 2);
  decode_batch<fi_bf16, fi_e4m3, 128, 8, 1, 0, 2>(8, 4, 16, {150, 31, 0}, -1, 0.0, 0, 0, 2);
  decode_batch<fi_bf16, fi_e5m2, 128, 8, 1, 0, 2>(12, 4, 5, {290, 17}, 100, 30.0, 0, 0, 2);
  decode_batch<fi_half, fi_e4m3, 128, 8, 0, 0, 4>(4, 4, 16, {200}, -1, 0.0, 1, 64, 2);
  // The CUDA-core kernel: groups 1, 2, 3 (in 4 rows) and 4; head_dim 64, 128, 256; 1, 2
  // and 4 warps; pages of 1, 5, 16; split or not; an empty request and one of one token;
  // window and soft cap; more than 16 chunks.
  decode_batch<fi_bf16, fi_bf16, 128, 1, 0, 0, 4, 1>(4, 4, 16, {300, 1, 0, 47}, -1, 0.0, 0);
  decode_batch<fi_bf16, fi_bf16, 128, 1, 0, 0, 4, 1>(4, 4, 16, {300, 1, 0, 47}, -1, 0.0, 1);
  decode_batch<fi_half, fi_half, 64, 2, 0, 0, 2, 1>(4, 2, 5, {333, 170}, -1, 0.0, 1);
  decode_batch<fi_bf16, fi_bf16, 256, 4, 0, 0, 1, 1>(6, 2, 16, {150, 31}, -1, 0.0, 0);
  decode_batch<fi_half, fi_half, 128, 4, 0, 0, 4, 1>(8, 2, 1, {290, 3}, 100, 20.0, 0);
  decode_batch<fi_bf16, fi_bf16, 64, 1, 0, 0, 4, 1>(2, 2, 16, {4200, 40}, -1, 0.0, 1);
  decode_batch<fi_half, fi_half, 256, 1, 0, 0, 2, 1>(3, 3, 1, {200, 9, 1}, 60, 15.0, 0);
  // Attention sinks: unsplit with an empty request (out 0, lse = the sink) and a request
  // of one token; split (the merge folds them); fp8 head pairs; group chunks; CUDA-core
  // kernel split and not; soft cap and window.
  decode_batch<fi_bf16, fi_bf16, 128, 8, 1, 0, 2>(8, 2, 16, {300, 1, 0, 47}, -1, 0.0, 0, 0, 1, 1, 1);
  decode_batch<fi_half, fi_half, 64, 8, 1, 0, 4>(8, 1, 7, {333, 170}, -1, 15.0, 1, 0, 1, 1, 1);
  decode_batch<fi_bf16, fi_e4m3, 128, 8, 1, 0, 4>(8, 2, 16, {300, 0, 33}, -1, 0.0, 1, 0, 2, 1, 1);
  decode_batch<fi_bf16, fi_bf16, 128, 16, 1, 0, 4>(32, 1, 16, {300, 47}, -1, 0.0, 1, 0, 1, 2, 1);
  decode_batch<fi_bf16, fi_bf16, 128, 1, 0, 0, 4, 1>(4, 4, 16, {300, 1, 0, 47}, -1, 0.0, 0, 0, 1, 1, 1);
  decode_batch<fi_half, fi_half, 64, 2, 0, 0, 2, 1>(4, 2, 5, {333, 170}, -1, 0.0, 1, 0, 1, 1, 1);

  // lse in base 2 (lse_log2: FlashInfer's and TVM's convention): batch decode unsplit and
  // split (its merge writes it), the CUDA-core kernel, with sinks
  g_lse2 = 1;
  decode_batch<fi_bf16, fi_bf16, 128, 8, 1, 0, 2>(8, 2, 16, {300, 1, 0, 47}, -1, 0.0, 0);
  decode_batch<fi_half, fi_half, 64, 8, 1, 0, 4>(8, 1, 7, {333, 170}, -1, 15.0, 1, 0, 1, 1, 1);
  decode_batch<fi_bf16, fi_bf16, 128, 1, 0, 0, 4, 1>(4, 4, 16, {300, 1, 0, 47}, -1, 0.0, 1);
  g_lse2 = 0;

  prefill_vs_decode<fi_bf16, 64, 0>(1, 8, 2, 300, -1, 0.0);
  prefill_vs_decode<fi_half, 64, 1>(0, 4, 1, 200, 50, 0.0);
  prefill_vs_decode<fi_bf16, 128, 1>(1, 6, 2, 150, -1, 10.0);
  // single decode split: chunks of 32-token multiples with a short last one; a window;
  // RoPE and a soft cap; MHA
  prefill_vs_decode<fi_bf16, 128, 0>(1, 8, 2, 1000, -1, 0.0, 5);
  prefill_vs_decode<fi_half, 64, 0>(0, 4, 1, 900, 600, 0.0, 3);
  prefill_vs_decode<fi_bf16, 128, 1>(1, 4, 2, 520, -1, 10.0, 4);
  prefill_vs_decode<fi_half, 128, 0>(0, 2, 2, 600, -1, 0.0, 2);
  prefill_vs_decode<fi_bf16, 128, 0>(1, 8, 2, 1000, -1, 0.0, 5, 1);  // sinks, split
  prefill_vs_decode<fi_half, 64, 0>(0, 4, 1, 200, -1, 0.0, 1, 1);     // sinks, whole

  fprintf(stderr, "%d failures (%ld scheduler rounds)\n", fails, emu::rounds);
  // One line for tests/run_tests.sh; each case's error is on stderr above.
  if (fails)
    printf("FAIL decode_emulation: %d cases failed\n", fails);
  else
    printf("PASS decode_emulation\n");
  return fails ? 1 : 0;
}

