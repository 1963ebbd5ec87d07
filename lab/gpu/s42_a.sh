# s42_a.sh: s41_d.sh (never run) plus fi-bench prefill's fp8 KV rows. s41_d was: fp8 KV prefill's first GPU run
# (gpu_prefill prefill_fp8_kv: e4m3 / e5m2, single, ragged, paged, split, window and cap,
# sinks, q tile 128), the split-KV prefill tests that s41_b's timeout cut (the merge is two
# passes now), the tensor-core decode route with its batch rule, its re-plan switch and
# its CUDA-graph replay, and fi-bench decode's MQA rows under the rule.
# Build here first: make -j2 BUILD=build-gpu5 all build-gpu5/tests/gpu_decode build-gpu5/tests/gpu_prefill;
# run with carry ["build-gpu5"].
export FI_LOG_LEVEL=warn; S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FI_CACHE_PATH=$(mktemp -d)/p.db timeout 200 build-gpu5/tests/gpu_prefill prefill_fp8_kv batch_prefill_split_kv prefill_sinks \
  prefill_with_one_query_token_equals_decode cuda_graph_replays_after_replans > $OUT/gpu_prefill.txt 2>&1
echo "gpu_prefill rc=$?"; grep -E "^(PASS|FAIL)|required|tol" $OUT/gpu_prefill.txt | grep -vE "err [0-9.e-]+ \(tol" | tail -12
grep -cE "err [0-9.e-]+ \(tol" $OUT/gpu_prefill.txt; el
FI_CACHE_PATH=$(mktemp -d)/t.db timeout 150 build-gpu5/tests/gpu_decode decode_tensor_core_route decode_cuda_graph_replay_after_replan \
  decode_cuda_graph_replay_tensor_cores decode_groups_above_16 > $OUT/gpu_decode.txt 2>&1
echo "gpu_decode rc=$?"; grep -E "^(PASS|FAIL)|required" $OUT/gpu_decode.txt | tail -10; el
FI_BENCH_DECODE_PICK=9,10,11,12,13 FI_BENCH_DECODE_EXTRA="64,4096,32,1;16,4096,64,1;64,4096,64,2;4,32768,64,1" \
  FI_BENCH_DECODE_VARIANTS="FI_DECODE_TC=0;FI_DECODE_TC=1" timeout 80 build-gpu5/fi-bench decode > $OUT/bench_decode.txt 2>&1
echo "fi-bench decode rc=$?"; grep -E "^\|" $OUT/bench_decode.txt | tail -16; el
FI_BENCH_PREFILL_D=128 FI_BENCH_PREFILL_B=4 FI_BENCH_PREFILL_WARMUP_MS=1000 timeout 90 build-gpu5/fi-bench prefill > $OUT/bench_prefill.txt 2>&1
echo "fi-bench prefill rc=$?"; grep -E "TFLOP/s|^\|" $OUT/bench_prefill.txt | tail -10; el
