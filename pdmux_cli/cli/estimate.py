"""The ``estimate`` command: ITL and prefill time per policy from the cost model.

Parse options, call one workflow (:mod:`pdmux_cli.workflows`), render its result. It imports none of torch,
cuda-python, numpy or matplotlib (tests/test_cli_imports.py checks it).
"""

from __future__ import annotations

from typing import Any

import typer

from ..workflows.estimate import EstimateRequest
from ..workflows.fields import DEPLOYMENT, SERVING_TERMS, SPECULATIVE
from .common import JSON_HELP, NON_FINITE, console, print_json, require_finite
from .options import declared, request_of, with_declared, with_group
from .root import app


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
