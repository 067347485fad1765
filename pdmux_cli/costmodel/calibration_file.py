"""Measured terms of the cost model for one GPU: the ``calibration.yaml`` file and its cost-model views.

One file, two kinds of terms, each optional, with ``terms_from`` saying where each came from:

- **SM-partition terms** (``pdmux bench --out DIR`` writes them): bandwidth and GEMM FLOP/s vs SMs and
  the co-run interference, measured on green contexts (the curves below). :meth:`Calibration.throughput`
  gives the chapter's model its measured throughput; the roofline model takes their shapes.
- **Whole-GPU terms** (``pdmux calibrate`` fits them to the user's own SGLang: one-batch benchmark results
  and server logs, :mod:`pdmux_cli.costmodel.whole_gpu_fit`): the roofline model's efficiencies for one model
  on this GPU (:class:`WholeGpuTerms`).

- **Serving terms** (``pdmux calibrate --bench-serving``: the user's own ``sglang.bench_serving`` result
  files, :mod:`pdmux_cli.simulate.serving_fit`): the request path's delays and the per-request step
  time of their server (:class:`ServingTerms`), in place of ``profiles/efficiency/serving.yaml``'s.

``pdmux calibrate --merge`` joins a bench file and an SGLang file of the same GPU. Files written before
the whole-GPU terms existed (``format: pdmux-calibration/1``, SM-partition terms only) still load.
Pure Python plus ``yaml``: no torch, numpy or cuda import, because the planning commands import this
module.

What the curves are (units in the names; SMs are what the driver granted):

- ``bandwidth_curve``: ``(sms, bytes_per_s)``, the bench's pure-read kernel (16-byte loads, a buffer
  >= 4x L2) running alone on a green context of ``sms`` SMs; bytes read per second from HBM.
- ``flops_curve``: ``(sms, flops_per_s)``, a bf16 ``torch.matmul`` (8192 x 4096 x 12288 by default)
  alone on ``sms`` SMs; dense FLOP/s achieved.
- ``corun``: ``(prefill_sms, decode_sms, bandwidth_factor, flops_factor)`` per SGLang level: each
  kernel's rate while the other runs on the level's other partition, divided by its rate alone on
  the same SMs (1.0 = no interference). Levels are the requested (policy) SM counts.
- ``copy_bytes_per_s`` (a device-to-device ``copy_``, read + write bytes counted) and
  ``matmul_flops_per_s`` (the same matmul on the whole GPU, default stream): ceilings, for reference.
- ``s_sat_sms``: the smallest measured SM count whose read rate reaches 95% of the whole GPU's.

The curves are rates kernels actually reached, so the estimate's ``bandwidth_efficiency`` and ``mfu``
are NOT applied on top of them (they would count the same losses twice).
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..util.errors import InputError, short_repr
from ..catalog.hardware import MAX_SMS
from ..util.input_files import read_input_text
from ..util.numbers import finite_float
from ..util.yaml_input import load_yaml

#: The ``format`` value written in every calibration file; files with another value are refused.
FORMAT = "pdmux-calibration/2"
#: The first format (SM-partition terms only, every one of them required); still read.
FORMAT_V1 = "pdmux-calibration/1"

_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

#: Largest calibration file :func:`load_calibration` reads, bytes (a real one is a few kB).
MAX_FILE_BYTES = 256 * 1024

_HEADER = (
    "# pdmux calibration, written by 'pdmux bench' or 'pdmux calibrate'; read with --calibration FILE.\n"
    "# Units: SMs (granted by the driver), bytes/s, FLOP/s, s. bandwidth_curve: the bench's read kernel\n"
    "# alone on s SMs; flops_curve: a bf16 matmul alone on s SMs; corun: [prefill_sms, decode_sms,\n"
    "# bandwidth_factor, flops_factor], each factor = co-run rate / solo rate on the same SMs.\n"
    "# whole_gpu: efficiencies (fractions of the datasheet) fitted to SGLang's own measurements.\n"
)

#: Plausible measured rates, (lowest, highest): 1 GB/s to 1 PB/s of HBM reads (today's GPUs read
#: 1.5-8 TB/s) and 1 GFLOP/s to 100 PFLOP/s of dense bf16 math (a B200: 2.25 PFLOP/s). Outside
#: these a number is a typo or a unit slip, not a measurement.
BYTES_PER_S_RANGE = (1e9, 1e15)
FLOPS_RANGE = (1e9, 1e17)
#: Measured rates may exceed the GPU profile's datasheet figure by this factor at most (clock
#: boost, a conservative datasheet); beyond it the calibration is not of this GPU.
DATASHEET_TOLERANCE = 1.25
#: Smallest co-run factor believed: below it one kernel ran 20x slower next to the other.
MIN_CORUN_FACTOR = 0.05

_HEADER_FIELDS = ("format", "gpu_name", "sm_count", "compute_capability", "date")
#: The SM-partition terms: all present or none.
_PARTITION_FIELDS = ("driver_cuda_version", "cuda_version", "bandwidth_curve", "flops_curve",
                     "copy_bytes_per_s", "matmul_flops_per_s", "corun", "s_sat_sms")
_OPTIONAL = ("complete", "source", "terms_from", "whole_gpu", "gpu_key", "serving")

#: Plausible range of every efficiency a whole-GPU calibration gives (a fraction of the datasheet).
EFFICIENCY_RANGE = (0.05, 1.0)


@dataclass(frozen=True)
class WholeGpuTerms:
    """The roofline model's whole-GPU terms for one model on one GPU, fitted to SGLang's own numbers
    (``pdmux calibrate``). Fractions of the GPU profile's datasheet figures; seconds.

    ``model``: the model they were fitted for (they hold for others only as far as the kernels are
    alike). ``gemm_bandwidth_efficiency``, ``gemm_peak_efficiency``: GEMM weight reads and compute;
    ``kv_bandwidth_efficiency``: decode attention's KV reads; ``attention_peak_efficiency``: prefill
    attention; ``decode_fixed_s``: time per decode step the operators do not account for (launch gaps,
    sampling, synchronisation; may be negative when the shipped latencies are too long);
    ``points``: measured points used; ``median_error``, ``uncalibrated_median_error``: the fit's and the
    shipped model's median absolute relative error on them; ``source``: the files fitted.
    """

    model: str
    gemm_bandwidth_efficiency: float
    gemm_peak_efficiency: float
    kv_bandwidth_efficiency: float
    attention_peak_efficiency: float
    decode_fixed_s: float
    points: int
    median_error: float
    uncalibrated_median_error: float
    source: str = ""


#: Bounds of the serving terms a calibration may carry, seconds (as ``serving.yaml``'s).
SERVING_BOUNDS_S = {"admission_delay_s": 10.0, "first_token_delay_s": 10.0, "admission_interval_s": 1.0,
                    "per_request_step_s": 1e-2}


@dataclass(frozen=True)
class ServingTerms:
    """The serving terms fitted to the user's own SGLang server (``pdmux calibrate --bench-serving``):
    the request path's delays and the per-request step time (seconds; their meaning is
    :class:`pdmux_cli.costmodel.efficiency.ServingProfile`'s and ``CpuProfile.per_request_step_s``'s).
    They replace ``serving.yaml``'s for any model on this GPU. ``runs``: bench_serving runs fitted;
    ``median_error``: the fit's median absolute relative error per metric kind; ``source``: the files.
    ``residuals``: the fit's own residuals on those runs, ``(figure, (ln(measured / predicted), ...))`` per
    figure of :data:`pdmux_cli.costmodel.uncertainty.FIGURES`: what narrows the intervals of a calibrated
    server (empty in a file written before them)."""

    admission_delay_s: float
    first_token_delay_s: float
    admission_interval_s: float
    per_request_step_s: float
    runs: int
    median_error: tuple[tuple[str, float], ...] = ()
    source: str = ""
    residuals: tuple[tuple[str, tuple[float, ...]], ...] = ()


@dataclass(frozen=True)
class Calibration:
    """One GPU's measured curves (see the module docstring for what each one is).

    ``gpu_name``: as the device reports it. ``sm_count``: the device's SMs. ``compute_capability``:
    ``(major, minor)``. ``driver_cuda_version``: CUDA version the driver supports (``"12.8"``).
    ``cuda_version``: CUDA version torch was built with (``"12.6"``). ``date``: ISO date of the run.
    ``bandwidth_curve``: ``((sms, bytes_per_s), ...)`` ascending in SMs, rates non-decreasing.
    ``flops_curve``: ``((sms, flops_per_s), ...)`` likewise. ``copy_bytes_per_s``, ``matmul_flops_per_s``:
    whole-GPU ceilings. ``corun``: ``((prefill_sms, decode_sms, bandwidth_factor, flops_factor), ...)``.
    ``s_sat_sms``: SMs that reach 95% of the whole GPU's read rate. ``complete``: ``False`` when the
    bench was interrupted before the end. ``source``: free text (the pdmux version and options).
    The bench's fields are ``None`` in a file with only whole-GPU terms. ``whole_gpu``: the
    :class:`WholeGpuTerms` of ``pdmux calibrate`` (``None`` if absent); ``serving``: the
    :class:`ServingTerms` of ``pdmux calibrate --bench-serving`` (``None`` if absent). ``terms_from``:
    ``(("partitions", "pdmux bench 2026-12-01"), ("whole_gpu", "sglang one-batch out.jsonl"))``. ``gpu_key``:
    the pdmux GPU profile key the file was made for, where known.
    """

    gpu_name: str
    sm_count: int
    compute_capability: tuple[int, int]
    driver_cuda_version: str | None = None
    cuda_version: str | None = None
    date: str = ""
    bandwidth_curve: tuple[tuple[int, float], ...] | None = None
    flops_curve: tuple[tuple[int, float], ...] | None = None
    copy_bytes_per_s: float | None = None
    matmul_flops_per_s: float | None = None
    corun: tuple[tuple[int, int, float, float], ...] | None = None
    s_sat_sms: int | None = None
    complete: bool = True
    source: str = ""
    whole_gpu: WholeGpuTerms | None = None
    terms_from: tuple[tuple[str, str], ...] = ()
    gpu_key: str = ""
    serving: ServingTerms | None = None

    @property
    def has_partitions(self) -> bool:
        """True when the file holds ``pdmux bench``'s SM-partition terms."""
        return self.bandwidth_curve is not None

    def profile_key(self) -> str:
        """The pdmux GPU profile key of the calibrated device: the file's ``gpu_key``, else the profile
        whose reported name is ``gpu_name`` (``""`` when none is: a device without a profile)."""
        if self.gpu_key:
            return self.gpu_key
        from ..catalog.hardware import find_gpu

        try:
            return find_gpu(self.gpu_name).key
        except InputError:
            return ""

    def check_device(self, gpu: Any) -> None:
        """:class:`InputError` unless ``gpu`` (a ``hardware.Gpu``) has this calibration's SM count and compute
        capability and, where the calibrated device has a GPU profile (:meth:`profile_key`), is that
        profile."""
        sms = gpu.require_sm_count()
        key = self.profile_key()
        if (sms != self.sm_count or tuple(gpu.compute_capability) != self.compute_capability
                or (key and getattr(gpu, "key", key) != key)):
            cc = ".".join(map(str, self.compute_capability))
            profile = f", profile {key}" if key else ""
            raise InputError(
                "calibration was measured on {measured} ({measured_sms} SMs, cc {cc}{profile}) but the "
                "estimate is for {gpu} ({sms} SMs, cc {gpu_cc}, profile {gpu_key}): pass {flag.gpu} for the "
                "calibrated GPU, or calibrate this one ('pdmux bench', 'pdmux calibrate')",
                param="gpu",
                values={"measured": self.gpu_name, "measured_sms": self.sm_count, "cc": cc,
                        "profile": profile, "gpu": gpu.name, "sms": sms,
                        "gpu_cc": ".".join(map(str, gpu.compute_capability)),
                        "gpu_key": getattr(gpu, "key", "?")},
            )

    def _check_against_datasheet(self, gpu: Any) -> None:
        """:class:`InputError` when a measured rate is over :data:`DATASHEET_TOLERANCE` times ``gpu``'s
        datasheet peak (HBM bandwidth; dense bf16 FLOP/s where the profile has it)."""
        read = max(rate for _, rate in self.bandwidth_curve)
        _check_datasheet(gpu, "read rate", read, gpu.hbm_bytes_per_s, "B/s")
        _check_datasheet(gpu, "device-to-device copy rate (read + write)", self.copy_bytes_per_s,
                         2 * gpu.hbm_bytes_per_s if gpu.hbm_bytes_per_s else None, "B/s")
        flops = max(max(rate for _, rate in self.flops_curve), self.matmul_flops_per_s)
        _check_datasheet(gpu, "bf16 GEMM rate", flops, gpu.bf16_dense_flops, "FLOP/s")

    def throughput(self, gpu: Any, bandwidth_efficiency: float = 1.0,
                   mfu: float = 1.0) -> CalibratedThroughput:
        """The cost-model view of these curves for ``gpu`` (a ``hardware.Gpu``).

        ``bandwidth_efficiency`` and ``mfu`` are accepted for the estimate's call signature and
        deliberately ignored: the curves are measured rates, which already include those losses. A curve
        of an incomplete run that stops short of the whole GPU is extended to the run's whole-GPU ceiling
        (copy rate, whole-GPU matmul), and the result's ``notes`` say from which SM count.
        Raises :class:`InputError` when the file has no SM-partition terms, when ``gpu``'s SM count or
        compute capability differs from the calibrated device's (the curves would be read at the wrong
        SM counts) or is unknown, and when a measured rate exceeds ``gpu``'s datasheet peak by more than
        :data:`DATASHEET_TOLERANCE`.
        """
        del bandwidth_efficiency, mfu  # measured rates already include them (module docstring)
        if not self.has_partitions:
            raise InputError("this calibration has no SM-partition terms (those come from 'pdmux bench'): "
                             "the chapter model needs them; use {flag.cost_model} roofline, or merge a bench "
                             "calibration into it", param="cost_model", values={})
        self.check_device(gpu)
        self._check_against_datasheet(gpu)
        bandwidth, bw_from = _to_whole_gpu(self.bandwidth_curve, self.sm_count, self.copy_bytes_per_s)
        flops, flops_from = _to_whole_gpu(self.flops_curve, self.sm_count, self.matmul_flops_per_s)
        notes: tuple[str, ...] = ()
        if bw_from or flops_from:
            parts = []
            if bw_from:
                parts.append(f"read bandwidth from {bw_from} SMs toward the copy ceiling "
                             f"({self.copy_bytes_per_s / 1e12:.3g} TB/s, read + write)")
            if flops_from:
                parts.append(f"GEMM FLOP/s from {flops_from} SMs toward the whole-GPU matmul "
                             f"({self.matmul_flops_per_s / 1e12:.3g} TFLOP/s)")
            notes = ((f"calibration from an incomplete bench run: {' and '.join(parts)} up to "
                     f"{self.sm_count} SMs are interpolated, not measured (run 'pdmux bench' to the end for "
                     "measured values)"),)
        return CalibratedThroughput(
            total_sms=self.sm_count,
            bandwidth_curve=bandwidth,
            flops_curve=flops,
            corun=self.corun,
            source=f"calibration {self.gpu_name}, {self.date}" + (
                "" if self.complete else " (incomplete run)"),
            s_sat_sms=self.s_sat_sms,
            notes=notes,
        )


