"""Option values as the commands take them: comma-separated lists, numbers with a bound, JSON-ready data.

Pure (no I/O). Every refusal is one :class:`~pdmux_cli.util.errors.InputError` line naming the option
(``what``) and the value; :mod:`pdmux_cli.cli.common` re-exports the list parsers for the CLI.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from ..util.errors import InputError, short_repr

#: An integer as typed in a list option: ASCII digits (``int`` also reads ``'٣'`` and ``'1_000'``; the
#: scalar options' parser does not read ``'٣'``, and neither does this).
_ASCII_INT = re.compile(r"[+-]?[0-9]+")
#: A decimal number as typed: ASCII digits, a point, an exponent.
_ASCII_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _list_items(text: str, what: str, example: str) -> list[str]:
    """The comma-separated items of an option value, stripped; :class:`InputError` for an empty value
    or an empty item (``1,,2``, ``,512``, ``512,``), which would otherwise drop out unseen."""
    items = [t.strip() for t in str(text).split(",")]
    if not any(items):
        raise InputError(f"{what}: give a comma-separated list, e.g. {example}")
    for position, item in enumerate(items, start=1):
        if not item:
            raise InputError(f"{what}: item {position} of {short_repr(str(text))} is empty (e.g. {example})")
    return items


def _unique(values: list[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def parse_int_list(text: str, what: str, minimum: int = 1, unique: bool = False) -> list[int]:
    """``"1,6,12"`` -> ``[1, 6, 12]``; :class:`InputError` naming ``what`` for an empty list or item,
    a non-integer (ASCII digits only, as every integer option), a value below ``minimum``, or one of more
    than 100 digits. ``unique``: repeated values kept once, in order."""
    values = []
    for item in _list_items(text, what, "1,6,12"):
        if not _ASCII_INT.fullmatch(item):
            raise InputError(f"{what}: {short_repr(item)} is not an integer of ASCII digits (e.g. 1,6,12)")
        if len(item.lstrip("+-")) > 100:  # int() refuses past 4300 digits; no size is a googol
            raise InputError(f"{what}: {short_repr(item)} has more than 100 digits")
        value = int(item)
        if value < minimum:
            raise InputError(f"{what}: {value} must be >= {minimum}")
        values.append(value)
    return _unique(values) if unique else values


def parse_float_list(text: str, what: str, unique: bool = False) -> list[float]:
    """``"44,66,88"`` -> ``[44.0, 66.0, 88.0]``; every value must be a finite number > 0 in ASCII digits;
    an empty list or item is refused. ``unique``: repeated values kept once, in order."""
    values = []
    for item in _list_items(text, what, "44,66,88"):
        if not _ASCII_FLOAT.fullmatch(item):
            raise InputError(f"{what}: {short_repr(item)} is not a number of ASCII digits (e.g. 44,66,88)")
        value = float(item)
        if not (value > 0 and math.isfinite(value)):
            raise InputError(f"{what}: {short_repr(item)} must be a finite number > 0")
        values.append(value)
    return _unique(values) if unique else values


def parse_names(text: str, what: str, known: Sequence[str]) -> list[str]:
    """``"pdmux, chunked"`` -> ``["pdmux", "chunked"]`` (lower-cased, repeats kept once); :class:`InputError`
    for an empty list or item (``pdmux,,chunked``) or a name not in ``known``, listing them."""
    names = _unique([item.lower() for item in _list_items(text, what, ",".join(known[:2]))])
    unknown = [n for n in names if n not in known]
    if unknown:
        shown = ", ".join(n if len(n) <= 40 else short_repr(n) for n in unknown[:5])
        raise InputError(f"{what}: unknown {shown}; use {', '.join(known)}")
    return names


def as_text_list(value: str | Sequence[Any] | None) -> str | None:
    """A list option as the CLI spells it: ``"512,2048"`` stays, ``[512, 2048]`` becomes ``"512,2048"``
    (the Python API takes either), ``None`` stays ``None``."""
    if value is None or isinstance(value, str):
        return value
    return ",".join(str(v) for v in value)


def check_number(name: str, value: float | None, minimum: float = 0.0, strict: bool = True) -> None:
    """:class:`InputError` unless ``value`` (``None``: not given) is finite and ``> minimum`` (``>=`` when
    not ``strict``); ``name``: the parameter by its Python name (``"slo_ttft"``; a flag, ``"--slo-ttft"``,
    is read as its parameter), the error's ``param``, which the CLI names by its flag."""
    if value is None:
        return
    bad = not math.isfinite(value) or (value <= minimum if strict else value < minimum)
    if bad:
        raise InputError("{param_flag} must be a number {op} {minimum:g}, got {value}", param=_param(name),
                         values={"op": ">" if strict else ">=", "minimum": minimum, "value": value})


def check_at_least_one(name: str, value: int | None, what: str = "") -> None:
    """:class:`InputError` ``"{name} must be >= 1{what}, got {value}"`` for a whole number below 1; ``name``:
    the parameter by its Python name (``"workers"``, or its flag), the error's ``param``."""
    if value is not None and value < 1:
        raise InputError("{param_flag} must be >= 1{what}, got {value}", param=_param(name),
                         values={"what": what, "value": value})


def _param(name: str) -> str:
    """A parameter's Python name from itself or its flag (``"--max-concurrency"``: ``"max_concurrency"``)."""
    return name[2:].replace("-", "_") if name.startswith("--") else name


def finite(data: Any) -> Any:
    """``data`` with every NaN or infinite float replaced by ``None`` (JSON has no such numbers); dicts,
    lists and tuples copied (tuples become lists, as JSON has them)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data
