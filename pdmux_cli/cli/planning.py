"""The planning commands: ``splits``, ``estimate``, ``gen-config``, ``check-config``.

Parse options, call one workflow (:mod:`pdmux_cli.workflows`), render its result. None of these import
torch, cuda-python, numpy or matplotlib (tests/test_cli_imports.py checks it).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from ..catalog.model import DEFAULT_MODEL
from ..sglang.kv_cache import KV_CACHE_DTYPE_HELP
from ..workflows.estimate import EstimateRequest
from ..workflows.gen_config import GenConfigRequest
from ..workflows.fields import SERVING_TERMS, SPECULATIVE
from ..workflows.planning_inputs import GPU_HELP, TP_HELP
from ..workflows.server import ServerOptions
from .app import app
from .options import request_of, with_declared, with_group
from .common import (
    NON_FINITE,
    console,
    fail_line,
    output_file,
    print_json,
    print_note,
    require_finite,
    sglang_option,
    styled,
    warn_line,
)

JSON_HELP = "Print JSON (stable keys, units in the key names)."
#: Most problems check-config shows as table rows (a runaway file can have tens of thousands).
MAX_PROBLEM_ROWS = 50


@app.command()
def splits(
    gpu: str | None = typer.Option(None, "--gpu", "-g", help=GPU_HELP + " Default: h100."),
    sms: int | None = typer.Option(None, "--sms", help="SM count of any device (with --cc)."),
    cc: str | None = typer.Option(None, "--cc", help="Compute capability of that device, e.g. 9.0."),
    all_gpus: bool = typer.Option(False, "--all", help="One table of every GPU profile's levels."),
    decode_bs: str = typer.Option("1,6,12,18,24,30,36,64", "--decode-bs",
                                  help="Decode batch sizes to choose a level for."),
    prompt_tokens: str = typer.Option("512,8192,32768,131072", "--prompt-tokens",
                                      help="Prompt lengths for layers per round."),
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m",
                              help="Model profile or config.json (its layer count)."),
    sm_group_num: int | None = typer.Option(None, "--sm-group-num",
                                            help="Stream groups incl. the two whole-GPU ones (SGLang default "
                                            "8)."),
    decode_bs_divisor: int | None = typer.Option(None, "--decode-bs-divisor",
                                                 help="Divisor of the linear level rule (default 36)."),
    token_budget: int | None = typer.Option(None, "--token-budget",
                                            help="split_forward_token_budget (default 65536)."),
    config: Path | None = typer.Option(None, "--config",
                                       help="An existing pdmux YAML: its levels, thresholds and knobs are "
                                       "used."),
    tp: int = typer.Option(1, "--tp",
                           help="Tensor parallelism (GPUs, 1-8): every GPU builds the same groups and takes "
                           "the same level; --model's heads and widths must split."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """The SM split levels (stream groups) SGLang builds, the level it picks per decode batch, and prefill
    layers per round."""
    from ..workflows.splits import AllGpusSplits, SplitsRequest
    from ..workflows.splits import splits as run_splits

    result = run_splits(SplitsRequest(
        gpu=gpu, sms=sms, cc=cc, all_gpus=all_gpus, decode_bs=decode_bs, prompt_tokens=prompt_tokens,
        model=model, sm_group_num=sm_group_num, decode_bs_divisor=decode_bs_divisor,
        token_budget=token_budget, config=config, tp=tp))
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


@app.command()
@with_group(EstimateRequest, SERVING_TERMS, after="step_overhead_ms")
@with_group(ServerOptions, SPECULATIVE, after="disable_cuda_graph")
def estimate(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m",
                              help="Model profile name or path to a Hugging Face config.json."),
    gpu: str | None = typer.Option(None, "--gpu", "-g", help=GPU_HELP + " Default: h100."),
    decode_bs: int = typer.Option(32, "--decode-bs", help="Requests in decode when the prompt arrives."),
    context: int = typer.Option(2048, "--context", help="KV-cache tokens of each decode request."),
    prompt_tokens: int = typer.Option(8192, "--prompt-tokens", help="Tokens of the prompt that slips in."),
    chunk_sizes: str | None = typer.Option(None, "--chunk-sizes",
                                           help="Chunk sizes of SGLang's default chunked prefill (decode "
                                           "waits for every chunk), tokens, or 'none' (default: SGLang's "
                                           "default size for the GPU; none under --cost-model chapter)."),
    mixed_chunk_sizes: str = typer.Option("2048,512", "--mixed-chunk-sizes",
                                          help="Chunk sizes with --enable-mixed-chunk (decode runs in every "
                                          "chunk step; the chapter's chunked rows), or 'none'."),
    cost_model: str = typer.Option("roofline", "--cost-model",
                                   help="roofline (fitted to measurements) or chapter (the chapter's "
                                   "illustrative model)."),
    s_sat: str | None = typer.Option(None, "--s-sat",
                                     help="SMs that reach 95% of HBM bandwidth, e.g. 44,66,88 (default: "
                                     "roofline's fit; chapter: 1/3, 1/2, 2/3 of the SMs)."),
    bandwidth_efficiency: float | None = typer.Option(None, "--bandwidth-efficiency",
                                                      help="Chapter model: fraction of datasheet HBM "
                                                      "bandwidth decode reaches (default 0.85)."),
    mfu: float | None = typer.Option(None, "--mfu",
                                     help="Chapter model: fraction of dense FLOP/s prefill reaches (default "
                                     "0.5)."),
    step_overhead_ms: float | None = typer.Option(None, "--step-overhead-ms",
                                                  help="Roofline model: the engine's CPU time per step, ms "
                                                  "(0 = kernels only; default: SGLang's measured 0.31)."),
    disable_cuda_graph: bool = typer.Option(False, "--disable-cuda-graph", help=(
        "SGLang's flag: no CUDA graphs, decode and prefill launched kernel by kernel.")),
    weight_bytes: float | None = typer.Option(None, "--weight-bytes",
                                              help="Bytes per weight (default: the model's dtype; bf16 2, "
                                              "fp8 1)."),
    kv_bytes: float | None = typer.Option(None, "--kv-bytes",
                                          help="Bytes per KV-cache element (bf16 2, fp8 1; default: by "
                                          "--kv-cache-dtype)."),
    kv_cache_dtype: str | None = typer.Option(None, "--kv-cache-dtype", help=KV_CACHE_DTYPE_HELP),
    level: str = typer.Option("auto", "--level",
                              help="PREFILL/DECODE SMs, e.g. 96/36, or 'auto' for SGLang's choice."),
    all_levels: bool = typer.Option(False, "--all-levels",
                                    help="Also show ITL and prefill time at every level."),
    sm_group_num: int | None = typer.Option(None, "--sm-group-num",
                                            help="SGLang's sm_group_num (default 8)."),
    decode_bs_divisor: int | None = typer.Option(None, "--decode-bs-divisor",
                                                 help="SGLang's decode_bs_divisor (default 36)."),
    token_budget: int | None = typer.Option(None, "--token-budget",
                                            help="SGLang's split_forward_token_budget (default 65536)."),
    config: Path | None = typer.Option(None, "--config", help="A pdmux YAML whose levels and knobs to use."),
    flops_dtype: str | None = typer.Option(None, "--flops-dtype",
                                           help="bf16, fp16 or fp8 dense math (default: by model)."),
    calibration: Path | None = typer.Option(None, "--calibration",
                                            help="calibration.yaml from 'pdmux bench' (measured SM-partition "
                                            "curves replace S_SAT) and/or 'pdmux calibrate' (whole-GPU "
                                            "efficiencies from your SGLang)."),
    tp: int = typer.Option(1, "--tp", help=TP_HELP),
    disagg: str | None = typer.Option(None, "--disagg",
                                      help="Also a row of PD disaggregation with X prefill and Y decode "
                                      "instances of --tp GPUs each, e.g. 1P1D or 2P6D: TTFT = whole-GPU "
                                      "prefill + the KV transfer, decode undisturbed."),
    kv_link: str = typer.Option("auto", "--kv-link",
                                help="--disagg's KV link: auto (the GPU's NVLink/PCIe within a node of 8 "
                                "GPUs, RDMA 400 Gb/s per GPU across nodes), nvlink, pcie or rdma."),
    kv_link_gb_s: float | None = typer.Option(None, "--kv-link-gb-s",
                                              help="--disagg's KV link bandwidth per GPU and direction, GB/s "
                                              "(overrides --kv-link's)."),
    kv_link_latency_us: float | None = typer.Option(None, "--kv-link-latency-us",
                                                    help="--disagg's KV link latency per transfer, us "
                                                    "(overrides --kv-link's)."),
    disagg_tp: int | None = typer.Option(None, "--disagg-tp",
                                         help="--disagg: each instance's TP (default --tp)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    plot: Path | None = typer.Option(None, "--plot", parser=output_file, metavar="<path>",
                                     help="Write ITL against prefill time at every level, the other policies "
                                     "as points, to this PNG."),
    sglang: str = sglang_option(),
    **groups: Any,
) -> None:
    """ITL, prefill time and tokens gained for prefill-first, chunked, mixed-chunk prefill and PD multiplexing
    (and PD disaggregation with --disagg).

    With no options: the chapter's scenario (Qwen3-8B on H100 SXM, 32 x 2048, an 8192-token prompt);
    --cost-model chapter reproduces the chapter's table."""
    from ..workflows.estimate import estimate as run_estimate
    from . import render

    result = run_estimate(EstimateRequest(
        model=model, gpu=gpu, decode_bs=decode_bs, context=context, prompt_tokens=prompt_tokens,
        chunk_sizes=chunk_sizes, mixed_chunk_sizes=mixed_chunk_sizes, cost_model=cost_model, s_sat=s_sat,
        bandwidth_efficiency=bandwidth_efficiency, mfu=mfu, step_overhead_ms=step_overhead_ms,
        disable_cuda_graph=disable_cuda_graph, weight_bytes=weight_bytes, kv_bytes=kv_bytes,
        kv_cache_dtype=kv_cache_dtype, level=level,
        all_levels=all_levels, sm_group_num=sm_group_num,
        decode_bs_divisor=decode_bs_divisor, token_budget=token_budget, config=config,
        flops_dtype=flops_dtype,
        calibration=calibration, tp=tp, disagg=disagg, kv_link=kv_link, kv_link_gb_s=kv_link_gb_s,
        kv_link_latency_us=kv_link_latency_us, disagg_tp=disagg_tp, plot=plot, sglang=sglang, **groups))
    problem = NON_FINITE + ("; or the calibration's curves" if result.calibrated else "")
    if as_json:
        print_json(result.to_dict(), problem)
        return
    est = result.estimate
    require_finite(result.to_dict(), problem)
    con = console()
    con.print(render.estimate_table(est))
    if all_levels:
        con.print(render.levels_table(est))
    if plot is not None:
        xpyd = est.scenario.disagg
        point = f"; {xpyd[0]}P{xpyd[1]}D disaggregation as a point at its TTFT" if xpyd is not None else ""
        con.print(f"wrote {plot} (ITL against prefill time, every level{point})")


