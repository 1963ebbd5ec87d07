#!/bin/bash
# decode_stages.sh: one GPU call that compares builds of the runtime on decode: every
# gpu_decode case from each build, then fi-bench's picked rows from each in turn, round
# after round (ABBA order), and one table of every row against the first build.
#
# usage (on the GPU machine): lab/gpu/decode_stages.sh [NAME=]STAGE_DIR...
#   STAGE_DIR    a stage (lab/gpu/build_stage.sh or `make decode-stage`: fi-bench, fi-cache,
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
#   DS_DEADLINE  seconds after the start by which every process has ended (default 560,
#                so that the table comes out inside a 600 s GPU call): each gets only the
#                time left, and one with under 15 s left is skipped (a failure)
# Every process shares one private cache (a build's kernels differ in their source hash,
# so stages never share a binary they should not). Logs and fi-bench's JSON lines under
# $OUT (bench/NAME/rR.*); the table last (lab/gpu/stages_table.py, also $OUT/table.md).
# Exit status: 0 when every prewarm, test case and fi-bench run passed and the table holds
# every run; 1 otherwise; 2 on bad usage (checked before anything runs).
set -u
here=$(CDPATH="" cd -- "$(dirname "$0")" && pwd)
. "$here/decode_cases.sh"
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; }
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
[ $# -ge 1 ] || { usage >&2; exit 2; }
names=()
dirs=()
for a in "$@"; do
  n=${a%%=*}
  d=${a#*=}
  # CDPATH emptied: with it, cd may print the folder too. The default name is the resolved
  # folder's, so that "." or "dir/" name it as well.
  d=$(CDPATH="" cd -- "$d" 2> /dev/null && pwd) || { echo "decode_stages.sh: no folder in $a" >&2; exit 2; }
  [ "$n" = "$a" ] && n=$(basename "$d")
  for f in fi-bench fi-cache libfi_runtime.so.0 tests/gpu_decode; do
    [ -e "$d/$f" ] || { echo "decode_stages.sh: $d/$f missing (lab/gpu/build_stage.sh)" >&2; exit 2; }
  done
  # The name is a folder under $OUT/bench and part of the table's glob: no empty, ".",
  # "..", slash or glob character.
  case "$n" in
    '' | [!A-Za-z0-9]* | *[!A-Za-z0-9._-]*)
      echo "decode_stages.sh: name '$n': a letter or digit, then letters, digits, . _ - only" >&2; exit 2 ;;
  esac
  for m in ${names[@]+"${names[@]}"}; do
    [ "$m" = "$n" ] && { echo "decode_stages.sh: two stages named $n (NAME=DIR)" >&2; exit 2; }
  done
  names+=("$n")
  dirs+=("$d")
done
N=${#names[@]}
# The rest of the usage, checked before any GPU time is spent (a bad number would fail
# inside $((...)) half-way through; a misspelt DS_TESTS name would skip its tests silently).
rounds=${DS_ROUNDS:-2}
deadline=${DS_DEADLINE:-560}
for v in "DS_ROUNDS=$rounds" "DS_DEADLINE=$deadline"; do
  case "${v#*=}" in '' | *[!0-9]* | 0*) echo "decode_stages.sh: $v: a positive whole number" >&2; exit 2 ;; esac
done
tests=${DS_TESTS:-1}
if [ "$tests" != 0 ] && [ "$tests" != 1 ]; then
  IFS=, read -ra want <<< "$tests"
  for w in ${want[@]+"${want[@]}"}; do
    found=0
    for m in "${names[@]}"; do [ "$m" = "$w" ] && found=1; done
    [ $found = 1 ] || { echo "decode_stages.sh: DS_TESTS names '$w', no stage of that name" >&2; exit 2; }
  done
fi
OUT=${OUT:-/tmp/decode-stages}
mkdir -p "$OUT/bench"
C=$(mktemp -d)
chmod 700 "$C"  # the runtime refuses a cache in a world-writable folder
trap 'rm -rf "$C"' EXIT
export FI_CACHE_PATH=$C/k.db FI_TEST_CACHE=$C/k.db
export FI_LOG_LEVEL=${FI_LOG_LEVEL:-warn}
T0=$(date +%s)
el() { echo "$(($(date +%s) - T0)) s"; }
# left CAP: sets lim to CAP or the seconds left before the deadline, whichever is less;
# false when under 15 s are left (the process is skipped).
left() {
  lim=$((deadline - ($(date +%s) - T0)))
  [ "$lim" -gt "$1" ] && lim=$1
  [ "$lim" -ge 15 ]
}
rc_all=0

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  > "$OUT/gpu.txt" 2>&1
: > "$OUT/stages.txt"  # this call's stages only, should $OUT be used again
for i in $(seq 0 $((N - 1))); do
  { [ -f "${dirs[$i]}/STAGE" ] && cat "${dirs[$i]}/STAGE"; } | sed "s/^/${names[$i]}: /" >> "$OUT/stages.txt"
done

if [ "${DS_PREWARM:-0}" = 1 ]; then
  for i in $(seq 0 $((N - 1))); do
    left 300 || { echo "prewarm ${names[$i]} skipped: the deadline ($(el))"; rc_all=1; continue; }
    timeout -k 5 "$lim" "${dirs[$i]}/fi-cache" prewarm --arch sm_90 --op batch_decode --op single_decode \
      --op decode_upload --op read_probe -j "$(nproc)" > "$OUT/prewarm_${names[$i]}.log" 2>&1
    r=$?
    echo "prewarm ${names[$i]} rc=$r ($(el)): $(tail -1 "$OUT/prewarm_${names[$i]}.log")"
    [ $r = 0 ] || rc_all=1
  done
fi

if [ "$tests" != 0 ]; then
  for i in $(seq 0 $((N - 1))); do
    [ "$tests" = 1 ] || case ",$tests," in *",${names[$i]},"*) ;; *) continue ;; esac
    left 250 || { echo "gpu_decode ${names[$i]} skipped: the deadline ($(el))"; rc_all=1; continue; }
    DC_TIMEOUT=$lim decode_cases "${dirs[$i]}" "$OUT/tests_${names[$i]}" "${names[$i]}" || rc_all=1
    echo "  ($(el))"
  done
