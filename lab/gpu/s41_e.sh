# s41_e.sh: s41_d.sh cut to what fits the session's last device minutes: fp8 KV prefill's
# first GPU run (gpu_prefill prefill_fp8_kv) and the tensor-core decode route's tests
# (batch rule, re-plan switch, CUDA-graph replays). Not run: the session's device time ran
# out. Build first (from the repository root, after `make deps`):
#   make -j2 BUILD=build-gpu5 all build-gpu5/tests/gpu_decode build-gpu5/tests/gpu_prefill
# then run with carry ["build-gpu5"]. Next after it: lab/gpu/s41_d.sh (adds the split-KV
# prefill tests and fi-bench decode's MQA rows) and lab/gpu/flashinfer_tests.sh (its header).
export FI_LOG_LEVEL=warn; S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
FI_CACHE_PATH=$(mktemp -d)/p.db timeout 115 build-gpu5/tests/gpu_prefill prefill_fp8_kv > $OUT/gpu_prefill.txt 2>&1
echo "gpu_prefill rc=$?"; grep -E "^(PASS|FAIL)|required" $OUT/gpu_prefill.txt | tail -6; el
FI_CACHE_PATH=$(mktemp -d)/t.db timeout 60 build-gpu5/tests/gpu_decode decode_tensor_core_route decode_cuda_graph_replay_after_replan \
  decode_cuda_graph_replay_tensor_cores > $OUT/gpu_decode.txt 2>&1
echo "gpu_decode rc=$?"; grep -E "^(PASS|FAIL)|required" $OUT/gpu_decode.txt | tail -8; el
