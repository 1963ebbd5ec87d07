# s39_d.sh: the thirty-ninth session's last device call: (1) issue 47's hot path again,
# 7bb2dad (build-base) vs HEAD (build-gpu) in 4 rounds (fi-bench runtime: a fresh process's
# first call on a prewarmed cache, memo-hit dispatch), after the fi_runtime_create fix;
# (2) issue
# 43: fi-cache tune --preset deepseek-v3, export, import into a fresh cache, fi-bench moe on
# it (its decode sizes now run the fused layer's tile); (3) issue 41's A/B of decode in 2
# rounds (run-to-run noise); (4) issue 44's Python binding
# (lab/gpu/python_check.py over build-gpu's libraries, apache-tvm-ffi from the carried
# wheels). Carry ["build-gpu", "build-base", "lab/gpu/wheels"]. Logs under $OUT.
export FI_LOG_LEVEL=warn; S=$(date +%s); el() { echo "t=$(( $(date +%s) - S ))s"; }; C=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
OUT=$OUT/ab AB_ROUNDS=4 AB_DEADLINE=120 AB_TIMEOUT=60 tests/gpu/ab_bench.sh base=build-base new=build-gpu -- runtime > $OUT/ab_runtime.txt 2>&1
for f in $OUT/ab/*.r?.runtime.txt; do echo "$(basename $f): $(grep -h 'WAL (default)' $f | sed 's/.*: fi_runtime_create/create/; s/ (median.*//') | $(grep -h 'of which' $f | head -1 | sed 's/ *of which: //; s/; a second.*//')"; done
tail -6 $OUT/ab_runtime.txt; el
timeout 120 build-gpu/fi-cache --cache $C/ds.db tune --preset deepseek-v3 > $OUT/tune_ds.txt 2>&1; echo "tune rc=$? $(tail -1 $OUT/tune_ds.txt)"
build-gpu/fi-cache --cache $C/ds.db export --to $C/ship.db > /dev/null 2>&1; build-gpu/fi-cache --cache $C/fresh.db import $C/ship.db 2>&1 | tail -1
timeout 90 build-gpu/fi-bench --quick --cache $C/fresh.db moe > $OUT/bench_moe.txt 2>&1; echo "fi-bench moe rc=$?"; sed -n '/decode sizes/,/^$/p' $OUT/bench_moe.txt; grep "stored tactics" $OUT/bench_moe.txt; el
OUT=$OUT/ab2 AB_ROUNDS=2 AB_DEADLINE=90 AB_TIMEOUT=60 FI_BENCH_DECODE_SWEEP=0 tests/gpu/ab_bench.sh base=build-base new=build-gpu -- --quick decode > $OUT/ab_ops3.txt 2>&1
grep -E "^\| (decode|merge|append|batch_ind)" $OUT/ab_ops3.txt | cut -c1-170 | head -48; tail -7 $OUT/ab_ops3.txt; el
PY=$(python3 -c 'import sys; print("%d%d" % sys.version_info[:2])'); echo "python $PY"; V=$(mktemp -d)/v
# (the wheels unzipped onto PYTHONPATH: a venv's python saw no torch on 2026-12-07)
mkdir -p $V && python3 -m zipfile -e lab/gpu/wheels/apache_tvm_ffi-*-cp$PY-*.whl $V && python3 -m zipfile -e lab/gpu/wheels/typing_extensions-*.whl $V; echo "unzip rc=$?"
FI_RUNTIME_LIBRARY=$PWD/build-gpu/libfi_runtime.so FI_CACHE_PATH=$C/py.db PYTHONPATH=$PWD/python:$V timeout 90 python3 lab/gpu/python_check.py > $OUT/python_check.txt 2>&1
echo "python_check rc=$?"; tail -40 $OUT/python_check.txt; el
