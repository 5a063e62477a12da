# A thin wrapper over CMake: `make run` and `make test` each work alone on a fresh clone.
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: all deps build run test clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Trains models/mlp.net as written (Fashion-MNIST, 10 epochs).
run: build
	$(BUILD)/cgc models/mlp.net

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
