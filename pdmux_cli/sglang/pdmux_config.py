"""SGLang's pdmux YAML (``--pdmux-config-path``): schema, parse, dump, and validation.

The pure core behind ``pdmux gen-config`` and ``pdmux check-config``: no printing, no exiting; the
only I/O is :func:`load_config` reading the one file it is given. Every rule comes from
``shared/reference/sglang-pdmux.md`` ("The YAML config", "Green-context streams in sgl-kernel") and
the SGLang section of the chapter; each :class:`Problem` says which SGLang refuses it:

``"old"``
    SGLang 0.5.23, the latest release (its loader checks only ``sm_group_num`` and the entry count),
    refuses it or crashes on it at start-up or run time; unreleased SGLang accepts it;
``"new"``
    unreleased SGLang (branches after 0.5.23) refuses it at load or start-up; 0.5.23 runs it;
``"both"``
    both refuse it or crash on it (the shared loader rules, start-up code such as the unpacking of
    each entry, and sgl-kernel's ``create_greenctx_stream_by_value`` checks: both counts > 0, their
    sum fits the device);
``"cuda"``
    SGLang accepts it, but the CUDA driver rounds green-context SM counts up to the architecture's
    granularity, so the split that really runs differs from the YAML;
``"pdmux"``
    SGLang does not object, but it is almost certainly a mistake (an unknown key, most often a typo);
``"warning"``
    every SGLang runs it as meant (a float threshold, ``sm_group_num: 8.0`` with manual_divisions):
    worth a line, not a failure (:func:`is_error` is false; check-config exits 0 on warnings alone).

The 0.5.23 verdicts come from its source: ``srt/multiplex/pdmux_context.py`` (``load_pdmux_config``,
``initialize_stream_groups``, ``divide_sm``), ``multiplexing_mixin.py`` (``adjust_stream_groups``),
``srt/model_executor/model_runner_components/attention_backend_setup.py`` (one decode attention backend
per ``--sm-group-num``) and ``model_runner.py`` ``update_decode_attn_backend``; the unreleased ones from
sglang-pdmux.md. :data:`pdmux_cli.sglang.split_levels.SGLANG_RELEASE` and ``SGLANG_UNRELEASED`` name them in
messages.

Units: SM counts are SMs of one GPU; ``split_forward_token_budget`` is in tokens;
``decode_bs_threshold`` and ``decode_bs_divisor`` are decode batch sizes (requests).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import split_levels
from ..util.errors import InputError, printable, short_repr
from ..util.input_files import read_input_text
from .split_levels import SGLANG_RELEASE, SGLANG_UNRELEASED
from ..util.yaml_input import load_yaml

#: SGLang's server argument for the stream groups (``ServerArgs.sm_group_num``, SGLang 0.5.23
#: ``srt/arg_groups/fields/disagg.py``), which must match the YAML's: the key of a :class:`Problem` about
#: it (``pdmux check-config --sm-group-num`` passes the value launched with; :func:`launch_flags`).
SGLANG_SM_GROUP_NUM_FLAG = "--sm-group-num"
#: SGLang's server argument that turns CUDA graphs off (SGLang 0.5.23 ``srt/server_args.py``).
SGLANG_DISABLE_CUDA_GRAPH_FLAG = "--disable-cuda-graph"

#: The values :attr:`Problem.rule` takes, with what each means.
RULES: dict[str, str] = {
    "old": f"{SGLANG_RELEASE} refuses it or crashes on it ({SGLANG_UNRELEASED} accepts it)",
    "new": f"{SGLANG_UNRELEASED} refuses it ({SGLANG_RELEASE} runs it)",
    "both": f"{SGLANG_RELEASE} and {SGLANG_UNRELEASED} both refuse it or crash on it",
    "cuda": "the CUDA driver rounds SM counts up, so the split that runs differs from the YAML",
    "pdmux": "SGLang does not object, but it is most likely a mistake",
    "warning": "every SGLang runs it as meant; a warning, not an error",
}

#: Who objects, as the check-config table's "SGLang" column says it.
RULE_LABELS: dict[str, str] = {
    "old": "0.5.23 (release)",
    "new": "overlay@2126b0b",
    "both": "0.5.23 + overlay@2126b0b",
    "cuda": "CUDA driver",
    "pdmux": "none (a mistake?)",
    "warning": "none (warning)",
}


def is_error(problem: Problem) -> bool:
    """True unless ``problem`` is only a warning (rule ``"warning"``): what check-config exits 2 for."""
    return problem.rule != "warning"

#: The keys SGLang reads, in the order :func:`dump_config` writes them.
KNOWN_KEYS: tuple[str, ...] = (
    "sm_group_num",
    "manual_divisions",
    "split_forward_token_budget",
    "decode_bs_divisor",
    "max_split_forward_layers",
    "overlap_decode_full_sm",
)

_ENTRY_FIELDS = ("prefill_sm", "decode_sm", "decode_bs_threshold")

#: The comment block :func:`dump_config` writes first. Constant, so a dumped file read and
#: dumped again is unchanged.
HEADER = (
    "# SGLang PD-multiplexing config, for: --enable-pdmux --pdmux-config-path FILE\n"
    "# (--sm-group-num must equal sm_group_num below). Written by pdmux.\n"
    "# manual_divisions: one [prefill_sm, decode_sm, decode_bs_threshold] per split level.\n"
)

#: Largest pdmux YAML :func:`load_config` reads, bytes (real ones are a few hundred bytes).
MAX_CONFIG_BYTES = 64 * 1024


@dataclass(frozen=True)
class PdmuxConfig:
    """The content of SGLang's pdmux YAML. Defaults are SGLang's (sglang-pdmux.md).

    ``sm_group_num``: stream groups including the all-prefill and all-decode ones (>= 3).
    ``manual_divisions``: ``(prefill_sms, decode_sms, decode_bs_threshold)`` per split level, or
    ``()`` for SGLang's automatic split. ``split_forward_token_budget``: tokens; a split prefill
    submits ``max(1, budget // prompt_tokens)`` layers per round. ``decode_bs_divisor``: decode
    requests at which the linear rule reaches the last level. ``max_split_forward_layers`` (unreleased
    SGLang; ``None`` = not written, 0 = no cap) and ``overlap_decode_full_sm`` (unreleased SGLang;
    ``None`` = not written; needs manual_divisions) are optional.

    Values are not checked here (see :func:`validate`); lists are normalised to tuples.
    """

    sm_group_num: int = split_levels.DEFAULT_SM_GROUP_NUM
    manual_divisions: tuple[tuple[int, int, int], ...] = ()
    split_forward_token_budget: int = split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET
    decode_bs_divisor: int = split_levels.DEFAULT_DECODE_BS_DIVISOR
    max_split_forward_layers: int | None = None
    overlap_decode_full_sm: bool | None = None

    def __post_init__(self) -> None:
        divisions = tuple(tuple(entry) for entry in self.manual_divisions)
        object.__setattr__(self, "manual_divisions", divisions)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a pdmux config.

    ``where``: the key or entry, e.g. ``"sm_group_num"``, ``"manual_divisions[2]"``, or SGLang's launch
    argument :data:`SGLANG_SM_GROUP_NUM_FLAG` (``"--sm-group-num"``: SGLang's flag, not pdmux's).
    ``message``: one sentence, what is wrong and how to fix it.
    ``rule``: who objects, one of :data:`RULES` (``"old"``, ``"new"``, ``"both"``, ``"cuda"``,
    ``"pdmux"``).
    """

    where: str
    message: str
    rule: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message} [{self.rule}]"


