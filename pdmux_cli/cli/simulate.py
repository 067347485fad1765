"""``pdmux simulate`` and ``pdmux tune``: replay traces through the schedulers; search pdmux knobs.

Parse options, call :mod:`pdmux_cli.simulate`, render. The simulator and rich tables are imported
inside the commands (start-up of the other commands stays light); matplotlib only for ``--plot``.
:func:`tuned_config` is the hook ``pdmux gen-config --tune`` calls.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ..util.atomic import check_writable, refuse_overwriting_inputs
from ..util.errors import InputError, short_repr
from ..sglang.kv_cache import KV_CACHE_DTYPE_HELP
from .app import app
from .common import (
    console,
    gpu_file,
    model_file,
    output_file,
    output_path,
    parse_float_list,
    parse_int_list,
    parse_names,
    print_note,
    progress_bar,
    sglang_option,
    write_atomic,
)

GPU_HELP = "GPU profile: alias (h100, h200, a100, b200, ...), reported name, or my-gpu.yaml. Default: h100."
MODEL_HELP = "Model profile name or path to a Hugging Face config.json."
POLICIES = ("pdmux", "chunked", "mixed-chunk", "prefill-first", "disagg")
#: The policies compared by default: pdmux against SGLang's default scheduling and mixed chunks.
DEFAULT_POLICIES = "pdmux,chunked,mixed-chunk"
COST_MODEL_HELP = "roofline (fitted to measurements) or chapter (the chapter's illustrative model)."
TP_HELP = ("Tensor parallelism: GPUs of one server the model is sharded over, as SGLang's --tp-size (1-8); "
           "the server is simulated as one of its ranks (every rank runs the same batches), memory per GPU.")


DP_HELP = ("Data-parallel replicas of the server behind a router, each --tp GPUs (SGLang's --dp-size, or servers "
           "behind sgl-router). Default 1, or with --disagg as many as put every policy on its GPUs ((X+Y) x --disagg-tp / --tp).")
LOAD_BALANCE_HELP = ("How the router picks a replica (and, with --disagg, an instance on each side): round_robin "
                     "(SGLang's default) or total_requests (the fewest outstanding requests), SGLang's names.")
DISAGG_HELP = ("Add PD disaggregation: XPYD prefill and decode instances (1P1D, 2P6D), each --tp GPUs; prefill-first on "
               "the prefill instances, the KV cache moved over --kv-link, decode on the decode instances.")
KV_LINK_HELP = ("--disagg: the link each GPU's share of a KV cache crosses: auto (the GPU's NVLink or PCIe when all "
                "GPUs fit one node of 8, else RDMA 400 Gb/s per GPU), nvlink, pcie or rdma.")
DP_OPTION = typer.Option(None, "--dp", help=DP_HELP)
TUNE_DP_OPTION = typer.Option(None, "--dp", help="Data-parallel replicas of the server behind a router, each --tp GPUs (SGLang's --dp-size, or servers behind sgl-router); every config runs on them. Default 1.")
LOAD_BALANCE_OPTION = typer.Option(None, "--load-balance-method", help=LOAD_BALANCE_HELP)
TUNE_LOAD_BALANCE_OPTION = typer.Option(None, "--load-balance-method", help=(
    "How the router picks one of the --dp replicas: round_robin (SGLang's default) or total_requests (the fewest "
    "outstanding requests), SGLang's names."))
DISAGG_OPTION = typer.Option(None, "--disagg", help=DISAGG_HELP)
KV_LINK_OPTION = typer.Option("auto", "--kv-link", help=KV_LINK_HELP)
DISAGG_TP_OPTION = typer.Option(None, "--disagg-tp", help="--disagg: each instance's TP (default --tp), e.g. --tp 2 --dp 1 --disagg 1P1D --disagg-tp 1 puts every policy on 2 GPUs.")
KV_LINK_GB_S_OPTION = typer.Option(None, "--kv-link-gb-s", help="--disagg: the KV link's bandwidth, GB/s per GPU and direction (overrides --kv-link's).")
KV_LINK_LATENCY_OPTION = typer.Option(None, "--kv-link-latency-us", help="--disagg: the KV link's latency per transfer, us (overrides --kv-link's).")


@dataclass(frozen=True)
class Cluster:
    """How many servers a run uses: ``dp`` replicas of the colocated policies behind ``method``, and the
    disaggregation policy (``None`` without ``--disagg``); ``notes`` for the user."""

    dp: int = 1
    method: str = "round_robin"
    disagg: Any = None
    notes: tuple[str, ...] = ()
    gpus: int = 1

    @property
    def router(self) -> str | None:
        """The load-balance method, ``None`` when nothing is routed (one server; 1P1D alone)."""
        several = self.disagg is not None and (self.disagg.prefill > 1 or self.disagg.decode > 1)
        return self.method if self.dp > 1 or several else None


def cluster_from_options(setup: Any, gpu: str | None, dp: int | None, method: str | None, disagg: str | None,
                         kv_link: str = "auto", kv_link_gb_s: float | None = None,
                         kv_link_latency_us: float | None = None, allow_disagg: bool = True,
                         disagg_tp: int | None = None, setup_with_tp: Callable[[int], Any] | None = None,
                         colocated: bool = True) -> Cluster:
    """:class:`Cluster` (``gpus``: the GPUs of the policies, the colocated ones' when they run) from the
    options simulate and capacity share (``tune`` takes ``--dp`` only:
    ``allow_disagg`` false). ``method``: ``None`` for SGLang's default (``round_robin``). ``disagg_tp``:
    each disaggregation instance's TP (``--disagg-tp``; default ``setup.tp``), its server built by
    ``setup_with_tp(tp)``. ``colocated``: whether policies other than disagg run (the notes speak of
    them). With ``--disagg XPYD`` and no ``--dp`` the other policies run as as many replicas as give them
    the same GPUs (``(X+Y) x disagg_tp / tp``, the nearest below when it does not divide, with a note).
    :class:`InputError` for bad values."""
    from ..multigpu.disaggregation import MAX_INSTANCES, check_dp_value, check_load_balance_method, parse_xpyd
    from ..multigpu.disaggregation import kv_link as make_link
    from ..multigpu.tensor_parallel import check_tp_value, for_disagg_tp
    from ..simulate.cluster import DisaggPolicy

    given_method = method is not None
    method = check_load_balance_method(method if given_method else "round_robin")
    if dp is not None:
        check_dp_value(dp)
    link_options = kv_link.strip().lower() != "auto" or kv_link_gb_s is not None or kv_link_latency_us is not None
    if disagg is None:
        if link_options or disagg_tp is not None:
            raise InputError("--kv-link, --kv-link-gb-s, --kv-link-latency-us and --disagg-tp apply to --disagg XPYD")
        dp = dp if dp is not None else 1
        notes = ("one server: --load-balance-method has nothing to route (give --dp N)",) if given_method and dp == 1 \
            else ()
        return Cluster(dp, method, None, notes, dp * setup.tp)
    if not allow_disagg:
        raise InputError("--disagg is compared by pdmux simulate and pdmux capacity; tune searches pdmux knobs")
    x, y = parse_xpyd(disagg)
    tp = setup.tp
    own = tp
    instance_setup = None
    if disagg_tp is not None:
        try:
            own = check_tp_value(disagg_tp)
            if own != tp:
                if setup_with_tp is None:
                    raise InputError("--disagg-tp other than --tp is not available here")
                instance_setup = setup_with_tp(own)
        except InputError as exc:
            raise for_disagg_tp(exc) from None
    gpus = (x + y) * own
    notes = []
    if given_method and x == 1 and y == 1 and (not colocated or dp == 1):
        notes.append("one instance a side and one server: --load-balance-method has nothing to route")
    if not colocated:
        dp = dp if dp is not None else 1
        notes.append(f"disagg {x}P{y}D on {gpus} GPUs: {x + y} instances of TP {own}")
    else:
        if dp is None:
            dp = max(1, gpus // tp)
            if dp > MAX_INSTANCES:
                raise InputError(f"--disagg {x}P{y}D: the other policies would need {dp} replicas of TP {tp} to be on the "
                                 f"same {gpus} GPUs, more than {MAX_INSTANCES}; give --dp N (or a larger --tp), or "
                                 "--policies disagg alone")
        if dp * tp == gpus:
            others = f"DP {dp} replicas behind the router ({method}) of TP {tp}" if dp > 1 else f"one server of TP {tp}"
            notes.append(f"every policy on {gpus} GPUs: disagg {x}P{y}D as {x + y} instances of TP {own}, the others as "
                         f"{others}")
        else:
            notes.append(f"not at equal GPU count: disagg {x}P{y}D uses {gpus} GPUs (TP {own} each), the other policies "
                         f"DP {dp} x TP {tp} = {dp * tp} (give --dp, --tp or --disagg-tp so that they match)")
    from ..catalog.hardware import find_gpu_or_file

    link = make_link(find_gpu_or_file(gpu or "h100"), gpus, kv_link, kv_link_gb_s, kv_link_latency_us)
    return Cluster(dp, method, DisaggPolicy(x, y, link, method, instance_setup), tuple(notes),
                   dp * tp if colocated else gpus)


def setup_and_cluster(build: Callable[[int], Any], tp: int, no_prefix_cache: bool, names: list[str], gpu: str | None,
                      dp: int | None, method: str | None, disagg: str | None, kv_link: str,
                      kv_link_gb_s: float | None, kv_link_latency_us: float | None,
                      disagg_tp: int | None) -> tuple[Any, Cluster]:
    """The simulated server of TP ``tp`` (``build(tp)``, the radix cache off with ``no_prefix_cache``) and
    the :class:`Cluster` of simulate's and capacity's options (``names``: the policies asked for)."""
    def server(n: int) -> Any:
        made = build(n)
        return without_prefix_cache(made) if no_prefix_cache else made

    setup = server(tp)
    return setup, cluster_from_options(setup, gpu, dp, method, disagg, kv_link, kv_link_gb_s, kv_link_latency_us,
                                       disagg_tp=disagg_tp, setup_with_tp=server,
                                       colocated=any(name != "disagg" for name in names))


def on_gpus(setup: Any) -> str:
    """``"H100 SXM5 80GB"``, or ``"8 x H100 SXM5 80GB (TP 8)"`` for a tensor-parallel server."""
    return f"{setup.tp} x {setup.gpu_name} (TP {setup.tp})" if setup.tp > 1 else setup.gpu_name


#: Largest chunk size simulated, tokens (2^20): a bigger chunk is a whole batch of long prompts at once,
#: which --policies prefill-first already runs (and SGLang sizes memory buckets by it).
MAX_CHUNK_TOKENS = 1 << 20
#: Largest --prefill-decode-interval: past it prefill would wait behind more decode rounds than any
#: request has output tokens (SGLang's max_new_tokens are far below it).
MAX_PREFILL_DECODE_INTERVAL = 100_000


def parse_chunk_sizes(text: str, what: str) -> list[int]:
    """Chunk sizes (tokens) of a comma-separated option, each 1 to :data:`MAX_CHUNK_TOKENS`."""
    sizes = parse_int_list(text, what)
    big = next((c for c in sizes if c > MAX_CHUNK_TOKENS), None)
    if big is not None:
        raise InputError(f"{what}: {big} tokens is past the largest chunk simulated ({MAX_CHUNK_TOKENS:,}); for whole "
                         "prompts use --policies prefill-first")
    return sizes


#: The workload options simulate, tune and capacity share (typer reads these as plain metadata).
PER_REQUEST_OVERHEAD_OPTION = typer.Option(None, "--per-request-overhead-ms", help="Roofline model: what every step spends per request in its batch beyond the kernels, ms, paid by every schedule (default: fitted to public SGLang serving runs, profiles/efficiency/serving.yaml).")
ADMISSION_DELAY_OPTION = typer.Option(None, "--admission-delay-ms", help="Roofline model: from a request's arrival until SGLang's scheduler can admit it (HTTP server, tokenizer, IPC), ms (default: serving.yaml's fit).")
ADMISSION_INTERVAL_OPTION = typer.Option(None, "--admission-interval-ms", help="Roofline model: the front end's time per request (one tokenizer manager takes every request), ms: a burst enters the scheduler one request per interval (default: serving.yaml's fit).")
FIRST_TOKEN_DELAY_OPTION = typer.Option(None, "--first-token-delay-ms", help="Roofline model: from the step that makes a token until the client has it (detokenizer, streaming), ms: adds to TTFT and end-to-end latency, not to ITL (default: serving.yaml's fit).")
MODEL_OPTION = typer.Option("qwen3-8b", "--model", "-m", help=MODEL_HELP)
GPU_OPTION = typer.Option(None, "--gpu", "-g", help=GPU_HELP)
MIXED_CHUNK_SIZES_OPTION = typer.Option("512", "--mixed-chunk-sizes", help="Chunk sizes of 'mixed-chunk'.")
PREFILL_DECODE_INTERVAL_OPTION = typer.Option(0, "--prefill-decode-interval", help="chunked, mixed-chunk and prefill-first: decode-only rounds after each prefill batch (SGLang's flag; 0 = off).")
NO_PREFIX_CACHE_OPTION = typer.Option(False, "--no-prefix-cache", help="Turn SGLang's radix cache off (--disable-radix-cache). On by default: prompts of a trace with hash_ids (Mooncake) reuse cached prefixes.")
TRACE_ARGUMENT = typer.Argument(None, help="Trace file: Azure CSV, Mooncake JSONL or BurstGPT CSV.")
TRACE_OPTION = typer.Option(None, "--trace", help="The trace file, spelt as tune and gen-config --tune take it.")
SYNTHETIC_OPTION = typer.Option(False, "--synthetic", help="Poisson arrivals at --qps instead of a trace file (--qps inf: all at once, with --max-requests).")
FORMAT_OPTION = typer.Option(None, "--format", help="azure, mooncake or burstgpt (default: detected).")
MAX_REQUESTS_OPTION = typer.Option(None, "--max-requests", help="Only the first N requests.")
DURATION_OPTION = typer.Option(None, "--duration", help="Only requests arriving in the first S seconds.")
SEED_OPTION = typer.Option(0, "--seed", help="Seed for synthetic arrivals and lengths.")
PROMPT_TOKENS_OPTION = typer.Option("1024", "--prompt-tokens", help="Synthetic prompt length: N, uniform:LO:HI, exp:MEAN, lognormal:MEDIAN:SIGMA, or random:L[:RATIO] (bench_serving's random dataset, drawn as it draws them for --seed; both lengths then).")
OUTPUT_TOKENS_OPTION = typer.Option("128", "--output-tokens", help="Synthetic output length (same forms).")
EXECUTOR_OPTION = typer.Option("local", "--executor", help="Where the simulations run: local (this machine's cores, --workers processes) or ray (a Ray cluster: --ray-address, or a local Ray instance started for the run; pip install 'pdmux[ray]'). The results are the same.")
RAY_ADDRESS_OPTION = typer.Option(None, "--ray-address", help="--executor ray: the cluster to run on: auto (the one 'ray start' began on this machine), host:port, or ray://host:10001 (Ray Client). Default: a local Ray instance for this run.")
MAX_STEPS_OPTION = typer.Option(None, "--max-steps", help="The most decode steps one simulated server may take before the run stops (a guard against runaway runs; shown in the progress bar). Default: 6,000,000 or 2,000 per request of the trace, whichever is more; 0: no limit.")


def _check_number(name: str, value: float | None, minimum: float = 0.0, strict: bool = True) -> None:
    if value is None:
        return
    bad = not math.isfinite(value) or (value <= minimum if strict else value < minimum)
    if bad:
        raise InputError(f"{name} must be a number {'>' if strict else '>='} {minimum:g}, got {value}")


def _load_workload(trace_path: Path | None, synthetic: bool, fmt: str | None, qps: float | None,
                   rate_scale: float | None, max_requests: int | None, duration: float | None, seed: int,
                   prompt_tokens: str, output_tokens: str) -> Any:
    """The trace to replay: synthetic (drawn at ``qps``), or a file cut to ``max_requests``; a file is
    retimed (``qps``, ``rate_scale``) and cut to ``duration`` by :func:`_drop_past_context`, after the
    requests past the model's context length are dropped, so that ``--qps`` is the rate of the requests
    simulated (as ``pdmux capacity`` reports it). :class:`InputError` for bad combinations."""
    from ..simulate.traces import load_trace, reshape, synthetic_trace

    if qps == math.inf and not synthetic:
        raise InputError("--qps inf (every request at once) goes with --synthetic; a trace file's arrivals are retimed "
                         "to a finite rate (or give --rate-scale)")
    if not (synthetic and qps == math.inf):  # --synthetic --qps inf: bench_serving's --request-rate inf
        _check_number("--qps", qps)
    _check_number("--rate-scale", rate_scale)
    _check_number("--duration", duration)
    if max_requests is not None and max_requests < 1:
        raise InputError(f"--max-requests must be >= 1, got {max_requests}")
    if synthetic:
        if trace_path is not None:
            raise InputError("give a trace file or --synthetic, not both")
        if qps is None:
            raise InputError("--synthetic needs --qps (requests/s)")
        if rate_scale is not None:
            raise InputError("--rate-scale applies to trace files; with --synthetic set --qps")
        if fmt is not None:
            raise InputError("--format applies to trace files, not --synthetic")
        if not 0 <= seed < 2**32:  # numpy's (and bench_serving's --seed) range: random:L draws as it does
            raise InputError(f"--seed must be from 0 to {2**32 - 1}, as bench_serving's (numpy's), got {short_repr(seed)}")
        return synthetic_trace(qps, prompt_tokens, output_tokens, max_requests, duration, seed)
    if trace_path is None:
        raise InputError("give a trace file (Azure CSV, Mooncake JSONL, BurstGPT CSV) or --synthetic --qps N")
    trace = load_trace(trace_path, fmt)
    return reshape(trace, max_requests=max_requests)


def _setup(gpu: str | None, model: str, *, cost_model: str = "roofline", s_sat: float | None = None,
           bandwidth_efficiency: float | None = None, mfu: float | None = None, calibration: Path | None = None,
           weight_bytes: float | None = None, kv_bytes: float | None = None, kv_cache_dtype: str | None = None,
           mem_fraction_static: float | None = None,
           max_prefill_tokens: int = 16384, flops_dtype: str | None = None, step_overhead_ms: float | None = None,
           ignore_eos: bool = False, disable_overlap: bool = False, cuda_graph_max_bs: int | None = None,
           max_running_requests: int | None = None, gpu_profile: Any = None, tp: int = 1,
           per_request_overhead_ms: float | None = None, admission_delay_ms: float | None = None,
           first_token_delay_ms: float | None = None, admission_interval_ms: float | None = None) -> Any:
    """The simulated server (:func:`pdmux_cli.simulate.engine.make_setup`) from the options shared by
    simulate and tune; :class:`InputError` for bad values or combinations."""
    from ..catalog.hardware import find_gpu_or_file
    from ..catalog.model import load_model
    from ..sglang.kv_cache import check_kv_options, resolve_kv_cache
    from ..simulate import engine
    from ..simulate.engine import make_setup

    _check_number("--s-sat", s_sat, minimum=1.0, strict=False)  # SMs: fewer than one saturates nothing
    check_kv_options(kv_cache_dtype, kv_bytes)
    engine.check_bytes_per_element(weight_bytes, "--weight-bytes")
    engine.check_bytes_per_element(kv_bytes, "--kv-bytes")
    engine.check_mem_fraction(mem_fraction_static)
    engine.check_efficiency(bandwidth_efficiency, "--bandwidth-efficiency")
    engine.check_efficiency(mfu, "--mfu")
    for flag, value in (("--step-overhead-ms", step_overhead_ms), ("--per-request-overhead-ms", per_request_overhead_ms),
                        ("--admission-delay-ms", admission_delay_ms), ("--first-token-delay-ms", first_token_delay_ms),
                        ("--admission-interval-ms", admission_interval_ms)):
        _check_number(flag, value, strict=False)
    if max_prefill_tokens < 1:
        raise InputError(f"--max-prefill-tokens must be >= 1, got {max_prefill_tokens}")
    for name, value in (("--cuda-graph-max-bs", cuda_graph_max_bs), ("--max-running-requests", max_running_requests)):
        if value is not None and value < 1:
            raise InputError(f"{name} must be >= 1, got {value}")
    if flops_dtype is not None and flops_dtype not in ("bf16", "fp16", "fp8"):
        raise InputError(f"--flops-dtype must be bf16, fp16 or fp8, got {flops_dtype!r}")
    profile = gpu_profile if gpu_profile is not None else find_gpu_or_file(gpu or "h100")
    if s_sat is not None and profile.sm_count and s_sat > profile.sm_count:
        raise InputError(f"--s-sat {s_sat:g} is more than the {profile.sm_count} SMs of {profile.name}: "
                         "give the SMs that saturate HBM bandwidth, at most all of them")
    mdl = load_model(model)
    kv_cache = resolve_kv_cache(mdl, kv_cache_dtype, kv_bytes)
    cal = None
    if calibration is not None:
        from ..costmodel.calibration_file import load_calibration

        cal = load_calibration(calibration)
        if s_sat is not None and cal.has_partitions:
            raise InputError("--s-sat is a guess that a --calibration file replaces: give one or the other")
    return make_setup(profile, mdl, cost_model=cost_model.strip().lower(), s_sat=s_sat,
                      bandwidth_efficiency=bandwidth_efficiency, mfu=mfu, calibration=cal,
                      weight_bytes_per_param=weight_bytes, kv_bytes_per_element=kv_cache.bytes_per_element,
                      mem_fraction_static=mem_fraction_static, max_prefill_tokens=max_prefill_tokens,
                      flops_dtype=flops_dtype, step_overhead_ms=step_overhead_ms,
                      per_request_overhead_ms=per_request_overhead_ms, admission_delay_ms=admission_delay_ms,
                      first_token_delay_ms=first_token_delay_ms, admission_interval_ms=admission_interval_ms,
                      ignore_eos=ignore_eos, disable_overlap=disable_overlap, cuda_graph_max_bs=cuda_graph_max_bs,
                      max_running_requests=max_running_requests, tp=tp)


def without_prefix_cache(setup: Any) -> Any:
    """``setup`` with SGLang's radix cache off (``--no-prefix-cache``)."""
    from dataclasses import replace

    return replace(setup, prefix_cache=False)


def _pdmux_config(config: Path | None, sm_group_num: int | None, decode_bs_divisor: int | None,
                  token_budget: int | None, divisions: str | None, setup: Any) -> Any:
    """The pdmux config to simulate (a YAML, ``--divisions``, or SGLang's defaults with overrides) and
    notes on what only SGLang 0.5.23 or the driver objects to, and warnings. Refused by unreleased
    SGLang -> InputError."""
    from ..sglang import pdmux_config as pc

    for name, value in (("--sm-group-num", sm_group_num), ("--decode-bs-divisor", decode_bs_divisor),
                        ("--token-budget", token_budget)):
        if value is not None and value < 1:
            raise InputError(f"{name} must be > 0, got {value}")
    warnings: list[str] = []
    if config is not None:
        if divisions is not None:
            raise InputError("give --config or --divisions, not both")
        cfg, problems = pc.load_config(config)
        warnings = [f"config: {p}" for p in problems if not pc.is_error(p)]
        problems = [p for p in problems if pc.is_error(p)]
        if problems:
            first = problems[0]
            raise InputError(f"{config}: {first.where}: {first.message} (pdmux check-config {config} lists every problem)")
    elif divisions is not None:
        entries = pc.parse_divisions(divisions)
        cfg = pc.PdmuxConfig(sm_group_num=len(entries) + 2, manual_divisions=entries)
    else:
        cfg = pc.PdmuxConfig()
    from dataclasses import replace

    from ..sglang import split_levels

    split_levels.check_sm_group_num(sm_group_num, setup.total_sms)
    if sm_group_num is not None:
        if cfg.manual_divisions and sm_group_num != cfg.sm_group_num:
            raise InputError(f"--sm-group-num {sm_group_num} does not match the {len(cfg.manual_divisions)} manual "
                             "divisions (sm_group_num = divisions + 2)")
        cfg = replace(cfg, sm_group_num=sm_group_num)
    if decode_bs_divisor is not None:
        cfg = replace(cfg, decode_bs_divisor=decode_bs_divisor)
    if token_budget is not None:
        cfg = replace(cfg, split_forward_token_budget=token_budget)

    notes = warnings
    blackwell_auto = not cfg.manual_divisions and setup.compute_capability[0] not in split_levels.SGLANG_SM_CONSTRAINTS
    for problem in pc.validate(cfg, setup.total_sms, setup.compute_capability):
        if blackwell_auto and problem.where == "manual_divisions":
            continue  # simulated with CUDA's levels; the plan's note says SGLang needs manual_divisions
        if problem.rule in ("both", "new"):
            source = str(config) if config is not None else ("--divisions" if divisions is not None else "pdmux config")
            hint = f" (pdmux check-config {config} lists every problem)" if config is not None else ""
            raise InputError(f"{source}: {problem.where}: {problem.message}{hint}")
        if problem.rule != "cuda":  # said by driver_divisions' notes, which also says what is simulated
            notes.append(f"config: {problem}")
    cfg, rounded = pc.driver_divisions(cfg, setup.total_sms, setup.compute_capability)
    notes.extend(f"config: {note}" for note in rounded)
    return cfg, notes


def _drop_past_context(workload: Any, model: Any, qps: float | None = None, rate_scale: float | None = None,
                       duration: float | None = None) -> Any:
    """The trace without requests longer than the model's context length (bad rows, counted), then,
    for a trace file, retimed to ``qps`` or by ``rate_scale`` and cut to ``duration`` seconds
    (:func:`pdmux_cli.simulate.traces.reshape`)."""
    from ..simulate.traces import drop_past_context, reshape

    workload = drop_past_context(workload, model.max_position_embeddings, model.name)
    if workload.format == "synthetic" or (qps is None and rate_scale is None and duration is None):
        return workload
    return reshape(workload, rate_scale=rate_scale, qps=qps, duration_s=duration)


def _link_dict(link: Any) -> dict[str, Any]:
    """A :class:`pdmux_cli.multigpu.disaggregation.KvLink` for JSON."""
    return {"kind": link.kind, "bytes_per_s": link.bytes_per_s, "latency_s": link.latency_s, "source": link.source}


def _finite(data: Any) -> Any:
    """``data`` with every NaN or infinite float replaced by ``None`` (JSON has no such numbers)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def print_json(data: Any) -> None:
    """Print ``data`` as indented, standard JSON: NaN and infinities become ``null``."""
    from ..messages import json_default

    sys.stdout.write(json.dumps(_finite(data), indent=2, allow_nan=False, default=json_default) + "\n")


def _progress(enabled: bool, total: int, description: str) -> tuple[Any, Callable[[int], None] | None]:
    """A rich progress bar on stderr (or nothing): returns (context manager or None, advance(done))."""
    if not enabled:
        return None, None
    bar = progress_bar(console(stderr=True))
    task = bar.add_task(description, total=total)

    def update(done: int) -> None:
        bar.update(task, completed=done)

    return bar, update


def _check_max_steps(max_steps: int | None) -> None:
    """``--max-steps``: a whole number >= 0 (:func:`pdmux_cli.simulate.engine.step_budget`)."""
    from ..simulate.engine import step_budget

    if max_steps is not None:
        step_budget(0, max_steps)


def _show_progress(as_json: bool) -> bool:
    return not as_json and sys.stderr is not None and sys.stderr.isatty()


@app.command()
def simulate(
    trace: Path | None = TRACE_ARGUMENT,
    trace_option: Path | None = TRACE_OPTION,
    synthetic: bool = SYNTHETIC_OPTION,
    fmt: str | None = FORMAT_OPTION,
    qps: float | None = typer.Option(None, "--qps", help="Requests/s: the synthetic rate, or retime a trace to it."),
    rate_scale: float | None = typer.Option(None, "--rate-scale", help="Multiply a trace's arrival rate (2 = twice the load)."),
    max_requests: int | None = MAX_REQUESTS_OPTION,
    duration: float | None = DURATION_OPTION,
    seed: int = SEED_OPTION,
    prompt_tokens: str = PROMPT_TOKENS_OPTION,
    output_tokens: str = OUTPUT_TOKENS_OPTION,
    model: str = MODEL_OPTION,
    gpu: str | None = GPU_OPTION,
    policies: str = typer.Option(DEFAULT_POLICIES, "--policies", help="Comma-separated: pdmux, chunked (SGLang's default scheduling), mixed-chunk (--enable-mixed-chunk), prefill-first (--chunked-prefill-size -1), disagg (with --disagg)."),
    chunk_sizes: str | None = typer.Option(None, "--chunk-sizes", help="Chunk sizes of 'chunked' (default: SGLang's default for the GPU, 8192 on H100/H200)."),
    mixed_chunk_sizes: str = MIXED_CHUNK_SIZES_OPTION,
    prefill_decode_interval: int = PREFILL_DECODE_INTERVAL_OPTION,
    config: Path | None = typer.Option(None, "--config", help="pdmux YAML to simulate (default: SGLang's defaults)."),
    sm_group_num: int | None = typer.Option(None, "--sm-group-num", help="Override sm_group_num."),
    decode_bs_divisor: int | None = typer.Option(None, "--decode-bs-divisor", help="Override decode_bs_divisor."),
    token_budget: int | None = typer.Option(None, "--token-budget", help="Override split_forward_token_budget."),
    divisions: str | None = typer.Option(None, "--divisions", help="Manual levels PREFILL:DECODE:THRESHOLD,..."),
    unreleased_fallback: bool = typer.Option(False, "--unreleased-fallback", help="pdmux: where SGLang 0.5.23 crashes (no manual threshold matches), use group 1 as its unreleased branches do, instead of stopping."),
    cost_model: str = typer.Option("roofline", "--cost-model", help=COST_MODEL_HELP),
    s_sat: float | None = typer.Option(None, "--s-sat", help="SMs that reach 95% of HBM bandwidth (default: the cost model's)."),
    bandwidth_efficiency: float | None = typer.Option(None, "--bandwidth-efficiency", help="Chapter model: fraction of datasheet bandwidth decode reaches (0.85)."),
    mfu: float | None = typer.Option(None, "--mfu", help="Chapter model: fraction of dense FLOP/s prefill reaches (0.5)."),
    step_overhead_ms: float | None = typer.Option(None, "--step-overhead-ms", help="Roofline model: the engine's CPU time per step, ms (0 = kernels only)."),
    per_request_overhead_ms: float | None = PER_REQUEST_OVERHEAD_OPTION,
    admission_delay_ms: float | None = ADMISSION_DELAY_OPTION,
    first_token_delay_ms: float | None = FIRST_TOKEN_DELAY_OPTION,
    admission_interval_ms: float | None = ADMISSION_INTERVAL_OPTION,
    calibration: Path | None = typer.Option(None, "--calibration", help="calibration.yaml from 'pdmux bench' (SM-partition curves, co-run interference) and/or 'pdmux calibrate' (whole-GPU efficiencies from your SGLang)."),
    weight_bytes: float | None = typer.Option(None, "--weight-bytes", help="Bytes per weight (default: the model's dtype)."),
    kv_bytes: float | None = typer.Option(None, "--kv-bytes", help="Bytes per KV-cache element (default: by --kv-cache-dtype)."),
    kv_cache_dtype: str | None = typer.Option(None, "--kv-cache-dtype", help=KV_CACHE_DTYPE_HELP),
    flops_dtype: str | None = typer.Option(None, "--flops-dtype", help="bf16, fp16 or fp8 dense math (default: by model)."),
    mem_fraction_static: float | None = typer.Option(None, "--mem-fraction-static", help="SGLang's flag: share of GPU memory for weights and KV pool (default: SGLang's own, per policy)."),
    max_prefill_tokens: int = typer.Option(16384, "--max-prefill-tokens", help="SGLang's --max-prefill-tokens."),
    max_running_requests: int | None = typer.Option(None, "--max-running-requests", help="SGLang's flag (default: SGLang's, from the KV pool)."),
    cuda_graph_max_bs: int | None = typer.Option(None, "--cuda-graph-max-bs", help="Largest decode batch with a CUDA graph (default: SGLang's for the GPU). Larger batches launch kernel by kernel: slower only where the launches outlast the GPU's work (small models); it also sizes SGLang's memory reserve (floored at 10 GB on GPUs over 60 GB)."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Requests run to their max_new_tokens (benchmark traffic): admission reserves all of it."),
    disable_overlap_schedule: bool = typer.Option(False, "--disable-overlap-schedule", help="Baselines without SGLang's overlap scheduler (as pdmux runs): CPU time adds to every step."),
    no_prefix_cache: bool = NO_PREFIX_CACHE_OPTION,
    slo_ttft: float = typer.Option(1000.0, "--slo-ttft", help="TTFT SLO, ms."),
    slo_itl: float = typer.Option(60.0, "--slo-itl", help="ITL SLO, ms (judged on each request's p99 ITL)."),
    tp: int = typer.Option(1, "--tp", help=TP_HELP),
    dp: int | None = DP_OPTION,
    load_balance_method: str | None = LOAD_BALANCE_OPTION,
    disagg: str | None = DISAGG_OPTION,
    disagg_tp: int | None = DISAGG_TP_OPTION,
    kv_link: str = KV_LINK_OPTION,
    kv_link_gb_s: float | None = KV_LINK_GB_S_OPTION,
    kv_link_latency_us: float | None = KV_LINK_LATENCY_OPTION,
    max_concurrency: int | None = typer.Option(None, "--max-concurrency", help="A closed-loop client with at most N requests in flight, as SGLang's bench_serving --max-concurrency: each request is sent at its arrival or when one finishes, whichever is later; TTFT counts from the send. One server only."),
    workers: int | None = typer.Option(None, "--workers", help="Processes, one policy (or, with --dp and round_robin, one replica) each (default: the cores available; 1 runs the policies here, one after another). With --executor ray: tasks at a time (default: the cluster's CPUs)."),
    executor: str = EXECUTOR_OPTION,
    ray_address: str | None = RAY_ADDRESS_OPTION,
    max_steps: int | None = MAX_STEPS_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    csv_path: Path | None = typer.Option(None, "--csv", parser=output_file, metavar="<path>", help="Write per-request results to this CSV file (row by row as requests finish; the file appears whole at the end)."),
    plot: Path | None = typer.Option(None, "--plot", parser=output_file, metavar="<path>", help="Write ITL and TTFT CDFs to this PNG (needs matplotlib)."),
    sglang: str = sglang_option(),
) -> None:
    """Replay a request trace through PD multiplexing, chunked prefill, prefill-first and PD disaggregation.

    One server of --tp GPUs, --dp replicas of it behind a router, or --disagg XPYD instances (the
    roofline cost model, or a calibration); per policy: TTFT, ITL, TPOT and end-to-end latency
    percentiles, SLO attainment, goodput, GPU busy share, and the GPUs it used."""
    from ..simulate.executors import check_executor
    from ..simulate.runner import simulate_policies
    from ..simulate.schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy

    if workers is not None and workers < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    executor = check_executor(executor, ray_address)
    _check_max_steps(max_steps)
    if max_concurrency is not None and max_concurrency < 1:
        raise InputError(f"--max-concurrency must be >= 1 requests in flight, got {max_concurrency}")
    if max_concurrency is not None and (disagg is not None or (dp or 1) > 1):
        raise InputError("--max-concurrency (a closed-loop client) is simulated on one server: drop --dp and --disagg")
    if trace is not None and trace_option is not None:
        raise InputError("give the trace once: as the TRACE argument or as --trace, not both")
    trace = trace if trace is not None else trace_option
    _check_number("--slo-ttft", slo_ttft)
    _check_number("--slo-itl", slo_itl)
    names = parse_names(policies, "--policies", POLICIES)
    if "disagg" in names and disagg is None:
        raise InputError("--policies disagg needs --disagg XPYD (prefill and decode instances, e.g. 1P1D)")
    if disagg is not None and "disagg" not in names:
        names.append("disagg")
    chunks = parse_chunk_sizes(chunk_sizes, "--chunk-sizes") if chunk_sizes is not None and "chunked" in names else []
    mixed_chunks = parse_chunk_sizes(mixed_chunk_sizes, "--mixed-chunk-sizes") if "mixed-chunk" in names else []
    if not 0 <= prefill_decode_interval <= MAX_PREFILL_DECODE_INTERVAL:
        raise InputError(f"--prefill-decode-interval must be 0 to {MAX_PREFILL_DECODE_INTERVAL:,} decode-only rounds "
                         f"after each prefill batch, got {prefill_decode_interval}")
    if plot is not None and plot.suffix.lower() != ".png":
        raise InputError(f"--plot writes a PNG: give a file name ending in .png, got {plot}")
    inputs = (trace, config, calibration, model_file(model), gpu_file(gpu))
    for path in (csv_path, plot):
        refuse_overwriting_inputs(path, *inputs)
        check_writable(path)
    if csv_path is not None and plot is not None and os.path.realpath(csv_path) == os.path.realpath(plot):
        raise InputError(f"--csv and --plot name the same file {plot}: give two paths")
    workload = _load_workload(trace, synthetic, fmt, qps, rate_scale, max_requests, duration, seed,
                              prompt_tokens, output_tokens)
    setup, cluster = setup_and_cluster(
        lambda n: _setup(gpu, model, cost_model=cost_model, s_sat=s_sat, bandwidth_efficiency=bandwidth_efficiency,
                         mfu=mfu, calibration=calibration, weight_bytes=weight_bytes, kv_bytes=kv_bytes,
                         kv_cache_dtype=kv_cache_dtype,
                         mem_fraction_static=mem_fraction_static, max_prefill_tokens=max_prefill_tokens,
                         flops_dtype=flops_dtype, step_overhead_ms=step_overhead_ms,
                         per_request_overhead_ms=per_request_overhead_ms, admission_delay_ms=admission_delay_ms,
                         first_token_delay_ms=first_token_delay_ms, admission_interval_ms=admission_interval_ms,
                         ignore_eos=ignore_eos,
                         disable_overlap=disable_overlap_schedule, cuda_graph_max_bs=cuda_graph_max_bs,
                         max_running_requests=max_running_requests, tp=n),
        tp, no_prefix_cache, names, gpu, dp, load_balance_method, disagg, kv_link, kv_link_gb_s, kv_link_latency_us,
        disagg_tp)
    workload = _drop_past_context(workload, setup.model, qps, rate_scale, duration)
    if not chunks and "chunked" in names:
        from ..sglang.server_defaults import default_chunked_prefill_size

        chunks = [default_chunked_prefill_size(setup.memory_bytes)]
    from ..sglang.revisions import model_support

    support = model_support(setup.model.architectures, sglang)
    if support.state == "no":
        names = [n for n in names if n != "pdmux"]
        if not names:
            raise InputError(f"--policies pdmux: {support.reason} (--sglang picks another SGLang revision)")
    runs: list[Any] = []
    cfg_notes: list[str] = []
    for name in dict.fromkeys(names):
        if name == "pdmux":
            from ..messages import render_all
            from ..sglang.revision_rules import layer_cap, plan_check, revision_findings
            from ..sglang.revisions import get_revision

            cfg, cfg_notes = _pdmux_config(config, sm_group_num, decode_bs_divisor, token_budget, divisions, setup)
            plan_check(sglang, cfg)  # a revision whose divide_sm was not read needs manual_divisions
            cfg_notes = [*render_all(revision_findings(sglang, setup.tp)), *cfg_notes]
            runs.append(PdmuxPolicy(cfg, unreleased_fallback=unreleased_fallback or get_revision(sglang).threshold_fallback,
                                    max_split_forward_layers=layer_cap(sglang, cfg)))
        elif name == "chunked":
            runs.extend(ChunkedPolicy(c, prefill_decode_interval) for c in dict.fromkeys(chunks))
        elif name == "mixed-chunk":
            runs.extend(MixedChunkPolicy(c, prefill_decode_interval) for c in dict.fromkeys(mixed_chunks))
        elif name == "disagg":
            runs.append(cluster.disagg)
        else:
            runs.append(PrefillFirstPolicy(prefill_decode_interval))

    n = len(workload)
    from ..simulate.engine import step_budget

    budget = step_budget(n, max_steps)
    label = "simulating" + (f" (budget {budget:,} steps)" if budget else "")
    bar, update = _progress(_show_progress(as_json) and n * len(runs) >= 2000, n * len(runs), label)
    steps_shown = None
    if bar is not None and budget:
        task = bar.task_ids[0]

        def steps_shown(steps: int) -> None:
            bar.update(task, description=f"simulating ({steps:,}/{budget:,} steps)")

    metrics = []
    refused: list[tuple[str, InputError]] = []
    with contextlib.ExitStack() as stack:
        sink = None
        if csv_path is not None:  # rows stream into the temporary file; it replaces csv_path at the end
            from ..simulate.fold import CsvSink
            from ..simulate.report import CSV_FIELDS
            from ..util.atomic import atomic_output

            tmp = stack.enter_context(atomic_output(csv_path))
            sink = CsvSink(stack.enter_context(open(tmp, "w", newline="", encoding="utf-8")))
            sink.writer.writerow(CSV_FIELDS)
        if bar is not None:
            stack.enter_context(bar)
        outcomes = simulate_policies(workload, setup, runs, slo_ttft, slo_itl, dp=cluster.dp,
                                     load_balance_method=cluster.method, workers=workers, progress=update,
                                     max_concurrency=max_concurrency or 0, executor=executor, ray_address=ray_address,
                                     max_steps=max_steps, csv=sink, progress_steps=steps_shown)
        if not any(not isinstance(o, InputError) for o in outcomes):
            raise next(o for o in outcomes if isinstance(o, InputError))
    for policy, outcome in zip(runs, outcomes):
        if isinstance(outcome, InputError):  # one policy SGLang cannot run here (e.g. its memory reserve): the others ran
            refused.append((policy.label, outcome))
        else:
            metrics.append(outcome)
    if not metrics:
        raise refused[0][1]

    from ..simulate import report

    servers = (f", DP {cluster.dp}" if cluster.dp > 1 and any(r.kind != "disagg" for r in runs) else "") + (
        f", {cluster.disagg.label} on {cluster.disagg.gpus(setup)} GPUs" if cluster.disagg is not None else "")
    title = (f"{workload.source}: {n} requests {workload.arrivals_text()}; "
             f"{setup.model.name} on {on_gpus(setup)}{servers}, {setup.step_model.source}")
    notes = [workload.bad_rows_text()] if workload.bad_rows else []
    notes += list(cluster.notes)
    notes += [f"{label} not simulated: {exc}" for label, exc in refused]
    if support.state != "yes":
        notes.insert(0, ("pdmux not simulated: " if support.state == "no" else "pdmux: ") + support.reason)
    if prefill_decode_interval and "pdmux" in names:
        notes.append("pdmux: --prefill-decode-interval does not apply (SGLang's pdmux loop runs a decode step every "
                     "round whatever it prefills)")
    if plot is not None and not any(m.completed for m in metrics):
        notes.append(f"no request completed under any policy: nothing to plot, {plot} not written")
        plot = None
    if plot is not None:
        from ..simulate.plot import write_cdf_plot

        write_cdf_plot(plot, metrics, title)
    notes.extend(cfg_notes)
    if workload.failed_rows:
        notes.append(f"{workload.failed_rows} failed request row(s) (0 response tokens) skipped")
    notes.extend(workload.notes)
    if as_json:
        print_json({
            "trace": report.trace_dict(workload),
            "model": setup.model.name, "gpu": setup.gpu_name, "sm_count": setup.total_sms,
            "tp": setup.tp, "dp": cluster.dp, "gpus": cluster.gpus, "load_balance_method": cluster.router,
            "disagg": cluster.disagg.label.split()[-1] if cluster.disagg else None,
            "disagg_tp": cluster.disagg.setup_for(setup).tp if cluster.disagg else None,
            "kv_link": _link_dict(cluster.disagg.link) if cluster.disagg else None,
            "cost_model": setup.step_model.name, "throughput": setup.step_model.source,
            "slo": {"ttft_ms": slo_ttft, "itl_ms": slo_itl, "itl_judged_on": "request p99 ITL (nearest rank)"},
            "policies": [report.metrics_dict(m) for m in metrics],
            "csv": str(csv_path) if csv_path else None, "plot": str(plot) if plot else None,
            "sglang_support": support.as_dict(), "notes": notes,
        })
        return
    con = console()
    for table in report.metrics_tables(metrics, con.width, title):
        con.print(table)
    for line in report.group_lines(metrics):
        con.print(line)
    for m in metrics:
        for note in m.notes:
            notes.append(f"{m.policy}: {note}")
    for note in notes:
        print_note(con, note)
    for path, what in ((csv_path, "per-request results"), (plot, "CDF plot")):
        if path is not None:
            con.print(f"wrote {path} ({what})")


# ------------------------------------------------------------------------------------------------
# tune


def _tune_run(workload: Any, setup: Any, slo_ttft: float, slo_itl: float, sm_group_nums: str | None,
              divisors: str | None, budgets: str | None, single_levels: bool, workers: int | None,
              show_progress: bool, dp: int = 1, load_balance_method: str = "round_robin",
              slo_margins: str | None = None, sglang: str | None = None, executor: str = "local",
              ray_address: str | None = None, max_steps: int | None = None) -> Any:
    from ..sglang.revisions import get_revision
    from ..sglang.split_levels import check_sm_group_num
    from ..simulate.tune import (
        DEFAULT_BUDGETS,
        DEFAULT_DIVISORS,
        DEFAULT_LAYER_CAPS,
        DEFAULT_SLO_MARGINS,
        tune,
    )

    _check_number("--slo-ttft", slo_ttft)
    _check_number("--slo-itl", slo_itl)
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    groups = parse_int_list(sm_group_nums, "--sm-group-nums", minimum=3) if sm_group_nums is not None else None
    if groups is not None:
        for value in groups:
            check_sm_group_num(value, setup.total_sms, "--sm-group-nums")
    divs = parse_int_list(divisors, "--divisors") if divisors is not None else DEFAULT_DIVISORS
    buds = parse_int_list(budgets, "--budgets") if budgets is not None else DEFAULT_BUDGETS
    margins: Any = DEFAULT_SLO_MARGINS
    if slo_margins is not None:
        margins = () if slo_margins.strip().lower() in ("none", "off", "-") else parse_float_list(
            slo_margins, "--slo-margins", unique=True)
    from ..simulate.engine import step_budget
    from ..simulate.executors import check_executor

    executor = check_executor(executor, ray_address)
    _check_max_steps(max_steps)
    budget = step_budget(len(workload), max_steps)
    where = " on Ray" if executor == "ray" else ""
    bar, _ = _progress(show_progress, 1, f"tuning{where}" + (f" (budget {budget:,} steps)"
                                                             if budget else ""))
    rev = get_revision(sglang)  # its rules: the layer cap searched, manual levels, the group-1 fallback
    cluster = {"dp": dp, "load_balance_method": load_balance_method, "slo_margins": margins,
               "layer_caps": DEFAULT_LAYER_CAPS if rev.max_split_forward_layers else (),
               "manual_only": rev.divide_sm == "not read", "threshold_fallback": rev.threshold_fallback,
               "executor": executor, "ray_address": ray_address, "max_steps": max_steps}
    if bar is None:
        return tune(workload, setup, slo_ttft, slo_itl, groups, divs, buds, single_levels, workers, **cluster)
    task = bar.task_ids[0]
    with bar:
        return tune(workload, setup, slo_ttft, slo_itl, groups, divs, buds, single_levels, workers,
                    progress=lambda done, total: bar.update(task, completed=done, total=total), **cluster)


def tune_table(result: Any, top: int | None = 12) -> Any:
    """A rich Table of the tuning rows, best first (``top`` rows plus SGLang's defaults), each with its rank
    among all configs (1: the winner; the JSON's ``index`` is the candidate's place in the search order)."""
    from rich.table import Table

    from ..simulate.report import latency_cell, share_text

    ranked = result.ranked()
    shown = ranked if top is None else ranked[:top]
    if result.baseline is not None and all(r.index != result.baseline for r in shown):
        shown = shown + [result.rows[result.baseline]]
    on = f"; each on {result.gpus} GPUs, {result.layout}" if result.gpus > 1 else ""
    table = Table(title=f"pdmux configs compared ({len(result.rows)} simulated, best first{on})", title_justify="left",
                  caption="SLO met: share of requests; goodput: requests/s meeting the SLO; p99s in ms (from 10 s on in s)",
                  caption_justify="left")
    for col, just in (("rank", "right"), ("config", "left"), ("SLO met", "right"), ("goodput", "right"),
                      ("TTFT p99", "right"), ("ITL p99", "right")):
        table.add_column(col, justify=just)
    rank = {r.index: position for position, r in enumerate(ranked, start=1)}
    for row in shown:
        mark = " best" if row.index == result.best else ""
        mark += " default" if row.index == result.baseline else ""
        table.add_row(f"{rank[row.index]}{mark}", row.candidate.description, share_text(row.slo_attainment),
                      f"{row.goodput_rps:.3g}", latency_cell(row.ttft_p99_ms), latency_cell(row.itl_p99_ms),
                      end_section=row is shown[-1] and bool(result.schedules))
    for other in result.schedules:
        table.add_row("-", f"{other.label} (SGLang, no pdmux)", share_text(other.slo_attainment),
                      f"{other.goodput_rps:.3g}", latency_cell(other.ttft_p99_ms), latency_cell(other.itl_p99_ms))
    return table


def _tune_dict(result: Any) -> dict[str, Any]:
    """tune's JSON; ``gpus``, ``layout``, ``router``: the GPUs every config and schedule ran on (``dp x
    tp``), how, and the load-balance method between the replicas (``null`` for one server)."""
    gpus, layout, router = result.gpus, str(result.layout), result.router or None

    def cfg(c: Any) -> dict[str, Any]:
        return {"sm_group_num": c.sm_group_num, "manual_divisions": [list(e) for e in c.manual_divisions],
                "split_forward_token_budget": c.split_forward_token_budget, "decode_bs_divisor": c.decode_bs_divisor,
                "max_split_forward_layers": c.max_split_forward_layers}

    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {
        "workers": result.workers, "skipped_invalid": result.skipped, "best": result.best, "baseline": result.baseline,
        "gpus": gpus, "layout": layout, "router": router,
        "rows": [{"index": r.index, "description": r.candidate.description, "config": cfg(r.candidate.config),
                  "gpus": gpus, "layout": layout,
                  "slo_attainment": r.slo_attainment, "goodput_rps": r.goodput_rps,
                  "ttft_p99_ms": num(r.ttft_p99_ms), "itl_p99_ms": num(r.itl_p99_ms),
                  "older_sglang_crash_rounds": r.older_sglang_crash_rounds} for r in result.rows],
        "schedules": [{"policy": o.label, "gpus": gpus, "layout": layout, "slo_attainment": o.slo_attainment, "goodput_rps": o.goodput_rps,
                       "ttft_p99_ms": num(o.ttft_p99_ms), "itl_p99_ms": num(o.itl_p99_ms)} for o in result.schedules],
        "verdict": result.verdict(),
        "notes": result.notes,
    }


def tuned_config(
    gpu_profile: Any,
    trace: Path,
    slo_ttft_ms: float,
    slo_itl_ms: float,
    model: str = "qwen3-8b",
    fmt: str | None = None,
    rate_scale: float | None = None,
    qps: float | None = None,
    max_requests: int | None = None,
    duration: float | None = None,
    budgets: str | None = None,
    divisors: str | None = None,
    sm_group_nums: str | None = None,
    calibration: Path | None = None,
    s_sat: float | None = None,
    workers: int | None = None,
    show: bool = True,
    tp: int = 1,
    sglang: str | None = None,
    to_stderr: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """The hook for ``pdmux gen-config --tune``: tune on ``trace`` for ``gpu_profile`` (a
    ``hardware.Gpu``; ``None`` raises, since the cost model needs bandwidth and FLOP/s) and return
    ``(winning PdmuxConfig, JSON-able summary)``. With ``show``, the comparison table goes to stderr
    when ``to_stderr`` (stdout stays free for the YAML), else to stdout (the YAML goes to a file), as
    ``pdmux tune`` does. Raises :class:`InputError` for bad inputs."""
    if gpu_profile is None:
        raise InputError("--tune needs a GPU profile (--gpu), not --sms/--cc: the simulation needs bandwidth and FLOP/s")
    if trace is None or slo_ttft_ms is None or slo_itl_ms is None:
        raise InputError("--tune needs --trace FILE, --slo-ttft MS and --slo-itl MS")
    workload = _load_workload(trace, False, fmt, qps, rate_scale, max_requests, duration, 0, "1024", "128")
    setup = _setup(None, model, s_sat=s_sat, calibration=calibration, gpu_profile=gpu_profile, tp=tp)
    from ..sglang.revisions import require_pdmux

    require_pdmux(setup.model.architectures, sglang, "gen-config --tune")
    workload = _drop_past_context(workload, setup.model, qps, rate_scale, duration)
    result = _tune_run(workload, setup, slo_ttft_ms, slo_itl_ms, sm_group_nums, divisors, budgets, True, workers,
                       show and sys.stderr is not None and sys.stderr.isatty(), sglang=sglang)
    from ..messages import render_all
    from ..sglang.revision_rules import revision_findings

    result.notes.extend(render_all(revision_findings(sglang, setup.tp)))
    if show:
        err = console(stderr=to_stderr)
        err.print(tune_table(result))
        err.print("verdict: " + result.verdict(), soft_wrap=True)
        for note in result.notes:
            print_note(err, note)
    return result.best_row.candidate.config, _tune_dict(result)


def _tune_layout(tp: int, cluster: Cluster) -> str:
    """How tune's winner line says the GPUs were used: ``" (TP 2, one rank simulated)"``, ``" (DP 2 x TP 1,
    round_robin)"``."""
    if cluster.dp > 1:
        from ..multigpu.disaggregation import Layout

        rank = ", one rank of each replica simulated" if tp > 1 else ""
        return f" ({Layout(tp, cluster.dp)} behind {cluster.method}{rank})"
    return f" (TP {tp}, one rank simulated)" if tp > 1 else ""


