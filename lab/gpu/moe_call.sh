# moe_call.sh: one device call (from the repository root on the GPU machine) for the MoE
# grouped GEMM: the whole-layer test against float64 (gpu_moe_gemm), routing and sort
# (gpu_moe), fi-bench moe and its torch._grouped_mm peer on the same card, then the presets'
# prewarm and fi-example's serving step on the llama3-8b preset's cache.
# Build here first (a clean tree): make BUILD=build-gpu all $(ls tests/gpu/gpu_*.c | sed
#   's|tests/gpu/\(.*\)\.c|build-gpu/tests/\1|'); run it with carry ["build-gpu"] (B=build-gpu).
B=${B:-build-gpu}; export FI_LOG_LEVEL=warn; S=$(date +%s); C=$(mktemp -d)
el() { echo "t=$(( $(date +%s) - S ))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
FI_TEST_CACHE=$C/g.db timeout 150 $B/tests/gpu_moe_gemm > $OUT/moe_gemm.txt 2>&1; echo "gpu_moe_gemm rc=$?"; grep -E "^PASS|^FAIL|  " $OUT/moe_gemm.txt | head -30; el
FI_TEST_CACHE=$C/m.db timeout 90 $B/tests/gpu_moe > $OUT/moe.txt 2>&1; echo "gpu_moe rc=$?"; grep -E "^PASS|^FAIL" $OUT/moe.txt; el
timeout 170 $B/fi-bench --quick --json $OUT/moe.jsonl moe > $OUT/bench_moe.txt 2>&1; echo "fi-bench moe rc=$?"; cat $OUT/bench_moe.txt | tail -40; el
timeout 120 python3 lab/moe/torch_peer.py --quick --json $OUT/torch.jsonl > $OUT/torch.txt 2>&1; echo "torch peer rc=$?"; tail -25 $OUT/torch.txt; el
for p in llama3-8b; do (time $B/fi-cache --cache $C/$p.db prewarm --arch sm_90 --preset $p -j 16) > $OUT/preset-$p.txt 2>&1; tail -4 $OUT/preset-$p.txt | tr '\n' ' '; echo; done
FI_CACHE_PATH=$C/llama3-8b.db timeout 60 $B/fi-example --expect-no-compile $PWD/$B/libfi_runtime.so > $OUT/example.txt 2>&1; echo "example rc=$?"; tail -30 $OUT/example.txt; el
