"""Latency metrics of a run: TTFT, ITL, TPOT, end-to-end; SLO attainment, goodput, GPU busy share.

Definitions (times in ms in the output):

- **TTFT**: first token time minus arrival. **E2E**: last token time minus arrival. Both as the client
  sees them: a token reaches it ``RunResult.output_delay_s`` after the step that produced it (the
  serving profile's ``first_token_delay_s``), which does not change ITL.
  **TPOT**: ``(E2E - TTFT) / (output - 1)`` (requests with more than one output token).
- **ITL**: the gaps between a request's consecutive tokens: its first decode step's end minus its
  first-token time, then the gaps between the ends of the decode steps it took part in. The ITL
  percentiles are over *all tokens* of all requests: a decode step's gap is counted once per request
  that was in both it and the step before (computed from the step end times with weights, never
  expanded per token).
- **Percentiles** are nearest-rank: the smallest value with at least that share of samples at or
  below it (p99 of 100 samples is the largest; p50 of 4 is the 2nd).
- **Retracted requests** (SGLang sent them back to the queue when decode ran out of KV): their ITLs
  include the gap from their last token before the retraction to the token their re-prefill produces.
- **SLO**: a request meets it when ``TTFT <= slo_ttft`` and its own **p99 ITL** (nearest-rank over its
  ITLs, so its maximum when it has at most 100 of them) ``<= slo_itl``; requests with a single output
  token have no ITL and are judged on TTFT. Requests that never fit in KV memory miss it, and so do
  requests a simulated SGLang crash cut short.
  **Attainment** = meeting / all requests of the trace. **Goodput** = meeting / simulated span
  (requests/s), the span running from the first arrival to the last token.
- **GPU busy share** = 1 - (time with nothing to run) / span.
- **Prefix cache hit rate** = cached prompt tokens / prompt tokens over the trace requests' first
  admissions (SGLang's ``cache_hit_rate``, ``scheduler_components/metrics_reporter.py``, leaves
  re-prefills after a retraction out); ``None`` when no prefix cache was simulated (``--no-prefix-cache``,
  or a trace without ``hash_ids``).
- Requests of a scenario's initial decode batch (``RunResult.num_trace_requests`` onwards) are left
  out of every statistic.
"""

from __future__ import annotations

import bisect
import itertools
import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..multigpu.disaggregation import Layout
from ..util.errors import Finding
from .engine import RunResult

#: Percentiles reported for each latency.
PERCENTILES = (50, 90, 99)


def nearest_rank(sorted_values: list[float], q: float) -> float:
    """Nearest-rank ``q``-th percentile (0-100] of an ascending list; ``nan`` when empty."""
    n = len(sorted_values)
    if not n:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * n - 1e-9))
    return sorted_values[min(n, rank) - 1]


def weighted_nearest_rank(values: list[float], weights: list[float], q: float,
                          cumulative: list[float] | None = None) -> float:
    """Nearest-rank percentile of ``values`` (ascending) each counted ``weights`` times
    (``cumulative``: the running sum of ``weights``, if already computed)."""
    cum = cumulative if cumulative is not None else list(itertools.accumulate(weights))
    if not cum or cum[-1] <= 0:
        return math.nan
    i = bisect.bisect_left(cum, q / 100.0 * cum[-1] - 1e-9)
    return values[min(i, len(values) - 1)]


@dataclass
class PolicyMetrics:
    """What :func:`summarize` computes for one run. Latency dicts: ``p50``, ``p90``, ``p99``, ``max``
    in ms (``nan`` when there is no sample). Per-request lists (trace requests only, ``nan`` when
    not applicable): ``ttft_ms``, ``itl_p99_ms``, ``itl_max_ms``, ``tpot_ms``, ``e2e_ms``, ``met_slo``.
    ``itl_cdf``: ``(values_ms ascending, cumulative share)`` of all ITLs, thinned to <= 2000 points,
    for plots. ``columns``: the per-request results as compact columns
    (:class:`~pdmux_cli.simulate.fold.RequestColumns`; ``per_request`` builds its lists from them on
    first use). ``kv_pool_tokens``: the KV pool simulated. ``crashed_at_s``: when a simulated SGLang
    0.5.23 crash stopped the run (``None`` if it did not). ``prefix_cache_hit_rate``: share of prompt
    tokens found in the prefix cache (module docstring), ``None`` without one. ``gpus``, ``layout``,
    ``router``: the GPUs the policy ran on and how (:class:`~pdmux_cli.simulate.engine.RunResult`)."""

    policy: str
    kind: str
    requests: int
    completed: int
    rejected: int
    ttft_ms: dict[str, float]
    itl_ms: dict[str, float]
    tpot_ms: dict[str, float]
    e2e_ms: dict[str, float]
    slo_ttft_ms: float
    slo_itl_ms: float
    met: int
    slo_attainment: float
    goodput_rps: float
    span_s: float
    gpu_busy_share: float
    decode_steps: int
    per_request: Mapping[str, list] = field(repr=False, default_factory=dict)
    itl_cdf: tuple[list[float], list[float]] = field(repr=False, default=((), ()))
    notes: list[str] = field(default_factory=list)
    group_time_share: list[tuple[tuple[int, int], float]] | None = None
    counters: dict = field(default_factory=dict)
    kv_pool_tokens: int = 0
    crashed_at_s: float | None = None
    prefix_cache_hit_rate: float | None = None
    gpus: int = 1
    layout: Layout = field(default_factory=Layout)
    router: str = ""
    columns: Any = field(repr=False, default=None)
    output_tok_s: float = math.nan
    uncertainty: Any = None


