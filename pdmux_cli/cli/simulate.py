"""``pdmux simulate`` and ``pdmux tune``: replay traces through the schedulers; search pdmux knobs.

Parse the options into a request, call the workflow (:mod:`pdmux_cli.workflows.simulate`,
:mod:`pdmux_cli.workflows.tune`), render its result. The simulator and rich tables are imported inside
the commands (start-up of the other commands stays light); matplotlib only for ``--plot``.
:func:`print_tune_search` renders ``pdmux gen-config --tune``'s search.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from ..util.errors import InputError
from ..workflows.deployment import DeploymentOptions
from ..workflows.fields import DEPLOYMENT, GENERATED_SHARED_PREFIX, RUN, SERVING_TERMS, SPECULATIVE, WORKLOAD
from ..workflows.run_options import RunOptions
from ..workflows.server import ServerOptions
from ..workflows.simulate import SimulateRequest
from ..workflows.workload import WorkloadOptions
from .root import app
from .common import console, print_json, print_note
from .options import (
    JSON_OPTION,
    TRACE_ARGUMENT,
    TRACE_OPTION,
    deferred,
    progress_factory,
    request_of,
    show_progress,
    with_group,
    with_options,
)

__all__ = ["print_json", "print_tune_search", "simulate", "tune", "tune_table"]


#: simulate's options in their --help order: its own (the trace, --json) and its request's declared fields;
#: the shared groups follow with_group's placing.
SIMULATE_OPTIONS = (
    "trace", "trace_option", "model", "gpu", "policies", "chunk_sizes", "mixed_chunk_sizes",
    "prefill_decode_interval", "config", "sm_group_num", "decode_bs_divisor", "token_budget", "divisions",
    "unreleased_fallback", "cost_model", "s_sat", "bandwidth_efficiency", "mfu", "step_overhead_ms",
    "calibration", "weight_bytes", "kv_bytes", "kv_cache_dtype", "flops_dtype", "moe_runner_backend",
    "mem_fraction_static",
    "max_prefill_tokens", "max_running_requests", "cuda_graph_max_bs", "ignore_eos",
    "disable_overlap_schedule", "disable_prefill_cuda_graph", "no_prefix_cache", "context_length",
    "disable_cuda_graph", "slo_ttft", "slo_itl", "tp", "max_concurrency", "as_json", "csv", "plot", "sglang",
    "step_by_step")


@app.command()
@with_group(ServerOptions, SERVING_TERMS, after="step_overhead_ms")
@with_group(ServerOptions, SPECULATIVE, after="disable_cuda_graph")
@with_group(WorkloadOptions, GENERATED_SHARED_PREFIX, after="output_tokens")
@with_group(DeploymentOptions, DEPLOYMENT, after="tp")
@with_group(RunOptions, RUN, after="max_concurrency", command="simulate")
@with_group(WorkloadOptions, WORKLOAD, after="trace_option", command="simulate")
@with_options(SimulateRequest, SIMULATE_OPTIONS, "simulate")
def simulate(
    trace: Path | None = TRACE_ARGUMENT,
    trace_option: Path | None = TRACE_OPTION,
    as_json: bool = JSON_OPTION,
    **options: Any,
) -> None:
    """Replay a request trace through PD multiplexing, chunked prefill, prefill-first and PD disaggregation.

    One server of --tp GPUs, --dp replicas of it behind a router, or --disagg XPYD instances (the
    roofline cost model, or a calibration); per policy: TTFT, ITL, TPOT and end-to-end latency
    percentiles, SLO attainment, goodput, GPU busy share, and the GPUs it used."""
    from ..workflows.simulate import simulate as run

    if trace is not None and trace_option is not None:
        raise InputError("give the trace once: as the TRACE argument or as --trace, not both")
    request = request_of(SimulateRequest, options, trace=trace if trace is not None else trace_option)
    result = run(request, progress_factory(not as_json))
    if as_json:
        print_json(result.to_dict(), nan_as_null=True)
        return
    _print_simulation(result)


def _print_simulation(result: Any) -> None:
    """simulate's tables, group lines, notes and the files written."""
    from . import simulate_tables as report

    con = console()
    for table in report.metrics_tables(result.metrics, con.width, result.title):
        con.print(table)
    for line in report.group_lines(result.metrics):
        con.print(line)
    for note in result.table_notes():
        print_note(con, note)
    for path, what in ((result.csv, "per-request results"), (result.plot, "CDF plot")):
        if path is not None:
            con.print(f"wrote {path} ({what})")


