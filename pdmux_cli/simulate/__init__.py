"""``pdmux simulate``: replay request traces through PD multiplexing and SGLang's other schedules.

- :mod:`.traces`: Azure / Mooncake / BurstGPT parsers, synthetic Poisson arrivals, retiming.
- :mod:`.engine`: the simulated SGLang server (settings, KV pool, decode batch, admission, retraction,
  raw records).
- :mod:`.schedulers`: SGLang's default loop (chunked, mixed-chunk, prefill-first) and the pdmux loop
  (modelling choices and the SGLang functions they follow in its docstring).
- :mod:`.runner`: :func:`simulate` one policy over a trace; :func:`run_scenario`, the chapter's case.
- :mod:`.metrics`: TTFT / ITL / TPOT / E2E percentiles, SLO attainment, goodput, busy share.
- :mod:`.tune`: search pdmux YAML knobs for the best SLO attainment on a trace.
- :mod:`.report`: tables, JSON, per-request CSV; :mod:`.plot`: CDF plots (matplotlib, lazily).

Pure Python (stdlib), deterministic for a seed; nothing here prints or exits.
"""

from __future__ import annotations

from .engine import RunResult, Setup, make_setup
from .metrics import PolicyMetrics, summarize
from .runner import ScenarioOutcome, run_scenario, simulate
from .schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy
from .traces import Trace, load_trace, reshape, synthetic_trace

__all__ = [
    "ChunkedPolicy", "MixedChunkPolicy", "PdmuxPolicy", "PolicyMetrics", "PrefillFirstPolicy", "RunResult",
    "ScenarioOutcome", "Setup", "Trace", "load_trace", "make_setup", "reshape", "run_scenario", "simulate",
    "summarize", "synthetic_trace",
]
