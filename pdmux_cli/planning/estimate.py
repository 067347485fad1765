"""One scenario, every policy: what decode's ITL and the new prompt's prefill time are under each.

A decode batch is running (``decode_bs`` requests with ``context_tokens`` each) when one prompt of
``prompt_tokens`` arrives. For each policy: the decode ITL while that prompt is prefilled, the
prompt's prefill time, and how many tokens each decode request gains meanwhile. Policies (named as
SGLang users know them):

- ``prefill-first`` (``--chunked-prefill-size -1``): the whole prompt runs, decode stalls for it;
- ``chunked`` (SGLang's default scheduling): the prompt runs as consecutive chunk batches, and decode
  runs only when no prefill batch can be formed, so it stalls for all the chunks
  (``srt/managers/scheduler.py`` ``get_next_batch_to_run``, 0.5.23);
- ``mixed-chunk`` (``--enable-mixed-chunk``; the chapter's "chunked" rows): every step runs the decode
  batch plus the next piece of the prompt, ``chunk - decode_bs`` tokens (SGLang charges each decode row
  one token of the chunk; the chapter's model puts a whole chunk next to the batch);
- ``pdmux``: decode on ``d`` SMs, prefill on ``p`` SMs, at the level SGLang picks (or ``--level``);
- ``disagg`` (``--disagg XPYD``, SGLang's PD disaggregation; :mod:`pdmux_cli.multigpu.disaggregation`): X
  prefill and Y decode instances of ``--tp`` GPUs each. The prompt is prefilled on a prefill instance with the
  whole GPU (the prefill-first row's prefill time), then its KV cache (one rank's share per GPU) crosses
  the KV link to a decode instance: its TTFT is prefill + transfer. The decode batch runs on a decode
  instance that no prefill ever touches, so every step is the undisturbed decode step.

The step times come from a cost model (:mod:`pdmux_cli.costmodel`): ``roofline`` by default, or
``chapter``, whose defaults reproduce the table of pd-multiplexing-chapter.txt ("Is it worth it: an
estimate") exactly. The engine's CPU time per step is hidden behind the GPU (SGLang's overlap
scheduler) for every policy but pdmux, whose rounds run with the overlap scheduler off and pay it. Under
speculative decoding the baselines follow the release's rule
(:meth:`pdmux_cli.sglang.release_defaults.ReleaseDefaults.speculation_overlaps`): estimate simulates 0.5.23,
which keeps the overlap scheduler on; a release up to 0.5.10 would add the CPU time to every step.

With ``--tp N`` every policy runs on ``N`` GPUs, each holding one rank's shard of the model
(:mod:`pdmux_cli.multigpu.tensor_parallel`): the step times are one rank's, collectives included, and the
memory check is per GPU. Under PD multiplexing every rank builds the same stream groups and takes the
same level (each rank's scheduler applies the same rule to the same batch), and before a finished
prefill joins the decode batch the ranks agree on it with a CPU all-reduce of a "prefill done" flag
(SGLang 0.5.23 ``srt/multiplex/multiplexing_mixin.py`` ``event_loop_pdmux``: ``tp_cpu_group.allreduce``
until every rank reports done), once per prefill, not modelled as time.

Pure: no I/O. The CLI renders :class:`Estimate` as a table or JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from .. import costmodel
from ..catalog import model as mdl
from ..catalog.hardware import Gpu
from ..catalog.model import Model
from ..costmodel import StepModel, pick_flops_dtype
from ..costmodel.operators import rank_kv_bytes_per_token, rank_weight_bytes
from ..costmodel.options import CostModelOptions
from ..multigpu import disaggregation
from ..multigpu.disaggregation import KvLink, Layout
from ..multigpu.tensor_parallel import check_tp_value, for_disagg_tp
from ..sglang import revisions, server_defaults, split_levels
from ..sglang.release_defaults import LATEST
from ..util.errors import Finding, InputError

__all__ = ["Estimate", "LevelRow", "MemoryCheck", "PolicyRow", "Scenario", "default_s_sat_values", "estimate",
           "pick_flops_dtype"]

#: Upper bounds on scenario sizes (tokens, decode batch: in the package, see there; chunked steps per
#: prompt here).
from . import MAX_DECODE_BS, MAX_TOKENS  # noqa: E402  (re-exported: estimate.MAX_TOKENS is public)
MAX_CHUNK_STEPS = 100_000
#: Bytes per weight or KV element: 4-bit (0.5) down to 1-bit packing, up to fp64 and a margin.
BYTES_PER_ELEMENT_RANGE = (0.0625, 16.0)
#: Smallest bandwidth efficiency or MFU taken seriously (0.1%).
MIN_EFFICIENCY = 0.001

#: The chapter's S_SAT values on H100 (44, 66, 88 of 132 SMs) as fractions of the SM count; on
#: other GPUs the chapter model's defaults keep the same fractions (rounded to whole SMs).
DEFAULT_S_SAT_FRACTIONS = (1 / 3, 1 / 2, 2 / 3)

#: The chapter's mixed-chunk sizes (its "chunked 2048" and "chunked 512" rows), tokens.
DEFAULT_MIXED_CHUNK_SIZES = (2048, 512)


@dataclass(frozen=True)
class Scenario:
    """The inputs of one estimate (tokens, SMs, bytes; efficiencies as fractions).

    ``cost_model``: ``"roofline"`` or ``"chapter"``. ``chunk_sizes``: chunk sizes of SGLang's default
    (non-mixed) chunked prefill; ``None`` for SGLang's default size on the GPU under roofline and none
    under chapter (the chapter has no such row). ``mixed_chunk_sizes``: chunk sizes of
    ``--enable-mixed-chunk``. ``level``: an explicit ``(prefill_sms, decode_sms)`` split, or ``None``
    for the level SGLang chooses for ``decode_bs``. ``s_sat_values``: ``None`` for the model's default
    (roofline: the fitted one; chapter: its three fractions of the SM count). ``cost``: the cost model and
    its knobs (:class:`~pdmux_cli.costmodel.options.CostModelOptions`: its ``s_sat`` is taken from
    ``s_sat_values``, one model each; :attr:`cost_model` is its ``cost_model``). ``weight_bytes_per_param``:
    ``None`` for the model's own dtype.
    ``tp``: GPUs the model is sharded over (tensor parallelism, SGLang's ``--tp-size``).
    ``max_split_forward_layers``: the YAML's cap on prefill layers per round (0: none), applied where the
    ``--sglang`` revision reads it (:func:`pdmux_cli.sglang.revision_rules.layer_cap`).
    ``disagg``: ``(X, Y)`` prefill and decode instances of PD disaggregation (``--disagg XPYD``), each
    of ``tp`` GPUs (``disagg_tp`` when given), or ``None`` for no disaggregation row. ``kv_link``,
    ``kv_link_gb_s``, ``kv_link_latency_us``: the KV link's kind and overrides
    (:func:`pdmux_cli.multigpu.disaggregation.kv_link`). ``speculation``: SGLang's speculative decoding
    (:class:`pdmux_cli.sglang.speculative_args.Speculation`) on every policy: a decode step is a round, its
    ITL the round's (one streamed chunk) and each request gets the acceptance length in tokens a round.
    """

    decode_bs: int = 32
    context_tokens: int = 2048
    prompt_tokens: int = 8192
    chunk_sizes: tuple[int, ...] | None = None
    mixed_chunk_sizes: tuple[int, ...] = DEFAULT_MIXED_CHUNK_SIZES
    s_sat_values: tuple[float, ...] | None = None
    cost: CostModelOptions = CostModelOptions()
    weight_bytes_per_param: float | None = None
    kv_bytes_per_element: float = 2
    level: tuple[int, int] | None = None
    sm_group_num: int = split_levels.DEFAULT_SM_GROUP_NUM
    decode_bs_divisor: int = split_levels.DEFAULT_DECODE_BS_DIVISOR
    split_forward_token_budget: int = split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET
    manual_divisions: tuple[tuple[int, int, int], ...] = ()
    max_split_forward_layers: int = 0
    tp: int = 1
    disagg: tuple[int, int] | None = None
    disable_cuda_graph: bool = False
    kv_link: str = "auto"
    kv_link_gb_s: float | None = None
    kv_link_latency_us: float | None = None
    disagg_tp: int | None = None
    speculation: Any = None

    @property
    def cost_model(self) -> str:
        """``"roofline"`` or ``"chapter"``: :attr:`cost`'s."""
        return self.cost.cost_model

    def validate(self) -> None:
        """Raise :class:`InputError` (one line) for sizes that make no sense or that no deployment
        has (the bounds above)."""
        check_tp_value(self.tp)
        chosen = costmodel.model_class(self.cost_model)
        if self.disable_cuda_graph and chosen is not None and not chosen.models_cpu_time:
            raise InputError("{param_flag} applies to {flag.cost_model} roofline (the chapter's model has no "
                             "CPU time)", param="disable_cuda_graph", values={})
        # (field, parameter: the API keyword, whose CLI flag the error names)
        for name, param, top in (("decode_bs", "decode_bs", MAX_DECODE_BS),
                                 ("context_tokens", "context", MAX_TOKENS),
                                 ("prompt_tokens", "prompt_tokens", MAX_TOKENS)):
            value = getattr(self, name)
            if not 0 < value <= top:
                raise InputError("{param_flag} must be from 1 to {top:,}, got {value}", param=param,
                                 values={"top": top, "value": value})
        for name, sizes in (("chunk sizes", self.chunk_sizes or ()),
                            ("mixed chunk sizes", self.mixed_chunk_sizes)):
            if any(c <= 0 for c in sizes):
                raise InputError(f"{name} must be > 0, got {list(sizes)}")
            if any(-(-self.prompt_tokens // c) > MAX_CHUNK_STEPS for c in sizes):
                raise InputError(f"a chunk size below {-(-self.prompt_tokens // MAX_CHUNK_STEPS)} tokens "
                                 f"cuts the prompt into more than {MAX_CHUNK_STEPS:,} steps: use larger "
                                 "chunks")
        if self.s_sat_values is not None and (not self.s_sat_values or any(s < 1 for s in self.s_sat_values)):
            raise InputError(f"S_SAT values must be at least 1 SM, got {list(self.s_sat_values)}")
        for name in ("bandwidth_efficiency", "mfu"):
            value = getattr(self.cost, name)
            if value is not None and not MIN_EFFICIENCY <= value <= 1:
                raise InputError(f"{name.replace('_', ' ')} must be from {MIN_EFFICIENCY} to 1, got {value}")
        low, high = BYTES_PER_ELEMENT_RANGE
        if self.weight_bytes_per_param is not None and not low <= self.weight_bytes_per_param <= high:
            raise InputError(f"bytes per weight must be from {low} to {high:g}, got "
                             f"{self.weight_bytes_per_param}")
        if not low <= self.kv_bytes_per_element <= high:
            raise InputError(f"bytes per KV element must be from {low} to {high:g}, got "
                             f"{self.kv_bytes_per_element}")
        if self.disagg is not None:
            disaggregation.parse_xpyd(f"{self.disagg[0]}P{self.disagg[1]}D")
            if self.disagg_tp is not None:
                try:
                    check_tp_value(self.disagg_tp)
                except InputError as exc:
                    raise for_disagg_tp(exc) from None
        elif (self.kv_link, self.kv_link_gb_s, self.kv_link_latency_us, self.disagg_tp) != (
            "auto",
            None,
            None,
            None,
        ):
            raise InputError(
                "{flag.kv_link}, {flag.kv_link_gb_s}, {flag.kv_link_latency_us} and {flag.disagg_tp} "
                "describe {flag.disagg}'s instances: give {flag.disagg} XPYD too",
                param="disagg",
                values={},
            )


@dataclass(frozen=True)
class PolicyRow:
    """One row of the comparison. Times in ms; ``tokens_during_prefill`` per decode request.

    ``policy``: ``"decode-only"``, ``"prefill-first"``, ``"chunked"``, ``"mixed-chunk"``, ``"pdmux"`` or
    ``"disagg"``.
    ``itl_ms``: the decode ITL while the prompt is prefilled (mean over the mixed steps; the one stalled
    step for prefill-first and chunked). ``steps``: decode steps during the prefill.
    For pdmux: ``decode_alone_ms`` / ``prefill_alone_ms``, each phase alone on its SMs, and
    ``decode_corun_ms`` / ``prefill_corun_ms`` with co-run interference (``itl_ms`` adds the CPU time of
    a round to ``decode_corun_ms``; ``prefill_ms`` is ``prefill_corun_ms``). For disagg: ``prefill_ms``
    is the TTFT (``prefill_alone_ms``, the whole-GPU prefill on a prefill instance, plus
    ``transfer_ms``, the KV transfer to a decode instance), ``itl_ms`` = ``decode_alone_ms``, the
    undisturbed decode step. ``gpus``: GPUs the policy runs on (the tensor-parallel degree; for disagg
    ``(X + Y) x tp``); ``layout``: how (a :class:`~pdmux_cli.multigpu.disaggregation.Layout`).
    """

    policy: str
    label: str
    itl_ms: float
    steps: int | None
    prefill_ms: float | None
    tokens_during_prefill: int | None
    chunk_tokens: int | None = None
    prefill_sms: int | None = None
    decode_sms: int | None = None
    s_sat: float | None = None
    decode_alone_ms: float | None = None
    prefill_alone_ms: float | None = None
    decode_corun_ms: float | None = None
    prefill_corun_ms: float | None = None
    gpus: int = 1
    layout: Layout = field(default_factory=Layout)
    transfer_ms: float | None = None


@dataclass(frozen=True)
class LevelRow:
    """One PD-multiplexing level of ``--all-levels``: its split, prefill time and ITL per S_SAT, and
    each phase alone (ms) at the first S_SAT."""

    group: int
    prefill_sms: int
    decode_sms: int
    chosen: bool
    prefill_ms: float
    itl_ms: tuple[float, ...]
    tokens_during_prefill: tuple[int, ...]
    decode_alone_ms: float = math.nan
    prefill_alone_ms: float = math.nan
    decode_corun_ms: float = math.nan


@dataclass(frozen=True)
class MemoryCheck:
    """Whether weights plus the scenario's KV cache fit each GPU (bytes, one rank's with ``tp > 1``),
    and SGLang's KV pool under pdmux (chunking off): its tokens (0 when none is left) and
    ``mem_fraction_static`` (0 when SGLang's default reserve is more than the GPU's memory)."""

    weight_bytes: float
    kv_cache_bytes: float
    gpu_memory_bytes: float
    kv_tokens_needed: int = 0
    pdmux_pool_tokens: int = 0
    pdmux_mem_fraction: float = 0.0
    tp: int = 1

    @property
    def needed_bytes(self) -> float:
        return self.weight_bytes + self.kv_cache_bytes

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.gpu_memory_bytes


@dataclass(frozen=True)
class Estimate:
    """The result: rows per policy, the split used, memory check, and notes for the user.

    ``notes``: what the user should know, as :class:`~pdmux_cli.util.errors.Finding` (codes ``estimate.*``,
    ``levels.*``, ``sglang.*``; :mod:`pdmux_cli.messages` words them) or, for the cost model's caveats not
    yet structured, text. ``throughput_source``: the cost model's source line; with one PD-multiplexing
    row per S_SAT it leaves the S_SAT out (``s_sat_per_row``), each row saying its own.
    """

    gpu: str
    model: str
    scenario: Scenario
    groups: list[split_levels.Split]
    group_index: int
    level: split_levels.Split
    level_source: str
    layers_per_round: int
    prefill_rounds: int
    flops_dtype: str
    throughput_source: str
    rows: list[PolicyRow]
    memory: MemoryCheck
    levels: list[LevelRow] = field(default_factory=list)
    notes: list[Finding | str] = field(default_factory=list)
    cost_model: str = "roofline"
    cpu_step_ms: float = 0.0
    tp: int = 1
    kv_link: KvLink | None = None
    kv_transfer_bytes: float = 0.0
    #: whether the chosen SGLang revision can run pdmux for this model (sglang_support.model_support)
    pdmux_support: Any = None
    #: the request path's fixed delay a TTFT adds to the prefill times (admission + first token, ms), and a
    #: step's time per request beyond the kernels (ms; in the rows' step times), from the serving profile
    request_delay_ms: float = 0.0
    per_request_ms: float = 0.0
    #: per row, a request's whole-server TTFT (prefill time + the request path, ms) and its 80% interval
    #: (:mod:`pdmux_cli.costmodel.uncertainty`; ``None`` under the chapter's model or with no request path)
    ttft: tuple[tuple[float, tuple[float, float] | None], ...] = ()
    #: how :attr:`ttft`'s intervals were drawn (a ``pdmux_cli.costmodel.uncertainty.METHOD_*`` text; ``""``
    #: where no row has one)
    ttft_method: str = ""
    #: the step model of the whole-GPU rows (:class:`pdmux_cli.costmodel.StepModel`; the PD-mux rows of
    #: several S_SATs each have their own): what :func:`pdmux_cli.provenance.step_model_provenance` reads
    step_model: Any = None
    #: under speculative decoding: the round taken apart (``estimate.speculative_round``'s values: draft,
    #: verify and extend ms, round and TPOT ms, the plain step and the speedup) and, where the revision
    #: cannot run pdmux beside it, why (``estimate.pdmux_speculation``'s error; the PD-mux rows are then
    #: not reachable)
    speculation: dict | None = None
    speculation_refusal: str | None = None

    @property
    def pdmux_runs(self) -> bool:
        """Whether the revision can run the PD-mux rows: the model supported (:attr:`pdmux_support`) and no
        refusal beside the speculation (:attr:`speculation_refusal`)."""
        supported = self.pdmux_support is None or self.pdmux_support.runs
        return supported and self.speculation_refusal is None


def pdmux_prefill_end_s(prefill_s: float, round_s: float, layers: int, per_round: int) -> float:
    """When a prompt's prefill ends under PD multiplexing: ``prefill_s`` seconds of work on the prefill
    SMs in ``layers`` equal layer slices, ``per_round`` of them submitted each round of ``round_s``
    seconds (one decode step plus the CPU's work). A slice starts when it is submitted and the previous
    one has finished, so when a round outlasts its slice the prefill stream waits for the next round:
    the end is ``max(prefill_s, (rounds - 1) x round_s + last slice)``, as in SGLang 0.5.23's
    ``event_loop_pdmux`` (``srt/multiplex/multiplexing_mixin.py``) and the simulator's pdmux loop.
    Seconds; 0 for no work."""
    if prefill_s <= 0 or layers <= 0:
        return 0.0
    layer_s = prefill_s / layers
    t = stream_free = 0.0
    submitted = 0
    while submitted < layers:
        k = min(per_round, layers - submitted)
        stream_free = max(t, stream_free) + k * layer_s
        submitted += k
        t += round_s
    return stream_free


def default_s_sat_values(total_sms: int) -> tuple[float, ...]:
    """The chapter's S_SAT choices scaled to ``total_sms``: 44, 66, 88 on 132 SMs (1/3, 1/2, 2/3)."""
    return tuple(float(round(total_sms * f)) for f in DEFAULT_S_SAT_FRACTIONS)


def memory_check(gpu: Gpu, model: Model, scenario: Scenario) -> MemoryCheck:
    """Weights (all parameters) plus the KV cache of the decode batch and the new prompt vs memory,
    and SGLang's KV pool under pdmux (:mod:`pdmux_cli.sglang.server_defaults`, chunking off), per GPU: with
    ``tp > 1`` one rank's weights and KV (:func:`pdmux_cli.costmodel.operators.rank_weight_bytes`,
    :func:`~pdmux_cli.costmodel.operators.rank_kv_bytes_per_token`) against its memory and SGLang's
    per-rank reserve (``mem_fraction_static`` grows the reserve by ``tp / 8`` GiB). Under speculation the
    draft's weights (:func:`pdmux_cli.costmodel.speculative.draft_weight_bytes`) and its KV layers in
    each token's cell count too, as in the simulator (``engine.Setup``)."""
    tp = scenario.tp
    weights = rank_weight_bytes(model, scenario.weight_bytes_per_param, tp)
    whole_kv = mdl.kv_bytes_per_token(model, scenario.kv_bytes_per_element)
    rank_kv = rank_kv_bytes_per_token(model, scenario.kv_bytes_per_element, tp)
    spec = scenario.speculation
    if spec is not None:
        from ..costmodel.speculative import draft_cell_factor, draft_weight_bytes

        weights += draft_weight_bytes(spec, scenario.weight_bytes_per_param, tp)
        rank_kv *= draft_cell_factor(spec, model.num_layers)
    kv = scenario.decode_bs * mdl.kv_bytes(model, scenario.context_tokens, scenario.kv_bytes_per_element)
    kv += mdl.kv_bytes(model, scenario.prompt_tokens, scenario.kv_bytes_per_element)
    kv *= rank_kv / whole_kv
    tokens = scenario.decode_bs * scenario.context_tokens + scenario.prompt_tokens
    fraction, pool = 0.0, 0
    try:
        fraction = server_defaults.mem_fraction_static(gpu.memory_bytes, -1, tp)
        pool = server_defaults.kv_pool(gpu.memory_bytes, weights, rank_kv, fraction).tokens
    except InputError:
        pass
    return MemoryCheck(weights, kv, gpu.memory_bytes, tokens, pool, fraction, tp)


def _round_tokens(prefill_s: float, itl_s: float) -> int:
    """Tokens a decode request gains during the prefill, rounded as the chapter prints them."""
    ratio = prefill_s / itl_s
    if not math.isfinite(ratio):
        raise InputError("the inputs give a non-finite time (NaN or infinity): check the sizes and "
                         "efficiencies")
    return int(f"{ratio:.0f}")


def _check_context(model: Model, scenario: Scenario) -> None:
    """Refuse a prompt or a decode context past the model's context length (SGLang rejects such a
    request: ``srt/managers/utils.py`` ``validate_input_length``)."""
    limit = model.max_position_embeddings
    if not limit:
        return
    for what, tokens in (("prompt", scenario.prompt_tokens), ("decode context", scenario.context_tokens)):
        if tokens >= limit:
            raise InputError(f"{what} of {tokens:,} tokens is past {model.name}'s context length of "
                             f"{limit:,} (max_position_embeddings): SGLang rejects it; use fewer tokens")


def _driver_level(gpu: Gpu, total: int, split: tuple[int, int]) -> tuple[split_levels.Split, Finding | None]:
    """``--level P/D`` as the CUDA driver makes it (:func:`pdmux_cli.sglang.split_levels.driver_split`: on
    H100 100/32 runs as 104/28), and a finding when that differs from what was asked (``None`` otherwise).

    Raises :class:`InputError` when P or D is not > 0, P + D is not the GPU's SM count, or the
    rounded split leaves decode fewer SMs than the granularity's minimum.
    """
    p_sm, d_sm = split
    if p_sm <= 0 or d_sm <= 0 or p_sm + d_sm != total:
        raise InputError(
            f"level {p_sm}/{d_sm} is not a split of {gpu.name}'s {total} SMs: "
            "prefill and decode SMs must both be > 0 and add up to the SM count"
        )
    major = gpu.compute_capability[0]
    minimum, multiple = split_levels.cuda_sm_granularity(major)
    real = split_levels.driver_split(p_sm, d_sm, total, major)
    if real.decode_sms < minimum:
        raise InputError(
            f"level {p_sm}/{d_sm} cannot be made on {gpu.name}: green contexts give prefill a multiple of "
            f"{multiple} SMs (at least {minimum}), so it would run "
            f"{real.prefill_sms}/{max(real.decode_sms, 0)}, leaving decode fewer than {minimum}")
    if real == (p_sm, d_sm):
        return real, None
    return real, Finding(
        "estimate.level_rounded",
        {
            "asked_prefill_sms": p_sm,
            "asked_decode_sms": d_sm,
            "prefill_sms": real.prefill_sms,
            "decode_sms": real.decode_sms,
            "multiple": multiple,
            "major": major,
        },
        "level",
    )


def _models(gpu: Gpu, model: Model, scenario: Scenario, calibration) -> list[tuple[StepModel, float | None]]:
    """One cost model per S_SAT to show (one for a calibration), with the S_SAT it uses."""
    total = gpu.require_sm_count()
    served = {"weight_bytes_per_param": scenario.weight_bytes_per_param,
              "kv_bytes_per_element": scenario.kv_bytes_per_element, "tp": scenario.tp,
              "speculation": scenario.speculation, "calibration": calibration}

    def build(s_sat: float | None) -> StepModel:
        return costmodel.build_step_model(gpu, model, replace(scenario.cost, s_sat=s_sat), **served)

    if calibration is not None:
        step_model = build(None)
        if not calibration.has_partitions:  # whole-GPU terms only: the S_SAT guesses still apply
            values = scenario.s_sat_values or (None,)
            return [(build(v), v if v is not None else getattr(step_model, "s_sat", None)) for v in values]
        return [(step_model, None)]
    values = scenario.s_sat_values
    if values is None:
        chosen = costmodel.model_class(scenario.cost_model)
        values = default_s_sat_values(total) if chosen is not None and chosen.guesses_s_sat else (None,)
    if any(v is not None and v > total for v in values):
        raise InputError(f"S_SAT {max(v for v in values if v is not None):g} is more SMs than {gpu.name} has "
                         f"({total}): S_SAT is the SM count at which decode reaches full bandwidth")
    out = []
    for value in values:
        step_model = build(value)
        out.append((step_model, getattr(step_model, "s_sat", value)))
    return out


def _speculative_rows(rows: list[PolicyRow], speculation: Any) -> list[PolicyRow]:
    """``rows`` with each decode request's tokens during the prefill counted in tokens, not rounds
    (``tokens_during_prefill`` x the acceptance length, rounded; ``steps`` stay rounds)."""
    accept = speculation.accept_length
    return [replace(r, tokens_during_prefill=round(r.tokens_during_prefill * accept))
            if r.tokens_during_prefill is not None else r for r in rows]


def _speculative_round(full: Any, scenario: Scenario, round_s: float, round_high_s: float,
                       graphs: bool) -> Finding:
    """The decode-only round of ``full`` (a :class:`~pdmux_cli.costmodel.speculative.SpeculativeStepModel`)
    taken apart: the draft tree, the verify pass and the draft extend (ms), the round with the CPU's and the
    per-request terms (``round_s``: the decode-only row's ITL, s), TPOT (the round over the acceptance length)
    and the same batch's decode step without speculation, as a finding (``estimate.speculative_round``).
    ``round_high_s``: the round with the per-request term per verified token (``_Batch.decode_step_s``),
    which gives the low end of ``speedup_range`` (the gain's range: the term's two readings)."""
    spec = scenario.speculation
    total = full.total_sms
    bs, ctx = scenario.decode_bs, scenario.context_tokens
    draft, verify, extend = full.round_parts(total, bs, bs * ctx, cuda_graph=graphs)
    base = full.base
    plain_s = max(base.decode_s(total, bs, bs * ctx, cuda_graph=graphs) + base.request_s(bs),
                  base.decode_cpu_s(bs))
    tpot_s = round_s / spec.accept_length
    return Finding("estimate.speculative_round", {
        "algorithm": spec.algorithm, "num_steps": spec.num_steps, "eagle_topk": spec.eagle_topk,
        "num_draft_tokens": spec.num_draft_tokens, "accept_length": spec.accept_length,
        "draft": spec.draft.name, "draft_ms": draft * 1e3, "verify_ms": verify * 1e3,
        "extend_ms": extend * 1e3,
        "round_ms": round_s * 1e3, "tpot_ms": tpot_s * 1e3, "plain_ms": plain_s * 1e3,
        "speedup": plain_s / tpot_s,
        "speedup_range": [plain_s * spec.accept_length / max(round_s, round_high_s), plain_s / tpot_s]},
        "speculative_accept_length")


#: The order of estimate's leading notes (:func:`estimate`): the table is hypothetical first, then why the
#: revision cannot run pdmux for this model or beside this speculation, then the revision's start-up
#: failures; every other note follows in the order the estimate finds it (cost model, levels, rows,
#: memory, deployment, request path).
NOTE_ORDER = ("does_not_fit", "pdmux_support", "pdmux_speculation", "revision", "body")


@dataclass
class _Notes:
    """estimate's findings by the groups of :data:`NOTE_ORDER`."""

    groups: dict[str, list[Finding | str]] = field(default_factory=lambda: {g: [] for g in NOTE_ORDER})

    def add(self, note: Finding | str, group: str = "body") -> None:
        self.groups[group].append(note)

    def ordered(self) -> list[Finding | str]:
        return [n for g in NOTE_ORDER for n in self.groups[g]]


@dataclass(frozen=True)
class _Batch:
    """The scenario's decode batch and prompt on one GPU, with the whole-GPU step model ``full``: how a
    baseline step is hidden behind the CPU (the overlap scheduler; ``overlap`` False: it is not, under
    speculation on a release that turns it off) and how a prefill is launched."""

    full: Any
    model: Model
    gpu: Gpu
    total: int
    bs: int
    prompt: int
    sum_ctx: float
    sum_win: float
    graphs: bool
    prefill_graph: bool
    overlap: bool = True
    worker_v1: bool = False

    @classmethod
    def of(cls, full: Any, gpu: Gpu, model: Model, scenario: Scenario) -> _Batch:
        bs, ctx = scenario.decode_bs, scenario.context_tokens
        window = model.sliding_window if model.num_sliding_layers else 0
        graphs = not scenario.disable_cuda_graph  # SGLang's --disable-cuda-graph: decode and prefill eager
        prefill_graph = graphs and server_defaults.prefill_cuda_graph_default(model.architectures,
                                                                              gpu.compute_capability)
        spec = scenario.speculation
        overlap = spec is None or LATEST.speculation_overlaps(spec.eagle_topk)  # estimate is 0.5.23
        worker_v1 = spec is not None and LATEST.speculation_worker_v1(spec.eagle_topk)  # never in 0.5.23
        return cls(full, model, gpu, gpu.require_sm_count(), bs, scenario.prompt_tokens, bs * ctx,
                   bs * min(ctx, window) if window else 0, graphs, prefill_graph, overlap, worker_v1)

    @property
    def cpu(self) -> float:
        return self.full.decode_cpu_s(self.bs)

    @property
    def per_request(self) -> float:
        return self.full.request_s(1)  # a server step's time per request beyond the kernels (serving.yaml)

    def hidden(self, gpu_s: float, launch_s: float = 0.0, cpu_s: float | None = None) -> float:
        # a baseline step: the overlap scheduler hides the CPU's work (and a prefill's kernel launches);
        # without it the CPU's work follows the step (as the simulator's schedulers.baseline_rounds)
        cpu = self.cpu if cpu_s is None else cpu_s
        return max(gpu_s, cpu + launch_s) if self.overlap else max(gpu_s, launch_s) + cpu

    def launch(self, tokens: int, chunk: int, mixed: bool = False) -> float:
        """Host seconds to launch a prefill batch (as engine.Setup.prefill_launch_s)."""
        graphed = server_defaults.prefill_replays_from_graph(self.prefill_graph, tokens, chunk,
                                                             bool(self.model.is_mla), mixed)
        return self.full.prefill_launch_s(None, graphed)

    def decode_step_s(self, per_verified_token: bool = False) -> float:
        """The decode-only step (the reference row), s; ``per_verified_token``: a speculative round with
        the per-request term paid per verified token (``SpeculativeStepModel.round_request_s``: the
        round's upper bound)."""
        full = self.full
        gpu_s = full.decode_s(self.total, self.bs, self.sum_ctx, self.sum_win, cuda_graph=self.graphs)
        if self.worker_v1 or per_verified_token:  # v1 worker: the term per accepted token
            return self.hidden(gpu_s + full.round_request_s(self.bs, self.worker_v1, per_verified_token))
        return self.hidden(gpu_s + self.bs * self.per_request)

    def whole_prefill_s(self) -> float:
        """The prompt prefilled in one batch on the whole GPU, s."""
        return self.hidden(self.full.prefill_s(self.total, [(self.prompt, 0)]) + self.per_request,
                           self.launch(self.prompt, -1))


def _choose_level(gpu: Gpu, total: int, scenario: Scenario, plan: Any,
                  notes: _Notes) -> tuple[split_levels.Split, int, str]:
    """``(level, its group index (-1: not one SGLang builds), where it came from)``: the explicit
    ``--level`` as the driver rounds it, or the group SGLang chooses for the decode batch."""
    groups = plan.groups
    if scenario.level is not None:
        level, rounded = _driver_level(gpu, total, scenario.level)
        if rounded:
            notes.add(rounded)
        p_sm, d_sm = level
        group_index = groups.index(level) if level in groups else -1
        if group_index < 0:
            notes.add(Finding("estimate.level_not_built", {
                "prefill_sms": p_sm, "decode_sms": d_sm,
                "levels": [[g.prefill_sms, g.decode_sms] for g in groups[1:-1]]}, "level"))
        return level, group_index, "explicit"
    group_index = split_levels.choose_group(
        len(groups), scenario.decode_bs, True, scenario.decode_bs_divisor, plan.thresholds
    )
    if split_levels.older_sglang_crashes(plan.thresholds, scenario.decode_bs):
        notes.add(Finding("levels.release_crashes", {"release": split_levels.SGLANG_RELEASE,
                                                     "unreleased": split_levels.SGLANG_UNRELEASED,
                                                     "decode_bs": scenario.decode_bs}))
    return groups[group_index], group_index, plan.source


def _baseline_rows(b: _Batch, scenario: Scenario, notes: _Notes) -> list[PolicyRow]:
    """The decode-only reference, prefill-first, each chunked size and each mixed-chunk size."""
    full, total, bs, prompt = b.full, b.total, b.bs, b.prompt
    per_request = b.per_request
    base_s = b.decode_step_s()
    rows = [PolicyRow("decode-only", "decode only (ref.)", base_s * 1e3, None, None, None)]
    whole_prefill_s = b.whole_prefill_s()
    if full.notes_short_prefill:
        weights_once_s = full.decode_s(total, 1, 0.0)  # every weight read once, at the chapter's bandwidth
        if whole_prefill_s < weights_once_s:
            notes.add(Finding("estimate.chapter_short_prefill", {
                "prompt_tokens": prompt, "prefill_ms": whole_prefill_s * 1e3,
                "weights_ms": weights_once_s * 1e3},
                "cost_model"))
    rows.append(PolicyRow("prefill-first", "prefill first", (whole_prefill_s + base_s) * 1e3, 1,
                          whole_prefill_s * 1e3, 0))
    chunk_sizes = scenario.chunk_sizes
    if chunk_sizes is None:
        chunk_sizes = (server_defaults.default_chunked_prefill_size(b.gpu.memory_bytes),) if (
            full.default_chunked_row) else ()
    for chunk in chunk_sizes:
        chunks = [(min(chunk, prompt - start), start) for start in range(0, prompt, chunk)]
        prefill = sum(b.hidden(full.prefill_s(total, [c]) + per_request, b.launch(c[0], chunk))
                      for c in chunks)
        rows.append(PolicyRow("chunked", f"chunked {chunk}", (prefill + base_s) * 1e3, 1, prefill * 1e3, 0,
                              chunk_tokens=chunk))
    for chunk in scenario.mixed_chunk_sizes:
        # SGLang charges each decode row one token of the chunk (schedule_policy.py PrefillAdder); the
        # chapter's rows put a whole chunk of prompt next to the decode batch
        if full.mixed_chunk_charges_decode_rows and chunk <= bs:
            notes.add(Finding("estimate.mixed_chunk_no_row", {"chunk": chunk, "decode_bs": bs},
                              "mixed_chunk_sizes"))
            continue
        take = chunk - bs if full.mixed_chunk_charges_decode_rows else chunk
        steps = [
            b.hidden(full.mixed_s([(min(take, prompt - start), start)], bs, b.sum_ctx,
                                  b.sum_win) + (bs + 1) * per_request,
                     b.launch(take, chunk, mixed=True), full.decode_cpu_s(bs + 1))
            for start in range(0, prompt, take)
        ]
        rows.append(PolicyRow("mixed-chunk", f"mixed chunk {chunk}", sum(steps) / len(steps) * 1e3,
                              len(steps), sum(steps) * 1e3, len(steps), chunk_tokens=chunk))
    return rows


def _pdmux_times(b: _Batch, step_model: StepModel, p: int, d: int,
                 per_round: int) -> tuple[float, float, float, float, float]:
    """(ITL, prefill, decode alone, prefill alone, decode co-run) in seconds on a ``p``/``d`` split, the
    prompt split into ``per_round`` layers a round."""
    bs, prompt, graphs = b.bs, b.prompt, b.graphs
    decode_alone = step_model.decode_s(d, bs, b.sum_ctx, b.sum_win, cuda_graph=graphs)
    prefill_alone = step_model.prefill_s(p, [(prompt, 0)])
    decode_corun = step_model.decode_s(d, bs, b.sum_ctx, b.sum_win, corun_sms=p, cuda_graph=graphs)
    prefill_corun = step_model.prefill_s(p, [(prompt, 0)], corun_sms=d)
    # a pdmux round: the decode step (or the launches of the round's split-prefill layers, eager,
    # when longer: after the decode step's own without a CUDA graph, as the simulator's
    # schedulers.pdmux_rounds), then the CPU's work (the overlap scheduler is off) and the step's time
    # per request
    ahead = 0.0 if graphs else step_model.launch_cpu_s()
    round_s = (max(decode_corun, ahead + step_model.prefill_launch_s(per_round))
               + step_model.decode_cpu_s(bs) + step_model.request_s(bs))
    return (round_s, pdmux_prefill_end_s(prefill_corun, round_s, b.model.num_layers, per_round), decode_alone,
            prefill_alone, decode_corun)


def _pdmux_rows(b: _Batch, models: list, level: split_levels.Split, per_round: int,
                measured: bool) -> list[PolicyRow]:
    """One PD-mux row per S_SAT (one ``calibrated`` row where ``measured``) on ``level``."""
    p_sm, d_sm = level
    rows = []
    for step_model, s_sat in models:
        itl, pf, d_alone, p_alone, d_corun = _pdmux_times(b, step_model, p_sm, d_sm, per_round)
        label = f"PD mux {p_sm}/{d_sm}" + (" calibrated" if measured else f" S_SAT={s_sat:g}")
        tokens = _round_tokens(pf, itl)
        rows.append(PolicyRow("pdmux", label, itl * 1e3, tokens, pf * 1e3, tokens,
                              prefill_sms=p_sm, decode_sms=d_sm, s_sat=s_sat, decode_alone_ms=d_alone * 1e3,
                              prefill_alone_ms=p_alone * 1e3, decode_corun_ms=d_corun * 1e3,
                              prefill_corun_ms=pf * 1e3))
    return rows


def _level_rows(b: _Batch, models: list, groups: list, level: split_levels.Split,
                per_round: int) -> list[LevelRow]:
    """``--all-levels``: every level's ITL per S_SAT and prefill time, each phase alone at the first."""
    levels = []
    for index, split in enumerate(groups[1:-1], start=1):
        timings = [_pdmux_times(b, m, split.prefill_sms, split.decode_sms, per_round) for m, _ in models]
        _, pf0, d_alone, p_alone, d_corun = timings[0]
        levels.append(
            LevelRow(index, split.prefill_sms, split.decode_sms, split == level, pf0 * 1e3,
                     tuple(t[0] * 1e3 for t in timings),
                     tuple(_round_tokens(t[1], t[0]) for t in timings), decode_alone_ms=d_alone * 1e3,
                     prefill_alone_ms=p_alone * 1e3, decode_corun_ms=d_corun * 1e3)
        )
    return levels


def _memory_notes(gpu: Gpu, model: Model, scenario: Scenario, memory: Any, notes: _Notes) -> None:
    """Whether the weights and the scenario's KV fit, and pdmux's pool (chunking off) beside them."""
    if not memory.fits:
        draft = scenario.speculation.draft.name if scenario.speculation is not None else None
        notes.add(Finding("estimate.does_not_fit", {
            "model": model.name if draft is None else f"{model.name} with its draft {draft}",
            "gpu": gpu.name, "tp": scenario.tp, "weight_bytes": memory.weight_bytes,
            "kv_cache_bytes": memory.kv_cache_bytes, "gpu_memory_bytes": memory.gpu_memory_bytes,
            "fitting_tp": fitting_tp(gpu, model, scenario)}, "tp"), "does_not_fit")
    elif not memory.pdmux_mem_fraction:
        notes.add(Finding("estimate.no_memory_chunking_off", {"gpu": gpu.name}))
    elif memory.kv_tokens_needed > memory.pdmux_pool_tokens:
        usable = gpu.memory_bytes - server_defaults.CONTEXT_RESERVE_BYTES
        needed = min(1.0, (memory.weight_bytes + memory.kv_cache_bytes) / usable)
        notes.add(Finding("estimate.kv_pool_short", {
            "mem_fraction": memory.pdmux_mem_fraction, "pool_tokens": memory.pdmux_pool_tokens,
            "needed_tokens": memory.kv_tokens_needed, "suggested_fraction": math.ceil(needed * 100) / 100}))


def _disagg_row(b: _Batch, scenario: Scenario, link: KvLink, calibration: Any,
                notes: _Notes) -> tuple[PolicyRow, float]:
    """PD disaggregation's row (``--disagg XPYD``: whole-GPU prefill plus the KV transfer, then undisturbed
    decode on instances of ``disagg_tp`` GPUs) and the bytes transferred per prompt."""
    gpu, model, total, bs, prompt = b.gpu, b.model, b.total, b.bs, b.prompt
    tp, inst_tp = scenario.tp, scenario.disagg_tp or scenario.tp
    x, y = scenario.disagg
    name = f"{x}P{y}D"
    inst_prefill_s, inst_base_s = b.whole_prefill_s(), b.decode_step_s()
    if inst_tp != tp:  # the instances are servers of their own TP
        inst_scenario = replace(scenario, tp=inst_tp)
        try:
            inst_memory = memory_check(gpu, model, inst_scenario)
        except InputError as exc:
            raise for_disagg_tp(exc) from None
        if not inst_memory.fits:
            raise InputError(
                "{flag.disagg_tp} {tp}: {model} does not fit an instance of {tp} {gpu} GPU(s) with "
                "the scenario's KV cache; give a larger {flag.disagg_tp}",
                param="disagg_tp",
                values={"tp": inst_tp, "model": model.name, "gpu": gpu.name},
            )
        inst = _models(gpu, model, replace(
            inst_scenario,
            s_sat_values=scenario.s_sat_values if b.full.guesses_s_sat else (None,)),
            calibration)[0][0]
        inst_cpu = inst.decode_cpu_s(bs)
        inst_decode_s = inst.decode_s(total, bs, b.sum_ctx, b.sum_win, cuda_graph=b.graphs)
        inst_base_s = max(inst_decode_s + inst.request_s(bs), inst_cpu)
        inst_prefill_s = max(inst.prefill_s(total, [(prompt, 0)]) + inst.request_s(1), inst_cpu)
    transfer_bytes = prompt * rank_kv_bytes_per_token(model, scenario.kv_bytes_per_element, inst_tp)
    transfer_s = link.transfer_s(transfer_bytes)
    ttft_s = inst_prefill_s + transfer_s
    tokens = _round_tokens(ttft_s, inst_base_s)
    gpus = (x + y) * inst_tp
    notes.add(Finding("estimate.disagg_gpus", {"xpyd": name, "prefill": x, "decode": y, "gpus": gpus,
                                               "tp": tp, "instance_tp": inst_tp}, "disagg"))
    notes.add(Finding("estimate.disagg_kv_link", {
        "link": link.text, "link_source": link.origin, "transfer_gb": transfer_bytes / 1e9,
        "transfer_ms": transfer_s * 1e3, "prefill_ms": inst_prefill_s * 1e3}, "kv_link"))
    row = PolicyRow("disagg", f"disagg {name}", inst_base_s * 1e3, tokens, ttft_s * 1e3, tokens,
                    decode_alone_ms=inst_base_s * 1e3, prefill_alone_ms=inst_prefill_s * 1e3,
                    gpus=gpus, layout=Layout(inst_tp, xpyd=(x, y)), transfer_ms=transfer_s * 1e3)
    return row, transfer_bytes


def _request_delay(full: Any, rows: list[PolicyRow], scenario: Scenario, gpu: Gpu,
                   ) -> tuple[float, Any, Finding | None, str]:
    """``(ms of SGLang's request path for this prompt, each row's whole-server TTFT and interval, the note
    quoting them, how the intervals were drawn)``: the admission, the stream back and the front end's
    tokenization (``serving.yaml``)."""
    serving = getattr(full, "serving", None)
    request_delay_ms = 0.0
    if serving is not None:
        request_delay_ms = (serving.admission_delay_s + serving.first_token_delay_s
                            + serving.frontend_token_s * scenario.prompt_tokens) * 1e3
    if not request_delay_ms:
        return request_delay_ms, (), None, ""
    ttft, method = _whole_server_ttft(rows, request_delay_ms, serving, scenario, gpu,
                                      full.has_error_interval)
    note = Finding("estimate.request_delay", {
        "delay_ms": request_delay_ms, "calibrated": bool(getattr(serving, "calibrated", False)),
        "ttft": [{"label": r.label, "ttft_ms": t, "interval_ms": list(i) if i else None}
                 for r, (t, i) in zip(rows, ttft) if i is not None]})
    return request_delay_ms, ttft, note, method


def _without_pdmux_ttft(est: Estimate, note: Finding) -> Estimate:
    """``est`` without the PD-mux rows' whole-server TTFTs, in :attr:`Estimate.ttft` and in ``note`` (the
    request path's, in its place among the notes), for a revision that cannot run them
    (:attr:`Estimate.pdmux_runs` false: a row that cannot run has no TTFT to quote)."""
    ttft = tuple((math.nan, None) if r.policy == "pdmux" else t for r, t in zip(est.rows, est.ttft))
    pdmux_labels = {r.label for r in est.rows if r.policy == "pdmux"}
    kept = replace(note, values={**note.values,
                                 "ttft": [t for t in note.values["ttft"] if t["label"] not in pdmux_labels]})
    return replace(est, ttft=ttft, notes=[kept if n is note else n for n in est.notes])


def estimate(
    gpu: Gpu,
    model: Model,
    scenario: Scenario = Scenario(),
    calibration=None,
    all_levels: bool = False,
    sglang: str | None = None,
) -> Estimate:
    """Compare prefill-first, chunked, mixed-chunk prefill and PD multiplexing for one scenario.

    ``calibration``: a :class:`pdmux_cli.costmodel.calibration_file.Calibration` (``--calibration``): its
    SM-partition terms (``pdmux bench``) replace the S_SAT guesses (and, under the chapter model, the MFU) and
    yield one PD-multiplexing row with measured co-run interference; its whole-GPU terms (``pdmux calibrate``)
    replace the roofline model's fitted efficiencies. ``all_levels``: also fill :attr:`Estimate.levels`, the
    ITL/prefill trade-off of every level. ``sglang``: the revision (``--sglang``,
    :data:`pdmux_cli.sglang.revisions.REVISIONS`; default 0.5.23) whose model support is checked: where it
    cannot run pdmux for ``model`` (:func:`pdmux_cli.sglang.revisions.model_support`), the first note says why
    and :attr:`Estimate.pdmux_support` carries it (the pdmux rows are then not achievable). The notes come in
    :data:`NOTE_ORDER`. Raises :class:`InputError` for invalid scenarios, a prompt past the model's context
    length, a level that is not a valid split of the GPU (a level off the CUDA granularity is estimated as
    the driver rounds it, with a note), or a GPU whose SM count is unknown.
    """
    from ..sglang import revision_rules

    scenario.validate()
    _check_context(model, scenario)
    total = gpu.require_sm_count()
    tp = scenario.tp
    link = None
    if scenario.disagg is not None:
        link = disaggregation.kv_link(gpu, sum(scenario.disagg) * (scenario.disagg_tp or tp),
                                      scenario.kv_link, scenario.kv_link_gb_s, scenario.kv_link_latency_us)
    flops_dtype = pick_flops_dtype(gpu, model, scenario.cost.flops_dtype)
    models = _models(gpu, model, scenario, calibration)
    full = models[0][0]  # S_SAT has no effect when all SMs are used
    notes = _Notes()
    for note in full.notes:
        notes.add(note)
    # a revision whose divide_sm was not read needs manual_divisions
    revision_rules.plan_check(sglang, scenario)
    cap = revision_rules.layer_cap(sglang, scenario)
    plan = split_levels.plan_groups(total, gpu.compute_capability, scenario.sm_group_num,
                                    scenario.manual_divisions or None)
    if plan.note:
        notes.add(plan.note)
    level, group_index, level_source = _choose_level(gpu, total, scenario, plan, notes)
    batch = _Batch.of(full, gpu, model, scenario)
    rows = _baseline_rows(batch, scenario, notes)
    per_round = split_levels.prefill_layers_per_round(scenario.prompt_tokens, model.num_layers,
                                                      scenario.split_forward_token_budget, cap)
    if level.prefill_sms > 0 and level.decode_sms > 0:
        measured = calibration is not None and calibration.has_partitions
        rows += _pdmux_rows(batch, models, level, per_round, measured)
    else:
        notes.add(Finding("estimate.no_pdmux_row", {"group": group_index}, "level"))
    levels = _level_rows(batch, models, plan.groups, level, per_round) if all_levels else []
    memory = memory_check(gpu, model, scenario)
    _memory_notes(gpu, model, scenario, memory, notes)
    if tp > 1 and level.prefill_sms > 0 and level.decode_sms > 0:
        notes.add(Finding("estimate.tp_same_split", {"tp": tp, "prefill_sms": level.prefill_sms,
                                                     "decode_sms": level.decode_sms}))
    rows = [replace(r, gpus=tp, layout=Layout(tp)) for r in rows]
    transfer_bytes = 0.0
    if scenario.disagg is not None and link is not None:
        row, transfer_bytes = _disagg_row(batch, scenario, link, calibration, notes)
        rows.append(row)
    support = revisions.model_support(model.architectures, sglang)
    if support.state != "yes":
        why = Finding("estimate.pdmux_support", {"state": support.state, "reason": support.why}, "sglang")
        notes.add(why, "pdmux_support")
    request_delay_ms, ttft, delay_note, ttft_method = _request_delay(full, rows, scenario, gpu)
    if delay_note is not None:
        notes.add(delay_note)
    for finding in revision_rules.revision_findings(sglang, tp):  # the revision's start-up failure, up front
        notes.add(finding, "revision")
    speculation, speculation_refusal = None, None
    if scenario.speculation is not None:
        rows, speculation, speculation_refusal = _with_speculation(rows, full, scenario, batch, sglang, notes)
    prompt, budget = scenario.prompt_tokens, scenario.split_forward_token_budget
    est = Estimate(
        gpu=gpu.name,
        model=model.name,
        scenario=scenario,
        groups=plan.groups,
        group_index=group_index,
        level=level,
        level_source=level_source,
        layers_per_round=per_round,
        prefill_rounds=split_levels.prefill_rounds(prompt, model.num_layers, budget, cap),
        flops_dtype=flops_dtype,
        throughput_source=full.source
        if len(models) == 1
        else full.source_text(s_sat=False) + " (S_SAT per PD-mux row)",
        rows=rows,
        memory=memory,
        levels=levels,
        notes=notes.ordered(),
        cost_model=scenario.cost_model,
        cpu_step_ms=batch.cpu * 1e3,
        tp=tp,
        kv_link=link,
        kv_transfer_bytes=transfer_bytes,
        pdmux_support=support,
        request_delay_ms=request_delay_ms,
        per_request_ms=batch.per_request * 1e3,
        ttft=ttft,
        ttft_method=ttft_method,
        step_model=full,
        speculation=speculation,
        speculation_refusal=speculation_refusal,
    )
    return est if delay_note is None or est.pdmux_runs else _without_pdmux_ttft(est, delay_note)


def _with_speculation(rows: list, full: Any, scenario: Scenario, batch: _Batch, sglang: str | None,
                      notes: _Notes) -> tuple[list, dict[str, Any], str | None]:
    """``rows`` under ``scenario``'s speculative decoding, the verify round's values
    (:attr:`Estimate.speculation`) and the revision's refusal of pdmux beside it (``None``: it runs the
    pair); the round's, mixed chunk's and the refusal's findings added to ``notes``."""
    from ..sglang.speculative_args import check_pdmux_speculation, mixed_chunk_finding

    rows = _speculative_rows(rows, scenario.speculation)
    round_finding = _speculative_round(full, scenario, rows[0].itl_ms / 1e3, batch.decode_step_s(True),
                                       batch.graphs)
    notes.add(round_finding)
    if scenario.mixed_chunk_sizes:  # as simulate says it (workflows/policies._mixed_chunk)
        notes.add(mixed_chunk_finding(scenario.speculation, scenario.mixed_chunk_sizes))
    refusal_text = None
    try:
        check_pdmux_speculation(sglang, scenario.speculation)
    except InputError as exc:  # the PD-mux rows are what pdmux would do, had the revision run it
        refusal = Finding("estimate.pdmux_speculation", {"error": str(exc)}, exc.param)
        notes.add(refusal, "pdmux_speculation")
        refusal_text = str(exc)
    return rows, dict(round_finding.values), refusal_text


def _whole_server_ttft(rows: list, request_delay_ms: float, serving: Any, scenario: Scenario, gpu: Gpu,
                       has_interval: bool) -> tuple[tuple[float, tuple[float, float] | None], ...]:
    """Per row, the arriving prompt's TTFT as a server gives it (the row's prefill time plus the request path)
    and its 80% interval from pdmux's measured error on public servers' median TTFT
    (:func:`pdmux_cli.costmodel.uncertainty.figure_interval`; the regime: ``decode_bs + 1`` requests in
    flight, the GPU's family; a calibration's own residuals where its serving terms were calibrated), and
    how the intervals were drawn (``""`` without one). No interval where the step model has no measured
    error (``has_interval``: its ``has_error_interval``; the chapter's) or for a row without a prefill
    time."""
    from ..costmodel.uncertainty import Regime, figure_interval, gpu_family

    regime = Regime("", float(scenario.decode_bs + 1), gpu_family(gpu.compute_capability))
    calibration = dict(serving.residuals) if getattr(serving, "calibrated", False) else None
    out, method = [], ""
    for r in rows:
        ttft = r.prefill_ms + request_delay_ms if r.prefill_ms is not None else math.nan
        bounds = None
        if has_interval and math.isfinite(ttft):
            bounds, _, drawn = figure_interval("ttft_ms_p50", ttft, regime, calibration=calibration)
            method = method or (drawn if bounds is not None else "")
        out.append((ttft, bounds))
    return tuple(out), method


def fitting_tp(gpu: Gpu, model: Model, scenario: Scenario) -> int | None:
    """The smallest tensor-parallel degree above ``scenario.tp`` (2, 4 or 8) that SGLang can split
    ``model`` over and whose per-GPU weights and KV fit ``gpu``; ``None`` if none does."""
    for tp in (2, 4, 8):
        if tp <= scenario.tp:
            continue
        try:
            if memory_check(gpu, model, replace(scenario, tp=tp)).fits:
                return tp
        except InputError:
            continue
    return None