fi

# A folder a stage: no glob of one stage's files can match another's ("a" and "a_r1"), and
# none of an earlier call's rounds is left in.
for n in "${names[@]}"; do rm -rf "$OUT/bench/$n" && mkdir -p "$OUT/bench/$n"; done
for r in $(seq 0 $((rounds - 1))); do
  order=$(seq 0 $((N - 1)))
  [ $((r % 2)) = 1 ] && order=$(seq $((N - 1)) -1 0)
  for i in $order; do
    base="$OUT/bench/${names[$i]}/r$r"
    left 300 || { echo "fi-bench ${names[$i]} round $r skipped: the deadline ($(el))"; rc_all=1; continue; }
    FI_BENCH_DECODE_SWEEP=0 FI_BENCH_DECODE_PICK=${DS_PICK:-0,1,2,3,4,5,6,7,8} \
      FI_BENCH_DECODE_EXTRA=${DS_EXTRA:-} FI_BENCH_DECODE_REPEAT=${DS_REPEAT:-1} \
      FI_BENCH_DECODE_VARIANTS=${DS_VARIANTS:-} \
      timeout -k 5 "$lim" "${dirs[$i]}/fi-bench" --json "$base.jsonl" decode > "$base.log" 2>&1
    b=$?
    [ $b = 0 ] || { echo "fi-bench ${names[$i]} round $r rc=$b (log: $base.log)"; rc_all=1; }
  done
  echo "round $r done ($(el))"
done

args=()
for n in "${names[@]}"; do args+=("$n=$OUT/bench/$n/r*.jsonl"); done
# The pipeline's status is tee's: the table's own comes from PIPESTATUS (a missing glob or
# a line cut by a timeout is named on stderr, the table printed all the same).
python3 "$here/stages_table.py" "${args[@]}" | tee "$OUT/table.md"
[ "${PIPESTATUS[0]}" = 0 ] || rc_all=1
exit $rc_all
