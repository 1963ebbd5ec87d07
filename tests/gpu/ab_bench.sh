#!/bin/bash
# ab_bench.sh: fi-bench of two (or more) builds on one card in one call, section by section,
# the builds taking turns within each section and round so that clocks and heat fall on both
# alike; then tests/gpu/bench_ab.py's table of every row, each build against the first.
#
# usage (on the GPU machine): tests/gpu/ab_bench.sh NAME=BUILD_DIR NAME=BUILD_DIR... -- SECTION...
#   BUILD_DIR     holds fi-bench and libfi_runtime.so (a `make all` folder)
#   SECTION       fi-bench sections (copy rmsnorm norms act cascade page rope decode single
#                 prefill sampling runtime); flags such as --quick go with them
# Environment: AB_ROUNDS (default 1), AB_DEADLINE seconds from the start (default 540): a
#   section not started by then is skipped and said; AB_TIMEOUT seconds per fi-bench run
#   (default 150). Each build gets its own cache file under $OUT (default /tmp/ab-out), so
#   every build compiles its own kernels once, before the timed runs (fi-bench warms up).
# Output: $OUT/NAME.rR.SECTION.jsonl and .txt per run, the table last (also $OUT/table.md).
set -u
builds=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do builds+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
if [ ${#builds[@]} -lt 1 ] || [ $# -lt 1 ]; then
  sed -n '2,16p' "$0" >&2
  exit 2
fi
flags=(); sections=()
for a in "$@"; do case "$a" in -*) flags+=("$a") ;; *) sections+=("$a") ;; esac; done
OUT=${OUT:-/tmp/ab-out}
mkdir -p "$OUT"
rounds=${AB_ROUNDS:-1} deadline=${AB_DEADLINE:-540} per=${AB_TIMEOUT:-150}
start=$(date +%s)
rc=0
for s in "${sections[@]}"; do
  for r in $(seq 1 "$rounds"); do
    if [ $(( $(date +%s) - start )) -ge "$deadline" ]; then
      echo "ab_bench: $s round $r skipped: the deadline (${deadline}s)"; rc=1; continue
    fi
    for b in "${builds[@]}"; do
      n=${b%%=*} d=${b#*=}
      t0=$(date +%s)
      FI_CACHE_PATH="$OUT/$n.db" timeout "$per" "$d/fi-bench" "$s" "${flags[@]}" --json "$OUT/$n.r$r.$s.jsonl" \
        > "$OUT/$n.r$r.$s.txt" 2>&1
      e=$?
      echo "ab_bench: $n $s round $r: rc $e, $(( $(date +%s) - t0 ))s"
      [ "$e" -eq 0 ] || rc=1
    done
  done
done
args=()
for b in "${builds[@]}"; do n=${b%%=*}; args+=("$n=$OUT/$n.r*.jsonl"); done
python3 "$(dirname "$0")/bench_ab.py" "${args[@]}" | tee "$OUT/table.md"
exit $rc
