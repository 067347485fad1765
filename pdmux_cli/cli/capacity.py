"""``pdmux capacity``: the highest request rate each policy sustains within the SLO, and a verdict.

Parse (the trace, server and cost-model options are simulate's, declared in :mod:`.options`) into a
request, call :func:`pdmux_cli.workflows.capacity.capacity`, render; matplotlib only for ``--plot``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..util.errors import InputError
from ..workflows.deployment import DeploymentOptions
from ..workflows.capacity import CapacityRequest
from ..workflows.fields import DEPLOYMENT, GENERATED_SHARED_PREFIX, RUN, SERVING_TERMS, SPECULATIVE, WORKLOAD
from ..workflows.run_options import RunOptions
from ..workflows.server import ServerOptions
from ..workflows.workload import WorkloadOptions
from .root import app
from .common import console, print_json, print_note
from .options import (
    JSON_OPTION,
    TRACE_ARGUMENT,
    TRACE_OPTION,
    progress_factory,
    request_of,
    show_progress,
    with_group,
    with_options,
)

def _table(result: Any, title: str, width: int | None = None) -> Any:
    """The capacity table: a row per policy. On more than one GPU, a GPUs count, the layout and the rate per
    GPU; ``width`` (columns): the layout goes under the policy's name, then the runs column goes, then the
    headers take two lines, until the table fits (as simulate's tables fit a terminal of 80)."""
    from rich.console import Console

    shapes = [(True, True, False), (False, True, False), (False, False, False), (False, False, True)]
    if not any(p.layout.gpus > 1 for p in result.policies):  # no layout to move: the runs, then the headers
        shapes = [(True, True, False), (True, False, False), (True, False, True)]
    if width is None:
        return _build_table(result, title, *shapes[0])
    wide = Console(width=10_000)
    for shape in shapes:
        table = _build_table(result, title, *shape)
        if wide.measure(table).maximum <= width:
            return table
    return table


def _build_table(result: Any, title: str, layout_column: bool, runs: bool, two_line: bool) -> Any:
    from rich.table import Table

    from .simulate_tables import latency_cell

    policies = result.policies
    counts = sorted({p.gpus for p in policies})
    many = counts[-1] > 1 if counts else False
    layouts = any(p.layout.gpus > 1 for p in policies)
    over = ("req/s" if not many else f"req/s over all {counts[0]} GPUs" if len(counts) == 1
            else "req/s over all of a policy's GPUs")
    table = Table(title=title, title_justify="left",
                  caption=f"max rate: highest arrival rate ({over}) at which >= {result.target:.0%} of "
                          f"requests meet TTFT <= {result.slo_ttft_ms:g} ms and their p99 ITL <= "
                          f"{result.slo_itl_ms:g} ms"
                          + ("; per GPU: max rate / GPUs" if many else "")
                          + "; goodput and p99s (ms; 10 s and more in s) at that rate"
                          + ("; (lo-hi): the rate's 80% interval, the TTFT and ITL scaled by pdmux's "
                             "measured error" if any(p.rate_interval for p in policies) else ""),
                  caption_justify="left")
    in_cell = layouts and not layout_column
    longest_word = max((len(w) for p in policies for w in p.label.split()), default=6)
    table.add_column("policy" + (("\n" if two_line else " / ") + "layout" if in_cell else ""), justify="left",
                     overflow="fold", min_width=longest_word)  # a name wraps between words, not in one
    columns = [("layout", "left")] if layout_column and layouts else []
    columns += [("GPUs", "right"), ("max rate", "right")] + ([("per GPU", "right")] if many else [])
    columns += [("SLO met", "right"), ("goodput", "right"), ("TTFT p99", "right"), ("ITL p99", "right")]
    columns += [("runs", "right")] if runs else []
    for col, just in columns:
        table.add_column(col.replace(" ", "\n") if two_line else col, justify=just,
                         no_wrap=col in ("layout", "max rate"))  # an interval is never cut
    for p in policies:
        at = p.at
        cells = {"layout": str(p.layout), "GPUs": str(p.gpus), "max rate": _rate_cell(p), "per "
                                                                                    "GPU": _per_gpu_text(p),
                 "SLO met": f"{at.slo_attainment:.1%}" if at else "-",
                 "goodput": f"{at.goodput_rps:.3g}" if at else "-",
                 "TTFT p99": latency_cell(at.ttft_p99_ms) if at else "-",
                 "ITL p99": latency_cell(at.itl_p99_ms) if at else "-", "runs": str(len(p.points))}
        label = f"{p.label}\n{p.layout}" if in_cell else p.label
        table.add_row(label, *(cells[col] for col, _ in columns), end_section=in_cell)
    return table


def _rate_cell(p: Any) -> str:
    """The capacity with its 80% interval under it: ``"4.23\\n(3.1-5.0)"`` (an end that is only a bound:
    ``>=``)."""
    from ..messages import rate_text

    text = rate_text(p)
    if p.rate_interval is None or p.bound:
        return text
    (low, high), (low_bound, high_bound) = p.rate_interval, p.interval_bounds
    def g(x: float) -> str:
        return f"{x:.0f}" if x >= 100 else f"{x:.2g}"

    lowest = p.points[0].rate_rps if p.points else low
    lo = f"<{g(lowest)}" if low_bound == "below" else g(low)
    hi = (">=" if high_bound == "above" else "") + g(high)
    return f"{text}\n({lo}-{hi})"


def _per_gpu_text(p: Any) -> str:
    """The capacity per GPU, with the bound of :func:`pdmux_cli.simulate.capacity.rate_text`."""
    if p.bound == "below":
        return f"<{p.points[0].rate_rps / p.gpus:.3g}" if p.points else "0"
    return (">=" if p.bound == "above" else "") + f"{p.per_gpu_rps:.3g}"


#: capacity's options in their --help order: its own (the trace, --json) and its request's declared fields;
#: the shared groups follow with_group's placing.
CAPACITY_OPTIONS = (
    "trace", "trace_option", "model", "gpu", "policies", "chunk_sizes", "mixed_chunk_sizes", "config",
    "unreleased_fallback", "prefill_decode_interval", "slo_ttft", "slo_itl", "target", "tolerance",
    "cost_model", "s_sat", "calibration", "step_overhead_ms", "kv_bytes", "kv_cache_dtype",
    "mem_fraction_static", "max_prefill_tokens", "ignore_eos", "no_prefix_cache", "context_length",
    "disable_cuda_graph", "tp", "as_json", "plot", "sglang")


@app.command()
@with_group(ServerOptions, SERVING_TERMS, after="step_overhead_ms")
@with_group(ServerOptions, SPECULATIVE, after="disable_cuda_graph")
@with_group(WorkloadOptions, GENERATED_SHARED_PREFIX, after="output_tokens")
@with_group(DeploymentOptions, DEPLOYMENT, after="tp")
@with_group(RunOptions, RUN, before="tp")
@with_group(CapacityRequest, WORKLOAD, after="trace_option", command="capacity")
@with_options(CapacityRequest, CAPACITY_OPTIONS, "capacity")
def capacity(
    trace: Path | None = TRACE_ARGUMENT,
    trace_option: Path | None = TRACE_OPTION,
    as_json: bool = JSON_OPTION,
    **options: Any,
) -> None:
    """The highest request rate each policy sustains within the SLO, and whether to turn pdmux on.

    Retimes the trace (as --qps does) and bisects the arrival rate per policy with the simulator, in
    parallel on the cores available. The rate is the whole deployment's: one server of --tp GPUs,
    --dp replicas of it behind a router, or --disagg XPYD instances; the table also gives it per GPU."""
    from ..workflows.capacity import capacity as run

    if trace is not None and trace_option is not None:
        raise InputError("give the trace once: as the TRACE argument or as --trace, not both")
    request = request_of(CapacityRequest, options, trace=trace if trace is not None else trace_option)
    outcome = run(request, progress_factory(show_progress(as_json)))
    if as_json:
        print_json(outcome.to_dict(), nan_as_null=True)
        return
    con = console()
    con.print(_table(outcome.result, outcome.title, con.width))
    con.print("verdict: " + outcome.result.verdict(), soft_wrap=True)
    for note in outcome.notes:
        print_note(con, note)
    if outcome.plot is not None:
        con.print(f"wrote {outcome.plot} (SLO attainment vs request rate)")
    sys.stdout.flush()
