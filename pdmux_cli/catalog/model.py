"""The model architecture read from a Hugging Face ``config.json``, and what the cost model needs from it.

Pure and stdlib-only (``json``, ``difflib``): this module is on the CLI's start-up path, so no numpy or
torch. The only I/O is :func:`load_model` / :func:`list_models` reading the profile directory or a
user's ``config.json``; every other function is a pure function of a :class:`Model`.

Sources: the field values and the config-key variants are those of
``shared/reference/model-specs.md`` (real ``config.json`` copies from ai-dynamo/aiconfigurator and the
Hugging Face pages it cites); the cost formulas are those of the chapter's "Is it worth it: an estimate"
section (``pd-multiplexing-chapter.txt``), which for Qwen3-8B reads::

    LINEAR = 36 * (2*4096*4096 + 2*4096*1024 + 3*4096*12288) + 4096*151936   # linear params + lm_head
    KV_PER_TOKEN = 36 * 2 * 1024 * 2                                          # bytes
    attn = 2 * 2 * 36 * 4096 * (tokens * start + tokens * tokens / 2)        # FLOP

and :func:`decode_linear_params`, :func:`kv_bytes_per_token` and :func:`attention_flops` reproduce those
exactly for Qwen3-8B.

Counting conventions (the same in every function below):

* A *linear* parameter is a weight of a matrix multiply: attention projections (q, k, v, o; for MLA
  q_a, q_b, kv_a, kv_b, o), gated MLPs (3 matrices: gate, up, down), routed and shared experts, the
  MoE router (``hidden x num_experts``) and the lm_head (``vocab x hidden``). The router is included
  (it is read for every token; it is tiny: < 0.03 % of any profile here). Norm weights, biases
  (Qwen2's QKV bias, gpt-oss's attention and expert biases), attention sinks, Qwen2-MoE's
  ``shared_expert_gate`` and the vision tower of multimodal configs are ignored.
* The input embedding is not a linear layer (one row is gathered per token): it is counted in the
  totals (:func:`num_params_total`, :func:`weight_bytes_total`) but not in FLOPs or per-step reads.
  With tied embeddings the lm_head *is* the embedding matrix: counted once in the totals, but read by
  the logits matmul every step.
* DeepSeek-V3's multi-token-prediction layer (``num_nextn_predict_layers: 1``, ~14B parameters) is
  not part of the model here: it is used only for speculative decoding, which pdmux does not model.
* Attention FLOPs count the two attention matmuls (``Q K^T`` and ``P V``) at 2 FLOP per
  multiply-add; softmax and the quadratic term's diagonal are ignored, as in the chapter.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..util import input_files
from ..util.errors import Finding, InputError, printable, short_repr
from ..util.input_files import read_input_text
from .profile_files import model_profiles_dir

#: Weight storage formats pdmux models (``Model.weight_dtype``).
WEIGHT_DTYPES = ("bf16", "fp8", "mxfp4")

#: KV-cache dtypes SGLang's ``--kv-cache-dtype auto`` resolves a model to (``Model.kv_dtype``): the model's
#: 16-bit dtype, or fp8_e4m3 when the checkpoint's quantization_config says ``kv_cache_quant_algo: FP8``.
MODEL_KV_DTYPES = ("bf16", "fp16", "fp8_e4m3")

#: Bytes per parameter of an MXFP4 weight: 4-bit values plus one 8-bit scale per 32 values = 4.25 bits.
MXFP4_BYTES_PER_PARAM = 4.25 / 8

#: ``Gemma3TextConfig`` defaults (huggingface/transformers ``configuration_gemma3.py``): Gemma-3
#: ``config.json`` files omit these keys (model-specs.md, "Checks and disagreements").
#: The model every command and API function plans for when none is named (the PD-multiplexing chapter's).
DEFAULT_MODEL = "qwen3-8b"

GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131072,
    "rope_theta": 1_000_000.0,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "tie_word_embeddings": True,
}

#: Largest size, count or length a model config may give (hidden size, layers, vocabulary, experts,
#: window...): real ones stay below 1 million; past this a number is a typo, and the products of
#: several such numbers stop being meaningful.
MAX_DIMENSION = 10_000_000

#: Largest config.json :func:`load_model` reads, bytes (real ones are a few kB).
MAX_CONFIG_BYTES = 10 * 1024**2

#: ``torch_dtype`` / ``dtype`` values a config.json may carry (lower case, ``torch.`` prefix dropped).
TORCH_DTYPES = frozenset({
    "auto", "bfloat16", "bf16", "float16", "fp16", "half", "float32", "fp32", "float",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float8", "fp8",
    "fp8_e4m3", "fp8_e5m2",
})

# Qwen2Config / Qwen3Config default for ``max_window_layers`` (layers from this index on use the window
# when ``use_sliding_window`` is true).
_QWEN_DEFAULT_MAX_WINDOW_LAYERS = 28


@dataclass(frozen=True)
class Model:
    """One model's architecture: the shapes the cost model needs (all sizes are element counts).

    ``intermediate_size`` is the FFN width of the *dense* layers (every layer of a dense model, the
    first ``num_dense_layers`` of DeepSeek-V3); it is 0 when no layer is dense (Mixtral, gpt-oss,
    Qwen3-MoE, whose configs carry an unused or per-expert ``intermediate_size``).
    ``head_dim`` is the per-head q/k width (for MLA: ``qk_nope_head_dim + qk_rope_head_dim``).
    MoE fields are 0 for a dense model; ``num_dense_layers`` counts the MoE model's dense-FFN layers.
    MLA fields are 0 unless the model uses DeepSeek's multi-head latent attention.
    ``num_sliding_layers`` layers attend to at most ``sliding_window`` past tokens.
    ``weight_dtype`` is how the checkpoint stores its weights: ``"bf16"`` (also float16/float32
    checkpoints, served at 16 bits), ``"fp8"`` or ``"mxfp4"`` (from ``quantization_config``).
    ``max_position_embeddings`` is the longest sequence (prompt + output, tokens) the model takes,
    SGLang's default context length; 0 when the config does not give one. ``architectures``: the
    config's ``architectures`` list (SGLang picks its model class by it: :mod:`pdmux_cli.sglang.revisions`).
    ``weight_block_size``: ``quantization_config.weight_block_size`` of an fp8 checkpoint (``(128, 128)``:
    block-scaled fp8, SGLang's w8a8 block GEMMs); ``()`` for per-tensor scales or 16-bit weights.
    ``kv_dtype``: what SGLang's ``--kv-cache-dtype auto`` stores the KV cache in (:data:`MODEL_KV_DTYPES`,
    :func:`pdmux_cli.sglang.kv_cache.resolve_kv_cache`). ``draft_vocab_size``: an EAGLE3 draft's reduced
    vocabulary (``draft_vocab_size`` of its config; 0 otherwise).

    Constructing one with impossible values raises :class:`InputError`.
    """

    name: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    # MoE (0 when dense)
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    num_dense_layers: int = 0
    # MLA (DeepSeek); 0 when not MLA
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # attention windows
    sliding_window: int = 0
    num_sliding_layers: int = 0
    weight_dtype: str = "bf16"
    # longest sequence (prompt + output tokens) the model takes; 0 when the config does not say
    max_position_embeddings: int = 0
    # the config's own max_position_embeddings where SGLang's --context-length replaced it
    # (with_context_length); 0 where it did not
    own_context_length: int = 0
    # config.json's ``architectures`` (the model classes SGLang resolves, pdmux_cli.sglang.revisions); () if
    # none
    architectures: tuple[str, ...] = ()
    # fp8 block scaling (quantization_config.weight_block_size) and the KV dtype of --kv-cache-dtype auto
    weight_block_size: tuple[int, ...] = ()
    kv_dtype: str = "bf16"
    # an EAGLE3 draft's reduced vocabulary (config.json ``draft_vocab_size``, the hot tokens its lm_head
    # scores); 0 for every other model
    draft_vocab_size: int = 0

    def __post_init__(self) -> None:
        who = f"model {self.name!r}"
        positive = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
                    "vocab_size")
        non_negative = ("intermediate_size", "num_experts", "experts_per_token", "moe_intermediate_size",
                        "num_shared_experts", "shared_expert_intermediate_size", "num_dense_layers",
                        "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                        "sliding_window", "num_sliding_layers", "max_position_embeddings")
        for fields, minimum, kind in ((positive, 1, "a positive"), (non_negative, 0, "a non-negative")):
            for field in fields:
                value = getattr(self, field)
                if not _is_int(value) or value < minimum:
                    raise InputError(f"{who}: {field} must be {kind} integer, got {short_repr(value)}")
                if value > MAX_DIMENSION:
                    raise InputError(
                        f"{who}: {field} {short_repr(value)} is past any real model (at most "
                        f"{MAX_DIMENSION:,})")
        if not isinstance(self.tie_word_embeddings, bool):
            raise InputError(f"{who}: tie_word_embeddings must be true or false")
        if self.weight_dtype not in WEIGHT_DTYPES:
            raise InputError(f"{who}: weight_dtype {self.weight_dtype!r} is not one of "
                             f"{', '.join(WEIGHT_DTYPES)}")
        if self.kv_dtype not in MODEL_KV_DTYPES:
            raise InputError(f"{who}: kv_dtype {self.kv_dtype!r} is not one of {', '.join(MODEL_KV_DTYPES)}")
        if not isinstance(self.weight_block_size, tuple) or not all(
                _is_int(b) and 0 < b <= MAX_DIMENSION for b in self.weight_block_size):
            raise InputError(f"{who}: weight_block_size must be positive integers, got "
                             f"{self.weight_block_size!r}")
        if self.num_experts:
            if not 0 < self.experts_per_token <= self.num_experts:
                raise InputError(f"{who}: experts_per_token must be in 1..{self.num_experts}, "
                                 f"got {self.experts_per_token}")
            if self.moe_intermediate_size <= 0:
                raise InputError(f"{who}: a MoE model needs moe_intermediate_size > 0")
            if self.num_dense_layers > self.num_layers:
                raise InputError(f"{who}: num_dense_layers {self.num_dense_layers} > num_layers "
                                 f"{self.num_layers}")
            if self.num_shared_experts and self.shared_expert_intermediate_size <= 0:
                raise InputError(f"{who}: shared experts need shared_expert_intermediate_size > 0")
        elif self.experts_per_token or self.num_shared_experts or self.num_dense_layers:
            raise InputError(f"{who}: MoE fields are set but num_experts is 0")
        if dense_ffn_layers(self) and self.intermediate_size <= 0:
            raise InputError(f"{who}: dense FFN layers need intermediate_size > 0")
        if not self.kv_lora_rank and (self.num_kv_heads > self.num_attention_heads
                                      or self.num_attention_heads % self.num_kv_heads):
            raise InputError(f"{who}: num_kv_heads {self.num_kv_heads} must divide num_attention_heads "
                             f"{self.num_attention_heads} (grouped-query attention)")
        if self.kv_lora_rank and not (self.qk_nope_head_dim > 0 and self.qk_rope_head_dim > 0
                                      and self.v_head_dim > 0):
            raise InputError(f"{who}: MLA needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim > 0")
        if self.num_sliding_layers > self.num_layers:
            raise InputError(f"{who}: num_sliding_layers {self.num_sliding_layers} > num_layers "
                             f"{self.num_layers}")
        if self.num_sliding_layers and self.sliding_window <= 0:
            raise InputError(f"{who}: sliding-window layers need sliding_window > 0")

    @property
    def is_moe(self) -> bool:
        """True when some layers route tokens to experts."""
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """True for DeepSeek-style multi-head latent attention (a compressed KV cache)."""
        return self.kv_lora_rank > 0


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --------------------------------------------------------------------------------------------------
# Layer counts and per-layer parameter counts (element counts, ints)
# --------------------------------------------------------------------------------------------------


def moe_layers(model: Model) -> int:
    """Number of layers whose FFN is a routed-expert MoE block (0 for a dense model)."""
    return model.num_layers - model.num_dense_layers if model.is_moe else 0


def dense_ffn_layers(model: Model) -> int:
    """Number of layers with a dense gated MLP of width ``intermediate_size``."""
    return model.num_dense_layers if model.is_moe else model.num_layers


def full_attention_layers(model: Model) -> int:
    """Number of layers attending to the whole context (no sliding window)."""
    return model.num_layers - model.num_sliding_layers


def qk_head_dim(model: Model) -> int:
    """Per-head width of q and k (elements): ``head_dim``; MLA: ``qk_nope_head_dim + qk_rope_head_dim``."""
    return model.qk_nope_head_dim + model.qk_rope_head_dim if model.is_mla else model.head_dim


def v_head_dim(model: Model) -> int:
    """Per-head width of v (elements): ``head_dim``; MLA: ``v_head_dim``."""
    return model.v_head_dim if model.is_mla else model.head_dim


def attention_params_per_layer(model: Model) -> int:
    """Parameters of one layer's attention projections (no biases, no norms).

    GQA/MHA: q ``hidden x heads*head_dim``, k and v ``hidden x kv_heads*head_dim`` each, o
    ``heads*head_dim x hidden``. MLA (DeepSeek): q_a ``hidden x q_lora_rank`` + q_b
    ``q_lora_rank x heads*(nope+rope)`` (or q ``hidden x heads*(nope+rope)`` when ``q_lora_rank`` is 0),
    kv_a ``hidden x (kv_lora_rank+rope)``, kv_b ``kv_lora_rank x heads*(nope+v)``, o ``heads*v x hidden``.
    """
    h, heads = model.hidden_size, model.num_attention_heads
    if model.is_mla:
        qk = model.qk_nope_head_dim + model.qk_rope_head_dim
        if model.q_lora_rank:
            q = h * model.q_lora_rank + model.q_lora_rank * heads * qk
        else:
            q = h * heads * qk
        kv_a = h * (model.kv_lora_rank + model.qk_rope_head_dim)
        kv_b = model.kv_lora_rank * heads * (model.qk_nope_head_dim + model.v_head_dim)
        o = heads * model.v_head_dim * h
        return q + kv_a + kv_b + o
    q_width = heads * model.head_dim
    kv_width = model.num_kv_heads * model.head_dim
    return 2 * h * q_width + 2 * h * kv_width


def dense_mlp_params_per_layer(model: Model) -> int:
    """Parameters of one dense gated MLP: ``3 x hidden x intermediate_size`` (0 if no dense layer)."""
    return 3 * model.hidden_size * model.intermediate_size


def expert_params(model: Model) -> int:
    """Parameters of one routed expert (a gated MLP): ``3 x hidden x moe_intermediate_size``."""
    return 3 * model.hidden_size * model.moe_intermediate_size


def shared_expert_params_per_layer(model: Model) -> int:
    """Parameters of all shared experts of one MoE layer:
    ``num_shared_experts x 3 x hidden x shared_expert_intermediate_size``."""
    return model.num_shared_experts * 3 * model.hidden_size * model.shared_expert_intermediate_size


def router_params_per_layer(model: Model) -> int:
    """Parameters of one MoE layer's router (gate): ``hidden x num_experts`` (0 for dense)."""
    return model.hidden_size * model.num_experts


