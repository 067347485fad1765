"""The ``--plot FILE.png`` figure: CDFs of ITL (all tokens) and TTFT (requests) per policy.

matplotlib is imported inside :func:`write_cdf_plot` only (Agg backend), so nothing else in pdmux
pays for it; the file is written to a temporary name in the same folder and renamed (whole or not at
all).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from ..atomic import atomic_output
from ..errors import InputError
from .metrics import PolicyMetrics, ttft_cdf


def write_cdf_plot(path: str | Path, metrics: Sequence[PolicyMetrics], title: str = "") -> Path:
    """Draw ITL and TTFT CDFs (ms, log x axis) of every policy into ``path`` (PNG).

    Raises :class:`InputError` when matplotlib is not installed or the folder does not exist.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot write {target}: folder {folder} does not exist")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("--plot needs matplotlib (pip install matplotlib)") from None
    fig, (ax_itl, ax_ttft) = plt.subplots(1, 2, figsize=(11, 4.2))
    try:
        for m in metrics:
            xs, ys = m.itl_cdf
            if xs:
                ax_itl.step(xs, ys, where="post", label=m.policy)
            xs, ys = ttft_cdf(m)
            if xs:
                ax_ttft.step(xs, ys, where="post", label=m.policy)
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
        if title:
            fig.suptitle(textwrap.fill(title, 140), fontsize=9)
        fig.tight_layout()
        with atomic_output(target) as tmp:
            fig.savefig(tmp, format="png", dpi=110)
    finally:
        plt.close(fig)
    return target
