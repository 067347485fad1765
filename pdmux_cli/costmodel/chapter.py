"""The chapter's cost model (``--cost-model chapter``): decode, prefill and chunked-step times on a share of
the SMs.

The model of pd-multiplexing-chapter.txt, "Is it worth it: an estimate", kept exact so that
``pdmux estimate --cost-model chapter`` reproduces the chapter's table. A decode step reads the weights and
every request's KV once (``max(bytes / B/s, FLOP / FLOP/s)`` over the whole step); prefill is
compute-bound; a chunked step is ``max(chunk FLOPs / FLOP/s, decode step)``. No per-operator
efficiencies, no memory floor for prefill, no CPU time: see :mod:`pdmux_cli.costmodel.roofline` for
the default model.

Pure functions over a :class:`~pdmux_cli.catalog.model.Model` and a *throughput* object that says how fast
``s`` SMs read HBM and compute. Two throughputs exist:

- :class:`AnalyticThroughput`, the chapter's model (pd-multiplexing-chapter.txt, "Is it worth it"):
  bandwidth ``HBM * efficiency * min(1, s / S_SAT)``, FLOP/s ``dense * MFU * s / total``, and no
  co-run interference (its largest unknown, which is why S_SAT takes several values);
- the calibrated throughput built by ``pdmux bench`` (``pdmux_cli.costmodel.calibration_file``), from measured
  bandwidth-vs-SMs and FLOP/s-vs-SMs curves and the measured co-run interference.

Any object with the four methods of :class:`Throughput` works. Times are in seconds (``_s``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..catalog import model as mdl
from ..util.errors import InputError
from ..catalog.model import Model


class Throughput(Protocol):
    """How fast ``sms`` SMs move bytes and do math, alone and next to the other phase.

    ``source``: a short text for output (``"analytic S_SAT=66"``, ``"calibration h200.yaml"``).
    """

    source: str

    def bandwidth_bytes_per_s(self, sms: int) -> float:
        """HBM bytes/s a memory-bound decode step reaches on ``sms`` SMs, running alone."""
        ...

    def flops_per_s(self, sms: int) -> float:
        """Dense FLOP/s a compute-bound prefill reaches on ``sms`` SMs, running alone."""
        ...

    def corun_bandwidth_factor(self, prefill_sms: int, decode_sms: int) -> float:
        """Multiplier (0-1] on decode's bandwidth while prefill runs on the other SMs."""
        ...

    def corun_flops_factor(self, prefill_sms: int, decode_sms: int) -> float:
        """Multiplier (0-1] on prefill's FLOP/s while decode runs on the other SMs."""
        ...


