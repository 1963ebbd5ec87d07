#!/bin/bash
# hostcost.sh: the runtime's own host instructions per memo-hit fi_rmsnorm call (bf16 64 x 4096,
# the call fi-bench runtime times), counted by callgrind on the fake driver (fake_cuda.c), for
# one or more `make all` folders. No GPU needed; deterministic to a few instructions, so two
# commits' dispatch paths compare exactly. The driver's own cost is not in it (the fake returns
# at once); it also prints the driver calls a call makes and the last launch's configuration,
# which must match between builds for the count to be the whole story.
# usage: [HOSTCOST_OP=top_k] lab/hostcost/hostcost.sh NAME=BUILD_DIR[:INCLUDE_DIR] ...
#   INCLUDE_DIR defaults to include/ of this tree (fi_runtime.h)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[ $# -ge 1 ] || { sed -n 2,10p "$0" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "hostcost: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
w=$(mktemp -d); chmod 700 "$w"; trap 'rm -rf "$w"' EXIT
gcc -O2 -Wall -shared -fPIC -o "$w/libfakecuda.so" "$here/fake_cuda.c"
n1=1000 n2=11000
printf '%-12s %14s  %s\n' build "instr/call" "driver calls over $n2 + 1 calls; last launch"
for spec in "$@"; do
  name=${spec%%=*} rest=${spec#*=}
  dir=${rest%%:*} inc=$root/include
  [ "$rest" != "$dir" ] && inc=${rest#*:}
  dir=$(cd "$dir" && pwd)
  gcc -O2 -I"$inc" -o "$w/loop_$name" "$here/dispatch_loop.c" -L"$dir" -l:libfi_runtime.so -Wl,-rpath,"$dir"
  mkdir -m 700 "$w/$name"
  # the first run compiles the kernel into the cache; the counted runs load it
  FI_CUDA_LIBRARY="$w/libfakecuda.so" "$w/loop_$name" "$w/$name/k.db" 1
  t=()
  for n in $n1 $n2; do
    FAKE_CUDA_REPORT=1 FI_CUDA_LIBRARY="$w/libfakecuda.so" valgrind --tool=callgrind \
      --callgrind-out-file="$w/$name.$n.cg" "$w/loop_$name" "$w/$name/k.db" $n 2> "$w/$name.$n.log"
    t+=("$(grep -o 'Collected : [0-9]*' "$w/$name.$n.log" | awk '{print $3}')")
  done
  per=$(( (t[1] - t[0]) / (n2 - n1) ))
  printf '%-12s %14d  %s\n' "$name" "$per" "$(grep -o 'fake_cuda: .*' "$w/$name.$n2.log" | cut -c12-)"
done
