#!/bin/bash
# test_cli_sec.sh: fi-cache under hostile rows and unlucky operators (issue 47): text
# from rows escaped, typos refused, an arch the compiler cannot target refused once,
# no cache path refused, a damaged file mended by verify --repair and emptied by clear,
# refused imports named; prints one PASS/FAIL/SKIP line per check for run_tests.sh.
set -u
BUILD=${FI_BUILD:-build}
FI=$(cd "$(dirname "$BUILD/fi-cache")" && pwd)/fi-cache
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
unset FI_CACHE_PATH FI_CACHE_SYSTEM_PATH FI_CACHE_MAX_BYTES
export HOME=$T/home XDG_CACHE_HOME=$T/xdg
DB=$T/k.db
nfail=0

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1${2:+: $2}"; nfail=$((nfail + 1)); }
check() {
  local name=$1; shift
  if eval "$@"; then pass "$name"; else fail "$name" "$* (rc=$rc)"; { echo "== $name"; cat "$T/out" "$T/err"; } >&2; fi
}
run() { "$FI" "$@" >"$T/out" 2>"$T/err"; rc=$?; }
sql() { python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.commit()" "$@"; }

if [ ! -x "$FI" ]; then fail fi_cache_built "$FI missing"; exit 1; fi

# ---- item 23: a typo in clear's names is bad usage, not "removed 0" ----
run clear --cache "$DB" --op rmsnrom; check clear_unknown_op '[ $rc -eq 2 ] && grep -q rmsnrom "$T/err"'
run clear --cache "$DB" --arch sm90; check clear_unknown_arch '[ $rc -eq 2 ] && grep -q sm90 "$T/err"'
run export --cache "$DB" --to "$T/ship.db" --op rmsnrom; check export_unknown_op '[ $rc -eq 2 ] && [ ! -e "$T/ship.db" ]'
check clear_typo_touches_no_cache '[ ! -e "$DB" ]'

# ---- item 24: an arch the loaded compiler cannot target: one error, up front ----
run prewarm --cache "$T/arch.db" --arch sm_121 --op decode_upload
if [ $rc -eq 1 ] && grep -q "NVRTC not found" "$T/err"; then
  echo "SKIP prewarm_arch_range: no NVRTC here"
else
  check prewarm_accepts_what_compiler_supports '[ $rc -eq 0 ] || grep -q "does not support sm_121 (supported: sm_[0-9]* to sm_1[01][0-9])" "$T/err"'
  run prewarm --cache "$T/arch.db" --arch sm_75,sm_70 --op rmsnorm
  check prewarm_unsupported_arch_once '[ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" -le 1 ] && grep -q "supported: sm_" "$T/err" && ! grep -q "failed:" "$T/err"'
  check prewarm_unsupported_compiles_nothing '! grep -q compiled "$T/out"'
  run prewarm --cache "$T/arch.db" --arch sm_1 --op decode_upload
  check prewarm_bad_arch_names_no_range '[ $rc -eq 2 ] && ! grep -q "sm_120," "$T/err"'
fi

# ---- item 9: no cache path at all ----
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  uid=54329
  while getent passwd $uid >/dev/null; do uid=$((uid + 1)); done
  (cd / && env -u HOME -u XDG_CACHE_HOME -u FI_CACHE_PATH setpriv --reuid $uid --regid $uid --clear-groups \
    "$FI" prewarm --arch sm_90 --op decode_upload >"$T/out" 2>"$T/err"); rc=$?
  check prewarm_without_cache_path '[ $rc -eq 1 ] && grep -q "no cache" "$T/err" && ! grep -q "^compiled" "$T/out"'
else
  echo "SKIP prewarm_without_cache_path: needs root and setpriv for a uid without a passwd entry"
fi

# ---- a small real cache ----
run prewarm --cache "$DB" --arch sm_90,sm_80 --op batch_indices_positions,decode_upload
if [ $rc -ne 0 ]; then
  echo "SKIP the rest: prewarm failed here ($(head -n 2 "$T/err" | tr '\n' ' '))"
  [ $nfail -eq 0 ]; exit
fi
check prewarm_small '[ $rc -eq 0 ]'

# ---- item 20: control characters from rows are escaped in text output ----
cp "$DB" "$T/evil.db"; rm -f "$T/evil.db-wal" "$T/evil.db-shm"
sql "$DB" "PRAGMA wal_checkpoint(TRUNCATE)"
cp "$DB" "$T/evil.db"
sql "$T/evil.db" "UPDATE kernels SET op = 'x' || char(27) || '[2J' || char(10) || 'fake', key = key || char(13) || char(27) || ']0;t' || char(7), compiler = 'c' || char(8)"
run ls --cache "$T/evil.db"
check ls_escapes_control_chars '[ $rc -eq 0 ] && ! LC_ALL=C grep -q "[[:cntrl:]]" <(tr -d "\n" <"$T/out") && grep -q "x\\\\x1b\[2J\\\\x0afake" "$T/out" && [ "$(wc -l <"$T/out")" -eq 5 ]'
run stats --cache "$T/evil.db"
check stats_escapes_control_chars '[ $rc -eq 0 ] && ! LC_ALL=C grep -q "[[:cntrl:]]" <(tr -d "\n" <"$T/out") && grep -q "x\\\\x1b" "$T/out"'
run ls --cache "$T/evil.db" --json
check ls_json_keeps_the_text '[ $rc -eq 0 ] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d[0][\"op\"].startswith(\"x\x1b[2J\nfake\") else 1)" "$T/out"'

# ---- item 19 and 3: import names each refused row and its reason ----
cp "$DB" "$T/src.db"
sql "$T/src.db" "UPDATE kernels SET entry = 'fi_other_0000000000000000' WHERE op = 'decode_upload' AND arch = 'sm_90'"
run import --cache "$T/dst.db" "$T/src.db"
check import_refuses_and_says_why '[ $rc -eq 1 ] && grep -qx "imported 3, skipped 1" "$T/out" && grep -q "already present 0, refused 1," "$T/out" && grep -q "refused: checksum mismatch" "$T/out"'
run ls --cache "$T/dst.db" --json
check import_kept_the_good_rows '[ $rc -eq 0 ] && [ "$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "$T/out")" = 3 ]'
FI_CACHE_MAX_BYTES=6K run import --cache "$T/dst2.db" "$DB"
check import_keeps_the_cap '[ $rc -eq 1 ] && grep -q "larger than the cache.s cap" "$T/out"'

# ---- item 22: verify --repair and clear work on a file the totals cannot read ----
cp "$DB" "$T/bad.db"
root=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select rootpage from sqlite_schema where name='kernels'\").fetchone()[0])" "$T/bad.db")
python3 -c "
import sys
with open(sys.argv[1], 'r+b') as f:
    f.seek((int(sys.argv[2]) - 1) * 4096); f.write(b'\xa5' * 4096)" "$T/bad.db" "$root"
