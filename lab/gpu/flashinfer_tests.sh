#!/bin/bash
# flashinfer_tests.sh: FlashInfer v0.6.9's own pytest files for the ops fi_runtime has, run
# against fi_runtime through the `flashinfer` shim (python/flashinfer_shim; issue 44). The
# shim's stubs (python/flashinfer_shim/flashinfer/_missing.py) raise NotImplementedError
# "fi_runtime: flashinfer.<name> is not implemented"; arguments fi_runtime lacks raise
# fi_runtime.UnsupportedError: both are failures here, counted apart in the summary.
#
# Prepare here (from the repository root), once; all three folders are git-ignored:
#   mkdir -p lab/gpu/flashinfer_tests && git -C /work/.mirror/flashinfer-ai+flashinfer/repo \
#     archive v0.6.9 tests pytest.ini | tar -x -C lab/gpu/flashinfer_tests
#   (pytest.ini: FlashInfer's --import-mode=importlib and norecursedirs=test_helpers)
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     -d lab/gpu/wheels pytest          # pytest, pluggy, iniconfig, packaging, pygments
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     --platform manylinux_2_28_x86_64 -d lab/gpu/wheels numpy   # used only if the venv lacks it
#   (lab/gpu/wheels also holds apache-tvm-ffi and typing_extensions, see python_check.sh)
#   make -j2 BUILD=build-gpu5 TVM_FFI_PYTHON=$PWD/build/pyvenv/bin/python all \
#     build-gpu5/libfi_runtime_tvm.so   # needed: the ctypes fallback has no attention ops
# Run on the GPU machine (no network) from the repository root, carrying
# ["build-gpu5", "lab/gpu/wheels", "lab/gpu/flashinfer_tests"]:
#   bash lab/gpu/flashinfer_tests.sh            # every file below, in this order
#   bash lab/gpu/flashinfer_tests.sh ops        # the non-attention files
#   bash lab/gpu/flashinfer_tests.sh attn       # the attention files
#   bash lab/gpu/flashinfer_tests.sh utils/test_norm.py attention/test_page.py   # these
# Knobs (environment): B (build folder, build-gpu5), PY (/opt/torch/.venv/bin/python3),
# PER_FILE (seconds a file may run, 150; less when its share of what is left of BUDGET is
# less), BUDGET (seconds for all files, 520: one device command is at most 600),
# MAX_PER_FN (parametrized cases kept per test function, 8, drawn at random with SEED; 0
# keeps all: the files hold ~90k cases), SEED (0), OUT (results, /tmp/fi_tests_out),
# FI_CACHE_PATH (fi_runtime's kernel cache, kept in build-fitests/ between calls on a warm
# machine, so a second call compiles less), ALLOW_CTYPES (1: run without libfi_runtime_tvm.so).
# Results under $OUT: summary.txt (the table), reasons.txt (the commonest failure
# messages of each file), junit/<file>.xml, logs/<file>.txt (pytest -q, --tb=line).
#
# The files and why (FlashInfer v0.6.9's tests/ of the ops fi_runtime has):
#   utils/test_quantization.py    packbits, segment_packbits
#   utils/test_activation.py      silu / gelu / gelu_tanh _and_mul
#   utils/test_norm.py            rmsnorm, fused_add_rmsnorm, gemma_*, layernorm (the _quant
#                                 variants and the JIT-spec test hit stubs)
#   attention/test_page.py        append_paged_kv_cache, get_batch_indices_positions
#   attention/test_mla_page.py    append_paged_mla_kv_cache
#   attention/test_rope.py        apply_rope_pos_ids / llama31 / cos_sin_cache (the indptr
#                                 forms apply_rope*, and the fp8 quantizing ones, are stubs)
#   utils/test_sampling.py        softmax, the sampling and renorm ops, chain speculative
#   attention/test_shared_prefix_kernels.py  cascade: merge_state_in_place with a mask (the
#                                 shared-prefix and multi-level wrappers are stubs)
#   attention/test_single_prefill.py, test_batch_prefill.py, test_decode_prefill_lse.py,
#   test_logits_cap.py, test_sliding_window.py, test_decode_fp8_calibration_scale.py,
#   test_fp8_prefill.py, test_non_contiguous_decode.py, test_non_contiguous_prefill.py,
#   test_batch_decode_kernels.py, test_tensor_cores_decode.py, test_batch_prefill_kernels.py
#                                 single / batch decode and prefill, paged and ragged, caps,
#                                 windows, fp8 KV, CUDA graphs, custom masks
#   attention/test_deepseek_mla.py  BatchMLAPagedAttentionWrapper (and the 192/128 prefill)
# Left out: test_alibi (ALIBI, refused by fi_runtime), test_batch_invariant_fa2
# (fixed_split_size / disable_split_kv, refused), test_attention_sink (FlashInfer's
# BatchAttentionWithAttentionSinkWrapper and JIT variants), test_hopper (FlashInfer's fa2
# against its fa3 backend: one kernel in fi_runtime, a tautology), utils/test_triton_cascade
# (the only merge_state / merge_states test: FlashInfer's triton kernels against its CUDA
# ones), test_block_sparse, test_batch_attention, test_pod_kernels, test_topk,
# test_logits_processor, norm/test_fused_rmsnorm_silu, and the trtllm / xqa / cudnn / cute-dsl
# / gemm / moe / comm / mamba / gdn files: APIs fi_runtime does not have.
B=${B:-build-gpu5}; PY=${PY:-/opt/torch/.venv/bin/python3}; OUT=${OUT:-/tmp/fi_tests_out}
PER_FILE=${PER_FILE:-150}; BUDGET=${BUDGET:-520}; MAX_PER_FN=${MAX_PER_FN:-8}; SEED=${SEED:-0}
ROOT=$PWD; T=lab/gpu/flashinfer_tests; S=$(date +%s)
OPS="utils/test_quantization.py utils/test_activation.py utils/test_norm.py attention/test_page.py
 attention/test_mla_page.py attention/test_rope.py utils/test_sampling.py
 attention/test_shared_prefix_kernels.py"
