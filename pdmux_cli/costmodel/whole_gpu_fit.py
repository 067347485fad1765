"""Fit the roofline model's whole-GPU terms to a user's own SGLang measurements (``pdmux calibrate``).

Points come from :mod:`pdmux_cli.sglang.measurement_readers`: one-batch benchmark results (a prefill of
``batch x input_len`` tokens; a median decode step of ``batch`` requests at ``context`` tokens) and the
clean decode intervals of server logs. The fit keeps the shipped curves' shapes (latencies, the
half-efficiency token counts, the partition terms) and scales what the data can tell apart:

- decode points fix the KV read efficiency and a fixed time per decode step (launch gaps, sampling,
  synchronisation the operators leave out). The weight read efficiency stays the shipped one: a
  model's weights are the same bytes at every batch size, so on the whole GPU their read time cannot be
  told from a fixed time per step, and the shipped value is measured (and scales with SMs, where a
  fixed time does not). When the points hold about the same KV cache, only the fixed time is fitted;
- prefill points fix the GEMM and prefill-attention compute efficiencies (one common scale when the
  attention share of the FLOPs varies by less than 0.1 or there is one point).

Each fit minimises the mean absolute relative error (points weighted by the measurements behind them)
by grid search, efficiencies capped at 1.0. Points are refused when the shipped model is off for them by
more than :data:`MAX_MISMATCH` times at the median, or the calibrated one still by more than
:data:`MAX_FIT_ERROR`: they were measured with another model or GPU (or with tensor parallelism,
which pdmux does not model yet); single points that far off are left out as outliers. Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any

from ..catalog import model as mdl
from ..sglang import server_defaults as sgl
from .calibration_file import WholeGpuTerms
from ..util.errors import Finding, InputError
from .fit import grid_search

#: Largest factor between measured times and the shipped model's (at the median) before the points are
#: refused as another model's or GPU's (the shipped model's median error on public measurements is under
#: 10%: docs/accuracy.md; a user's stack may be up to 2x slower, e.g. without CUDA graphs).
MAX_MISMATCH = 2.5
#: Largest median error the calibrated model may keep: past it, the measurements are not of the model
#: and GPU given (one GPU's bandwidth and FLOP/s in another's profile cannot be fitted away).
MAX_FIT_ERROR = 0.25
#: Largest share of points that may be that far off and be left out as outliers (stalls, clock changes).
MAX_OUTLIER_SHARE = 0.1
#: The end of a refusal of points that are not of the model and GPU given (an InputError template: the
#: values ``model`` and ``gpu``; the parameters at fault, ``model`` and ``gpu``, by their flags).
_NOT_THIS_MODEL = "({flag.model}, {flag.gpu}; pdmux calibrate fits single-GPU measurements)"


@dataclass(frozen=True)
class CalPoint:
    """One measured time to fit. ``kind``: ``"prefill"`` (``batch`` prompts of ``tokens`` tokens) or
    ``"decode"`` (a step of ``batch`` requests at ``tokens`` tokens of context each). ``source``:
    ``"one-batch"`` or ``"server log"`` (the server's overlap scheduler hides its CPU time; the
    one-batch benchmark synchronises every step). ``cuda_graph``: the step ran as a CUDA graph.
    ``count``: measurements behind it (server-log intervals of one batch size and about one context
    are one point: the median of their step times at the median of their contexts), its weight in the fit."""

    kind: str
    source: str
    batch: int
    tokens: float
    measured_s: float
    where: str = ""
    cuda_graph: bool = True
    count: int = 1


@dataclass(frozen=True)
class FitRow:
    """A point with the calibrated and the shipped model's predictions (seconds)."""

    point: CalPoint
    calibrated_s: float
    uncalibrated_s: float


@dataclass(frozen=True)
class CalibrationFit:
    """The result: the fitted ``terms``, a row per point, what the data could tell apart
    (``decode_mode``, ``prefill_mode``) and notes."""

    terms: WholeGpuTerms
    rows: list[FitRow]
    decode_mode: str
    prefill_mode: str
    notes: list[Finding]


#: Width of the context bins server-log intervals are grouped in (5%: a step's KV read time moves by
#: less within one).
CONTEXT_BIN = 0.05


