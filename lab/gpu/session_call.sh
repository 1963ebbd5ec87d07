# session_call.sh: one device call for what a session built, most important first, each step
# bounded so the call ends inside 590 s: every GPU test (run_gpu_tests.sh -j 6: the MoE
# layer on both kernels, routing + sort, the autotuner, decode, prefill, ...); fi-cache tune
# on a preset's expert GEMMs at two token counts (the tuner's table); fi-bench moe
# (--quick) on the tuned cache (Qwen3's EP1 GEMMs at 4096 tokens find their tactics); fi-bench runtime before (build-base) and after (build-gpu), three rounds taking
# turns, with each run's fi_rmsnorm and bare cuLaunchKernel times.
# Build: a clean worktree of HEAD with make BUILD=build-gpu all, the tests/gpu binaries and
# probe_store, copied without obj/ to build-gpu; build-base = make all of the baseline.
B=${B:-build-gpu}; export FI_LOG_LEVEL=warn; S=$(date +%s); C=$(mktemp -d)
el() { echo "t=$(( $(date +%s) - S ))s"; }
left() { local l=$(( $1 - $(date +%s) + S )); [ $l -gt $2 ] && l=$2; [ $l -lt 5 ] && l=5; echo $l; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
FI_BUILD=$B FT_LOGDIR=/tmp/gl timeout $(left 290 290) tests/gpu/run_gpu_tests.sh -j 8 > $OUT/gpu-test.txt 2>&1; echo "gpu-test rc=$?"; grep -E "passed|failed|FAIL|^==" $OUT/gpu-test.txt | tail -30; el
mkdir -p $OUT/gl; cp /tmp/gl/*autotune* /tmp/gl/*moe* $OUT/gl/ 2>/dev/null; grep -h "^  |\|FAIL\|check failed\|required" /tmp/gl/*autotune*.log 2>/dev/null | head -40
timeout $(left 370 75) $B/fi-cache --cache $C/tune.db tune --preset qwen3-30b-a3b --tokens 64,4096 --repeats 10 > $OUT/tune.txt 2> $OUT/tune.err; echo "fi-cache tune rc=$?"; cat $OUT/tune.txt; grep -v "^  " $OUT/tune.err | tail -3; el
timeout $(left 420 40) $B/fi-cache --cache $C/tune.db tune --op batch_decode --shape "q=bf16;kv=bf16;heads=32/8;head_dim=128;page=16;rope=0;len=4096" --tokens 64 --repeats 10 > $OUT/tune_dec.txt 2> $OUT/tune_dec.err; echo "tune decode rc=$?"; cat $OUT/tune_dec.txt; grep "^  " $OUT/tune_dec.err | head -20; el
timeout $(left 460 40) $B/fi-bench --quick --cache $C/tune.db --json $OUT/moe.jsonl moe > $OUT/bench_moe.txt 2>&1; echo "fi-bench moe (on the tuned cache) rc=$?"; grep -v "^$" $OUT/bench_moe.txt | tail -40; el
[ -d build-base ] && OUT=$OUT/ab AB_ROUNDS=3 AB_DEADLINE=$(left 480 40) AB_TIMEOUT=20 tests/gpu/ab_bench.sh base=build-base new=$B -- runtime 2>&1 | tail -12; el
for f in $OUT/ab/*.runtime.jsonl; do echo "$(basename $f) $(grep -h '"dispatch"' $f)"; done
