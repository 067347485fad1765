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
from .app import app
from .common import console, print_json, print_note, sglang_option
from .options import (
    JSON_OPTION,
    MIXED_CHUNK_SIZES_OPTION,
    OUTPUT_YAML_OPTION,
    PREFILL_DECODE_INTERVAL_OPTION,
    SLO_ITL_DEFAULT_OPTION,
    SLO_ITL_HELP,
    SLO_TTFT_DEFAULT_OPTION,
    TRACE_ARGUMENT,
    TRACE_OPTION,
    progress_factory,
    declared,
    request_of,
    with_group,
    show_progress,
)

__all__ = ["print_json", "print_tune_search", "simulate", "tune", "tune_table"]


@app.command()
@with_group(ServerOptions, SERVING_TERMS, after="step_overhead_ms")
@with_group(ServerOptions, SPECULATIVE, after="disable_cuda_graph")
@with_group(WorkloadOptions, GENERATED_SHARED_PREFIX, after="output_tokens")
@with_group(DeploymentOptions, DEPLOYMENT, after="tp")
@with_group(RunOptions, RUN, after="max_concurrency", command="simulate")
@with_group(WorkloadOptions, WORKLOAD, after="trace_option", command="simulate")
def simulate(
    trace: Path | None = TRACE_ARGUMENT,
    trace_option: Path | None = TRACE_OPTION,
    model: str = declared(ServerOptions, "model"),
    gpu: str | None = declared(ServerOptions, "gpu"),
    policies: str = declared(SimulateRequest, "policies"),
    chunk_sizes: str | None = typer.Option(None, "--chunk-sizes", help=(
        "Chunk sizes of 'chunked' (default: SGLang's default for the GPU, 8192 on H100/H200).")),
    mixed_chunk_sizes: str = MIXED_CHUNK_SIZES_OPTION,
    prefill_decode_interval: int = PREFILL_DECODE_INTERVAL_OPTION,
    config: Path | None = typer.Option(None, "--config", help=(
        "pdmux YAML to simulate (default: SGLang's defaults).")),
    sm_group_num: int | None = typer.Option(None, "--sm-group-num", help="Override sm_group_num."),
    decode_bs_divisor: int | None = typer.Option(None, "--decode-bs-divisor", help="Override "
                                                                                   "decode_bs_divisor."),
    token_budget: int | None = typer.Option(None, "--token-budget", help="Override "
                                                                         "split_forward_token_budget."),
    divisions: str | None = typer.Option(None, "--divisions", help="Manual levels "
                                                                   "PREFILL:DECODE:THRESHOLD,..."),
    unreleased_fallback: bool = typer.Option(False, "--unreleased-fallback", help=(
        "pdmux: where SGLang 0.5.23 crashes (no manual threshold matches), use group 1 as its unreleased "
        "branches do, instead of stopping.")),
    cost_model: str = declared(ServerOptions, "cost_model"),
    s_sat: float | None = declared(ServerOptions, "s_sat"),
    bandwidth_efficiency: float | None = declared(ServerOptions, "bandwidth_efficiency"),
    mfu: float | None = declared(ServerOptions, "mfu"),
    step_overhead_ms: float | None = declared(ServerOptions, "step_overhead_ms"),
    calibration: Path | None = declared(ServerOptions, "calibration"),
    weight_bytes: float | None = declared(ServerOptions, "weight_bytes"),
    kv_bytes: float | None = declared(ServerOptions, "kv_bytes"),
    kv_cache_dtype: str | None = declared(ServerOptions, "kv_cache_dtype"),
    flops_dtype: str | None = declared(ServerOptions, "flops_dtype"),
    mem_fraction_static: float | None = typer.Option(None, "--mem-fraction-static", help=(
        "SGLang's flag: share of GPU memory for weights and KV pool (default: SGLang's own, per policy).")),
    max_prefill_tokens: int = declared(ServerOptions, "max_prefill_tokens"),
    max_running_requests: int | None = typer.Option(None, "--max-running-requests", help=(
        "SGLang's flag (default: SGLang's, from the KV pool).")),
    cuda_graph_max_bs: int | None = typer.Option(None, "--cuda-graph-max-bs", help=(
        "Largest decode batch with a CUDA graph (default: SGLang's for the GPU). Larger batches launch "
        "kernel by kernel: slower only where the launches outlast the GPU's work (small models); it also "
        "sizes SGLang's memory reserve (floored at 10 GB on GPUs over 60 GB).")),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help=(
        "Requests run to their max_new_tokens (benchmark traffic): admission reserves all of it.")),
    disable_overlap_schedule: bool = typer.Option(False, "--disable-overlap-schedule", help=(
        "Baselines without SGLang's overlap scheduler (as pdmux runs): CPU time adds to every step.")),
    disable_prefill_cuda_graph: bool = typer.Option(False, "--disable-prefill-cuda-graph", help=(
        "SGLang's flag: prefill batches launch their kernels eagerly (SGLang before 0.5.23's prefill "
        "CUDA graph did): a short prefill takes at least its kernels' launch time.")),
    no_prefix_cache: bool = declared(ServerOptions, "no_prefix_cache"),
    context_length: int | None = declared(ServerOptions, "context_length"),
    disable_cuda_graph: bool = declared(ServerOptions, "disable_cuda_graph"),
    slo_ttft: float = SLO_TTFT_DEFAULT_OPTION,
    slo_itl: float = SLO_ITL_DEFAULT_OPTION,
    tp: int = declared(ServerOptions, "tp"),
    max_concurrency: int | None = typer.Option(None, "--max-concurrency", help=(
        "A closed-loop client with at most N requests in flight, as SGLang's bench_serving "
        "--max-concurrency: each request is sent at its arrival or when one finishes, whichever is later; "
        "TTFT counts from the send. One server only.")),
    as_json: bool = JSON_OPTION,
    csv: Path | None = declared(SimulateRequest, "csv"),
    plot: Path | None = declared(SimulateRequest, "plot"),
    sglang: str = sglang_option(),
    step_by_step: bool = typer.Option(False, "--step-by-step", help=(
        "A check: simulate every decode step one at a time, the reference loop (by default the quiet "
        "steps between two events are advanced at once, to the same figures).")),
    **groups: Any,
) -> None:
    """Replay a request trace through PD multiplexing, chunked prefill, prefill-first and PD disaggregation.

    One server of --tp GPUs, --dp replicas of it behind a router, or --disagg XPYD instances (the
    roofline cost model, or a calibration); per policy: TTFT, ITL, TPOT and end-to-end latency
    percentiles, SLO attainment, goodput, GPU busy share, and the GPUs it used."""
    from ..workflows.simulate import simulate as run

    if trace is not None and trace_option is not None:
        raise InputError("give the trace once: as the TRACE argument or as --trace, not both")
    request = request_of(SimulateRequest, {**locals(), **groups},
                         trace=trace if trace is not None else trace_option)
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
                          "(from 10 s on in s)",
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


