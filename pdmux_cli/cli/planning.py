"""The planning commands: ``splits``, ``estimate``, ``gen-config``, ``check-config``.

Parse options, call one workflow (:mod:`pdmux_cli.workflows`), render its result. None of these import
torch, cuda-python, numpy or matplotlib (tests/test_cli_imports.py checks it).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from ..workflows.check_config import CheckConfigRequest
from ..workflows.estimate import EstimateRequest
from ..workflows.fields import DEPLOYMENT, SERVING_TERMS, SPECULATIVE
from ..workflows.gen_config import GenConfigRequest
from ..workflows.splits import SplitsRequest
from .app import app
from .options import declared, request_of, with_declared, with_group
from .common import (
    NON_FINITE,
    console,
    fail_line,
    print_json,
    print_note,
    require_finite,
    styled,
    warn_line,
)

JSON_HELP = "Print JSON (stable keys, units in the key names)."
#: Most problems check-config shows as table rows (a runaway file can have tens of thousands).
MAX_PROBLEM_ROWS = 50


@app.command()
@with_declared(SplitsRequest, "splits")
def splits(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    **options: Any,
) -> None:
    """The SM split levels (stream groups) SGLang builds, the level it picks per decode batch, and prefill
    layers per round."""
    from ..workflows.splits import AllGpusSplits
    from ..workflows.splits import splits as run_splits

    result = run_splits(request_of(SplitsRequest, options))
    if as_json:
        print_json(result.to_dict())
    elif isinstance(result, AllGpusSplits):
        _print_all_gpus(result)
    else:
        from . import render

        con = console()
        for table in render.splits_tables(result.info):
            con.print(table)
        for note in result.notes:
            print_note(con, note)


def _print_all_gpus(result: Any) -> None:
    """``splits --all``'s table: every GPU profile's levels, or why SGLang cannot split it."""
    from rich.table import Table

    table = Table(title=f"SGLang's split levels on every GPU profile (sm_group_num {result.sm_group_num})",
                  title_justify="left")
    for col, just in (("GPU", "left"), ("SMs", "right"), ("cc", "right"),
                      ("levels (prefill/decode SMs)", "left"), ("source", "left")):
        table.add_column(col, justify=just)
    for r in result.gpus:
        levels = (" ".join(f"{g['prefill_sms']}/{g['decode_sms']}" for g in r["groups"][1:-1]) if r["groups"]
                  else styled(r["error"], "red"))
        source = {"sglang-auto": "SGLang auto", "cuda-granularity": "needs manual_divisions",
                  "manual": "manual", None: "-"}[r["source"]]
        table.add_row(r["gpu"], str(r["sm_count"] or "?"), r["compute_capability"], levels, source)
    console().print(table)


@app.command()
@with_group(EstimateRequest, DEPLOYMENT, after="tp", command="estimate")
@with_group(EstimateRequest, SERVING_TERMS, after="step_overhead_ms", command="estimate")
@with_group(EstimateRequest, SPECULATIVE, after="disable_cuda_graph", command="estimate")
@with_declared(EstimateRequest, "estimate", after={"as_json": "tp"})
def estimate(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    sglang: str = declared(EstimateRequest, "sglang"),
    **options: Any,
) -> None:
    """ITL, prefill time and tokens gained for prefill-first, chunked, mixed-chunk prefill and PD multiplexing
    (and PD disaggregation with --disagg).

    With no options: the chapter's scenario (Qwen3-8B on H100 SXM, 32 x 2048, an 8192-token prompt);
    --cost-model chapter reproduces the chapter's table."""
    from ..workflows.estimate import estimate as run_estimate
    from . import render

    request = request_of(EstimateRequest, options, sglang=sglang)
    result = run_estimate(request)
    problem = NON_FINITE + ("; or the calibration's curves" if result.calibrated else "")
    if as_json:
        print_json(result.to_dict(), problem)
        return
    est = result.estimate
    require_finite(result.to_dict(), problem)
    con = console()
    con.print(render.estimate_table(est))
    if request.all_levels:
        con.print(render.levels_table(est))
    if request.plot is not None:
        xpyd = est.scenario.disagg
        point = f"; {xpyd[0]}P{xpyd[1]}D disaggregation as a point at its TTFT" if xpyd is not None else ""
        con.print(f"wrote {request.plot} (ITL against prefill time, every level{point})")


