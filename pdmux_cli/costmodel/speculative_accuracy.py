"""Speculative decoding against public SGLang measurements (issue 30): ``pdmux accuracy``'s speculative block.

``profiles/measurements/speculative/sglang_speculative_points.yaml`` holds the published points pdmux can
predict honestly (curated from ``public_sglang_speculative.yaml``; what was left out and why is in its
``not_comparable``): the same engine with and without speculation on an NVIDIA GPU and a model pdmux has
profiles for, at a stated TP, batch size, num-steps / eagle-topk / num-draft-tokens and measured accept
length. The measured figure is the speedup: the throughput with speculation over the throughput without,
at the same batch (dimensionless; > 1: speculation helps).

pdmux's prediction for a point (:func:`predict_speedup`) is the decode-only comparison ``pdmux estimate``
shows (``planning/estimate.py`` ``_speculative_round``): a speculative round of ``batch`` requests
(:meth:`~pdmux_cli.costmodel.speculative.SpeculativeStepModel.decode_s`: the draft tree, the verify pass,
the draft extend) plus the per-request term, or the scheduler's CPU time if longer, gives each request
``accept_length`` tokens; the plain decode step of the same batch, composed the same way, gives one. The
speedup is ``plain_s / (round_s / accept_length)``. Each point is predicted with the rule of its SGLang
release (the data file's ``sglang_release``; :meth:`~pdmux_cli.sglang.release_defaults.ReleaseDefaults.\
speculation_overlaps`): up to 0.5.10 SGLang runs speculation without the overlap scheduler, so the round is
its GPU and per-request time plus the CPU's (every point here), where 0.5.23 takes the longer. The draft is
pdmux's default (one decoder layer of the target, :func:`~pdmux_cli.sglang.speculative_args.default_draft`),
as for a user who names no draft file.

Nothing here is fitted: the speculative round has no constant of its own (the step model's are fitted to
kernel tables and to serving runs without speculation), so every point is out of sample by construction.
Pure Python; the profile loaders are the only I/O.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from ..catalog.profile_files import measurements_dir
from .accuracy import METHODS, Point, Term, term_dict

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: The report's name for the term.
TERM = "speculative decoding: speedup at the published accept length"
#: Fields every point carries in the data file (its own or its source's).
SOURCE_FIELDS = ("source", "name", "url", "gpu", "model", "tp", "algorithm", "context_tokens", "unit",
                 "sglang_release")
POINT_FIELDS = ("batch", "num_steps", "eagle_topk", "num_draft_tokens", "accept_length", "spec", "plain",
                "speedup")


def points_path() -> Any:
    """The curated points' file."""
    return measurements_dir() / "speculative" / "sglang_speculative_points.yaml"


@dataclass(frozen=True)
class SpeculativePoint:
    """One published measurement (the data file's fields): ``source`` (its id in
    ``public_sglang_speculative.yaml``), ``name`` (a short one, for tables), ``url``; the setup: ``gpu``
    and ``model`` (pdmux profile names), ``tp``, ``algorithm``, ``num_steps``, ``eagle_topk``,
    ``num_draft_tokens``, ``accept_length`` (tokens a request gets per verify round, as published),
    ``batch`` (requests decoding together), ``context_tokens`` (mean cached tokens a decode step reads per
    request, assumed or derived: the file says which); ``spec`` and ``plain``: the published throughputs
    with and without speculation (``unit``); ``speedup``: ``spec / plain`` as the file states it (4
    decimals, dimensionless); ``sglang_release``: the SGLang release whose rules the point is predicted with
    (no source states it: the data file's ``sglang_release_note`` says how it was chosen); ``label``: the
    dataset, where a source gives one figure per dataset."""

    source: str
    name: str
    url: str
    gpu: str
    model: str
    tp: int
    algorithm: str
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    accept_length: float
    batch: int
    context_tokens: int
    spec: float
    plain: float
    speedup: float
    unit: str
    sglang_release: str
    label: str = ""

    @property
    def what(self) -> str:
        """A one-line description (the report's point name)."""
        label = f" {self.label}" if self.label else ""
        return (f"{self.gpu} {self.model} TP{self.tp} {self.algorithm} {self.num_steps}-{self.eagle_topk}-"
                f"{self.num_draft_tokens}, batch {self.batch}, accept {self.accept_length:g}{label}")


@dataclass(frozen=True)
class NotComparable:
    """A collected figure left out of the comparison: ``source`` (its id), ``why``, ``figures`` (which of
    the source's figures, where only some are left out)."""

    source: str
    why: str
    figures: str = ""


