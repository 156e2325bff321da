# Thin wrapper over CMake. `make` builds (Release), `make test` runs every test,
# `make demo` runs the main job, `make bench` the benchmarks, `make install PREFIX=...`.
BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build test demo bench install clean asan fuzz fuzz-build fuzz-corpus format format-check

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	./$(BUILD)/attn demo

bench: build
	./$(BUILD)/attn bench peak
	./$(BUILD)/attn bench gemm --m 1024,2048 --threads 1,2
	./$(BUILD)/attn bench attention --impl flash --n 1024,2048,4096 --d 64,128 --threads 1,2
	./$(BUILD)/attn bench attention --impl flash --n 1024,2048,4096 --d 64,128 --threads 1,2 --causal --backward
	./$(BUILD)/attn bench attention --impl sdpa --n 512 --d 64 --threads 2

# One Markdown report of this CPU against #14's targets (bench/cpu_report.py; quiet machine).
bench-report: build
	python3 bench/cpu_report.py --attn ./$(BUILD)/attn --out attn-report-$$(hostname).md $(if $(SITTINGS),--sittings $(SITTINGS))

install: build
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX)
	cmake --install $(BUILD)

# The suite again under AddressSanitizer + UndefinedBehaviorSanitizer (the install test builds
# unsanitized programs against the library, so it runs only in the plain build).
asan:
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DATTN_SANITIZE=ON $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS) -E install_examples

# libFuzzer harnesses (tests/fuzz, docs/fuzzing.md): clang, ASan + UBSan, each run FUZZ_SECONDS on a
# scratch copy of its seed corpus; FUZZ_TARGETS picks some (e.g. "json image"). No OpenMP: the
# parsers are serial and clang's libomp is not needed. Warnings are not errors here, as the
# harness build uses another compiler than the one the code is checked with.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz-build:
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DATTN_FUZZ=ON \
	  -DATTN_BUILD_TESTS=OFF -DATTN_OPENMP=OFF -DATTN_WITH_MPI=OFF $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS) --target fuzz_all fuzz_corpus_gen

fuzz: fuzz-build
	tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Rewrite the committed seed corpus (tests/fuzz/corpus_gen.c); regression inputs found by fuzzing
# are added by hand next to the generated files and kept.
fuzz-corpus: fuzz-build
	mkdir -p $(addprefix tests/fuzz/corpus/,safetensors json config checkpoint image)
	./build-fuzz/tests/fuzz/fuzz_corpus_gen tests/fuzz/corpus

# The C style (.clang-format, clang-format 14): `make format` rewrites every tracked C file,
# `make format-check` (CI) fails naming the files that differ.
CLANG_FORMAT ?= clang-format
C_FILES = $(shell git ls-files '*.c' '*.h' 2>/dev/null)
format:
	$(CLANG_FORMAT) -i $(C_FILES)

format-check:
	@bad=$$(for f in $(C_FILES); do $(CLANG_FORMAT) --dry-run --Werror "$$f" >/dev/null 2>&1 || echo "$$f"; done); \
	if [ -n "$$bad" ]; then echo "format-check: not as .clang-format lays them out (make format):"; echo "$$bad"; exit 1; fi; \
	echo "format-check: $(words $(C_FILES)) C files as .clang-format lays them out"

clean:
	rm -rf $(BUILD) build-asan build-fuzz
