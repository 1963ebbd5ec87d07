# s39_a.sh: the thirty-ninth session's first device call: every GPU test (make gpu-test's
# jobs, issue 41), the hot path before/after (fi-bench runtime, 7bb2dad vs HEAD: memo-hit
# dispatch and a fresh process's first call on a prewarmed cache, issue 47), then issue
# 43's tactics table. Carry ["build-gpu", "build-base"]. Logs under $OUT; table last.
export FI_LOG_LEVEL=warn; S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
L=$(mktemp -d)
FI_BUILD=build-gpu FT_LOGDIR=$L timeout 300 tests/gpu/run_gpu_tests.sh -j 8 > $OUT/gpu-test.txt 2>&1; echo "gpu-test rc=$?"
tar -C $L -czf $OUT/gpu-logs.tgz . 2>/dev/null
grep -E "^== |passed|FAIL|check failed|without a summary" $OUT/gpu-test.txt | grep -v "^PASS" | tail -60; el
OUT=$OUT/ab AB_DEADLINE=120 AB_TIMEOUT=60 tests/gpu/ab_bench.sh base=build-base new=build-gpu -- runtime > $OUT/ab_runtime.txt 2>&1
grep -E "rc |first|dispatch|fresh" $OUT/ab/*.txt | cut -c1-230 | head -20; tail -20 $OUT/ab_runtime.txt; el
l=$(( 500 - $(date +%s) + S )); [ $l -lt 10 ] && l=10
timeout $l build-gpu/fi-bench --quick --json $OUT/tactics.jsonl tactics > $OUT/tactics.txt 2>&1; echo "tactics rc=$?"
grep -vE "^      " $OUT/tactics.txt | cut -c1-220; el