@dataclass(frozen=True)
class SpeculativePrediction:
    """A point and pdmux's figures for it: ``speedup`` (dimensionless), ``round_s`` (one speculative round
    of the batch, s), ``plain_s`` (the same batch's decode step without speculation, s), ``parts_s`` (the
    round's draft tree, verify pass and draft extend, GPU seconds), ``release`` (the SGLang release whose
    rule it follows), ``overlap`` (whether that release runs the round with the overlap scheduler) and
    ``speedup_low`` (the speedup with the per-request term paid per verified token: the range's low end)."""

    point: SpeculativePoint
    speedup: float
    round_s: float
    plain_s: float
    parts_s: tuple[float, float, float]
    release: str = ""
    overlap: bool = True
    speedup_low: float = 0.0

    @property
    def in_range(self) -> bool:
        """Whether the measured speedup lies in pdmux's range ``[speedup_low, speedup]`` (the per-request
        term per verified token, or as the release's worker pays it: ``round_request_s``)."""
        return self.speedup_low <= self.point.speedup <= self.speedup

    @property
    def error(self) -> float:
        """Signed relative error of the speedup, ``(predicted - measured) / measured``."""
        return (self.speedup - self.point.speedup) / self.point.speedup

    @property
    def measured_round_over_step(self) -> float:
        """The measured round over the measured plain step: ``accept_length / speedup`` (what a round costs
        in plain steps; pdmux's is ``round_s / plain_s``)."""
        return self.point.accept_length / self.point.speedup


@dataclass(frozen=True)
class SpeculativeAccuracy:
    """The block: ``term`` (an :class:`~pdmux_cli.costmodel.accuracy.Term`, out-of-sample: measured and
    predicted speedups), ``predictions`` (per point, in the file's order) and ``not_comparable``."""

    term: Term
    predictions: tuple[SpeculativePrediction, ...]
    not_comparable: tuple[NotComparable, ...]


def load_points(path: Any = None) -> tuple[list[SpeculativePoint], list[NotComparable]]:
    """The data file's points (each with its source's setup) and its ``not_comparable`` entries."""
    with open(path or points_path(), encoding="utf-8") as handle:
        data = yaml.load(handle, Loader=_LOADER)  # noqa: S506 (a safe loader)
    points = []
    for source in data["sources"]:
        common = {key: source[key] for key in SOURCE_FIELDS}
        for row in source["points"]:
            fields = {**common, **{key: row[key] for key in POINT_FIELDS}}
            points.append(SpeculativePoint(label=row.get("label", ""), **fields))
    excluded = [NotComparable(e["source"], e["why"], e.get("figures", "")) for e in data["not_comparable"]]
    return points, excluded


def speedup_of(step_model: Any, batch: int, context_tokens: float, window: int = 0,
               cuda_graph: bool = True, overlap: bool = True, worker_v1: bool = False,
               per_verified_token: bool = False) -> tuple[float, float, float, tuple[float, float, float]]:
    """``(speedup, round_s, plain_s, parts_s)`` of a :class:`~pdmux_cli.costmodel.speculative.\
SpeculativeStepModel` for ``batch`` requests of ``context_tokens`` cached tokens each on the whole GPU.

    A round is ``max(round GPU time + per-request time, CPU time of the step)`` and the plain step the same
    with the target's decode step (``planning/estimate.py``: ``hidden`` and ``_speculative_round``; the
    overlap scheduler hides the CPU's work behind the GPU's). ``overlap`` False (a release that turns the
    overlap scheduler off under speculation: up to 0.5.10): the round is their sum, as estimate's and the
    simulator's steps under ``--disable-overlap-schedule``; the plain step, without speculation, keeps it on.
    Sliding-window layers (``window`` tokens) read at most ``window`` tokens in both. Speedup:
    ``plain_s / (round_s / accept_length)``. ``worker_v1`` and ``per_verified_token``: how the round pays
    the per-request term (:meth:`~pdmux_cli.costmodel.speculative.SpeculativeStepModel.round_request_s`)."""
    total = step_model.total_sms
    base = step_model.base
    sum_context = batch * context_tokens
    sum_window = batch * min(context_tokens, window) if window else 0.0
    cpu = step_model.decode_cpu_s(batch)
    round_gpu = (step_model.decode_s(total, batch, sum_context, sum_window, cuda_graph=cuda_graph)
                 + step_model.round_request_s(batch, worker_v1, per_verified_token))
    round_s = max(round_gpu, cpu) if overlap else round_gpu + cpu
    plain_s = max(base.decode_s(total, batch, sum_context, sum_window, cuda_graph=cuda_graph)
                  + base.request_s(batch), base.decode_cpu_s(batch))
    parts = step_model.round_parts(total, batch, sum_context, sum_window, cuda_graph=cuda_graph)
    accept = step_model.speculation.accept_length
    return plain_s / (round_s / accept), round_s, plain_s, parts


@cache
def _target(gpu: str, model: str) -> tuple[Any, Any]:
    from ..catalog.hardware import find_gpu
    from ..catalog.model import load_model

    return find_gpu(gpu), load_model(model)