def embedding_params(model: Model) -> int:
    """Parameters of the input embedding: ``vocab x hidden``."""
    return model.vocab_size * model.hidden_size


def lm_head_params(model: Model) -> int:
    """Parameters the logits matmul reads: ``vocab x hidden`` (the embedding itself when tied)."""
    return model.vocab_size * model.hidden_size


def non_expert_linear_params(model: Model) -> int:
    """Linear parameters read for every token regardless of routing: all layers' attention, dense MLPs,
    shared experts and routers, plus the lm_head (not the embedding). Equals :func:`decode_linear_params`
    for a dense model."""
    per_moe_layer = shared_expert_params_per_layer(model) + router_params_per_layer(model)
    return (model.num_layers * attention_params_per_layer(model)
            + dense_ffn_layers(model) * dense_mlp_params_per_layer(model)
            + moe_layers(model) * per_moe_layer
            + lm_head_params(model))


# --------------------------------------------------------------------------------------------------
# Parameters and FLOPs per token
# --------------------------------------------------------------------------------------------------


def decode_linear_params(model: Model) -> float:
    """Parameters the linear layers apply to one token (the chapter's ``LINEAR``), a count.

    All layers' attention projections and dense MLPs, for MoE the ``experts_per_token`` routed experts,
    the shared experts and the router of every MoE layer, plus the lm_head; not the embedding.
    For Qwen3-8B: ``36 * (2*4096*4096 + 2*4096*1024 + 3*4096*12288) + 4096*151936`` exactly.
    """
    routed = moe_layers(model) * model.experts_per_token * expert_params(model)
    return float(non_expert_linear_params(model) + routed)


