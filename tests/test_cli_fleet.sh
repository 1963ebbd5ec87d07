#!/bin/bash
# test_cli_fleet.sh: end-to-end checks of fi-cache's fleet commands (export --to,
# import, the read-only system layer, gc, verify) and of how the runtime treats
# unsafe or damaged cache files; one PASS/FAIL line per check, non-zero exit on any FAIL.
set -u
BUILD=${FI_BUILD:-build}
FI=$(cd "$(dirname "$BUILD/fi-cache")" && pwd)/fi-cache
T=$(mktemp -d) || exit 1
trap 'chmod -R u+rwx "$T" 2>/dev/null; rm -rf "$T"' EXIT
# Never touch the caller's own cache, whatever their environment says.
unset FI_CACHE_PATH FI_CACHE_SYSTEM_PATH FI_CACHE_MAX_BYTES FI_CACHE_UMASK FI_CACHE_JOURNAL
export HOME=$T/home XDG_CACHE_HOME=$T/xdg
A=$T/a/k.db B=$T/b/k.db C=$T/c/k.db SHIP=$T/ship/ship.db SUB=$T/ship/sub.db
mkdir -p "$T/ship" && chmod 755 "$T/ship"
nfail=0
t_start=$(date +%s)

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1${2:+: $2}"; nfail=$((nfail + 1)); }
check() { # check NAME CONDITION-STRING: evaluates the condition
  local name=$1; shift
  if eval "$@"; then pass "$name"; else fail "$name" "$* (rc=$rc)"; { echo "== $name"; cat "$T/out" "$T/err"; } >&2; fi
}
# run ARGS...: runs fi-cache, stdout in $T/out, stderr in $T/err, status in $rc.
run() { "$FI" "$@" >"$T/out" 2>"$T/err"; rc=$?; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
last_json() { tail -n 1 "$T/out" | json "$1" 2>/dev/null; }
# sql DB STATEMENT: runs one statement with Python's sqlite3, prints the first column of each row.
sql() { python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); [print(r[0]) for r in c.execute(sys.argv[2])]; c.commit()' "$@"; }
# clone SRC DST: an independent copy of a cache (WAL content included), made without fi_runtime.
clone() { mkdir -p "$(dirname "$2")" && chmod 700 "$(dirname "$2")" &&
  python3 -c 'import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close(); s.close()' "$1" "$2"; }
timed() { echo "# $1: $(( $(date +%s) - t_step ))s" >&2; t_step=$(date +%s); }

if [ ! -x "$FI" ]; then fail fi_cache_built "$FI missing"; exit 1; fi

# ---- usage of the new commands (nothing is opened) ----
for c in gc verify import; do
  run "$c" --help; check "help_$c" '[ $rc -eq 0 ] && grep -q "usage:.*$c" "$T/out"'
done
all_in_out() { local w; for w in "$@"; do grep -qw -- "$w" "$T/out" || return 1; done; }
run --help
check help_lists_commands_and_env '[ $rc -eq 0 ] && all_in_out prewarm ls show stats export import gc verify clear FI_CACHE_PATH FI_CACHE_SYSTEM_PATH FI_CACHE_MAX_BYTES FI_CACHE_UMASK FI_CACHE_JOURNAL FI_LOG_LEVEL'
run gc --cache "$A" --max-bytes 12Q; check usage_gc_bad_size '[ $rc -eq 2 ] && grep -q 12Q "$T/err"'
run gc --cache "$A" --max-bytes -5; check usage_gc_negative_size '[ $rc -eq 2 ]'
run verify --cache "$A" extra; check usage_verify_extra '[ $rc -eq 2 ]'
run import --cache "$A"; check usage_import_without_file '[ $rc -eq 2 ]'
run export --cache "$A" --to "$SHIP" -o "$T/x"; check usage_export_to_and_o '[ $rc -eq 2 ]'
run export --cache "$A" abc --to "$SHIP"; check usage_export_to_and_prefix '[ $rc -eq 2 ]'
run export --cache "$A" --to "$SHIP" --op a,b; check usage_export_to_two_ops '[ $rc -eq 2 ]'
run export --cache "$A" abc -o "$T/x" --arch sm_90; check usage_export_binary_with_arch '[ $rc -eq 2 ]'
run import --cache "$A" "$T/no_such.db"; check import_missing_file '[ $rc -eq 1 ] && grep -q no_such "$T/err"'
check usage_touches_no_cache '[ ! -e "$A" ] && [ ! -e "$SHIP" ]'

# ---- cache A, shipped as a system layer ----
t_step=$(date +%s)
run --cache "$A" prewarm --arch sm_90 --op gemma_rmsnorm --json
N=$(last_json 'd["compiled"]')
check prewarm_a '[ $rc -eq 0 ] && [ "${N:-0}" -gt 3 ] && [ "$(last_json "d[\"failed\"]")" = 0 ]'
N=${N:-0}
timed "prewarm sm_90 into A ($N kernels)"
run --cache "$A" export --to "$SHIP"
check export_to_all '[ $rc -eq 0 ] && grep -qx "exported $N entries to $SHIP" "$T/out"'
check export_to_mode_0644 '[ "$(stat -c %a "$SHIP" 2>/dev/null)" = 644 ]'
check export_to_no_wal_shm '[ ! -e "$SHIP-wal" ] && [ ! -e "$SHIP-shm" ] && [ -z "$(ls "$T/ship" | grep -v "^ship.db$")" ]'
check export_to_is_a_cache '[ "$(sql "$SHIP" "PRAGMA integrity_check")" = ok ] && [ "$(sql "$SHIP" "SELECT count(*) FROM kernels")" = "$N" ] && [ "$(sql "$SHIP" "PRAGMA journal_mode")" = delete ]'
run --cache "$A" export --to "$SUB" --op gemma_rmsnorm --arch sm_80
check export_to_filtered_empty '[ $rc -eq 0 ] && grep -qx "exported 0 entries to $SUB" "$T/out"'
check export_to_empty_valid '[ "$(sql "$SUB" "PRAGMA integrity_check")" = ok ] && [ "$(sql "$SUB" "SELECT count(*) FROM kernels")" = 0 ] && [ "$(stat -c %a "$SUB")" = 644 ] && [ ! -e "$SUB-wal" ]'
run --cache "$A" export --to "$A"; check export_to_itself_refused '[ $rc -eq 1 ] && [ "$(sql "$A" "SELECT count(*) FROM kernels")" = "$N" ]'
timed "exports"

# ---- a fresh cache B with ship.db as its system layer ----
SUM=$(sha256sum <"$SHIP")
FI_CACHE_SYSTEM_PATH=$SHIP run --cache "$B" ls --json
check system_layer_listed '[ $rc -eq 0 ] && [ "$(json "len(d), all(e[\"layer\"]==\"system\" for e in d)" <"$T/out")" = "$N True" ]'
FI_CACHE_SYSTEM_PATH=$SHIP run --cache "$B" ls
check system_layer_ls_column '[ $rc -eq 0 ] && [ "$(grep -c "^[0-9a-f]\{12\}  system  *gemma_rmsnorm " "$T/out")" = "$N" ]'
FI_CACHE_SYSTEM_PATH=$SHIP run --cache "$B" prewarm --arch sm_90 --op gemma_rmsnorm --json
check prewarm_from_system_layer '[ $rc -eq 0 ] && [ "$(last_json "d[\"compiled\"], d[\"cached\"] + d[\"waited\"], d[\"failed\"]")" = "0 $N 0" ]'
FI_CACHE_SYSTEM_PATH=$SHIP run --cache "$B" stats --json
check stats_layers '[ $rc -eq 0 ] && [ "$(json "d[\"layers\"][\"system\"], d[\"layers\"][\"user\"], d[\"entries\"], d[\"process\"][\"compiles\"]" <"$T/out")" = "$N 0 0 0" ]'
check system_file_unchanged '[ "$(sha256sum <"$SHIP")" = "$SUM" ] && [ ! -e "$SHIP-wal" ] && [ ! -e "$SHIP-shm" ] && [ -z "$(ls "$T/ship" | grep -v "^s[a-z]*.db$")" ]'
timed "system layer"
chmod 664 "$SHIP"
FI_CACHE_SYSTEM_PATH=$SHIP run --cache "$B" prewarm --arch sm_90 --op gemma_rmsnorm --json
check system_group_writable_refused '[ $rc -eq 0 ] && grep -q "$SHIP" "$T/err" && grep -qi writable "$T/err"'
check system_refused_compiles_all '[ "$(last_json "d[\"compiled\"], d[\"failed\"]")" = "$N 0" ]'
chmod 644 "$SHIP"
check system_file_still_unchanged '[ "$(sha256sum <"$SHIP")" = "$SUM" ]'
timed "group-writable system layer"

# ---- import ----
run --cache "$C" import "$SHIP"; check import_all '[ $rc -eq 0 ] && grep -qx "imported $N, skipped 0" "$T/out"'
run --cache "$C" import "$SHIP"; check import_again_skips '[ $rc -eq 0 ] && grep -qx "imported 0, skipped $N" "$T/out"'
run --cache "$C" ls --json; check import_user_layer '[ "$(json "len(d), all(e[\"layer\"]==\"user\" for e in d)" <"$T/out")" = "$N True" ]'
run --cache "$C" verify; check import_verifies '[ $rc -eq 0 ] && grep -qx "rows: $N" "$T/out"'
head -c 5000 /dev/urandom >"$T/junk.db"
run --cache "$C" import "$T/junk.db"; check import_not_a_cache '[ $rc -eq 1 ] && [ "$(sql "$C" "SELECT count(*) FROM kernels")" = "$N" ]'
run --cache "$C" import "$C"; check import_itself_refused '[ $rc -eq 1 ]'
timed "import"

# ---- gc ----
D=$T/d/k.db; clone "$A" "$D"
run --cache "$D" gc --max-bytes 64K --json
EV=$(last_json 'd["evicted"]')
check gc_max_bytes '[ $rc -eq 0 ] && [ "${EV:-0}" -gt 0 ] && [ "$(last_json "d[\"stale\"]")" = 0 ]'
run --cache "$D" stats --json
check gc_file_bytes '[ $rc -eq 0 ] && [ "$(json "d[\"file_bytes\"]" <"$T/out")" -le 65536 ] && [ "$(json "d[\"entries\"]" <"$T/out")" = "$((N - ${EV:-0}))" ]'
echo "# gc --max-bytes 64K: evicted ${EV:-?} of $N; file $(stat -c %s "$D") bytes (-wal $(stat -c %s "$D-wal" 2>/dev/null || echo none))" >&2
check gc_file_size '[ "$(stat -c %s "$D")" -le 65536 ]'
run --cache "$D" gc --max-bytes 64K; check gc_text_again '[ $rc -eq 0 ] && grep -qx "evicted 0, stale 0" "$T/out"'
E=$T/e/k.db; clone "$A" "$E"
run --cache "$E" gc --stale; check gc_stale_fresh '[ $rc -eq 0 ] && grep -qx "evicted 0, stale 0" "$T/out"'
sql "$E" "UPDATE kernels SET compiler='nvrtc-0.1' WHERE rowid IN (SELECT rowid FROM kernels LIMIT 3)"
run --cache "$E" gc --stale --json
check gc_stale_three '[ $rc -eq 0 ] && [ "$(last_json "d[\"evicted\"], d[\"stale\"]")" = "0 3" ] && [ "$(sql "$E" "SELECT count(*) FROM kernels")" = "$((N - 3))" ]'
run --cache "$E" gc --max-bytes 0 --stale; check gc_no_limit '[ $rc -eq 0 ] && grep -qx "evicted 0, stale 0" "$T/out"'
timed "gc"

# ---- verify ----
F=$T/f/k.db; clone "$A" "$F"
run --cache "$F" verify; check verify_clean '[ $rc -eq 0 ] && grep -qx "integrity: ok" "$T/out" && grep -qx "rows: $N" "$T/out" && grep -qx "bad rows: 0" "$T/out"'
python3 - "$F" <<'EOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
rowid, blob = c.execute("SELECT rowid, binary FROM kernels ORDER BY rowid LIMIT 1").fetchone()
b = bytearray(blob); b[len(b) // 2] ^= 0x5a
c.execute("UPDATE kernels SET binary = ? WHERE rowid = ?", (bytes(b), rowid)); c.commit()
EOF
run --cache "$F" verify; check verify_bad_row '[ $rc -eq 1 ] && grep -qx "bad rows: 1" "$T/out" && grep -qx "integrity: ok" "$T/out"'
run --cache "$F" verify --json
check verify_json '[ $rc -eq 1 ] && [ "$(last_json "d[\"ok\"], d[\"rows\"], d[\"bad_rows\"], len(d[\"detail\"]) > 0")" = "False $N 1 True" ]'
run --cache "$F" verify --repair; check verify_repair '[ $rc -eq 0 ] && grep -qx "bad rows: 1" "$T/out" && grep -qx "repaired: 1" "$T/out"'
run --cache "$F" verify; check verify_after_repair '[ $rc -eq 0 ] && grep -qx "rows: $((N - 1))" "$T/out" && grep -qx "bad rows: 0" "$T/out"'
timed "verify"

# ---- a cache file of random bytes: moved aside, a new one started ----
G=$T/g/kernels.db; mkdir -p "$T/g" && chmod 700 "$T/g"
head -c 100000 /dev/urandom >"$G"; chmod 600 "$G"
run --cache "$G" prewarm --arch sm_90 --op gemma_rmsnorm --json
check corrupt_file_prewarm '[ $rc -eq 0 ] && [ "$(last_json "d[\"compiled\"], d[\"failed\"]")" = "$N 0" ]'
check corrupt_file_moved_aside '[ "$(ls "$T/g" | grep -c "^kernels\.db\.corrupt-[0-9]\+$")" = 1 ]'
run --cache "$G" ls --json; check corrupt_file_new_cache '[ $rc -eq 0 ] && [ "$(json "len(d)" <"$T/out")" = "$N" ]'
timed "random-bytes cache"

# ---- a world-writable cache directory is refused ----
W=$T/w; mkdir -p "$W" && chmod 777 "$W"
run --cache "$W/k.db" prewarm --arch sm_90 --op gemma_rmsnorm
check world_writable_dir_refused '[ $rc -eq 1 ] && grep -q "$W" "$T/err" && grep -qi "writable" "$T/err" && [ ! -e "$W/k.db" ]'
FI_LOG_LEVEL=off run --cache "$W/k.db" stats
check world_writable_dir_says_why_itself '[ $rc -eq 1 ] && grep -q "^fi-cache: .*$W is writable by every user" "$T/err"'

echo "# test_cli_fleet.sh: $(( $(date +%s) - t_start ))s" >&2
[ "$nfail" -eq 0 ]
