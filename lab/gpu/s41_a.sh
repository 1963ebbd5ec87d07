# s41_a.sh: a ready first device call for the session after the fortieth (issues 46, 45, 44).
# Build here first (from the repository root):
#   make -j2 BUILD=build-gpu2 TVM_FFI_PYTHON=$PWD/build/pyvenv/bin/python all build-gpu2/libfi_runtime_tvm.so \
#     $(ls tests/gpu/gpu_*.c | sed 's|tests/gpu/\(.*\)\.c|build-gpu2/tests/\1|')
# then run with carry ["build-gpu2", "lab/gpu/wheels"] (wheels: see python_check.sh's header).
# Steps: every GPU test (make gpu-test's jobs, -j 12: the post-run MLA kernel, gpu_packbits and
# gpu_mla's one-576-buffer cases run for the first time), fi-bench mla, Nsight Compute on the
# B=64 L=4096 16-head MLA row, then where torch is and the Python check. Logs under $OUT.
export FI_LOG_LEVEL=warn; S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
FI_BUILD=build-gpu2 FT_LOGDIR=$OUT/gpu-logs timeout ${GT:-400} tests/gpu/run_gpu_tests.sh -j 12 > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$?"; grep -E "FAIL|passed, " $OUT/gpu_tests.txt | tail -12; el
timeout 90 build-gpu2/fi-bench mla > $OUT/bench_mla.txt 2>&1; echo "fi-bench mla rc=$?"
grep -E "^\||append|probe" $OUT/bench_mla.txt | tail -18; el
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
FI_BENCH_MLA_CASES=2 timeout 70 $NCU --kernel-name regex:batch_mla_paged --launch-count 1 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section SchedulerStats \
  build-gpu2/fi-bench --quick mla > $OUT/ncu_mla.txt 2>&1; echo "ncu rc=$?"
grep -hE "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Warp Cycles Per Issued|No Eligible|Stall" $OUT/ncu_mla.txt | cut -c1-110 | head -30; el
[ -n "$PYCHECK" ] || exit 0
for p in python3 /usr/bin/python3 /usr/local/bin/python3 /opt/conda/bin/python; do
  command -v $p > /dev/null && $p -c 'import sys; print(sys.executable); import torch; print("torch", torch.__version__, torch.__file__)' 2>&1 | tail -2; done
# the Python binding over build-gpu2's libraries (apache-tvm-ffi unzipped onto PYTHONPATH)
PY=$(python3 -c 'import sys; print("%d%d" % sys.version_info[:2])'); V=$(mktemp -d)
python3 -m zipfile -e lab/gpu/wheels/apache_tvm_ffi-*-cp$PY-*.whl $V && python3 -m zipfile -e lab/gpu/wheels/typing_extensions-*.whl $V
FI_RUNTIME_LIBRARY=$PWD/build-gpu2/libfi_runtime.so FI_CACHE_PATH=$(mktemp -d)/py.db PYTHONPATH=$PWD/python:$V \
  timeout 120 python3 lab/gpu/python_check.py > $OUT/python_check.txt 2>&1; echo "python_check rc=$?"; tail -30 $OUT/python_check.txt; el