def _to_whole_gpu(curve: tuple[tuple[int, float], ...], sm_count: int,
                  ceiling: float) -> tuple[tuple[tuple[int, float], ...], int]:
    """``curve`` (SMs, rate) ending at the whole GPU: as it is when it does, else with the run's whole-GPU
    ceiling appended at ``sm_count`` (never below the last measured rate, so the curve stays
    non-decreasing), and the first SM count past the measurements (0 when nothing was added).

    An interrupted bench (``complete: false``) has the ceilings, measured first, but not the sweep's
    larger partitions; holding the last measured rate flat to the whole GPU would make 16 SMs as fast
    as 132."""
    if curve[-1][0] >= sm_count:
        return curve, 0
    return (*curve, (sm_count, max(ceiling, curve[-1][1]))), curve[-1][0] + 1


def _check_datasheet(gpu: Any, what: str, measured: float, datasheet: float | None, unit: str) -> None:
    if datasheet and measured > DATASHEET_TOLERANCE * datasheet:
        raise InputError(
            f"calibration's {what} {measured / 1e12:,.3g} T{unit} is {measured / datasheet:.2g}x the "
            f"datasheet's {datasheet / 1e12:,.3g} T{unit} for {gpu.name}: not a measurement of this GPU "
            "(re-run 'pdmux bench')"
        )