def flops_per_token_linear(model: Model) -> float:
    """FLOP of the linear layers per token: ``2 x`` :func:`decode_linear_params` (a multiply-add is 2)."""
    return 2.0 * decode_linear_params(model)


def num_params_total(model: Model) -> float:
    """All parameters (a count): embedding, lm_head if untied, every layer's attention and FFN with ALL
    experts, shared experts and routers. Norms and biases are ignored; DeepSeek's MTP layer is not
    included (module docstring)."""
    lm_head = 0 if model.tie_word_embeddings else lm_head_params(model)
    moe = moe_layers(model) * (model.num_experts * expert_params(model)
                               + shared_expert_params_per_layer(model) + router_params_per_layer(model))
    return float(embedding_params(model) + lm_head
                 + model.num_layers * attention_params_per_layer(model)
                 + dense_ffn_layers(model) * dense_mlp_params_per_layer(model)
                 + moe)


def num_params_active(model: Model) -> float:
    """Parameters active for one token (a count, the "A3B" of Qwen3-30B-A3B): :func:`num_params_total`
    less the experts a token is not routed to (embedding included, as model cards count it)."""
    inactive = moe_layers(model) * (model.num_experts - model.experts_per_token) * expert_params(model)
    return num_params_total(model) - inactive


# --------------------------------------------------------------------------------------------------
# Weight bytes
# --------------------------------------------------------------------------------------------------


