"""The planning commands as Python functions: :func:`splits`, :func:`estimate`, :func:`gen_config`,
:func:`check_config`.

Each takes the command's options as keywords, with the CLI's names (``--decode-bs`` is ``decode_bs``,
``--all`` is ``all_gpus``, ``--format`` is ``trace_format``) and defaults, and returns the workflow's
result (:mod:`pdmux_cli.workflows`): a dataclass whose ``to_dict()`` is exactly what the command's
``--json`` prints, ``"pdmux"`` provenance block included. List options take a sequence (``decode_bs=(1,
6, 12)``) or the CLI's text (``"1,6,12"``). Bad input raises :class:`pdmux_cli.util.errors.InputError` (also
``pdmux.InputError``) with the one line the CLI would print; nothing is printed.

Units are the CLI's: SMs, tokens, ms (``*_ms``), bytes, GB/s, us, requests/s.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pdmux_cli.catalog.model import DEFAULT_MODEL
from pdmux_cli.sglang.revisions import DEFAULT_REVISION
from pdmux_cli.workflows.check_config import CheckConfigRequest
from pdmux_cli.workflows.estimate import EstimateKeywords, EstimateRequest
from pdmux_cli.workflows.gen_config import GenConfigRequest
from pdmux_cli.workflows.splits import SplitsRequest

from ._calls import Unpack, api_function, request

if TYPE_CHECKING:
    from pdmux_cli.workflows.check_config import CheckConfigResult
    from pdmux_cli.workflows.estimate import EstimateResult
    from pdmux_cli.workflows.gen_config import GenConfigResult
    from pdmux_cli.workflows.splits import AllGpusSplits, SplitsResult

__all__ = ["check_config", "estimate", "gen_config", "splits"]


@api_function
def splits(
    *,
    gpu: str | None = None,
    sms: int | None = None,
    cc: str | None = None,
    all_gpus: bool = False,
    decode_bs: Sequence[int] | str = (1, 6, 12, 18, 24, 30, 36, 64),
    prompt_tokens: Sequence[int] | str = (512, 8192, 32768, 131072),
    model: str = DEFAULT_MODEL,
    sm_group_num: int | None = None,
    decode_bs_divisor: int | None = None,
    token_budget: int | None = None,
    config: str | Path | None = None,
    tp: int = 1,
) -> SplitsResult | AllGpusSplits:
    """The SM split levels (stream groups) SGLang 0.5.23 builds, the level it picks per decode batch, and the
    prefill's layers per round (``pdmux splits``).

    Args:
        gpu: GPU alias (``"h100"``), reported name or profile file; default h100. Or ``sms`` (SMs) with ``cc``
            (compute capability, ``"9.0"``) for any device.
        all_gpus: every GPU profile's levels instead (returns
        :class:`~pdmux_cli.workflows.splits.AllGpusSplits`).
        decode_bs: decode batch sizes (requests) to choose a level for.
        prompt_tokens: prompt lengths (tokens) whose layers per round and rounds to give.
        model: model profile name or config.json path (its layer count).
        sm_group_num, decode_bs_divisor, token_budget: SGLang's knobs (``None``: ``config``'s, else 8, 36,
            65536 tokens).
        config: an existing pdmux YAML whose levels, thresholds and knobs are used.
        tp: tensor parallelism, 1-8 (every GPU builds the same groups; the model's heads must split).

    Returns:
        :class:`~pdmux_cli.workflows.splits.SplitsResult`: ``groups`` (prefill/decode SMs per group),
        ``choices`` ``(decode_bs, group, older_sglang_crashes)``, ``layers`` ``(prompt_tokens,
        layers_per_round, rounds)``, ``notes``; ``to_dict()`` is ``pdmux splits --json``.

    Raises:
        pdmux_cli.util.errors.InputError: an unknown GPU or model, conflicting options, a knob <= 0 or past
        SGLang's
            limit, sizes out of range, a pdmux YAML SGLang refuses, a ``tp`` the model does not split into.
    """
    from pdmux_cli.workflows.splits import splits as run

    return run(
        SplitsRequest(
            gpu=gpu,
            sms=sms,
            cc=cc,
            all_gpus=all_gpus,
            decode_bs=decode_bs,
            prompt_tokens=prompt_tokens,
            model=model,
            sm_group_num=sm_group_num,
            decode_bs_divisor=decode_bs_divisor,
            token_budget=token_budget,
            config=config,
            tp=tp,
        )
    )


@api_function
def estimate(
    *,
    model: str = DEFAULT_MODEL,
    gpu: str | None = None,
    decode_bs: int = 32,
    context: int = 2048,
    prompt_tokens: int = 8192,
    chunk_sizes: Sequence[int] | str | None = None,
    mixed_chunk_sizes: Sequence[int] | str = (2048, 512),
    cost_model: str = "roofline",
    s_sat: Sequence[float] | str | None = None,
    bandwidth_efficiency: float | None = None,
    mfu: float | None = None,
    step_overhead_ms: float | None = None,
    context_length: int | None = None,
    disable_cuda_graph: bool = False,
    weight_bytes: float | None = None,
    kv_bytes: float | None = None,
    kv_cache_dtype: str | None = None,
    level: tuple[int, int] | str | None = "auto",
    all_levels: bool = False,
    sm_group_num: int | None = None,
    decode_bs_divisor: int | None = None,
    token_budget: int | None = None,
    config: str | Path | None = None,
    flops_dtype: str | None = None,
    moe_runner_backend: str | None = None,
    calibration: str | Path | None = None,
    tp: int = 1,
    disagg: str | None = None,
    kv_link: str = "auto",
    kv_link_gb_s: float | None = None,
    kv_link_latency_us: float | None = None,
    disagg_tp: int | None = None,
    plot: str | Path | None = None,
    sglang: str = DEFAULT_REVISION,
    **keywords: Unpack[EstimateKeywords],
) -> EstimateResult:
    """ITL, prefill time and tokens gained for prefill-first, chunked, mixed-chunk prefill and PD multiplexing
    (and PD disaggregation with ``disagg``) in one scenario (``pdmux estimate``).

    The defaults are the chapter's scenario: Qwen3-8B on an H100 SXM decoding 32 requests at 2048 tokens of
    context when an 8192-token prompt arrives.

    Args:
        model: model profile name or config.json path. gpu: GPU alias, reported name or profile file (h100).
        decode_bs: requests decoding; context: KV-cache tokens of each; prompt_tokens: the prompt's tokens.
        chunk_sizes: SGLang's default chunked prefill's chunk sizes (tokens; ``None``: SGLang's default for
        the
            GPU; ``()``: no row). mixed_chunk_sizes: ``--enable-mixed-chunk``'s (tokens; ``()``: none).
        cost_model: ``"roofline"`` (fitted to measurements) or ``"chapter"`` (the chapter's model).
        s_sat: SMs reaching 95% of HBM bandwidth, one PD-mux row each (default: the roofline's fit).
        bandwidth_efficiency, mfu: the chapter model's fractions (0.85, 0.5).
        step_overhead_ms: the roofline model's CPU time per step (ms); its other serving terms (ms) are
            :class:`~pdmux_cli.workflows.estimate.EstimateServingTerms`' keys (EstimateRequest's fields).
        context_length: SGLang's ``--context-length``, tokens: the longest request the server takes
            (``None``: the model's max_position_embeddings); a prompt or decode context past it is refused.
        weight_bytes: bytes per weight; kv_bytes: bytes per KV element, or kv_cache_dtype (SGLang's).
        level: ``"auto"`` (SGLang's pick), ``"P/D"`` or ``(P, D)`` prefill/decode SMs.
        all_levels: also every level's ITL and prefill time (``result.estimate.levels``).
        sm_group_num, decode_bs_divisor, token_budget: SGLang's knobs; config: a pdmux YAML with them.
        flops_dtype: ``"bf16"``, ``"fp16"`` or ``"fp8"``. moe_runner_backend: SGLang's
            ``--moe-runner-backend`` (``"auto"``, ``"triton"``, ``"flashinfer_trtllm"``; ``None``: auto).
            calibration: a calibration.yaml (``pdmux bench`` / ``pdmux calibrate``). tp: tensor parallelism
            (1-8).
        disagg: ``"XPYD"`` (``"1P1D"``) for a PD-disaggregation row, over kv_link (``auto``, ``nvlink``,
            ``pcie``, ``rdma``; kv_link_gb_s GB/s and kv_link_latency_us us override it), instances of
            disagg_tp GPUs (default ``tp``).
        plot: a ``.png`` to write (ITL against prefill time at every level; needs matplotlib).
        sglang: the SGLang revision whose rules apply (``"0.5.23"``, ``"standard@b875545"``, ...).

    Returns:
        :class:`~pdmux_cli.workflows.estimate.EstimateResult`: ``rows`` per policy (``itl_ms``,
        ``prefill_ms``, ``tokens_during_prefill``, SMs), ``estimate`` (the whole
        :class:`pdmux_cli.planning.estimate.Estimate`: level, memory in bytes, levels), ``notes``;
        ``to_dict()`` is
        ``pdmux estimate --json``.

    Raises:
        pdmux_cli.util.errors.InputError: an unknown GPU, model, revision or cost model, knobs the cost model
        does
            not take, sizes out of range, a prompt past the (server's) context length, a pdmux YAML SGLang
            refuses, a calibration of another GPU, a ``plot`` path that is not a writable ``.png``.
    """
    from pdmux_cli.workflows.estimate import estimate as run

    return run(request(EstimateRequest, {**locals(), **keywords}))


@api_function
def gen_config(
    *,
    gpu: str | None = None,
    sms: int | None = None,
    cc: str | None = None,
    sm_group_num: int = 8,
    decode_bs_divisor: int = 36,
    token_budget: int = 65536,
    divisions: str | None = None,
    manual: bool = False,
    output: str | Path | None = None,
    tune: bool = False,
    trace: str | Path | None = None,
    slo_ttft: float | None = None,
    slo_itl: float | None = None,
    context: int | None = None,
    max_requests: int | None = None,
    trace_format: str | None = None,
    qps: float | None = None,
    rate_scale: float | None = None,
    duration: float | None = None,
    workers: int | None = None,
    dp: int | None = None,
    calibration: str | Path | None = None,
    cost_model: str = "roofline",
    step_overhead_ms: float | None = None,
    per_request_overhead_ms: float | None = None,
    max_running_requests: int | None = None,
    model: str = DEFAULT_MODEL,
    tp: int = 1,
    sglang: str = DEFAULT_REVISION,
    speculative_algorithm: str | None = None,
    speculative_draft_model_path: str | Path | None = None,
) -> GenConfigResult:
    """SGLang's pdmux YAML for a GPU, validated by SGLang 0.5.23's rules, plus the launch flags
    (``pdmux gen-config``).

    Args:
        gpu: GPU alias, reported name or profile file (h100); or ``sms`` with ``cc`` (``"9.0"``).
        sm_group_num, decode_bs_divisor, token_budget: SGLang's knobs (8, 36, 65536 tokens).
        divisions: manual levels ``"PREFILL:DECODE:THRESHOLD,..."``; manual: write SGLang's automatic levels
            as manual_divisions (always on Blackwell).
        output: write the YAML there (whole or not at all; never over an input); ``None``: not written.
        tune: pick the knobs by simulating ``trace`` (Azure CSV, Mooncake JSONL, BurstGPT CSV) against
            ``slo_ttft`` and ``slo_itl`` (ms), shaped by trace_format, qps (requests/s), rate_scale, duration
            (s), max_requests, on ``workers`` processes (takes minutes on a long trace).
        slo_itl: without ``tune``, SLO levels for this ITL target (ms) at ``context`` tokens (or ``trace``'s
            distribution), from cost_model with step_overhead_ms, per_request_overhead_ms,
            max_running_requests.
        dp: refused unless 1 (``pdmux tune --dp N`` tunes replicas). calibration: a calibration.yaml.
        model: the model served (its heads must split over ``tp``). sglang: the SGLang revision.
        speculative_algorithm, speculative_draft_model_path: speculative decoding beside pdmux (refused where
            the revision cannot run the pair; the launch flags gain it).

    Returns:
        :class:`~pdmux_cli.workflows.gen_config.GenConfigResult`: ``yaml`` (the text), ``config``,
        ``launch_flags``, ``launch_command``, ``sglang_notes``; ``to_dict()`` is ``pdmux gen-config --json``.

    Raises:
        pdmux_cli.util.errors.InputError: options that do not go together, knobs <= 0 or past SGLang's limit,
        an
            unknown GPU, model or revision, an output path that is not writable or is an input, a config
            SGLang
            0.5.23 refuses, and the tune's or SLO levels' refusals.
    """
    from pdmux_cli.workflows.gen_config import gen_config as run

    return run(
        GenConfigRequest(
            gpu=gpu,
            sms=sms,
            cc=cc,
            sm_group_num=sm_group_num,
            decode_bs_divisor=decode_bs_divisor,
            token_budget=token_budget,
            divisions=divisions,
            manual=manual,
            output=output,
            tune=tune,
            trace=trace,
            slo_ttft=slo_ttft,
            slo_itl=slo_itl,
            context=context,
            max_requests=max_requests,
            trace_format=trace_format,
            qps=qps,
            rate_scale=rate_scale,
            duration=duration,
            workers=workers,
            dp=dp,
            calibration=calibration,
            cost_model=cost_model,
            step_overhead_ms=step_overhead_ms,
            per_request_overhead_ms=per_request_overhead_ms,
            max_running_requests=max_running_requests,
            model=model,
            tp=tp,
            sglang=sglang,
            speculative_algorithm=speculative_algorithm,
            speculative_draft_model_path=speculative_draft_model_path,
        )
    )


@api_function
def check_config(
    path: str | Path,
    *,
    gpu: str | None = None,
    sms: int | None = None,
    cc: str | None = None,
    sm_group_num: int | None = None,
    model: str | None = None,
    sglang: str = DEFAULT_REVISION,
    speculative_algorithm: str | None = None,
    speculative_draft_model_path: str | Path | None = None,
) -> CheckConfigResult:
    """A pdmux YAML judged by each SGLang revision pdmux has read (``pdmux check-config``).

    Args:
        path: the pdmux YAML. gpu: GPU alias, reported name or profile file (h100); or ``sms`` with ``cc``.
        sm_group_num: the ``--sm-group-num`` the server is launched with (must equal the YAML's).
        model: the model served: ``support_line`` says where the revision cannot multiplex it.
        sglang: the revision whose verdict decides ``ok``. speculative_algorithm,
            speculative_draft_model_path: the server's speculative decoding (``speculation_line`` says where
            the revision cannot run it beside pdmux; ``ok`` is then false).

    Returns:
        :class:`~pdmux_cli.workflows.check_config.CheckConfigResult`: ``ok`` (the CLI's exit code 0 or 2),
        ``problems`` (``where``, ``rule``, ``message``), ``revisions`` (each one's verdict); ``to_dict()`` is
        ``pdmux check-config --json``. A file with problems is returned with ``ok`` false, not raised; so
        is one under a revision whose loader pdmux has not read (``judged`` false: the CLI exits 1).

    Raises:
        pdmux_cli.util.errors.InputError: a file that cannot be read as YAML, an unknown GPU, model or
            revision.
    """
    from pdmux_cli.workflows.check_config import check_config as run

    return run(
        CheckConfigRequest(
            path=path, gpu=gpu, sms=sms, cc=cc, sm_group_num=sm_group_num, model=model, sglang=sglang,
            speculative_algorithm=speculative_algorithm,
            speculative_draft_model_path=speculative_draft_model_path,
        )
    )
