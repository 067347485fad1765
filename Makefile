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
	$(PYTHON) benchmarks/bench_event_speed.py --write

# The bench extra: bench-cu12 on a CUDA 12.x driver, bench on CUDA 13 (gpu_check.py --print-extra reads the
# driver's CUDA version with cuDriverGetVersion, else nvidia-smi); BENCH_EXTRA=... overrides it.
BENCH_EXTRA ?=

# The install is skipped where every package the check needs is already there (a GPU image with no
# registry to reach would otherwise spend minutes on pip's retries); a failed install does not stop the
# check, which then says what is missing. The check runs from the source tree.
GPU_CHECK_IMPORTS = import torch, cuda.bindings.driver, cuda.bindings.nvrtc, pynvml, typer, rich, yaml, pytest, hypothesis, numpy, matplotlib

gpu-check:  ## on a GPU machine: GPU tests plus a short bench of every level (< 5 min)
	$(PYTHON) -c "$(GPU_CHECK_IMPORTS)" 2>/dev/null || $(PYTHON) -m pip install --quiet -e ".[$(or $(strip $(BENCH_EXTRA)),$$($(PYTHON) benchmarks/gpu_check.py --print-extra)),test]" || echo "gpu-check: installing the bench's packages failed; checking with what is installed" >&2
	PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" $(PYTHON) benchmarks/gpu_check.py

lint:  ## ruff with the rules and line length pyproject.toml sets (ruff comes with the test extra)
	$(PYTHON) -m ruff check pdmux pdmux_cli tests benchmarks