def _check_bytes_per(value: float | None, what: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value,
                                                 (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{what} must be a positive number, got {value!r}")


def bytes_per_param(model: Model, kind: str, override: float | None = None) -> float:
    """Bytes per parameter for one kind of weight: ``"expert"`` (routed experts), ``"linear"``
    (attention, dense MLP, shared experts), ``"router"``, ``"embedding"``, ``"lm_head"``.
    ``override`` (bytes) replaces the model's own storage format for every kind."""
    if override is not None:
        return float(override)
    if model.weight_dtype == "mxfp4":  # gpt-oss: only the routed experts are MXFP4
        return MXFP4_BYTES_PER_PARAM if kind == "expert" else 2.0
    if model.weight_dtype == "fp8":  # DeepSeek-V3: block-FP8 linear layers; embedding, head, gate in BF16
        return 1.0 if kind in ("expert", "linear") else 2.0
    return 2.0


def _non_expert_linear_bytes(model: Model, override: float | None) -> float:
    linear = (model.num_layers * attention_params_per_layer(model)
              + dense_ffn_layers(model) * dense_mlp_params_per_layer(model)
              + moe_layers(model) * shared_expert_params_per_layer(model))
    router = moe_layers(model) * router_params_per_layer(model)
    return (linear * bytes_per_param(model, "linear", override)
            + router * bytes_per_param(model, "router", override)
            + lm_head_params(model) * bytes_per_param(model, "lm_head", override))


def weight_bytes_total(model: Model, weight_bytes_per_param: float | None = None) -> float:
    """Bytes of all the weights in GPU memory (for the "does it fit" check).

    Every parameter of :func:`num_params_total` (embedding, lm_head if untied, ALL experts).
    ``weight_bytes_per_param`` (bytes) applies to every weight when given; by default it follows
    ``weight_dtype``: bf16 2 bytes everywhere; fp8 1 byte for the layers' linear weights and experts,
    2 for embedding, lm_head and router (DeepSeek-V3's FP8 checkpoint; the 128x128 block scales,
    +0.02 %, are ignored); mxfp4 4.25/8 bytes for routed experts, 2 for everything else (gpt-oss).
    Raises :class:`InputError` for a non-positive ``weight_bytes_per_param``.
    """
    _check_bytes_per(weight_bytes_per_param, "weight bytes per parameter")
    total = _non_expert_linear_bytes(model, weight_bytes_per_param)
    if not model.tie_word_embeddings:  # when tied, the embedding is the lm_head, already counted
        total += embedding_params(model) * bytes_per_param(model, "embedding", weight_bytes_per_param)
    total += (moe_layers(model) * model.num_experts * expert_params(model)
              * bytes_per_param(model, "expert", weight_bytes_per_param))
    return float(total)


def expected_experts_touched(model: Model, decode_bs: float) -> float:
    """Expected number of distinct routed experts one MoE layer runs for ``decode_bs`` tokens.

    Assumes uniform, independent routing (each token picks ``k`` distinct experts of ``E``
    uniformly): ``E * (1 - (1 - k/E) ** decode_bs)``. Real routers are skewed, so this is an upper
    estimate of the experts read for a given batch. 0 for a dense model or ``decode_bs == 0``.
    Raises :class:`InputError` for a negative or non-finite ``decode_bs``.
    """
    _check_tokens(decode_bs, "decode batch size")
    if not model.is_moe or decode_bs == 0:
        return 0.0
    e, k = model.num_experts, model.experts_per_token
    return e * (1.0 - (1.0 - k / e) ** decode_bs)


def decode_weight_bytes(model: Model, decode_bs: int, weight_bytes_per_param: float | None = None) -> float:
    """Bytes of weights one decode step of ``decode_bs`` requests reads from memory.

    All non-expert linear weights (attention, dense MLPs, shared experts, routers) and the lm_head,
    plus for each MoE layer the expected distinct experts touched (:func:`expected_experts_touched`,
    uniform routing) times one expert's bytes; not the embedding (one row per token). Bytes per
    parameter as in :func:`weight_bytes_total`. For Qwen3-8B in BF16 this is ``2 * LINEAR`` (chapter).
    ``decode_bs == 0`` (no step) reads nothing: 0.
    Raises :class:`InputError` for a negative ``decode_bs`` or non-positive ``weight_bytes_per_param``.
    """
    _check_tokens(decode_bs, "decode batch size")
    _check_bytes_per(weight_bytes_per_param, "weight bytes per parameter")
    if decode_bs == 0:
        return 0.0
    experts = (moe_layers(model) * expected_experts_touched(model, decode_bs) * expert_params(model)
               * bytes_per_param(model, "expert", weight_bytes_per_param))
    return float(_non_expert_linear_bytes(model, weight_bytes_per_param) + experts)


# --------------------------------------------------------------------------------------------------
# KV cache
# --------------------------------------------------------------------------------------------------


def _check_tokens(value: float, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value,
                                                 (int, float)) or not math.isfinite(value) or value < 0:
        raise InputError(f"{what} must be a non-negative number of tokens, got {value!r}")


def kv_elements_per_token_per_layer(model: Model) -> int:
    """Elements one token stores in one layer's KV cache: ``2 x kv_heads x head_dim`` (K and V);
    MLA: the latent ``kv_lora_rank + qk_rope_head_dim`` (what SGLang and vLLM cache)."""
    if model.is_mla:
        return model.kv_lora_rank + model.qk_rope_head_dim
    return 2 * model.num_kv_heads * model.head_dim


def kv_bytes_per_token(model: Model, kv_bytes_per_element: float = 2) -> float:
    """KV-cache bytes per token over all layers, uncapped by sliding windows (model-specs.md's
    "KV B/token" column): ``2 x layers x kv_heads x head_dim x bytes``; MLA:
    ``layers x (kv_lora_rank + qk_rope_head_dim) x bytes``. Qwen3-8B in BF16: 147456.
    Raises :class:`InputError` for a non-positive ``kv_bytes_per_element``.
    """
    _check_bytes_per(kv_bytes_per_element, "KV bytes per element")
    return float(model.num_layers * kv_elements_per_token_per_layer(model) * kv_bytes_per_element)


def kv_bytes(model: Model, context_tokens: int, kv_bytes_per_element: float = 2) -> float:
    """KV-cache bytes of one request holding ``context_tokens`` tokens: full-attention layers store every
    token, sliding-window layers at most ``sliding_window`` tokens (gpt-oss: 128 on half its layers).
    Raises :class:`InputError` for negative tokens or a non-positive ``kv_bytes_per_element``.
    """
    _check_tokens(context_tokens, "context tokens")
    _check_bytes_per(kv_bytes_per_element, "KV bytes per element")
    per_layer = kv_elements_per_token_per_layer(model) * kv_bytes_per_element
    tokens = (full_attention_layers(model) * context_tokens
              + model.num_sliding_layers * min(context_tokens, model.sliding_window))
    return float(per_layer * tokens)


# --------------------------------------------------------------------------------------------------
# Attention FLOPs
# --------------------------------------------------------------------------------------------------


def _attention_flop_per_key(model: Model) -> int:
    """FLOP per (query, key) pair in one layer: ``2 x heads x (qk_dim + v_dim)`` (Q K^T and P V)."""
    return 2 * model.num_attention_heads * (qk_head_dim(model) + v_head_dim(model))


def _window_pairs(new: float, cached: float, window: int) -> float:
    """(query, key) pairs of ``new`` queries after ``cached`` tokens when each query at position x sees
    ``min(x, window)`` keys: the integral of ``min(x, window)`` over ``[cached, cached + new]`` (the
    chapter's continuous ``new*cached + new**2/2`` with the window's cap; additive in ``new``)."""
    end = cached + new
    if cached >= window:
        return new * window
    if end <= window:
        return new * cached + new * new / 2
    below = window - cached  # queries still inside the ramp
    return (below * cached + below * below / 2) + (end - window) * window


def attention_flops(model: Model, new_tokens: int, cached_tokens: int = 0) -> float:
    """Causal-attention FLOP for ``new_tokens`` tokens computed after ``cached_tokens`` in the KV cache.

    Per full-attention layer ``2 x heads x (qk_dim + v_dim) x (new*cached + new*new/2)`` (the chapter's
    ``2*2*36*4096*(tokens*start + tokens*tokens/2)`` for Qwen3-8B, exactly); qk_dim = v_dim = head_dim,
    MLA: qk_dim = nope + rope, v_dim = v_head_dim (un-absorbed MLA, as prefill runs it). Sliding-window
    layers count at most ``sliding_window`` keys per query (closed form of :func:`_window_pairs`), so the
    result is additive: ``f(a, 0) + f(b, a) == f(a + b, 0)`` up to rounding.
    Raises :class:`InputError` for negative or non-finite token counts.
    """
    _check_tokens(new_tokens, "new tokens")
    _check_tokens(cached_tokens, "cached tokens")
    per_key = _attention_flop_per_key(model)
    flops = (full_attention_layers(model) * per_key) * (new_tokens * cached_tokens + new_tokens * new_tokens
                                                        / 2)
    if model.num_sliding_layers:
        flops += (model.num_sliding_layers * per_key) * _window_pairs(new_tokens, cached_tokens,
                                                                       model.sliding_window)
    return float(flops)


def decode_attention_flops(model: Model, context_tokens: int) -> float:
    """Attention FLOP to decode one token against ``context_tokens`` cached tokens:
    ``2 x heads x (qk_dim + v_dim) x context`` per full-attention layer, ``min(context, window)`` on
    sliding-window layers. (Un-absorbed MLA widths, as :func:`attention_flops`.)
    Raises :class:`InputError` for negative or non-finite ``context_tokens``.
    """
    _check_tokens(context_tokens, "context tokens")
    keys = (full_attention_layers(model) * context_tokens
            + model.num_sliding_layers * min(context_tokens, model.sliding_window))
    return float(_attention_flop_per_key(model) * keys)


# --------------------------------------------------------------------------------------------------
# Loading: profiles and config.json files
# --------------------------------------------------------------------------------------------------


def _profile_files() -> dict[str, Path]:
    """Lower-cased profile name -> file, for every ``profiles/models/*.json``."""
    try:
        directory = model_profiles_dir()
    except FileNotFoundError as exc:
        raise InputError(str(exc)) from None
    return {p.stem.lower(): p for p in sorted(directory.glob("*.json"))}


def list_models() -> list[str]:
    """Names of the built-in model profiles (file stems of ``profiles/models/*.json``), sorted
    case-insensitively."""
    return sorted((p.stem for p in _profile_files().values()), key=str.lower)


def load_model(name_or_path: str | os.PathLike[str]) -> Model:
    """The :class:`Model` of a built-in profile name or of any Hugging Face ``config.json``.

    ``name_or_path``: a profile name, case-insensitive (``"qwen3-8b"``; a Hugging Face id such as
    ``"Qwen/Qwen3-8B"`` resolves to its last component), a path to a ``config.json`` or to a directory
    holding one. Raises :class:`InputError` (one line) for an unknown name (listing the closest profile
    names), a missing ``*.json`` file, a directory without ``config.json``, a special file (device,
    pipe, socket), a file over :data:`MAX_CONFIG_BYTES`, an unreadable or non-UTF-8 file (those file
    checks: :mod:`pdmux_cli.util.input_files`), invalid JSON, a missing required key, a non-integer or
    non-positive size, or an unsupported ``quantization_config``.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise InputError("{flag.model} takes a model profile name or a config.json path, got {value}",
                         param="model", values={"value": short_repr(name_or_path)})
    text = os.fspath(name_or_path).strip()
    if not text:
        raise InputError(f"empty model name: give a profile name ({', '.join(list_models())}) "
                         "or a path to a config.json")
    path = input_files.expand_user(text)
    if input_files.is_dir(path):
        config_path = path / "config.json"
        if not input_files.exists(config_path):
            raise InputError(f"{path}: directory has no config.json")
        return _load_file(config_path, default_name=path.name)
    # a file, a special file, or a missing *.json (a name too long to be a file is a profile name)
    if input_files.exists(path) or text.lower().endswith(".json"):
        return _load_file(path, default_name=path.parent.name if path.stem == "config" else path.stem)

    profiles = _profile_files()
    for candidate in (text, text.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]):
        found = profiles.get(candidate.lower())
        if found is not None:
            return _load_file(found, default_name=found.stem, profile=True)

    names = {p.stem.lower(): p.stem for p in profiles.values()}
    key = text.rsplit("/", 1)[-1].lower()
    import difflib  # only on the error path: keeps start-up light
    close = [names[n] for n in difflib.get_close_matches(key, list(names), n=3, cutoff=0.5)]
    what = "no such file or model profile" if ("/" in text or os.sep in text) else "unknown model"
    if close:
        hint = "closest: " + ", ".join(close)
    else:
        hint = "available: " + ", ".join(sorted(names.values(), key=str.lower))
    raise InputError(f"{what} {short_repr(text)} ({hint}; or give a path to a config.json)")


def _load_file(path: Path, default_name: str, profile: bool = False) -> Model:
    raw = read_input_text(path, "model config", MAX_CONFIG_BYTES, hint="give a Hugging Face config.json")
    raw = raw.removeprefix("\ufeff")  # a UTF-8 byte-order mark, as some Windows editors write
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except ValueError:  # an integer past Python's 4300-digit limit
        raise InputError(f"{path}: a number in it is thousands of digits long: not a model config") from None
    except RecursionError:
        raise InputError(f"{path}: lists or objects nested too deeply to read: not a model config") from None
    if not isinstance(config, dict):
        raise InputError(f"{path}: expected a JSON object (a Hugging Face config.json)")
    name = default_name
    if not profile:
        hf_name = config.get("_name_or_path")
        if isinstance(hf_name, str) and hf_name.strip():
            name = printable(hf_name.strip().rstrip("/").rsplit("/", 1)[-1])
    return model_from_config(config, name=name, source=str(path))


class _Keys:
    """Typed access to one (possibly nested) config dict; errors name the source file and key."""

    def __init__(self, config: Mapping[str, Any], source: str, prefix: str = "") -> None:
        self.config, self.source, self.prefix = config, source, prefix

    def error(self, key: str, problem: str) -> InputError:
        return InputError(f"{self.source}: key '{self.prefix}{key}' {problem}")

    def has(self, key: str) -> bool:
        return self.config.get(key) is not None

    def get_int(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        value = self.config.get(key)
        if value is None:
            if default is None:
                raise InputError(f"{self.source}: missing required key '{self.prefix}{key}'")
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                isinstance(value, float) and not value.is_integer()):
            raise self.error(key, f"must be an integer, got {value!r}")
        value = int(value)
        if value < minimum:
            raise self.error(key, f"must be {'positive' if minimum == 1 else f'>= {minimum}'}, got {value}")
        return value

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.config.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.config.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(_is_int(v) and v >= 0 for v in value):
            raise self.error(key, f"must be a list of layer indices, got {value!r}")
        return value


def _attention_shapes(keys: _Keys, source: str, prefix: str, hidden: int,
                      heads: int) -> tuple[dict[str, int], int]:
    """``(MLA ranks, head_dim)`` of a config (:func:`model_from_config`): DeepSeek's MLA ranks (empty
    without ``kv_lora_rank``) and the attention head's width. Raises :class:`InputError`."""
    mla: dict[str, int] = {}
    if keys.has("kv_lora_rank"):
        mla = {
            "q_lora_rank": keys.get_int("q_lora_rank", default=0, minimum=0),
            "kv_lora_rank": keys.get_int("kv_lora_rank"),
            "qk_nope_head_dim": keys.get_int("qk_nope_head_dim"),
            "qk_rope_head_dim": keys.get_int("qk_rope_head_dim"),
            "v_head_dim": keys.get_int("v_head_dim"),
        }
        head_dim = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    elif keys.has("head_dim"):
        head_dim = keys.get_int("head_dim")
    else:
        if hidden % heads:
            raise InputError(f"{source}: missing key '{prefix}head_dim' and {prefix}hidden_size {hidden} "
                             f"is not a multiple of num_attention_heads {heads}")
        head_dim = hidden // heads
    return mla, head_dim


def _moe_shapes(keys: _Keys, layers: int) -> tuple[dict[str, int], int]:
    """``(MoE fields of Model, dense intermediate_size)`` of a config (:func:`model_from_config`'s
    variants; empty and the dense width without experts). Raises :class:`InputError`."""
    experts_key = next((k for k in ("num_local_experts", "n_routed_experts", "num_experts") if keys.has(k)),
                       None)
    num_experts = keys.get_int(experts_key, minimum=0) if experts_key else 0
    moe: dict[str, int] = {}
    intermediate = 0
    if num_experts:
        top_k_key = next((k for k in ("num_experts_per_tok", "experts_per_token") if keys.has(k)),
                         "num_experts_per_tok")
        top_k = keys.get_int(top_k_key)
        if top_k > num_experts:
            raise keys.error(top_k_key, f"({top_k}) exceeds the number of experts ({num_experts})")
        width_key = "moe_intermediate_size" if keys.has("moe_intermediate_size") else "intermediate_size"
        expert_width = keys.get_int(width_key)
        if keys.has("first_k_dense_replace") or experts_key == "n_routed_experts":  # DeepSeek
            first_dense = keys.get_int("first_k_dense_replace", default=0, minimum=0)
            if first_dense > layers:
                raise keys.error("first_k_dense_replace",
                                 f"({first_dense}) exceeds num_hidden_layers ({layers})")
            freq = keys.get_int("moe_layer_freq", default=1)
            sparse = [i >= first_dense and i % freq == 0 for i in range(layers)]
        elif keys.has("decoder_sparse_step") or keys.has("mlp_only_layers"):  # Qwen2/Qwen3-MoE
            step = keys.get_int("decoder_sparse_step", default=1)
            dense_only = set(keys.int_list("mlp_only_layers"))
            sparse = [i not in dense_only and (i + 1) % step == 0 for i in range(layers)]
        else:  # Mixtral, gpt-oss: every layer
            sparse = [True] * layers
        num_dense = sparse.count(False)
        if num_dense:
            intermediate = keys.get_int("intermediate_size")
        shared_count, shared_width = 0, 0
        if keys.has("n_shared_experts") and keys.get_int("n_shared_experts", minimum=0):
            shared_count, shared_width = keys.get_int("n_shared_experts"), expert_width
        elif keys.has("shared_expert_intermediate_size") and keys.get_int("shared_expert_intermediate_size",
                                                                        minimum=0):
            shared_count, shared_width = 1, keys.get_int("shared_expert_intermediate_size")
        moe = {
            "num_experts": num_experts,
            "experts_per_token": top_k,
            "moe_intermediate_size": expert_width,
            "num_shared_experts": shared_count,
            "shared_expert_intermediate_size": shared_width,
            "num_dense_layers": num_dense,
        }
    else:
        intermediate = keys.get_int("intermediate_size")
    return moe, intermediate


def model_from_config(config: Mapping[str, Any], name: str, source: str = "<config>") -> Model:
    """The :class:`Model` of an already-parsed Hugging Face ``config.json`` (pure).

    Handles the variants of model-specs.md: Llama/Mistral/Qwen2/Qwen3/Phi-3 (dense); Mixtral and gpt-oss
    (``num_local_experts``, expert width in ``intermediate_size``, ``num_experts_per_tok`` or
    ``experts_per_token``); Qwen2/Qwen3-MoE (``num_experts``, ``moe_intermediate_size``,
    ``decoder_sparse_step``, ``mlp_only_layers``, Qwen2-MoE's ``shared_expert_intermediate_size``);
    DeepSeek-V2/V3 (``n_routed_experts``, ``n_shared_experts``, ``first_k_dense_replace``,
    ``moe_layer_freq``, MLA ranks; the MTP layer is ignored); sliding windows from ``layer_types``,
    Gemma-2/3 patterns, Mistral-v0.1/Phi-3 (all layers) and Qwen (``use_sliding_window``,
    ``max_window_layers``); multimodal configs through ``text_config`` (vision towers ignored), with
    ``Gemma3TextConfig`` defaults for Gemma-3. ``num_key_value_heads`` defaults to the head count,
    ``head_dim`` to ``hidden_size / num_attention_heads``, ``tie_word_embeddings`` to true (the
    transformers default). ``source`` names the file in error messages.
    Raises :class:`InputError` (one line, naming ``source`` and the key) for missing or bad keys.
    """
    top = _Keys(config, source)
    cfg = config
    prefix = ""
    if isinstance(config.get("text_config"), Mapping):
        cfg, prefix = config["text_config"], "text_config."
    model_type = str(cfg.get("model_type") or config.get("model_type") or "").lower()
    if model_type.startswith("gemma3"):
        cfg = {**GEMMA3_TEXT_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None}}
    keys = _Keys(cfg, source, prefix)
    _refuse_hybrid(keys)

    hidden = keys.get_int("hidden_size")
    layers = keys.get_int("num_hidden_layers")
    heads = keys.get_int("num_attention_heads")
    vocab = keys.get_int("vocab_size")
    kv_heads = keys.get_int("num_key_value_heads", default=heads)
    if not keys.has("kv_lora_rank") and (kv_heads > heads or heads % kv_heads):
        raise keys.error("num_key_value_heads", f"({kv_heads}) must divide num_attention_heads ({heads}): "
                         "grouped-query attention shares each KV head among a whole number of query heads")
    tie = keys.get_bool("tie_word_embeddings", default=top.get_bool("tie_word_embeddings", default=True))

    mla, head_dim = _attention_shapes(keys, source, prefix, hidden, heads)
    moe, intermediate = _moe_shapes(keys, layers)

    window, num_sliding = _sliding_layers(keys, model_type, layers)
    max_positions = keys.get_int("max_position_embeddings", default=0, minimum=0)
    draft_vocab = keys.get_int("draft_vocab_size", default=0, minimum=0)
    _check_torch_dtype(top)
    if prefix:
        _check_torch_dtype(keys)
    weight_dtype = _weight_dtype(config, cfg, source)
    architectures = config.get("architectures")
    if architectures is None:
        architectures = []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise top.error("architectures", f"must be a list of class names, got {short_repr(architectures)}")
    block, kv_fp8 = _fp8_scaling(config, cfg, source) if weight_dtype == "fp8" else ((), False)
    kv_dtype = "fp8_e4m3" if kv_fp8 else _model_dtype(config, cfg, model_type)

    try:
        return Model(
            name=name, num_layers=layers, hidden_size=hidden, intermediate_size=intermediate,
            num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, vocab_size=vocab,
            tie_word_embeddings=tie, sliding_window=window, num_sliding_layers=num_sliding,
            weight_dtype=weight_dtype, max_position_embeddings=max_positions, weight_block_size=block,
            kv_dtype=kv_dtype, architectures=tuple(printable(a) for a in architectures),
            draft_vocab_size=draft_vocab, **moe, **mla,
        )
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None


