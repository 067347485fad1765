"""The chapter's comparison for one scenario: prefill-first, chunked prefill and PD multiplexing.

A decode batch is running (``decode_bs`` requests with ``context_tokens`` each) when one prompt of
``prompt_tokens`` arrives. For each policy: the decode ITL while that prompt is prefilled, the
prompt's prefill time, and how many tokens each decode request gains meanwhile. Defaults reproduce
the table of pd-multiplexing-chapter.txt ("Is it worth it: an estimate") exactly: Qwen3-8B, H100 SXM,
32 x 2048, 8192-token prompt, chunks 2048 and 512, S_SAT 44/66/88, bandwidth x0.85, MFU 0.5.

Pure: no I/O. The CLI renders :class:`Estimate` as a table or JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import cost, policy
from . import model as mdl
from .errors import InputError
from .hardware import Gpu
from .model import Model

#: Upper bounds on scenario sizes: far beyond any deployment, low enough that a typo cannot make
#: the estimate run for minutes (tokens; chunked steps per prompt).
MAX_TOKENS = 10_000_000
MAX_DECODE_BS = 1_000_000
MAX_CHUNK_STEPS = 100_000
#: Bytes per weight or KV element: 4-bit (0.5) down to 1-bit packing, up to fp64 and a margin.
BYTES_PER_ELEMENT_RANGE = (0.0625, 16.0)
#: Smallest bandwidth efficiency or MFU taken seriously (0.1%).
MIN_EFFICIENCY = 0.001

#: The chapter's S_SAT values on H100 (44, 66, 88 of 132 SMs) as fractions of the SM count; on
#: other GPUs the defaults keep the same fractions (rounded to whole SMs).
DEFAULT_S_SAT_FRACTIONS = (1 / 3, 1 / 2, 2 / 3)


@dataclass(frozen=True)
class Scenario:
    """The inputs of one estimate (tokens, SMs, bytes; efficiencies as fractions).

    ``level``: an explicit ``(prefill_sms, decode_sms)`` split, or ``None`` for the level SGLang
    chooses for ``decode_bs``. ``s_sat_values``: ``None`` for the chapter's fractions of the SM
    count. ``weight_bytes_per_param``: ``None`` for the model's own dtype (bf16 2, fp8 1, mxfp4
    experts 4.25/8). ``flops_dtype``: ``None`` picks fp8 for fp8 models on GPUs with fp8, else bf16.
    """

    decode_bs: int = 32
    context_tokens: int = 2048
    prompt_tokens: int = 8192
    chunk_sizes: tuple[int, ...] = (2048, 512)
    s_sat_values: tuple[float, ...] | None = None
    bandwidth_efficiency: float = 0.85
    mfu: float = 0.5
    weight_bytes_per_param: float | None = None
    kv_bytes_per_element: float = 2
    level: tuple[int, int] | None = None
    sm_group_num: int = policy.DEFAULT_SM_GROUP_NUM
    decode_bs_divisor: int = policy.DEFAULT_DECODE_BS_DIVISOR
    split_forward_token_budget: int = policy.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET
    manual_divisions: tuple[tuple[int, int, int], ...] = ()
    flops_dtype: str | None = None

    def validate(self) -> None:
        """Raise :class:`InputError` (one line) for sizes that make no sense or that no deployment
        has (the bounds above)."""
        for name, top in (("decode_bs", MAX_DECODE_BS), ("context_tokens", MAX_TOKENS), ("prompt_tokens", MAX_TOKENS)):
            value = getattr(self, name)
            if not 0 < value <= top:
                raise InputError(f"{name.replace('_', ' ')} must be from 1 to {top:,}, got {value}")
        if any(c <= 0 for c in self.chunk_sizes):
            raise InputError(f"chunk sizes must be > 0, got {list(self.chunk_sizes)}")
        if any(-(-self.prompt_tokens // c) > MAX_CHUNK_STEPS for c in self.chunk_sizes):
            raise InputError(f"a chunk size below {-(-self.prompt_tokens // MAX_CHUNK_STEPS)} tokens cuts the prompt "
                             f"into more than {MAX_CHUNK_STEPS:,} steps: use larger chunks")
        if self.s_sat_values is not None and (not self.s_sat_values or any(s < 1 for s in self.s_sat_values)):
            raise InputError(f"S_SAT values must be at least 1 SM, got {list(self.s_sat_values)}")
        for name in ("bandwidth_efficiency", "mfu"):
            if not MIN_EFFICIENCY <= getattr(self, name) <= 1:
                raise InputError(f"{name.replace('_', ' ')} must be from {MIN_EFFICIENCY} to 1, got {getattr(self, name)}")
        low, high = BYTES_PER_ELEMENT_RANGE
        if self.weight_bytes_per_param is not None and not low <= self.weight_bytes_per_param <= high:
            raise InputError(f"bytes per weight must be from {low} to {high:g}, got {self.weight_bytes_per_param}")
        if not low <= self.kv_bytes_per_element <= high:
            raise InputError(f"bytes per KV element must be from {low} to {high:g}, got {self.kv_bytes_per_element}")


@dataclass(frozen=True)
class PolicyRow:
    """One row of the comparison. Times in ms; ``tokens_during_prefill`` per decode request.

    ``policy``: ``"decode-only"``, ``"prefill-first"``, ``"chunked"`` or ``"pdmux"``.
    ``itl_ms``: the decode ITL while the prompt is prefilled (mean over the chunked steps;
    the one stalled step for prefill-first). ``steps``: decode steps during the prefill.
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


