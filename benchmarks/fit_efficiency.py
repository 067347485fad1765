"""Fit the roofline cost model's efficiencies and write ``profiles/efficiency/*.yaml``.

Inputs (all shipped in ``profiles/measurements/``, see its READMEs for sources and licences):

- aiconfigurator-core 0.12.0's SGLang tables per GPU: GEMMs (bf16) -> ``gemm``; per-tensor fp8 GEMMs
  -> ``gemm_fp8`` and block-scaled fp8 GEMMs (DeepGEMM, activation quantization included) ->
  ``gemm_fp8_block``, each against the fp8 dense peak, where the GPU's table has them; decode attention
  over an fp8 KV cache -> ``decode_attention_fp8_kv`` (where measured); decode attention
  (bf16 KV, points whose KV fits in L2 dropped) -> ``decode_attention`` (A100: aiconfigurator's vLLM
  table, FA2 paged decode, see measurements.DECODE_ATTENTION_TABLE); prefill attention (bf16) ->
  ``prefill_attention`` (its KV reads at the bandwidth of the GPU's SGLang decode table); SGLang's fused MoE
  (one layer's routed experts, per runner and expert dtype, the shipped MoE models' shapes at TP 1-8; points
  whose touched weights fit in L2 dropped unless latency-bound, DeepSeek-V3 at 1 token only) -> ``moe``
  (:func:`fit_moe_sections`);
- Vidur's per-layer small ops (H100, A100) -> ``elementwise`` (H100's for Hopper and Blackwell GPUs,
  A100's for Ampere and Ada, as fractions of each GPU's own datasheet bandwidth);
- NanoFlow's A100 SM sweeps and SGLang's green-context tables (H800, A100; never A100_8B) ->
  ``common.yaml`` ``partitions`` (:func:`fit_partitions`: the bandwidth-vs-SMs curve per SM architecture,
  decode's co-run interference, a prefill pass's fixed time per layer);
- aiconfigurator's SGLang custom all-reduce (every GPU shipped) and Vidur's NCCL all-reduce (DGX H100,
  DGX A100) -> ``allreduce.yaml``: per GPU and GPU count, the custom kernel up to 8 MiB and NCCL above
  (:mod:`pdmux_cli.costmodel.collectives`).

``common.yaml``'s ``cpu`` section holds published kernel-launch figures, not fits (sources in the file); the
scheduler's CPU terms and the request path's delays are in ``serving.yaml`` (``benchmarks/fit_serving.py``).

Usage: ``python benchmarks/fit_efficiency.py [--check]``. ``--check`` fits and compares with the
files on disk instead of writing (exit 1 on a difference). Deterministic; about two minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdmux_cli.costmodel import collectives, fit, measurements
from pdmux_cli.costmodel import sglang_greenctx as greenctx
from pdmux_cli.costmodel.efficiency import FORMAT, OperatorEfficiency, PartitionProfile
from pdmux_cli.costmodel.partitions import BandwidthCurve, BandwidthFamily, Interference
from pdmux_cli.catalog.hardware import find_gpu

OUT = ROOT / "profiles" / "efficiency"
AIC = "aiconfigurator-core 0.12.0 (NVIDIA, Apache-2.0), SGLang tables"

#: Measured GPU -> (GPU profiles that use its efficiencies, compute capabilities it stands in for).
COVERAGE = {
    "h100-sxm": (["h100-sxm", "h100-pcie", "h100-nvl", "h800-sxm", "h20"], ["9"]),
    "h200-sxm": (["h200-sxm", "h200-nvl", "gh200-96gb", "gh200-144gb"], []),
    "b200": (["b200", "b100"], ["10"]),
    "gb200": (["gb200"], []),
    "b300": (["b300"], []),
    "gb300": (["gb300"], []),
    "a100-sxm-80gb": (["a100-sxm-80gb", "a100-sxm-40gb", "a100-pcie-80gb", "a800-sxm-80gb", "a800-pcie-80gb",
                       "a800-pcie-40gb", "a30", "a10", "rtx-3090"], ["8", "7"]),
    "l40s": (["l40s", "l40", "l4", "rtx-4090"], ["8.9"]),
    "rtx-pro-6000": (["rtx-pro-6000", "rtx-5090"], ["12"]),
}

#: Which Vidur GPU's small-op fit a measured GPU takes (by architecture).
ELEMENTWISE_FROM = {"h100-sxm": "h100-sxm", "h200-sxm": "h100-sxm", "b200": "h100-sxm", "gb200": "h100-sxm",
                    "b300": "h100-sxm", "gb300": "h100-sxm", "rtx-pro-6000": "h100-sxm",
                    "a100-sxm-80gb": "a100-sxm-80gb", "l40s": "a100-sxm-80gb"}

CPU = {
    "launch_s": 3.4e-6,
    "kernels_per_layer": 10,
    "eager_launch_s": 2.57e-5,
    "source": (
        "launch_s: host launch gap of an eager decode step, 3.07 ms over 914 kernel launches "
        "(turboderp-org/exllamav3 PR 380); kernels_per_layer: a dense layer's kernels in SGLang "
        "(2 fused add-RMSNorms, QKV, RoPE, KV-cache store, attention, O, gate+up, SiLU-and-mul, down); "
        "eager_launch_s: SGLang's host time per kernel of a dense model's eager forward, Llama-3-8B on an "
        "H100 at batch 1 decoding in 8.23 ms without a CUDA graph against 7.35 ms with one "
        "(sgl-project/sglang PR 1401, bench_latency, flashinfer; the eager step outlasts the GPU's work, so "
        "its 32 x 10 launches take it: 8.23 ms / 320); a MoE model's: serving.yaml; the scheduler's time per "
        "step and per request: serving.yaml"
    ),
}


def _section(e: OperatorEfficiency, flops: bool, points: int) -> dict:
    out = {"latency_s": float(f"{e.latency_s:.4g}"), "bandwidth_efficiency": round(e.bandwidth_efficiency, 4)}
    if flops:
        out["peak_efficiency"] = round(e.peak_efficiency, 4)
        out["half"] = float(f"{e.half:.4g}")
    out["median_error"] = round(e.median_error or 0.0, 4)
    out["points"] = points
    out["source"] = e.source
    return out


#: The fp8 GEMM sections: (file section, aiconfigurator dtype, what it is).
FP8_GEMMS = (("gemm_fp8", "fp8",
              ("per-tensor fp8 GEMMs (sgl-kernel fp8_scaled_mm, per-token activation quantization "
                                 "included), fractions of the fp8 dense peak")),
             ("gemm_fp8_block", "fp8_block",
              ("block-scaled fp8 GEMMs (DeepGEMM, 128x128 weight blocks, per-token-group "
                                             "activation quantization included), fractions of the fp8 dense "
                                             "peak")))


def fit_gpu(gpu_key: str, elementwise: dict[str, tuple[OperatorEfficiency, int]]) -> dict:
    gpu = find_gpu(gpu_key)
    peak, hbm = gpu.dense_flops("bf16"), gpu.hbm_bytes_per_s
    gemm_pts = fit.gemm_points(measurements.aic_gemms(gpu_key, "bf16"))
    gemm = fit.fit_gemm(gemm_pts, peak, hbm, f"{AIC}: {gpu_key} bf16 GEMMs (torch linear)")
    fp8 = {}
    for section, dtype, what in FP8_GEMMS:
        pts = fit.gemm_points(measurements.aic_gemms(gpu_key, dtype))
        if pts and gpu.fp8_dense_flops:
            fp8[section] = (fit.fit_gemm(pts, gpu.dense_flops("fp8"), hbm, f"{AIC}: {gpu_key} {what}"),
                            len(pts))
    sglang_dec_pts = [p for p in measurements.aic_attention(gpu_key, "decode") if not p.cached_in_l2]
    sglang_dec = fit.fit_decode_attention(sglang_dec_pts, hbm,
                                          f"{AIC}: {gpu_key} decode (generation) attention, bf16 KV")
    dec, dec_pts = sglang_dec, sglang_dec_pts
    if gpu_key in measurements.DECODE_ATTENTION_TABLE:
        backend, why = measurements.DECODE_ATTENTION_TABLE[gpu_key]
        dec_pts = [p for p in measurements.aic_attention(gpu_key, "decode", backend=backend)
                   if not p.cached_in_l2]
        dec = fit.fit_decode_attention(dec_pts, hbm,
                                       f"aiconfigurator-core 0.12.0 (NVIDIA, Apache-2.0), {why}: "
                                                     f"{gpu_key} decode (generation) attention, bf16 KV")
    fp8_kv_pts = [p for p in measurements.aic_attention(gpu_key, "decode", "fp8") if not p.cached_in_l2]
    if fp8_kv_pts:
        fp8["decode_attention_fp8_kv"] = (fit.fit_decode_attention(
            fp8_kv_pts, hbm, f"{AIC}: {gpu_key} decode (generation) attention, fp8 KV, bf16 compute"),
            len(fp8_kv_pts))
    pre_pts = measurements.aic_attention(gpu_key, "prefill")
    pre = fit.fit_prefill_attention(pre_pts, peak, hbm, sglang_dec.bandwidth_efficiency,
                                    f"{AIC}: {gpu_key} prefill (context) attention, bf16")
    el, el_points = elementwise[ELEMENTWISE_FROM[gpu_key]]
    applies, families = COVERAGE[gpu_key]
    return {
        "format": FORMAT,
        "fitted_on": gpu_key,
        "applies_to": applies,
        "families": families,
        "fitted_by": "benchmarks/fit_efficiency.py",
        "gemm": _section(gemm, True, len(gemm_pts)),
        "prefill_attention": _section(pre, True, len(pre_pts)),
        "decode_attention": _section(dec, False, len(dec_pts)),
        "elementwise": _section(el, False, el_points),
        **{name: _section(e, name.startswith("gemm"), n) for name, (e, n) in fp8.items()},
        **({"moe": moe} if (moe := fit_moe_sections(gpu_key)) else {}),
    }


def moe_groups(gpu_key: str) -> dict[tuple[str, str], list]:
    """The GPU's MoE fit points (:func:`pdmux_cli.costmodel.fit.moe_fit_points`) by ``(kernel, dtype)``."""
    groups: dict[tuple[str, str], list] = {}
    for p in fit.moe_fit_points(measurements.aic_moe(gpu_key), find_gpu(gpu_key).hbm_bytes_per_s):
        groups.setdefault((p.kernel, p.dtype), []).append(p)
    return groups


