"""SM partitions: how bandwidth and GEMM throughput change when a phase runs on ``s`` of a GPU's SMs.

Pure functions and frozen dataclasses, stdlib only.

- :class:`BandwidthCurve`: the share of the whole GPU's HBM bandwidth that ``s`` SMs reach, a smooth
  saturating curve ``r(s / k) / r(S / k)`` with ``r(x) = x / (1 + x**p) ** (1 / p)`` (a soft minimum of
  "linear in SMs" and "the plateau"). ``p`` is fitted to NanoFlow's A100 sweep
  (``profiles/measurements/nanoflow/a100_decode_attention_bw_vs_sms.csv``); ``k`` follows from S_SAT, the
  SM count that reaches 95% of the whole GPU's bandwidth (the user's ``--s-sat``).
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

from ..errors import InputError

#: Share of the whole GPU's bandwidth that defines S_SAT (``--s-sat``): SMs reaching 95% of it.
S_SAT_SHARE = 0.95


def _soft_min(x: float, p: float) -> float:
    """``x / (1 + x**p) ** (1 / p)``: ~x for x << 1, ~1 for x >> 1."""
    return x / (1.0 + x**p) ** (1.0 / p)


@dataclass(frozen=True)
class BandwidthCurve:
    """Share (0-1] of whole-GPU HBM bandwidth a memory-bound kernel reaches on ``s`` of ``total_sms`` SMs.

    ``s_sat``: SMs that reach :data:`S_SAT_SHARE` of the whole GPU's bandwidth (1 to ``total_sms``);
    ``sharpness``: ``p`` of the soft minimum (larger = sharper knee; fitted 2.3 on NanoFlow's A100 data).
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


def gemm_equivalent_tokens(tokens: float, sms: int, total_sms: int) -> float:
    """Tokens a GEMM of ``tokens`` rows on ``sms`` SMs is worth on the whole GPU: ``tokens * S / s``."""
    return tokens * total_sms / sms


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
