"""Fitting the roofline model's efficiencies to measurements (pure Python, deterministic).

Every fit minimises the median absolute relative error of the model's prediction over the measured
points, by a coarse-to-fine grid search (no randomness, no numpy: the accuracy report refits inside
``pdmux accuracy`` for its leave-one-model-out errors). The functions take plain records from
:mod:`pdmux_cli.costmodel.measurements` and return :class:`~pdmux_cli.costmodel.efficiency.OperatorEfficiency`
(or the partition terms); ``benchmarks/fit_efficiency.py`` writes them to ``profiles/efficiency/``.

Operator formulas (one kernel, whole GPU, datasheet ``B`` bytes/s and ``F`` FLOP/s):

- GEMM ``[m, k] x [k, n]``: ``latency + max((w x k x n + 2 x m x (k + n)) / (B x e_bw),
  2 m k n / (F x e_max x m / (m + half)))`` with ``w`` bytes per weight;
- prefill attention, ``b`` sequences of ``L`` tokens: ``latency + b x max(kv(L) / (B x e_bw),
  flops(L) / (F x e_max x L / (L + half)))``; decode attention: ``latency + kv bytes / (B x e_bw)``;
- element-wise ops of a layer over ``T`` tokens: ``latency + T x bytes per token / (B x e_bw)``;
- one MoE layer's routed experts (SGLang's fused MoE), ``T`` tokens, top-``k`` of ``E`` experts ``w`` wide
  with ``b`` bytes per weight, ``u`` experts touched: ``latency + max((u x 3 h w b + 2 T k (2h + 3w)) /
  (B x e_bw), 2 T k 3 h w / (F x e_max x r / (r + half)))``, ``r = T k / u`` rows per touched expert;
- an all-reduce of ``b`` bytes over ``N`` GPUs on a link of ``L`` bytes/s per direction:
  ``latency + 2 (N - 1) / N x b / (L x e_bw)`` (:mod:`pdmux_cli.costmodel.collectives`), per kernel
  (SGLang's custom all-reduce up to 8 MiB, NCCL above), GPU and rank count.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .collectives import CUSTOM_MAX_BYTES, LinkFit
from .efficiency import OperatorEfficiency
from .measurements import (
    AIC_MOE_MODELS,
    MOE_WEIGHT_BYTES,
    AicAttention,
    AicGemm,
    AicMoe,
    AllReduce,
    VidurLayer,
)
from .partitions import BandwidthCurve, _soft_min

#: Bytes of a 16-bit element (weights in the bf16 fits, activations, KV).
BF16 = 2


def median_abs_rel_error(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Median of ``|predicted - measured| / measured`` (0.05 = 5%)."""
    return statistics.median(abs(p - m) / m for p, m in zip(predicted, measured, strict=True))


def balanced_error(predicted: Sequence[float], measured: Sequence[float], sizes: Sequence[float]) -> float:
    """Mean over size classes (powers of two of ``sizes``: tokens, rows, bytes) of the median absolute
    relative error within each class: every regime (decode-sized and prefill-sized) counts the same,
    however many points each has."""
    classes: dict[int, list[float]] = {}
    for p, m, size in zip(predicted, measured, sizes, strict=True):
        classes.setdefault(int(math.log2(max(size, 1.0))), []).append(abs(p - m) / m)
    return statistics.fmean(statistics.median(errors) for errors in classes.values())


def grid_search(objective: Callable[..., float], grids: Sequence[Sequence[float]], rounds: int = 3,
                shrink: float = 4.0) -> tuple[float, tuple[float, ...]]:
    """Minimise ``objective(*params)`` over the product of ``grids``, then over finer grids around the
    best point (``rounds`` times, spacing divided by ``shrink``; kept inside each grid's range).
    Returns ``(best value, best params)``. Deterministic: ties go to the earlier grid point."""
    best_value, best = math.inf, tuple(g[0] for g in grids)
    for combo in itertools.product(*grids):
        value = objective(*combo)
        if value < best_value:
            best_value, best = value, combo
    lows = [min(g) for g in grids]
    highs = [max(g) for g in grids]
    steps = [(max(g) - min(g)) / max(1, len(g) - 1) for g in grids]
    for _ in range(rounds):
        steps = [s / shrink for s in steps]
        local = [sorted({min(hi, max(lo, b + i * s)) for i in range(-4, 5)}) if s > 0 else [b]
                 for b, s, lo, hi in zip(best, steps, lows, highs, strict=True)]
        for combo in itertools.product(*local):
            value = objective(*combo)
            if value < best_value:
                best_value, best = value, combo
    return best_value, tuple(best)