@app.command()
@with_group(RunOptions, RUN, before="tp")
@with_group(ServerOptions, SERVING_TERMS, after="step_overhead_ms")
@with_group(ServerOptions, SPECULATIVE, after="disable_cuda_graph")
def tune(
    trace: Path = typer.Option(..., "--trace", help=(
        "Trace file to tune on (Azure CSV, Mooncake JSONL, BurstGPT CSV).")),
    slo_ttft: float = typer.Option(..., "--slo-ttft", help="TTFT SLO, ms."),
    slo_itl: float = typer.Option(..., "--slo-itl", help=SLO_ITL_HELP),
    model: str = declared(ServerOptions, "model"),
    gpu: str | None = declared(ServerOptions, "gpu"),
    trace_format: str | None = declared(WorkloadOptions, "trace_format"),
    qps: float | None = declared(WorkloadOptions, "qps", "tune"),
    rate_scale: float | None = declared(WorkloadOptions, "rate_scale", "tune"),
    max_requests: int | None = declared(WorkloadOptions, "max_requests"),
    duration: float | None = declared(WorkloadOptions, "duration"),
    sm_group_nums: str | None = typer.Option(None, "--sm-group-nums", help=(
        "sm_group_num values to try (default: every distinct one).")),
    divisors: str | None = typer.Option(None, "--divisors", help=(
        "decode_bs_divisor values to try (default 12,24,36,48,72).")),
    budgets: str | None = typer.Option(None, "--budgets", help=(
        "split_forward_token_budget values (default 4096,16384,65536).")),
    no_single_levels: bool = typer.Option(False, "--no-fixed-splits", help="Do not try single fixed splits."),
    slo_margins: str | None = typer.Option(None, "--slo-margins", help=(
        "Also try SLO levels (gen-config --slo-itl) sized for these shares of --slo-itl (default "
        "1,0.9,0.8), or 'none'.")),
    cost_model: str = declared(ServerOptions, "cost_model"),
    s_sat: float | None = declared(ServerOptions, "s_sat"),
    bandwidth_efficiency: float | None = declared(ServerOptions, "bandwidth_efficiency", "tune"),
    mfu: float | None = declared(ServerOptions, "mfu"),
    step_overhead_ms: float | None = declared(ServerOptions, "step_overhead_ms", "tune"),
    calibration: Path | None = declared(ServerOptions, "calibration", "tune"),
    mem_fraction_static: float | None = typer.Option(None, "--mem-fraction-static", help=(
        "SGLang's flag (default: SGLang's own with chunking off).")),
    max_prefill_tokens: int = declared(ServerOptions, "max_prefill_tokens"),
    kv_bytes: float | None = declared(ServerOptions, "kv_bytes"),
    kv_cache_dtype: str | None = declared(ServerOptions, "kv_cache_dtype"),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help=(
        "Requests run to their max_new_tokens (benchmark traffic).")),
    no_prefix_cache: bool = declared(ServerOptions, "no_prefix_cache"),
    context_length: int | None = declared(ServerOptions, "context_length"),
    disable_cuda_graph: bool = declared(ServerOptions, "disable_cuda_graph"),
    tp: int = declared(ServerOptions, "tp"),
    dp: int | None = declared(DeploymentOptions, "dp", "tune"),
    load_balance_method: str | None = declared(DeploymentOptions, "load_balance_method", "tune"),
    disagg: str | None = typer.Option(None, "--disagg", help=(
        "Not taken: tune searches pdmux knobs; compare PD disaggregation with pdmux simulate or pdmux "
        "capacity --disagg XPYD.")),
    output: Path | None = OUTPUT_YAML_OPTION,
    show_all: bool = typer.Option(False, "--all", help="Show every config compared, not just the best."),
    as_json: bool = JSON_OPTION,
    sglang: str = sglang_option(),
    **groups: Any,
) -> None:
    """Search pdmux YAML knobs for the best SLO attainment on a trace; write the winning YAML.

    Tries sm_group_num, decode_bs_divisor or fixed splits, SLO levels for --slo-itl (and 0.9x, 0.8x
    it), and split_forward_token_budget, one simulation each, in parallel on the cores available; with
    --dp, each on that many replicas behind a router."""
    from ..workflows.tune import TuneRequest
    from ..workflows.tune import tune as run

    outcome = run(request_of(TuneRequest, {**locals(), **groups}),
                  progress_factory(show_progress(as_json)))
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