def client_figures(m: PolicyMetrics, output_tokens: Sequence[int]) -> dict[str, float]:
    """The figures a bench_serving client reports of a run, as :mod:`pdmux_cli.costmodel.uncertainty` names
    them: ``ttft_ms_p50``, ``itl_ms_p50``, ``tpot_ms_p50``, ``e2e_ms_p50`` (ms), ``output_tok_s`` (output
    tokens of the completed requests over the span, tokens/s; ``output_tokens``: the trace's, per request),
    and ``in_flight`` (requests in flight on average: the sum of completed requests' end-to-end latencies
    over the span, Little's law). NaN where there is nothing to measure."""
    from .fold import DONE

    status = m.columns.status if m.columns is not None else b""
    done_tokens = sum(o for o, st in zip(output_tokens, status) if st == DONE)
    e2e_s = math.fsum(m.columns.valid("e2e_ms")) / 1e3 if m.columns is not None else math.nan
    span = m.span_s
    return {"ttft_ms_p50": m.ttft_ms["p50"], "itl_ms_p50": m.itl_ms["p50"], "tpot_ms_p50": m.tpot_ms["p50"],
            "e2e_ms_p50": m.e2e_ms["p50"],
            "output_tok_s": done_tokens / span if span > 0 and m.completed else math.nan,
            "in_flight": e2e_s / span if span > 0 else math.nan}


def summarize(result: RunResult, slo_ttft_ms: float, slo_itl_ms: float, *,
              itl_cdf: bool = True) -> PolicyMetrics:
    """Latency percentiles, SLO attainment, goodput and busy share of one run (module docstring).

    ``slo_ttft_ms``, ``slo_itl_ms``: the SLOs in ms (> 0). A streamed run (``result.fold``: a
    :class:`~pdmux_cli.simulate.fold.Fold` filled while it ran) is finished from its fold, whose SLOs
    must be these; a recorded one is replayed through a fold request by request, so both give the same
    figures. Cost: O(requests + decode steps); percentiles exact (:func:`~pdmux_cli.simulate.fold.
    percentiles`), the all-token ITL ones past :data:`~pdmux_cli.simulate.fold.EXACT_LIMIT` step gaps
    from a histogram (a note says so). ``itl_cdf``: ``False`` leaves :attr:`PolicyMetrics.itl_cdf` empty
    (a caller that draws no CDF: it is only for plots).
    """
    from .engine import StepEnds
    from .fold import UNFINISHED, Fold

    n = result.num_trace_requests
    fold = result.fold
    if fold is not None:
        if (fold.slo_ttft_ms, fold.slo_itl_ms) != (slo_ttft_ms, slo_itl_ms):
            raise ValueError("a streamed run is summarized with the SLOs it was folded with")
    else:
        fold = Fold(n, slo_ttft_ms, slo_itl_ms, servers=bool(result.server))
        fold.attach(result.arrival_s, result.output_delay_s)
        fold.reject(result.rejected)
        ends = StepEnds.window_of(result.step_end_s)
        first_tok, first_step, steps = result.first_token_s, result.first_step, result.decode_steps
        # one token a decode step unless a step is a speculative round (its steps are fewer than tokens)
        tokens = result.output_tokens if result.tokens_per_step != 1 else None
        stints = result.stints
        unfinished = result.unfinished
        for rid in range(n):
            ft = first_tok[rid]
            if math.isnan(ft) or rid in unfinished:  # rejected, or cut short by a crash
                continue
            fold.request(rid, ft, first_step[rid], steps[rid], ends, stints.get(rid),
                         tokens[rid] - 1 if tokens is not None else None)
        fold.finish_server(ends)
        if result.server:
            fold.columns.server = array("i", result.server[:n])
        if result.prefill_server:
            fold.columns.prefill_server = array("i", result.prefill_server[:n])
    return _metrics(result, fold, UNFINISHED, itl_cdf)


