#!/bin/bash
# test_gpu_runner.sh: tests/gpu/run_gpu_tests.sh (make gpu-test's parallel runner), run here
# on stand-in test binaries (no GPU): its totals, its exit status, the variants' settings.
set -u
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
check() { if eval "$2"; then pass "$1"; else fail "$1" "$2"; fi; }
root=$(CDPATH="" cd -- "$(dirname "$0")/.." && pwd)
R="$root/tests/gpu/run_gpu_tests.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# One stand-in for every gpu_*.c: two passing cases, and each prints the variant settings
# it saw so the test can tell which job ran it. FI_STANDIN_MODE selects a failure, a crash or no case.
mkdir -p "$T/b/tests"
names=$(cd "$root/tests/gpu" && ls gpu_*.c | sed 's/\.c$//')
for n in $names; do
  cat > "$T/b/tests/$n" <<'SH'
#!/bin/bash
[ "${FI_STANDIN_MODE:-}:$(basename "$0")" = empty:gpu_cascade ] && exit 0
if [ -n "${FI_STANDIN_RUNDIR:-}" ]; then  # how many stand-ins run at once, at most
  touch "$FI_STANDIN_RUNDIR/$$"; sleep 0.3
  ls "$FI_STANDIN_RUNDIR" | grep -c '^[0-9]*$' >> "$FI_STANDIN_RUNDIR/counts"; rm "$FI_STANDIN_RUNDIR/$$"
fi
echo "PASS one"
echo "PASS two ${FI_PREFILL_WGMMA-}${FI_PREFILL_WG-}${FI_PREFILL_PERSIST-}${FI_PREFILL_WS-}${FI_SAMPLING_TOPP-}"
case "${FI_STANDIN_MODE:-}:$(basename "$0")" in
  fail:gpu_rope) echo "FAIL three" ;;
  crash:gpu_norms) kill -SEGV $$ ;;
esac
exit 0
SH
  chmod +x "$T/b/tests/$n"
done
nbin=$(echo "$names" | wc -l)
njobs=$((nbin + 6))  # the variants: four of prefill, one of sampling, one of the MoE layer

out=$(FI_BUILD="$T/b" FT_LOGDIR="$T/l1" "$R" 2>&1); rc=$?
check all_pass_exit_0 '[ $rc -eq 0 ]'
check all_pass_total '[ "$(echo "$out" | tail -1)" = "$((2 * njobs)) passed, 0 failed" ]'
check every_job_listed '[ "$(echo "$out" | grep -c "^== ")" -eq $njobs ]'
check variants_see_their_settings 'grep -q "^PASS two 0$" "$T/l1/prefill-mma/gpu_prefill.out" &&
  grep -q "^PASS two 2x128$" "$T/l1/prefill-wg2x128/gpu_prefill.out" &&
  grep -q "^PASS two 3$" "$T/l1/prefill-persist3/gpu_prefill.out" &&
  grep -q "^PASS two 1$" "$T/l1/prefill-ws1/gpu_prefill.out" &&
  grep -q "^PASS two exact$" "$T/l1/sampling-topp-exact/gpu_sampling.out" &&
  grep -q "^PASS two $" "$T/l1/gpu_prefill/gpu_prefill.out"'

out=$(FI_STANDIN_MODE=fail FI_BUILD="$T/b" FT_LOGDIR="$T/l2" "$R" -j 3 2>&1); rc=$?
check a_failure_exits_nonzero '[ $rc -ne 0 ]'
check a_failure_counted '[ "$(echo "$out" | tail -1)" = "$((2 * njobs)) passed, 1 failed" ]'
check a_failure_named 'echo "$out" | grep -q "FAIL three"'
check jobs_at_a_time_reported 'echo "$out" | grep -q "$njobs jobs, 3 at a time"'

out=$(FI_STANDIN_MODE=crash FI_BUILD="$T/b" FT_LOGDIR="$T/l3" "$R" -j1 2>&1); rc=$?
check a_crash_exits_nonzero '[ $rc -ne 0 ]'
check a_crash_counted_as_failure 'echo "$out" | tail -1 | grep -q ", 1 failed$"'

# -j caps the processes at once; with no -j they all start together.
mkdir -p "$T/r2" "$T/rall"
FI_STANDIN_RUNDIR="$T/r2" FI_BUILD="$T/b" FT_LOGDIR="$T/l6" "$R" -j 2 > /dev/null 2>&1
check jobs_cap_holds '[ "$(sort -n "$T/r2/counts" | tail -1)" -le 2 ] && [ "$(wc -l < "$T/r2/counts")" -eq $njobs ]'
FI_STANDIN_RUNDIR="$T/rall" FI_BUILD="$T/b" FT_LOGDIR="$T/l7" "$R" > /dev/null 2>&1
check no_cap_runs_them_together '[ "$(sort -n "$T/rall/counts" | tail -1)" -gt 2 ]'

# A binary that runs no case at all passes nothing: the job, and so the run, fails.
out=$(FI_STANDIN_MODE=empty FI_BUILD="$T/b" FT_LOGDIR="$T/l5" "$R" 2>&1); rc=$?
check a_job_with_no_case_fails '[ $rc -ne 0 ] && [ "$(echo "$out" | tail -1)" = "$((2 * njobs - 2)) passed, 0 failed" ]'

rm "$T/b/tests/gpu_page"
out=$(FI_BUILD="$T/b" FT_LOGDIR="$T/l4" "$R" 2>&1); rc=$?
check a_missing_binary_refused '[ $rc -eq 2 ] && echo "$out" | grep -q "gpu_page missing"'
out=$("$R" -j x 2>&1); rc=$?
check bad_jobs_refused '[ $rc -eq 2 ] && echo "$out" | grep -q "whole number"'
out=$("$R" --bogus 2>&1); rc=$?
check unknown_argument_refused '[ $rc -eq 2 ] && echo "$out" | grep -q "unknown argument"'
check list_names_the_variants '"$R" --list | grep -q "^prefill-persist3 .*FI_PREFILL_PERSIST=3 .*gpu_prefill$"'
check help_prints_usage '"$R" --help | grep -q "^usage"'
# run_parallel.sh reads --list as three words a line (name, one VAR=VALUE or -, binary).
check list_is_three_words_a_line '[ -z "$("$R" --list | awk "NF != 3")" ] && [ "$("$R" --list | wc -l)" -eq $njobs ]'
