# final_call.sh: the device call that checks a session's tree at its end: every GPU test
# (tests/gpu/run_gpu_tests.sh), then fi-bench runtime and rmsnorm before (build-base) and
# after (build-gpu) in one run, then the llama3-8b preset and fi-example on its cache.
# Build: a clean worktree of HEAD, make BUILD=build-gpu all + tests/gpu binaries + probe_store,
#   copied to build-gpu; build-base = `make all` of the baseline commit; carry both.
B=${B:-build-gpu}; export FI_LOG_LEVEL=warn; S=$(date +%s); C=$(mktemp -d)
el() { echo "t=$(( $(date +%s) - S ))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
FI_BUILD=$B FT_LOGDIR=/tmp/gl timeout 330 tests/gpu/run_gpu_tests.sh > $OUT/gpu-test.txt 2>&1; echo "gpu-test rc=$?"; grep -E "passed|failed|FAIL|^==" $OUT/gpu-test.txt | tail -40; el
OUT=$OUT/ab AB_DEADLINE=$(( 520 - $(date +%s) + S )) AB_TIMEOUT=60 tests/gpu/ab_bench.sh base=build-base new=$B -- runtime rmsnorm 2>&1 | tail -25; el
(time $B/fi-cache --cache $C/l.db prewarm --arch sm_90 --preset llama3-8b -j 16) > $OUT/preset.txt 2>&1; tail -4 $OUT/preset.txt | tr '\n' ' '; echo
FI_CACHE_PATH=$C/l.db timeout 40 $B/fi-example --expect-no-compile $PWD/$B/libfi_runtime.so > $OUT/example.txt 2>&1; echo "example rc=$?"; tail -25 $OUT/example.txt; el
