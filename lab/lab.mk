# lab/lab.mk: the lab's harnesses and probes (nvcc builds, staging for the A/B scripts),
# included by the Makefile but out of `make all` and `make test`. Run on the GPU machine.
# The decode phase trace (lab/decode_trace; nvcc, not part of all): B = 1 variants and a
# per-phase clock trace of a patched copy of kernels/decode.cuh. Run it on the GPU machine.
NVCC ?= /usr/local/cuda/bin/nvcc
$(BUILD)/decode-trace: lab/decode_trace/decode_trace.cu lab/decode_trace/patch_trace.py kernels/decode.cuh kernels/decode_step.cuh kernels/mma.cuh kernels/decode_enter.cuh kernels/decode_merge.cuh kernels/decode_params.h kernels/fi_port.cuh lab/cuda_bench.cuh
	@mkdir -p $(BUILD)/decode_trace
	python3 lab/decode_trace/patch_trace.py kernels/decode.cuh $(BUILD)/decode_trace/decode.cuh
	$(NVCC) -std=c++17 -O3 -arch=sm_90a -I$(BUILD)/decode_trace -Ikernels -Ilab $< -o $@

# The cluster placement probe (lab/cluster_probe; nvcc, not part of all): clusters that fit
# and the SMs their blocks land on, per cluster size. Run it on the GPU machine.
$(BUILD)/cluster-probe: lab/cluster_probe/cluster_probe.cu
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O2 -arch=sm_90 $< -o $@

# The prefill phase trace (lab/prefill_trace; nvcc, not part of all): the wgmma kernel's
# default shapes (FI_TRACE_SHAPE) with clock marks at each phase of every unit. GPU machine.
$(BUILD)/prefill-trace: lab/prefill_trace/prefill_trace.cu $(wildcard kernels/prefill_wgmma*.cuh) kernels/sm90.cuh kernels/prefill_item.cuh kernels/prefill_params.h kernels/mma.cuh kernels/fi_port.cuh lab/cuda_bench.cuh
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -Ikernels -Ilab $< -o $@

# The decode load-pattern microbenchmark (lab/decode_loads; nvcc, not part of all):
# registers against a cp.async ring over the paged KV cache, loads only.
$(BUILD)/decode-loads: lab/decode_loads/decode_loads.cu lab/cuda_bench.cuh
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O3 -arch=sm_90 -Ilab $< -o $@

# The fp8 decode microbenchmark (lab/decode_fp8; nvcc, not part of all): kernel variants
# at B = 64, L = 4096 from a copy of kernels/decode.cuh that patch_variants.py extends.
# Run it on the GPU machine.
$(BUILD)/decode-fp8-bench: lab/decode_fp8/fp8_bench.cu lab/decode_fp8/patch_variants.py kernels/decode.cuh kernels/decode_step.cuh kernels/mma.cuh kernels/decode_enter.cuh kernels/decode_merge.cuh kernels/decode_params.h kernels/fi_port.cuh lab/cuda_bench.cuh
	@mkdir -p $(BUILD)/decode_fp8
	python3 lab/decode_fp8/patch_variants.py kernels/decode.cuh $(BUILD)/decode_fp8/decode.cuh
	$(NVCC) -std=c++17 -O3 -arch=sm_90a -I$(BUILD)/decode_fp8 -Ikernels -Ilab $< -o $@

# The memory microbenchmark (lab/membench; nvcc, not part of all): copy, norm and append
# access patterns against cudaMemcpy. Run it on the GPU machine.
$(BUILD)/membench: lab/membench/membench.cu kernels/layernorm.cuh kernels/rmsnorm.cuh kernels/page.cuh kernels/fi_params.h kernels/fi_port.cuh lab/cuda_bench.cuh
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O3 -arch=sm_90 -Ikernels -Ilab $< -o $@

# Not a test: times the steps of opening the cache on the GPU machine.
$(BUILD)/tests/probe_store: lab/gpu/probe_store.c $(BUILD)/libfi_internal.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(BUILD)/libfi_internal.a -o $@ $(LDFLAGS) $(LIBS)

# The programs run side by side, one per CPU, the slowest first (the emulator, the
# compile sample, the CLI and concurrency scripts).
SLOW_TESTS := $(filter %/test_compile %/test_prefill_emu %/test_decode_emu,$(TEST_BINS)) $(filter %/test_cli.sh %/test_concurrency.sh,$(TEST_SCRIPTS))
# The wgmma prefill kernel outside the runtime (a development harness; see its header).
$(BUILD)/tests/wgmma_attn: lab/gpu/wgmma_attn.c lab/gpu/wgmma_host.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=c11 -D_DEFAULT_SOURCE -Ilab/gpu -Itools -Ikernels -o $@ $< -ldl -lm

# What lab/gpu/decode_ab.sh runs on the GPU machine, in one folder to carry there.
decode-stage: all $(BUILD)/tests/gpu_decode
	rm -rf $(BUILD)/decode-stage && mkdir -p $(BUILD)/decode-stage/tests
	cp -L $(BUILD)/libfi_runtime.so.0 $(BUILD)/fi-bench $(BUILD)/fi-cache $(BUILD)/decode-stage/
	cp $(BUILD)/tests/gpu_decode $(BUILD)/decode-stage/tests/

