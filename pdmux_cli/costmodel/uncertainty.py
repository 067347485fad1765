"""How sure a whole-server figure is: 80% intervals from the simulator's out-of-sample errors, and verdicts
that say "too close to call" when two policies' difference is inside the error of that difference.

**The residuals.** ``benchmarks/fit_serving.py`` replays every public SGLang serving run of
``profiles/measurements/serving/sglang_serving_runs.yaml`` with the serving terms fitted *without* the run's
source (leave-one-source-out, :func:`pdmux_cli.simulate.serving_accuracy.report`) and writes, per run and
figure, ``r = ln(measured / predicted)`` to ``profiles/efficiency/serving_residuals.yaml`` (with the in-sample
one, the run's source and server, and its regime: the client's loop, the load, the GPU family), and the runs
of ``sglang_serving_heldout.yaml`` (read by no fit, ``heldout``) with the shipped terms: their residuals are
out of sample by construction, and sources other than the fitted ones widen the sample to the spread of
servers pdmux has not seen. A run's throughput
metrics (output, total, input tokens/s, requests/s) are all ``tokens / duration`` over the same requests, so
they give one figure, ``output_tok_s``.

**An interval** for a predicted figure ``p`` is ``[p e^q_lo, p e^q_hi]`` with ``q_lo, q_hi`` the
split-conformal bounds of the residuals of that figure (:func:`conformal_bounds`: the
``floor((n + 1) a)``-th and ``ceil((n + 1)(1 - a))``-th of the ``n`` sorted residuals,
``a = (1 - coverage) / 2``; Vovk et al.,
*Algorithmic Learning in a Random World*, 2005; Lei et al., JASA 2018): about ``coverage`` of unseen runs
fall inside when they are like the ones measured. Residuals are taken from the figure's *cell*: the runs of
the same regime on the features the file chose for that figure (``splits``: the fit script keeps a split
where its cells' spreads differ and each holds at least ``min_cell`` runs), else all of the figure's. How
honest that is gets checked source by source: each held-out run's figures against intervals drawn without
its own source's residuals (``exclude_source``; :func:`pdmux_cli.simulate.serving_accuracy.coverage`).

**With a calibration** (``pdmux calibrate --bench-serving``: the serving terms fitted to the user's own
server) the server is no longer unknown: the residuals are the calibration fit's own on the user's runs
where it has enough for the coverage, else the public fit's in-sample residuals (the error left on runs
whose server the terms were fitted to). Either is narrower than the out-of-sample ones.

**A comparison** of two policies on the same server: their errors are correlated (the same GPU, model,
client, release line), so the error of their ratio is not the sum of two intervals. It is estimated from
pairs of public runs on one server (same source, GPU, model, TP, release line): ``d = r_i - r_j`` over
every ordered pair of the same figure; the true log ratio is the predicted one plus ``d``. The verdict is
"too close to call" when the ``coverage`` interval of the ratio holds 1, and otherwise carries the share of
pairs under which the predicted winner stays ahead (how sure it is). The pairs are not independent (a run
is in many), so that share is an empirical figure, not a guarantee.

Pure: the loader reads one shipped file (cached); nothing here prints or writes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..catalog.profile_files import efficiency_profiles_dir
from ..util.errors import InputError

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: The ``format`` of ``serving_residuals.yaml``.
FORMAT = "pdmux-serving-residuals/1"
#: The file, under ``profiles/efficiency/``.
RESIDUALS_FILE = "serving_residuals.yaml"

#: The share of unseen measurements an interval is meant to hold.
COVERAGE = 0.8

#: The figures that carry an interval (the keys of ``simulate --json``'s ``uncertainty``).
FIGURES = ("ttft_ms_p50", "itl_ms_p50", "tpot_ms_p50", "e2e_ms_p50", "output_tok_s")

#: A public run's metric (:data:`pdmux_cli.simulate.serving_accuracy.METRICS`) -> the figure its residual
#: belongs to (every throughput is tokens or requests over the same duration: one figure).
RUN_FIGURE = {"ttft_p50_ms": "ttft_ms_p50", "itl_p50_ms": "itl_ms_p50", "tpot_p50_ms": "tpot_ms_p50",
              "e2e_p50_ms": "e2e_ms_p50", "output_tok_s": "output_tok_s", "total_tok_s": "output_tok_s",
              "input_tok_s": "output_tok_s", "request_rps": "output_tok_s"}

#: A figure with too few measured residuals for an interval takes another's: a request's E2E is its TTFT plus
#: its decode, and in the public runs with an E2E median decode is most of it, so TPOT's error stands for
#: E2E's (the cell says ``borrowed_from``). The shipped residuals hold 73 E2E medians (2026-12-04), so
#: today it serves a calibration or a regime cell with too few.
BORROWED = {"e2e_ms_p50": "tpot_ms_p50"}

#: The regime features a figure's residuals may be split by.
FEATURES = ("loop", "load", "family")

#: The client's loop: ``open`` (arrivals at a rate: Poisson or a trace), ``closed`` (a fixed number of
#: streams, ``--max-concurrency``), ``burst`` (every request at once, no concurrency limit).
LOOPS = ("open", "closed", "burst")

#: The methods an :class:`Uncertainty` names (``method`` in the JSON).
METHOD_OUT_OF_SAMPLE = "conformal, leave-one-source-out residuals of public runs"
METHOD_CALIBRATION = "conformal, the calibration fit's residuals on the user's runs"
METHOD_IN_SAMPLE = "conformal, in-sample residuals of public runs (a calibrated server)"


def gpu_family(compute_capability: Sequence[int]) -> str:
    """The GPU's architecture family from its compute capability: ``ampere`` (8.0, 8.6, 8.7), ``ada`` (8.9),
    ``hopper`` (9.0), ``blackwell`` (10.x, 12.x), ``older`` below 8.0."""
    major = int(compute_capability[0])
    minor = int(compute_capability[1]) if len(compute_capability) > 1 else 0
    if major >= 10:
        return "blackwell"
    if major == 9:
        return "hopper"
    if major == 8:
        return "ada" if minor == 9 else "ampere"
    return "older"


def client_loop(rate_rps: float, max_concurrency: int | None) -> str:
    """:data:`LOOPS`: ``closed`` with a concurrency limit, ``burst`` at an infinite rate without one, else
    ``open``."""
    if max_concurrency:
        return "closed"
    return "burst" if math.isinf(rate_rps) else "open"


@dataclass(frozen=True)
class Regime:
    """Where a figure was predicted: ``loop`` (:data:`LOOPS`), ``in_flight`` (requests in flight on average,
    Little's law over the run: the sum of end-to-end latencies over the span), ``family``
    (:func:`gpu_family`)."""

    loop: str
    in_flight: float
    family: str

    def load(self, edges: Sequence[float]) -> str:
        """The load bin of ``in_flight``: ``"<E1"``, ``"E1-E2"``, ..., ``">=En"`` for the ``edges``."""
        return load_bin(self.in_flight, edges)

    def features(self, edges: Sequence[float]) -> dict[str, str | None]:
        """The regime's value of each feature of :data:`FEATURES` (``None``: not known, e.g. the load of a
        rate that was never simulated, or no GPU family)."""
        return {"loop": self.loop or None,
                "load": self.load(edges) if math.isfinite(self.in_flight) else None,
                "family": self.family or None}


def load_bin(in_flight: float, edges: Sequence[float]) -> str:
    """The name of ``in_flight``'s bin between ``edges`` (ascending requests in flight)."""
    if not edges:
        return "all"
    if not math.isfinite(in_flight) or in_flight < edges[0]:
        return f"<{edges[0]:g}"
    for lo, hi in zip(edges, edges[1:]):
        if in_flight < hi:
            return f"{lo:g}-{hi:g}"
    return f">={edges[-1]:g}"


