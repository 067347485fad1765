"""``pdmux gen-config --slo-itl MS``: the options' checks, the call into
:mod:`pdmux_cli.planning.slo_levels`, the table of levels. Imported only when ``--slo-itl`` is given
without ``--tune``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..util.errors import InputError


def slo_levels_config(gpu_profile: Any, model: str, slo_itl_ms: float, *, context: int | None,
                      trace: Path | None,
                      max_requests: int | None, calibration: Path | None, cost_model: str, tp: int,
                      sm_group_num: int, token_budget: int, step_overhead_ms: float | None = None,
                      per_request_overhead_ms: float | None = None,
                      max_running_requests: int | None = None) -> tuple[Any, Any, Any, list[str]]:
    """The SLO levels for gen-config: ``(PdmuxConfig, SloLevels, Setup, notes)``.

    ``gpu_profile``: a :class:`pdmux_cli.catalog.hardware.Gpu` (the cost model needs bandwidth and FLOP/s).
    ``context``: tokens of context of every decoding request, or ``trace``: a trace file whose decode
    steps give the distribution (:func:`pdmux_cli.planning.slo_levels.trace_context`; its first
    ``max_requests``, requests past the model's context length dropped). ``sm_group_num``: at most that
    many stream groups (levels + 2). ``step_overhead_ms``, ``per_request_overhead_ms``,
    ``max_running_requests``: as simulate takes them (``None``: the same defaults). Raises
    :class:`InputError` for bad or conflicting inputs.
    """
    from ..planning import slo_levels as sl
    from ..workflows.server import ServerOptions, build_setup
    from ..workflows.workload import WorkloadOptions, fit_to_model, load_workload

    sl.check_target_ms(slo_itl_ms)
    if gpu_profile is None:
        raise InputError("--slo-itl needs a GPU profile (--gpu), not --sms/--cc: the cost model needs its "
                         "bandwidth and FLOP/s")
    if (context is None) == (trace is None):
        raise InputError("--slo-itl sizes levels at the workload's context: give --context TOKENS (every "
                         "decoding request's) or --trace FILE (the distribution of its decode steps), one "
                         "of them"
                         if context is None else "give --context or --trace, not both")
    if sm_group_num < 3:
        raise InputError(f"--sm-group-num must be >= 3 (one level at least), got {sm_group_num}")
    setup = build_setup(ServerOptions(model=model, cost_model=cost_model, calibration=calibration, tp=tp,
                                      step_overhead_ms=step_overhead_ms,
                                      per_request_overhead_ms=per_request_overhead_ms,
                                      max_running_requests=max_running_requests), gpu_profile=gpu_profile)
    window = sl.model_window(setup.model)
    notes: list[str] = []
    if trace is not None:
        workload = load_workload(WorkloadOptions(trace=trace, max_requests=max_requests))
        workload = fit_to_model(workload, setup.model)
        if workload.bad_rows:
            notes.append(workload.bad_rows_text())
        batch = sl.trace_context(workload.prompt_tokens, workload.output_tokens, window,
                                 source=f"{trace.name} ({len(workload)} requests)")
    else:
        if context > (setup.model.max_position_embeddings or context):
            raise InputError(f"--context {context} is past {setup.model.name}'s context length of "
                             f"{setup.model.max_position_embeddings} tokens")
        batch = sl.fixed_context(context, window)
    levels = sl.levels_for_setup(setup, batch, slo_itl_ms, sm_group_num - 2)
    return levels.config(token_budget), levels, setup, notes


def levels_dict(levels: Any, setup: Any, context_source: str) -> dict[str, Any]:
    """gen-config --json's ``slo_levels``: the target, the levels with their batch ranges and predicted ITL
    (ms), where the target cannot be met, and the cost model."""
    return {
        "target_itl_ms": levels.target_ms,
        "context": context_source,
        "max_decode_bs": levels.max_bs,
        "levels": [{"prefill_sms": lv.prefill_sms, "decode_sms": lv.decode_sms, "decode_bs_threshold": t,
                    "first_decode_bs": lv.first_bs, "last_decode_bs": lv.last_bs, "itl_min_ms": lv.itl_min_ms,
                    "itl_max_ms": lv.itl_max_ms} for lv, t in zip(levels.levels, levels.thresholds)],
        "unmeetable_from_decode_bs": levels.unmeetable_from,
        "unmeetable_itl_ms": levels.unmeetable_itl_ms,
        "largest_share": {"prefill_sms": levels.candidates[-1].prefill_sms,
                          "decode_sms": levels.candidates[-1].decode_sms,
                          "itl_at_max_decode_bs_ms": levels.itl_at_max_ms},
        "levels_needed": levels.needed,
        "cost_model": setup.step_model.source,
    }


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
