"""Fitted efficiencies of the roofline cost model, read from ``profiles/efficiency/*.yaml``.

Every operator of a step (:mod:`pdmux_cli.costmodel.operators`) takes

    latency_s + max(bytes / (HBM B/s x bandwidth_efficiency x bandwidth share),
                    FLOPs / (dense FLOP/s x peak_efficiency x x / (x + half) x SM share))

where ``x`` is the GEMM's token count (for attention in prefill: the sequence's length) and the shares
come from :mod:`pdmux_cli.costmodel.partitions`. ``latency_s`` is the fixed time of the kernel(s) on
the GPU (launch gap, ramp-up and tail), the intercept every fit finds. The constants are fitted by
``benchmarks/fit_efficiency.py`` (with :mod:`pdmux_cli.costmodel.fit`) to the measurements in
``profiles/measurements/``, and each section of a file names its measurement in ``source``.

Files:

- ``<gpu-key>.yaml``: the kernel efficiencies of one measured GPU (``gemm``, ``prefill_attention``,
  ``decode_attention``, ``elementwise``; where measured also ``gemm_fp8``, per-tensor scaled fp8 GEMMs,
  and ``gemm_fp8_block``, SGLang's block-scaled fp8 GEMMs, both as fractions of the fp8 dense peak;
  ``decode_attention_fp8_kv``, decode attention over an fp8 KV cache; ``moe``, one MoE layer's routed experts
  as SGLang's fused MoE runs them, one entry per ``"<kernel>/<dtype>"``, :mod:`pdmux_cli.costmodel.moe`);
  ``applies_to`` lists the GPU profiles that use it (the measured
  GPU and its same-chip siblings), ``families`` the compute capabilities it stands in for when a GPU
  has no file of its own (``"8.9"`` for that capability, ``"8"`` for any 8.x; the exact one wins).
- ``common.yaml``: what was measured once for all GPUs: the SM-partition terms (``partitions``: the
  bandwidth-vs-SMs curve per SM architecture, co-run interference, a TP prefill pass's fixed time per
  layer) and the kernel-launch costs of an eager step (``cpu``: ``launch_s``, ``kernels_per_layer``);
- ``serving.yaml``: what an SGLang server spends beyond the GPU's kernels, fitted to public serving runs
  by ``benchmarks/fit_serving.py``: the scheduler's CPU time per step and per running request
  (``scheduler``) and the request path's fixed delays (``request_path``), read by :func:`load_serving`;
- ``allreduce.yaml``: the tensor-parallel all-reduce constants (read by
  :mod:`pdmux_cli.costmodel.collectives`, not here).

Built-in files are read with libyaml; a malformed one raises :class:`InputError` naming the file and
field (a broken installation, never user input).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..util.errors import Finding, InputError
from ..util.numbers import finite_float
from ..catalog.profile_files import efficiency_profiles_dir
from .partitions import BandwidthCurve, BandwidthFamily, Interference, pick_bandwidth_family

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: The ``format`` value of every efficiency file.
FORMAT = "pdmux-efficiency/1"


@dataclass(frozen=True)
class OperatorEfficiency:
    """One operator kind's fitted constants (see the module docstring for the formula).

    ``latency_s``: fixed kernel time, s (for ``elementwise``: all of one layer's small kernels).
    ``bandwidth_efficiency``: fraction of datasheet HBM bandwidth its bytes move at (0-1].
    ``peak_efficiency``: fraction of dense FLOP/s reached by a large operator (0-1]; 0 for an
    operator with no FLOPs worth counting (elementwise, decode attention's memory-bound read).
    ``half``: tokens at which half of ``peak_efficiency`` is reached (``x / (x + half)``).
    ``source``: the measurement it was fitted to. ``median_error``: the fit's median absolute
    relative error over its points (0.07 = 7%), as the fit script wrote it.
    """

    latency_s: float
    bandwidth_efficiency: float
    peak_efficiency: float = 0.0
    half: float = 0.0
    source: str = ""
    median_error: float | None = None

    def flops_efficiency(self, tokens: float) -> float:
        """Fraction of dense FLOP/s at ``tokens`` (GEMM rows, or attention sequence length)."""
        return self.peak_efficiency * tokens / (tokens + self.half) if tokens > 0 else 0.0

    def time_s(self, nbytes: float, flops: float, size: float, bytes_per_s: float,
               flops_per_s: float) -> float:
        """Seconds of one operator: ``latency_s + max(nbytes / (bytes_per_s x bandwidth_efficiency),
        flops / (flops_per_s x flops_efficiency(size)))``; ``bytes_per_s`` and ``flops_per_s`` are what
        its SMs offer before efficiencies (the datasheet figures on the whole GPU). An operator with
        ``peak_efficiency`` 0 has no compute term."""
        memory = nbytes / (bytes_per_s * self.bandwidth_efficiency)
        if flops and self.peak_efficiency:
            compute = flops / (flops_per_s * self.flops_efficiency(size))
            if compute > memory:
                return self.latency_s + compute
        return self.latency_s + memory


@dataclass(frozen=True)
class EfficiencyProfile:
    """The kernel efficiencies of one measured GPU (``profiles/efficiency/<key>.yaml``).

    ``key``: file stem. ``fitted_on``: the GPU the measurements come from (a profile key).
    ``applies_to``: GPU profile keys using this file. ``families``: compute capabilities it stands in
    for (``"8.9"`` or ``"8"``). ``note``: caveats for output.
    ``gemm``: bf16 GEMMs (fractions of the bf16 dense peak); ``gemm_fp8`` / ``gemm_fp8_block``: per-tensor
    and block-scaled fp8 GEMMs (fractions of the fp8 dense peak, 1-byte weights), ``None`` where the GPU's
    tables have none. ``lm_head``: the efficiency of the logits GEMM when ``gemm`` has been swapped for an
    fp8 section by :func:`for_linear_gemms` (SGLang keeps the lm_head in 16 bits); ``None``: ``gemm``.
    ``decode_attention_fp8_kv``: decode attention reading an fp8 KV cache (bytes at 1 per element, 16-bit
    compute), ``None`` where not measured (:func:`for_kv_cache`).
    ``moe``: the fused-MoE efficiencies measured on this GPU, ``(("<kernel>/<dtype>", efficiency), ...)``
    (latency: one MoE layer's fixed time; bandwidth: the touched experts' weight reads; peak and half:
    the grouped GEMMs, as fractions of the dense peak of the dtype's math, by rows per touched expert);
    ``moe_routed``: the one a model's routed experts take (:func:`pdmux_cli.costmodel.moe.for_moe`),
    ``None``: timed as GEMMs with :attr:`gemm`.
    """

    key: str
    fitted_on: str
    applies_to: tuple[str, ...]
    families: tuple[str, ...]
    gemm: OperatorEfficiency
    prefill_attention: OperatorEfficiency
    decode_attention: OperatorEfficiency
    elementwise: OperatorEfficiency
    note: str = ""
    gemm_fp8: OperatorEfficiency | None = None
    gemm_fp8_block: OperatorEfficiency | None = None
    lm_head: OperatorEfficiency | None = None
    decode_attention_fp8_kv: OperatorEfficiency | None = None
    moe: tuple[tuple[str, OperatorEfficiency], ...] = ()
    moe_routed: OperatorEfficiency | None = None

    @property
    def lm_head_gemm(self) -> OperatorEfficiency:
        """The logits GEMM's efficiency (16-bit): :attr:`lm_head` or :attr:`gemm`."""
        return self.lm_head or self.gemm

    def moe_section(self, kernel: str, dtype: str) -> OperatorEfficiency | None:
        """The fused-MoE efficiency of ``kernel`` in ``dtype`` measured on this GPU, or ``None``."""
        return dict(self.moe).get(f"{kernel}/{dtype}")


#: The GEMM kinds :func:`for_linear_gemms` takes: bf16 (also fp16), per-tensor fp8, block-scaled fp8.
GEMM_KINDS = ("bf16", "fp8", "fp8_block")


def for_linear_gemms(profile: EfficiencyProfile, kind: str) -> tuple[EfficiencyProfile, Finding | None]:
    """``profile`` with ``gemm`` set to the efficiency the model's linear layers run at, and a note
    ("" when measured on this profile's GPU for that kind).

    ``kind``: ``"bf16"`` (unchanged), ``"fp8"`` (per-tensor scaled fp8: SGLang's ``Fp8LinearMethod``
    without ``weight_block_size``, also ``--quantization fp8`` on a 16-bit checkpoint) or
    ``"fp8_block"`` (a checkpoint with ``quantization_config.weight_block_size``: SGLang 0.5.23 runs
    ``dispatch_w8a8_block_fp8_linear``, DeepGEMM on Hopper and Blackwell, in
    ``srt/layers/quantization/fp8_utils.py``). A missing ``fp8_block`` falls back to this GPU's
    per-tensor fp8 (its own fp8 tensor cores; no sibling runs the same block kernel: SM89 and SM120 take
    Triton and CUTLASS block kernels there), a missing ``fp8`` to the bf16 efficiencies against the fp8
    peak; the note says which. The lm_head keeps the bf16 ``gemm`` (:attr:`EfficiencyProfile.lm_head`).
    Raises :class:`InputError` for an unknown kind.
    """
    from dataclasses import replace

    if kind not in GEMM_KINDS:
        raise InputError(f"GEMM kind must be one of {', '.join(GEMM_KINDS)}, got {kind!r}")
    if kind == "bf16":
        return profile, None
    note = None
    chosen = profile.gemm_fp8_block if kind == "fp8_block" else None
    if chosen is None:
        chosen = profile.gemm_fp8
        if kind == "fp8_block" and chosen is not None:
            note = Finding("costmodel.fp8_block_gemm_stand_in", {"fitted_on": profile.fitted_on})
    if chosen is None:
        chosen = profile.gemm
        note = Finding("costmodel.no_fp8_gemm", {"fitted_on": profile.fitted_on})
    return replace(profile, gemm=chosen, lm_head=profile.lm_head_gemm), note


def for_kv_cache(profile: EfficiencyProfile, fp8: bool) -> tuple[EfficiencyProfile, Finding | None]:
    """``profile`` with ``decode_attention`` set for the KV cache's dtype, and a finding (``None`` when
    measured).

    ``fp8``: an fp8 KV cache (``--kv-cache-dtype fp8_e4m3``/``fp8_e5m2``, or 1 byte per element): the
    measured ``decode_attention_fp8_kv`` (SGLang's kernels read an fp8 cache further from the HBM's
    bandwidth than a bf16 one on Hopper: 0.65 against 0.93 of H100's); where not measured, the bf16-KV
    constants at 1 byte per element, with a note."""
    from dataclasses import replace

    if not fp8:
        return profile, None
    if profile.decode_attention_fp8_kv is not None:
        return replace(profile, decode_attention=profile.decode_attention_fp8_kv), None
    return profile, Finding(
        "costmodel.no_fp8_kv_attention", {"fitted_on": profile.fitted_on}, "kv_cache_dtype"
    )


@dataclass(frozen=True)
class PartitionProfile:
    """SM-partition terms (``common.yaml`` ``partitions``).

    ``families``: the bandwidth-vs-SMs curve per SM architecture (:class:`BandwidthFamily`);
    ``interference``: co-run factors; ``prefill_layer_s``: GPU seconds a prefill (or mixed) forward pass
    of a tensor-parallel model pays per layer on top of its operators, whatever its tokens and SMs (the
    "fixed cost of small prefills" of SGLang's green-context tables, all TP 8; the roofline model
    charges it from TP 2 on; 0 where a file predates it); ``source``: the measurements.
    """

    families: tuple[BandwidthFamily, ...]
    interference: Interference
    prefill_layer_s: float = 0.0
    source: str = ""

    def bandwidth_curve(
        self,
        total_sms: int,
        hbm_bytes_per_s: float,
        compute_capability: tuple[int, int] | None,
        s_sat: float | None = None,
    ) -> tuple[BandwidthCurve, Finding | None]:
        """The curve of a GPU (``total_sms`` SMs, ``hbm_bytes_per_s`` datasheet, ``compute_capability``;
        ``None``: unknown, the first family) and a finding on which family stands in (``None`` for its own).
        ``s_sat``: the user's S_SAT (SMs); ``None``: the family's default, rounded to whole SMs.
        Raises :class:`InputError` for an S_SAT outside 1..SMs."""
        family, note = pick_bandwidth_family(self.families, compute_capability)
        if s_sat is None:
            s_sat = float(min(total_sms, max(1, round(family.s_sat(total_sms, hbm_bytes_per_s)))))
            return BandwidthCurve(total_sms, s_sat, family.sharpness), note
        return BandwidthCurve(total_sms, float(s_sat), family.sharpness), note


@dataclass(frozen=True)
class CpuProfile:
    """The serving engine's CPU work per step (``common.yaml`` ``cpu``), seconds.

    ``step_s``: one scheduler iteration (receive requests, process the last step's results, prepare
    the next batch). ``per_request_s``: its CPU time per running request; both are hidden by the overlap
    scheduler up to the GPU step, and paid in full without it (pdmux, ``--disable-overlap-schedule``).
    ``launch_s``: CPU time to launch one kernel outside a CUDA graph. ``kernels_per_layer``: kernels a
    layer launches (decode without a CUDA graph pays ``layers x kernels_per_layer x launch_s`` of CPU
    launch time). ``per_request_step_s``: what every step spends per request in its batch beyond the
    kernels the roofline counts, on the step's critical path whatever the scheduler (measured ITL grows
    with the running requests faster than the kernels' roofline: per-request work around the forward
    pass that the overlap scheduler does not hide); the step model adds it to its GPU times.
    ``eager_launch_s``: host seconds SGLang spends per kernel of a dense model's eager forward (the Python
    of its layers, PyTorch's dispatch and the launch): a prefill or mixed batch outside a CUDA graph is not
    done before ``layers x`` :func:`~pdmux_cli.costmodel.operators.eager_kernels_per_layer` ``x
    eager_launch_s`` (``common.yaml``, measured); ``eager_launch_moe_s``: the same in a MoE model's forward
    (``serving.yaml``, fitted to the public serving runs: more of its kernels are Triton's, launched from
    Python). 0 where a file predates them. ``source``: where the terms come from: the profile's text, or a
    :class:`~pdmux_cli.util.errors.Finding` where options replaced them (``costmodel.step_overhead``,
    ``costmodel.per_request_overhead``; ``str()`` words it).
    """

    step_s: float
    per_request_s: float
    launch_s: float
    kernels_per_layer: int
    source: Finding | str = ""
    per_request_step_s: float = 0.0
    eager_launch_s: float = 0.0
    eager_launch_moe_s: float = 0.0

    def step_cpu_s(self, requests: int) -> float:
        """CPU seconds of one scheduler step with ``requests`` requests in the batch."""
        return self.step_s + self.per_request_s * requests


@dataclass(frozen=True)
class ServingProfile:
    """The request path of an SGLang server outside the scheduler's loop (``serving.yaml``
    ``request_path``), seconds.

    ``admission_delay_s``: from a request's arrival at the HTTP server until the scheduler can admit it
    (FastAPI handler, ``tokenizer_manager.py`` ``generate_request`` / ``_tokenize_one_request``, the ZMQ
    hop ``_send_one_request``, then ``scheduler.py`` ``ingest_requests`` at the top of its next loop
    iteration). ``first_token_delay_s``: from the end of the step that produced a token until the client
    holds it (``detokenizer_manager.py`` ``handle_batch_token_id_out``, the tokenizer manager's
    ``handle_loop`` / ``_handle_batch_output``, the HTTP stream); every token pays it, so it moves TTFT
    and end-to-end latency, not ITL. ``admission_interval_s``: the front end's time per request (one
    process and one event loop take every request: the tokenizer manager), so a burst enters the
    scheduler at most one request per interval: request ``i`` is seen at ``max(arrival_i +
    admission_delay_s, seen_(i-1) + admission_interval_s)``. ``source``: where each was measured or fitted
    (text, or the finding ``costmodel.serving_options`` where options replaced some).
    ``calibrated``: whether the delays come from a calibration (``pdmux calibrate --bench-serving``) rather
    than ``serving.yaml``'s fit to public runs; ``residuals``: that calibration fit's own residuals per
    figure (:class:`pdmux_cli.costmodel.calibration_file.ServingTerms`), which narrow the intervals
    (:mod:`pdmux_cli.costmodel.uncertainty`). ``frontend_token_s``: the front end's time per prompt token
    of a request (the chat template and the tokenizer, measured: ``benchmarks/measure_frontend.py``), on the
    request's path before the scheduler sees it; in SGLang up to 0.5.21 on the one event loop that takes
    every request, so requests pass it one at a time (``Setup.serial_frontend``).
    """

    admission_delay_s: float = 0.0
    first_token_delay_s: float = 0.0
    source: Finding | str = ""
    admission_interval_s: float = 0.0
    calibrated: bool = False
    frontend_token_s: float = 0.0
    residuals: tuple[tuple[str, tuple[float, ...]], ...] = ()


#: No serving delays (the chapter's model, and ``--cost-model roofline`` with every term set to 0).
NO_SERVING_DELAYS = ServingProfile(0.0, 0.0, "none", 0.0)


def _where(path: Path, field: str) -> str:
    return f"efficiency profile {path.name}: field '{field}'"


def _number(data: dict, field: str, path: Path, low: float, high: float) -> float:
    value = finite_float(data.get(field))
    if value is None or not low <= value <= high:
        raise InputError(f"{_where(path, field)} must be a number from {low:g} to {high:g}, got "
                         f"{data.get(field)!r}")
    return value


def _section(data: dict, name: str, path: Path, flops: bool) -> OperatorEfficiency:
    section = data.get(name)
    if not isinstance(section, dict):
        raise InputError(f"{_where(path, name)} is missing or not a mapping")
    source = str(section.get("source", "")).strip()
    if not source:
        raise InputError(f"{_where(path, name + '.source')} is empty: every constant names its measurement")
    error = section.get("median_error")
    return OperatorEfficiency(
        latency_s=_number(section, "latency_s", path, 0.0, 1e-2),
        bandwidth_efficiency=_number(section, "bandwidth_efficiency", path, 0.05, 1.0),
        peak_efficiency=_number(section, "peak_efficiency", path, 0.01, 1.0) if flops else 0.0,
        half=_number(section, "half", path, 0.0, 1e6) if flops else 0.0,
        source=source,
        median_error=finite_float(error) if error is not None else None,
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"efficiency profile {path}: cannot be read ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"efficiency profile {path}: not a {FORMAT} file (the installation is damaged)")
    return data


def load_profile(path: Path) -> EfficiencyProfile:
    """Read one ``<gpu-key>.yaml``. Raises :class:`InputError` for a malformed file."""
    data = _read(path)
    applies = data.get("applies_to")
    families = data.get("families", [])
    if not isinstance(applies, list) or not all(isinstance(k, str) for k in applies) or not applies:
        raise InputError(f"{_where(path, 'applies_to')} must be a non-empty list of GPU profile keys")
    if not isinstance(families, list) or not all(isinstance(f, str) for f in families):
        raise InputError(f"{_where(path, 'families')} must be a list of compute capabilities (\"8.9\" or "
                         "\"8\")")
    return EfficiencyProfile(
        key=path.stem,
        fitted_on=str(data.get("fitted_on", path.stem)),
        applies_to=tuple(applies),
        families=tuple(families),
        gemm=_section(data, "gemm", path, flops=True),
        prefill_attention=_section(data, "prefill_attention", path, flops=True),
        decode_attention=_section(data, "decode_attention", path, flops=False),
        elementwise=_section(data, "elementwise", path, flops=False),
        note=str(data.get("note", "")),
        gemm_fp8=_section(data, "gemm_fp8", path, flops=True) if "gemm_fp8" in data else None,
        gemm_fp8_block=_section(data, "gemm_fp8_block", path, flops=True) if "gemm_fp8_block" in data
        else None, decode_attention_fp8_kv=(_section(data, "decode_attention_fp8_kv", path, flops=False)
                                 if "decode_attention_fp8_kv" in data else None),
        moe=_moe_sections(data, path),
    )


def _moe_sections(data: dict, path: Path) -> tuple[tuple[str, OperatorEfficiency], ...]:
    """The ``moe`` mapping of an efficiency file: ``"<kernel>/<dtype>"`` -> a section with FLOPs terms."""
    moe = data.get("moe", {})
    if not isinstance(moe, dict) or not all(isinstance(k, str) and k.count("/") == 1 for k in moe):
        raise InputError(f"{_where(path, 'moe')} must map '<kernel>/<dtype>' to sections")
    return tuple((key, _section(moe, key, path, flops=True)) for key in sorted(moe))


def _pairs(value: object, path: Path, field: str) -> tuple[tuple[float, float], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, list) and len(v) == 2 for v in value):
        raise InputError(f"{_where(path, field)} must be a list of [share, factor] pairs")
    out = []
    for a, b in value:
        x, y = finite_float(a), finite_float(b)
        if x is None or y is None:
            raise InputError(f"{_where(path, field)} holds a value that is not a number")
        out.append((x, y))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def load_serving() -> tuple[dict[str, float], ServingProfile, str]:
    """``serving.yaml``: ``(scheduler terms, request-path delays, the scheduler's source)`` (cached).

    The scheduler terms are ``{"step_s": ..., "per_request_s": ...}`` (seconds of CPU per step, and per
    running request per step); :func:`load_common` puts them in :class:`CpuProfile`. Raises
    :class:`InputError` for a malformed file (a broken installation)."""
    path = efficiency_profiles_dir() / "serving.yaml"
    data = _read(path)
    sched = data.get("scheduler")
    req = data.get("request_path")
    if not isinstance(sched, dict) or not isinstance(req, dict):
        raise InputError(f"efficiency profile {path.name}: needs 'scheduler' and 'request_path' mappings")
    for name, section in (("scheduler", sched), ("request_path", req)):
        if not str(section.get("source", "")).strip():
            raise InputError(f"{_where(path, name + '.source')} is empty: every constant names its "
                             "measurement")
    terms = {"step_s": _number(sched, "step_s", path, 0.0, 1.0),
             "per_request_s": _number(sched, "per_request_s", path, 0.0, 1e-2),
             "per_request_step_s": _number(sched, "per_request_step_s", path, 0.0, 1e-2),
             "eager_launch_moe_s": (_number(sched, "eager_launch_moe_s", path, 0.0, 1e-3)
                                    if "eager_launch_moe_s" in sched else 0.0)}
    serving = ServingProfile(
        admission_delay_s=_number(req, "admission_delay_s", path, 0.0, 10.0),
        first_token_delay_s=_number(req, "first_token_delay_s", path, 0.0, 10.0),
        admission_interval_s=_number(req, "admission_interval_s", path, 0.0, 1.0),
        source=str(req["source"]),
        frontend_token_s=(_number(req, "frontend_token_s", path, 0.0, 1e-3) if "frontend_token_s" in req
                          else 0.0),
    )
    return terms, serving, str(sched["source"])


#: The SGLang release line whose serving runs fit ``serving.yaml``'s top-level terms, the ones every command
#: charges (``benchmarks/fit_serving.py``: "0.5 is the default every command uses"; 0.4 and 0.3 are its
#: ``older_releases``, replayed by ``pdmux accuracy --serving`` only).
DEFAULT_RELEASE_LINE = "0.5"

#: The serving terms :func:`release_line_terms` gives, as ``make_setup`` options (ms) -> ``serving.yaml`` keys
#: (s).
RELEASE_LINE_TERMS = {"per_request_overhead_ms": "per_request_step_s",
                      "eager_launch_moe_ms": "eager_launch_moe_s",
                      "admission_delay_ms": "admission_delay_s",
                      "first_token_delay_ms": "first_token_delay_s",
                      "admission_interval_ms": "admission_interval_s"}


@functools.lru_cache(maxsize=64)
def release_line_terms(line: str, without: str | None = None) -> dict[str, float]:
    """The serving terms fitted to the public runs of SGLang release line ``line`` (``"0.3"``, ``"0.4"``)
    as ``make_setup`` overrides in ms (``serving.yaml`` ``older_releases``); ``{}`` for the default line
    (its terms are the file's top-level ones) or a line the file does not hold. Older lines replay old
    runs in ``pdmux accuracy --serving``; everything else uses the default.

    ``without``: a source (:func:`pdmux_cli.simulate.serving_accuracy.source_of`): the terms fitted to the
    line's runs of every other source (``serving.yaml`` ``leave_one_source_out``, any line), what the
    out-of-sample replay of that source's runs uses. Raises :class:`InputError` where the file holds no
    such fit (a broken installation, or ``benchmarks/fit_serving.py`` not run since a source was added)."""
    path = efficiency_profiles_dir() / "serving.yaml"
    data = _read(path)
    if without is not None:
        entry = ((data.get("leave_one_source_out") or {}).get(line) or {}).get(without)
        if not isinstance(entry, dict):
            raise InputError(f"efficiency profile {path.name}: no leave-one-source-out fit of line {line} "
                             f"without {without} (run benchmarks/fit_serving.py)")
    else:
        entry = (data.get("older_releases") or {}).get(line)
    if not isinstance(entry, dict):
        return {}
    out = {}
    for option, key in RELEASE_LINE_TERMS.items():
        if key in entry:
            out[option] = _number(entry, key, path, 0.0, 10.0) * 1e3
    return out


@functools.lru_cache(maxsize=1)
def load_common() -> tuple[PartitionProfile, CpuProfile]:
    """``common.yaml``'s SM-partition terms and the engine's CPU costs: kernel launches from
    ``common.yaml``, the scheduler's time per step and per running request from ``serving.yaml``
    (:func:`load_serving`) (cached)."""
    path = efficiency_profiles_dir() / "common.yaml"
    data = _read(path)
    part = data.get("partitions")
    cpu = data.get("cpu")
    if not isinstance(part, dict) or not isinstance(cpu, dict):
        raise InputError(f"efficiency profile {path.name}: needs 'partitions' and 'cpu' mappings")
    try:
        interference = Interference(
            decode_bandwidth=_pairs(part.get("decode_bandwidth_interference"), path,
                                    "decode_bandwidth_interference"),
            prefill_flops=_pairs(part.get("prefill_flops_interference"), path, "prefill_flops_interference"),
        )
    except InputError as exc:
        raise InputError(f"efficiency profile {path.name}: {exc}") from None
    partitions = PartitionProfile(
        families=_families(part.get("bandwidth_families"), path),
        interference=interference,
        prefill_layer_s=_number(part, "prefill_layer_s", path, 0.0, 1e-2) if "prefill_layer_s" in part
        else 0.0, source=str(part.get("source", "")),
    )
    kernels = cpu.get("kernels_per_layer")
    if not isinstance(kernels, int) or isinstance(kernels, bool) or not 1 <= kernels <= 1000:
        raise InputError(f"{_where(path, 'cpu.kernels_per_layer')} must be an integer from 1 to 1000")
    scheduler, _, scheduler_source = load_serving()
    cpu_profile = CpuProfile(
        step_s=scheduler["step_s"],
        per_request_s=scheduler["per_request_s"],
        per_request_step_s=scheduler["per_request_step_s"],
        eager_launch_s=_number(cpu, "eager_launch_s", path, 0.0, 1e-3) if "eager_launch_s" in cpu else 0.0,
        eager_launch_moe_s=scheduler["eager_launch_moe_s"],
        launch_s=_number(cpu, "launch_s", path, 0.0, 1e-3),
        kernels_per_layer=kernels,
        source=f"{scheduler_source}; {cpu.get('source', '')}",
    )
    return partitions, cpu_profile


def _families(value: object, path: Path) -> tuple[BandwidthFamily, ...]:
    field = "partitions.bandwidth_families"
    if not isinstance(value, dict) or not value:
        raise InputError(f"{_where(path, field)} must map compute capabilities (\"9\", \"8.9\") to curves")
    out = []
    for family, entry in value.items():
        where = f"{field}.{family}"
        if not isinstance(entry, dict):
            raise InputError(f"{_where(path, where)} must be a mapping")
        try:
            out.append(BandwidthFamily(
                family=str(family), sharpness=_number(entry, "sharpness", path, 0.5, 20),
                sm_bytes_per_s=_number(entry, "sm_bytes_per_s", path, 1e8, 1e13),
                fitted_on=str(entry.get("fitted_on", "")),
                median_error=finite_float(entry.get("median_error")) or 0.0,
                source=str(entry.get("source", ""))))
        except InputError as exc:
            raise InputError(f"{_where(path, where)}: {exc}") from None
    return tuple(out)


@functools.lru_cache(maxsize=1)
def load_profiles() -> tuple[EfficiencyProfile, ...]:
    """Every ``profiles/efficiency/<gpu-key>.yaml`` (not :data:`SHARED_FILES`), sorted by key (cached)."""
    directory = efficiency_profiles_dir()
    return tuple(load_profile(p) for p in sorted(directory.glob("*.yaml")) if p.stem not in SHARED_FILES)


#: The files of ``profiles/efficiency/`` that are no GPU's profile: the terms measured once for all GPUs,
#: the all-reduce constants, the serving terms and their residuals (:mod:`pdmux_cli.costmodel.uncertainty`).
SHARED_FILES = ("common", "allreduce", "serving", "serving_residuals")


def profile_for(
    gpu_key: str, compute_capability: tuple[int, int]
) -> tuple[EfficiencyProfile, Finding | None]:
    """The efficiency profile for a GPU, and a note saying how it was chosen ("" when measured).

    Order: a file whose ``applies_to`` names ``gpu_key`` (its own measurements, or a same-chip
    sibling's: the note says which); else the file standing in for the exact compute capability, then
    for its major (``families``); else the first file (with a note). Raises :class:`InputError` only
    for a broken installation (no efficiency files).
    """
    profiles = load_profiles()
    if not profiles:
        raise InputError(f"no efficiency profiles in {efficiency_profiles_dir()}: the installation is "
                         "incomplete")
    for profile in profiles:
        if gpu_key in profile.applies_to:
            if profile.fitted_on == gpu_key:
                return profile, None
            return profile, Finding("costmodel.efficiency.same_chip", {"fitted_on": profile.fitted_on})
    major, minor = compute_capability
    for family in (f"{major}.{minor}", str(major)):
        for profile in profiles:
            if family in profile.families:
                return profile, Finding("costmodel.efficiency.same_family", {"fitted_on": profile.fitted_on,
                                                                              "family": family})
    profile = profiles[0]
    return profile, Finding("costmodel.efficiency.guess", {"fitted_on": profile.fitted_on, "major": major})
