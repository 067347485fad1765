"""The model replay on a device (``pdmux bench --model``): build a model's layers in torch and run SGLang's
loop.

torch is imported by the caller and passed in (nothing here imports it at module level: the CLI and the
CPU tests import this module without it). The plan (:mod:`.replay_plan`) fixes what is built and run;
this module:

- builds the layers (:class:`ReplayModel`): random bf16 weights of the model's shapes (``N(0, 1/fan_in)``
  so activations stay finite through every layer), decode KV caches of ``decode_bs`` requests at the
  context and the prefill's KV store; pre-norm layers as SGLang's Llama/Qwen models run them: RMSNorm,
  fused QKV, rotary embedding, the KV-cache write, ``torch.nn.functional.scaled_dot_product_attention``
  with the model's GQA layout (``enable_gqa``; causal in prefill, sliding-window layers with a band mask in
  query blocks), O, RMSNorm, then the gated MLP or the MoE block (router, top-k, softmax of the top-k
  logits, the routed rows through ``torch._grouped_mm`` over all experts at once, the shared experts);
  the lm_head on the decode batch and on the prompt's last token, with argmax as the sampler;
- times a decode step on a stream, as a CUDA graph captured on that stream (SGLang captures one per
  stream group: ``decode_cuda_graph_runner.py``, ``graph_capture(stream=sg[1])``), or eagerly;
- times the prefill in SGLang's layer slices, back to back on its stream;
- runs SGLang's pdmux loop (0.5.23 ``srt/multiplex/multiplexing_mixin.py`` ``event_loop_pdmux``): per
  round, one decode step on the decode stream, the next prefill slice on the prefill stream (not waited
  for), then a wait on the decode stream only; once the last slice is submitted, each round polls its
  event, and the round that finds it done ends the prefill;
- at each level on green contexts (:class:`greenctx.LevelPartitions`, one split per level as sgl-kernel
  builds it), and on the whole device.

On the CPU (``device_kind == "cpu"``) the same code runs with host clocks instead of CUDA events and
no streams: decode and prefill run one after the other, so the loop and its bookkeeping are exercised
(tests), not SM partitions.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..util.errors import DeviceError, Finding, InputError, PdmuxError
from . import greenctx
from .plan import MIN_RUN_MS
from .replay_plan import SLIDING_QUERY_BLOCK, LayerKind, ReplayPlan, attended_tokens, layer_weights
from .replay_results import (
    CorunTimes,
    DecodeTimes,
    LevelReplay,
    ReplayResults,
    ReplayRunInfo,
    TimeStats,
    WholeReplay,
    now_utc,
)

#: Seed of the weights and inputs (the bench's: runner.py seeds its generator the same way).
SEED = 20250101
#: Base of the rotary tables. Any base costs the same (the values only set the angles); Llama's 10000.
ROPE_THETA = 10000.0
#: RMSNorm epsilon (Llama's and Qwen's 1e-6; it does not change the time).
NORM_EPS = 1e-6
#: Most rounds one co-run episode may take before the run gives up (a prefill event that never
#: completes); real episodes take prompt / budget rounds plus the decode steps the prefill outlasts.
MAX_ROUNDS = 1_000_000

StepCallback = Callable[[str], None]


def host_available_bytes() -> int:
    """Memory the host can still give (bytes): ``MemAvailable`` of ``/proc/meminfo``, else the free pages
    ``os.sysconf`` reports. Raises :class:`DeviceError` when neither is readable."""
    import os

    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        raise DeviceError("cannot tell how much memory the host has free (/proc/meminfo, sysconf)") from None


def import_torch_cpu() -> Any:
    """torch for a CPU replay, or :class:`DeviceError` naming the pip command when it is not installed."""
    try:
        import torch
    except ImportError:
        raise DeviceError("torch is not installed (the model replay runs torch layers): "
                          f"{greenctx.PIP_HINT}") from None
    return torch


class _HostEvent:
    """A CUDA event's stand-in on the CPU: the host time when recorded (CPU work is done when its call
    returns)."""

    def __init__(self) -> None:
        self.t = 0.0

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: _HostEvent) -> float:
        return (end.t - self.t) * 1e3

    def query(self) -> bool:
        return True


class ReplayDevice:
    """Where the replay runs and how its work is ordered and timed: ``"cuda"`` (streams, CUDA events) or
    ``"cpu"`` (no streams, host clocks)."""

    def __init__(self, torch: Any, kind: str, index: int = 0) -> None:
        self.torch, self.kind = torch, kind
        self.dev = torch.device("cuda", index) if kind == "cuda" else torch.device("cpu")
        if self.is_cuda:
            torch.cuda.set_device(self.dev)

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True) if self.is_cuda else _HostEvent()

    def record(self, event: Any, stream: Any) -> None:
        if self.is_cuda:
            event.record(stream)
        else:
            event.record()

    def on(self, stream: Any) -> Any:
        """Context in which torch launches on ``stream`` (nothing on the CPU)."""
        if self.is_cuda and stream is not None:
            return self.torch.cuda.stream(stream)
        return contextlib.nullcontext()

    def sync(self, stream: Any) -> None:
        if self.is_cuda and stream is not None:
            stream.synchronize()

    def whole_stream(self) -> Any:
        """A plain stream on the whole device (``None`` on the CPU)."""
        return self.torch.cuda.Stream(device=self.dev) if self.is_cuda else None

    def free_bytes(self) -> int:
        """Free memory of the device (bytes)."""
        if self.is_cuda:
            return int(self.torch.cuda.mem_get_info(self.dev)[0])
        return host_available_bytes()


def _rotate(x: Any, cos: Any, sin: Any, torch: Any) -> Any:
    """Rotary embedding, rotate-half form: ``x cos + rotate_half(x) sin`` (``x``: tokens x heads x dim)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class ReplayModel:
    """The built layers, caches and inputs of one plan on one device, and the two things SGLang runs:
    :meth:`decode_step` (every layer on the decode batch, lm_head, argmax) and :meth:`prefill_slice`
    (layers ``[start, end)`` on the prompt; the lm_head on its last token after the last layer).

    ``grouped_mm``: run MoE experts through ``torch._grouped_mm`` (``None``: when this torch has it and it
    runs on the device). Raises :class:`DeviceError` when the device runs out of memory building it (its
    ``param`` ``decode_bs``: the sizes to make smaller).
    """

    def __init__(self, torch: Any, plan: ReplayPlan, device: ReplayDevice,
                 grouped_mm: bool | None = None) -> None:
        self.torch, self.plan, self.device = torch, plan, device
        self.F = torch.nn.functional
        m = self.m = plan.model
        self.notes: list[Finding] = []
        dev, bf16 = device.dev, torch.bfloat16
        gen = torch.Generator(device=dev)
        gen.manual_seed(SEED)

        def rand(shape: tuple[int, ...], scale: float) -> Any:
            t = torch.randn(shape, generator=gen, device=dev, dtype=bf16)
            return t.mul_(scale)

        bs, ctx, tokens = plan.decode_bs, plan.context_tokens, plan.prompt_tokens
        kv, hd = m.num_kv_heads, m.head_dim
        try:
            self.layers: dict[tuple[LayerKind, int], dict[str, Any]] = {}
            for kind, copies in plan.memory.built:
                for copy in range(copies):
                    w = {ws.name: rand(ws.shape, 1 / math.sqrt(ws.shape[-1]))
                         for ws in layer_weights(m, kind)}
                    w["norm_in"] = torch.ones(m.hidden_size, device=dev, dtype=bf16)
                    w["norm_post"] = torch.ones(m.hidden_size, device=dev, dtype=bf16)
                    cached = attended_tokens(m, kind, ctx) + 1
                    w["k_cache"] = rand((bs, kv, cached, hd), 1.0)
                    w["v_cache"] = rand((bs, kv, cached, hd), 1.0)
                    w["k_store"] = torch.empty((tokens, kv, hd), device=dev, dtype=bf16)
                    w["v_store"] = torch.empty((tokens, kv, hd), device=dev, dtype=bf16)
                    self.layers[(kind, copy)] = w
            self.lm_head = rand((m.vocab_size, m.hidden_size), 1 / math.sqrt(m.hidden_size))
            self.norm_final = torch.ones(m.hidden_size, device=dev, dtype=bf16)
            self.x_decode = rand((bs, m.hidden_size), 1.0)
            self.x_prompt = rand((tokens, m.hidden_size), 1.0)
            self.cos_d, self.sin_d = self._rope_tables(torch.full((bs,), float(ctx), device=dev))
            self.cos_p, self.sin_p = self._rope_tables(torch.arange(tokens, device=dev, dtype=torch.float32))
            self.decode_tokens = torch.empty(bs, device=dev, dtype=torch.long)
            self.prompt_token = torch.empty(1, device=dev, dtype=torch.long)
            self._carry: Any = None
            if device.is_cuda:
                torch.cuda.synchronize(dev)
        except (RuntimeError, MemoryError) as exc:  # torch.cuda.OutOfMemoryError is a RuntimeError
            raise DeviceError("out of memory building {model}'s {layers} layers (planned {needed_gb:.2f} GB "
                              "of {free_gb:.2f} GB free): use a smaller {param_flag}, {flag.context} or "
                              "{flag.prompt_tokens}", param="decode_bs",
                              values={"model": m.name, "layers": plan.memory.built_layers,
                                      "needed_gb": plan.memory.needed_bytes / 1e9,
                                      "free_gb": plan.memory.available_bytes / 1e9}) from exc
        self.gqa_native = self._probe_gqa()
        self.grouped_mm = False
        if m.is_moe:
            self.grouped_mm = self._probe_grouped_mm() if grouped_mm is None else grouped_mm
            if not self.grouped_mm:
                self.notes.append(Finding("bench.replay.moe_per_expert"))

    @property
    def moe_kernel(self) -> str | None:
        if not self.m.is_moe:
            return None
        return "grouped_mm" if self.grouped_mm else "per-expert"

    def _rope_tables(self, positions: Any) -> tuple[Any, Any]:
        torch, hd = self.torch, self.m.head_dim
        inv = 1.0 / (ROPE_THETA ** (torch.arange(0, hd, 2, device=positions.device,
                                                 dtype=torch.float32) / hd))
        angles = positions[:, None] * inv[None, :]
        angles = torch.cat((angles, angles), dim=-1)[:, None, :]  # tokens x 1 x head_dim
        return angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)

    def _probe_gqa(self) -> bool:
        """Whether ``scaled_dot_product_attention`` takes ``enable_gqa`` (torch >= 2.5)."""
        torch = self.torch
        q = torch.zeros((1, 2, 1, 8), device=self.device.dev, dtype=torch.bfloat16)
        k = torch.zeros((1, 1, 2, 8), device=self.device.dev, dtype=torch.bfloat16)
        try:
            self.F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
        except (TypeError, RuntimeError):
            self.notes.append(Finding("bench.replay.gqa_repeated"))
            return False
        return True

    def _probe_grouped_mm(self) -> bool:
        torch = self.torch
        if not hasattr(torch, "_grouped_mm"):
            return False
        a = torch.ones((16, 16), device=self.device.dev, dtype=torch.bfloat16)
        b = torch.ones((2, 16, 16), device=self.device.dev, dtype=torch.bfloat16)
        try:
            torch._grouped_mm(a, b.transpose(-2, -1), offs=torch.tensor([8, 16], device=self.device.dev,
                                                                          dtype=torch.int32))
        except (RuntimeError, TypeError, NotImplementedError):
            return False
        return True

    # -- one layer ---------------------------------------------------------------------------------
    def _sdpa(self, q: Any, k: Any, v: Any, causal: bool = False, mask: Any = None) -> Any:
        if self.gqa_native:
            return self.F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                       enable_gqa=True)
        groups = q.shape[1] // k.shape[1]
        return self.F.scaled_dot_product_attention(q, k.repeat_interleave(groups, dim=1),
                                                   v.repeat_interleave(groups, dim=1), attn_mask=mask,
                                                   is_causal=causal)

    def _sliding_prefill(self, q: Any, k: Any, v: Any) -> Any:
        """Causal attention where each query sees its last ``sliding_window`` keys (itself included), in
        query blocks of at least :data:`SLIDING_QUERY_BLOCK` with a band mask each. ``q``: 1 x heads x T x
        d."""
        torch = self.torch
        window, tokens = self.m.sliding_window, q.shape[2]
        block = max(SLIDING_QUERY_BLOCK, window)
        out = torch.empty_like(q)
        for start in range(0, tokens, block):
            end = min(tokens, start + block)
            first = max(0, start - window + 1)
            qi = torch.arange(start, end, device=q.device)[:, None]
            kj = torch.arange(first, end, device=q.device)[None, :]
            mask = (kj <= qi) & (qi - kj < window)
            out[:, :, start:end] = self._sdpa(q[:, :, start:end], k[:, :, first:end], v[:, :, first:end],
                                              mask=mask)
        return out

    def _mlp(self, h: Any, gate_up: Any, down: Any) -> Any:
        g, u = self.F.linear(h, gate_up).chunk(2, dim=-1)
        return self.F.linear(self.F.silu(g) * u, down)

    def _moe(self, h: Any, w: dict[str, Any]) -> Any:
        torch, F, m = self.torch, self.F, self.m
        k = m.experts_per_token
        top_w, top_i = torch.topk(F.linear(h, w["router"]).float(), k, dim=-1)
        top_w = torch.softmax(top_w, dim=-1).to(h.dtype).reshape(-1)
        flat = top_i.reshape(-1)
        if self.grouped_mm:
            order = torch.argsort(flat)
            token = order // k
            rows = h.index_select(0, token)
            counts = torch.zeros(m.num_experts, device=h.device, dtype=torch.int32)
            counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
            offs = torch.cumsum(counts, 0, dtype=torch.int32)
            g, u = torch._grouped_mm(rows, w["experts_gate_up"].transpose(-2, -1), offs=offs).chunk(2, dim=-1)
            y = torch._grouped_mm(F.silu(g) * u, w["experts_down"].transpose(-2, -1), offs=offs)
            out = torch.zeros_like(h).index_add_(0, token, y * top_w.index_select(0, order).unsqueeze(1))
        else:
            out = torch.zeros_like(h)
            ids = flat.tolist()  # the routing on the host: a synchronisation, as a loop over experts needs
            for expert in sorted(set(ids)):
                where = torch.tensor([i for i, e in enumerate(ids) if e == expert], device=h.device)
                token = where // k
                y = self._mlp(h.index_select(0, token), w["experts_gate_up"][expert],
                              w["experts_down"][expert])
                out.index_add_(0, token, y * top_w.index_select(0, where).unsqueeze(1))
        if m.num_shared_experts:
            out = out + self._mlp(h, w["shared_gate_up"], w["shared_down"])
        return out

    def _layer(self, w: dict[str, Any], kind: LayerKind, x: Any, decode: bool) -> Any:
        torch, F, m = self.torch, self.F, self.m
        n, heads, kv, hd = x.shape[0], m.num_attention_heads, m.num_kv_heads, m.head_dim
        h = F.rms_norm(x, (m.hidden_size,), w["norm_in"], eps=NORM_EPS)
        q, k, v = F.linear(h, w["qkv"]).split([heads * hd, kv * hd, kv * hd], dim=-1)
        cos, sin = (self.cos_d, self.sin_d) if decode else (self.cos_p, self.sin_p)
        q = _rotate(q.view(n, heads, hd), cos, sin, torch)
        k = _rotate(k.view(n, kv, hd), cos, sin, torch)
        v = v.view(n, kv, hd)
        if decode:  # write the new token's K and V, attend over the cached context and it
            w["k_cache"][:, :, -1].copy_(k)
            w["v_cache"][:, :, -1].copy_(v)
            attn = self._sdpa(q.unsqueeze(2), w["k_cache"], w["v_cache"]).reshape(n, heads * hd)
        else:
            w["k_store"].copy_(k)
            w["v_store"].copy_(v)
            qt, kt, vt = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
            if kind.attention == "sliding" and n > m.sliding_window:
                attn = self._sliding_prefill(qt, kt, vt)
            else:
                attn = self._sdpa(qt, kt, vt, causal=True)
            attn = attn.squeeze(0).transpose(0, 1).reshape(n, heads * hd)
        x = x + F.linear(attn, w["o"])
        h = F.rms_norm(x, (m.hidden_size,), w["norm_post"], eps=NORM_EPS)
        if kind.ffn == "dense":
            return x + self._mlp(h, w["gate_up"], w["down"])
        return x + self._moe(h, w)

    def _logits_argmax(self, x: Any, out: Any) -> None:
        h = self.F.rms_norm(x, (self.m.hidden_size,), self.norm_final, eps=NORM_EPS)
        out.copy_(self.torch.argmax(self.F.linear(h, self.lm_head), dim=-1))

    # -- what SGLang runs --------------------------------------------------------------------------
    def decode_step(self) -> None:
        """One decode step of the batch through all the model's layers, the lm_head and argmax."""
        x = self.x_decode
        for kind, copy in self.plan.layer_map:
            x = self._layer(self.layers[(kind, copy)], kind, x, decode=True)
        self._logits_argmax(x, self.decode_tokens)

    def prefill_slice(self, start: int, end: int) -> None:
        """Layers ``[start, end)`` of the prompt's prefill (from the prompt at 0; the lm_head on the last
        token after the model's last layer). Raises :class:`InputError` for a range outside the layers."""
        if not 0 <= start < end <= self.m.num_layers:
            raise InputError(f"prefill slice [{start}, {end}) is outside the model's {self.m.num_layers} "
                             "layers")
        x = self.x_prompt if start == 0 else self._carry
        for i in range(start, end):
            kind, copy = self.plan.layer_map[i]
            x = self._layer(self.layers[(kind, copy)], kind, x, decode=False)
        if end == self.m.num_layers:
            self._logits_argmax(x[-1:], self.prompt_token)
            self._carry = None
        else:
            self._carry = x

    def prefill(self) -> None:
        """The whole prefill, slice after slice (the plan's slices)."""
        for start, end in self.plan.slices:
            self.prefill_slice(start, end)


