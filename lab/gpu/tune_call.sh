# tune_call.sh: issue 43's GPU checks in one bounded device call (run from the repository
# root on the GPU machine, with build-gpu carried): the autotuner's GPU tests (every op it
# measures: the MoE GEMM, batch decode, batch prefill, the samplers, FI_AUTOTUNE=1);
# fi-cache tune --preset deepseek-v3 timed (target: under 5 minutes); its export imported
# into a fresh cache, and fi-bench moe on that cache, whose GEMM calls must find the
# shipped tactics with no measuring (tactic hits, nothing tuned); the llama3-8b preset's
# decode and prefill at two token counts. Logs under $OUT; a short table last.
# Build here first: make BUILD=build-gpu all build-gpu/tests/gpu_autotune. The table of every
# tuned op's tactics is a second call: build-gpu/fi-bench --json $OUT/t.jsonl tactics.
B=${B:-build-gpu}; export FI_LOG_LEVEL=warn; S=$(date +%s); C=$(mktemp -d)
el() { echo "t=$(( $(date +%s) - S ))s"; }
left() { local l=$(( $1 - $(date +%s) + S )); [ $l -gt $2 ] && l=$2; [ $l -lt 5 ] && l=5; echo $l; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
FI_TEST_CACHE=$C/t.db timeout $(left 200 200) $B/tests/gpu_autotune > $OUT/gpu_autotune.log 2>&1
echo "gpu_autotune rc=$? $(grep -c '^PASS' $OUT/gpu_autotune.log) passed $(grep -c '^FAIL' $OUT/gpu_autotune.log) failed"
grep -h "^FAIL\|check failed\|required:" $OUT/gpu_autotune.log | head -20; el
t0=$(date +%s)
timeout $(left 500 300) $B/fi-cache --cache $C/ds.db tune --preset deepseek-v3 > $OUT/tune_ds.txt 2> $OUT/tune_ds.err
echo "tune --preset deepseek-v3 rc=$? in $(( $(date +%s) - t0 ))s"; cat $OUT/tune_ds.txt | cut -c1-160; tail -2 $OUT/tune_ds.err; el
$B/fi-cache --cache $C/ds.db export --to $C/ship.db > $OUT/export.txt 2>&1; echo "export rc=$? $(tail -1 $OUT/export.txt)"
$B/fi-cache --cache $C/fresh.db import $C/ship.db > $OUT/import.txt 2>&1; echo "import rc=$? $(tail -1 $OUT/import.txt)"
$B/fi-cache --cache $C/fresh.db ls --tactics | tail -3
timeout $(left 560 60) $B/fi-bench --quick --cache $C/fresh.db moe > $OUT/bench_moe.txt 2>&1
echo "fi-bench moe on the imported cache rc=$?"; grep -i "tactic" $OUT/bench_moe.txt | tail -5; el
timeout $(left 590 30) $B/fi-cache --cache $C/ll.db tune --preset llama3-8b --tokens 64,2048 --repeats 10 > $OUT/tune_ll.txt 2> $OUT/tune_ll.err
echo "tune --preset llama3-8b rc=$?"; cut -c1-170 $OUT/tune_ll.txt; el
