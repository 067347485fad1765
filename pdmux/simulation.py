"""The simulation commands as Python functions: :func:`simulate`, :func:`capacity`, :func:`tune`,
:func:`calibrate` (and :func:`accuracy`).

Each takes the command's options as keywords, with the CLI's names (``--slo-itl`` is ``slo_itl``,
``--format`` is ``trace_format``, ``--csv`` is ``csv``) and defaults, and returns the workflow's result
(:mod:`pdmux_cli.workflows`): a dataclass whose ``to_dict()`` is exactly what the command's ``--json``
prints, ``"pdmux"`` provenance block included. Paths take a ``str`` or a :class:`~pathlib.Path`; list
options a sequence (``chunk_sizes=(512, 2048)``) or the CLI's text (``"512,2048"``). Bad input raises
:class:`pdmux_cli.util.errors.InputError` with the one line the CLI would print; nothing is printed and
no progress bar is drawn (pass ``progress=`` a :data:`pdmux_cli.workflows.progress.ProgressFactory` for
one).

Units are the CLI's: ms (``*_ms``, ``slo_ttft``, ``slo_itl``), requests/s (``qps``), seconds
(``duration``), tokens, bytes, GB/s, us, SMs.

>>> from pdmux.simulation import simulate
>>> result = simulate("AzureLLMInferenceTrace_conv.csv", policies="pdmux,chunked", max_requests=500)
>>> [(p["policy"], p["slo_attainment"]) for p in result.to_dict()["policies"]]  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pdmux_cli.catalog.model import DEFAULT_MODEL
from pdmux_cli.sglang.revisions import DEFAULT_REVISION
from pdmux_cli.sglang.server_defaults import MAX_PREFILL_TOKENS
from ._calls import Unpack, api_function, check_progress, request
from pdmux_cli.workflows.accuracy import AccuracyRequest
from pdmux_cli.workflows.calibrate import (
    DEFAULT_MAX_LOG_LINES,
    DEFAULT_MAX_POINTS,
    DEFAULT_MAX_REPLAY_REQUESTS,
    CalibrateRequest,
)
from pdmux_cli.workflows.capacity import CapacityRequest
from pdmux_cli.workflows.server import ServerKeywords
from pdmux_cli.workflows.simulate import SimulateRequest
from pdmux_cli.workflows.tune import TuneRequest

if TYPE_CHECKING:
    from pdmux_cli.workflows.accuracy import AccuracyResult
    from pdmux_cli.workflows.calibrate import CalibrateResult
    from pdmux_cli.workflows.capacity import CapacityOutcome
    from pdmux_cli.workflows.progress import ProgressFactory
    from pdmux_cli.workflows.simulate import SimulateResult
    from pdmux_cli.workflows.tune import TuneOutcome

__all__ = ["accuracy", "calibrate", "capacity", "simulate", "tune"]

PathLike = str | Path


@api_function
def simulate(
    trace: PathLike | None = None,
    *,
    synthetic: bool = False,
    trace_format: str | None = None,
    qps: float | None = None,
    rate_scale: float | None = None,
    max_requests: int | None = None,
    duration: float | None = None,
    seed: int = 0,
    prompt_tokens: str | int = "1024",
    output_tokens: str | int = "128",
    dataset_name: str | None = None,
    gsp_num_groups: int = 64,
    gsp_prompts_per_group: int = 16,
    gsp_system_prompt_len: int = 2048,
    gsp_question_len: int = 128,
    gsp_output_len: int = 256,
    gsp_range_ratio: float = 1.0,
    gsp_ordered: bool = False,
    model: str = DEFAULT_MODEL,
    gpu: str | None = None,
    policies: str | Sequence[str] = "pdmux,chunked,mixed-chunk",
    chunk_sizes: str | Sequence[int] | None = None,
    mixed_chunk_sizes: str | Sequence[int] = "512",
    prefill_decode_interval: int = 0,
    config: PathLike | None = None,
    sm_group_num: int | None = None,
    decode_bs_divisor: int | None = None,
    token_budget: int | None = None,
    divisions: str | None = None,
    unreleased_fallback: bool = False,
    cost_model: str = "roofline",
    s_sat: float | None = None,
    bandwidth_efficiency: float | None = None,
    mfu: float | None = None,
    step_overhead_ms: float | None = None,
    calibration: PathLike | None = None,
    weight_bytes: float | None = None,
    kv_bytes: float | None = None,
    kv_cache_dtype: str | None = None,
    flops_dtype: str | None = None,
    moe_runner_backend: str | None = None,
    mem_fraction_static: float | None = None,
    max_prefill_tokens: int = MAX_PREFILL_TOKENS,
    max_running_requests: int | None = None,
    cuda_graph_max_bs: int | None = None,
    ignore_eos: bool = False,
    disable_overlap_schedule: bool = False,
    disable_prefill_cuda_graph: bool = False,
    no_prefix_cache: bool = False,
    context_length: int | None = None,
    disable_cuda_graph: bool = False,
    slo_ttft: float = 1000.0,
    slo_itl: float = 60.0,
    tp: int = 1,
    dp: int | None = None,
    load_balance_method: str | None = None,
    disagg: str | None = None,
    disagg_tp: int | None = None,
    kv_link: str = "auto",
    kv_link_gb_s: float | None = None,
    kv_link_latency_us: float | None = None,
    max_concurrency: int | None = None,
    workers: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    max_steps: int | None = None,
    csv: PathLike | None = None,
    plot: PathLike | None = None,
    sglang: str = DEFAULT_REVISION,
    step_by_step: bool = False,
    progress: ProgressFactory | None = None,
    **keywords: Unpack[ServerKeywords],
) -> SimulateResult:
    """Replay a trace (``pdmux simulate``): per policy TTFT, ITL, TPOT and end-to-end latency percentiles
    (ms), SLO attainment (share of requests meeting TTFT <= ``slo_ttft`` ms and p99 ITL <= ``slo_itl`` ms),
    goodput (requests/s) and GPU busy share, on one server of ``tp`` GPUs, ``dp`` replicas, or ``disagg``
    (``"XPYD"``) instances. Every option is :class:`pdmux_cli.workflows.simulate.SimulateRequest`'s
    (``step_by_step``: the reference loop, one decode step at a time: a check of the default event speed).

    Returns :class:`pdmux_cli.workflows.simulate.SimulateResult` (``metrics``: one
    :class:`~pdmux_cli.simulate.metrics.PolicyMetrics` per policy; ``to_dict()``: the ``--json``). Writes
    ``csv`` and ``plot`` when given. Raises :class:`~pdmux_cli.util.errors.InputError` for bad input.
    """
    from pdmux_cli.workflows.simulate import simulate as run

    return run(request(SimulateRequest, {**locals(), **keywords}), check_progress(progress))


@api_function
def capacity(
    trace: PathLike | None = None,
    *,
    synthetic: bool = False,
    trace_format: str | None = None,
    qps: float | None = None,
    max_requests: int | None = None,
    duration: float | None = None,
    seed: int = 0,
    prompt_tokens: str | int = "1024",
    output_tokens: str | int = "128",
    dataset_name: str | None = None,
    gsp_num_groups: int = 64,
    gsp_prompts_per_group: int = 16,
    gsp_system_prompt_len: int = 2048,
    gsp_question_len: int = 128,
    gsp_output_len: int = 256,
    gsp_range_ratio: float = 1.0,
    gsp_ordered: bool = False,
    model: str = DEFAULT_MODEL,
    gpu: str | None = None,
    policies: str | Sequence[str] = "pdmux,chunked,mixed-chunk",
    chunk_sizes: str | Sequence[int] | None = None,
    mixed_chunk_sizes: str | Sequence[int] = "512",
    config: PathLike | Sequence[PathLike] | None = None,
    unreleased_fallback: bool = False,
    prefill_decode_interval: int = 0,
    slo_ttft: float = 1000.0,
    slo_itl: float = 60.0,
    target: float = 0.99,
    tolerance: float = 0.02,
    cost_model: str = "roofline",
    s_sat: float | None = None,
    calibration: PathLike | None = None,
    step_overhead_ms: float | None = None,
    kv_bytes: float | None = None,
    kv_cache_dtype: str | None = None,
    mem_fraction_static: float | None = None,
    max_prefill_tokens: int = MAX_PREFILL_TOKENS,
    ignore_eos: bool = False,
    no_prefix_cache: bool = False,
    context_length: int | None = None,
    disable_cuda_graph: bool = False,
    workers: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    max_steps: int | None = None,
    tp: int = 1,
    dp: int | None = None,
    load_balance_method: str | None = None,
    disagg: str | None = None,
    disagg_tp: int | None = None,
    kv_link: str = "auto",
    kv_link_gb_s: float | None = None,
    kv_link_latency_us: float | None = None,
    plot: PathLike | None = None,
    sglang: str = DEFAULT_REVISION,
    progress: ProgressFactory | None = None,
    **keywords: Unpack[ServerKeywords],
) -> CapacityOutcome:
    """The highest request rate (requests/s over all of a policy's GPUs, and per GPU) each policy sustains
    with ``target`` of its requests within the SLO, and whether to turn pdmux on (``pdmux capacity``).
    ``config``: pdmux YAMLs sized beside SGLang's defaults. Every option is
    :class:`pdmux_cli.workflows.capacity.CapacityRequest`'s.

    Returns :class:`pdmux_cli.workflows.capacity.CapacityOutcome` (``result``: the
    :class:`~pdmux_cli.simulate.capacity.CapacityResult`; ``to_dict()``: the ``--json``). Raises
    :class:`~pdmux_cli.util.errors.InputError` for bad input.
    """
    from pdmux_cli.workflows.capacity import capacity as run

    return run(request(CapacityRequest, {**locals(), **keywords}), check_progress(progress))


@api_function
def tune(
    trace: PathLike,
    *,
    slo_ttft: float,
    slo_itl: float,
    model: str = DEFAULT_MODEL,
    gpu: str | None = None,
    trace_format: str | None = None,
    qps: float | None = None,
    rate_scale: float | None = None,
    max_requests: int | None = None,
    duration: float | None = None,
    sm_group_nums: str | Sequence[int] | None = None,
    divisors: str | Sequence[int] | None = None,
    budgets: str | Sequence[int] | None = None,
    no_single_levels: bool = False,
    slo_margins: str | Sequence[float] | None = None,
    cost_model: str = "roofline",
    s_sat: float | None = None,
    bandwidth_efficiency: float | None = None,
    mfu: float | None = None,
    step_overhead_ms: float | None = None,
    calibration: PathLike | None = None,
    mem_fraction_static: float | None = None,
    max_prefill_tokens: int = MAX_PREFILL_TOKENS,
    kv_bytes: float | None = None,
    kv_cache_dtype: str | None = None,
    ignore_eos: bool = False,
    no_prefix_cache: bool = False,
    context_length: int | None = None,
    disable_cuda_graph: bool = False,
    workers: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    max_steps: int | None = None,
    tp: int = 1,
    dp: int | None = None,
    load_balance_method: str | None = None,
    output: PathLike | None = None,
    sglang: str = DEFAULT_REVISION,
    progress: ProgressFactory | None = None,
    **keywords: Unpack[ServerKeywords],
) -> TuneOutcome:
    """Search pdmux YAML knobs (sm_group_num, decode_bs_divisor or fixed splits, SLO levels, the token
    budget) for the best SLO attainment on ``trace`` (``pdmux tune``); ``slo_ttft``, ``slo_itl``: ms.
    Every option is :class:`pdmux_cli.workflows.tune.TuneRequest`'s.

    Returns :class:`pdmux_cli.workflows.tune.TuneOutcome` (``config``: the winning
    :class:`~pdmux_cli.sglang.pdmux_config.PdmuxConfig`, ``yaml``: its text; ``to_dict()``: the
    ``--json``); writes ``output`` when given. Raises :class:`~pdmux_cli.util.errors.InputError` for bad
    input (also for a model SGLang's pdmux cannot serve).
    """
    from pdmux_cli.workflows.tune import tune as run

    return run(request(TuneRequest, {**locals(), **keywords}), check_progress(progress))


@api_function
def calibrate(
    *,
    sglang_bench: Sequence[PathLike] = (),
    sglang_log: Sequence[PathLike] = (),
    bench_serving: Sequence[PathLike] = (),
    workers: int | None = None,
    model: str | None = None,
    gpu: str | None = None,
    tp: int = 1,
    kv_bytes: float | None = None,
    kv_cache_dtype: str | None = None,
    merge: Sequence[PathLike] = (),
    output: PathLike | None = None,
    max_replay_requests: int = DEFAULT_MAX_REPLAY_REQUESTS,
    max_points: int = DEFAULT_MAX_POINTS,
    max_log_lines: int = DEFAULT_MAX_LOG_LINES,
) -> CalibrateResult:
    """Fit the cost model's whole-GPU terms to SGLang one-batch results (``sglang_bench``) and server logs
    (``sglang_log``), its serving terms to bench_serving runs (``bench_serving``), or ``merge`` a
    ``pdmux bench`` and a ``pdmux calibrate`` file (``pdmux calibrate``). Every option is
    :class:`pdmux_cli.workflows.calibrate.CalibrateRequest`'s; ``max_replay_requests`` (requests replayed
    over all bench_serving runs), ``max_points`` (whole-GPU fit points) and ``max_log_lines`` (server-log
    lines read) bound the work the files may ask for (0: no limit).

    Returns :class:`pdmux_cli.workflows.calibrate.CalibrateResult` (``calibration``, ``yaml``; ``to_dict()``:
    the ``--json``); writes ``output`` when given. Raises :class:`~pdmux_cli.util.errors.InputError` for bad
    input (also a bench_serving run whose own figures disagree) and for files asking for more work than
    the bounds, before the work starts.
    """
    from pdmux_cli.workflows.calibrate import calibrate as run

    return run(request(CalibrateRequest, locals()))


@api_function
def accuracy(*, serving: bool = False, runs: bool = False, workers: int | None = None) -> AccuracyResult:
    """How far the roofline cost model is from the shipped public measurements, per term (median, p90 and
    signed median error, fractions), or with ``serving`` whole simulated servers against public SGLang
    serving runs (``pdmux accuracy``).

    Returns :class:`pdmux_cli.workflows.accuracy.AccuracyResult` (``to_dict()``: the ``--json``; without
    ``serving``, ``speculative``: speculative decoding's speedup against public SGLang runs). Raises
    :class:`~pdmux_cli.util.errors.InputError` for ``runs`` or ``workers`` without ``serving``.
    """
    from pdmux_cli.workflows.accuracy import accuracy as run

    return run(request(AccuracyRequest, locals()))