def points_from(one_batch: list, intervals: list) -> list[CalPoint]:
    """:class:`CalPoint` of one-batch results (a prefill each, and a decode step where measured) and
    server-log decode intervals (:mod:`pdmux_cli.sglang.measurement_readers`), these grouped by batch size,
    context (:data:`CONTEXT_BIN` wide, logarithmic) and CUDA graph into one point each."""
    out: list[CalPoint] = []
    for p in one_batch:
        out.append(CalPoint("prefill", "one-batch", p.batch_size, p.input_len, p.prefill_s, p.where, False))
        if p.decode_step_s is not None:
            out.append(CalPoint("decode", "one-batch", p.batch_size, p.decode_context, p.decode_step_s,
                                p.where, True))
    groups: dict[tuple[int, int, bool], list] = {}
    for i in intervals:
        graph = True if i.cuda_graph is None else i.cuda_graph
        key = (i.running, round(math.log(max(i.context, 1.0)) / math.log1p(CONTEXT_BIN)), graph)
        groups.setdefault(key, []).append(i)
    for (running, _, graph), group in sorted(groups.items()):
        where = group[0].where + (f" and {len(group) - 1} more" if len(group) > 1 else "")
        out.append(CalPoint("decode", "server log", running, statistics.median(i.context for i in group),
                            statistics.median(i.step_s for i in group), where, graph, len(group)))
    return out


def predict(step_model: Any, p: CalPoint) -> float:
    """Seconds the model gives a point on the whole GPU."""
    total = step_model.total_sms
    if p.kind == "prefill":
        return step_model.prefill_s(total, [(int(p.tokens), 0)] * p.batch)
    model = step_model.model
    window = model.sliding_window if model.num_sliding_layers else 0
    gpu = step_model.decode_s(total, p.batch, p.batch * p.tokens, p.batch * min(p.tokens, window) if window
                              else 0.0, 0, p.cuda_graph)
    # a server's step: its time per request too; the overlap scheduler hides the CPU
    if p.source == "server log":
        return max(gpu + step_model.request_s(p.batch), step_model.decode_cpu_s(p.batch))
    return gpu


def _mean_error(predicted: list[float], measured: list[float], weights: list[int]) -> float:
    return statistics.fmean([abs(a - b) / b for a, b in zip(predicted, measured, strict=True)], weights)


def _median_error(predicted: list[float], measured: list[float]) -> float:
    return statistics.median(abs(a - b) / b for a, b in zip(predicted, measured, strict=True))


def check_points(base: Any, gpu: Any, points: list[CalPoint],
                 kv_bytes_per_element: float = 2.0) -> tuple[list[CalPoint], list[Finding]]:
    """The points fit to use, and a note for those dropped (``fit.outliers_left_out``). Refuses
    (:class:`InputError`, one line, ``param`` ``"model"``) points that cannot come from this model on this
    GPU: more KV than its memory holds, a context past the model's length, or times the shipped model is
    off for by more than :data:`MAX_MISMATCH` times at the median or for more than
    :data:`MAX_OUTLIER_SHARE` of them (fewer are dropped as outliers: a stall, a clock change)."""
    model = base.model
    weights = mdl.weight_bytes_total(model)
    per_token = mdl.kv_bytes_per_token(model, kv_bytes_per_element)
    room = (gpu.memory_bytes - sgl.CONTEXT_RESERVE_BYTES - weights) / per_token
    ratios = []
    for p in points:
        held = p.batch * p.tokens
        if held > room:
            raise InputError("{where}: {batch} x {tokens:,.0f} tokens of KV cache do not fit {model} on "
                             "{gpu} (at most {room:,.0f}): not measured with this model and GPU "
                             "({flag.model}, {flag.gpu})", param="model",
                             values={"where": p.where, "batch": p.batch, "tokens": p.tokens,
                                     "model": model.name, "gpu": gpu.name, "room": max(0, room)})
        if model.max_position_embeddings and p.tokens > model.max_position_embeddings:
            raise InputError("{where}: {tokens:,.0f} tokens of context, past {model}'s {context:,}: not "
                             "measured with this model ({param_flag})", param="model",
                             values={"where": p.where, "tokens": p.tokens, "model": model.name,
                                     "context": model.max_position_embeddings})
        ratios.append(p.measured_s / predict(base, p))
    for kind in ("prefill", "decode"):
        mine = [(p, r) for p, r in zip(points, ratios, strict=True) if p.kind == kind]
        if not mine:
            continue
        typical = statistics.median(r for _, r in mine)
        if not 1 / MAX_MISMATCH <= typical <= MAX_MISMATCH:
            p, r = min(mine, key=lambda pr: abs(math.log(pr[1] / typical)))
            raise InputError(
                "{where}: measured {measured_ms:.3g} ms for a {kind} of {batch} x {tokens:,.0f} tokens where "
                "the model predicts {predicted_ms:.3g} ms for {model} on {gpu} (the {kind} points are "
                "{typical:.2g}x the model at the median): measured with another model, GPU or tensor "
                "parallelism? " + _NOT_THIS_MODEL, param="model",
                values={"where": p.where, "measured_ms": p.measured_s * 1e3, "kind": kind, "batch": p.batch,
                        "tokens": p.tokens, "predicted_ms": p.measured_s / r * 1e3, "model": model.name,
                        "gpu": gpu.name, "typical": typical})
    kept = [p for p, r in zip(points, ratios, strict=True) if 1 / MAX_MISMATCH <= r <= MAX_MISMATCH]
    if len(points) - len(kept) > MAX_OUTLIER_SHARE * len(points):
        p = next(p for p in points if p not in kept)
        raise InputError("{off} of {points} points are more than {mismatch:g}x from what {model} on {gpu} "
                         "takes (first: {where}): measured with another model, GPU or tensor parallelism? "
                         + _NOT_THIS_MODEL, param="model",
                         values={"off": len(points) - len(kept), "points": len(points),
                                 "mismatch": MAX_MISMATCH, "model": model.name, "gpu": gpu.name,
                                 "where": p.where})
    notes = []
    if len(kept) < len(points):
        dropped = [p for p in points if p not in kept]
        notes.append(Finding("fit.outliers_left_out", {"dropped": len(dropped), "mismatch": MAX_MISMATCH,
                                                       "first": dropped[0].where}))
    return kept, notes


