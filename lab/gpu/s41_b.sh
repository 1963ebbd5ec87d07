# s41_b.sh: the forty-first session's second device call (issue 45: tensor-core decode for
# groups above 16; issue 44: where torch is and the Python check).
# Build here first (from the repository root):
#   make -j2 BUILD=build-gpu3 TVM_FFI_PYTHON=$PWD/build/pyvenv/bin/python all build-gpu3/libfi_runtime_tvm.so \
#     $(ls tests/gpu/gpu_*.c | sed 's|tests/gpu/\(.*\)\.c|build-gpu3/tests/\1|')
# then run with carry ["build-gpu3", "lab/gpu/wheels"].
# Steps: gpu_decode's tests of the route (groups above 16 both ways, FI_DECODE_TC=1 at
# groups <= 16, CUDA-graph replays of both), gpu_prefill (its split merge is two passes now), then fi-bench decode's MQA row and extras
# (32/1, 64/1 at B=16, 64/2, B=4 L=32768) and two GQA targets, each with the default, the
# decode kernel (FI_DECODE_TC=0), the prefill kernels (FI_DECODE_TC=1) and three wgmma
# tile shapes, interleaved in one process; then where torch is and python_check.
export FI_LOG_LEVEL=warn; S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
FI_CACHE_PATH=$(mktemp -d)/t.db timeout 200 build-gpu3/tests/gpu_decode decode_groups_above_16 decode_tensor_core_route \
  decode_cuda_graph_replay_after_replan decode_cuda_graph_replay_tensor_cores decode_page_boundaries_len1_empty \
  decode_sinks > $OUT/gpu_decode_tc.txt 2>&1; echo "gpu_decode rc=$?"; grep -E "FAIL|fail|passed" $OUT/gpu_decode_tc.txt | tail -12; el
FI_CACHE_PATH=$(mktemp -d)/p.db timeout 150 build-gpu3/tests/gpu_prefill > $OUT/gpu_prefill.txt 2>&1
echo "gpu_prefill rc=$?"; grep -E "FAIL|passed" $OUT/gpu_prefill.txt | tail -6; el
FI_BENCH_DECODE_PICK=9,10,11,12,13,0,1 FI_BENCH_DECODE_EXTRA="64,4096,32,1;16,4096,64,1;64,4096,64,2;4,32768,64,1" \
  FI_BENCH_DECODE_VARIANTS="FI_DECODE_TC=0;FI_DECODE_TC=1;FI_PREFILL_WG=1x64;FI_PREFILL_WG=1x128;FI_PREFILL_WG=2x128" \
  timeout 200 build-gpu3/fi-bench decode > $OUT/bench_decode_tc.txt 2>&1; echo "fi-bench decode rc=$?"
grep -E "^\||probe" $OUT/bench_decode_tc.txt | tail -50; el
[ -n "$PYCHECK" ] || exit 0
for p in python3 /usr/bin/python3 /usr/local/bin/python3 /opt/conda/bin/python; do
  command -v $p > /dev/null && $p -c 'import sys; print(sys.executable); import torch; print("torch", torch.__version__, torch.__file__)' 2>&1 | tail -2; done
PY=$(python3 -c 'import sys; print("%d%d" % sys.version_info[:2])'); V=$(mktemp -d)
python3 -m zipfile -e lab/gpu/wheels/apache_tvm_ffi-*-cp$PY-*.whl $V && python3 -m zipfile -e lab/gpu/wheels/typing_extensions-*.whl $V
FI_RUNTIME_LIBRARY=$PWD/build-gpu3/libfi_runtime.so FI_CACHE_PATH=$(mktemp -d)/py.db PYTHONPATH=$PWD/python:$V \
  timeout 120 python3 lab/gpu/python_check.py > $OUT/python_check.txt 2>&1; echo "python_check rc=$?"; tail -30 $OUT/python_check.txt; el
