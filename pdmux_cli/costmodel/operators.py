"""A model's step as operators: GEMM shapes, attention, element-wise ops, embedding and lm_head.

Pure arithmetic over a :class:`~pdmux_cli.catalog.model.Model` (element counts, bytes, FLOPs); no time. The
roofline model (:mod:`pdmux_cli.costmodel.roofline`) turns these into seconds on ``s`` SMs.

What one step runs, per layer, for ``T`` tokens (decode rows plus prefill tokens):

- GEMMs with ``M = T`` (:attr:`StepShapes.token_gemms`): attention projections (GQA: QKV and O; MLA:
  q_a/q_b or q, kv_a, kv_b, o), the dense MLP's gate+up and down (dense layers), a MoE layer's router and
  shared experts; each read once per step (weights) and run at 2 FLOP per multiply-add;
- routed experts (:attr:`StepShapes.experts`): the experts a batch touches (uniform routing, as
  :func:`pdmux_cli.catalog.model.expected_experts_touched`), each with its share of the ``T x top-k`` rows;
- attention: prefill is causal over the sequence and its cached prefix
  (:func:`pdmux_cli.catalog.model.attention_flops`); decode reads every request's KV cache
  (:func:`pdmux_cli.catalog.model.kv_bytes`);
- element-wise ops (two RMSNorms, RoPE, the activation, two residual adds) moving
  :attr:`StepShapes.elementwise_bytes_per_token` bytes a token per layer;

plus, once a step, the embedding gather (element-wise bytes) and the lm_head GEMM for the last token
of each prefilled sequence and every decode row (``M = rows``).

With tensor parallelism (``tp`` GPUs, :mod:`pdmux_cli.multigpu.tensor_parallel`) the shapes are one rank's:
column-parallel GEMMs keep ``n / tp`` outputs, row-parallel ones ``k / tp`` inputs, replicated ones
(MLA's ``q_a``/``kv_a``, the router) stay whole, every expert is ``width / tp`` wide, the lm_head
``vocab / tp``; attention runs ``heads / tp`` heads over the rank's KV heads (replicated when ``tp``
exceeds them; MLA's latent whole). The collectives (:attr:`StepShapes.allreduces`) are timed by
:mod:`pdmux_cli.costmodel.collectives`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..catalog import model as mdl
from ..multigpu import tensor_parallel as tpl
from ..catalog.model import Model

#: Bytes of one activation element (bf16); activations are 16-bit whatever the weights are.
ACTIVATION_BYTES = 2


@dataclass(frozen=True)
class Gemm:
    """One weight matrix applied to ``M`` rows: ``[M, k] x [k, n]``.

    ``name``: what it is (``"qkv"``, ``"o"``, ``"gate_up"``, ``"down"``, ``"router"``, ``"lm_head"``,
    MLA's ``"q_a"``...). ``k``, ``n``: reduction and output widths (elements). ``weight_bytes``: bytes
    of the matrix. ``count``: how many such matrices one step runs (layers that have it).
    """

    name: str
    k: int
    n: int
    weight_bytes: float
    count: int

    def flops(self, rows: float) -> float:
        """FLOPs of one instance for ``rows`` rows: ``2 x rows x k x n``."""
        return 2.0 * rows * self.k * self.n

    def bytes(self, rows: float) -> float:
        """Bytes one instance moves for ``rows`` rows: its weights plus 16-bit input and output."""
        return self.weight_bytes + ACTIVATION_BYTES * rows * (self.k + self.n)


@dataclass(frozen=True)
class Experts:
    """A MoE layer's routed experts, ``count`` such layers a step.

    ``num_experts`` (E), ``top_k``: routing. ``hidden``, ``width``: an expert is a gated MLP
    ``hidden -> 2 x width -> hidden``. ``bytes_per_param``: the experts' storage (mxfp4 4.25/8).
    """

    num_experts: int
    top_k: int
    hidden: int
    width: int
    bytes_per_param: float
    count: int

    def touched(self, tokens: float) -> float:
        """Expected distinct experts ``tokens`` tokens route to: ``E x (1 - (1 - k/E) ** tokens)``."""
        if tokens <= 0:
            return 0.0
        e, k = self.num_experts, self.top_k
        return e * (1.0 - (1.0 - k / e) ** tokens)

    @property
    def expert_params(self) -> int:
        """Parameters of one expert: ``3 x hidden x width``."""
        return 3 * self.hidden * self.width


@dataclass(frozen=True)
class StepShapes:
    """Everything a step's cost needs from the model (see the module docstring).

    ``layers``: decoder layers. ``token_gemms``: GEMMs with one row per token. ``lm_head``: the
    logits GEMM (one row per sequence or decode row). ``experts``: routed experts, or ``None``.
    ``elementwise_bytes_per_token``: bytes per token per layer of the small ops (norms, RoPE, activation,
    residual adds; 16-bit). ``embedding_bytes_per_token``: the embedding gather's bytes per token.
    ``tp``: GPUs the model is sharded over (the shapes are one rank's). ``kv_elements_per_token_per_layer``:
    KV elements a rank caches per token and layer. ``attention_share``: the share of the model's
    attention FLOPs a rank computes (``1 / tp``). ``allreduces``: all-reduces a step runs
    (``2 x layers + 1`` with ``tp > 1``), each of ``allreduce_bytes_per_token`` bytes per token.
    ``logits_bytes_per_row``: bytes of one row of the gathered logits (``vocab x 2``; 0 on one GPU).
    ``embedding_rows``: vocabulary rows of the embedding table a rank holds.
    """

    layers: int
    token_gemms: tuple[Gemm, ...]
    lm_head: Gemm
    experts: Experts | None
    elementwise_bytes_per_token: float
    embedding_bytes_per_token: float
    tp: int = 1
    kv_elements_per_token_per_layer: int = 0
    attention_share: float = 1.0
    allreduces: int = 0
    allreduce_bytes_per_token: float = 0.0
    logits_bytes_per_row: float = 0.0
    embedding_rows: int = 0


def _attention_gemms(model: Model, wb: float, layers: int, sharding: tpl.Sharding) -> list[Gemm]:
    h, heads = model.hidden_size, sharding.heads  # heads: this rank's
    if model.is_mla:
        qk = model.qk_nope_head_dim + model.qk_rope_head_dim
        shapes = []
        if model.q_lora_rank:  # q_a replicated, q_b split by heads
            shapes += [("q_a", h, model.q_lora_rank), ("q_b", model.q_lora_rank, heads * qk)]
        else:
            shapes += [("q", h, heads * qk)]
        shapes += [("kv_a", h, model.kv_lora_rank + model.qk_rope_head_dim),  # replicated
                   ("kv_b", model.kv_lora_rank, heads * (model.qk_nope_head_dim + model.v_head_dim)),
                   ("o", heads * model.v_head_dim, h)]
    else:
        d = model.head_dim
        shapes = [("qkv", h, (heads + 2 * sharding.kv_heads) * d), ("o", heads * d, h)]
    return [Gemm(name, k, n, k * n * wb, layers) for name, k, n in shapes]


def step_shapes(model: Model, weight_bytes_per_param: float | None = None, tp: int = 1) -> StepShapes:
    """The :class:`StepShapes` of one of ``tp`` ranks (the whole model for ``tp=1``) of ``model`` with its
    own weight format, or ``weight_bytes_per_param`` bytes for every weight. For ``tp=1`` the GEMMs'
    parameters add up to :func:`pdmux_cli.catalog.model.decode_linear_params` less the routed experts
    (tested). Raises :class:`InputError` where SGLang refuses the split
    (:func:`pdmux_cli.multigpu.tensor_parallel.shard`)."""
    sharding = tpl.shard(model, tp)
    linear_b = mdl.bytes_per_param(model, "linear", weight_bytes_per_param)
    h = model.hidden_size
    gemms = _attention_gemms(model, linear_b, model.num_layers, sharding)
    dense = mdl.dense_ffn_layers(model)
    if dense:
        i = model.intermediate_size // tp
        gemms += [Gemm("gate_up", h, 2 * i, h * 2 * i * linear_b, dense),
                  Gemm("down", i, h, i * h * linear_b, dense)]
    experts = None
    moe_layers = mdl.moe_layers(model)
    act_width = model.intermediate_size / tp if dense else 0  # per token, for the activation's bytes
    if moe_layers:
        router_b = mdl.bytes_per_param(model, "router", weight_bytes_per_param)
        gemms.append(Gemm("router", h, model.num_experts, h * model.num_experts * router_b, moe_layers))
        if model.num_shared_experts:
            width = model.num_shared_experts * model.shared_expert_intermediate_size // tp
            gemms += [Gemm("shared_gate_up", h, 2 * width, h * 2 * width * linear_b, moe_layers),
                      Gemm("shared_down", width, h, width * h * linear_b, moe_layers)]
        experts = Experts(model.num_experts, model.experts_per_token, h, model.moe_intermediate_size // tp,
                          mdl.bytes_per_param(model, "expert", weight_bytes_per_param), moe_layers)
        moe_width = (model.experts_per_token * model.moe_intermediate_size
                     + model.num_shared_experts * model.shared_expert_intermediate_size) / tp
        act_width = (dense * model.intermediate_size / tp + moe_layers * moe_width) / model.num_layers
    head_b = mdl.bytes_per_param(model, "lm_head", weight_bytes_per_param)
    vocab = tpl.rank_vocab(model, tp)
    lm_head = Gemm("lm_head", h, vocab, h * vocab * head_b, 1)
    if model.is_mla:
        rope_width = sharding.heads * model.qk_rope_head_dim + model.qk_rope_head_dim
        kv_elements = mdl.kv_elements_per_token_per_layer(model)  # the latent, whole on every rank
    else:
        rope_width = (sharding.heads + sharding.kv_heads) * model.head_dim
        kv_elements = 2 * sharding.kv_heads * model.head_dim
    # two RMSNorms (read + write h), RoPE on q and k (read + write), the gated activation (read 2
    # widths, write one), two residual adds (read 2h, write h): 16-bit elements
    elements = 2 * 2 * h + 2 * rope_width + 3 * act_width + 2 * 3 * h
    return StepShapes(
        layers=model.num_layers,
        token_gemms=tuple(gemms),
        lm_head=lm_head,
        experts=experts,
        elementwise_bytes_per_token=float(elements * ACTIVATION_BYTES),
        embedding_bytes_per_token=float(2 * h * ACTIVATION_BYTES),
        tp=tp,
        kv_elements_per_token_per_layer=kv_elements,
        attention_share=sharding.attention_share,
        allreduces=tpl.allreduces_per_forward(model, tp),
        allreduce_bytes_per_token=float(h * ACTIVATION_BYTES) if tp > 1 else 0.0,
        logits_bytes_per_row=float(model.vocab_size * ACTIVATION_BYTES) if tp > 1 else 0.0,
        embedding_rows=vocab,
    )


#: Kernels every decoder layer of an SGLang forward launches whatever its shapes: the two fused
#: add-RMSNorms (``srt/layers/layernorm.py`` ``RMSNorm.forward_cuda``), RoPE, the KV-cache store and the
#: attention kernel (the attention backend's ``forward_extend``). With one launch per GEMM and the gated
#: activation (``srt/layers/activation.py`` ``SiluAndMul``), a dense layer launches 10, ``common.yaml``
#: ``cpu.kernels_per_layer``.
LAYER_KERNELS = 5
#: More kernels of an MLA layer (``srt/models/deepseek_v2.py``): the q_a and kv_a RMSNorms and the split
#: and concatenation of the latent's rope part into the keys.
MLA_KERNELS = 3
#: Kernels of one MoE layer's routed experts besides the router GEMM: the top-k selection
#: (``srt/layers/moe/topk.py``) and the fused MoE, by runner (:func:`pdmux_cli.costmodel.moe.moe_kernel`):
#: Triton's ``fused_experts_impl`` (``moe_align_block_size``, two grouped GEMMs, the activation, the sum
#: over top-k) and FlashInfer's TRT-LLM-gen fused MoE (routing, the two GEMMs with the activation and
#: the combine fused into them).
MOE_KERNELS_BY_RUNNER = {"triton": 6, "triton_kernel": 6, "flashinfer_trtllm": 3}


def eager_kernels_per_layer(shapes: StepShapes, *, mla: bool = False, fp8_linear: bool = False,
                            moe_runner: str | None = None) -> float:
    """Kernels a decoder layer of ``shapes`` launches in an eager forward (a prefill or mixed batch outside
    a CUDA graph), averaged over the layers (MoE and dense layers mixed): :data:`LAYER_KERNELS`, one per
    GEMM matrix (:attr:`StepShapes.token_gemms`), one more per linear GEMM with ``fp8_linear`` (SGLang's
    block-wise fp8 linear quantizes its input per token group first:
    ``srt/layers/quantization/fp8_utils.py`` ``per_token_group_quant_fp8``; the router stays 16-bit), one
    gated activation per gate+up GEMM, :data:`MLA_KERNELS` with ``mla``, the routed experts' kernels of
    ``moe_runner`` (:data:`MOE_KERNELS_BY_RUNNER`; Triton's where not listed) and, with ``tp > 1``, the
    layer's two all-reduces. A count read from SGLang's code, not measured: ``serving.yaml``'s
    ``eager_launch_s`` (host seconds per kernel) is fitted with it."""
    layers = shapes.layers
    kernels = float(LAYER_KERNELS + (MLA_KERNELS if mla else 0))
    for gemm in shapes.token_gemms:
        per_layer = gemm.count / layers
        kernels += per_layer * (2 if fp8_linear and gemm.name != "router" else 1)
        if gemm.name in ("gate_up", "shared_gate_up"):
            kernels += per_layer  # SiluAndMul
    if shapes.experts is not None:
        runner = MOE_KERNELS_BY_RUNNER.get(moe_runner or "triton", MOE_KERNELS_BY_RUNNER["triton"])
        kernels += shapes.experts.count / layers * runner
    if shapes.tp > 1:
        kernels += 2
    return kernels


def rank_weight_bytes(model: Model, weight_bytes_per_param: float | None = None, tp: int = 1) -> float:
    """Bytes of weights one of ``tp`` ranks holds: its GEMMs, its slice of every expert, its lm_head rows
    and (untied) its embedding rows (:func:`step_shapes`). Equals
    :func:`pdmux_cli.catalog.model.weight_bytes_total` for ``tp=1`` (tested). Raises :class:`InputError` as
    :func:`step_shapes`."""
    shapes = step_shapes(model, weight_bytes_per_param, tp)
    total = sum(g.count * g.weight_bytes for g in shapes.token_gemms) + shapes.lm_head.weight_bytes
    ex = shapes.experts
    if ex is not None:
        total += ex.count * ex.num_experts * ex.expert_params * ex.bytes_per_param
    if not model.tie_word_embeddings:
        total += shapes.embedding_rows * model.hidden_size * mdl.bytes_per_param(model, "embedding",
                                                                                 weight_bytes_per_param)
    return float(total)


def rank_kv_bytes_per_token(model: Model, kv_bytes_per_element: float = 2.0, tp: int = 1) -> float:
    """KV-cache bytes one of ``tp`` ranks stores per token over all layers, uncapped by windows (SGLang's
    pool allocates a full cell): :func:`pdmux_cli.catalog.model.kv_bytes_per_token` for ``tp=1``; GQA with
    ``tp`` up to the KV heads divides it by ``tp``, beyond them each rank keeps one KV head; MLA's latent is
    whole on every rank."""
    mdl.kv_bytes_per_token(model, kv_bytes_per_element)  # validates kv_bytes_per_element
    shapes_kv = step_shapes(model, None, tp).kv_elements_per_token_per_layer
    return float(model.num_layers * shapes_kv * kv_bytes_per_element)
