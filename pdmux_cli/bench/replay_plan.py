"""The plan of ``pdmux bench --model``, the model replay: what is built, what it costs in memory, what runs.

Pure: no torch, numpy or cuda-python (``--dry-run --model`` prints it on any machine, and the replay
itself, :mod:`.model_replay`, only executes it). The replay builds a model's decoder layers in torch with
random bf16 weights of the model's real shapes and runs them as SGLang's pdmux loop does; this module
decides:

- **the layer shapes** (:func:`layer_weights`, :func:`head_weights`): fused QKV ``(heads + 2 kv_heads) x
  head_dim`` by hidden and O, as SGLang's ``QKVParallelLinear`` / ``RowParallelLinear`` hold them; a gated
  MLP (fused gate+up, then down) or, for MoE layers, the router, every routed expert (fused gate+up and
  down per expert) and the shared experts; the lm_head. Their element counts add up to
  :func:`pdmux_cli.catalog.model.num_params_total` (tested), so the replay holds the model's parameters layer
  for layer. Norm weights (``hidden`` elements, two per layer) are built too but not counted, as
  :mod:`pdmux_cli.catalog.model` does not count them; the input embedding is not built (a decode step gathers
  one row per token; the replay starts from random hidden states instead);
- **how many layers are built** (:func:`plan_memory`): as many as fit the device's free memory beside
  their KV caches, the lm_head and the activations, at least :data:`MIN_BUILT_LAYERS` (all of them for a
  model with fewer). A step still runs every one of the model's ``num_layers`` layers: layer ``i`` runs a
  built layer of its kind (attention full or sliding-window, FFN dense or MoE) in turn
  (:func:`layer_map`), so the work per step is the full model's and no time is scaled after the fact.
  Reused weights come from HBM as long as the built layers are several times the L2 (a note otherwise);
- **what is measured** (:func:`make_replay_plan`): SGLang's levels (``policy.plan_groups``; ``--levels``
  picks some), the level SGLang chooses for ``--decode-bs`` (``policy.choose_group``) and the prefill's
  layer slices, ``split_forward_token_budget // prompt_tokens`` layers per round
  (``policy.prefill_layers_per_round``; SGLang 0.5.23 ``srt/multiplex/multiplexing_mixin.py``
  ``event_loop_pdmux``), one slice submitted per round;
- **what the estimate predicts** for the same scenario at each level (:func:`predict`), with and without a
  calibration, through :func:`pdmux_cli.planning.estimate.estimate`.

Units: bytes, tokens, SMs, ms where named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..catalog import model as mdl
from ..catalog.model import Model
from ..messages import render_all
from ..sglang import split_levels
from ..util.errors import Finding, InputError
from .plan import BF16_BYTES, MEMORY_HEADROOM_BYTES, PlanDevice

#: Fewest layers the replay builds (the issue's floor: enough that reused weights are not in L2 for any
#: real model); a model with fewer layers is built whole.
MIN_BUILT_LAYERS = 4
#: Built weights below this multiple of the L2 may be read from L2 when layers are reused (the same
#: floor the bench's read buffer keeps: ``plan.MIN_BUFFER_L2_MULTIPLE``).
L2_REUSE_MULTIPLE = 4
#: Queries per attention call of a sliding-window layer in prefill, at least: a band mask of
#: ``block x (block + window)`` booleans per call instead of ``tokens x tokens`` (4.5 MB for gpt-oss's
#: 128-token window, where 131072 x 131072 would be 17 GB). A memory bound chosen here, not a measurement:
#: it changes how many attention calls a long prompt takes, not the work they do.
SLIDING_QUERY_BLOCK = 2048


@dataclass(frozen=True)
class LayerKind:
    """What one decoder layer is: ``attention`` ``"full"`` or ``"sliding"`` (attends to at most the
    model's ``sliding_window`` past tokens), ``ffn`` ``"dense"`` (gated MLP) or ``"moe"`` (routed experts)."""

    attention: str
    ffn: str

    @property
    def label(self) -> str:
        return f"{self.attention}/{self.ffn}"


@dataclass(frozen=True)
class WeightShape:
    """One weight tensor of the replay: ``name`` and ``shape`` (elements; ``(out, in)`` as ``nn.Linear``
    holds it, experts ``(experts, out, in)``)."""

    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def check_replayable(model: Model) -> None:
    """:class:`InputError` for an architecture the replay does not build: DeepSeek's multi-head latent
    attention (its compressed KV needs other attention kernels than ``scaled_dot_product_attention``)."""
    if model.is_mla:
        raise InputError(f"{model.name} uses multi-head latent attention (DeepSeek MLA): the model replay "
                         "builds grouped-query attention only ('pdmux estimate' models MLA)")


def layer_kinds(model: Model) -> tuple[LayerKind, ...]:
    """The kind of each of the model's layers, in order.

    :mod:`pdmux_cli.catalog.model` keeps counts, not positions: the dense-FFN layers of a MoE model come first
    (DeepSeek's ``first_k_dense_replace``); the sliding-window layers are spread evenly (layer ``i`` is
    sliding when ``floor((i + 1) S / L) > floor(i S / L)`` for ``S`` of ``L``), which gives Gemma's 5-of-6
    and gpt-oss's every other layer. Only the counts matter for a step's work.
    """
    layers, sliding = model.num_layers, model.num_sliding_layers
    dense = mdl.dense_ffn_layers(model)
    kinds = []
    for i in range(layers):
        attention = "sliding" if (i + 1) * sliding // layers > i * sliding // layers else "full"
        ffn = "dense" if (not model.is_moe or i < dense) else "moe"
        kinds.append(LayerKind(attention, ffn))
    return tuple(kinds)


def layer_weights(model: Model, kind: LayerKind) -> tuple[WeightShape, ...]:
    """The weights of one layer of ``kind`` (the linear ones :mod:`pdmux_cli.catalog.model` counts; module
    docstring)."""
    check_replayable(model)
    h, heads, kv, hd = model.hidden_size, model.num_attention_heads, model.num_kv_heads, model.head_dim
    weights = [WeightShape("qkv", ((heads + 2 * kv) * hd, h)), WeightShape("o", (h, heads * hd))]
    if kind.ffn == "dense":
        inter = model.intermediate_size
        weights += [WeightShape("gate_up", (2 * inter, h)), WeightShape("down", (h, inter))]
        return tuple(weights)
    experts, width = model.num_experts, model.moe_intermediate_size
    weights += [WeightShape("router", (experts, h)), WeightShape("experts_gate_up", (experts, 2 * width, h)),
                WeightShape("experts_down", (experts, h, width))]
    if model.num_shared_experts:
        shared = model.num_shared_experts * model.shared_expert_intermediate_size
        weights += [WeightShape("shared_gate_up", (2 * shared, h)), WeightShape("shared_down", (h, shared))]
    return tuple(weights)


def head_weights(model: Model) -> tuple[WeightShape, ...]:
    """The weights outside the layers that the replay builds: the lm_head ``(vocab, hidden)``."""
    return (WeightShape("lm_head", (model.vocab_size, model.hidden_size)),)


def layer_params(model: Model, kind: LayerKind) -> int:
    """Elements of one layer of ``kind`` (:func:`layer_weights`)."""
    return sum(w.numel for w in layer_weights(model, kind))


def replay_params_total(model: Model) -> int:
    """Elements the replayed model stands for: every layer's weights, the lm_head and, when untied, the
    input embedding (not built: module docstring). Equals :func:`pdmux_cli.catalog.model.num_params_total`."""
    total = sum(layer_params(model, kind) for kind in layer_kinds(model))
    total += sum(w.numel for w in head_weights(model))
    if not model.tie_word_embeddings:
        total += mdl.embedding_params(model)
    return total


def attended_tokens(model: Model, kind: LayerKind, context_tokens: int) -> int:
    """Cached tokens a decode query of a ``kind`` layer attends to: the context, or at most the window."""
    if kind.attention == "sliding":
        return min(context_tokens, model.sliding_window)
    return context_tokens


def kv_elements_per_token(model: Model) -> int:
    """K and V elements one token stores per layer: ``2 x kv_heads x head_dim``."""
    return 2 * model.num_kv_heads * model.head_dim


def decode_kv_bytes(model: Model, kind: LayerKind, decode_bs: int, context_tokens: int) -> int:
    """Bytes of one built layer's decode KV cache (bf16): ``decode_bs`` requests of the attended context
    plus the slot the step writes."""
    return BF16_BYTES * kv_elements_per_token(model) * decode_bs * (attended_tokens(
        model, kind, context_tokens) + 1)


def prefill_kv_bytes(model: Model, prompt_tokens: int) -> int:
    """Bytes one built layer's prefill writes to its KV store (bf16): every prompt token."""
    return BF16_BYTES * kv_elements_per_token(model) * prompt_tokens


def activation_bytes(model: Model, tokens: int) -> int:
    """Peak bytes of the tensors alive while ``tokens`` tokens pass one layer (bf16), as the replay's layer
    code holds them (:mod:`.model_replay`): the residual and its norm, then in attention the fused QKV, the
    rotated q and k, the attention output and its flattened copy and the O projection; in the FFN the gate+up
    output, the activation and its product, the down projection; for MoE the router logits (fp32), the
    ``tokens x top_k`` gathered rows, their expert outputs and the shared experts'. A sliding-window layer
    in prefill adds its band mask (booleans). Counted from the code, not fitted."""
    h, heads, kv, hd = model.hidden_size, model.num_attention_heads, model.num_kv_heads, model.head_dim
    qkv = (heads + 2 * kv) * hd
    attention = qkv + heads * hd + kv * hd + 2 * heads * hd + h
    ffn = 0
    if mdl.dense_ffn_layers(model):
        ffn = max(ffn, 2 * model.intermediate_size + 2 * model.intermediate_size + h)
    if model.is_moe:
        rows = model.experts_per_token
        width = model.moe_intermediate_size
        shared = model.num_shared_experts * model.shared_expert_intermediate_size
        moe = (2 * model.num_experts + rows * (2 * h + 2 * width + 2 * width) + h + 4 * shared + h)
        ffn = max(ffn, moe)
    per_token = 2 * h + max(attention, ffn)
    mask = 0
    if model.num_sliding_layers and tokens > model.sliding_window:
        block = max(SLIDING_QUERY_BLOCK, model.sliding_window)
        mask = block * (block + model.sliding_window)
    return BF16_BYTES * per_token * tokens + mask


@dataclass(frozen=True)
class ReplayMemory:
    """What the built replay holds (bytes). ``built``: copies per layer kind, ``(kind, copies)``.

    ``layer_weight_bytes`` / ``decode_kv_bytes`` / ``prefill_kv_bytes``: over the built layers;
    ``head_bytes``: the lm_head; ``activation_bytes``: the prefill's peak (:func:`activation_bytes`) plus a
    decode step's; ``headroom_bytes``: cuBLAS workspaces and the CUDA context
    (``plan.MEMORY_HEADROOM_BYTES``); ``available_bytes``: the device's free memory the plan was made for.
    """

    built: tuple[tuple[LayerKind, int], ...]
    layer_weight_bytes: int
    decode_kv_bytes: int
    prefill_kv_bytes: int
    head_bytes: int
    activation_bytes: int
    headroom_bytes: int
    available_bytes: int

    @property
    def built_layers(self) -> int:
        return sum(n for _, n in self.built)

    @property
    def needed_bytes(self) -> int:
        return (self.layer_weight_bytes + self.decode_kv_bytes + self.prefill_kv_bytes + self.head_bytes
                + self.activation_bytes + self.headroom_bytes)


def distribute(kinds: tuple[LayerKind, ...], built: int) -> tuple[tuple[LayerKind, int], ...]:
    """Split ``built`` layers among the kinds present in ``kinds`` in proportion to their counts (largest
    remainder), each kind at least one copy and at most its count. Kinds in order of first appearance."""
    counts: dict[LayerKind, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    built = max(len(counts), min(built, len(kinds)))
    share = {k: max(1, min(n, int(built * n / len(kinds)))) for k, n in counts.items()}
    order = sorted(counts,
                   key=lambda k: -(built * counts[k] / len(kinds) - int(built * counts[k] / len(kinds))))
    while sum(share.values()) < built:
        for k in order:
            if sum(share.values()) < built and share[k] < counts[k]:
                share[k] += 1
    while sum(share.values()) > built:
        k = max((k for k in share if share[k] > 1), key=lambda k: share[k])
        share[k] -= 1
    return tuple((k, share[k]) for k in counts)


def _memory(model: Model, kinds: tuple[LayerKind, ...], built: tuple[tuple[LayerKind, int], ...],
            decode_bs: int, context_tokens: int, prompt_tokens: int, available: int) -> ReplayMemory:
    weights = sum(n * layer_params(model, k) for k, n in built) * BF16_BYTES
    decode_kv = sum(n * decode_kv_bytes(model, k, decode_bs, context_tokens) for k, n in built)
    prefill_kv = sum(n for _, n in built) * prefill_kv_bytes(model, prompt_tokens)
    head = sum(w.numel for w in head_weights(model)) * BF16_BYTES
    acts = activation_bytes(model, prompt_tokens) + activation_bytes(model, decode_bs)
    acts += BF16_BYTES * model.vocab_size * (decode_bs + 1)  # the logits of a decode step and of the prompt
    return ReplayMemory(built, weights, decode_kv, prefill_kv, head, acts, MEMORY_HEADROOM_BYTES, available)


def plan_memory(model: Model, decode_bs: int, context_tokens: int, prompt_tokens: int, available_bytes: int,
                where: str = "the device") -> ReplayMemory:
    """The most layers (at least ``min(MIN_BUILT_LAYERS, num_layers)``, at most ``num_layers``) whose weights,
    KV caches, lm_head, activations and headroom fit ``available_bytes``.

    Raises :class:`InputError` naming the sizes when even the fewest do not fit (``where`` names the device).
    """
    kinds = layer_kinds(model)
    fewest = min(MIN_BUILT_LAYERS, len(kinds))
    first = _memory(model, kinds, distribute(kinds, fewest), decode_bs, context_tokens, prompt_tokens,
                    available_bytes)
    if first.needed_bytes > available_bytes:
        raise InputError(
            "{model} does not fit {where}: {layers} layers ({weights_gb:.2f} GB) + KV cache of {decode_bs} x "
            "{context_tokens} tokens ({kv_gb:.2f} GB) + the {prompt_tokens}-token prefill "
            "({prefill_gb:.2f} GB) + lm_head ({head_gb:.2f} GB) + headroom need {needed_gb:.2f} GB, "
            "{free_gb:.2f} GB is free: use a smaller {flag.decode_bs}, {flag.context} or "
            "{flag.prompt_tokens}, or a GPU with more memory",
            param="decode_bs",
            values={"model": model.name, "where": where, "layers": first.built_layers,
                    "weights_gb": first.layer_weight_bytes / 1e9, "decode_bs": decode_bs,
                    "context_tokens": context_tokens, "kv_gb": first.decode_kv_bytes / 1e9,
                    "prompt_tokens": prompt_tokens,
                    "prefill_gb": (first.prefill_kv_bytes + first.activation_bytes) / 1e9,
                    "head_gb": first.head_bytes / 1e9, "needed_gb": first.needed_bytes / 1e9,
                    "free_gb": available_bytes / 1e9})
    low, high = fewest, len(kinds)  # the memory grows with the layers built: bisect
    best = first
    while low < high:
        mid = (low + high + 1) // 2
        candidate = _memory(model, kinds, distribute(kinds, mid), decode_bs, context_tokens, prompt_tokens,
                            available_bytes)
        if candidate.needed_bytes <= available_bytes:
            low, best = mid, candidate
        else:
            high = mid - 1
    return best


def layer_map(kinds: tuple[LayerKind, ...],
              built: tuple[tuple[LayerKind, int], ...]) -> tuple[tuple[LayerKind, int], ...]:
    """For each of the model's layers, ``(kind, copy)``: the built layer it runs. The ``j``-th layer of a kind
    runs copy ``j mod copies`` of that kind."""
    copies = dict(built)
    seen: dict[LayerKind, int] = {}
    out = []
    for k in kinds:
        j = seen.get(k, 0)
        seen[k] = j + 1
        out.append((k, j % copies[k]))
    return tuple(out)


def prefill_slices(prompt_tokens: int, num_layers: int, token_budget: int) -> tuple[tuple[int, int], ...]:
    """SGLang's split prefill as layer ranges ``[start, end)``, one per scheduler round:
    ``policy.prefill_layers_per_round`` layers each, the last one shorter when they do not divide."""
    per_round = split_levels.prefill_layers_per_round(prompt_tokens, num_layers, token_budget)
    return tuple((start, min(start + per_round, num_layers)) for start in range(0, num_layers, per_round))


@dataclass(frozen=True)
class ReplayPlan:
    """Everything one replay run does, in numbers.

    ``device``: the GPU the levels and predictions are for (the real device, or ``--gpu`` for a dry run and
    on the CPU). ``device_kind``: ``"cuda"`` (green contexts per level) or ``"cpu"`` (every "level" runs on
    the whole CPU, one phase after the other: the plumbing, not a measurement of SM partitions).
    ``levels``: the levels measured; ``chosen_level``: SGLang's choice for ``decode_bs`` (``None`` when it is
    not a green-context level). ``slices``: the prefill's layer ranges, one per round. ``kinds``: every
    layer's kind; ``memory``: what is built; ``layer_map``: which built layer each layer runs.
    ``repeats``: timed runs per measurement; ``warmup``: untimed runs first. ``cuda_graph``: decode steps
    replay a CUDA graph captured on their stream (SGLang captures one per stream group).
    """

    model: Model
    device: PlanDevice
    device_kind: str
    decode_bs: int
    context_tokens: int
    prompt_tokens: int
    sm_group_num: int
    decode_bs_divisor: int
    token_budget: int
    groups: tuple[split_levels.Split, ...]
    levels: tuple[split_levels.Split, ...]
    level_source: str
    chosen_level: split_levels.Split | None
    slices: tuple[tuple[int, int], ...]
    kinds: tuple[LayerKind, ...]
    memory: ReplayMemory
    layer_map: tuple[tuple[LayerKind, int], ...]
    repeats: int
    warmup: int
    cuda_graph: bool
    notes: tuple[Finding, ...] = ()

    @property
    def layers_per_round(self) -> int:
        return self.slices[0][1] - self.slices[0][0]

    @property
    def steps(self) -> int:
        """Progress steps: the whole device, then one per level."""
        return 1 + len(self.levels)

    def group_of(self, split: split_levels.Split) -> int | None:
        """The stream-group index of ``split`` in SGLang's groups (``None`` when it is not one of them)."""
        return self.groups.index(split) if split in self.groups else None


def check_scenario(model: Model, decode_bs: int, context_tokens: int, prompt_tokens: int) -> None:
    """:class:`InputError` where ``pdmux estimate`` refuses the scenario: sizes out of range
    (``Scenario.validate``), a prompt or context past the model's context length."""
    from ..planning.estimate import Scenario, _check_context

    scenario = Scenario(decode_bs=decode_bs, context_tokens=context_tokens, prompt_tokens=prompt_tokens)
    scenario.validate()
    _check_context(model, scenario)


def make_replay_plan(
    model: Model,
    device: PlanDevice,
    *,
    device_kind: str = "cuda",
    decode_bs: int = 32,
    context_tokens: int = 2048,
    prompt_tokens: int = 8192,
    available_bytes: int | None = None,
    levels: str | None = None,
    sm_group_num: int = split_levels.DEFAULT_SM_GROUP_NUM,
    decode_bs_divisor: int = split_levels.DEFAULT_DECODE_BS_DIVISOR,
    token_budget: int = split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET,
    repeats: int | None = None,
    quick: bool = False,
    granularity: tuple[int, int] | None = None,
    cuda_graph: bool = True,
) -> ReplayPlan:
    """The replay plan; every check happens here, before any device work.

    ``available_bytes``: free memory of the device the replay runs on (``None``: the profile's memory, for a
    dry run). ``levels``, ``repeats``, ``quick``, ``granularity``, ``sm_group_num``: as ``pdmux bench``
    (``plan.make_plan`` chooses the levels and repeats, so both runs measure the same levels).
    Raises :class:`InputError` for an MLA model, bad sizes, a prompt past the context length, a layer budget
    <= 0, levels SGLang or the driver cannot give, or a model that does not fit (:func:`plan_memory`).
    """
    from .plan import make_plan

    check_replayable(model)
    check_scenario(model, decode_bs, context_tokens, prompt_tokens)
    for name, value in (("decode_bs_divisor", decode_bs_divisor), ("token_budget", token_budget)):
        if value <= 0:
            raise InputError("{param_flag} must be > 0, got {value}", param=name, values={"value": value})
    if device_kind not in ("cuda", "cpu"):
        raise InputError(f"replay device must be cuda or cpu, got {device_kind!r}")
    bench = make_plan(device, levels=levels, sm_group_num=sm_group_num, repeats=repeats, quick=quick,
                      granularity=granularity)
    notes = [n for n in bench.notes if n.code != "bench.l2_unknown"]
    if available_bytes is None:
        if not device.memory_bytes:
            raise InputError(f"{device.name}: memory size unknown, cannot plan the replay's layers")
        available_bytes = device.memory_bytes
    where = "the CPU's free memory" if device_kind == "cpu" else f"{device.name}"
    memory = plan_memory(model, decode_bs, context_tokens, prompt_tokens, available_bytes, where)
    kinds = layer_kinds(model)
    try:
        groups = split_levels.plan_groups(device.sm_count, device.compute_capability, sm_group_num).groups
    except InputError:  # no SGLang levels on this device: make_plan said so in a note
        groups = []
    chosen = None
    if groups:
        index = split_levels.choose_group(len(groups), decode_bs, True, decode_bs_divisor)
        chosen = groups[index] if 0 < index < len(groups) - 1 else None
    notes.extend(_replay_notes(model, device, device_kind, memory))
    return ReplayPlan(
        model=model, device=device, device_kind=device_kind, decode_bs=decode_bs,
        context_tokens=context_tokens, prompt_tokens=prompt_tokens, sm_group_num=sm_group_num,
        decode_bs_divisor=decode_bs_divisor, token_budget=token_budget, groups=tuple(groups),
        levels=bench.levels, level_source=bench.level_source, chosen_level=chosen,
        slices=prefill_slices(prompt_tokens, model.num_layers, token_budget), kinds=kinds, memory=memory,
        layer_map=layer_map(kinds, memory.built), repeats=bench.repeats, warmup=bench.warmup,
        cuda_graph=cuda_graph and device_kind == "cuda", notes=tuple(notes),
    )


def _replay_notes(model: Model, device: PlanDevice, device_kind: str, memory: ReplayMemory) -> list[Finding]:
    """What the replay's user should know of what is built (``bench.replay.*``): layers reused, their weights
    small enough for the L2, weights held in bf16, a CPU run."""
    notes = []
    if memory.built_layers < model.num_layers:
        notes.append(Finding("bench.replay.layers_reused", {"built": memory.built_layers,
                                                            "layers": model.num_layers}))
        if device.l2_bytes and memory.layer_weight_bytes < L2_REUSE_MULTIPLE * device.l2_bytes:
            notes.append(Finding("bench.replay.weights_in_l2", {"weight_bytes": memory.layer_weight_bytes,
                                                                "multiple": L2_REUSE_MULTIPLE,
                                                                "l2_bytes": device.l2_bytes}))
    if model.weight_dtype != "bf16":
        notes.append(Finding("bench.replay.bf16_weights", {"model": model.name, "dtype": model.weight_dtype}))
    if device_kind == "cpu":
        notes.append(Finding("bench.replay.cpu"))
    return notes


# --------------------------------------------------------------------------------------------------
# What the estimate predicts for the same scenario
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Predicted:
    """The estimate's times for one level (ms): each phase alone on its SMs, both together, and the ITL of a
    pdmux round (the co-run decode step plus SGLang's CPU time per round). ``None`` where not predicted."""

    decode_alone_ms: float | None = None
    prefill_alone_ms: float | None = None
    decode_corun_ms: float | None = None
    prefill_corun_ms: float | None = None
    itl_ms: float | None = None


@dataclass(frozen=True)
class Predictions:
    """The estimate for the plan's scenario: ``whole`` (``decode_alone_ms``: the decode-only row;
    ``prefill_alone_ms``: prefill-first's prefill, on all SMs) and one :class:`Predicted` per level,
    keyed ``(prefill_sms, decode_sms)``; ``source``: the cost model's one line; ``notes``."""

    whole: Predicted
    levels: dict[tuple[int, int], Predicted]
    source: str
    notes: list[Finding] = field(default_factory=list)


def predict(plan: ReplayPlan, gpu: Any, calibration: Any = None) -> Predictions:
    """What ``pdmux estimate`` gives the plan's scenario on ``gpu`` (a ``hardware.Gpu``) at every level
    measured, with the plan's SGLang knobs, bf16 weights and bf16 math as the replay runs them, and
    ``calibration`` (a :class:`pdmux_cli.costmodel.calibration_file.Calibration`, or ``None`` for the shipped
    model).

    A level the estimate refuses (not a split of all the SMs: a ``--levels`` pair) gets no prediction and a
    note. Raises :class:`InputError` where the estimate does for the scenario itself.
    """
    from ..costmodel.options import CostModelOptions
    from ..planning.estimate import Scenario, estimate

    model = plan.model
    common = {
        "decode_bs": plan.decode_bs, "context_tokens": plan.context_tokens,
        "prompt_tokens": plan.prompt_tokens, "chunk_sizes": (), "mixed_chunk_sizes": (),
        "sm_group_num": plan.sm_group_num, "decode_bs_divisor": plan.decode_bs_divisor,
        "split_forward_token_budget": plan.token_budget,
        "weight_bytes_per_param": None if model.weight_dtype == "bf16" else float(BF16_BYTES),
        # the replay runs the model's layers in SGLang's loop, not SGLang's scheduler: no per-request time
        "cost": CostModelOptions(flops_dtype="bf16", per_request_overhead_ms=0.0),
    }
    base = estimate(gpu, model, Scenario(**common), calibration=calibration)
    rows = {r.policy: r for r in base.rows}
    whole = Predicted(decode_alone_ms=rows["decode-only"].itl_ms,
                      prefill_alone_ms=rows["prefill-first"].prefill_ms)
    levels: dict[tuple[int, int], Predicted] = {}
    notes: list[Finding] = []
    for split in plan.levels:
        try:
            est = estimate(gpu, model, Scenario(level=(split.prefill_sms, split.decode_sms), **common),
                           calibration=calibration)
        except InputError as exc:
            notes.append(Finding("bench.replay.no_prediction", {"prefill_sms": split.prefill_sms,
                                                                "decode_sms": split.decode_sms,
                                                                "reason": str(exc)}))
            continue
        row = next(r for r in est.rows if r.policy == "pdmux")
        levels[(split.prefill_sms, split.decode_sms)] = Predicted(
            decode_alone_ms=row.decode_alone_ms, prefill_alone_ms=row.prefill_alone_ms,
            decode_corun_ms=row.decode_corun_ms, prefill_corun_ms=row.prefill_corun_ms, itl_ms=row.itl_ms)
    return Predictions(whole, levels, base.throughput_source, notes)


def predicted_dict(p: Predicted | None) -> dict[str, float | None] | None:
    """JSON of a :class:`Predicted` (``None`` stays ``None``)."""
    if p is None:
        return None
    return {"decode_alone_ms": p.decode_alone_ms, "prefill_alone_ms": p.prefill_alone_ms,
            "decode_corun_ms": p.decode_corun_ms, "prefill_corun_ms": p.prefill_corun_ms, "itl_ms": p.itl_ms}


def replay_plan_dict(plan: ReplayPlan) -> dict[str, Any]:
    """JSON of the plan (``--dry-run --model --json`` and results.json's ``plan``); units in the key names."""
    m, dev = plan.memory, plan.device
    return {
        "kind": "model-replay",
        "model": plan.model.name,
        "device_kind": plan.device_kind,
        "gpu": dev.name,
        "gpu_profile": dev.profile_key,
        "sm_count": dev.sm_count,
        "compute_capability": dev.cc_text,
        "decode_bs": plan.decode_bs,
        "context_tokens": plan.context_tokens,
        "prompt_tokens": plan.prompt_tokens,
        "sm_group_num": plan.sm_group_num,
        "decode_bs_divisor": plan.decode_bs_divisor,
        "split_forward_token_budget": plan.token_budget,
        "layers": plan.model.num_layers,
        "built_layers": m.built_layers,
        "built": [{"attention": k.attention, "ffn": k.ffn, "copies": n,
                   "layers": sum(1 for x in plan.kinds if x == k),
                   "params_per_layer": layer_params(plan.model, k)}
                  for k, n in m.built],
        "params_total": replay_params_total(plan.model),
        "memory": {
            "layer_weight_bytes": m.layer_weight_bytes, "decode_kv_bytes": m.decode_kv_bytes,
            "prefill_kv_bytes": m.prefill_kv_bytes, "head_bytes": m.head_bytes,
            "activation_bytes": m.activation_bytes, "headroom_bytes": m.headroom_bytes,
            "needed_bytes": m.needed_bytes, "available_bytes": m.available_bytes,
        },
        "layers_per_round": plan.layers_per_round,
        "prefill_rounds": len(plan.slices),
        "slices": [list(s) for s in plan.slices],
        "levels": [{"level": i, "group": plan.group_of(s), "prefill_sms": s.prefill_sms,
                    "decode_sms": s.decode_sms, "chosen": s == plan.chosen_level}
                    for i, s in enumerate(plan.levels, start=1)],
        "level_source": plan.level_source,
        "chosen_level": list(plan.chosen_level) if plan.chosen_level else None,
        "repeats": plan.repeats,
        "warmup": plan.warmup,
        "cuda_graph": plan.cuda_graph,
        "notes": render_all(plan.notes),
    }