def predict_speedup(point: SpeculativePoint, release: str | None = None) -> SpeculativePrediction:
    """pdmux's figures for ``point``: the roofline step model of its GPU, model and TP with SGLang's
    defaults (CUDA graphs, the shipped serving terms), its speculative settings at the published accept
    length and pdmux's default draft (:func:`speedup_of`), the round with or without the overlap scheduler
    as SGLang ``release`` runs it (``None``: the point's ``sglang_release``;
    :meth:`~pdmux_cli.sglang.release_defaults.ReleaseDefaults.speculation_overlaps`). Raises
    :class:`~pdmux_cli.util.errors.InputError` for settings pdmux refuses."""
    from ..sglang.release_defaults import release_defaults
    from ..sglang.speculative_args import Speculation, default_draft
    from . import build_step_model

    gpu, model = _target(point.gpu, point.model)
    speculation = Speculation(point.algorithm, point.num_steps, point.eagle_topk, point.num_draft_tokens,
                              point.accept_length, default_draft(model, point.algorithm))
    step_model = build_step_model(gpu, model, tp=point.tp, speculation=speculation)
    rules = release_defaults(release or point.sglang_release)
    overlap = rules.speculation_overlaps(point.eagle_topk)
    worker_v1 = rules.speculation_worker_v1(point.eagle_topk)
    speedup, round_s, plain_s, parts = speedup_of(step_model, point.batch, point.context_tokens,
                                                  model.sliding_window, overlap=overlap, worker_v1=worker_v1)
    low = speedup_of(step_model, point.batch, point.context_tokens, model.sliding_window, overlap=overlap,
                     worker_v1=worker_v1, per_verified_token=True)[0]
    return SpeculativePrediction(point, speedup, round_s, plain_s, parts, rules.release, overlap,
                                 min(low, speedup))


def report(path: Any = None) -> SpeculativeAccuracy:
    """Every point of the data file predicted (module docstring), as a term and per point."""
    points, excluded = load_points(path)
    predictions = tuple(predict_speedup(p) for p in points)
    sources = sorted({p.source for p in points})
    data = (f"public SGLang runs with and without speculation ({len(sources)} sources: "
            f"{', '.join(sources)}); measured: throughput with / without at the same batch; each point with "
            "its SGLang release's overlap-scheduler rule")
    term = Term(TERM, data, "out-of-sample",
                tuple(Point(p.point.what, p.point.speedup, p.speedup) for p in predictions))
    return SpeculativeAccuracy(term, predictions, tuple(excluded))


#: What "fitted" means for this block, for output.
FITTED_NOTE = ("nothing fitted: no constant of the speculative round was set from these or any speculative "
               "measurements (the step model's constants come from kernel tables and serving runs without "
               "speculation), so every point is out of sample by construction")


def speculative_dict(block: SpeculativeAccuracy) -> dict:
    """The block as JSON (``pdmux accuracy --json``'s ``"speculative"``): the term's statistics
    (:func:`~pdmux_cli.costmodel.accuracy.term_dict`; errors as fractions of the measured speedup), each
    point with its setup, measured and predicted speedup, error, pdmux's range (``predicted_speedup_range``:
    the per-request term per verified token to the release's rule; ``in_range``, and how many points are),
    pdmux's round and plain step (ms) and both rounds in plain steps, and the figures left out."""
    out = term_dict(block.term)
    out["fitted"] = FITTED_NOTE
    out["method_means"] = METHODS[block.term.method]
    out["points"] = [{
        "source": p.point.source, "name": p.point.name, "url": p.point.url, "what": p.point.what,
        "gpu": p.point.gpu, "model": p.point.model, "tp": p.point.tp, "algorithm": p.point.algorithm,
        "num_steps": p.point.num_steps, "eagle_topk": p.point.eagle_topk,
        "num_draft_tokens": p.point.num_draft_tokens, "accept_length": p.point.accept_length,
        "batch": p.point.batch, "context_tokens": p.point.context_tokens, "label": p.point.label,
        "sglang_release": p.release, "overlap_schedule": p.overlap,
        "measured_spec": p.point.spec, "measured_plain": p.point.plain, "unit": p.point.unit,
        "measured_speedup": p.point.speedup, "predicted_speedup": p.speedup, "error": p.error,
        "predicted_speedup_range": [p.speedup_low, p.speedup], "in_range": p.in_range,
        "pdmux_round_ms": p.round_s * 1e3, "pdmux_plain_step_ms": p.plain_s * 1e3,
        "pdmux_round_parts_ms": {"draft": p.parts_s[0] * 1e3, "verify": p.parts_s[1] * 1e3,
                                 "extend": p.parts_s[2] * 1e3},
        "measured_round_over_step": p.measured_round_over_step,
        "pdmux_round_over_step": p.round_s / p.plain_s,
    } for p in block.predictions]
    out["max_abs_error"] = max((abs(p.error) for p in block.predictions), default=math.nan)
    out["in_range"] = sum(p.in_range for p in block.predictions)
    out["median_round_over_step"] = {
        "measured": statistics.median(p.measured_round_over_step for p in block.predictions),
        "pdmux": statistics.median(p.round_s / p.plain_s for p in block.predictions),
    } if block.predictions else None
    out["not_comparable"] = [{"source": e.source, "figures": e.figures, "why": e.why}
                             for e in block.not_comparable]
    return out


__all__ = ["FITTED_NOTE", "TERM", "NotComparable", "SpeculativeAccuracy", "SpeculativePoint",
           "SpeculativePrediction", "load_points", "points_path", "predict_speedup", "report",
           "speculative_dict", "speedup_of"]
