# ncu_prefill.sh: issue 49 item 2, where prefill's time goes against cuDNN's kernel on the
# same shape (bf16 4 x 8192, 32/8, D=128, causal): Nsight Compute on fi_runtime's prefill
# kernel (fi-bench prefill's first case) and on torch SDPA's cuDNN and flash kernels
# (lab/attn/sdpa_once.py), the same sections for each: speed of light, tensor pipe and
# issue activity, warp stalls, occupancy and registers, shared-memory bank conflicts,
# instruction mix. Full reports under $OUT/ncu_*.txt; the comparable lines last.
# Build here first: make -j2 BUILD=build-gpu6 all; run with carry ["build-gpu6"]
# (torch at /opt/torch/.venv/bin/python3 on the GPU machine; about 3-4 minutes).
S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }
B=${B:-build-gpu6}; PY=${PY:-/opt/torch/.venv/bin/python3}; OUT=${OUT:-/tmp/ncu_prefill}; mkdir -p $OUT
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
SECT="--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats \
 --section Occupancy --section LaunchStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables"
FI_BENCH_PREFILL_B=4 FI_BENCH_PREFILL_D=128 FI_BENCH_PREFILL_WARMUP_MS=0 FI_CACHE_PATH=$(mktemp -d)/n.db \
  timeout 150 $NCU --kernel-name regex:prefill --launch-skip 1 --launch-count 1 $SECT \
  $B/fi-bench --quick prefill > $OUT/ncu_fi.txt 2>&1; echo "ncu fi rc=$?"; el
for be in cudnn flash; do
  timeout 120 $NCU --kernel-name "regex:(cudnn|sdpa|fmha|flash|attn|sm90)" --launch-skip 2 --launch-count 1 $SECT \
    $PY lab/attn/sdpa_once.py --backend $be > $OUT/ncu_$be.txt 2>&1; echo "ncu $be rc=$?"; el
done
KEYS="Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Issued Ipc Active|Executed Ipc Active|\
Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Block Limit|Warp Cycles Per Issued|No Eligible|\
One or More Eligible|Stall|Bank Conflicts|Shared Memory|Dynamic Shared|Threads|Grid Size|Block Size|Tensor"
for f in fi cudnn flash; do
  echo "== $f: $(grep -m1 -oE '^  [A-Za-z_0-9:<>, ]+\(' $OUT/ncu_$f.txt | head -1)"
  grep -hE "$KEYS" $OUT/ncu_$f.txt | cut -c1-120 | head -40
done
