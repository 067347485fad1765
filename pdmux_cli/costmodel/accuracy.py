"""How far the shipped roofline model is from the public measurements (``pdmux accuracy``).

Every measured point of ``profiles/measurements/`` is predicted with the shipped efficiency profiles
and GPU datasheet figures; each term reports the median and p90 absolute relative error and the worst
point. Where a term's constants were fitted to the same points, the prediction for a model uses a fit
that left that model out (leave-one-model-out, "LOMO"); terms fitted elsewhere are out-of-sample;
terms whose table *is* the points are marked in-sample.

Terms:

- ``decode step`` / ``prefill step`` (Vidur, H100 and A100): one layer's GEMMs (QKV, O, gate+up, down)
  plus its element-wise ops at <= 256 tokens (a decode batch) and >= 512 tokens (a prefill or chunk).
  GEMM constants come from aiconfigurator's tables (out-of-sample for Vidur); the element-wise ones were
  fitted to Vidur, so each model is predicted with a fit on the other models of its GPU (LOMO).
  Vidur has no attention times: attention is its own term.
- ``GEMM`` / ``prefill attention`` / ``decode attention`` (aiconfigurator, SGLang kernels, every GPU
  shipped; A100's decode attention from vLLM's FA2 table, :data:`measurements.DECODE_ATTENTION_TABLE`):
  the fitted operator against the points it was fitted to (in-sample: how well the curve's shape fits);
  likewise ``GEMM, fp8 per-tensor`` and ``GEMM, fp8 block-scaled`` (the fp8 sections against the fp8
  dense peak, where measured) and ``decode attention, fp8 KV``;
- ``A100 decode attention``: the A100 share of ``decode attention`` (in-sample, vLLM's table);
  ``A100 decode attention vs SGLang FA-backend table`` / ``vs NanoFlow kernel``: the same fit against
  the A100 measurements it was not fitted to (out-of-sample);
- ``bandwidth vs SMs`` (NanoFlow A100): each of the three sweeps predicted by a curve fitted to the
  other two (LOMO).
- ``GEMM vs SMs`` (NanoFlow A100): FLOP/s share on ``s`` SMs by the equivalent-tokens rule with A100's
  GEMM efficiency (out-of-sample).
- ``interference`` (NanoFlow A100): decode's throughput next to a GEMM, the fitted solo curve times the
  interference table (in-sample: the table is made from these points).
- ``all-reduce, SGLang custom (<= 8 MiB)`` (aiconfigurator, every GPU and GPU count where SGLang runs
  its custom all-reduce) and ``all-reduce, NCCL (> 8 MiB)`` (Vidur, DGX H100 and A100, 2/4/8 GPUs):
  the fitted collectives (:mod:`pdmux_cli.costmodel.collectives`) against the points they were fitted
  to (in-sample);
- ``all-reduce > 8 MiB from custom-AR fit``: Vidur's NCCL points predicted by constants fitted to
  aiconfigurator's custom all-reduce above 8 MiB, as every GPU Vidur did not measure is modelled
  (out-of-sample);
- ``decode vs SMs`` / ``prefill vs SMs`` / ``small prefill`` (SGLang's green-context tables, H800 and
  A100; and the A100 8B tables, kept out of every fit): normalised shapes of a whole decode step and a
  whole prefill against SMs and tokens, predicted with the roofline model of each table's setup
  (:mod:`pdmux_cli.costmodel.sglang_greenctx`);
- ``MoE`` (aiconfigurator's SGLang fused-MoE tables: one layer's routed experts, the shipped MoE models'
  shapes at TP 1-8, balanced routing): each model's points predicted by the fit of its GPU, kernel and expert
  dtype on the other models (LOMO; sections fitted to one model only are left out); ``MoE, shipped fits``: the
  shipped ``moe`` sections against the points they were fitted to (in-sample); ``MoE, weights within L2``:
  the points the fits leave out because the touched experts fit in L2 and their weight reads are not
  negligible (the collector replays the same experts), predicted by the shipped fits (out-of-sample: the
  decode-sized points of TP 4-8 are among them);
- ``chapter: ...``: the chapter's model on the Vidur layers, for comparison.

Pure Python; about a second.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..catalog.hardware import find_gpu
from . import fit, measurements
from . import sglang_greenctx as greenctx
from .collectives import CUSTOM_MAX_BYTES, load_allreduce_fits
from .efficiency import load_common, load_profiles
from .partitions import BandwidthCurve

#: Decode-sized and prefill-sized token counts of the step terms.
DECODE_MAX_TOKENS = 256
PREFILL_MIN_TOKENS = 512


@dataclass(frozen=True)
class Point:
    """One measured point and its prediction (seconds or a share); ``what`` describes it."""

    what: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        """Signed relative error, ``(predicted - measured) / measured``."""
        return (self.predicted - self.measured) / self.measured


@dataclass(frozen=True)
class Term:
    """One line of the report: ``term`` name, ``data`` source, ``method`` (LOMO / out-of-sample /
    in-sample), the points, and their error statistics (fractions: 0.05 = 5%)."""

    term: str
    data: str
    method: str
    points: tuple[Point, ...]

    @property
    def median_abs_error(self) -> float:
        return statistics.median(abs(p.error) for p in self.points) if self.points else math.nan

    @property
    def p90_abs_error(self) -> float:
        if not self.points:
            return math.nan
        errors = sorted(abs(p.error) for p in self.points)
        return errors[max(0, math.ceil(0.9 * len(errors)) - 1)]

    @property
    def median_error(self) -> float:
        """Median signed error (> 0: the model predicts too long or too much)."""
        return statistics.median(p.error for p in self.points) if self.points else math.nan

    @property
    def worst(self) -> Point | None:
        return max(self.points, key=lambda p: abs(p.error)) if self.points else None


def _profiles() -> dict[str, object]:
    return {p.fitted_on: p for p in load_profiles()}


def _vidur_steps() -> tuple[Term, Term]:
    profiles = _profiles()
    layers = measurements.vidur_layers()
    decode: list[Point] = []
    prefill: list[Point] = []
    for gpu_key in sorted({x.gpu for x in layers}):
        gpu = find_gpu(gpu_key)
        peak, hbm = gpu.dense_flops("bf16"), gpu.hbm_bytes_per_s
        gemm = profiles[gpu_key].gemm
        rows = [x for x in layers if x.gpu == gpu_key]
        for model in sorted({x.model for x in rows}):
            others = [x for x in rows if x.model != model]
            elementwise = fit.fit_elementwise(others, hbm, "LOMO")
            for x in (x for x in rows if x.model == model):
                measured = sum(x.ops[op] for op in (*x.GEMMS, *x.ELEMENTWISE))
                predicted = sum(fit.predict_gemm(gemm, p, peak, hbm) for p in fit.gemm_points([x]))
                predicted += fit.predict_elementwise(elementwise, x, hbm)
                point = Point(f"{gpu_key} {model} TP{x.tp}, {x.tokens} tokens", measured, predicted)
                if x.tokens <= DECODE_MAX_TOKENS:
                    decode.append(point)
                elif x.tokens >= PREFILL_MIN_TOKENS:
                    prefill.append(point)
    data = "Vidur (H100, A100): one layer's 4 GEMMs + norms, RoPE, activation, add"
    method = "LOMO"
    return (Term(f"decode step (<= {DECODE_MAX_TOKENS} tokens)", data, method, tuple(decode)),
            Term(f"prefill step (>= {PREFILL_MIN_TOKENS} tokens)", data, method, tuple(prefill)))


def _chapter_steps() -> tuple[Term, Term]:
    """The chapter's model on the same Vidur layers, for comparison: weights at 0.85 of datasheet
    bandwidth, FLOPs at 0.5 of dense peak, the larger of the two per step, no small ops."""
    decode: list[Point] = []
    prefill: list[Point] = []
    for x in measurements.vidur_layers():
        gpu = find_gpu(x.gpu)
        peak, hbm = gpu.dense_flops("bf16"), gpu.hbm_bytes_per_s
        points = fit.gemm_points([x])
        predicted = max(sum(2.0 * p.k * p.n for p in points) / (0.85 * hbm),
                        sum(p.flops() for p in points) / (0.5 * peak))
        measured = sum(x.ops[op] for op in (*x.GEMMS, *x.ELEMENTWISE))
        point = Point(f"{x.gpu} {x.model} TP{x.tp}, {x.tokens} tokens", measured, predicted)
        if x.tokens <= DECODE_MAX_TOKENS:
            decode.append(point)
        elif x.tokens >= PREFILL_MIN_TOKENS:
            prefill.append(point)
    data = "Vidur (H100, A100), the chapter's model (--cost-model chapter), for comparison"
    return (Term(f"chapter: decode step (<= {DECODE_MAX_TOKENS})", data, "out-of-sample", tuple(decode)),
            Term(f"chapter: prefill step (>= {PREFILL_MIN_TOKENS})", data, "out-of-sample", tuple(prefill)))


def _decode_point(gpu_key: str, p: measurements.AicAttention, eff: object, hbm: float,
                  table: str = "") -> Point:
    return Point(f"{gpu_key} decode attention{table} {p.heads}/{p.kv_heads} heads, {p.kv_dtype} KV, "
                 f"{p.batch} x {p.length} tokens", p.seconds, fit.predict_decode_attention(eff, p, hbm))


def _hbm_points(points: list[measurements.AicAttention], hbm: float) -> list[measurements.AicAttention]:
    """Decode points that measure HBM: KV beyond L2 and read no faster than the datasheet bandwidth."""
    return [p for p in points if not p.cached_in_l2 and fit.attention_kv_bytes(p) / p.seconds <= hbm]


def _aic_terms() -> list[Term]:
    profiles = _profiles()
    gemm: list[Point] = []
    fp8: dict[str, list[Point]] = {"gemm_fp8": [], "gemm_fp8_block": []}
    pre: list[Point] = []
    dec: list[Point] = []
    dec_fp8: list[Point] = []
    for gpu_key in measurements.aic_gpus():
        profile = profiles.get(gpu_key)
        if profile is None:
            continue
        gpu = find_gpu(gpu_key)
        peak, hbm = gpu.dense_flops("bf16"), gpu.hbm_bytes_per_s
        for p in fit.gemm_points(measurements.aic_gemms(gpu_key)):
            gemm.append(Point(f"{gpu_key} GEMM {p.m}x{p.k}x{p.n}", p.seconds,
                              fit.predict_gemm(profile.gemm, p, peak, hbm)))
        for section, dtype in (("gemm_fp8", "fp8"), ("gemm_fp8_block", "fp8_block")):
            eff = getattr(profile, section)
            if eff is None:
                continue
            for p in fit.gemm_points(measurements.aic_gemms(gpu_key, dtype)):
                fp8[section].append(Point(f"{gpu_key} {dtype} GEMM {p.m}x{p.k}x{p.n}", p.seconds,
                                          fit.predict_gemm(eff, p, gpu.dense_flops("fp8"), hbm)))
        for p in measurements.aic_attention(gpu_key, "prefill"):
            pre.append(Point(f"{gpu_key} prefill attention {p.heads}/{p.kv_heads} heads, {p.batch} x "
                             f"{p.length} tokens",
                             p.seconds,
                             fit.predict_prefill_attention(profile.prefill_attention, p, peak, hbm)))
        table = measurements.decode_attention_table(gpu_key)
        label = "" if table == "sglang" else f" ({table} table)"
        for p in _hbm_points(measurements.aic_attention(gpu_key, "decode", backend=table), hbm):
            dec.append(_decode_point(gpu_key, p, profile.decode_attention, hbm, label))
        if profile.decode_attention_fp8_kv is not None:
            for p in _hbm_points(measurements.aic_attention(gpu_key, "decode", "fp8"), hbm):
                dec_fp8.append(_decode_point(gpu_key, p, profile.decode_attention_fp8_kv, hbm))
    data = "aiconfigurator-core 0.12.0 SGLang tables, every GPU shipped"
    fp8_data = ("aiconfigurator-core 0.12.0 SGLang tables, GPUs with fp8 tensor cores, against the fp8 dense "
                "peak")
    return [Term("GEMM", data, "in-sample", tuple(gemm)),
            Term("GEMM, fp8 per-tensor", fp8_data + " (sgl-kernel fp8_scaled_mm)", "in-sample",
                 tuple(fp8["gemm_fp8"])),
            Term("GEMM, fp8 block-scaled",
                 fp8_data.replace("GPUs with fp8 tensor cores", "Hopper and Blackwell")
                 + " (DeepGEMM, 128x128 blocks, activation quantization included)", "in-sample",
                 tuple(fp8["gemm_fp8_block"])),
            Term("prefill attention", data, "in-sample", tuple(pre)),
            Term("decode attention", data + " (A100: vLLM's FA2 table; KV beyond L2)", "in-sample",
                 tuple(dec)),
            Term("decode attention, fp8 KV",
                 "aiconfigurator-core 0.12.0 SGLang tables, GPUs that measured an fp8 KV "
                 "cache (KV beyond L2)", "in-sample", tuple(dec_fp8))]


def _a100_decode_terms() -> list[Term]:
    """A100 decode attention, fitted to vLLM's FA2 table, against the two other A100 measurements: SGLang's
    FlashAttentionBackend table (not SGLang's A100 default, FlashInfer) and NanoFlow's decode kernel on all
    108 SMs (its SM sweeps' whole-GPU points)."""
    key = "a100-sxm-80gb"
    eff = _profiles()[key].decode_attention
    hbm = find_gpu(key).hbm_bytes_per_s
    table = measurements.decode_attention_table(key)
    fitted = [_decode_point(key, p, eff, hbm, f" ({table} table)")
              for p in _hbm_points(measurements.aic_attention(key, "decode", backend=table), hbm)]
    sglang = [_decode_point(key, p, eff, hbm, " (SGLang FlashAttentionBackend table)")
              for p in _hbm_points(measurements.aic_attention(key, "decode"), hbm)]
    nanoflow = []
    for sms, batch, seqlen, rate in measurements.nanoflow_bandwidth():
        if sms != 108:
            continue
        point = measurements.AicAttention(key, "decode", batch, seqlen, 32, 32, 128, "fp16", 0.0)
        kv = fit.attention_kv_bytes(point)
        nanoflow.append(Point(f"A100 NanoFlow decode kernel, batch {batch} x {seqlen} tokens, 32 KV heads, "
                              "108 SMs",
                              kv / rate, fit.predict_decode_attention(eff, point, hbm)))
    return [Term("A100 decode attention",
                 "aiconfigurator-core 0.12.0 A100 vLLM table (FA2 paged decode), the points "
                 "A100's decode attention is fitted to", "in-sample", tuple(fitted)),
            Term("A100 decode attention vs SGLang FA-backend table",
                 "aiconfigurator-core 0.12.0 A100 SGLang table (FlashAttentionBackend, which SGLang does not "
                 "pick on an A100) predicted by the fit to vLLM's FA2 table", "out-of-sample", tuple(sglang)),
            Term("A100 decode attention vs NanoFlow kernel",
                 "NanoFlow's A100 decode-attention kernel on all 108 SMs (its SM sweeps' whole-GPU points)",
                 "out-of-sample", tuple(nanoflow))]


def _nanoflow_terms() -> list[Term]:
    total = 108
    bw_points = measurements.nanoflow_bandwidth()
    sweeps = sorted({(b, s) for _, b, s, _ in bw_points})
    bandwidth: list[Point] = []
    for sweep in sweeps:
        others = [p for p in bw_points if (p[1], p[2]) != sweep]
        sharpness, s_sat, _ = fit.fit_bandwidth_curve(others, total)
        curve = BandwidthCurve(total, s_sat, sharpness)
        mine = {sms: rate for sms, b, s, rate in bw_points if (b, s) == sweep}
        for sms, rate in sorted(mine.items()):
            if sms == total:
                continue  # the normalisation point
            bandwidth.append(Point(f"A100 decode attention batch {sweep[0]} x {sweep[1]}, {sms} SMs",
                                   rate / mine[total], curve.share(sms)))
    partitions, _ = load_common()
    curve, _ = partitions.bandwidth_curve(total, find_gpu("a100-sxm-80gb").hbm_bytes_per_s, (8, 0))
    interference = [Point(f"A100 memory-bound kernel on {r:.0%} of the SMs next to a GEMM", p,
                          curve.share(r * total) * partitions.interference.decode_bandwidth_factor(r))
                    for r, p in measurements.nanoflow_interference()]
    a100 = _profiles()["a100-sxm-80gb"].gemm
    gemm_points = measurements.nanoflow_gemm()
    full = {(m, n, k): f for sms, m, n, k, f in gemm_points if sms == total}

    def share(m: int, sms: int) -> float:
        return sms / total * a100.flops_efficiency(m * total / sms) / a100.flops_efficiency(m)

    gemm_sms = [Point(f"A100 GEMM {m}x{k}x{n} on {sms} SMs", f / full[(m, n, k)], share(m, sms))
                for sms, m, n, k, f in gemm_points if sms != total]
    data = "NanoFlow, A100 (108 SMs)"
    return [Term("bandwidth vs SMs", data + ": 3 decode-attention sweeps", "LOMO", tuple(bandwidth)),
            Term("GEMM vs SMs", data + ": a 640x8192x1024 GEMM", "out-of-sample", tuple(gemm_sms)),
            Term("interference", data + ": gemv next to a GEMM", "in-sample", tuple(interference))]


def _allreduce_terms() -> list[Term]:
    fits = {f.gpu: f for f in load_allreduce_fits()}
    vidur = measurements.vidur_allreduce()
    custom: list[Point] = []
    nccl: list[Point] = []
    transfer: list[Point] = []
    for gpu_key in measurements.aic_gpus():
        mine = fits.get(gpu_key)
        if mine is None:
            continue
        gpu = find_gpu(gpu_key)
        link = gpu.interconnect_bytes_per_s
        aic = measurements.aic_allreduce(gpu_key)
        their_vidur = [p for p in vidur if p.gpu == gpu_key]
        for n, (custom_fit, nccl_fit) in sorted(mine.ranks.items()):
            custom_pts, nccl_pts, what = fit.allreduce_points(aic, their_vidur, n, gpu.interconnect)
            if custom_fit is not None:
                custom += [Point(f"{gpu_key} custom all-reduce, {n} GPUs, {p.nbytes} B", p.seconds,
                                 fit.predict_allreduce(custom_fit, p, link)) for p in custom_pts]
            if what != "nccl":
                continue
            nccl += [Point(f"{gpu_key} NCCL all-reduce, {n} GPUs, {p.nbytes} B", p.seconds,
                           fit.predict_allreduce(nccl_fit, p, link)) for p in nccl_pts]
            stand_in_pts = fit.allreduce_points(aic, [], n, gpu.interconnect)[1]
            if stand_in_pts:
                stand_in = fit.fit_allreduce(stand_in_pts, link, "accuracy: custom all-reduce > 8 MiB")
                transfer += [Point(f"{gpu_key} NCCL all-reduce, {n} GPUs, {p.nbytes} B (custom-AR fit)",
                                   p.seconds, fit.predict_allreduce(stand_in, p, link)) for p in nccl_pts]
    mib = CUSTOM_MAX_BYTES // (1024 * 1024)
    return [Term(f"all-reduce, SGLang custom (<= {mib} MiB)",
                 "aiconfigurator-core 0.12.0: SGLang's custom all-reduce in a CUDA graph, every GPU shipped, "
                 "2-16 GPUs",
                 "in-sample", tuple(custom)),
            Term(f"all-reduce, NCCL (> {mib} MiB)",
                 "Vidur: NCCL all-reduce on one DGX H100 / A100 node, 2/4/8 GPUs", "in-sample", tuple(nccl)),
            Term(f"all-reduce > {mib} MiB from custom-AR fit",
                 "Vidur's NCCL points predicted from aiconfigurator's custom all-reduce above 8 MiB (how "
                 "GPUs without an NCCL measurement are modelled)", "out-of-sample", tuple(transfer))]


def _moe_peak(gpu_key: str, dtype: str) -> float:
    gpu = find_gpu(gpu_key)
    return gpu.dense_flops("fp8" if dtype in fit.MOE_FP8_MATH and gpu.fp8_dense_flops else "bf16")


def _moe_point(p: measurements.AicMoe, eff: object, peak: float, hbm: float, note: str = "") -> Point:
    return Point(f"{p.gpu} MoE {p.kernel}/{p.dtype} {p.model} TP{p.tp}, {p.tokens} tokens{note}", p.seconds,
                 fit.predict_moe(eff, p, peak, hbm))


def _moe_terms() -> list[Term]:
    """The MoE terms (module docstring)."""
    profiles = _profiles()
    lomo: list[Point] = []
    shipped: list[Point] = []
    left_out: list[Point] = []
    for gpu_key in measurements.aic_gpus():
        profile = profiles.get(gpu_key)
        if profile is None:
            continue
        hbm = find_gpu(gpu_key).hbm_bytes_per_s
        every = measurements.aic_moe(gpu_key)
        kept = set(fit.moe_fit_points(every, hbm))
        groups: dict[tuple[str, str], list[measurements.AicMoe]] = {}
        for p in every:
            groups.setdefault((p.kernel, p.dtype), []).append(p)
        for (kernel, dtype), pts in sorted(groups.items()):
            eff = profile.moe_section(kernel, dtype)
            if eff is None:
                continue
            peak = _moe_peak(gpu_key, dtype)
            fitted = [p for p in pts if p in kept]
            shipped += [_moe_point(p, eff, peak, hbm) for p in fitted]
            left_out += [_moe_point(p, eff, peak, hbm, " (weights in L2)") for p in pts if p not in kept]
            models = sorted({p.model for p in fitted})
            if len(models) < 2:
                continue
            for model in models:
                others = [p for p in fitted if p.model != model]
                other_fit = fit.fit_moe(others, peak, hbm, "LOMO")
                lomo += [_moe_point(p, other_fit, peak, hbm) for p in fitted if p.model == model]
    data = ("aiconfigurator-core 0.12.0 SGLang fused-MoE tables: one layer's routed experts (routing, "
            "grouped GEMMs, activation, combine), the shipped MoE models' shapes, TP 1-8, balanced routing")
    return [Term("MoE", data + "; a model out per GPU, kernel and expert dtype", "LOMO", tuple(lomo)),
            Term("MoE, shipped fits", data + "; the points the shipped moe sections were fitted to",
                 "in-sample", tuple(shipped)),
            Term("MoE, weights within L2", data + "; points left out of the fits (touched weights within L2, "
                 "not latency-bound)", "out-of-sample", tuple(left_out))]


# ---------------------------------------------------------------------------------------------------
# SGLang's green-context tables (the partition curves against whole steps)

#: Green-context term kinds -> their names in the report.
GREENCTX_TERMS = {
    "decode": "decode vs SMs",
    "prefill": "prefill vs SMs",
    "small prefill": "small prefill / 8K tokens",
}


def _greenctx_terms() -> list[Term]:
    """Per kind: the tables the partition constants were fitted to (in-sample,
    :data:`~pdmux_cli.costmodel.sglang_greenctx.FITTED`), the other fit table where it is only a check
    (the A100 decode shapes, out-of-sample), and the A100 8B tables (kept out of every fit,
    out-of-sample); each point predicted with the shipped roofline model of its table's setup."""
    models = {t: greenctx.step_model(t) for t in (*greenctx.FIT_TABLES, *greenctx.CHECK_TABLES)}
    out = []
    for kind, name in GREENCTX_TERMS.items():
        fitted = greenctx.FITTED[kind]
        checked = tuple(t for t in greenctx.FIT_TABLES if t not in fitted)
        groups = [(fitted, "in-sample")] + ([(checked, "out-of-sample")] if checked else [])
        for tables, method in (*groups, (greenctx.CHECK_TABLES, "out-of-sample")):
            label = " + ".join(t.replace("_", " ") for t in tables)
            setups = ", ".join(f"{t} as {greenctx.SETUPS[t].model} TP{greenctx.SETUPS[t].tp}" for t in tables)
            data = ("SGLang green-context tables (sglang 56f74d24 multiplex/predictor.py), normalised "
                    f"shapes: {setups}")
            points = tuple(Point(p.what, p.measured, greenctx.predict(p, models[p.table]))
                           for p in greenctx.shape_points(kind, tables))
            out.append(Term(f"{name} (green ctx, {label})", data, method, points))
    return out


#: What each method means, for output.
METHODS = {
    "LOMO": ("leave-one-model-out: fitted without the model (or sweep) predicted; in the step terms the GEMM "
             "constants come from aiconfigurator's tables, so they are out-of-sample"),
    "out-of-sample": "no constant was fitted to these points",
    "in-sample": "the constants were fitted to these points: how well the curve's shape fits",
    "LOSO": ("leave-one-source-out: each source's runs predicted by serving terms fitted to the other "
             "sources' runs of its SGLang release line (a source: one publisher's campaign, its client and "
             "machines)"),
    "held-out": "runs from sources kept out of every fit: predicted with the shipped terms",
}


def report() -> list[Term]:
    """Every term (module docstring), in a fixed order."""
    return [*_vidur_steps(), *_aic_terms(), *_a100_decode_terms(), *_nanoflow_terms(), *_greenctx_terms(),
            *_allreduce_terms(), *_moe_terms(), *_chapter_steps()]


def term_dict(term: Term) -> dict:
    """A term as JSON: errors as fractions; the worst point with its description."""
    worst = term.worst
    return {
        "term": term.term, "data": term.data, "method": term.method, "method_means": METHODS[term.method],
        "points": len(term.points),
        "median_abs_error": term.median_abs_error, "p90_abs_error": term.p90_abs_error,
        "median_signed_error": term.median_error,
        "worst": None if worst is None else {"what": worst.what, "measured": worst.measured,
                                             "predicted": worst.predicted, "error": worst.error},
    }


__all__ = ["DECODE_MAX_TOKENS", "GREENCTX_TERMS", "METHODS", "PREFILL_MIN_TOKENS", "Point", "Term", "report",
           "term_dict"]
