# check_call.sh: the GPU tests of the latest sessions' changes side by side, each bounded,
# logs in one tar under $OUT (a call returns few files): the autotuner (MoE GEMM, decode,
# prefill, sampling, FI_AUTOTUNE=1), routing + sort, the MoE layer on both kernels, batch
# decode and prefill (their plans look up stored tactics), sampling (its calls do).
B=${B:-build-gpu}; export FI_LOG_LEVEL=warn; C=$(mktemp -d); L=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() { local n=$1 t=$2; shift 2; ( env "$@" FI_TEST_CACHE=$C/$n.db timeout $t $B/tests/${n%%.*} > $L/$n.log 2>&1; echo "$n rc=$? $(grep -c '^PASS' $L/$n.log) passed $(grep -c '^FAIL' $L/$n.log) failed" ) & }
run gpu_autotune 230
run gpu_moe 200
run gpu_moe_gemm 200
run gpu_moe_gemm.mma 200 FI_MOE_WGMMA=0
run gpu_decode 230
run gpu_prefill 230
run gpu_sampling 200
wait
grep -h "^FAIL\|check failed\|required:" $L/*.log | head -30
tar -C $L -czf $OUT/logs.tgz . ; echo done
# then the new rows' figures: decode's MQA row (64/1), the two new samplers
timeout 200 $B/fi-bench --quick --json $OUT/bench.jsonl decode sampling > $OUT/bench.txt 2>&1; echo "fi-bench rc=$?"
grep -E "MQA|target|read|copy|top_k_top_p|sampling_from_logits|chain_spec" $OUT/bench.txt | head -30
