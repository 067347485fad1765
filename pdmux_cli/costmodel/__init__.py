"""The cost model: how long a decode step, a prefill and a mixed step take on ``s`` of a GPU's SMs.

Two models behind one interface (:class:`StepModel`), chosen with ``--cost-model``:

- ``roofline`` (default, :mod:`.roofline`): a step is the sum of its operators (:mod:`.operators`),
  each ``latency + max(bytes / achievable B/s, FLOPs / achievable FLOP/s)`` with efficiencies fitted to
  public measurements (:mod:`.efficiency`, ``profiles/efficiency/``), smooth bandwidth-vs-SMs and
  co-run interference (:mod:`.partitions`), and the serving engine's CPU time per step;
- ``chapter`` (:mod:`.chapter`): the chapter's illustrative model, kept exact.

:mod:`.fit` fits the efficiencies; :mod:`.accuracy` reports how far the shipped model is from the
measurements (``pdmux accuracy``). Everything here is pure except the profile loaders.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..util.errors import Finding, InputError
from .efficiency import CpuProfile, ServingProfile
from .options import CostModelOptions

#: ``--cost-model`` choices; the first is the default.
COST_MODELS = ("roofline", "chapter")

#: The chapter's analytic defaults (pd-multiplexing-chapter.txt): fraction of datasheet bandwidth
#: decode reaches, and prefill's fraction of dense FLOP/s.
CHAPTER_BANDWIDTH_EFFICIENCY = 0.85
CHAPTER_MFU = 0.5


class StepModel(Protocol):
    """What the estimate and the simulator ask of a cost model. Seconds; SMs; tokens.

    ``name``: ``"roofline"`` or ``"chapter"``. ``source``: one line for output. ``total_sms``: the
    GPU's SMs. ``cpu``: the engine's CPU costs. ``serving``: the request path's delays outside the
    scheduler (admission, the stream back to the client). ``s_sat``: SMs reaching 95% of full bandwidth
    (``None`` or NaN where a calibration's curve stands instead). ``notes``: caveats for output.
    How the estimate's policy rows read the model: ``default_chunked_row`` (a chunked row at SGLang's
    default chunked_prefill_size when no size is asked), ``mixed_chunk_charges_decode_rows`` (a mixed batch's
    chunk is shared with its decode rows, one token each, as SGLang's ``PrefillAdder`` does; else a whole
    chunk of prompt sits beside them), ``notes_short_prefill`` (say when a whole prefill takes less than one
    read of the weights, a sign the model's throughput guesses are off).
    What the commands ask of the model before or after it is built (class attributes, reachable from the
    ``--cost-model`` name: :func:`model_class`): ``models_cpu_time`` (the engine's CPU time is costed, so
    ``--disable-cuda-graph``'s eager launches change a step), ``guesses_s_sat`` (its S_SAT is a guess, so the
    estimate shows a PD-mux row at each of several), ``verifies_drafts`` (speculative decoding's verify pass
    is costed), ``has_error_interval`` (its whole-server figures carry an 80% interval from a measured
    out-of-sample error, :mod:`pdmux_cli.costmodel.uncertainty`).
    """

    name: str
    default_chunked_row: bool
    mixed_chunk_charges_decode_rows: bool
    notes_short_prefill: bool
    models_cpu_time: bool
    guesses_s_sat: bool
    verifies_drafts: bool
    has_error_interval: bool
    total_sms: int
    cpu: CpuProfile
    serving: ServingProfile
    notes: list[str]

    @property
    def source(self) -> str: ...

    def source_text(self, s_sat: bool = True) -> str:
        """:attr:`source`, without the S_SAT when ``s_sat`` is false."""
        ...

    def decode_s(self, sms: int, n: int, sum_context: float, sum_window: float = 0.0, corun_sms: int = 0,
                 cuda_graph: bool = True) -> float:
        """GPU time of a decode step of ``n`` requests (contexts summing to ``sum_context``) on ``sms``
        SMs, next to a prefill on ``corun_sms`` other SMs when > 0."""
        ...

    def prefill_s(self, sms: int, seqs: Sequence[tuple[int, int]], corun_sms: int = 0) -> float:
        """GPU time to prefill ``(new, cached)`` sequences as one batch on ``sms`` SMs."""
        ...

    def mixed_s(self, seqs: Sequence[tuple[int, int]], n: int, sum_context: float,
                sum_window: float = 0.0) -> float:
        """GPU time of one batch mixing prefill chunks and ``n`` decode rows on the whole GPU."""
        ...

    def decode_cpu_s(self, n: int) -> float:
        """CPU time of one scheduler step with ``n`` requests."""
        ...

    def request_s(self, n: int) -> float:
        """A server step's time for ``n`` requests beyond the kernels, on its critical path."""
        ...

    def launch_cpu_s(self) -> float:
        """CPU time to launch one step's kernels without a CUDA graph."""
        ...

    def prefill_launch_s(self, layers: float | None = None, graphed: bool = False) -> float:
        """Host time to launch a prefill (or mixed) forward over ``layers`` layers (``None``: all), eagerly
        or (``graphed``) replayed from SGLang's prefill CUDA graph."""
        ...

    def bandwidth_share(self, sms: int) -> float:
        """Share of whole-GPU bandwidth on ``sms`` SMs."""
        ...

    def corun_bandwidth_factor(self, prefill_sms: int, decode_sms: int) -> float: ...

    def corun_flops_factor(self, prefill_sms: int, decode_sms: int) -> float: ...


def model_class(cost_model: str) -> Any:
    """The step model class of ``--cost-model`` ``cost_model`` (one of :data:`COST_MODELS`, as given),
    whose class attributes answer what a command asks of the model before it is built
    (:class:`StepModel`: ``models_cpu_time``, ``guesses_s_sat``, ``verifies_drafts``,
    ``has_error_interval``); ``None`` for a name that is none (:func:`build_step_model` refuses it)."""
    if cost_model == "roofline":
        from .roofline import RooflineModel

        return RooflineModel
    if cost_model == "chapter":
        from .chapter import ChapterModel

        return ChapterModel
    return None


def pick_flops_dtype(gpu: Any, model: Any, requested: str | None) -> str:
    """The dense-math dtype prefill runs in: ``requested``, else fp8 for fp8-weight models on GPUs
    with fp8 tensor cores (DeepSeek-V3 ships fp8), else bf16 (fp16 on GPUs without bf16)."""
    if requested:
        return requested
    if model.weight_dtype == "fp8" and gpu.fp8_dense_flops:
        return "fp8"
    return "bf16" if gpu.bf16_dense_flops else "fp16"


def linear_gemm_kind(model: Any, flops_dtype: str) -> str:
    """Which GEMM efficiencies the model's linear layers take with ``flops_dtype`` math (the
    :func:`pick_flops_dtype` result): ``"fp8_block"`` for an fp8 checkpoint with
    ``quantization_config.weight_block_size`` (SGLang's w8a8 block fp8 GEMMs), ``"fp8"`` for other fp8
    math (per-tensor scales; also ``--flops-dtype fp8`` on a 16-bit checkpoint, as SGLang's
    ``--quantization fp8``), else ``"bf16"``."""
    if flops_dtype != "fp8":
        return "bf16"
    return "fp8_block" if model.weight_dtype == "fp8" and getattr(model, "weight_block_size", ()) else "fp8"


def build_step_model(
    gpu: Any,
    model: Any,
    options: CostModelOptions | None = None,
    *,
    calibration: Any = None,
    weight_bytes_per_param: float | None = None,
    kv_bytes_per_element: float = 2.0,
    tp: int = 1,
    speculation: Any = None,
    release: Any = None,
    **knobs: Any,
) -> StepModel:
    """The :class:`StepModel` for a GPU profile (:class:`pdmux_cli.catalog.hardware.Gpu`) and a model.

    ``options``: the cost model's knobs (:class:`~pdmux_cli.costmodel.options.CostModelOptions`: which model,
    S_SAT, the math's dtype, the chapter's efficiencies, the roofline's serving terms in ms; ``None`` for its
    defaults); ``knobs``: the same knobs as keywords (``step_overhead_ms=0``), on top of ``options``.
    ``calibration``: a :class:`pdmux_cli.costmodel.calibration_file.Calibration` (``--calibration FILE``): its
    SM-partition terms (``pdmux bench``) replace the chapter's throughput or the roofline's partition curves;
    its whole-GPU terms (``pdmux calibrate``) replace the roofline's fitted efficiencies; its serving terms
    (``pdmux calibrate --bench-serving``) replace ``serving.yaml``'s, under the knobs given.
    ``weight_bytes_per_param`` (``None``: the model's dtype) and ``kv_bytes_per_element``: bytes. ``tp``: GPUs
    the model is sharded over (roofline only): the step times are one rank's, collectives included
    (:mod:`.collectives`). ``speculation``: a :class:`.speculative.Speculation` (SGLang's
    ``--speculative-algorithm`` and its settings): the decode step becomes a speculative round of the target
    and its draft, each built with these same arguments (:class:`.speculative.SpeculativeStepModel`).
    ``release``: the SGLang release's rules (:class:`pdmux_cli.sglang.release_defaults.ReleaseDefaults`;
    ``None``: 0.5.23's): which fused-MoE runner it picks (:func:`.moe.moe_kernel`).
    Raises :class:`InputError` for an unknown cost model, knobs the chosen model does not take, or a
    GPU without SM count, bandwidth, FLOP/s or (``tp > 1``) interconnect figures, and a split SGLang
    refuses; :class:`TypeError` for a keyword that is no knob.
    """
    options = (options or CostModelOptions()).with_knobs(knobs, "build_step_model")
    cost_model = options.cost_model
    if speculation is not None:
        # the target and its draft on the same GPU with the same terms
        same = {"calibration": calibration, "weight_bytes_per_param": weight_bytes_per_param,
                "kv_bytes_per_element": kv_bytes_per_element, "tp": tp, "release": release}
        chosen = model_class(str(cost_model).strip().lower())  # the one check, for every command and the API
        if chosen is not None and not chosen.verifies_drafts:
            raise InputError("{flag.speculative_algorithm} needs {flag.cost_model} roofline: the chapter's "
                             "model has no verify pass", param="cost_model", values={})
        from .speculative import SpeculativeStepModel

        return SpeculativeStepModel(build_step_model(gpu, model, options, **same),
                                    build_step_model(gpu, speculation.draft, options, **same), speculation)
    if cost_model not in COST_MODELS:
        raise InputError("{flag.cost_model} must be one of {models}, got {value!r}", param="cost_model",
                         values={"models": ", ".join(COST_MODELS), "value": cost_model})
    total = gpu.require_sm_count()
    if not gpu.hbm_bytes_per_s:
        raise InputError(
            "{gpu} has no memory bandwidth figure: the cost model needs one (use another {flag.gpu})",
            param="gpu",
            values={"gpu": gpu.name},
        )
    math_dtype = pick_flops_dtype(gpu, model, options.flops_dtype)
    dense = gpu.dense_flops(math_dtype)
    if cost_model == "chapter":
        return _chapter_model(gpu, model, options, calibration, weight_bytes_per_param, kv_bytes_per_element,
                              tp, dense)
    for param in options.given_outside("roofline"):
        raise InputError(
            "{param_flag} is a knob of {flag.cost_model} chapter; the roofline model's efficiencies "
            "are fitted to measurements (profiles/efficiency/), and {flag.calibration} replaces "
            "them",
            param=param,
            values={},
        )
    from .efficiency import for_kv_cache, for_linear_gemms, profile_for
    from .roofline import RooflineModel

    profile, note = profile_for(getattr(gpu, "key", ""), tuple(gpu.compute_capability))
    partitions, cpu, serving = _cpu_and_serving(options, calibration)
    notes = [note] if note else []
    if profile.note:
        notes.append(profile.note)
    profile, gemm_note = for_linear_gemms(profile, linear_gemm_kind(model, math_dtype))
    if gemm_note:
        notes.append(gemm_note)
    profile, kv_note = for_kv_cache(profile, kv_bytes_per_element == 1.0)  # 1 byte per element: an fp8 cache
    if kv_note:
        notes.append(kv_note)
    profile, moe_flops, moe_runner = _with_moe(profile, gpu, model, weight_bytes_per_param, notes,
                                               getattr(release, "qwen3_moe_bf16_trtllm", True),
                                               options.moe_runner_backend)
    if model.weight_dtype == "fp8" and math_dtype != "fp8" and weight_bytes_per_param is None:
        notes.append(Finding("costmodel.fp8_weights_marlin", {"math_dtype": math_dtype, "gpu": gpu.name},
                             "flops_dtype"))
    # attention, the lm_head and the router compute in 16 bits whatever the linear layers do
    attention_dense = dense if math_dtype != "fp8" else gpu.dense_flops(
        "bf16" if gpu.bf16_dense_flops else "fp16")
    profile, notes, curves = _with_calibration(profile, notes, calibration, gpu, model)
    collectives = None
    if tp != 1:
        from ..multigpu.tensor_parallel import check_tp_value
        from .collectives import tp_collectives

        collectives = tp_collectives(gpu, check_tp_value(tp))
    return RooflineModel(
        model, gpu_name=gpu.name, tp=tp, collectives=collectives, total_sms=total,
        hbm_bytes_per_s=gpu.hbm_bytes_per_s, dense_flops=attention_dense, gemm_flops=dense,
        efficiency=profile, partitions=partitions, cpu=cpu, s_sat=options.s_sat,
        weight_bytes_per_param=weight_bytes_per_param, kv_bytes_per_element=kv_bytes_per_element,
        calibration=curves, serving=serving, moe_flops=moe_flops, notes=notes,
        decode_fixed_s=calibration.whole_gpu.decode_fixed_s
        if calibration is not None and calibration.whole_gpu is not None else 0.0,
        compute_capability=tuple(gpu.compute_capability) if getattr(gpu, "compute_capability", None)
        else None, moe_runner=moe_runner,
    )


def _with_calibration(profile: Any, notes: list[Any], calibration: Any, gpu: Any,
                      model: Any) -> tuple[Any, list[Any], Any]:
    """``(profile, notes, curves)`` with a calibration's terms (``None``: as given, no curves): its
    SM-partition curves (``pdmux bench``; else its device checked against ``gpu``), its whole-GPU efficiencies
    in ``profile`` (``pdmux calibrate``; the notes on borrowed efficiencies dropped, one added where it was
    measured on another model)."""
    if calibration is None:
        return profile, notes, None
    curves = None
    if calibration.has_partitions:
        curves = calibration.throughput(gpu)
        notes.extend(curves.notes)
    else:
        calibration.check_device(gpu)
    if calibration.whole_gpu is not None:
        profile = apply_whole_gpu(profile, calibration.whole_gpu)
        # the calibration replaces the efficiencies those notes are about
        notes = [n for n in notes if getattr(n, "code", "") not in REPLACED_BY_WHOLE_GPU_TERMS]
        if calibration.whole_gpu.model != getattr(model, "name", ""):
            notes.append(
                Finding(
                    "costmodel.whole_gpu_other_model",
                    {
                        "calibrated_on": calibration.whole_gpu.model,
                        "model": getattr(model, "name", "this model"),
                    },
                    "calibration",
                )
            )
    return profile, notes, curves


def _chapter_model(gpu: Any, model: Any, options: CostModelOptions, calibration: Any,
                   weight_bytes_per_param: float | None, kv_bytes_per_element: float, tp: int,
                   dense: float) -> StepModel:
    """:func:`build_step_model`'s chapter model: a calibration's SM-partition curves, else the chapter's
    analytic throughput with ``options``' efficiencies and S_SAT (``dense``: the GPU's dense FLOP/s of the
    math's dtype). Raises :class:`InputError` for ``tp`` > 1 and for the roofline's knobs."""
    total = gpu.require_sm_count()
    if tp != 1:
        raise InputError(
            "{flag.tp} needs {flag.cost_model} roofline: the chapter's model is one GPU's and has no "
            "collectives",
            param="tp",
            values={},
        )
    for param in options.given_outside("chapter"):
        raise InputError(
            "{param_flag} applies to {flag.cost_model} roofline (the chapter's model has no CPU "
            "time, no serving delays and no fused MoE)",
            param=param,
            values={},
        )
    from .chapter import AnalyticThroughput, ChapterModel

    chapter_notes: tuple[str, ...] = ()
    if calibration is not None:
        throughput = calibration.throughput(gpu)
        chapter_notes = throughput.notes
    else:
        s_sat = options.s_sat
        throughput = AnalyticThroughput(
            total, gpu.hbm_bytes_per_s, dense,
            CHAPTER_BANDWIDTH_EFFICIENCY if options.bandwidth_efficiency is None
            else options.bandwidth_efficiency,
            CHAPTER_MFU if options.mfu is None else options.mfu,
            float(s_sat if s_sat is not None else total / 2),
        )
    chapter = ChapterModel(model, throughput, total, weight_bytes_per_param, kv_bytes_per_element)
    chapter.notes.extend(chapter_notes)
    return chapter


def _cpu_and_serving(options: CostModelOptions, calibration: Any) -> tuple[Any, CpuProfile, ServingProfile]:
    """The roofline model's partition terms, CPU and serving terms: ``common.yaml``'s and ``serving.yaml``'s,
    a calibration's serving terms in their place, then ``options``' knobs (ms) over them. Raises
    :class:`InputError` (naming the knob) for a value out of its bounds."""
    from .efficiency import load_common, load_serving

    partitions, cpu = load_common()
    serving = load_serving()[1]
    if calibration is not None and calibration.serving is not None:  # the user's own server's terms
        cpu, serving = calibrated_serving(cpu, serving, calibration.serving)
    cpu, serving = serving_terms(cpu, serving, step_overhead_ms=options.step_overhead_ms,
                                 per_request_overhead_ms=options.per_request_overhead_ms,
                                 admission_delay_ms=options.admission_delay_ms,
                                 first_token_delay_ms=options.first_token_delay_ms,
                                 admission_interval_ms=options.admission_interval_ms)
    frontend_token_ms = options.frontend_token_ms
    if frontend_token_ms is not None:  # ms per prompt token (serving.yaml's is measured)
        if not (isinstance(frontend_token_ms, (int, float)) and 0 <= frontend_token_ms <= 1):
            raise InputError("{param_flag} must be from 0 to 1 ms a token, got {value}",
                             param="frontend_token_ms",
                             values={"value": frontend_token_ms})
        from dataclasses import replace as _replace

        serving = _replace(serving, frontend_token_s=frontend_token_ms / 1e3)
    if options.eager_launch_moe_ms is not None:
        cpu = with_eager_launch(cpu, options.eager_launch_moe_ms, "eager_launch_moe_ms")
    if options.eager_launch_ms is not None:
        cpu = with_eager_launch(cpu, options.eager_launch_ms)
    return partitions, cpu, serving


def _with_moe(profile: Any, gpu: Any, model: Any, weight_bytes_per_param: float | None,
              notes: list[Any], qwen3_bf16_trtllm: bool = True,
              runner: str | None = None) -> tuple[Any, float | None, str | None]:
    """``(profile, FLOP/s, kernel)``: ``profile`` with the fused-MoE efficiency of the kernel SGLang runs for
    ``model``'s routed experts on ``gpu`` (:mod:`.moe`; ``qwen3_bf16_trtllm`` and ``runner``,
    ``--moe-runner-backend``: :func:`.moe.moe_kernel`'s), the dense FLOP/s of its math (``None`` when none
    applies) and the kernel's name (``None`` for a dense model); a note is appended when the kernel was not
    measured there."""
    from .moe import for_moe, moe_flops_per_s, moe_kernel

    kind = moe_kernel(model, tuple(gpu.compute_capability), weight_bytes_per_param,
                      qwen3_bf16_trtllm=qwen3_bf16_trtllm, runner=runner)
    profile, note = for_moe(profile, kind)
    if note:
        notes.append(note)
    flops = moe_flops_per_s(gpu, kind) if profile.moe_routed is not None else None
    return profile, flops, kind[0] if kind else None


#: The notes on whose efficiencies stand in for a GPU's own (:func:`.efficiency.profile_for`): a calibration's
#: whole-GPU terms replace those efficiencies, so the notes go.
REPLACED_BY_WHOLE_GPU_TERMS = frozenset({"costmodel.efficiency.same_chip", "costmodel.efficiency.same_family",
                                         "costmodel.efficiency.guess"})

#: The serving terms' options: the parameter (:func:`serving_terms`' keyword; the CLI's flag is
#: :func:`pdmux_cli.messages.flag` of it), the bound in ms.
SERVING_OPTION_BOUNDS_MS = {"step_overhead_ms": 1000.0, "per_request_overhead_ms": 10.0,
                            "admission_delay_ms": 10_000.0, "first_token_delay_ms": 10_000.0,
                            "admission_interval_ms": 1000.0}


def serving_terms(cpu: CpuProfile, serving: ServingProfile, *, step_overhead_ms: float | None = None,
                  per_request_overhead_ms: float | None = None, admission_delay_ms: float | None = None,
                  first_token_delay_ms: float | None = None,
                  admission_interval_ms: float | None = None) -> tuple[CpuProfile, ServingProfile]:
    """``cpu`` and ``serving`` with the given overrides (ms; ``None`` keeps the profile's), each named in
    the source (as data: ``costmodel.step_overhead``, ``costmodel.per_request_overhead`` with the profile's
    source as ``base``, ``costmodel.serving_options`` with ``base`` and the ``given`` ones by parameter).
    ``step_overhead_ms`` 0 means kernels only: no CPU time and no per-request time per step, unless
    ``per_request_overhead_ms`` is given too. Raises :class:`InputError` for a value outside ``0..``
    :data:`SERVING_OPTION_BOUNDS_MS` (naming the parameter)."""
    from dataclasses import replace

    given = {"step_overhead_ms": step_overhead_ms, "per_request_overhead_ms": per_request_overhead_ms,
             "admission_delay_ms": admission_delay_ms, "first_token_delay_ms": first_token_delay_ms,
             "admission_interval_ms": admission_interval_ms}
    for name, value in given.items():
        high = SERVING_OPTION_BOUNDS_MS[name]
        if value is not None and not (isinstance(value, (int, float)) and 0 <= value <= high):
            raise InputError("{param_flag} must be from 0 to {high:g} ms, got {value}", param=name,
                             values={"high": high, "value": value})
    if step_overhead_ms is not None:
        kernels_only = step_overhead_ms == 0
        cpu = replace(cpu, step_s=step_overhead_ms / 1e3,
                      per_request_s=0.0 if kernels_only else cpu.per_request_s,
                      per_request_step_s=0.0 if kernels_only else cpu.per_request_step_s,
                      source=Finding("costmodel.step_overhead", {"step_overhead_ms": step_overhead_ms},
                                     "step_overhead_ms"))
    if per_request_overhead_ms is not None:
        cpu = replace(cpu, per_request_step_s=per_request_overhead_ms / 1e3,
                      source=Finding("costmodel.per_request_overhead",
                                     {"base": cpu.source, "per_request_overhead_ms": per_request_overhead_ms},
                                     "per_request_overhead_ms"))
    path = {"admission_delay_s": admission_delay_ms, "first_token_delay_s": first_token_delay_ms,
            "admission_interval_s": admission_interval_ms}
    if any(v is not None for v in path.values()):
        named = {name: value for name, value in given.items()
                 if value is not None and name in ("admission_delay_ms", "first_token_delay_ms",
                                                   "admission_interval_ms")}
        source = Finding("costmodel.serving_options", {"base": serving.source, "given": named})
        serving = replace(serving, **{k: v / 1e3 for k, v in path.items() if v is not None}, source=source)
    return cpu, serving


#: The largest host time per eagerly launched kernel ``eager_launch_ms`` takes, ms (a millisecond a launch
#: is a unit slip: PyTorch's dispatch takes microseconds).
EAGER_LAUNCH_BOUND_MS = 1.0


def knob_bound_ms(param: str) -> float:
    """The most a roofline serving knob ``param`` (a :class:`CostModelOptions` field, ms) takes, its least
    being 0: :data:`SERVING_OPTION_BOUNDS_MS`' or :data:`EAGER_LAUNCH_BOUND_MS` (the requests check it
    before any work: :data:`pdmux_cli.workflows.fields.GROUP_RANGES`). ``KeyError`` for a name with none."""
    if param in ("eager_launch_ms", "eager_launch_moe_ms"):
        return EAGER_LAUNCH_BOUND_MS
    return SERVING_OPTION_BOUNDS_MS[param]


def with_eager_launch(cpu: CpuProfile, eager_launch_ms: float, param: str = "eager_launch_ms") -> CpuProfile:
    """``cpu`` with the host time per eagerly launched kernel ``eager_launch_ms`` / 1000: dense and MoE
    models' (``param`` ``"eager_launch_ms"``), or the MoE one alone (``"eager_launch_moe_ms"``). Raises
    :class:`InputError` (that parameter) for a value outside 0..:data:`EAGER_LAUNCH_BOUND_MS`."""
    from dataclasses import replace

    if not (isinstance(eager_launch_ms, (int, float)) and not isinstance(eager_launch_ms, bool)
            and 0 <= eager_launch_ms <= EAGER_LAUNCH_BOUND_MS):
        raise InputError("{param_flag} must be from 0 to {high:g} ms, got {value}", param=param,
                         values={"high": EAGER_LAUNCH_BOUND_MS, "value": eager_launch_ms})
    if param == "eager_launch_moe_ms":
        return replace(cpu, eager_launch_moe_s=eager_launch_ms / 1e3)
    return replace(cpu, eager_launch_s=eager_launch_ms / 1e3, eager_launch_moe_s=eager_launch_ms / 1e3)


def calibrated_serving(cpu: CpuProfile, serving: ServingProfile, terms: Any) -> tuple[
    CpuProfile, ServingProfile]:
    """``cpu`` and ``serving`` with a calibration's serving terms
    (:class:`pdmux_cli.costmodel.calibration_file.ServingTerms`, fitted by ``pdmux calibrate
    --bench-serving``) in place of ``serving.yaml``'s."""
    from dataclasses import replace

    source = f"calibrated on {terms.runs} bench_serving run(s) ({terms.source})"
    cpu = replace(
        cpu, per_request_step_s=terms.per_request_step_s, source=f"{cpu.source}; per_request_step_s {source}"
    )
    serving = replace(
        serving,
        admission_delay_s=terms.admission_delay_s,
        first_token_delay_s=terms.first_token_delay_s,
        admission_interval_s=terms.admission_interval_s,
        source=source,
        calibrated=True,
        residuals=tuple(getattr(terms, "residuals", ())),
    )
    return cpu, serving


def apply_whole_gpu(profile: Any, terms: Any) -> Any:
    """``profile`` (:class:`~pdmux_cli.costmodel.efficiency.EfficiencyProfile`) with the efficiencies of a
    whole-GPU calibration (:class:`pdmux_cli.costmodel.calibration_file.WholeGpuTerms`) in place of the
    shipped ones; its key says so."""
    from dataclasses import replace

    return replace(
        profile,
        key=f"{profile.key}, calibrated on {terms.model}",
        gemm=replace(profile.gemm, bandwidth_efficiency=terms.gemm_bandwidth_efficiency,
                     peak_efficiency=terms.gemm_peak_efficiency),
        decode_attention=replace(profile.decode_attention,
                                 bandwidth_efficiency=terms.kv_bandwidth_efficiency),
        prefill_attention=replace(profile.prefill_attention,
                                  bandwidth_efficiency=terms.kv_bandwidth_efficiency,
                                  peak_efficiency=terms.attention_peak_efficiency),
    )