def _spread(values: list[float]) -> float:
    return max(values) - min(values) if values else 0.0


def _scaled(profile: Any, w: float, kv: float, f: float, a: float) -> Any:
    """``profile`` with its GEMM bandwidth x ``w``, KV bandwidth x ``kv``, GEMM peak x ``f`` and prefill
    attention peak x ``a`` (each capped at 1.0)."""
    return replace(
        profile,
        gemm=replace(profile.gemm, bandwidth_efficiency=min(1.0, profile.gemm.bandwidth_efficiency * w),
                     peak_efficiency=min(1.0, profile.gemm.peak_efficiency * f)),
        decode_attention=replace(profile.decode_attention,
                                 bandwidth_efficiency=min(1.0,
                                                          profile.decode_attention.bandwidth_efficiency
                                                          * kv)),
        prefill_attention=replace(profile.prefill_attention,
                                  bandwidth_efficiency=min(1.0,
                                                           profile.prefill_attention.bandwidth_efficiency
                                                           * kv),
                                  peak_efficiency=min(1.0, profile.prefill_attention.peak_efficiency * a)),
    )


def _with(base: Any, profile: Any, fixed: float = 0.0) -> Any:
    """A copy of ``base`` (:class:`~pdmux_cli.costmodel.roofline.RooflineModel`) with other efficiencies."""
    from .roofline import RooflineModel

    return RooflineModel(
        base.model, gpu_name=base.gpu_name, total_sms=base.total_sms, hbm_bytes_per_s=base.hbm,
        dense_flops=base.peak, gemm_flops=base.gemm_peak, efficiency=profile, partitions=base.partitions,
        cpu=base.cpu, s_sat=base.s_sat if base.curve else None, weight_bytes_per_param=None,
        kv_bytes_per_element=base.kv_bytes_per_element, decode_fixed_s=fixed, moe_flops=base.moe_peak,
        compute_capability=getattr(base, "compute_capability", None),
    )


SCALES = [0.3 + 0.05 * i for i in range(35)]  # 0.3 to 2.0
#: Ratio of the largest to the smallest KV cache held across decode points needed to fit the KV read
#: efficiency apart from the fixed time per step.
KV_SPREAD = 2.0
#: The fixed time per decode step a calibration may add, seconds (negative: the shipped latencies too long).
FIXED_RANGE = (-2e-3, 20e-3)


