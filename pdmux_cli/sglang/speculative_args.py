"""SGLang's speculative decoding arguments: their defaults and start-up adjustments, per SGLang 0.5.23.

SGLang 0.5.23 ``srt/arg_groups/fields/spec.py`` declares ``--speculative-algorithm``,
``--speculative-num-steps``, ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens`` and
``--speculative-draft-model-path``, all ``None`` by default; ``srt/arg_groups/speculative_hook.py``
resolves them at start-up (``handle_speculative_decoding``, ``_handle_eagle_family``,
``_auto_choose_speculative_params``). :func:`resolve_speculation` applies the same rules and says which it
applied as findings; where SGLang would fail at start-up it raises :class:`InputError` naming the parameter.
The acceptance length is pdmux's own input: SGLang measures it while serving (its decode log line
``accept len``).

Pure: no I/O, no printing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..catalog.model import Model
from ..util.errors import Finding, InputError, short_repr

#: ``--speculative-algorithm`` choices pdmux models (SGLang 0.5.23 ``srt/speculative/spec_info.py``
#: ``SpeculativeAlgorithm``; NEXTN is an alias SGLang resolves to EAGLE,
#: ``arg_groups/speculative_hook.py`` ``_resolve_speculative_algorithm_alias``). "MTP" is accepted as
#: another name for NEXTN.
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")

#: Aliases to SGLang's algorithm names.
ALIASES = {"MTP": "NEXTN"}


@dataclass(frozen=True)
class Speculation:
    """A server's speculative decoding settings, as SGLang's flags name them.

    ``algorithm``: one of :data:`ALGORITHMS` as the user wrote it (``NEXTN`` kept: SGLang runs it as
    EAGLE). ``num_steps``: ``--speculative-num-steps`` (draft depth, >= 1). ``eagle_topk``:
    ``--speculative-eagle-topk`` (branches a draft step keeps, >= 1). ``num_draft_tokens``:
    ``--speculative-num-draft-tokens`` (tokens a request verifies per round, the tree's size, >= 2).
    ``accept_length``: the mean tokens a request gets per round, the target's bonus token included
    (SGLang logs it as ``accept len``), 1 to ``num_steps + 1``. ``draft``: the draft model's shapes (a
    :class:`~pdmux_cli.catalog.model.Model`; :func:`default_draft` when the user names none).
    ``draft_source``: where the draft's shapes come from, for output.

    Raises :class:`InputError` (naming the parameter) for a value outside those ranges or a combination
    SGLang refuses or cannot use (:func:`check_speculation`).
    """

    algorithm: str
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    accept_length: float
    draft: Model
    draft_source: str = "default"

    def __post_init__(self) -> None:
        check_speculation(self.algorithm, self.num_steps, self.eagle_topk, self.num_draft_tokens,
                          self.accept_length)

    @property
    def sglang_algorithm(self) -> str:
        """The algorithm SGLang runs: NEXTN is EAGLE (``_resolve_speculative_algorithm_alias``)."""
        return "EAGLE" if self.algorithm == "NEXTN" else self.algorithm

    @property
    def keeps_mixed_chunk(self) -> bool:
        """Whether SGLang keeps ``--enable-mixed-chunk`` beside this algorithm: EAGLE (NEXTN) and EAGLE3 do,
        their mixed steps giving the running requests a plain one-token decode; STANDALONE turns it off
        (0.5.23 ``arg_groups/speculative_hook.py`` ``_handle_eagle_family``,
        ``speculative/spec_info.py`` ``SpeculativeAlgorithm.supports_mixed_chunk``)."""
        return self.sglang_algorithm in ("EAGLE", "EAGLE3")

    def rounds(self, tokens: int) -> int:
        """Decode rounds a request needs for ``tokens`` more output tokens (ceil of tokens / acceptance
        length: the mean; SGLang's per-round count varies around it)."""
        if tokens <= 0:
            return 0
        return max(1, math.ceil(tokens / self.accept_length - 1e-9))

    def launch_args(self, draft_path: str | None = None) -> list[str]:
        """SGLang's server arguments for these settings (``--speculative-draft-model-path`` only where the
        user named a draft file, ``draft_path``)."""
        args = ["--speculative-algorithm", self.algorithm, "--speculative-num-steps", str(self.num_steps),
                "--speculative-eagle-topk", str(self.eagle_topk),
                "--speculative-num-draft-tokens", str(self.num_draft_tokens)]
        if draft_path:
            args += ["--speculative-draft-model-path", draft_path]
        return args


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: The least of each speculative count: a draft step, a branch, and a verify of a draft token and the bonus
#: one.
SPECULATIVE_LOWS = {"speculative_num_steps": 1, "speculative_eagle_topk": 1,
                    "speculative_num_draft_tokens": 2}
#: The most of each: pdmux's bound, not SGLang's (which takes any), far past every published setting (the
#: largest in profiles/measurements/speculative/: 8 steps, topk 10, 64 draft tokens), so that a typo cannot
#: ask for a round of 10^20 draft forwards.
SPECULATIVE_HIGHS = {"speculative_num_steps": 32, "speculative_eagle_topk": 64,
                     "speculative_num_draft_tokens": 1024}


def check_speculative_value(param: str, value: object) -> None:
    """:class:`InputError` naming ``param`` unless ``value`` is in the range the option takes alone: a count
    of :data:`SPECULATIVE_LOWS` an integer from its least to its :data:`SPECULATIVE_HIGHS`,
    ``speculative_accept_length`` a finite number
    >= 1 (its top, num-steps + 1, depends on the steps: :func:`check_speculation`). The one rule of each:
    the request's check (:mod:`pdmux_cli.workflows.fields`) and this module's."""
    if param == "speculative_accept_length":
        if not _number(value) or value < 1:
            raise InputError("{param_flag} must be a number >= 1 (mean tokens a request gets per verify "
                             "round, the bonus token included), got {value}", param=param,
                             values={"value": repr(value)})
        return
    low, high = SPECULATIVE_LOWS[param], SPECULATIVE_HIGHS[param]
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InputError("{param_flag} must be an integer >= {low}, got {value}", param=param,
                         values={"low": low, "value": repr(value)})
    if value > high:
        raise InputError("{param_flag} must be at most {high} (pdmux's bound, past every published setting), "
                         "got {value}", param=param, values={"high": high, "value": short_repr(value)})


def unknown_algorithm(value: object) -> InputError:
    """The refusal of an algorithm pdmux does not model, naming ``speculative_algorithm`` and the choices."""
    return InputError("{flag.speculative_algorithm} must be one of {known}, got {value}",
                      param="speculative_algorithm",
                      values={"known": ", ".join(ALGORITHMS) + " (MTP is NEXTN)", "value": repr(value)})


def check_speculation(algorithm: str, num_steps: int, eagle_topk: int, num_draft_tokens: int,
                      accept_length: float) -> None:
    """Refuse settings SGLang refuses or a round cannot give. Raises :class:`InputError` naming the
    parameter:

    - ``algorithm`` not in :data:`ALGORITHMS`;
    - ``num_steps`` < 1, ``eagle_topk`` < 1, ``num_draft_tokens`` < 2 (integers);
    - ``eagle_topk == 1`` with ``num_draft_tokens != num_steps + 1``: a chain of ``num_steps`` drafts
      and the verified token (SGLang 0.5.23 ``arg_groups/speculative_hook.py``: with topk 1 it sets the
      draft tokens to ``num_steps + 1`` and warns; pdmux asks for the value SGLang will run);
    - ``eagle_topk > 1`` with ``num_draft_tokens`` above ``eagle_topk x num_steps + 1`` (the tree has no
      more nodes) or below ``num_steps + 1`` (too small to hold one branch to the draft's depth);
    - ``accept_length`` outside ``[1, num_steps + 1]``: a round accepts at most one token per draft step
      plus the bonus token.
    """
    if algorithm not in ALGORITHMS:
        raise unknown_algorithm(algorithm)
    for param, value in (("speculative_num_steps", num_steps), ("speculative_eagle_topk", eagle_topk),
                         ("speculative_num_draft_tokens", num_draft_tokens)):
        check_speculative_value(param, value)
    if eagle_topk == 1 and num_draft_tokens != num_steps + 1:
        raise InputError(
            "{flag.speculative_num_draft_tokens} {value} with {flag.speculative_eagle_topk} 1 and "
            "{flag.speculative_num_steps} {steps}: a chain verifies num-steps + 1 = {want} tokens (SGLang "
            "sets it to {want}); give {want}",
            param="speculative_num_draft_tokens",
            values={"value": num_draft_tokens, "steps": num_steps, "want": num_steps + 1})
    if eagle_topk > 1:
        most = eagle_topk * num_steps + 1
        if num_draft_tokens > most or num_draft_tokens < num_steps + 1:
            raise InputError(
                "{flag.speculative_num_draft_tokens} {value} does not fit a tree of "
                "{flag.speculative_eagle_topk} "
                "{topk} x {flag.speculative_num_steps} {steps}: give {low} to {most} (num-steps + 1 to "
                "topk x num-steps + 1)",
                param="speculative_num_draft_tokens",
                values={"value": num_draft_tokens, "topk": eagle_topk, "steps": num_steps,
                        "low": num_steps + 1, "most": most})
    if not _number(accept_length) or not 1.0 <= accept_length <= num_steps + 1:
        raise InputError(
            "{flag.speculative_accept_length} must be a number from 1 to num-steps + 1 = {most} (mean tokens "
            "a request gets per verify round, the bonus token included), got {value}",
            param="speculative_accept_length",
            values={"most": num_steps + 1, "value": repr(accept_length)})


def mixed_chunk_finding(speculation: Speculation, sizes: Sequence[int]) -> Finding:
    """What ``--enable-mixed-chunk`` (chunk ``sizes``, tokens) does beside ``speculation``, as a finding:
    ``policies.mixed_chunk_rounds`` where SGLang keeps it (its mixed steps give the running requests one
    token, pdmux a round), ``policies.mixed_chunk_off`` where it turns it off (each size then runs as
    chunked prefill) (:attr:`Speculation.keeps_mixed_chunk`)."""
    if speculation.keeps_mixed_chunk:
        return Finding("policies.mixed_chunk_rounds", {"algorithm": speculation.algorithm}, "policies")
    return Finding("policies.mixed_chunk_off", {"algorithm": speculation.algorithm,
                                                "sizes": ", ".join(str(c) for c in sizes)}, "policies")


def default_draft(target: Model, algorithm: str) -> Model:
    """The draft SGLang's usual checkpoints carry for ``algorithm`` when the user names none: one decoder
    layer of the target's shapes (EAGLE/EAGLE3 heads and DeepSeek-style NEXTN/MTP modules are one layer;
    an MoE target's MTP layer is an MoE layer), the target's vocabulary and hidden size; its embedding and
    lm_head are the target's (SGLang shares them, ``eagle_worker_v2.py`` ``init_lm_head``), so they add
    no weights. STANDALONE has no default: its draft is a whole small model
    (``--speculative-draft-model-path``).
    The EAGLE fusion layer over the target's hidden states (``fc``, 2 or 3 x hidden by hidden) is not a
    layer here: its weights are counted apart (:func:`pdmux_cli.costmodel.speculative.eagle_fc_params`).
    Raises :class:`InputError` for STANDALONE."""
    if algorithm == "STANDALONE":
        raise InputError("{flag.speculative_algorithm} STANDALONE needs {flag.speculative_draft_model_path}: "
                         "its draft is a whole smaller model, which pdmux cannot guess",
                         param="speculative_draft_model_path", values={})
    return dataclasses.replace(target, name=f"{target.name} draft (1 layer)", num_layers=1,
                               num_dense_layers=0, num_sliding_layers=0, sliding_window=0)


def check_draft(target: Model, draft: Model, source: str) -> None:
    """A draft SGLang can pair with ``target``: the same vocabulary size (its tokens are the target's:
    EAGLE/MTP share the embedding and lm_head; EAGLE3's hot-token map indexes the target's vocabulary) and,
    for a draft that reads the target's hidden states, the same hidden size. Raises :class:`InputError`
    naming ``speculative_draft_model_path`` and both sizes."""
    if draft.vocab_size != target.vocab_size:
        raise InputError(
            "the draft {source} has a vocabulary of {draft} tokens, the target {model} {target}: a draft "
            "proposes the target's tokens, so the vocabularies must match "
            "({flag.speculative_draft_model_path})",
            param="speculative_draft_model_path",
            values={"source": source, "draft": draft.vocab_size, "model": target.name,
                    "target": target.vocab_size})


#: ``_auto_choose_speculative_params``: (num_steps, eagle_topk, num_draft_tokens) by the target's first
#: architecture when ``--speculative-num-steps`` is unset; STANDALONE (3, 1, 4) whatever the model.
AUTO_PARAMS_BY_ARCH: dict[str, tuple[int, int, int]] = {
    "LlamaForCausalLM": (5, 4, 8),
    "Grok1ForCausalLM": (5, 4, 8),
    "Grok1VForCausalLM": (5, 4, 8),
}
#: Every other architecture (DeepSeek V2/V3/V3.2, gpt-oss, GLM-4 MoE, Qwen, Mistral Large 3, ...).
AUTO_PARAMS_DEFAULT = (3, 1, 4)

#: Where these rules come from, for output.
SOURCE = "SGLang 0.5.23 srt/arg_groups/speculative_hook.py"


def canonical_algorithm(text: str) -> str:
    """``--speculative-algorithm`` as SGLang reads it: upper-cased (``handle_speculative_decoding``), with
    pdmux's alias MTP for NEXTN. Raises :class:`InputError` for an algorithm pdmux does not model (NGRAM,
    DFLASH, DSPARK, UNO: their rounds are not EAGLE's)."""
    name = str(text).strip().upper()
    name = ALIASES.get(name, name)
    if name not in ALGORITHMS:
        raise unknown_algorithm(text)
    return name


def auto_params(algorithm: str, target: Model) -> tuple[int, int, int]:
    """SGLang's ``(num_steps, eagle_topk, num_draft_tokens)`` when none is given
    (``_auto_choose_speculative_params``, by the target's first architecture)."""
    if algorithm == "STANDALONE":
        return AUTO_PARAMS_DEFAULT
    arch = target.architectures[0] if target.architectures else ""
    return AUTO_PARAMS_BY_ARCH.get(arch, AUTO_PARAMS_DEFAULT)


def resolve_speculation(target: Model, algorithm: str, num_steps: int | None, eagle_topk: int | None,
                        num_draft_tokens: int | None, accept_length: float | None, draft: Model | None = None,
                        draft_source: str = "") -> tuple[Speculation, list[Finding]]:
    """The :class:`Speculation` SGLang 0.5.23 runs for these flags, and the
    findings that say what it chose (codes ``speculative.*``).

    - no ``num_steps``: SGLang picks all three (:func:`auto_params`) and asserts the other two were not
      given (an ``AssertionError`` at start-up: refused here);
    - ``num_steps`` without ``eagle_topk``: SGLang compares ``None > 1`` and fails: refused;
    - ``eagle_topk`` 1: the draft tokens become ``num_steps + 1`` (SGLang warns and adjusts; a finding
      when the user gave another value);
    - ``eagle_topk`` > 1 without ``num_draft_tokens``: refused (SGLang has no value to run);
    - ``accept_length``: required (pdmux cannot know a draft's acceptance);
    - ``draft``: the user's draft (``--speculative-draft-model-path``: a ``config.json``), checked against
      the target (:func:`check_draft`; an EAGLE3 draft's ``draft_vocab_size`` then sizes its lm_head, SGLang
      0.5.23 ``speculative/eagle_worker_v2.py`` ``init_token_map``/``init_lm_head``), else the algorithm's
      usual one (:func:`default_draft`).

    Raises :class:`InputError` naming the parameter for every refusal and for values out of range.
    """
    name = canonical_algorithm(algorithm)
    findings: list[Finding] = []
    if num_steps is None:
        given = [p for p, v in (("speculative_eagle_topk", eagle_topk),
                                ("speculative_num_draft_tokens", num_draft_tokens)) if v is not None]
        if given:
            raise InputError("{param_flag} needs {flag.speculative_num_steps} too: SGLang chooses all three "
                             "itself only when none is given (it fails at start-up otherwise)",
                             param=given[0], values={})
        num_steps, eagle_topk, num_draft_tokens = auto_params(name, target)
        findings.append(Finding("speculative.auto_params", {
            "algorithm": name, "num_steps": num_steps, "eagle_topk": eagle_topk,
            "num_draft_tokens": num_draft_tokens, "source": SOURCE}, "speculative_num_steps"))
    elif eagle_topk is None:
        raise InputError("{flag.speculative_num_steps} needs {flag.speculative_eagle_topk} too (SGLang "
                         "0.5.23 "
                         "fails at start-up without it)", param="speculative_eagle_topk", values={})
    for param, value in (("speculative_num_steps", num_steps), ("speculative_eagle_topk", eagle_topk)):
        check_speculative_value(param, value)
    if eagle_topk == 1 and num_draft_tokens != num_steps + 1:
        if num_draft_tokens is not None:
            findings.append(Finding("speculative.draft_tokens_adjusted", {
                "given": num_draft_tokens, "num_draft_tokens": num_steps + 1, "source": SOURCE},
                "speculative_num_draft_tokens"))
        num_draft_tokens = num_steps + 1
    if num_draft_tokens is None:
        raise InputError("{flag.speculative_eagle_topk} {topk} needs {flag.speculative_num_draft_tokens} "
                         "(the "
                         "tree's size: {low} to {most})", param="speculative_num_draft_tokens",
                         values={"topk": eagle_topk, "low": num_steps + 1,
                                 "most": eagle_topk * num_steps + 1})
    if accept_length is None:
        raise InputError("{flag.speculative_algorithm} needs {flag.speculative_accept_length}: the mean "
                         "tokens a "
                         "request gets per verify round, bonus token included (SGLang logs it as 'accept "
                         "len'; "
                         "pdmux calibrate --sglang-log reads it from a server log)",
                         param="speculative_accept_length", values={})
    if draft is None:
        draft = default_draft(target, name)
        draft_source = "default"
    else:
        check_draft(target, draft, draft_source or draft.name)
        if draft.draft_vocab_size > draft.vocab_size:
            raise InputError(
                "the draft {source} has a draft_vocab_size of {draft_vocab:,}, more than its vocabulary of "
                "{vocab:,} tokens: an EAGLE3 draft's hot tokens are a subset of the vocabulary "
                "({flag.speculative_draft_model_path})",
                param="speculative_draft_model_path",
                values={"source": draft_source or draft.name, "draft_vocab": draft.draft_vocab_size,
                        "vocab": draft.vocab_size})
        if name == "EAGLE3" and 0 < draft.draft_vocab_size < draft.vocab_size:
            # its lm_head scores the hot tokens only, mapped back to the target's ids (d2t)
            findings.append(Finding("speculative.draft_vocab", {
                "draft_vocab_size": draft.draft_vocab_size, "vocab_size": draft.vocab_size},
                "speculative_draft_model_path"))
            draft = dataclasses.replace(draft, vocab_size=draft.draft_vocab_size)
    return Speculation(name, num_steps, eagle_topk, num_draft_tokens, accept_length, draft,
                       draft_source or "default"), findings


def pdmux_speculation_error(revision: object, algorithm: str, draft_layers: int = 1) -> InputError | None:
    """Why the revision (a ``--sglang`` key or :class:`~pdmux_cli.sglang.revisions.Revision`) cannot run
    ``--enable-pdmux`` beside ``--speculative-algorithm algorithm`` with a draft of ``draft_layers`` decoder
    layers, as an :class:`InputError` naming ``speculative_algorithm``; ``None`` where it can. Its
    ``speculation`` rule:

    - ``"crashes"`` (SGLang 0.5.23): nothing refuses the pair at start-up, but ``event_loop_pdmux``
      (``srt/multiplex/multiplexing_mixin.py``) runs every prefill as ``SPLIT_PREFILL`` through
      ``tp_worker.forward_batch_split_prefill``, which calls the target model and bypasses the speculative
      worker: no draft state is made, and the first decode after it fails (``ScheduleBatch.merge_batch`` ->
      ``EagleDraftInput.merge_batch`` on ``None``; or a 0-row draft input against the batch);
    - ``"refused"``: the unreleased branches refuse speculative decoding with pdmux at start-up
      (sglang-pdmux.md);
    - ``"single-layer"`` (the DeepSeek-V4.1 line, and the GLM line's #42414): single-layer EAGLE/NEXTN (MTP)
      drafts only; EAGLE3, STANDALONE and multi-layer drafts refused (layerwise_prefill_runbook.md).
    """
    from .revisions import get_revision

    rev = get_revision(revision)  # type: ignore[arg-type]
    rule = rev.speculation
    name = canonical_algorithm(algorithm)
    if rule == "single-layer" and name in ("EAGLE", "NEXTN") and draft_layers == 1:
        return None
    if rule == "crashes":
        why = ("accepts it at start-up, but its split prefill bypasses the draft worker "
               "(forward_batch_split_prefill), so the first decode after a prefill fails "
               "(EagleDraftInput.merge_batch on None)")
    elif rule == "single-layer":
        why = ("runs only single-layer EAGLE/NEXTN (MTP) drafts with pdmux (no EAGLE3, STANDALONE or "
               "multi-layer draft)")
    else:
        why = "refuses speculative decoding with --enable-pdmux at start-up"
    return InputError("{flag.speculative_algorithm} {algorithm} with pdmux: SGLang {revision} {why}; "
                      "compare the baselines with speculation, or pdmux without it",
                      param="speculative_algorithm",
                      values={"algorithm": name, "revision": rev.key, "why": why})


def check_pdmux_speculation(revision: object, speculation: Speculation) -> None:
    """Raise :func:`pdmux_speculation_error`'s :class:`InputError` for ``speculation`` (its algorithm and
    draft) where the revision cannot run it beside ``--enable-pdmux``."""
    error = pdmux_speculation_error(revision, speculation.algorithm, speculation.draft.num_layers)
    if error is not None:
        raise error


def pdmux_speculation_flags(revision: object, algorithm: str | None, draft_layers: int | None,
                            draft_path: str | None = None) -> list[str]:
    """SGLang's speculative arguments for a pdmux launch (gen-config): ``[]`` without ``algorithm``; else
    ``--speculative-algorithm`` (and ``--speculative-draft-model-path draft_path``) where the revision runs
    the pair. ``draft_layers``: the draft's decoder layers (``None``: the algorithm's usual one-layer draft).
    Raises :func:`pdmux_speculation_error`'s :class:`InputError` where it cannot, and for an unknown
    algorithm."""
    if algorithm is None:
        if draft_path is not None:
            raise InputError("{flag.speculative_draft_model_path} needs {flag.speculative_algorithm}",
                             param="speculative_draft_model_path", values={})
        return []
    canonical_algorithm(algorithm)  # blank or unknown: refused before the revision is asked
    error = pdmux_speculation_error(revision, algorithm, 1 if draft_layers is None else draft_layers)
    if error is not None:
        raise error
    flags = ["--speculative-algorithm", canonical_algorithm(algorithm)]
    return flags + (["--speculative-draft-model-path", draft_path] if draft_path else [])