#: Config keys that mark linear-attention / state-space layers (GDN, Mamba) mixed with attention, where a
#: config carries no ``layer_types``: Qwen3-Next ``full_attention_interval``, Nemotron-H
#: ``hybrid_override_pattern``, Jamba ``attn_layer_period``, Granite-4 / Falcon-H1 ``layers_block_type``,
#: Kimi-Linear ``linear_attn_config``; a pure Mamba config's ``state_size`` with ``conv_kernel``.
HYBRID_KEYS = ("full_attention_interval", "hybrid_override_pattern", "attn_layer_period", "layers_block_type",
               "linear_attn_config")
#: ``layer_types`` values pdmux models: full attention, and sliding-window attention (bounded KV).
ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention")


def _refuse_hybrid(keys: _Keys) -> None:
    """Refuse, naming the field, a config with linear-attention or state-space layers: their state is
    constant per request (no KV cache that grows) and their per-token cost is their own, which pdmux does
    not model yet; timing them as full attention would overstate KV memory and attention time."""
    for key in HYBRID_KEYS:
        if keys.has(key):
            raise keys.error(key,
                             "marks linear-attention or state-space (GDN/Mamba) layers, which pdmux does not "
                             "model yet (constant state per request, their own per-token cost); refused "
                             "rather than timed as full attention")
    if keys.has("state_size") and keys.has("conv_kernel"):
        raise keys.error("state_size", "is a Mamba state-space config, which pdmux does not model yet")


