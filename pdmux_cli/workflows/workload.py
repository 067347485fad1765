"""The requests a simulation replays: a trace file or synthetic arrivals, cut, retimed.

:func:`load_workload` reads and cuts (``--max-requests``); :func:`fit_to_model` drops the requests past
the model's context length and only then retimes a trace file (``--qps``, ``--rate-scale``) and cuts it
to ``--duration``, so that ``--qps`` is the rate of the requests simulated (as ``pdmux capacity``
reports it). Both raise :class:`~pdmux_cli.util.errors.InputError` for bad values or combinations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..util.errors import InputError, short_repr
from .fields import GENERATED_SHARED_PREFIX, WORKLOAD, Checked, group_fields, option


@dataclass(frozen=True, kw_only=True)
class WorkloadOptions(Checked):
    """The workload options of simulate, capacity and tune (the CLI's names and defaults).

    ``trace``: an Azure CSV, Mooncake JSONL or BurstGPT CSV (``trace_format``: ``azure``, ``mooncake``,
    ``burstgpt``; ``None``: detected), or ``synthetic`` Poisson arrivals at ``qps`` requests/s
    (``math.inf``: all at once) with ``prompt_tokens`` / ``output_tokens`` length specs and ``seed``.
    ``qps``, ``rate_scale``: retime a trace file (requests/s; a factor). ``max_requests``: the first N;
    ``duration``: the requests arriving in the first S seconds. ``dataset_name``: bench_serving's dataset the
    synthetic requests replay (``generated-shared-prefix``, :data:`~pdmux_cli.simulate.traces.GSP_DATASET`;
    ``None``: pdmux's own length specs); its ``gsp_*`` options are bench_serving's ``--gsp-*``
    (:func:`pdmux_cli.simulate.traces.generated_shared_prefix_trace`), with its defaults.
    """

    trace: Path | None = None
    synthetic: bool = option(False, group=WORKLOAD, help=(
        "Poisson arrivals at {flag.qps} instead of a trace file ({flag.qps} inf: all at once, with "
        "{flag.max_requests})."))
    trace_format: str | None = option(None, group=WORKLOAD, help=(
        "azure, mooncake or burstgpt (default: detected)."))
    qps: float | None = option(None, group=WORKLOAD, help=(
        "Requests/s: the synthetic rate, or retime a trace to it."), wordings={
        "capacity": "Synthetic: the rate the arrivals are drawn at (the search scales it).",
        "tune": "Retime the trace to this many requests/s."})
    rate_scale: float | None = option(None, group=WORKLOAD, help=(
        "Multiply a trace's arrival rate (2 = twice the load)."), wordings={
        "tune": "Multiply the trace's arrival rate."})
    max_requests: int | None = option(None, group=WORKLOAD, help=(
        "Only the first N requests."))
    duration: float | None = option(None, group=WORKLOAD, help=(
        "Only requests arriving in the first S seconds."))
    seed: int = option(0, group=WORKLOAD, help=(
        "Seed for synthetic arrivals and lengths."))
    prompt_tokens: str = option("1024", group=WORKLOAD, help=(
        "Synthetic prompt length: N, uniform:LO:HI, exp:MEAN, lognormal:MEDIAN:SIGMA, or random:L[:RATIO] "
        "(bench_serving's random dataset, drawn as it draws them for {flag.seed}; both lengths then)."))
    output_tokens: str = option("128", group=WORKLOAD, help=(
        "Synthetic output length (same forms)."))
    dataset_name: str | None = option(None, group=GENERATED_SHARED_PREFIX, help=(
        "generated-shared-prefix: bench_serving's dataset of groups of prompts sharing a system prompt, "
        "drawn as it draws them for {flag.seed} (order, lengths, arrivals at {flag.qps}, which it needs; "
        "inf, bench_serving's default: all at once) with the --gsp-* options below, instead of "
        "{flag.prompt_tokens}/{flag.output_tokens}; "
        "the radix cache finds each group's system prompt."))
    gsp_num_groups: int = option(64, group=GENERATED_SHARED_PREFIX, help=(
        "generated-shared-prefix: system prompts (groups)."))
    gsp_prompts_per_group: int = option(16, group=GENERATED_SHARED_PREFIX, help=(
        "generated-shared-prefix: prompts (requests) per group."))
    gsp_system_prompt_len: int = option(2048, group=GENERATED_SHARED_PREFIX, help=(
        "generated-shared-prefix: tokens of each system prompt."))
    gsp_question_len: int = option(128, group=GENERATED_SHARED_PREFIX, help=(
        "generated-shared-prefix: tokens of each question (after its group's system prompt)."))
    gsp_output_len: int = option(256, group=GENERATED_SHARED_PREFIX, help=(
        "generated-shared-prefix: output tokens."))
    gsp_range_ratio: float = option(1.0, group=GENERATED_SHARED_PREFIX, help=(
        "generated-shared-prefix: lengths drawn from [L x RATIO, L] (1: as given)."))
    gsp_ordered: bool = option(False, group=GENERATED_SHARED_PREFIX, help=(
        "generated-shared-prefix: send the requests group by group, not shuffled."))


#: The ``gsp_*`` options (bench_serving's ``--gsp-*``) with their defaults (bench_serving's): the
#: generated-shared-prefix group but ``dataset_name``.
GSP_OPTIONS = tuple(f.name for f in group_fields(WorkloadOptions, GENERATED_SHARED_PREFIX)
                    if f.name != "dataset_name")

#: bench_serving datasets pdmux does not draw, and what to give instead (``--dataset-name`` refused).
OTHER_DATASETS = {
    "random": "{flag.synthetic} {flag.prompt_tokens} random:L {flag.output_tokens} random:L draws "
              "bench_serving's random dataset",
    "sharegpt": "ShareGPT holds prompts as text and pdmux has no tokenizer; give a trace of token counts",
}


def _check_dataset(w: WorkloadOptions) -> None:
    """:class:`InputError` for a dataset pdmux does not draw, ``gsp_*`` options without it, or pdmux's own
    length specs beside it."""
    from ..simulate.traces import GSP_DATASET

    defaults = {f.name: f.default for f in fields(WorkloadOptions)}
    if w.dataset_name is None:
        given = [name for name in GSP_OPTIONS if getattr(w, name) != defaults[name]]
        if given:
            raise InputError(
                "{param_flag} shapes bench_serving's {dataset} dataset: add {flag.dataset_name} {dataset}",
                param=given[0],
                values={"dataset": GSP_DATASET},
            )
        return
    name = str(w.dataset_name).strip().lower()
    if name != GSP_DATASET:
        hint = OTHER_DATASETS.get(name, "")
        raise InputError(
            "{flag.dataset_name} {name}: pdmux draws bench_serving's {dataset} only" + ("; " + hint if hint
                                                                                       else ""),
            param="dataset_name",
            values={"name": short_repr(w.dataset_name), "dataset": GSP_DATASET},
        )
    for param in ("prompt_tokens", "output_tokens"):
        if getattr(w, param) != defaults[param]:
            raise InputError(
                "{param_flag} is a length of pdmux's own synthetic requests; {flag.dataset_name} {dataset} "
                "takes {flag.gsp_system_prompt_len}, {flag.gsp_question_len} and {flag.gsp_output_len}",
                param=param,
                values={"dataset": GSP_DATASET},
            )


def _check_synthetic(w: WorkloadOptions) -> None:
    if w.trace is not None:
        if w.dataset_name is not None:
            raise InputError("give a trace file or {flag.dataset_name}, not both", param="dataset_name",
                             values={})
        raise InputError(
            "give a trace file or {flag.synthetic}, not both",
            values={},
        )
    if w.qps is None:
        if w.dataset_name is not None:
            raise InputError(
                "{flag.dataset_name} needs {flag.qps}: bench_serving's request rate (requests/s; give "
                "{flag.qps} inf for bench_serving's default, every request at once)",
                param="qps",
                values={},
            )
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
    from ..simulate.traces import generated_shared_prefix_trace, load_trace, reshape, synthetic_trace

    if w.qps == math.inf and not (w.synthetic or w.dataset_name is not None):
        raise InputError(
            "{flag.qps} inf (every request at once) goes with {flag.synthetic}; a trace file's arrivals "
            "are retimed to a finite rate (or give {flag.rate_scale})",
            values={},
        )
    _check_dataset(w)
    if w.dataset_name is not None:  # bench_serving's dataset: synthetic requests, --synthetic or not
        _check_synthetic(w)
        return generated_shared_prefix_trace(
            w.qps, w.gsp_num_groups, w.gsp_prompts_per_group, w.gsp_system_prompt_len, w.gsp_question_len,
            w.gsp_output_len, w.gsp_range_ratio, bool(w.gsp_ordered), w.seed, w.max_requests, w.duration)
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
    """``workload`` without requests longer than ``model``'s context length (the server rejects them: counted
    in ``past_context``), then,
    for a trace file, retimed to ``qps`` requests/s or by ``rate_scale`` and cut to ``duration`` seconds
    (:func:`pdmux_cli.simulate.traces.reshape`); a synthetic trace is drawn at its rate already."""
    from ..simulate.traces import drop_past_context, reshape

    workload = drop_past_context(workload, model.max_position_embeddings, model.name,
                                 model.own_context_length)
    if workload.format == "synthetic" or (qps is None and rate_scale is None and duration is None):
        return workload
    return reshape(workload, rate_scale=rate_scale, qps=qps, duration_s=duration)


def workload_notes(workload: Any) -> list[Any]:
    """The notes every command gives about its trace: ``workload.bad_rows`` (one line: ``rows``, the
    trace's ``source``, the first few ``examples`` as ``(line, reason)``), when there are any; then
    ``workload.past_context`` (the requests the server rejects as longer than the context length:
    :func:`pdmux_cli.simulate.traces.drop_past_context`), when there are any."""
    bad = [workload.bad_rows_finding()] if workload.bad_rows else []
    return bad + ([workload.past_context_note] if workload.past_context_note is not None else [])
