# A thin wrapper over CMake: `make run` and `make test` each work alone on a fresh clone.
BUILD ?= build
JOBS  ?= $(shell nproc)
MAKEFLAGS += --no-print-directory

.PHONY: all deps configure build run test test-sanitize bench mutate clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Trains models/mlp.net as written (Fashion-MNIST, 10 epochs); builds only cgc itself.
run: configure
	@cmake --build $(BUILD) -j $(JOBS) --target cgc
	$(BUILD)/cgc models/mlp.net

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The suite again, cgc and the tests built with AddressSanitizer (leaks included) and
# UndefinedBehaviorSanitizer, any report fatal (CMake option CGC_SANITIZE, in
# build-sanitize/); CI runs it after `make test`. The emulation tests build their kernels
# with ASan too and run a selection of their cases (tests/emu/emu.cmake). Left out: the
# fuzzing, which `make test` runs under sanitizers of its own.
test-sanitize: deps
	@cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCGC_SANITIZE=ON >/dev/null
	@cmake --build build-sanitize -j $(JOBS)
	cd build-sanitize && ctest --output-on-failure -j $(JOBS) -E '^fuzz_short$$'

# The CPU benchmark of BENCHMARKS.md: one epoch of models/mlp.net per precision (not a test).
bench: configure
	@cmake --build $(BUILD) -j $(JOBS) --target cgc
	scripts/bench_cpu.sh

# Mutation testing (scripts/mutate.py, tests/mutate/mutants.txt): plants each catalogued
# bug in a scratch copy (build-mutate/) and runs the tests meant to catch it; long, and
# not part of `make test`. MUTANTS="id ..." runs some of them.
mutate: deps
	scripts/mutate.py $(if $(MUTANTS),-k $(MUTANTS))

clean:
	rm -rf $(BUILD)