def moe_peak(gpu_key: str, dtype: str) -> float:
    """Dense FLOP/s of an MoE dtype's math on a measured GPU (fp8 for :data:`fit.MOE_FP8_MATH`)."""
    gpu = find_gpu(gpu_key)
    return gpu.dense_flops("fp8" if dtype in fit.MOE_FP8_MATH and gpu.fp8_dense_flops else "bf16")


def moe_source(gpu_key: str, kernel: str, dtype: str, models: list[str]) -> str:
    """The ``source`` line of one MoE section."""
    math = "fp8" if dtype in fit.MOE_FP8_MATH else "bf16"
    return (f"{AIC}: {gpu_key} fused MoE, SGLang's {kernel} runner, {dtype} experts ({', '.join(models)}; TP "
            "1-8, balanced routing, weights beyond L2 or latency-bound): routing + grouped GEMMs + "
            "activation + combine of one layer; latency per layer, bandwidth of the touched experts' "
            f"weights, peak as a fraction of the {math} dense peak, half in rows per touched expert")


def fit_moe_sections(gpu_key: str) -> dict:
    """``moe`` of a GPU's efficiency file: one section per ``"<kernel>/<dtype>"`` the GPU's table measured
    (:func:`pdmux_cli.costmodel.fit.fit_moe`), with the models whose shapes it was fitted to."""
    out = {}
    hbm = find_gpu(gpu_key).hbm_bytes_per_s
    for (kernel, dtype), pts in sorted(moe_groups(gpu_key).items()):
        models = sorted({p.model for p in pts})
        e = fit.fit_moe(pts, moe_peak(gpu_key, dtype), hbm, moe_source(gpu_key, kernel, dtype, models))
        section = _section(e, True, len(pts))
        out[f"{kernel}/{dtype}"] = {**{k: v for k, v in section.items() if k != "source"}, "models": models,
                                    "source": section["source"]}
    return out


