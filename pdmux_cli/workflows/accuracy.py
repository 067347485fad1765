"""``accuracy``: how far the roofline cost model is from the public measurements it ships with, per term;
with ``serving``, whole simulated servers against public SGLang serving runs.

:func:`accuracy` takes an :class:`AccuracyRequest` and returns an :class:`AccuracyResult` (``to_dict()``:
``pdmux accuracy --json``). The comparisons are :func:`pdmux_cli.costmodel.accuracy.report` (with
:func:`pdmux_cli.costmodel.speculative_accuracy.report`, speculative decoding against public SGLang runs)
and :func:`pdmux_cli.simulate.serving_accuracy.report`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..util.errors import InputError
from .fields import Checked, option


@dataclass(frozen=True, kw_only=True)
class AccuracyRequest(Checked):
    """``pdmux accuracy``'s options: ``serving`` (replay the public serving runs), ``runs`` (every run's
    figures, with ``serving``), ``workers`` (processes for ``serving``; ``None``: the cores available)."""

    serving: bool = option(False, help=(
        "Whole servers instead of kernels: replay every shipped public SGLang serving run end to end "
        "(simulate with its setup) and compare TTFT, ITL, TPOT, E2E and throughput."))
    runs: bool = option(False, help=(
        "{flag.serving}: every run's figures, its SGLang release and the pdmux simulate command closest to "
        "it (the release's memory defaults and MoE runner as flags; 0.5.23's scheduler rules)."))
    workers: int | None = option(None, help="{flag.serving}: processes (default: the cores available).")


@dataclass
class AccuracyResult:
    """``terms``: a :class:`pdmux_cli.costmodel.accuracy.Term` per term (or serving metric);
    ``outcomes``: with ``serving``, each run's :class:`~pdmux_cli.simulate.serving_accuracy.RunOutcome`;
    ``speculative``: without ``serving``, the speculative-decoding block
    (:class:`~pdmux_cli.costmodel.speculative_accuracy.SpeculativeAccuracy`), else ``None``."""

    request: AccuracyRequest
    terms: list[Any]
    outcomes: list[Any] = field(default_factory=list)
    speculative: Any = None

    def heldout_coverage(self) -> tuple[int, int]:
        """``(inside, figures)``: the held-out runs' measured figures inside the 80% intervals ``simulate``
        gives their predictions (:func:`pdmux_cli.simulate.serving_accuracy.coverage`)."""
        from ..simulate.serving_accuracy import coverage

        return coverage([o for o in self.outcomes if o.heldout])

    def to_dict(self) -> dict[str, Any]:
        """``pdmux accuracy --json`` (errors as fractions), the ``"pdmux"`` provenance last."""
        from ..costmodel.accuracy import term_dict
        from ..provenance import provenance

        data: dict[str, Any] = {"terms": [term_dict(t) for t in self.terms]}
        if self.speculative is not None:
            from ..costmodel.speculative_accuracy import speculative_dict

            data["speculative"] = speculative_dict(self.speculative)
        if self.request.serving:
            from ..simulate.serving_accuracy import outcome_dict

            data["runs"] = [outcome_dict(o) for o in self.outcomes]
            inside, total = self.heldout_coverage()
            data["interval_coverage"] = {"coverage": 0.8, "heldout_figures": total, "heldout_inside": inside,
                                         "heldout_share": inside / total if total else None}
        data["pdmux"] = provenance(sglang=None, cost_model="roofline")
        return data


def accuracy(request: AccuracyRequest) -> AccuracyResult:
    """Compare (module docstring). Raises :class:`InputError` for ``runs`` or ``workers`` without
    ``serving``, or ``workers`` below 1."""
    r = request
    if not r.serving:
        if r.runs or r.workers is not None:
            raise InputError(
                "{flag.runs} and {flag.workers} go with {flag.serving}",
                values={},
            )
        from ..costmodel.accuracy import report
        from ..costmodel.speculative_accuracy import report as speculative_report

        return AccuracyResult(r, report(), speculative=speculative_report())
    from ..simulate.pool import default_workers
    from ..simulate.serving_accuracy import report as serving_report

    terms, outcomes = serving_report(workers=r.workers if r.workers is not None else default_workers())
    return AccuracyResult(r, terms, outcomes)