@app.command("gen-config")
@with_declared(GenConfigRequest)
def gen_config(
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    sglang: str = sglang_option(),
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


@app.command("check-config")
def check_config(
    path: Path = typer.Argument(..., help="The pdmux YAML to check."),
    gpu: str | None = typer.Option(None, "--gpu", "-g", help=GPU_HELP + " Default: h100."),
    sms: int | None = typer.Option(None, "--sms", help="SM count of any device (with --cc)."),
    cc: str | None = typer.Option(None, "--cc", help="Compute capability of that device."),
    sm_group_num: int | None = typer.Option(None, "--sm-group-num",
                                            help="The --sm-group-num you launch with (must equal the "
                                            "YAML's)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    model: str | None = typer.Option(None, "--model", "-m",
                                     help="The model served: warn where the SGLang revision cannot multiplex "
                                     "its architecture."),
    speculative_algorithm: str | None = typer.Option(None, "--speculative-algorithm", help=(
        "The server's speculative decoding: the file fails where the --sglang revision cannot run it beside "
        "pdmux (0.5.23 cannot).")),
    speculative_draft_model_path: Path | None = typer.Option(None, "--speculative-draft-model-path", help=(
        "The draft's Hugging Face config.json (its decoder layers decide what a revision accepts).")),
    sglang: str = sglang_option(),
) -> None:
    """Validate a pdmux YAML against each SGLang revision pdmux has read (--sglang decides the exit code:
    2 if it refuses the file or any problem of 0.5.23's rules or the driver's is found; warnings alone: 0)."""
    from ..workflows.check_config import CheckConfigRequest
    from ..workflows.check_config import check_config as run_check_config

    result = run_check_config(CheckConfigRequest(path=path, gpu=gpu, sms=sms, cc=cc,
                                                 sm_group_num=sm_group_num, model=model, sglang=sglang,
                                                 speculative_algorithm=speculative_algorithm,
                                                 speculative_draft_model_path=speculative_draft_model_path))
    if as_json:
        print_json(result.to_dict())
    else:
        _print_check(result, model)
    if not result.ok:
        refused = f"{result.chosen.name} refuses it ({result.chosen_verdict.stage})"
        if result.errors:
            what = f"{len(result.errors)} problem(s)"
        elif result.chosen_verdict.accepted and result.speculation_line is not None:
            what = result.speculation_line
        else:
            what = refused
        fail_line(f"{result.path}: {what}")
        raise typer.Exit(2)


def _print_check(result: Any, model: str | None) -> None:
    """check-config's tables: the problems found, each revision's verdict, the model's support, the OK
    line."""
    from rich.table import Table

    from ..sglang import pdmux_config as pc
    from ..sglang.revisions import REVISIONS

    con = console()
    path, problems, chosen = result.path, result.problems, result.chosen
    device = f"{result.gpu} ({result.sm_count} SMs)"
    if problems:
        warnings = len([p for p in problems if not pc.is_error(p)])
        counts = ", ".join(([f"{len(problems) - warnings} problem(s)"] if len(problems) > warnings else []) +
                           ([f"{warnings} warning(s)"] if warnings else []))
        table = Table(title=f"{path}: {counts} for {device}", title_justify="left")
        table.add_column("where")
        table.add_column("refused by", justify="left")
        table.add_column("problem")
        for p in problems[:MAX_PROBLEM_ROWS]:
            table.add_row(p.where, pc.RULE_LABELS.get(p.rule, p.rule), p.message)
        if len(problems) > MAX_PROBLEM_ROWS:
            table.caption = f"first {MAX_PROBLEM_ROWS} of {len(problems)} problems; --json lists them all"
            table.caption_justify = "left"
        con.print(table)
    table = Table(title=f"{path} per SGLang revision ({result.gpu}, {result.sm_count} SMs)",
                  title_justify="left")
    table.add_column("SGLang")
    table.add_column("verdict")
    table.add_column("why")
    for v in result.revisions:
        mark = " *" if v.revision == chosen.key else ""
        said = "runs it" if v.accepted else "not judged" if v.accepted is None else f"refuses ({v.stage})"
        table.add_row(v.revision + mark, said, v.reason or "-")
    table.caption = "\n".join(["* --sglang (decides the exit code)", *(REVISIONS[v.revision].cite
                                                                     for v in result.revisions)])
    table.caption_justify = "left"
    con.print(table)
    for v in result.revisions:
        failure = REVISIONS[v.revision].startup_failure
        if v.revision == chosen.key and failure:
            con.print(f"{v.revision}: {failure}")
    if result.support_line:
        warn_line(f"{model}: {result.support_line}")
    if result.ok:
        warned = f" ({len(problems)} warning(s) above)" if problems else ""
        con.print(f"{path}: OK for {device} under {chosen.name}{warned}")