def fit_elementwise() -> dict[str, tuple[OperatorEfficiency, int]]:
    layers = measurements.vidur_layers()
    out = {}
    for gpu_key in sorted({x.gpu for x in layers}):
        rows = [x for x in layers if x.gpu == gpu_key]
        hbm = find_gpu(gpu_key).hbm_bytes_per_s
        models = ", ".join(sorted({x.model for x in rows}))
        e = fit.fit_elementwise(rows, hbm,
                                f"Vidur (microsoft/vidur 7d47513, MIT) {gpu_key} per-layer norms, RoPE, "
                                            f"activation and add: {models}, TP 1-8")
        out[gpu_key] = (e, len(rows))
    return out


#: SGLang's green-context tables, as every source string names them.
GREENCTX = ("SGLang green-context tables (sgl-project/sglang 56f74d24 "
            "python/sglang/srt/multiplex/predictor.py, Apache-2.0; profiles/measurements/sglang_greenctx/)")
NANOFLOW = "NanoFlow (efeslab/Nanoflow d1bbe277, Apache-2.0)"


def fit_partitions() -> dict:
    """``common.yaml``'s ``partitions``: the bandwidth-vs-SMs family of Ampere (NanoFlow's A100 sweeps, as
    before; SGLang's A100 decode tables agree with it to 3%, so it is checked there, not re-fitted) and of
    Hopper (the H800 decode tables: the Ampere curve read them 8.5% off), NanoFlow's interference over its
    own solo curve, then the prefill fixed time per layer (H800 and A100 prefill shapes). The A100_8B
    tables enter no fit (:mod:`pdmux_cli.costmodel.sglang_greenctx` refuses them)."""
    bw_points = measurements.nanoflow_bandwidth()
    p, s_sat, error = fit.fit_bandwidth_curve(bw_points, 108)
    nanoflow_curve = BandwidthCurve(108, s_sat, p)
    a100 = find_gpu("a100-sxm-80gb")  # NanoFlow's GPU
    knee = nanoflow_curve.knee  # SMs
    ampere = BandwidthFamily(
        "8", round(p, 3), float(f"{a100.hbm_bytes_per_s / knee:.4g}"), "a100-sxm-80gb", round(error, 4),
        f"{NANOFLOW} A100 SXM 108 SMs: bandwidth vs SMs of a decode-attention kernel, 3 sweeps (knee "
        f"{knee:.1f} SMs, S_SAT {s_sat:g}); {GREENCTX}: the A100 decode steps vs SMs check it (pdmux "
        "accuracy, out-of-sample)")
    hopper = greenctx.fit_bandwidth_family(
        "9", "H800",
        f"{GREENCTX}: H800 decode steps vs SMs as {greenctx.SETUPS['H800'].model} "
        f"TP{greenctx.SETUPS['H800'].tp}")
    base = PartitionProfile(families=(ampere, hopper), interference=Interference(()))
    # decode's co-run factor: NanoFlow's co-run throughput over NanoFlow's own solo sweep (the same kernel
    # on the same A100)
    table = fit.interference_table(measurements.nanoflow_interference(), nanoflow_curve)
    models = {t: greenctx.step_model(t) for t in greenctx.FIT_TABLES}
    points = [p for kind in ("prefill", "small prefill")
              for p in greenctx.shape_points(kind, greenctx.FIT_TABLES)]
    layer_s, layer_error = greenctx.fit_prefill_layer_s(points, models, base)
    families = {f.family: {"sharpness": f.sharpness, "sm_bytes_per_s": f.sm_bytes_per_s,
                           "fitted_on": f.fitted_on, "median_error": f.median_error, "source": f.source}
                           for f in (ampere, hopper)}
    return {
        "bandwidth_families": families,
        "decode_bandwidth_interference": [[r, f] for r, f in table],
        "prefill_flops_interference": [],
        "prefill_layer_s": layer_s,
        "prefill_layer_median_error": round(layer_error, 4),
        "source": ("bandwidth_families: per SM architecture (compute capability), the bytes/s one SM adds "
                   "below the knee and the knee's sharpness; the default S_SAT (SMs reaching 95% of the "
                   "whole GPU's rate) follows from each GPU's datasheet bandwidth; architectures without a "
                   "measurement take the nearest measured one's (a note says so); 'pdmux bench' measures "
                   f"yours. decode_bandwidth_interference: {NANOFLOW} gemv_interference.csv (decode's "
                   "bandwidth next to a GEMM by its SM share) over the curve fitted to NanoFlow's solo "
                   "sweeps alone, made non-decreasing; prefill_flops_interference: no public measurement "
                   f"(1.0). prefill_layer_s: {GREENCTX}, H800 and A100 prefills of 512-16384 tokens vs SMs "
                   f"and against an 8192-token prefill on the same SMs (as {greenctx.SETUPS['H800'].model} "
                   f"TP{greenctx.SETUPS['H800'].tp}); the A100_8B tables are kept out of every fit (pdmux "
                   "accuracy checks them)"),
    }


