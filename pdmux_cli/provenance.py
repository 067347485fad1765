"""What produced a JSON result: pdmux's version, the SGLang rule set, the cost model's sources.

Every command's ``--json`` carries :func:`provenance` under one top-level key, ``"pdmux"``, so a result
kept in a file says which pdmux, which SGLang code (``--sglang``) and which fitted or measured constants
gave its numbers. Pure: no I/O beyond reading the package's own version string.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import __version__

#: The top-level JSON key that holds :func:`provenance`.
PROVENANCE_KEY = "pdmux"


def cost_model_provenance(name: str, *, efficiency: str | None = None, calibration: str | None = None,
                          serving: str | None = None, **extra: Any) -> dict[str, Any]:
    """The sources of a cost model's constants, as JSON-ready data.

    Args:
        name: the cost model (``"roofline"``, ``"chapter"``, ...).
        efficiency: the efficiency profile its fitted constants come from (a ``profiles/efficiency/`` file
            name, e.g. ``"h100-sxm.yaml"``), or ``None`` where it reads none.
        calibration: the user's calibration file (``--calibration``), or ``None``.
        serving: the SGLang release line whose fitted serving terms it uses
        (``profiles/efficiency/serving.yaml``,
            e.g. ``"0.5"``), or ``None`` where none are charged.
        extra: further JSON-ready fields (e.g. ``s_sat``), kept as given.

    Returns:
        ``{"name", "efficiency", "calibration", "serving", **extra}``; ``None`` values kept (the key says it
        was looked for and absent).
    """
    return {"name": name, "efficiency": efficiency, "calibration": calibration, "serving": serving, **extra}


def provenance(*, sglang: str | None, cost_model: Mapping[str, Any] | str | None = None) -> dict[str, Any]:
    """The ``"pdmux"`` block of a command's JSON.

    Args:
        sglang: the SGLang rule set the command followed (``--sglang``: ``"0.5.23"``, ``"standard@b875545"``,
        ...),
            or ``None`` for a command that applies no SGLang rule.
        cost_model: :func:`cost_model_provenance`'s dict, a bare cost model name, or ``None`` for a command
        that
            times nothing (``splits``, ``check-config``).

    Returns:
        ``{"version": pdmux's version, "sglang": sglang, "cost_model": cost_model}`` (a copy of a mapping).
    """
    if isinstance(cost_model, Mapping):
        cost_model = dict(cost_model)
    return {"version": __version__, "sglang": sglang, "cost_model": cost_model}


def with_provenance(data: Mapping[str, Any], block: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with ``block`` under :data:`PROVENANCE_KEY`, added last (the other keys keep their order).

    Raises:
        ValueError: ``data`` already holds :data:`PROVENANCE_KEY` (a result's own key would be overwritten).
    """
    if PROVENANCE_KEY in data:
        raise ValueError(f"result already has a {PROVENANCE_KEY!r} key")
    return {**data, PROVENANCE_KEY: dict(block)}
