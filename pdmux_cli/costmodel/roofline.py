"""The roofline cost model (pdmux's default): a step is the sum of its operators, each at
``latency + max(bytes / achievable B/s, FLOPs / achievable FLOP/s)`` on the SMs it runs on.

Operators come from :mod:`pdmux_cli.costmodel.operators`; efficiencies from
:mod:`pdmux_cli.costmodel.efficiency` (fitted to measurements, ``profiles/efficiency/``); the SM-partition
terms (bandwidth vs SMs, GEMM FLOP/s vs SMs, co-run interference) from
:mod:`pdmux_cli.costmodel.partitions`, or from a ``pdmux bench`` calibration where one is given.

On ``s`` of ``S`` SMs, with dense peak ``F`` and datasheet bandwidth ``B``:

- bandwidth available to an operator: ``B x share(s) x bandwidth_efficiency`` (x the co-run factor of
  the phase when the other phase runs on the other SMs);
- a GEMM of ``M`` rows: FLOP/s ``F x s/S x gemm_efficiency(M x S/s)`` (each SM does the work of
  ``M x S/s`` rows on the whole GPU); its bytes are its weights plus 16-bit activations. The linear
  layers' GEMMs and the experts run at ``gemm_flops`` (the fp8 dense peak for fp8 math) with the
  profile's ``gemm`` efficiency (fp8 sections where measured,
  :func:`~pdmux_cli.costmodel.efficiency.for_linear_gemms`); the lm_head and the MoE router stay 16-bit
  (SGLang quantizes neither), at ``F`` with the bf16 GEMM efficiency;
- prefill attention of a sequence of ``L`` tokens (cached prefix included): FLOP/s
  ``F x s/S x attention_efficiency(L)``, bytes its KV cache; decode attention: every request's KV bytes;
- a MoE layer's routed experts: the touched experts' weights plus their rows' activations, and
  ``2 x rows x top-k x 3 x hidden x width`` FLOPs, as one fused operator with the fused-MoE efficiency
  SGLang's kernel was measured at (``moe_routed``: its latency once per layer, its bandwidth, its peak at
  ``moe_flops``, by rows per touched expert; :mod:`pdmux_cli.costmodel.moe`), the gated activation inside it;
  where none was measured, two GEMMs at the linear layers' GEMM efficiency;
- element-wise ops: bytes per token per layer, plus a fixed time per layer;
- a prefill (or mixed) forward pass sharded over ``tp > 1`` GPUs: ``prefill_layer_s`` per layer on top
  of its operators, on any SMs (``common.yaml`` ``partitions``: fitted to SGLang's green-context tables,
  all TP 8, where small prefills cost more than their work; no measurement says a single GPU pays it,
  so ``tp == 1`` does not);
- with tensor parallelism (``tp`` GPUs): every operator at one rank's shapes
  (:func:`pdmux_cli.costmodel.operators.step_shapes`), plus the step's collectives
  (:mod:`pdmux_cli.costmodel.collectives`): ``2 x layers + 1`` all-reduces of ``tokens x hidden x 2``
  bytes and the logits' all-gather, operators like the others, run by the SMs of the phase that issues
  them at a time that does not depend on how many there are (the collectives module says why).

A step's GPU time is the sum; the CPU work of the serving engine (:class:`CpuProfile`) is reported
separately (:meth:`RooflineModel.decode_cpu_s`), because whether it adds to the step depends on the
scheduler (SGLang's overlap scheduler hides it; pdmux rounds expose it).
Times are in seconds; every public method is pure and caches what it can per (SMs, co-run, size).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..catalog import model as mdl
from ..util.errors import Finding, InputError
from ..catalog.model import Model
from .efficiency import (
    NO_SERVING_DELAYS,
    CpuProfile,
    EfficiencyProfile,
    OperatorEfficiency,
    PartitionProfile,
    ServingProfile,
)
from .operators import ACTIVATION_BYTES, Gemm, StepShapes, eager_kernels_per_layer, step_shapes
from .partitions import BandwidthCurve

#: Decode batches further than this past the largest cached batch size are timed alone, not cached with
#: every size below them (a simulation grows its batches a request at a time; one 1,000,000-request
#: estimate would otherwise time a million batches per level).
DENSE_CACHE_GAP = 4096

#: Sequences' prefill attention times kept per (bandwidth, FLOP/s) before the cache starts again (a memory
#: bound, not a measured figure: 200,000 entries is about 40 MB; a replay meets the same ``(new, cached)``
#: chunks again, tune's candidates the same batches of one trace).
ATTENTION_CACHE_MAX = 200_000

#: A prefill batch: ``(new_tokens, cached_tokens)`` per sequence.
Seqs = Sequence[tuple[int, int]]

#: Host launches per layer of a prefill batch SGLang replays in its prefill CUDA graph (0.5.23's default
#: ``breakable`` backend, ``srt/model_executor/runner/prefill_cuda_graph_runner.py``: the captured
#: transformer body is replayed in segments, the attention metadata run outside them): a segment and
#: the attention between two, per layer.
GRAPHED_PREFILL_LAUNCHES_PER_LAYER = 2


def _moe_runner(model: Model, compute_capability: tuple[int, int] | None,
                weight_bytes_per_param: float | None) -> str | None:
    """The fused-MoE runner SGLang 0.5.23 picks for the experts' format
    (:func:`pdmux_cli.costmodel.moe.moe_kernel`), for the kernel count of an eager layer where no
    ``moe_runner`` is given."""
    from .moe import moe_kernel

    kind = moe_kernel(model, compute_capability or (0, 0), weight_bytes_per_param)
    return kind[0] if kind else None


class RooflineModel:
    """Step times of one model on one GPU (module docstring).

    ``model``: the architecture. ``gpu_name``: for output. ``total_sms`` (SMs), ``hbm_bytes_per_s``
    (datasheet B/s), ``dense_flops`` (datasheet dense FLOP/s of 16-bit math: attention, lm_head,
    router), ``gemm_flops`` (datasheet dense FLOP/s of the linear layers' GEMMs; ``None``: ``dense_flops``):
    the GPU.
    ``efficiency``: its kernel efficiencies; ``partitions``, ``cpu``: ``common.yaml``'s terms.
    ``s_sat``: SMs reaching 95% of full bandwidth (``None``: the profile's default fraction of the
    SMs). ``weight_bytes_per_param`` (``None``: the model's format), ``kv_bytes_per_element`` (bytes).
    ``calibration``: a :class:`pdmux_cli.costmodel.calibration_file.CalibratedThroughput`; its measured curves
    replace the bandwidth-vs-SMs, FLOP/s-vs-SMs and co-run terms (the whole-GPU efficiencies stay fitted).
    ``step_overhead_s``: replaces the engine's fixed CPU time per step (0 = kernels only, no CPU term).
    ``notes``: lines for output (how the efficiencies were chosen). ``decode_fixed_s``: GPU time added to
    every decode step (a whole-GPU calibration's term for what the operators leave out).
    ``tp``: GPUs the model is sharded over (every number is then one rank's); ``collectives``: their
    :class:`~pdmux_cli.costmodel.collectives.TpCollectives` (required when ``tp > 1``). ``moe_flops``: the
    datasheet dense FLOP/s of the routed experts' GEMMs when ``efficiency.moe_routed`` is set (the fp8 peak
    for fp8-math MoE dtypes; ``None``: ``gemm_flops``). ``serving``: the
    request path's delays outside the scheduler (:class:`~pdmux_cli.costmodel.efficiency.ServingProfile`),
    which the simulator adds to TTFT; none by default.
    ``compute_capability``: the GPU's, which picks its bandwidth-vs-SMs family
    (:meth:`~pdmux_cli.costmodel.efficiency.PartitionProfile.bandwidth_curve`; ``None``: the first family).
    ``moe_runner``: the fused MoE the experts run (``build_step_model``'s choice for the release and
    ``--moe-runner-backend``), for the eager kernel count (``None``: 0.5.23's,
    :func:`pdmux_cli.costmodel.moe.moe_kernel`).
    Raises :class:`InputError` for an S_SAT outside 1..SMs or given together with a calibration, or a
    split SGLang refuses (:func:`pdmux_cli.multigpu.tensor_parallel.shard`).
    """

    name = "roofline"
    #: The estimate's rows (:class:`pdmux_cli.costmodel.StepModel`): SGLang's default chunked row, and its
    #: mixed batches charging each decode row one token of the chunk (0.5.23 ``schedule_policy.py``
    #: ``PrefillAdder``).
    default_chunked_row = True
    mixed_chunk_charges_decode_rows = True
    notes_short_prefill = False
    #: What the commands ask of it (:class:`pdmux_cli.costmodel.StepModel`): the engine's CPU time per step
    #: and per eagerly launched kernel (``common.yaml``, ``serving.yaml``), an S_SAT from the bandwidth
    #: family's fitted knee (one PD-mux row), speculative decoding's verify pass
    #: (:mod:`pdmux_cli.costmodel.speculative`), and 80% intervals from its out-of-sample serving residuals
    #: (``profiles/efficiency/serving_residuals.yaml``, :mod:`pdmux_cli.costmodel.uncertainty`).
    models_cpu_time = True
    guesses_s_sat = False
    verifies_drafts = True
    has_error_interval = True

    def __init__(
        self,
        model: Model,
        *,
        gpu_name: str,
        total_sms: int,
        hbm_bytes_per_s: float,
        dense_flops: float,
        efficiency: EfficiencyProfile,
        gemm_flops: float | None = None,
        partitions: PartitionProfile,
        cpu: CpuProfile,
        s_sat: float | None = None,
        weight_bytes_per_param: float | None = None,
        kv_bytes_per_element: float = 2.0,
        calibration: Any = None,
        step_overhead_s: float | None = None,
        notes: Sequence[str] = (),
        decode_fixed_s: float = 0.0,
        tp: int = 1,
        collectives: Any = None,
        serving: ServingProfile = NO_SERVING_DELAYS,
        moe_flops: float | None = None,
        compute_capability: tuple[int, int] | None = None,
        moe_runner: str | None = None,
    ) -> None:
        if calibration is not None and s_sat is not None:
            raise InputError("{param_flag} is a guess that a {flag.calibration} file replaces: give one or "
                             "the other", param="s_sat", values={})
        self.model = model
        self.gpu_name = gpu_name
        self.total_sms = total_sms
        self.hbm = float(hbm_bytes_per_s)
        self.peak = float(dense_flops)
        self.gemm_peak = float(gemm_flops) if gemm_flops else self.peak
        self._gemm_ratio = self.gemm_peak / self.peak
        self.eff = efficiency
        self.partitions = partitions
        if step_overhead_s is not None:
            cpu = CpuProfile(step_overhead_s, 0.0 if step_overhead_s == 0 else cpu.per_request_s,
                             cpu.launch_s, cpu.kernels_per_layer,
                             Finding("costmodel.step_overhead", {"step_overhead_ms": step_overhead_s * 1e3},
                                     "step_overhead_ms"),
                             eager_launch_s=cpu.eager_launch_s, eager_launch_moe_s=cpu.eager_launch_moe_s)
        self.cpu = cpu
        self.serving = serving
        self.calibration = calibration
        self.notes = list(notes)
        self.decode_fixed_s = decode_fixed_s
        self.shapes: StepShapes = step_shapes(model, weight_bytes_per_param, tp)
        self._init_moe(moe_flops)
        self.tp = tp
        self.eager_kernels_per_layer = eager_kernels_per_layer(
            self.shapes, mla=bool(model.is_mla), fp8_linear=self._gemm_ratio > 1.0,
            moe_runner=moe_runner or _moe_runner(model, compute_capability, weight_bytes_per_param))
        if tp > 1 and collectives is None:
            raise InputError("a tensor-parallel cost model needs the GPUs' collectives "
                             "(costmodel.collectives)")
        self.collectives = collectives if tp > 1 else None
        if self.collectives is not None:
            self.notes.extend(n for n in self.collectives.notes if n not in self.notes)
        self.compute_capability = compute_capability
        # measured at TP 8 only (sglang_greenctx): a single GPU's prefill is not charged it
        self.prefill_layer_s = partitions.prefill_layer_s if tp > 1 else 0.0
        if calibration is None:
            curve, note = partitions.bandwidth_curve(total_sms, self.hbm, compute_capability, s_sat)
            self.curve: BandwidthCurve | None = curve
            self.s_sat = curve.s_sat
            if note and note not in self.notes:
                self.notes.append(note)
        else:
            self.s_sat = float(getattr(calibration, "s_sat_sms", 0)) or float("nan")
            self.curve = None
            self._full_bw = calibration.bandwidth_bytes_per_s(total_sms)
            self._full_flops = calibration.flops_per_s(total_sms)
        # KV bytes and decode-attention FLOPs per cached token: full-attention layers take every token,
        # sliding-window layers at most ``window`` (sum_window carries min(context, window))
        kvb = kv_bytes_per_element
        per_layer = self.shapes.kv_elements_per_token_per_layer * kvb  # one rank's
        self.kv_full = per_layer * mdl.full_attention_layers(model)
        self.kv_window = per_layer * model.num_sliding_layers
        per_key = (mdl.decode_attention_flops(model, 1) * self.shapes.attention_share
                   / max(1, mdl.full_attention_layers(model) + model.num_sliding_layers))
        self.attn_flops_full = per_key * mdl.full_attention_layers(model)
        self.attn_flops_window = per_key * model.num_sliding_layers
        self.window = model.sliding_window if model.num_sliding_layers else 0
        # attention_flops' factors per (query, key) pair: full-attention layers, sliding-window layers
        per_pair = mdl._attention_flop_per_key(model)
        self._pair_flops = (mdl.full_attention_layers(model) * per_pair, model.num_sliding_layers * per_pair)
        self.kv_bytes_per_element = kvb
        self._dense_cache: dict[tuple[int, int], list[float]] = {}
        self._kv_rate_cache: dict[tuple[int, int], tuple[float, float]] = {}
        self._decode_cache: dict[tuple[int, int], tuple[list[float], float, float]] = {}
        self._linear_cache: dict[tuple[int, int, int], float] = {}
        #: each sequence's prefill attention seconds per (bandwidth, FLOP/s) and (new, cached) tokens
        self._attention_cache: dict[tuple[float, float], dict[tuple[int, int], float]] = {}
        self._head_cache: dict[tuple[int, int, int], float] = {}
        self._rate_cache: dict[tuple[int, int, str], tuple[float, float]] = {}
        #: :meth:`mixed_s`' fixed terms on the whole GPU: its rates, decode's dense list and KV rates
        self._whole_gpu: tuple | None = None
        #: a prefill pass's fixed seconds, all layers (``layers x prefill_layer_s``)
        self._prefill_pass_s = self.shapes.layers * self.prefill_layer_s

    # ---------------------------------------------------------------------------------------------
    @property
    def source(self) -> str:
        """One line for output: the model, where its efficiencies and partition terms come from."""
        return self.source_text()

    def source_text(self, s_sat: bool = True) -> str:
        """:attr:`source`; with ``s_sat=False`` without the S_SAT (a comparison of several S_SATs says each
        in its own row)."""
        if self.calibration is not None:
            part = getattr(self.calibration, "source", "calibration")
        else:
            part = f"S_SAT={self.s_sat:g} of {self.total_sms} SMs" if s_sat else ""
        cpu = f"CPU {self.cpu.step_s * 1e3:.2g} ms/step" if self.cpu.step_s else "no CPU time"
        if self.cpu.per_request_step_s:
            cpu += f" + {self.cpu.per_request_step_s * 1e3:.2g} ms/request"
        tp = f"; per rank of {self.collectives.source}" if self.collectives is not None else ""
        return f"roofline ({self.eff.key} efficiencies, {part + ', ' if part else ''}{cpu}{tp})"

    def collectives_s(self, tokens: int) -> float:
        """Seconds of a step's all-reduces over ``tokens`` tokens (0 on one GPU): ``2 x layers + 1`` of
        ``tokens x hidden x 2`` bytes each."""
        if self.collectives is None or tokens <= 0:
            return 0.0
        shapes = self.shapes
        return shapes.allreduces * self.collectives.allreduce_s(tokens * shapes.allreduce_bytes_per_token)

    def bandwidth_share(self, sms: int) -> float:
        """Share of whole-GPU bandwidth on ``sms`` SMs (alone): the fitted curve, or the calibration's."""
        if self.curve is not None:
            return self.curve.share(sms)
        return self.calibration.bandwidth_bytes_per_s(sms) / self._full_bw

    def _flops_linearity(self, sms: int) -> float:
        """GEMM FLOP/s on ``sms`` SMs over ``sms / S`` of the whole GPU's: 1 (linear) unless a calibration
        measured otherwise."""
        if self.calibration is None:
            return 1.0
        return (self.calibration.flops_per_s(sms) / self._full_flops) / (sms / self.total_sms)

    def _rates(self, sms: int, corun_sms: int, phase: str) -> tuple[float, float]:
        """``(bytes/s before an operator's efficiency, FLOP/s scale before efficiency)`` for a phase
        (``"decode"`` or ``"prefill"``) on ``sms`` SMs, next to the other phase on ``corun_sms``."""
        key = (sms, corun_sms, phase)
        rates = self._rate_cache.get(key)
        if rates is None:
            if not 1 <= sms <= self.total_sms:
                raise InputError(f"a phase runs on 1 to {self.total_sms} SMs, got {sms}")
            bw = self.hbm * self.bandwidth_share(sms)
            flops = self.peak * sms / self.total_sms * self._flops_linearity(sms)
            if corun_sms:
                decode_sms, prefill_sms = (sms, corun_sms) if phase == "decode" else (corun_sms, sms)
                if phase == "decode":
                    bw *= self.corun_bandwidth_factor(prefill_sms, decode_sms)
                else:
                    factor = self.corun_flops_factor(prefill_sms, decode_sms)
                    bw *= factor
                    flops *= factor
            rates = (bw, flops)
            self._rate_cache[key] = rates
        return rates

    def corun_bandwidth_factor(self, prefill_sms: int, decode_sms: int) -> float:
        """Decode's bandwidth next to prefill / alone (0-1]: measured calibration, else NanoFlow's curve."""
        if self.calibration is not None:
            return self.calibration.corun_bandwidth_factor(prefill_sms, decode_sms)
        return self.partitions.interference.decode_bandwidth_factor(decode_sms / self.total_sms)

    def corun_flops_factor(self, prefill_sms: int, decode_sms: int) -> float:
        """Prefill's FLOP/s next to decode / alone (0-1]: measured calibration, else 1.0 (unmeasured)."""
        if self.calibration is not None:
            return self.calibration.corun_flops_factor(prefill_sms, decode_sms)
        return self.partitions.interference.prefill_flops_factor(decode_sms / self.total_sms)

    # ---------------------------------------------------------------------------------------------
    # operators
    def _gemm_s(self, gemm: Gemm, rows: float, sms: int, bw: float, flops: float,
                eff: OperatorEfficiency | None = None) -> float:
        """One instance of ``gemm`` over ``rows`` rows (``eff``: the linear layers' GEMM efficiency by
        default)."""
        if rows <= 0:
            return 0.0
        return (eff or self.eff.gemm).time_s(gemm.bytes(rows), gemm.flops(rows), rows * self.total_sms / sms,
                                             bw, flops)

    def _init_moe(self, moe_flops: float | None) -> None:
        """The routed experts' terms: ``moe_peak`` (FLOP/s of their math) and the step's element-wise bytes
        per token, less the routed experts' gated activation where the measured fused MoE includes it."""
        shapes = self.shapes
        self.moe_peak = float(moe_flops) if moe_flops else self.gemm_peak
        per_token = shapes.elementwise_bytes_per_token * shapes.layers + shapes.embedding_bytes_per_token
        ex = shapes.experts
        if ex is not None and self.eff.moe_routed is not None:  # read 2 widths, write one per routed row
            per_token -= ex.count * 3 * ex.top_k * ex.width * ACTIVATION_BYTES
        self._elementwise_per_token = per_token

    def _experts_s(self, tokens: float, sms: int, bw: float, flops: float) -> float:
        """Every MoE layer's routed experts over ``tokens`` tokens on ``sms`` SMs (uniform routing,
        :meth:`~pdmux_cli.costmodel.operators.Experts.touched`); ``bw``, ``flops``: the phase's bytes/s and
        16-bit FLOP/s before efficiencies. The measured fused MoE (``eff.moe_routed``) where there is one,
        else two GEMMs a layer at the linear layers' GEMM efficiency."""
        ex = self.shapes.experts
        if ex is None or tokens <= 0:
            return 0.0
        touched = ex.touched(tokens)
        routed = tokens * ex.top_k
        rows = routed / touched  # rows each touched expert sees
        weight = touched * ex.expert_params * ex.bytes_per_param
        act = ACTIVATION_BYTES * routed * (ex.hidden + 2 * ex.width + ex.width + ex.hidden)
        moe = self.eff.moe_routed
        if moe is not None:  # one fused operator a layer: its latency once
            return ex.count * moe.time_s(weight + act, 2.0 * routed * ex.expert_params,
                                         rows * self.total_sms / sms, bw, flops * self.moe_peak / self.peak)
        e = self.eff.gemm
        memory = (weight + act) / (bw * e.bandwidth_efficiency)
        compute = 2.0 * routed * ex.expert_params / (flops * self._gemm_ratio
                                                     * e.flops_efficiency(rows * self.total_sms / sms))
        # a grouped GEMM for gate+up and one for down: two kernels a layer
        return ex.count * (2 * e.latency_s + max(memory, compute))

    def _linear_s(self, tokens: int, sms: int, corun_sms: int, phase: str) -> float:
        """Every per-token operator of a step over ``tokens`` tokens: GEMMs, experts, element-wise ops
        and the embedding (cached)."""
        key = (tokens, sms, corun_sms if phase == "decode" else -corun_sms)
        value = self._linear_cache.get(key)
        if value is None:
            bw, flops = self._rates(sms, corun_sms, phase)
            shapes = self.shapes
            linear_flops = flops * self._gemm_ratio
            head = self.eff.lm_head_gemm
            value = sum(g.count * (self._gemm_s(g, tokens, sms, bw, flops, head) if g.name == "router"
                                   else self._gemm_s(g, tokens, sms, bw, linear_flops))
                        for g in shapes.token_gemms)
            value += self._experts_s(tokens, sms, bw, flops)
            el = self.eff.elementwise
            if tokens > 0:
                value += (shapes.layers * el.latency_s
                          + tokens * self._elementwise_per_token / (bw * el.bandwidth_efficiency))
            value += self.collectives_s(tokens)
            self._linear_cache[key] = value
        return value

    def _lm_head_s(self, rows: int, sms: int, corun_sms: int, phase: str) -> float:
        key = (rows, sms, corun_sms if phase == "decode" else -corun_sms)
        value = self._head_cache.get(key)
        if value is None:
            bw, flops = self._rates(sms, corun_sms, phase)
            value = self._gemm_s(self.shapes.lm_head, rows, sms, bw, flops, self.eff.lm_head_gemm)
            if self.collectives is not None and rows > 0:
                value += self.collectives.allgather_s(rows * self.shapes.logits_bytes_per_row)
            self._head_cache[key] = value
        return value

    def _prefill_attention_s(self, seqs: Seqs, sms: int, bw: float, flops: float) -> float:
        """Causal attention of each sequence over its cached prefix and itself, all layers."""
        e: OperatorEfficiency = self.eff.prefill_attention
        model = self.model
        total = self.shapes.layers * e.latency_s
        kv_per_token = self.kv_full + self.kv_window  # upper bound with windows; refined below
        full_pairs, window_pairs = self._pair_flops
        terms = self._attention_cache.get((bw, flops))
        if terms is None or len(terms) >= ATTENTION_CACHE_MAX:
            terms = self._attention_cache[(bw, flops)] = {}
        for new, cached in seqs:
            if new <= 0:
                continue
            exact = type(new) is int and type(cached) is int and cached >= 0  # noqa: E721 - exact types
            if exact:  # a sequence's term again: the same float, added in the same order
                term = terms.get((new, cached))
                if term is not None:
                    total += term
                    continue
            length = new + cached
            if self.window:
                kv = self.kv_full * length + self.kv_window * min(length, self.window)
            else:
                kv = kv_per_token * length
            if exact:
                # mdl.attention_flops inlined (its checks passed): the same operations in the same order
                attn = full_pairs * (new * cached + new * new / 2)
                if window_pairs:
                    attn += window_pairs * mdl._window_pairs(new, cached, model.sliding_window)
                attn = float(attn) * self.shapes.attention_share
            else:
                attn = mdl.attention_flops(model, new, cached) * self.shapes.attention_share
            memory = kv / (bw * e.bandwidth_efficiency)
            compute = attn / (flops * e.flops_efficiency(length))
            term = max(compute, memory)
            if exact:
                terms[(new, cached)] = term
            total += term
        return total

    def _kv_rates(self, sms: int, corun_sms: int) -> tuple[float, float]:
        """Decode attention's seconds per cached token, ``(full layers, sliding-window layers)``."""
        key = (sms, corun_sms)
        rates = self._kv_rate_cache.get(key)
        if rates is None:
            bw, flops = self._rates(sms, corun_sms, "decode")
            e = self.eff.decode_attention
            compute_eff = self.eff.prefill_attention.peak_efficiency
            kv_bw = bw * e.bandwidth_efficiency
            rates = (max(self.kv_full / kv_bw, self.attn_flops_full / (flops * compute_eff)),
                     max(self.kv_window / kv_bw, self.attn_flops_window / (flops * compute_eff)))
            self._kv_rate_cache[key] = rates
        return rates

    # ---------------------------------------------------------------------------------------------
    # steps
    def decode_s(self, sms: int, n: int, sum_context: float, sum_window: float = 0.0, corun_sms: int = 0,
                 cuda_graph: bool = True) -> float:
        """GPU seconds of one decode step of ``n`` requests on ``sms`` SMs.

        ``sum_context``: the requests' cached tokens, summed; ``sum_window``: the sum of
        ``min(context, window)`` (sliding-window models; 0 otherwise). ``corun_sms`` > 0: prefill runs
        on that many other SMs (decode's bandwidth co-run factor). ``cuda_graph=False``: the step is
        launched kernel by kernel, never faster than the CPU's launches (:class:`CpuProfile`).
        Raises :class:`InputError` for ``sms`` outside 1..SMs.
        """
        if n <= 0:
            return 0.0
        entry = self._decode_cache.get((sms, corun_sms))  # (dense part per batch size, KV rates): one lookup
        if entry is None:
            entry = self._decode_cache[(sms, corun_sms)] = (self._dense_cache.setdefault(
                (sms, corun_sms), [0.0]),
                                                            *self._kv_rates(sms, corun_sms))
        dense, full, window = entry
        if len(dense) <= n:
            if n - len(dense) < DENSE_CACHE_GAP:
                self._grow_dense(dense, n, sms, corun_sms)
            else:  # one batch far past the cached ones (estimate --decode-bs 1000000): that size alone
                seconds = self._dense_s(n, sms, corun_sms) + full * sum_context + window * sum_window
                return seconds if cuda_graph else max(seconds, self.launch_cpu_s())
        seconds = dense[n] + full * sum_context + window * sum_window
        if not cuda_graph:
            seconds = max(seconds, self.launch_cpu_s())
        return seconds

    def decode_line(self, sms: int, n: int, corun_sms: int = 0, cuda_graph: bool = True
                    ) -> tuple[float, float, float, float]:
        """:meth:`decode_s` of ``n`` requests as ``(base, per cached token, per window token, floor)``: the
        step takes ``max(base + full * sum_context + window * sum_window, floor)`` seconds, the same
        operations in the same order (``floor`` 0.0 with a CUDA graph), for a loop that inlines it."""
        self.decode_s(sms, n, 0, 0.0, corun_sms, cuda_graph)  # fills the caches for (sms, corun_sms, n)
        dense, full, window = self._decode_cache[(sms, corun_sms)]
        base = dense[n] if len(dense) > n else self._dense_s(n, sms, corun_sms)
        return base, full, window, (0.0 if cuda_graph else self.launch_cpu_s())

    def decode_run_s(self, sms: int, n: int, sum_context: Any, sum_window: Any = 0.0, corun_sms: int = 0,
                     cuda_graph: bool = True) -> Any:
        """:meth:`decode_s` of one batch of ``n`` requests over a run of steps: ``sum_context`` (and
        ``sum_window``) a numpy array of the steps' totals (or a number). The same operations in the same
        order, element by element, so each time equals :meth:`decode_s`'s to the bit (the simulator's
        event-speed decode runs rely on it; tests check it)."""
        if n <= 0:
            return 0.0 * sum_context
        self.decode_s(sms, n, 0, 0.0, corun_sms, cuda_graph)  # fills the caches for (sms, corun_sms, n)
        dense, full, window = self._decode_cache[(sms, corun_sms)]
        base = dense[n] if len(dense) > n else self._dense_s(n, sms, corun_sms)
        seconds = base + full * sum_context + window * sum_window
        if not cuda_graph:
            import numpy as np

            seconds = np.maximum(seconds, self.launch_cpu_s())
        return seconds

    def verify_s(self, sms: int, n: int, tokens: int, sum_context: float, sum_window: float = 0.0,
                 corun_sms: int = 0, cuda_graph: bool = True) -> float:
        """GPU seconds of one forward over ``tokens`` new tokens for each of ``n`` requests (``n x tokens``
        rows) on ``sms`` SMs: speculative decoding's target verify pass over the draft tree, or a draft
        model's extend over it (SGLang 0.5.23 ``speculative/eagle_worker_v2.py`` ``verify``,
        ``_draft_extend_for_decode``; ``ForwardMode.TARGET_VERIFY`` / ``DRAFT_EXTEND``). The GEMMs and the
        lm_head run over every row at the decode step's efficiencies (a decode step of ``n x tokens``
        rows); attention reads each request's cached KV once (``sum_context``, ``sum_window`` as in
        :meth:`decode_s`) for its ``tokens`` queries: per cached token the longer of the KV read and
        ``tokens`` queries' math. ``cuda_graph=False``: never faster than the CPU's launches. Raises
        :class:`InputError` for ``sms`` outside 1..SMs."""
        if n <= 0 or tokens <= 0:
            return 0.0
        dense = self.decode_s(sms, n * tokens, 0.0, 0.0, corun_sms)
        key = (sms, corun_sms, tokens)  # three items: apart from _kv_rates' own (sms, corun_sms) keys
        rates = self._kv_rate_cache.get(key)
        if rates is None:
            bw, flops = self._rates(sms, corun_sms, "decode")
            kv_bw = bw * self.eff.decode_attention.bandwidth_efficiency
            math = flops * self.eff.prefill_attention.peak_efficiency / tokens
            rates = (max(self.kv_full / kv_bw, self.attn_flops_full / math),
                     max(self.kv_window / kv_bw, self.attn_flops_window / math))
            self._kv_rate_cache[key] = rates
        seconds = dense + rates[0] * sum_context + rates[1] * sum_window
        return seconds if cuda_graph else max(seconds, self.launch_cpu_s())

    def _grow_dense(self, dense: list[float], n: int, sms: int, corun_sms: int) -> None:
        """Extend ``dense`` (a decode step's time without KV reads, per batch size) to batch ``n``."""
        while len(dense) <= n:
            dense.append(self._dense_s(len(dense), sms, corun_sms))

    def _dense_s(self, rows: int, sms: int, corun_sms: int) -> float:
        """A decode step's time without KV reads for a batch of ``rows`` requests, s."""
        return (self._linear_s(rows, sms, corun_sms, "decode") + self._lm_head_s(
            rows, sms, corun_sms, "decode")
                + self.shapes.layers * self.eff.decode_attention.latency_s + self.decode_fixed_s)

    def prefill_s(self, sms: int, seqs: Seqs, corun_sms: int = 0) -> float:
        """GPU seconds to prefill ``seqs`` (``(new, cached)`` tokens each) as one batch on ``sms`` SMs,
        all layers, the lm_head on each sequence's last token, with ``tp > 1`` the fixed time per layer of a
        prefill pass. ``corun_sms`` > 0: decode runs on that
        many other SMs (prefill's co-run factor). Raises :class:`InputError` for ``sms`` outside 1..SMs."""
        tokens = sum(new for new, _ in seqs)
        if tokens <= 0:
            return 0.0
        # the cached terms looked up here as _rates, _linear_s and _lm_head_s look them up (a prefill's
        # keys: its SMs and minus the co-run SMs), computed by them on a miss (which checks the SMs); the
        # same floats added in the same order
        rates = self._rate_cache.get((sms, corun_sms, "prefill"))
        if rates is None:
            rates = self._rates(sms, corun_sms, "prefill")
        linear = self._linear_cache.get((tokens, sms, -corun_sms))
        if linear is None:
            linear = self._linear_s(tokens, sms, corun_sms, "prefill")
        head = self._head_cache.get((len(seqs), sms, -corun_sms))
        if head is None:
            head = self._lm_head_s(len(seqs), sms, corun_sms, "prefill")
        return linear + head + self._prefill_attention_s(seqs, sms, *rates) + self._prefill_pass_s

    def _whole_gpu_terms(self) -> tuple:
        """:attr:`_whole_gpu`, computed once: the whole GPU's prefill rates (bytes/s, FLOP/s), and decode's
        dense seconds per batch size (the cache's own list, which grows) and KV rates."""
        sms = self.total_sms
        self.decode_s(sms, 1, 0, 0.0)  # fills the decode caches of (sms, 0)
        self._whole_gpu = (*self._rates(sms, 0, "prefill"), *self._decode_cache[(sms, 0)])
        return self._whole_gpu

    def mixed_s(self, seqs: Seqs, n: int, sum_context: float, sum_window: float = 0.0) -> float:
        """GPU seconds of one mixed step on the whole GPU: prefill chunks ``seqs`` and ``n`` decode rows
        in one batch (SGLang's ``--enable-mixed-chunk``): GEMMs over all rows, the lm_head for each
        sequence and row, prefill attention for the chunks, the decode rows' KV reads and (with a chunk,
        ``tp > 1``) the fixed time per layer of a prefill pass; at least :meth:`decode_s` of the ``n``
        rows alone."""
        sms = self.total_sms
        tokens = sum(new for new, _ in seqs) + n
        if tokens <= 0:
            return 0.0
        bw, flops, dense, full, window = self._whole_gpu or self._whole_gpu_terms()
        # the cached terms looked up here as _linear_s and _lm_head_s look them up (a prefill with no
        # co-run SMs: key (rows, sms, 0)), the same floats added in the same order
        linear = self._linear_cache.get((tokens, sms, 0))
        if linear is None:
            linear = self._linear_s(tokens, sms, 0, "prefill")
        head = self._head_cache.get((len(seqs) + n, sms, 0))
        if head is None:
            head = self._lm_head_s(len(seqs) + n, sms, 0, "prefill")
        seconds = linear + head
        seconds += self._prefill_attention_s(seqs, sms, bw, flops)
        if seqs:
            seconds += self._prefill_pass_s
        if n:
            seconds += full * sum_context + window * sum_window
            # never faster than the decode step of its rows alone: the batch reads the same weights and KV
            # and computes more (the chapter's rule too, chapter.ChapterModel.mixed_s); without it a chunk of
            # a few tokens, timed at prefill GEMM efficiency, made the step shorter than decode's
            alone = (dense[n] + full * sum_context + window * sum_window if len(dense) > n
                     else self.decode_s(sms, n, sum_context, sum_window))  # (decode_s's own arithmetic)
            seconds = max(seconds, alone)
        return seconds

    # ---------------------------------------------------------------------------------------------
    # CPU
    def launch_cpu_s(self) -> float:
        """Host seconds SGLang takes to launch a decode step's kernels outside a CUDA graph: the same as an
        eager prefill's (:meth:`prefill_launch_s`: SGLang's per-kernel host time was measured on an eager
        decode step, PR 1401), or ``layers x kernels_per_layer x launch_s`` (a bare launch gap) where a
        profile has no eager per-kernel time."""
        eager = self.prefill_launch_s()
        return eager if eager > 0 else self.shapes.layers * self.cpu.kernels_per_layer * self.cpu.launch_s

    def prefill_launch_s(self, layers: float | None = None, graphed: bool = False) -> float:
        """Host seconds SGLang takes to launch a prefill (or mixed) forward over ``layers`` layers (``None``:
        all of them): ``layers x eager_kernels_per_layer x CpuProfile.eager_launch_s`` eagerly
        (``eager_launch_moe_s`` for a MoE model);
        ``graphed`` (SGLang's prefill CUDA graph replays the batch) :data:`GRAPHED_PREFILL_LAUNCHES_PER_LAYER`
        launches a layer instead. The step is not done before its last kernel is queued: a scheduler
        takes the larger of this and the GPU time (:mod:`pdmux_cli.simulate.schedulers`)."""
        count = self.shapes.layers if layers is None else layers
        per_layer = GRAPHED_PREFILL_LAUNCHES_PER_LAYER if graphed else self.eager_kernels_per_layer
        cpu = self.cpu
        per_kernel = cpu.eager_launch_moe_s if self.shapes.experts is not None else cpu.eager_launch_s
        return count * per_layer * per_kernel

    def decode_cpu_s(self, n: int) -> float:
        """CPU seconds of one scheduler step with ``n`` requests (:meth:`CpuProfile.step_cpu_s`)."""
        return self.cpu.step_cpu_s(n)

    def request_s(self, n: int) -> float:
        """Seconds a server's step spends on ``n`` requests in its batch beyond the kernels, on the step's
        critical path whatever the scheduler (``CpuProfile.per_request_step_s``; not in the kernel times
        :meth:`decode_s`, :meth:`prefill_s` and :meth:`mixed_s` give, which benchmarks of the model alone
        measure)."""
        return n * self.cpu.per_request_step_s
