# pdmux: two commands set up and test a fresh checkout (see README.md).
PYTHON ?= python3

.PHONY: install test bench gpu-check lint

install:  ## install pdmux (editable) with what the test suite needs
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e ".[test]"

test:  ## the whole CPU test suite (GPU tests are skipped without a GPU)
	$(PYTHON) -m pytest -q

bench:  ## speed benchmarks (figures go to benchmarks/RESULTS.md)
	$(PYTHON) benchmarks/bench_cli.py
	$(PYTHON) benchmarks/bench_simulate.py

BENCH_EXTRA ?= bench  # bench-cu12 on a CUDA 12.x driver

gpu-check:  ## on a GPU machine: GPU tests plus a short bench of every level (< 5 min)
	$(PYTHON) -m pip install --quiet -e ".[$(strip $(BENCH_EXTRA)),test]"
	$(PYTHON) benchmarks/gpu_check.py

lint:
	$(PYTHON) -m ruff check pdmux_cli tests benchmarks