def _frange(low: float, high: float, step: float) -> list[float]:
    n = round((high - low) / step)
    return [low + i * step for i in range(n + 1)]


def _log_range(low: float, high: float, points: int) -> list[float]:
    ratio = (high / low) ** (1 / (points - 1))
    return [low * ratio**i for i in range(points)]


# ---------------------------------------------------------------------------------------------------
# GEMMs


@dataclass(frozen=True)
class GemmPoint:
    """A measured GEMM: ``[m, k] x [k, n]`` with ``weight_bytes`` bytes per weight took ``seconds``."""

    m: int
    k: int
    n: int
    seconds: float
    weight_bytes: float = BF16

    def nbytes(self) -> float:
        return self.weight_bytes * self.k * self.n + BF16 * self.m * (self.k + self.n)

    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n


def gemm_points(points: Sequence[AicGemm] | Sequence[VidurLayer]) -> list[GemmPoint]:
    """aiconfigurator GEMMs or Vidur layers (their four GEMMs each) as :class:`GemmPoint`."""
    out = []
    for p in points:
        if isinstance(p, VidurLayer):
            for op, (k, n) in p.gemm_shapes().items():
                out.append(GemmPoint(p.tokens, k, n, p.ops[op]))
        else:
            out.append(GemmPoint(p.m, p.k, p.n, p.seconds, BF16 if p.dtype == "bf16" else 1))
    return out


def predict_gemm(eff: OperatorEfficiency, p: GemmPoint, peak: float, hbm: float) -> float:
    """Seconds the model gives one GEMM on the whole GPU."""
    return eff.time_s(p.nbytes(), p.flops(), p.m, hbm, peak)


def fit_gemm(points: Sequence[GemmPoint], peak: float, hbm: float, source: str,
             memory_bound_rows: int = 16) -> OperatorEfficiency:
    """Fit ``latency``, ``bandwidth_efficiency`` on the points with ``m <= memory_bound_rows`` (weight
    reads), then ``peak_efficiency`` and ``half`` on all points (module docstring's formula)."""
    small = [p for p in points if p.m <= memory_bound_rows]
    small_meas = [p.seconds for p in small]

    def memory_objective(latency: float, bw: float) -> float:
        return median_abs_rel_error([latency + p.nbytes() / (hbm * bw) for p in small], small_meas)

    _, (latency, bw) = grid_search(memory_objective, [_frange(0.0, 30e-6, 1e-6), _frange(0.3, 1.0, 0.02)])
    measured = [p.seconds for p in points]
    sizes = [p.m for p in points]

    def objective(peak_eff: float, half: float) -> float:
        e = OperatorEfficiency(latency, bw, peak_eff, half, source)
        return balanced_error([predict_gemm(e, p, peak, hbm) for p in points], measured, sizes)

    _, (peak_eff, half) = grid_search(objective, [_frange(0.3, 1.0, 0.02), _log_range(1.0, 4096.0, 25)])
    e = OperatorEfficiency(latency, bw, peak_eff, half, source)
    error = median_abs_rel_error([predict_gemm(e, p, peak, hbm) for p in points], measured)
    return OperatorEfficiency(latency, bw, peak_eff, half, source, error)


# ---------------------------------------------------------------------------------------------------
# attention


def attention_kv_bytes(p: AicAttention) -> float:
    """KV bytes one layer reads for the point: ``batch x length x 2 x kv_heads x head_dim x bytes``."""
    per = 1 if p.kv_dtype.startswith("fp8") else BF16
    return p.batch * p.length * 2 * p.kv_heads * p.head_dim * per


def prefill_attention_flops(p: AicAttention) -> float:
    """Causal attention FLOPs of the point, one layer: ``4 x batch x heads x head_dim x length**2 / 2``
    (Q K^T and P V at 2 FLOP per multiply-add; as :func:`pdmux_cli.catalog.model.attention_flops`)."""
    return 4.0 * p.batch * p.heads * p.head_dim * p.length * p.length / 2


