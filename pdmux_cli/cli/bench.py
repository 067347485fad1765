"""``pdmux bench``: parse into :class:`pdmux_cli.workflows.bench.BenchRequest`, run the use case
(:func:`pdmux_cli.workflows.bench.bench`: the kernel bench, ``--model``'s replay, their ``--dry-run`` plans),
render its result and end a run that stopped (:func:`exit_for`).

Module level imports only typer and the CLI helpers: torch, cuda-python, numpy and matplotlib are
imported by the use case, and only on the paths that need them (tests/test_bench_cpu.py checks
that importing ``pdmux_cli.cli`` loads none of them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..util.errors import InputError
from .root import app
from .common import console, fail_line, print_json
from .options import deferred, progress_factory, request_of, with_options

#: bench's options in their --help order: its request's declared fields, --json and --out (--output's old
#: name, hidden).
BENCH_OPTIONS = ("dry_run", "gpu", "sms", "cc", "repeats", "quick", "gemm_shape", "buffer_bytes", "levels",
                 "device", "skinny_gemm", "sm_group_num", "output", "out", "as_json", "model", "decode_bs",
                 "context", "prompt_tokens", "token_budget", "decode_bs_divisor", "calibration", "cpu")


def _bench_options(function: Any) -> Any:
    """bench's options, built from its request's declarations when typer first builds the command
    (:func:`~.options.deferred`: the request's module is imported only then)."""
    from ..workflows.bench import BenchRequest

    return with_options(BenchRequest, BENCH_OPTIONS, "bench")(function)


@app.command()
@deferred(_bench_options)
def bench(
    as_json: bool = typer.Option(False, "--json",
                                 help="Print JSON (the plan with --dry-run, else the results) instead of "
                                 "tables."),
    out: Path | None = typer.Option(None, "--out", hidden=True, help="--output's old name (old scripts)."),
    **options: Any,
) -> None:
    """Measure a GEMM and an HBM-read kernel on green-context SM partitions: solo curves, co-run at SGLang's
    levels.

    Writes the calibration 'pdmux estimate --calibration' uses. Needs an NVIDIA GPU, driver CUDA >= 12.4,
    torch with CUDA, cuda-python and NVRTC (pdmux's 'bench' extra); --dry-run needs none of them.

    With --model: replay that model's layers instead, in SGLang's pdmux loop at each level, next to the
    estimate."""
    from ..workflows.bench import BenchDryRun, BenchRequest
    from ..workflows.bench import bench as run_bench

    if out is not None:  # --output's old name, kept for scripts written before bench took --output
        if options["output"] is not None:
            raise InputError("--out is --output's old name: give one of them")
        options["output"] = out
    result = run_bench(request_of(BenchRequest, options), progress=progress_factory(True))
    if as_json:
        print_json(result.to_dict())
    elif isinstance(result, BenchDryRun):
        _print_dry_run(result)
    else:
        _print_results(result)
    if not isinstance(result, BenchDryRun):
        exit_for(result.results, result.out_dir)


def print_tables_and_notes(tables: Any, notes: Any) -> Any:
    """Print ``tables`` (rich tables) then ``notes`` (findings or lines) on the console; returns the
    console for what the caller prints after them."""
    from .common import print_note

    con = console()
    for table in tables:
        con.print(table)
    for note in notes:
        print_note(con, note)
    return con


def _print_dry_run(result: Any) -> None:
    """A ``--dry-run`` plan's tables (the kernel bench's, or the replay's with the estimate), its notes and
    the line saying nothing was measured."""
    from . import bench_tables

    if result.replay:
        con = print_tables_and_notes(bench_tables.replay_plan_tables(result.plan, result.predicted),
                                     result.notes)
    else:
        con = print_tables_and_notes(bench_tables.plan_tables(result.plan), result.plan.notes)
    out = result.out
    con.print("dry run: nothing was measured" + (f"; nothing written to {out}" if out else ""))


def _print_results(result: Any) -> None:
    """A run's summary tables (the kernel bench's, or the replay's with its measured fixed time per decode
    step), notes and the files written."""
    from . import bench_tables

    res = result.results
    if result.replay:
        con = print_tables_and_notes(bench_tables.replay_tables(res), res.notes)
        own = result.calibration
        if own is not None and own.whole_gpu is not None:
            con.print(f"measured fixed time per decode step: {own.whole_gpu.decode_fixed_s * 1e3:.3f} ms "
                      f"(the estimate was {own.whole_gpu.uncalibrated_median_error:.0%} off on the whole "
                      "GPU's step)")
    else:
        con = print_tables_and_notes(bench_tables.summary_tables(res), res.notes)
    for path in result.written:
        con.print(f"wrote {path}")


def exit_for(res: Any, out_dir: Path | None) -> None:
    """End a run that stopped: exit 130 after Ctrl-C, 1 after an error or a failed step (one stderr line,
    naming where the finished steps are); return for a complete run. ``res``: results with ``interrupted``,
    ``error`` and ``step_errors`` (the kernel bench's or the model replay's)."""
    if res.interrupted:
        fail_line("interrupted by Ctrl-C" + (f"; the finished steps are in {out_dir}" if out_dir else ""))
        raise typer.Exit(130)
    if res.error or res.step_errors:
        first = res.error or res.step_errors[0]
        more = f" ({len(res.step_errors)} step(s) failed)" if res.step_errors else ""
        fail_line(first + more + (f"; the finished steps are in {out_dir}" if out_dir else ""))
        raise typer.Exit(1)