def _metrics(result: RunResult, fold, unfinished_status: int, itl_cdf: bool = True) -> PolicyMetrics:
    """:class:`PolicyMetrics` from a run's meta-data (counters, notes, idle time...) and its fold."""
    from .fold import PerRequest, percentiles

    n = result.num_trace_requests
    c = fold.columns
    status = c.status
    for rid in result.unfinished:
        if rid < n and not status[rid]:
            status[rid] = unfinished_status
    arrival = fold.arrival
    first = arrival[0] if n else 0.0
    last = first if fold.last is None else max(first, fold.last)
    delay = fold.delay
    span = last + delay - first
    busy = 1.0 - result.idle_s / span if span > 0 else 0.0
    group_share = None
    if result.group_time_s is not None and result.groups is not None:
        total_time = sum(result.group_time_s) or 1.0
        group_share = [(tuple(g), t / total_time) for g, t in zip(result.groups, result.group_time_s)]
    notes = list(result.notes)
    if fold.itl.approximate:
        from .fold import EXACT_LIMIT, RELATIVE_ERROR

        notes.append(Finding("simulate.itl_histogram", {"gaps": fold.itl.count, "exact_limit": EXACT_LIMIT,
                                                         "relative_error": RELATIVE_ERROR}))
    met = fold.met
    return PolicyMetrics(
        policy=result.policy, kind=result.kind, requests=n, completed=fold.completed,
        rejected=len(result.rejected), ttft_ms=percentiles(c.valid("ttft_ms")),
        itl_ms=fold.itl.summary(1e3),
        tpot_ms=percentiles(c.valid("tpot_ms")),
        e2e_ms=percentiles(c.valid("e2e_ms")),
        slo_ttft_ms=fold.slo_ttft_ms, slo_itl_ms=fold.slo_itl_ms, met=met,
        slo_attainment=met / n if n else 0.0,
        goodput_rps=met / span if span > 0 else 0.0,
        span_s=span, gpu_busy_share=max(0.0, min(1.0, busy)), decode_steps=fold.steps,
        per_request=PerRequest(c),
        itl_cdf=fold.itl.cdf(1e3) if itl_cdf else ((), ()),
        notes=notes, group_time_share=group_share, counters=dict(result.counters),
        kv_pool_tokens=result.kv_pool_tokens, crashed_at_s=result.crashed_at_s,
        prefix_cache_hit_rate=_hit_rate(result.counters), gpus=result.gpus, layout=result.layout,
        router=result.router, columns=c,
    )


def _hit_rate(counters: dict) -> float | None:
    """Cached / prompt tokens of first admissions from a run's counters; ``None`` without a cache, 0
    when nothing was admitted."""
    if "prefix_cache_prompt_tokens" not in counters:
        return None
    prompt = counters["prefix_cache_prompt_tokens"]
    return counters["prefix_cache_hit_tokens"] / prompt if prompt else 0.0


def _thin_cdf(values: list[float], weights: list[float], points: int = 2000,
              cumulative: list[float] | None = None) -> tuple[list[float], list[float]]:
    """``(values, cumulative share)`` of a weighted sample, at most about ``points`` points."""
    cum = cumulative if cumulative is not None else list(itertools.accumulate(weights))
    if not values or not cum or cum[-1] <= 0:
        return [], []
    total = float(cum[-1])
    stride = max(1, len(values) // points)
    idx = list(range(0, len(values), stride))
    if idx[-1] != len(values) - 1:
        idx.append(len(values) - 1)
    return [values[i] for i in idx], [cum[i] / total for i in idx]


def _ttft_column(metrics: PolicyMetrics):
    if metrics.columns is not None:
        return metrics.columns.ttft_ms
    return metrics.per_request.get("ttft_ms", [])


def ttft_cdf(metrics: PolicyMetrics, points: int = 2000) -> tuple[list[float], list[float]]:
    """``(TTFT ms ascending, cumulative share)`` of a run's requests, at most ``points`` points."""
    values = sorted(itertools.filterfalse(math.isnan, _ttft_column(metrics)))
    return _thin_cdf(values, [1.0] * len(values), points)


def ttft_quarters(metrics: PolicyMetrics) -> tuple[float, float]:
    """Median TTFT (ms) of the first and of the last quarter of the requests, in arrival order; a
    request that never got its first token counts as infinitely late. A last quarter waiting far longer
    than the first is the mark of a queue that grows: the trace's rate is more than the GPU serves.
    ``(nan, nan)`` with fewer than 4 requests."""
    ttft = _ttft_column(metrics)
    if len(ttft) < 4:
        return math.nan, math.nan
    quarter = len(ttft) // 4

    def median(part) -> float:
        return sorted(math.inf if math.isnan(x) else x for x in part)[(quarter - 1) // 2]

    return median(ttft[:quarter]), median(ttft[-quarter:])