@dataclass(frozen=True)
class Residual:
    """One public run's error on one figure: ``log_ratio`` = ``ln(measured / predicted)`` out of sample
    (terms fitted without the run's source), ``in_sample`` with the shipped terms; ``server``: the key runs
    on the same server share (source, GPU, model, TP, release line); ``regime``: the run's; ``source``: its
    campaign; ``heldout``: a run of the held-out set (no fit read it)."""

    run: str
    figure: str
    log_ratio: float
    in_sample: float
    server: str
    regime: Regime
    source: str = ""
    heldout: bool = False


def conformal_bounds(sample: Sequence[float], coverage: float = COVERAGE) -> tuple[float, float] | None:
    """The split-conformal bounds (module docstring) of a sample of residuals for a two-sided interval of
    ``coverage``; ``None`` when the sample is too small for it (fewer than ``1 / a - 1`` values: 9 at 80%)."""
    n = len(sample)
    a = (1.0 - coverage) / 2.0
    k_lo = math.floor((n + 1) * a + 1e-9)
    k_hi = math.ceil((n + 1) * (1.0 - a) - 1e-9)
    if n == 0 or k_lo < 1 or k_hi > n:
        return None
    ordered = sorted(sample)
    return ordered[k_lo - 1], ordered[k_hi - 1]


