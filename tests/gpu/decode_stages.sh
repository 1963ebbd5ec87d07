#!/bin/bash
# decode_stages.sh: one GPU call that compares builds of the runtime on decode: every
# gpu_decode case from each build, then fi-bench's picked rows from each in turn, round
# after round (ABBA order), and one table of every row against the first build.
#
# usage (on the GPU machine): tests/gpu/decode_stages.sh [NAME=]STAGE_DIR...
#   STAGE_DIR    a stage (tests/gpu/build_stage.sh or `make decode-stage`: fi-bench, fi-cache,
#                libfi_runtime.so.0, tests/gpu_decode); NAME labels it (default: the
#                folder's name). The first is the baseline the table's deltas are against.
#   DS_PICK      FI_BENCH_DECODE_PICK (default 0,1,2,3,4,5,6,7,8: issue 4's rows)
#   DS_EXTRA     FI_BENCH_DECODE_EXTRA (default none; its cases are picked as 9, 10, ...)
#   DS_VARIANTS  FI_BENCH_DECODE_VARIANTS inside each process (default none)
#   DS_ROUNDS    rounds; a round runs fi-bench once from every stage, forwards in even
#                rounds and backwards in odd ones (default 2)
#   DS_REPEAT    FI_BENCH_DECODE_REPEAT within a process (default 1)
#   DS_TESTS     the stages whose gpu_decode cases run first, all of a stage's at once,
#                250 s each: 1 every stage (default), 0 none, or names ("base,new")
#   DS_PREWARM   1: `fi-cache prewarm` of every decode configuration from every stage
#                first (40 s a stage on 16 cores); 0 (default): kernels compile as the
#                tests and fi-bench's plans ask for them, into the same cache
# Every process shares one private cache (a build's kernels differ in their source hash,
# so stages never share a binary they should not). Logs and fi-bench's JSON lines under
# $OUT; the table last (tests/gpu/stages_table.py). Exit status: 0 when every prewarm,
# test case and fi-bench run passed; 1 otherwise; 2 on bad usage.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/decode_cases.sh"
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; }
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
[ $# -ge 1 ] || { usage >&2; exit 2; }
names=()
dirs=()
for a in "$@"; do
  n=${a%%=*}
  d=${a#*=}
  [ "$n" = "$a" ] && n=$(basename "$a")
  d=$(cd "$d" 2> /dev/null && pwd) || { echo "decode_stages.sh: no folder in $a" >&2; exit 2; }
  for f in fi-bench fi-cache libfi_runtime.so.0 tests/gpu_decode; do
    [ -e "$d/$f" ] || { echo "decode_stages.sh: $d/$f missing (tests/gpu/build_stage.sh)" >&2; exit 2; }
  done
  case "$n" in *[!A-Za-z0-9._-]*) echo "decode_stages.sh: name $n: letters, digits, . _ - only" >&2; exit 2 ;; esac
  for m in ${names[@]+"${names[@]}"}; do
    [ "$m" = "$n" ] && { echo "decode_stages.sh: two stages named $n (NAME=DIR)" >&2; exit 2; }
  done
  names+=("$n")
  dirs+=("$d")
done
N=${#names[@]}
OUT=${OUT:-/tmp/decode-stages}
mkdir -p "$OUT/bench"
C=$(mktemp -d)
chmod 700 "$C"  # the runtime refuses a cache in a world-writable folder
trap 'rm -rf "$C"' EXIT
export FI_CACHE_PATH=$C/k.db FI_TEST_CACHE=$C/k.db
export FI_LOG_LEVEL=${FI_LOG_LEVEL:-warn}
T0=$(date +%s)
el() { echo "$(($(date +%s) - T0)) s"; }
rc_all=0

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  > "$OUT/gpu.txt" 2>&1
for i in $(seq 0 $((N - 1))); do
  { [ -f "${dirs[$i]}/STAGE" ] && cat "${dirs[$i]}/STAGE"; } | sed "s/^/${names[$i]}: /" >> "$OUT/stages.txt"
done

if [ "${DS_PREWARM:-0}" = 1 ]; then
  for i in $(seq 0 $((N - 1))); do
    "${dirs[$i]}/fi-cache" prewarm --arch sm_90 --op batch_decode --op single_decode --op decode_upload \
      --op read_probe -j "$(nproc)" > "$OUT/prewarm_${names[$i]}.log" 2>&1
    r=$?
    echo "prewarm ${names[$i]} rc=$r ($(el)): $(tail -1 "$OUT/prewarm_${names[$i]}.log")"
    [ $r = 0 ] || rc_all=1
  done
fi

tests=${DS_TESTS:-1}
if [ "$tests" != 0 ]; then
  for i in $(seq 0 $((N - 1))); do
    [ "$tests" = 1 ] || case ",$tests," in *",${names[$i]},"*) ;; *) continue ;; esac
    decode_cases "${dirs[$i]}" "$OUT/tests_${names[$i]}" "${names[$i]}" || rc_all=1
    echo "  ($(el))"
  done
fi

rounds=${DS_ROUNDS:-2}
for r in $(seq 0 $((rounds - 1))); do
  order=$(seq 0 $((N - 1)))
  [ $((r % 2)) = 1 ] && order=$(seq $((N - 1)) -1 0)
  for i in $order; do
    base="$OUT/bench/${names[$i]}_r$r"
    FI_BENCH_DECODE_SWEEP=0 FI_BENCH_DECODE_PICK=${DS_PICK:-0,1,2,3,4,5,6,7,8} \
      FI_BENCH_DECODE_EXTRA=${DS_EXTRA:-} FI_BENCH_DECODE_REPEAT=${DS_REPEAT:-1} \
      FI_BENCH_DECODE_VARIANTS=${DS_VARIANTS:-} \
      timeout 300 "${dirs[$i]}/fi-bench" --json "$base.jsonl" decode > "$base.log" 2>&1
    b=$?
    [ $b = 0 ] || { echo "fi-bench ${names[$i]} round $r rc=$b (log: $base.log)"; rc_all=1; }
  done
  echo "round $r done ($(el))"
done

args=()
for n in "${names[@]}"; do args+=("$n=$OUT/bench/${n}_r*.jsonl"); done
python3 "$here/stages_table.py" "${args[@]}" | tee "$OUT/table.md" || rc_all=1
exit $rc_all
