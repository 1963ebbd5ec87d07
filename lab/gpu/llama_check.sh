#!/bin/bash
# llama_check.sh: issue 44's proof by a real model (lab/gpu/llama_check.py). A transformers
# LlamaForCausalLM with random weights (bf16, eager attention) generates 32 tokens greedily
# for 4 prompts of 7, 23, 64 and 100 tokens; a hand-written forward over the same weights,
# teacher-forced with those tokens, does all but the matmuls through fi_runtime (a paged KV
# cache of 16-token pages handed out shuffled, append_paged_kv_cache at the positions of
# get_batch_indices_positions, the batch prefill wrapper for the prompts and the batch
# decode wrapper for each later token, apply_rope_pos_ids, rmsnorm, fused_add_rmsnorm,
# silu_and_mul, softmax + top_k_sampling_from_probs with k = 1 as the greedy pick). Every
# step's logits are compared with the eager model's (and both with a float32 copy of it),
# and the greedy tokens must agree but at near-ties. Configs: A (4 layers, hidden 1024,
# 16/4 heads of 64, rope_theta 1e4) and B (2 layers of Llama-3-8B's shapes: hidden 4096,
# 32/8 heads of 128, intermediate 11008, rope_theta 5e5); then, if time is left, A again
# with torch doing what fi_runtime did (the same paged bookkeeping: a diagnostic baseline).
#
# Prepare here (from the repository root), once; needs PyPI, writes the git-ignored
# lab/gpu/wheels/ (about 9 MB more: transformers 4.57.6 repacked with only the llama and
# auto folders of transformers/models, the rest of it unchanged, plus the pure and binary
# packages it imports; torch, numpy, apache-tvm-ffi and typing_extensions are not fetched
# here, numpy and the last two are already there, see python_check.sh):
#   bash lab/gpu/llama_check.sh prepare
# and build:
#   make -j2 BUILD=build-gpu5 TVM_FFI_PYTHON=$PWD/build/pyvenv/bin/python all build-gpu5/libfi_runtime_tvm.so
# Run on the GPU machine (no network) from the repository root, carrying
# ["build-gpu5", "lab/gpu/wheels"]:
#   bash lab/gpu/llama_check.sh
# Knobs (environment): B (build folder, build-gpu5), PY (/opt/torch/.venv/bin/python3),
# OUT (logs, /tmp/llama_check_out), BUDGET (seconds for everything, 240).
# SELFTEST=1 runs the same set-up but `llama_check.py --cpu-reference` (no GPU, no
# fi_runtime: a float32 CPU run of the bookkeeping with torch math), to check the wheels and
# the paths on a machine without a GPU.
# Logs under $OUT: llama_A.txt, llama_B.txt, llama_A_torch.txt (or selftest.txt), and
# summary.txt, which is also printed last.

WHEELS=lab/gpu/wheels
# name==version of each wheel, and the module that tells whether the interpreter has it
PINS="tokenizers==0.22.2:tokenizers huggingface_hub==0.36.2:huggingface_hub
 safetensors==0.8.0:safetensors regex==2026.12.2:regex pyyaml==6.0.4:yaml tqdm==4.70.1:tqdm
 requests==2.34.2:requests urllib3==2.8.0:urllib3 idna==3.21:idna
 certifi==2026.10.19.post1:certifi charset_normalizer==3.5.3:charset_normalizer
 filelock==4.3.2:filelock fsspec==2026.9.0:fsspec"
TRANSFORMERS=4.57.6
SLIM=$WHEELS/transformers-$TRANSFORMERS-llama-only.zip

if [ "$1" = prepare ]; then
  mkdir -p $WHEELS || exit 1
  T=$(mktemp -d); trap 'rm -rf $T' EXIT
  for p in transformers==$TRANSFORMERS $(for x in $PINS; do echo ${x%%:*}; done); do
    d=$WHEELS; [ "${p%%==*}" = transformers ] && d=$T
    pip download -q -d $d --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --abi cp312 --abi abi3 --abi none --platform manylinux_2_28_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any "$p" ||
      { echo "pip download $p failed"; exit 1; }
  done
  # transformers' wheel is 12 MB, 9.9 MB of it transformers/models/*: keep llama and auto
  # (the only ones LlamaForCausalLM imports) and everything outside models/; drop RECORD,
  # whose hashes would no longer hold. Unzipped, not installed, so it need not be a wheel.
  python3 - "$T"/transformers-$TRANSFORMERS-*.whl "$SLIM" << 'EOF' || exit 1
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as zi, zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED) as zo:
    for i in zi.infolist():
        p = i.filename.split("/")
        if p[0] == "transformers" and len(p) > 3 and p[1] == "models" and p[2] not in ("llama", "auto"):
            continue
        if i.filename.endswith(".dist-info/RECORD"):
            continue
        zo.writestr(i, zi.read(i))
EOF
  ls -la $SLIM; du -sh $WHEELS; exit 0