@dataclass(frozen=True)
class ResidualSet:
    """``serving_residuals.yaml``: the residuals, the regime features each figure is split by, the load
    edges (requests in flight), the fewest runs a cell may hold, and where it came from."""

    residuals: tuple[Residual, ...]
    splits: Mapping[str, tuple[str, ...]]
    load_edges: tuple[float, ...]
    min_cell: int
    source: str

    def cell(self, figure: str, regime: Regime | None, in_sample: bool = False,
             exclude_source: str | None = None) -> tuple[list[float], dict]:
        """The residuals an interval of ``figure`` in ``regime`` is drawn from, and the cell (the features
        matched, ``{}`` for all of the figure's runs). A cell with fewer than ``min_cell`` runs falls back
        to the figure's whole sample. ``exclude_source``: leave that source's runs out (checking a run's
        interval as if its source were unseen). ``in_sample``: the fitted runs' in-sample residuals (the
        error left where the terms saw the server; a held-out run has none)."""
        mine = [r for r in self.residuals if r.figure == figure and r.source != exclude_source
                and not (in_sample and r.heldout)]
        pick = (lambda r: r.in_sample) if in_sample else (lambda r: r.log_ratio)
        split = self.splits.get(figure, ())
        if regime is not None and split:
            want = {k: v for k, v in regime.features(self.load_edges).items() if k in split and v is not None}
            inside = [r for r in mine
                      if all(r.regime.features(self.load_edges)[k] == v for k, v in want.items())]
            if len(inside) >= self.min_cell:
                return [pick(r) for r in inside], want
        return [pick(r) for r in mine], {}

    def pair_differences(self, figures: Sequence[str]) -> list[float]:
        """``r_i - r_j`` (out of sample) over every ordered pair of runs on one server, for each of
        ``figures`` (module docstring)."""
        out = []
        for figure in figures:
            by_server: dict[str, list[float]] = {}
            for r in self.residuals:
                if r.figure == figure:
                    by_server.setdefault(r.server, []).append(r.log_ratio)
            for values in by_server.values():
                out.extend(a - b for i, a in enumerate(values) for j, b in enumerate(values) if i != j)
        return out


def _regime(entry: dict, where: str) -> Regime:
    loop = entry.get("loop")
    if loop not in LOOPS:
        raise InputError(f"{where}: loop must be one of {', '.join(LOOPS)}, got {loop!r}")
    return Regime(loop, float(entry.get("in_flight", math.nan)), str(entry.get("family", "")))


