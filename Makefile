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

CPPFLAGS += -D_GNU_SOURCE -DFI_VERSION_STRING='"$(VERSION)"' -Iinclude -Iruntime -Idevice -Ijit -Icache -Ikernels -I$(BUILD)/gen
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -Wall -Wextra -Werror -fvisibility=hidden -fPIC -pthread $(SAN_FLAGS)
LDFLAGS  += $(SAN_FLAGS)
# The only libraries linked; CUDA, NVRTC, HIP and hiprtc are dlopen'ed at first use.
SQLITE_LIB ?= -lsqlite3
LIBS     := $(SQLITE_LIB) -ldl -lpthread -lm

LIB_SRCS := $(wildcard runtime/*.c device/*.c jit/*.c cache/*.c)
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

.PHONY: all deps pydeps run test test-compile-all test-asan gpu-test decode-stage install clean

# TVM-FFI exports (ffi/): $(BUILD)/libfi_runtime_tvm.so, built when the apache-tvm-ffi headers
# are found: TVM_FFI_INCLUDE (with TVM_FFI_LIBDIR for libtvm_ffi.so) if set, else the include/
# and lib/ folders of the tvm_ffi package that TVM_FFI_PYTHON finds (the test venv's python,
# $(BUILD)/pyvenv, else python3).
PY_VENV := $(BUILD)/pyvenv
TVM_FFI_PYTHON ?= $(firstword $(wildcard $(PY_VENV)/bin/python) python3)
TVM_FFI_DIR := $(shell $(TVM_FFI_PYTHON) -c 'import importlib.util as u, os; s = u.find_spec("tvm_ffi"); print(os.path.dirname(s.origin) if s else "")' 2>/dev/null)
TVM_FFI_INCLUDE ?= $(if $(TVM_FFI_DIR),$(TVM_FFI_DIR)/include)
TVM_FFI_LIBDIR ?= $(if $(TVM_FFI_DIR),$(TVM_FFI_DIR)/lib)
TVM_LIB := $(if $(wildcard $(TVM_FFI_INCLUDE)/tvm/ffi/c_api.h),$(BUILD)/libfi_runtime_tvm.so $(BUILD)/libfi_runtime_tvm_flashinfer.so)

all: $(BUILD)/libfi_runtime.so $(BUILD)/fi-cache $(BUILD)/fi-bench $(BUILD)/fi-example $(TVM_LIB)

# Installs missing Debian packages (apt-get); a no-op once they are there.
deps:
	@tools/install-deps.sh

# The main job on the default cache (~/.cache/fi_runtime/kernels.db or $$FI_CACHE_PATH):
# build, prewarm the kernels one serving step of a model needs (RUN_PRESET, for the
# H100/H200's sm_90; fi-cache prewarm --preset list names the others; RUN_PRESET=--all
# compiles everything), show the cache, and on a machine with a CUDA GPU run that step's
# kernels through dlopen (fi-example); without one it says why it skipped.
RUN_ARCH ?= sm_90
RUN_PRESET ?= llama3-8b
run: deps
	$(MAKE) all
	$(BUILD)/fi-cache prewarm --arch $(RUN_ARCH) $(if $(filter --all,$(RUN_PRESET)),--all,--preset $(RUN_PRESET))
	$(BUILD)/fi-cache stats
	$(BUILD)/fi-example $(CURDIR)/$(BUILD)/libfi_runtime.so

$(BUILD)/obj/%.o: %.c $(wildcard include/*.h runtime/*.h device/*.h jit/*.h cache/*.h kernels/*.h)
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

$(BUILD)/libfi_runtime.so: $(LIB_OBJS) include/fi_runtime.map
	$(CC) -shared $(LDFLAGS) -Wl,--version-script=include/fi_runtime.map -Wl,-soname,libfi_runtime.so.0 \
	  -o $@ $(LIB_OBJS) $(LIBS)
	ln -sf libfi_runtime.so $(BUILD)/libfi_runtime.so.0
$(BUILD)/libfi_internal.a: $(LIB_OBJS)
	rm -f $@ && ar rcs $@ $^

CACHE_TOOL_SRCS := $(wildcard tools/fi_cache*.c)
$(BUILD)/fi-cache: $(CACHE_TOOL_SRCS) tools/fi_cache.h include/fi_runtime.h include/fi_admin.h $(BUILD)/libfi_runtime.so
	$(CC) $(CPPFLAGS) $(CFLAGS) $(CACHE_TOOL_SRCS) -o $@ $(LDFLAGS) -L$(BUILD) -l:libfi_runtime.so -Wl,-rpath,'$$ORIGIN' -lpthread -lm
BENCH_SRCS := tools/fi_bench.c $(wildcard tools/bench_*.c)
$(BUILD)/fi-bench: $(BENCH_SRCS) tools/bench.h tools/fi_cuda_min.h include/fi_runtime.h include/fi_admin.h $(BUILD)/libfi_runtime.so
	$(CC) $(CPPFLAGS) -Itools $(CFLAGS) $(BENCH_SRCS) -o $@ $(LDFLAGS) -L$(BUILD) -l:libfi_runtime.so -Wl,-rpath,'$$ORIGIN' -ldl -lpthread -lm

FFI_SRCS := $(wildcard ffi/*.c)
$(BUILD)/libfi_runtime_tvm.so: $(FFI_SRCS) $(wildcard ffi/*.h) ffi/fi_tvm.map include/fi_runtime.h $(BUILD)/libfi_runtime.so
	$(CC) -D_GNU_SOURCE -Iinclude -I$(TVM_FFI_INCLUDE) $(CFLAGS) -shared $(FFI_SRCS) -o $@ $(LDFLAGS) \
	  -Wl,--version-script=ffi/fi_tvm.map -Wl,--no-undefined -L$(BUILD) -l:libfi_runtime.so \
	  -L$(TVM_FFI_LIBDIR) -ltvm_ffi -Wl,-rpath,'$$ORIGIN' -lpthread

# The functions TVM's FlashInfer attention backend calls, with FlashInfer's names and argument
# orders (ffi/fa/fi_tvm_fa.c): a library of their own, as the names clash with the exports above.
$(BUILD)/libfi_runtime_tvm_flashinfer.so: ffi/fa/fi_tvm_fa.c ffi/fi_tvm_args.c $(wildcard ffi/*.h) ffi/fi_tvm.map include/fi_runtime.h $(BUILD)/libfi_runtime.so
	$(CC) -D_GNU_SOURCE -Iinclude -Iffi -I$(TVM_FFI_INCLUDE) $(CFLAGS) -shared ffi/fa/fi_tvm_fa.c ffi/fi_tvm_args.c -o $@ \
	  $(LDFLAGS) -Wl,--version-script=ffi/fi_tvm.map -Wl,--no-undefined -L$(BUILD) -l:libfi_runtime.so \
	  -L$(TVM_FFI_LIBDIR) -ltvm_ffi -Wl,-rpath,'$$ORIGIN' -lpthread -lm

EXAMPLE_SRCS := $(wildcard tools/fi_example*.c)
$(BUILD)/fi-example: $(EXAMPLE_SRCS) tools/fi_example.h tools/fi_example_step.h tools/fi_cuda_min.h include/fi_runtime.h
	$(CC) $(CPPFLAGS) -Itools $(CFLAGS) $(EXAMPLE_SRCS) -o $@ $(LDFLAGS) -ldl -lm

$(BUILD)/obj/tests/ft_main.o: tests/ft_main.c tests/ft.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@
$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/obj/tests/ft_main.o $(BUILD)/libfi_internal.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Itests $< $(BUILD)/obj/tests/ft_main.o $(BUILD)/libfi_internal.a -o $@ $(LDFLAGS) $(LIBS)
$(BUILD)/tests/gpu_%: tests/gpu/gpu_%.c tests/gpu/gpu_util.h tests/ft.h $(BUILD)/obj/tests/ft_main.o $(BUILD)/libfi_runtime.so
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Itests -Itools $< $(BUILD)/obj/tests/ft_main.o -o $@ $(LDFLAGS) \
	  -L$(BUILD) -l:libfi_runtime.so -Wl,-rpath,'$$ORIGIN/..' -lsqlite3 -ldl -lpthread -lm

$(BUILD)/tests/%: tests/%.cc tests/emu.h tests/emu_host.h tests/emu_prefill.h $(KERNELS) $(BUILD)/obj/runtime/rt_prefill_plan.o $(BUILD)/obj/runtime/rt_decode_plan.o
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -D_GNU_SOURCE -Ikernels -Iinclude -Iruntime -Idevice -Ijit -Icache $< \
	  $(BUILD)/obj/runtime/rt_prefill_plan.o $(BUILD)/obj/runtime/rt_decode_plan.o -o $@ -lm

# The Python tests' packages (apache-tvm-ffi, numpy) in the venv $(PY_VENV); a no-op once there.
pydeps:
	@python/install-test-deps.sh $(PY_VENV)

# The build part runs on every CPU unless the caller gave -j (a plain `make test` on the
# 2-core machine: about 100 s of compiling one file at a time, half of that in parallel).
test: deps pydeps
	$(MAKE) $(if $(findstring -j,$(MAKEFLAGS)),,-j$$(nproc)) all $(TEST_BINS)
	FI_BUILD=$(BUILD) tests/run_tests.sh $(SLOW_TESTS) $(filter-out $(SLOW_TESTS),$(TEST_BINS) $(TEST_SCRIPTS))

# Every registered configuration compiled for sm_90 (and every 7th for sm_80, 11th for
# sm_90a, 6th for gfx90a), one compiler thread per CPU: .ci/run's compile matrix.
test-compile-all: deps
	$(MAKE) all $(BUILD)/tests/test_compile
	FI_TEST_COMPILE=all FI_BUILD=$(BUILD) tests/run_tests.sh $(BUILD)/tests/test_compile

# hiprtc 5.2 (libamdhip64) trips ASan at thread exit unless it keeps its own
# signal stack, and leaks a few bytes of its own: both are outside our code.
# test_compile compiles one configuration an op and arch here (FI_TEST_COMPILE=first).
test-asan:
	ASAN_OPTIONS=use_sigaltstack=0:detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  FI_TEST_COMPILE=first $(MAKE) BUILD=build-asan SAN=1 test

# Every GPU test binary, then prefill four more times under tuning overrides (mma.sync
# alone; the wgmma kernel's 2x128 shape; a 3-block persistent grid, so each block loops
# over many work units; the producer without ping-pong) and sampling with top-p's exact
# membership test: separate processes side by side on the GPU (tests/gpu/run_gpu_tests.sh
# --list names them; GPU_TEST_JOBS=1 runs them one at a time).
gpu-test: all $(GPU_BINS) $(BUILD)/tests/probe_store
	FI_BUILD=$(BUILD) FT_LOGDIR=$(BUILD)/gpu-logs tests/gpu/run_gpu_tests.sh $(if $(GPU_TEST_JOBS),-j $(GPU_TEST_JOBS))

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 0755 $(BUILD)/libfi_runtime.so $(DESTDIR)$(PREFIX)/lib/libfi_runtime.so.$(VERSION)
	ln -sf libfi_runtime.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libfi_runtime.so.0
	ln -sf libfi_runtime.so.0 $(DESTDIR)$(PREFIX)/lib/libfi_runtime.so
	install -m 0644 include/fi_runtime.h include/fi_admin.h $(DESTDIR)$(PREFIX)/include/
	install -m 0755 $(BUILD)/fi-cache $(BUILD)/fi-bench $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' fi_runtime.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/fi_runtime.pc

clean:
	rm -rf build build-asan

include lab/lab.mk