@dataclass(frozen=True)
class LevelRow:
    """One PD-multiplexing level of ``--all-levels``: its split, prefill time and ITL per S_SAT."""

    group: int
    prefill_sms: int
    decode_sms: int
    chosen: bool
    prefill_ms: float
    itl_ms: tuple[float, ...]
    tokens_during_prefill: tuple[int, ...]


@dataclass(frozen=True)
class MemoryCheck:
    """Whether weights plus the scenario's KV cache fit the GPU (bytes)."""

    weight_bytes: float
    kv_cache_bytes: float
    gpu_memory_bytes: float

    @property
    def needed_bytes(self) -> float:
        return self.weight_bytes + self.kv_cache_bytes

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.gpu_memory_bytes


@dataclass(frozen=True)
class Estimate:
    """The result: rows per policy, the split used, memory check, and notes for the user."""

    gpu: str
    model: str
    scenario: Scenario
    groups: list[policy.Split]
    group_index: int
    level: policy.Split
    level_source: str
    layers_per_round: int
    prefill_rounds: int
    flops_dtype: str
    throughput_source: str
    rows: list[PolicyRow]
    memory: MemoryCheck
    levels: list[LevelRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def default_s_sat_values(total_sms: int) -> tuple[float, ...]:
    """The chapter's S_SAT choices scaled to ``total_sms``: 44, 66, 88 on 132 SMs (1/3, 1/2, 2/3)."""
    return tuple(float(round(total_sms * f)) for f in DEFAULT_S_SAT_FRACTIONS)


def pick_flops_dtype(gpu: Gpu, model: Model, requested: str | None) -> str:
    """The dense-math dtype prefill runs in: ``requested``, else fp8 for fp8-weight models on GPUs
    with fp8 tensor cores (DeepSeek-V3 ships fp8), else bf16 (fp16 on GPUs without bf16)."""
    if requested:
        return requested
    if model.weight_dtype == "fp8" and gpu.fp8_dense_flops:
        return "fp8"
    return "bf16" if gpu.bf16_dense_flops else "fp16"


def memory_check(gpu: Gpu, model: Model, scenario: Scenario) -> MemoryCheck:
    """Weights (all parameters) plus the KV cache of the decode batch and the new prompt vs memory."""
    weights = mdl.weight_bytes_total(model, scenario.weight_bytes_per_param)
    kv = scenario.decode_bs * mdl.kv_bytes(model, scenario.context_tokens, scenario.kv_bytes_per_element)
    kv += mdl.kv_bytes(model, scenario.prompt_tokens, scenario.kv_bytes_per_element)
    return MemoryCheck(weights, kv, gpu.memory_bytes)


def _round_tokens(prefill_s: float, itl_s: float) -> int:
    """Tokens a decode request gains during the prefill, rounded as the chapter prints them."""
    ratio = prefill_s / itl_s
    if not math.isfinite(ratio):
        raise InputError("the inputs give a non-finite time (NaN or infinity): check the sizes and efficiencies")
    return int(f"{ratio:.0f}")


def estimate(
    gpu: Gpu,
    model: Model,
    scenario: Scenario = Scenario(),
    calibrated: cost.Throughput | None = None,
    all_levels: bool = False,
) -> Estimate:
    """Compare prefill-first, chunked prefill and PD multiplexing for one scenario.

    ``calibrated``: a measured throughput (``pdmux bench``); when given it replaces the analytic
    S_SAT and MFU guesses and yields one PD-multiplexing row (with measured co-run interference).
    ``all_levels``: also fill :attr:`Estimate.levels`, the ITL/prefill trade-off of every level.
    Raises :class:`InputError` for invalid scenarios, a level that is not a valid split of the GPU,
    or a GPU whose SM count is unknown.
    """
    scenario.validate()
    total = gpu.require_sm_count()
    flops_dtype = pick_flops_dtype(gpu, model, scenario.flops_dtype)
    dense = gpu.dense_flops(flops_dtype)
    s_sats = scenario.s_sat_values or default_s_sat_values(total)
    if max(s_sats) > total:
        raise InputError(f"S_SAT {max(s_sats):g} is more SMs than {gpu.name} has ({total}): "
                         "S_SAT is the SM count at which decode reaches full bandwidth")
    notes: list[str] = []

    plan = policy.plan_groups(total, gpu.compute_capability, scenario.sm_group_num, scenario.manual_divisions or None)
    if plan.note:
        notes.append(plan.note)
    groups = plan.groups
    if scenario.level is not None:
        p_sm, d_sm = scenario.level
        if p_sm <= 0 or d_sm <= 0 or p_sm + d_sm != total:
            raise InputError(
                f"level {p_sm}/{d_sm} is not a split of {gpu.name}'s {total} SMs: "
                "prefill and decode SMs must both be > 0 and add up to the SM count"
            )
        level = policy.Split(p_sm, d_sm)
        group_index = groups.index(level) if level in groups else -1
        level_source = "explicit"
        if group_index < 0:
            notes.append(f"{p_sm}/{d_sm} is not one of the levels SGLang builds here "
                         f"({', '.join(f'{g.prefill_sms}/{g.decode_sms}' for g in groups[1:-1])}); "
                         "a manual_divisions entry could use it where the SM granularity allows")
    else:
        group_index = policy.choose_group(
            len(groups), scenario.decode_bs, True, scenario.decode_bs_divisor, plan.thresholds
        )
        level = groups[group_index]
        level_source = plan.source
        if policy.older_sglang_crashes(plan.thresholds, scenario.decode_bs):
            notes.append(
                f"older SGLang dies with UnboundLocalError here: no manual_divisions threshold is <= {scenario.decode_bs}"
            )

    def analytic(s_sat: float) -> cost.AnalyticThroughput:
        return cost.AnalyticThroughput(total, gpu.hbm_bytes_per_s, dense, scenario.bandwidth_efficiency, scenario.mfu, s_sat)

    full = calibrated or analytic(float(total))  # S_SAT has no effect when all SMs are used
    wb, kvb = scenario.weight_bytes_per_param, scenario.kv_bytes_per_element
    bs, ctx, prompt = scenario.decode_bs, scenario.context_tokens, scenario.prompt_tokens

    base_s = cost.decode_step_s(model, full, total, bs, ctx, wb, kvb)
    rows = [PolicyRow("decode-only", "decode only (ref.)", base_s * 1e3, None, None, None)]

    whole_prefill_s = cost.prefill_s(model, full, total, prompt)
    rows.append(
        PolicyRow("prefill-first", "prefill first", (whole_prefill_s + base_s) * 1e3, 1, whole_prefill_s * 1e3, 0)
    )
    for chunk in scenario.chunk_sizes:
        steps = [
            cost.chunked_step_s(model, full, total, bs, ctx, min(chunk, prompt - start), start, wb, kvb)
            for start in range(0, prompt, chunk)
        ]
        rows.append(
            PolicyRow(
                "chunked", f"chunked {chunk}", sum(steps) / len(steps) * 1e3, len(steps),
                sum(steps) * 1e3, len(steps), chunk_tokens=chunk,
            )
        )

    p_sm, d_sm = level
    throughputs = [calibrated] if calibrated else [analytic(s) for s in s_sats]

    def pdmux_times(thr: cost.Throughput, p: int, d: int) -> tuple[float, float]:
        corun = bool(calibrated)  # the analytic model has no interference term
        itl = cost.decode_step_s(model, thr, d, bs, ctx, wb, kvb, concurrent_prefill_sms=p if corun else 0)
        pf = cost.prefill_s(model, thr, p, prompt, concurrent_decode_sms=d if corun else 0)
        return itl, pf

    if p_sm > 0 and d_sm > 0:
        for thr, s_sat in zip(throughputs, [None] if calibrated else s_sats):
            itl, pf = pdmux_times(thr, p_sm, d_sm)
            label = f"PD mux {p_sm}/{d_sm}" + (" calibrated" if calibrated else f" S_SAT={s_sat:g}")
            rows.append(
                PolicyRow("pdmux", label, itl * 1e3, _round_tokens(pf, itl), pf * 1e3, _round_tokens(pf, itl),
                          prefill_sms=p_sm, decode_sms=d_sm, s_sat=s_sat)
            )
    else:
        notes.append(f"group {group_index} gives one phase the whole GPU: no PD-multiplexing row")

    levels: list[LevelRow] = []
    if all_levels:
        for index, split in enumerate(groups[1:-1], start=1):
            timings = [pdmux_times(thr, split.prefill_sms, split.decode_sms) for thr in throughputs]
            pf = timings[0][1]
            levels.append(
                LevelRow(index, split.prefill_sms, split.decode_sms, split == level, pf * 1e3,
                         tuple(itl * 1e3 for itl, _ in timings), tuple(_round_tokens(p, i) for i, p in timings))
            )

    memory = memory_check(gpu, model, scenario)
    if not memory.fits:
        notes.insert(
            0,
            f"does not fit: {model.name} needs {memory.weight_bytes / 1e9:.1f} GB of weights + "
            f"{memory.kv_cache_bytes / 1e9:.1f} GB of KV cache > {memory.gpu_memory_bytes / 1e9:.1f} GB on "
            f"{gpu.name}; the times in the table are hypothetical (use more GPUs with TP, or fewer bytes per weight)",
        )
    layers = policy.prefill_layers_per_round(prompt, model.num_layers, scenario.split_forward_token_budget)
    rounds = policy.prefill_rounds(prompt, model.num_layers, scenario.split_forward_token_budget)
    return Estimate(
        gpu=gpu.name, model=model.name, scenario=scenario, groups=groups, group_index=group_index, level=level,
        level_source=level_source, layers_per_round=layers, prefill_rounds=rounds, flops_dtype=flops_dtype,
        throughput_source=calibrated.source if calibrated else "analytic", rows=rows, memory=memory,
        levels=levels, notes=notes,
    )
