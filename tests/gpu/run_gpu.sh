#!/bin/bash
# run_gpu.sh: everything the GPU machine runs in one call: the GPU tests, a
# sanitizer pass, fi-bench and a look at the SASS; full logs under $OUT, a short table last.
set -u
B=${FI_BUILD:-build}
OUT=${OUT:-/tmp/fi-gpu-out}
mkdir -p "$OUT"
export FI_LOG_LEVEL=${FI_LOG_LEVEL:-warn}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  > "$OUT/gpu.txt" 2>&1
git log -1 --format='commit %H %s' >> "$OUT/gpu.txt" 2>/dev/null

main() {
echo "== GPU tests (tests/gpu/run_gpu_tests.sh: every binary and variant side by side)"
L=$(mktemp -d)
FI_BUILD="$B" FT_LOGDIR="$L" "$(dirname "$0")/run_gpu_tests.sh" 2>&1 | tee "$OUT/gpu-test.txt"
gpu_rc=${PIPESTATUS[0]}
# Every case's measured error, kept with the results (few files come back).
cat "$L"/*/*.err "$L"/*/*.out >> "$OUT/gpu-test.txt" 2>/dev/null
rm -rf "$L"

echo "== compute-sanitizer (memcheck, racecheck) on the strided and in-place cases"
san=ok
if command -v compute-sanitizer >/dev/null; then
  { compute-sanitizer --tool memcheck --error-exitcode 3 "$B/tests/gpu_rmsnorm" \
      rmsnorm_strided_rows_and_misaligned rmsnorm_in_place_and_stream || san="memcheck failed ($?)"
    compute-sanitizer --tool racecheck --error-exitcode 3 "$B/tests/gpu_rmsnorm" \
      rmsnorm_strided_rows_and_misaligned || san="$san; racecheck failed ($?)"
  } > "$OUT/sanitizer.txt" 2>&1
else
  san="compute-sanitizer not found"
fi
echo "sanitizer: $san"

echo "== fi-bench"
"$B/fi-bench" --json "$OUT/bench.jsonl" ${FI_BENCH_SECTIONS:-} 2>&1 | tee "$OUT/bench.txt"

echo "== SASS of the 8192-wide bf16 rmsnorm kernel"
T=$(mktemp -d)
"$B/fi-cache" --cache "$T/k.db" prewarm --arch sm_90 --op rmsnorm -j 16 > /dev/null 2>&1 || true
python3 - "$T" > "$OUT/sass.txt" 2>&1 <<'PY'
import sqlite3, subprocess, sys
t = sys.argv[1]
db = sqlite3.connect(t + "/k.db")
for key, entry, blob in db.execute("select key, entry, binary from kernels where key like '%bf16;vec=8;threads=512;chunks=2;%'"):
    open(t + "/k.cubin", "wb").write(blob)
    print(key, entry)
    print(subprocess.run(["cuobjdump", "-res-usage", t + "/k.cubin"], capture_output=True, text=True).stdout)
    sass = subprocess.run(["cuobjdump", "-sass", t + "/k.cubin"], capture_output=True, text=True).stdout
    print("\n".join(l for l in sass.splitlines() if "LDG" in l or "STG" in l))
PY
head -20 "$OUT/sass.txt"
echo "== cache open, step by step, in fresh processes"
for i in 1 2 3 4 5 6; do "$B/tests/probe_store" "$T/k.db"; done > "$OUT/probe.txt" 2>&1
cat "$OUT/probe.txt"
rm -rf "$T"
return $gpu_rc
}

main > "$OUT/run.log" 2>&1
gpu_rc=$?
san=$(grep '^sanitizer:' "$OUT/run.log" | head -1)
echo "== summary (full log: run.log)"
cat "$OUT/gpu.txt"
grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$OUT/gpu-test.txt" | tail -1
echo "$san"
grep -E '^copy|fresh process|of which|dispatch|cold' "$OUT/bench.txt" | cut -c1-230
grep -E '^\| rmsnorm' "$OUT/bench.txt" | grep -v 'minblocks' | head -20
echo "best tuning points:"
grep -E 'minblocks' "$OUT/bench.txt" | sort -t'|' -k6 -rn | head -12
grep -E 'REG:' "$OUT/sass.txt"
tail -3 "$OUT/probe.txt"
exit $gpu_rc