cp "$T/bad.db" "$T/bad2.db"
run stats --cache "$T/bad.db"
check damaged_stats_fails_and_says_how '[ $rc -eq 1 ] && grep -q "verify --repair" "$T/err"'
run verify --cache "$T/bad.db"
check damaged_verify_reports '[ $rc -eq 1 ] && grep -q "integrity: FAILED" "$T/out"'
run verify --cache "$T/bad.db" --repair
check damaged_verify_repairs '[ $rc -eq 0 ] && grep -q "after repair: integrity ok" "$T/out"'
run stats --cache "$T/bad.db"
check damaged_stats_after_repair '[ $rc -eq 0 ]'
run clear --cache "$T/bad2.db"
check damaged_clear '[ $rc -eq 0 ] && grep -q "^removed" "$T/out"'
run verify --cache "$T/bad2.db"
check damaged_clear_leaves_sound_file '[ $rc -eq 0 ] && grep -q "^rows: 0" "$T/out"'

# ---- item 13: a schema with the right version but a missing column ----
cp "$DB" "$T/shape.db"
sql "$T/shape.db" "ALTER TABLE kernels DROP COLUMN hits"
run verify --cache "$T/shape.db"
check schema_damage_found '[ $rc -eq 1 ] && grep -q "damaged schema" "$T/err"'
run prewarm --cache "$T/shape.db" --arch sm_90 --op decode_upload
check schema_damage_rebuilt '[ $rc -eq 0 ] && grep -q "^compiled 1" "$T/out" && ls "$T"/shape.db.corrupt-* >/dev/null'

[ $nfail -eq 0 ]
