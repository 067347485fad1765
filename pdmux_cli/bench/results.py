"""The bench's results as values: sweep points, levels, ceilings; their JSON and the calibration they give.

Pure (no torch): the runner fills these dataclasses, the CLI renders and writes them, and the CPU
tests build them from synthetic numbers. Units: SMs, bytes/s, FLOP/s, ms, percent where named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..costmodel.calibration_file import Calibration
from ..messages import render_all
from ..util.errors import Finding
from .stats import S_SAT_FRACTION, RateStats, monotone_fit, s_sat

#: A level whose flop factor + bandwidth factor is at most this ran its two kernels in turns, not side
#: by side. When the GPU only time-shares, each kernel runs a fraction of the window at its solo rate
#: and the fractions add up to at most 1 (so do the factors); the 0.1 above 1 leaves room for the
#: timing spread of a few percent per factor (p10-p90 of the solo and co-run rates). A definition,
#: not a measurement.
SERIALISED_FACTOR_SUM = 1.1


@dataclass(frozen=True)
class RunInfo:
    """Identity of one run: the device, the software, the date.

    ``driver_cuda_version``: CUDA version the driver supports (``"12.8"``); ``cuda_version``: the CUDA
    torch was built with; ``kernel_image``: how the NVRTC kernels were built (``"cubin sm_90"``).
    ``date``: ISO date (UTC); ``started_at``: ISO time (UTC). ``cuda_device_max_connections``: the
    value of CUDA_DEVICE_MAX_CONNECTIONS when CUDA started (``None``: unset, CUDA's default 8);
    ``workqueue``: how the green contexts got their work queues; ``max_sm_clock_mhz`` /
    ``max_mem_clock_mhz``: the device's maximum clocks (NVML), ``None`` without NVML.
    """

    gpu_name: str
    sm_count: int
    compute_capability: tuple[int, int]
    device_index: int
    profile_key: str | None
    driver_cuda_version: str
    cuda_version: str
    torch_version: str
    cuda_python_version: str
    nvrtc_version: str
    kernel_image: str
    date: str
    started_at: str
    cuda_device_max_connections: str | None = None
    workqueue: str | None = None
    max_sm_clock_mhz: float | None = None
    max_mem_clock_mhz: float | None = None


@dataclass(frozen=True)
class SweepPoint:
    """The solo kernels on one partition of ``requested_sms`` (``granted_sms`` as the driver gave).

    ``kind``: ``"green"`` (a green context) or ``"whole"`` (the whole GPU, a plain stream).
    ``read``: the read kernel, bytes/s. ``gemm``: the bf16 GEMM, FLOP/s. ``skinny``: the decode-like
    GEMM, FLOP/s (weight bytes/s = FLOP/s * weight bytes / FLOPs), when planned.
    """

    requested_sms: int
    granted_sms: int
    kind: str
    read: RateStats
    gemm: RateStats
    skinny: RateStats | None = None


@dataclass(frozen=True)
class LevelResult:
    """One SGLang level measured: partitions granted, SM ids seen, solo and co-run rates.

    ``smid_prefill`` / ``smid_decode``: distinct ``%smid`` values the SM-id kernel saw on each
    partition. ``solo_*`` on the level's own partitions; ``corun_*`` with both kernels running, each
    over the window both streams were busy (``corun_window_ms``, median over repeats); solo and
    co-run timed in the same windowed loop. ``overlap_share`` (median over repeats) and
    ``overlap_share_min``: share of the co-run window during which both kernels ran (0-1, from
    ``%globaltimer`` stamps), ``None`` when not measured. ``workqueue``: the work-queue
    configuration of the level's green contexts.
    """

    prefill_sms: int
    decode_sms: int
    pair_granted_sms: int
    granted_prefill_sms: int
    granted_decode_sms: int
    smid_prefill: tuple[int, ...]
    smid_decode: tuple[int, ...]
    solo_gemm: RateStats
    solo_read: RateStats
    corun_gemm: RateStats
    corun_read: RateStats
    corun_window_ms: float
    overlap_share: float | None = None
    overlap_share_min: float | None = None
    workqueue: str | None = None

    @property
    def disjoint(self) -> bool:
        """No SM ran blocks of both partitions."""
        return not set(self.smid_prefill) & set(self.smid_decode)

    @property
    def within_grant(self) -> bool:
        """Neither partition ran on more SMs than the driver granted it."""
        return (len(self.smid_prefill) <= self.granted_prefill_sms
                and len(self.smid_decode) <= self.granted_decode_sms)

    @property
    def flops_factor(self) -> float:
        """GEMM rate next to the read kernel / GEMM rate alone on the same SMs."""
        return self.corun_gemm.median / self.solo_gemm.median

    @property
    def bandwidth_factor(self) -> float:
        """Read rate next to the GEMM / read rate alone on the same SMs."""
        return self.corun_read.median / self.solo_read.median

    @property
    def serialised(self) -> bool:
        """flop factor + bandwidth factor <= :data:`SERIALISED_FACTOR_SUM`: the signature of kernels
        that took turns on the GPU instead of running side by side."""
        return self.flops_factor + self.bandwidth_factor <= SERIALISED_FACTOR_SUM


@dataclass
class BenchResults:
    """A run, complete or not. ``plan``: :func:`plan.plan_dict` of what was planned.

    ``copy``: device-to-device copy, bytes/s (read + write). ``matmul``: the GEMM on the whole GPU,
    default stream, FLOP/s. ``complete``: every step ran and succeeded; ``interrupted``: stopped by
    Ctrl-C; ``error``: the failure that stopped it, if any; ``step_errors``: steps that failed while
    the run went on (a split the driver refused), one line each.
    """

    run: RunInfo
    plan: dict[str, Any]
    copy: RateStats | None = None
    matmul: RateStats | None = None
    sweep: list[SweepPoint] = field(default_factory=list)
    levels: list[LevelResult] = field(default_factory=list)
    complete: bool = False
    interrupted: bool = False
    error: str | None = None
    step_errors: list[str] = field(default_factory=list)
    notes: list[Finding | str] = field(default_factory=list)

    # -- derived -------------------------------------------------------------------------------------
    def whole(self) -> SweepPoint | None:
        """The whole-GPU sweep point, if measured."""
        for point in self.sweep:
            if point.kind == "whole":
                return point
        return None

    def full_read_rate(self) -> float | None:
        """Bytes/s of the read kernel on the whole GPU (the largest measured if that is missing)."""
        whole = self.whole()
        if whole is not None:
            return whole.read.median
        return max((p.read.median for p in self.sweep), default=None)

    def full_gemm_rate(self) -> float | None:
        """FLOP/s of the GEMM on the whole GPU (the largest measured if that is missing)."""
        whole = self.whole()
        if whole is not None:
            return whole.gemm.median
        return max((p.gemm.median for p in self.sweep), default=None)

    def s_sat_sms(self) -> int | None:
        """Smallest granted SM count whose read rate reaches 95% of the whole GPU's."""
        full = self.full_read_rate()
        if not self.sweep or not full:
            return None
        return s_sat([(p.granted_sms, p.read.median) for p in self.sweep], full, S_SAT_FRACTION)

    def bandwidth_curve(self) -> list[tuple[int, float]]:
        """Monotone fit of (granted SMs, read bytes/s) over the sweep."""
        if not self.sweep:
            return []
        return [(int(s), r) for s, r in monotone_fit([(p.granted_sms, p.read.median) for p in self.sweep])]

    def flops_curve(self) -> list[tuple[int, float]]:
        """Monotone fit of (granted SMs, GEMM FLOP/s) over the sweep."""
        if not self.sweep:
            return []
        return [(int(s), r) for s, r in monotone_fit([(p.granted_sms, p.gemm.median) for p in self.sweep])]


def calibration_from_results(res: BenchResults) -> Calibration | None:
    """The :class:`~pdmux_cli.costmodel.calibration_file.Calibration` of a run, or ``None`` when it lacks the
    ceilings or every sweep point (an early interruption). Curves are monotone fits of the granted
    SM counts; co-run rows use the requested (policy) SM counts."""
    if res.copy is None or res.matmul is None or not res.sweep:
        return None
    r = res.run
    return Calibration(
        gpu_name=r.gpu_name,
        sm_count=r.sm_count,
        compute_capability=r.compute_capability,
        driver_cuda_version=r.driver_cuda_version,
        cuda_version=r.cuda_version,
        date=r.date,
        bandwidth_curve=tuple(res.bandwidth_curve()),
        flops_curve=tuple(res.flops_curve()),
        copy_bytes_per_s=res.copy.median,
        matmul_flops_per_s=res.matmul.median,
        corun=tuple(
            (lv.prefill_sms, lv.decode_sms, lv.bandwidth_factor, lv.flops_factor)
            for lv in sorted(res.levels, key=lambda lv: lv.decode_sms)
        ),
        s_sat_sms=res.s_sat_sms() or r.sm_count,
        complete=res.complete,
        terms_from=(("partitions", f"pdmux bench {r.date}"),),
        source=f"pdmux bench, repeats {res.plan.get('repeats')}, GEMM "
               f"{'x'.join(map(str, res.plan.get('gemm_shape_mnk', [])))}, read buffer "
               f"{res.plan.get('buffer_bytes')} bytes, {r.kernel_image}, torch {r.torch_version}",
    )


def _fraction(value: float, full: float | None) -> float | None:
    return value / full if full else None


def results_dict(res: BenchResults) -> dict[str, Any]:
    """JSON of a run (``results.json`` and ``--json``); units in the key names."""
    r = res.run
    full_read, full_gemm = res.full_read_rate(), res.full_gemm_rate()
    sweep = []
    for p in res.sweep:
        entry: dict[str, Any] = {
            "requested_sms": p.requested_sms, "granted_sms": p.granted_sms, "kind": p.kind,
            "read": p.read.to_dict("bytes_per_s"),
            "read_fraction_of_full": _fraction(p.read.median, full_read),
            "gemm": p.gemm.to_dict("flops_per_s"),
            "gemm_fraction_of_full": _fraction(p.gemm.median, full_gemm),
        }
        if p.skinny is not None:
            entry["skinny_gemm"] = p.skinny.to_dict("flops_per_s")
        sweep.append(entry)
    levels = [
        {
            "prefill_sms": lv.prefill_sms, "decode_sms": lv.decode_sms,
            "pair_granted_sms": lv.pair_granted_sms, "granted_prefill_sms": lv.granted_prefill_sms,
            "granted_decode_sms": lv.granted_decode_sms, "smid_prefill_count": len(lv.smid_prefill),
            "smid_decode_count": len(lv.smid_decode), "smid_prefill": list(lv.smid_prefill),
            "smid_decode": list(lv.smid_decode), "disjoint": lv.disjoint, "within_grant": lv.within_grant,
            "solo_gemm": lv.solo_gemm.to_dict("flops_per_s"),
            "corun_gemm": lv.corun_gemm.to_dict("flops_per_s"),
            "solo_read": lv.solo_read.to_dict("bytes_per_s"),
            "corun_read": lv.corun_read.to_dict("bytes_per_s"), "flops_factor": lv.flops_factor,
            "bandwidth_factor": lv.bandwidth_factor, "gemm_interference_percent": (1 - lv.flops_factor) * 100,
            "read_interference_percent": (1 - lv.bandwidth_factor) * 100,
            "corun_window_ms": lv.corun_window_ms, "overlap_share": lv.overlap_share,
            "overlap_share_min": lv.overlap_share_min, "factor_sum": lv.flops_factor + lv.bandwidth_factor,
            "serialised": lv.serialised, "workqueue": lv.workqueue,
        }
        for lv in res.levels
    ]
    return {
        "complete": res.complete,
        "interrupted": res.interrupted,
        "error": res.error,
        "step_errors": list(res.step_errors),
        "gpu": r.gpu_name,
        "gpu_profile": r.profile_key,
        "sm_count": r.sm_count,
        "compute_capability": f"{r.compute_capability[0]}.{r.compute_capability[1]}",
        "device_index": r.device_index,
        "driver_cuda_version": r.driver_cuda_version,
        "cuda_version": r.cuda_version,
        "torch_version": r.torch_version,
        "cuda_python_version": r.cuda_python_version,
        "nvrtc_version": r.nvrtc_version,
        "kernel_image": r.kernel_image,
        "date": r.date,
        "started_at": r.started_at,
        "cuda_device_max_connections": r.cuda_device_max_connections,
        "workqueue": r.workqueue,
        "max_sm_clock_mhz": r.max_sm_clock_mhz,
        "max_mem_clock_mhz": r.max_mem_clock_mhz,
        "serialised_factor_sum": SERIALISED_FACTOR_SUM,
        "plan": res.plan,
        "ceilings": {
            "copy": res.copy.to_dict("bytes_per_s") if res.copy else None,
            "matmul": res.matmul.to_dict("flops_per_s") if res.matmul else None,
        },
        "sweep": sweep,
        "s_sat_sms": res.s_sat_sms(),
        "s_sat_fraction": S_SAT_FRACTION,
        "full_read_bytes_per_s": full_read,
        "full_gemm_flops_per_s": full_gemm,
        "bandwidth_curve": [list(p) for p in res.bandwidth_curve()],
        "flops_curve": [list(p) for p in res.flops_curve()],
        "levels": levels,
        "notes": render_all(res.notes),
    }
