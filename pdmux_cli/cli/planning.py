"""The planning commands: ``splits``, ``estimate``, ``gen-config``, ``check-config``.

Parse options, call the pure core, render. None of these import torch, cuda-python, numpy or
matplotlib (tests/test_cli_imports.py checks it).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from ..util.atomic import check_writable, refuse_overwriting_inputs
from ..util.errors import InputError, short_repr
from ..sglang.kv_cache import KV_CACHE_DTYPE_HELP
from .app import app
from .common import (
    NON_FINITE,
    console,
    fail_line,
    gpu_file,
    model_file,
    output_file,
    output_path,
    parse_cc,
    parse_float_list,
    parse_int_list,
    print_json,
    print_note,
    require_finite,
    sglang_option,
    styled,
    warn_line,
    write_atomic,
)

GPU_HELP = ("GPU profile: alias (h100, h200, h20, a100, b200, ...), reported name ('NVIDIA H100 80GB HBM3'), "
            "or a profile file of your own (my-gpu.yaml, fields as in profiles/gpus/).")
JSON_HELP = "Print JSON (stable keys, units in the key names)."
TP_HELP = ("Tensor parallelism: GPUs of one server the model is sharded over, as SGLang's --tp-size (1-8); "
           "step times are one rank's, collectives included, and memory is checked per GPU.")
#: Most problems check-config shows as table rows (a runaway file can have tens of thousands).
MAX_PROBLEM_ROWS = 50


class Device:
    """The device a command plans for: a profile, or just ``--sms`` and ``--cc``."""

    def __init__(self, name: str, sm_count: int, cc: tuple[int, int], gpu: Any = None) -> None:
        self.name, self.sm_count, self.cc, self.gpu = name, sm_count, cc, gpu

    @property
    def cc_text(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}"


def resolve_device(gpu: str | None, sms: int | None, cc: str | None, default: str = "h100") -> Device:
    """``--gpu`` or ``--sms N --cc X.Y`` (both needed) -> :class:`Device`; :class:`InputError` otherwise."""
    from ..catalog.hardware import MAX_SMS, find_gpu_or_file

    if sms is not None or cc is not None:
        if gpu is not None:
            raise InputError("give either --gpu or --sms with --cc, not both")
        if sms is None or cc is None:
            raise InputError("--sms and --cc go together, e.g. --sms 132 --cc 9.0")
        if not 0 < sms <= MAX_SMS:
            raise InputError(f"--sms must be a number of SMs from 1 to {MAX_SMS}, got {sms}")
        major_minor = parse_cc(cc)
        return Device("custom GPU", sms, major_minor)
    if gpu is not None and not gpu.strip():
        raise InputError("--gpu is empty: give a GPU name such as h100 (pdmux splits --all lists them)")
    profile = find_gpu_or_file(gpu or default)
    return Device(profile.name, profile.require_sm_count(), profile.compute_capability, profile)


def _load_pdmux_yaml(path: Path, device: Device | None = None,
                     cli_sm_group_num: int | None = None, sglang: str | None = None) -> tuple[Any, list[str]]:
    """A pdmux YAML for ``--config`` -> (PdmuxConfig, notes).

    Structural problems, and (with ``device``) anything SGLang refuses at load or start-up (rules
    "both" and "new") are input errors; the first is reported, check-config lists all. Warnings
    (SGLang runs it as meant) become notes. With ``device``, manual_divisions entries off the CUDA
    granularity are replaced by the split the driver really makes (100/32 -> 104/28 on H100), with a
    note saying so (:func:`pdmux_cli.sglang.pdmux_config.driver_divisions`).
    """
    from ..sglang.pdmux_config import driver_divisions, is_error, load_config, validate

    config, problems = load_config(path)
    if sglang is not None and sglang != "0.5.23" and device is not None:
        from ..sglang.revision_rules import planning_refusal

        refusal = planning_refusal(config, problems, sglang, device.sm_count, device.cc)
        if refusal:
            raise InputError(f"{path}: {refusal}")
        notes = [f"{path}: {p.where}: {p.message}" for p in problems if not is_error(p)]
        config, rounded = driver_divisions(config, device.sm_count, device.cc)
        return config, notes + [f"{path}: {note}" for note in rounded]
    notes = [f"{path}: {p.where}: {p.message}" for p in problems if not is_error(p)]
    problems = [p for p in problems if is_error(p)]
    if device is not None:
        problems = problems + [p for p in validate(config, device.sm_count, device.cc, cli_sm_group_num)
                               if p.rule in ("both", "new")]
    if problems:
        first = problems[0]
        raise InputError(f"{path}: {first.where}: {first.message} (pdmux check-config {path} lists every "
                         "problem)")
    if device is not None:
        config, rounded = driver_divisions(config, device.sm_count, device.cc)
        notes.extend(f"{path}: {note}" for note in rounded)
    return config, notes


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
    model: str = typer.Option("qwen3-8b", "--model", "-m",
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
    from ..multigpu.tensor_parallel import check_tp_value
    from ..sglang import split_levels

    check_tp_value(tp)
    if all_gpus and tp != 1:
        raise InputError("--tp describes one deployment: use it with --gpu or --sms/--cc, not --all")

    if all_gpus and config is not None:
        raise InputError("--config describes one GPU's levels: use it with --gpu or --sms/--cc, not --all")
    if all_gpus and (gpu or sms or cc):
        raise InputError("--all lists every profile; drop --gpu/--sms/--cc")
    device = None if all_gpus else resolve_device(gpu, sms, cc)
    from ..catalog.hardware import MAX_SMS

    split_levels.check_sm_group_num(sm_group_num, device.sm_count if device is not None else MAX_SMS)
    cfg, cfg_notes = _load_pdmux_yaml(config, device, sm_group_num) if config is not None else (None, [])
    group_num = sm_group_num or (cfg.sm_group_num if cfg else split_levels.DEFAULT_SM_GROUP_NUM)
    divisor = decode_bs_divisor or (cfg.decode_bs_divisor if cfg else split_levels.DEFAULT_DECODE_BS_DIVISOR)
    budget = token_budget or (cfg.split_forward_token_budget if cfg
                              else split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET)
    for name, value in (("--sm-group-num", sm_group_num), ("--decode-bs-divisor", decode_bs_divisor),
                        ("--token-budget", token_budget)):
        if value is not None and value <= 0:
            raise InputError(f"{name} must be > 0, got {value}")
    manual = list(cfg.manual_divisions) if cfg and cfg.manual_divisions else None

    if device is None:
        _splits_all(group_num, as_json)
        return

    batch_sizes = parse_int_list(decode_bs, "--decode-bs", unique=True)
    prompts = parse_int_list(prompt_tokens, "--prompt-tokens", unique=True)
    from ..catalog.model import load_model

    mdl = load_model(model)
    from ..messages import render
    from ..planning.estimate import MAX_DECODE_BS, MAX_TOKENS

    for what, values, top in (("--decode-bs", batch_sizes, MAX_DECODE_BS),
                              ("--prompt-tokens", prompts, MAX_TOKENS)):
        too_big = [v for v in values if v > top]
        if too_big:  # as estimate's bounds: no server runs a batch or prompt past them
            raise InputError(f"{what} {short_repr(too_big[0])}: give 1 to {top:,}")
    plan = split_levels.plan_groups(device.sm_count, device.cc, group_num, manual)
    notes = cfg_notes + ([render(plan.note)] if plan.note else [])
    if tp > 1:
        from ..multigpu.tensor_parallel import shard

        shard(mdl, tp)  # SGLang refuses a model whose heads or widths tp does not divide
        notes.append(f"TP {tp}: every GPU builds these stream groups and picks the same level for the same "
                     "decode batch (each rank's scheduler runs the same rule on the same batches); before a "
                     "prefill joins the decode batch the ranks agree it is done with a CPU all-reduce "
                     "(SGLang 0.5.23 srt/multiplex/multiplexing_mixin.py event_loop_pdmux)")
    choices = [
        (bs, split_levels.choose_group(len(plan.groups), bs, True, divisor, plan.thresholds),
         split_levels.older_sglang_crashes(plan.thresholds, bs))
        for bs in batch_sizes
    ]
    layers = [
        (t, split_levels.prefill_layers_per_round(t, mdl.num_layers, budget),
         split_levels.prefill_rounds(t, mdl.num_layers, budget))
        for t in prompts
    ]
    info = {
        "gpu": device.name, "sm_count": device.sm_count, "compute_capability": device.cc_text,
        "source": plan.source, "sm_group_num": group_num, "decode_bs_divisor": divisor,
        "token_budget": budget, "groups": plan.groups, "thresholds": plan.thresholds, "choices": choices,
        "model": mdl.name, "num_layers": mdl.num_layers, "layers": layers, "notes": notes, "tp": tp,
    }
    from . import render

    if as_json:
        print_json(render.splits_dict(info))
        return
    con = console()
    for table in render.splits_tables(info):
        con.print(table)
    for note in notes:
        print_note(con, note)


def _splits_all(group_num: int, as_json: bool) -> None:
    from ..catalog.hardware import load_gpus
    from ..sglang import split_levels

    rows = []
    for g in load_gpus():
        entry: dict[str, Any] = {"gpu": g.name, "key": g.key, "sm_count": g.sm_count,
                                 "compute_capability": f"{g.compute_capability[0]}.{g.compute_capability[1]}"}
        try:
            plan = split_levels.plan_groups(g.require_sm_count(), g.compute_capability, group_num)
            entry.update(source=plan.source, error=None,
                         groups=[{"prefill_sms": p, "decode_sms": d} for p, d in plan.groups])
        except InputError as e:
            entry.update(source=None, groups=None, error=str(e))
        rows.append(entry)
    if as_json:
        print_json({"sm_group_num": group_num, "gpus": rows})
        return
    from rich.table import Table

    table = Table(title=f"SGLang's split levels on every GPU profile (sm_group_num {group_num})",
                  title_justify="left")
    for col, just in (("GPU", "left"), ("SMs", "right"), ("cc", "right"),
                      ("levels (prefill/decode SMs)", "left"), ("source", "left")):
        table.add_column(col, justify=just)
    for r in rows:
        levels = (" ".join(f"{g['prefill_sms']}/{g['decode_sms']}" for g in r["groups"][1:-1]) if r["groups"]
                  else styled(r["error"], "red"))
        source = {"sglang-auto": "SGLang auto", "cuda-granularity": "needs manual_divisions",
                  "manual": "manual", None: "-"}[r["source"]]
        table.add_row(r["gpu"], str(r["sm_count"] or "?"), r["compute_capability"], levels, source)
    console().print(table)


def _parse_sizes(text: str | None, what: str) -> tuple[int, ...] | None:
    """``"2048,512"`` -> ``(2048, 512)`` (a size given twice kept once); ``"none"`` -> ``()``; ``None``
    (not given) -> ``None``."""
    if text is None:
        return None
    if text.strip().lower() in ("none", "off", "-"):
        return ()
    from ..planning.estimate import MAX_TOKENS

    sizes = tuple(parse_int_list(text, what, unique=True))
    too_big = [s for s in sizes if s > MAX_TOKENS]
    if too_big:  # as the prompt and context: no chunk of a prompt is longer
        raise InputError(f"{what} {short_repr(too_big[0])}: give chunk sizes of 1 to {MAX_TOKENS:,} tokens")
    return sizes


def _parse_level(text: str) -> tuple[int, int] | None:
    """``--level``: ``"80/52"`` -> ``(80, 52)``; ``"auto"`` -> ``None``; anything else (an empty value,
    digits other than ASCII) -> :class:`InputError`."""
    from ..util.numbers import plain_int

    if text.strip().lower() in ("auto", "sglang"):
        return None
    parts = [plain_int(x) for x in text.replace(":", "/").split("/")]
    if len(parts) != 2 or None in parts:
        raise InputError(f"--level {short_repr(text)}: write PREFILL/DECODE SMs, e.g. 80/52, or 'auto'")
    return parts[0], parts[1]


@app.command()
def estimate(
    model: str = typer.Option("qwen3-8b", "--model", "-m",
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
    per_request_overhead_ms: float | None = typer.Option(None, "--per-request-overhead-ms",
                                                         help="Roofline model: what every step spends per "
                                                         "request in its batch beyond the kernels, ms "
                                                         "(default: fitted to public SGLang serving runs, "
                                                         "profiles/efficiency/serving.yaml)."),
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
) -> None:
    """ITL, prefill time and tokens gained for prefill-first, chunked, mixed-chunk prefill and PD multiplexing
    (and PD disaggregation with --disagg).

    With no options: the chapter's scenario (Qwen3-8B on H100 SXM, 32 x 2048, an 8192-token prompt);
    --cost-model chapter reproduces the chapter's table."""
    from ..catalog.model import load_model
    from ..planning.estimate import Scenario
    from ..planning.estimate import estimate as run_estimate
    from ..sglang import split_levels
    from ..sglang.revisions import get_revision
    from . import render

    get_revision(sglang)  # an unknown revision is refused before any work
    if flops_dtype is not None:
        flops_dtype = flops_dtype.strip().lower()
        if flops_dtype not in ("bf16", "fp16", "fp8"):
            raise InputError(f"--flops-dtype must be bf16, fp16 or fp8, got {flops_dtype!r}")
    for name, value in (("--sm-group-num", sm_group_num), ("--decode-bs-divisor", decode_bs_divisor),
                        ("--token-budget", token_budget)):
        if value is not None and value <= 0:
            raise InputError(f"{name} must be > 0, got {value}")
    if plot is not None:
        if plot.suffix.lower() != ".png":
            raise InputError(f"--plot writes a PNG: give a file name ending in .png, got {plot}")
        refuse_overwriting_inputs(plot, config, calibration, model_file(model), gpu_file(gpu))
        check_writable(plot)
    from ..multigpu.disaggregation import parse_xpyd
    from ..sglang.kv_cache import check_kv_options, resolve_kv_cache

    check_kv_options(kv_cache_dtype, kv_bytes)
    xpyd = parse_xpyd(disagg) if disagg is not None else None
    device = resolve_device(gpu, None, None)
    split_levels.check_sm_group_num(sm_group_num, device.sm_count)
    gpu_profile = device.gpu
    mdl = load_model(model)
    kv_cache = resolve_kv_cache(mdl, kv_cache_dtype, kv_bytes)
    cfg, cfg_notes = _load_pdmux_yaml(config, device, sm_group_num, sglang) if config is not None else (
        None, [])
    scenario = Scenario(
        decode_bs=decode_bs, context_tokens=context, prompt_tokens=prompt_tokens,
        chunk_sizes=_parse_sizes(chunk_sizes, "--chunk-sizes"),
        mixed_chunk_sizes=_parse_sizes(mixed_chunk_sizes, "--mixed-chunk-sizes") or (),
        cost_model=cost_model.strip().lower(), step_overhead_ms=step_overhead_ms,
        per_request_overhead_ms=per_request_overhead_ms,
        s_sat_values=tuple(parse_float_list(s_sat, "--s-sat", unique=True)) if s_sat is not None else None,
        bandwidth_efficiency=bandwidth_efficiency, mfu=mfu, weight_bytes_per_param=weight_bytes,
        kv_bytes_per_element=kv_cache.bytes_per_element, level=_parse_level(level),
        sm_group_num=sm_group_num or (cfg.sm_group_num if cfg else split_levels.DEFAULT_SM_GROUP_NUM),
        decode_bs_divisor=decode_bs_divisor
        or (cfg.decode_bs_divisor if cfg else split_levels.DEFAULT_DECODE_BS_DIVISOR),
        split_forward_token_budget=token_budget or (
            cfg.split_forward_token_budget if cfg else split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET),
        manual_divisions=tuple(cfg.manual_divisions) if cfg else (),
        max_split_forward_layers=(cfg.max_split_forward_layers or 0) if cfg else 0,
        flops_dtype=flops_dtype, tp=tp, disagg=xpyd, kv_link=kv_link, kv_link_gb_s=kv_link_gb_s,
        kv_link_latency_us=kv_link_latency_us, disagg_tp=disagg_tp,
    )
    cal = None
    if calibration is not None:
        from ..catalog.hardware import find_gpu
        from ..costmodel.calibration_file import load_calibration

        cal = load_calibration(calibration)
        try:
            measured_on = find_gpu(cal.gpu_key or cal.gpu_name)
        except InputError:  # a device without a profile: only the SM count can be compared
            measured_on = None
        if measured_on is not None and measured_on.key != gpu_profile.key:
            raise InputError(f"{calibration} was measured on {measured_on.name}, not {gpu_profile.name}: "
                             f"pass --gpu {measured_on.key} or calibrate this GPU ('pdmux bench', 'pdmux "
                             "calibrate')")
        if s_sat is not None and cal.has_partitions:
            raise InputError("--s-sat is a guess that a --calibration file replaces: give one or the other")
    result = run_estimate(gpu_profile, mdl, scenario, calibration=cal, all_levels=all_levels
                          or plot is not None, sglang=sglang)
    result.notes[:0] = cfg_notes
    if cal is not None and scenario.cost_model == "chapter" and (
        mfu is not None or bandwidth_efficiency is not None):
        result.notes.append("--mfu and --bandwidth-efficiency are not used with --calibration: "
                            "the measured curves replace them")
    data = render.estimate_dict(result)
    problem = NON_FINITE + ("; or the calibration's curves" if cal is not None else "")
    if plot is not None:
        from ..planning.plot import write_tradeoff_plot

        write_tradeoff_plot(plot, result,
                            f"{result.model} on {result.gpu}: {decode_bs} x {context} tokens decoding, "
                            f"a {prompt_tokens}-token prompt ({result.cost_model} cost model)")
    if as_json:
        print_json(data, problem)
        return
    require_finite(data, problem)
    con = console()
    con.print(render.estimate_table(result))
    if all_levels:
        con.print(render.levels_table(result))
    if plot is not None:
        point = f"; {xpyd[0]}P{xpyd[1]}D disaggregation as a point at its TTFT" if xpyd is not None else ""
        con.print(f"wrote {plot} (ITL against prefill time, every level{point})")


