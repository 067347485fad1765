"""simulate's comparison table (rich) and the cells capacity's and tune's tables share.

Rendering only: the figures come from :class:`~pdmux_cli.simulate.metrics.PolicyMetrics` (their JSON is
:mod:`pdmux_cli.simulate.report`'s).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..messages import layout_text
from ..simulate.metrics import PolicyMetrics
from ..simulate.report import LATENCIES, STATS


def _ms(value: float) -> str:
    """A latency cell of a table in ms: ``"12.5"``, ``"850"``; from 10 s on in seconds, marked:
    ``"13.0 s"``."""
    if not math.isfinite(value):
        return "-"
    if value >= 10_000:
        return f"{value / 1e3:.1f} s"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


#: The public name of the table cell format (tune's and capacity's tables use it too).
latency_cell = _ms


def _bound(value: float, seconds: bool) -> str:
    """One end of an interval, 2-3 significant figures, in the cell's unit (ms, or s from 10 s on)."""
    if seconds:
        value /= 1e3
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def interval_cell(value: float, bounds: tuple[float, float] | None, latency: bool = True) -> str:
    """A figure with its interval: ``"22.4 (15-35)"``, ``"13.0 s (9.1-18)"`` (latencies, ms); a rate with
    ``latency=False``: ``"5120 (4100-6300)"``. Without bounds the figure alone."""
    text = _ms(value) if latency else ("-" if not math.isfinite(value) else f"{value:.3g}" if value < 100
                                       else f"{value:.0f}")
    if bounds is None or not math.isfinite(value):
        return text
    seconds = latency and value >= 10_000
    return f"{text} ({_bound(bounds[0], seconds)}-{_bound(bounds[1], seconds)})"


#: The interval figure of each latency row's p50 (:data:`pdmux_cli.costmodel.uncertainty.FIGURES`).
_P50_FIGURE = {"ttft_ms": "ttft_ms_p50", "itl_ms": "itl_ms_p50", "tpot_ms": "tpot_ms_p50",
               "e2e_ms": "e2e_ms_p50"}


def _bounds(m: PolicyMetrics, figure: str) -> tuple[float, float] | None:
    return m.uncertainty.bounds.get(figure) if m.uncertainty is not None else None


def share_text(share: float) -> str:
    """``0.5643`` -> ``"56.4%"``; a share just under 1 shows as ``">99.9%"``, never as ``"100.0%"``."""
    text = f"{share:.1%}"
    return ">99.9%" if text == "100.0%" and share < 1 else text


#: What a table's intervals are (the caption's words).
INTERVAL_CAPTION = ("(lo-hi): where 80% of real SGLang servers' medians and throughputs fell around "
                    "pdmux's prediction, from its out-of-sample error on public serving runs (pdmux "
                    "accuracy --serving)")

#: Width of the widest value cell of :func:`metrics_table` (``"12345.6 s"``, ``">99.9%"``).
VALUE_WIDTH = 8


#: Columns a policy takes at most in :func:`metrics_table` (value width, padding and border).
POLICY_COLUMN_WIDTH = 16
#: Width of the row-label column with its border.
LABEL_COLUMN_WIDTH = 21


def metrics_tables(metrics: Sequence[PolicyMetrics], width: int, title: str = "") -> list[Any]:
    """:func:`metrics_table` split into tables of as many policies as fit ``width`` columns side by side
    (at least one each): a terminal too narrow for every policy gets them in groups, none cut off."""
    per = max(1, (width - LABEL_COLUMN_WIDTH) // POLICY_COLUMN_WIDTH)
    groups = [metrics[i:i + per] for i in range(0, len(metrics), per)] or [metrics]
    best = max((m.slo_attainment for m in metrics), default=0.0)
    return [metrics_table(group, title if i == 0 else "", best) for i, group in enumerate(groups)]


def metrics_table(metrics: Sequence[PolicyMetrics], title: str = "", best: float | None = None) -> Any:
    """A rich Table: one column per policy, one row per statistic (latencies in ms); the last rows say how
    many GPUs each policy ran on and how (TP, DP replicas, xPyD; the router between servers). The SLO
    attainment equal to ``best`` (default: the best of these policies) is in bold."""
    from rich.table import Table
    from rich.text import Text

    slo = metrics[0] if metrics else None
    caption = (f"latencies in ms (10 s and more in s); SLO met = TTFT <= {slo.slo_ttft_ms:g} ms and the "
               f"request's p99 ITL <= {slo.slo_itl_ms:g} ms") if slo else None
    if any(m.uncertainty is not None for m in metrics):
        caption += f"; {INTERVAL_CAPTION}"
    table = Table(title=title or None, title_justify="left", caption=caption, caption_justify="left")
    # the values never wrap and keep their width (min_width: a narrow terminal shrinks no figure away);
    # long policy names wrap in their header instead
    table.add_column("", justify="left", no_wrap=True, min_width=len("prefix cache hit"))
    for m in metrics:  # a run a simulated SGLang crash stopped says so in its header: its figures are partial
        table.add_column(m.policy + (f" CRASHED at {m.crashed_at_s:.3g} s" if m.crashed_at_s is not None
                                     else ""),
                         justify="right", min_width=VALUE_WIDTH)
    best_att = max((m.slo_attainment for m in metrics), default=0.0) if best is None else best
    for name, key in LATENCIES:
        for stat in STATS:
            table.add_row(f"{name} {stat}", *(
                interval_cell(getattr(m, key)[stat], _bounds(m, _P50_FIGURE[key])) if stat == "p50"
                else _ms(getattr(m, key)[stat]) for m in metrics), end_section=stat == "max")
    if any(math.isfinite(m.output_tok_s) for m in metrics):
        table.add_row("output tok/s", *(interval_cell(m.output_tok_s, _bounds(m, "output_tok_s"), False)
                                        for m in metrics))
    table.add_row("SLO met", *(
        (Text(share_text(m.slo_attainment), style="bold") if m.slo_attainment == best_att
         else share_text(m.slo_attainment))
        for m in metrics))
    table.add_row("goodput req/s", *(f"{m.goodput_rps:.3g}" for m in metrics))
    table.add_row("GPU busy", *(f"{m.gpu_busy_share:.0%}" for m in metrics))
    if any(m.prefix_cache_hit_rate is not None for m in metrics):
        table.add_row("prefix cache hit", *(
            "-" if m.prefix_cache_hit_rate is None else f"{m.prefix_cache_hit_rate:.1%}" for m in metrics))
    table.add_row("done", *(str(m.completed) for m in metrics))
    if any(m.rejected for m in metrics):
        table.add_row("never fit", *(str(m.rejected) for m in metrics))
    table.add_row("GPUs", *(str(m.gpus) for m in metrics))
    if any(m.layout.gpus > 1 for m in metrics):
        table.add_row("layout", *(layout_text(m.layout) for m in metrics))
    if any(m.router for m in metrics):
        table.add_row("router", *(m.router or "-" for m in metrics))
    return table


def group_lines(metrics: Sequence[PolicyMetrics]) -> list[str]:
    """For pdmux runs: one line with the share of time spent in each stream group."""
    lines = []
    for m in metrics:
        if m.group_time_share:
            parts = [f"{p}/{d} {share:.0%}" for (p, d), share in m.group_time_share if share >= 0.005]
            lines.append(f"{m.policy}: time per stream group (prefill/decode SMs): " + ", ".join(parts))
    return lines
