"""Turn the planning commands' results into rich tables. No computation of its own.

Their JSON is the workflows' (``result.to_dict()``, :mod:`pdmux_cli.workflows.planning_json`). rich is
imported lazily, inside the table builders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # type names only: rendering splits must not import the cost model
    from ..planning.estimate import Estimate, PolicyRow
    from ..sglang.split_levels import Split

from ..messages import count_text, render_all
from ..workflows.planning_json import group_kind


def splits_tables(info: dict[str, Any]) -> list[Any]:
    """Three rich tables for ``pdmux splits``: the groups, the level per decode batch, layers per round."""
    from rich.table import Table

    groups: list[Split] = info["groups"]
    thresholds = info.get("thresholds")
    tp = info.get("tp", 1)
    each = f"each of {tp} GPUs (TP {tp}) " if tp > 1 else ""
    title = (
        f"{info['gpu']}: {each}{info['sm_count']} SMs, compute capability {info['compute_capability']} "
        f"- stream groups ({info['source']})"
    )
    t1 = Table(title=title, title_justify="left")
    t1.add_column("group", justify="right")
    t1.add_column("kind")
    t1.add_column("prefill SMs", justify="right")
    t1.add_column("decode SMs", justify="right")
    if thresholds:
        t1.add_column("decode bs threshold", justify="right")
    for i, g in enumerate(groups):
        row = [str(i), group_kind(i, groups), str(g.prefill_sms), str(g.decode_sms)]
        if thresholds:
            row.append(str(thresholds[i - 1]) if 0 < i < len(groups) - 1 else "-")
        t1.add_row(*row)

    how = "manual_divisions thresholds" if thresholds else (
        f"level = decode_bs x {len(groups) - 2} // {info['decode_bs_divisor']}, clamped to "
        f"1..{len(groups) - 2}")
    t2 = Table(title=f"Level chosen while a prefill runs ({how})", title_justify="left")
    t2.add_column("decode batch size", justify="right")
    t2.add_column("group", justify="right")
    t2.add_column("prefill : decode SMs", justify="right")
    for bs, k, crash in info["choices"]:
        split = f"{groups[k].prefill_sms} : {groups[k].decode_sms}"
        if crash:
            split += "  (SGLang 0.5.23, the latest release: UnboundLocalError)"
        t2.add_row(str(bs), str(k), split)
    t2.caption = f"decode only -> group {len(groups) - 1} (whole GPU); prefill only -> group 0 (whole GPU)"
    t2.caption_justify = "left"

    t3 = Table(
        title=f"Prefill layers per round ({info['model']}, {info['num_layers']} layers, "
        f"budget {info['token_budget']} tokens)",
        title_justify="left",
    )
    t3.add_column("prompt tokens", justify="right")
    t3.add_column("layers per round", justify="right")
    t3.add_column("rounds", justify="right")
    for tokens, layers, rounds in info["layers"]:
        t3.add_row(str(tokens), str(layers), str(rounds))
    return [t1, t2, t3]


def ms(value: float) -> str:
    """``0.0092`` s -> ``"9 ms"`` (chapter rounding: nearest millisecond)."""
    return f"{value:.0f} ms"


def itl_text(row: PolicyRow) -> str:
    """The ITL cell as the chapter writes it."""
    if row.policy in ("prefill-first", "chunked"):
        return f"one step of {ms(row.itl_ms)}"
    if row.policy == "mixed-chunk":
        return f"{ms(row.itl_ms)} x {row.steps} steps"
    return ms(row.itl_ms)


def estimate_title(est: Estimate) -> str:
    sc = est.scenario
    on = f"{est.tp} x {est.gpu} (TP {est.tp})" if est.tp > 1 else est.gpu
    return (
        f"{est.model} on {on}: {count_text(sc.decode_bs, 'decode request')} at {sc.context_tokens} context, "
        f"then a prefill of {sc.prompt_tokens} tokens slips in"
    )


def estimate_table(est: Estimate) -> Any:
    """The chapter's table for ``pdmux estimate``."""
    from rich.table import Table

    title = estimate_title(est)
    if not est.memory.fits:
        from rich.text import Text

        title = Text.assemble(("DOES NOT FIT", "bold red"), " ", title)
    table = Table(title=title, title_justify="left")
    table.add_column("policy", no_wrap=True)
    table.add_column("decode ITL", justify="right", no_wrap=True)
    table.add_column("prefill time", justify="right", no_wrap=True)
    table.add_column("tokens per request during prefill", justify="right", max_width=18)
    # one GPU for every row needs no column (the title says it); a disagg row's label names its xPyD
    # ("disagg 1P1D") and a note its TP per instance, so the cell is its GPU count, as the others'
    gpus_column = est.tp > 1 or any(r.policy == "disagg" for r in est.rows)
    if gpus_column:
        table.add_column("GPUs", justify="right")
    cannot_run = not est.pdmux_runs
    for row in est.rows:
        if cannot_run and row.policy == "pdmux":  # the first notes say why (sglang_support, speculation)
            table.add_row(row.label, "cannot run", "cannot run", "-",
                          *([str(row.gpus)] if gpus_column else []))
            continue
        table.add_row(
            row.label,
            itl_text(row),
            ms(row.prefill_ms) if row.prefill_ms is not None else "-",
            str(row.tokens_during_prefill) if row.tokens_during_prefill is not None else "-",
            *([str(row.gpus)] if gpus_column else []),
        )
    level = est.level
    group = f"group {est.group_index}" if est.group_index >= 0 else "explicit split"
    caption = [
        (f"level: {group} = {level.prefill_sms} prefill / {level.decode_sms} decode SMs "
         f"({est.level_source}); prefill split into {est.layers_per_round} layers per round, "
         f"{est.prefill_rounds} rounds"),
        f"cost model: {est.throughput_source}; dense math in {est.flops_dtype}",
        (f"memory{' per GPU' if est.tp > 1 else ''}: {est.memory.weight_bytes / 2**30:.1f} GiB weights + "
         f"{est.memory.kv_cache_bytes / 2**30:.1f} GiB KV of {est.memory.gpu_memory_bytes / 2**30:.1f} GiB"),
        *render_all(est.notes),
    ]
    table.caption = "\n".join(caption)
    table.caption_justify = "left"
    return table


def levels_table(est: Estimate) -> Any:
    """``--all-levels``: prefill time and ITL per S_SAT for every level."""
    from rich.table import Table

    s_sats = [r.s_sat for r in est.rows if r.policy == "pdmux"]
    table = Table(title="Every level: prefill time vs decode ITL", title_justify="left")
    table.add_column("group", justify="right")
    table.add_column("prefill : decode SMs", justify="right")
    table.add_column("prefill time", justify="right")
    for s in s_sats:
        table.add_column("ITL " + (f"S_SAT={s:g}" if s is not None else "(calibrated)"), justify="right")
    for lv in est.levels:
        mark = " *" if lv.chosen else ""
        table.add_row(str(lv.group) + mark, f"{lv.prefill_sms} : {lv.decode_sms}", ms(lv.prefill_ms),
                      *(ms(i) for i in lv.itl_ms))
    table.caption = "* the level SGLang chooses for this decode batch size"
    if not est.pdmux_runs:
        reason = (est.pdmux_support.reason if est.pdmux_support is not None and not est.pdmux_support.runs
                  else est.speculation_refusal)
        table.caption += "\nPD mux cannot run: " + reason + " (these times are not reachable)"
    table.caption_justify = "left"
    return table
