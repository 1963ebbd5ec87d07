#!/bin/bash
# run_tests.sh: runs every test program and script given, counts the PASS/FAIL
# lines they print, and closes with "N passed, N failed" (non-zero exit on any failure).
set -u
passed=0; failed=0; skipped=0; logdir=${FT_LOGDIR:-build/test-logs}
mkdir -p "$logdir"
run_one() { # program-or-script name: sets rc and the PASS and FAIL counts p and f
  if [[ "$1" == *.sh ]]; then bash "$1" >"$logdir/$2.out" 2>"$logdir/$2.err"; rc=$?
  else "$1" >"$logdir/$2.out" 2>"$logdir/$2.err"; rc=$?; fi
  p=$(grep -c '^PASS ' "$logdir/$2.out"); f=$(grep -c '^FAIL ' "$logdir/$2.out")
  s=$(grep -c '^SKIP ' "$logdir/$2.out")
}
for t in "$@"; do
  name=$(basename "$t")
  start=$(date +%s)
  run_one "$t" "$name"
  # LeakSanitizer's stop-the-world tracer now and then segfaults at exit after every
  # case passed (google/sanitizers#1353: no leak report, no test failure). That crash,
  # and only that, gets one full rerun, leak check included; the rerun's result counts.
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] &&
     grep -q 'LeakSanitizer has encountered a fatal error' "$logdir/$name.err" &&
     ! grep -q 'ERROR: LeakSanitizer: detected memory leaks' "$logdir/$name.err"; then
    mv "$logdir/$name.err" "$logdir/$name.tracer-crash.err"
    echo "    $name: LeakSanitizer's tracer crashed at exit (rc $rc); rerunning it once"
    run_one "$t" "$name"
  fi
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $name exited with $rc" >>"$logdir/$name.out"; fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  printf '%-28s %3d passed %3d failed  %3ds%s\n' "$name" "$p" "$f" "$(( $(date +%s) - start ))" \
    "$([ "$s" -gt 0 ] && echo "  ($s skipped)")"
  if [ "$s" -ne 0 ]; then grep '^SKIP ' "$logdir/$name.out" | sed 's/^/    /'; fi
  if [ "$f" -ne 0 ]; then
    grep '^FAIL ' "$logdir/$name.out" | sed 's/^/    /'
    tail -n 30 "$logdir/$name.err" | sed 's/^/    | /'
  fi
done
echo "$passed passed, $failed failed$([ "$skipped" -gt 0 ] && echo ", $skipped skipped")"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
