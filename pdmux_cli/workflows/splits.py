"""``pdmux splits`` as a use case: the stream groups SGLang builds, its level per decode batch, prefill
rounds.

SGLang 0.5.23's rules (:mod:`pdmux_cli.sglang.split_levels`: ``srt/multiplex/pdmux_context.py`` ``divide_sm``,
``initialize_stream_groups``; ``multiplexing_mixin.py`` ``adjust_stream_groups``, ``event_loop_pdmux``).
Pure apart from reading the GPU, model and pdmux YAML files the request names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog.model import DEFAULT_MODEL
from ..provenance import provenance, with_provenance
from ..sglang.revisions import DEFAULT_REVISION
from ..util.errors import Finding, InputError, short_repr
from .device_options import device_option
from .fields import Checked, declared_as, option
from .pdmux_knobs import PdmuxKnobs
from .planning_inputs import (
    check_positive_knobs,
    int_tuple,
    load_pdmux_yaml,
    resolve_device,
)

#: The SGLang rule set splits follows (its split and level rules are 0.5.23's; it takes no ``--sglang``).
SPLITS_RULE_SET = DEFAULT_REVISION


@dataclass(frozen=True)
class SplitsRequest(Checked):
    """``pdmux splits``'s options.

    ``gpu``: a GPU alias, reported name or profile file (default h100), or ``sms`` with ``cc`` (``"9.0"``)
    for any device; ``all_gpus``: one table of every GPU profile (``--all``). ``decode_bs``: decode batch
    sizes to choose a level for; ``prompt_tokens``: prompt lengths (tokens) for the layers per round.
    ``model``: a model profile or config.json (its layer count). ``sm_group_num``, ``decode_bs_divisor``,
    ``token_budget`` (tokens): SGLang's knobs (``None``: the ``config`` YAML's, else SGLang's defaults 8, 36,
    65536). ``config``: a pdmux YAML whose levels and knobs are used. ``tp``: tensor parallelism (1-8).
    """

    gpu: str | None = device_option("gpu")
    sms: int | None = device_option("sms")
    cc: str | None = device_option("cc")
    all_gpus: bool = option(False, help="One table of every GPU profile's levels.")
    decode_bs: tuple[int, ...] | str = option((1, 6, 12, 18, 24, 30, 36, 64), help=(
        "Decode batch sizes to choose a level for."))
    prompt_tokens: tuple[int, ...] | str = option((512, 8192, 32768, 131072), help=(
        "Prompt lengths for layers per round."))
    model: str = option(DEFAULT_MODEL, short="-m", help="Model profile or config.json (its layer count).")
    sm_group_num: int | None = declared_as(PdmuxKnobs, "sm_group_num")
    decode_bs_divisor: int | None = declared_as(PdmuxKnobs, "decode_bs_divisor")
    token_budget: int | None = declared_as(PdmuxKnobs, "token_budget")
    config: Path | str | None = declared_as(PdmuxKnobs, "config")
    tp: int = option(1, help=(
        "Tensor parallelism (GPUs, 1-8): every GPU builds the same groups and takes the same level; "
        "{flag.model}'s heads and widths must split."))


@dataclass(frozen=True)
class SplitsResult:
    """One device's split levels (``pdmux splits --gpu``).

    ``groups``: every stream group as :class:`pdmux_cli.sglang.split_levels.Split` (prefill SMs, decode SMs),
    group 0 all
    prefill, the last all decode; ``thresholds``: manual_divisions' decode-batch thresholds, or ``None`` for
    the linear rule. ``source``: ``"sglang-auto"``, ``"cuda-granularity"`` or ``"manual"``. ``choices``:
    ``(decode_bs, group, older_sglang_crashes)`` per batch size. ``layers``: ``(prompt_tokens,
    layers_per_round, rounds)`` per prompt. ``notes``: lines for the user. ``provenance``: the JSON's
    ``"pdmux"`` block.
    """

    gpu: str
    sm_count: int
    compute_capability: str
    source: str
    sm_group_num: int
    decode_bs_divisor: int
    token_budget: int
    groups: list[Any]
    thresholds: list[int] | None
    choices: list[tuple[int, int, bool]]
    model: str
    num_layers: int
    layers: list[tuple[int, int, int]]
    notes: list[Finding | str]
    tp: int
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def info(self) -> dict[str, Any]:
        """The fields as :func:`~pdmux_cli.workflows.planning_json.splits_dict` and
        :func:`pdmux_cli.cli.render.splits_tables` take them."""
        return {
            "gpu": self.gpu,
            "sm_count": self.sm_count,
            "compute_capability": self.compute_capability,
            "source": self.source,
            "sm_group_num": self.sm_group_num,
            "decode_bs_divisor": self.decode_bs_divisor,
            "token_budget": self.token_budget,
            "groups": self.groups,
            "thresholds": self.thresholds,
            "choices": self.choices,
            "model": self.model,
            "num_layers": self.num_layers,
            "layers": self.layers,
            "notes": self.notes,
            "tp": self.tp,
        }

    def to_dict(self) -> dict[str, Any]:
        """What ``pdmux splits --json`` prints."""
        from .planning_json import splits_dict

        return with_provenance(splits_dict(self.info), self.provenance)


@dataclass(frozen=True)
class AllGpusSplits:
    """Every GPU profile's split levels (``pdmux splits --all``).

    ``gpus``: per profile ``{"gpu", "key", "sm_count", "compute_capability", "source", "groups":
    [{"prefill_sms", "decode_sms"}, ...] or None, "error": why SGLang cannot split it, or None}``.
    """

    sm_group_num: int
    gpus: list[dict[str, Any]]
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """What ``pdmux splits --all --json`` prints."""
        return with_provenance({"sm_group_num": self.sm_group_num, "gpus": self.gpus}, self.provenance)


def splits(request: SplitsRequest) -> SplitsResult | AllGpusSplits:
    """The split levels of one device (:class:`SplitsResult`), or of every GPU profile with
    ``request.all_gpus`` (:class:`AllGpusSplits`).

    Raises :class:`InputError` for conflicting options (``all_gpus`` with a device, ``config`` or ``tp``), an
    unknown GPU or model, knobs <= 0 or past SGLang's limit, batch sizes or prompts out of range, a pdmux
    YAML SGLang refuses, or a ``tp`` the model's heads and widths do not split into.
    """
    from ..multigpu.tensor_parallel import check_tp_value
    from ..sglang import split_levels

    r = request
    tp = check_tp_value(r.tp)
    config = r.config
    sm_group_num = r.sm_group_num
    decode_bs_divisor = r.decode_bs_divisor
    token_budget = r.token_budget
    if r.all_gpus and tp != 1:
        raise InputError(
            "{flag.tp} describes one deployment: use it with {flag.gpu} or {flag.sms}/{flag.cc}, not "
            "{flag.all_gpus}",
            values={},
        )
    if r.all_gpus and config is not None:
        raise InputError(
            "{flag.config} describes one GPU's levels: use it with {flag.gpu} or {flag.sms}/{flag.cc}, "
            "not {flag.all_gpus}",
            values={},
        )
    if r.all_gpus and (r.gpu or r.sms or r.cc):
        raise InputError(
            "{flag.all_gpus} lists every profile; drop {flag.gpu}/{flag.sms}/{flag.cc}",
            values={},
        )
    device = None if r.all_gpus else resolve_device(r.gpu, r.sms, r.cc)
    from ..catalog.hardware import MAX_SMS

    split_levels.check_sm_group_num(sm_group_num, device.sm_count if device is not None else MAX_SMS)
    cfg, cfg_notes = load_pdmux_yaml(config, device, sm_group_num) if config is not None else (None, [])
    group_num = sm_group_num or (cfg.sm_group_num if cfg else split_levels.DEFAULT_SM_GROUP_NUM)
    divisor = decode_bs_divisor or (cfg.decode_bs_divisor if cfg else split_levels.DEFAULT_DECODE_BS_DIVISOR)
    budget = token_budget or (
        cfg.split_forward_token_budget if cfg else split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET
    )
    check_positive_knobs(
        sm_group_num=sm_group_num, decode_bs_divisor=decode_bs_divisor, token_budget=token_budget
    )
    manual = list(cfg.manual_divisions) if cfg and cfg.manual_divisions else None
    block = provenance(sglang=SPLITS_RULE_SET)

    if device is None:
        return AllGpusSplits(group_num, _every_gpu(group_num), block)

    batch_sizes = list(int_tuple(r.decode_bs, "decode_bs"))
    prompts = list(int_tuple(r.prompt_tokens, "prompt_tokens"))
    from ..catalog.model import load_model

    mdl = load_model(r.model)
    from ..planning import MAX_DECODE_BS, MAX_TOKENS

    for name, values, top in (
        ("decode_bs", batch_sizes, MAX_DECODE_BS),
        ("prompt_tokens", prompts, MAX_TOKENS),
    ):
        too_big = [v for v in values if v > top]
        if too_big:  # as estimate's bounds: no server runs a batch or prompt past them
            raise InputError("{param_flag} {value}: give 1 to {top:,}", param=name,
                             values={"value": short_repr(too_big[0]), "top": top})
    plan = split_levels.plan_groups(device.sm_count, device.cc, group_num, manual)
    notes = cfg_notes + ([plan.note] if plan.note else [])
    unused = split_levels.unused_groups(plan, group_num)
    if unused is not None:
        notes.append(unused)
    if tp > 1:
        from ..multigpu.tensor_parallel import shard

        shard(mdl, tp)  # SGLang refuses a model whose heads or widths tp does not divide
        notes.append(Finding("splits.tp_same_levels", {"tp": tp}, "tp"))
    choices = [
        (
            bs,
            split_levels.choose_group(len(plan.groups), bs, True, divisor, plan.thresholds),
            split_levels.older_sglang_crashes(plan.thresholds, bs),
        )
        for bs in batch_sizes
    ]
    layers = [
        (
            t,
            split_levels.prefill_layers_per_round(t, mdl.num_layers, budget),
            split_levels.prefill_rounds(t, mdl.num_layers, budget),
        )
        for t in prompts
    ]
    return SplitsResult(
        gpu=device.name,
        sm_count=device.sm_count,
        compute_capability=device.cc_text,
        source=plan.source,
        sm_group_num=group_num,
        decode_bs_divisor=divisor,
        token_budget=budget,
        groups=plan.groups,
        thresholds=plan.thresholds,
        choices=choices,
        model=mdl.name,
        num_layers=mdl.num_layers,
        layers=layers,
        notes=notes,
        tp=tp,
        provenance=block,
    )


def _every_gpu(group_num: int) -> list[dict[str, Any]]:
    """``--all``'s rows: each GPU profile's levels at ``group_num`` stream groups, or why there are none."""
    from ..catalog.hardware import load_gpus
    from ..sglang import split_levels

    rows = []
    for g in load_gpus():
        entry: dict[str, Any] = {
            "gpu": g.name,
            "key": g.key,
            "sm_count": g.sm_count,
            "compute_capability": f"{g.compute_capability[0]}.{g.compute_capability[1]}",
        }
        try:
            plan = split_levels.plan_groups(g.require_sm_count(), g.compute_capability, group_num)
            entry.update(
                source=plan.source,
                error=None,
                groups=[{"prefill_sms": p, "decode_sms": d} for p, d in plan.groups],
            )
        except InputError as e:
            entry.update(source=None, groups=None, error=str(e))
        rows.append(entry)
    return rows
