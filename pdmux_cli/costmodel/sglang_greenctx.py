"""SGLang's green-context latency tables as a check of the SM-partition terms, and as fit data.

The tables (``profiles/measurements/sglang_greenctx/``, read by
:func:`pdmux_cli.costmodel.measurements.greenctx_prefill` / ``greenctx_decode``) are the PD-multiplexing
authors' offline fits of a whole prefill and a whole decode step under CUDA green contexts, per SM count
(sgl-project/sglang commit 56f74d24, ``python/sglang/srt/multiplex/predictor.py``). They do not say which
model or TP they measured, so pdmux compares **shapes**, each normalised on the same table:

- ``decode``: a decode step on ``s`` SMs over the same step on the whole GPU, at the batches of
  :data:`DECODE_POINTS` (weights and fixed costs dominate the small batch, the KV read the large ones);
- ``prefill``: a prefill of ``n`` tokens (:data:`PREFILL_TOKENS`) on ``s`` SMs over the whole GPU's;
- ``small prefill``: on the same ``s`` SMs, a prefill of ``n`` tokens (:data:`SMALL_PREFILL_TOKENS`)
  over one of :data:`SMALL_PREFILL_REFERENCE` tokens: where small prefills pay more than their share of
  the work (a fixed cost), the ratio exceeds ``n / 8192``.

pdmux predicts the same ratios with its roofline model for the setups of :data:`SETUPS`: Llama-3.1-70B
at TP 8 for the H800 and A100 tables (the PD-multiplexing authors' A100 results are Llama-3.1-70B on
8 x A100, LMSYS blog 2025-09-28), Llama-3.1-8B at TP 8 for the ``A100_8B`` tables (named for their
model). Of Llama-3.1-8B/70B at TP 1, 2, 4 and 8, these are the setups whose whole-GPU 8192-token
prefill comes nearest each table's (473 vs 499 ms on the H800, 921 vs 866 on the A100, 134 vs 135 for
the 8B; TP 4 is 35-76% off); the 8B table's KV term at 108 SMs is one TP-8 rank's KV read at 84% of the
A100's datasheet bandwidth. Their whole-GPU decode steps are 13-31% shorter than the tables' (9.9 vs
14.4, 18.9 vs 21.7, 4.2 vs 5.5 ms): time per step that pdmux does not count (host work in a
wall-clock step, say) would flatten the measured decode shape, so a curve fitted to it may credit some
of that to bandwidth. Points are taken inside each table's range only (the fits are quadratic in
tokens: at 32768 tokens the A100 table above 8192 reads 33% apart between 104 and 108 SMs).

``H800`` and ``A100`` are fit data (``role: fit``; ``benchmarks/fit_efficiency.py`` fits the Hopper
bandwidth curve to the H800 decode shapes and the prefill fixed time to both tables' prefill shapes,
:data:`FITTED`; the A100 decode shapes check NanoFlow's Ampere curve); ``A100_8B`` is kept out of every
fit (``role: out-of-sample``; :data:`CHECK_TABLES`; the fit functions refuse its points). Pure Python;
the profile loaders are the only I/O.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from . import measurements
from .efficiency import PartitionProfile
from .fit import _frange, grid_search
from .partitions import BandwidthFamily, Interference

#: The kinds of shape point (module docstring).
KINDS = ("decode", "prefill", "small prefill")
#: Tables the partition constants are fitted to, and the one only checked (never fitted).
FIT_TABLES = ("H800", "A100")
CHECK_TABLES = ("A100_8B",)
#: Per kind, the fit tables that ``benchmarks/fit_efficiency.py`` fits to: the Hopper curve to the H800
#: decode shapes (the A100's check NanoFlow's Ampere curve, which they agree with), the prefill fixed time
#: to both tables' prefill shapes.
FITTED = {"decode": ("H800",), "prefill": FIT_TABLES, "small prefill": FIT_TABLES}

#: ``(batch, KV tokens of the batch)`` of the decode points: 1 x 1K, 16 x 2K, 64 x 2K (the < 128K
#: tables) and 32 x 8K (the > 128K table).
DECODE_POINTS = ((1, 1024), (16, 32768), (64, 131072), (32, 262144))
#: New tokens of the prefill points (one prompt, no cached prefix): two per table range, 512 being the
#: smallest prefill the file predicts.
PREFILL_TOKENS = (512, 1024, 2048, 4096, 8192, 16384)
#: Small prefills, each over one of :data:`SMALL_PREFILL_REFERENCE` tokens on the same SMs.
SMALL_PREFILL_TOKENS = (512, 1024, 2048)
SMALL_PREFILL_REFERENCE = 8192


@dataclass(frozen=True)
class Setup:
    """What pdmux predicts a table with: GPU profile key, model profile name, TP degree."""

    gpu: str
    model: str
    tp: int


#: Table -> setup (module docstring says why).
SETUPS = {
    "H800": Setup("h800-sxm", "llama-3.1-70b", 8),
    "A100": Setup("a100-sxm-80gb", "llama-3.1-70b", 8),
    "A100_8B": Setup("a100-sxm-80gb", "llama-3.1-8b", 8),
}


@dataclass(frozen=True)
class ShapePoint:
    """One measured ratio of a table. ``kind``: ``"decode"``, ``"prefill"`` or ``"small prefill"``;
    ``sms``: the SMs of the numerator; ``batch`` and ``tokens``: the decode batch and its KV tokens, or
    (``batch`` 0) the prefill's new tokens; ``measured``: the ratio (see the module docstring)."""

    table: str
    kind: str
    sms: int
    total_sms: int
    batch: int
    tokens: int
    measured: float

    @property
    def what(self) -> str:
        """One line naming the point, for the accuracy report."""
        if self.kind == "decode":
            return (f"{self.table} decode {self.batch} x {self.tokens // self.batch} tokens, "
                    f"{self.sms} / {self.total_sms} SMs")
        if self.kind == "prefill":
            return f"{self.table} prefill {self.tokens} tokens, {self.sms} / {self.total_sms} SMs"
        return f"{self.table} prefill {self.tokens} / {SMALL_PREFILL_REFERENCE} tokens on {self.sms} SMs"


