# s42_b.sh: issue 49's peer benchmark (fi-bench prefill and decode, then torch SDPA's cuDNN
# and flash backends on the same shapes in the same call: lab/attn/sdpa_peer.py) and issue
# 44's FlashInfer v0.6.9 tests of the non-attention ops through the shim.
# Build here first (from the repository root, after `make deps`):
#   make -j2 BUILD=build-gpu5 TVM_FFI_PYTHON=$PWD/build/pyvenv/bin/python all build-gpu5/libfi_runtime_tvm.so
# and prepare lab/gpu/wheels and lab/gpu/flashinfer_tests as lab/gpu/flashinfer_tests.sh says;
# run with carry ["build-gpu5", "lab/gpu/wheels", "lab/gpu/flashinfer_tests"].
export FI_LOG_LEVEL=warn; S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }
PY=${PY:-/opt/torch/.venv/bin/python3}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
FI_BENCH_DECODE_SWEEP=0 FI_CACHE_PATH=$(mktemp -d)/b.db timeout 240 build-gpu5/fi-bench --json $OUT/fi.json prefill decode > $OUT/fi_bench.txt 2>&1
echo "fi-bench rc=$?"; grep -E "^\| (tree|kv |MQA)" $OUT/fi_bench.txt; el
timeout 170 $PY lab/attn/sdpa_peer.py --fi-json $OUT/fi.json --json $OUT/peer.json > $OUT/peer.txt 2>&1
echo "sdpa_peer rc=$?"; grep -vE "^\|---" $OUT/peer.txt | tail -40; el
BUDGET=$(( 560 - ($(date +%s) - S) - 20 )); echo "flashinfer ops budget ${BUDGET}s"
if [ $BUDGET -gt 60 ]; then
  B=build-gpu5 BUDGET=$BUDGET OUT=$OUT/fitests bash lab/gpu/flashinfer_tests.sh ops > $OUT/fitests.txt 2>&1
  echo "flashinfer_tests rc=$?"; tail -25 $OUT/fitests.txt; el
fi