fi

B=${B:-build-gpu5}; PY=${PY:-/opt/torch/.venv/bin/python3}; OUT=${OUT:-/tmp/llama_check_out}
BUDGET=${BUDGET:-240}; S=$(date +%s); ROOT=$PWD
left() { echo $(( BUDGET - ($(date +%s) - S) )); }
mkdir -p $OUT && OUT=$(cd $OUT && pwd)
[ -f lab/gpu/llama_check.py ] || { echo "run from the repository root"; exit 2; }
[ -x $PY ] || { echo "no $PY (set PY)"; exit 2; }
if [ -z "$SELFTEST" ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  for f in libfi_runtime.so libfi_runtime_tvm.so; do
    # (without the TVM-FFI library the binding falls back to ctypes, which has no attention)
    [ -f $B/$f ] || { echo "no $B/$f: build it first (see the header)"; exit 2; }
  done
fi

# Packages from the carried wheels, unzipped into a folder on PYTHONPATH (no pip there).
# transformers and what it pins (huggingface_hub < 1, tokenizers 0.22) always, ahead of
# anything the venv has; apache-tvm-ffi and typing_extensions as python_check.sh does;
# torch's own dependencies (filelock, fsspec, numpy, packaging) only where the venv lacks them.
SITE=$(mktemp -d); K=$(mktemp -d); trap 'rm -rf $SITE $K' EXIT
V=$($PY -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
unz() { [ -f "$1" ] || { echo "missing wheel $1 (bash lab/gpu/llama_check.sh prepare)"; return 1; }
  $PY -m zipfile -e "$1" $SITE; }
has() { $PY -c "import $1" 2> /dev/null; }
whl() { ls $WHEELS/$1-*.whl 2> /dev/null | grep -E -- "-(py3|$V|cp3[0-9]+-abi3)-" | head -1; }
unz $SLIM || exit 2
for x in $PINS; do
  p=${x%%:*}; n=${p%%==*}; m=${x##*:}
  case $n in filelock|fsspec) has $m && continue ;; esac
  unz "$(ls $WHEELS/$n-${p##*==}-*.whl 2> /dev/null | head -1)" || exit 2
done
if [ -z "$SELFTEST" ]; then
  W=$(ls $WHEELS/apache_tvm_ffi-*-$V-*.whl 2> /dev/null | head -1)
  [ -n "$W" ] || { echo "no apache-tvm-ffi wheel for $V in $WHEELS"; exit 2; }
  unz $W && unz "$(whl typing_extensions)" || exit 2  # (as python_check.sh does)
fi
has typing_extensions || unz "$(whl typing_extensions)" || exit 2
has packaging || unz "$(whl packaging)" || exit 2
has numpy || { echo "numpy from $WHEELS"; unz "$(whl numpy)" || exit 2; }
export PYTHONPATH=$ROOT/python:$SITE FI_LOG_LEVEL=warn
export FI_RUNTIME_LIBRARY=$ROOT/$B/libfi_runtime.so FI_CACHE_PATH=$K/kernels.db  # one for all runs
$PY -c 'import sys, torch, transformers; print(sys.executable, sys.version.split()[0], "torch",
torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__)' ||
  { echo "transformers does not import"; exit 2; }

rm -f $OUT/summary.txt
status=0
one() {  # one run: counts (1: its failure fails the script), log name, llama_check.py's arguments
  local counts=$1 log=$2; shift 2
  local t=$(( $(left) - 5 ))
  if [ $t -lt 20 ]; then
    echo "$log: skipped, ${t}s left of ${BUDGET}s" >> $OUT/summary.txt
    [ $counts = 1 ] && status=1; return; fi
  local t0=$(date +%s)
  timeout $t $PY lab/gpu/llama_check.py "$@" > $OUT/$log.txt 2>&1
  local rc=$?
  [ $rc -ne 0 ] && [ $counts = 1 ] && status=1
  { echo "$log ($*): rc=$rc, $(( $(date +%s) - t0 ))s$([ $rc -eq 124 ] && echo ", timed out")"
    grep -E "^(prefill, all|decode step time|config .* ops |PASS|FAIL)" $OUT/$log.txt | sed 's/^/  /'
    [ $rc -ne 0 ] && grep -vE "^ *[0-9]+ (prefill|decode) " $OUT/$log.txt | tail -6 | sed 's/^/  | /'
  } >> $OUT/summary.txt
}
if [ -n "$SELFTEST" ]; then
  one 1 selftest --cpu-reference
else
  one 1 llama_A --config A
  one 1 llama_B --config B
  one 0 llama_A_torch --config A --ops torch  # diagnostic: torch in fi_runtime's place
fi
echo "logs in $OUT; t=$(( $(date +%s) - S ))s"
echo "llama_check: $([ $status = 0 ] && echo PASS || echo FAIL)" >> $OUT/summary.txt
echo "== summary"; cat $OUT/summary.txt
exit $status
