"""Statistics of the bench, pure Python: medians and spreads, S_SAT, monotone curve fit, co-run windows,
and the overlap of two streams' busy intervals.

No torch, numpy or cuda: the GPU runner feeds these functions plain lists of seconds and the CPU
tests feed them synthetic ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..util.errors import InputError

#: S_SAT is the smallest SM count whose read rate reaches this fraction of the whole GPU's.
S_SAT_FRACTION = 0.95


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between order statistics.

    Raises :class:`InputError` for an empty list or ``q`` outside 0-100.
    """
    if not values:
        raise InputError("percentile of no values")
    if not 0 <= q <= 100:
        raise InputError(f"percentile must be in 0-100, got {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    """The median (50th percentile) of ``values``."""
    return percentile(values, 50)


@dataclass(frozen=True)
class RateStats:
    """A rate measured over several timed runs (unit given by the caller: bytes/s or FLOP/s).

    ``median``, ``p10``, ``p90``, ``min``, ``max`` of the per-run rates; ``runs``: how many runs;
    ``median_s``: median seconds per launch (``None`` for rates not timed per launch).
    ``sm_clock_mhz`` / ``min_sm_clock_mhz`` / ``mem_clock_mhz``: the SM clock (median and lowest)
    and memory clock (median) NVML reported while the runs ran, MHz; ``None`` without NVML.
    """

    median: float
    p10: float
    p90: float
    min: float
    max: float
    runs: int
    median_s: float | None = None
    sm_clock_mhz: float | None = None
    min_sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None

    @classmethod
    def from_rates(cls, rates: Sequence[float], median_s: float | None = None,
                   clocks: Sequence[tuple[float, float]] = ()) -> RateStats:
        """Summarise per-run rates; ``clocks``: ``(SM MHz, memory MHz)`` samples taken during the runs.
        Raises :class:`InputError` when ``rates`` is empty."""
        if not rates:
            raise InputError("no timed runs to summarise")
        sm = [c[0] for c in clocks]
        mem = [c[1] for c in clocks]
        return cls(median(rates), percentile(rates, 10), percentile(rates, 90), min(rates), max(rates),
                   len(rates), median_s, median(sm) if sm else None, min(sm) if sm else None,
                   median(mem) if mem else None)

    @classmethod
    def from_times(cls, work: float, seconds: Sequence[float],
                   clocks: Sequence[tuple[float, float]] = ()) -> RateStats:
        """Rates ``work / t`` for per-launch times ``seconds`` (s); ``work`` in bytes or FLOPs;
        ``clocks`` as in :meth:`from_rates`.

        Raises :class:`InputError` for no times or a time <= 0 (a broken timer).
        """
        if any(t <= 0 for t in seconds):
            raise InputError(f"timed run of {min(seconds)} s: CUDA events gave a non-positive time")
        return cls.from_rates([work / t for t in seconds], median(seconds) if seconds else None, clocks)

    def to_dict(self, unit: str) -> dict[str, float | int | None]:
        """JSON form, the unit in each key (``median_bytes_per_s`` ...)."""
        return {
            f"median_{unit}": self.median, f"p10_{unit}": self.p10, f"p90_{unit}": self.p90,
            f"min_{unit}": self.min, f"max_{unit}": self.max, "runs": self.runs, "median_s": self.median_s,
            "sm_clock_mhz": self.sm_clock_mhz, "min_sm_clock_mhz": self.min_sm_clock_mhz,
            "mem_clock_mhz": self.mem_clock_mhz,
        }


def s_sat(points: Sequence[tuple[int, float]], full_rate: float, fraction: float = S_SAT_FRACTION) -> int:
    """Smallest SM count in ``points`` (``(sms, rate)``) whose rate reaches ``fraction * full_rate``.

    ``full_rate``: the whole GPU's rate (same unit). Returns the largest SM count in ``points``
    when none reaches it. Raises :class:`InputError` for no points or ``full_rate <= 0``.
    """
    if not points:
        raise InputError("S_SAT needs at least one measured point")
    if not full_rate > 0:
        raise InputError(f"S_SAT needs a positive whole-GPU rate, got {full_rate}")
    ordered = sorted(points)
    for sms, rate in ordered:
        if rate >= fraction * full_rate:
            return sms
    return ordered[-1][0]


def monotone_fit(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Least-squares non-decreasing fit of ``(x, y)`` points (pool-adjacent-violators).

    Points with the same ``x`` are averaged first; the result has strictly increasing ``x`` and
    non-decreasing ``y``, as ``calibration.yaml`` requires. Measurement noise (a rate dipping by a
    percent at a larger SM count) is pooled with its neighbours instead of rejected.
    Raises :class:`InputError` for no points.
    """
    if not points:
        raise InputError("cannot fit a curve to no points")
    by_x: dict[float, list[float]] = {}
    for x, y in points:
        by_x.setdefault(x, []).append(y)
    xs = sorted(by_x)
    # blocks of (sum of y, count, first index, last index)
    blocks: list[list[float]] = []
    for i, x in enumerate(xs):
        ys = by_x[x]
        blocks.append([sum(ys) / len(ys), 1.0, i, i])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            last = blocks.pop()
            blocks[-1][0] += last[0]
            blocks[-1][1] += last[1]
            blocks[-1][3] = last[3]
    fitted: list[tuple[float, float]] = []
    for total, count, first, last in blocks:
        for i in range(int(first), int(last) + 1):
            fitted.append((xs[i], total / count))
    return fitted


def overlap_end_ms(*stream_ends_ms: Sequence[float]) -> float:
    """End of the co-run window: the earliest of the streams' last completions (ms, common origin).

    Until then every stream still had work queued, so all of them were busy the whole window.
    Raises :class:`InputError` when a stream completed nothing.
    """
    if any(not ends for ends in stream_ends_ms):
        raise InputError("a co-run stream completed no work")
    return min(ends[-1] for ends in stream_ends_ms)


def overlap_rate(start_ms: float, ends_ms: Sequence[float], work_per_unit: float,
                 until_ms: float) -> tuple[float, int, float]:
    """Rate of one stream inside a co-run window.

    ``start_ms``: when the stream started (its own start event); ``ends_ms``: completion time of
    each unit of work, ascending (same origin, ms); ``work_per_unit``: bytes or FLOPs of one unit;
    ``until_ms``: the window end (:func:`overlap_end_ms`). Only units that completed by then count.
    Returns ``(rate per second, units counted, span in ms)``. Raises :class:`InputError` when no
    unit completed inside the window or the span is not positive.
    """
    done = [t for t in ends_ms if t <= until_ms + 1e-9]
    if not done:
        raise InputError("no unit of work completed inside the co-run window")
    span_ms = done[-1] - start_ms
    if span_ms <= 0:
        raise InputError(f"co-run span of {span_ms} ms: CUDA events out of order")
    return len(done) * work_per_unit / (span_ms / 1e3), len(done), span_ms


def merge_intervals(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Union of ``(start, end)`` intervals as sorted, disjoint intervals (empty and reversed ones dropped)."""
    merged: list[list[float]] = []
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def overlap_share(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float | None:
    """Share (0-1) of the co-run window during which both streams ran.

    ``a``, ``b``: each stream's busy intervals ``(start, end)`` on one clock (the GPU's
    ``%globaltimer``, ns): kernel launches, or units of launches between markers. The window runs
    from the later of the two first starts to the earlier of the two last ends (both streams had
    work queued throughout). Disjoint SMs do not guarantee concurrency (green-contexts.md): a
    share near 1 shows the kernels ran side by side, near 0 that the GPU took turns. Returns 0.0
    when one stream finished before the other began, ``None`` when a stream has no interval.
    """
    ua, ub = merge_intervals(a), merge_intervals(b)
    if not ua or not ub:
        return None
    start, end = max(ua[0][0], ub[0][0]), min(ua[-1][1], ub[-1][1])
    if end <= start:
        return 0.0
    both, i, j = 0.0, 0, 0
    while i < len(ua) and j < len(ub):
        lo = max(ua[i][0], ub[j][0], start)
        hi = min(ua[i][1], ub[j][1], end)
        if hi > lo:
            both += hi - lo
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return both / (end - start)
