# Makefile: builds libfi_runtime.so, fi-cache and fi-bench, runs the CPU tests
# (make test), the sanitizer run (make test-asan) and the GPU tests (make gpu-test).
BUILD   ?= build
PREFIX  ?= /usr/local
CC      ?= gcc
VERSION := 0.1.0

SAN_FLAGS :=
ifeq ($(SAN),1)
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif

CPPFLAGS += -D_GNU_SOURCE -DFI_VERSION_STRING='"$(VERSION)"' -Iruntime -Ijit -Icache -Ikernels -I$(BUILD)/gen
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -Wall -Wextra -Werror -fvisibility=hidden -fPIC -pthread $(SAN_FLAGS)
LDFLAGS  += $(SAN_FLAGS)
# The only libraries linked; CUDA, NVRTC, HIP and hiprtc are dlopen'ed at first use.
SQLITE_LIB ?= -lsqlite3
LIBS     := $(SQLITE_LIB) -ldl -lpthread -lm

LIB_SRCS := $(wildcard runtime/*.c jit/*.c cache/*.c)
LIB_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS)) $(BUILD)/obj/gen/kernels_embed.o
KERNELS  := $(sort $(wildcard kernels/*.cuh kernels/*.h))

TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
TEST_SCRIPTS := $(wildcard tests/test_*.sh)
# C++ tests: the prefill kernel's source run on the host by an emulator. Not under
# the sanitizers: its emulated threads switch stacks with ucontext.
TEST_CXX_SRCS := $(wildcard tests/test_*.cc)
ifneq ($(SAN),1)
TEST_BINS += $(patsubst tests/%.cc,$(BUILD)/tests/%,$(TEST_CXX_SRCS))
endif
GPU_SRCS  := $(wildcard tests/gpu/gpu_*.c)
GPU_BINS  := $(patsubst tests/gpu/%.c,$(BUILD)/tests/%,$(GPU_SRCS))

.PHONY: all deps run test test-asan gpu-test decode-stage install clean
all: $(BUILD)/libfi_runtime.so $(BUILD)/fi-cache $(BUILD)/fi-bench $(BUILD)/fi-example

# Installs missing Debian packages (apt-get); a no-op once they are there.
deps:
	@tools/install-deps.sh

# The main job on the default cache: build, prewarm every kernel for the
# H200 (sm_90) into ~/.cache/fi_runtime/kernels.db (or $$FI_CACHE_PATH),
# list it, and on a machine with a CUDA GPU run fi_rmsnorm through dlopen.
RUN_ARCH ?= sm_90
run: deps
	$(MAKE) all
	$(BUILD)/fi-cache prewarm --arch $(RUN_ARCH)
	$(BUILD)/fi-cache stats
	$(BUILD)/fi-example $(CURDIR)/$(BUILD)/libfi_runtime.so

$(BUILD)/obj/%.o: %.c $(wildcard runtime/*.h jit/*.h cache/*.h kernels/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# Kernel templates are data: embedded as strings, compiled at run time only.
$(BUILD)/embed_kernels: tools/embed_kernels.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 -Wall -Wextra -Werror $< -o $@
$(BUILD)/gen/kernels_embed.c: $(BUILD)/embed_kernels $(KERNELS)
	@mkdir -p $(dir $@)
	$(BUILD)/embed_kernels $@ $(KERNELS)
$(BUILD)/obj/gen/kernels_embed.o: $(BUILD)/gen/kernels_embed.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/libfi_runtime.so: $(LIB_OBJS) runtime/fi_runtime.map
	$(CC) -shared $(LDFLAGS) -Wl,--version-script=runtime/fi_runtime.map -Wl,-soname,libfi_runtime.so.0 \
	  -o $@ $(LIB_OBJS) $(LIBS)
	ln -sf libfi_runtime.so $(BUILD)/libfi_runtime.so.0
$(BUILD)/libfi_internal.a: $(LIB_OBJS)
	rm -f $@ && ar rcs $@ $^

CACHE_TOOL_SRCS := $(wildcard tools/fi_cache*.c)
$(BUILD)/fi-cache: $(CACHE_TOOL_SRCS) tools/fi_cache.h runtime/fi_runtime.h runtime/fi_admin.h $(BUILD)/libfi_runtime.so
	$(CC) $(CPPFLAGS) $(CFLAGS) $(CACHE_TOOL_SRCS) -o $@ $(LDFLAGS) -L$(BUILD) -l:libfi_runtime.so -Wl,-rpath,'$$ORIGIN' -lpthread -lm
BENCH_SRCS := tools/fi_bench.c $(wildcard tools/bench_*.c)
$(BUILD)/fi-bench: $(BENCH_SRCS) tools/bench.h tools/fi_cuda_min.h runtime/fi_runtime.h runtime/fi_admin.h $(BUILD)/libfi_runtime.so
	$(CC) $(CPPFLAGS) -Itools $(CFLAGS) $(BENCH_SRCS) -o $@ $(LDFLAGS) -L$(BUILD) -l:libfi_runtime.so -Wl,-rpath,'$$ORIGIN' -ldl -lpthread -lm

EXAMPLE_SRCS := $(wildcard tools/fi_example*.c)
$(BUILD)/fi-example: $(EXAMPLE_SRCS) tools/fi_example.h tools/fi_example_step.h tools/fi_cuda_min.h runtime/fi_runtime.h
	$(CC) $(CPPFLAGS) -Itools $(CFLAGS) $(EXAMPLE_SRCS) -o $@ $(LDFLAGS) -ldl -lm

$(BUILD)/obj/tests/ft_main.o: tests/ft_main.c tests/ft.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@
$(BUILD)/tests/%: tests/%.c tests/ft.h $(BUILD)/obj/tests/ft_main.o $(BUILD)/libfi_internal.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Itests $< $(BUILD)/obj/tests/ft_main.o $(BUILD)/libfi_internal.a -o $@ $(LDFLAGS) $(LIBS)
# The decode phase trace (tools/decode_trace; nvcc, not part of all): B = 1 variants and a
# per-phase clock trace of a patched copy of kernels/decode.cuh. Run it on the GPU machine.
NVCC ?= /usr/local/cuda/bin/nvcc
$(BUILD)/decode-trace: tools/decode_trace/decode_trace.cu tools/decode_trace/patch_trace.py kernels/decode.cuh kernels/decode_mma.cuh kernels/decode_enter.cuh kernels/decode_merge.cuh kernels/decode_params.h kernels/fi_port.cuh tools/cuda_bench.cuh
	@mkdir -p $(BUILD)/decode_trace
	python3 tools/decode_trace/patch_trace.py kernels/decode.cuh $(BUILD)/decode_trace/decode.cuh
	$(NVCC) -std=c++17 -O3 -arch=sm_90a -I$(BUILD)/decode_trace -Ikernels -Itools $< -o $@

# The cluster placement probe (tools/cluster_probe; nvcc, not part of all): clusters that fit
# and the SMs their blocks land on, per cluster size. Run it on the GPU machine.
$(BUILD)/cluster-probe: tools/cluster_probe/cluster_probe.cu
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O2 -arch=sm_90 $< -o $@

# The prefill phase trace (tools/prefill_trace; nvcc, not part of all): the wgmma kernel's
# default shapes (FI_TRACE_SHAPE) with clock marks at each phase of every unit. GPU machine.
$(BUILD)/prefill-trace: tools/prefill_trace/prefill_trace.cu kernels/prefill_wgmma.cuh kernels/prefill_item.cuh kernels/prefill_params.h kernels/decode_mma.cuh kernels/fi_port.cuh tools/cuda_bench.cuh
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -Ikernels -Itools $< -o $@

# The decode load-pattern microbenchmark (tools/decode_loads; nvcc, not part of all):
# registers against a cp.async ring over the paged KV cache, loads only.
$(BUILD)/decode-loads: tools/decode_loads/decode_loads.cu tools/cuda_bench.cuh
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O3 -arch=sm_90 -Itools $< -o $@

# The fp8 decode microbenchmark (tools/decode_fp8; nvcc, not part of all): kernel variants
# at B = 64, L = 4096 from a copy of kernels/decode.cuh that patch_variants.py extends.
# Run it on the GPU machine.
$(BUILD)/decode-fp8-bench: tools/decode_fp8/fp8_bench.cu tools/decode_fp8/patch_variants.py kernels/decode.cuh kernels/decode_mma.cuh kernels/decode_enter.cuh kernels/decode_merge.cuh kernels/decode_params.h kernels/fi_port.cuh tools/cuda_bench.cuh
	@mkdir -p $(BUILD)/decode_fp8
	python3 tools/decode_fp8/patch_variants.py kernels/decode.cuh $(BUILD)/decode_fp8/decode.cuh
	$(NVCC) -std=c++17 -O3 -arch=sm_90a -I$(BUILD)/decode_fp8 -Ikernels -Itools $< -o $@

# The memory microbenchmark (tools/membench; nvcc, not part of all): copy, norm and append
# access patterns against cudaMemcpy. Run it on the GPU machine.
$(BUILD)/membench: tools/membench/membench.cu kernels/layernorm.cuh kernels/rmsnorm.cuh kernels/page.cuh kernels/fi_params.h kernels/fi_port.cuh tools/cuda_bench.cuh
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O3 -arch=sm_90 -Ikernels -Itools $< -o $@

$(BUILD)/tests/gpu_%: tests/gpu/gpu_%.c tests/gpu/gpu_util.h tests/ft.h $(BUILD)/obj/tests/ft_main.o $(BUILD)/libfi_runtime.so
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Itests -Itools $< $(BUILD)/obj/tests/ft_main.o -o $@ $(LDFLAGS) \
	  -L$(BUILD) -l:libfi_runtime.so -Wl,-rpath,'$$ORIGIN/..' -lsqlite3 -ldl -lpthread -lm

$(BUILD)/tests/%: tests/%.cc $(KERNELS) $(BUILD)/obj/runtime/rt_prefill_plan.o $(BUILD)/obj/runtime/rt_decode_plan.o
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -D_GNU_SOURCE -Ikernels -Iruntime -Ijit -Icache $< \
	  $(BUILD)/obj/runtime/rt_prefill_plan.o $(BUILD)/obj/runtime/rt_decode_plan.o -o $@ -lm

# Not a test: times the steps of opening the cache on the GPU machine.
$(BUILD)/tests/probe_store: tests/gpu/probe_store.c $(BUILD)/libfi_internal.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(BUILD)/libfi_internal.a -o $@ $(LDFLAGS) $(LIBS)

test: deps
	$(MAKE) all $(TEST_BINS)
	FI_BUILD=$(BUILD) tests/run_tests.sh $(TEST_BINS) $(TEST_SCRIPTS)

# hiprtc 5.2 (libamdhip64) trips ASan at thread exit unless it keeps its own
# signal stack, and leaks a few bytes of its own: both are outside our code.
# test_compile samples every 7th configuration here (see FI_TEST_COMPILE_SAMPLE).
test-asan:
	ASAN_OPTIONS=use_sigaltstack=0:detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  FI_TEST_COMPILE_SAMPLE=7 $(MAKE) BUILD=build-asan SAN=1 test

# The wgmma prefill kernel outside the runtime (a development harness; see its header).
$(BUILD)/tests/wgmma_attn: tests/gpu/wgmma_attn.c tests/gpu/wgmma_host.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=c11 -D_DEFAULT_SOURCE -Itests/gpu -Itools -Ikernels -o $@ $< -ldl -lm

# Every GPU test binary, then prefill four more times under tuning overrides (mma.sync
# alone; the wgmma kernel's 2x128 shape; a 3-block persistent grid, so each block loops
# over many work units; the producer without ping-pong) and sampling with top-p's exact
# membership test: separate processes side by side on the GPU (tests/gpu/run_gpu_tests.sh
# --list names them; GPU_TEST_JOBS=1 runs them one at a time).
gpu-test: all $(GPU_BINS) $(BUILD)/tests/probe_store
	FI_BUILD=$(BUILD) FT_LOGDIR=$(BUILD)/gpu-logs tests/gpu/run_gpu_tests.sh $(if $(GPU_TEST_JOBS),-j $(GPU_TEST_JOBS))

# What tests/gpu/decode_ab.sh runs on the GPU machine, in one folder to carry there.
decode-stage: all $(BUILD)/tests/gpu_decode
	rm -rf $(BUILD)/decode-stage && mkdir -p $(BUILD)/decode-stage/tests
	cp -L $(BUILD)/libfi_runtime.so.0 $(BUILD)/fi-bench $(BUILD)/fi-cache $(BUILD)/decode-stage/
	cp $(BUILD)/tests/gpu_decode $(BUILD)/decode-stage/tests/

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 0755 $(BUILD)/libfi_runtime.so $(DESTDIR)$(PREFIX)/lib/libfi_runtime.so.$(VERSION)
	ln -sf libfi_runtime.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libfi_runtime.so.0
	ln -sf libfi_runtime.so.0 $(DESTDIR)$(PREFIX)/lib/libfi_runtime.so
	install -m 0644 runtime/fi_runtime.h runtime/fi_admin.h $(DESTDIR)$(PREFIX)/include/
	install -m 0755 $(BUILD)/fi-cache $(BUILD)/fi-bench $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' fi_runtime.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/fi_runtime.pc

clean:
	rm -rf build build-asan