ATTN="attention/test_single_prefill.py attention/test_batch_prefill.py
 attention/test_decode_prefill_lse.py attention/test_logits_cap.py attention/test_sliding_window.py
 attention/test_decode_fp8_calibration_scale.py attention/test_fp8_prefill.py
 attention/test_non_contiguous_decode.py attention/test_non_contiguous_prefill.py
 attention/test_batch_decode_kernels.py attention/test_tensor_cores_decode.py
 attention/test_batch_prefill_kernels.py attention/test_deepseek_mla.py"
case "$1" in
  "") FILES="$OPS $ATTN" ;; ops) FILES=$OPS ;; attn) FILES=$ATTN ;; *) FILES="$*" ;;
esac
mkdir -p $OUT/junit $OUT/logs && OUT=$(cd $OUT && pwd)  # absolute: pytest runs in $T
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -f $T/tests/conftest.py ] && [ -f $T/pytest.ini ] || {
  echo "no $T/tests/conftest.py or $T/pytest.ini: export v0.6.9's tests (see the header)"; exit 1; }
[ -f $B/libfi_runtime.so ] || { echo "no $B/libfi_runtime.so: build it (see the header)"; exit 1; }
# without the TVM-FFI library the binding falls back to ctypes, which has no attention,
# packbits or MLA ops (they raise NotImplementedError): refused unless ALLOW_CTYPES=1
[ -f $B/libfi_runtime_tvm.so ] || [ -n "$ALLOW_CTYPES" ] || {
  echo "no $B/libfi_runtime_tvm.so: build it (see the header), or ALLOW_CTYPES=1"; exit 1; }
[ -x $PY ] || { echo "no $PY"; exit 1; }

