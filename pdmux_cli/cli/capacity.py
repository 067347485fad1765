"""``pdmux capacity``: the highest request rate each policy sustains within the SLO, and a verdict.

Parse (the trace, server and cost-model options are simulate's), call
:func:`pdmux_cli.simulate.capacity.capacity`, render; matplotlib only for ``--plot``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from ..atomic import check_writable, refuse_overwriting_inputs
from ..errors import InputError
from . import app
from .common import console, gpu_file, model_file, print_note
from .simulate import (
    COST_MODEL_HELP,
    DEFAULT_POLICIES,
    DURATION_OPTION,
    FORMAT_OPTION,
    GPU_OPTION,
    MAX_PREFILL_DECODE_INTERVAL,
    MAX_REQUESTS_OPTION,
    MIXED_CHUNK_SIZES_OPTION,
    MODEL_OPTION,
    NO_PREFIX_CACHE_OPTION,
    OUTPUT_TOKENS_OPTION,
    POLICIES,
    PREFILL_DECODE_INTERVAL_OPTION,
    PROMPT_TOKENS_OPTION,
    SEED_OPTION,
    SYNTHETIC_OPTION,
    TP_HELP,
    TRACE_ARGUMENT,
    TRACE_OPTION,
    _drop_past_context,
    _load_workload,
    _pdmux_config,
    _progress,
    _setup,
    _show_progress,
    on_gpus,
    parse_chunk_sizes,
    print_json,
    without_prefix_cache,
)


def _table(result: Any, title: str, gpus: int = 1) -> Any:
    from rich.table import Table

    from ..simulate.capacity import rate_text
    from ..simulate.report import latency_cell

    table = Table(title=title, title_justify="left",
                  caption=f"max rate: highest arrival rate (req/s) at which >= {result.target:.0%} of requests meet "
                          f"TTFT <= {result.slo_ttft_ms:g} ms and their p99 ITL <= {result.slo_itl_ms:g} ms; "
                          "goodput and p99s (ms; from 10 s on in s) at that rate",
                  caption_justify="left")
    for col, just in (("policy", "left"), ("max rate", "right"), ("SLO met", "right"), ("goodput", "right"),
                      ("TTFT p99", "right"), ("ITL p99", "right"), ("runs", "right"), ("GPUs", "right")):
        table.add_column(col, justify=just)
    for p in result.policies:
        at = p.at
        table.add_row(p.label, rate_text(p), f"{at.slo_attainment:.1%}" if at else "-",
                      f"{at.goodput_rps:.3g}" if at else "-", latency_cell(at.ttft_p99_ms) if at else "-",
                      latency_cell(at.itl_p99_ms) if at else "-", str(len(p.points)), str(gpus))
    return table


def _point_dict(p: Any) -> dict[str, Any]:
    return {"rate_rps": p.rate_rps, "slo_attainment": p.slo_attainment, "goodput_rps": p.goodput_rps,
            "ttft_p99_ms": p.ttft_p99_ms, "itl_p99_ms": p.itl_p99_ms, "unfinished": p.unfinished}


#: Fewer requests than this cannot show a sustained rate: the whole trace is one burst.
MIN_REQUESTS = 50


@app.command()
def capacity(
    trace: Path | None = TRACE_ARGUMENT,
    trace_option: Path | None = TRACE_OPTION,
    synthetic: bool = SYNTHETIC_OPTION,
    fmt: str | None = FORMAT_OPTION,
    qps: float | None = typer.Option(None, "--qps", help="Synthetic: the rate the arrivals are drawn at (the search scales it)."),
    max_requests: int | None = MAX_REQUESTS_OPTION,
    duration: float | None = DURATION_OPTION,
    seed: int = SEED_OPTION,
    prompt_tokens: str = PROMPT_TOKENS_OPTION,
    output_tokens: str = OUTPUT_TOKENS_OPTION,
    model: str = MODEL_OPTION,
    gpu: str | None = GPU_OPTION,
    policies: str = typer.Option(DEFAULT_POLICIES, "--policies", help="Comma-separated: pdmux, chunked, mixed-chunk, prefill-first."),
    chunk_sizes: str | None = typer.Option(None, "--chunk-sizes", help="Chunk sizes of 'chunked' (default: SGLang's default for the GPU)."),
    mixed_chunk_sizes: str = MIXED_CHUNK_SIZES_OPTION,
    config: Path | None = typer.Option(None, "--config", help="Also size pdmux with this YAML (e.g. from 'pdmux tune'), beside SGLang's defaults."),
    unreleased_fallback: bool = typer.Option(False, "--unreleased-fallback", help="pdmux: where SGLang 0.5.23 crashes (no manual threshold matches), use group 1 as its unreleased branches do."),
    prefill_decode_interval: int = PREFILL_DECODE_INTERVAL_OPTION,
    slo_ttft: float = typer.Option(1000.0, "--slo-ttft", help="TTFT SLO, ms."),
    slo_itl: float = typer.Option(60.0, "--slo-itl", help="ITL SLO, ms (judged on each request's p99 ITL)."),
    target: float = typer.Option(0.99, "--target", help="Share of requests that must meet the SLO."),
    tolerance: float = typer.Option(0.02, "--tolerance", help="Relative precision of the rate found."),
    cost_model: str = typer.Option("roofline", "--cost-model", help=COST_MODEL_HELP),
    s_sat: float | None = typer.Option(None, "--s-sat", help="SMs that reach 95% of HBM bandwidth (default: the cost model's)."),
    calibration: Path | None = typer.Option(None, "--calibration", help="calibration.yaml from 'pdmux bench' and/or 'pdmux calibrate'."),
    kv_bytes: float = typer.Option(2.0, "--kv-bytes", help="Bytes per KV-cache element."),
    mem_fraction_static: float | None = typer.Option(None, "--mem-fraction-static", help="SGLang's flag (default: SGLang's own, per policy)."),
    max_prefill_tokens: int = typer.Option(16384, "--max-prefill-tokens", help="SGLang's --max-prefill-tokens."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Requests run to their max_new_tokens (benchmark traffic)."),
    no_prefix_cache: bool = NO_PREFIX_CACHE_OPTION,
    workers: int | None = typer.Option(None, "--workers", help="Processes (default: the cores available)."),
    tp: int = typer.Option(1, "--tp", help=TP_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    plot: Path | None = typer.Option(None, "--plot", help="Write SLO attainment vs request rate, one curve per policy, to this PNG."),
) -> None:
    """The highest request rate each policy sustains within the SLO, and whether to turn pdmux on.

    Retimes the trace (as --qps does) and bisects the arrival rate per policy with the simulator, in
    parallel on the cores available."""
    from ..simulate.capacity import capacity as search
    from ..simulate.schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy

    if trace is not None and trace_option is not None:
        raise InputError("give the trace once: as the TRACE argument or as --trace, not both")
    trace = trace if trace is not None else trace_option
    names = [p.strip().lower() for p in policies.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        raise InputError(f"--policies: unknown {', '.join(unknown) or '(empty)'}; use {', '.join(POLICIES)}")
    if config is not None and "pdmux" not in names:
        names.append("pdmux")
    if qps is not None and not synthetic:
        raise InputError("--qps draws --synthetic arrivals; capacity searches a trace file's rate itself")
    if not 0 <= prefill_decode_interval <= MAX_PREFILL_DECODE_INTERVAL:
        raise InputError(f"--prefill-decode-interval must be 0 to {MAX_PREFILL_DECODE_INTERVAL:,} decode-only rounds "
                         f"after each prefill batch, got {prefill_decode_interval}")
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    if plot is not None and plot.suffix.lower() != ".png":
        raise InputError(f"--plot writes a PNG: give a file name ending in .png, got {plot}")
    refuse_overwriting_inputs(plot, trace, config, calibration, model_file(model), gpu_file(gpu))
    check_writable(plot)
    chunks = parse_chunk_sizes(chunk_sizes, "--chunk-sizes") if chunk_sizes is not None and "chunked" in names else []
    mixed = parse_chunk_sizes(mixed_chunk_sizes, "--mixed-chunk-sizes") if "mixed-chunk" in names else []
    workload = _load_workload(trace, synthetic, fmt, qps, None, max_requests, duration, seed, prompt_tokens,
                              output_tokens)
    setup = _setup(gpu, model, cost_model=cost_model, s_sat=s_sat, calibration=calibration, kv_bytes=kv_bytes,
                   mem_fraction_static=mem_fraction_static, max_prefill_tokens=max_prefill_tokens,
                   ignore_eos=ignore_eos, tp=tp)
    if no_prefix_cache:
        setup = without_prefix_cache(setup)
    workload = _drop_past_context(workload, setup.model, None, None, duration)
    if "chunked" in names and not chunks:
        from ..sglang_server import default_chunked_prefill_size

        chunks = [default_chunked_prefill_size(setup.memory_bytes)]
    runs: list[Any] = []
    paths: list[str | None] = []
    notes: list[str] = []
    for name in dict.fromkeys(names):
        if name == "pdmux":
            runs.append(PdmuxPolicy(unreleased_fallback=unreleased_fallback))
            paths.append(None)
            if config is not None:
                cfg, cfg_notes = _pdmux_config(config, None, None, None, None, setup)
                runs.append(PdmuxPolicy(cfg, name=f"pdmux ({config.name})", unreleased_fallback=unreleased_fallback))
                paths.append(str(config))
                notes.extend(cfg_notes)
        elif name == "chunked":
            runs.extend(ChunkedPolicy(c, prefill_decode_interval) for c in dict.fromkeys(chunks))
            paths.extend(None for _ in dict.fromkeys(chunks))
        elif name == "mixed-chunk":
            runs.extend(MixedChunkPolicy(c, prefill_decode_interval) for c in dict.fromkeys(mixed))
            paths.extend(None for _ in dict.fromkeys(mixed))
        else:
            runs.append(PrefillFirstPolicy(prefill_decode_interval))
            paths.append(None)

    # about 10 simulations a policy: the bar's total is a guess, corrected as searches end
    bar, update = _progress(_show_progress(as_json), 10 * len(runs), "sizing")
    if bar is not None:
        bar.start()
    try:
        result = search(workload, setup, runs, slo_ttft, slo_itl, target, tolerance, workers, update, paths)
    finally:
        if bar is not None:
            bar.stop()
    title = (f"{workload.source}: {len(workload)} requests, {workload.mean_qps:.3g} req/s as recorded; "
             f"{setup.model.name} on {on_gpus(setup)}, {setup.step_model.source}")
    if plot is not None:
        from ..simulate.plot import write_capacity_plot

        write_capacity_plot(plot, result, title)
    notes += [workload.bad_rows_text()] if workload.bad_rows else []
    notes += list(workload.notes)
    if len(workload) < MIN_REQUESTS:
        notes.append(f"only {len(workload)} requests: too few to measure a sustained rate (their burst drains at any "
                     f"rate); give a trace of at least {MIN_REQUESTS}")
    for p in result.policies:
        if p.bound == "above":
            notes.append(f"{p.label}: met the target at every rate tried, up to {p.max_rate_rps:.3g} req/s")
        if any(x.crashed for x in p.points):
            notes.append(f"{p.label}: SGLang 0.5.23 crashes with this config at some rates (no manual_divisions "
                         "threshold matches a decode batch; 'pdmux check-config' says which): those runs count as "
                         "missing the SLO; --unreleased-fallback sizes the unreleased branches' behaviour instead")
        elif p.bound == "below":
            notes.append(f"{p.label}: missed the target at every rate tried, down to {p.points[0].rate_rps:.3g} "
                         "req/s (a single request may already miss the SLO: see pdmux estimate)")
    if as_json:
        print_json({
            "trace": workload.source, "requests": len(workload), "trace_rate_rps": result.trace_rate_rps,
            "model": setup.model.name, "gpu": setup.gpu_name, "tp": setup.tp, "gpus": setup.tp,
            "cost_model": setup.step_model.name,
            "slo": {"ttft_ms": slo_ttft, "itl_ms": slo_itl, "itl_judged_on": "request p99 ITL (nearest rank)"},
            "target": target, "tolerance": tolerance, "workers": result.workers,
            "policies": [{"policy": p.label, "kind": p.kind, "gpus": setup.tp, "max_rate_rps": p.max_rate_rps,
                          "bound": p.bound or None,
                          "at": _point_dict(p.at) if p.at else None, "config": p.config_path,
                          "points": [_point_dict(x) for x in p.points]} for p in result.policies],
            "verdict": result.verdict(), "plot": str(plot) if plot else None, "notes": notes,
        })
        return
    con = console()
    con.print(_table(result, title, setup.tp))
    con.print("verdict: " + result.verdict(), soft_wrap=True)
    for note in notes:
        print_note(con, note)
    if plot is not None:
        con.print(f"wrote {plot} (SLO attainment vs request rate)")
    sys.stdout.flush()