# --------------------------------------------------------------------------------------------
# Parsing


def _read_int(value: Any, where: str, what: str) -> tuple[int | None, Problem | None]:
    """An int from a YAML value, or None; a Problem for anything that is not a plain int.

    Values readable as an int without loss (``36.0``, ``"36"``) are still returned, so the later
    checks run, but reported: SGLang would compute with a float or a string there.
    """
    if isinstance(value, bool):
        return None, Problem(where, f"{what} is a boolean ({str(value).lower()}), not an integer", "both")
    if isinstance(value, int):
        return value, None
    if isinstance(value, float):
        if math.isfinite(value) and value == int(value):
            return int(value), Problem(
                where, f"{what} is the float {short_repr(value)}; write the integer {int(value)}", "both"
            )
        return None, Problem(where, f"{what} is {short_repr(value)}, not an integer", "both")
    if isinstance(value, str):
        if re.fullmatch(r"\s*[+-]?\d+\s*", value):
            return int(value), Problem(
                where,
                f"{what} is the string {short_repr(value)}; write it unquoted, as the integer {int(value)}",
                "both",
            )
        return None, Problem(where, f"{what} is the string {short_repr(value)}, not an integer", "both")
    if value is None:
        return None, Problem(where, f"{what} is empty (null); give an integer or remove the key", "both")
    return None, Problem(where, f"{what} is a {type(value).__name__}, not an integer", "both")


def _read_threshold(value: Any, where: str) -> tuple[int | float | None, Problem | None]:
    """decode_bs_threshold: an int, or a finite float kept as written with a warning.

    SGLang compares the decode batch size with the threshold as it is (``decode_bs >= threshold`` in
    ``adjust_stream_groups``), and no version checks its type, so ``0.5`` runs, acting as 1 (the
    smallest batch that reaches it). Anything else is read as :func:`_read_int` reads it.
    """
    if isinstance(value, float) and math.isfinite(value) and value != int(value):
        acts = math.ceil(value)
        return value, Problem(
            where,
            f"decode_bs_threshold is the float {short_repr(value)}; SGLang compares decode batch sizes with "
            f"it as written, so it acts as {acts} (the smallest batch that reaches it): write {acts}",
            "warning",
        )
    return _read_int(value, where, "decode_bs_threshold")


def _read_entry(raw: Any, index: int) -> tuple[tuple[int, int, int | float] | None, list[Problem]]:
    where = f"manual_divisions[{index}]"
    if not isinstance(raw, (list, tuple)):
        return None, [
            Problem(
                where,
                f"entry is {short_repr(raw)}, not a list [prefill_sm, decode_sm, decode_bs_threshold]",
                "both",
            )
        ]
    problems: list[Problem] = []
    if len(raw) < 3:
        return None, [
            Problem(
                where,
                f"entry has {len(raw)} element(s), needs 3: [prefill_sm, decode_sm, decode_bs_threshold]",
                "both",
            )
        ]
    if len(raw) > 3:
        problems.append(
            Problem(
                where,
                f"entry has {len(raw)} elements, needs exactly 3 [prefill_sm, decode_sm, "
                f"decode_bs_threshold]: {SGLANG_RELEASE} dies at start-up unpacking it (ValueError: too many "
                f"values to unpack, in initialize_stream_groups) and {SGLANG_UNRELEASED} refuses it at load",
                "both",
            )
        )
    values: list[int | float] = []
    for field, value in zip(_ENTRY_FIELDS, raw[:3]):
        if field == "decode_bs_threshold":
            number, problem = _read_threshold(value, where)
        else:
            number, problem = _read_int(value, where, field)
        if problem is not None:
            problems.append(problem)
        if number is None:
            return None, problems
        values.append(number)
    return (int(values[0]), int(values[1]), values[2]), problems