# Packages from the carried wheels, unzipped into a folder on PYTHONPATH (no pip there):
# apache-tvm-ffi always; pytest and numpy only if the venv lacks them.
SITE=$(mktemp -d); trap 'rm -rf $SITE' EXIT
V=$($PY -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
unz() { for w in "$@"; do [ -f "$w" ] || { echo "missing wheel $w"; return 1; }
  $PY -m zipfile -e "$w" $SITE || return 1; done; }
W=$(ls lab/gpu/wheels/apache_tvm_ffi-*-$V-*.whl 2> /dev/null | head -1)
[ -n "$W" ] || { echo "no apache-tvm-ffi wheel for $V in lab/gpu/wheels"; exit 1; }
unz $W lab/gpu/wheels/typing_extensions-*.whl || exit 1
if ! $PY -c 'import pytest' 2> /dev/null; then
  echo "pytest from lab/gpu/wheels"
  unz lab/gpu/wheels/{pytest,pluggy,iniconfig,packaging,pygments}-*-py3-none-any.whl || exit 1
fi
if ! $PY -c 'import numpy' 2> /dev/null; then
  W=$(ls lab/gpu/wheels/numpy-*-$V-*.whl 2> /dev/null | head -1)
  echo "numpy from lab/gpu/wheels: ${W:-none for $V}"; [ -n "$W" ] && unz $W || exit 1
fi

# MAX_PER_FN: keep that many cases of each test function, drawn at random (SEED): the
# stacked parametrize lists make ~90k cases, far over one device call.
cat > $SITE/fi_sample.py << 'EOF'
import os
import random


def pytest_collection_modifyitems(session, config, items):
    k = int(os.environ.get("MAX_PER_FN", "0"))
    if k > 0:
        sample(config, items, k)
    if os.environ.get("FI_SELECTED"):  # how many cases will run, for the summary
        open(os.environ["FI_SELECTED"], "w").write(f"{len(items)}\n")


def sample(config, items, k):
    groups = {}
    for it in items:
        groups.setdefault(it.nodeid.split("[", 1)[0], []).append(it)
    rng = random.Random(int(os.environ.get("SEED", "0")))
    keep = set()
    for key in sorted(groups):
        its = groups[key]
        keep.update(id(it) for it in (its if len(its) <= k else rng.sample(its, k)))
    dropped = [it for it in items if id(it) not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = [it for it in items if id(it) in keep]
EOF
cat > $SITE/fi_summary.py << 'EOF'
"""The table of the junit files (a log's progress characters where pytest left no junit)."""
import collections
import os
import re
import sys
import xml.etree.ElementTree as ET


def rd(path, default=""):
    return open(path, errors="replace").read().strip() if os.path.exists(path) else default


def kind_of(msg):
    if "fi_runtime: flashinfer." in msg and "is not implemented" in msg:
        return "stub"
    if "UnsupportedError" in msg or "not supported by fi_runtime" in msg:
        return "unsup"
    return "other"


out, files = sys.argv[1], sys.argv[2:]
cols = ("sel", "pass", "fail", "err", "skip", "stub", "unsup", "other", "desel", "s")
rows, reasons = ["file".ljust(48) + "".join(f"{c:>6s}" for c in cols) + "  status"], []
for f in files:
    name = f.replace("/", "__").removesuffix(".py")
    log, status = rd(f"{out}/logs/{name}.txt"), rd(f"{out}/logs/{name}.status", "? -").split()
    m = re.search(r"(\d+) deselected", log)
    v = dict(sel=rd(f"{out}/logs/{name}.selected", "-"), desel=m.group(1) if m else "0",
             s=status[-1], stub="-", unsup="-", other="-")
    xml = f"{out}/junit/{name}.xml"
    if os.path.exists(xml):
        c, msgs = collections.Counter(), collections.Counter()
        for tc in ET.parse(xml).getroot().iter("testcase"):
            if tc.get("name") is None:  # the test a timeout's SIGINT interrupted
                continue
            c["n"] += 1
            c["skip"] += len(tc.findall("skipped"))
            for tag, col in (("failure", "fail"), ("error", "err")):
                for e in tc.findall(tag):
                    lines = (e.get("message") or e.text or "").strip().splitlines()
                    msg = lines[0][:160] if lines else ""
                    c[col] += 1
                    c[kind_of(msg)] += 1
                    msgs[msg] += 1
        v.update({k: c[k] for k in ("fail", "err", "skip", "stub", "unsup", "other")})
        v["pass"] = c["n"] - c["fail"] - c["err"] - c["skip"]
        note = ""
        reasons.append(f"== {f}\n" + "".join(f"  {n:5d}  {m}\n" for m, n in msgs.most_common(6)))
    else:  # killed before junit was written: count pytest -q's progress characters
        prog = collections.Counter("".join(
            ln.split(" [")[0] for ln in log.splitlines()
            if re.fullmatch(r"[.FEsxX]+( +\[ *\d+%\])?", ln.strip())))
        v.update({"pass": prog["."], "fail": prog["F"], "err": prog["E"], "skip": prog["s"]})
        note = " (no junit: counted from the log)"
        tail = [ln for ln in log.splitlines() if ln.strip()][-3:]
        reasons.append(f"== {f}{note}\n" + "".join(f"  {ln[:160]}\n" for ln in tail))
    rows.append(f.ljust(48) + "".join(f"{str(v[c]):>6s}" for c in cols) + f"  {status[0]}{note}")
open(f"{out}/summary.txt", "w").write("\n".join(rows) + "\n")
open(f"{out}/reasons.txt", "w").write("\n".join(reasons))
print("\n".join(rows))
print("\nsel: cases selected to run (a timeout stops short of them); stub: failures a shim stub"
      " raised; unsup: fi_runtime.UnsupportedError; desel: cases MAX_PER_FN left out")
EOF

export PYTHONPATH=$ROOT/python/flashinfer_shim:$ROOT/python:$SITE:$ROOT/$T MAX_PER_FN SEED
export FI_RUNTIME_LIBRARY=$ROOT/$B/libfi_runtime.so FI_LOG_LEVEL=${FI_LOG_LEVEL:-warn}
[ -n "$FI_CACHE_PATH" ] || { mkdir -p build-fitests; export FI_CACHE_PATH=$ROOT/build-fitests/cache.db; }
$PY -c 'import sys, torch, numpy, pytest, tvm_ffi, flashinfer, fi_runtime
print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())
print("pytest", pytest.__version__, "numpy", numpy.__version__, "flashinfer", flashinfer.__file__)
print("fi_runtime", fi_runtime.version(), "backend", fi_runtime.backend().name, fi_runtime.backend().path)' \
  || { echo "the imports failed"; exit 1; }

nleft=$(echo $FILES | wc -w)
for f in $FILES; do
  # a file's time: PER_FILE at most, and no more than its share of what is left (at least
  # 30 s), so that every file runs; what a quick file leaves goes to the later ones
  name=$(echo $f | sed 's|/|__|g; s|\.py$||'); left=$(( BUDGET - ($(date +%s) - S) ))
  share=$(( left / nleft )); nleft=$(( nleft - 1 )); [ $share -lt 30 ] && share=30
  t=$(( share < PER_FILE ? share : PER_FILE )); [ $t -gt $left ] && t=$left
  if [ $t -lt 20 ]; then
    echo "not-run 0" > $OUT/logs/$name.status; echo "$f: not run (budget)"; continue; fi
  [ -f $T/tests/$f ] || {
    echo "missing 0" > $OUT/logs/$name.status; echo "$f: no such file"; continue; }
  a=$(date +%s)
  # SIGINT first: pytest stops, reports and writes its junit; KILL 15 s later if it hangs
  (cd $T && FI_SELECTED=$OUT/logs/$name.selected timeout -k 15 -s INT $t $PY -m pytest -q \
     -p fi_sample -p no:cacheprovider -c pytest.ini --rootdir . --tb=line -o junit_family=xunit1 \
     --junitxml=$OUT/junit/$name.xml tests/$f) > $OUT/logs/$name.txt 2>&1
  rc=$?; st=done; [ $rc -eq 124 ] || [ $rc -eq 137 ] && st=timeout
  echo "$st(rc=$rc) $(( $(date +%s) - a ))" > $OUT/logs/$name.status
  echo "$f: $st rc=$rc $(( $(date +%s) - a ))s," \
    "$(grep -E '(passed|failed|error|skipped|deselected)' $OUT/logs/$name.txt | tail -1)"
done
echo; $PY $SITE/fi_summary.py $OUT $FILES; echo; head -c 5000 $OUT/reasons.txt
echo "t=$(( $(date +%s) - S ))s"