def predict_prefill_attention(eff: OperatorEfficiency, p: AicAttention, peak: float, hbm: float) -> float:
    """Seconds the model gives one prefill-attention point (one layer, whole GPU)."""
    per_seq_bytes = attention_kv_bytes(p) / p.batch
    per_seq_flops = prefill_attention_flops(p) / p.batch
    memory = per_seq_bytes / (hbm * eff.bandwidth_efficiency)
    compute = per_seq_flops / (peak * eff.flops_efficiency(p.length))
    return eff.latency_s + p.batch * max(memory, compute)


def predict_decode_attention(eff: OperatorEfficiency, p: AicAttention, hbm: float) -> float:
    """Seconds the model gives one decode-attention point (one layer, whole GPU)."""
    return eff.latency_s + attention_kv_bytes(p) / (hbm * eff.bandwidth_efficiency)


def fit_decode_attention(points: Sequence[AicAttention], hbm: float, source: str) -> OperatorEfficiency:
    """Fit decode attention's ``latency`` and KV-read ``bandwidth_efficiency``. Points whose KV fits in
    L2, or that read faster than the datasheet bandwidth (a KV buffer of exactly the L2's size), are
    skipped: they measure the cache, not HBM."""
    points = [p for p in points if not p.cached_in_l2 and attention_kv_bytes(p) / p.seconds <= hbm]
    measured = [p.seconds for p in points]
    sizes = [attention_kv_bytes(p) / 1e6 for p in points]

    def objective(latency: float, bw: float) -> float:
        e = OperatorEfficiency(latency, bw, 0.0, 0.0, source)
        return balanced_error([predict_decode_attention(e, p, hbm) for p in points], measured, sizes)

    _, (latency, bw) = grid_search(objective, [_frange(0.0, 40e-6, 1e-6), _frange(0.3, 1.0, 0.02)])
    e = OperatorEfficiency(latency, bw, 0.0, 0.0, source)
    error = median_abs_rel_error([predict_decode_attention(e, p, hbm) for p in points], measured)
    return OperatorEfficiency(latency, bw, 0.0, 0.0, source, error)


def fit_prefill_attention(points: Sequence[AicAttention], peak: float, hbm: float,
                          bandwidth_efficiency: float, source: str) -> OperatorEfficiency:
    """Fit prefill attention's ``latency``, ``peak_efficiency`` and ``half`` (sequence tokens); its KV
    reads move at ``bandwidth_efficiency`` (decode attention's, fitted first)."""
    measured = [p.seconds for p in points]
    sizes = [p.batch * p.length for p in points]

    def objective(latency: float, peak_eff: float, half: float) -> float:
        e = OperatorEfficiency(latency, bandwidth_efficiency, peak_eff, half, source)
        return balanced_error([predict_prefill_attention(e, p, peak, hbm) for p in points], measured, sizes)

    _, (latency, peak_eff, half) = grid_search(
        objective, [_frange(0.0, 40e-6, 4e-6), _frange(0.2, 1.0, 0.04), _log_range(16.0, 16384.0, 16)])
    e = OperatorEfficiency(latency, bandwidth_efficiency, peak_eff, half, source)
    error = median_abs_rel_error([predict_prefill_attention(e, p, peak, hbm) for p in points], measured)
    return OperatorEfficiency(latency, bandwidth_efficiency, peak_eff, half, source, error)


# ---------------------------------------------------------------------------------------------------
# MoE: one layer's routed experts (aiconfigurator's SGLang fused-MoE table)

#: MoE dtypes whose grouped GEMMs run fp8 tensor-core math (their peak is the fp8 dense peak).
MOE_FP8_MATH = ("fp8_block", "w4a8_mxfp4_mxfp8")

#: Points with at most this many tokens fit the MoE's latency and weight-read bandwidth.
MOE_MEMORY_TOKENS = 64


def moe_bytes(p: AicMoe) -> float:
    """Bytes one MoE point moves: the touched experts' weights (``touched x 3 x hidden x width``) plus the
    16-bit activations of every routed row (in and out of both GEMMs: ``2 x (2 hidden + 3 width)``)."""
    routed = p.tokens * p.top_k
    return (p.touched * 3 * p.hidden * p.width * MOE_WEIGHT_BYTES[p.dtype]
            + BF16 * routed * (2 * p.hidden + 3 * p.width))


