"""``capacity``: the highest request rate each policy sustains within the SLO, and whether to turn pdmux on.

:func:`capacity` takes a :class:`CapacityRequest` and returns a :class:`CapacityOutcome` (``to_dict()``:
``pdmux capacity --json``); the search is :func:`pdmux_cli.simulate.capacity.capacity` (bracket and
bisect the arrival rate per policy). Here: the policies (one factory, pdmux with SGLang's defaults and
each ``--config`` beside them), the deployment, and the notes on what the rates mean (a burst that
several replicas drain is not a sustained rate; launch flags on more than one server).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..util.errors import Finding, InputError
from .deployment import Cluster, DeploymentOptions, server_and_cluster
from .fields import declared_as, option
from .policies import (
    DEFAULT_POLICIES,
    PolicyChoice,
    build_policies,
    chunk_lists,
    policy_names,
)
from .progress import ProgressFactory, entered, start
from .run_options import RunOptions
from .server import (ServerOptions, on_gpus, provenance_block, server_options, speculation_dict,
                     server_notes)
from .simulate import SimulateRequest
from .slo_options import SloOptions
from .values import finite
from .workload import WorkloadOptions, fit_to_model, load_workload, workload_notes

#: Fewer requests than this cannot show a sustained rate: the whole trace is one burst.
MIN_REQUESTS = 50
#: A policy's capacity is noted as a burst's when, at that rate, each of its servers gets fewer requests
#: than this or the trace lasts less than :data:`SHORT_SPAN_S`: several replicas drain a short burst
#: that one server queues, and the rate per GPU comes out higher than any sustained one.
MIN_REQUESTS_PER_SERVER = 200
SHORT_SPAN_S = 30.0
#: The progress bar's first guess: about this many simulations a policy (corrected as searches end).
SIMULATIONS_PER_POLICY = 10


@dataclass(frozen=True, kw_only=True)
class CapacityRequest(ServerOptions, DeploymentOptions, RunOptions):
    """``pdmux capacity``'s options (snake_case, the CLI's defaults; the server and deployment fields are
    :class:`ServerOptions`' and :class:`DeploymentOptions`').

    ``trace`` (``trace_format``), or ``synthetic`` arrivals drawn at ``qps`` requests/s (the search scales
    them) with ``seed``, ``prompt_tokens``, ``output_tokens``, or bench_serving's ``dataset_name`` with its
    ``gsp_*`` options (:class:`~pdmux_cli.workflows.workload.WorkloadOptions`); ``max_requests``,
    ``duration``: cut it.
    ``policies``, ``chunk_sizes``, ``mixed_chunk_sizes``, ``prefill_decode_interval``,
    ``unreleased_fallback``: as simulate's. ``config``: pdmux YAMLs sized beside SGLang's defaults
    (``None``: none given). ``slo_ttft``, ``slo_itl``: ms; ``target``: the share of requests that must
    meet them; ``tolerance``: the rate's relative precision. ``plot``: a PNG to write.
    """

    trace: Path | None = declared_as(WorkloadOptions, "trace")
    synthetic: bool = declared_as(WorkloadOptions, "synthetic")
    trace_format: str | None = declared_as(WorkloadOptions, "trace_format")
    qps: float | None = declared_as(WorkloadOptions, "qps")
    max_requests: int | None = declared_as(WorkloadOptions, "max_requests")
    duration: float | None = declared_as(WorkloadOptions, "duration")
    seed: int = declared_as(WorkloadOptions, "seed")
    prompt_tokens: str = declared_as(WorkloadOptions, "prompt_tokens")
    output_tokens: str = declared_as(WorkloadOptions, "output_tokens")
    dataset_name: str | None = declared_as(WorkloadOptions, "dataset_name")
    gsp_num_groups: int = declared_as(WorkloadOptions, "gsp_num_groups")
    gsp_prompts_per_group: int = declared_as(WorkloadOptions, "gsp_prompts_per_group")
    gsp_system_prompt_len: int = declared_as(WorkloadOptions, "gsp_system_prompt_len")
    gsp_question_len: int = declared_as(WorkloadOptions, "gsp_question_len")
    gsp_output_len: int = declared_as(WorkloadOptions, "gsp_output_len")
    gsp_range_ratio: float = declared_as(WorkloadOptions, "gsp_range_ratio")
    gsp_ordered: bool = declared_as(WorkloadOptions, "gsp_ordered")
    policies: str = option(DEFAULT_POLICIES, help=(
        "Comma-separated: pdmux, chunked, mixed-chunk, prefill-first, disagg (with {flag.disagg})."))
    chunk_sizes: str | None = declared_as(SimulateRequest, "chunk_sizes")
    mixed_chunk_sizes: str = declared_as(SimulateRequest, "mixed_chunk_sizes")
    config: tuple[Path, ...] | None = option(None, help=(
        "Also size pdmux with this YAML (e.g. from 'pdmux tune' or 'pdmux gen-config --slo-itl'), beside "
        "SGLang's defaults; repeat it for several."))
    unreleased_fallback: bool = declared_as(SimulateRequest, "unreleased_fallback")
    prefill_decode_interval: int = declared_as(SimulateRequest, "prefill_decode_interval")
    slo_ttft: float = declared_as(SloOptions, "slo_ttft")
    slo_itl: float = declared_as(SloOptions, "slo_itl")
    target: float = option(0.99, help="Share of requests that must meet the SLO.")
    tolerance: float = option(0.02, help="Relative precision of the rate found (0.0001 to below 1).")
    plot: Path | None = option(None, writes="file", help=(
        "Write SLO attainment vs request rate, one curve per policy, to this PNG."))
    sglang: str = declared_as(SimulateRequest, "sglang")

    def workload_options(self) -> WorkloadOptions:
        """The workload to load (never retimed: the search sets the rate)."""
        return WorkloadOptions(**{f.name: getattr(self, f.name) for f in fields(WorkloadOptions)
                                  if f.name != "rate_scale"})


def point_dict(p: Any) -> dict[str, Any]:
    """One rate tried (:class:`pdmux_cli.simulate.capacity.CapacityPoint`) for JSON."""
    return {"rate_rps": p.rate_rps, "slo_attainment": p.slo_attainment, "goodput_rps": p.goodput_rps,
            "ttft_p99_ms": p.ttft_p99_ms, "itl_p99_ms": p.itl_p99_ms, "unfinished": p.unfinished}


@dataclass
class CapacityOutcome:
    """What ``capacity`` found: ``result`` (:class:`pdmux_cli.simulate.capacity.CapacityResult`), the run's
    ``workload``, ``setup`` and ``cluster``, ``support`` (the model's pdmux support), ``title`` (the table's
    and the plot's), ``notes`` and the ``plot`` written."""

    request: CapacityRequest
    result: Any
    workload: Any
    setup: Any
    cluster: Cluster
    support: Any
    title: str
    notes: list[Finding | str] = field(default_factory=list)
    plot: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        """``pdmux capacity --json``: NaN and infinities as ``None``; the ``"pdmux"`` provenance last."""
        r, setup, cluster, result = self.request, self.setup, self.cluster, self.result
        return finite({
            "trace": self.workload.source, "requests": len(self.workload),
            "trace_rate_rps": result.trace_rate_rps,
            "model": setup.model.name, "gpu": setup.gpu_name, "tp": setup.tp, "dp": cluster.dp,
            "gpus": cluster.gpus, "load_balance_method": cluster.router,
            **cluster.disagg_dict(setup),
            "rate_rps_is": "requests/s over all of a policy's GPUs (max_rate_per_gpu_rps: divided by them)",
            "cost_model": setup.step_model.name,
            "slo": {"ttft_ms": r.slo_ttft, "itl_ms": r.slo_itl, "itl_judged_on": "request p99 ITL (nearest "
                                                                                 "rank)"},
            "target": r.target, "tolerance": r.tolerance, "workers": result.workers,
            "policies": [{"policy": p.label, "kind": p.kind, "gpus": p.gpus, "layout": str(p.layout),
                          "router": p.router or None, "max_rate_rps": p.max_rate_rps,
                          "max_rate_per_gpu_rps": p.per_gpu_rps, "bound": p.bound or None,
                          "max_rate_interval_rps": list(p.rate_interval) if p.rate_interval else None,
                          "interval_coverage": 0.8 if p.rate_interval else None,
                          "at": point_dict(p.at) if p.at else None, "config": p.config_path,
                          "points": [point_dict(x) for x in p.points]} for p in result.policies],
            "verdict": result.verdict(),
            "verdict_comparison": result.verdict_finding().values.get("comparison"),
            "plot": str(self.plot) if self.plot else None,
            "notes": [str(n) for n in self.notes],
            "sglang_support": self.support.as_dict(),
            "speculation": speculation_dict(setup),
            "pdmux": provenance_block(r.sglang, setup, r.calibration),
        })


def _names(r: CapacityRequest, configs: list[Path]) -> list[str]:
    names = policy_names(r.policies, r.disagg)
    if configs and "pdmux" not in names:
        names.append("pdmux")
    return names


def _check_options(r: CapacityRequest, configs: list[Path]) -> str:
    """The executor's name; :class:`InputError` for bad options or outputs."""
    from ..simulate.executors import check_executor
    from .files import check_outputs, gpu_file, model_file

    if r.qps is not None and not (r.synthetic or r.dataset_name is not None):
        raise InputError(
            "{flag.qps} draws {flag.synthetic} arrivals; capacity searches a trace file's rate itself",
            values={},
        )
    executor = check_executor(r.executor, r.ray_address)
    if r.plot is not None and r.plot.suffix.lower() != ".png":
        raise InputError(
            "{flag.plot} writes a PNG: give a file name ending in .png, got {plot}",
            values={"plot": r.plot},
        )
    check_outputs((r.plot,), (r.trace, *configs, r.calibration, model_file(r.model), gpu_file(r.gpu)))
    return executor


def _support_notes(r: CapacityRequest, support: Any, names: list[str]) -> tuple[list[str], list[Finding]]:
    """The policies kept and the notes on the model's pdmux support (never sized, so never recommended):
    ``capacity.pdmux_not_sized``, ``capacity.pdmux_support_unknown`` (``reason``: the support's finding)."""
    if support.state == "no":
        if r.config is not None or names == ["pdmux"]:
            raise InputError(
                "pdmux: {reason} ({flag.sglang} picks another SGLang revision)",
                values={"reason": support.reason},
            )
        return [n for n in names if n != "pdmux"], [Finding("capacity.pdmux_not_sized",
                                                            {"reason": support.why}, "sglang")]
    if support.state == "unknown":
        return names, [Finding("capacity.pdmux_support_unknown", {"reason": support.why}, "sglang")]
    return names, []


def _speculation_notes(r: CapacityRequest, setup: Any,
                       names: list[str]) -> tuple[list[str], list[Finding]]:
    """The policies kept beside speculative decoding: pdmux dropped with a note
    (``capacity.pdmux_speculation``) where the ``--sglang`` revision cannot run it beside
    ``setup.speculation`` (:func:`pdmux_cli.sglang.speculative_args.pdmux_speculation_error`), the baselines
    compared with the same speculation; refused (:class:`InputError`) where pdmux was all that was asked
    for."""
    if setup.speculation is None or "pdmux" not in names:
        return names, []
    from ..sglang.speculative_args import pdmux_speculation_error

    spec = setup.speculation
    error = pdmux_speculation_error(r.sglang, spec.algorithm, spec.draft.num_layers)
    if error is None:
        return names, []
    if r.config is not None or names == ["pdmux"]:
        raise error
    note = Finding("capacity.pdmux_speculation", {"error": str(error)}, "speculative_algorithm")
    return [n for n in names if n != "pdmux"], [note]


def launch_notes(cluster: Cluster, tp: int, colocated: bool = True) -> list[Finding]:
    """What the verdict's flags mean on more than one server (SGLang 0.5.23); ``colocated``: policies other
    than disagg ran (the DP flags are theirs). ``capacity.dp_launch`` (``dp``, ``method``, ``gpus``: the
    replicas' GPUs) and ``capacity.disagg_launch`` (``label``, ``prefill``, ``decode``: instances, ``tp``:
    each one's)."""
    notes = []
    if cluster.dp > 1 and colocated:
        notes.append(Finding("capacity.dp_launch", {"dp": cluster.dp, "method": cluster.method,
                                                    "gpus": cluster.dp * tp}))
    if cluster.disagg is not None:
        d = cluster.disagg
        notes.append(Finding("capacity.disagg_launch", {
            "label": d.label, "prefill": d.prefill, "decode": d.decode,
            "tp": d.instance_setup.tp if d.instance_setup else tp}))
    return notes


def _burst_note(p: Any, requests: int, servers: int) -> Finding | None:
    """``capacity.burst`` where ``p``'s capacity is a burst's, not a sustained rate (:data:`SHORT_SPAN_S`,
    :data:`MIN_REQUESTS_PER_SERVER`); ``span_s``: the seconds the requests arrive within."""
    if not (p.max_rate_rps > 0 and requests >= MIN_REQUESTS):
        return None
    span = requests / p.max_rate_rps
    few = servers > 1 and requests / servers < MIN_REQUESTS_PER_SERVER
    if not (span < SHORT_SPAN_S or few):
        return None
    return Finding("capacity.burst", {"policy": p.label, "rate_rps": p.max_rate_rps, "requests": requests,
                                      "span_s": span, "servers": servers})


def policy_notes(p: Any, requests: int, dp: int) -> list[Finding | str]:
    """The notes on one policy's capacity (:class:`pdmux_cli.simulate.capacity.PolicyCapacity`): a burst's
    rate, a target met at every rate or missed at every rate, SGLang 0.5.23 crashing at some rates."""
    # a disaggregated request visits one instance a side: the side with more instances sees fewer each
    servers = max(p.xpyd) if p.xpyd else dp  # a disaggregation's row always has its xpyd
    burst = _burst_note(p, requests, servers)
    notes = [burst] if burst else []
    if p.bound == "above":
        notes.append(Finding("capacity.met_every_rate", {"policy": p.label, "rate_rps": p.max_rate_rps}))
    if any(x.crashed for x in p.points):
        notes.append(Finding("capacity.crashes_at_some_rates", {"policy": p.label}, "unreleased_fallback"))
    elif p.bound == "below":
        notes.append(Finding("capacity.missed_every_rate",
                             {"policy": p.label, "rate_rps": p.points[0].rate_rps}))
    return notes


def _search(r: CapacityRequest, executor: str, workload: Any, setup: Any, cluster: Cluster, built: Any,
            progress: ProgressFactory | None) -> Any:
    from ..simulate.capacity import capacity as search
    from ..simulate.engine import step_budget

    budget = step_budget(len(workload), r.max_steps)
    label = "sizing" + (" on Ray" if executor == "ray" else "") + (f" (budget {budget:,} "
                                                                   "steps)" if budget else "")
    task = start(progress, SIMULATIONS_PER_POLICY * len(built.policies), label)
    with entered(task):
        return search(workload, setup, built.policies, r.slo_ttft, r.slo_itl, r.target, r.tolerance,
                      r.workers,
                      task.advance if task is not None else None, built.config_paths, dp=cluster.dp,
                      load_balance_method=cluster.method, executor=executor, ray_address=r.ray_address,
                      max_steps=r.max_steps)


def capacity(request: CapacityRequest, progress: ProgressFactory | None = None) -> CapacityOutcome:
    """Run ``request`` (module docstring) and write its ``plot``. Raises :class:`InputError` for bad
    options or inputs (as simulate's, and ``--qps`` on a trace file, a ``--target`` or ``--tolerance``
    outside its range)."""
    from ..sglang.revisions import model_support

    r = request
    configs = list(dict.fromkeys(r.config or []))
    names = _names(r, configs)
    executor = _check_options(r, configs)
    chunks, mixed = chunk_lists(r.chunk_sizes, r.mixed_chunk_sizes, names)
    workload = load_workload(r.workload_options())
    setup, cluster = server_and_cluster(server_options(r), r, names)
    workload = fit_to_model(workload, setup.model, None, None, r.duration)
    support = model_support(setup.model.architectures, r.sglang)
    names, notes = _support_notes(r, support, names)
    names, spec_notes = _speculation_notes(r, setup, names)
    notes += spec_notes
    choice = PolicyChoice(names=tuple(names), chunk_sizes=chunks, mixed_chunk_sizes=mixed,
                          prefill_decode_interval=r.prefill_decode_interval, sglang=r.sglang,
                          unreleased_fallback=r.unreleased_fallback, pdmux_files=tuple(configs))
    built = build_policies(choice, setup, cluster.disagg)
    notes += built.notes
    result = _search(r, executor, workload, setup, cluster, built, progress)
    title = (f"{workload.source}: {len(workload)} requests, {workload.mean_qps:.3g} req/s as recorded; "
             f"{setup.model.name} on {on_gpus(setup)}, {setup.step_model.source}")
    if r.plot is not None:
        from ..simulate.plot import write_capacity_plot

        write_capacity_plot(r.plot, result, title)
    notes += workload_notes(workload)
    notes += server_notes(setup)
    notes += list(cluster.notes)
    notes += launch_notes(cluster, setup.tp, any(name != "disagg" for name in names))
    notes += list(workload.notes)
    if len(workload) < MIN_REQUESTS:
        notes.append(Finding("capacity.too_few_requests",
                             {"requests": len(workload), "minimum": MIN_REQUESTS}))
    for p in result.policies:
        notes += policy_notes(p, len(workload), cluster.dp)
    return CapacityOutcome(r, result, workload, setup, cluster, support, title, notes, r.plot)


__all__ = ["CapacityOutcome", "CapacityRequest", "capacity", "launch_notes", "policy_notes"]
