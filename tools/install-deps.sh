#!/bin/bash
# install-deps.sh: installs the Debian packages the build and the tests need,
# only when something is missing (so `make test` stays fast once set up).
set -eu
missing=()
[ -f /usr/include/sqlite3.h ] || missing+=(libsqlite3-dev)
[ -f /usr/include/xxhash.h ] || missing+=(libxxhash-dev)
[ -f /usr/include/dlpack/dlpack.h ] || missing+=(libdlpack-dev)
# hiprtc for the AMD compile tests (ROCm 5.2 on Debian 12 ships it in libamdhip64).
ldconfig -p | grep -q 'libamdhip64.so' || missing+=(libamdhip64-dev)
command -v gcc >/dev/null || missing+=(gcc)
command -v g++ >/dev/null || missing+=(g++)
command -v make >/dev/null || missing+=(make)
command -v python3 >/dev/null || missing+=(python3)
command -v nm >/dev/null || missing+=(binutils)
command -v pkg-config >/dev/null || missing+=(pkg-config)
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
# NVRTC is not a Debian package: it comes with the CUDA toolkit (or the
# nvidia-cuda-nvrtc pip wheel); FI_NVRTC_LIBRARY points at any copy.
if ! ldconfig -p | grep -q 'libnvrtc.so' && [ -z "${FI_NVRTC_LIBRARY:-}" ]; then
  echo "install-deps: warning: no libnvrtc found; the NVRTC compile tests will fail" \
       "(install the CUDA toolkit or set FI_NVRTC_LIBRARY)" >&2
fi
