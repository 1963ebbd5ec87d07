#!/bin/bash
# run_gpu_tests.sh: every GPU test binary and every tuning variant of make gpu-test, as
# separate processes side by side on the one GPU, then their summaries in a fixed order.
#
# usage (on the GPU machine): tests/gpu/run_gpu_tests.sh [-j N] [--list]
#   -j N     processes at a time (default: every job at once, at most 16); -j 1 runs them
#            one after another, as make gpu-test did before (over 10 minutes on an H100:
#            most of it is NVRTC compiling each process's kernels into its own cache)
#   --list   print the jobs (name, environment, binary) and exit
#   FI_BUILD the build folder (default build); FT_LOGDIR where each job's logs go, one
#            folder a job (default $FI_BUILD/gpu-logs)
# The jobs are correctness tests: each compares the GPU against a float64 reference, none
# times anything, so sharing the GPU changes how long they take, not what they check.
# Output: each job's run_tests.sh lines in the order of --list, then "N passed, N failed"
# over all jobs. Exit status 0 only when every job ran, none failed and some passed.
set -u
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; }
jobs_max=0
list=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --list) list=1; shift ;;
    -j)
      [ $# -ge 2 ] || { echo "run_gpu_tests.sh: -j needs a number" >&2; exit 2; }
      jobs_max=$2; shift 2 ;;
    -j*) jobs_max=${1#-j}; shift ;;
    *) echo "run_gpu_tests.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
case "$jobs_max" in '' | *[!0-9]*) echo "run_gpu_tests.sh: -j takes a whole number, not '$jobs_max'" >&2; exit 2 ;; esac
B=${FI_BUILD:-build}
base=${FT_LOGDIR:-$B/gpu-logs}
here=$(CDPATH="" cd -- "$(dirname "$0")" && pwd)
root=$(dirname "$(dirname "$here")")

# name|environment (space-separated VAR=VALUE, or -)|binary under $B/tests
jobs=()
for src in "$root"/tests/gpu/gpu_*.c; do
  n=$(basename "$src" .c)
  jobs+=("$n|-|$n")
done
# Prefill as chosen above, then on mma.sync alone, on the wgmma kernel's large shape
# (producer, ping-pong), on a 3-block persistent grid (many work units a block), and with
# the producer but no ping-pong (two stages where the default takes four); sampling with
# top-p's exact membership test; the MoE layer with its GEMMs on mma.sync alone.
jobs+=("prefill-mma|FI_PREFILL_WGMMA=0|gpu_prefill")
jobs+=("prefill-wg2x128|FI_PREFILL_WG=2x128|gpu_prefill")
jobs+=("prefill-persist3|FI_PREFILL_PERSIST=3|gpu_prefill")
jobs+=("prefill-ws1|FI_PREFILL_WS=1|gpu_prefill")
jobs+=("sampling-topp-exact|FI_SAMPLING_TOPP=exact|gpu_sampling")
jobs+=("moe-gemm-mma|FI_MOE_WGMMA=0|gpu_moe_gemm")

if [ "$list" = 1 ]; then
  for j in "${jobs[@]}"; do IFS='|' read -r n e b <<< "$j"; printf '%-22s %-24s %s\n' "$n" "$e" "$b"; done
  exit 0
fi
for j in "${jobs[@]}"; do
  IFS='|' read -r n e b <<< "$j"
  [ -x "$B/tests/$b" ] || { echo "run_gpu_tests.sh: $B/tests/$b missing (make gpu-test builds it)" >&2; exit 2; }
done
[ "$jobs_max" -gt 0 ] || jobs_max=$(( ${#jobs[@]} < 16 ? ${#jobs[@]} : 16 ))

mkdir -p "$base"
start=$(date +%s)
pids=()
trap 'kill "${pids[@]}" 2> /dev/null; exit 130' INT TERM
for j in "${jobs[@]}"; do
  IFS='|' read -r n e b <<< "$j"
  [ "$e" = - ] && e=
  rm -rf "${base:?}/$n"
  # shellcheck disable=SC2086 # e is a list of VAR=VALUE words
  ( env $e FT_LOGDIR="$base/$n" FI_BUILD="$B" "$root/tests/run_tests.sh" "$B/tests/$b" \
      > "$base/$n.summary" 2>&1
    echo "rc=$?" >> "$base/$n.summary" ) &
  pids+=($!)
  # At the cap, wait for the oldest job (plain wait: no bash 4.3 `wait -n` needed).
  if [ "${#pids[@]}" -ge "$jobs_max" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
wait

passed=0; failed=0; bad=0
for j in "${jobs[@]}"; do
  IFS='|' read -r n e b <<< "$j"
  s="$base/$n.summary"
  echo "== $n${e:+ ($e)}" | sed 's/ (-)$//'
  grep -v -e '^rc=' -E -e '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$s"
  counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$s" | tail -1)
  rc=$(sed -n 's/^rc=//p' "$s" | tail -1)
  if [ -z "$counts" ]; then
    echo "    $n ended without a summary (rc ${rc:-none})"; bad=1; continue
  fi
  passed=$((passed + ${counts%% passed*}))
  f=${counts#*, }; failed=$((failed + ${f%% failed*}))
  [ "${rc:-1}" = 0 ] || bad=1
done
echo "${#jobs[@]} jobs, $jobs_max at a time, $(( $(date +%s) - start ))s; logs under $base"
echo "$passed passed, $failed failed"
[ "$bad" = 0 ] && [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
