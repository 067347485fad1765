"""``pdmux capacity``: the highest request rate each policy sustains within the SLO, and a verdict.

Parse (the trace, server and cost-model options are simulate's), call
:func:`pdmux_cli.simulate.capacity.capacity`, render; matplotlib only for ``--plot``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from ..util.atomic import check_writable, refuse_overwriting_inputs
from ..util.errors import InputError
from ..sglang.kv_cache import KV_CACHE_DTYPE_HELP
from .app import app
from .common import console, gpu_file, model_file, output_file, parse_names, print_note, sglang_option
from .simulate import (
    ADMISSION_DELAY_OPTION,
    ADMISSION_INTERVAL_OPTION,
    COST_MODEL_HELP,
    DEFAULT_POLICIES,
    DISAGG_OPTION,
    DISAGG_TP_OPTION,
    DP_OPTION,
    DURATION_OPTION,
    EXECUTOR_OPTION,
    FIRST_TOKEN_DELAY_OPTION,
    FORMAT_OPTION,
    GPU_OPTION,
    KV_LINK_GB_S_OPTION,
    KV_LINK_LATENCY_OPTION,
    KV_LINK_OPTION,
    LOAD_BALANCE_OPTION,
    MAX_PREFILL_DECODE_INTERVAL,
    MAX_REQUESTS_OPTION,
    MAX_STEPS_OPTION,
    MIXED_CHUNK_SIZES_OPTION,
    MODEL_OPTION,
    NO_PREFIX_CACHE_OPTION,
    OUTPUT_TOKENS_OPTION,
    PER_REQUEST_OVERHEAD_OPTION,
    POLICIES,
    PREFILL_DECODE_INTERVAL_OPTION,
    PROMPT_TOKENS_OPTION,
    RAY_ADDRESS_OPTION,
    SEED_OPTION,
    SYNTHETIC_OPTION,
    TP_HELP,
    TRACE_ARGUMENT,
    TRACE_OPTION,
    _check_max_steps,
    _drop_past_context,
    _link_dict,
    _load_workload,
    _pdmux_config,
    _progress,
    _setup,
    _show_progress,
    on_gpus,
    parse_chunk_sizes,
    print_json,
    setup_and_cluster,
)


def _table(result: Any, title: str, width: int | None = None) -> Any:
    """The capacity table: a row per policy. On more than one GPU, a GPUs count, the layout and the rate per
    GPU; ``width`` (columns): the layout goes under the policy's name, then the runs column goes, then the
    headers take two lines, until the table fits (as simulate's tables fit a terminal of 80)."""
    from rich.console import Console

    if not any(p.layout.gpus > 1 for p in result.policies):
        return _build_table(result, title, True, True, False)
    shapes = [(True, True, False), (False, True, False), (False, False, False), (False, False, True)]
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

    from ..messages import rate_text
    from ..simulate.report import latency_cell

    policies = result.policies
    counts = sorted({p.gpus for p in policies})
    many = counts[-1] > 1 if counts else False
    layouts = any(p.layout.gpus > 1 for p in policies)
    over = ("req/s" if not many else f"req/s over all {counts[0]} GPUs" if len(counts) == 1
            else "req/s over all of a policy's GPUs")
    table = Table(title=title, title_justify="left",
                  caption=f"max rate: highest arrival rate ({over}) at which >= {result.target:.0%} of requests meet "
                          f"TTFT <= {result.slo_ttft_ms:g} ms and their p99 ITL <= {result.slo_itl_ms:g} ms"
                          + ("; per GPU: max rate / GPUs" if many else "")
                          + "; goodput and p99s (ms; from 10 s on in s) at that rate",
                  caption_justify="left")
    in_cell = layouts and not layout_column
    table.add_column("policy" + (("\n" if two_line else " / ") + "layout" if in_cell else ""), justify="left")
    columns = [("layout", "left")] if layout_column and layouts else []
    columns += [("GPUs", "right"), ("max rate", "right")] + ([("per GPU", "right")] if many else [])
    columns += [("SLO met", "right"), ("goodput", "right"), ("TTFT p99", "right"), ("ITL p99", "right")]
    columns += [("runs", "right")] if runs else []
    for col, just in columns:
        table.add_column(col.replace(" ", "\n") if two_line else col, justify=just, no_wrap=col == "layout")
    for p in policies:
        at = p.at
        cells = {"layout": str(p.layout), "GPUs": str(p.gpus), "max rate": rate_text(p),
                 "per GPU": _per_gpu_text(p),
                 "SLO met": f"{at.slo_attainment:.1%}" if at else "-", "goodput": f"{at.goodput_rps:.3g}" if at else "-",
                 "TTFT p99": latency_cell(at.ttft_p99_ms) if at else "-",
                 "ITL p99": latency_cell(at.itl_p99_ms) if at else "-", "runs": str(len(p.points))}
        label = f"{p.label}\n{p.layout}" if in_cell else p.label
        table.add_row(label, *(cells[col] for col, _ in columns), end_section=in_cell)
    return table


def _per_gpu_text(p: Any) -> str:
    """The capacity per GPU, with the bound of :func:`pdmux_cli.messages.rate_text`."""
    if p.bound == "below":
        return f"<{p.points[0].rate_rps / p.gpus:.3g}" if p.points else "0"
    return (">=" if p.bound == "above" else "") + f"{p.per_gpu_rps:.3g}"


def _point_dict(p: Any) -> dict[str, Any]:
    return {"rate_rps": p.rate_rps, "slo_attainment": p.slo_attainment, "goodput_rps": p.goodput_rps,
            "ttft_p99_ms": p.ttft_p99_ms, "itl_p99_ms": p.itl_p99_ms, "unfinished": p.unfinished}


def _launch_notes(cluster: Any, tp: int, colocated: bool = True) -> list[str]:
    """What the verdict's flags mean on more than one server (SGLang 0.5.23); ``colocated``: policies other
    than disagg ran (the DP flags are theirs)."""
    notes = []
    if cluster.dp > 1 and colocated:
        notes.append(
            f"DP {cluster.dp}: the verdict's --dp-size {cluster.dp} --load-balance-method {cluster.method} runs the "
            f"replicas as one SGLang server (its data-parallel controller, {cluster.dp * tp} GPUs); {cluster.dp} servers "
            "with the other flags behind sgl-router are the same replicas. SGLang 0.5.23's checks do not refuse "
            "--dp-size with --enable-pdmux (srt/arg_groups/validation_hook.py), but pdmux under DP is untried here")
    if cluster.disagg is not None:
        d = cluster.disagg
        notes.append(
            f"{d.label}: {d.prefill} prefill server(s) (--disaggregation-mode prefill --chunked-prefill-size -1: whole "
            f"prompts, as simulated) and {d.decode} decode server(s) "
            f"(--disaggregation-mode decode), each TP {d.instance_setup.tp if d.instance_setup else tp}, fronted by a router: python -m sglang_router.launch_router "
            "--pd-disaggregation --prefill URL ... --decode URL ... (SGLang 0.5.23 refuses --enable-pdmux with "
            "either mode: srt/arg_groups/validation_hook.py)")
    return notes


#: Fewer requests than this cannot show a sustained rate: the whole trace is one burst.
MIN_REQUESTS = 50
#: A policy's capacity is noted as a burst's when, at that rate, each of its servers gets fewer requests
#: than this or the trace lasts less than :data:`SHORT_SPAN_S`: several replicas drain a short burst
#: that one server queues, and the rate per GPU comes out higher than any sustained one.
MIN_REQUESTS_PER_SERVER = 200
SHORT_SPAN_S = 30.0


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
    policies: str = typer.Option(DEFAULT_POLICIES, "--policies", help="Comma-separated: pdmux, chunked, mixed-chunk, prefill-first, disagg (with --disagg)."),
    chunk_sizes: str | None = typer.Option(None, "--chunk-sizes", help="Chunk sizes of 'chunked' (default: SGLang's default for the GPU)."),
    mixed_chunk_sizes: str = MIXED_CHUNK_SIZES_OPTION,
    config: list[Path] | None = typer.Option(None, "--config", help="Also size pdmux with this YAML (e.g. from 'pdmux tune' or 'pdmux gen-config --slo-itl'), beside SGLang's defaults; repeat it for several."),
    unreleased_fallback: bool = typer.Option(False, "--unreleased-fallback", help="pdmux: where SGLang 0.5.23 crashes (no manual threshold matches), use group 1 as its unreleased branches do."),
    prefill_decode_interval: int = PREFILL_DECODE_INTERVAL_OPTION,
    slo_ttft: float = typer.Option(1000.0, "--slo-ttft", help="TTFT SLO, ms."),
    slo_itl: float = typer.Option(60.0, "--slo-itl", help="ITL SLO, ms (judged on each request's p99 ITL)."),
    target: float = typer.Option(0.99, "--target", help="Share of requests that must meet the SLO."),
    tolerance: float = typer.Option(0.02, "--tolerance", help="Relative precision of the rate found."),
    cost_model: str = typer.Option("roofline", "--cost-model", help=COST_MODEL_HELP),
    s_sat: float | None = typer.Option(None, "--s-sat", help="SMs that reach 95% of HBM bandwidth (default: the cost model's)."),
    calibration: Path | None = typer.Option(None, "--calibration", help="calibration.yaml from 'pdmux bench' and/or 'pdmux calibrate'."),
    step_overhead_ms: float | None = typer.Option(None, "--step-overhead-ms", help="Roofline model: the engine's CPU time per step, ms (0 = kernels only)."),
    per_request_overhead_ms: float | None = PER_REQUEST_OVERHEAD_OPTION,
    admission_delay_ms: float | None = ADMISSION_DELAY_OPTION,
    first_token_delay_ms: float | None = FIRST_TOKEN_DELAY_OPTION,
    admission_interval_ms: float | None = ADMISSION_INTERVAL_OPTION,
    kv_bytes: float | None = typer.Option(None, "--kv-bytes", help="Bytes per KV-cache element (default: by --kv-cache-dtype)."),
    kv_cache_dtype: str | None = typer.Option(None, "--kv-cache-dtype", help=KV_CACHE_DTYPE_HELP),
    mem_fraction_static: float | None = typer.Option(None, "--mem-fraction-static", help="SGLang's flag (default: SGLang's own, per policy)."),
    max_prefill_tokens: int = typer.Option(16384, "--max-prefill-tokens", help="SGLang's --max-prefill-tokens."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Requests run to their max_new_tokens (benchmark traffic)."),
    no_prefix_cache: bool = NO_PREFIX_CACHE_OPTION,
    workers: int | None = typer.Option(None, "--workers", help="Processes (default: the cores available); with --executor ray, tasks at a time (default: the cluster's CPUs)."),
    executor: str = EXECUTOR_OPTION,
    ray_address: str | None = RAY_ADDRESS_OPTION,
    max_steps: int | None = MAX_STEPS_OPTION,
    tp: int = typer.Option(1, "--tp", help=TP_HELP),
    dp: int | None = DP_OPTION,
    load_balance_method: str | None = LOAD_BALANCE_OPTION,
    disagg: str | None = DISAGG_OPTION,
    disagg_tp: int | None = DISAGG_TP_OPTION,
    kv_link: str = KV_LINK_OPTION,
    kv_link_gb_s: float | None = KV_LINK_GB_S_OPTION,
    kv_link_latency_us: float | None = KV_LINK_LATENCY_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    plot: Path | None = typer.Option(None, "--plot", parser=output_file, metavar="<path>", help="Write SLO attainment vs request rate, one curve per policy, to this PNG."),
    sglang: str = sglang_option(),
) -> None:
    """The highest request rate each policy sustains within the SLO, and whether to turn pdmux on.

    Retimes the trace (as --qps does) and bisects the arrival rate per policy with the simulator, in
    parallel on the cores available. The rate is the whole deployment's: one server of --tp GPUs,
    --dp replicas of it behind a router, or --disagg XPYD instances; the table also gives it per GPU."""
    from ..simulate.capacity import capacity as search
    from ..simulate.schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy

    if trace is not None and trace_option is not None:
        raise InputError("give the trace once: as the TRACE argument or as --trace, not both")
    trace = trace if trace is not None else trace_option
    names = parse_names(policies, "--policies", POLICIES)
    if "disagg" in names and disagg is None:
        raise InputError("--policies disagg needs --disagg XPYD (prefill and decode instances, e.g. 1P1D)")
    if disagg is not None and "disagg" not in names:
        names.append("disagg")
    configs = list(dict.fromkeys(config or []))
    if configs and "pdmux" not in names:
        names.append("pdmux")
    if qps is not None and not synthetic:
        raise InputError("--qps draws --synthetic arrivals; capacity searches a trace file's rate itself")
    if not 0 <= prefill_decode_interval <= MAX_PREFILL_DECODE_INTERVAL:
        raise InputError(f"--prefill-decode-interval must be 0 to {MAX_PREFILL_DECODE_INTERVAL:,} decode-only rounds "
                         f"after each prefill batch, got {prefill_decode_interval}")
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    from ..simulate.executors import check_executor

    executor = check_executor(executor, ray_address)
    _check_max_steps(max_steps)
    if plot is not None and plot.suffix.lower() != ".png":
        raise InputError(f"--plot writes a PNG: give a file name ending in .png, got {plot}")
    refuse_overwriting_inputs(plot, trace, *configs, calibration, model_file(model), gpu_file(gpu))
    check_writable(plot)
    chunks = parse_chunk_sizes(chunk_sizes, "--chunk-sizes") if chunk_sizes is not None and "chunked" in names else []
    mixed = parse_chunk_sizes(mixed_chunk_sizes, "--mixed-chunk-sizes") if "mixed-chunk" in names else []
    workload = _load_workload(trace, synthetic, fmt, qps, None, max_requests, duration, seed, prompt_tokens,
                              output_tokens)
    setup, cluster = setup_and_cluster(
        lambda n: _setup(gpu, model, cost_model=cost_model, s_sat=s_sat, calibration=calibration, kv_bytes=kv_bytes,
                         kv_cache_dtype=kv_cache_dtype, mem_fraction_static=mem_fraction_static,
                         max_prefill_tokens=max_prefill_tokens, ignore_eos=ignore_eos, tp=n,
                         step_overhead_ms=step_overhead_ms, per_request_overhead_ms=per_request_overhead_ms,
                         admission_delay_ms=admission_delay_ms, first_token_delay_ms=first_token_delay_ms,
                         admission_interval_ms=admission_interval_ms),
        tp, no_prefix_cache, names, gpu, dp, load_balance_method, disagg, kv_link, kv_link_gb_s, kv_link_latency_us,
        disagg_tp)
    workload = _drop_past_context(workload, setup.model, None, None, duration)
    if "chunked" in names and not chunks:
        from ..sglang.server_defaults import default_chunked_prefill_size

        chunks = [default_chunked_prefill_size(setup.memory_bytes)]
    from ..sglang.revisions import model_support

    support = model_support(setup.model.architectures, sglang)
    notes: list[str] = []
    if support.state == "no":  # never sized, so never recommended
        if config is not None or names == ["pdmux"]:
            raise InputError(f"pdmux: {support.reason} (--sglang picks another SGLang revision)")
        names = [n for n in names if n != "pdmux"]
        notes.append(f"pdmux not sized: {support.reason}")
    elif support.state == "unknown":
        notes.append(f"pdmux: {support.reason}")
    runs: list[Any] = []
    paths: list[str | None] = []
    for name in dict.fromkeys(names):
        if name == "pdmux":
            from ..messages import render_all
            from ..sglang.revision_rules import layer_cap, plan_check, revision_findings
            from ..sglang.revisions import get_revision

            rev = get_revision(sglang)
            fallback = unreleased_fallback or rev.threshold_fallback
            notes.extend(render_all(revision_findings(rev, setup.tp)))
            if rev.divide_sm != "not read" or not configs:
                plan_check(rev, None)  # SGLang's defaults: its automatic split
                runs.append(PdmuxPolicy(unreleased_fallback=fallback))
                paths.append(None)
            names_seen = [c.name for c in configs]
            for path in configs:  # the file's name, or its path where two files share a name
                cfg, cfg_notes = _pdmux_config(path, None, None, None, None, setup)
                plan_check(rev, cfg)
                shown = path.name if names_seen.count(path.name) == 1 else str(path)
                runs.append(PdmuxPolicy(cfg, name=f"pdmux ({shown})", unreleased_fallback=fallback,
                                        max_split_forward_layers=layer_cap(rev, cfg)))
                paths.append(str(path))
                notes.extend(cfg_notes)
        elif name == "chunked":
            runs.extend(ChunkedPolicy(c, prefill_decode_interval) for c in dict.fromkeys(chunks))
            paths.extend(None for _ in dict.fromkeys(chunks))
        elif name == "mixed-chunk":
            runs.extend(MixedChunkPolicy(c, prefill_decode_interval) for c in dict.fromkeys(mixed))
            paths.extend(None for _ in dict.fromkeys(mixed))
        elif name == "disagg":
            runs.append(cluster.disagg)
            paths.append(None)
        else:
            runs.append(PrefillFirstPolicy(prefill_decode_interval))
            paths.append(None)

    # about 10 simulations a policy: the bar's total is a guess, corrected as searches end
    from ..simulate.engine import step_budget

    budget = step_budget(len(workload), max_steps)
    label = "sizing" + (" on Ray" if executor == "ray" else "") + (
        f" (budget {budget:,} steps)" if budget else "")
    bar, update = _progress(_show_progress(as_json), 10 * len(runs), label)
    if bar is not None:
        bar.start()
    try:
        result = search(workload, setup, runs, slo_ttft, slo_itl, target, tolerance, workers, update, paths,
                        dp=cluster.dp, load_balance_method=cluster.method, executor=executor,
                        ray_address=ray_address, max_steps=max_steps)
    finally:
        if bar is not None:
            bar.stop()
    title = (f"{workload.source}: {len(workload)} requests, {workload.mean_qps:.3g} req/s as recorded; "
             f"{setup.model.name} on {on_gpus(setup)}, {setup.step_model.source}")
    if plot is not None:
        from ..simulate.plot import write_capacity_plot

        write_capacity_plot(plot, result, title)
    notes += [workload.bad_rows_text()] if workload.bad_rows else []
    notes += list(cluster.notes)
    notes += _launch_notes(cluster, setup.tp, any(name != "disagg" for name in names))
    notes += list(workload.notes)
    if len(workload) < MIN_REQUESTS:
        notes.append(f"only {len(workload)} requests: too few to measure a sustained rate (their burst drains at any "
                     f"rate); give a trace of at least {MIN_REQUESTS}")
    for p in result.policies:
        # a disaggregated request visits one instance a side: the side with more instances sees fewer each
        servers = max(p.xpyd) if p.xpyd else (cluster.dp if p.kind != "disagg" else 1)
        if p.max_rate_rps > 0 and len(workload) >= MIN_REQUESTS:
            span = len(workload) / p.max_rate_rps
            few = servers > 1 and len(workload) / servers < MIN_REQUESTS_PER_SERVER
            if span < SHORT_SPAN_S or few:
                where = (f", {len(workload) / servers:.0f} a server: a burst its {servers} servers drain"
                         if servers > 1 else ": a burst")
                notes.append(f"{p.label}: at {p.max_rate_rps:.3g} req/s the {len(workload)} requests arrive within "
                             f"{span:.3g} s{where}, not a sustained rate (the rate is optimistic); give more requests "
                             "(--max-requests, --duration)")
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
            "model": setup.model.name, "gpu": setup.gpu_name, "tp": setup.tp, "dp": cluster.dp,
            "gpus": cluster.gpus, "load_balance_method": cluster.router,
            "disagg": cluster.disagg.label.split()[-1] if cluster.disagg else None,
            "disagg_tp": cluster.disagg.setup_for(setup).tp if cluster.disagg else None,
            "kv_link": _link_dict(cluster.disagg.link) if cluster.disagg else None,
            "rate_rps_is": "requests/s over all of a policy's GPUs (max_rate_per_gpu_rps: divided by them)",
            "cost_model": setup.step_model.name,
            "slo": {"ttft_ms": slo_ttft, "itl_ms": slo_itl, "itl_judged_on": "request p99 ITL (nearest rank)"},
            "target": target, "tolerance": tolerance, "workers": result.workers,
            "policies": [{"policy": p.label, "kind": p.kind, "gpus": p.gpus, "layout": str(p.layout),
                          "router": p.router or None, "max_rate_rps": p.max_rate_rps,
                          "max_rate_per_gpu_rps": p.per_gpu_rps, "bound": p.bound or None,
                          "at": _point_dict(p.at) if p.at else None, "config": p.config_path,
                          "points": [_point_dict(x) for x in p.points]} for p in result.policies],
            "verdict": result.verdict(), "plot": str(plot) if plot else None, "notes": notes,
            "sglang_support": support.as_dict(),
        })
        return
    con = console()
    con.print(_table(result, title, con.width))
    con.print("verdict: " + result.verdict(), soft_wrap=True)
    for note in notes:
        print_note(con, note)
    if plot is not None:
        con.print(f"wrote {plot} (SLO attainment vs request rate)")
    sys.stdout.flush()
