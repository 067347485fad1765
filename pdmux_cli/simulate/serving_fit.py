"""Fit the serving terms to whole-server measurements: the search ``benchmarks/fit_serving.py`` runs on
the public runs, and ``pdmux calibrate --bench-serving`` on the user's own.

Three terms (:class:`pdmux_cli.costmodel.efficiency.ServingProfile`, ``CpuProfile.per_request_step_s``),
searched as ``make_setup`` options in ms, each on a grid (:data:`GRIDS`), one coordinate at a time from
:data:`START`, :data:`PASSES` times over (the public runs' fit a fourth first, :data:`PUBLIC_GRIDS`: the
host time per kernel of a MoE model's eager prefill, ``eager_launch_moe_ms``):

- ``admission_delay_ms``: TTFT's fixed part. Client-side timings cannot split it from the stream back
  (``first_token_delay_ms``: every token pays both alike), so the whole fixed delay goes on the
  admission side and ``first_token_delay_ms`` is held at 0;
- ``per_request_overhead_ms``: what every step spends per request in its batch beyond the kernels;
- ``admission_interval_ms``: the front end's time per request (bursts).

The objective (:func:`objective`): over the metric kinds measured (TTFT, ITL, TPOT, E2E, throughput), the
mean of ``median + p90 / 2`` of the absolute relative errors. Ties go to the smaller value. Pure Python,
deterministic; each trial replays every run (:func:`pdmux_cli.simulate.serving_accuracy.replay`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

from ..util.errors import InputError
from .serving_accuracy import METRICS, ServingRun, replay

#: The terms searched (``make_setup`` options, ms) and their grids.
GRIDS: dict[str, tuple[float, ...]] = {
    "admission_delay_ms": (0, 5, 10, 15, 20, 25, 30, 40, 50, 60, 80, 100),
    "per_request_overhead_ms": (0, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.07, 0.1, 0.13, 0.16, 0.2, 0.25),
    "admission_interval_ms": (0, 0.25, 0.5, 1, 1.5, 2, 3, 4, 6),
}

#: Where the search starts (ms).
START = {"admission_delay_ms": 20.0, "per_request_overhead_ms": 0.05, "admission_interval_ms": 0.0}

#: The public runs' search (``benchmarks/fit_serving.py``) fits one term more: the host time per kernel of
#: a MoE model's eager forward (``eager_launch_moe_ms``; ``CpuProfile.eager_launch_moe_s``; a dense model's is
#: measured, ``common.yaml``), which every shipped run of a MoE model shows (SGLang up to 0.5.6 prefilled
#: eagerly); a user's runs (``pdmux calibrate --bench-serving``, SGLang 0.5.23 replaying prefills from its
#: CUDA graph) keep ``serving.yaml``'s.
EAGER_GRID = (0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.1, 0.12)
PUBLIC_GRIDS: dict[str, tuple[float, ...]] = {"eager_launch_moe_ms": EAGER_GRID, **GRIDS}
PUBLIC_START = {"eager_launch_moe_ms": 0.0, **START}
#: The public fit's searches, kept best: the eager term searched first, and last (a coordinate search
#: can stop in a worse minimum depending on the order: 0.4's runs did with the eager term first).
PUBLIC_SEARCHES: tuple[dict[str, tuple[float, ...]], ...] = (PUBLIC_GRIDS,
                                                              {**GRIDS, "eager_launch_moe_ms": EAGER_GRID})


def fit_public(runs: Sequence[ServingRun], mapper: Callable | None = None) -> tuple[dict[str, float], Errors]:
    """:func:`fit_terms` over :data:`PUBLIC_SEARCHES` from :data:`PUBLIC_START`, the result with the lowest
    :func:`objective` (ties: the first)."""
    fits = [fit_terms(runs, grids=grids, start=PUBLIC_START, mapper=mapper) for grids in PUBLIC_SEARCHES]
    return min(fits, key=lambda fit: objective(fit[1]))

#: Held fixed: not identifiable from client-side timings (module docstring).
FIXED = {"first_token_delay_ms": 0.0}

#: Rounds over the coordinates.
PASSES = 2

#: Errors per metric kind: ``{"TTFT (median)": [0.05, ...], ...}`` (absolute relative errors).
Errors = dict[str, list[float]]


def run_errors(runs: Sequence[ServingRun], terms: dict[str, float],
               setup_options: dict | None = None) -> Errors:
    """Absolute relative errors per metric kind of ``runs`` replayed with ``terms`` (ms options; plus
    :data:`FIXED`); a run pdmux cannot simulate counts in no kind. ``setup_options``: more ``make_setup``
    options (a calibration, the KV dtype)."""
    out: Errors = {}
    for run in runs:
        try:
            pred = replay(run, {**FIXED, **terms, **(setup_options or {})})
        except InputError:
            continue
        for name, measured in run.metrics:
            value = pred.get(name, math.nan)
            if math.isfinite(value):
                out.setdefault(METRICS[name][0], []).append(abs(value - measured) / measured)
    return out


def run_residuals(runs: Sequence[ServingRun], terms: dict[str, float],
                  setup_options: dict | None = None) -> dict[str, list[float]]:
    """Signed residuals ``ln(measured / predicted)`` of ``runs`` replayed with ``terms`` (as
    :func:`run_errors`), per figure of :data:`pdmux_cli.costmodel.uncertainty.FIGURES` (a run's throughputs
    are one figure: the first measured counts): what a calibration keeps to narrow its intervals."""
    from ..costmodel.uncertainty import RUN_FIGURE

    out: dict[str, list[float]] = {}
    for run in runs:
        try:
            pred = replay(run, {**FIXED, **terms, **(setup_options or {})})
        except InputError:
            continue
        seen = set()
        for name, measured in run.metrics:
            figure, value = RUN_FIGURE[name], pred.get(name, math.nan)
            if figure not in seen and math.isfinite(value) and value > 0 and measured > 0:
                seen.add(figure)
                out.setdefault(figure, []).append(math.log(measured / value))
    return out


def objective(errors: Errors) -> float:
    """Mean over metric kinds of ``median + p90 / 2`` (nearest rank) of the errors; ``inf`` when none."""
    scores = []
    for values in errors.values():
        ordered = sorted(values)
        p90 = ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]
        scores.append(statistics.median(ordered) + p90 / 2)
    return sum(scores) / len(scores) if scores else math.inf


def summary(errors: Errors) -> dict[str, dict[str, float]]:
    """Points and median error per metric kind (for the files that record a fit)."""
    return {kind: {"points": len(v), "median_error": round(statistics.median(v), 4)}
            for kind, v in errors.items()}


def _task(args: tuple) -> Errors:
    runs, terms, options = args
    return run_errors(runs, terms, options)


def fit_terms(runs: Sequence[ServingRun], *, setup_options: dict | None = None,
              grids: dict[str, Sequence[float]] | None = None, start: dict[str, float] | None = None,
              mapper: Callable | None = None) -> tuple[dict[str, float], Errors]:
    """The coordinate search (module docstring) over ``runs``: ``(terms in ms, errors at them)``.
    ``mapper``: a ``map``-like callable to run a coordinate's trials in parallel (a process pool's
    ``map``), the builtin ``map`` by default. Raises :class:`InputError` when no run can be simulated."""
    grids = GRIDS if grids is None else grids
    best = dict(START if start is None else start)
    runs = list(runs)
    mapper = mapper or map
    best_errors = run_errors(runs, best, setup_options)
    if not best_errors:
        raise InputError("none of the serving runs could be simulated (the model does not fit the GPU?)")
    for _ in range(PASSES):
        for name, grid in grids.items():
            trials = [{**best, name: float(value)} for value in grid]
            results = list(mapper(_task, [(runs, t, setup_options) for t in trials]))
            scored = sorted(zip(trials, results), key=lambda tr: (objective(tr[1]), tr[0][name]))
            best, best_errors = scored[0]
    return best, best_errors


__all__ = ["EAGER_GRID", "FIXED", "GRIDS", "PASSES", "PUBLIC_GRIDS", "PUBLIC_SEARCHES", "PUBLIC_START",
           "START", "fit_public", "fit_terms", "objective", "run_errors", "run_residuals", "summary"]
