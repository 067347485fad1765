# pdmux: two commands set up and test a fresh checkout (see README.md).
PYTHON ?= python3

.PHONY: install test bench gpu-check lint

install:  ## install pdmux (editable) with what the test suite needs
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e ".[test]"

test:  ## the whole CPU test suite (GPU tests are skipped without a GPU)
	$(PYTHON) -m pytest -q

bench:  ## speed benchmarks; rewrites their sections of benchmarks/RESULTS.md (needs ../shared beside the checkout)
	$(PYTHON) benchmarks/bench_cli.py --write
	$(PYTHON) benchmarks/bench_simulate.py --write
	$(PYTHON) benchmarks/bench_calibrate.py --write
	$(PYTHON) benchmarks/bench_capacity.py --write

BENCH_EXTRA ?= bench  # bench-cu12 on a CUDA 12.x driver

# The install is skipped where every package the check needs is already there (a GPU image with no
# registry to reach would otherwise spend minutes on pip's retries); the check runs from the source tree.
GPU_CHECK_IMPORTS = import torch, cuda.bindings.driver, cuda.bindings.nvrtc, typer, rich, yaml, pytest, hypothesis, numpy, matplotlib

gpu-check:  ## on a GPU machine: GPU tests plus a short bench of every level (< 5 min)
	$(PYTHON) -c "$(GPU_CHECK_IMPORTS)" 2>/dev/null || $(PYTHON) -m pip install --quiet -e ".[$(strip $(BENCH_EXTRA)),test]"
	PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" $(PYTHON) benchmarks/gpu_check.py

lint:
	$(PYTHON) -m ruff check pdmux_cli tests benchmarks