def moe_flops(p: AicMoe) -> float:
    """FLOPs of one MoE point: ``2 x tokens x top_k x 3 x hidden x width``."""
    return 2.0 * p.tokens * p.top_k * 3 * p.hidden * p.width


def predict_moe(eff: OperatorEfficiency, p: AicMoe, peak: float, hbm: float) -> float:
    """Seconds the model gives one MoE point on the whole GPU (``peak``: the dense FLOP/s of its math,
    :data:`MOE_FP8_MATH`); the GEMM efficiency's size is the rows per touched expert."""
    return eff.time_s(moe_bytes(p), moe_flops(p), p.tokens * p.top_k / p.touched, hbm, peak)


#: A point whose touched weights fit in L2 is kept when reading them at the datasheet HBM bandwidth takes at
#: most this share of its measured time: a cache can then move it by at most that much.
MOE_L2_SHARE = 0.1


def moe_weight_bytes(p: AicMoe) -> float:
    """Bytes of the experts a MoE point touches: ``touched x 3 x hidden x width x bytes per weight``."""
    return p.touched * 3 * p.hidden * p.width * MOE_WEIGHT_BYTES[p.dtype]


def moe_fit_points(points: Sequence[AicMoe], hbm: float) -> list[AicMoe]:
    """The points an MoE fit takes on a GPU of ``hbm`` datasheet bytes/s: weights beyond L2, or within it
    but read at ``hbm`` in at most :data:`MOE_L2_SHARE` of the measured time (the collector replays the
    same experts, which may then come from L2); for grouped-routing models
    (:data:`~pdmux_cli.costmodel.measurements.AIC_MOE_MODELS`) 1 token only."""
    return [p for p in points
            if (not p.weights_fit_l2 or moe_weight_bytes(p) / hbm <= MOE_L2_SHARE * p.seconds)
            and (p.tokens == 1 or not AIC_MOE_MODELS[p.model][4])]


def _class_error(classes: Sequence[Sequence[int]]) -> Callable[[Sequence[float], Sequence[float]], float]:
    """:func:`balanced_error` with the size classes computed once: ``classes`` lists each class's point
    indices; the returned function takes ``(predicted, measured)``."""

    def error(predicted: Sequence[float], measured: Sequence[float]) -> float:
        return statistics.fmean(statistics.median(abs(predicted[i] - measured[i]) / measured[i]
                                                  for i in members)
                                for members in classes)

    return error


def _size_classes(sizes: Sequence[float]) -> list[list[int]]:
    """Point indices by power-of-two class of ``sizes`` (as :func:`balanced_error` groups them)."""
    classes: dict[int, list[int]] = {}
    for i, size in enumerate(sizes):
        classes.setdefault(int(math.log2(max(size, 1.0))), []).append(i)
    return list(classes.values())


def fit_moe(points: Sequence[AicMoe], peak: float, hbm: float, source: str) -> OperatorEfficiency:
    """Fit one MoE kernel's ``latency`` (the layer's fixed time: routing, alignment, launches and tails of
    its kernels) and weight-read ``bandwidth_efficiency`` on the points with at most
    :data:`MOE_MEMORY_TOKENS` tokens, every weight-size class (powers of two of the touched weights' MB:
    TP 1's large experts and TP 8's small ones) counting the same; then ``peak_efficiency`` and ``half``
    (rows per touched expert) on every point, each token class counting the same (the objectives are
    :func:`balanced_error`'s). ``points`` as :func:`moe_fit_points` keeps them; raises :class:`ValueError`
    when there are none."""
    if not points:
        raise ValueError("no MoE points to fit")
    # seconds at the datasheet bandwidth, at the dense peak, rows per touched expert: predict_moe, precomputed
    memory_s = [moe_bytes(p) / hbm for p in points]
    compute_s = [moe_flops(p) / peak for p in points]
    rows = [p.tokens * p.top_k / p.touched for p in points]
    measured = [p.seconds for p in points]
    small = [i for i, p in enumerate(points) if p.tokens <= MOE_MEMORY_TOKENS] or list(range(len(points)))
    small_meas = [measured[i] for i in small]
    small_error = _class_error(_size_classes([moe_weight_bytes(points[i]) / 1e6 for i in small]))

    def memory_objective(latency: float, bw: float) -> float:
        return small_error([latency + memory_s[i] / bw for i in small], small_meas)

    _, (latency, bw) = grid_search(memory_objective, [_frange(0.0, 80e-6, 4e-6), _frange(0.1, 1.0, 0.05)])
    error = _class_error(_size_classes([p.tokens for p in points]))

    def objective(peak_eff: float, half: float) -> float:
        return error([latency + max(m / bw, c * (r + half) / (peak_eff * r))
                      for m, c, r in zip(memory_s, compute_s, rows, strict=True)], measured)

    _, (peak_eff, half) = grid_search(objective, [_frange(0.05, 1.0, 0.05), _log_range(1.0, 4096.0, 13)])
    e = OperatorEfficiency(latency, bw, peak_eff, half, source)
    median = median_abs_rel_error([predict_moe(e, p, peak, hbm) for p in points], measured)
    return OperatorEfficiency(latency, bw, peak_eff, half, source, median)


