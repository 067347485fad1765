"""The SLOs a simulated run is judged against: :class:`SloOptions`, declared once.

simulate, capacity, tune and gen-config declare their ``slo_ttft`` and ``slo_itl`` from here
(:func:`.fields.declared_as`; tune's required, gen-config's without a default). Pure: dataclasses only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fields import option


@dataclass(frozen=True, kw_only=True)
class SloOptions:
    """The SLOs, ms: ``slo_ttft`` on each request's TTFT, ``slo_itl`` on its p99 ITL (the help as gen-config
    words it, by command: its ``--slo-itl`` without ``--tune`` writes SLO levels)."""

    slo_ttft: float = option(1000.0, help="TTFT SLO, ms.", wordings={
        "gen-config": "TTFT SLO for {flag.tune}, ms."})
    slo_itl: float = option(60.0, help="ITL SLO, ms (judged on each request's p99 ITL).", wordings={
        "gen-config": (
            "ITL target, ms: without {flag.tune}, write SLO levels (per decode batch the fewest decode SMs "
            "whose round, next to a running prefill, meets it; needs {flag.gpu} and {flag.context} or "
            "{flag.trace}); with {flag.tune}, the ITL SLO tuned for.")})