class DecodeStep:
    """A decode step launched on ``stream``: the replay of a CUDA graph captured on it (cuda, when the plan
    says so), else :meth:`ReplayModel.decode_step`. A capture that fails falls back to eager steps, with a
    note in ``notes``."""

    def __init__(self, model: ReplayModel, stream: Any, notes: list[Finding]) -> None:
        self.model, self.stream, self.graph = model, stream, None
        device = model.device
        if not (device.is_cuda and model.plan.cuda_graph) or (model.m.is_moe and not model.grouped_mm):
            return
        torch = model.torch
        try:
            with device.on(stream):
                for _ in range(2):  # warm-up on the capture stream: cuBLAS handles, kernel choices
                    model.decode_step()
            device.sync(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                model.decode_step()
            device.sync(stream)
            self.graph = graph
        except RuntimeError as exc:
            first = " ".join(str(exc).split())[:160]
            notes.append(Finding("bench.replay.graph_capture_failed", {"error": first}))
            with contextlib.suppress(RuntimeError):
                torch.cuda.synchronize(device.dev)

    def __call__(self) -> None:
        if self.graph is not None:
            self.graph.replay()  # on the current stream: the caller is inside device.on(stream)
        else:
            self.model.decode_step()

    def close(self) -> None:
        self.graph = None


def time_decode(device: ReplayDevice, step: Callable[[], None], stream: Any, plan: ReplayPlan) -> DecodeTimes:
    """Decode alone on ``stream``: device time per step over runs of back-to-back steps (each run at least
    ``MIN_RUN_MS``), then as many loop rounds (launch, wait for the stream), host-timed."""
    with device.on(stream):
        for _ in range(plan.warmup):
            step()
        device.sync(stream)
        first, last = device.event(), device.event()
        device.record(first, stream)
        step()
        device.record(last, stream)
        device.sync(stream)
        inner = max(1, math.ceil(MIN_RUN_MS / max(first.elapsed_time(last), 1e-3)))
        marks = []
        for _ in range(plan.repeats):
            start, end = device.event(), device.event()
            device.record(start, stream)
            for _ in range(inner):
                step()
            device.record(end, stream)
            marks.append((start, end))
        device.sync(stream)
        steps = [s.elapsed_time(e) / inner for s, e in marks]
        rounds = []
        before = time.perf_counter()
        for _ in range(plan.repeats * inner):
            step()
            device.sync(stream)
            now = time.perf_counter()
            rounds.append((now - before) * 1e3)
            before = now
    return DecodeTimes(TimeStats.from_ms(steps), TimeStats.from_ms(rounds))


def time_prefill(device: ReplayDevice, model: ReplayModel, stream: Any, plan: ReplayPlan) -> TimeStats:
    """The prefill alone on ``stream``: its slices back to back, device time from the first to the last;
    one untimed prefill first."""
    with device.on(stream):
        model.prefill()
        device.sync(stream)
        times = []
        for _ in range(plan.repeats):
            start, end = device.event(), device.event()
            device.record(start, stream)
            model.prefill()
            device.record(end, stream)
            device.sync(stream)
            times.append(start.elapsed_time(end))
    return TimeStats.from_ms(times)


@dataclass(frozen=True)
class Episode:
    """One prefill through SGLang's loop: host ms per round, the decode step's device ms per round, the
    prefill's device ms."""

    round_ms: list[float]
    decode_ms: list[float]
    prefill_ms: float


def corun_episode(device: ReplayDevice, step: Callable[[], None], model: ReplayModel, prefill_stream: Any,
                  decode_stream: Any) -> Episode:
    """One prefill of the prompt as ``event_loop_pdmux`` runs it next to the decode batch (module docstring).
    Raises :class:`DeviceError` past :data:`MAX_ROUNDS` rounds."""
    slices = model.plan.slices
    device.sync(prefill_stream)
    device.sync(decode_stream)
    pf_start, pf_end = device.event(), device.event()
    decode_marks: list[tuple[Any, Any]] = []
    rounds: list[float] = []
    submitted = 0
    before = time.perf_counter()
    while True:
        start, end = device.event(), device.event()
        with device.on(decode_stream):
            device.record(start, decode_stream)
            step()
            device.record(end, decode_stream)
        decode_marks.append((start, end))
        if submitted < len(slices):
            with device.on(prefill_stream):
                if submitted == 0:
                    device.record(pf_start, prefill_stream)
                model.prefill_slice(*slices[submitted])
                submitted += 1
                if submitted == len(slices):
                    device.record(pf_end, prefill_stream)
        device.sync(decode_stream)
        now = time.perf_counter()
        rounds.append((now - before) * 1e3)
        before = now
        if submitted == len(slices) and pf_end.query():
            break
        if len(rounds) >= MAX_ROUNDS:
            raise DeviceError(f"the prefill did not finish in {MAX_ROUNDS:,} rounds of the pdmux loop")
    device.sync(prefill_stream)
    return Episode(rounds, [s.elapsed_time(e) for s, e in decode_marks], pf_start.elapsed_time(pf_end))


def time_corun(device: ReplayDevice, step: Callable[[], None], model: ReplayModel, prefill_stream: Any,
               decode_stream: Any, plan: ReplayPlan) -> CorunTimes:
    """``plan.repeats`` episodes after one untimed one: ITL over every round, the decode step's device time,
    the prefill's per episode, the median rounds per episode."""
    corun_episode(device, step, model, prefill_stream, decode_stream)
    episodes = [corun_episode(device, step, model, prefill_stream, decode_stream)
                for _ in range(plan.repeats)]
    rounds = sorted(len(e.round_ms) for e in episodes)
    return CorunTimes(
        itl=TimeStats.from_ms([t for e in episodes for t in e.round_ms]),
        decode_step=TimeStats.from_ms([t for e in episodes for t in e.decode_ms]),
        prefill=TimeStats.from_ms([e.prefill_ms for e in episodes]),
        tokens_during_prefill=rounds[len(rounds) // 2],
    )


@contextlib.contextmanager
def level_streams(device: ReplayDevice, info: Any, prefill_sms: int,
                  decode_sms: int) -> Iterator[tuple[Any, Any, Any, Any]]:
    """``(prefill stream, decode stream, granted prefill SMs, granted decode SMs)`` of one level: green
    contexts on a GPU (torch ``ExternalStream``s over them), ``(None, None, None, None)`` on the CPU."""
    if not device.is_cuda:
        yield None, None, None, None
        return
    torch = device.torch
    with greenctx.LevelPartitions(info, prefill_sms, decode_sms) as lv:
        ps = torch.cuda.ExternalStream(lv.prefill.stream_handle, device=device.dev)
        ds = torch.cuda.ExternalStream(lv.decode.stream_handle, device=device.dev)
        try:
            yield ps, ds, lv.prefill.granted_sms, lv.decode.granted_sms
        finally:
            ps.synchronize()
            ds.synchronize()
            del ps, ds
            from .runner import _clear_cublas_workspaces

            _clear_cublas_workspaces(torch)
            torch.cuda.empty_cache()  # blocks cached for these streams, and the decode graph's pool


def measure_whole(device: ReplayDevice, model: ReplayModel, notes: list[Finding]) -> WholeReplay:
    """Decode step and prefill on the whole device (a plain stream)."""
    stream = device.whole_stream()
    step = DecodeStep(model, stream, notes)
    try:
        decode = time_decode(device, step, stream, model.plan)
        prefill = time_prefill(device, model, stream, model.plan)
    finally:
        step.close()
        if device.is_cuda:
            device.sync(stream)
            device.torch.cuda.empty_cache()
    return WholeReplay(decode, prefill)


def measure_level(device: ReplayDevice, model: ReplayModel, info: Any, split: Any,
                  notes: list[Finding]) -> LevelReplay:
    """One level: decode alone on its decode partition, the prefill alone on its prefill partition, then
    both in SGLang's loop. The decode graph is captured on the level's decode stream."""
    plan = model.plan
    with level_streams(device, info, split.prefill_sms, split.decode_sms) as (ps, ds, granted_p, granted_d):
        step = DecodeStep(model, ds, notes)
        try:
            decode = time_decode(device, step, ds, plan)
            prefill = time_prefill(device, model, ps, plan)
            corun = time_corun(device, step, model, ps, ds, plan)
        finally:
            step.close()
    return LevelReplay(
        prefill_sms=split.prefill_sms, decode_sms=split.decode_sms, group=plan.group_of(split),
        chosen=split == plan.chosen_level, granted_prefill_sms=granted_p, granted_decode_sms=granted_d,
        decode=decode, prefill=prefill, corun=corun,
    )


def run_info(plan: ReplayPlan, device: ReplayDevice, info: Any = None,
             model: ReplayModel | None = None) -> ReplayRunInfo:
    """Identity of the run (device, versions, UTC date)."""
    torch = device.torch
    date, started = now_utc()
    dev = plan.device
    name = torch.cuda.get_device_name(device.dev) if device.is_cuda else "cpu"
    return ReplayRunInfo(
        device_kind=device.kind, device_name=name, gpu_name=dev.name, sm_count=dev.sm_count,
        compute_capability=tuple(dev.compute_capability), device_index=info.index if info is not None
        else None, profile_key=dev.profile_key, torch_version=str(torch.__version__),
        cuda_version=str(torch.version.cuda) if device.is_cuda else None,
        driver_cuda_version=info.driver_version_text if info is not None else None, date=date,
        started_at=started, moe_kernel=model.moe_kernel if model is not None else None,
        gqa="native" if model is None or model.gqa_native else "repeated",
    )


def _device_error(exc: BaseException) -> DeviceError:
    first = " ".join(str(exc).split())[:300]
    if "out of memory" in first.lower():
        return DeviceError(f"out of device memory during the replay: {first}")
    return DeviceError(f"failure during the replay: {first}")


def run_replay(
    plan: ReplayPlan,
    device: ReplayDevice,
    plan_json: dict[str, Any],
    info: Any = None,
    on_step: StepCallback | None = None,
    on_result: Callable[[ReplayResults], None] | None = None,
    grouped_mm: bool | None = None,
) -> ReplayResults:
    """Build the model and run the plan: the whole device first, then each level. Returns the results,
    complete or not (the errors and Ctrl-C behave as ``runner.run_bench``'s: a level the driver refuses is a
    step error and the run goes on; another failure after the first step stops it; before, it is raised).

    ``info``: the :class:`greenctx.DeviceInfo` on a GPU (``None`` on the CPU). ``on_step(label)`` before each
    of ``plan.steps`` steps; ``on_result(results)`` after each. Raises :class:`DeviceError` when building the
    model fails.
    """
    model = ReplayModel(device.torch, plan, device, grouped_mm=grouped_mm)
    res = ReplayResults(run=run_info(plan, device, info, model), plan=plan_json)
    res.notes.extend(plan.notes)
    res.notes.extend(model.notes)
    notes: list[Finding] = []

    def step(label: str) -> None:
        if on_step is not None:
            on_step(label)

    def done() -> None:
        res.notes.extend(n for n in notes if n not in res.notes)
        if on_result is not None:
            on_result(res)

    try:
        step("whole device: decode step and prefill")
        res.whole = measure_whole(device, model, notes)
        done()
        for split in plan.levels:
            step(f"level {split.prefill_sms}/{split.decode_sms}: decode, prefill, both")
            try:
                res.levels.append(measure_level(device, model, info, split, notes))
            except DeviceError as exc:  # a split the driver refuses: record it, measure the rest
                res.step_errors.append(f"level {split.prefill_sms}/{split.decode_sms}: {exc}")
            done()
        res.complete = not res.step_errors
    except KeyboardInterrupt:
        res.interrupted = True
        res.notes.append(Finding("bench.interrupted"))
    except (PdmuxError, RuntimeError) as exc:  # torch reports device failures as RuntimeError
        error = exc if isinstance(exc, PdmuxError) else _device_error(exc)
        if res.whole is None:
            raise error from None
        res.error = str(error)
        res.notes.append(Finding("bench.stopped", {"error": res.error}))
    captured = not any(n.code == "bench.replay.graph_capture_failed" for n in notes)
    res.cuda_graph = plan.cuda_graph and captured and not (plan.model.is_moe and not model.grouped_mm)
    res.notes.extend(n for n in notes if n not in res.notes)
    return res
