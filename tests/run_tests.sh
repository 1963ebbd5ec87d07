#!/bin/bash
# run_tests.sh: runs every test program and script given, counts the PASS/FAIL
# lines they print, and closes with "N passed, N failed" (non-zero exit on any failure).
set -u
passed=0; failed=0; logdir=${FT_LOGDIR:-build/test-logs}
mkdir -p "$logdir"
for t in "$@"; do
  name=$(basename "$t")
  start=$(date +%s)
  if [[ "$t" == *.sh ]]; then bash "$t" >"$logdir/$name.out" 2>"$logdir/$name.err"; rc=$?
  else "$t" >"$logdir/$name.out" 2>"$logdir/$name.err"; rc=$?; fi
  p=$(grep -c '^PASS ' "$logdir/$name.out"); f=$(grep -c '^FAIL ' "$logdir/$name.out")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $name exited with $rc" >>"$logdir/$name.out"; fi
  passed=$((passed + p)); failed=$((failed + f))
  printf '%-28s %3d passed %3d failed  %3ds\n' "$name" "$p" "$f" "$(( $(date +%s) - start ))"
  if [ "$f" -ne 0 ]; then
    grep '^FAIL ' "$logdir/$name.out" | sed 's/^/    /'
    tail -n 30 "$logdir/$name.err" | sed 's/^/    | /'
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
