#!/bin/bash
# test_build.sh: what the build promises: only fi_* exported, no vendor library
# linked, `make install` with a working pkg-config file, and the dlopen example.
set -u
B=${FI_BUILD:-build}
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
check() { if eval "$2"; then pass "$1"; else fail "$1" "$2"; fi; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

bad=$(nm -D --defined-only "$B/libfi_runtime.so" | awk '{print $3}' | grep -v '^fi_' | grep -v '^$')
check exports_only_fi '[ -z "$bad" ]'
check exports_the_api 'nm -D --defined-only "$B/libfi_runtime.so" | grep -q " fi_rmsnorm$"'
deps=$(ldd "$B/libfi_runtime.so")
check links_no_vendor_library '! echo "$deps" | grep -Eq "libcuda|libnvrtc|libamdhip|libhiprtc|libxxhash"'
check links_sqlite '[ -n "$(echo "$deps" | grep libsqlite3)" ]'

make -s install PREFIX="$T/usr" BUILD="$B" >"$T/install.log" 2>&1
check install_runs '[ $? -eq 0 ] || { cat "$T/install.log" >&2; false; }'
check install_files '[ -f "$T/usr/include/fi_runtime.h" ] && [ -f "$T/usr/include/fi_admin.h" ] && [ -x "$T/usr/bin/fi-cache" ] && [ -L "$T/usr/lib/libfi_runtime.so" ]'
pc=$(PKG_CONFIG_PATH="$T/usr/lib/pkgconfig" pkg-config --cflags --libs fi_runtime 2>&1)
check pkg_config '[[ "$pc" == *"-I$T/usr/include"* && "$pc" == *"-lfi_runtime"* ]]'
# A program built against the installed copy alone.
cat > "$T/use.c" <<'C'
#include <fi_runtime.h>
#include <stdio.h>
int main(void) { fi_runtime *rt; fi_options o; fi_options_init(&o); o.cache_path = ":memory:";
  if (fi_runtime_create(&o, &rt) != FI_OK) return 1; printf("%s\n", fi_version());
  fi_runtime_destroy(rt); return 0; }
C
# A sanitized library (make test-asan) needs a sanitized program to load it.
san=; ldd "$B/libfi_runtime.so" | grep -q libasan && san="-fsanitize=address,undefined"
cc $san $(PKG_CONFIG_PATH="$T/usr/lib/pkgconfig" pkg-config --cflags fi_runtime) "$T/use.c" -o "$T/use" \
  $(PKG_CONFIG_PATH="$T/usr/lib/pkgconfig" pkg-config --libs fi_runtime) 2>"$T/cc.log"
check installed_library_usable 'LD_LIBRARY_PATH="$T/usr/lib" "$T/use" | grep -Eq "^[0-9]+\.[0-9]+\.[0-9]+$"'

out=$(FI_CACHE_PATH="$T/k.db" "$B/fi-example" "$PWD/$B/libfi_runtime.so" 2>&1); rc=$?
check example_without_gpu '[ $rc -eq 0 ] && [[ "$out" == *"no CUDA GPU here"* ]]'
out=$("$B/fi-example" /nonexistent/libfi_runtime.so 2>&1); rc=$?
check example_reports_missing_library '[ $rc -eq 1 ] && [[ "$out" == *"nonexistent"* ]]'

# The layer rules (tools/check_layers.py): each folder includes only what DESIGN.md's arrows
# allow, no header name twice, and no two object files of the library need each other.
out=$(python3 tools/check_layers.py "$B" 2>&1)
check layers_and_no_circles '[ $? -eq 0 ] || { echo "$out" >&2; false; }'

# No code names a backend outside its own file and its registry (issue 41): what differs
# between vendors is a capability field or an optional member. Files are matched by name,
# wherever a folder move puts them; tests may name a backend to check the registry.
own='/(rt_device_cuda|rt_device_hip|rt_device_reg|jit_nvrtc|jit_hiprtc|jit_compiler)\.c$'
named=$(for d in runtime jit cache tools device include; do [ -d "$d" ] && find "$d" -name '*.[ch]'; done |
  grep -Ev "$own" | xargs grep -n "rt_device_hip\|rt_device_cuda\|jit_nvrtc\b\|jit_hiprtc\b" 2>/dev/null)
check no_backend_named_outside_its_file '[ -z "$named" ] || { echo "$named" >&2; false; }'

out=$(FI_CACHE_PATH="$T/k.db" FI_EXAMPLE_EXPECT_NO_COMPILE=1 "$B/fi-example" "$PWD/$B/libfi_runtime.so" 2>&1); rc=$?
check example_expect_no_compile_without_gpu '[ $rc -eq 0 ] && [[ "$out" == *"no CUDA GPU here"* ]]'
out=$("$B/fi-example" --reps 0 "$PWD/$B/libfi_runtime.so" 2>&1); rc=$?
check example_rejects_bad_reps '[ $rc -eq 2 ] && [[ "$out" == *"--reps"*"0"* ]]'
out=$("$B/fi-example" --reps 3x "$PWD/$B/libfi_runtime.so" 2>&1); rc=$?
check example_rejects_reps_with_junk '[ $rc -eq 2 ] && [[ "$out" == *"--reps"* ]]'
out=$("$B/fi-example" --frobnicate "$PWD/$B/libfi_runtime.so" 2>&1); rc=$?
check example_rejects_unknown_option '[ $rc -eq 2 ] && [[ "$out" == *"--frobnicate"* ]]'
# A library without the API (libm, which the runtime itself links): the first missing
# entry point named, nothing run.
libm=$(ldd "$B/libfi_runtime.so" | awk '/libm\.so/ {print $3}')
out=$("$B/fi-example" "$libm" 2>&1); rc=$?
check example_names_missing_entry_point '[ -n "$libm" ] && [ $rc -eq 1 ] && [[ "$out" == *"lacks fi_options_init"* ]]'

# The library reads the environment in one place (runtime/rt_env.c, at fi_runtime_create),
# besides the cache-path resolver's FI_CACHE_PATH, XDG_CACHE_HOME and HOME (issue 41).
readers=$(for d in runtime jit cache device include; do [ -d "$d" ] && find "$d" -name '*.[ch]'; done |
  grep -Ev '/rt_env\.c$' | xargs grep -n 'getenv\|secure_getenv' 2>/dev/null |
  grep -Ev 'getenv\("(FI_CACHE_PATH|XDG_CACHE_HOME|HOME)"\)')
check environment_read_in_one_place '[ -z "$readers" ] || { echo "$readers" >&2; false; }'