def fit_whole_gpu(base: Any, points: list[CalPoint], source: str = "",
                  notes: list[Finding] | None = None) -> CalibrationFit:
    """Fit the whole-GPU terms (module docstring) for ``base``'s model and GPU
    (a :class:`~pdmux_cli.costmodel.roofline.RooflineModel` with the shipped efficiencies).
    Raises :class:`InputError` without a single point."""
    if not points:
        raise InputError("nothing to calibrate on: no one-batch result and no clean decode interval in the "
                         "files that the model can be fitted to")
    profile = base.eff
    notes = list(notes or [])
    decode = [p for p in points if p.kind == "decode"]
    prefill = [p for p in points if p.kind == "prefill"]
    w = kv = f = a = 1.0
    fixed = 0.0
    decode_mode = prefill_mode = "no points"
    for _ in range(2):  # decode steps at large batches compute; prefills read KV: alternate twice
        kv, fixed, decode_mode = _fit_decode(base, profile, decode, f, a, notes)
        f, a, prefill_mode = _fit_prefill(base, profile, prefill, w, kv, fixed, f, a, notes)
    notes = [n for i, n in enumerate(notes) if n not in notes[:i]]  # each once, in order (unhashable)
    fitted = _scaled(profile, w, kv, f, a)
    calibrated = _with(base, fitted, fixed)
    rows = [FitRow(p, predict(calibrated, p), predict(base, p)) for p in points]
    measured_all = [r.point.measured_s for r in rows]
    _check_plausible(base, {"KV read": kv, "GEMM compute": f, "attention compute": a}, fitted, fixed,
                     bool(decode), bool(prefill))
    calibrated_error = _median_error([r.calibrated_s for r in rows], measured_all)
    if calibrated_error > MAX_FIT_ERROR:
        worst = max(rows, key=lambda r: abs(r.calibrated_s / r.point.measured_s - 1))
        raise InputError("even calibrated, the model is {error:.0%} off at the median (e.g. {where}: "
                         "measured {measured_ms:.3g} ms, fitted {fitted_ms:.3g} ms): not measured with "
                         "{model} on {gpu}? " + _NOT_THIS_MODEL, param="model",
                         values={"error": calibrated_error, "where": worst.point.where,
                                 "measured_ms": worst.point.measured_s * 1e3,
                                 "fitted_ms": worst.calibrated_s * 1e3, "model": base.model.name,
                                 "gpu": base.gpu_name})
    terms = WholeGpuTerms(
        model=base.model.name,
        gemm_bandwidth_efficiency=round(fitted.gemm.bandwidth_efficiency, 4),
        gemm_peak_efficiency=round(fitted.gemm.peak_efficiency, 4),
        kv_bandwidth_efficiency=round(fitted.decode_attention.bandwidth_efficiency, 4),
        attention_peak_efficiency=round(fitted.prefill_attention.peak_efficiency, 4),
        decode_fixed_s=round(fixed, 7),
        points=len(points),
        median_error=round(calibrated_error, 4),
        uncalibrated_median_error=round(_median_error([r.uncalibrated_s for r in rows], measured_all), 4),
        source=source,
    )
    return CalibrationFit(terms, rows, decode_mode, prefill_mode, notes)


def _check_plausible(base: Any, scales: dict[str, float], fitted: Any, fixed: float, decode: bool,
                     prefill: bool) -> None:
    """Refuse (:class:`InputError`) a fit no kernel stack on this GPU could give: an efficiency at the
    datasheet's peak (1.0: faster than the GPU can be), a term :data:`MAX_MISMATCH` times slower than
    the shipped one, or a fixed time per decode step at the end of its range. Timings of another GPU
    fit one GPU's profile this way (a B200's profile "explains" H100 times with efficiencies near 0.3)."""
    who = "not measured with {model} on {gpu}? " + _NOT_THIS_MODEL
    names = {"model": base.model.name, "gpu": base.gpu_name}
    values = {"KV read": fitted.decode_attention.bandwidth_efficiency,
              "GEMM compute": fitted.gemm.peak_efficiency,
              "attention compute": fitted.prefill_attention.peak_efficiency}
    used = {"KV read": decode, "GEMM compute": prefill, "attention compute": prefill}
    for name, scale in scales.items():
        if not used[name]:
            continue
        if values[name] >= 1.0:
            raise InputError("the measurements need a {term} efficiency above the datasheet's peak on {gpu} "
                             "(faster than the GPU can be): " + who, param="model",
                             values={"term": name, **names})
        if scale < 1 / MAX_MISMATCH:
            raise InputError("the measurements need a {term} efficiency of {efficiency:.2f}, {below:.1f}x "
                             "below what {gpu} reaches in published measurements: " + who, param="model",
                             values={"term": name, "efficiency": values[name], "below": 1 / scale, **names})
    if decode and not FIXED_RANGE[0] < fixed < FIXED_RANGE[1]:
        raise InputError("the measurements need a fixed time per decode step of {fixed_ms:+.1f} ms, outside "
                         "{low_ms:+.0f} to {high_ms:+.0f} ms: " + who, param="model",
                         values={"fixed_ms": fixed * 1e3, "low_ms": FIXED_RANGE[0] * 1e3,
                                 "high_ms": FIXED_RANGE[1] * 1e3, **names})


