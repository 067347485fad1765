"""``pdmux gen-config --slo-itl MS``'s rendering: the table of levels and the notes under it (the levels
themselves: :func:`pdmux_cli.workflows.gen_config.slo_levels_config`). Imported only when ``--slo-itl`` is
given without ``--tune``."""

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


def levels_notes(levels: Any, context_source: str) -> list[str]:
    """The lines under the table: the workload's context and batch range, merged levels, and where the
    target cannot be met."""
    top = levels.candidates[-1]
    notes = [(f"sized for decode batches 1-{levels.max_bs} (the most requests SGLang's KV pool under pdmux "
              f"holds at this context, within max_running_requests), at {context_source}")]
    if levels.needed > len(levels.levels):
        notes.append(f"the rule asked for {levels.needed} levels; {len(levels.levels)} fit --sm-group-num "
                     f"{len(levels.levels) + 2}: some batch sizes get the next larger level (more decode SMs "
                     "than they need, ITL within the target)")
    notes.append(f"levels sized for exactly {levels.target_ms:g} ms leave the rounds at its edge: a batch "
                 "holding longer requests than assumed goes past it; pdmux tune tries these levels and ones "
                 f"for 0.9x and 0.8x {levels.target_ms:g} ms on a trace, and capacity sizes them (--config, "
                 "repeatable)")
    if levels.unmeetable_from is not None:
        at_max = (f" ({levels.itl_at_max_ms:.1f} ms at "
                  f"{levels.max_bs})" if levels.max_bs > levels.unmeetable_from
                  else "")
        notes.append(f"from decode batch {levels.unmeetable_from} on, even the largest decode share, "
                     f"{top.prefill_sms}/{top.decode_sms} SMs, misses {levels.target_ms:g} ms: "
                     f"{levels.unmeetable_itl_ms:.1f} ms there{at_max}; fewer decoding requests (SGLang's "
                     "--max-running-requests) or more GPUs (--tp) meet it")
    return notes
