"""``calibrate``: fit the cost model's whole-GPU terms to the user's own SGLang (one-batch results, server
logs), its serving terms to bench_serving runs, or merge two calibrations.

:func:`calibrate` takes a :class:`CalibrateRequest` and returns a :class:`CalibrateResult`
(``to_dict()``: ``pdmux calibrate --json``), writing ``output`` whole or not at all. The readers are
:mod:`pdmux_cli.sglang.measurement_readers`; the fits
:func:`pdmux_cli.costmodel.whole_gpu_fit.fit_whole_gpu` and :func:`pdmux_cli.simulate.serving_fit.fit_terms`.
"""

from __future__ import annotations

import datetime
import os
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..messages import render, render_all
from ..util.errors import Finding, InputError
from .fields import Checked, option

# Bounds on the work the input files may ask for (``CalibrateRequest``'s ``max_replay_requests``,
# ``max_points``, ``max_log_lines``; 0 lifts one). Times measured on one core of the 2-core CI machine
# (this commit, Qwen3-8B on an H100): a serving replay simulates about 60,000 requests a second and spends
# about 1.7 ms setting a run up; the whole-GPU fit takes about 6 ms a point (10,000 points: 57 s); the
# server-log reader about 90,000 lines a second, holding about 250 bytes a clean interval.

#: Requests calibrate replays over all its bench_serving runs by default. The serving fit replays every
#: run :func:`replays_per_run` times (71), so 100,000 requests are about 2 minutes of fitting on one core
#: (``--workers`` share it).
DEFAULT_MAX_REPLAY_REQUESTS = 100_000
#: A run counts as at least this many requests against ``max_replay_requests``: setting a replay up costs
#: about as much as replaying 100 requests (1.7 ms against 16 us a request), so many tiny runs are
#: bounded too (the default bounds them to 1,000).
RUN_SETUP_REQUESTS = 100
#: Points the whole-GPU fit takes by default (one-batch results' prefills and decode steps, server-log
#: groups): about 2 minutes.
DEFAULT_MAX_POINTS = 20_000
#: Server-log lines calibrate reads over all its logs by default: under a minute and under 1 GB (a
#: month of a busy server's decode lines, one every 40 steps).
DEFAULT_MAX_LOG_LINES = 4_000_000


#: The bounds' request fields and defaults.
_BOUNDS = (("max_replay_requests", DEFAULT_MAX_REPLAY_REQUESTS), ("max_points", DEFAULT_MAX_POINTS),
           ("max_log_lines", DEFAULT_MAX_LOG_LINES))


def replays_per_run() -> int:
    """Times the serving fit replays every run: the shipped terms, the search's start, each trial
    (:data:`pdmux_cli.simulate.serving_fit.PASSES` x the grids' values) and the residuals."""
    from ..simulate import serving_fit

    return 3 + serving_fit.PASSES * sum(len(grid) for grid in serving_fit.GRIDS.values())


