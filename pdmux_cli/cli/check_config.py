"""The ``check-config`` command: a pdmux YAML checked against each SGLang revision pdmux has read.

Parse options, call one workflow (:mod:`pdmux_cli.workflows`), render its result. It imports none of torch,
cuda-python, numpy or matplotlib (tests/test_cli_imports.py checks it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..workflows.check_config import CheckConfigRequest
from .common import JSON_HELP, console, fail_line, print_json, warn_line
from .options import declared, request_of, with_declared
from .root import app

#: Most problems check-config shows as table rows (a runaway file can have tens of thousands).
MAX_PROBLEM_ROWS = 50


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
        if result.errors:  # as many as the table counts (all but the warnings), and the verdict
            from ..sglang.pdmux_config import is_error

            shown = sum(1 for p in result.problems if is_error(p))
            what = f"{shown} problem(s)" + (f"; {refused}" if result.chosen_verdict.accepted is False else "")
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
