"""Integers typed by users in option values (``--levels 112/20``, ``--gemm-shape``, ``--cc 9.0``).

``str.isdigit`` accepts superscripts (``'²'``, which ``int`` then rejects with a ValueError) and
other scripts' digits (``'٣'``, which ``int`` reads as 3); ``int`` itself accepts ``'1_000'``
and refuses more than 4300 digits with a ValueError. Option values take plain ASCII digits of
bounded length instead.
"""

from __future__ import annotations

import re

#: Most digits an integer option value may have (a trillion is far past any SM count or size).
MAX_DIGITS = 12

_PLAIN_INT = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}")


def plain_int(text: str) -> int | None:
    """``"132"`` -> ``132``; ``None`` for anything but 1 to :data:`MAX_DIGITS` ASCII digits
    (surrounding spaces allowed; no sign, no ``_``, no other scripts' digits)."""
    text = str(text).strip()
    return int(text) if _PLAIN_INT.fullmatch(text) else None
