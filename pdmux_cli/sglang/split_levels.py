"""SGLang's PD-multiplexing rules: SM split levels, stream groups, level choice, layers per round.

Pure functions, no I/O. Each rule is written from the specification in
``shared/reference/sglang-pdmux.md`` and the chapter (``pd-multiplexing-chapter.txt``), which
reproduce SGLang's ``python/sglang/srt/multiplex/pdmux_context.py`` (``divide_sm``, the stream
groups) and ``multiplexing_mixin.py`` (``adjust_stream_groups``, the split-prefill loop).

Terms: a *split* is ``(prefill_sms, decode_sms)``; the *stream groups* are group 0 (whole GPU to
prefill, plain streams), the green-context *levels* (one split each), and the last group (whole GPU
to decode). ``N`` below is the number of stream groups actually built, which can be smaller than
``sm_group_num`` when few candidates exist (78 SMs on Hopper gives 5).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..catalog.compute_capability import (  # noqa: F401 - re-exported: SGLang's rules name them here too
    KNOWN_COMPUTE_CAPABILITIES,
    check_known_capability,
    parse_compute_capability,
)
from ..util.errors import Finding, InputError, short_repr

#: SGLang's per-architecture constraint (minimum SMs per part, SM granularity), keyed by compute
#: capability major. Source: ``pdmux_context.py`` (chapter's ARCH table). Anything else makes
#: SGLang raise ``ValueError("Unsupported compute capability: X.Y")`` on the automatic path.
SGLANG_SM_CONSTRAINTS: dict[int, tuple[int, int]] = {6: (1, 1), 7: (2, 2), 8: (4, 2), 9: (8, 8)}

#: The two SGLang codes :mod:`pdmux_cli.sglang.pdmux_config`'s problem messages name. The release's rules are
#: read from SGLang 0.5.23's source (``srt/multiplex/pdmux_context.py`` ``load_pdmux_config``,
#: ``initialize_stream_groups``, ``divide_sm``; ``multiplexing_mixin.py`` ``adjust_stream_groups``); the
#: stricter loader and start-up checks (sglang-pdmux.md's "newer") are those of Li-brua/sglang 2126b0b7's
#: ``pdmux_context.py``. Every revision's own verdict: :mod:`pdmux_cli.sglang.revision_rules`.
SGLANG_RELEASE = "SGLang 0.5.23 (latest release)"
SGLANG_UNRELEASED = "the strict-loader pdmux branches (overlay@2126b0b: Li-brua/sglang 2126b0b7)"

#: SGLang's decode floor: a candidate level must leave decode at least this many SMs.
MIN_DECODE_SMS = 16

#: Defaults of SGLang's pdmux YAML (sglang-pdmux.md, "The YAML config").
DEFAULT_SM_GROUP_NUM = 8
DEFAULT_DECODE_BS_DIVISOR = 36
DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET = 65536


class Split(NamedTuple):
    """One stream group: SMs given to prefill and to decode (ints, SMs)."""

    prefill_sms: int
    decode_sms: int


class GroupPlan(NamedTuple):
    """The stream groups for one device and config, and where they came from.

    ``groups``: list of :class:`Split`, group 0 first (all prefill), last group all decode.
    ``thresholds``: the manual_divisions decode-batch thresholds (one per level, as written: SGLang
    compares batch sizes with a float threshold as it is) or ``None`` when the linear rule chooses.
    ``source``: ``"sglang-auto"``, ``"manual"`` or ``"cuda-granularity"``
    (Blackwell, where SGLang's automatic path fails at start-up and manual_divisions is needed).
    ``note``: what the user should know (a :class:`~pdmux_cli.util.errors.Finding`, worded by
    :mod:`pdmux_cli.messages`), or ``None``.
    """

    groups: list[Split]
    thresholds: list[int | float] | None
    source: str
    note: Finding | None


def cuda_sm_granularity(major: int) -> tuple[int, int]:
    """CUDA green-context split granularity ``(minimum SMs, multiple)`` for a capability major.

    Source: CUDA driver API notes on ``cuDevSmResourceSplitByCount`` (green-contexts.md):
    6.x -> (1, 1), 7.x -> (2, 2), 8.x -> (4, 2), 9.0 and later (Hopper, Blackwell) -> (8, 8).
    Raises :class:`InputError` below 6 (no green contexts there).
    """
    if major >= 9:
        return 8, 8
    if major in SGLANG_SM_CONSTRAINTS:
        return SGLANG_SM_CONSTRAINTS[major]
    raise InputError(f"compute capability {major}.x has no green contexts (needs 6.0 or newer)")


def sglang_sm_constraints(major: int, minor: int = 0) -> tuple[int, int]:
    """SGLang's ``(minimum SMs per part, granularity)``; raises like SGLang for other majors.

    Raises :class:`InputError` ``"Unsupported compute capability: X.Y"`` for majors outside 6-9
    (Blackwell 10.x and 12.x included: SGLang bug report #32933).
    """
    if major not in SGLANG_SM_CONSTRAINTS:
        raise InputError(f"Unsupported compute capability: {major}.{minor}")
    return SGLANG_SM_CONSTRAINTS[major]


def _check_positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {value}")
    return value


def candidate_prefill_sms(total_sms: int, min_per_part: int, multiple: int) -> list[int]:
    """Every prefill SM count SGLang considers, ascending.

    From ``min_per_part`` to ``total_sms - min_per_part`` in steps of ``multiple``, keeping ``x``
    where prefill gets at least half (``x >= total - x``) and decode at least 16 SMs.
    """
    return [
        x
        for x in range(min_per_part, total_sms - min_per_part + 1, multiple)
        if x >= total_sms - x and total_sms - x >= MIN_DECODE_SMS
    ]


def divide_sm(total_sms: int, major: int, levels: int, minor: int = 0) -> list[Split]:
    """SGLang's ``divide_sm``: up to ``levels`` green-context splits, largest prefill share first.

    ``total_sms``: the device's SM count. ``levels``: ``sm_group_num - 2``. With at least ``levels``
    candidates, every ``len // levels``-th from the smallest prefill count is taken and the first
    ``levels`` kept; with fewer, all are kept. Raises :class:`InputError` when SGLang would raise:
    unsupported capability, or no valid partition (e.g. 20 or 24 SMs on Hopper).
    """
    _check_positive_int("SM count", total_sms)
    _check_positive_int("number of split levels (sm_group_num - 2)", levels)
    min_per_part, multiple = sglang_sm_constraints(major, minor)
    return _pick_levels(total_sms, min_per_part, multiple, levels, f"{major}.{minor}")


def _pick_levels(total_sms: int, min_per_part: int, multiple: int, levels: int, cc: str) -> list[Split]:
    cand = candidate_prefill_sms(total_sms, min_per_part, multiple)
    if not cand:
        raise InputError(
            f"No valid partitions for {total_sms} SMs at compute capability {cc}: decode needs at "
            f"least {MIN_DECODE_SMS} SMs and prefill at least half, in steps of {multiple} "
            "(SGLang raises at start-up)"
        )
    if len(cand) >= levels:
        cand = cand[:: max(1, len(cand) // levels)][:levels]
    return [Split(x, total_sms - x) for x in reversed(cand)]


def sm_group_num_limit(total_sms: int) -> int:
    """The largest ``sm_group_num`` pdmux takes for a GPU of ``total_sms`` SMs: one stream group per SM,
    plus the two whole-GPU groups. SGLang 0.5.23 builds a decode attention backend, with its CUDA graphs,
    for every one of ``--sm-group-num`` groups (``attention_backend_setup.py``) however few splits the
    automatic rule finds (``divide_sm`` keeps at most the candidate splits), so a larger count is memory
    and start-up time spent on groups no level can use."""
    return total_sms + 2


def check_sm_group_num(value: int | None, total_sms: int, param: str = "sm_group_num") -> int | None:
    """``value`` (``None`` passes) when at most :func:`sm_group_num_limit`; else :class:`InputError` about
    ``param`` (the parameter by its Python name: ``"sm_group_num"``, tune's ``"sm_group_nums"``; the CLI
    names its flag) quoting the limit."""
    if value is None or value <= sm_group_num_limit(total_sms):
        return value
    raise InputError(
        "{param_flag} {value}: more stream groups than one per SM ({total_sms}) and the two whole-GPU "
        "groups; SGLang builds a decode attention backend and its CUDA graphs for every group, and no split "
        "level can use more than one per SM: give at most {limit} (SGLang's default: {default})",
        param=param,
        values={"value": short_repr(value), "total_sms": total_sms, "limit": sm_group_num_limit(total_sms),
                "default": DEFAULT_SM_GROUP_NUM})


def stream_groups(total_sms: int, major: int, sm_group_num: int = DEFAULT_SM_GROUP_NUM,
                  minor: int = 0) -> list[Split]:
    """SGLang's stream groups: ``[(total, 0)] + divide_sm(...) + [(0, total)]``.

    Raises :class:`InputError` for ``sm_group_num < 3`` (SGLang's loader rule) and wherever
    :func:`divide_sm` does.
    """
    _check_positive_int("sm_group_num", sm_group_num, minimum=3)
    return [Split(total_sms, 0), *divide_sm(total_sms, major, sm_group_num - 2, minor), Split(0, total_sms)]


def granularity_levels(total_sms: int, major: int, sm_group_num: int = DEFAULT_SM_GROUP_NUM) -> list[Split]:
    """Stream groups with SGLang's selection rule but CUDA's granularity, for any capability >= 6.

    For Blackwell (10.x, 12.x) this is what the hardware allows (multiples of 8) and what a
    manual_divisions list can use; SGLang's own automatic path raises there.
    Raises :class:`InputError` for ``sm_group_num < 3``, capability < 6 or no valid partition.
    """
    _check_positive_int("SM count", total_sms)
    _check_positive_int("sm_group_num", sm_group_num, minimum=3)
    min_per_part, multiple = cuda_sm_granularity(major)
    levels = _pick_levels(total_sms, min_per_part, multiple, sm_group_num - 2, f"{major}.x")
    return [Split(total_sms, 0), *levels, Split(0, total_sms)]


def driver_split(prefill_sms: int, decode_sms: int, total_sms: int, major: int) -> Split:
    """The split the CUDA driver really makes when sgl-kernel asks for ``prefill_sms`` / ``decode_sms``.

    sgl-kernel's ``create_greenctx_stream_by_value`` splits the device once for ``prefill + decode``
    SMs, then that group for ``prefill``; prefill gets the group, decode the remainder
    (sglang-pdmux.md, "Green-context streams"). The driver rounds each request up to the granularity
    (:func:`cuda_sm_granularity`, at least the minimum); a request for the whole device gets it. So
    100/32 on H100 runs as 104/28, while H200's 112/20 runs as written. SMs in and out; the decode
    count is 0 or negative when the rounded prefill takes the whole group (no usable split).
    Raises :class:`InputError` for a capability below 6.0.
    """
    minimum, multiple = cuda_sm_granularity(major)
    real_prefill = -(-max(prefill_sms, minimum) // multiple) * multiple
    real_pair = min(-(-max(prefill_sms + decode_sms, minimum) // multiple) * multiple, total_sms)
    return Split(real_prefill, real_pair - real_prefill)


def manual_stream_groups(total_sms: int, manual_divisions: Sequence[Sequence[int]]) -> list[Split]:
    """Stream groups from a YAML's ``manual_divisions`` (``[prefill, decode, threshold]`` each)."""
    return [Split(total_sms, 0), *(Split(int(e[0]), int(e[1])) for e in manual_divisions),
            Split(0, total_sms)]


def plan_groups(
    total_sms: int,
    cc: tuple[int, int],
    sm_group_num: int = DEFAULT_SM_GROUP_NUM,
    manual_divisions: Sequence[Sequence[int]] | None = None,
) -> GroupPlan:
    """The stream groups SGLang builds for a device, and how levels are chosen.

    ``cc``: ``(major, minor)``. With ``manual_divisions`` (list of ``[prefill_sms, decode_sms,
    threshold]``) those levels are used as given (SGLang never calls its constraint function then).
    Otherwise SGLang's automatic path, except for majors 10 and up where SGLang raises
    ("Unsupported compute capability"): there the CUDA-granularity levels are returned with a note
    that SGLang needs manual_divisions. Raises :class:`InputError` where SGLang itself would fail
    on a supported capability (no valid partition), or for capability < 6.
    """
    major, minor = cc
    if manual_divisions:
        groups = manual_stream_groups(total_sms, manual_divisions)
        return GroupPlan(groups, [e[2] for e in manual_divisions], "manual", None)
    if major in SGLANG_SM_CONSTRAINTS:
        return GroupPlan(stream_groups(total_sms, major, sm_group_num, minor), None, "sglang-auto", None)
    groups = granularity_levels(total_sms, major, sm_group_num)
    # SGLang raises 'Unsupported compute capability' at start-up (issue #32933): manual_divisions needed
    return GroupPlan(groups, None, "cuda-granularity", Finding("levels.cuda_granularity", {"major": major,
                                                                                          "minor": minor}))


def unused_groups(plan: GroupPlan, sm_group_num: int) -> Finding | None:
    """Finding ``levels.fewer_groups`` (values ``asked``, ``groups``, ``levels``; parameter ``sm_group_num``)
    where SGLang's automatic rule (``plan.source`` ``"sglang-auto"``) found fewer split levels than
    ``sm_group_num`` asks for, else ``None``. SGLang 0.5.23 still builds a decode attention backend, and
    inits its CUDA-graph state, for each of ``sm_group_num`` groups (``attention_backend_setup.py``;
    ``decode_cuda_graph_runner.py`` ``maybe_init_pdmux``): memory no level uses. On an H20 (78 SMs) the
    default 8 gives 5 groups."""
    if plan.source != "sglang-auto" or len(plan.groups) >= sm_group_num:
        return None
    return Finding("levels.fewer_groups", {"asked": sm_group_num, "groups": len(plan.groups),
                                           "levels": len(plan.groups) - 2}, "sm_group_num")


def choose_group(
    num_groups: int,
    decode_bs: int,
    has_prefill: bool,
    decode_bs_divisor: int = DEFAULT_DECODE_BS_DIVISOR,
    thresholds: Sequence[int] | None = None,
) -> int:
    """The stream-group index SGLang's ``adjust_stream_groups`` picks (unreleased SGLang's fallback).

    ``num_groups``: N, the number of stream groups. ``decode_bs``: requests in decode.
    Decode and prefill both present: with ``thresholds`` (manual_divisions), the LAST level whose
    threshold is <= decode_bs (level i -> group i + 1), or group 1 when none matches (SGLang 0.5.23
    crashes there instead: see :func:`older_sglang_crashes`); without, the linear rule
    ``max(1, min(N - 2, decode_bs * (N - 2) // decode_bs_divisor))``. Decode only -> N - 1;
    prefill only or idle -> 0.
    """
    if decode_bs < 0:
        raise InputError(f"decode batch size must be >= 0, got {decode_bs}")
    if not (decode_bs and has_prefill):
        return num_groups - 1 if decode_bs else 0
    if thresholds:
        chosen = 1
        for i, threshold in enumerate(thresholds):
            if threshold <= decode_bs:
                chosen = i + 1
        return chosen
    _check_positive_int("decode_bs_divisor", decode_bs_divisor)
    return max(1, min(num_groups - 2, decode_bs * (num_groups - 2) // decode_bs_divisor))


def older_sglang_crashes(thresholds: Sequence[int] | None, decode_bs: int, has_prefill: bool = True) -> bool:
    """True when SGLang 0.5.23 (the latest release) dies with ``UnboundLocalError`` choosing a level.

    That happens with manual_divisions when decode and prefill are both present and no threshold
    is <= the decode batch size (the variable holding the choice is never assigned).
    """
    return bool(thresholds) and has_prefill and decode_bs > 0 and all(t > decode_bs for t in thresholds)


def prefill_layers_per_round(
    extend_tokens: int, num_layers: int, token_budget: int = DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET,
    max_layers: int = 0,
) -> int:
    """Layers of a split prefill submitted per scheduler round while decode runs beside it.

    ``max(1, token_budget // extend_tokens)`` capped at ``num_layers``; all layers when
    ``extend_tokens`` is 0. Chapter: 512 -> 36 (of 36), 8192 -> 8, 32768 -> 2, 131072 -> 1.
    ``max_layers`` > 0 caps it further (``max_split_forward_layers``, read by
    sgl-project/sglang a64f33f0 ``multiplexing_mixin.py`` ``_get_split_forward_count``; 0 = no cap, what
    every other revision does: :func:`pdmux_cli.sglang.revision_rules.layer_cap` gives the cap in effect).
    """
    _check_positive_int("number of layers", num_layers)
    _check_positive_int("split_forward_token_budget", token_budget)
    if extend_tokens < 0:
        raise InputError(f"prompt tokens must be >= 0, got {extend_tokens}")
    if isinstance(max_layers, bool) or not isinstance(max_layers, int) or max_layers < 0:
        raise InputError(f"max_split_forward_layers must be an integer >= 0 (0 = no cap), got {max_layers!r}")
    if extend_tokens == 0:
        return num_layers
    per_round = min(num_layers, max(1, token_budget // extend_tokens))
    return min(per_round, max_layers) if max_layers else per_round


def prefill_rounds(extend_tokens: int, num_layers: int,
                   token_budget: int = DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET, max_layers: int = 0) -> int:
    """Scheduler rounds a split prefill takes: ``ceil(num_layers / layers_per_round)``."""
    per_round = prefill_layers_per_round(extend_tokens, num_layers, token_budget, max_layers)
    return -(-num_layers // per_round)
