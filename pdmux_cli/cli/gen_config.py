"""The ``gen-config`` command: SGLang's pdmux YAML for a GPU, plus the launch flags.

Parse options, call one workflow (:mod:`pdmux_cli.workflows`), render its result. It imports none of torch,
cuda-python, numpy or matplotlib (tests/test_cli_imports.py checks it).
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from ..workflows.gen_config import GenConfigRequest
from .common import JSON_HELP, console, print_json, print_note, warn_line
from .options import declared, request_of, with_declared
from .root import app


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
