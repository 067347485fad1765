"""``pdmux calibrate``: fit the cost model's whole-GPU terms to the user's own SGLang, or merge calibrations.

Parse, call :mod:`pdmux_cli.sglang.measurement_readers` (readers) and :mod:`pdmux_cli.costmodel.whole_gpu_fit`
(the fit), render; the file is written whole or not at all.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path
from typing import Any

import typer

from ..util.atomic import check_writable, refuse_overwriting_inputs
from ..util.errors import InputError
from .app import app
from .common import console, gpu_file, model_file, output_path, print_json, print_note, write_atomic

#: Points shown in the table (``--json`` has them all).
MAX_TABLE_ROWS = 30


def _merge(paths: list[Path]) -> Any:
    """One calibration from a ``pdmux bench`` file and a ``pdmux calibrate`` file of the same GPU."""
    from dataclasses import replace

    from ..costmodel.calibration_file import load_calibration

    if len(paths) != 2:
        raise InputError(f"--merge takes two calibration files (a 'pdmux bench' one and a 'pdmux calibrate' one), "
                         f"got {len(paths)}")
    first, second = (load_calibration(p) for p in paths)
    keys = first.profile_key(), second.profile_key()
    if (first.sm_count, first.compute_capability) != (second.sm_count, second.compute_capability) or (
            all(keys) and keys[0] != keys[1]):
        raise InputError(f"{paths[0]} and {paths[1]} are of different GPUs ({first.gpu_name}, {second.gpu_name}): "
                         "merge calibrations of one GPU")
    bench = [c for c in (first, second) if c.has_partitions]
    sglang = [c for c in (first, second) if c.whole_gpu is not None]
    if len(bench) != 1 or len(sglang) != 1 or bench[0] is sglang[0]:
        raise InputError("--merge joins a file with SM-partition terms ('pdmux bench') and one with whole-GPU terms "
                         "('pdmux calibrate'): these two do not make that pair")
    part, whole = bench[0], sglang[0]
    terms = dict(part.terms_from)
    terms.setdefault("partitions", f"pdmux bench {part.date}")
    terms["whole_gpu"] = dict(whole.terms_from).get("whole_gpu", whole.whole_gpu.source or "pdmux calibrate")
    return replace(part, whole_gpu=whole.whole_gpu, gpu_key=keys[0] or keys[1],
                   date=max(part.date, whole.date), terms_from=tuple(terms.items()),
                   source="; ".join(s for s in (part.source, whole.source) if s))


def _rows_json(fit: Any) -> list[dict[str, Any]]:
    return [{"kind": r.point.kind, "source": r.point.source, "where": r.point.where, "batch": r.point.batch,
             "tokens": r.point.tokens, "count": r.point.count, "measured_ms": r.point.measured_s * 1e3, "calibrated_ms": r.calibrated_s * 1e3,
             "uncalibrated_ms": r.uncalibrated_s * 1e3} for r in fit.rows]


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
    for col, just in (("step", "left"), ("from", "left"), ("batch", "right"), ("tokens", "right"), ("n", "right"),
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
        table.add_row(p.kind, "log" if p.source == "server log" else "bench", str(p.batch), f"{p.tokens:,.0f}",
                      str(p.count), _ms(p.measured_s), _off(r.calibrated_s, p.measured_s),
                      _off(r.uncalibrated_s, p.measured_s))
    if len(rows) > len(shown):
        table.caption = f"{len(shown)} of {len(rows)} points shown; --json lists them all"
        table.caption_justify = "left"
    return table


@app.command()
def calibrate(
    sglang_bench: list[Path] = typer.Option([], "--sglang-bench", help="JSONL of 'python -m sglang.benchmark.one_batch --result-filename' (repeatable)."),
    sglang_log: list[Path] = typer.Option([], "--sglang-log", help="An SGLang server log (repeatable)."),
    bench_serving: list[Path] = typer.Option([], "--bench-serving", help="The --output-file of 'python -m sglang.bench_serving' (repeatable; one run per line, --output-details gives the exact lengths): fits the serving terms (admission delay and interval, per-request step time) of your server."),
    workers: int | None = typer.Option(None, "--workers", help="--bench-serving: processes for the fit (default: the cores available)."),
    model: str | None = typer.Option(None, "--model", "-m", help="The model measured: profile name or config.json."),
    gpu: str | None = typer.Option(None, "--gpu", "-g", help="The GPU measured: alias, reported name or profile file."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree of the measurements (pdmux models 1)."),
    kv_bytes: float | None = typer.Option(None, "--kv-bytes", help="Bytes per KV-cache element the server used (default: by --kv-cache-dtype)."),
    kv_cache_dtype: str | None = typer.Option(None, "--kv-cache-dtype", help="The server's --kv-cache-dtype: auto (the model's dtype; fp8_e4m3 where its quantization_config says kv_cache_quant_algo FP8), fp8_e4m3, fp8_e5m2, bf16 (default: auto)."),
    merge: list[Path] = typer.Option([], "--merge", help="Merge two calibration files (pdmux bench + pdmux calibrate) instead."),
    output: Path | None = typer.Option(None, "--output", "-o", parser=output_path, metavar="<path>", help="Write calibration.yaml here (whole or not at all); default: print it."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (the fit, every point, the YAML)."),
) -> None:
    """Fit the cost model's whole-GPU terms to your own SGLang's one-batch results and server logs, and
    its serving terms to your bench_serving runs.

    The calibration then goes to estimate, simulate and tune with --calibration FILE; --merge joins it
    with a 'pdmux bench' calibration of the same GPU (SM-partition terms)."""
    from ..costmodel.calibration_file import Calibration, dump_calibration

    inputs = [*sglang_bench, *sglang_log, *bench_serving, *merge, model_file(model or ""), gpu_file(gpu)]
    refuse_overwriting_inputs(output, *inputs)
    check_writable(output)
    if merge:
        extra = [name for name, given in (("--sglang-bench", sglang_bench), ("--sglang-log", sglang_log),
                                          ("--bench-serving", bench_serving),
                                          ("--model", model), ("--gpu", gpu), ("--tp", tp != 1),
                                          ("--kv-bytes", kv_bytes is not None),
                                          ("--kv-cache-dtype", kv_cache_dtype is not None)) if given]
        if extra:
            raise InputError(f"--merge joins two calibration files and takes no {', '.join(extra)}: give those to "
                             "the 'pdmux calibrate' run that wrote the file")
        merged = _merge(merge)
        text = dump_calibration(merged)
        if output is not None:
            write_atomic(output, text)
        if as_json:
            print_json({"merged": [str(p) for p in merge], "output": str(output) if output else None, "yaml": text})
        elif output is None:
            sys.stdout.write(text)
        else:
            console().print(f"wrote {output} ({merged.gpu_name}: SM-partition and whole-GPU terms)")
        return
    if not sglang_bench and not sglang_log and not bench_serving:
        raise InputError("give --sglang-bench FILE.jsonl, --sglang-log server.log and/or --bench-serving RESULT.jsonl "
                         "(or --merge A B)")
    if model is None or gpu is None:
        raise InputError("give --model and --gpu: the measurements are of one model on one GPU")
    if tp < 1:
        raise InputError(f"--tp must be >= 1 (GPUs the model is split over), got {tp}")
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    if workers is not None and not bench_serving:
        raise InputError("--workers goes with --bench-serving (the serving fit's processes)")
    given = [*sglang_bench, *sglang_log, *bench_serving]
    paths = [os.path.realpath(p) for p in given]  # never raises (Path.resolve does on a loop of links)
    twice = next((p for p in given if paths.count(os.path.realpath(p)) > 1), None)
    if twice is not None:
        raise InputError(f"{twice} is given twice: its points would count double")
    if not sglang_bench and not sglang_log:
        _calibrate_serving(bench_serving, model, gpu, tp, kv_bytes, kv_cache_dtype, workers, output, as_json)
        return
    if tp != 1:
        raise InputError(f"--tp {tp}: pdmux models one GPU (tensor parallelism is not modelled yet); calibrate "
                         "with measurements of a single-GPU server")
    from ..costmodel import build_step_model
    from ..costmodel.whole_gpu_fit import check_points, fit_whole_gpu, points_from
    from ..sglang.measurement_readers import read_one_batch, read_server_log

    profile, mdl, kv_bytes = _measured(gpu, model, kv_bytes, kv_cache_dtype)
    one_batch, problems, sources = [], [], []
    for path in sglang_bench:
        points, bad = read_one_batch(path)
        one_batch += points
        problems += [f"{path}: {b}" for b in bad]
        sources.append(f"SGLang one-batch {path.name} ({len(points)} results)")
    intervals, readings = [], []
    for path in sglang_log:
        reading = read_server_log(path)
        if reading.tp_size > 1:
            raise InputError(f"{path}: a server on {reading.tp_size} GPUs (tensor parallelism: TP ranks or tp_size in "
                             "the log): pdmux models one GPU; calibrate with the log of a single-GPU server")
        intervals += reading.intervals
        readings.append((path, reading))
        sources.append(f"SGLang server log {path.name} ({len(reading.intervals)} clean decode intervals)")
    if not one_batch and not intervals:
        why = "; ".join(f"{p}: {r.summary()}" for p, r in readings) or "; ".join(problems[:3])
        raise InputError("nothing to calibrate on: no one-batch result and no clean decode interval"
                         + (f" ({why})" if why else ""))
    base = build_step_model(profile, mdl, kv_bytes_per_element=kv_bytes)
    points = points_from(one_batch, intervals)
    points, dropped = check_points(base, profile, points, kv_bytes)
    fit = fit_whole_gpu(base, points, "; ".join(sources), dropped)
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    cal = Calibration(
        gpu_name=profile.name, sm_count=profile.require_sm_count(), compute_capability=tuple(profile.compute_capability),
        date=today, source=f"pdmux calibrate --model {mdl.name}", whole_gpu=fit.terms,
        terms_from=(("whole_gpu", "; ".join(sources)),), gpu_key=getattr(profile, "key", ""),
    )
    serving_view = None
    if bench_serving:  # the serving terms on top of the whole-GPU ones just fitted
        cal, serving_view = _fit_serving(cal, bench_serving, model, gpu, tp, kv_bytes, workers)
    text = dump_calibration(cal)
    if output is not None:
        write_atomic(output, text)
    notes = list(fit.notes) + problems[:5] + [f"{p}: {r.summary()}" for p, r in readings]
    if len(problems) > 5:
        notes.append(f"{len(problems) - 5} more unreadable one-batch line(s)")
    t = fit.terms
    if as_json:
        print_json({
            "gpu": profile.name, "model": mdl.name, "points": len(points),
            "decode_fit": fit.decode_mode, "prefill_fit": fit.prefill_mode,
            "terms": {"gemm_bandwidth_efficiency": t.gemm_bandwidth_efficiency,
                      "gemm_peak_efficiency": t.gemm_peak_efficiency,
                      "kv_bandwidth_efficiency": t.kv_bandwidth_efficiency,
                      "attention_peak_efficiency": t.attention_peak_efficiency, "decode_fixed_ms": t.decode_fixed_s * 1e3},
            "shipped": {"gemm_bandwidth_efficiency": base.eff.gemm.bandwidth_efficiency,
                        "gemm_peak_efficiency": base.eff.gemm.peak_efficiency,
                        "kv_bandwidth_efficiency": base.eff.decode_attention.bandwidth_efficiency,
                        "attention_peak_efficiency": base.eff.prefill_attention.peak_efficiency},
            "median_error": t.median_error, "uncalibrated_median_error": t.uncalibrated_median_error,
            "rows": _rows_json(fit), "notes": notes, "output": str(output) if output else None, "yaml": text,
        })
        return
    con = console(stderr=output is None)
    con.print(_table(fit, f"{mdl.name} on {profile.name}, ms: measured, calibrated, shipped model"))
    con.print(f"fitted: {fit.decode_mode} (decode), {fit.prefill_mode} (prefill); median error "
              f"{t.median_error:.1%} (shipped model: {t.uncalibrated_median_error:.1%}) on {len(points)} points",
              soft_wrap=True)
    con.print(f"efficiencies: GEMM bandwidth {t.gemm_bandwidth_efficiency:.3f} (shipped "
              f"{base.eff.gemm.bandwidth_efficiency:.3f}), KV bandwidth {t.kv_bandwidth_efficiency:.3f} "
              f"({base.eff.decode_attention.bandwidth_efficiency:.3f}), GEMM compute {t.gemm_peak_efficiency:.3f} "
              f"({base.eff.gemm.peak_efficiency:.3f}), attention compute {t.attention_peak_efficiency:.3f} "
              f"({base.eff.prefill_attention.peak_efficiency:.3f}); {t.decode_fixed_s * 1e3:+.2f} ms per decode step",
              soft_wrap=True)
    for note in notes:
        print_note(con, note)
    if serving_view is not None:
        _print_serving(con, *serving_view)
    if output is None:
        sys.stdout.write(text)
    else:
        con.print(f"wrote {output}; use it with --calibration {output} (estimate, simulate, tune)", soft_wrap=True)


def _measured(gpu: str, model: str, kv_bytes: float | None, kv_cache_dtype: str | None) -> tuple[Any, Any, float]:
    """The GPU profile, the model and the KV bytes per element the measurements were taken with (SGLang's
    ``--kv-cache-dtype`` or ``--kv-bytes``); :class:`InputError` for bad values."""
    from ..catalog.hardware import find_gpu_or_file
    from ..sglang.kv_cache import check_kv_options, resolve_kv_cache
    from ..catalog.model import load_model
    from ..simulate.engine import check_bytes_per_element

    check_kv_options(kv_cache_dtype, kv_bytes)
    check_bytes_per_element(kv_bytes, "--kv-bytes")
    if not gpu.strip():
        raise InputError("--gpu is empty: give a GPU name such as h100")
    mdl = load_model(model)
    return find_gpu_or_file(gpu), mdl, resolve_kv_cache(mdl, kv_cache_dtype, kv_bytes).bytes_per_element


def _fit_serving(cal: Any, files: list[Path], model: str, gpu: str, tp: int, kv_bytes: float | None,
                 workers: int | None) -> tuple[Any, tuple]:
    """``cal`` with the serving terms fitted to ``files`` (bench_serving results), and what to show:
    ``(terms, errors before, errors after, notes)``."""
    from dataclasses import replace

    from ..costmodel.calibration_file import ServingTerms
    from ..sglang.measurement_readers import read_bench_serving
    from ..simulate import serving_fit
    from ..simulate.serving_accuracy import runs_from_bench_serving
    from ..simulate.pool import default_workers, process_pool

    results, problems = [], []
    for path in files:
        got, bad = read_bench_serving(path)
        results += got
        problems += [f"{path}: {b}" for b in bad]
    runs, notes = runs_from_bench_serving(results, gpu, model, tp if tp != 1 else None)
    options = {"kv_bytes_per_element": kv_bytes}
    if cal.whole_gpu is not None:
        options["calibration"] = cal
    before = serving_fit.run_errors(runs, {}, options)
    count = workers if workers is not None else default_workers()
    if count > 1:
        with process_pool(count) as pool:
            terms, errors = serving_fit.fit_terms(runs, setup_options=options, mapper=pool.map)
    else:
        terms, errors = serving_fit.fit_terms(runs, setup_options=options)
    source = "; ".join(f"sglang.bench_serving {p.name}" for p in files) + f" ({len(runs)} runs)"
    def seconds(option: str) -> float:
        return float(f"{terms[option] / 1e3:.6g}")

    fitted = ServingTerms(
        admission_delay_s=seconds("admission_delay_ms"), first_token_delay_s=0.0,
        admission_interval_s=seconds("admission_interval_ms"),
        per_request_step_s=seconds("per_request_overhead_ms"), runs=len(runs),
        median_error=tuple((k, v["median_error"]) for k, v in serving_fit.summary(errors).items()), source=source)
    cal = replace(cal, serving=fitted, terms_from=(*cal.terms_from, ("serving", source)))
    return cal, (fitted, before, errors, notes + problems[:5])


def _print_serving(con: Any, terms: Any, before: dict, after: dict, notes: list[str]) -> None:
    """The serving fit: terms, and the median error per metric kind with the shipped and fitted terms."""
    import statistics

    con.print(f"serving terms: admission delay {terms.admission_delay_s * 1e3:g} ms, admission interval "
              f"{terms.admission_interval_s * 1e3:g} ms, {terms.per_request_step_s * 1e3:g} ms per request per step "
              f"(fitted to {terms.runs} bench_serving run(s))", soft_wrap=True)
    for kind, errors in after.items():
        shipped = statistics.median(before[kind]) if before.get(kind) else float("nan")
        con.print(f"  {kind}: median error {statistics.median(errors):.1%} (shipped terms: {shipped:.1%})")
    for note in notes:
        print_note(con, note)


def _calibrate_serving(files: list[Path], model: str, gpu: str, tp: int, kv_bytes: float | None,
                       kv_cache_dtype: str | None, workers: int | None, output: Path | None, as_json: bool) -> None:
    """``pdmux calibrate --bench-serving`` alone: a calibration with only the serving terms."""
    from ..costmodel.calibration_file import Calibration, dump_calibration

    profile, mdl, kv = _measured(gpu, model, kv_bytes, kv_cache_dtype)
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    cal = Calibration(gpu_name=profile.name, sm_count=profile.require_sm_count(),
                      compute_capability=tuple(profile.compute_capability), date=today,
                      source=f"pdmux calibrate --bench-serving --model {mdl.name}", gpu_key=getattr(profile, "key", ""))
    cal, view = _fit_serving(cal, files, model, gpu, tp, kv, workers)
    text = dump_calibration(cal)
    if output is not None:
        write_atomic(output, text)
    terms, before, after, notes = view
    if as_json:
        import statistics

        print_json({"gpu": profile.name, "model": mdl.name, "runs": terms.runs,
                    "terms": {"admission_delay_ms": terms.admission_delay_s * 1e3,
                              "admission_interval_ms": terms.admission_interval_s * 1e3,
                              "first_token_delay_ms": terms.first_token_delay_s * 1e3,
                              "per_request_overhead_ms": terms.per_request_step_s * 1e3},
                    "median_error": {k: statistics.median(v) for k, v in after.items()},
                    "shipped_median_error": {k: statistics.median(v) for k, v in before.items()},
                    "notes": notes, "output": str(output) if output else None, "yaml": text})
        return
    con = console(stderr=output is None)
    _print_serving(con, *view)
    if output is None:
        sys.stdout.write(text)
    else:
        con.print(f"wrote {output}; use it with --calibration {output} (simulate, capacity, tune)", soft_wrap=True)