def _sliding_layers(keys: _Keys, model_type: str, layers: int) -> tuple[int, int]:
    """``(sliding_window, number of sliding-window layers)`` from the config, ``(0, 0)`` if none.
    ``layer_types`` naming anything but full or sliding attention (``linear_attention``, ``mamba``,
    ``chunked_attention``) is refused, naming the field."""
    layer_types = keys.config.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != layers or not all(
                isinstance(t, str) for t in layer_types):
            raise keys.error("layer_types", f"must be a list of {layers} strings (one per layer)")
        other = sorted({t for t in layer_types if t not in ATTENTION_LAYER_TYPES})
        if other:
            count = sum(t in other for t in layer_types)
            raise keys.error("layer_types",
                             f"names {count} {'/'.join(repr(printable(t)) for t in other)} layer(s): "
                             "pdmux models full and sliding-window attention only (linear-attention and "
                             "state-space layers keep a constant state per request at their own per-token "
                             "cost, not modelled yet); refused rather than timed as full attention")
        count = sum(t == "sliding_attention" for t in layer_types)
        return (keys.get_int("sliding_window"), count) if count else (0, 0)
    if model_type.startswith("gemma3"):
        pattern = keys.get_int("sliding_window_pattern",
                               default=keys.get_int("_sliding_window_pattern", default=6))
        count = sum((i + 1) % pattern != 0 for i in range(layers))
        return (keys.get_int("sliding_window"), count) if count else (0, 0)
    if not keys.has("sliding_window"):
        return 0, 0
    if model_type == "gemma2":  # even layers are local
        return keys.get_int("sliding_window"), (layers + 1) // 2
    if not keys.get_bool("use_sliding_window", default=True):  # Qwen: window key present but off
        return 0, 0
    window = keys.get_int("sliding_window")
    if model_type.startswith("qwen"):  # Qwen2/Qwen3: layers from max_window_layers on
        first = keys.get_int("max_window_layers", default=_QWEN_DEFAULT_MAX_WINDOW_LAYERS, minimum=0)
        count = max(0, layers - first)
        return (window, count) if count else (0, 0)
    return window, layers  # Mistral-v0.1, Phi-3: every layer