# ---------------------------------------------------------------------------------------------------
# element-wise ops (Vidur)


def vidur_elementwise_bytes_per_token(layer: VidurLayer) -> float:
    """Bytes per token of one layer's small ops for a Vidur row's (sharded) shapes, as
    :func:`pdmux_cli.costmodel.operators.step_shapes` counts them for a dense model."""
    h, d, t = layer.hidden, layer.hidden // layer.heads, layer.tp
    rope = (layer.heads + layer.kv_heads) * d // t
    act = layer.intermediate // t
    return float((4 * h + 2 * rope + 3 * act + 6 * h) * BF16)


def vidur_elementwise_seconds(layer: VidurLayer) -> float:
    """Measured seconds of one layer's small ops (Vidur's norms, RoPE, activation and add)."""
    return sum(layer.ops[op] for op in VidurLayer.ELEMENTWISE)


def predict_elementwise(eff: OperatorEfficiency, layer: VidurLayer, hbm: float) -> float:
    """Seconds the model gives one layer's small ops over the row's tokens."""
    return eff.latency_s + layer.tokens * vidur_elementwise_bytes_per_token(layer) / (
        hbm * eff.bandwidth_efficiency)


def fit_elementwise(layers: Sequence[VidurLayer], hbm: float, source: str) -> OperatorEfficiency:
    """Fit the per-layer ``latency`` (all small kernels of a layer) and ``bandwidth_efficiency``."""
    measured = [vidur_elementwise_seconds(x) for x in layers]
    sizes = [x.tokens for x in layers]

    def objective(latency: float, bw: float) -> float:
        e = OperatorEfficiency(latency, bw, 0.0, 0.0, source)
        return balanced_error([predict_elementwise(e, x, hbm) for x in layers], measured, sizes)

    _, (latency, bw) = grid_search(objective, [_frange(0.0, 60e-6, 2e-6), _frange(0.1, 1.0, 0.04)])
    e = OperatorEfficiency(latency, bw, 0.0, 0.0, source)
    error = median_abs_rel_error([predict_elementwise(e, x, hbm) for x in layers], measured)
    return OperatorEfficiency(latency, bw, 0.0, 0.0, source, error)


# ---------------------------------------------------------------------------------------------------
# SM partitions (NanoFlow, A100)


def fit_bandwidth_curve(points: Sequence[tuple[int, int, int, float]], total_sms: int) -> tuple[
    float, float, float]:
    """Fit the soft-minimum bandwidth curve to SM sweeps ``(sms, batch, seqlen, bytes/s)``, each sweep
    normalised to its own whole-GPU rate. Returns ``(sharpness, s_sat in SMs, median error)``."""
    sweeps: dict[tuple[int, int], dict[int, float]] = {}
    for sms, batch, seqlen, rate in points:
        sweeps.setdefault((batch, seqlen), {})[sms] = rate
    shares = [(sms, rate / sweep[total_sms]) for sweep in sweeps.values() for sms, rate in sweep.items()]
    measured = [y for _, y in shares]

    def objective(p: float, knee: float) -> float:
        full = _soft_min(total_sms / knee, p)
        return median_abs_rel_error([_soft_min(s / knee, p) / full for s, _ in shares], measured)

    error, (p, knee) = grid_search(objective, [_frange(0.6, 6.0, 0.1), _frange(5.0, 2.0 * total_sms, 1.0)])
    full = _soft_min(total_sms / knee, p)
    s_sat = next(s / 10 for s in range(10, 10 * total_sms + 1) if _soft_min(s / 10 / knee, p) / full >= 0.95)
    return p, s_sat, error