def _read_divisions(
    raw: Any, sm_group_num: int
) -> tuple[tuple[tuple[int, int, int | float], ...], list[Problem]]:
    if raw is None:
        return (), [
            Problem(
                "manual_divisions",
                f"is empty (null): {SGLANG_RELEASE} runs it as [] (SGLang's automatic split), "
                f"{SGLANG_UNRELEASED} refuses it at load; write [] for the automatic split, or list the "
                "levels",
                "new",
            )
        ]
    if not isinstance(raw, list):
        return (), [
            Problem(
                "manual_divisions",
                f"is {short_repr(raw)}, not a list of [prefill_sm, decode_sm, decode_bs_threshold] entries",
                "both",
            )
        ]
    entries: list[tuple[int, int, int]] = []
    problems: list[Problem] = []
    unreadable = False
    for index, item in enumerate(raw):
        entry, entry_problems = _read_entry(item, index)
        problems.extend(entry_problems)
        if entry is None:
            unreadable = True
        else:
            entries.append(entry)
    if unreadable:
        # Leave the divisions out of the config so validate()'s entry indices never shift; the
        # count check it would have made is made here instead.
        if sm_group_num >= 3 and len(raw) != sm_group_num - 2:
            problems.append(_count_problem(len(raw), sm_group_num))
        return (), problems
    return tuple(entries), problems


