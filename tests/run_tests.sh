#!/bin/bash
# run_tests.sh [-j N] PROGRAM-OR-SCRIPT...: runs the test programs and scripts, N at a
# time (default: online CPUs; FT_JOBS overrides), counts the PASS/FAIL/SKIP lines each
# prints, and prints one line per program in the order given (its own wall time, its SKIP
# lines), then the total time and "N passed, N failed" (", N skipped" after it when any:
# a skip is never a pass). Non-zero exit on any failure or on no test run.
# Put the slowest first: they start first.
set -u
jobs_max=${FT_JOBS:-$(nproc 2>/dev/null || echo 2)}
if [ "${1:-}" = "-j" ]; then jobs_max=$2; shift 2; fi
case "$jobs_max" in ''|*[!0-9]*|0) echo "run_tests.sh: -j wants a positive number" >&2; exit 2 ;; esac
logdir=${FT_LOGDIR:-build/test-logs}
mkdir -p "$logdir"
t_all=$(date +%s)

run_one() { # program-or-script name: sets rc and the PASS and FAIL counts p and f
  if [[ "$1" == *.sh ]]; then bash "$1" >"$logdir/$2.out" 2>"$logdir/$2.err"; rc=$?
  else "$1" >"$logdir/$2.out" 2>"$logdir/$2.err"; rc=$?; fi
  p=$(grep -c '^PASS ' "$logdir/$2.out"); f=$(grep -c '^FAIL ' "$logdir/$2.out")
  s=$(grep -c '^SKIP ' "$logdir/$2.out")
}

job() { # program-or-script name: runs one test and writes "p f s seconds" to name.result
  local start; start=$(date +%s)
  run_one "$1" "$2"
  # LeakSanitizer's stop-the-world tracer now and then segfaults at exit after every
  # case passed (google/sanitizers#1353: no leak report, no test failure). That crash,
  # and only that, gets one full rerun, leak check included; the rerun's result counts.
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] &&
     grep -q 'LeakSanitizer has encountered a fatal error' "$logdir/$2.err" &&
     ! grep -q 'ERROR: LeakSanitizer: detected memory leaks' "$logdir/$2.err"; then
    mv "$logdir/$2.err" "$logdir/$2.tracer-crash.err"
    echo "    $2: LeakSanitizer's tracer crashed at exit (rc $rc); rerunning it once" >"$logdir/$2.note"
    run_one "$1" "$2"
  fi
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $2 exited with $rc" >>"$logdir/$2.out"; fi
  echo "$p $f $s $(( $(date +%s) - start ))" >"$logdir/$2.result"
}

pids=()
trap 'kill "${pids[@]}" 2>/dev/null; exit 130' INT TERM
for t in "$@"; do
  name=$(basename "$t")
  rm -f "$logdir/$name.result" "$logdir/$name.note"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 0.2; done
  job "$t" "$name" &
  pids+=($!)
done
wait

passed=0; failed=0; skipped=0
for t in "$@"; do
  name=$(basename "$t")
  read -r p f s secs <"$logdir/$name.result" 2>/dev/null || { p=0; f=1; s=0; secs=0; echo "FAIL $name left no result" >>"$logdir/$name.out"; }
  [ -f "$logdir/$name.note" ] && cat "$logdir/$name.note"
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  printf '%-28s %3d passed %3d failed  %3ds%s\n' "$name" "$p" "$f" "$secs" "$([ "$s" -gt 0 ] && echo "  ($s skipped)")"
  if [ "$s" -ne 0 ]; then grep '^SKIP ' "$logdir/$name.out" | sed 's/^/    /'; fi
  if [ "$f" -ne 0 ]; then
    grep '^FAIL ' "$logdir/$name.out" | sed 's/^/    /'
    tail -n 30 "$logdir/$name.err" | sed 's/^/    | /'
  fi
done
echo "total $(( $(date +%s) - t_all ))s with $jobs_max at a time"
echo "$passed passed, $failed failed$([ "$skipped" -gt 0 ] && echo ", $skipped skipped")"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