def interpolate(curve: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear ``y(x)`` over ``curve`` (``(x, y)`` pairs, x strictly ascending).

    Clamped to the last ``y`` above the largest ``x``; below the smallest ``x`` the value scales
    proportionally from ``(0, 0)`` (a kernel on fewer SMs than measured gets that share of the
    first point's rate). Raises :class:`InputError` for an empty curve or ``x < 0``.
    """
    if not curve:
        raise InputError("cannot interpolate an empty curve")
    if x < 0:
        raise InputError(f"SM count must be >= 0, got {x}")
    x0, y0 = curve[0]
    if x <= x0:
        return y0 * x / x0
    for (xa, ya), (xb, yb) in itertools.pairwise(curve):
        if x <= xb:
            return ya + (yb - ya) * (x - xa) / (xb - xa)
    return curve[-1][1]


def interpolate_clamped(curve: Sequence[tuple[float, float]], x: float, default: float = 1.0) -> float:
    """Piecewise-linear ``y(x)`` clamped to the first/last ``y`` outside the measured range.

    ``default`` when ``curve`` is empty. Used for the co-run factors, which do not go to 0 with
    fewer SMs.
    """
    if not curve:
        return default
    if x <= curve[0][0]:
        return curve[0][1]
    for (xa, ya), (xb, yb) in itertools.pairwise(curve):
        if x <= xb:
            return ya + (yb - ya) * (x - xa) / (xb - xa)
    return curve[-1][1]


@dataclass(frozen=True)
class CalibratedThroughput:
    """``cost.Throughput`` from measured curves (bytes/s, FLOP/s as functions of SMs).

    ``bandwidth_bytes_per_s(s)`` / ``flops_per_s(s)``: :func:`interpolate` over the curves.
    ``corun_*_factor(p, d)``: :func:`interpolate_clamped` of the measured factors by decode SMs, in
    (0, 1] (a factor measured above 1 is noise and counts as 1.0); 1.0 when no level was measured.
    ``s_sat_sms``: the measured S_SAT (SMs reaching 95% of the whole GPU's read rate; 0 if unknown).
    ``notes``: which values are interpolated rather than measured (an incomplete run), for output.
    """

    total_sms: int
    bandwidth_curve: tuple[tuple[int, float], ...]
    flops_curve: tuple[tuple[int, float], ...]
    corun: tuple[tuple[int, int, float, float], ...]
    source: str
    s_sat_sms: int = 0
    notes: tuple[str, ...] = ()

    def bandwidth_bytes_per_s(self, sms: int) -> float:
        """Bytes/s the read kernel reached alone on ``sms`` SMs (interpolated)."""
        return interpolate(self.bandwidth_curve, sms)

    def flops_per_s(self, sms: int) -> float:
        """FLOP/s the bf16 GEMM reached alone on ``sms`` SMs (interpolated)."""
        return interpolate(self.flops_curve, sms)

    def _factor(self, column: int, decode_sms: int) -> float:
        points = sorted((c[1], c[column]) for c in self.corun)
        return max(1e-9, min(1.0, interpolate_clamped(points, decode_sms)))

    def corun_bandwidth_factor(self, prefill_sms: int, decode_sms: int) -> float:
        """Read rate next to the GEMM / read rate alone, on ``decode_sms`` SMs (in (0, 1])."""
        return self._factor(2, decode_sms)

    def corun_flops_factor(self, prefill_sms: int, decode_sms: int) -> float:
        """GEMM rate next to the read kernel / GEMM rate alone, at the level with ``decode_sms``."""
        return self._factor(3, decode_sms)


# --------------------------------------------------------------------------------------------------
# YAML I/O
# --------------------------------------------------------------------------------------------------


def _bad(where: str, field: str, what: str, value: object) -> InputError:
    return InputError(f"{where}: field '{field}' {what}, got {short_repr(value)}")


def _int(value: object, where: str, field: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _bad(where, field, f"must be an integer >= {minimum}", value)
    return value


def _float(value: object, where: str, field: str, positive: bool = True) -> float:
    number = finite_float(value)  # also numeric text: PyYAML reads 4.3e12 (no '.') as text
    if number is None:
        raise _bad(where, field, "must be a finite number", value)
    if positive and number <= 0:
        raise _bad(where, field, "must be > 0", value)
    return number


def _rate(value: object, where: str, field: str, bounds: tuple[float, float], unit: str) -> float:
    rate = _float(value, where, field)
    low, high = bounds
    if not low <= rate <= high:
        raise _bad(where, field,
                   f"must be a measured rate from {low:.0e} to {high:.0e} {unit} (a unit slip?)", value)
    return rate


def _text(value: object, where: str, field: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    elif isinstance(value, (datetime.date, datetime.datetime)):  # an unquoted 2025-01-31 in YAML
        value = value.isoformat()
    if not isinstance(value, str) or not value.strip():
        raise _bad(where, field, "must be a non-empty string", value)
    _printable(value, where, field)
    return value.strip()


def _printable(value: str, where: str, field: str) -> None:
    if not value.isprintable():  # ESC, NUL, bidi overrides: text that would drive the terminal
        raise _bad(where, field, "must be printable text (no control characters or escape sequences)", value)


def _date(value: object, where: str) -> str:
    text = _text(value, where, "date")
    try:
        datetime.date.fromisoformat(text[:10])
    except ValueError:
        raise _bad(where, "date", "must be an ISO date such as 2025-06-01 (the bench writes the UTC date)",
                   value) from None
    return text


def _cc(value: object, where: str) -> tuple[int, int]:
    from ..sglang.split_levels import parse_compute_capability

    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _bad(where, "compute_capability", "must be MAJOR.MINOR text like \"9.0\"", value)
    try:
        return parse_compute_capability(value)
    except InputError as exc:
        raise InputError(f"{where}: field 'compute_capability': {exc}") from None


def _curve(value: object, where: str, field: str, sm_count: int, bounds: tuple[float, float],
           unit: str) -> tuple[tuple[int, float], ...]:
    if not isinstance(value, list) or not value:
        raise _bad(where, field, "must be a non-empty list of [sms, rate] pairs", value)
    points: list[tuple[int, float]] = []
    for i, entry in enumerate(value):
        name = f"{field}[{i}]"
        if not isinstance(entry, list) or len(entry) != 2:
            raise _bad(where, name, "must be a [sms, rate] pair", entry)
        sms = _int(entry[0], where, f"{name}[0] (SMs)")
        if sms > sm_count:
            raise _bad(where, f"{name}[0] (SMs)", f"must be <= sm_count {sm_count}", sms)
        points.append((sms, _rate(entry[1], where, f"{name}[1] (rate)", bounds, unit)))
    for (sa, ra), (sb, rb) in itertools.pairwise(points):
        if sb <= sa:
            raise InputError(f"{where}: field '{field}' is not monotone: SMs must strictly increase ({sa} "
                             f"then {sb})")
        if rb < ra:
            raise InputError(
                f"{where}: field '{field}' is not monotone: the rate falls from {ra:.6g} at {sa} SMs to "
                f"{rb:.6g} at {sb} SMs (the bench writes a monotone fit)"
            )
    return tuple(points)


def _corun(value: object, where: str, sm_count: int) -> tuple[tuple[int, int, float, float], ...]:
    if value is None:
        value = []
    if not isinstance(value, list):
        raise _bad(where, "corun",
                   "must be a list of [prefill_sms, decode_sms, bandwidth_factor, flops_factor]", value)
    rows: list[tuple[int, int, float, float]] = []
    for i, entry in enumerate(value):
        name = f"corun[{i}]"
        if not isinstance(entry, list) or len(entry) != 4:
            raise _bad(where, name, "must be [prefill_sms, decode_sms, bandwidth_factor, flops_factor]",
                       entry)
        p = _int(entry[0], where, f"{name}[0] (prefill SMs)")
        d = _int(entry[1], where, f"{name}[1] (decode SMs)")
        if p + d > sm_count:
            raise _bad(where, name, f"prefill + decode SMs must be <= sm_count {sm_count}", entry)
        factors = []
        for j, label in ((2, "bandwidth_factor"), (3, "flops_factor")):
            f = _float(entry[j], where, f"{name}[{j}] ({label})")
            if not MIN_CORUN_FACTOR <= f <= 2:
                raise _bad(where, f"{name}[{j}] ({label})",
                           f"must be from {MIN_CORUN_FACTOR} to 2 (a co-run rate / solo rate)", f)
            factors.append(f)
        rows.append((p, d, factors[0], factors[1]))
    decode = [r[1] for r in rows]
    if len(set(decode)) != len(decode):
        raise InputError(f"{where}: field 'corun' lists the same decode SM count twice: {sorted(decode)}")
    return tuple(rows)


def _whole_gpu(value: object, where: str) -> WholeGpuTerms:
    if not isinstance(value, dict):
        raise _bad(where, "whole_gpu", "must be a mapping of the fitted terms", value)
    names = ("model", "gemm_bandwidth_efficiency", "gemm_peak_efficiency", "kv_bandwidth_efficiency",
             "attention_peak_efficiency", "decode_fixed_s", "points", "median_error",
             "uncalibrated_median_error")
    for name in names:
        if name not in value:
            raise InputError(f"{where}: missing field 'whole_gpu.{name}'")
    unknown = sorted(str(k) for k in value if k not in (*names, "source"))
    if unknown:
        raise InputError(f"{where}: unknown field 'whole_gpu.{unknown[0]}'")
    low, high = EFFICIENCY_RANGE
    efficiencies = {}
    for name in names[1:5]:
        number = _float(value[name], where, f"whole_gpu.{name}")
        if not low <= number <= high:
            raise _bad(where, f"whole_gpu.{name}",
                       f"must be a fraction of the datasheet from {low} to {high}", number)
        efficiencies[name] = number
    fixed = _float(value["decode_fixed_s"], where, "whole_gpu.decode_fixed_s", positive=False)
    if not -0.1 <= fixed <= 1.0:
        raise _bad(where, "whole_gpu.decode_fixed_s", "must be from -0.1 to 1 s", fixed)
    errors = {}
    for name in ("median_error", "uncalibrated_median_error"):
        number = _float(value[name], where, f"whole_gpu.{name}", positive=False)
        if not 0 <= number <= 100:
            raise _bad(where, f"whole_gpu.{name}", "must be a fraction >= 0", number)
        errors[name] = number
    source = value.get("source", "") or ""
    if not isinstance(source, str):
        raise _bad(where, "whole_gpu.source", "must be a string", source)
    _printable(source, where, "whole_gpu.source")
    return WholeGpuTerms(model=_text(value["model"], where, "whole_gpu.model"), **efficiencies,
                         decode_fixed_s=fixed, points=_int(value["points"], where, "whole_gpu.points"),
                         **errors, source=source)


def _serving(value: object, where: str) -> ServingTerms:
    if not isinstance(value, dict):
        raise _bad(where, "serving", "must be a mapping of the fitted serving terms", value)
    names = (*SERVING_BOUNDS_S, "runs")
    for name in names:
        if name not in value:
            raise InputError(f"{where}: missing field 'serving.{name}'")
    unknown = sorted(str(k) for k in value if k not in (*names, "median_error", "source", "residuals"))
    if unknown:
        raise InputError(f"{where}: unknown field 'serving.{unknown[0]}'")
    terms = {}
    for name, high in SERVING_BOUNDS_S.items():
        number = _float(value[name], where, f"serving.{name}", positive=False)
        if not 0 <= number <= high:
            raise _bad(where, f"serving.{name}", f"must be from 0 to {high:g} s", number)
        terms[name] = number
    errors = value.get("median_error") or {}
    if not isinstance(errors, dict):
        raise _bad(where, "serving.median_error", "must map metric kinds to fractions", errors)
    median = tuple((_text(k, where, "serving.median_error"), _float(v, where, f"serving.median_error.{k}",
                                                                     positive=False))
                                                                     for k, v in errors.items())
    source = value.get("source", "") or ""
    if not isinstance(source, str):
        raise _bad(where, "serving.source", "must be a string", source)
    _printable(source, where, "serving.source")
    return ServingTerms(**terms, runs=_int(value["runs"], where, "serving.runs"), median_error=median,
                        source=source, residuals=_residuals(value.get("residuals"), where))


#: The most residuals a calibration may carry per figure (a file's work is bounded).
MAX_RESIDUALS = 10_000


def _residuals(value: object, where: str) -> tuple[tuple[str, tuple[float, ...]], ...]:
    """``serving.residuals``: figure -> a list of finite log ratios (at most :data:`MAX_RESIDUALS`)."""
    from .uncertainty import FIGURES

    if value in (None, {}):
        return ()
    if not isinstance(value, dict):
        raise _bad(where, "serving.residuals", "must map figures to lists of ln(measured / predicted)", value)
    out = []
    for figure, values in value.items():
        if figure not in FIGURES:
            raise _bad(where, "serving.residuals", f"has {figure!r}, not one of {', '.join(FIGURES)}", figure)
        if not isinstance(values, list) or len(values) > MAX_RESIDUALS:
            raise _bad(where, f"serving.residuals.{figure}", f"must be a list of at most {MAX_RESIDUALS} "
                       "numbers", values)
        numbers = tuple(_float(v, where, f"serving.residuals.{figure}", positive=False) for v in values)
        if any(abs(x) > 50 for x in numbers):
            raise _bad(where, f"serving.residuals.{figure}", "holds a log ratio beyond +-50", values)
        out.append((figure, numbers))
    return tuple(out)


def _terms_from(value: object, where: str) -> tuple[tuple[str, str], ...]:
    if value in (None, ""):
        return ()
    if not isinstance(value, dict) or not all(k in ("partitions", "whole_gpu", "serving") for k in value):
        raise _bad(where, "terms_from",
                   "must map 'partitions', 'whole_gpu' and/or 'serving' to where they came from", value)
    return tuple((str(k), _text(v, where, f"terms_from.{k}")) for k, v in value.items())


def calibration_from_mapping(data: object, where: str = "calibration") -> Calibration:
    """Validate a parsed calibration mapping and build the :class:`Calibration`.

    Raises :class:`InputError` (one line naming ``where`` and the field) for a wrong format value,
    a missing, unknown or wrongly typed field, SM-partition terms only partly given, a file with
    neither kind of terms, an empty or non-monotone curve, SM counts beyond the device's, a complete
    run whose curves stop short of ``sm_count``, rates outside :data:`BYTES_PER_S_RANGE` /
    :data:`FLOPS_RANGE`, co-run factors below :data:`MIN_CORUN_FACTOR`, an ``s_sat_sms`` that is not a
    measured point, whole-GPU efficiencies outside :data:`EFFICIENCY_RANGE`, a date that is not ISO,
    control characters.
    """
    if not isinstance(data, dict):
        raise InputError(f"{where}: a calibration must be a YAML mapping of fields, got "
                         f"{type(data).__name__}")
    if "format" not in data:
        raise InputError(f"{where}: missing field 'format'")
    fmt = data["format"]
    if fmt not in (FORMAT, FORMAT_V1):
        raise _bad(where, "format",
                   f"must be {FORMAT!r} (a file written by 'pdmux bench' or 'pdmux calibrate')", fmt)
    partition_present = [f for f in _PARTITION_FIELDS if f in data]
    required = _HEADER_FIELDS + (_PARTITION_FIELDS if fmt == FORMAT_V1 or partition_present else ())
    for field in required:
        if field not in data:
            raise InputError(f"{where}: missing field '{field}'"
                             + (" (the SM-partition terms go together)" if field in _PARTITION_FIELDS
                                else ""))
    unknown = sorted(str(k) for k in data if k not in _HEADER_FIELDS + _PARTITION_FIELDS + _OPTIONAL)
    if unknown:
        raise InputError(f"{where}: unknown field '{unknown[0]}'")
    if fmt == FORMAT_V1 and ("whole_gpu" in data or "terms_from" in data or "serving" in data):
        raise InputError(f"{where}: 'whole_gpu', 'serving' and 'terms_from' need format {FORMAT!r}")
    if not partition_present and data.get("whole_gpu") is None and data.get("serving") is None:
        raise InputError(f"{where}: no terms: neither the SM-partition curves of 'pdmux bench' nor the "
                         "'whole_gpu' or 'serving' terms of 'pdmux calibrate'")
    sm_count = _int(data["sm_count"], where, "sm_count")
    if sm_count > MAX_SMS:
        raise _bad(where, "sm_count", f"must be at most {MAX_SMS}", sm_count)
    complete = data.get("complete", True)
    if not isinstance(complete, bool):
        raise _bad(where, "complete", "must be true or false", complete)
    source = data.get("source", "")
    if source is None:
        source = ""
    if not isinstance(source, str):
        raise _bad(where, "source", "must be a string", source)
    _printable(source, where, "source")
    gpu_key = data.get("gpu_key", "") or ""
    if not isinstance(gpu_key, str):
        raise _bad(where, "gpu_key", "must be a string", gpu_key)
    _printable(gpu_key, where, "gpu_key")
    common = {
        "gpu_name": _text(data["gpu_name"], where, "gpu_name"), "sm_count": sm_count,
        "compute_capability": _cc(data["compute_capability"], where), "date": _date(data["date"], where),
        "complete": complete, "source": source, "gpu_key": gpu_key,
        "whole_gpu": _whole_gpu(data["whole_gpu"], where) if data.get("whole_gpu") is not None else None,
        "terms_from": _terms_from(data.get("terms_from"), where),
        "serving": _serving(data["serving"], where) if data.get("serving") is not None else None,
    }
    if not partition_present:
        return Calibration(**common)
    bandwidth_curve = _curve(data["bandwidth_curve"], where, "bandwidth_curve", sm_count, BYTES_PER_S_RANGE,
                             "bytes/s")
    flops_curve = _curve(data["flops_curve"], where, "flops_curve", sm_count, FLOPS_RANGE, "FLOP/s")
    if complete:
        for field, curve in (("bandwidth_curve", bandwidth_curve), ("flops_curve", flops_curve)):
            if curve[-1][0] != sm_count:
                raise InputError(
                    f"{where}: field '{field}' ends at {curve[-1][0]} SMs, not the whole GPU's {sm_count}: a "
                    "complete run measures the whole GPU last (mark an interrupted run 'complete: false')"
                )
    s_sat = _int(data["s_sat_sms"], where, "s_sat_sms")
    if s_sat != sm_count and s_sat not in {s for s, _ in bandwidth_curve}:
        raise _bad(where, "s_sat_sms",
                   "must be one of bandwidth_curve's SM counts (the bench picks a measured point)", s_sat)
    return Calibration(
        **common,
        driver_cuda_version=_text(data["driver_cuda_version"], where, "driver_cuda_version"),
        cuda_version=_text(data["cuda_version"], where, "cuda_version"),
        bandwidth_curve=bandwidth_curve,
        flops_curve=flops_curve,
        copy_bytes_per_s=_rate(data["copy_bytes_per_s"], where, "copy_bytes_per_s", BYTES_PER_S_RANGE,
                               "bytes/s"),
        matmul_flops_per_s=_rate(data["matmul_flops_per_s"], where, "matmul_flops_per_s", FLOPS_RANGE,
                                 "FLOP/s"),
        corun=_corun(data["corun"], where, sm_count),
        s_sat_sms=s_sat,
    )


def load_calibration(path: str | Path) -> Calibration:
    """Read ``calibration.yaml`` (written by ``pdmux bench --out DIR`` or ``pdmux calibrate``).

    Raises :class:`InputError` with one line naming the file for: a missing or unreadable file, a
    directory or other non-regular file (device, pipe), a file over :data:`MAX_FILE_BYTES`, a
    non-UTF-8 file, invalid YAML, a field written twice, and everything :func:`calibration_from_mapping`
    refuses.
    """
    where = str(path)
    text = read_input_text(path, "calibration file", MAX_FILE_BYTES,
                           hint="give the calibration.yaml that 'pdmux bench --out DIR' writes")
    data, duplicate_keys = load_yaml(text, f"calibration file {where}")
    if duplicate_keys:
        key, line = duplicate_keys[0]
        raise InputError(f"{where}: field '{key}' is written twice (again at line {line}): keep one")
    return calibration_from_mapping(data, where)


def calibration_to_mapping(c: Calibration) -> dict[str, Any]:
    """The YAML/JSON mapping of ``c`` (lists for tuples, ``"9.0"`` for the capability), format 2."""
    data: dict[str, Any] = {
        "format": FORMAT,
        "gpu_name": c.gpu_name,
        "sm_count": c.sm_count,
        "compute_capability": f"{c.compute_capability[0]}.{c.compute_capability[1]}",
        "date": c.date,
    }
    if c.gpu_key:
        data["gpu_key"] = c.gpu_key
    if c.terms_from:
        data["terms_from"] = dict(c.terms_from)
    data.update({"complete": c.complete, "source": c.source})
    if c.has_partitions:
        data.update({
            "driver_cuda_version": c.driver_cuda_version,
            "cuda_version": c.cuda_version,
            "s_sat_sms": c.s_sat_sms,
            "copy_bytes_per_s": float(c.copy_bytes_per_s),
            "matmul_flops_per_s": float(c.matmul_flops_per_s),
            "bandwidth_curve": [[int(s), float(r)] for s, r in c.bandwidth_curve],
            "flops_curve": [[int(s), float(r)] for s, r in c.flops_curve],
            "corun": [[int(p), int(d), float(b), float(f)] for p, d, b, f in c.corun],
        })
    if c.whole_gpu is not None:
        w = c.whole_gpu
        data["whole_gpu"] = {
            "model": w.model, "gemm_bandwidth_efficiency": w.gemm_bandwidth_efficiency,
            "gemm_peak_efficiency": w.gemm_peak_efficiency,
            "kv_bandwidth_efficiency": w.kv_bandwidth_efficiency,
            "attention_peak_efficiency": w.attention_peak_efficiency, "decode_fixed_s": w.decode_fixed_s,
            "points": w.points, "median_error": w.median_error,
            "uncalibrated_median_error": w.uncalibrated_median_error, "source": w.source,
        }
    if c.serving is not None:
        v = c.serving
        data["serving"] = {
            "admission_delay_s": v.admission_delay_s, "first_token_delay_s": v.first_token_delay_s,
            "admission_interval_s": v.admission_interval_s, "per_request_step_s": v.per_request_step_s,
            "runs": v.runs, "median_error": dict(v.median_error), "source": v.source,
        }
        if v.residuals:
            data["serving"]["residuals"] = {k: list(vals) for k, vals in v.residuals}
    return data


def dump_calibration(c: Calibration) -> str:
    """``c`` as calibration YAML text; ``load_calibration`` of it gives back ``c`` exactly.

    Floats are written with Python's shortest round-trip repr; curves one pair per line.
    """
    data = calibration_to_mapping(c)
    curves = {k: data.pop(k) for k in ("bandwidth_curve", "flops_curve", "corun") if k in data}
    whole = data.pop("whole_gpu", None)
    serving = data.pop("serving", None)
    text = _HEADER + yaml.dump(data, Dumper=_DUMPER, sort_keys=False, default_flow_style=False,
                               allow_unicode=True)
    for key, section in (("whole_gpu", whole), ("serving", serving)):
        if section is not None:
            text += yaml.dump({key: section}, Dumper=_DUMPER, sort_keys=False, default_flow_style=False,
                              allow_unicode=True)
    for key, rows in curves.items():
        if not rows:
            text += f"{key}: []\n"
            continue
        text += f"{key}:\n"
        for row in rows:
            text += "- " + yaml.dump(row, Dumper=_DUMPER, default_flow_style=True, width=1000).strip() + "\n"
    return text