def _check_torch_dtype(keys: _Keys) -> None:
    """``torch_dtype`` / ``dtype``, when present, must name a dtype (:data:`TORCH_DTYPES`)."""
    for key in ("torch_dtype", "dtype"):
        value = keys.config.get(key)
        if value is None:
            continue
        name = value.strip().lower().removeprefix("torch.") if isinstance(value, str) else None
        if name not in TORCH_DTYPES:
            raise keys.error(key,
                             f"is {value!r}, not a dtype: use bfloat16, float16, float32, float8_e4m3fn or "
                             "auto")


def _weight_dtype(config: Mapping[str, Any], cfg: Mapping[str, Any], source: str) -> str:
    """``"fp8"`` / ``"mxfp4"`` from ``quantization_config.quant_method``, else ``"bf16"``."""
    qc = config.get("quantization_config", cfg.get("quantization_config"))
    if qc is None:
        return "bf16"
    if not isinstance(qc, Mapping):
        raise InputError(f"{source}: key 'quantization_config' must be an object")
    method = str(qc.get("quant_method", "")).lower()
    if method in ("fp8", "mxfp4"):
        return method
    raise InputError(f"{source}: quantization_config.quant_method {method or '(none)'!r} is not modelled "
                     f"(bf16, fp8 and mxfp4 are); remove quantization_config to treat it as bf16")


