# s41_b.sh: the forty-first session's second device call (issue 45: tensor-core decode for
# groups above 16; issue 46: the MLA kernel with a cheaper tile copy and fixed ldmatrix
# offsets, ~900 instructions a tile and warp instead of ~1900, and the 16-row tile's
# two-stage shape, two blocks an SM; issue 44: where torch is and the Python check).
# Build here first (from the repository root):
#   make -j2 BUILD=build-gpu3 TVM_FFI_PYTHON=$PWD/build/pyvenv/bin/python all build-gpu3/libfi_runtime_tvm.so \
#     build-gpu3/tests/gpu_decode build-gpu3/tests/gpu_prefill build-gpu3/tests/gpu_packbits build-gpu3/tests/gpu_mla
# then run with carry ["build-gpu3", "lab/gpu/wheels"] (PYCHECK=1 for the Python step).
# Steps, most wanted first: gpu_decode's tests of the route (groups above 16 both ways,
# FI_DECODE_TC=1 at groups <= 16, CUDA-graph replays of both); gpu_mla by default and with
# FI_MLA_STAGES=2; fi-bench mla both ways; fi-bench decode's MQA row and extras (32/1, 64/1
# at B=16, 64/2, B=4 L=32768) and two GQA targets with the default, FI_DECODE_TC=0 and
# FI_DECODE_TC=1, interleaved in one process; gpu_prefill (its split merge is two passes
# now); gpu_packbits (first run); Nsight Compute on an MLA row; torch and python_check.
export FI_LOG_LEVEL=warn; S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
FI_CACHE_PATH=$(mktemp -d)/t.db timeout 150 build-gpu3/tests/gpu_decode decode_groups_above_16 decode_tensor_core_route \
  decode_cuda_graph_replay_after_replan decode_cuda_graph_replay_tensor_cores decode_page_boundaries_len1_empty \
  decode_sinks > $OUT/gpu_decode_tc.txt 2>&1; echo "gpu_decode rc=$?"; grep -E "^FAIL|fail|passed" $OUT/gpu_decode_tc.txt | tail -8; el
for v in "" FI_MLA_STAGES=2; do
  env $v FI_CACHE_PATH=$(mktemp -d)/m.db timeout 90 build-gpu3/tests/gpu_mla > $OUT/gpu_mla_${v:-default}.txt 2>&1
  echo "gpu_mla ${v:-default} rc=$?"; grep -E "^FAIL|passed" $OUT/gpu_mla_${v:-default}.txt | tail -4; el
done
for v in "" FI_MLA_STAGES=2; do
  env $v timeout 80 build-gpu3/fi-bench mla > $OUT/bench_mla_${v:-default}.txt 2>&1; echo "fi-bench mla ${v:-default} rc=$?"
  grep -E "^\| (memory|compute|MTP)|append|probe" $OUT/bench_mla_${v:-default}.txt | tail -14; el
done
FI_BENCH_DECODE_PICK=9,10,11,12,13,0,1 FI_BENCH_DECODE_EXTRA="64,4096,32,1;16,4096,64,1;64,4096,64,2;4,32768,64,1" \
  FI_BENCH_DECODE_VARIANTS="FI_DECODE_TC=0;FI_DECODE_TC=1" \
  timeout 100 build-gpu3/fi-bench decode > $OUT/bench_decode_tc.txt 2>&1; echo "fi-bench decode rc=$?"
grep -E "^\||probe" $OUT/bench_decode_tc.txt | tail -26; el
FI_CACHE_PATH=$(mktemp -d)/p.db timeout 100 build-gpu3/tests/gpu_prefill > $OUT/gpu_prefill.txt 2>&1
echo "gpu_prefill rc=$?"; grep -E "^FAIL|passed" $OUT/gpu_prefill.txt | tail -6; el
FI_CACHE_PATH=$(mktemp -d)/k.db timeout 40 build-gpu3/tests/gpu_packbits > $OUT/gpu_packbits.txt 2>&1
echo "gpu_packbits rc=$?"; grep -E "^FAIL|passed" $OUT/gpu_packbits.txt | tail -6; el
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
FI_BENCH_MLA_CASES=2 timeout 45 $NCU --kernel-name regex:batch_mla_paged --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section Occupancy build-gpu3/fi-bench --quick mla > $OUT/ncu_mla.txt 2>&1
echo "ncu rc=$?"; grep -hE "Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued|No Eligible" $OUT/ncu_mla.txt | cut -c1-100; el
[ -n "$PYCHECK" ] || exit 0
for p in python3 /usr/bin/python3 /usr/local/bin/python3 /opt/conda/bin/python; do
  command -v $p > /dev/null && $p -c 'import sys; print(sys.executable); import torch; print("torch", torch.__version__, torch.__file__)' 2>&1 | tail -2; done
PY=$(python3 -c 'import sys; print("%d%d" % sys.version_info[:2])'); V=$(mktemp -d)
python3 -m zipfile -e lab/gpu/wheels/apache_tvm_ffi-*-cp$PY-*.whl $V && python3 -m zipfile -e lab/gpu/wheels/typing_extensions-*.whl $V
FI_RUNTIME_LIBRARY=$PWD/build-gpu3/libfi_runtime.so FI_CACHE_PATH=$(mktemp -d)/py.db PYTHONPATH=$PWD/python:$V \
  timeout 60 python3 lab/gpu/python_check.py > $OUT/python_check.txt 2>&1; echo "python_check rc=$?"; tail -25 $OUT/python_check.txt; el
