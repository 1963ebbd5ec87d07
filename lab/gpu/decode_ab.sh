#!/bin/bash
# decode_ab.sh: one focused GPU call for decode tuning work: every gpu_decode case under
# each tuning setting, then an in-process fi-bench A/B of the settings; logs under $OUT.
#
# usage (on the GPU machine): lab/gpu/decode_ab.sh STAGE_DIR
#   STAGE_DIR          what `make decode-stage` copies: fi-bench, fi-cache,
#                      libfi_runtime.so.0 and tests/gpu_decode (build/decode-stage)
#   AB_TEST_ENVS       settings gpu_decode runs under, ';'-separated, each a list of
#                      VAR=VALUE joined by ','; "-" is none (default "-")
#   AB_BENCH_VARIANTS  FI_BENCH_DECODE_VARIANTS for fi-bench (default: none, no A/B)
#   AB_BENCH_PICK      FI_BENCH_DECODE_PICK (default 0,2,4,6,7,8: issue 4's rows)
#   AB_BENCH_EXTRA     FI_BENCH_DECODE_EXTRA (default none)
#   AB_REPEAT          FI_BENCH_DECODE_REPEAT (default 2)
#   AB_NCU             settings (as in AB_TEST_ENVS) to profile one batch_decode launch of
#                      fi-bench's AB_NCU_PICK case under, with Nsight Compute (clocks left
#                      alone); default none
#   AB_NCU_PICK        that case (default 7: B=1 L=8192 32/8)
#   AB_FULL            1: last, the full `fi-bench copy decode` (copy and read rooflines,
#                      issue 4's rows, the tuning rows, the sweep) into $OUT/full.log
# The decode kernels are prewarmed first into a private cache that fi-bench and every test
# process share (the runtime refuses one in a world-writable directory such as /tmp
# itself); kernels of tuning keys compile at plan time into it. Each test case is its own
# process, all at once, 250 s each.
# Exit status: 0 when the prewarm, every test case and fi-bench passed (Nsight Compute
# is not counted); 1 otherwise (gpu_decode naming no case included); 2 when STAGE_DIR lacks a file.
set -u
. "$(dirname "$0")/decode_cases.sh"
A=$(cd "${1:?usage: decode_ab.sh STAGE_DIR}" && pwd) || exit 2
for f in fi-bench fi-cache libfi_runtime.so.0 tests/gpu_decode; do
  [ -e "$A/$f" ] || { echo "decode_ab.sh: $A/$f missing (make decode-stage)" >&2; exit 2; }
done
OUT=${OUT:-/tmp/decode-ab}
mkdir -p "$OUT"
C=$(mktemp -d)
chmod 700 "$C"
export FI_CACHE_PATH=$C/k.db FI_TEST_CACHE=$C/k.db  # fi-bench's cache; the GPU tests'
export FI_LOG_LEVEL=${FI_LOG_LEVEL:-warn}
T0=$(date +%s)
el() { echo "$(($(date +%s) - T0)) s"; }
# with SETTING CMD...: CMD under SETTING (VAR=VALUE pairs joined by ',', or "-").
with() {
  local kv=()
  [ "$1" != "-" ] && IFS=',' read -ra kv <<< "$1"
  shift
  env ${kv[@]+"${kv[@]}"} "$@"
}
tag() { echo "$1" | tr -c 'A-Za-z0-9\n' '_'; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  > "$OUT/gpu.txt" 2>&1
"$A/fi-cache" prewarm --arch sm_90 --op batch_decode --op single_decode --op decode_upload \
  --op read_probe -j "$(nproc)" > "$OUT/prewarm.log" 2>&1
prc=$?
echo "prewarm rc=$prc ($(el)): $(tail -1 "$OUT/prewarm.log")"
rc_all=$((prc != 0))

IFS=';' read -ra envs <<< "${AB_TEST_ENVS:--}"
for e in "${envs[@]}"; do
  kv=()
  [ "$e" != "-" ] && IFS=',' read -ra kv <<< "$e"
  decode_cases "$A" "$OUT/t_$(tag "$e")" "under $e" ${kv[@]+"${kv[@]}"} || rc_all=1
  echo "  ($(el))"
done

if [ -n "${AB_BENCH_VARIANTS:-}" ]; then
  FI_BENCH_DECODE_SWEEP=0 FI_BENCH_DECODE_PICK=${AB_BENCH_PICK:-0,2,4,6,7,8} \
    FI_BENCH_DECODE_EXTRA=${AB_BENCH_EXTRA:-} FI_BENCH_DECODE_REPEAT=${AB_REPEAT:-2} \
    FI_BENCH_DECODE_VARIANTS=$AB_BENCH_VARIANTS timeout 300 "$A/fi-bench" decode > "$OUT/bench.log" 2>&1
  brc=$?
  echo "fi-bench rc=$brc ($(el))"
  [ "$brc" = 0 ] || rc_all=1
  grep -iE "read|copy" "$OUT/bench.log" | head -3
  grep "|" "$OUT/bench.log" | tail -60
fi
if [ -n "${AB_NCU:-}" ]; then
  IFS=';' read -ra nenvs <<< "$AB_NCU"
  for e in "${nenvs[@]}"; do
    f="$OUT/ncu_$(tag "$e").txt"
    with "$e" FI_BENCH_DECODE_SWEEP=0 FI_BENCH_DECODE_PICK="${AB_NCU_PICK:-7}" FI_BENCH_DECODE_REPEAT=1 \
      timeout 240 ncu --clock-control none -k regex:fi_batch_decode --launch-skip 10 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section SchedulerStats "$A/fi-bench" decode > "$f" 2>&1
    echo "ncu under $e rc=$? ($(el))"
    grep -E " Duration|DRAM Throughput|L2 Hit Rate|Achieved Occupancy|Stall Long Scoreboard" "$f" | head -8
  done
fi
if [ "${AB_FULL:-0}" = 1 ]; then
  timeout 420 "$A/fi-bench" --json "$OUT/full.jsonl" copy decode > "$OUT/full.log" 2>&1
  frc=$?
  echo "fi-bench copy decode (full) rc=$frc ($(el))"
  [ "$frc" = 0 ] || rc_all=1
  grep -E "^(copy|read):" "$OUT/full.log"
  grep "|" "$OUT/full.log" | head -40
fi
rm -rf "$C"
exit $rc_all