@app.command("gen-config")
def gen_config(
    gpu: str | None = typer.Option(None, "--gpu", "-g", help=GPU_HELP + " Default: h100."),
    sms: int | None = typer.Option(None, "--sms", help="SM count of any device (with --cc)."),
    cc: str | None = typer.Option(None, "--cc", help="Compute capability of that device, e.g. 9.0."),
    sm_group_num: int = typer.Option(8, "--sm-group-num", help="Stream groups incl. the two whole-GPU ones."),
    decode_bs_divisor: int = typer.Option(36, "--decode-bs-divisor",
                                          help="Divisor of the linear level rule."),
    token_budget: int = typer.Option(65536, "--token-budget",
                                     help="split_forward_token_budget (tokens per round)."),
    divisions: str | None = typer.Option(None, "--divisions",
                                         help="Manual levels PREFILL:DECODE:THRESHOLD,... e.g. "
                                         "112:20:0,104:28:5"),
    manual: bool = typer.Option(False, "--manual",
                                help="Write SGLang's automatic levels as manual_divisions (always on "
                                "Blackwell)."),
    output: Path | None = typer.Option(None, "--output", "-o", parser=output_path, metavar="<path>",
                                       help="Write the YAML here (whole or not at all) instead of stdout."),
    tune: bool = typer.Option(False, "--tune",
                              help="Pick the knobs by simulating a trace (needs --trace, --slo-ttft, "
                              "--slo-itl, --gpu)."),
    trace: Path | None = typer.Option(None, "--trace",
                                      help="Trace for --tune, or whose decode steps give --slo-itl its "
                                      "context distribution (Azure CSV, Mooncake JSONL, BurstGPT CSV)."),
    slo_ttft: float | None = typer.Option(None, "--slo-ttft", help="TTFT SLO for --tune, ms."),
    slo_itl: float | None = typer.Option(None, "--slo-itl",
                                         help="ITL target, ms: without --tune, write SLO levels (per decode "
                                         "batch the fewest decode SMs whose round, next to a running "
                                         "prefill, meets it; needs --gpu and --context or --trace); with "
                                         "--tune, the ITL SLO tuned for."),
    context: int | None = typer.Option(None, "--context",
                                       help="--slo-itl: tokens of context of every decoding request (or "
                                       "--trace for a distribution)."),
    max_requests: int | None = typer.Option(None, "--max-requests",
                                            help="Use the trace's first N requests (--slo-itl, --tune)."),
    trace_format: str | None = typer.Option(None, "--format",
                                            help="--tune: the trace's format, azure, mooncake or burstgpt "
                                            "(default: detected), as tune's."),
    qps: float | None = typer.Option(None, "--qps",
                                     help="--tune: retime the trace to this many requests/s, as tune's."),
    rate_scale: float | None = typer.Option(None, "--rate-scale",
                                            help="--tune: multiply the trace's arrival rate, as tune's."),
    duration: float | None = typer.Option(None, "--duration",
                                          help="--tune: only requests arriving in the first S seconds, as "
                                          "tune's."),
    workers: int | None = typer.Option(None, "--workers",
                                       help="--tune: processes (default: the cores available), as tune's."),
    dp: int | None = typer.Option(None, "--dp",
                                  help="Not taken: gen-config --tune tunes one server; 'pdmux tune --dp N' "
                                  "tunes replicas behind a router and writes the YAML too."),
    calibration: Path | None = typer.Option(None, "--calibration",
                                            help="--slo-itl or --tune: calibration.yaml from 'pdmux bench' "
                                            "and/or 'pdmux calibrate' for the cost model."),
    cost_model: str = typer.Option("roofline", "--cost-model",
                                   help="--slo-itl: roofline (fitted to measurements) or chapter."),
    step_overhead_ms: float | None = typer.Option(None, "--step-overhead-ms",
                                                  help="--slo-itl, roofline: the scheduler's CPU time per "
                                                  "step, ms (default: profiles/efficiency/serving.yaml's, as "
                                                  "simulate)."),
    per_request_overhead_ms: float | None = typer.Option(None, "--per-request-overhead-ms",
                                                         help="--slo-itl, roofline: its CPU time per running "
                                                         "request per step, ms (default: as simulate)."),
    max_running_requests: int | None = typer.Option(None, "--max-running-requests",
                                                    help="--slo-itl: SGLang's --max-running-requests, the "
                                                    "largest decode batch sized for (default: SGLang's from "
                                                    "the KV pool)."),
    model: str = typer.Option("qwen3-8b", "--model", "-m",
                              help="Model served (for --tune and --slo-itl; with --tp its heads and widths "
                              "must split)."),
    tp: int = typer.Option(1, "--tp", help=TP_HELP + " The launch line gains --tp-size N."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    sglang: str = sglang_option(),
) -> None:
    """SGLang's pdmux YAML for a GPU, validated, plus the launch flags.

    With --slo-itl MS (no --tune): SLO levels, manual_divisions giving each decode batch the fewest
    decode SMs that keep its ITL within MS at the workload's context, from the cost model.
    With --tune: the sm_group_num, thresholds and token budget with the best SLO attainment on a
    trace (ties: goodput), found by simulating it."""
    from ..sglang import pdmux_config as pc
    from ..sglang import split_levels

    device = resolve_device(gpu, sms, cc)
    for name, value in (("--sm-group-num", sm_group_num), ("--decode-bs-divisor", decode_bs_divisor),
                        ("--token-budget", token_budget)):
        if value <= 0:
            raise InputError(f"{name} must be > 0, got {value}")
    split_levels.check_sm_group_num(sm_group_num, device.sm_count)
    from ..multigpu.tensor_parallel import check_tp_value

    check_tp_value(tp)
    from ..catalog.model import load_model
    from ..sglang.revisions import model_support

    served = load_model(model)
    support = model_support(served.architectures, sglang)
    if tp > 1:
        from ..multigpu.tensor_parallel import shard

        shard(served, tp)  # SGLang refuses a model whose heads or widths tp does not divide
    if output is not None and str(output) == "-":
        output = None  # the usual spelling of standard output
    # Before any work (a --tune search takes minutes): the output must be writable and not an input.
    check_writable(output)
    slo = slo_itl is not None and not tune
    refuse_overwriting_inputs(output, trace, calibration, model_file(model) if tune or slo else None,
                              gpu_file(gpu))
    tune_summary = slo_summary = None
    slo_view: tuple | None = None
    if max_requests is not None and trace is None:
        raise InputError("--max-requests cuts a --trace: give one, or drop --max-requests")
    if dp is not None and dp != 1:
        raise InputError("gen-config --tune tunes one server: for --dp replicas behind a router run 'pdmux "
                         "tune --dp N -o FILE' (same options; it writes the winning YAML and the launch "
                         "line)")
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    if not tune:
        for name, value in (("--format", trace_format), ("--qps", qps), ("--rate-scale", rate_scale),
                            ("--duration", duration), ("--workers", workers)):
            if value is not None:
                raise InputError(f"{name} goes with --tune (it shapes the trace tune simulates)")
    if not slo:
        if context is not None and not tune:
            raise InputError("--context goes with --slo-itl (SLO levels)")
        if calibration is not None and not tune:
            raise InputError("--calibration goes with --slo-itl (SLO levels) or --tune")
        if cost_model != "roofline":
            raise InputError("--cost-model goes with --slo-itl (SLO levels), without --tune")
        for name, value in (("--step-overhead-ms", step_overhead_ms),
                            ("--per-request-overhead-ms", per_request_overhead_ms),
                            ("--max-running-requests", max_running_requests)):
            if value is not None:
                raise InputError(f"{name} goes with --slo-itl (SLO levels), without --tune")
    if slo:
        if divisions is not None or manual:
            raise InputError("--slo-itl writes its own levels and thresholds: drop --divisions/--manual")
        if decode_bs_divisor != 36:
            raise InputError("--slo-itl's thresholds replace the linear rule, which never reads "
                             "decode_bs_divisor: drop --decode-bs-divisor")
        if slo_ttft is not None:
            raise InputError("--slo-ttft goes with --tune (SLO levels size decode for the ITL target alone)")
        from .slo import levels_dict, levels_notes, levels_table, slo_levels_config

        config, levels, setup, slo_notes = slo_levels_config(
            device.gpu, model, slo_itl, context=context, trace=trace, max_requests=max_requests,
            calibration=calibration, cost_model=cost_model.strip().lower(), tp=tp, sm_group_num=sm_group_num,
            token_budget=token_budget, step_overhead_ms=step_overhead_ms,
            per_request_overhead_ms=per_request_overhead_ms, max_running_requests=max_running_requests)
        source = levels.context_source
        slo_summary = levels_dict(levels, setup, source)
        slo_view = (levels_table(levels, setup), [*slo_notes, *levels_notes(levels, source)],
                    f"cost model: {setup.step_model.source}")
    elif tune:
        if divisions is not None or manual:
            raise InputError("--tune picks the levels itself: drop --divisions/--manual")
        if (sm_group_num, decode_bs_divisor, token_budget) != (8, 36, 65536):
            raise InputError("--tune searches sm_group_num, decode_bs_divisor and the token budget itself: "
                             "drop --sm-group-num/--decode-bs-divisor/--token-budget ('pdmux tune' can "
                             "narrow the search)")
        from .simulate import tuned_config

        if context is not None:
            raise InputError("--tune takes the workload from --trace: drop --context")
        config, tune_summary = tuned_config(device.gpu, trace, slo_ttft, slo_itl, model=model,
                                            show=not as_json, tp=tp, max_requests=max_requests,
                                            calibration=calibration, sglang=sglang, fmt=trace_format, qps=qps,
                                            rate_scale=rate_scale, duration=duration, workers=workers,
                                            to_stderr=output is None)
    elif trace is not None or slo_ttft is not None:
        raise InputError("--trace and --slo-ttft go with --tune (or --trace with --slo-itl)")
    elif divisions is not None:
        entries = pc.parse_divisions(divisions)
        config = pc.PdmuxConfig(sm_group_num=len(entries) + 2, manual_divisions=entries,
                                split_forward_token_budget=token_budget, decode_bs_divisor=decode_bs_divisor)
        if sm_group_num not in (8, len(entries) + 2):
            raise InputError(f"--divisions has {len(entries)} level(s), so sm_group_num is "
                             f"{len(entries) + 2}, not {sm_group_num}: drop --sm-group-num or change the "
                             "divisions")
    else:
        from ..sglang.revisions import get_revision

        plan = split_levels.plan_groups(device.sm_count, device.cc, sm_group_num)
        # a revision whose divide_sm was not read gets the levels written out (they hold whatever its split)
        config = pc.config_from_plan(plan, sm_group_num, token_budget, decode_bs_divisor,
                                     manual=manual or plan.source == "cuda-granularity"
                                     or get_revision(sglang).divide_sm == "not read")
    problems = pc.validate(config, device.sm_count, device.cc)
    if problems:
        more = (f" (and {len(problems) - 1} more problem(s): pdmux check-config lists them)"
                if len(problems) > 1 else "")
        raise InputError(f"{problems[0].where}: {problems[0].message}{more}")
    text = pc.dump_config(config)
    path_text = str(output) if output is not None else "pdmux.yaml"
    flags = pc.launch_flags(path_text, config.sm_group_num, tp)
    from ..messages import render_all
    from ..sglang.revision_rules import revision_findings
    from ..sglang.revisions import get_revision

    rev_notes = render_all(revision_findings(sglang, tp))
    launch_env = list(get_revision(sglang).tp_launch) if tp > 1 else []
    if output is not None:
        write_atomic(output, text)
    if as_json:
        print_json({"gpu": device.name, "sm_count": device.sm_count, "compute_capability": device.cc_text,
                    "tp": tp, "gpus": tp, "output": str(output) if output is not None else None, "yaml": text,
                    "config": {"sm_group_num": config.sm_group_num,
                               "manual_divisions": [list(e) for e in config.manual_divisions],
                               "split_forward_token_budget": config.split_forward_token_budget,
                               "decode_bs_divisor": config.decode_bs_divisor,
                               "max_split_forward_layers": config.max_split_forward_layers},
                    "launch_flags": flags, "launch_env": launch_env, "sglang_notes": rev_notes,
                    "tune": tune_summary, "sglang_support": support.as_dict(),
                    **({"slo_levels": slo_summary} if slo_summary is not None else {})})
        return
    if support.state == "no":
        warn_line(f"{served.name}: {support.reason}: this config cannot serve it")
    launch = pc.launch_command(path_text, config.sm_group_num, tp=tp, env=tuple(launch_env))
    if output is None:
        sys.stdout.write(text)
        if slo_view is not None and sys.stderr is not None:
            _print_slo_view(console(stderr=True), slo_view)
        if sys.stderr is not None:
            sys.stderr.write(f"# save as {path_text}, then launch:\n# {launch}\n")
            for note in rev_notes:
                sys.stderr.write(f"# {note}\n")
    else:
        con = console()
        if slo_view is not None:
            _print_slo_view(con, slo_view)
        every = f"; every one of the {tp} GPUs loads it" if tp > 1 else ""
        con.print(f"wrote {output} ({device.name}, {device.sm_count} SMs{every})")
        con.print(launch, soft_wrap=True, markup=False)
        for note in rev_notes:
            print_note(con, note)


def _print_slo_view(con: Any, view: tuple) -> None:
    """gen-config --slo-itl's table of levels and its notes."""
    table, notes, cost = view
    con.print(table)
    for note in notes:
        print_note(con, note)
    con.print(cost, soft_wrap=True)


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
    sglang: str = sglang_option(),
) -> None:
    """Validate a pdmux YAML against each SGLang revision pdmux has read (--sglang decides the exit code:
    2 if it refuses the file or any problem of 0.5.23's rules or the driver's is found; warnings alone: 0)."""
    from ..sglang import pdmux_config as pc
    from ..sglang.revision_rules import verdicts
    from ..sglang.revisions import REVISIONS, get_revision

    chosen = get_revision(sglang)
    if not chosen.loader_read:
        raise InputError(f"--sglang {chosen.key}: pdmux has not read its pdmux_context.py (the loader and "
                         "start-up checks), so it cannot judge a file under it; check-config without "
                         "--sglang shows every revision it can judge")
    device = resolve_device(gpu, sms, cc)
    config, parsed = pc.load_config(path)
    problems = list(parsed) + pc.validate(config, device.sm_count, device.cc, sm_group_num)
    per_revision = verdicts(config, list(parsed), device.sm_count, device.cc, cli_sm_group_num=sm_group_num)
    mine = next(v for v in per_revision if v.revision == chosen.key)
    # the exit code: the chosen revision's verdict, plus what the driver or a typo does to any revision
    errors = [p for p in problems if p.rule in ("cuda", "pdmux")]
    failed = bool(errors) or not mine.accepted
    support_line = None
    if model is not None:
        from ..catalog.model import load_model
        from ..sglang.revisions import model_support

        support = model_support(load_model(model).architectures, chosen)
        support_line = support.reason if support.state != "yes" else None
    if as_json:
        print_json({"path": str(path), "gpu": device.name, "sm_count": device.sm_count, "ok": not failed,
                    "sglang": chosen.key,
                    "revisions": [v.as_dict(REVISIONS[v.revision]) for v in per_revision],
                    "problems": [{"where": p.where, "rule": p.rule, "severity": "error" if pc.is_error(p)
                                  else "warning", "message": p.message} for p in problems],
                    "sglang_support": support.as_dict() if model is not None else None})
    else:
        from rich.table import Table

        con = console()
        if problems:
            warnings = len([p for p in problems if not pc.is_error(p)])
            counts = ", ".join(([f"{len(problems) - warnings} problem(s)"] if len(problems) > warnings
                                else []) +
                               ([f"{warnings} warning(s)"] if warnings else []))
            table = Table(title=f"{path}: {counts} for {device.name} ({device.sm_count} SMs)",
                          title_justify="left")
            table.add_column("where")
            table.add_column("refused by", justify="left")
            table.add_column("problem")
            for p in problems[:MAX_PROBLEM_ROWS]:
                table.add_row(p.where, pc.RULE_LABELS.get(p.rule, p.rule), p.message)
            if len(problems) > MAX_PROBLEM_ROWS:
                table.caption = f"first {MAX_PROBLEM_ROWS} of {len(problems)} problems; --json lists them all"
                table.caption_justify = "left"
            con.print(table)
        table = Table(title=f"{path} per SGLang revision ({device.name}, {device.sm_count} SMs)",
                      title_justify="left")
        table.add_column("SGLang")
        table.add_column("verdict")
        table.add_column("why")
        for v in per_revision:
            mark = " *" if v.revision == chosen.key else ""
            said = "runs it" if v.accepted else "not judged" if v.accepted is None else f"refuses ({v.stage})"
            table.add_row(v.revision + mark, said, v.reason or "-")
        table.caption = "\n".join(["* --sglang (decides the exit code)", *(REVISIONS[v.revision].cite
                                                                         for v in per_revision)])
        table.caption_justify = "left"
        con.print(table)
        for v in per_revision:
            failure = REVISIONS[v.revision].startup_failure
            if v.revision == chosen.key and failure:
                con.print(f"{v.revision}: {failure}")
        if support_line:
            warn_line(f"{model}: {support_line}")
        if not failed:
            warned = f" ({len(problems)} warning(s) above)" if problems else ""
            con.print(f"{path}: OK for {device.name} ({device.sm_count} SMs) under {chosen.name}{warned}")
    if failed:
        what = f"{len(errors)} problem(s)" if errors else f"{chosen.name} refuses it ({mine.stage})"
        fail_line(f"{path}: {what}")
        raise typer.Exit(2)
