# shellcheck shell=bash
# decode_cases.sh: sourced by decode_ab.sh and decode_stages.sh: every gpu_decode case of a
# stage as its own process, all at once (250 s each, or DC_TIMEOUT: a caller with a deadline
# gives only the time left), under an optional environment.
#
# decode_cases STAGE_DIR LOG_DIR WHAT [VAR=VALUE...]: logs and rc.txt under LOG_DIR; prints
# "gpu_decode WHAT: N of M cases passed" and the failures; returns 1 unless all passed
# (or when gpu_decode names no case).
decode_cases() {
  local stage=$1 dir=$2 what=$3 cases t n ok
  shift 3
  mkdir -p "$dir"
  : > "$dir/rc.txt"
  cases=$("$stage/tests/gpu_decode" --list)
  [ -n "$cases" ] || { echo "gpu_decode $what: --list named no case"; return 1; }
  for t in $cases; do
    (env "$@" timeout -k 5 "${DC_TIMEOUT:-250}" "$stage/tests/gpu_decode" "$t" > "$dir/$t.log" 2>&1
     echo "$t rc=$?" >> "$dir/rc.txt") &
  done
  wait
  n=$(wc -l < "$dir/rc.txt")
  ok=$(grep -c ' rc=0$' "$dir/rc.txt")
  echo "gpu_decode $what: $ok of $n cases passed"
  grep -v ' rc=0$' "$dir/rc.txt"
  [ "$n" -gt 0 ] && [ "$ok" = "$n" ]
}
