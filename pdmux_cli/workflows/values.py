"""Option values as the commands take them: comma-separated lists, JSON-ready data (each field's type and
range: :mod:`.fields`).

Pure (no I/O). Every refusal is one :class:`~pdmux_cli.util.errors.InputError` line naming the parameter
(its Python name, ``decode_bs``: the CLI prints its flag, ``--decode-bs``, the Python API its keyword) and the
value (:func:`param_error`); :mod:`pdmux_cli.cli.common` re-exports the list parsers for the CLI.
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


def param_error(template: str, param: str | None, where: str | None = None, **values: Any) -> InputError:
    """An :class:`InputError` about the value of a parameter: ``template``'s ``{param_flag}`` names
    ``param`` (its Python name, ``"decode_bs"``; a flag, ``"--decode-bs"``, is read as its parameter), which
    the CLI prints as its flag and the Python API as its keyword; ``values`` fill the template's other
    fields (user text belongs there, never in ``template``). ``where``: a text that is no parameter (a YAML
    field's path, ``file:line``, ``"KV bytes per element"``) named in ``{param_flag}``'s place as written,
    ``param`` (if any) still the error's parameter. Raises :class:`TypeError` when neither is given (a
    caller's bug)."""
    if where is None:
        if not param:
            raise TypeError("param_error needs the parameter (param) or a where text")
        return InputError(template, param=_param(param), values=values)
    return InputError(template.replace("{param_flag}", "{where}"), param=_param(param) if param else None,
                      values={**values, "where": where})


def _list_items(text: str, param: str | None, where: str | None, example: str) -> list[str]:
    """The comma-separated items of an option value, stripped; :class:`InputError` for an empty value
    or an empty item (``1,,2``, ``,512``, ``512,``), which would otherwise drop out unseen."""
    items = [t.strip() for t in str(text).split(",")]
    if not any(items):
        raise param_error("{param_flag}: give a comma-separated list, e.g. {example}", param, where,
                          example=example)
    for position, item in enumerate(items, start=1):
        if not item:
            raise param_error("{param_flag}: item {position} of {text} is empty (e.g. {example})", param,
                              where, position=position, text=short_repr(str(text)), example=example)
    return items


def _unique(values: list[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def parse_int_list(text: str, param: str | None = None, minimum: int = 1, unique: bool = False, *,
                   where: str | None = None) -> list[int]:
    """``"1,6,12"`` -> ``[1, 6, 12]``; :class:`InputError` about ``param`` (its Python name, ``"decode_bs"``;
    ``where``: a text that is no parameter, :func:`param_error`) for an empty list or item, a non-integer
    (ASCII digits only, as every integer option), a value below ``minimum``, or one of more than 100 digits.
    ``unique``: repeated values kept once, in order."""
    values = []
    for item in _list_items(text, param, where, "1,6,12"):
        if not _ASCII_INT.fullmatch(item):
            raise param_error("{param_flag}: {item} is not an integer of ASCII digits (e.g. 1,6,12)", param,
                              where, item=short_repr(item))
        if len(item.lstrip("+-")) > 100:  # int() refuses past 4300 digits; no size is a googol
            raise param_error("{param_flag}: {item} has more than 100 digits", param, where,
                              item=short_repr(item))
        value = int(item)
        if value < minimum:
            raise param_error("{param_flag}: {value} must be >= {minimum}", param, where, value=value,
                              minimum=minimum)
        values.append(value)
    return _unique(values) if unique else values


def parse_float_list(text: str, param: str | None = None, unique: bool = False, *,
                     where: str | None = None) -> list[float]:
    """``"44,66,88"`` -> ``[44.0, 66.0, 88.0]``; every value must be a finite number > 0 in ASCII digits;
    an empty list or item is refused (:class:`InputError` about ``param``, or ``where``: as
    :func:`parse_int_list`). ``unique``: repeated values kept once, in order."""
    values = []
    for item in _list_items(text, param, where, "44,66,88"):
        if not _ASCII_FLOAT.fullmatch(item):
            raise param_error("{param_flag}: {item} is not a number of ASCII digits (e.g. 44,66,88)", param,
                              where, item=short_repr(item))
        value = float(item)
        if not (value > 0 and math.isfinite(value)):
            raise param_error("{param_flag}: {item} must be a finite number > 0", param, where,
                              item=short_repr(item))
        values.append(value)
    return _unique(values) if unique else values


def parse_names(text: str, param: str | None, known: Sequence[str], *, where: str | None = None) -> list[str]:
    """``"pdmux, chunked"`` -> ``["pdmux", "chunked"]`` (lower-cased, repeats kept once); :class:`InputError`
    about ``param`` (or ``where``: as :func:`parse_int_list`) for an empty list or item (``pdmux,,chunked``)
    or a name not in ``known``, listing them."""
    names = _unique([item.lower() for item in _list_items(text, param, where, ",".join(known[:2]))])
    unknown = [n for n in names if n not in known]
    if unknown:
        shown = ", ".join(n if len(n) <= 40 else short_repr(n) for n in unknown[:5])
        raise param_error("{param_flag}: unknown {shown}; use {known}", param, where, shown=shown,
                          known=", ".join(known))
    return names


def as_text_list(value: str | Sequence[Any] | None) -> str | None:
    """A list option as the CLI spells it: ``"512,2048"`` stays, ``[512, 2048]`` becomes ``"512,2048"``
    (the Python API takes either), ``None`` stays ``None``."""
    if value is None or isinstance(value, str):
        return value
    return ",".join(str(v) for v in value)


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
