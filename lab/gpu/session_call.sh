# session_call.sh: one device call for what a session built, most important first, each step
# bounded so the call ends inside 590 s: the MoE layer against float64 (gpu_moe_gemm) and
# routing + sort (gpu_moe); every GPU test (run_gpu_tests.sh); fi-bench moe and its torch
# peer (--quick); fi-bench runtime before (build-base) and after (build-gpu), three rounds
# taking turns, with each run's fi_rmsnorm and bare cuLaunchKernel times.
# Build: a clean worktree of HEAD with make BUILD=build-gpu all, the tests/gpu binaries and
# probe_store, copied without obj/ to build-gpu; build-base = make all of the baseline.
B=${B:-build-gpu}; export FI_LOG_LEVEL=warn; S=$(date +%s); C=$(mktemp -d)
el() { echo "t=$(( $(date +%s) - S ))s"; }
left() { local l=$(( $1 - $(date +%s) + S )); [ $l -gt $2 ] && l=$2; [ $l -lt 5 ] && l=5; echo $l; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
FI_TEST_CACHE=$C/g.db timeout 100 $B/tests/gpu_moe_gemm > $OUT/moe_gemm.txt 2>&1; echo "gpu_moe_gemm (wgmma where it applies) rc=$?"; grep -E "^PASS|^FAIL|  " $OUT/moe_gemm.txt | head -30; el
FI_MOE_WGMMA=0 FI_TEST_CACHE=$C/g.db timeout 80 $B/tests/gpu_moe_gemm > $OUT/moe_gemm_mma.txt 2>&1; echo "gpu_moe_gemm (mma.sync) rc=$?"; grep -E "^PASS|^FAIL|  " $OUT/moe_gemm_mma.txt | head -30; el
FI_TEST_CACHE=$C/m.db timeout 60 $B/tests/gpu_moe > $OUT/moe.txt 2>&1; echo "gpu_moe rc=$?"; grep -E "^PASS|^FAIL" $OUT/moe.txt; el
FI_BUILD=$B FT_LOGDIR=/tmp/gl timeout $(left 380 240) tests/gpu/run_gpu_tests.sh > $OUT/gpu-test.txt 2>&1; echo "gpu-test rc=$?"; grep -E "passed|failed|FAIL|^==" $OUT/gpu-test.txt | tail -30; el
timeout $(left 450 110) $B/fi-bench --quick --json $OUT/moe.jsonl moe > $OUT/bench_moe.txt 2>&1; echo "fi-bench moe rc=$?"; grep -v "^$" $OUT/bench_moe.txt | tail -45; el
FI_MOE_WGMMA=0 timeout $(left 500 60) $B/fi-bench --quick --json $OUT/moe_mma.jsonl moe > $OUT/bench_moe_mma.txt 2>&1; echo "fi-bench moe (mma.sync) rc=$?"; grep -E "^\| [a-z]" $OUT/bench_moe_mma.txt | head -14; el
timeout $(left 550 60) python3 lab/moe/torch_peer.py --quick --json $OUT/torch.jsonl > $OUT/torch.txt 2>&1; echo "torch peer rc=$?"; tail -22 $OUT/torch.txt; el
[ -d build-base ] && OUT=$OUT/ab AB_ROUNDS=3 AB_DEADLINE=$(left 575 40) AB_TIMEOUT=30 tests/gpu/ab_bench.sh base=build-base new=$B -- runtime 2>&1 | tail -12; el
for f in $OUT/ab/*.runtime.jsonl; do echo "$(basename $f) $(grep -h '"dispatch"' $f)"; done