def fit_common() -> dict:
    return {
        "format": FORMAT,
        "fitted_by": "benchmarks/fit_efficiency.py",
        "partitions": fit_partitions(),
        "cpu": CPU,
    }


def _link(e, what: str) -> dict:
    return {"latency_s": float(f"{e.latency_s:.4g}"),
            "bandwidth_efficiency": round(e.bandwidth_efficiency, 4),
            "median_error": round(e.median_error or 0.0, 4), "points": e.points, "source": what}


def fit_allreduce() -> dict:
    vidur = measurements.vidur_allreduce()
    gpus = {}
    for gpu_key in measurements.aic_gpus():
        gpu = find_gpu(gpu_key)
        link = gpu.interconnect_bytes_per_s
        aic = measurements.aic_allreduce(gpu_key)
        mine_vidur = [p for p in vidur if p.gpu == gpu_key]
        ranks = {}
        for n in sorted({p.ranks for p in aic} | {p.ranks for p in mine_vidur}):
            custom_pts, nccl_pts, what = fit.allreduce_points(aic, mine_vidur, n, gpu.interconnect)
            if not nccl_pts:
                continue  # PCIe beyond 2 GPUs: SGLang runs NCCL there, which nobody measured
            kernel = custom_pts[0].kernel if custom_pts else ""
            custom_src = (f"{AIC}: {gpu_key} SGLang custom all-reduce "
                          f"({'CUDA graph' if kernel == 'custom-graph' else 'eager: no CUDA-graph points'}), "
                          f"{n} GPUs, <= 8 MiB")
            if what == "nccl":
                nccl_src = (f"Vidur (microsoft/vidur 7d47513, MIT) {gpu_key} DGX NCCL all-reduce, {n} GPUs, "
                            "> 8 MiB")
            else:
                nccl_src = (f"{AIC}: {gpu_key} SGLang custom all-reduce above 8 MiB, {n} GPUs, standing in "
                            "for NCCL (no NCCL measurement of this GPU)")
            entry = {"custom": _link(fit.fit_allreduce(custom_pts, link, custom_src), custom_src)
                     if custom_pts else None,
                     "nccl": _link(fit.fit_allreduce(nccl_pts, link, nccl_src), nccl_src)}
            ranks[n] = entry
        major, minor = gpu.compute_capability
        gpus[gpu_key] = {"interconnect": gpu.interconnect, "compute_capability": f"{major}.{minor}",
                         "interconnect_bytes_per_s": link, "ranks": ranks}
    return {"format": collectives.FORMAT, "fitted_by": "benchmarks/fit_efficiency.py",
            "formula": "latency_s + 2 (N - 1) / N x bytes / (interconnect_bytes_per_s x "
            "bandwidth_efficiency)",
            "custom_max_bytes": collectives.CUSTOM_MAX_BYTES, "gpus": gpus}