def _by_sms(rows: list, table: str, pick) -> dict[int, Any]:
    return {r.sms: r for r in rows if r.table == table and pick(r)}


def shape_points(kind: str, tables: tuple[str, ...]) -> list[ShapePoint]:
    """The measured ratios of ``kind`` (``"decode"``, ``"prefill"``, ``"small prefill"``) for ``tables``,
    every SM count of each table (the whole GPU's left out of the first two: it is the normalisation)."""
    out: list[ShapePoint] = []
    for table in tables:
        if kind == "decode":
            rows = measurements.greenctx_decode()
            for batch, prefix in DECODE_POINTS:
                mine = _by_sms(rows, table, lambda r, p=prefix: r.covers(p))
                total = next(iter(mine.values())).total_sms
                full = mine[total].latency_s(batch, prefix)
                out += [ShapePoint(table, kind, s, total, batch, prefix, r.latency_s(batch, prefix) / full)
                        for s, r in sorted(mine.items()) if s != total]
        elif kind == "prefill":
            rows = measurements.greenctx_prefill()
            for tokens in PREFILL_TOKENS:
                mine = _by_sms(rows, table, lambda r, n=tokens: r.covers(n))
                total = next(iter(mine.values())).total_sms
                full = mine[total].latency_s(tokens)
                out += [ShapePoint(table, kind, s, total, 0, tokens, r.latency_s(tokens) / full)
                        for s, r in sorted(mine.items()) if s != total]
        elif kind == "small prefill":
            rows = measurements.greenctx_prefill()
            reference = _by_sms(rows, table, lambda r: r.covers(SMALL_PREFILL_REFERENCE))
            for tokens in SMALL_PREFILL_TOKENS:
                mine = _by_sms(rows, table, lambda r, n=tokens: r.covers(n))
                out += [ShapePoint(table, kind, s, r.total_sms, 0, tokens,
                                   r.latency_s(tokens) / reference[s].latency_s(SMALL_PREFILL_REFERENCE))
                        for s, r in sorted(mine.items())]
        else:
            raise ValueError(f"unknown kind {kind!r}")
    return out


def predict(point: ShapePoint, model: Any) -> float:
    """The ratio ``point`` measures, from a step model (:class:`pdmux_cli.costmodel.StepModel`) of the
    table's setup."""
    if point.kind == "decode":
        return model.decode_s(point.sms, point.batch, point.tokens) / model.decode_s(
            point.total_sms, point.batch,
                                                                                  point.tokens)
    if point.kind == "prefill":
        return model.prefill_s(point.sms, [(point.tokens, 0)]) / model.prefill_s(
            point.total_sms, [(point.tokens, 0)])
    return model.prefill_s(point.sms, [(point.tokens, 0)]) / model.prefill_s(
        point.sms, [(SMALL_PREFILL_REFERENCE, 0)])


def step_model(table: str, partitions: Any = None) -> Any:
    """The roofline model of ``table``'s setup (:data:`SETUPS`), with the shipped partition terms or
    ``partitions`` (a :class:`~pdmux_cli.costmodel.efficiency.PartitionProfile`, for fits)."""
    from ..catalog.hardware import find_gpu
    from ..catalog.model import load_model
    from . import build_step_model

    setup = SETUPS[table]
    model = build_step_model(find_gpu(setup.gpu), load_model(setup.model), tp=setup.tp)
    if partitions is not None:
        model = with_partitions(model, partitions)
    return model


