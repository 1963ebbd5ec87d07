# s40_b.sh: the fortieth session's second MLA call (issue 46): gpu_mla (with the review's
# one-576-buffer cases) and gpu_packbits, Nsight Compute on the MLA kernel at B=64 L=4096
# 16 heads (the memory-bound row), fi-bench mla after
# the even/odd k-step change, and where torch lives on this machine (issue 44/49).
# Carry ["build-gpu2"]. Logs under $OUT.
export FI_LOG_LEVEL=warn; S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
(timeout 120 build-gpu2/tests/gpu_mla > $OUT/gpu_mla.txt 2>&1; echo "gpu_mla rc=$?" >> $OUT/gpu_mla.txt) &
(timeout 100 build-gpu2/tests/gpu_packbits > $OUT/gpu_packbits.txt 2>&1; echo "gpu_packbits rc=$?" >> $OUT/gpu_packbits.txt) &
wait; el
for t in gpu_mla gpu_packbits; do echo "== $t: $(grep -c '^PASS' $OUT/$t.txt) passed, $(grep -c '^FAIL' $OUT/$t.txt) failed; $(tail -1 $OUT/$t.txt)"; done
grep -E "FAIL|576" $OUT/gpu_mla.txt | cut -c1-160; grep -E "FAIL" $OUT/gpu_packbits.txt | head -5
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
for c in 2; do FI_BENCH_MLA_CASES=$c timeout 70 $NCU --kernel-name regex:batch_mla_paged --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section SchedulerStats --section LaunchStats build-gpu2/fi-bench --quick mla > $OUT/ncu_$c.txt 2>&1; echo "ncu case $c rc=$?"; done
grep -hE "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall|L2 Hit|Mem Busy|Max Bandwidth|Block Limit" $OUT/ncu_*.txt | cut -c1-120 | head -70
el
FI_BENCH_MLA_CASES=1,2,5,6 timeout 60 build-gpu2/fi-bench mla > $OUT/bench_mla.txt 2>&1; echo "fi-bench mla rc=$?"; grep -E "^\||append|probe" $OUT/bench_mla.txt | tail -16; el
for p in python3 python3.10 python3.11 python3.12 /usr/bin/python3 /opt/conda/bin/python /usr/local/bin/python3; do
  command -v $p > /dev/null && $p -c 'import sys; print(sys.executable, sys.version.split()[0]); import torch; print("torch", torch.__version__, torch.__file__)' 2>&1 | tail -2; done
ls -d /usr/lib/python3*/*-packages/torch /usr/local/lib/python3*/*-packages/torch /opt/*/lib/python3*/site-packages/torch 2>/dev/null; el