@functools.lru_cache(maxsize=1)
def load_residuals() -> ResidualSet:
    """The shipped residuals (module docstring; cached). Raises :class:`InputError` for a missing or
    malformed file (a broken installation)."""
    path = efficiency_profiles_dir() / RESIDUALS_FILE
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"serving residuals {path}: cannot be read ({exc})") from None
    if (not isinstance(data, dict) or data.get("format") != FORMAT
            or not isinstance(data.get("residuals"), list)):
        raise InputError(f"serving residuals {path}: not a {FORMAT} file (the installation is damaged)")
    out = []
    for entry in data["residuals"]:
        where = f"serving residuals {path.name}: run {entry.get('run')!r}"
        if entry.get("figure") not in FIGURES:
            raise InputError(f"{where}: figure must be one of {', '.join(FIGURES)}")
        out.append(Residual(str(entry["run"]), entry["figure"], float(entry["log_ratio"]),
                            float(entry["in_sample"]), str(entry["server"]), _regime(entry, where),
                            str(entry.get("source", "")), bool(entry.get("heldout", False))))
    splits = {k: tuple(v) for k, v in (data.get("splits") or {}).items()}
    if any(f not in FIGURES or not set(v) <= set(FEATURES) for f, v in splits.items()):
        raise InputError(f"serving residuals {path.name}: splits map figures to features of {FEATURES}")
    return ResidualSet(tuple(out), splits, tuple(float(x) for x in data.get("load_edges") or ()),
                       int(data.get("min_cell", 12)), str(data.get("source", "")))


@dataclass(frozen=True)
class Uncertainty:
    """The ``coverage`` intervals of one policy's figures (:data:`FIGURES`: ``(lo, hi)`` in the figure's
    units, ``None`` where the figure is not a number or no interval can be had), the ``method`` (one of the
    ``METHOD_*`` texts), and per figure the cell its residuals came from and how many (``cells``)."""

    coverage: float
    method: str
    bounds: Mapping[str, tuple[float, float] | None]
    cells: Mapping[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """``simulate --json``'s ``uncertainty`` object (lists ``[lo, hi]``; ``null`` without one)."""
        return {"coverage": self.coverage, "method": self.method,
                **{k: (list(v) if v is not None else None) for k, v in self.bounds.items()},
                "cells": {k: dict(v) for k, v in self.cells.items()}}


def _residual_sample(figure: str, regime: Regime | None, residuals: ResidualSet,
                     calibration: Mapping[str, Sequence[float]] | None, coverage: float,
                     exclude_source: str | None = None) -> tuple[list[float], dict, str]:
    if calibration is not None:
        own = list(calibration.get(figure, ()))
        if conformal_bounds(own, coverage) is not None:
            return own, {"calibration_runs": len(own)}, METHOD_CALIBRATION
        sample, cell = residuals.cell(figure, regime, in_sample=True, exclude_source=exclude_source)
        return sample, cell, METHOD_IN_SAMPLE
    sample, cell = residuals.cell(figure, regime, exclude_source=exclude_source)
    return sample, cell, METHOD_OUT_OF_SAMPLE


def figure_interval(figure: str, predicted: float, regime: Regime | None = None, *,
                    residuals: ResidualSet | None = None,
                    calibration: Mapping[str, Sequence[float]] | None = None,
                    coverage: float = COVERAGE,
                    exclude_source: str | None = None) -> tuple[tuple[float, float] | None, dict, str]:
    """``((lo, hi), cell, method)``: the interval of one predicted figure (module docstring), in its units;
    ``None`` for a figure that is not a positive finite number or a sample too small. ``calibration``: the
    calibration fit's residuals per figure (``ln(measured / predicted)``), when the server was calibrated.
    ``exclude_source``: drawn without that source's residuals (:meth:`ResidualSet.cell`)."""
    residuals = residuals or load_residuals()
    sample, cell, method = _residual_sample(figure, regime, residuals, calibration, coverage, exclude_source)
    cell = {**cell, "runs": len(sample)}
    bounds = conformal_bounds(sample, coverage)
    if bounds is None and figure in BORROWED:
        other = BORROWED[figure]
        sample, cell, method = _residual_sample(other, regime, residuals, calibration, coverage,
                                                exclude_source)
        cell = {**cell, "runs": len(sample), "borrowed_from": other}
        bounds = conformal_bounds(sample, coverage)
    if not (math.isfinite(predicted) and predicted > 0) or bounds is None:
        return None, cell, method
    return (predicted * math.exp(bounds[0]), predicted * math.exp(bounds[1])), cell, method


def uncertainty(predicted: Mapping[str, float], regime: Regime | None = None, *,
                residuals: ResidualSet | None = None,
                calibration: Mapping[str, Sequence[float]] | None = None,
                coverage: float = COVERAGE) -> Uncertainty:
    """The :class:`Uncertainty` of a policy's predicted figures (``predicted``: :data:`FIGURES` -> value)."""
    bounds, cells, methods = {}, {}, []
    for figure in FIGURES:
        got, cell, method = figure_interval(figure, predicted.get(figure, math.nan), regime,
                                            residuals=residuals, calibration=calibration, coverage=coverage)
        bounds[figure], cells[figure] = got, cell
        methods.append(method)
    method = METHOD_CALIBRATION if METHOD_CALIBRATION in methods else methods[0]
    if calibration is not None and len(set(methods)) > 1:
        method = f"{METHOD_CALIBRATION}; {METHOD_IN_SAMPLE} where it has too few runs"
    return Uncertainty(coverage, method, bounds, cells)


@dataclass(frozen=True)
class Comparison:
    """Two policies' figure on one server: ``ratio`` (predicted ``a / b``), ``bounds`` (the ``coverage``
    interval of the true ratio, ``None`` without enough pairs), ``too_close`` (the interval holds 1, or no
    interval), ``confidence`` (the share of same-server pairs under which the predicted order holds; 0.5 for
    a tie), ``pairs`` (how many)."""

    ratio: float
    bounds: tuple[float, float] | None
    too_close: bool
    confidence: float
    pairs: int

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "interval": list(self.bounds) if self.bounds else None,
                "too_close_to_call": self.too_close, "confidence": self.confidence, "pairs": self.pairs,
                "coverage": COVERAGE}


