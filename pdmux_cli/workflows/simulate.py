"""``simulate``: replay a trace through pdmux, chunked prefill, mixed chunks, prefill-first and PD
disaggregation on one server, DP replicas or XPYD instances; per policy the latency percentiles, SLO
attainment, goodput.

:func:`simulate` takes a :class:`SimulateRequest` (the command's options) and returns a
:class:`SimulateResult` whose :meth:`~SimulateResult.to_dict` is ``pdmux simulate --json``. It writes
the ``csv`` (rows as requests finish, the file whole at the end) and ``plot`` files the request names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..util.errors import Finding, InputError
from .deployment import Cluster, DeploymentOptions, server_and_cluster
from .fields import declared_as, option, sglang_revision
from .pdmux_knobs import PdmuxKnobs
from .pdmux_yaml import PdmuxYaml
from .policies import (
    DEFAULT_POLICIES,
    PolicyChoice,
    build_policies,
    check_prefill_decode_interval,
    chunk_lists,
    policy_names,
)
from .progress import ProgressFactory, entered, start
from .run_options import RunOptions
from .slo_options import SloOptions
from .server import (ServerOptions, on_gpus, provenance_block, server_options, speculation_dict,
                     server_notes)
from .values import finite
from .workload import WorkloadOptions, fit_to_model, load_workload, workload_notes

#: A progress bar only for runs long enough to watch: requests x policies.
PROGRESS_MIN_WORK = 2000


@dataclass(frozen=True, kw_only=True)
class SimulateRequest(WorkloadOptions, ServerOptions, DeploymentOptions, RunOptions):
    """``pdmux simulate``'s options (snake_case, the CLI's defaults; the workload, server and deployment
    fields are :class:`WorkloadOptions`', :class:`ServerOptions`' and :class:`DeploymentOptions`').

    ``policies``: comma-separated names (:data:`pdmux_cli.workflows.policies.POLICIES`); ``chunk_sizes``
    (tokens; ``None``: SGLang's default for the GPU) and ``mixed_chunk_sizes``: comma-separated or a list.
    ``config`` / ``divisions`` / ``sm_group_num`` / ``decode_bs_divisor`` / ``token_budget``: the pdmux
    config (:class:`~pdmux_cli.workflows.pdmux_yaml.PdmuxYaml`). ``slo_ttft``, ``slo_itl``: ms (ITL judged
    on each request's p99). ``max_concurrency``: a closed-loop client (one server only). ``workers``,
    ``executor`` (``local`` or ``ray``), ``ray_address``: where the policies run. ``max_steps``: the decode
    step budget per server (0: none). ``csv``, ``plot``: files to write. ``sglang``: the revision followed.
    ``step_by_step``: simulate every decode step one at a time (the reference loop; by default the quiet
    decode steps between two events are advanced at once, to the same figures: a check, not a setting).
    """

    policies: str = option(DEFAULT_POLICIES, help=(
        "Comma-separated: pdmux, chunked (SGLang's default scheduling), mixed-chunk (--enable-mixed-chunk), "
        "prefill-first (--chunked-prefill-size -1), disagg (with {flag.disagg})."))
    chunk_sizes: str | None = option(None, help=(
        "Chunk sizes of 'chunked' (default: SGLang's default for the GPU, 8192 on H100/H200)."), wordings={
        "capacity": "Chunk sizes of 'chunked' (default: SGLang's default for the GPU)."})
    mixed_chunk_sizes: str = option("512", help="Chunk sizes of 'mixed-chunk'.")
    prefill_decode_interval: int = option(0, help=(
        "chunked, mixed-chunk and prefill-first: decode-only rounds after each prefill batch (SGLang's flag; "
        "0 = off)."))
    config: Path | None = declared_as(PdmuxKnobs, "config")
    sm_group_num: int | None = declared_as(PdmuxKnobs, "sm_group_num")
    decode_bs_divisor: int | None = declared_as(PdmuxKnobs, "decode_bs_divisor")
    token_budget: int | None = declared_as(PdmuxKnobs, "token_budget")
    divisions: str | None = declared_as(PdmuxKnobs, "divisions")
    unreleased_fallback: bool = option(False, help=(
        "pdmux: where SGLang 0.5.23 crashes (no manual threshold matches), use group 1 as its unreleased "
        "branches do, instead of stopping."), wordings={"capacity": (
            "pdmux: where SGLang 0.5.23 crashes (no manual threshold matches), use group 1 as its unreleased "
            "branches do.")})
    slo_ttft: float = declared_as(SloOptions, "slo_ttft")
    slo_itl: float = declared_as(SloOptions, "slo_itl")
    max_concurrency: int | None = option(None, help=(
        "A closed-loop client with at most N requests in flight, as SGLang's bench_serving "
        "--max-concurrency: each request is sent at its arrival or when one finishes, whichever is later; "
        "TTFT counts from the send. One server only."))
    csv: Path | None = option(None, writes="file", help=(
        "Write per-request results to this CSV file (row by row as requests finish; the file appears whole "
        "at the end)."))
    plot: Path | None = option(None, writes="file", help=(
        "Write ITL and TTFT CDFs to this PNG (needs matplotlib)."))
    sglang: str = sglang_revision()
    step_by_step: bool = option(False, help=(
        "A check: simulate every decode step one at a time, the reference loop (by default the quiet "
        "steps between two events are advanced at once, to the same figures)."))


@dataclass
class SimulateResult:
    """What ``simulate`` found. ``metrics``: a :class:`pdmux_cli.simulate.metrics.PolicyMetrics` per
    policy that ran, in order; ``notes``: the run's notes (the JSON's); ``title``: the tables' title;
    ``csv``, ``plot``: the files written (``plot`` ``None`` when nothing completed to plot)."""

    request: SimulateRequest
    workload: Any
    setup: Any
    cluster: Cluster
    support: Any
    metrics: list[Any]
    title: str
    notes: list[Finding | str] = field(default_factory=list)
    csv: Path | None = None
    plot: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        """``pdmux simulate --json``: NaN and infinities as ``None``; the ``"pdmux"`` provenance last."""
        from ..simulate import report

        setup, cluster, r = self.setup, self.cluster, self.request
        return finite({
            "trace": report.trace_dict(self.workload),
            "model": setup.model.name, "gpu": setup.gpu_name, "sm_count": setup.total_sms,
            "tp": setup.tp, "dp": cluster.dp, "gpus": cluster.gpus, "load_balance_method": cluster.router,
            **cluster.disagg_dict(setup),
            "cost_model": setup.step_model.name, "throughput": setup.step_model.source,
            "slo": {"ttft_ms": r.slo_ttft, "itl_ms": r.slo_itl, "itl_judged_on": "request p99 ITL (nearest "
                                                                                 "rank)"},
            "policies": [report.metrics_dict(m) for m in self.metrics],
            "csv": str(self.csv) if self.csv else None, "plot": str(self.plot) if self.plot else None,
            "sglang_support": self.support.as_dict(), "notes": [str(n) for n in self.notes],
            "speculation": speculation_dict(setup),
            "pdmux": provenance_block(r.sglang, setup, r.calibration),
        })

    def table_notes(self) -> list[Finding | str]:
        """The notes under the tables: the run's, then each policy's own (``"policy: note"``)."""
        return [*self.notes, *(Finding("simulate.policy_note", {"policy": m.policy, "note": note})
                               for m in self.metrics for note in m.notes)]


def _check_run_options(r: SimulateRequest) -> str:
    """The executor's name; :class:`InputError` for options that do not go together (each value's own range:
    the request's, :mod:`.fields`)."""
    from ..simulate.executors import check_executor

    executor = check_executor(r.executor, r.ray_address)
    if r.max_concurrency is not None and (r.disagg is not None or (r.dp or 1) > 1):
        raise InputError(
            "{flag.max_concurrency} (a closed-loop client) is simulated on one server: drop {flag.dp} "
            "and {flag.disagg}",
            values={},
        )
    return executor


def _check_outputs(r: SimulateRequest) -> None:
    from .files import check_outputs, gpu_file, model_file

    if r.plot is not None and r.plot.suffix.lower() != ".png":
        raise InputError(
            "{flag.plot} writes a PNG: give a file name ending in .png, got {plot}",
            values={"plot": r.plot},
        )
    check_outputs((r.csv, r.plot), (r.trace, r.config, r.calibration, model_file(r.model), gpu_file(r.gpu)))
    if r.csv is not None and r.plot is not None and os.path.realpath(r.csv) == os.path.realpath(r.plot):
        raise InputError(
            "{flag.csv} and {flag.plot} name the same file {plot}: give two paths",
            values={"plot": r.plot},
        )


def _choice(r: SimulateRequest, names: list[str]) -> PolicyChoice:
    chunks, mixed = chunk_lists(r.chunk_sizes, r.mixed_chunk_sizes, names)
    check_prefill_decode_interval(r.prefill_decode_interval)
    return PolicyChoice(names=tuple(names), chunk_sizes=chunks, mixed_chunk_sizes=mixed,
                        prefill_decode_interval=r.prefill_decode_interval, sglang=r.sglang,
                        unreleased_fallback=r.unreleased_fallback,
                        pdmux=PdmuxYaml(config=r.config, divisions=r.divisions, sm_group_num=r.sm_group_num,
                                        decode_bs_divisor=r.decode_bs_divisor, token_budget=r.token_budget))


def _run(r: SimulateRequest, executor: str, workload: Any, setup: Any, cluster: Cluster, runs: list[Any],
         progress: ProgressFactory | None) -> list[Any]:
    """Every policy's :class:`PolicyMetrics` or the :class:`InputError` that refused it, in order; the
    per-request CSV streamed into its temporary file, which replaces ``r.csv`` at the end."""
    import contextlib

    from ..simulate.engine import step_budget
    from ..simulate.runner import simulate_policies

    n = len(workload)
    budget = step_budget(n, r.max_steps)
    label = "simulating" + (f" (budget {budget:,} steps)" if budget else "")
    task = start(progress, n * len(runs), label) if n * len(runs) >= PROGRESS_MIN_WORK else None
    steps_shown = None
    if task is not None and budget:
        def steps_shown(steps: int) -> None:
            task.describe(f"simulating ({steps:,}/{budget:,} steps)")

    with contextlib.ExitStack() as stack:
        sink = None
        if r.csv is not None:  # rows stream into the temporary file; it replaces the csv at the end
            from ..simulate.fold import CsvSink
            from ..simulate.report import CSV_FIELDS
            from ..util.atomic import atomic_output

            tmp = stack.enter_context(atomic_output(r.csv))
            sink = CsvSink(stack.enter_context(open(tmp, "w", newline="", encoding="utf-8")))
            sink.writer.writerow(CSV_FIELDS)
        stack.enter_context(entered(task))
        outcomes = simulate_policies(workload, setup, runs, r.slo_ttft, r.slo_itl, dp=cluster.dp,
                                     load_balance_method=cluster.method, workers=r.workers,
                                     progress=task.advance if task is not None else None,
                                     max_concurrency=r.max_concurrency or 0, executor=executor,
                                     ray_address=r.ray_address, max_steps=r.max_steps, csv=sink,
                                     progress_steps=steps_shown)
        if not any(not isinstance(o, InputError) for o in outcomes):
            raise next(o for o in outcomes if isinstance(o, InputError))
    return outcomes


def _title(workload: Any, setup: Any, cluster: Cluster, runs: list[Any]) -> str:
    colocated = any(p is not cluster.disagg for p in runs)
    servers = (f", DP {cluster.dp}" if cluster.dp > 1 and colocated else "") + (
        f", {cluster.disagg.label} on {cluster.disagg.gpus(setup)} "
        "GPUs" if cluster.disagg is not None else "")
    from ..messages import count_text

    return (f"{workload.source}: {count_text(len(workload), 'request')} {workload.arrivals_text()}; "
            f"{setup.model.name} on {on_gpus(setup)}{servers}, {setup.step_model.source}")


def speed_notes(step_by_step: bool, setup: Any, workload: Any, policies: list[Any]) -> list[Finding]:
    """What ran step by step rather than at event speed (the quiet rounds between two events advanced at
    once: SGLang's default loop, pdmux's rounds and the disaggregation decode instances,
    :mod:`pdmux_cli.simulate.schedulers`), said in the notes: ``--step-by-step`` (all of it), and a prefix
    cache (a trace's ``hash_ids``) under speculative decoding (every round checks the cache's eviction
    against fractional KV growth; with whole tokens its runs go at event speed too)."""
    if step_by_step:
        return [Finding("simulate.step_by_step", param="step_by_step")]
    hashes = getattr(workload, "hash_ids", ())
    cached = hashes.any_values() if hasattr(hashes, "any_values") else any(hashes)
    if setup.prefix_cache and cached and policies and setup.tokens_per_step != 1:
        return [Finding("simulate.step_by_step_prefix_cache")]
    return []


def client_loop_of(r: Any) -> str:
    """The regime's client loop (:func:`pdmux_cli.costmodel.uncertainty.client_loop`) of a request's workload:
    a trace file's arrivals are open; synthetic arrivals at ``--qps inf`` a burst; ``--max-concurrency``
    closed."""
    import math

    from ..costmodel.uncertainty import client_loop

    rate = r.qps if r.synthetic and r.qps is not None else 1.0
    return client_loop(rate if not math.isnan(rate) else 1.0, getattr(r, "max_concurrency", None))


def with_uncertainty(metrics: list[Any], workload: Any, setup: Any, loop: str) -> list[Any]:
    """Each policy's :class:`~pdmux_cli.simulate.metrics.PolicyMetrics` with its output tokens/s and the 80%
    intervals of its figures (:mod:`pdmux_cli.costmodel.uncertainty`): from the public runs' out-of-sample
    residuals, or a calibration's own (``setup``'s serving terms calibrated). The chapter's cost model has no
    serving terms and no measured error: no interval."""
    from ..costmodel.uncertainty import Regime, gpu_family, uncertainty
    from ..simulate.metrics import client_figures

    serving = setup.step_model.serving
    calibration = dict(serving.residuals) if serving.calibrated else None
    family = gpu_family(setup.compute_capability)
    out = []
    for m in metrics:
        figures = client_figures(m, workload.output_tokens)
        unc = None
        if setup.step_model.has_error_interval:
            unc = uncertainty(figures, Regime(loop, figures["in_flight"], family), calibration=calibration)
        out.append(replace(m, output_tok_s=figures["output_tok_s"], uncertainty=unc))
    return out


def simulate(request: SimulateRequest, progress: ProgressFactory | None = None) -> SimulateResult:
    """Run ``request`` (module docstring); ``progress``: a bar for long runs
    (:mod:`pdmux_cli.workflows.progress`).

    Raises :class:`InputError` for bad options or inputs (unreadable trace, unknown GPU or model, a pdmux
    config SGLang refuses, outputs that cannot be written), and when every policy is refused (e.g. the
    model does not fit); a policy refused alone is a note.
    """
    from ..sglang.revisions import model_support

    r = request
    executor = _check_run_options(r)
    names = policy_names(r.policies, r.disagg)
    choice = _choice(r, names)
    _check_outputs(r)
    workload = load_workload(r)
    setup, cluster = server_and_cluster(server_options(r), r, names, step_by_step=r.step_by_step)
    workload = fit_to_model(workload, setup.model, r.qps, r.rate_scale, r.duration)
    support = model_support(setup.model.architectures, r.sglang)
    if support.state == "no":
        names = [n for n in names if n != "pdmux"]
        if not names:
            raise InputError(
                "{flag.policies} pdmux: {reason} ({flag.sglang} picks another SGLang revision)",
                values={"reason": support.reason},
            )
        choice = replace(choice, names=tuple(names))
    built = build_policies(choice, setup, cluster.disagg)
    outcomes = _run(r, executor, workload, setup, cluster, built.policies, progress)
    metrics = with_uncertainty([o for o in outcomes if not isinstance(o, InputError)], workload, setup,
                               client_loop_of(r))
    refused = [(p.label, o) for p, o in zip(built.policies, outcomes) if isinstance(o, InputError)]
    title = _title(workload, setup, cluster, built.policies)
    notes = [*workload_notes(workload), *cluster.notes,
             *(Finding("simulate.not_simulated", {"policy": label, "error": str(exc)}, exc.param)
               for label, exc in refused)]
    if support.state != "yes":
        code = "simulate.pdmux_not_simulated" if support.state == "no" else "simulate.pdmux_support_unknown"
        notes.insert(0, Finding(code, {"reason": support.why}, "sglang"))
    notes.extend(server_notes(setup))
    if r.prefill_decode_interval and "pdmux" in names:
        notes.append(Finding("simulate.interval_not_pdmux", param="prefill_decode_interval"))
    plot = r.plot
    if plot is not None and not any(m.completed for m in metrics):
        notes.append(Finding("simulate.nothing_to_plot", {"plot": str(plot)}))
        plot = None
    if plot is not None:
        from ..simulate.plot import write_cdf_plot

        write_cdf_plot(plot, metrics, title)
    notes.extend(built.notes)
    notes.extend(speed_notes(r.step_by_step, setup, workload, built.policies))
    if workload.failed_rows:
        notes.append(Finding("simulate.failed_rows", {"rows": workload.failed_rows}))
    notes.extend(workload.notes)
    return SimulateResult(r, workload, setup, cluster, support, metrics, title, notes, r.csv, plot)


__all__ = ["SimulateRequest", "SimulateResult", "simulate"]
