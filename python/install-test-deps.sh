#!/bin/bash
# install-test-deps.sh VENV: the Python packages that the CPU tests of the Python package
# (python/) and the TVM-FFI library (ffi/) need, apache-tvm-ffi and numpy (and wheel, for
# the test that pip installs the package offline), in the virtual
# environment VENV; installs only what is missing (so `make test` stays fast once set up).
# torch is not installed: PyPI's torch wheel for x86-64 is the CUDA build (several GB);
# the tests use numpy arrays (DLPack) and run the torch cases only where torch exists.
set -eu
venv=$1
pkgs=("apache-tvm-ffi>=0.1,<0.2" numpy wheel)
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import tvm_ffi, numpy, wheel' 2>/dev/null; then
  exit 0
fi
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  # Debian's own python3 keeps venv's pip bootstrap in python3-venv.
  echo "install-test-deps: installing python3-venv" >&2
  SUDO=; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq python3-venv >/dev/null
fi
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
echo "install-test-deps: pip install ${pkgs[*]} into $venv" >&2
if ! "$venv/bin/pip" install -q --disable-pip-version-check "${pkgs[@]}"; then
  # The tests then print SKIP lines for what needs these packages.
  echo "install-test-deps: warning: pip could not install ${pkgs[*]}" >&2
fi