@app.command()
def tune(
    trace: Path = typer.Option(..., "--trace", help="Trace file to tune on (Azure CSV, Mooncake JSONL, BurstGPT CSV)."),
    slo_ttft: float = typer.Option(..., "--slo-ttft", help="TTFT SLO, ms."),
    slo_itl: float = typer.Option(..., "--slo-itl", help="ITL SLO, ms (judged on each request's p99 ITL)."),
    model: str = MODEL_OPTION,
    gpu: str | None = GPU_OPTION,
    fmt: str | None = FORMAT_OPTION,
    qps: float | None = typer.Option(None, "--qps", help="Retime the trace to this many requests/s."),
    rate_scale: float | None = typer.Option(None, "--rate-scale", help="Multiply the trace's arrival rate."),
    max_requests: int | None = MAX_REQUESTS_OPTION,
    duration: float | None = DURATION_OPTION,
    sm_group_nums: str | None = typer.Option(None, "--sm-group-nums", help="sm_group_num values to try (default: every distinct one)."),
    divisors: str | None = typer.Option(None, "--divisors", help="decode_bs_divisor values to try (default 12,24,36,48,72)."),
    budgets: str | None = typer.Option(None, "--budgets", help="split_forward_token_budget values (default 4096,16384,65536)."),
    no_single_levels: bool = typer.Option(False, "--no-fixed-splits", help="Do not try single fixed splits."),
    slo_margins: str | None = typer.Option(None, "--slo-margins", help="Also try SLO levels (gen-config --slo-itl) sized for these shares of --slo-itl (default 1,0.9,0.8), or 'none'."),
    cost_model: str = typer.Option("roofline", "--cost-model", help=COST_MODEL_HELP),
    s_sat: float | None = typer.Option(None, "--s-sat", help="SMs that reach 95% of HBM bandwidth (default: the cost model's)."),
    bandwidth_efficiency: float | None = typer.Option(None, "--bandwidth-efficiency", help="Chapter model: fraction of datasheet bandwidth (0.85)."),
    mfu: float | None = typer.Option(None, "--mfu", help="Chapter model: fraction of dense FLOP/s prefill reaches (0.5)."),
    step_overhead_ms: float | None = typer.Option(None, "--step-overhead-ms", help="Roofline model: the engine's CPU time per step, ms."),
    per_request_overhead_ms: float | None = PER_REQUEST_OVERHEAD_OPTION,
    admission_delay_ms: float | None = ADMISSION_DELAY_OPTION,
    first_token_delay_ms: float | None = FIRST_TOKEN_DELAY_OPTION,
    admission_interval_ms: float | None = ADMISSION_INTERVAL_OPTION,
    calibration: Path | None = typer.Option(None, "--calibration", help="calibration.yaml from 'pdmux bench' and/or 'pdmux calibrate'."),
    mem_fraction_static: float | None = typer.Option(None, "--mem-fraction-static", help="SGLang's flag (default: SGLang's own with chunking off)."),
    max_prefill_tokens: int = typer.Option(16384, "--max-prefill-tokens", help="SGLang's --max-prefill-tokens."),
    kv_bytes: float | None = typer.Option(None, "--kv-bytes", help="Bytes per KV-cache element (default: by --kv-cache-dtype)."),
    kv_cache_dtype: str | None = typer.Option(None, "--kv-cache-dtype", help=KV_CACHE_DTYPE_HELP),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Requests run to their max_new_tokens (benchmark traffic)."),
    no_prefix_cache: bool = NO_PREFIX_CACHE_OPTION,
    workers: int | None = typer.Option(None, "--workers", help="Processes (default: the cores available); with --executor ray, tasks at a time (default: the cluster's CPUs)."),
    executor: str = EXECUTOR_OPTION,
    ray_address: str | None = RAY_ADDRESS_OPTION,
    max_steps: int | None = MAX_STEPS_OPTION,
    tp: int = typer.Option(1, "--tp", help=TP_HELP),
    dp: int | None = TUNE_DP_OPTION,
    load_balance_method: str | None = TUNE_LOAD_BALANCE_OPTION,
    disagg: str | None = typer.Option(None, "--disagg", help="Not taken: tune searches pdmux knobs; compare PD disaggregation with pdmux simulate or pdmux capacity --disagg XPYD."),
    output: Path | None = typer.Option(None, "--output", "-o", parser=output_path, metavar="<path>", help="Write the winning YAML here (whole or not at all)."),
    show_all: bool = typer.Option(False, "--all", help="Show every config compared, not just the best."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    sglang: str = sglang_option(),
) -> None:
    """Search pdmux YAML knobs for the best SLO attainment on a trace; write the winning YAML.

    Tries sm_group_num, decode_bs_divisor or fixed splits, SLO levels for --slo-itl (and 0.9x, 0.8x
    it), and split_forward_token_budget, one simulation each, in parallel on the cores available; with
    --dp, each on that many replicas behind a router."""
    from ..sglang import pdmux_config as pc

    refuse_overwriting_inputs(output, trace, calibration, model_file(model), gpu_file(gpu))
    check_writable(output)
    workload = _load_workload(trace, False, fmt, qps, rate_scale, max_requests, duration, 0, "1024", "128")
    setup = _setup(gpu, model, cost_model=cost_model, s_sat=s_sat, bandwidth_efficiency=bandwidth_efficiency, mfu=mfu,
                   calibration=calibration, mem_fraction_static=mem_fraction_static,
                   max_prefill_tokens=max_prefill_tokens, step_overhead_ms=step_overhead_ms, ignore_eos=ignore_eos,
                   kv_bytes=kv_bytes, kv_cache_dtype=kv_cache_dtype, tp=tp,
                   per_request_overhead_ms=per_request_overhead_ms, admission_delay_ms=admission_delay_ms,
                   first_token_delay_ms=first_token_delay_ms, admission_interval_ms=admission_interval_ms)
    from ..sglang.revisions import require_pdmux

    support = require_pdmux(setup.model.architectures, sglang, "tune")
    if no_prefix_cache:
        setup = without_prefix_cache(setup)
    cluster = cluster_from_options(setup, gpu, dp, load_balance_method, disagg, allow_disagg=False)
    workload = _drop_past_context(workload, setup.model, qps, rate_scale, duration)
    result = _tune_run(workload, setup, slo_ttft, slo_itl, sm_group_nums, divisors, budgets, not no_single_levels,
                       workers, _show_progress(as_json), cluster.dp, cluster.method, slo_margins, sglang, executor,
                       ray_address, max_steps)
    from ..messages import render_all
    from ..sglang.revision_rules import revision_findings
    from ..sglang.revisions import get_revision

    result.notes.extend(render_all(revision_findings(sglang, setup.tp)))
    best = result.best_row.candidate.config
    problems = pc.validate(best, setup.total_sms, setup.compute_capability)
    if problems:  # cannot happen: candidates are validated
        raise InputError(f"winning config is invalid: {problems[0].where}: {problems[0].message}")
    text = pc.dump_config(best)
    if output is not None:
        write_atomic(output, text)
    dp_note = [(f"DP {cluster.dp}: --dp-size {cluster.dp} runs the replicas as one SGLang server; SGLang 0.5.23's "
                "checks do not refuse it with --enable-pdmux, but pdmux under DP is untried here (servers behind "
                "sgl-router are the replicas simulated)")] if cluster.dp > 1 else []
    if as_json:
        data = _tune_dict(result)
        data.update({"trace": trace.name, "requests": len(workload), "gpu": setup.gpu_name, "model": setup.model.name,
                     "tp": setup.tp, "dp": cluster.dp, "gpus": cluster.gpus,
                     "load_balance_method": cluster.router,
                     "cost_model": setup.step_model.name, "throughput": setup.step_model.source,
                     "slo": {"ttft_ms": slo_ttft, "itl_ms": slo_itl}, "yaml": text,
                     "output": str(output) if output else None, "sglang_support": support.as_dict()})
        data["notes"] = [*data.get("notes", []), *cluster.notes, *dp_note]
        print_json(data)
        return
    con = console(stderr=output is None)
    con.print(tune_table(result, None if show_all else 12))
    row = result.best_row
    from ..simulate.report import share_text
    from ..simulate.tune import levels_text

    con.print(f"winner: {row.candidate.description} (levels {levels_text(best, setup.total_sms, setup.compute_capability)}): "
              f"{share_text(row.slo_attainment)} of {len(workload)} requests meet TTFT <= {slo_ttft:g} ms and ITL p99 <= "
              f"{slo_itl:g} ms; {len(result.rows)} configs on {result.workers} worker(s); every policy on "
              f"{result.gpus} GPU(s)" + _tune_layout(setup.tp, cluster))
    con.print("verdict: " + result.verdict(), soft_wrap=True)
    con.print(f"cost model: {setup.step_model.source}", soft_wrap=True)
    unknown = [support.reason] if support.state == "unknown" else []
    for note in [*result.notes, *cluster.notes, *dp_note, *unknown]:
        print_note(con, note)
    if output is None:
        sys.stdout.write(text)
    else:
        dp_flags = f" --dp-size {cluster.dp} --load-balance-method {cluster.method}" if cluster.dp > 1 else ""
        con.print(f"wrote {output}; launch with: " + pc.launch_command(
            str(output), best.sm_group_num, tp=setup.tp, env=get_revision(sglang).tp_launch if setup.tp > 1 else ())
            + dp_flags, soft_wrap=True)