@app.command("gen-config")
@with_declared(GenConfigRequest, "gen-config")
def gen_config(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    sglang: str = declared(GenConfigRequest, "sglang", "gen-config"),
    **options: Any,
) -> None:
    """SGLang's pdmux YAML for a GPU, validated, plus the launch flags.

    With --slo-itl MS (no --tune): SLO levels, manual_divisions giving each decode batch the fewest
    decode SMs that keep its ITL within MS at the workload's context, from the cost model.
    With --tune: the sm_group_num, thresholds and token budget with the best SLO attainment on a
    trace (ties: goodput), found by simulating it."""
    from ..workflows.gen_config import gen_config as run_gen_config

    progress = None
    if options["tune"]:
        from .options import progress_factory

        progress = progress_factory(not as_json)
    result = run_gen_config(request_of(GenConfigRequest, options, sglang=sglang), progress=progress)
    if as_json:
        print_json(result.to_dict())
        return
    if result.tune_search is not None:
        # tune's comparison table: to stderr while stdout carries the YAML, else to stdout (as 'pdmux tune')
        from .simulate import print_tune_search

        print_tune_search(console(stderr=result.output is None), result.tune_search)
    if result.support.state == "no":
        warn_line(f"{result.model_name}: {result.support.reason}: this config cannot serve it")
    if result.output is None:
        sys.stdout.write(result.yaml)
        if result.slo is not None and sys.stderr is not None:
            _print_slo_view(console(stderr=True), result.slo)
        if sys.stderr is not None:
            sys.stderr.write(f"# save as {result.path_text}, then launch:\n# {result.launch_command}\n")
            for note in result.sglang_notes:
                sys.stderr.write(f"# {note}\n")
    else:
        con = console()
        if result.slo is not None:
            _print_slo_view(con, result.slo)
        every = f"; every one of the {result.tp} GPUs loads it" if result.tp > 1 else ""
        con.print(f"wrote {result.output} ({result.gpu}, {result.sm_count} SMs{every})")
        con.print(result.launch_command, soft_wrap=True, markup=False)
        for note in result.sglang_notes:
            print_note(con, note)


def _print_slo_view(con: Any, view: tuple) -> None:
    """gen-config --slo-itl's table of levels and its notes."""
    from .slo import levels_table

    levels, setup, notes = view
    con.print(levels_table(levels, setup))
    for note in notes:
        print_note(con, note)
    con.print(f"cost model: {setup.step_model.source}", soft_wrap=True)


@app.command("check-config")
@with_declared(CheckConfigRequest, "check-config", after={"as_json": "sm_group_num"})
def check_config(
    path: Path = typer.Argument(..., help="The pdmux YAML to check."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    sglang: str = declared(CheckConfigRequest, "sglang"),
    **options: Any,
) -> None:
    """Validate a pdmux YAML against each SGLang revision pdmux has read (--sglang decides the exit code:
    2 if it refuses the file or any problem of 0.5.23's rules or the driver's is found; 1 if pdmux has not
    read its loader; warnings alone: 0)."""
    from ..workflows.check_config import check_config as run_check_config

    result = run_check_config(request_of(CheckConfigRequest, options, path=path, sglang=sglang))
    if as_json:
        print_json(result.to_dict())
    else:
        _print_check(result, options["model"])
    if not result.judged:  # a revision pdmux follows without its loader's rules: it cannot answer
        fail_line(f"{result.path}: not judged under {result.chosen.key}: {result.chosen_verdict.reason}; "
                  "the other revisions' verdicts are above")
        raise typer.Exit(1)
    if not result.ok:
        refused = f"{result.chosen.name} refuses it ({result.chosen_verdict.stage})"
        if result.errors:
            what = f"{len(result.errors)} problem(s)"
        elif result.chosen_verdict.accepted and result.speculation_line is not None:
            what = result.speculation_line
        else:
            what = refused
        fail_line(f"{result.path}: {what}")
        raise typer.Exit(2)


def _print_check(result: Any, model: str | None) -> None:
    """check-config's tables: the problems found, each revision's verdict, the model's support, the OK
    line."""
    from rich.table import Table

    from ..sglang import pdmux_config as pc
    from ..sglang.revisions import REVISIONS

    con = console()
    path, problems, chosen = result.path, result.problems, result.chosen
    device = f"{result.gpu} ({result.sm_count} SMs)"
    if problems:
        warnings = len([p for p in problems if not pc.is_error(p)])
        counts = ", ".join(([f"{len(problems) - warnings} problem(s)"] if len(problems) > warnings else []) +
                           ([f"{warnings} warning(s)"] if warnings else []))
        table = Table(title=f"{path}: {counts} for {device}", title_justify="left")
        table.add_column("where")
        table.add_column("refused by", justify="left")
        table.add_column("problem")
        for p in problems[:MAX_PROBLEM_ROWS]:
            table.add_row(p.where, pc.RULE_LABELS.get(p.rule, p.rule), p.message)
        if len(problems) > MAX_PROBLEM_ROWS:
            table.caption = f"first {MAX_PROBLEM_ROWS} of {len(problems)} problems; --json lists them all"
            table.caption_justify = "left"
        con.print(table)
    table = Table(title=f"{path} per SGLang revision ({result.gpu}, {result.sm_count} SMs)",
                  title_justify="left")
    table.add_column("SGLang")
    table.add_column("verdict")
    table.add_column("why")
    for v in result.revisions:
        mark = " *" if v.revision == chosen.key else ""
        said = "runs it" if v.accepted else "not judged" if v.accepted is None else f"refuses ({v.stage})"
        table.add_row(v.revision + mark, said, v.reason or "-")
    table.caption = "\n".join(["* --sglang (decides the exit code)", *(REVISIONS[v.revision].cite
                                                                     for v in result.revisions)])
    table.caption_justify = "left"
    con.print(table)
    for v in result.revisions:
        failure = REVISIONS[v.revision].startup_failure
        if v.revision == chosen.key and failure:
            con.print(f"{v.revision}: {failure}")
    if result.support_line:
        warn_line(f"{model}: {result.support_line}")
    if result.ok:
        warned = f" ({len(problems)} warning(s) above)" if problems else ""
        con.print(f"{path}: OK for {device} under {chosen.name}{warned}")
