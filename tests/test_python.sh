#!/bin/bash
# test_python.sh: the TVM-FFI library (libfi_runtime_tvm.so) and the Python package
# (python/fi_runtime) on the CPU, with the test venv make test sets up ($FI_BUILD/pyvenv:
# apache-tvm-ffi, numpy); tests/test_ffi_python.py has the cases. SKIP when the venv or
# the TVM-FFI library is missing (pip could not install apache-tvm-ffi).
set -u
B=${FI_BUILD:-build}
PY=${FI_TEST_PYTHON:-$B/pyvenv/bin/python}
if ! [ -x "$PY" ] || ! "$PY" -c 'import tvm_ffi, numpy' 2>/dev/null; then
  echo "SKIP python: no python with apache-tvm-ffi and numpy at $PY (make pydeps)"; exit 0
fi
if ! [ -f "$B/libfi_runtime_tvm.so" ]; then
  echo "SKIP python: $B/libfi_runtime_tvm.so was not built (no apache-tvm-ffi headers)"; exit 0
fi
# A sanitized build (make test-asan) needs the sanitizer runtime loaded first; Python's own
# allocations are not ours to leak-check.
if ldd "$B/libfi_runtime.so" | grep -q libasan; then
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS=detect_leaks=0:use_sigaltstack=0
fi
exec "$PY" tests/test_ffi_python.py "$B"
