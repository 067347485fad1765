"""SM partitions: how bandwidth and GEMM throughput change when a phase runs on ``s`` of a GPU's SMs.

Pure functions and frozen dataclasses, stdlib only.

- :class:`BandwidthCurve`: the share of the whole GPU's HBM bandwidth that ``s`` SMs reach, a smooth
  saturating curve ``r(s / k) / r(S / k)`` with ``r(x) = x / (1 + x**p) ** (1 / p)`` (a soft minimum of
  "linear in SMs" and "the plateau"); ``k`` follows from S_SAT, the SM count that reaches 95% of the
  whole GPU's bandwidth (the user's ``--s-sat``).
- :class:`BandwidthFamily`: where the default S_SAT comes from. One SM architecture (compute
  capability) moves at most so many bytes/s per SM before HBM saturates, so the knee is
  ``k = datasheet HBM B/s / sm_bytes_per_s`` and S_SAT follows from ``k`` and ``p``
  (:func:`s_sat_for_knee`): a GPU with more bandwidth per SM (H200 next to H800, H20) needs a larger share
  of its SMs, one with less (L40S, H100 PCIe) a smaller one. Fitted per architecture
  (``profiles/efficiency/common.yaml`` ``partitions.bandwidth_families``): Ampere to NanoFlow's A100 sweeps
  (``profiles/measurements/nanoflow/a100_decode_attention_bw_vs_sms.csv``; SGLang's A100 green-context
  decode tables check it), Hopper to SGLang's H800 tables (``profiles/measurements/sglang_greenctx/``).
- :func:`gemm_flops_share`: GEMM FLOP/s on ``s`` SMs. A GEMM of ``M`` tokens on ``s`` SMs gives each SM
  the work of ``M * S / s`` tokens on the whole GPU, so it runs at the whole GPU's efficiency for that many
  tokens, times ``s / S`` of the peak: large GEMMs scale linearly with SMs, small ones sub-linearly
  (NanoFlow's 640-token GEMM, ``a100_gemm_tflops_vs_sms.csv``).
- :class:`Interference`: the factor on decode's bandwidth while a GEMM runs on the other SMs, by
  decode's share of the SMs (NanoFlow's ``a100_gemv_interference.csv``), and on prefill's FLOP/s (no
  public measurement: 1.0 unless a calibration gives it).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from ..util.errors import Finding, InputError

#: Share of the whole GPU's bandwidth that defines S_SAT (``--s-sat``): SMs reaching 95% of it.
S_SAT_SHARE = 0.95


def _soft_min(x: float, p: float) -> float:
    """``x / (1 + x**p) ** (1 / p)``: ~x for x << 1, ~1 for x >> 1."""
    return x / (1.0 + x**p) ** (1.0 / p)


@dataclass(frozen=True)
class BandwidthCurve:
    """Share (0-1] of whole-GPU HBM bandwidth a memory-bound kernel reaches on ``s`` of ``total_sms`` SMs.

    ``s_sat``: SMs that reach :data:`S_SAT_SHARE` of the whole GPU's bandwidth (1 to ``total_sms``);
    ``sharpness``: ``p`` of the soft minimum (larger = sharper knee; fitted per SM architecture,
    :class:`BandwidthFamily`).
    An ``s_sat`` at or above ``0.95 * total_sms`` makes the curve linear in SMs (the most a curve that
    must reach 1.0 at ``total_sms`` can lose). Raises :class:`InputError` for values out of range.
    """

    total_sms: int
    s_sat: float
    sharpness: float

    def __post_init__(self) -> None:
        if not self.total_sms >= 1:
            raise InputError(f"SM count must be >= 1, got {self.total_sms}")
        if not 1 <= self.s_sat <= self.total_sms:
            raise InputError(f"S_SAT must be from 1 to the GPU's {self.total_sms} SMs, got {self.s_sat:g}")
        if not 0.5 <= self.sharpness <= 20:
            raise InputError(f"bandwidth curve sharpness must be from 0.5 to 20, got {self.sharpness:g}")
        object.__setattr__(self, "_knee", self._solve_knee())

    def _solve_knee(self) -> float | None:
        """The knee ``k`` with ``share(s_sat) == 0.95``; ``None`` for the linear curve."""
        total, target = float(self.total_sms), self.s_sat
        if target >= S_SAT_SHARE * total:
            return None
        p = self.sharpness

        def share_at(k: float) -> float:
            return _soft_min(target / k, p) / _soft_min(total / k, p)

        lo, hi = 1e-6 * total, 1e6 * total  # share_at falls as k grows (the plateau comes later)
        for _ in range(200):
            mid = (lo * hi) ** 0.5
            if share_at(mid) > S_SAT_SHARE:
                lo = mid
            else:
                hi = mid
        return (lo * hi) ** 0.5

    @property
    def knee(self) -> float | None:
        """The knee ``k`` (SMs) of the soft minimum; ``None`` for the linear curve."""
        return self._knee  # type: ignore[attr-defined]

    def share(self, sms: float) -> float:
        """Share of whole-GPU bandwidth on ``sms`` SMs (0 for 0 SMs, 1.0 at ``total_sms``)."""
        if sms <= 0:
            return 0.0
        if sms >= self.total_sms:
            return 1.0
        knee = self._knee  # type: ignore[attr-defined]
        if knee is None:
            return sms / self.total_sms
        p = self.sharpness
        return _soft_min(sms / knee, p) / _soft_min(self.total_sms / knee, p)


def s_sat_for_knee(total_sms: int, knee: float, sharpness: float) -> float:
    """SMs (a real number, 1 to ``total_sms``) at which the soft-minimum curve of knee ``knee`` (SMs) and
    sharpness ``p`` reaches :data:`S_SAT_SHARE` of its value at ``total_sms``; ``total_sms`` when even the
    whole GPU is short of it (the curve is then taken as linear, as :class:`BandwidthCurve` does)."""
    total = float(total_sms)
    full = _soft_min(total / knee, sharpness)
    lo, hi = 0.0, total
    if _soft_min(S_SAT_SHARE * total / knee, sharpness) / full >= S_SAT_SHARE:
        for _ in range(100):  # share(s) rises with s: bisect share(s) = 0.95
            mid = (lo + hi) / 2
            if _soft_min(mid / knee, sharpness) / full >= S_SAT_SHARE:
                hi = mid
            else:
                lo = mid
        return max(1.0, hi)
    return total


@dataclass(frozen=True)
class BandwidthFamily:
    """The bandwidth-vs-SMs curve of one SM architecture, for GPUs of compute capability ``family``
    (``"9"``: any 9.x; ``"8.9"``: that one only).

    ``sm_bytes_per_s``: bytes/s one SM adds to a memory-bound kernel below the knee, as datasheet bytes
    (the knee of a GPU with ``B`` datasheet bytes/s is ``B / sm_bytes_per_s`` SMs); ``sharpness``: ``p`` of
    the soft minimum. ``fitted_on``: the GPU profile key of the measurements; ``median_error``: the fit's;
    ``source``: which measurements. Raises :class:`InputError` for values out of range.
    """

    family: str
    sharpness: float
    sm_bytes_per_s: float
    fitted_on: str = ""
    median_error: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        if not 0.5 <= self.sharpness <= 20:
            raise InputError(f"bandwidth family {self.family}: sharpness must be from 0.5 to 20, got "
                             f"{self.sharpness:g}")
        if not 1e8 <= self.sm_bytes_per_s <= 1e13:
            raise InputError(f"bandwidth family {self.family}: sm_bytes_per_s must be from 1e8 to 1e13, "
                             f"got {self.sm_bytes_per_s:g}")

    def s_sat(self, total_sms: int, hbm_bytes_per_s: float) -> float:
        """The default S_SAT (SMs, not rounded) of a GPU with ``total_sms`` SMs and ``hbm_bytes_per_s``."""
        return s_sat_for_knee(total_sms, hbm_bytes_per_s / self.sm_bytes_per_s, self.sharpness)

    def matches(self, compute_capability: tuple[int, int]) -> int:
        """2: this family names the exact capability; 1: its major; 0: neither."""
        major, minor = compute_capability
        if self.family == f"{major}.{minor}":
            return 2
        return 1 if self.family == str(major) else 0


def pick_bandwidth_family(
    families: Sequence[BandwidthFamily], compute_capability: tuple[int, int] | None
) -> tuple[BandwidthFamily, Finding | None]:
    """The family whose curve a GPU of ``compute_capability`` takes, and a finding (``None`` when its own):
    the exact capability, else its major, else the measured family with the nearest major (ties: the newer).
    ``None`` (capability unknown): the first family. Raises :class:`InputError` for no families."""
    if not families:
        raise InputError("no bandwidth-vs-SMs family is defined (common.yaml partitions.bandwidth_families)")
    if compute_capability is None:
        return families[0], None
    best = max(families, key=lambda f: f.matches(compute_capability))
    if best.matches(compute_capability):
        return best, None
    major = compute_capability[0]
    nearest = min(families,
                  key=lambda f: (abs(int(f.family.split(".")[0]) - major), -int(f.family.split(".")[0])))
    major_minor = ".".join(map(str, compute_capability))
    return nearest, Finding("costmodel.bandwidth_family_stand_in", {
        "compute_capability": major_minor, "stand_in": nearest.fitted_on or "family " + nearest.family})


@dataclass(frozen=True)
class Interference:
    """Co-run factors in (0, 1]: a phase's rate next to the other phase / its rate alone on the same SMs.

    ``decode_bandwidth``: ``((decode SM share, factor), ...)`` ascending in share, interpolated linearly
    and clamped at the ends (decode's bandwidth next to a running GEMM). ``prefill_flops``: the same for
    prefill's FLOP/s next to decode, by decode's share (empty = 1.0: not measured).
    """

    decode_bandwidth: tuple[tuple[float, float], ...]
    prefill_flops: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        for name in ("decode_bandwidth", "prefill_flops"):
            curve = getattr(self, name)
            shares = [s for s, _ in curve]
            if shares != sorted(set(shares)) or any(not 0 <= s <= 1 for s in shares):
                raise InputError(f"interference '{name}': shares must be distinct, ascending, in [0, 1]")
            if any(not 0.05 <= f <= 1 for _, f in curve):
                raise InputError(f"interference '{name}': factors must be from 0.05 to 1")

    def decode_bandwidth_factor(self, decode_share: float) -> float:
        """Factor on decode's bandwidth with ``decode_share`` of the SMs while prefill runs on the rest."""
        return interpolate_clamped(self.decode_bandwidth, decode_share)

    def prefill_flops_factor(self, decode_share: float) -> float:
        """Factor on prefill's FLOP/s while decode runs on ``decode_share`` of the SMs."""
        return interpolate_clamped(self.prefill_flops, decode_share)


def interpolate_clamped(curve: Sequence[tuple[float, float]], x: float, default: float = 1.0) -> float:
    """Piecewise-linear ``y(x)`` over ``curve`` (``(x, y)`` pairs, x ascending), clamped to the end
    values outside the measured range; ``default`` for an empty curve."""
    if not curve:
        return default
    xs = [a for a, _ in curve]
    i = bisect.bisect_left(xs, x)
    if i == 0:
        return curve[0][1]
    if i >= len(curve):
        return curve[-1][1]
    (xa, ya), (xb, yb) = curve[i - 1], curve[i]
    return ya + (yb - ya) * (x - xa) / (xb - xa)