@dataclass(frozen=True)
class AnalyticThroughput:
    """The chapter's analytic throughput for one GPU.

    ``total_sms`` (SMs), ``hbm_bytes_per_s`` (datasheet B/s), ``dense_flops`` (datasheet dense
    FLOP/s of the compute dtype), ``bandwidth_efficiency`` (fraction of datasheet bandwidth a decode
    step reaches; chapter 0.85), ``mfu`` (prefill's fraction of dense FLOP/s; chapter 0.5),
    ``s_sat`` (SMs needed to saturate bandwidth; chapter 44, 66 or 88 on H100's 132).
    No interference between co-running phases: bandwidth and L2 sharing is not modelled.
    """

    total_sms: int
    hbm_bytes_per_s: float
    dense_flops: float
    bandwidth_efficiency: float = 0.85
    mfu: float = 0.5
    s_sat: float = 66.0

    def __post_init__(self) -> None:
        for name in ("total_sms", "hbm_bytes_per_s", "dense_flops", "s_sat"):
            if not getattr(self, name) > 0:
                raise InputError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("bandwidth_efficiency", "mfu"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise InputError(f"{name} must be in (0, 1], got {value}")

    @property
    def source(self) -> str:
        return self.source_text()

    def source_text(self, s_sat: bool = True) -> str:
        """:attr:`source`; with ``s_sat=False`` without the S_SAT."""
        return f"chapter (bandwidth x{self.bandwidth_efficiency:g}, MFU {self.mfu:g}" + (
            f", S_SAT={self.s_sat:g})" if s_sat else ")")

    def bandwidth_bytes_per_s(self, sms: int) -> float:
        """``hbm * efficiency * min(1, sms / s_sat)`` (B/s)."""
        return self.hbm_bytes_per_s * self.bandwidth_efficiency * min(1.0, sms / self.s_sat)

    def flops_per_s(self, sms: int) -> float:
        """``dense * mfu * sms / total_sms`` (FLOP/s): prefill scales linearly with its SMs."""
        return self.dense_flops * self.mfu * sms / self.total_sms

    def corun_bandwidth_factor(self, prefill_sms: int, decode_sms: int) -> float:
        return 1.0

    def corun_flops_factor(self, prefill_sms: int, decode_sms: int) -> float:
        return 1.0


def _check_sms(sms: int) -> None:
    if sms <= 0:
        raise InputError(f"a phase needs at least 1 SM, got {sms}")


def decode_step_s(
    model: Model,
    throughput: Throughput,
    sms: int,
    decode_bs: int,
    context_tokens: int,
    weight_bytes_per_param: float | None = None,
    kv_bytes_per_element: float = 2,
    concurrent_prefill_sms: int = 0,
) -> float:
    """Seconds of one decode step on ``sms`` SMs: the roofline ``max(bytes / B/s, FLOP / FLOP/s)``.

    Every one of the ``decode_bs`` requests has ``context_tokens`` tokens cached (the chapter's
    scenario). ``concurrent_prefill_sms`` > 0 applies the throughput's co-run bandwidth factor
    (prefill running on the other SMs at the same time). Chapter: Qwen3-8B, 32 requests at 2048
    tokens on a full H100 -> 0.0092 s (memory-bound). Raises :class:`InputError` for ``sms`` < 1.
    """
    if decode_bs <= 0:
        _check_sms(sms)
        return 0.0
    return decode_step_s_batch(
        model, throughput, sms, decode_bs,
        kv_cache_bytes=decode_bs * mdl.kv_bytes(model, context_tokens, kv_bytes_per_element),
        attention_flops=decode_bs * mdl.decode_attention_flops(model, context_tokens),
        weight_bytes_per_param=weight_bytes_per_param, concurrent_prefill_sms=concurrent_prefill_sms,
    )


def decode_step_s_batch(
    model: Model,
    throughput: Throughput,
    sms: int,
    decode_bs: int,
    kv_cache_bytes: float,
    attention_flops: float,
    weight_bytes_per_param: float | None = None,
    concurrent_prefill_sms: int = 0,
) -> float:
    """:func:`decode_step_s` for a batch of mixed lengths, given its totals.

    ``kv_cache_bytes``: the KV cache all ``decode_bs`` requests read this step (sum of
    ``model.kv_bytes`` over them, bytes); ``attention_flops``: their decode attention FLOPs (sum of
    ``model.decode_attention_flops``). A simulator keeps both totals as requests join and grow.
    """
    _check_sms(sms)
    if decode_bs <= 0:
        return 0.0
    bandwidth = throughput.bandwidth_bytes_per_s(sms)
    if concurrent_prefill_sms:
        bandwidth *= throughput.corun_bandwidth_factor(concurrent_prefill_sms, sms)
    step_bytes = mdl.decode_weight_bytes(model, decode_bs, weight_bytes_per_param) + kv_cache_bytes
    step_flops = decode_bs * mdl.flops_per_token_linear(model) + attention_flops
    return max(step_bytes / bandwidth, step_flops / throughput.flops_per_s(sms))


def prefill_flops(model: Model, tokens: int, cached_tokens: int = 0) -> float:
    """FLOPs to prefill ``tokens`` new tokens after ``cached_tokens`` already cached.

    ``2 * active linear params * tokens`` (lm_head counted for every token, as the chapter does)
    plus causal attention (``model.attention_flops``).
    """
    if tokens < 0 or cached_tokens < 0:
        raise InputError(f"token counts must be >= 0, got {tokens} new after {cached_tokens} cached")
    return mdl.flops_per_token_linear(model) * tokens + mdl.attention_flops(model, tokens, cached_tokens)


def prefill_s(
    model: Model,
    throughput: Throughput,
    sms: int,
    tokens: int,
    cached_tokens: int = 0,
    concurrent_decode_sms: int = 0,
) -> float:
    """Seconds to prefill ``tokens`` tokens on ``sms`` SMs (compute-bound).

    ``concurrent_decode_sms`` > 0 applies the throughput's co-run FLOP/s factor. Chapter: 8192
    tokens of Qwen3-8B on a full H100 -> 0.291 s, on 80 SMs -> 0.480 s.
    """
    _check_sms(sms)
    flops_per_s = throughput.flops_per_s(sms)
    if concurrent_decode_sms:
        flops_per_s *= throughput.corun_flops_factor(sms, concurrent_decode_sms)
    return prefill_flops(model, tokens, cached_tokens) / flops_per_s


def chunked_step_s(
    model: Model,
    throughput: Throughput,
    total_sms: int,
    decode_bs: int,
    context_tokens: int,
    chunk_tokens: int,
    cached_prompt_tokens: int,
    weight_bytes_per_param: float | None = None,
    kv_bytes_per_element: float = 2,
) -> float:
    """Seconds of one chunked-prefill step on the whole GPU: the decode batch plus one prompt chunk.

    ``max((chunk's prefill FLOPs + decode batch's linear FLOPs) / FLOP/s, decode-only step)``, the
    chapter's rule: the mixed step is compute-bound once the chunk is large, and never faster than
    the decode step alone. ``cached_prompt_tokens``: prompt tokens prefilled by earlier chunks.
    """
    mixed_flops = prefill_flops(model, chunk_tokens, cached_prompt_tokens)
    mixed_flops += decode_bs * mdl.flops_per_token_linear(model)
    decode_only = decode_step_s(
        model, throughput, total_sms, decode_bs, context_tokens, weight_bytes_per_param, kv_bytes_per_element
    )
    return max(mixed_flops / throughput.flops_per_s(total_sms), decode_only)


def _coefficients(fn, window: int) -> tuple[float, float]:
    """``(a, b)`` with ``fn(c) == a * c + b * min(c, window)`` (``b = 0`` without a window)."""
    if not window:
        return fn(1), 0.0
    a = (fn(2 * window) - fn(window)) / window
    b = fn(window) / window - a
    return a, b


class ChapterModel:
    """The chapter's model behind the step interface the estimate and the simulator use
    (:class:`pdmux_cli.costmodel.StepModel`), with per-SM-count caches.

    ``throughput``: :class:`AnalyticThroughput` (the chapter's guesses) or a calibration's measured
    curves. ``total_sms``: SMs. ``weight_bytes_per_param`` (``None``: the model's format) and
    ``kv_bytes_per_element`` (bytes). No CPU time (:attr:`cpu` is all zeros) and no serving delays
    (:attr:`serving`): the chapter has none.
    :meth:`decode_s` equals :func:`decode_step_s_batch`, :meth:`prefill_s` :func:`prefill_s` and
    :meth:`mixed_s` :func:`chunked_step_s` for the same inputs (tested).
    """

    name = "chapter"
    #: The estimate's rows (:class:`pdmux_cli.costmodel.StepModel`) as the chapter's table has them: no
    #: chunked row unless asked, a whole chunk of prompt beside the decode batch, and a note when a prefill
    #: comes out shorter than one read of the weights (its MFU and bandwidth guesses disagree).
    default_chunked_row = False
    mixed_chunk_charges_decode_rows = False
    notes_short_prefill = True
    #: What the commands ask of it (:class:`pdmux_cli.costmodel.StepModel`), as the chapter has it: no CPU
    #: time (:attr:`cpu` all zeros), S_SAT a guess (the chapter's 44, 66, 88 of H100's 132 SMs:
    #: :data:`pdmux_cli.planning.estimate.DEFAULT_S_SAT_FRACTIONS`, a PD-mux row each), no verify pass, and no
    #: measured error to draw an interval from.
    models_cpu_time = False
    guesses_s_sat = True
    verifies_drafts = False
    has_error_interval = False

    def __init__(self, model: Model, throughput: Throughput, total_sms: int,
                 weight_bytes_per_param: float | None = None, kv_bytes_per_element: float = 2.0) -> None:
        from .efficiency import NO_SERVING_DELAYS, CpuProfile

        self.model = model
        self.throughput = throughput
        self.total_sms = total_sms
        self.weight_bytes_per_param = weight_bytes_per_param
        self.cpu = CpuProfile(0.0, 0.0, 0.0, 1, "the chapter's model has no CPU time")
        self.serving = NO_SERVING_DELAYS
        self.notes: list[str] = []
        self.linear_flops = mdl.flops_per_token_linear(model)
        self.window = model.sliding_window if model.num_sliding_layers else 0
        kvb = kv_bytes_per_element
        self.kv_a, self.kv_b = _coefficients(lambda c: mdl.kv_bytes(model, c, kvb), self.window)
        self.attn_a, self.attn_b = _coefficients(lambda c: mdl.decode_attention_flops(model, c), self.window)
        self._weight_bytes: list[float] = [0.0]
        self._decode_rates: dict[tuple[int, int], tuple[float, float]] = {}
        self._prefill_rates: dict[tuple[int, int], float] = {}

    @property
    def source(self) -> str:
        """The throughput's description (``"chapter (bandwidth x0.85, MFU 0.5, S_SAT=66)"`` or the
        calibration's)."""
        return self.throughput.source

    def source_text(self, s_sat: bool = True) -> str:
        """:attr:`source`; with ``s_sat=False`` without the analytic S_SAT (a calibration's source has
        none)."""
        text = getattr(self.throughput, "source_text", None)
        return text(s_sat) if text is not None else self.throughput.source

    @property
    def s_sat(self) -> float | None:
        """The analytic S_SAT, or ``None`` for a calibration."""
        return getattr(self.throughput, "s_sat", None)

    def bandwidth_share(self, sms: int) -> float:
        """Share of whole-GPU bandwidth on ``sms`` SMs."""
        return (self.throughput.bandwidth_bytes_per_s(sms)
                / self.throughput.bandwidth_bytes_per_s(self.total_sms))

    def corun_bandwidth_factor(self, prefill_sms: int, decode_sms: int) -> float:
        """The throughput's co-run factor on decode's bandwidth (1.0 for the analytic one)."""
        return self.throughput.corun_bandwidth_factor(prefill_sms, decode_sms)

    def corun_flops_factor(self, prefill_sms: int, decode_sms: int) -> float:
        """The throughput's co-run factor on prefill's FLOP/s (1.0 for the analytic one)."""
        return self.throughput.corun_flops_factor(prefill_sms, decode_sms)

    def _weight_bytes_at(self, decode_bs: int) -> float:
        cache = self._weight_bytes
        while len(cache) <= decode_bs:
            cache.append(mdl.decode_weight_bytes(self.model, len(cache), self.weight_bytes_per_param))
        return cache[decode_bs]

    def _decode_rate(self, sms: int, corun_sms: int) -> tuple[float, float]:
        key = (sms, corun_sms)
        rates = self._decode_rates.get(key)
        if rates is None:
            _check_sms(sms)
            bandwidth = self.throughput.bandwidth_bytes_per_s(sms)
            if corun_sms:
                bandwidth *= self.throughput.corun_bandwidth_factor(corun_sms, sms)
            rates = (1.0 / bandwidth, 1.0 / self.throughput.flops_per_s(sms))
            self._decode_rates[key] = rates
        return rates

    def decode_s(self, sms: int, n: int, sum_context: float, sum_window: float = 0.0, corun_sms: int = 0,
                 cuda_graph: bool = True) -> float:
        """Seconds of one decode step of ``n`` requests whose contexts sum to ``sum_context`` tokens
        (``sum_window``: the sum of ``min(context, window)``), on ``sms`` SMs; ``corun_sms`` > 0 applies
        the co-run bandwidth factor. ``cuda_graph`` is accepted and has no effect (no launch costs)."""
        if n <= 0:
            return 0.0
        return max(*self._decode_terms(sms, n, sum_context, sum_window, corun_sms))

    def _decode_terms(self, sms: int, n: int, sum_context: Any, sum_window: Any,
                      corun_sms: int) -> tuple[Any, Any]:
        """``(memory seconds, compute seconds)`` of a decode step (numbers or numpy arrays of totals)."""
        inv_bw, inv_flops = self._decode_rate(sms, corun_sms)
        kv = self.kv_a * sum_context + self.kv_b * sum_window
        attn = self.attn_a * sum_context + self.attn_b * sum_window
        weights = self._weight_bytes[n] if n < len(self._weight_bytes) else self._weight_bytes_at(n)
        return (weights + kv) * inv_bw, (n * self.linear_flops + attn) * inv_flops

    def decode_run_s(self, sms: int, n: int, sum_context: Any, sum_window: Any = 0.0, corun_sms: int = 0,
                     cuda_graph: bool = True) -> Any:
        """:meth:`decode_s` over a run of steps (``sum_context``, ``sum_window``: numpy arrays of the steps'
        totals, or numbers): the same operations in the same order element by element, equal to the bit."""
        import numpy as np

        if n <= 0:
            return 0.0 * sum_context
        return np.maximum(*self._decode_terms(sms, n, sum_context, sum_window, corun_sms))

    def flops_rate(self, sms: int, corun_sms: int = 0) -> float:
        """Prefill FLOP/s on ``sms`` SMs, with the co-run factor when decode runs on ``corun_sms``."""
        key = (sms, corun_sms)
        rate = self._prefill_rates.get(key)
        if rate is None:
            _check_sms(sms)
            rate = self.throughput.flops_per_s(sms)
            if corun_sms:
                rate *= self.throughput.corun_flops_factor(sms, corun_sms)
            self._prefill_rates[key] = rate
        return rate

    def prefill_s(self, sms: int, seqs, corun_sms: int = 0) -> float:
        """Seconds to prefill ``seqs`` (``(new, cached)`` tokens each) on ``sms`` SMs: their
        :func:`prefill_flops` over the FLOP/s."""
        flops = sum(prefill_flops(self.model, new, cached) for new, cached in seqs)
        return flops / self.flops_rate(sms, corun_sms) if flops else 0.0

    def mixed_s(self, seqs, n: int, sum_context: float, sum_window: float = 0.0) -> float:
        """One chunked step on the whole GPU (the chapter's rule, :func:`chunked_step_s`):
        ``max((chunks' FLOPs + n x linear FLOPs) / FLOP/s, decode step alone)``."""
        flops = sum(prefill_flops(self.model, new, cached) for new, cached in seqs) + n * self.linear_flops
        compute_s = flops / self.flops_rate(self.total_sms)
        decode_only = self.decode_s(self.total_sms, n, sum_context, sum_window) if n else 0.0
        return max(compute_s, decode_only)

    def launch_cpu_s(self) -> float:
        """0: the chapter counts no kernel launches."""
        return 0.0

    def decode_cpu_s(self, n: int) -> float:
        """0: the chapter counts no CPU time."""
        return 0.0

    def prefill_launch_s(self, layers: float | None = None, graphed: bool = False) -> float:
        """0: the chapter counts no kernel launches."""
        return 0.0

    def request_s(self, n: int) -> float:
        """0: the chapter counts no per-request time."""
        return 0.0