@dataclass(frozen=True, kw_only=True)
class CalibrateRequest(Checked):
    """``pdmux calibrate``'s options (snake_case, the CLI's defaults).

    ``sglang_bench``: JSONL of ``sglang.benchmark.one_batch``; ``sglang_log``: SGLang server logs;
    ``bench_serving``: ``sglang.bench_serving`` output files (the serving terms; ``workers`` processes).
    ``model``, ``gpu``: what was measured; ``tp``: the measurements' TP; ``kv_bytes`` /
    ``kv_cache_dtype``: the server's KV cache. ``merge``: two calibration files to join instead (a
    ``pdmux bench`` one and a ``pdmux calibrate`` one). ``output``: where to write the calibration.

    Bounds on the work the files may ask for (0: no limit; module constants for the defaults and what
    they cost): ``max_replay_requests``, requests replayed over all bench_serving runs (a run counts at
    least :data:`RUN_SETUP_REQUESTS`); ``max_points``, points the whole-GPU fit takes; ``max_log_lines``,
    server-log lines read over all logs.
    """

    sglang_bench: tuple[Path, ...] = option((), help=(
        "JSONL of 'python -m sglang.benchmark.one_batch --result-filename' (repeatable)."))
    sglang_log: tuple[Path, ...] = option((), help="An SGLang server log (repeatable).")
    bench_serving: tuple[Path, ...] = option((), help=(
        "The --output-file of 'python -m sglang.bench_serving' (repeatable; one run per line, "
        "--output-details gives the exact lengths): fits the serving terms (admission delay and interval, "
        "per-request step time) of your server."))
    workers: int | None = option(None, help=(
        "{flag.bench_serving}: processes for the fit (default: the cores available)."))
    model: str | None = option(None, short="-m", help="The model measured: profile name or config.json.")
    gpu: str | None = option(None, short="-g", help="The GPU measured: alias, reported name or profile file.")
    tp: int = option(1, help="Tensor-parallel degree of the measurements (pdmux models 1).")
    kv_bytes: float | None = option(None, help=(
        "Bytes per KV-cache element the server used (default: by {flag.kv_cache_dtype})."))
    kv_cache_dtype: str | None = option(None, help=(
        "The server's {flag.kv_cache_dtype}: auto (the model's dtype; fp8_e4m3 where its quantization_config "
        "says kv_cache_quant_algo FP8), fp8_e4m3, fp8_e5m2, bf16 (default: auto)."))
    merge: tuple[Path, ...] = option((), help=(
        "Merge two calibration files (pdmux bench + pdmux calibrate) instead: {flag.merge} A {flag.merge} "
        "B."))
    output: Path | None = option(None, short="-o", writes="path", help=(
        "Write calibration.yaml here (whole or not at all); default: print it."))
    max_replay_requests: int = option(DEFAULT_MAX_REPLAY_REQUESTS, help=(
        "{flag.bench_serving}: the most requests replayed over all runs, a run counting at least 100 (the "
        "fit replays each run about 70 times; 100,000: about 2 minutes a core). 0: no limit."))
    max_points: int = option(DEFAULT_MAX_POINTS, help=(
        "The most points the whole-GPU fit takes (one-batch prefills and decode steps, server-log groups; "
        "about 6 ms each). 0: no limit."))
    max_log_lines: int = option(DEFAULT_MAX_LOG_LINES, help=(
        "The most server-log lines read over all {flag.sglang_log} files (about 90,000 a second). 0: no "
        "limit."))


@dataclass
class ServingFit:
    """The serving fit: ``terms`` (:class:`pdmux_cli.costmodel.calibration_file.ServingTerms`), the relative
    errors per metric kind with the shipped terms (``before``) and the fitted ones (``after``), and notes."""

    terms: Any
    before: dict[str, list[float]]
    after: dict[str, list[float]]
    notes: list[Finding | str]


