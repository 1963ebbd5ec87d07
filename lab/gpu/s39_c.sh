# s39_c.sh: issue 41's fi-bench before/after: 7bb2dad (build-base) against HEAD (build-gpu),
# taking turns section by section on one card (tests/gpu/ab_bench.sh), --quick sections of
# every op the skeleton moved, then the table of every row. Carry ["build-gpu", "build-base"].
export FI_LOG_LEVEL=warn
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
OUT=$OUT/ab AB_DEADLINE=520 AB_TIMEOUT=80 FI_BENCH_DECODE_SWEEP=0 tests/gpu/ab_bench.sh base=build-base new=build-gpu -- \
  --quick rmsnorm norms act rope page cascade decode sampling prefill > $OUT/ab_ops.txt 2>&1
echo "ab rc=$?"; grep "^ab_bench" $OUT/ab_ops.txt; grep -vE "^ab_bench" $OUT/ab_ops.txt | cut -c1-200 | tail -80