def _fp8_scaling(config: Mapping[str, Any], cfg: Mapping[str, Any], source: str) -> tuple[
    tuple[int, ...], bool]:
    """``(weight_block_size, KV cache in fp8)`` of an fp8 ``quantization_config``, as SGLang 0.5.23's
    ``Fp8Config.from_config`` reads them (``srt/layers/quantization/fp8.py``): ``weight_block_size``
    (``[128, 128]`` on DeepSeek-V3 and Qwen3-*-FP8; absent: per-tensor scales) and
    ``kv_cache_quant_algo`` (``"FP8"``: ``--kv-cache-dtype auto`` stores fp8_e4m3,
    ``srt/mem_cache/kv_cache_dtype.py`` ``configure_kv_cache_dtype``). Raises :class:`InputError` for a
    block size that is not a list of positive integers."""
    qc = config.get("quantization_config", cfg.get("quantization_config"))
    block = qc.get("weight_block_size")
    if block is not None and (not isinstance(block, list) or not block
                              or not all(_is_int(b) and 0 < b <= MAX_DIMENSION for b in block)):
        raise InputError(f"{source}: key 'quantization_config.weight_block_size' must be a list of positive "
                         f"integers such as [128, 128], got {short_repr(block)}")
    algo = qc.get("kv_cache_quant_algo")
    return tuple(block or ()), isinstance(algo, str) and algo.upper() == "FP8"


def _model_dtype(config: Mapping[str, Any], cfg: Mapping[str, Any], model_type: str) -> str:
    """The 16-bit dtype SGLang serves the model in with ``--dtype auto``, which its KV cache keeps with
    ``--kv-cache-dtype auto``: ``dtype`` / ``torch_dtype`` bfloat16 -> bf16, float16 -> fp16; float32 or
    none -> fp16 (bf16 for Gemma); SGLang 0.5.23 ``srt/configs/model_config.py`` ``_get_and_verify_dtype``
    (a dtype it does not map, such as float8, counts as float32 there)."""
    value = None
    for source in (cfg, config):
        value = source.get("dtype") or source.get("torch_dtype")
        if value is not None:
            break
    name = value.strip().lower().removeprefix("torch.") if isinstance(value, str) else ""
    if name in ("bfloat16", "bf16"):
        return "bf16"
    if name in ("float16", "fp16", "half"):
        return "fp16"
    return "bf16" if model_type.startswith("gemma") else "fp16"


def with_context_length(model: Any, context_length: int | None) -> tuple[Any, list[Any]]:
    """``model`` with SGLang's ``--context-length`` as its longest sequence (``max_position_embeddings``:
    pdmux drops requests past it, and SGLang derives its default ``--max-running-requests`` from it), and
    the finding that says so; ``None``: the model as it is. SGLang 0.5.23 (``srt/configs/model_config.py``
    ``_derive_context_length``) takes a length up to the model's derived one (``max_position_embeddings``,
    times a rope-scaling factor that ``original_max_position_embeddings`` makes 1: ``get_context_length``)
    and refuses a longer one unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``: pdmux takes it, with
    the finding saying so (its code ``server.context_length_over``)."""
    if context_length is None:
        return model, []
    own = model.max_position_embeddings
    over = bool(own) and context_length > own
    finding = Finding("server.context_length_over" if over else "server.context_length",
                      {"context_length": context_length, "model": model.name, "own": own}, "context_length")
    return replace(model, max_position_embeddings=context_length, own_context_length=own), [finding]
