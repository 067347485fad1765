"""How SGLang 0.5.23 shards a model over ``tp`` GPUs (``--tp-size``): what each rank holds and runs.

Pure; the rules (in our words) of SGLang 0.5.23's layers:

- attention (``srt/layers/linear.py`` ``QKVParallelLinear``): the query heads are split evenly
  (``heads / tp`` a rank, refused unless ``tp`` divides them); KV heads are split when there are at
  least ``tp`` of them, else each rank keeps one and every KV head is replicated on ``tp / kv_heads``
  ranks (refused unless one divides the other); the output projection is row-parallel (``RowParallelLinear``);
- MLA (``srt/models/deepseek_v2.py`` ``DeepseekV2AttentionMLA``): ``q_a`` and ``kv_a``
  (``fused_qkv_a_proj_with_mqa``, ``kv_a_proj_with_mqa``) are replicated, ``q_b``/``q``, ``kv_b`` split by
  heads, ``o`` row-parallel; the latent KV cache is whole on every rank;
- dense MLP: gate+up column-parallel (``MergedColumnParallelLinear``), down row-parallel: ``I / tp`` a rank;
- MoE, SGLang's default layout (``--ep-size 1``, so ``moe_tp_size = tp``): every rank holds a
  ``moe_intermediate / tp`` slice of every expert (``srt/layers/moe/fused_moe_triton/layer.py``
  ``FusedMoE``: ``intermediate_size_per_partition``, refused unless ``tp`` divides it); shared experts
  split like a dense MLP; the router is replicated. Expert parallelism (``--ep-size``) is not modelled;
- embedding and lm_head vocab-parallel (``srt/layers/vocab_parallel_embedding.py``
  ``VocabParallelEmbedding``, ``ParallelLMHead``): ``vocab / tp`` rows a rank (padding ignored);
- collectives per forward (``srt/distributed/communication_op.py``
  ``tensor_model_parallel_all_reduce``): one all-reduce of ``tokens x hidden`` 16-bit activations after
  the embedding, after each layer's attention and after each layer's MLP or MoE block (``2 x layers + 1``),
  and an all-gather of the logits (``srt/layers/logits_processor.py`` ``LogitsProcessor``,
  ``do_tensor_parallel_all_gather``).

Norms, biases and RoPE tables are replicated and not counted (as everywhere in
:mod:`pdmux_cli.catalog.model`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..util.errors import InputError
from ..catalog.model import Model, dense_ffn_layers, moe_layers

#: Most GPUs of a tensor-parallel group: one server (:data:`pdmux_cli.costmodel.collectives.MAX_TP`).
MAX_TP = 8


@dataclass(frozen=True)
class Sharding:
    """One rank's share of a model over ``tp`` GPUs.

    ``heads``: query heads a rank computes. ``kv_heads``: KV heads it stores (GQA; for MLA the
    model's own count, unused). ``kv_replicas``: ranks holding each KV head (1 when KV heads are split).
    ``attention_share``: ``heads / model heads``, the share of attention FLOPs a rank does.
    """

    tp: int
    heads: int
    kv_heads: int
    kv_replicas: int

    @property
    def attention_share(self) -> float:
        return 1.0 / self.tp


#: SGLang's server flag for the tensor-parallel degree (``srt/server_args.py``), named where a refusal is
#: SGLang's own.
SGLANG_TP_FLAG = "--tp-size"


def for_disagg_tp(exc: InputError) -> InputError:
    """``exc`` (a refusal of a TP value, about parameter ``tp``) about ``disagg_tp``, the TP of
    disaggregation's instances: the same rules, another parameter at fault (SGLang's ``--tp-size`` said as
    the instances' ``TP``)."""
    return exc.retargeted({"tp": "disagg_tp"}, sglang_tp="TP")


def check_tp_value(tp: object) -> int:
    """``tp`` as an int from 1 to :data:`MAX_TP`; :class:`InputError` otherwise."""
    if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= MAX_TP:
        raise InputError("{flag.tp} must be a number of GPUs from 1 to {max_tp} (one server: the all-reduce "
                         "measurements are 2 to 8 GPUs of one node), got {tp!r}", param="tp",
                         values={"max_tp": MAX_TP, "tp": tp})
    return tp


def shard(model: Model, tp: int) -> Sharding:
    """The :class:`Sharding` of ``model`` over ``tp`` GPUs, as SGLang 0.5.23 makes it (module docstring).

    Raises :class:`InputError` (one line, naming the dimension) where SGLang refuses the split: ``tp``
    not dividing the attention heads, KV heads and ``tp`` neither dividing the other, an FFN, expert or
    shared-expert width ``tp`` does not divide, or ``tp`` outside 1..:data:`MAX_TP`.
    """
    check_tp_value(tp)
    name = model.name
    if model.num_attention_heads % tp:
        raise InputError("{model} has {heads} attention heads, which {tp} GPUs cannot split evenly (SGLang's "
                         "QKVParallelLinear divides them by {sglang_tp}): use a {flag.tp} that divides them",
                         param="tp", values={"model": name, "heads": model.num_attention_heads, "tp": tp,
                                             "sglang_tp": SGLANG_TP_FLAG})
    kv, replicas = model.num_kv_heads, 1
    if not model.is_mla:
        if tp >= model.num_kv_heads:
            if tp % model.num_kv_heads:
                raise InputError(
                    "{model} has {kv_heads} KV heads: SGLang replicates them over {sglang_tp} only "
                    "when it is a multiple of them, and {tp} is not",
                    param="tp",
                    values={
                        "model": name,
                        "kv_heads": model.num_kv_heads,
                        "tp": tp,
                        "sglang_tp": SGLANG_TP_FLAG,
                    },
                )
            kv, replicas = 1, tp // model.num_kv_heads
        else:
            if model.num_kv_heads % tp:
                raise InputError(
                    "{model} has {kv_heads} KV heads, which {tp} GPUs cannot split evenly (SGLang's "
                    "QKVParallelLinear): use a {flag.tp} that divides them",
                    param="tp",
                    values={"model": name, "kv_heads": model.num_kv_heads, "tp": tp},
                )
            kv = model.num_kv_heads // tp
    widths = []
    if dense_ffn_layers(model):
        widths.append(("intermediate_size", model.intermediate_size, "MLP"))
    if moe_layers(model):
        widths.append(("moe_intermediate_size", model.moe_intermediate_size, "experts (SGLang's FusedMoE)"))
        if model.num_shared_experts:
            widths.append(("shared_expert_intermediate_size", model.shared_expert_intermediate_size,
                           "shared experts"))
    for field, width, what in widths:
        if width % tp:
            raise InputError(
                "{model}'s {what} are {width} wide ({field}), which {tp} GPUs cannot split evenly: "
                "use a {flag.tp} that divides it",
                param="tp",
                values={"model": name, "what": what, "width": width, "field": field, "tp": tp},
            )
    return Sharding(tp=tp, heads=model.num_attention_heads // tp, kv_heads=kv, kv_replicas=replicas)


def rank_vocab(model: Model, tp: int) -> int:
    """Vocabulary rows of the embedding and lm_head a rank holds: ``ceil(vocab / tp)`` (SGLang pads the
    vocabulary to a multiple of 64 x tp; the padding is ignored)."""
    return -(-model.vocab_size // tp)


def allreduces_per_forward(model: Model, tp: int) -> int:
    """All-reduces one forward pass (a step) runs: ``2 x layers + 1`` with ``tp > 1`` (embedding, and
    after each layer's attention and MLP/MoE), 0 on one GPU."""
    return 2 * model.num_layers + 1 if tp > 1 else 0


__all__ = ["MAX_TP", "Sharding", "allreduces_per_forward", "check_tp_value", "rank_vocab", "shard"]
