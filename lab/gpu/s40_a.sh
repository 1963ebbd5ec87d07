# s40_a.sh: the fortieth session's MLA device call (issue 46): gpu_mla (every case against
# the float64 reference), gpu_prefill (custom masks' first GPU run) and gpu_decode side by
# side, then fi-bench mla (read probe, mma.sync and wgmma probes, memory- and compute-bound
# rows, append vs copy). Carry ["build-gpu2"]. Logs under $OUT.
export FI_LOG_LEVEL=warn; S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for t in gpu_mla gpu_packbits gpu_prefill gpu_decode; do (timeout 280 build-gpu2/tests/$t > $OUT/$t.txt 2>&1; echo "$t rc=$?" >> $OUT/$t.txt) & done
wait; el
for t in gpu_mla gpu_packbits gpu_prefill gpu_decode; do echo "== $t: $(grep -c '^PASS' $OUT/$t.txt) passed, $(grep -c '^FAIL' $OUT/$t.txt) failed; $(tail -1 $OUT/$t.txt)"; done
grep -E "^  (ok|FAIL)" $OUT/gpu_mla.txt | cut -c1-170
grep -E "FAIL|mask" $OUT/gpu_prefill.txt | head -20
timeout 200 build-gpu2/fi-bench mla > $OUT/bench_mla.txt 2>&1; echo "fi-bench mla rc=$?"; cat $OUT/bench_mla.txt | grep -v "^$" | tail -25; el
