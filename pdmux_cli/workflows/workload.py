"""The requests a simulation replays: a trace file or synthetic arrivals, cut, retimed.

:func:`load_workload` reads and cuts (``--max-requests``); :func:`fit_to_model` drops the requests past
the model's context length and only then retimes a trace file (``--qps``, ``--rate-scale``) and cuts it
to ``--duration``, so that ``--qps`` is the rate of the requests simulated (as ``pdmux capacity``
reports it). Both raise :class:`~pdmux_cli.util.errors.InputError` for bad values or combinations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..util.errors import InputError
from .fields import Checked


@dataclass(frozen=True, kw_only=True)
class WorkloadOptions(Checked):
    """The workload options of simulate, capacity and tune (the CLI's names and defaults).

    ``trace``: an Azure CSV, Mooncake JSONL or BurstGPT CSV (``trace_format``: ``azure``, ``mooncake``,
    ``burstgpt``; ``None``: detected), or ``synthetic`` Poisson arrivals at ``qps`` requests/s
    (``math.inf``: all at once) with ``prompt_tokens`` / ``output_tokens`` length specs and ``seed``.
    ``qps``, ``rate_scale``: retime a trace file (requests/s; a factor). ``max_requests``: the first N;
    ``duration``: the requests arriving in the first S seconds.
    """

    trace: Path | None = None
    synthetic: bool = False
    trace_format: str | None = None
    qps: float | None = None
    rate_scale: float | None = None
    max_requests: int | None = None
    duration: float | None = None
    seed: int = 0
    prompt_tokens: str = "1024"
    output_tokens: str = "128"


def _check_synthetic(w: WorkloadOptions) -> None:
    if w.trace is not None:
        raise InputError(
            "give a trace file or {flag.synthetic}, not both",
            values={},
        )
    if w.qps is None:
        raise InputError(
            "{flag.synthetic} needs {flag.qps} (requests/s)",
            values={},
        )
    if w.rate_scale is not None:
        raise InputError(
            "{flag.rate_scale} applies to trace files; with {flag.synthetic} set {flag.qps}",
            values={},
        )
    if w.trace_format is not None:
        raise InputError(
            "{flag.trace_format} applies to trace files, not {flag.synthetic}",
            values={},
        )


def load_workload(w: WorkloadOptions) -> Any:
    """The trace to replay (:class:`pdmux_cli.simulate.traces.Trace`): synthetic (drawn at ``qps``), or a
    file cut to ``max_requests`` (retimed later, by :func:`fit_to_model`). :class:`InputError` for bad
    values or combinations, or an unreadable trace."""
    from ..simulate.traces import load_trace, reshape, synthetic_trace

    if w.qps == math.inf and not w.synthetic:
        raise InputError(
            "{flag.qps} inf (every request at once) goes with {flag.synthetic}; a trace file's arrivals "
            "are retimed to a finite rate (or give {flag.rate_scale})",
            values={},
        )
    if w.synthetic:
        _check_synthetic(w)
        return synthetic_trace(w.qps, w.prompt_tokens, w.output_tokens, w.max_requests, w.duration, w.seed)
    if w.trace is None:
        raise InputError(
            "give a trace file (Azure CSV, Mooncake JSONL, BurstGPT CSV) or {flag.synthetic} {flag.qps} N",
            values={},
        )
    trace = load_trace(w.trace, w.trace_format)
    return reshape(trace, max_requests=w.max_requests)


def fit_to_model(workload: Any, model: Any, qps: float | None = None, rate_scale: float | None = None,
                 duration: float | None = None) -> Any:
    """``workload`` without requests longer than ``model``'s context length (bad rows, counted), then,
    for a trace file, retimed to ``qps`` requests/s or by ``rate_scale`` and cut to ``duration`` seconds
    (:func:`pdmux_cli.simulate.traces.reshape`); a synthetic trace is drawn at its rate already."""
    from ..simulate.traces import drop_past_context, reshape

    workload = drop_past_context(workload, model.max_position_embeddings, model.name)
    if workload.format == "synthetic" or (qps is None and rate_scale is None and duration is None):
        return workload
    return reshape(workload, rate_scale=rate_scale, qps=qps, duration_s=duration)


def workload_notes(workload: Any) -> list[Any]:
    """The notes every command gives about its trace: ``workload.bad_rows`` (one line: ``rows``, the
    trace's ``source``, the first few ``examples`` as ``(line, reason)``), when there are any."""
    return [workload.bad_rows_finding()] if workload.bad_rows else []
