"""NVIDIA compute capabilities: parsing ``MAJOR.MINOR`` and the capabilities pdmux knows.

A fact of the GPU, read by the GPU profiles (:mod:`.hardware`), ``--cc`` and SGLang's split rules
(:mod:`pdmux_cli.sglang.split_levels`, which re-exports these names). Pure.
"""

from __future__ import annotations

from ..util.errors import InputError, short_repr
from ..util.numbers import plain_int

#: Compute capabilities of NVIDIA GPUs with green contexts (6.0 and later), from the CUDA
#: programming guide's table of compute capabilities: Pascal 6.0/6.1/6.2, Volta 7.0/7.2, Turing 7.5,
#: Ampere 8.0/8.6/8.7, Ada 8.9, Hopper 9.0, Blackwell 10.0/10.3/12.0/12.1, Thor 10.1 (11.0 from CUDA 13).
#: ``--cc`` takes only these: pdmux's rules for an unknown capability would be guesses.
KNOWN_COMPUTE_CAPABILITIES: tuple[tuple[int, int], ...] = (
    (6, 0), (6, 1), (6, 2), (7, 0), (7, 2), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0),
    (10, 0), (10, 1), (10, 3), (11, 0), (12, 0), (12, 1),
)


def parse_compute_capability(text: str | float | tuple[int, int]) -> tuple[int, int]:
    """``"9.0"`` / ``9.0`` / ``"10.3"`` / ``(9, 0)`` -> ``(major, minor)``.

    Raises :class:`InputError` for anything that is not ``MAJOR.MINOR`` with small non-negative ints.
    """
    if isinstance(text, tuple):
        major, minor = text
    else:
        parts = [plain_int(p) if p.strip() == p else None for p in str(text).strip().split(".")]
        if len(parts) not in (1, 2) or None in parts:
            raise InputError(f"compute capability {short_repr(text)} is not of the form MAJOR.MINOR (e.g. "
                             "9.0)")
        major, minor = parts[0], parts[1] if len(parts) == 2 else 0
    if not (0 < major < 100 and 0 <= minor < 10):
        raise InputError(f"compute capability {text!r} is out of range (e.g. 8.0, 9.0, 10.0)")
    return major, minor


def check_known_capability(cc: tuple[int, int]) -> tuple[int, int]:
    """``cc`` when it is one of :data:`KNOWN_COMPUTE_CAPABILITIES` or below 6.0 (those are refused
    later, with "no green contexts"); :class:`InputError` naming the known ones otherwise."""
    major, minor = cc
    if major < 6 or (major, minor) in KNOWN_COMPUTE_CAPABILITIES:
        return cc
    known = ", ".join(f"{a}.{b}" for a, b in KNOWN_COMPUTE_CAPABILITIES)
    raise InputError(f"compute capability {major}.{minor} is not a known NVIDIA GPU's; pdmux knows {known} "
                     "(and refuses below 6.0: no green contexts)")
