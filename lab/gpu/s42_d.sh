# s42_d.sh: the forty-second session's one device call, by priority (the device budget
# allowed one): first GPU runs of fp8 KV prefill (gpu_prefill prefill_fp8_kv), V's head_dim
# 128 under q's 192 (prefill_head_dim_vo), lse in base 2 (prefill_lse_base2,
# decode_lse_base2); fi_runtime's FlashInfer-ABI module as TVM drives it
# (lab/gpu/tvm_abi_check.py); the transformers Llama check (lab/gpu/llama_check.sh); the
# Python binding's host times (python_check.py, fi-bench runtime's dispatch row); fi-bench
# prefill's 4 x 8192 D=128 rows with the fp8 ones, and the 192/128 rows; the tensor-core
# decode route over e4m3 (gpu_decode decode_tensor_core_route, fi-bench decode's e4m3 row
# with FI_DECODE_TC=1).
# Build here first (from the repository root, after `make deps`):
#   make -j2 BUILD=build-gpu6 TVM_FFI_PYTHON=$PWD/build/pyvenv/bin/python all \
#     build-gpu6/tests/gpu_decode build-gpu6/tests/gpu_prefill
# prepare lab/gpu/wheels (`bash lab/gpu/llama_check.sh prepare`; python_check.sh's header);
# run with carry ["build-gpu6", "lab/gpu/wheels"].
export FI_LOG_LEVEL=warn; S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }
B=build-gpu6; PY=${PY:-/opt/torch/.venv/bin/python3}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
FI_CACHE_PATH=$(mktemp -d)/p.db timeout 110 $B/tests/gpu_prefill prefill_fp8_kv prefill_head_dim_vo prefill_lse_base2 \
  > $OUT/gpu_prefill.txt 2>&1
echo "gpu_prefill rc=$?"; grep -E "^(PASS|FAIL)|required|check failed" $OUT/gpu_prefill.txt | tail -10
grep -E "^dvo" $OUT/gpu_prefill.txt | tail -7; el
FI_CACHE_PATH=$(mktemp -d)/d.db timeout 80 $B/tests/gpu_decode decode_lse_base2 decode_tensor_core_route > $OUT/gpu_decode.txt 2>&1
echo "gpu_decode rc=$?"; grep -E "^(PASS|FAIL)|required|check failed" $OUT/gpu_decode.txt | tail -6; el
PYV=$($PY -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
W=$(ls lab/gpu/wheels/apache_tvm_ffi-*-$PYV-*.whl | head -1)
mkdir -p $B/pysite && $PY -m zipfile -e "$W" $B/pysite && $PY -m zipfile -e lab/gpu/wheels/typing_extensions-*.whl $B/pysite
export PYTHONPATH=$PWD/$B/pysite${PYTHONPATH:+:$PYTHONPATH} FI_RUNTIME_LIBRARY=$PWD/$B/libfi_runtime.so
FI_CACHE_PATH=$(mktemp -d)/t.db timeout 50 $PY lab/gpu/tvm_abi_check.py $B > $OUT/tvm_abi.txt 2>&1
echo "tvm_abi_check rc=$?"; grep -E "^(FAIL|PASS)|passed|Error" $OUT/tvm_abi.txt | tail -16; el
B=$B OUT=$OUT BUDGET=112 timeout 120 bash lab/gpu/llama_check.sh > $OUT/llama.txt 2>&1
echo "llama_check rc=$?"; tail -12 $OUT/llama.txt; el
[ -n "${SHORT:-}" ] && exit 0  # s42_f.sh: the correctness checks alone
FI_CACHE_PATH=$(mktemp -d)/y.db timeout 40 $PY lab/gpu/python_check.py > $OUT/python_check.txt 2>&1
echo "python_check rc=$?"; grep -E "host:|passed|FAIL" $OUT/python_check.txt | tail -8
timeout 20 $B/fi-bench --quick runtime > $OUT/bench_runtime.txt 2>&1; echo "fi-bench runtime rc=$?"
grep -E "dispatch" $OUT/bench_runtime.txt; el
FI_BENCH_PREFILL_B=4 FI_BENCH_PREFILL_WARMUP_MS=500 timeout 55 $B/fi-bench --quick prefill > $OUT/bench_prefill.txt 2>&1
echo "fi-bench prefill rc=$?"; grep -E "TFLOP/s|^\| " $OUT/bench_prefill.txt | grep -vE "^\|---" | tail -14; el
FI_BENCH_DECODE_PICK=8 FI_BENCH_DECODE_VARIANTS="FI_DECODE_TC=1" timeout 25 $B/fi-bench --quick decode > $OUT/bench_decode.txt 2>&1
echo "fi-bench decode rc=$?"; grep -E "^\| " $OUT/bench_decode.txt | tail -4; el
