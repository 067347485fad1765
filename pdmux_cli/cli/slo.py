"""``pdmux gen-config --slo-itl MS``'s rendering: the table of levels (the levels themselves, and the notes
under the table as findings: :func:`pdmux_cli.workflows.gen_config.slo_levels_config`). Imported only when
``--slo-itl`` is given without ``--tune``."""

from __future__ import annotations

from typing import Any


def levels_table(levels: Any, setup: Any) -> Any:
    """A rich Table: one row per level, its SMs, threshold, decode batch sizes and predicted ITL."""
    from rich.table import Table

    table = Table(title=f"SLO levels for ITL <= {levels.target_ms:g} ms: {setup.model.name} on "
                        f"{setup.gpu_name}"
                        + (f" (TP {setup.tp})" if setup.tp > 1 else "") + ", decode next to a running "
                                                                          "prefill",
                  title_justify="left",
                  caption="predicted ITL: a pdmux round beside a running prefill, CPU work included",
                  caption_justify="left")
    for col, just in (("level", "right"), ("prefill/decode SMs", "right"), ("threshold", "right"),
                      ("decode batch", "right"), ("predicted ITL", "right")):
        table.add_column(col, justify=just)
    for i, (lv, threshold) in enumerate(zip(levels.levels, levels.thresholds), start=1):
        sizes = f"{lv.first_bs}-{lv.last_bs}" if lv.last_bs > lv.first_bs else f"{lv.first_bs}"
        itl = (f"{lv.itl_min_ms:.1f}-{lv.itl_max_ms:.1f} ms" if lv.itl_max_ms - lv.itl_min_ms >= 0.05
               else f"{lv.itl_max_ms:.1f} ms")
        table.add_row(str(i), f"{lv.prefill_sms}/{lv.decode_sms}", str(threshold), sizes, itl)
    return table

