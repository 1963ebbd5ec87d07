# python_check.sh: one device call (from the repository root on the GPU machine) for the
# Python binding (issue 44): the FlashInfer-named ops of python/fi_runtime against torch
# references (rmsnorm, silu_and_mul, a decode step through BatchDecodeWithPagedKVCacheWrapper,
# sampling statistics), then host time per call through the binding against the direct C
# call (fi-bench runtime's "dispatch: fi_rmsnorm" line, the same bf16 64 x 4096 rmsnorm).
# Not run yet: no GPU was lent to the session that wrote it.
#
# The GPU machine reaches no registry: the wheels it lacks are downloaded here, into the
# git-ignored lab/gpu/wheels/, and carried:
#   pip download -d lab/gpu/wheels --only-binary=:all: --python-version 3.11 \
#     --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 "apache-tvm-ffi>=0.1,<0.2"
# (match --python-version to the GPU machine's python3; typing_extensions comes along)
# (a few MB; numpy and torch must already be on the GPU machine: torch's wheel is far over
# the 64 MiB a call carries). Build nothing here; run with carry ["lab/gpu/wheels"]:
#   bash lab/gpu/python_check.sh
B=${B:-build-py}; export FI_LOG_LEVEL=warn; S=$(date +%s); OUT=${OUT:-/tmp}
el() { echo "t=$(( $(date +%s) - S ))s"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# The machine's python3 with its own torch and numpy (a venv did not see them on 2026-12-07:
# torch sits in a site a venv leaves out); apache-tvm-ffi from the carried wheels into a
# folder on PYTHONPATH.
python3 -c 'import sys, torch; print(sys.executable, "torch", torch.__version__, torch.cuda.is_available())' || {
  echo "no torch for python3; other pythons:"
  for p in /usr/bin/python3* /usr/local/bin/python3* /opt/*/bin/python3; do
    $p -c 'import sys, torch; print(sys.executable, torch.__version__)' 2>/dev/null; done; exit 1; }
# (unzipped, not pip-installed: the machine may have no pip, and Ubuntu's refuses system installs)
PYV=$(python3 -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
W=$(ls lab/gpu/wheels/apache_tvm_ffi-*-$PYV-*.whl | head -1); [ -n "$W" ] || { echo "no apache-tvm-ffi wheel for $PYV"; exit 1; }
mkdir -p $B/pysite && python3 -m zipfile -e "$W" $B/pysite && python3 -m zipfile -e lab/gpu/wheels/typing_extensions-*.whl $B/pysite || exit 1
export PYTHONPATH=$B/pysite${PYTHONPATH:+:$PYTHONPATH}
make -s BUILD=$B all -j 16 > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
ls -la $B/libfi_runtime.so $B/libfi_runtime_tvm.so; el
export FI_RUNTIME_LIBRARY=$PWD/$B/libfi_runtime.so FI_CACHE_PATH=$(mktemp -d)/k.db
timeout 300 python3 lab/gpu/python_check.py > $OUT/python_check.txt 2>&1
echo "python_check rc=$?"; cat $OUT/python_check.txt | tail -60; el
timeout 120 $B/fi-bench --quick runtime > $OUT/bench_runtime.txt 2>&1; echo "fi-bench runtime rc=$?"
grep -E "dispatch" $OUT/bench_runtime.txt; el