def dump(data: dict, header: str) -> str:
    return header + yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files on disk; write nothing")
    args = parser.parse_args()
    today = datetime.date.today().isoformat()
    header = (f"# pdmux efficiency profile, written by benchmarks/fit_efficiency.py ({today}); do not edit "
              "by hand.\n# Units: seconds, fractions of the GPU profile's datasheet bandwidth and dense "
              "FLOP/s, tokens.\n")
    files = {"common.yaml": dump(fit_common(), header),
             collectives.FILE_NAME: dump(fit_allreduce(), header.replace(
                 "fractions of the GPU profile's datasheet bandwidth and dense FLOP/s, tokens",
                 "fractions of the GPU profile's interconnect bandwidth per direction, bytes"))}
    elementwise = fit_elementwise()
    for gpu_key in measurements.aic_gpus():
        files[f"{gpu_key}.yaml"] = dump(fit_gpu(gpu_key, elementwise), header)
    OUT.mkdir(parents=True, exist_ok=True)
    differ = []
    for name, text in files.items():
        path = OUT / name
        if args.check:
            old = path.read_text() if path.exists() else ""
            strip = lambda t: "\n".join(line for line in t.splitlines() if not line.startswith("#"))
            if strip(old) != strip(text):
                differ.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if args.check:
        print("differ: " + ", ".join(differ) if differ else "all efficiency files match a fresh fit")
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
