"""``pdmux calibrate``: fit the cost model's whole-GPU terms to the user's own SGLang, or merge calibrations.

Parse into a request, call :func:`pdmux_cli.workflows.calibrate.calibrate` (readers, fits, the file
written whole or not at all), render.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from ..workflows.calibrate import CalibrateRequest
from .root import app
from .common import console, print_json, print_note
from .options import request_of, with_options

#: Points shown in the table (``--json`` has them all).
MAX_TABLE_ROWS = 30


def _ms(seconds: float) -> str:
    """Milliseconds in three significant figures, never in e-notation."""
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


def _off(predicted: float, measured: float) -> str:
    """A prediction in ms and how far off the measurement it is (``"8.23 +35%"``)."""
    return f"{_ms(predicted)} {(predicted - measured) / measured:+.0%}"


def _table(fit: Any, title: str) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col, just in (("step", "left"), ("from", "left"), ("batch", "right"), ("tokens", "right"),
                      ("n", "right"),
                      ("measured", "right"), ("calibrated", "right"), ("shipped", "right")):
        table.add_column(col, justify=just, no_wrap=True)
    rows = sorted(fit.rows, key=lambda r: (r.point.kind, r.point.source, r.point.batch, r.point.tokens))
    shown = rows
    if len(rows) > MAX_TABLE_ROWS:  # every one-batch point, and an even sample of the server-log ones
        bench = [r for r in rows if r.point.source != "server log"][:MAX_TABLE_ROWS]
        log = [r for r in rows if r.point.source == "server log"]
        room = MAX_TABLE_ROWS - len(bench)
        shown = bench + (log[:: max(1, -(-len(log) // room))] if room > 0 else [])
    for r in shown:
        p = r.point
        table.add_row(p.kind, "log" if p.source == "server "
                                                   "log" else "bench", str(p.batch), f"{p.tokens:,.0f}",
                      str(p.count), _ms(p.measured_s), _off(r.calibrated_s, p.measured_s),
                      _off(r.uncalibrated_s, p.measured_s))
    if len(rows) > len(shown):
        table.caption = f"{len(shown)} of {len(rows)} points shown; --json lists them all"
        table.caption_justify = "left"
    return table


#: calibrate's options in their --help order: its request's declared fields and --json.
CALIBRATE_OPTIONS = ("sglang_bench", "sglang_log", "bench_serving", "workers", "model", "gpu", "tp",
                     "kv_bytes", "kv_cache_dtype", "merge", "output", "as_json", "max_replay_requests",
                     "max_points", "max_log_lines")


@app.command()
@with_options(CalibrateRequest, CALIBRATE_OPTIONS, "calibrate")
def calibrate(
    as_json: bool = typer.Option(False, "--json", help="Print JSON (the fit, every point, the YAML)."),
    **options: Any,
) -> None:
    """Fit the cost model's whole-GPU terms to your own SGLang's one-batch results and server logs, and
    its serving terms to your bench_serving runs.

    The calibration then goes to estimate, simulate and tune with --calibration FILE; --merge joins it
    with a 'pdmux bench' calibration of the same GPU (SM-partition terms)."""
    from ..workflows.calibrate import calibrate as run

    request = request_of(CalibrateRequest, options)
    output = request.output
    result = run(request)
    if as_json:
        print_json(result.to_dict())
    elif result.mode == "merge":
        if output is None:
            sys.stdout.write(result.yaml)
        else:
            console().print(f"wrote {output} ({result.calibration.gpu_name}: SM-partition and whole-GPU "
                            "terms)")
    else:
        _print_fit(result)


def _print_fit(result: Any) -> None:
    """The whole-GPU fit's table and lines and/or the serving fit's, then the YAML or where it went."""
    output = result.request.output
    con = console(stderr=output is None)
    if result.mode == "whole_gpu":
        fit, base, t = result.fit, result.base, result.fit.terms
        con.print(_table(fit, f"{result.model.name} on {result.profile.name}, ms: measured, calibrated, "
                              "shipped model"))
        con.print(f"fitted: {fit.decode_mode} (decode), {fit.prefill_mode} (prefill); median error "
                  f"{t.median_error:.1%} (shipped model: {t.uncalibrated_median_error:.1%}) on "
                  f"{result.points} points",
                  soft_wrap=True)
        con.print(f"efficiencies: GEMM bandwidth {t.gemm_bandwidth_efficiency:.3f} (shipped "
                  f"{base.eff.gemm.bandwidth_efficiency:.3f}), KV bandwidth {t.kv_bandwidth_efficiency:.3f} "
                  f"({base.eff.decode_attention.bandwidth_efficiency:.3f}), GEMM compute "
                  f"{t.gemm_peak_efficiency:.3f} ({base.eff.gemm.peak_efficiency:.3f}), attention compute "
                  f"{t.attention_peak_efficiency:.3f} ({base.eff.prefill_attention.peak_efficiency:.3f}); "
                  f"{t.decode_fixed_s * 1e3:+.2f} ms per decode step", soft_wrap=True)
        for note in result.notes:
            print_note(con, note)
    if result.serving is not None:
        s = result.serving
        _print_serving(con, s.terms, s.before, s.after, s.notes)
    if output is None:
        sys.stdout.write(result.yaml)
    elif result.mode == "whole_gpu":
        con.print(f"wrote {output}; use it with --calibration {output} (estimate, simulate, "
                  "tune)", soft_wrap=True)
    else:
        con.print(f"wrote {output}; use it with --calibration {output} (simulate, capacity, "
                  "tune)", soft_wrap=True)


def _print_serving(con: Any, terms: Any, before: dict, after: dict, notes: list[str]) -> None:
    """The serving fit: terms, and the median error per metric kind with the shipped and fitted terms."""
    import statistics

    con.print(f"serving terms: admission delay {terms.admission_delay_s * 1e3:g} ms, admission interval "
              f"{terms.admission_interval_s * 1e3:g} ms, {terms.per_request_step_s * 1e3:g} ms per request "
              f"per step (fitted to {terms.runs} bench_serving run(s))", soft_wrap=True)
    for kind, errors in after.items():
        shipped = statistics.median(before[kind]) if before.get(kind) else float("nan")
        con.print(f"  {kind}: median error {statistics.median(errors):.1%} (shipped terms: {shipped:.1%})")
    for note in notes:
        print_note(con, note)
