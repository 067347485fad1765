"""Numbers typed by users in option values (``--levels 112/20``, ``--gemm-shape``, ``--cc 9.0``, lists
such as ``--decode-bs 1,6,12``).

``str.isdigit`` accepts superscripts (``'²'``, which ``int`` then rejects with a ValueError) and
other scripts' digits (``'٣'``, which ``int`` reads as 3); ``int`` itself accepts ``'1_000'``
and refuses more than 4300 digits with a ValueError. Option values take plain ASCII digits of
bounded length instead.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .errors import InputError, short_repr

#: Most digits an integer option value may have (a trillion is far past any SM count or size).
MAX_DIGITS = 12

_PLAIN_INT = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}")


def plain_int(text: str) -> int | None:
    """``"132"`` -> ``132``; ``None`` for anything but 1 to :data:`MAX_DIGITS` ASCII digits
    (surrounding spaces allowed; no sign, no ``_``, no other scripts' digits)."""
    text = str(text).strip()
    return int(text) if _PLAIN_INT.fullmatch(text) else None


def finite_float(value: object) -> float | None:
    """``value`` (an int, a float, or numeric text such as ``"3.35e12"``, which PyYAML leaves as
    text) as a finite float; ``None`` for anything else: booleans, other text, NaN, infinities,
    and integers past float's range (``float(10**400)`` raises OverflowError)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.replace("_", ""))
        except ValueError:
            return None
    if not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def list_items(text: str, what: str, example: str) -> list[str]:
    """The comma-separated items of an option value, stripped; :class:`InputError` for an empty value
    or an empty item (``1,,2``, ``,512``, ``512,``), which would otherwise drop out unseen."""
    items = [t.strip() for t in str(text).split(",")]
    if not any(items):
        raise InputError(f"{what}: give a comma-separated list, e.g. {example}")
    for position, item in enumerate(items, start=1):
        if not item:
            raise InputError(f"{what}: item {position} of {short_repr(str(text))} is empty (e.g. {example})")
    return items


def unique_values(values: list[Any]) -> list[Any]:
    """``values`` with repeats kept once, in order."""
    return list(dict.fromkeys(values))


#: An integer as typed in a list option: ASCII digits (``int`` also reads ``'٣'`` and ``'1_000'``; the
#: scalar options' parser does not read ``'٣'``, and neither does this).
_ASCII_INT = re.compile(r"[+-]?[0-9]+")
#: A decimal number as typed: ASCII digits, a point, an exponent.
_ASCII_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def parse_int_list(text: str, what: str, minimum: int = 1, unique: bool = False) -> list[int]:
    """``"1,6,12"`` -> ``[1, 6, 12]``; :class:`InputError` naming ``what`` for an empty list or item,
    a non-integer (ASCII digits only, as every integer option), a value below ``minimum``, or one of more
    than 18 digits. ``unique``: repeated values kept once, in order."""
    values = []
    for item in list_items(text, what, "1,6,12"):
        if not _ASCII_INT.fullmatch(item):
            raise InputError(f"{what}: {short_repr(item)} is not an integer of ASCII digits (e.g. 1,6,12)")
        if len(item.lstrip("+-")) > 100:  # int() refuses past 4300 digits; no size is a googol
            raise InputError(f"{what}: {short_repr(item)} has more than 100 digits")
        value = int(item)
        if value < minimum:
            raise InputError(f"{what}: {value} must be >= {minimum}")
        values.append(value)
    return unique_values(values) if unique else values


def parse_float_list(text: str, what: str, unique: bool = False) -> list[float]:
    """``"44,66,88"`` -> ``[44.0, 66.0, 88.0]``; every value must be a finite number > 0 in ASCII digits;
    an empty list or item is refused. ``unique``: repeated values kept once, in order."""
    values = []
    for item in list_items(text, what, "44,66,88"):
        if not _ASCII_FLOAT.fullmatch(item):
            raise InputError(f"{what}: {short_repr(item)} is not a number of ASCII digits (e.g. 44,66,88)")
        value = float(item)
        if not (value > 0 and math.isfinite(value)):
            raise InputError(f"{what}: {short_repr(item)} must be a finite number > 0")
        values.append(value)
    return unique_values(values) if unique else values
