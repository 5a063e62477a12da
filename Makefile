# A thin wrapper over CMake: `make run` and `make test` each work alone on a fresh clone.
BUILD ?= build
JOBS  ?= $(shell nproc)
MAKEFLAGS += --no-print-directory

.PHONY: all deps configure build run test bench mutate clean

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

# CPU benchmark of README.md (not a test).
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