def _fit_decode(base: Any, profile: Any, decode: list[CalPoint], f: float, a: float,
                notes: list[Finding]) -> tuple[float, float, str]:
    """The KV read scale and fixed time per step that fit the decode points best (module docstring);
    ``f``, ``a``: the compute scales so far (large batches compute). Returns ``(kv_scale, fixed_s, mode)``."""
    if not decode:
        return 1.0, 0.0, "no points"
    measured = [p.measured_s for p in decode]
    weights = [p.count for p in decode]
    kv_held = [p.batch * p.tokens for p in decode]
    with_kv = min(kv_held) > 0 and max(kv_held) / min(kv_held) >= KV_SPREAD
    # weights, small ops and latencies do not depend on the KV scale; the KV reads are linear in 1 / scale
    unit = _with(base, _scaled(profile, 1.0, 1.0, f, a))
    # a server log's steps are a server's: they also spend its time per request (StepModel.request_s)
    dense = [unit.decode_s(unit.total_sms, p.batch, 0.0, 0.0, 0, p.cuda_graph)
             + (base.request_s(p.batch) if p.source == "server log" else 0.0) for p in decode]
    kv_part = [unit.decode_s(unit.total_sms, p.batch, held, 0.0, 0, p.cuda_graph)
               - unit.decode_s(unit.total_sms, p.batch, 0.0, 0.0, 0, p.cuda_graph)
               for p, held in zip(decode, kv_held, strict=True)]
    cpu = [base.decode_cpu_s(p.batch) if p.source == "server log" else 0.0 for p in decode]

    def predicted(scale: float, extra: float) -> list[float]:
        return [max(d + k / scale + extra, c) for d, k, c in zip(dense, kv_part, cpu, strict=True)]

    def best_fixed(scale: float) -> float:
        """The fixed time minimising the mean relative error at ``scale``: the median of the residuals
        weighted by 1 / measured (the two trade off along a narrow valley a grid would miss)."""
        residual = sorted((m - d - k / scale, n / m)
                          for d, k, m, n in zip(dense, kv_part, measured, weights, strict=True))
        half, acc = sum(wt for _, wt in residual) / 2, 0.0
        for value, weight in residual:
            acc += weight
            if acc >= half:
                return min(FIXED_RANGE[1], max(FIXED_RANGE[0], value))
        return 0.0

    if not with_kv:
        notes.append(Finding("fit.decode_fixed_time_only", {"kv_spread": KV_SPREAD}))
        return 1.0, best_fixed(1.0), "fixed time per step"
    _, (scale,) = grid_search(lambda x: _mean_error(predicted(x, best_fixed(x)), measured, weights), [SCALES],
                              rounds=8)
    return scale, best_fixed(scale), "KV read efficiency and a fixed time per step"


def _fit_prefill(base: Any, profile: Any, prefill: list[CalPoint], w: float, kv: float, fixed: float,
                 f: float, a: float, notes: list[Finding]) -> tuple[float, float, str]:
    """The GEMM and attention compute scales that fit the prefill points best (module docstring)."""
    if not prefill:
        return f, a, "no points"
    model = base.model
    measured = [p.measured_s for p in prefill]
    weights = [p.count for p in prefill]
    attn_share = []
    for p in prefill:
        attn = mdl.attention_flops(model, int(p.tokens), 0)
        attn_share.append(attn / (attn + mdl.flops_per_token_linear(model) * p.tokens))
    full = len(prefill) >= 2 and _spread(attn_share) >= 0.1
    # a prefill is a sum over operators, GEMMs depending on the GEMM scale only and attention on the
    # attention scale only: time(f, a) = time(f, 1) + time(1, a) - time(1, 1), each term cached by scale
    cache: dict[tuple[float, float], list[float]] = {}

    def alone(scale_f: float, scale_a: float) -> list[float]:
        key = (round(scale_f, 6), round(scale_a, 6))
        if key not in cache:
            m = _with(base, _scaled(profile, w, kv, scale_f, scale_a), fixed)
            cache[key] = [predict(m, p) for p in prefill]
        return cache[key]

    def predicted(scale_f: float, scale_a: float) -> list[float]:
        return [g + t - c
                for g, t, c in zip(alone(scale_f, 1.0), alone(1.0, scale_a), alone(1.0, 1.0), strict=True)]

    if full:
        _, (f, a) = grid_search(lambda x, y: _mean_error(predicted(x, y), measured, weights),
                                [SCALES, SCALES], rounds=5)
        return f, a, "GEMM and attention compute"
    _, (f,) = grid_search(lambda x: _mean_error(predicted(x, x), measured, weights), [SCALES], rounds=5)
    notes.append(Finding("fit.prefill_one_scale"))
    return f, f, "one compute scale"
