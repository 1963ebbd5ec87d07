# first_call.sh: one device call (run from the repository root on the GPU machine) that checks
# what the thirty-fifth session built without a GPU: the presets' prewarm, fi-example's serving
# step on the llama3-8b preset's cache (--expect-no-compile: does the preset cover it?), the MoE
# tests, every GPU test, and fi-bench runtime before (build-base) and after (build-dev).
# Build here first: make BUILD=build-dev all build-dev/tests/probe_store $(ls tests/gpu/gpu_*.c |
#   sed 's|tests/gpu/\(.*\)\.c|build-dev/tests/\1|')   and, in a worktree of 7bb2dad,
#   make BUILD=<repo>/build-base all;   then run it with carry ["build-dev", "build-base"].
export FI_LOG_LEVEL=warn; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader; S=$(date +%s); C=$(mktemp -d)
el() { echo "t=$(( $(date +%s) - S ))s"; }
for p in llama3-8b qwen3-30b-a3b; do (time build-dev/fi-cache --cache $C/$p.db prewarm --arch sm_90 --preset $p) > $OUT/preset-$p.txt 2>&1; tail -4 $OUT/preset-$p.txt | tr '\n' ' '; echo; done
FI_CACHE_PATH=$C/llama3-8b.db build-dev/fi-example --expect-no-compile $PWD/build-dev/libfi_runtime.so > $OUT/example.txt 2>&1; echo "example rc=$?"; cat $OUT/example.txt | tail -45; el
FI_TEST_CACHE=$C/m.db timeout 120 build-dev/tests/gpu_moe > $OUT/moe.txt 2>&1; echo "moe rc=$?"; grep -E "^PASS|^FAIL|  " $OUT/moe.txt | head -40; el
FI_BUILD=build-dev FT_LOGDIR=/tmp/gl timeout $(( 430 - $(date +%s) + S )) tests/gpu/run_gpu_tests.sh > $OUT/gpu-test.txt 2>&1; echo "gpu-test rc=$?"; grep -E "passed|failed|FAIL|^==" $OUT/gpu-test.txt | tail -45; el
OUT=$OUT/ab AB_DEADLINE=$(( 540 - $(date +%s) + S )) AB_TIMEOUT=45 tests/gpu/ab_bench.sh base=build-base new=build-dev -- runtime rmsnorm 2>&1 | tail -25; el
