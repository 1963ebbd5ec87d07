# s42_c.sh: issue 44's GPU checks beside the lse-base-2 tests: fi_runtime's FlashInfer-ABI
# module driven as TVM's attn_backend.h drives FlashInfer (lab/gpu/tvm_abi_check.py), the
# transformers Llama check (lab/gpu/llama_check.sh), gpu_decode decode_lse_base2 and
# gpu_prefill prefill_lse_base2 and prefill_head_dim_vo (192 / 128), python_check's host
# times, fi-bench prefill at B=4 (fp8 KV and 192/128 rows among them).
# Build here first (from the repository root, after `make deps`):
#   make -j2 BUILD=build-gpu6 TVM_FFI_PYTHON=$PWD/build/pyvenv/bin/python all \
#     build-gpu6/tests/gpu_decode build-gpu6/tests/gpu_prefill
# and prepare lab/gpu/wheels (python_check.sh's and llama_check.sh's headers); run with
# carry ["build-gpu6", "lab/gpu/wheels"].
export FI_LOG_LEVEL=warn; S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }
B=build-gpu6; PY=${PY:-/opt/torch/.venv/bin/python3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# apache-tvm-ffi for the machine's torch python, unzipped onto PYTHONPATH (python_check.sh's way)
PYV=$($PY -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
W=$(ls lab/gpu/wheels/apache_tvm_ffi-*-$PYV-*.whl | head -1)
mkdir -p $B/pysite && $PY -m zipfile -e "$W" $B/pysite && $PY -m zipfile -e lab/gpu/wheels/typing_extensions-*.whl $B/pysite
export PYTHONPATH=$PWD/$B/pysite${PYTHONPATH:+:$PYTHONPATH} FI_RUNTIME_LIBRARY=$PWD/$B/libfi_runtime.so
FI_CACHE_PATH=$(mktemp -d)/t.db timeout 120 $PY lab/gpu/tvm_abi_check.py $B > $OUT/tvm_abi.txt 2>&1
echo "tvm_abi_check rc=$?"; grep -E "^(FAIL|PASS)|passed|Error|error" $OUT/tvm_abi.txt | tail -16; el
FI_CACHE_PATH=$(mktemp -d)/d.db timeout 100 $B/tests/gpu_decode decode_lse_base2 > $OUT/gpu_decode.txt 2>&1
echo "gpu_decode rc=$?"; grep -E "^(PASS|FAIL)|required" $OUT/gpu_decode.txt | tail -4; el
FI_CACHE_PATH=$(mktemp -d)/p.db timeout 120 $B/tests/gpu_prefill prefill_lse_base2 prefill_head_dim_vo > $OUT/gpu_prefill.txt 2>&1
echo "gpu_prefill rc=$?"; grep -E "^(PASS|FAIL)|required|^dvo" $OUT/gpu_prefill.txt | tail -14; el
FI_CACHE_PATH=$(mktemp -d)/y.db timeout 100 $PY lab/gpu/python_check.py > $OUT/python_check.txt 2>&1
echo "python_check rc=$?"; grep -E "host:|passed|FAIL" $OUT/python_check.txt | tail -12
timeout 60 $B/fi-bench --quick runtime > $OUT/bench_runtime.txt 2>&1; echo "fi-bench runtime rc=$?"
grep -E "dispatch" $OUT/bench_runtime.txt; el
if [ -f lab/gpu/llama_check.sh ]; then
  B=$B OUT=$OUT BUDGET=185 timeout 200 bash lab/gpu/llama_check.sh > $OUT/llama.txt 2>&1
  echo "llama_check rc=$?"; tail -14 $OUT/llama.txt; el
fi
FI_BENCH_PREFILL_B=4 FI_BENCH_PREFILL_WARMUP_MS=1000 timeout 100 $B/fi-bench prefill > $OUT/bench_prefill.txt 2>&1
echo "fi-bench prefill rc=$?"; grep -E "TFLOP/s|^\| " $OUT/bench_prefill.txt | grep -vE "^\|---" | tail -20; el
