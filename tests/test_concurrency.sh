#!/bin/bash
# test_concurrency.sh: the cache under load and crashes: 16 processes prewarming
# one empty cache at once, and processes killed with SIGKILL mid-compile and mid-write.
set -u
B=${FI_BUILD:-build}
FC="$PWD/$B/fi-cache"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
unset FI_CACHE_PATH FI_CACHE_SYSTEM_PATH FI_CACHE_MAX_BYTES
export HOME="$T" XDG_CACHE_HOME="$T/xdg"
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
jfield() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
# Configurations per arch: one prewarm into a scratch cache, counted from its JSON.
N=$("$FC" --cache "$T/ref.db" prewarm --arch sm_90 --op rmsnorm -j 2 --json 2>/dev/null | jfield compiled)
[ "$N" -gt 0 ] && pass reference_prewarm || fail reference_prewarm "compiled $N"

# ---- 16 processes, one empty cache, the same op set --------------------------------------
C="$T/shared/kernels.db"
start=$(date +%s.%N)
for i in $(seq 1 16); do
  FI_LOG_LEVEL=debug "$FC" --cache "$C" prewarm --arch sm_90 --op rmsnorm -j 2 --json \
    >"$T/p$i.json" 2>"$T/p$i.err" &
done
wait
wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")
read -r compiled cached waited failed < <(python3 - "$T" <<'PY'
import json, sys, glob
tot = [0, 0, 0, 0]
for f in glob.glob(sys.argv[1] + "/p*.json"):
    lines = open(f).read().strip().splitlines()
    j = json.loads(lines[-1]) if lines else {"compiled": 0, "cached": 0, "waited": 0, "failed": 99}
    for i, k in enumerate(["compiled", "cached", "waited", "failed"]):
        tot[i] += j[k]
print(*tot)
PY
)
echo "  16 processes: compiled $compiled, cached $cached, waited $waited, failed $failed, wall ${wall}s (N=$N)" >&2
[ "$compiled" -eq "$N" ] && pass sixteen_processes_compile_each_kernel_once \
  || fail sixteen_processes_compile_each_kernel_once "compiled $compiled, expected $N"
[ "$failed" -eq 0 ] && pass sixteen_processes_no_failure || fail sixteen_processes_no_failure "failed $failed"
[ $((compiled + cached + waited)) -eq $((16 * N)) ] && pass sixteen_processes_account_for_everything \
  || fail sixteen_processes_account_for_everything "$compiled + $cached + $waited != 16 x $N"
rows=$("$FC" --cache "$C" ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$rows" -eq "$N" ] && pass sixteen_processes_one_row_per_kernel || fail sixteen_processes_one_row_per_kernel "$rows rows"
# Every process ends up with the same binaries: the file holds one per key, and
# all of them equal a single-process build's (compilation is deterministic).
same=$(python3 - "$C" "$T/ref.db" <<'PY'
import sqlite3, sys
a = dict(sqlite3.connect(sys.argv[1]).execute("select key, checksum from kernels"))
b = dict(sqlite3.connect(sys.argv[2]).execute("select key, checksum from kernels"))
print("yes" if a == b else "no %d %d" % (len(a), len(b)))
PY
)
[ "$same" = yes ] && pass sixteen_processes_identical_binaries || fail sixteen_processes_identical_binaries "$same"
claims=$(python3 -c "import sqlite3; print(sqlite3.connect('$C').execute('select count(*) from claims').fetchone()[0])")
[ "$claims" -eq 0 ] && pass sixteen_processes_leave_no_claim || fail sixteen_processes_leave_no_claim "$claims claims left"
# How late a waiting process noticed a finished compile: its "loaded after
# waiting" stamp minus the compiling process's "stored" stamp for that key.
python3 - "$T" >&2 <<'PY'
import glob, re, sys, statistics
stored, loaded = {}, []
for f in glob.glob(sys.argv[1] + "/p*.err"):
    for line in open(f, errors="replace"):
        m = re.search(r"stored (op=\S+) at (\d+)", line)
        if m: stored[m.group(1)] = int(m.group(2))
        m = re.search(r"loaded (op=\S+) after waiting, at (\d+)", line)
        if m: loaded.append((m.group(1), int(m.group(2))))
gaps = [(t - stored[k]) / 1000 for k, t in loaded if k in stored]
if gaps:
    print("  waiters: %d; from the store to a waiter's load: median %.1f ms, max %.1f ms"
          % (len(gaps), statistics.median(gaps), max(gaps)))
PY

# ---- SIGKILL in the middle of a compile -----------------------------------------------------
K="$T/killed/kernels.db"
"$FC" --cache "$K" prewarm --arch sm_90 --op rmsnorm -j 1 >/dev/null 2>&1 &
pid=$!
sleep 1.5
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
left=$(python3 -c "import sqlite3; print(sqlite3.connect('$K').execute('select count(*) from claims').fetchone()[0])" 2>/dev/null || echo 0)
echo "  killed a prewarm: $left claim(s) left behind" >&2
"$FC" --cache "$K" verify >/dev/null 2>&1 && pass kill_mid_compile_verify || fail kill_mid_compile_verify "verify failed"
t0=$(date +%s.%N)
out=$("$FC" --cache "$K" prewarm --arch sm_90 --op rmsnorm -j 2 --json 2>/dev/null)
secs=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
f=$(echo "$out" | jfield failed)
[ "$f" -eq 0 ] && pass kill_mid_compile_recovers || fail kill_mid_compile_recovers "failed $f"
# The dead process's claim is taken over at once (its pid is gone), not after the 300 s limit.
python3 -c "import sys; sys.exit(0 if $secs < 60 else 1)" && pass kill_mid_compile_no_long_wait \
  || fail kill_mid_compile_no_long_wait "took ${secs}s"
rows=$("$FC" --cache "$K" ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$rows" -eq "$N" ] && pass kill_mid_compile_complete || fail kill_mid_compile_complete "$rows rows"

# ---- SIGKILL at random moments, writes included ---------------------------------------------
R="$T/random/kernels.db"
bad=0
for i in $(seq 1 12); do
  "$FC" --cache "$R" prewarm --arch sm_90,sm_80 --op rmsnorm -j 2 >/dev/null 2>&1 &
  pid=$!
  sleep "0.$(( (RANDOM % 9) + 1 ))$(( RANDOM % 10 ))"
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  "$FC" --cache "$R" verify >/dev/null 2>&1 || bad=$((bad + 1))
done
[ "$bad" -eq 0 ] && pass random_kills_never_corrupt || fail random_kills_never_corrupt "$bad verify failures"
out=$("$FC" --cache "$R" prewarm --arch sm_90,sm_80 --op rmsnorm -j 2 --json 2>/dev/null)
[ "$(echo "$out" | jfield failed)" -eq 0 ] && pass random_kills_then_complete || fail random_kills_then_complete "$out"
