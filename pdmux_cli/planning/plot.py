"""``pdmux estimate --plot FILE.png``: the ITL / prefill-time trade-off of one scenario at a glance.

One point per PD-multiplexing level (prefill time against decode ITL while the prompt is prefilled, at
the first S_SAT; SGLang's chosen level circled), joined in level order, and one marker per other policy
of the estimate (prefill-first, chunked, mixed chunk, and PD disaggregation with ``--disagg``: its TTFT,
prefill plus the KV transfer, against its undisturbed ITL, on more GPUs), with decode alone as a line
(:func:`pdmux_cli.util.plotting.png_figure`: matplotlib only when asked, whole or not at all).
"""

from __future__ import annotations

import math
from pathlib import Path

from ..util.errors import InputError
from ..util.plotting import png_figure

#: Marker per policy kind of :class:`pdmux_cli.planning.estimate.PolicyRow`.
MARKERS = {"prefill-first": "s", "chunked": "D", "mixed-chunk": "^", "disagg": "*"}


def write_tradeoff_plot(path: str | Path, result, title: str = "") -> Path:
    """Draw ``result`` (an :class:`pdmux_cli.planning.estimate.Estimate` computed with ``all_levels=True``)
    into ``path`` (PNG): x = prefill time (ms), y = decode ITL during the prefill (ms), both log scale.

    Raises :class:`InputError` when matplotlib is missing, the folder does not exist, or the estimate
    has no level rows (computed without ``all_levels``)."""
    if not result.levels:
        raise InputError("{flag.plot} needs every level's figures: the estimate has none", param="plot",
                         values={})
    with png_figure(path, (7.5, 4.8), title) as fig:
        ax = fig.subplots()
        levels = [lv for lv in result.levels if math.isfinite(lv.prefill_ms) and math.isfinite(lv.itl_ms[0])]
        ax.plot([lv.prefill_ms for lv in levels], [lv.itl_ms[0] for lv in levels], marker="o", markersize=4,
                label="PD mux, each level")
        for lv in levels:
            ax.annotate(f"{lv.prefill_sms}/{lv.decode_sms}", (lv.prefill_ms, lv.itl_ms[0]), fontsize=7,
                        textcoords="offset points", xytext=(4, 3))
            if lv.chosen:
                ax.plot([lv.prefill_ms], [lv.itl_ms[0]], marker="o", markersize=11, fillstyle="none",
                        color="black", linestyle="none", label="level SGLang chooses")
        for row in result.rows:
            if row.policy == "decode-only":
                ax.axhline(row.itl_ms, color="grey", linestyle=":", linewidth=1, label="decode alone")
            elif row.policy in MARKERS and row.prefill_ms is not None:
                label = row.label + (f" ({row.gpus} GPUs, TTFT)" if row.policy == "disagg" else "")
                ax.plot([row.prefill_ms], [row.itl_ms], marker=MARKERS[row.policy], linestyle="none",
                        label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("prefill time of the prompt, ms")
        ax.set_ylabel("decode ITL while it is prefilled, ms")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    return Path(path)