# ------------------------------------------------------------------------------------------------
# tune


def tune_table(result: Any, top: int | None = 12) -> Any:
    """A rich Table of the tuning rows, best first (``top`` rows plus SGLang's defaults), each with its rank
    among all configs (1: the winner; the JSON's ``index`` is the candidate's place in the search order)."""
    from rich.table import Table

    from .simulate_tables import latency_cell, share_text

    ranked = result.ranked()
    shown = ranked if top is None else ranked[:top]
    if result.baseline is not None and all(r.index != result.baseline for r in shown):
        shown = shown + [result.rows[result.baseline]]
    on = f"; each on {result.gpus} GPUs, {result.layout}" if result.gpus > 1 else ""
    table = Table(title=f"pdmux configs compared ({len(result.rows)} simulated, best "
                        f"first{on})", title_justify="left",
                  caption="SLO met: share of requests; goodput: requests/s meeting the SLO; p99s in ms "
                          "(10 s and more in s)",
                  caption_justify="left")
    for col, just in (("rank", "right"), ("config", "left"), ("SLO met", "right"), ("goodput", "right"),
                      ("TTFT p99", "right"), ("ITL p99", "right")):
        table.add_column(col, justify=just)
    rank = {r.index: position for position, r in enumerate(ranked, start=1)}
    for row in shown:
        mark = " best" if row.index == result.best else ""
        mark += " default" if row.index == result.baseline else ""
        table.add_row(f"{rank[row.index]}{mark}", row.candidate.description, share_text(row.slo_attainment),
                      f"{row.goodput_rps:.3g}", latency_cell(row.ttft_p99_ms), latency_cell(row.itl_p99_ms),
                      end_section=row is shown[-1] and bool(result.schedules))
    for other in result.schedules:
        table.add_row("-", f"{other.label} (SGLang, no pdmux)", share_text(other.slo_attainment),
                      f"{other.goodput_rps:.3g}", latency_cell(other.ttft_p99_ms),
                      latency_cell(other.itl_p99_ms))
    return table


def print_tune_search(con: Any, result: Any) -> None:
    """Tune's comparison table (:func:`tune_table`), its verdict and its notes on ``con``, as ``pdmux
    gen-config --tune`` prints them for ``result`` (a :class:`pdmux_cli.simulate.tune.TuneResult`)."""
    con.print(tune_table(result))
    con.print("verdict: " + result.verdict(), soft_wrap=True)
    for note in result.notes:
        print_note(con, note)


def _tune_layout(tp: int, cluster: Any) -> str:
    """How tune's winner line says the GPUs were used: ``" (TP 2, one rank simulated)"``, ``" (DP 2 x TP 1,
    round_robin)"``."""
    if cluster.dp > 1:
        from ..multigpu.disaggregation import Layout

        rank = ", one rank of each replica simulated" if tp > 1 else ""
        return f" ({Layout(tp, cluster.dp)} behind {cluster.method}{rank})"
    return f" (TP {tp}, one rank simulated)" if tp > 1 else ""