def with_partitions(model: Any, partitions: Any) -> Any:
    """A fresh roofline model like ``model`` with other partition terms (its caches empty)."""
    from .roofline import RooflineModel

    return RooflineModel(
        model.model, gpu_name=model.gpu_name, total_sms=model.total_sms, hbm_bytes_per_s=model.hbm,
        dense_flops=model.peak, gemm_flops=model.gemm_peak, efficiency=model.eff, partitions=partitions,
        cpu=model.cpu, kv_bytes_per_element=model.kv_bytes_per_element, decode_fixed_s=model.decode_fixed_s,
        tp=model.tp, collectives=model.collectives, notes=model.notes, serving=model.serving,
        compute_capability=model.compute_capability,
    )


# ---------------------------------------------------------------------------------------------------
# fits (benchmarks/fit_efficiency.py): the fit tables only


def _fit_points_only(points: Sequence[ShapePoint]) -> None:
    """Refuse any point outside :data:`FIT_TABLES` (``A100_8B`` is kept out of every fit)."""
    bad = sorted({p.table for p in points} - set(FIT_TABLES))
    if bad:
        raise ValueError(f"green-context tables {', '.join(bad)} are kept out of every fit (fit: "
                         f"{', '.join(FIT_TABLES)})")


def _median_error(points: Sequence[ShapePoint], model: Any) -> float:
    return statistics.median(abs(predict(p, model) - p.measured) / p.measured for p in points)


def _base_partitions(family: BandwidthFamily, prefill_layer_s: float = 0.0) -> PartitionProfile:
    return PartitionProfile(families=(family,), interference=Interference(()),
                            prefill_layer_s=prefill_layer_s)


def fit_bandwidth_family(family: str, table: str, source: str = "") -> BandwidthFamily:
    """Fit one SM architecture's curve (:class:`~pdmux_cli.costmodel.partitions.BandwidthFamily`),
    ``sharpness`` and ``sm_bytes_per_s``, to the decode shapes of fit table ``table``, predicted with its
    :func:`step_model`: grid search on (sharpness, knee in SMs of the table's GPU) minimising the median
    error, which ``median_error`` holds. Raises :class:`ValueError` for a table kept out of fits."""
    points = shape_points("decode", (table,))
    _fit_points_only(points)
    model = step_model(table)
    total, hbm = model.total_sms, model.hbm

    def objective(p: float, knee: float) -> float:
        return _median_error(points,
                             with_partitions(model, _base_partitions(BandwidthFamily(family, p, hbm / knee))))

    error, (p, knee) = grid_search(objective, [_frange(1.0, 6.0, 0.25), _frange(5.0, 2.0 * total, 2.0)])
    return BandwidthFamily(family, round(p, 3), float(f"{hbm / knee:.4g}"), SETUPS[table].gpu,
                           round(error, 4), source)


def fit_prefill_layer_s(points: Sequence[ShapePoint], models: dict[str, Any],
                        partitions: PartitionProfile) -> tuple[float, float]:
    """Fit the fixed time per layer of a prefill pass (seconds, 0 to 1 ms) to prefill and small-prefill
    shape ``points`` of the fit tables, each table's predicted with ``models[table]`` under ``partitions``
    (the families already fitted). Every (table, kind) group counts the same (mean of their median
    errors). Returns ``(seconds per layer, that mean error)``. Raises :class:`ValueError` for a point of a
    table kept out of fits."""
    _fit_points_only(points)
    groups: dict[tuple[str, str], list[ShapePoint]] = {}
    for p in points:
        groups.setdefault((p.table, p.kind), []).append(p)

    def objective(layer_s: float) -> float:
        part = replace(partitions, prefill_layer_s=layer_s)
        fresh = {t: with_partitions(m, part) for t, m in models.items()}
        return statistics.fmean(_median_error(g, fresh[t]) for (t, _), g in groups.items())

    error, (layer_s,) = grid_search(objective, [_frange(0.0, 1e-3, 10e-6)])
    return float(f"{layer_s:.3g}"), error


__all__ = ["CHECK_TABLES", "DECODE_POINTS", "FITTED", "FIT_TABLES", "KINDS", "PREFILL_TOKENS", "SETUPS",
           "SMALL_PREFILL_REFERENCE", "SMALL_PREFILL_TOKENS", "Setup", "ShapePoint", "fit_bandwidth_family",
           "fit_prefill_layer_s", "predict", "shape_points", "step_model", "with_partitions"]