def compare(a: float, b: float, figures: Sequence[str], *, residuals: ResidualSet | None = None,
            coverage: float = COVERAGE) -> Comparison:
    """How sure ``a > b`` (or ``a < b``) is when both are predictions of ``figures`` (their residual pairs
    are pooled) for two policies on one server (module docstring). ``a``, ``b``: positive figures.
    Raises ``ValueError`` for a figure not in :data:`FIGURES` or a non-positive value."""
    if not set(figures) <= set(FIGURES):
        raise ValueError(f"figures must be among {FIGURES}, got {figures}")
    if not (a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)):
        raise ValueError(f"compare needs two positive finite figures, got {a} and {b}")
    residuals = residuals or load_residuals()
    diffs = residuals.pair_differences(figures)
    log_ratio = math.log(a / b)
    bounds = conformal_bounds(diffs, coverage)
    interval = None if bounds is None else (math.exp(log_ratio + bounds[0]), math.exp(log_ratio + bounds[1]))
    too_close = interval is None or interval[0] <= 1.0 <= interval[1]
    if log_ratio == 0 or not diffs:
        confidence = 0.5
    else:
        same = sum(1 for d in diffs if (log_ratio + d) * log_ratio > 0)
        confidence = same / len(diffs)
    return Comparison(a / b, interval, too_close, confidence, len(diffs))


__all__ = ["BORROWED", "COVERAGE", "FEATURES", "FIGURES", "FORMAT", "LOOPS", "METHOD_CALIBRATION",
           "METHOD_IN_SAMPLE",
           "METHOD_OUT_OF_SAMPLE", "RESIDUALS_FILE", "RUN_FIGURE", "Comparison", "Regime", "Residual",
           "ResidualSet", "Uncertainty", "client_loop", "compare", "conformal_bounds", "figure_interval",
           "gpu_family", "load_bin", "load_residuals", "uncertainty"]
