"""Integers typed by users in option values (``--levels 112/20``, ``--gemm-shape``, ``--cc 9.0``).

``str.isdigit`` accepts superscripts (``'²'``, which ``int`` then rejects with a ValueError) and
other scripts' digits (``'٣'``, which ``int`` reads as 3); ``int`` itself accepts ``'1_000'``
and refuses more than 4300 digits with a ValueError. Option values take plain ASCII digits of
bounded length instead.
"""

from __future__ import annotations

import math
import re

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
