"""The ``splits`` command: SGLang's SM split levels (stream groups) on a GPU.

Parse options, call one workflow (:mod:`pdmux_cli.workflows`), render its result. It imports none of torch,
cuda-python, numpy or matplotlib (tests/test_cli_imports.py checks it).
"""

from __future__ import annotations

from typing import Any

import typer

from ..workflows.splits import SplitsRequest
from .common import JSON_HELP, console, print_json, print_note, styled
from .options import request_of, with_declared
from .root import app


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
