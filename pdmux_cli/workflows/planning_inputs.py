"""What the planning workflows share: the device a command plans for, a ``--config`` pdmux YAML, typed values.

A request holds what the CLI's option gives (text for list options, ``"1,6,12"``) or typed values
(``(1, 6, 12)``) from the Python API; both are read here by the CLI's rules. Either way the checks here
stand between the caller and the core, so a value of the wrong type or out of range is one
:class:`~pdmux_cli.util.errors.InputError`, never a traceback. The checks take the parameter by its Python
name (``decode_bs``, the request field and API keyword); the CLI's message names its flag (``--decode-bs``),
the API's the keyword (:func:`pdmux_cli.messages.api_error_text`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..util.errors import Finding, InputError, short_repr
from .values import param_error

class Device:
    """The device a command plans for: a GPU profile (``gpu``: :class:`pdmux_cli.catalog.hardware.Gpu`), or
    just an
    SM count and compute capability (``--sms``, ``--cc``; ``gpu`` is then ``None``).

    ``name``: the profile's name, or ``"custom GPU"``. ``sm_count``: SMs. ``cc``: ``(major, minor)``. A plain
    class, not a dataclass: it is built on the start-up path of ``pdmux splits`` (a dataclass costs ~0.5 ms to
    define).
    """

    __slots__ = ("cc", "gpu", "name", "sm_count")

    def __init__(self, name: str, sm_count: int, cc: tuple[int, int], gpu: Any = None) -> None:
        self.name, self.sm_count, self.cc, self.gpu = name, sm_count, cc, gpu

    @property
    def cc_text(self) -> str:
        """``"9.0"``."""
        return f"{self.cc[0]}.{self.cc[1]}"


def resolve_device(gpu: str | None, sms: int | None, cc: str | None, default: str = "h100") -> Device:
    """``--gpu`` or ``--sms N --cc X.Y`` (both needed) -> :class:`Device`.

    ``gpu``: an alias, a reported name or a GPU profile file
    (:func:`pdmux_cli.catalog.hardware.find_gpu_or_file`);
    ``None``: ``default``. ``cc``: ``"MAJOR.MINOR"``, a known NVIDIA capability
    (:data:`pdmux_cli.sglang.split_levels.KNOWN_COMPUTE_CAPABILITIES`). Raises :class:`InputError` for both
    forms at once,
    one of ``sms``/``cc`` alone, an SM count outside 1-:data:`pdmux_cli.catalog.hardware.MAX_SMS`, an empty
    or unknown
    GPU name, or an unknown capability.
    """
    from ..catalog.hardware import MAX_SMS, find_gpu_or_file

    if sms is not None or cc is not None:
        if gpu is not None:
            raise InputError(
                "give either {flag.gpu} or {flag.sms} with {flag.cc}, not both",
                values={},
            )
        if sms is None or cc is None:
            raise InputError(
                "{flag.sms} and {flag.cc} go together, e.g. {flag.sms} 132 {flag.cc} 9.0",
                values={},
            )
        sms = check_int(sms, "sms")
        if not 0 < sms <= MAX_SMS:
            raise InputError(
                "{flag.sms} must be a number of SMs from 1 to {MAX_SMS}, got {sms}",
                values={"MAX_SMS": MAX_SMS, "sms": sms},
            )
        from ..sglang.split_levels import check_known_capability, parse_compute_capability

        return Device("custom GPU", sms, check_known_capability(parse_compute_capability(cc)))
    if gpu is not None and not str(gpu).strip():
        raise InputError(
            "{flag.gpu} is empty: give a GPU name such as h100 (pdmux splits {flag.all_gpus} lists them)",
            values={},
        )
    profile = find_gpu_or_file(str(gpu) if gpu is not None else default)
    return Device(profile.name, profile.require_sm_count(), profile.compute_capability, profile)


def load_pdmux_yaml(
    path: Path, device: Device | None = None, cli_sm_group_num: int | None = None, sglang: str | None = None
) -> tuple[Any, list[Finding]]:
    """A pdmux YAML for ``--config`` -> ``(PdmuxConfig, notes)``.

    Structural problems, and (with ``device``) anything SGLang refuses at load or start-up (rules "both" and
    "new") are :class:`InputError`; the first is reported, check-config lists all. Warnings (SGLang runs it
    as meant) become notes. With ``device``, manual_divisions entries off the CUDA granularity are replaced by
    the split the driver really makes (100/32 -> 104/28 on H100), with a note saying so
    (:func:`pdmux_cli.sglang.pdmux_config.driver_divisions`). ``sglang``: a revision other than 0.5.23 is
    judged by
    its own loader (:func:`pdmux_cli.sglang.revision_rules.planning_refusal`).
    """
    from ..sglang.pdmux_config import driver_divisions, is_error, load_config, validate
    from ..sglang.revisions import DEFAULT_REVISION

    config, problems = load_config(path)
    if sglang is not None and sglang != DEFAULT_REVISION and device is not None:
        from ..sglang.revision_rules import planning_refusal

        refusal = planning_refusal(config, problems, sglang, device.sm_count, device.cc)
        if refusal:
            raise InputError(f"{path}: {refusal}")
        notes = _warnings(path, problems)
        config, rounded = driver_divisions(config, device.sm_count, device.cc)
        return config, notes + _rounded(path, rounded)
    notes = _warnings(path, problems)
    problems = [p for p in problems if is_error(p)]
    if device is not None:
        problems = problems + [
            p
            for p in validate(config, device.sm_count, device.cc, cli_sm_group_num)
            if p.rule in ("both", "new")
        ]
    if problems:
        first = problems[0]
        raise InputError(
            f"{path}: {first.where}: {first.message} (pdmux check-config {path} lists every problem)"
        )
    if device is not None:
        config, rounded = driver_divisions(config, device.sm_count, device.cc)
        notes.extend(_rounded(path, rounded))
    return config, notes


def _warnings(path: Path, problems: Any) -> list[Finding]:
    """``planning.config_warning`` for each problem of a pdmux YAML SGLang runs as meant anyway (``path``,
    the problem's ``where`` and ``message``)."""
    from ..sglang.pdmux_config import is_error

    return [Finding("planning.config_warning", {"path": str(path), "where": p.where, "message": p.message},
                    "config") for p in problems if not is_error(p)]


def _rounded(path: Path, rounded: list[str]) -> list[Finding]:
    """``planning.config_rounded`` for each manual_divisions entry the CUDA driver rounds (``path``, and the
    rounding's note as ``message``)."""
    return [Finding("planning.config_rounded", {"path": str(path), "message": note}, "config")
            for note in rounded]


def check_int(value: Any, param: str | None = None, *, where: str | None = None) -> int:
    """``value`` when it is an ``int`` (not a ``bool``); :class:`InputError` about ``param`` otherwise (a
    caller of the Python API passing ``"8"`` or ``8.0``). ``param``: the parameter by its Python name
    (``"decode_bs"``), which the CLI names by its flag and the API by its keyword; ``where``: a text that is
    no parameter, named instead (:func:`~.values.param_error`)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise param_error("{param_flag} must be an integer, got {value}", param, where,
                          value=short_repr(value))
    return value


def check_number(value: Any, param: str | None = None, *, where: str | None = None) -> float:
    """``value`` when it is an ``int`` or ``float`` (not a ``bool``); :class:`InputError` about ``param``
    (or ``where``: as :func:`check_int`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise param_error("{param_flag} must be a number, got {value}", param, where, value=short_repr(value))
    return value


def int_tuple(values: Any, param: str | None = None, minimum: int = 1, *,
              where: str | None = None) -> tuple[int, ...]:
    """Option text (``"1,6,12"``, :func:`~.values.parse_int_list`) or a sequence of integers >=
    ``minimum`` -> a tuple, repeats kept once in order. Raises :class:`InputError` about ``param`` (or
    ``where``: as :func:`check_int`) for an empty list or item, a value that is not an integer, or one below
    ``minimum``."""
    if isinstance(values, str):
        from .values import parse_int_list

        return tuple(parse_int_list(values, param, minimum=minimum, unique=True, where=where))
    if isinstance(values, bytes) or not isinstance(values, Sequence):
        raise param_error("{param_flag} takes a list of integers, e.g. (1, 6, 12), got {got}", param,
                          where, got=short_repr(values))
    if not values:
        raise param_error("{param_flag}: give at least one value, e.g. (1, 6, 12)", param, where)
    out = []
    for value in values:
        value = check_int(value, param, where=where)
        if value < minimum:
            raise param_error("{param_flag}: {value} must be >= {minimum}", param, where, value=value,
                              minimum=minimum)
        out.append(value)
    return tuple(dict.fromkeys(out))


def float_tuple(values: Any, param: str | None = None, *, where: str | None = None) -> tuple[float, ...]:
    """Option text (``"44,66,88"``, :func:`~.values.parse_float_list`) or a sequence of finite
    numbers > 0 -> a tuple of floats, repeats kept once in order (``s_sat``). Raises :class:`InputError`
    about ``param`` (or ``where``: as :func:`check_int`) for an empty list or item or a bad value."""
    import math

    if isinstance(values, str):
        from .values import parse_float_list

        return tuple(parse_float_list(values, param, unique=True, where=where))
    if isinstance(values, bytes) or not isinstance(values, Sequence):
        raise param_error("{param_flag} takes a list of numbers, e.g. (44, 66, 88), got {got}", param,
                          where, got=short_repr(values))
    if not values:
        raise param_error("{param_flag}: give at least one value, e.g. (44, 66, 88)", param, where)
    out = []
    for value in values:
        value = check_number(value, param, where=where)
        if not (value > 0 and math.isfinite(value)):
            raise param_error("{param_flag}: {value} must be a finite number > 0", param, where,
                              value=short_repr(value))
        out.append(float(value))
    return tuple(dict.fromkeys(out))


def check_positive_knobs(**knobs: int | None) -> None:
    """SGLang's knobs ``sm_group_num``, ``decode_bs_divisor``, ``token_budget`` (given as parameter = value,
    ``None`` for not given) must be integers > 0; :class:`InputError` about the first that is not, by its
    parameter (the CLI prints its flag, ``--sm-group-num``)."""
    for name, value in knobs.items():
        if value is not None and check_int(value, name) <= 0:
            raise param_error("{param_flag} must be > 0, got {value}", name, value=value)
