"""``pdmux estimate`` as a use case: one scenario under prefill-first, chunked, mixed-chunk prefill, PD
multiplexing (and PD disaggregation), from the cost model.

The core is :func:`pdmux_cli.planning.estimate.estimate`; this module resolves the request's names and files
(GPU,
model, pdmux YAML, calibration), builds the :class:`~pdmux_cli.planning.estimate.Scenario`, and says which
cost model
and constants gave the numbers (the JSON's ``"pdmux"`` block). It prints nothing; with ``plot`` it writes
the PNG (whole or not at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from ..provenance import provenance, with_provenance
from ..util.errors import Finding, InputError, short_repr
from .deployment import DeploymentOptions
from .fields import Checked, declared_as, option, sglang_revision
from .pdmux_knobs import PdmuxKnobs
from .server import ServerOptions, SpeculativeKeywords
from .planning_inputs import (
    check_int,
    check_positive_knobs,
    float_tuple,
    int_tuple,
    load_pdmux_yaml,
    resolve_device,
)


@dataclass(frozen=True)
class EstimateRequest(Checked):
    """``pdmux estimate``'s options (units in the names: tokens, ms, bytes, GB/s, us).

    ``model``: a model profile or config.json; ``gpu``: a GPU alias, reported name or profile file (default
    h100). ``decode_bs``: requests decoding when the prompt arrives, each with ``context`` tokens of KV cache;
    ``prompt_tokens``: the prompt that slips in. ``chunk_sizes``: SGLang's default chunked prefill's chunk
    sizes (tokens; ``None``: SGLang's default size for the GPU, none under the chapter model; ``()`` or
    ``"none"``: no such row); ``mixed_chunk_sizes``: ``--enable-mixed-chunk``'s. ``cost_model``:
    ``"roofline"``
    or ``"chapter"``. ``s_sat``: SMs reaching 95% of HBM bandwidth (one PD-mux row each).
    ``bandwidth_efficiency``
    and ``mfu``: the chapter model's fractions. ``step_overhead_ms``, ``per_request_overhead_ms``: the
    roofline
    model's CPU time per step and per request. ``weight_bytes`` (per weight), ``kv_bytes`` (per KV element) or
    ``kv_cache_dtype`` (SGLang's ``--kv-cache-dtype``). ``level``: ``"auto"``, ``"P/D"`` SMs or ``(P, D)``.
    ``all_levels``: every level's ITL and prefill time too. ``sm_group_num``, ``decode_bs_divisor``,
    ``token_budget``: SGLang's knobs (``None``: ``config``'s, else 8, 36, 65536). ``config``: a pdmux YAML.
    ``flops_dtype``: bf16, fp16 or fp8. ``calibration``: a calibration.yaml (``pdmux bench`` / ``calibrate``).
    ``tp``: tensor parallelism. ``disagg``: ``"XPYD"`` for a PD-disaggregation row, over ``kv_link`` (auto,
    nvlink, pcie, rdma; ``kv_link_gb_s``, ``kv_link_latency_us`` override it), instances of ``disagg_tp`` GPUs
    (default ``tp``). ``plot``: a PNG to write (ITL against prefill time at every level). ``sglang``: the
    SGLang
    revision whose rules apply (``--sglang``).
    """

    model: str = declared_as(ServerOptions, "model")
    gpu: str | None = declared_as(ServerOptions, "gpu")
    decode_bs: int = option(32, help="Requests in decode when the prompt arrives.")
    context: int = option(2048, help="KV-cache tokens of each decode request.")
    prompt_tokens: int = option(8192, help="Tokens of the prompt that slips in.")
    chunk_sizes: tuple[int, ...] | str | None = option(None, help=(
        "Chunk sizes of SGLang's default chunked prefill (decode waits for every chunk), tokens, or 'none' "
        "(default: SGLang's default size for the GPU; none under {flag.cost_model} chapter)."))
    mixed_chunk_sizes: tuple[int, ...] | str = option((2048, 512), help=(
        "Chunk sizes with --enable-mixed-chunk (decode runs in every chunk step; the chapter's chunked "
        "rows), or 'none'."))
    cost_model: str = declared_as(ServerOptions, "cost_model")
    s_sat: tuple[float, ...] | str | None = declared_as(ServerOptions, "s_sat")
    bandwidth_efficiency: float | None = declared_as(ServerOptions, "bandwidth_efficiency")
    mfu: float | None = declared_as(ServerOptions, "mfu")
    step_overhead_ms: float | None = declared_as(ServerOptions, "step_overhead_ms")
    per_request_overhead_ms: float | None = declared_as(ServerOptions, "per_request_overhead_ms")
    eager_launch_ms: float | None = declared_as(ServerOptions, "eager_launch_ms")
    context_length: int | None = declared_as(ServerOptions, "context_length")
    disable_cuda_graph: bool = declared_as(ServerOptions, "disable_cuda_graph")
    moe_runner_backend: str | None = declared_as(ServerOptions, "moe_runner_backend")
    speculative_algorithm: str | None = declared_as(ServerOptions, "speculative_algorithm")
    speculative_num_steps: int | None = declared_as(ServerOptions, "speculative_num_steps")
    speculative_eagle_topk: int | None = declared_as(ServerOptions, "speculative_eagle_topk")
    speculative_num_draft_tokens: int | None = declared_as(ServerOptions, "speculative_num_draft_tokens")
    speculative_draft_model_path: Path | str | None = declared_as(ServerOptions,
                                                                  "speculative_draft_model_path")
    speculative_accept_length: float | None = declared_as(ServerOptions, "speculative_accept_length")
    weight_bytes: float | None = declared_as(ServerOptions, "weight_bytes")
    kv_bytes: float | None = declared_as(ServerOptions, "kv_bytes")
    kv_cache_dtype: str | None = declared_as(ServerOptions, "kv_cache_dtype")
    level: tuple[int, int] | str | None = option("auto", help=(
        "PREFILL/DECODE SMs, e.g. 96/36, or 'auto' for SGLang's choice."))
    all_levels: bool = option(False, help="Also show ITL and prefill time at every level.")
    sm_group_num: int | None = declared_as(PdmuxKnobs, "sm_group_num")
    decode_bs_divisor: int | None = declared_as(PdmuxKnobs, "decode_bs_divisor")
    token_budget: int | None = declared_as(PdmuxKnobs, "token_budget")
    config: Path | str | None = declared_as(PdmuxKnobs, "config")
    flops_dtype: str | None = declared_as(ServerOptions, "flops_dtype")
    calibration: Path | str | None = declared_as(ServerOptions, "calibration")
    tp: int = declared_as(ServerOptions, "tp")
    disagg: str | None = declared_as(DeploymentOptions, "disagg")
    kv_link: str = declared_as(DeploymentOptions, "kv_link")
    kv_link_gb_s: float | None = declared_as(DeploymentOptions, "kv_link_gb_s")
    kv_link_latency_us: float | None = declared_as(DeploymentOptions, "kv_link_latency_us")
    disagg_tp: int | None = declared_as(DeploymentOptions, "disagg_tp")
    plot: Path | str | None = option(None, writes="file", help=(
        "Write ITL against prefill time at every level, the other policies as points, to this PNG."))
    sglang: str = sglang_revision()


class EstimateServingTerms(TypedDict, total=False):
    """:class:`EstimateRequest`'s :data:`~pdmux_cli.workflows.fields.SERVING_TERMS` fields as the Python
    API's keywords (``pdmux.estimate``, within :class:`EstimateKeywords`: PEP 692's ``**keywords:
    Unpack[...]``), typed for editors; each ``None`` by default, ms (``tests/test_api.py`` holds the two
    equal)."""

    per_request_overhead_ms: float | None
    eager_launch_ms: float | None


class EstimateKeywords(EstimateServingTerms, SpeculativeKeywords, total=False):
    """The keywords ``pdmux.estimate`` takes as ``**keywords: Unpack[EstimateKeywords]``: its serving terms
    and the speculative options (:class:`~pdmux_cli.workflows.server.SpeculativeKeywords`)."""


@dataclass(frozen=True)
class EstimateResult:
    """``estimate``'s answer: :attr:`estimate` (:class:`pdmux_cli.planning.estimate.Estimate`: rows per
    policy in ms,
    the level, memory in bytes, levels, notes), whether a calibration file was used, the PNG written (or
    ``None``), and :attr:`provenance` (the JSON's ``"pdmux"`` block)."""

    estimate: Any
    calibrated: bool = False
    plot: Path | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> list[Any]:
        """One :class:`pdmux_cli.planning.estimate.PolicyRow` per policy (``label``, ``itl_ms``,
        ``prefill_ms``,
        ``tokens_during_prefill``, ``prefill_sms``, ``decode_sms``, ...), as the table's rows."""
        return self.estimate.rows

    @property
    def notes(self) -> list[Finding | str]:
        """The lines printed under the table (``note: ...``)."""
        return self.estimate.notes

    def to_dict(self) -> dict[str, Any]:
        """What ``pdmux estimate --json`` prints (NaN and infinities included as Python floats: the CLI
        refuses
        them, JSON has none)."""
        from .planning_json import estimate_dict

        return with_provenance(estimate_dict(self.estimate), self.provenance)


def parse_level(level: Any) -> tuple[int, int] | None:
    """``--level``: ``"80/52"`` or ``(80, 52)`` -> ``(80, 52)``; ``"auto"`` (or ``None``) -> ``None``;
    anything
    else (an empty value, digits other than ASCII) -> :class:`InputError`."""
    from ..util.numbers import plain_int

    if level is None:
        return None
    if isinstance(level, (tuple, list)):
        if len(level) != 2:
            raise InputError(
                "{flag.level} {level}: give (PREFILL, DECODE) SMs, e.g. (80, 52), or 'auto'",
                values={"level": short_repr(level)},
            )
        return check_int(level[0], "level"), check_int(level[1], "level")
    text = str(level)
    if text.strip().lower() in ("auto", "sglang"):
        return None
    parts = [plain_int(x) for x in text.replace(":", "/").split("/")]
    if len(parts) != 2 or None in parts:
        raise InputError(
            "{flag.level} {text}: write PREFILL/DECODE SMs, e.g. 80/52, or 'auto'",
            values={"text": short_repr(text)},
        )
    return parts[0], parts[1]


def parse_sizes(sizes: Any, param: str) -> tuple[int, ...] | None:
    """Chunk sizes: ``"2048,512"`` or ``(2048, 512)`` -> ``(2048, 512)`` (a size given twice kept once);
    ``"none"`` or ``()`` -> ``()``; ``None`` (not given) -> ``None``. :class:`InputError` about ``param``
    (``"chunk_sizes"``) for a size past :data:`pdmux_cli.planning.estimate.MAX_TOKENS`."""
    if sizes is None:
        return None
    if isinstance(sizes, str) and sizes.strip().lower() in ("none", "off", "-"):
        return ()
    if isinstance(sizes, (tuple, list)) and not sizes:
        return ()
    from ..planning.estimate import MAX_TOKENS

    out = int_tuple(sizes, param)
    too_big = [s for s in out if s > MAX_TOKENS]
    if too_big:  # as the prompt and context: no chunk of a prompt is longer
        raise InputError("{param_flag} {size}: give chunk sizes of 1 to {MAX_TOKENS:,} tokens", param=param,
                         values={"size": short_repr(too_big[0]), "MAX_TOKENS": MAX_TOKENS})
    return out


def _check_context_length(r: EstimateRequest) -> None:
    """Refuse a prompt or decode context at or past ``--context-length`` (SGLang 0.5.23 rejects such a
    request: ``srt/managers/utils.py`` ``validate_input_length``, its limit below the server's context
    length, ``srt/managers/tp_worker.py``), naming the flag; past the model's own length without it:
    :func:`pdmux_cli.planning.estimate.estimate`'s check."""
    for what, tokens in (("prompt", r.prompt_tokens), ("decode context", r.context)):
        if tokens >= r.context_length:  # type: ignore[operator]
            raise InputError("{what} of {tokens:,} tokens is past the server's context length of {limit:,} "
                             "({flag.context_length}): SGLang rejects it; use fewer tokens",
                             param="context_length",
                             values={"what": what, "tokens": tokens, "limit": r.context_length})


def estimate(request: EstimateRequest) -> EstimateResult:
    """ITL, prefill time and tokens gained per policy for one scenario (:class:`EstimateRequest`).

    Raises :class:`InputError` for an unknown GPU, model, SGLang revision or cost model, knobs the cost model
    does not take, sizes out of range, a pdmux YAML SGLang refuses, a calibration measured on another GPU
    (or given with ``s_sat``), a ``plot`` path that is not a writable ``.png`` or is an input, and every
    refusal of :func:`pdmux_cli.planning.estimate.estimate`.
    """
    from ..catalog.model import load_model, with_context_length
    from ..costmodel.options import CostModelOptions
    from ..planning.estimate import Scenario
    from ..planning.estimate import estimate as run_estimate
    from ..sglang import split_levels
    from ..sglang.revisions import get_revision

    r = request
    get_revision(r.sglang)  # an unknown revision is refused before any work
    flops_dtype = r.flops_dtype
    if flops_dtype is not None:
        flops_dtype = str(flops_dtype).strip().lower()
        if flops_dtype not in ("bf16", "fp16", "fp8"):
            raise InputError(
                "{flag.flops_dtype} must be bf16, fp16 or fp8, got {flops_dtype!r}",
                values={"flops_dtype": flops_dtype},
            )
    sm_group_num = r.sm_group_num
    decode_bs_divisor = r.decode_bs_divisor
    token_budget = r.token_budget
    check_positive_knobs(
        sm_group_num=sm_group_num, decode_bs_divisor=decode_bs_divisor, token_budget=token_budget
    )
    config = r.config
    calibration = r.calibration
    plot = r.plot
    if plot is not None:
        from ..util.atomic import check_writable, refuse_overwriting_inputs
        from .files import gpu_file, model_file

        if plot.suffix.lower() != ".png":
            raise InputError(
                "{flag.plot} writes a PNG: give a file name ending in .png, got {plot}",
                values={"plot": plot},
            )
        refuse_overwriting_inputs(plot, config, calibration, model_file(r.model), gpu_file(r.gpu))
        check_writable(plot)
    from ..multigpu.disaggregation import parse_xpyd
    from ..sglang.kv_cache import check_kv_options, resolve_kv_cache
    from .server import speculation_of

    kv_bytes = r.kv_bytes
    check_kv_options(r.kv_cache_dtype, kv_bytes)
    xpyd = parse_xpyd(r.disagg) if r.disagg is not None else None
    device = resolve_device(r.gpu, None, None)
    split_levels.check_sm_group_num(sm_group_num, device.sm_count)
    gpu_profile = device.gpu
    mdl, context_notes = with_context_length(load_model(r.model), r.context_length)
    if r.context_length is not None:
        _check_context_length(r)
    kv_cache = resolve_kv_cache(mdl, r.kv_cache_dtype, kv_bytes)
    cfg, cfg_notes = (
        load_pdmux_yaml(config, device, sm_group_num, r.sglang) if config is not None else (None, [])
    )
    cost_model = str(r.cost_model).strip().lower()
    speculation, spec_notes = speculation_of(r, mdl)
    scenario = Scenario(
        speculation=speculation,
        decode_bs=r.decode_bs,
        context_tokens=r.context,
        prompt_tokens=r.prompt_tokens,
        chunk_sizes=parse_sizes(r.chunk_sizes, "chunk_sizes"),
        mixed_chunk_sizes=parse_sizes(r.mixed_chunk_sizes, "mixed_chunk_sizes") or (),
        # the request's cost-model knobs; S_SAT a tuple here (one PD-mux row each): the scenario's
        cost=CostModelOptions.of(r, cost_model=cost_model, flops_dtype=flops_dtype, s_sat=None),
        disable_cuda_graph=bool(r.disable_cuda_graph),
        s_sat_values=float_tuple(r.s_sat, "s_sat") if r.s_sat is not None else None,
        weight_bytes_per_param=r.weight_bytes,
        kv_bytes_per_element=kv_cache.bytes_per_element,
        level=parse_level(r.level),
        sm_group_num=sm_group_num or (cfg.sm_group_num if cfg else split_levels.DEFAULT_SM_GROUP_NUM),
        decode_bs_divisor=decode_bs_divisor
        or (cfg.decode_bs_divisor if cfg else split_levels.DEFAULT_DECODE_BS_DIVISOR),
        split_forward_token_budget=token_budget
        or (cfg.split_forward_token_budget if cfg else split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET),
        manual_divisions=tuple(cfg.manual_divisions) if cfg else (),
        max_split_forward_layers=(cfg.max_split_forward_layers or 0) if cfg else 0,
        tp=r.tp,
        disagg=xpyd,
        kv_link=r.kv_link,
        kv_link_gb_s=r.kv_link_gb_s,
        kv_link_latency_us=r.kv_link_latency_us,
        disagg_tp=r.disagg_tp,
    )
    cal = _calibration(calibration, gpu_profile, r.s_sat is not None)
    est = run_estimate(
        gpu_profile,
        mdl,
        scenario,
        calibration=cal,
        all_levels=r.all_levels or plot is not None,
        sglang=r.sglang,
    )
    est.notes[:0] = cfg_notes
    est.notes.extend([*context_notes, *spec_notes])
    # mfu and bandwidth_efficiency are the chapter's knobs (CostModelOptions): the roofline refused them above
    if cal is not None and (r.mfu is not None or r.bandwidth_efficiency is not None):
        est.notes.append(Finding("estimate.calibration_replaces_knobs", param="calibration"))
    block = provenance(sglang=get_revision(r.sglang).key, cost_model=cost_model_block(est, calibration))
    if plot is not None:
        _write_plot(plot, est)
    return EstimateResult(est, calibrated=cal is not None, plot=plot, provenance=block)


def _calibration(calibration: Path | None, gpu: Any, s_sat_given: bool) -> Any:
    """The calibration file's :class:`~pdmux_cli.costmodel.calibration_file.Calibration` (``None`` without
    one). Raises :class:`InputError` for one measured on another GPU than ``gpu`` (a profile), or with
    partition terms where an S_SAT was given too (``s_sat_given``)."""
    if calibration is None:
        return None
    from ..catalog.hardware import find_gpu
    from ..costmodel.calibration_file import load_calibration

    cal = load_calibration(calibration)
    try:
        measured_on = find_gpu(cal.gpu_key or cal.gpu_name)
    except InputError:  # a device without a profile: only the SM count can be compared
        measured_on = None
    if measured_on is not None and measured_on.key != gpu.key:
        raise InputError(
            "{calibration} was measured on {name}, not {gpu}: pass {flag.gpu} {key} or calibrate "
            "this GPU ('pdmux bench', 'pdmux calibrate')",
            values={"calibration": calibration, "name": measured_on.name, "gpu": gpu.name,
                    "key": measured_on.key},
        )
    if s_sat_given and cal.has_partitions:
        raise InputError(
            "{flag.s_sat} is a guess that a {flag.calibration} file replaces: give one or the other",
            values={},
        )
    return cal


def _write_plot(plot: Path, est: Any) -> None:
    """The PNG of ITL against prefill time at every level (whole or not at all)."""
    from ..planning.plot import write_tradeoff_plot

    sc = est.scenario
    write_tradeoff_plot(
        plot,
        est,
        f"{est.model} on {est.gpu}: {sc.decode_bs} x {sc.context_tokens} "
        f"tokens decoding, a {sc.prompt_tokens}-token prompt ({est.cost_model} cost model)",
    )


def row_s_sat(est: Any) -> float | list[float | None] | None:
    """The S_SAT of an estimate's PD-mux rows, SMs: one number, a list where each row took its own
    (``s_sat=(44, 66, 88)``), ``None`` where there is no such row; a row's ``None`` where a measured curve
    (a calibration's) stands instead of an S_SAT."""
    import math

    values = [None if r.s_sat is None or not math.isfinite(r.s_sat) else float(r.s_sat)
              for r in est.rows if r.policy == "pdmux"]
    return values[0] if len(values) == 1 else values or None


def cost_model_block(est: Any, calibration: Path | None) -> dict[str, Any]:
    """The JSON's ``"cost_model"`` provenance of an estimate: what the simulation commands give
    (:func:`pdmux_cli.provenance.step_model_provenance` of its step model: the cost model, its efficiency
    profile, the ``calibration`` file, the serving terms' release line or ``"calibration"``), with the S_SAT
    of its PD-mux rows (:func:`row_s_sat`) in place of the model's own."""
    from ..provenance import step_model_provenance

    return {**step_model_provenance(est.step_model, calibration=calibration), "s_sat": row_s_sat(est)}
