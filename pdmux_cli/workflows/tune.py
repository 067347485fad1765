"""``tune``: search pdmux YAML knobs for the best SLO attainment on a trace, and the winning YAML.

:func:`tune` takes a :class:`TuneRequest` and returns a :class:`TuneOutcome` (``to_dict()``: ``pdmux tune
--json``); :func:`tune_for_gen_config` is ``pdmux gen-config --tune``'s search. The search itself is
:func:`pdmux_cli.simulate.tune.tune` (candidates, one simulation each, on an executor).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog.model import DEFAULT_MODEL
from ..util.errors import Finding, InputError
from .deployment import Cluster, DeploymentOptions, plan_deployment
from .fields import declared_as, option
from .progress import ProgressFactory, entered, start
from .run_options import RunOptions
from .server import (ServerOptions, build_setup, provenance_block, server_options, speculation_dict,
                     server_notes, speculative_launch_flags, without_prefix_cache)
from .simulate import SimulateRequest
from .slo_options import SloOptions
from .values import as_text_list, finite, parse_float_list, parse_int_list
from .workload import WorkloadOptions, fit_to_model, load_workload


@dataclass(frozen=True, kw_only=True)
class TuneRequest(ServerOptions, DeploymentOptions, RunOptions):
    """``pdmux tune``'s options (snake_case, the CLI's defaults; the server and deployment fields are
    :class:`ServerOptions`' and :class:`DeploymentOptions`', of which tune takes ``dp`` and
    ``load_balance_method``: ``disagg`` is refused).

    ``trace``: the trace file (``trace_format``: its format; ``qps``, ``rate_scale``: retime it;
    ``max_requests``, ``duration``: cut it). ``slo_ttft``, ``slo_itl``: the SLOs, ms. ``sm_group_nums``,
    ``divisors``, ``budgets``: the values tried (comma-separated or lists; ``None``: the search's defaults).
    ``no_single_levels``: no fixed splits. ``slo_margins``: the shares of ``slo_itl`` SLO levels are sized
    for (``"none"``: none). ``workers``, ``executor``, ``ray_address``, ``max_steps``: as simulate's.
    ``output``: the file the winning YAML is written to. ``sglang``: the revision followed.
    """

    trace: Path = option(required=True, help="Trace file to tune on (Azure CSV, Mooncake JSONL, BurstGPT "
                                              "CSV).")
    slo_ttft: float = declared_as(SloOptions, "slo_ttft", required=True)
    slo_itl: float = declared_as(SloOptions, "slo_itl", required=True)
    trace_format: str | None = declared_as(WorkloadOptions, "trace_format")
    qps: float | None = declared_as(WorkloadOptions, "qps")
    rate_scale: float | None = declared_as(WorkloadOptions, "rate_scale")
    max_requests: int | None = declared_as(WorkloadOptions, "max_requests")
    duration: float | None = declared_as(WorkloadOptions, "duration")
    sm_group_nums: str | None = option(None, help=(
        "sm_group_num values to try (default: every distinct one)."))
    divisors: str | None = option(None, help="decode_bs_divisor values to try (default 12,24,36,48,72).")
    budgets: str | None = option(None, help="split_forward_token_budget values (default 4096,16384,65536).")
    no_single_levels: bool = option(False, help="Do not try single fixed splits.")
    slo_margins: str | None = option(None, help=(
        "Also try SLO levels (gen-config {flag.slo_itl}) sized for these shares of {flag.slo_itl} (default "
        "1,0.9,0.8), or 'none'."))
    output: Path | None = option(None, short="-o", writes="path", help=(
        "Write the winning YAML here (whole or not at all)."))
    sglang: str = declared_as(SimulateRequest, "sglang")


@dataclass(frozen=True)
class SearchSpace:
    """What :func:`search` tries: the options' lists (``None``: the defaults), ``single_levels``, and where
    it runs (``dp`` replicas behind ``method``; ``executor``)."""

    sm_group_nums: str | None = None
    divisors: str | None = None
    budgets: str | None = None
    single_levels: bool = True
    slo_margins: str | None = None
    workers: int | None = None
    dp: int = 1
    method: str = "round_robin"
    executor: str = "local"
    ray_address: str | None = None
    max_steps: int | None = None


def config_dict(c: Any) -> dict[str, Any]:
    """A :class:`pdmux_cli.sglang.pdmux_config.PdmuxConfig` as tune's JSON writes it."""
    return {"sm_group_num": c.sm_group_num, "manual_divisions": [list(e) for e in c.manual_divisions],
            "split_forward_token_budget": c.split_forward_token_budget,
            "decode_bs_divisor": c.decode_bs_divisor,
            "max_split_forward_layers": c.max_split_forward_layers}


def search_dict(result: Any) -> dict[str, Any]:
    """The JSON of a :class:`pdmux_cli.simulate.tune.TuneResult` (tune's, and gen-config --tune's
    ``tune``); ``gpus``, ``layout``, ``router``: the GPUs every config and schedule ran on (``dp x tp``),
    how, and the load-balance method between the replicas (``None`` for one server); NaN p99s as ``None``."""
    gpus, layout, router = result.gpus, str(result.layout), result.router or None

    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {
        "workers": result.workers, "skipped_invalid": result.skipped, "best": result.best,
        "baseline": result.baseline,
        "gpus": gpus, "layout": layout, "router": router,
        "rows": [{"index": r.index, "description": r.candidate.description,
                  "config": config_dict(r.candidate.config),
                  "gpus": gpus, "layout": layout,
                  "slo_attainment": r.slo_attainment, "goodput_rps": r.goodput_rps,
                  "ttft_p99_ms": num(r.ttft_p99_ms), "itl_p99_ms": num(r.itl_p99_ms),
                  "older_sglang_crash_rounds": r.older_sglang_crash_rounds} for r in result.rows],
        "schedules": [{"policy": o.label, "gpus": gpus, "layout": layout, "slo_attainment": o.slo_attainment,
                       "goodput_rps": o.goodput_rps, "ttft_p99_ms": num(o.ttft_p99_ms),
                       "itl_p99_ms": num(o.itl_p99_ms)}
                      for o in result.schedules],
        "verdict": result.verdict(),
        "notes": [str(n) for n in result.notes],
    }


def _margins(text: str | None) -> Any:
    from ..simulate.tune import DEFAULT_SLO_MARGINS

    if text is None:
        return DEFAULT_SLO_MARGINS
    if text.strip().lower() in ("none", "off", "-"):
        return ()
    return parse_float_list(text, "slo_margins", unique=True)


def search(workload: Any, setup: Any, slo_ttft: float, slo_itl: float, space: SearchSpace, sglang: str | None,
           progress: ProgressFactory | None = None) -> Any:
    """:func:`pdmux_cli.simulate.tune.tune` over ``space`` under the revision ``sglang``'s rules (its
    layer cap searched, manual levels only, the group-1 fallback); the revision's notes appended. Raises
    :class:`InputError` for bad lists."""
    from ..messages import render_all
    from ..sglang.revision_rules import revision_findings
    from ..sglang.revisions import get_revision
    from ..sglang.split_levels import check_sm_group_num
    from ..simulate.engine import step_budget
    from ..simulate.executors import check_executor
    from ..simulate.tune import DEFAULT_BUDGETS, DEFAULT_DIVISORS, DEFAULT_LAYER_CAPS, tune

    groups_text = as_text_list(space.sm_group_nums)
    groups = parse_int_list(groups_text, "sm_group_nums", minimum=3) if groups_text is not None else None
    for value in groups or ():
        check_sm_group_num(value, setup.total_sms, "sm_group_nums")
    divisors, budgets = as_text_list(space.divisors), as_text_list(space.budgets)
    divs = parse_int_list(divisors, "divisors") if divisors is not None else DEFAULT_DIVISORS
    buds = parse_int_list(budgets, "budgets") if budgets is not None else DEFAULT_BUDGETS
    margins = _margins(as_text_list(space.slo_margins))
    executor = check_executor(space.executor, space.ray_address)
    budget = step_budget(len(workload), space.max_steps)  # also checks --max-steps
    where = " on Ray" if executor == "ray" else ""
    task = start(progress, 1, f"tuning{where}" + (f" (budget {budget:,} steps)" if budget else ""))
    rev = get_revision(sglang)  # its rules: the layer cap searched, manual levels, the group-1 fallback
    options = {"dp": space.dp, "load_balance_method": space.method, "slo_margins": margins,
               "layer_caps": DEFAULT_LAYER_CAPS if rev.max_split_forward_layers else (),
               "manual_only": rev.divide_sm == "not read", "threshold_fallback": rev.threshold_fallback,
               "executor": executor, "ray_address": space.ray_address, "max_steps": space.max_steps}
    with entered(task):
        result = tune(workload, setup, slo_ttft, slo_itl, groups, divs, buds, space.single_levels,
                      space.workers,
                      progress=task.advance if task is not None else None, **options)
    result.notes.extend(render_all(revision_findings(sglang, setup.tp)))
    return result


@dataclass
class TuneOutcome:
    """What ``tune`` found: ``search`` (:class:`pdmux_cli.simulate.tune.TuneResult`), the winning
    ``config`` and its ``yaml``, the run's ``setup``, ``cluster`` and ``workload``; ``support``: the
    model's pdmux support under the revision; ``notes``: the deployment's notes beyond the search's."""

    request: TuneRequest
    search: Any
    config: Any
    yaml: str
    setup: Any
    cluster: Cluster
    workload: Any
    support: Any
    notes: list[Finding | str] = field(default_factory=list)
    #: SGLang's speculative arguments for the launch line (:func:`.server.speculative_launch_flags`)
    speculative_flags: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """``pdmux tune --json``: NaN and infinities as ``None``; the ``"pdmux"`` provenance last."""
        r, setup, cluster = self.request, self.setup, self.cluster
        data = search_dict(self.search)
        data.update({"trace": r.trace.name, "requests": len(self.workload), "gpu": setup.gpu_name,
                     "model": setup.model.name, "tp": setup.tp, "dp": cluster.dp, "gpus": cluster.gpus,
                     "load_balance_method": cluster.router,
                     "cost_model": setup.step_model.name, "throughput": setup.step_model.source,
                     "slo": {"ttft_ms": r.slo_ttft, "itl_ms": r.slo_itl}, "yaml": self.yaml,
                     "output": str(r.output) if r.output else None, "sglang_support": self.support.as_dict()})
        data["notes"] = [*data.get("notes", []), *(str(n) for n in self.notes)]
        data["speculation"] = speculation_dict(setup)
        data["speculative_flags"] = list(self.speculative_flags)
        data["pdmux"] = provenance_block(r.sglang, setup, r.calibration)
        return finite(data)

    def table_notes(self) -> list[Finding | str]:
        """The notes under the table: the search's, the deployment's, and an unknown model support."""
        unknown = [self.support.why] if self.support.state == "unknown" else []
        return [*self.search.notes, *self.notes, *unknown]


def tune(request: TuneRequest, progress: ProgressFactory | None = None) -> TuneOutcome:
    """Run ``request`` (module docstring) and write the winning YAML to ``request.output`` (whole or not
    at all) when one is named. Raises :class:`InputError` for bad options or inputs, a model SGLang's
    pdmux cannot serve, or ``disagg``."""
    from ..sglang import pdmux_config as pc
    from ..sglang.revisions import require_pdmux
    from .files import check_outputs, gpu_file, model_file

    r = request
    check_outputs((r.output,), (r.trace, r.calibration, model_file(r.model), gpu_file(r.gpu)))
    workload = load_workload(WorkloadOptions(trace=r.trace, trace_format=r.trace_format, qps=r.qps,
                                             rate_scale=r.rate_scale, max_requests=r.max_requests,
                                             duration=r.duration))
    setup = build_setup(server_options(r))
    support = require_pdmux(setup.model.architectures, r.sglang, "tune")
    if setup.speculation is not None:  # every candidate is pdmux: refused up front where it cannot run
        from ..sglang.speculative_args import check_pdmux_speculation

        check_pdmux_speculation(r.sglang, setup.speculation)
    if r.no_prefix_cache:
        setup = without_prefix_cache(setup)
    cluster = plan_deployment(setup, r.gpu, r, allow_disagg=False)
    workload = fit_to_model(workload, setup.model, r.qps, r.rate_scale, r.duration)
    space = SearchSpace(r.sm_group_nums, r.divisors, r.budgets, not r.no_single_levels, r.slo_margins,
                        r.workers,
                        cluster.dp, cluster.method, r.executor, r.ray_address, r.max_steps)
    result = search(workload, setup, r.slo_ttft, r.slo_itl, space, r.sglang, progress)
    best = result.best_row.candidate.config
    problems = pc.validate(best, setup.total_sms, setup.compute_capability)
    if problems:  # cannot happen: candidates are validated
        raise InputError(f"winning config is invalid: {problems[0].where}: {problems[0].message}")
    text = pc.dump_config(best)
    if r.output is not None:
        from ..util.atomic import write_text_atomic

        write_text_atomic(r.output, text)
    dp_note = [Finding("tune.dp_launch", {"dp": cluster.dp})] if cluster.dp > 1 else []
    spec_flags = ([] if setup.speculation is None else
                  speculative_launch_flags(r.sglang, r.speculative_algorithm, r.speculative_draft_model_path))
    return TuneOutcome(r, result, best, text, setup, cluster, workload, support,
                       [*cluster.notes, *dp_note, *server_notes(setup)], spec_flags)


def tune_for_gen_config(gpu_profile: Any, trace: Path, slo_ttft_ms: float, slo_itl_ms: float, *,
                        model: str = DEFAULT_MODEL, trace_format: str | None = None,
                        rate_scale: float | None = None,
                        qps: float | None = None, max_requests: int | None = None,
                        duration: float | None = None, budgets: str | None = None,
                        divisors: str | None = None,
                        sm_group_nums: str | None = None, calibration: Path | None = None,
                        s_sat: float | None = None, workers: int | None = None,
                        tp: int = 1, sglang: str | None = None,
                        progress: ProgressFactory | None = None) -> tuple[Any, Any]:
    """``pdmux gen-config --tune``'s search on ``trace`` for ``gpu_profile`` (a ``hardware.Gpu``; ``None``
    raises, since the cost model needs bandwidth and FLOP/s): ``(TuneResult, Setup)``. Raises
    :class:`InputError` for bad inputs."""
    from ..sglang.revisions import require_pdmux

    if gpu_profile is None:
        raise InputError(
            "{flag.tune} needs a GPU profile ({flag.gpu}), not {flag.sms}/{flag.cc}: the simulation "
            "needs bandwidth and FLOP/s",
            values={},
        )
    if trace is None or slo_ttft_ms is None or slo_itl_ms is None:
        raise InputError(
            "{flag.tune} needs {flag.trace} FILE, {flag.slo_ttft} MS and {flag.slo_itl} MS",
            values={},
        )
    workload = load_workload(WorkloadOptions(trace=trace, trace_format=trace_format, qps=qps,
                                             rate_scale=rate_scale, max_requests=max_requests,
                                             duration=duration))
    setup = build_setup(ServerOptions(model=model, s_sat=s_sat, calibration=calibration, tp=tp),
                        gpu_profile=gpu_profile)
    require_pdmux(setup.model.architectures, sglang, "gen-config", option="tune")
    workload = fit_to_model(workload, setup.model, qps, rate_scale, duration)
    space = SearchSpace(sm_group_nums, divisors, budgets, True, None, workers)
    return search(workload, setup, slo_ttft_ms, slo_itl_ms, space, sglang, progress), setup