#: tune's options in their --help order: its own (--all, --json) and its request's declared fields; the
#: shared groups follow with_group's placing.
TUNE_OPTIONS = (
    "trace", "slo_ttft", "slo_itl", "model", "gpu", "trace_format", "qps", "rate_scale", "max_requests",
    "duration", "sm_group_nums", "divisors", "budgets", "no_single_levels", "slo_margins", "cost_model",
    "s_sat", "bandwidth_efficiency", "mfu", "step_overhead_ms", "calibration", "mem_fraction_static",
    "max_prefill_tokens", "kv_bytes", "kv_cache_dtype", "ignore_eos", "no_prefix_cache", "context_length",
    "disable_cuda_graph", "tp", "dp", "load_balance_method", "disagg", "output", "show_all", "as_json",
    "sglang")


def _tune_options(function: Any) -> Any:
    """tune's options, built from its request's declarations when typer first builds the command
    (:func:`~.options.deferred`: the tune workflow is imported only then)."""
    from ..workflows.tune import TuneRequest

    function = with_options(TuneRequest, TUNE_OPTIONS, "tune")(function)
    function = with_group(ServerOptions, SPECULATIVE, after="disable_cuda_graph")(function)
    function = with_group(ServerOptions, SERVING_TERMS, after="step_overhead_ms")(function)
    return with_group(RunOptions, RUN, before="tp")(function)


@app.command()
@deferred(_tune_options)
def tune(
    show_all: bool = typer.Option(False, "--all", help="Show every config compared, not just the best."),
    as_json: bool = JSON_OPTION,
    **options: Any,
) -> None:
    """Search pdmux YAML knobs for the best SLO attainment on a trace; write the winning YAML.

    Tries sm_group_num, decode_bs_divisor or fixed splits, SLO levels for --slo-itl (and 0.9x, 0.8x
    it), and split_forward_token_budget, one simulation each, in parallel on the cores available; with
    --dp, each on that many replicas behind a router."""
    from ..workflows.tune import TuneRequest
    from ..workflows.tune import tune as run

    outcome = run(request_of(TuneRequest, options), progress_factory(show_progress(as_json)))
    if as_json:
        print_json(outcome.to_dict(), nan_as_null=True)
        return
    _print_tune(outcome, show_all)


def _print_tune(outcome: Any, show_all: bool) -> None:
    """tune's table, winner line, verdict and notes (on stderr when the YAML goes to stdout), then the YAML
    or the launch line of the file written."""
    from ..sglang import pdmux_config as pc
    from ..sglang.revisions import get_revision
    from .simulate_tables import share_text
    from ..simulate.tune import levels_text

    r, result, setup, best = outcome.request, outcome.search, outcome.setup, outcome.config
    con = console(stderr=r.output is None)
    con.print(tune_table(result, None if show_all else 12))
    row = result.best_row
    levels = levels_text(best, setup.total_sms, setup.compute_capability)
    con.print(f"winner: {row.candidate.description} (levels {levels}): {share_text(row.slo_attainment)} of "
              f"{len(outcome.workload)} requests meet TTFT <= {r.slo_ttft:g} ms and ITL p99 <= {r.slo_itl:g} "
              f"ms; {len(result.rows)} configs on {result.workers} worker(s); every policy on {result.gpus} "
              "GPU(s)"
              + _tune_layout(setup.tp, outcome.cluster))
    con.print("verdict: " + result.verdict(), soft_wrap=True)
    con.print(f"cost model: {setup.step_model.source}", soft_wrap=True)
    for note in outcome.table_notes():
        print_note(con, note)
    if r.output is None:
        sys.stdout.write(outcome.yaml)
        return
    cluster = outcome.cluster
    dp_flags = f" --dp-size {cluster.dp} --load-balance-method {cluster.method}" if cluster.dp > 1 else ""
    env = get_revision(r.sglang).tp_launch if setup.tp > 1 else ()
    spec_flags = "".join(" " + shlex.quote(f) for f in outcome.speculative_flags)
    con.print(f"wrote {r.output}; launch with: "
              + pc.launch_command(str(r.output), best.sm_group_num, tp=setup.tp, env=env) + dp_flags
              + spec_flags, soft_wrap=True)
