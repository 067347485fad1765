"""Speculative decoding in the cost model: one decode round of EAGLE, EAGLE3, NEXTN/MTP or STANDALONE.

SGLang 0.5.23 runs speculation with its v2 workers (``srt/speculative/eagle_worker_v2.py``,
``EAGLEWorkerV2.forward_batch_generation``): a decode round of ``n`` requests is

1. the draft's tree: ``num_steps - 1`` draft forwards of ``n x topk`` rows (``draft_forward``: the first
   step's candidates come from the previous round's draft extend; the loop breaks before a forward on its
   last step), each row attending to its request's cached tokens in the draft's KV cache;
2. one target verify forward over ``num_draft_tokens`` tokens a request (``verify``,
   ``ForwardMode.TARGET_VERIFY``): the GEMMs and the lm_head over ``n x num_draft_tokens`` rows, attention
   over each request's KV and the tree (:meth:`~pdmux_cli.costmodel.roofline.RooflineModel.verify_s`);
3. one draft extend over the same tokens (``_draft_extend_for_decode``), which gives the next round's
   first draft candidates.

A round gives each request its accepted tokens plus the target's bonus token: on average the acceptance
length (SGLang's decode log line ``accept len``), which pdmux takes as an input
(:attr:`~pdmux_cli.sglang.speculative_args.Speculation.accept_length`): the acceptance rate depends on the
draft, the data and the sampling, which no cost model knows. The round streams as one chunk, so
bench_serving's ITL (per chunk) is the
round's time and its TPOT (per token) the round's time over the acceptance length.

Pure: no I/O, no printing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    from ..sglang.speculative_args import Speculation

class SpeculativeStepModel:
    """A :class:`~pdmux_cli.costmodel.StepModel` whose decode step is a speculative round.

    ``base``: the target's step model (it must have ``verify_s``: the roofline model); ``draft``: the
    draft's step model on the same GPU and TP; ``speculation``: the settings
    (:class:`~pdmux_cli.sglang.speculative_args.Speculation`). :meth:`decode_s` is a whole round (draft
    tree, verify, draft extend: the module's text), so a scheduler's decode step is a
    round and every request in it gets its acceptance length in tokens on average. A prefill
    (:meth:`prefill_s`) is the target's and the draft's over the same tokens. Everything else (CPU terms,
    launches, partitions) is the base model's.
    """

    def __init__(self, base: Any, draft: Any, speculation: Speculation) -> None:
        self.base = base
        self.draft = draft
        self.speculation = speculation

    def round_request_s(self, n: int, worker_v1: bool = False, per_verified_token: bool = False) -> float:
        """Seconds a round spends on ``n`` requests beyond the kernels: the target's per-request term
        (:meth:`~pdmux_cli.costmodel.roofline.RooflineModel.request_s`) once a round, as SGLang's V2 worker
        extends each request's output once (0.5.23 ``batch_result_processor.py``
        ``process_batch_result_decode``); ``worker_v1`` (SGLang's v1 worker:
        :meth:`~pdmux_cli.sglang.release_defaults.ReleaseDefaults.speculation_worker_v1`, releases up to
        0.5.12 without the overlap scheduler) once per accepted token, the acceptance length times: its
        verify appends and checks each accepted token in Python as a plain step does its one (0.5.6
        ``eagle_info.py`` ``EagleVerifyInput.verify``). A prefill's requests pay :meth:`request_s` as
        without speculation.

        ``per_verified_token``: the other reading of the term, once per token the verify forward carries
        (``num_draft_tokens`` a request), whichever the worker. The term was fitted to plain decode steps,
        where a request brings one token to the forward and one to its output, so the runs cannot tell
        work per request from work per token; what the data say of it is GPU-side time growing with the
        batch (``docs/accuracy.md``: the custom all-reduce's buffer, which grows with the tokens, is part
        of it). This reading is the round's upper bound, the default its lower one: the speculative
        gain's range (``estimate``'s ``speedup_range``; the accuracy block counts the public points inside
        it)."""
        once = self.base.request_s(n)
        if per_verified_token:
            return once * max(self.speculation.num_draft_tokens, self.speculation.accept_length)
        return once * self.speculation.accept_length if worker_v1 else once

    def __getattr__(self, name: str) -> Any:
        # everything but a decode step is the target's (self.base is set first in __init__)
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def __getstate__(self) -> dict:
        return self.__dict__

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def round_parts(self, sms: int, n: int, sum_context: float, sum_window: float = 0.0, corun_sms: int = 0,
                    cuda_graph: bool = True) -> tuple[float, float, float]:
        """``(draft tree, verify, draft extend)`` GPU seconds of one round of ``n`` requests whose contexts
        sum to ``sum_context`` tokens, on ``sms`` SMs (next to a prefill on ``corun_sms``)."""
        if n <= 0:
            return 0.0, 0.0, 0.0
        spec = self.speculation
        topk = spec.eagle_topk
        tree = (spec.num_steps - 1) * self.draft.decode_s(sms, n * topk, sum_context * topk, 0.0, corun_sms,
                                                          cuda_graph)
        verify = self.base.verify_s(sms, n, spec.num_draft_tokens, sum_context, sum_window, corun_sms,
                                    cuda_graph)
        extend = self.draft.verify_s(sms, n, spec.num_draft_tokens, sum_context, 0.0, corun_sms, cuda_graph)
        return tree, verify, extend

    def decode_s(self, sms: int, n: int, sum_context: float, sum_window: float = 0.0, corun_sms: int = 0,
                 cuda_graph: bool = True) -> float:
        """GPU seconds of one speculative round (:meth:`round_parts` summed); the StepModel contract's
        decode step."""
        return sum(self.round_parts(sms, n, sum_context, sum_window, corun_sms, cuda_graph))

    def prefill_s(self, sms: int, seqs: Sequence[tuple[int, int]], corun_sms: int = 0) -> float:
        """GPU seconds to prefill ``seqs`` (``(new, cached)`` tokens each) on ``sms`` SMs: the target's
        prefill and then the draft's extend over the same tokens, which fills the draft's KV cache and
        gives the first draft candidates (SGLang 0.5.23 ``eagle_worker_v2.py``
        ``EAGLEWorkerV2._forward_prefill_batch`` -> ``_draft_extend_for_prefill``: the draft forward over
        every extend token, the lm_head on each request's last). The draft's kernel launches are left out
        (one layer's against the target's)."""
        return self.base.prefill_s(sms, seqs, corun_sms) + self.draft.prefill_s(sms, seqs, corun_sms)

    def mixed_s(self, seqs: Sequence[tuple[int, int]], n: int, sum_context: float,
                sum_window: float = 0.0) -> float:
        """A batch of prefill chunks beside ``n`` decoding requests: the chunks' prefill (:meth:`prefill_s`)
        and then the requests' round (SGLang runs an extend batch and the decode round apart under
        speculation)."""
        prefill = self.prefill_s(self.base.total_sms, list(seqs)) if seqs else 0.0
        return prefill + self.decode_s(self.base.total_sms, n, sum_context, sum_window)


def draft_cell_factor(speculation: Speculation | None, target_layers: int) -> float:
    """How much bigger a token's KV cell is with the draft's layers in it (1 without speculation): the draft's
    KV layers share each token's cell (SGLang 0.5.23 ``model_executor/pool_configurator.py``: cell += cell x
    draft layers / target layers)."""
    if speculation is None:
        return 1.0
    return 1 + speculation.draft.num_layers / target_layers


def draft_weight_bytes(speculation: Speculation, weight_bytes_per_param: float | None = None,
                       tp: int = 1) -> float:
    """Bytes of the draft's weights one of ``tp`` ranks holds beside the target's: SGLang loads them
    before it sizes the KV pool (0.5.23 ``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``:
    "Loaded weights (target + draft)"), so they come out of the pool. Its decoder layers always; its
    lm_head only where it has its own (an EAGLE3 draft with a ``draft_vocab_size``, the hot tokens:
    ``eagle_worker_v2.py`` ``init_lm_head``) and its embedding only for STANDALONE (a whole model): EAGLE and
    NEXTN/MTP drafts share the target's (:func:`~pdmux_cli.sglang.speculative_args.default_draft`). And
    the EAGLE fusion layer (``fc``, :func:`eagle_fc_params`), which every rank holds whole (a plain
    ``torch.nn.Linear``, not split by TP). Raises :class:`InputError` as
    :func:`~pdmux_cli.costmodel.operators.rank_weight_bytes`."""
    from ..catalog import model as mdl
    from .operators import rank_weight_bytes, step_shapes

    draft = speculation.draft
    total = rank_weight_bytes(draft, weight_bytes_per_param, tp)
    if speculation.algorithm == "STANDALONE":
        return total
    total += eagle_fc_params(speculation) * mdl.bytes_per_param(draft, "linear", weight_bytes_per_param)
    shapes = step_shapes(draft, weight_bytes_per_param, tp)
    own_head = speculation.algorithm == "EAGLE3" and 0 < draft.draft_vocab_size == draft.vocab_size
    if not own_head:
        total -= shapes.lm_head.weight_bytes
    if not draft.tie_word_embeddings:  # the embedding is the target's
        total -= shapes.embedding_rows * draft.hidden_size * mdl.bytes_per_param(draft, "embedding",
                                                                                 weight_bytes_per_param)
    return max(0.0, total)


def eagle_fc_params(speculation: Speculation) -> int:
    """Parameters of a draft's fusion layer over the target's hidden states, 0 for STANDALONE: EAGLE's
    ``fc``, ``2 h x h`` and its bias (SGLang 0.5.23 ``srt/models/llama_eagle.py`` ``LlamaModel.__init__``:
    ``torch.nn.Linear(hidden_size * 2, hidden_size)``, over the token's embedding and the target's hidden
    state), NEXTN/MTP's ``eh_proj``, ``2 h x h`` without bias (``deepseek_nextn.py``,
    ``glm4_moe_nextn.py``: ``nn.Linear(2 * hidden_size, hidden_size, bias=False)``), EAGLE3's ``fc``,
    ``3 h x h`` without bias (``llama_eagle3.py`` ``LlamaModel.__init__``: ``hidden_size_in *
    num_aux_hidden_states``, three auxiliary layers by default; the draft's hidden size is the target's,
    :func:`~pdmux_cli.sglang.speculative_args.check_draft`). Its time is left out of the round: one ``h x
    2h`` GEMM in an EAGLE or MTP draft forward (67 MB of bf16 weights at ``h`` 4096, about 0.02 ms at 3.35
    TB/s, beside the draft's 1.2 GB lm_head), and in EAGLE3 only where the draft reads the target's hidden
    states (the extend)."""
    h = speculation.draft.hidden_size
    if speculation.algorithm == "EAGLE":
        return 2 * h * h + h
    if speculation.algorithm == "NEXTN":
        return 2 * h * h
    if speculation.algorithm == "EAGLE3":
        return 3 * h * h
    return 0
