#!/bin/bash
# run_parallel.sh: on the GPU machine, from the repository root, with a staged folder F
# (default build/fin: libfi_runtime.so*, fi-bench, membench, tests/gpu_*, cases.txt = "binary
# case" lines, k.db.gz = a prewarmed db used as the system layer, else prewarmed here): every GPU test case as its
# own process (PAR at a time, TT seconds each) with the tuning variants, then fi-bench and
# membench; logs under $OUT, at most 8 files.
set -u
F=${F:-build/fin}
# Without k.db.gz the kernels are prewarmed here, on all cores (942 kernels in about 80 s
# on the 16-core GPU machine, against 6 minutes on a 2-core build machine).
if [ -f $F/k.db.gz ]; then
  cd $F && gunzip -kf k.db.gz && chmod 644 k.db && cd - >/dev/null
else
  rm -f $F/k.db && $F/fi-cache --cache $F/k.db prewarm --arch sm_90 -j $(nproc) | tail -1
fi
export FI_CACHE_SYSTEM_PATH=$PWD/$F/k.db FI_LOG_LEVEL=warn
L=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/gpu.txt 2>&1
one() {  # one() VARIANT BIN CASE
  local v=$1 b=$2 c=$3 tag="$1.$2.$3"
  local t0=$(date +%s%N)
  if [ "$v" = "-" ]; then timeout ${TT:-150} $F/tests/$b $c > $L/$tag.out 2> $L/$tag.err; rc=$?
  else timeout ${TT:-150} env $v $F/tests/$b $c > $L/$tag.out 2> $L/$tag.err; rc=$?; fi
  local t1=$(date +%s%N)
  printf '%s %s %s rc=%d pass=%d fail=%d %dms\n' "$v" "$b" "$c" $rc $(grep -c '^PASS' $L/$tag.out) $(grep -c '^FAIL' $L/$tag.out) $(( (t1 - t0) / 1000000 ))
}
export -f one; export F L
variants=$("$(dirname "$0")/run_gpu_tests.sh" --list) || { echo "run_parallel.sh: run_gpu_tests.sh --list failed" >&2; exit 1; }
{
  while read b c; do echo "- $b $c"; done < $F/cases.txt
  # make gpu-test's variants (one VAR=VALUE each), every case of their binary.
  echo "$variants" | while read -r n v b; do
    [ "$v" = - ] || grep "^$b " $F/cases.txt | while read b2 c; do echo "$v $b2 $c"; done; done
  for v in ${EXTRA_PREFILL_VARIANTS:-}; do
    grep '^gpu_prefill ' $F/cases.txt | while read b c; do echo "$v $b $c"; done; done
} > $L/jobs.txt
echo "$(wc -l < $L/jobs.txt) test processes"
xargs -P ${PAR:-48} -L 1 bash -c 'one "$0" "$1" "$2"' < $L/jobs.txt > $OUT/tests.txt 2>&1
awk '{ if ($4=="rc=0" && $6=="fail=0" && $5!="pass=0") ok++; else { bad++; print "NOT OK:", $0 } } END { printf "%d passed, %d failed\n", ok, bad }' $OUT/tests.txt | tee $OUT/tests_summary.txt
for f in $L/*.out; do grep -q '^FAIL' $f && { echo "== $f"; cat $f; tail -40 ${f%.out}.err; }; done > $OUT/failures.txt 2>&1
tar czf $OUT/testlogs.tgz -C $L . 2>/dev/null
echo "== fi-bench"
FI_BENCH_DECODE_SWEEP=0 timeout ${BT:-300} $F/fi-bench --json $OUT/bench.jsonl ${SECTIONS:-copy norms act cascade page rope decode prefill sampling} > $OUT/bench.txt 2>&1
echo "bench rc=$?"
grep -E "^copy|read roofline|probe|^\| (layernorm|gemma_rmsnorm|fused_add|append_paged_kv)" $OUT/bench.txt | head -30
echo "== membench"
timeout 60 $F/membench > $OUT/membench.txt 2>&1; echo "membench rc=$?"