def interference_table(points: Sequence[tuple[float, float]],
                       curve: BandwidthCurve) -> list[tuple[float, float]]:
    """Decode's co-run bandwidth factor by its SM share: NanoFlow's ``P`` (next to a GEMM, relative to
    whole-GPU solo) divided by the solo share of ``curve`` at that share; factors above 1 (the solo
    curve's own error at few SMs) are dropped; made non-decreasing in share (pool-adjacent violators),
    so that more SMs never cost decode bandwidth."""
    raw = [(r, p / curve.share(r * curve.total_sms)) for r, p in sorted(points)]
    kept = [(r, f) for r, f in raw if f <= 1.0]
    blocks: list[list[float]] = []  # [sum, count, first share index]
    for i, (_, f) in enumerate(kept):
        blocks.append([f, 1, i])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            last = blocks.pop()
            blocks[-1][0] += last[0]
            blocks[-1][1] += last[1]
    out = []
    for total, count, start in blocks:
        for j in range(int(count)):
            out.append((kept[int(start) + j][0], round(total / count, 3)))
    return out


# ---------------------------------------------------------------------------------------------------
# all-reduce (Vidur NCCL, aiconfigurator's SGLang custom all-reduce)


def predict_allreduce(link: LinkFit, p: AllReduce, link_bytes_per_s: float) -> float:
    """Seconds the model gives one measured all-reduce."""
    return link.time_s(p.nbytes, p.ranks, link_bytes_per_s)


def fit_allreduce(points: Sequence[AllReduce], link_bytes_per_s: float, source: str) -> LinkFit:
    """Fit ``latency`` and ``bandwidth_efficiency`` of one kernel on one GPU kind and rank count, every
    size class (powers of two of the bytes) counting the same."""
    measured = [p.seconds for p in points]
    sizes = [p.nbytes for p in points]

    def objective(latency: float, eff: float) -> float:
        link = LinkFit(latency, eff)
        return balanced_error([predict_allreduce(link, p, link_bytes_per_s) for p in points], measured, sizes)

    _, (latency, eff) = grid_search(objective, [_frange(0.0, 150e-6, 2e-6), _frange(0.02, 1.2, 0.02)])
    link = LinkFit(latency, eff)
    error = median_abs_rel_error([predict_allreduce(link, p, link_bytes_per_s) for p in points], measured)
    return LinkFit(latency, eff, error, len(points), source)


def allreduce_points(aic: Sequence[AllReduce], vidur: Sequence[AllReduce], ranks: int,
                     interconnect: str) -> tuple[list[AllReduce], list[AllReduce], str]:
    """The points each kernel's fit takes for ``ranks`` GPUs of one GPU kind: ``(custom, nccl, what the
    nccl points are)``. Custom: aiconfigurator's CUDA-graph custom all-reduce (eager where only that was
    measured) up to 8 MiB, only where SGLang runs it (NVLink, or 2 GPUs). NCCL: Vidur's points above
    8 MiB where Vidur measured the GPU, else the custom all-reduce's above 8 MiB."""
    mine = [p for p in aic if p.ranks == ranks]
    kernel = "custom-graph" if any(p.kernel == "custom-graph" for p in mine) else "custom-eager"
    runs_custom = interconnect == "nvlink" or ranks == 2
    custom = [p for p in mine if p.kernel == kernel and p.nbytes <= CUSTOM_MAX_BYTES] if runs_custom else []
    nccl = [p for p in vidur if p.ranks == ranks and p.nbytes > CUSTOM_MAX_BYTES]
    what = "nccl"
    if not nccl and runs_custom:
        nccl = [p for p in mine if p.kernel == kernel and p.nbytes > CUSTOM_MAX_BYTES]
        what = kernel
    return custom, nccl, what
