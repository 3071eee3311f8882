# Benchmarks: see docs/performance.md. `make bench` runs every mode once against a fresh nsqpy-d;
# pass options through BENCH_ARGS, e.g. make bench BENCH_ARGS="--repeat 3 --json bench.json".
PYTHON ?= .venv/bin/python
BENCH_ARGS ?=

.PHONY: bench
bench:
	$(PYTHON) -m bench all $(BENCH_ARGS)
