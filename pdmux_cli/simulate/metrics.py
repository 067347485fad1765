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
from dataclasses import dataclass, field

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


def _summary(sorted_values: list[float]) -> dict[str, float]:
    out = {f"p{q}": nearest_rank(sorted_values, q) for q in PERCENTILES}
    out["max"] = sorted_values[-1] if sorted_values else math.nan
    return out


@dataclass
class PolicyMetrics:
    """What :func:`summarize` computes for one run. Latency dicts: ``p50``, ``p90``, ``p99``, ``max``
    in ms (``nan`` when there is no sample). Per-request lists (trace requests only, ``nan`` when
    not applicable): ``ttft_ms``, ``itl_p99_ms``, ``itl_max_ms``, ``tpot_ms``, ``e2e_ms``, ``met_slo``.
    ``itl_cdf``: ``(values_ms ascending, cumulative share)`` of all ITLs, thinned to <= 2000 points,
    for plots. ``kv_pool_tokens``: the KV pool simulated. ``crashed_at_s``: when a simulated SGLang
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
    per_request: dict[str, list] = field(repr=False, default_factory=dict)
    itl_cdf: tuple[list[float], list[float]] = field(repr=False, default=((), ()))
    notes: list[str] = field(default_factory=list)
    group_time_share: list[tuple[tuple[int, int], float]] | None = None
    counters: dict = field(default_factory=dict)
    kv_pool_tokens: int = 0
    crashed_at_s: float | None = None
    prefix_cache_hit_rate: float | None = None
    gpus: int = 1
    layout: str = "1 GPU"
    router: str = ""


def summarize(result: RunResult, slo_ttft_ms: float, slo_itl_ms: float) -> PolicyMetrics:
    """Latency percentiles, SLO attainment, goodput and busy share of one run (module docstring).

    ``slo_ttft_ms``, ``slo_itl_ms``: the SLOs in ms (> 0). Cost: O(requests + decode steps) plus
    sorting; per-request ITL lists are sliced from the step gaps, sorted only for requests with more
    than 100 ITLs whose maximum misses the SLO.
    """
    n = result.num_trace_requests
    ends = result.step_end_s
    first_tok = result.first_token_s
    first_step = result.first_step
    steps = result.decode_steps
    arrival = result.arrival_s
    slo_ttft_s, slo_itl_s = slo_ttft_ms / 1e3, slo_itl_ms / 1e3
    delay = result.output_delay_s

    # arrays, not lists: 8 bytes a step instead of ~32 (a run may take millions of steps)
    gaps = array("d", (b - a for a, b in zip(itertools.chain((0.0,), ends), ends)))
    cont = array("q", [0]) * (len(ends) + 1)  # difference array: requests continuing into each step

    ttft, itl_p99, itl_max, tpot, e2e, met_flags = ([math.nan] * n for _ in range(6))
    first_gaps: list[float] = []
    met = 0
    completed = 0
    last = result.arrival_s[0] if n else 0.0
    stints = result.stints
    unfinished = result.unfinished
    rejected = set(result.rejected)
    for rid in range(n):
        ft = first_tok[rid]
        if math.isnan(ft) or rid in unfinished:  # rejected, or cut short by a crash
            met_flags[rid] = False
            continue
        completed += 1
        a = arrival[rid] - delay  # tokens reach the client `delay` after their step: TTFT and E2E grow by it
        t1 = ft - a
        ttft[rid] = t1 * 1e3
        r = steps[rid]
        ok = t1 <= slo_ttft_s
        if rid in stints:  # retracted: its tokens come in several runs
            token_gaps, finish = _stint_gaps(stints[rid], ends, cont)
            first_gaps.extend(token_gaps[1])
            values = sorted(token_gaps[0] + token_gaps[1])
            if values:
                p99 = values[math.ceil(0.99 * len(values) - 1e-9) - 1]
                itl_p99[rid], itl_max[rid] = p99 * 1e3, values[-1] * 1e3
                tpot[rid] = (finish - ft) / len(values) * 1e3
                ok = ok and p99 <= slo_itl_s
        elif r:
            s0 = first_step[rid]
            g0 = ends[s0] - ft
            first_gaps.append(g0)
            finish = ends[s0 + r - 1]
            if r > 1:
                cont[s0 + 1] += 1
                cont[s0 + r] -= 1
                seg = gaps[s0 + 1:s0 + r]
                mx = max(seg)
                mx = max(mx, g0)
            else:
                seg = None
                mx = g0
            rank = math.ceil(0.99 * r - 1e-9)  # nearest rank of the p99 among r ITLs
            if rank >= r:
                p99 = mx
            else:
                values = seg.tolist()
                values.append(g0)
                values.sort()
                p99 = values[rank - 1]
            itl_p99[rid] = p99 * 1e3
            itl_max[rid] = mx * 1e3
            tpot[rid] = (finish - ft) / r * 1e3
            ok = ok and p99 <= slo_itl_s
        else:
            finish = ft
        last = max(last, finish)
        e2e[rid] = (finish - a) * 1e3
        met_flags[rid] = ok
        if ok:
            met += 1

    # all-token ITL distribution: step gaps weighted by continuing requests, plus first gaps
    gap_s, weight = array("d"), array("q")
    for g, w in zip(gaps, itertools.accumulate(cont[:-1])):
        if w:
            gap_s.append(g)
            weight.append(w)
    gap_s.extend(first_gaps)
    weight.extend(itertools.repeat(1, len(first_gaps)))
    order = sorted(range(len(gap_s)), key=gap_s.__getitem__)  # ints, not (gap, weight) tuples: less memory
    values = array("d", (gap_s[i] * 1e3 for i in order))
    cum = array("q", itertools.accumulate(weight[i] for i in order))
    del order, gap_s, weight
    itl = {f"p{q}": weighted_nearest_rank(values, [], q, cum) for q in PERCENTILES}
    itl["max"] = values[-1] if values else math.nan

    span = last + delay - (arrival[0] if n else 0.0)
    busy = 1.0 - result.idle_s / span if span > 0 else 0.0
    valid = [x for x in ttft if not math.isnan(x)]
    group_share = None
    if result.group_time_s is not None and result.groups is not None:
        total_time = sum(result.group_time_s) or 1.0
        group_share = [(tuple(g), t / total_time) for g, t in zip(result.groups, result.group_time_s)]
    return PolicyMetrics(
        policy=result.policy, kind=result.kind, requests=n, completed=completed, rejected=len(result.rejected),
        ttft_ms=_summary(sorted(valid)),
        itl_ms=itl,
        tpot_ms=_summary(sorted(x for x in tpot if not math.isnan(x))),
        e2e_ms=_summary(sorted(x for x in e2e if not math.isnan(x))),
        slo_ttft_ms=slo_ttft_ms, slo_itl_ms=slo_itl_ms, met=met,
        slo_attainment=met / n if n else 0.0,
        goodput_rps=met / span if span > 0 else 0.0,
        span_s=span, gpu_busy_share=max(0.0, min(1.0, busy)), decode_steps=len(ends),
        per_request={"ttft_ms": ttft, "itl_p99_ms": itl_p99, "itl_max_ms": itl_max, "tpot_ms": tpot,
                     "e2e_ms": e2e, "met_slo": met_flags,
                     "rejected": [rid in rejected for rid in range(n)],
                     "server": list(result.server[:n]), "prefill_server": list(result.prefill_server[:n])},
        itl_cdf=_thin_cdf(values, [], cumulative=cum),
        notes=list(result.notes), group_time_share=group_share, counters=dict(result.counters),
        kv_pool_tokens=result.kv_pool_tokens, crashed_at_s=result.crashed_at_s,
        prefix_cache_hit_rate=_hit_rate(result.counters), gpus=result.gpus, layout=result.layout,
        router=result.router,
    )


def _hit_rate(counters: dict) -> float | None:
    """Cached / prompt tokens of first admissions from a run's counters; ``None`` without a cache, 0
    when nothing was admitted."""
    if "prefix_cache_prompt_tokens" not in counters:
        return None
    prompt = counters["prefix_cache_prompt_tokens"]
    return counters["prefix_cache_hit_tokens"] / prompt if prompt else 0.0


def _stint_gaps(runs: list[tuple[float, int, int]], ends, cont) -> tuple[tuple[list[float], list[float]], float]:
    """A retracted request's ITLs: ``((gaps inside decode runs, gaps that start a run), finish time)``.
    A run starts with a token from a (re-)prefill at ``token_s``; the gap before it is from the
    previous run's last token. Decode steps inside runs are added to ``cont`` (the all-token
    distribution's difference array) as for other requests."""
    inside: list[float] = []
    starting: list[float] = []
    last = None
    for token_s, first, steps in runs:
        if last is not None:
            starting.append(token_s - last)
        last = token_s
        if steps > 0:
            starting.append(ends[first] - token_s)
            if steps > 1:
                cont[first + 1] += 1
                cont[first + steps] -= 1
                inside.extend(ends[j] - ends[j - 1] for j in range(first + 1, first + steps))
            last = ends[first + steps - 1]
    return (inside, starting), last


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


def ttft_cdf(metrics: PolicyMetrics, points: int = 2000) -> tuple[list[float], list[float]]:
    """``(TTFT ms ascending, cumulative share)`` of a run's requests, at most ``points`` points."""
    values = sorted(x for x in metrics.per_request.get("ttft_ms", []) if not math.isnan(x))
    return _thin_cdf(values, [1.0] * len(values), points)


def ttft_quarters(metrics: PolicyMetrics) -> tuple[float, float]:
    """Median TTFT (ms) of the first and of the last quarter of the requests, in arrival order; a
    request that never got its first token counts as infinitely late. A last quarter waiting far longer
    than the first is the mark of a queue that grows: the trace's rate is more than the GPU serves.
    ``(nan, nan)`` with fewer than 4 requests."""
    ttft = [math.inf if math.isnan(x) else x for x in metrics.per_request.get("ttft_ms", [])]
    if len(ttft) < 4:
        return math.nan, math.nan
    quarter = len(ttft) // 4
    first, last = sorted(ttft[:quarter]), sorted(ttft[-quarter:])
    return first[(quarter - 1) // 2], last[(quarter - 1) // 2]