def parse_config(text: str, source: str = "<string>") -> tuple[PdmuxConfig, list[Problem]]:
    """Parse pdmux YAML text into a config and the structural problems found on the way.

    ``source`` names the text in messages (a path, or ``"<string>"``). Lenient: unknown keys,
    wrong types (strings, floats, booleans where an int is needed), entries that are not lists of
    three ints, and a missing ``sm_group_num`` (SGLang requires it) become :class:`Problem`
    objects; the returned config then holds the default for an unreadable field, or ``()`` for
    manual_divisions when an entry is unreadable. Values are not range-checked (see
    :func:`validate`).

    Raises :class:`InputError` (one line, naming ``source``) when the text is not YAML, is empty,
    or its top level is not a mapping.
    """
    data, duplicate_keys = load_yaml(text, source)
    if data is None:
        raise InputError(f"{source}: empty pdmux config (SGLang needs at least sm_group_num)")
    if not isinstance(data, dict):
        raise InputError(
            f"{source}: the top level is a {type(data).__name__}, not a mapping of keys such as "
            "sm_group_num and manual_divisions"
        )

    problems: list[Problem] = []
    for key, line in duplicate_keys:
        problems.append(Problem(printable(key),
                                f"is written twice (again at line {line}); SGLang keeps only the last "
                                "value: remove one", "pdmux"))
    for key in data:
        if key not in KNOWN_KEYS:
            import difflib  # only on the error path: keeps start-up light
            close = difflib.get_close_matches(str(key), KNOWN_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; SGLang reads {', '.join(KNOWN_KEYS)}"
            problems.append(Problem(printable(str(key)),
                                    f"unknown key {short_repr(key)}, SGLang ignores it{hint}", "pdmux"))

    fields: dict[str, Any] = {}
    if "sm_group_num" not in data:
        problems.append(
            Problem(
                "sm_group_num",
                "missing: SGLang's loader requires it ('Missing required field: sm_group_num', in "
                f"{SGLANG_RELEASE} and {SGLANG_UNRELEASED}); add 'sm_group_num: "
                f"{split_levels.DEFAULT_SM_GROUP_NUM}'",
                "both",
            )
        )
    manual = isinstance(data.get("manual_divisions"), list) and bool(data["manual_divisions"])
    for key in ("sm_group_num", "split_forward_token_budget", "decode_bs_divisor"):
        if key in data:
            number, problem = _read_int(data[key], key, key)
            if problem is not None:
                problems.append(_integral_float_problem(problem, key, data[key], manual))
            if number is not None:
                fields[key] = number

    if "max_split_forward_layers" in data and data["max_split_forward_layers"] is not None:
        number, problem = _read_int(
            data["max_split_forward_layers"], "max_split_forward_layers", "max_split_forward_layers"
        )
        if problem is not None:
            problems.append(problem)
        fields["max_split_forward_layers"] = number

    if "overlap_decode_full_sm" in data and data["overlap_decode_full_sm"] is not None:
        flag = data["overlap_decode_full_sm"]
        if isinstance(flag, bool):
            fields["overlap_decode_full_sm"] = flag
        else:
            problems.append(
                Problem("overlap_decode_full_sm",
                        f"is {short_repr(flag)}, not a boolean; write true or false", "both")
            )

    if "manual_divisions" in data:
        sm_group_num = fields.get("sm_group_num", split_levels.DEFAULT_SM_GROUP_NUM)
        divisions, division_problems = _read_divisions(data["manual_divisions"], sm_group_num)
        problems.extend(division_problems)
        fields["manual_divisions"] = divisions

    return PdmuxConfig(**fields), problems


def _integral_float_problem(problem: Problem, key: str, value: Any, manual: bool) -> Problem:
    """``problem`` about ``key``, said exactly where ``value`` is an integral float such as ``8.0``.

    With manual_divisions, ``sm_group_num`` is only compared with the entry count (``6 == 8.0 - 2``
    holds) and ``decode_bs_divisor`` is never read (``adjust_stream_groups`` uses the thresholds), so
    both run on every SGLang: a warning. Without them SGLang's automatic split slices its candidates
    with ``sm_group_num - 2`` (``divide_sm``: TypeError at start-up) and the linear rule divides by the
    divisor into a float stream index (TypeError at the first level change): errors.
    """
    integral = isinstance(value, float) and math.isfinite(value) and value == int(value)
    if key not in ("sm_group_num", "decode_bs_divisor") or not integral:
        return problem
    if not manual:
        crash = ("SGLang's automatic split slices its candidate splits with sm_group_num - 2 and dies at "
                 "start-up (TypeError in divide_sm)" if key == "sm_group_num" else
                 "SGLang's linear level rule divides by it into a float stream index and dies (TypeError) at "
                 "a level change")
        return Problem(key,
                       f"{key} is the float {short_repr(value)}: {crash}; write the integer {int(value)}",
                       "both")
    use = ("only counts the entries against it" if key == "sm_group_num"
           else "never reads it (the thresholds choose)")
    return Problem(
        key,
        f"{key} is the float {short_repr(value)}; with manual_divisions SGLang {use}, so it runs; write the "
        f"integer {int(value)}",
        "warning",
    )


def load_config(path: str | Path) -> tuple[PdmuxConfig, list[Problem]]:
    """Read and parse a pdmux YAML file (UTF-8). See :func:`parse_config` for what comes back.

    Raises :class:`InputError` naming ``path`` when it is missing, a directory or another
    non-regular file (device, pipe), larger than :data:`MAX_CONFIG_BYTES`, unreadable, not UTF-8,
    not YAML or not a mapping.
    """
    text = read_input_text(path, "pdmux config", MAX_CONFIG_BYTES)
    return parse_config(text, source=str(path))


# --------------------------------------------------------------------------------------------
# Validation


def _count_problem(count: int, sm_group_num: int) -> Problem:
    return Problem(
        "manual_divisions",
        f"has {count} entries but sm_group_num {sm_group_num} needs exactly {sm_group_num - 2} "
        f"(sm_group_num - 2), and SGLang refuses the file; set sm_group_num to {count + 2} "
        f"or give {sm_group_num - 2} entries",
        "both",
    )


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _granularity_problem(
    index: int, entry: tuple[int, int, int], total_sms: int | None, cc: tuple[int, int]
) -> Problem | None:
    """The driver's rounding for one level, as sgl-kernel builds it.

    sgl-kernel splits the device once for ``prefill + decode`` SMs, then splits that group for
    ``prefill``; prefill gets the group, decode the remainder. Each requested count is rounded up
    to the granularity (at least the minimum); a request for the whole device gets the whole device.
    So decode need not be a multiple itself when the pair is the whole device (H200's 112/20).
    """
    prefill, decode, _ = entry
    if prefill <= 0 or decode <= 0 or (total_sms is not None and prefill + decode > total_sms):
        return None  # reported by the "both" checks already
    minimum, multiple = split_levels.cuda_sm_granularity(cc[0])
    if total_sms is None:
        real_prefill = _round_up(max(prefill, minimum), multiple)
        if real_prefill == prefill:
            return None
        real = f"prefill on {real_prefill} SMs and decode (the remainder) on {real_prefill - prefill} fewer"
    else:
        real_prefill, real_decode = split_levels.driver_split(prefill, decode, total_sms, cc[0])
        if real_prefill == prefill and real_decode == decode:
            return None
        if real_decode <= 0:
            real = f"prefill on {real_prefill} SMs and leaves decode none"
        else:
            real = f"prefill on {real_prefill} and decode on {real_decode} SMs"
    lower = max(minimum, prefill - prefill % multiple)
    choices = sorted({lower, real_prefill})
    advice = (
        f"use prefill_sm {' or '.join(map(str, choices))}"
        if real_prefill != prefill
        else f"make prefill_sm + decode_sm a multiple of {multiple} or the whole device"
    )
    return Problem(
        f"manual_divisions[{index}]",
        f"on compute capability {cc[0]}.x green-context SM counts are multiples of {multiple} "
        f"(at least {minimum}) and the driver rounds up, so [{prefill}, {decode}] really runs {real}; "
        f"{advice}",
        "cuda",
    )


def driver_divisions(config: PdmuxConfig, total_sms: int, cc: tuple[int, int]) -> tuple[
    PdmuxConfig, list[str]]:
    """``config`` with each manual_divisions entry as the CUDA driver really splits it, and a note per
    entry it changes (:func:`pdmux_cli.sglang.split_levels.driver_split`): on H100 ``[100, 32, 0]`` runs as
    ``[104, 28, 0]``, so ``splits``, ``estimate`` and ``simulate`` plan and time 104/28, as the GPU would.

    SMs of one GPU. Entries the driver keeps, or that other checks refuse (a count <= 0, a sum past
    the device), are left as written. Raises :class:`InputError` when the rounded prefill leaves
    decode no SMs (no split the driver can make).
    """
    if not config.manual_divisions:
        return config, []
    minimum, multiple = split_levels.cuda_sm_granularity(cc[0])
    entries, notes = [], []
    for index, (prefill, decode, threshold) in enumerate(config.manual_divisions):
        real = split_levels.Split(prefill, decode)
        if prefill > 0 and decode > 0 and prefill + decode <= total_sms:
            real = split_levels.driver_split(prefill, decode, total_sms, cc[0])
        if real.decode_sms <= 0:
            raise InputError(
                f"manual_divisions[{index}] [{prefill}, {decode}]: the CUDA driver rounds prefill up to "
                f"{real.prefill_sms} SMs (multiples of {multiple} on compute capability {cc[0]}.x), which "
                f"leaves decode none: use prefill_sm {max(minimum, prefill - prefill % multiple)}"
            )
        if real != (prefill, decode):
            notes.append(
                f"manual_divisions[{index}] [{prefill}, {decode}] runs as "
                f"{real.prefill_sms}/{real.decode_sms} SMs (the CUDA driver rounds green-context SM counts "
                f"up to multiples of {multiple} on compute capability {cc[0]}.x): computed with "
                f"{real.prefill_sms}/{real.decode_sms}"
            )
        entries.append((real.prefill_sms, real.decode_sms, threshold))
    return replace(config, manual_divisions=tuple(entries)), notes


def validate(
    config: PdmuxConfig,
    total_sms: int | None = None,
    cc: tuple[int, int] | None = None,
    cli_sm_group_num: int | None = None,
) -> list[Problem]:
    """Every problem SGLang (0.5.23, the latest release; unreleased branches) or the CUDA driver has with
    ``config``.

    ``total_sms``: the device's SM count (enables the sum checks and the automatic-split check).
    ``cc``: ``(major, minor)`` compute capability (enables the granularity check and, without
    manual_divisions, the check that SGLang's automatic split supports the device).
    ``cli_sm_group_num``: the ``--sm-group-num`` launch flag: unreleased SGLang requires it to equal the
    YAML's; 0.5.23 builds that many decode attention backends and crashes when there are fewer than
    stream groups (:func:`stream_group_count`). Returns problems in a stable order: top-level keys, then
    entries in order.

    Raises :class:`InputError` only for bad arguments: ``total_sms < 1`` or a capability without
    green contexts (major < 6).
    """
    if total_sms is not None and (isinstance(total_sms, bool) or total_sms < 1):
        raise InputError(f"SM count must be >= 1, got {total_sms}")
    if cc is not None:
        split_levels.cuda_sm_granularity(cc[0])  # raises for majors without green contexts

    problems = _top_level_problems(config, total_sms, cc, cli_sm_group_num)
    divisions = config.manual_divisions
    if not divisions:
        problems.extend(_automatic_split_problems(config, total_sms, cc))
        return problems

    n = config.sm_group_num
    if n >= 3 and len(divisions) != n - 2:
        problems.append(_count_problem(len(divisions), n))

    for index, entry in enumerate(divisions):
        problems.extend(_entry_problems(index, entry, total_sms, cc))
    problems.extend(_threshold_problems([entry[2] for entry in divisions]))
    return problems


def _top_level_problems(config: PdmuxConfig, total_sms: int | None, cc: tuple[int, int] | None,
                        cli_sm_group_num: int | None) -> list[Problem]:
    """:func:`validate`'s problems with the top-level keys (and the ``--sm-group-num`` launch flag), in
    order."""
    problems: list[Problem] = []
    n = config.sm_group_num
    divisions = config.manual_divisions

    if n < 3:
        problems.append(
            Problem(
                "sm_group_num",
                f"is {n}, must be >= 3 (the all-prefill group, at least one split level, the all-decode "
                "group); SGLang's loader refuses it ('sm_group_num must be >= 3')",
                "both",
            )
        )
    if total_sms is not None:
        for where, value in (("sm_group_num", n), (SGLANG_SM_GROUP_NUM_FLAG, cli_sm_group_num)):
            if value is not None and value > split_levels.sm_group_num_limit(total_sms):
                problems.append(
                    Problem(
                        where,
                        f"is {short_repr(value)}, more stream groups than one per SM ({total_sms}) and "
                        "the two whole-GPU groups: "
                        "SGLang builds a decode attention backend and its CUDA graphs for every group "
                        "(attention_backend_setup.py), and no split level can use more than one per SM; "
                        f"give at most {split_levels.sm_group_num_limit(total_sms)} (default "
                        f"{split_levels.DEFAULT_SM_GROUP_NUM})",
                        "pdmux",
                    )
                )
    if cli_sm_group_num is not None and cli_sm_group_num != n:
        groups = stream_group_count(config, total_sms, cc)
        crash = cli_sm_group_num < groups
        problems.append(
            Problem(
                SGLANG_SM_GROUP_NUM_FLAG,
                f"the launch flag {SGLANG_SM_GROUP_NUM_FLAG} {cli_sm_group_num} differs from the YAML's "
                f"sm_group_num {n}; {SGLANG_UNRELEASED} refuses to start"
                + (f", and {SGLANG_RELEASE}, building {cli_sm_group_num} decode attention backends for "
                   f"{groups} stream groups, dies with IndexError (at start-up capturing CUDA graphs, or "
                   f"with {SGLANG_DISABLE_CUDA_GRAPH_FLAG} at the first switch to group {cli_sm_group_num} "
                   "or above)"
                   if crash else "")
                + f": pass {SGLANG_SM_GROUP_NUM_FLAG} {n}",
                "both" if crash else "new",
            )
        )
    if config.split_forward_token_budget <= 0:
        problems.append(
            Problem(
                "split_forward_token_budget",
                f"is {config.split_forward_token_budget}, must be > 0 (tokens per prefill round; default "
                f"{split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET}); {SGLANG_UNRELEASED} refuses it "
                f"({SGLANG_RELEASE} submits one layer per round)",
                "new",
            )
        )
    if config.decode_bs_divisor <= 0:
        crashes_old = config.decode_bs_divisor == 0 and not divisions
        problems.append(
            Problem(
                "decode_bs_divisor",
                f"is {config.decode_bs_divisor}, must be > 0 (default "
                f"{split_levels.DEFAULT_DECODE_BS_DIVISOR}); {SGLANG_UNRELEASED} refuses it"
                + (f"; {SGLANG_RELEASE} divides by it and dies with ZeroDivisionError" if crashes_old
                   else ""),
                "both" if crashes_old else "new",
            )
        )
    if config.max_split_forward_layers is not None and config.max_split_forward_layers < 0:
        problems.append(
            Problem(
                "max_split_forward_layers",
                f"is {config.max_split_forward_layers}, must be >= 0 (0 = no cap); {SGLANG_UNRELEASED} "
                f"refuses it ({SGLANG_RELEASE} ignores the key)",
                "new",
            )
        )
    if config.overlap_decode_full_sm and not divisions:
        problems.append(
            Problem(
                "overlap_decode_full_sm",
                f"is true but needs manual_divisions; {SGLANG_UNRELEASED} refuses it ({SGLANG_RELEASE} "
                "ignores the key): list the levels in manual_divisions or remove the key",
                "new",
            )
        )
    return problems


def _threshold_problems(thresholds: list[float]) -> list[Problem]:
    """:func:`validate`'s problems with manual_divisions' ``decode_bs_threshold`` column as a whole: not
    strictly increasing, or none at or below 1."""
    problems: list[Problem] = []
    for index in range(1, len(thresholds)):
        if thresholds[index] <= thresholds[index - 1]:
            problems.append(
                Problem(
                    f"manual_divisions[{index}]",
                    f"decode_bs_threshold {thresholds[index]} is not greater than the previous entry's "
                    f"{thresholds[index - 1]}; {SGLANG_UNRELEASED} refuses it (thresholds must strictly "
                    f"increase), and {SGLANG_RELEASE}, taking the last entry whose threshold fits, never "
                    "picks the earlier one",
                    "new",
                )
            )
    smallest = min(thresholds)
    if smallest > 1:
        index = thresholds.index(smallest)
        problems.append(
            Problem(
                f"manual_divisions[{index}]",
                f"every decode_bs_threshold is above 1 (smallest {smallest}): when a prefill batch "
                f"arrives while fewer than {math.ceil(smallest)} requests are decoding, no entry matches and "
                f"{SGLANG_RELEASE} dies with UnboundLocalError in adjust_stream_groups ({SGLANG_UNRELEASED} "
                "falls back to the first level); set the first threshold to 0 or 1",
                "old",
            )
        )
    return problems


def _entry_problems(
    index: int, entry: tuple[int, int, int], total_sms: int | None, cc: tuple[int, int] | None
) -> list[Problem]:
    where = f"manual_divisions[{index}]"
    prefill, decode, threshold = entry
    problems: list[Problem] = []
    for name, value in (("prefill_sm", prefill), ("decode_sm", decode)):
        if value <= 0:
            problems.append(
                Problem(
                    where,
                    f"{name} is {value}, must be > 0; SGLang refuses it ({SGLANG_RELEASE} when sgl-kernel "
                    f"creates the streams: 'SM counts must be positive'; {SGLANG_UNRELEASED} at load, except "
                    "a decode_sm of 0 with overlap_decode_full_sm: true)",
                    "both",
                )
            )
    if threshold < 0:
        problems.append(
            Problem(
                where, f"decode_bs_threshold is {threshold}, must be >= 0; {SGLANG_UNRELEASED} refuses it "
                f"({SGLANG_RELEASE} runs it: every batch reaches it)", "new"
            )
        )
    if total_sms is not None and prefill > 0 and decode > 0 and prefill + decode != total_sms:
        total = prefill + decode
        if total > total_sms:
            problems.append(
                Problem(
                    where,
                    f"prefill_sm + decode_sm = {total} exceeds the device's {total_sms} SMs; SGLang fails at "
                    "start-up (sgl-kernel: 'Not enough SMs available'): make them add up to "
                    f"{total_sms}",
                    "both",
                )
            )
        else:
            problems.append(
                Problem(
                    where,
                    f"prefill_sm + decode_sm = {total}, not the device's {total_sms} SMs; "
                    f"{SGLANG_UNRELEASED} refuses it at start-up ({SGLANG_RELEASE} leaves "
                    f"{total_sms - total} SMs idle): make them add up to {total_sms}",
                    "new",
                )
            )
    if cc is not None:
        problem = _granularity_problem(index, entry, total_sms, cc)
        if problem is not None:
            problems.append(problem)
    return problems


def stream_group_count(config: PdmuxConfig, total_sms: int | None = None,
                       cc: tuple[int, int] | None = None) -> int:
    """The stream groups SGLang builds for ``config``: entries + 2 with manual_divisions; without, the
    automatic split's count where the device is known and the split works (78 SMs on Hopper: 5), else
    ``sm_group_num``. SGLang 0.5.23 indexes its ``--sm-group-num`` decode attention backends by group
    (``attention_backend_setup.py``, ``ModelRunner.update_decode_attn_backend``)."""
    if config.manual_divisions:
        return len(config.manual_divisions) + 2
    if total_sms is not None and cc is not None and config.sm_group_num >= 3:
        try:
            return len(split_levels.stream_groups(total_sms, cc[0], config.sm_group_num, cc[1]))
        except InputError:
            pass
    return config.sm_group_num


def _automatic_split_problems(
    config: PdmuxConfig, total_sms: int | None, cc: tuple[int, int] | None
) -> list[Problem]:
    """Without manual_divisions SGLang splits the SMs itself; say where that fails at start-up."""
    if cc is None or config.sm_group_num < 3:
        return []
    major, minor = cc
    if major not in split_levels.SGLANG_SM_CONSTRAINTS:
        return [
            Problem(
                "manual_divisions",
                f"is empty, so SGLang splits the SMs itself and raises 'Unsupported compute capability: "
                f"{major}.{minor}' at start-up (issue #32933); list the levels in manual_divisions "
                "(pdmux gen-config writes them)",
                "both",
            )
        ]
    if total_sms is None:
        return []
    try:
        split_levels.stream_groups(total_sms, major, config.sm_group_num, minor)
    except InputError as exc:
        return [Problem("manual_divisions", f"is empty, and SGLang's automatic split fails: {exc}", "both")]
    return []


# --------------------------------------------------------------------------------------------
# Writing


def dump_config(config: PdmuxConfig) -> str:
    """SGLang's YAML for ``config``, deterministic and canonical.

    A constant comment block (:data:`HEADER`), then ``sm_group_num``, ``manual_divisions`` (each
    entry a flow list ``[112, 20, 1]`` on its own line, or ``[]``), ``split_forward_token_budget``,
    ``decode_bs_divisor``, then ``max_split_forward_layers`` and ``overlap_decode_full_sm`` only
    when set. ``parse_config(dump_config(c))[0] == c`` for any config of well-typed values, and
    text this function wrote is written back unchanged after parsing.
    """
    lines = [f"sm_group_num: {_int_text(config.sm_group_num)}"]
    if config.manual_divisions:
        lines.append("manual_divisions:")
        lines.extend(f"  - [{', '.join(_int_text(v) for v in entry)}]" for entry in config.manual_divisions)
    else:
        lines.append("manual_divisions: []")
    lines.append(f"split_forward_token_budget: {_int_text(config.split_forward_token_budget)}")
    lines.append(f"decode_bs_divisor: {_int_text(config.decode_bs_divisor)}")
    if config.max_split_forward_layers is not None:
        lines.append(f"max_split_forward_layers: {_int_text(config.max_split_forward_layers)}")
    if config.overlap_decode_full_sm is not None:
        lines.append(f"overlap_decode_full_sm: {'true' if config.overlap_decode_full_sm else 'false'}")
    return HEADER + "\n".join(lines) + "\n"


def _int_text(value: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"pdmux config values must be ints, got {value!r}")
    return str(value)


def default_thresholds(levels: int,
                       decode_bs_divisor: int = split_levels.DEFAULT_DECODE_BS_DIVISOR) -> list[int]:
    """Decode-batch thresholds that make manual_divisions reproduce SGLang's linear rule.

    Level ``i`` (1-based, of ``levels``) is first chosen by the linear rule
    ``max(1, min(L, decode_bs * L // divisor))`` at decode batch ``ceil(i * divisor / L)``; level 1
    gets 0 instead, so no batch is below every threshold (SGLang 0.5.23 would crash there).
    H100 defaults (6 levels, divisor 36): ``[0, 12, 18, 24, 30, 36]``. The thresholds strictly
    increase (as unreleased SGLang requires) whenever ``decode_bs_divisor >= levels``; below that
    the linear rule skips levels and some thresholds repeat.

    Raises :class:`InputError` for ``levels < 1`` or ``decode_bs_divisor < 1``.
    """
    if isinstance(levels, bool) or levels < 1:
        raise InputError(f"number of split levels must be >= 1, got {levels}")
    if isinstance(decode_bs_divisor, bool) or decode_bs_divisor < 1:
        raise InputError(f"decode_bs_divisor must be >= 1, got {decode_bs_divisor}")
    return [0] + [-(-i * decode_bs_divisor // levels) for i in range(2, levels + 1)]


def config_from_plan(
    plan: split_levels.GroupPlan,
    sm_group_num: int = split_levels.DEFAULT_SM_GROUP_NUM,
    split_forward_token_budget: int = split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET,
    decode_bs_divisor: int = split_levels.DEFAULT_DECODE_BS_DIVISOR,
    manual: bool = False,
) -> PdmuxConfig:
    """The config that deploys ``plan`` (from :func:`policy.plan_groups`).

    Writes manual_divisions when ``manual`` is true, when the plan already came from manual
    divisions, or when it is ``"cuda-granularity"`` (Blackwell: SGLang's automatic split raises
    there). Their thresholds are the plan's own, or :func:`default_thresholds`, which reproduce
    the linear rule. With manual_divisions, ``sm_group_num`` becomes ``levels + 2`` (SGLang needs
    exactly ``sm_group_num - 2`` entries; a device with few SMs has fewer levels than asked);
    otherwise the given ``sm_group_num`` is kept and SGLang splits the SMs itself.

    Raises :class:`InputError` when automatic levels cannot become strictly increasing thresholds
    (``decode_bs_divisor`` below the number of levels: the linear rule skips levels there), or
    for ``decode_bs_divisor < 1``.
    """
    levels = plan.groups[1:-1]
    if not (manual or plan.source != "sglang-auto"):
        return PdmuxConfig(
            sm_group_num=sm_group_num,
            split_forward_token_budget=split_forward_token_budget,
            decode_bs_divisor=decode_bs_divisor,
        )
    if plan.thresholds is not None:
        thresholds = list(plan.thresholds)
    else:
        thresholds = default_thresholds(len(levels), decode_bs_divisor)
        if any(later <= earlier for earlier, later in itertools.pairwise(thresholds)):
            raise InputError(
                f"decode_bs_divisor {decode_bs_divisor} is below the {len(levels)} split levels: the linear "
                "rule skips levels there, which manual_divisions thresholds (strictly increasing) cannot "
                f"express; use decode_bs_divisor >= {len(levels)}"
            )
    divisions = tuple(
        (split.prefill_sms, split.decode_sms, threshold) for split, threshold in zip(levels, thresholds)
    )
    return PdmuxConfig(
        sm_group_num=len(divisions) + 2,
        manual_divisions=divisions,
        split_forward_token_budget=split_forward_token_budget,
        decode_bs_divisor=decode_bs_divisor,
    )


# --------------------------------------------------------------------------------------------
# CLI helpers


def parse_divisions(text: str) -> tuple[tuple[int, int, int], ...]:
    """The ``--divisions`` option: ``"112:20:0,104:28:5"`` (``/`` also separates numbers).

    Each comma-separated entry is ``PREFILL_SMS:DECODE_SMS:DECODE_BS_THRESHOLD`` (integers; values
    are range-checked later by :func:`validate`). Raises :class:`InputError` (one line) for an empty
    list, an empty entry, an entry without exactly three numbers, or a non-integer.
    """
    if not text or not text.strip():
        raise InputError(
            "{flag.divisions} is empty; give PREFILL:DECODE:THRESHOLD entries, e.g. 112:20:0,104:28:5",
            values={},
        )
    entries: list[tuple[int, int, int]] = []
    for position, item in enumerate(text.split(","), start=1):
        item = item.strip()
        if not item:
            raise InputError(
                "{flag.divisions} entry {position} is empty in {text!r}",
                values={"position": position, "text": text},
            )
        parts = [part.strip() for part in re.split(r"[:/]", item)]
        if len(parts) != 3:
            raise InputError(
                "{flag.divisions} entry {position} {item!r} has {count} number(s), needs 3: "
                "PREFILL_SMS:DECODE_SMS:DECODE_BS_THRESHOLD",
                values={"position": position, "item": item, "count": len(parts)},
            )
        if not all(re.fullmatch(r"[+-]?[0-9]+", part) for part in parts):  # ASCII: \d also takes '٣'
            raise InputError(
                "{flag.divisions} entry {position} {item!r} is not three integers (e.g. 112:20:0)",
                values={"position": position, "item": item},
            )
        entries.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return tuple(entries)


def launch_flags(config_path: str, sm_group_num: int, tp: int = 1) -> list[str]:
    """The SGLang server flags that deploy a pdmux config, one argument each (unquoted).

    ``--sm-group-num`` must equal the YAML's sm_group_num (unreleased SGLang; 0.5.23 crashes with
    fewer); SGLang 0.5.23 requires ``--chunked-prefill-size -1`` given explicitly and the overlap
    schedule disabled. ``tp > 1`` adds ``--tp-size N`` (every rank loads the same YAML and builds the
    same stream groups on its own GPU). A relative path starting with ``-`` is written ``./-...``:
    SGLang's argparse would read ``--weird.yaml`` as an option, not as the flag's value.
    """
    path = str(config_path)
    if path.startswith("-"):
        path = "./" + path
    flags = [
        "--enable-pdmux",
        "--pdmux-config-path",
        path,
        SGLANG_SM_GROUP_NUM_FLAG,
        str(sm_group_num),
        "--chunked-prefill-size",
        "-1",
        "--disable-overlap-schedule",
    ]
    if tp > 1:
        flags += ["--tp-size", str(tp)]
    return flags


def launch_command(config_path: str, sm_group_num: int, model: str = "MODEL", tp: int = 1,
                   env: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> str:
    """The whole SGLang launch line for a shell: :func:`launch_flags` after ``python -m
    sglang.launch_server --model-path MODEL``, each argument shell-quoted (``shlex.quote``), so a
    config path with spaces or quotes pastes as one argument. ``env``: ``NAME=value`` assignments put
    before the command (what the SGLang revision needs for pdmux with TP > 1,
    :attr:`pdmux_cli.sglang.revisions.Revision.tp_launch`). ``extra``: more server arguments after them
    (speculative decoding's)."""
    import shlex

    line = shlex.join(["python", "-m", "sglang.launch_server", "--model-path", model,
                       *launch_flags(config_path, sm_group_num, tp), *extra])
    return " ".join([*(shlex.quote(e) for e in env), line])
