"""``pdmux accuracy``: how far the roofline cost model is from the public measurements it ships with.

Parse, call :mod:`pdmux_cli.costmodel.accuracy`, render. Pure Python; about a second.
"""

from __future__ import annotations

import math

import typer

from . import app
from .common import console, print_json, print_note


def _pct(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.1%}"


@app.command()
def accuracy(
    as_json: bool = typer.Option(False, "--json", help="Print JSON (errors as fractions: 0.05 = 5%)."),
) -> None:
    """Predict every shipped measurement (Vidur, NanoFlow, aiconfigurator, SGLang's green-context tables) with the roofline cost model:
    median and p90 error per term, and the worst point.

    Where a term was fitted to the same points, each model is predicted by a fit that left it out."""
    from ..costmodel.accuracy import METHODS, report, term_dict

    terms = report()
    if as_json:
        print_json({"terms": [term_dict(t) for t in terms]})
        return
    from rich.table import Table

    table = Table(title="Roofline cost model vs measurements (|predicted - measured| / measured)",
                  title_justify="left")
    for col, just in (("term", "left"), ("method", "left"), ("points", "right"), ("median", "right"),
                      ("p90", "right"), ("bias", "right"), ("worst", "right")):
        table.add_column(col, justify=just)
    for t in terms:
        worst = t.worst
        table.add_row(t.term, t.method, str(len(t.points)), _pct(t.median_abs_error), _pct(t.p90_abs_error),
                      f"{t.median_error:+.1%}", f"{worst.error:+.0%}" if worst else "-")
    table.caption = "bias: median signed error (> 0: the model predicts too long or too much)"
    table.caption_justify = "left"
    con = console()
    con.print(table)
    for t in terms:
        if t.worst is not None:
            con.print(f"worst {t.term}: {t.worst.what} ({t.worst.error:+.0%}); data: {t.data}", soft_wrap=True)
    for method, meaning in METHODS.items():
        print_note(con, f"{method}: {meaning}")
    print_note(con, "Vidur has no attention times: the step terms are one layer's GEMMs and element-wise ops; "
                    "attention is its own term. Green ctx: SGLang's tables name no model or TP, so their shapes "
                    "(time on s SMs over the whole GPU's) are compared. Data: profiles/measurements/ (Vidur MIT, "
                    "NanoFlow Apache-2.0, aiconfigurator-core 0.12.0 Apache-2.0, SGLang 56f74d24 Apache-2.0)")
