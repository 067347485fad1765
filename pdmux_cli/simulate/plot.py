"""The ``--plot FILE.png`` figures of simulate and capacity: CDFs of ITL (all tokens) and TTFT
(requests) per policy; SLO attainment against request rate per policy. Drawn with
:func:`pdmux_cli.util.plotting.png_figure` (matplotlib only when asked; whole or not at all)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..util.plotting import png_figure
from .metrics import PolicyMetrics, ttft_cdf


def _label(m: PolicyMetrics) -> str:
    """A policy's legend entry; a run a simulated SGLang crash stopped says so (its curves are partial)."""
    return m.policy + (" (crashed)" if m.crashed_at_s is not None else "")


def write_cdf_plot(path: str | Path, metrics: Sequence[PolicyMetrics], title: str = "") -> Path:
    """Draw ITL and TTFT CDFs (ms, log x axis) of every policy into ``path`` (PNG).

    Raises :class:`InputError` when matplotlib is not installed or the folder does not exist.
    """
    with png_figure(path, (11, 4.2), title) as fig:
        ax_itl, ax_ttft = fig.subplots(1, 2)
        for m in metrics:
            xs, ys = m.itl_cdf
            if xs:
                ax_itl.step(xs, ys, where="post", label=_label(m))
            xs, ys = ttft_cdf(m)
            if xs:
                ax_ttft.step(xs, ys, where="post", label=_label(m))
        for ax, name, slo in ((ax_itl, "ITL (all tokens)", metrics[0].slo_itl_ms if metrics else None),
                              (ax_ttft, "TTFT (requests)", metrics[0].slo_ttft_ms if metrics else None)):
            ax.set_xscale("log")
            ax.set_xlabel(f"{name}, ms")
            ax.set_ylabel("share at or below")
            ax.set_ylim(0, 1.01)
            ax.grid(True, which="both", alpha=0.3)
            if slo:
                ax.axvline(slo, color="grey", linestyle="--", linewidth=1, label=f"SLO {slo:g} ms")
            ax.legend(fontsize=8, loc="lower right")
    return Path(path)


def write_capacity_plot(path: str | Path, result, title: str = "") -> Path:
    """Draw SLO attainment against request rate (req/s, log x axis), one curve per policy of a
    :class:`~pdmux_cli.simulate.capacity.CapacityResult`, with the target as a line, into ``path`` (PNG).

    Raises :class:`InputError` when matplotlib is not installed or the folder does not exist."""
    with png_figure(path, (7.5, 4.5), title) as fig:
        ax = fig.subplots()
        for p in result.policies:
            if p.points:
                ax.plot([x.rate_rps for x in p.points], [x.slo_attainment for x in p.points], marker="o",
                        markersize=3, label=p.label)
        ax.axhline(result.target, color="grey", linestyle="--", linewidth=1,
                   label=f"target {result.target:.0%}")
        ax.set_xscale("log")
        ax.set_xlabel("request rate, req/s")
        ax.set_ylabel("SLO attainment (share of requests)")
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
    return Path(path)
