// test_prefill_emu.cc: runs the prefill kernels' own source (kernels/prefill.cuh, its
// portable path: the one hiprtc compiles, with ldmatrix and mma.sync emulated by lane
// shuffles) on the host, one block at a time with every thread a cooperative context,
// against a float64 reference: the tile loop, the masks, the swizzle and fragment lane
// maps, the online softmax, the item tables of the real planner, split-KV partials and
// their merge kernel, fp8 caches, sinks, custom masks, V's head_dim apart (192 / 128), lse
// in base 2 (batch decode and L_q = 1 against decode: test_decode_emu.cc; what both share:
// emu_prefill.h). Not the CUDA inline-assembly paths (cp.async, ldmatrix, mma.sync PTX, the
// hardware e4m3 conversion): those run only on the GPU (tests/gpu/gpu_prefill.c, gpu_decode.c).
//
// Built and run by `make test` (not by `make test-asan`: the emulated threads switch
// stacks with ucontext); alone: make build/tests/test_prefill_emu && build/tests/test_prefill_emu
#include "emu_prefill.h"

int main() {
  // single prefill: L_kv over two KV tiles and a partial one, rows over several q tiles
  {
    prob P{1, 64, 4, 2, 1, -1, 0, 1, 0, 0.0, {37}, {150}};
    run_single<fi_bf16, 64, 64, 0>(P);
    prob F{0, 64, 4, 2, 1, -1, 0, 1, 0, 0.0, {37}, {150}};
    run_single<fi_half, 64, 64, 0>(F);
    prob N{1, 64, 4, 2, 0, -1, 0, 1, 0, 0.0, {70}, {50}};  // non-causal, L_q > L_kv
    run_single<fi_bf16, 64, 64, 0>(N);
    prob W{1, 64, 6, 2, 1, 20, 0, 1, 0, 0.0, {40}, {130}};  // window, group 3
    run_single<fi_bf16, 64, 16, 0>(W);
    prob C{0, 64, 2, 1, 1, -1, 0, 1, 0, 5.0, {16}, {80}};  // soft cap
    run_single<fi_half, 64, 16, 0>(C);
    prob R{1, 64, 2, 2, 1, -1, 1, 1, 0, 0.0, {20}, {90}};  // RoPE
    run_single<fi_bf16, 64, 16, 1>(R);
    prob D1{1, 64, 8, 1, 1, -1, 0, 1, 0, 0.0, {1}, {100}};  // L_q = 1, group 8
    run_single<fi_bf16, 64, 16, 0>(D1);
    prob E{1, 64, 2, 1, 0, -1, 0, 1, 0, 0.0, {5}, {0}};  // L_kv = 0: zeros, lse -inf
    run_single<fi_bf16, 64, 16, 0>(E);
  }
  {
    prob P{1, 64, 4, 2, 1, -1, 0, 3, 1, 0.0, {0, 1, 30, 9}, {10, 70, 100, 9}};
    run_batch<fi_bf16, 64, 16, 0>(P, 0);
    run_batch<fi_bf16, 64, 64, 0>(P, 0);
    prob PS{1, 64, 4, 2, 1, -1, 0, 3, 1, 0.0, {0, 1, 30, 9}, {10, 700, 600, 9}};
    prob P1m{1, 64, 4, 2, 0, -1, 0, 1, 0, 0.0, {45}, {100}};  // single, non-causal
    run_batch<fi_bf16, 64, 64, 0>(PS, 1);
    prob Rg{0, 64, 2, 2, 0, -1, 0, 1, 0, 0.0, {3, 20}, {300, 10}};
    run_batch<fi_half, 64, 16, 0>(Rg, 0);
    run_batch<fi_half, 64, 16, 0>(Rg, 1);
    prob R1{0, 64, 2, 2, 0, -1, 0, 1, 0, 0.0, {3}, {300}};
    run_batch<fi_half, 64, 16, 0>(R1, 1);
    // head_dim 192 with V's 128 (DeepSeek's MHA prefill): single, ragged batch unsplit and
    // split (the merge at V's 128), causal and not, groups 1 and 4
    prob DS{1, 192, 4, 1, 1, -1, 0, 1, 0, 0.0, {37}, {150}, 128};
    run_single<fi_bf16, 192, 64, 0, fi_bf16, 128>(DS);
    prob DSf{0, 192, 2, 2, 0, -1, 0, 1, 0, 0.0, {20}, {70}, 128};
    run_single<fi_half, 192, 16, 0, fi_half, 128>(DSf);
    prob DR{1, 192, 4, 4, 1, -1, 0, 1, 0, 0.0, {0, 1, 30, 9}, {10, 70, 100, 9}, 128};
    run_batch<fi_bf16, 192, 64, 0, fi_bf16, 128>(DR, 0);
    prob DRs{0, 192, 8, 2, 1, -1, 0, 1, 0, 0.0, {3, 20}, {300, 500}, 128};
    run_batch<fi_half, 192, 16, 0, fi_half, 128>(DRs, 1);
    // lse in base 2: single prefill, paged batch unsplit and split (the merge writes it)
    g_lse2 = 1;
    run_single<fi_bf16, 64, 64, 0>(P1m);
    run_batch<fi_bf16, 64, 16, 0>(P, 0);
    run_batch<fi_bf16, 64, 64, 0>(PS, 1);
    g_lse2 = 0;
    prob R2{0, 64, 2, 2, 1, -1, 0, 1, 0, 0.0, {3}, {300}};
    run_batch<fi_half, 64, 16, 0>(R2, 1);
    prob Pw{1, 64, 4, 1, 1, 50, 1, 16, 1, 0.0, {2, 17}, {400, 17}};
    run_batch<fi_bf16, 64, 16, 1>(Pw, 1);
    run_batch<fi_bf16, 64, 128, 1>(Pw, 1);  // two row tiles a warp, Q tile in shared memory
    // Sinks: paged split (the merge folds them) and not, with an empty query run; ragged
    // split; single with a window and a soft cap.
    run_batch<fi_bf16, 64, 64, 0>(PS, 1, 1);
    run_batch<fi_bf16, 64, 16, 0>(P, 0, 1);
    run_batch<fi_half, 64, 16, 0>(Rg, 1, 1);
    prob Ws{0, 64, 6, 2, 1, 20, 0, 1, 0, 5.0, {40}, {130}};
    run_single<fi_half, 64, 16, 0>(Ws, 1);
    // Custom masks (AND-ed with causal, window; some query tokens with nothing attended):
    // paged split and not, ragged non-causal, single with a window, with sinks, q tile 64.
    run_batch<fi_bf16, 64, 64, 0>(PS, 1, 0, 1);
    run_batch<fi_bf16, 64, 16, 0>(P, 0, 0, 1);
    run_batch<fi_half, 64, 16, 0>(Rg, 0, 0, 1);
    prob Wm{0, 64, 6, 2, 1, 20, 0, 1, 0, 0.0, {40}, {130}};  // window, group 3
    run_single<fi_half, 64, 16, 0>(Wm, 0, 1);
    run_single<fi_bf16, 64, 64, 0>(P1m, 1, 1);
  }
  {
    prob A{1, 128, 4, 1, 1, -1, 0, 1, 0, 0.0, {70}, {200}};  // q tile 128 (two row tiles a warp), group 4
    run_single<fi_bf16, 128, 128, 0>(A);
    prob Bq{0, 256, 2, 1, 1, -1, 0, 5, 1, 0.0, {9, 40}, {300, 45}};  // head_dim 256 (Q tile in shared memory), split
    run_batch<fi_half, 256, 64, 0>(Bq, 1);
    prob Bs{1, 256, 3, 1, 1, -1, 1, 1, 0, 0.0, {6}, {75}};  // head_dim 256, one warp, kv tile 32, RoPE
    run_single<fi_bf16, 256, 16, 1>(Bs);
  }
  {
    // fp8 caches (value / scale, k_scale 0.5, v_scale 2): bf16 q staged as f16, paged
    // split; ragged e5m2; window with group 3 and a soft cap (single); sinks and a custom
    // mask; a shared-memory Q tile (q tile 128) and head_dim 256, split.
    prob PS{1, 64, 4, 2, 1, -1, 0, 3, 1, 0.0, {0, 1, 30, 9}, {10, 700, 600, 9}};
    run_batch<fi_bf16, 64, 64, 0, fi_e4m3>(PS, 1);
    prob Rg{0, 64, 2, 2, 0, -1, 0, 1, 0, 0.0, {3, 20}, {300, 10}};
    run_batch<fi_half, 64, 16, 0, fi_e5m2>(Rg, 0);
    prob W{1, 64, 6, 2, 1, 20, 0, 1, 0, 0.0, {40}, {130}};
    run_single<fi_bf16, 64, 16, 0, fi_e5m2>(W);
    prob C{0, 64, 2, 1, 1, -1, 0, 1, 0, 5.0, {16}, {80}};
    run_single<fi_half, 64, 16, 0, fi_e4m3>(C);
    prob P{1, 64, 4, 2, 1, -1, 0, 3, 1, 0.0, {0, 1, 30, 9}, {10, 70, 100, 9}};
    run_batch<fi_bf16, 64, 16, 0, fi_e4m3>(P, 0, 1, 1);
    prob A{1, 128, 4, 1, 1, -1, 0, 1, 0, 0.0, {70}, {200}};
    run_single<fi_bf16, 128, 128, 0, fi_e4m3>(A);
    prob Bq{0, 256, 2, 1, 1, -1, 0, 5, 1, 0.0, {9, 40}, {300, 45}};
    run_batch<fi_half, 256, 64, 0, fi_e5m2>(Bq, 1);
  }
  fprintf(stderr, "%d failures (%ld scheduler rounds)\n", fails, emu::rounds);
  // One line for tests/run_tests.sh; each case's error is on stderr above.
  if (fails)
    printf("FAIL prefill_emulation: %d cases failed\n", fails);
  else
    printf("PASS prefill_emulation\n");
  return fails ? 1 : 0;
}

