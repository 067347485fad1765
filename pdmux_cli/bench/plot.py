"""The PNG of a bench run: read bandwidth and GEMM FLOP/s vs SMs, and co-run interference per level.

matplotlib's object API on the Agg canvas (no pyplot, no display); imported only when a PNG is
written. The file is written whole or not at all (temporary file in the same folder + os.replace).
"""

from __future__ import annotations

from pathlib import Path

from ..util.atomic import atomic_output
from .results import BenchResults


def write_png(res: BenchResults, path: str | Path) -> Path:
    """Draw ``res`` into the PNG ``path`` (whole or not at all). Returns the path.

    Panels: read GB/s vs granted SMs (copy ceiling, S_SAT marked), GEMM TFLOP/s vs SMs (whole-GPU
    matmul ceiling), and GEMM/read loss in % at each co-run level.
    """
    from ..util.plotting import agg_classes

    canvas_class, figure_class = agg_classes()
    target = Path(path)
    fig = figure_class(figsize=(15, 4.8), dpi=110)
    canvas_class(fig)
    ax_bw, ax_fl, ax_co = fig.subplots(1, 3)
    r = res.run
    fig.suptitle(f"pdmux bench: {r.gpu_name}, {r.sm_count} SMs, CUDA {r.driver_cuda_version}, {r.date}"
                 + ("" if res.complete else " (incomplete)"))

    xs = [p.granted_sms for p in res.sweep]
    ax_bw.plot(xs, [p.read.median / 1e9 for p in res.sweep], "o-", label="read kernel (median)")
    ax_bw.fill_between(xs, [p.read.p10 / 1e9 for p in res.sweep], [p.read.p90 / 1e9 for p in res.sweep],
                       alpha=0.25)
    if res.copy:
        ax_bw.axhline(res.copy.median / 1e9, color="grey", ls="--", label="copy ceiling (read + write)")
    s_sat = res.s_sat_sms()
    if s_sat:
        ax_bw.axvline(s_sat, color="tab:red", ls=":", label=f"S_SAT = {s_sat} SMs")
    ax_bw.set_xlabel("SMs")
    ax_bw.set_ylabel("GB/s")
    ax_bw.set_title("HBM read bandwidth, kernel alone")
    ax_bw.legend(fontsize=8)

    ax_fl.plot(xs, [p.gemm.median / 1e12 for p in res.sweep], "o-", color="tab:green",
               label="bf16 GEMM (median)")
    ax_fl.fill_between(xs, [p.gemm.p10 / 1e12 for p in res.sweep], [p.gemm.p90 / 1e12 for p in res.sweep],
                       color="tab:green", alpha=0.25)
    if res.matmul:
        ax_fl.axhline(res.matmul.median / 1e12, color="grey", ls="--",
                      label="whole-GPU matmul, default stream")
    ax_fl.set_xlabel("SMs")
    ax_fl.set_ylabel("TFLOP/s")
    ax_fl.set_title("GEMM throughput, kernel alone")
    ax_fl.legend(fontsize=8)

    if res.levels:
        labels = [f"{lv.prefill_sms}/{lv.decode_sms}" for lv in res.levels]
        pos = list(range(len(labels)))
        ax_co.bar([p - 0.2 for p in pos], [(1 - lv.flops_factor) * 100 for lv in res.levels], 0.4,
                  label="GEMM loss")
        ax_co.bar([p + 0.2 for p in pos], [(1 - lv.bandwidth_factor) * 100 for lv in res.levels], 0.4,
                  label="read loss")
        ax_co.set_xticks(pos)
        ax_co.set_xticklabels(labels, rotation=30)
        ax_co.axhline(0, color="black", lw=0.8)
        ax_co.legend(fontsize=8)
    else:
        ax_co.text(0.5, 0.5, "no co-run level measured", ha="center", va="center", transform=ax_co.transAxes)
    ax_co.set_xlabel("level (prefill / decode SMs)")
    ax_co.set_ylabel("rate lost vs alone on the same SMs (%)")
    ax_co.set_title("co-run interference")
    fig.tight_layout()

    with atomic_output(target) as tmp:
        fig.savefig(tmp, format="png")
    return target