@dataclass
class CalibrateResult:
    """What ``calibrate`` made: ``mode`` (``"merge"``, ``"whole_gpu"`` or ``"serving"``), the
    ``calibration`` and its ``yaml``; for ``whole_gpu`` the ``fit``
    (:class:`pdmux_cli.costmodel.whole_gpu_fit.CalibrationFit`), the shipped model ``base``, the GPU
    ``profile`` and ``model`` measured and the ``points`` kept; ``serving``: the serving fit where
    bench_serving runs were given; ``notes``."""

    request: CalibrateRequest
    mode: str
    calibration: Any
    yaml: str
    fit: Any = None
    base: Any = None
    profile: Any = None
    model: Any = None
    points: int = 0
    serving: ServingFit | None = None
    notes: list[Finding | str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """``pdmux calibrate --json`` (the ``"pdmux"`` provenance last: the shipped model the fit started
        from)."""
        from ..messages import render_all  # the whole-GPU fit's notes are findings (fit.*)
        from ..provenance import provenance

        output = str(self.request.output) if self.request.output else None
        if self.mode == "merge":
            data = {"merged": [str(p) for p in self.request.merge], "output": output, "yaml": self.yaml}
            return {**data, "pdmux": provenance(sglang=None)}
        if self.mode == "serving":
            s = self.serving
            data = {"gpu": self.profile.name, "model": self.model.name, "runs": s.terms.runs,
                    "terms": {"admission_delay_ms": s.terms.admission_delay_s * 1e3,
                              "admission_interval_ms": s.terms.admission_interval_s * 1e3,
                              "first_token_delay_ms": s.terms.first_token_delay_s * 1e3,
                              "per_request_overhead_ms": s.terms.per_request_step_s * 1e3},
                    "median_error": {k: statistics.median(v) for k, v in s.after.items()},
                    "shipped_median_error": {k: statistics.median(v) for k, v in s.before.items()},
                    "notes": render_all(s.notes), "output": output, "yaml": self.yaml}
            block = _shipped(self.profile)
            return {**data, "pdmux": provenance(sglang=None, cost_model=block)}
        t, base = self.fit.terms, self.base
        data = {
            "gpu": self.profile.name, "model": self.model.name, "points": self.points,
            "decode_fit": self.fit.decode_mode, "prefill_fit": self.fit.prefill_mode,
            "terms": {"gemm_bandwidth_efficiency": t.gemm_bandwidth_efficiency,
                      "gemm_peak_efficiency": t.gemm_peak_efficiency,
                      "kv_bandwidth_efficiency": t.kv_bandwidth_efficiency,
                      "attention_peak_efficiency": t.attention_peak_efficiency,
                      "decode_fixed_ms": t.decode_fixed_s * 1e3},
            "shipped": {"gemm_bandwidth_efficiency": base.eff.gemm.bandwidth_efficiency,
                        "gemm_peak_efficiency": base.eff.gemm.peak_efficiency,
                        "kv_bandwidth_efficiency": base.eff.decode_attention.bandwidth_efficiency,
                        "attention_peak_efficiency": base.eff.prefill_attention.peak_efficiency},
            "median_error": t.median_error, "uncalibrated_median_error": t.uncalibrated_median_error,
            "rows": rows_dict(self.fit), "notes": render_all(self.notes), "output": output, "yaml": self.yaml,
        }
        return {**data, "pdmux": provenance(sglang=None, cost_model=_shipped(profile=self.profile))}


def _shipped(profile: Any) -> dict[str, Any]:
    """The provenance of the shipped roofline model a fit is compared with (``"shipped"``): the GPU's
    efficiency profile and ``serving.yaml``'s terms of
    :data:`~pdmux_cli.costmodel.efficiency.DEFAULT_RELEASE_LINE`."""
    from ..costmodel.efficiency import DEFAULT_RELEASE_LINE, profile_for
    from ..provenance import cost_model_provenance

    eff, _ = profile_for(getattr(profile, "key", ""), tuple(profile.compute_capability))
    return cost_model_provenance("roofline", efficiency=f"{eff.key}.yaml", serving=DEFAULT_RELEASE_LINE)


def rows_dict(fit: Any) -> list[dict[str, Any]]:
    """Every point of a whole-GPU fit, measured and predicted (ms), for JSON."""
    return [{"kind": r.point.kind, "source": r.point.source, "where": r.point.where, "batch": r.point.batch,
             "tokens": r.point.tokens, "count": r.point.count, "measured_ms": r.point.measured_s * 1e3,
             "calibrated_ms": r.calibrated_s * 1e3, "uncalibrated_ms": r.uncalibrated_s * 1e3}
            for r in fit.rows]


def merge_calibrations(paths: list[Path]) -> Any:
    """One calibration from a ``pdmux bench`` file and a ``pdmux calibrate`` file of the same GPU.
    :class:`InputError` for another count of files, files of different GPUs, or not that pair."""
    from ..costmodel.calibration_file import load_calibration

    if len(paths) != 2:
        raise InputError(
            "{flag.merge} takes two calibration files (a 'pdmux bench' one and a 'pdmux calibrate' one), "
            "got {count}",
            values={"count": len(paths)},
        )
    first, second = (load_calibration(p) for p in paths)
    keys = first.profile_key(), second.profile_key()
    if (first.sm_count, first.compute_capability) != (second.sm_count, second.compute_capability) or (
            all(keys) and keys[0] != keys[1]):
        raise InputError(f"{paths[0]} and {paths[1]} are of different GPUs ({first.gpu_name}, "
                         f"{second.gpu_name}): merge calibrations of one GPU")
    bench = [c for c in (first, second) if c.has_partitions]
    sglang = [c for c in (first, second) if c.whole_gpu is not None]
    if len(bench) != 1 or len(sglang) != 1 or bench[0] is sglang[0]:
        raise InputError(
            "{flag.merge} joins a file with SM-partition terms ('pdmux bench') and one with whole-GPU "
            "terms ('pdmux calibrate'): these two do not make that pair",
            values={},
        )
    part, whole = bench[0], sglang[0]
    terms = dict(part.terms_from)
    terms.setdefault("partitions", f"pdmux bench {part.date}")
    terms["whole_gpu"] = dict(whole.terms_from).get("whole_gpu", whole.whole_gpu.source or "pdmux calibrate")
    return replace(part, whole_gpu=whole.whole_gpu, gpu_key=keys[0] or keys[1],
                   date=max(part.date, whole.date), terms_from=tuple(terms.items()),
                   source="; ".join(s for s in (part.source, whole.source) if s))


def _measured(gpu: str, model: str, kv_bytes: float | None,
              kv_cache_dtype: str | None) -> tuple[Any, Any, float]:
    """The GPU profile, the model and the KV bytes per element the measurements were taken with (SGLang's
    ``--kv-cache-dtype`` or ``--kv-bytes``); :class:`InputError` for bad values."""
    from ..catalog.hardware import find_gpu_or_file
    from ..catalog.model import load_model
    from ..sglang.kv_cache import check_kv_options, resolve_kv_cache
    from ..simulate.engine import check_bytes_per_element

    check_kv_options(kv_cache_dtype, kv_bytes)
    check_bytes_per_element(kv_bytes, "kv_bytes")
    if not gpu.strip():
        raise InputError(
            "{flag.gpu} is empty: give a GPU name such as h100",
            values={},
        )
    mdl = load_model(model)
    return find_gpu_or_file(gpu), mdl, resolve_kv_cache(mdl, kv_cache_dtype, kv_bytes).bytes_per_element


def _unreadable(path: Path, problem: str) -> Finding:
    """``calibrate.unreadable``: a line of ``path`` a reader could not use (``problem``: the reader's
    reason, :mod:`pdmux_cli.sglang.measurement_readers`)."""
    return Finding("calibrate.unreadable", {"path": str(path), "problem": problem})


def _read_bench_serving(r: CalibrateRequest) -> tuple[list, list[Finding]]:
    """The runs of ``r.bench_serving`` (:func:`pdmux_cli.sglang.measurement_readers.read_bench_serving`,
    which refuses a run whose own figures disagree) and a ``calibrate.unreadable`` finding per line not
    used. Raises :class:`InputError` where the runs ask for more replay work than
    ``r.max_replay_requests`` (:func:`check_replay_work`)."""
    from ..sglang.measurement_readers import read_bench_serving

    results, problems = [], []
    for path in r.bench_serving:
        got, bad = read_bench_serving(path)
        results += got
        problems += [_unreadable(path, b) for b in bad]
    check_replay_work(results, r.max_replay_requests)
    return results, problems


def check_replay_work(results: list, limit: int) -> None:
    """Refuse bench_serving runs (:class:`~pdmux_cli.sglang.measurement_readers.BenchServingResult`) whose
    replays would cost more than ``limit`` requests (0: no limit): the sum of each run's requests
    (``requests``: its ``input_lens``, else ``completed``), a run counting at least
    :data:`RUN_SETUP_REQUESTS`. The serving fit replays each run :func:`replays_per_run` times. Raises
    :class:`InputError` (``param`` ``max_replay_requests``) naming the total, the largest run and how to
    lift the bound; checked before anything is drawn or simulated."""
    if not limit:
        return
    work = sum(max(res.requests, RUN_SETUP_REQUESTS) for res in results)
    if work <= limit:
        return
    largest = max(results, key=lambda res: res.requests)
    requests = sum(res.requests for res in results)
    raise InputError(
        "the bench_serving runs ask for {work:,} requests of replay ({runs:,} run(s) of {requests:,} "
        "requests, each run counted as at least {setup}; the largest, {where}, {largest:,}), more than the "
        "{limit:,} calibrate replays at most (the serving fit replays every run {replays} times: about "
        "2 minutes a core for 100,000): calibrate on fewer or smaller runs, or raise the bound with "
        "{flag.max_replay_requests} N (0: no limit)",
        param="max_replay_requests",
        values={"work": work, "runs": len(results), "requests": requests, "setup": RUN_SETUP_REQUESTS,
                "where": largest.where, "largest": largest.requests, "limit": limit,
                "replays": replays_per_run()},
    )


def _fit_serving(cal: Any, r: CalibrateRequest, kv_bytes: float, results: list,
                 problems: list[Finding]) -> tuple[Any, ServingFit]:
    """``cal`` with the serving terms fitted to the runs of ``r.bench_serving`` (``results``, read by
    :func:`_read_bench_serving`; ``problems``: its lines not used), and the fit."""
    from ..costmodel.calibration_file import ServingTerms
    from ..simulate import serving_fit
    from ..simulate.pool import default_workers, process_pool
    from ..simulate.serving_accuracy import runs_from_bench_serving

    runs, notes = runs_from_bench_serving(results, r.gpu, r.model, r.tp if r.tp != 1 else None)
    options: dict[str, Any] = {"kv_bytes_per_element": kv_bytes}
    if cal.whole_gpu is not None:
        options["calibration"] = cal
    before = serving_fit.run_errors(runs, {}, options)
    count = r.workers if r.workers is not None else default_workers()
    if count > 1:
        with process_pool(count) as pool:
            terms, errors = serving_fit.fit_terms(runs, setup_options=options, mapper=pool.map)
    else:
        terms, errors = serving_fit.fit_terms(runs, setup_options=options)
    source = render(Finding("calibrate.source.bench_serving",
                            {"files": [p.name for p in r.bench_serving], "runs": len(runs)}))

    def seconds(option: str) -> float:
        return float(f"{terms[option] / 1e3:.6g}")

    fitted = ServingTerms(
        admission_delay_s=seconds("admission_delay_ms"), first_token_delay_s=0.0,
        admission_interval_s=seconds("admission_interval_ms"),
        per_request_step_s=seconds("per_request_overhead_ms"), runs=len(runs),
        median_error=tuple((k, v["median_error"]) for k, v in serving_fit.summary(errors).items()),
        source=source,
        residuals=tuple((k, tuple(round(x, 6) for x in v))
                        for k, v in serving_fit.run_residuals(runs, terms, options).items()))
    cal = replace(cal, serving=fitted, terms_from=(*cal.terms_from, ("serving", source)))
    return cal, ServingFit(fitted, before, errors, notes + problems[:5])


def _check_fit_options(r: CalibrateRequest) -> None:
    if not r.sglang_bench and not r.sglang_log and not r.bench_serving:
        raise InputError(
            "give {flag.sglang_bench} FILE.jsonl, {flag.sglang_log} server.log and/or "
            "{flag.bench_serving} RESULT.jsonl (or {flag.merge} A {flag.merge} B)",
            values={},
        )
    if r.model is None or r.gpu is None:
        raise InputError(
            "give {flag.model} and {flag.gpu}: the measurements are of one model on one GPU",
            values={},
        )
    for name, _ in _BOUNDS:
        value = getattr(r, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError("{param_flag} must be a whole number >= 0 (0: no limit), got {value}",
                             param=name, values={"value": value})
    if r.workers is not None and not r.bench_serving:
        raise InputError(
            "{flag.workers} goes with {flag.bench_serving} (the serving fit's processes)",
            values={},
        )
    given = [*r.sglang_bench, *r.sglang_log, *r.bench_serving]
    paths = [os.path.realpath(p) for p in given]  # never raises (Path.resolve does on a loop of links)
    twice = next((p for p in given if paths.count(os.path.realpath(p)) > 1), None)
    if twice is not None:
        given_as = next(name for name in ("sglang_bench", "sglang_log", "bench_serving")
                        if os.path.realpath(twice) in map(os.path.realpath, getattr(r, name)))
        raise InputError("{path} is given twice: its points would count double", param=given_as,
                         values={"path": twice})


def _merge(r: CalibrateRequest) -> CalibrateResult:
    from ..costmodel.calibration_file import dump_calibration

    extra = [name for name, given in (("sglang_bench", r.sglang_bench), ("sglang_log", r.sglang_log),
                                      ("bench_serving", r.bench_serving),
                                      ("model", r.model), ("gpu", r.gpu), ("tp", r.tp != 1),
                                      ("kv_bytes", r.kv_bytes is not None),
                                      ("kv_cache_dtype", r.kv_cache_dtype is not None),
                                      *((name, getattr(r, name) != default) for name, default in _BOUNDS))
             if given]
    if extra:  # each parameter given is named, as its flag for the CLI
        raise InputError(
            "{flag.merge} joins two calibration files and takes no "
            + ", ".join("{flag.%s}" % name for name in extra)
            + ": give those to the 'pdmux calibrate' run that wrote the file",
            param=extra[0], values={},
        )
    merged = merge_calibrations(list(r.merge))
    return CalibrateResult(r, "merge", merged, dump_calibration(merged))


def _today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).date().isoformat()


def _serving_only(r: CalibrateRequest) -> CalibrateResult:
    """``--bench-serving`` alone: a calibration with only the serving terms."""
    from ..costmodel.calibration_file import Calibration, dump_calibration

    profile, mdl, kv = _measured(r.gpu, r.model, r.kv_bytes, r.kv_cache_dtype)
    results, problems = _read_bench_serving(r)
    cal = Calibration(gpu_name=profile.name, sm_count=profile.require_sm_count(),
                      compute_capability=tuple(profile.compute_capability), date=_today(),
                      source=render(Finding("calibrate.source.serving", {"model": mdl.name})),
                      gpu_key=getattr(profile, "key", ""))
    cal, fit = _fit_serving(cal, r, kv, results, problems)
    return CalibrateResult(r, "serving", cal, dump_calibration(cal), profile=profile, model=mdl, serving=fit)


def _read_measurements(r: CalibrateRequest) -> tuple[list, list, list[Finding], list[str], list]:
    """``(one-batch points, clean decode intervals, problems (``calibrate.unreadable``), sources (the lines a
    calibration file records), (path, log reading) pairs)``. The logs are read ``r.max_log_lines`` lines
    in all at most (:func:`pdmux_cli.sglang.measurement_readers.read_server_log` raises past it)."""
    from ..sglang.measurement_readers import ACCEPT_LEN_LEFT_OUT, read_one_batch, read_server_log

    one_batch, problems, sources = [], [], []
    for path in r.sglang_bench:
        points, bad = read_one_batch(path)
        one_batch += points
        problems += [_unreadable(path, b) for b in bad]
        sources.append(render(Finding("calibrate.source.one_batch",
                                      {"file": path.name, "results": len(points)})))
    intervals, readings = [], []
    lines = 0
    for path in r.sglang_log:
        reading = read_server_log(path, max_lines=r.max_log_lines or None, read_before=lines)
        lines += reading.lines
        if reading.tp_size > 1:
            raise InputError(f"{path}: a server on {reading.tp_size} GPUs (tensor parallelism: TP ranks or "
                             "tp_size in the log): pdmux models one GPU; calibrate with the log of a "
                             "single-GPU server")
        intervals += reading.intervals
        readings.append((path, reading))
        sources.append(render(Finding("calibrate.source.server_log",
                                      {"file": path.name, "intervals": len(reading.intervals)})))
    problems[:0] = [Finding("calibrate.accept_length", {"file": path.name, "lines": len(rd.accept_lengths),
                                                        "accept_length": round(rd.accept_length, 2)},
                            "speculative_accept_length")
                    for path, rd in readings if rd.accept_length is not None]  # first: kept in the notes
    if not one_batch and not intervals:
        speculative = [rd for _, rd in readings if rd.accept_length is not None]
        if speculative and all(set(rd.skipped) <= {"speculative decoding", ACCEPT_LEN_LEFT_OUT}
                               for _, rd in readings):
            values = sorted(a for rd in speculative for a in rd.accept_lengths)
            left = sum(rd.skipped[ACCEPT_LEN_LEFT_OUT] for _, rd in readings)
            raise InputError(
                "the server log(s) hold only speculative decode lines: median accept len {accept:g} over "
                "{lines} line(s){left} (give {flag.speculative_accept_length} {accept:g} to simulate, "
                "capacity, tune or estimate, at most the server's num-steps + 1); a speculative round is no "
                "plain decode step, so there is nothing to calibrate on: give a log of the server without "
                "speculation, or a one-batch result",
                param="speculative_accept_length",
                values={"accept": round(statistics.median(values), 2), "lines": len(values),
                        "left": f", {left} more left out (unreadable or outside 1-33)" if left else ""})
        why = "; ".join(f"{p}: {rd.summary()}" for p, rd in readings) or "; ".join(render_all(problems[:3]))
        accept = [render(f) for f in problems if f.code == "calibrate.accept_length"]
        if accept:
            why += "; " + "; ".join(accept)
        raise InputError("nothing to calibrate on: no one-batch result and no clean decode interval"
                         + (f" ({why})" if why else ""))
    return one_batch, intervals, problems, sources, readings


def check_fit_work(points: list, limit: int) -> None:
    """Refuse more than ``limit`` whole-GPU fit points (0: no limit;
    :class:`~pdmux_cli.costmodel.whole_gpu_fit.CalPoint`: a one-batch result's prefill and decode step, a
    server-log group), each costing the fit about 6 ms. Raises :class:`InputError` (``param``
    ``max_points``) counting them by file and naming how to lift the bound; checked before the fit."""
    if not limit or len(points) <= limit:
        return
    by_file: dict[str, int] = {}
    for p in points:
        name = "server logs" if p.source == "server log" else p.where.rsplit(":", 1)[0]
        by_file[name] = by_file.get(name, 0) + 1
    biggest = sorted(by_file.items(), key=lambda kv: -kv[1])
    detail = ", ".join(f"{n:,} from {name}" for name, n in biggest[:3]) + (
        f" and {len(biggest) - 3} more file(s)" if len(biggest) > 3 else "")
    raise InputError(
        "{count:,} points to fit ({detail}), more than the {limit:,} calibrate fits at most (about 6 ms "
        "each: 2 minutes for 20,000): give fewer one-batch results (a sweep of batch sizes and prompt "
        "lengths, tens of lines, is plenty) or less of a log, or raise the bound with {flag.max_points} N "
        "(0: no limit)",
        param="max_points", values={"count": len(points), "detail": detail, "limit": limit},
    )


def _whole_gpu(r: CalibrateRequest) -> CalibrateResult:
    from ..costmodel import build_step_model
    from ..costmodel.calibration_file import Calibration, dump_calibration
    from ..costmodel.whole_gpu_fit import check_points, fit_whole_gpu, points_from

    if r.tp != 1:
        raise InputError(
            "{flag.tp} {tp}: pdmux calibrate fits one GPU's terms (a calibration from a tensor-parallel "
            "server is not supported yet; estimate, simulate and capacity model TP 1-8 from the shipped "
            "profiles); calibrate with measurements of a single-GPU server",
            values={"tp": r.tp},
        )
    profile, mdl, kv_bytes = _measured(r.gpu, r.model, r.kv_bytes, r.kv_cache_dtype)
    serving_runs = _read_bench_serving(r) if r.bench_serving else None  # its refusals before any fit
    one_batch, intervals, problems, sources, readings = _read_measurements(r)
    base = build_step_model(profile, mdl, kv_bytes_per_element=kv_bytes)
    points = points_from(one_batch, intervals)
    check_fit_work(points, r.max_points)
    points, dropped = check_points(base, profile, points, kv_bytes)
    fit = fit_whole_gpu(base, points, "; ".join(sources), dropped)
    cal = Calibration(
        gpu_name=profile.name, sm_count=profile.require_sm_count(),
        compute_capability=tuple(profile.compute_capability),
        date=_today(), source=render(Finding("calibrate.source.whole_gpu", {"model": mdl.name})),
        whole_gpu=fit.terms,
        terms_from=(("whole_gpu", "; ".join(sources)),), gpu_key=getattr(profile, "key", ""),
    )
    serving = None
    if serving_runs is not None:  # the serving terms on top of the whole-GPU ones just fitted
        cal, serving = _fit_serving(cal, r, kv_bytes, *serving_runs)
    logs = [Finding("calibrate.log_reading", {"path": str(p), "summary": rd.summary()}) for p, rd in readings]
    notes = [*fit.notes, *problems[:5], *logs]
    if len(problems) > 5:
        notes.append(Finding("calibrate.more_unreadable", {"count": len(problems) - 5}))
    return CalibrateResult(r, "whole_gpu", cal, dump_calibration(cal), fit=fit, base=base, profile=profile,
                           model=mdl, points=len(points), serving=serving, notes=notes)


def calibrate(request: CalibrateRequest) -> CalibrateResult:
    """Run ``request`` (module docstring) and write ``request.output`` when named. Raises
    :class:`InputError` for bad options or inputs (nothing to calibrate on, a log of a TP server, a file
    given twice, an output that is one of the inputs, a bench_serving run whose own figures disagree), and
    for files asking for more work than the request's bounds (``max_replay_requests``, ``max_points``,
    ``max_log_lines``), before the work starts."""
    from ..util.atomic import check_writable, refuse_overwriting_inputs
    from .files import gpu_file, model_file

    r = request
    inputs = [*r.sglang_bench, *r.sglang_log, *r.bench_serving, *r.merge, model_file(r.model or ""),
              gpu_file(r.gpu)]
    refuse_overwriting_inputs(r.output, *inputs)
    check_writable(r.output)
    if r.merge:
        result = _merge(r)
    else:
        _check_fit_options(r)
        result = _serving_only(r) if not r.sglang_bench and not r.sglang_log else _whole_gpu(r)
    if r.output is not None:
        from ..util.atomic import write_text_atomic

        write_text_atomic(r.output, result.yaml)
    return result
