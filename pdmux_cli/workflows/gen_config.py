"""``pdmux gen-config`` as a use case: SGLang's pdmux YAML for a GPU, validated, plus the launch flags.

Four ways to the levels: SGLang's automatic ones (``divide_sm``,
:func:`pdmux_cli.sglang.split_levels.plan_groups`),
``divisions`` written by hand, SLO levels sized for an ITL target by the cost model
(:mod:`pdmux_cli.planning.slo_levels`), or a tune on a trace (``tune``: the simulator). Every config is
checked by
SGLang 0.5.23's rules (:func:`pdmux_cli.sglang.pdmux_config.validate`) before it is returned; with ``output``
the
YAML is written there, whole or not at all. Prints nothing: tune's search comes back in the result
(``tune_search``) for the CLI to render its table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog.model import DEFAULT_MODEL
from ..sglang.split_levels import (
    DEFAULT_DECODE_BS_DIVISOR,
    DEFAULT_SM_GROUP_NUM,
    DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET,
)
from ..provenance import provenance, step_model_provenance, with_provenance
from ..util.errors import Finding, InputError
from .check_config import CheckConfigRequest
from .device_options import TP_HELP, device_option
from .fields import Checked, declared_as, option, sglang_revision
from .planning_inputs import (
    check_positive_knobs,
    resolve_device,
)
from .pdmux_knobs import PdmuxKnobs
from .progress import ProgressFactory
from .server import ServerOptions
from .slo_options import SloOptions


@dataclass(frozen=True)
class GenConfigRequest(Checked):
    """``pdmux gen-config``'s options (units: tokens, ms, requests/s, s).

    ``gpu`` (default h100), or ``sms`` with ``cc`` (``"9.0"``). ``sm_group_num``, ``decode_bs_divisor``,
    ``token_budget``: SGLang's knobs. ``divisions``: manual levels ``"PREFILL:DECODE:THRESHOLD,..."``;
    ``manual``: write SGLang's automatic levels as manual_divisions. ``output``: the YAML's path (written;
    ``None``: not written, named ``pdmux.yaml`` in the launch line). ``tune``: pick the knobs by simulating
    ``trace`` against ``slo_ttft`` and ``slo_itl`` (ms), shaped by ``trace_format`` (``--format``), ``qps``,
    ``rate_scale``, ``duration`` (s), ``max_requests``, on ``workers`` processes. ``slo_itl`` without
    ``tune``: SLO levels at ``context`` tokens (or ``trace``'s distribution), from ``cost_model`` with
    ``step_overhead_ms``, ``per_request_overhead_ms``, ``max_running_requests``. ``dp``: refused (``pdmux
    tune --dp``). ``calibration``: a calibration.yaml for the cost model. ``model``: the model served;
    ``tp``: tensor parallelism. ``sglang``: the SGLang revision (``--sglang``). ``speculative_algorithm``,
    ``speculative_draft_model_path``: SGLang's speculative decoding beside pdmux: refused where the revision
    cannot run the pair (:func:`pdmux_cli.sglang.speculative_args.pdmux_speculation_flags`), else its flags
    join the launch line.
    """

    gpu: str | None = device_option("gpu")
    sms: int | None = device_option("sms")
    cc: str | None = device_option("cc")
    sm_group_num: int = declared_as(PdmuxKnobs, "sm_group_num", default=DEFAULT_SM_GROUP_NUM)
    decode_bs_divisor: int = declared_as(PdmuxKnobs, "decode_bs_divisor", default=DEFAULT_DECODE_BS_DIVISOR)
    token_budget: int = declared_as(PdmuxKnobs, "token_budget", default=DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET)
    divisions: str | None = declared_as(PdmuxKnobs, "divisions")
    manual: bool = option(False, help=(
        "Write SGLang's automatic levels as manual_divisions (always on Blackwell)."))
    output: Path | str | None = option(None, short="-o", writes="path", help=(
        "Write the YAML here (whole or not at all) instead of stdout."))
    tune: bool = option(False, help=(
        "Pick the knobs by simulating a trace (needs {flag.trace}, {flag.slo_ttft}, {flag.slo_itl}, "
        "{flag.gpu})."))
    trace: Path | str | None = option(None, help=(
        "Trace for {flag.tune}, or whose decode steps give {flag.slo_itl} its context distribution (Azure"
        " CSV, Mooncake JSONL, BurstGPT CSV)."))
    slo_ttft: float | None = declared_as(SloOptions, "slo_ttft", default=None)
    slo_itl: float | None = declared_as(SloOptions, "slo_itl", default=None)
    context: int | None = option(None, help=(
        "{flag.slo_itl}: tokens of context of every decoding request (or {flag.trace} for a "
        "distribution)."))
    max_requests: int | None = option(None, help=(
        "Use the trace's first N requests ({flag.slo_itl}, {flag.tune})."))
    trace_format: str | None = option(None, help=(
        "{flag.tune}: the trace's format, azure, mooncake or burstgpt (default: detected), as tune's."))
    qps: float | None = option(None, help="{flag.tune}: retime the trace to this many requests/s, as tune's.")
    rate_scale: float | None = option(None, help="{flag.tune}: multiply the trace's arrival rate, as tune's.")
    duration: float | None = option(None, help=(
        "{flag.tune}: only requests arriving in the first S seconds, as tune's."))
    workers: int | None = option(None, help=(
        "{flag.tune}: processes (default: the cores available), as tune's."))
    dp: int | None = option(None, help=(
        "Not taken: gen-config {flag.tune} tunes one server; 'pdmux tune --dp N' tunes replicas behind a "
        "router and writes the YAML too."))
    calibration: Path | str | None = option(None, help=(
        "{flag.slo_itl} or {flag.tune}: calibration.yaml from 'pdmux bench' and/or 'pdmux calibrate' for "
        "the cost model."))
    cost_model: str = option("roofline", help="{flag.slo_itl}: roofline (fitted to measurements) or chapter.")
    step_overhead_ms: float | None = option(None, help=(
        "{flag.slo_itl}, roofline: the scheduler's CPU time per step, ms (default: "
        "profiles/efficiency/serving.yaml's, as simulate)."))
    per_request_overhead_ms: float | None = option(None, help=(
        "{flag.slo_itl}, roofline: its CPU time per running request per step, ms (default: as simulate)."))
    max_running_requests: int | None = declared_as(ServerOptions, "max_running_requests")
    model: str = option(DEFAULT_MODEL, short="-m", help=(
        "Model served (for {flag.tune} and {flag.slo_itl}; with {flag.tp} its heads and widths must "
        "split)."))
    tp: int = option(1, help=TP_HELP + " The launch line gains --tp-size N.")
    sglang: str = sglang_revision()
    speculative_algorithm: str | None = option(None, help=(
        "SGLang's flag: speculative decoding beside pdmux (refused where the {flag.sglang} revision "
        "cannot run the pair; 0.5.23 cannot); the launch line gains it."))
    speculative_draft_model_path: Path | str | None = declared_as(CheckConfigRequest,
                                                                  "speculative_draft_model_path")


@dataclass(frozen=True)
class GenConfigResult:
    """The config and how to launch it.

    ``config``: :class:`pdmux_cli.sglang.pdmux_config.PdmuxConfig`; ``yaml``: its text (as written to
    ``output``).
    ``path_text``: the path the launch line names. ``launch_flags``: SGLang's server flags, one argument each;
    ``launch_env``: environment settings a TP launch needs; ``sglang_notes``: the revision's notes.
    ``speculative_flags``: the speculative decoding arguments among ``launch_flags`` (the launch line's end).
    ``support``: :class:`pdmux_cli.sglang.revisions.ModelSupport` of ``model_name`` under the revision.
    ``tune``: tune's JSON summary (``tune``), ``slo_levels``: the SLO levels' (``slo_itl``), else ``None``;
    ``slo``: ``(SloLevels, Setup, notes)`` for rendering them (``notes``: findings, :func:`levels_findings`'s
    after the trace's bad rows). ``provenance``: the JSON's ``"pdmux"`` block.
    """

    gpu: str
    sm_count: int
    compute_capability: str
    tp: int
    output: Path | None
    yaml: str
    config: Any
    path_text: str
    launch_flags: list[str]
    launch_env: list[str]
    sglang_notes: list[str]
    support: Any
    model_name: str
    tune: dict[str, Any] | None = None
    slo_levels: dict[str, Any] | None = None
    tune_search: Any = None
    slo: tuple[Any, Any, list[Finding]] | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    speculative_flags: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """What ``pdmux gen-config --json`` prints."""
        c = self.config
        return with_provenance(
            {
                "gpu": self.gpu,
                "sm_count": self.sm_count,
                "compute_capability": self.compute_capability,
                "tp": self.tp,
                "gpus": self.tp,
                "output": str(self.output) if self.output is not None else None,
                "yaml": self.yaml,
                "config": {
                    "sm_group_num": c.sm_group_num,
                    "manual_divisions": [list(e) for e in c.manual_divisions],
                    "split_forward_token_budget": c.split_forward_token_budget,
                    "decode_bs_divisor": c.decode_bs_divisor,
                    "max_split_forward_layers": c.max_split_forward_layers,
                },
                "launch_flags": self.launch_flags,
                "launch_env": self.launch_env,
                "sglang_notes": self.sglang_notes,
                "tune": self.tune,
                "sglang_support": self.support.as_dict(),
                **({"slo_levels": self.slo_levels} if self.slo_levels is not None else {}),
            },
            self.provenance,
        )

    @property
    def launch_command(self) -> str:
        """The whole SGLang launch line for a shell (:func:`pdmux_cli.sglang.pdmux_config.launch_command`)."""
        from ..sglang.pdmux_config import launch_command

        return launch_command(
            self.path_text, self.config.sm_group_num, tp=self.tp, env=tuple(self.launch_env),
            extra=tuple(self.speculative_flags))


def _speculation_flags(r: GenConfigRequest) -> list[str]:
    """The speculative flags of the launch line
    (:func:`pdmux_cli.sglang.speculative_args.pdmux_speculation_flags`), the draft's layers read from its
    ``config.json``; refused beside ``tune`` (tune simulates; ``pdmux tune`` takes the speculative options
    with an acceptance length)."""
    from ..sglang.speculative_args import pdmux_speculation_flags

    path = r.speculative_draft_model_path
    if r.speculative_algorithm is not None and r.tune:
        raise InputError("{flag.speculative_algorithm} with {flag.tune}: tune pdmux with speculation through "
                         "pdmux tune and its speculative options (they need an acceptance length)",
                         param="speculative_algorithm", values={})
    from .server import speculative_launch_flags

    if r.speculative_algorithm is None:
        return pdmux_speculation_flags(r.sglang, None, None, str(path) if path is not None else None)
    return speculative_launch_flags(r.sglang, r.speculative_algorithm, path)


def gen_config(request: GenConfigRequest, progress: ProgressFactory | None = None) -> GenConfigResult:
    """The pdmux YAML for :class:`GenConfigRequest`, validated, written to ``request.output`` when given.

    ``progress``: a :data:`pdmux_cli.workflows.progress.ProgressFactory` for the ``tune`` search's bar
    (``None``: none). ``slo_itl`` sizes SLO levels with :func:`slo_levels_config`; ``tune`` searches with
    :func:`pdmux_cli.workflows.tune.tune_for_gen_config` (the simulator: numpy is imported only then).

    Raises :class:`InputError` for options that do not go together (``tune``-only options without it, SLO
    levels with ``divisions``, ...), knobs <= 0 or past SGLang's limit, an unknown GPU, model or revision, a
    ``tp`` the model does not split into, an output that is not writable or is an input, a config SGLang
    0.5.23 refuses, and the refusals of the tune and of SLO levels; each names the parameter at fault by its
    Python name (``param``; the CLI prints its flag, :mod:`pdmux_cli.messages`).
    """
    from ..sglang import pdmux_config as pc
    from ..sglang import split_levels
    from ..util.atomic import check_writable, refuse_overwriting_inputs
    from .files import gpu_file, model_file

    r = request
    spec_flags = _speculation_flags(r)
    device = resolve_device(r.gpu, r.sms, r.cc)
    sm_group_num = r.sm_group_num
    decode_bs_divisor = r.decode_bs_divisor
    token_budget = r.token_budget
    check_positive_knobs(
        sm_group_num=sm_group_num, decode_bs_divisor=decode_bs_divisor, token_budget=token_budget
    )
    split_levels.check_sm_group_num(sm_group_num, device.sm_count)
    from ..multigpu.tensor_parallel import check_tp_value

    tp = check_tp_value(r.tp)
    from ..catalog.model import load_model
    from ..sglang.revisions import get_revision, model_support

    served = load_model(r.model)
    support = model_support(served.architectures, r.sglang)
    if tp > 1:
        from ..multigpu.tensor_parallel import shard

        shard(served, tp)  # SGLang refuses a model whose heads or widths tp does not divide
    output = r.output
    trace = r.trace
    calibration = r.calibration
    if output is not None and str(output) == "-":
        output = None  # the usual spelling of standard output
    tune = bool(r.tune)
    slo_itl, slo_ttft = r.slo_itl, r.slo_ttft
    context, max_requests = (
        r.context,
        r.max_requests,
    )
    workers, dp = r.workers, r.dp
    # Before any work (a --tune search takes minutes): the output must be writable and not an input.
    check_writable(output)
    slo = slo_itl is not None and not tune
    refuse_overwriting_inputs(
        output, trace, calibration, model_file(r.model) if tune or slo else None, gpu_file(r.gpu)
    )
    _refuse_mixed_options(r, tune, slo, trace, calibration, context, max_requests, workers, dp, slo_ttft,
                          (sm_group_num, decode_bs_divisor, token_budget))
    tune_summary = tune_search = slo_summary = slo_view = cost_block = None
    if slo:
        # SLO levels are sized by the simulator's server set-up
        server_terms = {"step_overhead_ms": r.step_overhead_ms,
                        "per_request_overhead_ms": r.per_request_overhead_ms,
                        "max_running_requests": r.max_running_requests}
        config, levels, setup, slo_notes = slo_levels_config(
            device.gpu, r.model, slo_itl, context=context, trace=trace, max_requests=max_requests,
            calibration=calibration, cost_model=str(r.cost_model).strip().lower(), tp=tp,
            sm_group_num=sm_group_num, token_budget=token_budget, **server_terms)
        slo_summary = levels_dict(levels, setup, levels.context_source)
        slo_view = (levels, setup, slo_notes)
        cost_block = step_model_provenance(setup.step_model, calibration=calibration)
    elif tune:
        # the tune is the simulator's
        from .tune import search_dict, tune_for_gen_config

        tune_search, _ = tune_for_gen_config(
            device.gpu, trace, slo_ttft, slo_itl, model=r.model, tp=tp, max_requests=max_requests,
            calibration=calibration, sglang=r.sglang, trace_format=r.trace_format, qps=r.qps,
            rate_scale=r.rate_scale, duration=r.duration, workers=workers, progress=progress)
        config, tune_summary = tune_search.best_row.candidate.config, search_dict(tune_search)
        cost_block = _tune_cost_model(device.gpu, served, tp, calibration)
    else:
        config = _levels_config(r, device, sm_group_num, decode_bs_divisor, token_budget)
    _refuse_invalid(config, device)
    text = pc.dump_config(config)
    path_text = str(output) if output is not None else "pdmux.yaml"
    flags = pc.launch_flags(path_text, config.sm_group_num, tp) + spec_flags
    from ..messages import render_all
    from ..sglang.revision_rules import revision_findings

    unused = (None if config.manual_divisions else
              split_levels.unused_groups(split_levels.plan_groups(device.sm_count, device.cc,
                                                                  config.sm_group_num), config.sm_group_num))
    rev_notes = render_all([*revision_findings(r.sglang, tp), *([unused] if unused else [])])
    launch_env = list(get_revision(r.sglang).tp_launch) if tp > 1 else []
    if output is not None:
        from ..util.atomic import write_text_atomic

        write_text_atomic(output, text)
    return GenConfigResult(
        gpu=device.name,
        sm_count=device.sm_count,
        compute_capability=device.cc_text,
        tp=tp,
        output=output,
        yaml=text,
        config=config,
        path_text=path_text,
        launch_flags=flags,
        speculative_flags=spec_flags,
        launch_env=launch_env,
        sglang_notes=rev_notes,
        support=support,
        model_name=served.name,
        tune=tune_summary,
        slo_levels=slo_summary,
        tune_search=tune_search,
        slo=slo_view,
        provenance=provenance(sglang=get_revision(r.sglang).key, cost_model=cost_block),
    )


def _refuse_invalid(config: Any, device: Any) -> None:
    """:class:`InputError` with the first problem SGLang finds in ``config`` on ``device`` (and how many more:
    check-config lists them), if any (:func:`pdmux_cli.sglang.pdmux_config.validate`)."""
    from ..sglang import pdmux_config as pc

    problems = pc.validate(config, device.sm_count, device.cc)
    if problems:
        more = " (and {more} more problem(s): pdmux check-config lists them)" if len(problems) > 1 else ""
        raise InputError("{where}: {message}" + more, values={"where": problems[0].where,
                                                               "message": problems[0].message,
                                                               "more": len(problems) - 1})


def _refuse_mixed_options(r: GenConfigRequest, tune: bool, slo: bool, trace: Path | None,
                          calibration: Path | None, context: int | None, max_requests: int | None,
                          workers: int | None, dp: int | None, slo_ttft: float | None,
                          knobs: tuple[int, int, int]) -> None:
    """:class:`InputError` for options that do not go together: tune's trace shaping without ``tune``, SLO
    levels' cost-model options without ``slo_itl``, hand-written levels or knobs with either, ``dp`` != 1.
    Each error names the parameter at fault (``param``) by its Python name."""
    if max_requests is not None and trace is None:
        raise InputError("{flag.max_requests} cuts a {flag.trace}: give one, or drop {flag.max_requests}",
                         param="max_requests", values={})
    if dp is not None and dp != 1:
        # the quoted line is a shell command ('pdmux tune'), the same for every caller
        raise InputError(
            "gen-config {flag.tune} tunes one server: for {flag.dp} replicas behind a router run 'pdmux tune "
            "--dp N -o FILE' (same options; it writes the winning YAML and the launch line)",
            param="dp", values={})
    if not tune:
        _refuse_tune_only(r, workers)
    if not slo:
        _refuse_slo_only(r, tune, context, calibration)
    if slo:
        _refuse_with_slo(r, knobs, slo_ttft)
    elif tune:
        _refuse_with_tune(r, knobs, context)
    elif trace is not None or slo_ttft is not None:
        raise InputError("{flag.trace} and {flag.slo_ttft} go with {flag.tune} (or {flag.trace} with "
                         "{flag.slo_itl})", param="trace" if trace is not None else "slo_ttft", values={})


def _refuse_tune_only(r: GenConfigRequest, workers: int | None) -> None:
    """:class:`InputError` for the first of tune's trace-shaping options given without ``tune``."""
    for name, value in (("trace_format", r.trace_format), ("qps", r.qps), ("rate_scale", r.rate_scale),
                        ("duration", r.duration), ("workers", workers)):
        if value is not None:
            raise InputError("{param_flag} goes with {flag.tune} (it shapes the trace tune simulates)",
                             param=name, values={})


def _refuse_slo_only(r: GenConfigRequest, tune: bool, context: int | None, calibration: Path | None) -> None:
    """:class:`InputError` for SLO levels' options given without them (``context``, ``calibration`` unless
    ``tune``; the cost model and its terms)."""
    if context is not None and not tune:
        raise InputError("{flag.context} goes with {flag.slo_itl} (SLO levels)", param="context", values={})
    if calibration is not None and not tune:
        raise InputError("{flag.calibration} goes with {flag.slo_itl} (SLO levels) or {flag.tune}",
                         param="calibration", values={})
    for name, given in (("cost_model", r.cost_model != "roofline"),
                        ("step_overhead_ms", r.step_overhead_ms is not None),
                        ("per_request_overhead_ms", r.per_request_overhead_ms is not None),
                        ("max_running_requests", r.max_running_requests is not None)):
        if given:
            raise InputError("{param_flag} goes with {flag.slo_itl} (SLO levels), without {flag.tune}",
                             param=name, values={})


def _refuse_with_slo(r: GenConfigRequest, knobs: tuple[int, int, int], slo_ttft: float | None) -> None:
    """:class:`InputError` for what SLO levels replace (hand-written levels, the divisor) or never read."""
    if r.divisions is not None or r.manual:
        raise InputError("{flag.slo_itl} writes its own levels and thresholds: drop {flag.divisions}/"
                         "{flag.manual}", param="divisions" if r.divisions is not None else "manual",
                         values={})
    if knobs[1] != 36:
        raise InputError("{flag.slo_itl}'s thresholds replace the linear rule, which never reads "
                         "decode_bs_divisor: drop {flag.decode_bs_divisor}", param="decode_bs_divisor",
                         values={})
    if slo_ttft is not None:
        raise InputError("{flag.slo_ttft} goes with {flag.tune} (SLO levels size decode for the ITL target "
                         "alone)", param="slo_ttft", values={})


def _refuse_with_tune(r: GenConfigRequest, knobs: tuple[int, int, int], context: int | None) -> None:
    """:class:`InputError` for what a tune picks itself (levels, knobs) or takes from its trace."""
    if r.divisions is not None or r.manual:
        raise InputError("{flag.tune} picks the levels itself: drop {flag.divisions}/{flag.manual}",
                         param="divisions" if r.divisions is not None else "manual", values={})
    if knobs != (8, 36, 65536):
        at_fault = next(n for n, v, d in zip(("sm_group_num", "decode_bs_divisor", "token_budget"), knobs,
                                             (8, 36, 65536)) if v != d)
        raise InputError(
            "{flag.tune} searches sm_group_num, decode_bs_divisor and the token budget itself: drop "
            "{flag.sm_group_num}/{flag.decode_bs_divisor}/{flag.token_budget} ('pdmux tune' can narrow the "
            "search)", param=at_fault, values={})
    if context is not None:
        raise InputError("{flag.tune} takes the workload from {flag.trace}: drop {flag.context}",
                         param="context", values={})


def _levels_config(r: GenConfigRequest, device: Any, sm_group_num: int, decode_bs_divisor: int,
                   token_budget: int) -> Any:
    """The config of hand-written ``divisions``, or of SGLang's automatic levels (written out as
    manual_divisions with ``manual``, on Blackwell, and for a revision whose ``divide_sm`` was not read)."""
    from ..sglang import pdmux_config as pc
    from ..sglang import split_levels
    from ..sglang.revisions import get_revision

    if r.divisions is not None:
        entries = pc.parse_divisions(r.divisions)
        config = pc.PdmuxConfig(sm_group_num=len(entries) + 2, manual_divisions=entries,
                                split_forward_token_budget=token_budget, decode_bs_divisor=decode_bs_divisor)
        if sm_group_num not in (8, len(entries) + 2):
            raise InputError("{flag.divisions} has {levels} level(s), so sm_group_num is {implied}, not "
                             "{sm_group_num}: drop {flag.sm_group_num} or change the divisions",
                             param="sm_group_num",
                             values={"levels": len(entries), "implied": len(entries) + 2,
                                     "sm_group_num": sm_group_num})
        return config
    plan = split_levels.plan_groups(device.sm_count, device.cc, sm_group_num)
    # a revision whose divide_sm was not read gets the levels written out (they hold whatever its split)
    return pc.config_from_plan(plan, sm_group_num, token_budget, decode_bs_divisor,
                               manual=r.manual or plan.source == "cuda-granularity"
                               or get_revision(r.sglang).divide_sm == "not read")


def _tune_cost_model(gpu: Any, model: Any, tp: int, calibration: Path | None) -> dict[str, Any]:
    """The provenance of the cost model a gen-config tune simulated with: the roofline model tune builds for
    ``gpu`` and ``model`` at ``tp`` (its defaults: no S_SAT or overhead given), with ``calibration``."""
    from ..costmodel import build_step_model

    cal = None
    if calibration is not None:
        from ..costmodel.calibration_file import load_calibration

        cal = load_calibration(calibration)
    return step_model_provenance(
        build_step_model(gpu, model, calibration=cal, tp=tp), calibration=calibration
    )


def slo_levels_config(gpu_profile: Any, model: str, slo_itl_ms: float, *, context: int | None,
                      trace: Path | None,
                      max_requests: int | None, calibration: Path | None, cost_model: str, tp: int,
                      sm_group_num: int, token_budget: int, step_overhead_ms: float | None = None,
                      per_request_overhead_ms: float | None = None,
                      max_running_requests: int | None = None) -> tuple[Any, Any, Any, list[Finding]]:
    """The SLO levels for gen-config: ``(PdmuxConfig, SloLevels, Setup, notes)``.

    ``gpu_profile``: a :class:`pdmux_cli.catalog.hardware.Gpu` (the cost model needs bandwidth and FLOP/s).
    ``context``: tokens of context of every decoding request, or ``trace``: a trace file whose decode
    steps give the distribution (:func:`pdmux_cli.planning.slo_levels.trace_context`; its first
    ``max_requests``, requests past the model's context length dropped). ``sm_group_num``: at most that
    many stream groups (levels + 2). ``step_overhead_ms``, ``per_request_overhead_ms``,
    ``max_running_requests``: as simulate takes them (``None``: the same defaults). ``notes``: findings,
    the trace's unreadable rows (``workload.bad_rows``) then :func:`levels_findings`. Raises
    :class:`InputError` for bad or conflicting inputs.
    """
    from ..planning import slo_levels as sl
    from .server import ServerOptions, build_setup
    from .workload import WorkloadOptions, fit_to_model, load_workload, workload_notes

    sl.check_target_ms(slo_itl_ms)
    if gpu_profile is None:
        raise InputError("{flag.slo_itl} needs a GPU profile ({flag.gpu}), not {flag.sms}/{flag.cc}: the "
                         "cost model needs its bandwidth and FLOP/s", param="gpu", values={})
    if context is None and trace is None:
        raise InputError("{flag.slo_itl} sizes levels at the workload's context: give {flag.context} TOKENS "
                         "(every decoding request's) or {flag.trace} FILE (the distribution of its decode "
                         "steps), one of them", param="context", values={})
    if context is not None and trace is not None:
        raise InputError("give {flag.context} or {flag.trace}, not both", param="context", values={})
    if sm_group_num < 3:
        raise InputError("{flag.sm_group_num} must be >= 3 (one level at least), got {sm_group_num}",
                         param="sm_group_num", values={"sm_group_num": sm_group_num})
    setup = build_setup(ServerOptions(model=model, cost_model=cost_model, calibration=calibration, tp=tp,
                                      step_overhead_ms=step_overhead_ms,
                                      per_request_overhead_ms=per_request_overhead_ms,
                                      max_running_requests=max_running_requests), gpu_profile=gpu_profile)
    window = sl.model_window(setup.model)
    notes: list[Finding] = []
    if trace is not None:
        workload = load_workload(WorkloadOptions(trace=trace, max_requests=max_requests))
        workload = fit_to_model(workload, setup.model)
        notes.extend(workload_notes(workload))
        batch = sl.trace_context(workload.prompt_tokens, workload.output_tokens, window,
                                 source=f"{trace.name} ({len(workload)} requests)")
    else:
        if context > (setup.model.max_position_embeddings or context):
            raise InputError("{flag.context} {context} is past {model}'s context length of {window} tokens",
                             param="context", values={"context": context, "model": setup.model.name,
                                                      "window": setup.model.max_position_embeddings})
        batch = sl.fixed_context(context, window)
    levels = sl.levels_for_setup(setup, batch, slo_itl_ms, sm_group_num - 2)
    return levels.config(token_budget), levels, setup, [*notes, *levels_findings(levels)]


def levels_findings(levels: Any) -> list[Finding]:
    """The notes under gen-config's table of SLO levels (``levels``: a
    :class:`pdmux_cli.planning.slo_levels.SloLevels`), as findings: ``gen_config.slo_batch_range`` (the
    decode batches sized, ``max_bs``, at the workload's ``context``), ``gen_config.slo_levels_merged`` (the
    rule asked for more levels than ``sm_group_num`` holds), ``gen_config.slo_at_the_edge`` (levels sized
    for exactly ``target_ms``; not where one request misses it), ``gen_config.slo_unmeetable`` (the decode
    batch ``from_bs`` from which even the largest decode share misses the target: its ITL ``itl_ms``,
    ``itl_at_max_ms`` at ``max_bs``)."""
    top = levels.candidates[-1]
    found = [Finding("gen_config.slo_batch_range",
                     {"max_bs": levels.max_bs, "context": levels.context_source})]
    if levels.needed > len(levels.levels):
        found.append(Finding("gen_config.slo_levels_merged",
                             {"needed": levels.needed, "levels": len(levels.levels),
                              "sm_group_num": len(levels.levels) + 2}, "sm_group_num"))
    if levels.unmeetable_from != 1:  # no level meets it at all: there is no edge to stand at
        found.append(Finding("gen_config.slo_at_the_edge", {"target_ms": levels.target_ms}, "config"))
    if levels.unmeetable_from is not None:
        found.append(Finding("gen_config.slo_unmeetable",
                             {"from_bs": levels.unmeetable_from, "prefill_sms": top.prefill_sms,
                              "decode_sms": top.decode_sms, "target_ms": levels.target_ms,
                              "itl_ms": levels.unmeetable_itl_ms, "itl_at_max_ms": levels.itl_at_max_ms,
                              "max_bs": levels.max_bs}, "tp"))
    return found


def levels_dict(levels: Any, setup: Any, context_source: str) -> dict[str, Any]:
    """gen-config --json's ``slo_levels``: the target, the levels with their batch ranges and predicted ITL
    (ms), where the target cannot be met, and the cost model."""
    return {
        "target_itl_ms": levels.target_ms,
        "context": context_source,
        "max_decode_bs": levels.max_bs,
        "levels": [{"prefill_sms": lv.prefill_sms, "decode_sms": lv.decode_sms, "decode_bs_threshold": t,
                    "first_decode_bs": lv.first_bs, "last_decode_bs": lv.last_bs, "itl_min_ms": lv.itl_min_ms,
                    "itl_max_ms": lv.itl_max_ms} for lv, t in zip(levels.levels, levels.thresholds)],
        "unmeetable_from_decode_bs": levels.unmeetable_from,
        "unmeetable_itl_ms": levels.unmeetable_itl_ms,
        "largest_share": {"prefill_sms": levels.candidates[-1].prefill_sms,
                          "decode_sms": levels.candidates[-1].decode_sms,
                          "itl_at_max_decode_bs_ms": levels.itl_at_max_ms},
        "levels_needed": levels.needed,
        "cost_model": setup.step_model.source,
    }
