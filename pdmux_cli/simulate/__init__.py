"""``pdmux simulate``: replay request traces through PD multiplexing and SGLang's other schedules.

- :mod:`.traces`: Azure / Mooncake / BurstGPT parsers (streamed, gzip too), synthetic Poisson arrivals,
  retiming; :mod:`.columns`: the compact columns a trace is kept in.
- :mod:`.engine`: the simulated SGLang server (settings, KV pool, decode batch, admission, retraction,
  raw records or a streamed run's window).
- :mod:`.policies`: the typed contracts (the :class:`~.policies.Policy` protocol every schedule meets,
  one server's :class:`~.policies.ServerOutcome`, a policy's :class:`~.policies.Deployment`).
- :mod:`.schedulers`: SGLang's default loop (chunked, mixed-chunk, prefill-first) and the pdmux loop
  (modelling choices and the SGLang functions they follow in its docstring), and their policies.
- :mod:`.servers`: one server or ``dp`` replicas of it behind a router, one code path;
  :mod:`.cluster`: PD disaggregation (X prefill and Y decode instances, the KV link between them).
- :mod:`.runner`: :func:`simulate` one policy over a trace (recorded, or streamed into a
  :class:`~.fold.Fold`), :func:`simulate_metrics` (streamed and summarized); :func:`run_scenario`, the
  chapter's case.
- :mod:`.fold`: per-request results folded as requests finish; :mod:`.metrics`: TTFT / ITL / TPOT / E2E
  percentiles, SLO attainment, goodput, busy share.
- :mod:`.tune`: search pdmux YAML knobs for the best SLO attainment on a trace; :mod:`.executors`: where
  a sweep's simulations run (here, local processes, a Ray cluster).
- :mod:`.report`: tables, JSON, per-request CSV; :mod:`.plot`: CDF plots (matplotlib, lazily).

Pure Python (stdlib), deterministic for a seed; nothing here prints or exits.
"""

from __future__ import annotations

from .engine import RunResult, Setup, make_setup
from .metrics import PolicyMetrics, summarize
from .runner import ScenarioOutcome, run_scenario, simulate, simulate_metrics
from .schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy
from .traces import Trace, load_trace, reshape, synthetic_trace

__all__ = [
    "ChunkedPolicy", "MixedChunkPolicy", "PdmuxPolicy", "PolicyMetrics", "PrefillFirstPolicy", "RunResult",
    "ScenarioOutcome", "Setup", "Trace", "load_trace", "make_setup", "reshape", "run_scenario", "simulate",
    "simulate_metrics", "summarize", "synthetic_trace",
]
