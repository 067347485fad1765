"""``pdmux bench``: measure what SM partitions of one GPU really give, to calibrate the estimate.

A GEMM (the prefill probe) and a pure-read kernel (the decode probe) run alone on green contexts of
every split size, then together at each of SGLang's levels, built exactly as sgl-kernel builds them.
Modules:

- ``plan``: what a run does, in numbers (pure; ``--dry-run``);
- ``stats``: medians, spreads, S_SAT, monotone fits, co-run windows (pure);
- ``kernels``: the CUDA sources and their NVRTC compilation (cuda-python, no GPU needed);
- ``greenctx``: the driver probe (CUDA_DEVICE_MAX_CONNECTIONS set before cuInit) and the
  green-context partitions, with balanced work queues on 13.1+ drivers (cuda-python, needs a GPU);
- ``clocks``: SM and memory clocks through NVML (nvidia-ml-py, optional);
- ``runner``: the measurements behind a launch gate, the co-run overlap from ``%globaltimer``
  stamps (torch + cuda-python, needs a GPU);
- ``results``, ``plot``: the results as values, JSON, calibration and PNG (their tables are the CLI's,
  :mod:`pdmux_cli.cli.bench_tables`);
- ``replay_plan`` (pure), ``model_replay`` (torch), ``replay_results``: ``--model``, a model's layers replayed
  in SGLang's pdmux loop at each level, next to the estimate.

Nothing here imports torch, cuda-python, pynvml, numpy or matplotlib at module level.
"""

from __future__ import annotations

from .greenctx import probe_device

__all__ = ["probe_device"]
