"""The simulated SGLang server: its settings, KV pool, running decode batch, admission, retraction and
records.

Shared by the schedulers in :mod:`pdmux_cli.simulate.schedulers`. Pure Python and deterministic.
The rules follow SGLang 0.5.23 (paths inside its wheel; docs/modules.md lists them), or where
``Setup.release`` names another release, that release's defaults and scheduler rules
(:mod:`pdmux_cli.sglang.release_defaults`: the memory defaults, the reserve for ``ignore_eos`` requests,
the retraction target, ``new_token_ratio``'s floor, decay and value after a retraction, the front end):

- **Step times** come from a cost model (:mod:`pdmux_cli.costmodel`, ``Setup.step_model``); the engine's
  CPU time per step (``StepModel.decode_cpu_s``) is charged by the scheduler.
- **KV pool** (:meth:`Setup.kv_pool`): SGLang's ``mem_fraction_static`` for the policy's chunk size
  (``srt/arg_groups/memory_hook.py`` ``handle_gpu_memory_settings``; chunking off under pdmux and
  prefill-first), or ``--mem-fraction-static``; tokens = the pool's bytes / KV bytes per token.
- **Admission** (:meth:`Work.form_prefill_batch`, ``srt/managers/schedule_policy.py`` ``PrefillAdder``):
  FCFS with head-of-line blocking; a request is admitted when ``extend + clip(max_new) + 1 < free -
  ratio x sum(clip(remaining) of running requests) - charges of this batch`` (strict), ``clip`` at
  4096 tokens, ``ratio`` = ``new_token_ratio`` (1.0 with ``--ignore-eos`` from 0.5.22); at most
  ``max_running_requests`` running; without chunking a request other than the first is refused when its
  tokens are ``>=`` what is left of ``max_prefill_tokens``; with chunking a prompt longer than what is
  left of the chunk (``>``) is cut, and the cut request goes first in the next prefill batch. After a
  failed admission the batch is "full" until a running request leaves.
- **Decode memory** (:meth:`Work.check_decode_memory`, ``schedule_batch.py`` ``check_decode_mem`` and
  ``retract_decode``): a decode step needs one free KV slot per request; when short, requests are
  retracted (fewest generated tokens first, then longest prompt; at least one kept) until one decode
  step fits (0.5.2 on; up to 0.5.1 until 20 tokens a kept request are free) to the back of the queue,
  their KV freed; they are prefilled again with prompt + generated tokens later. ``new_token_ratio``
  starts at 0.7, decays by 0.001 per decode step to 0.098, is set to ``(generated + 20 x kept) /
  (max_new + 1)`` over the kept requests after a retraction (no ``+ 1`` up to 0.5.3), and resets when
  the server is idle.
- **Prefix cache** (SGLang's radix cache, on by default; :mod:`pdmux_cli.simulate.prefix_cache`), for
  traces with ``hash_ids`` (blocks of the trace's ``block_tokens``; a chunked prompt's whole blocks done
  enter the cache after each chunk): each candidate's prompt is matched against the cached blocks (at most its
  tokens - 1: ``Req._compute_max_prefix_len``); the match is locked, the request computes only the rest
  (the cost model's ``(new, cached)`` pairs: cached tokens are attended over, not computed), and
  admission charges the uncached tokens plus the matched tokens no one else locked (they leave the
  evictable budget, ``PrefillAdder.add_one_req``). Cached blocks of running requests are held once
  however many share them. Unlocked cached tokens count as free; they are evicted, least recently used
  first, when a prefill batch, a decode step or a retraction needs room (``evict_to_free_tokens``):
  eviction before retraction. Without hashes, or with ``Setup.prefix_cache`` off, nothing is matched
  and the run is the same as without the cache.
- **A request's context** at its j-th decode step is the tokens cached (prompt, plus outputs); the first
  output token comes out of prefill (or of a re-prefill after a retraction), every other from a decode
  step; ``max_new_tokens`` is the trace's output length.
- **Records**: the end time of every decode step and, per request, the times and step ranges of its
  tokens; ITLs are recovered from step end times afterwards (:mod:`pdmux_cli.simulate.metrics`).
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..catalog import model as mdl
from ..catalog.model import Model
from ..sglang import server_defaults as sgl
from ..sglang.release_defaults import LATEST, ReleaseDefaults, release_defaults
from ..multigpu.disaggregation import Layout
from ..util.errors import InputError
from .columns import Ragged, fast
from .prefix_cache import WAITING_PREFIX_REFRESH_INTERVAL, WAITING_PREFIX_REFRESH_MAX, PrefixCache, block_keys
from .traces import HASH_BLOCK_TOKENS

if TYPE_CHECKING:
    from ..costmodel import StepModel
    from ..costmodel.options import CostModelOptions

#: Most decode steps one simulated policy may take when its whole record is kept (:func:`pdmux_cli.
#: simulate.runner.simulate` without a fold: the API the tests and the serving replays use). Memory grows
#: with the steps there (their end times, then sorting the ITL distribution: about 130 bytes a step at the
#: peak, so under 1 GB). A streamed run (the commands) keeps a window of steps and has a budget instead
#: (:func:`step_budget`).
MAX_DECODE_STEPS = 6_000_000

#: Longest chain of ``new_token_ratio`` decays :func:`ratio_chain` tabulates (SGLang's default: 602 steps
#: from 0.7 to 0.098 by 0.001); a slower decay goes step by step.
MAX_RATIO_CHAIN = 100_000

#: Most values :func:`ratio_chain` keeps per floor and decay (SGLang's chain from its initial ratio, and those
#: from values after retractions, which each start a chain of their own: past this, step by step).
MAX_RATIO_VALUES = 20_000

_RATIO_CHAINS: dict[tuple[float, float], dict[float, tuple[list[float], dict[float, int]]]] = {}


def ratio_chain(ratio: float, floor: float, decay: float,
                steps: int) -> tuple[list[float], dict[float, int]] | None:
    """The values ``new_token_ratio`` takes from ``ratio`` down to ``floor``, one decode step apart
    (:meth:`Work.decay_ratio`'s ``max(floor, r - decay)``, the same floats), and each value's position;
    kept per ``(floor, decay)`` for every start already seen (a value's successors depend on it alone, so
    a chain answers for every value on it). ``None`` when it would be longer than
    :data:`MAX_RATIO_CHAIN`, past :data:`MAX_RATIO_VALUES` values kept, or for a value off every chain kept
    (one after a retraction) where ``steps`` decays one by one cost less than a new chain."""
    chains = _RATIO_CHAINS.setdefault((floor, decay), {})
    chain = chains.get(ratio)
    if chain is None:
        if not decay > 0 or (ratio - floor) / decay > MAX_RATIO_CHAIN or len(chains) > MAX_RATIO_VALUES:
            return None
        if chains and steps < (ratio - floor) / decay:  # a value after a retraction, a run shorter than its
            return None  # chain: its steps one by one cost less than the chain (seldom met again)
        values = [ratio]
        r = ratio
        while r > floor:
            r = max(floor, r - decay)
            values.append(r)
        chain = (values, {v: i for i, v in enumerate(values)})
        for v in values:
            chains.setdefault(v, chain)
    return chain


#: Decode steps between two checks of the step limit or budget (and progress callbacks, and trimming a
#: streamed run's window of step end times) in the schedulers.
STEP_CHECK_EVERY = 4096

#: Steps from which :meth:`StepEnds.gaps_upto` subtracts with numpy rather than one by one.
GAPS_BY_NUMPY = 256

#: :meth:`DecodeBatch.quiet_steps`'s "no event ahead" (past any step count a run can reach).
QUIET_FOREVER = 1 << 62

#: A streamed run's default budget: at least this many decode steps per simulated server...
MIN_STEP_BUDGET = 6_000_000
#: ... or this many per request of the trace, whichever is more (a trace of any length runs; a run that
#: takes thousands of decode steps per request, long outputs barely batched, stops early).
STEP_BUDGET_PER_REQUEST = 2_000


def step_budget(requests: int, max_steps: int | None = None) -> int:
    """The decode steps one simulated server may take in a streamed run of ``requests`` requests:
    ``max_steps`` when given (0: no limit), else the larger of :data:`MIN_STEP_BUDGET` and
    :data:`STEP_BUDGET_PER_REQUEST` per request. Raises :class:`InputError` for a negative ``max_steps``."""
    if max_steps is not None:
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 0:
            raise InputError(
                "{flag.max_steps} must be a whole number of decode steps >= 0 (0: no limit), got "
                "{max_steps!r}",
                values={"max_steps": max_steps},
            )
        return max_steps
    return max(MIN_STEP_BUDGET, STEP_BUDGET_PER_REQUEST * requests)

#: Bytes per weight or KV-cache element pdmux accepts: a 0.5-bit format (1/16 byte) up to fp128.
BYTES_PER_ELEMENT_RANGE = (0.0625, 16.0)

#: Efficiency knobs of the chapter's model: fractions of the datasheet figures, at least 0.1 %.
EFFICIENCY_RANGE = (0.001, 1.0)

#: ``--mem-fraction-static``: SGLang's accepted range (a fraction of the GPU's memory).
MEM_FRACTION_RANGE = (0.05, 0.99)


class StepEnds(array):
    """End time (s) of every decode step, 8 bytes each (an ``array('d')``); with ``gaps`` (:meth:`gaps_upto`).

    Kept whole (``budget`` ``None``): at most :data:`MAX_DECODE_STEPS`, :meth:`check_room` raising
    :class:`InputError` past it, naming the way out. Streamed (``budget`` an int, 0 for no limit; a
    :class:`~pdmux_cli.simulate.fold.Fold` folds the steps it no longer needs and drops them): a window
    from global step :attr:`base` on, with :attr:`prev` (the end time before it), :attr:`weight` (the
    running sum of :attr:`cont` before it) and :attr:`cont` (per step in the window, the difference
    array of requests taking part in it and the step before); :meth:`check_room` raises
    :class:`InputError` once :attr:`total` reaches the budget, naming ``--max-steps``."""

    def __new__(cls, budget: int | None = None) -> StepEnds:  # noqa: PYI034 - typing.Self needs Python 3.11
        return super().__new__(cls, "d")

    def __init__(self, budget: int | None = None) -> None:
        self.budget = budget
        self.base = 0
        self.prev = 0.0
        self.weight = 0
        self.cont = array("q")
        self.gaps = array("d")
        #: finished requests a fold has yet to take in (:meth:`pdmux_cli.simulate.fold.Fold.flush`)
        self.pending: list[tuple] = []

    def gaps_upto(self, k: int) -> array:
        """:attr:`gaps` (per step of the window, its end minus the previous step's, :attr:`prev` for the
        first) computed through window index ``k`` (exclusive), each once."""
        gaps = self.gaps
        done = len(gaps)
        if done < k:
            if not done:
                gaps.append(self[0] - self.prev)
                done = 1
            if k - done >= GAPS_BY_NUMPY:  # a long stretch (quiet runs): numpy's subtraction, the same floats
                import numpy as np

                ends = np.frombuffer(array.__getitem__(self, slice(done - 1, k)))  # a copy's view
                gaps.frombytes(np.subtract(ends[1:], ends[:-1]).tobytes())
            elif done < k:
                gaps.extend(map(operator.sub, array.__getitem__(self, slice(done, k)),
                                array.__getitem__(self, slice(done - 1, k - 1))))
        return gaps

    @property
    def total(self) -> int:
        """Decode steps taken so far (the window's end as a global step index)."""
        return self.base + len(self)

    @property
    def check_every(self) -> int:
        """Steps between two :meth:`check_room` calls: :data:`STEP_CHECK_EVERY`, or the limit when lower."""
        limit = MAX_DECODE_STEPS if self.budget is None else self.budget
        return min(STEP_CHECK_EVERY, limit) if limit else STEP_CHECK_EVERY

    def append(self, end_s: float) -> None:
        self.check_room()
        super().append(end_s)

    def check_room(self) -> None:
        """:class:`InputError` once the steps are more than the limit (kept whole) or the budget (streamed).
        The schedulers append with :attr:`fast_append` and call this every few thousand steps, and the
        run's result once more at its end (:func:`pdmux_cli.simulate.servers.run_result`): a run of more
        steps fails, whenever its last tick was; one of at most as many passes."""
        if self.budget is None:
            if len(self) > MAX_DECODE_STEPS:
                raise InputError(
                    "the simulation passed {MAX_DECODE_STEPS:,} decode steps (long outputs that barely "
                    "overlap, or tiny chunks): simulate fewer requests ({flag.max_requests}, "
                    "{flag.duration}) or larger {flag.chunk_sizes}",
                    values={"MAX_DECODE_STEPS": MAX_DECODE_STEPS},
                )
        elif self.budget and self.base + len(self) > self.budget:
            raise InputError(
                "the simulation passed its budget of {budget:,} decode steps on one server (long outputs "
                "that barely overlap, or tiny chunks): raise it with {flag.max_steps} N (0: no limit), "
                "or simulate fewer requests ({flag.max_requests}, {flag.duration}) or larger "
                "{flag.chunk_sizes}",
                values={"budget": self.budget},
            )

    @property
    def fast_append(self) -> Callable[[float], None]:
        """``array.append`` bound to this array, without the limit check (see :meth:`check_room`)."""
        return array.append.__get__(self)

    @classmethod
    def window_of(cls, ends: Sequence[float]) -> StepEnds:
        """A streamed window holding every one of ``ends`` (a finished run's record, for
        :func:`pdmux_cli.simulate.metrics.summarize`)."""
        out = cls(0)
        out.frombytes(array("d", ends).tobytes())
        return out


#: A progress callback receives the number of requests finished so far.
Progress = Callable[[int], None]


def _real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _value_error(template: str, param: str | None, where: str | None, **values: object) -> InputError:
    """An :class:`InputError` whose ``{param_flag}`` names ``param`` (a Python name: the CLI prints its flag,
    the API its keyword) or, for ``where`` (a text that is no parameter: ``"KV bytes per element"``), that
    text as written (as :func:`pdmux_cli.workflows.values.param_error`, which the core does not import)."""
    if where is not None:
        return InputError(template.replace("{param_flag}", "{where}"), param=param,
                          values={**values, "where": where})
    return InputError(template, param=param, values=values)


def check_bytes_per_element(value: float | None, param: str | None = None, *,
                            where: str | None = None) -> None:
    """:class:`InputError` about ``param`` (the parameter by its Python name, ``"kv_bytes"``; ``where``: a
    text that is no parameter, named instead) unless ``value`` (bytes per weight or KV element) is ``None`` or
    within :data:`BYTES_PER_ELEMENT_RANGE`."""
    lo, hi = BYTES_PER_ELEMENT_RANGE
    if value is not None and not (_real(value) and lo <= value <= hi):
        raise _value_error("{param_flag} must be between {lo:g} and {hi:g} bytes per element (a few bits to "
                           "fp128), got {value}", param, where, lo=lo, hi=hi, value=value)


def check_efficiency(value: float | None, param: str | None = None, *, where: str | None = None) -> None:
    """:class:`InputError` about ``param`` (or ``where``: as :func:`check_bytes_per_element`) unless ``value``
    is ``None`` or a fraction within :data:`EFFICIENCY_RANGE`."""
    lo, hi = EFFICIENCY_RANGE
    if value is not None and not (_real(value) and lo <= value <= hi):
        raise _value_error("{param_flag} must be a fraction in [{lo:g}, {hi:g}], got {value}", param, where,
                           lo=lo, hi=hi, value=value)


def check_mem_fraction(value: float | None, param: str = "mem_fraction_static") -> None:
    """:class:`InputError` about ``param`` (its Python name; SGLang's and pdmux's flag
    ``--mem-fraction-static``) unless ``value`` is ``None`` or within :data:`MEM_FRACTION_RANGE`."""
    lo, hi = MEM_FRACTION_RANGE
    if value is not None and not (_real(value) and lo <= value <= hi):
        raise InputError("{param_flag} must be a fraction from {lo:g} to {hi:g} of the GPU's memory, got "
                         "{value}", param=param, values={"lo": lo, "hi": hi, "value": value})


#: ``--max-running-requests`` SGLang 0.5.23 sets when it is unset and speculative decoding is on
#: (``srt/arg_groups/speculative_hook.py`` ``_handle_eagle_family``: "Max running requests is reset to 48").
SPECULATIVE_MAX_RUNNING_REQUESTS = 48


@dataclass(frozen=True)
class Setup:
    """The simulated server: model, cost model, GPU and SGLang's settings.

    ``step_model``: a :class:`pdmux_cli.costmodel.StepModel`. ``total_sms``: SMs.
    ``compute_capability``: ``(major, minor)``. ``memory_bytes``: device memory (nvidia-smi's total),
    bytes. ``weight_bytes_per_param``: ``None`` for the model's dtype. ``kv_bytes_per_element``: bytes.
    ``mem_fraction_static``: ``None`` for SGLang's default per policy. ``max_prefill_tokens``: SGLang's
    ``--max-prefill-tokens``. ``ignore_eos``: requests run to their ``max_new_tokens`` (benchmark
    traffic): admission reserves their whole remaining output. ``disable_overlap``: the baselines run
    without the overlap scheduler (their CPU time adds to every step, as under pdmux); :attr:`overlap` also
    turns it off where the release does under ``speculation``.
    ``cuda_graph_max_bs``: ``None`` for SGLang's default for the GPU; larger decode batches run
    without a CUDA graph. ``max_running_requests``: ``None`` for SGLang's default from the pool.
    ``prefix_cache``: SGLang's radix cache (on by default; off is ``--disable-radix-cache``), used for
    traces with ``hash_ids``. ``gpu_name``: for output. ``tp``: GPUs the model is sharded over
    (``--tp-size``): weights, KV and SGLang's memory reserve are one rank's, and every rank holds the
    same pool (the step model's times are one rank's too). ``prefill_cuda_graph``: SGLang replays prefill
    batches from its prefill CUDA graph (:func:`pdmux_cli.sglang.server_defaults.prefill_cuda_graph_default`;
    off, every prefill batch pays its eager launches: :meth:`prefill_launch_s`). ``serial_frontend``: the
    front end tokenizes one request at a time (SGLang up to 0.5.21, the public runs' releases: the event
    loop of ``tokenizer_manager.py``); ``False`` for 0.5.22 on (``serving_base.py`` tokenizes in an
    executor), so a request's tokenization delays only itself. ``disable_cuda_graph``: SGLang's
    ``--disable-cuda-graph`` (0.5.23 ``srt/arg_groups/cuda_graph_hook.py`` ``parse_cuda_graph_config``:
    decode and prefill graphs both off): every decode step is launched kernel by kernel
    (:attr:`graph_max_bs` 0), every prefill eagerly, and the graphs' memory reserve is not taken.
    ``release``: the SGLang release whose defaults (chunk size, decode graph, ``mem_fraction_static``,
    ``max_running_requests``) and scheduler rules (the admission reserve for ``ignore_eos`` requests,
    retraction, ``new_token_ratio``) the server follows
    (:func:`pdmux_cli.sglang.release_defaults.release_defaults`; default 0.5.23's). ``speculation``: SGLang's
    speculative decoding (:class:`pdmux_cli.costmodel.speculative.Speculation`, ``None`` without): the
    step model's decode step is a round, and a request takes :meth:`decode_steps` rounds.
    ``step_by_step``: how the simulator runs, not the server: every decode step one at a time, the
    reference the event-speed runs (decode steps between two events advanced at once:
    :func:`pdmux_cli.simulate.schedulers.baseline_rounds`) are checked against (``--step-by-step``).
    """

    model: Model
    step_model: StepModel
    total_sms: int
    compute_capability: tuple[int, int]
    memory_bytes: float
    weight_bytes_per_param: float | None = None
    kv_bytes_per_element: float = 2.0
    mem_fraction_static: float | None = None
    max_prefill_tokens: int = sgl.MAX_PREFILL_TOKENS
    ignore_eos: bool = False
    disable_overlap: bool = False
    cuda_graph_max_bs: int | None = None
    max_running_requests: int | None = None
    gpu_name: str = ""
    prefix_cache: bool = True
    tp: int = 1
    prefill_cuda_graph: bool = True
    serial_frontend: bool = False
    disable_cuda_graph: bool = False
    release: ReleaseDefaults = LATEST
    speculation: Any = None
    step_by_step: bool = False

    def __post_init__(self) -> None:
        check_mem_fraction(self.mem_fraction_static)
        check_bytes_per_element(self.kv_bytes_per_element, where="KV bytes per element")
        check_bytes_per_element(self.weight_bytes_per_param, where="weight bytes per parameter")
        if not (_real(self.memory_bytes) and self.memory_bytes > 0):
            raise InputError(f"device memory must be a positive number of bytes, got {self.memory_bytes}")
        if self.max_prefill_tokens < 1:
            raise InputError(f"max prefill tokens must be >= 1, got {self.max_prefill_tokens}")
        if self.total_sms < 1:
            raise InputError(f"SM count must be >= 1, got {self.total_sms}")
        for name in ("cuda_graph_max_bs", "max_running_requests"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"{name.replace('_', ' ')} must be >= 1, got {value}")

    def decode_steps(self, tokens: int) -> int:
        """Decode steps a request takes for ``tokens`` more output tokens: one a token, or under speculative
        decoding the rounds (:meth:`pdmux_cli.costmodel.speculative.Speculation.rounds`)."""
        return tokens if self.speculation is None else self.speculation.rounds(tokens)

    @property
    def overlap(self) -> bool:
        """Whether the baselines run with the overlap scheduler: not under ``disable_overlap``, nor under
        ``speculation`` on a release that turns it off there
        (:meth:`~pdmux_cli.sglang.release_defaults.ReleaseDefaults.speculation_overlaps`: up to 0.5.10, and
        at topk > 1 in 0.5.11-0.5.12), where a round pays its CPU time on top of the GPU's."""
        if self.disable_overlap:
            return False
        return self.speculation is None or self.release.speculation_overlaps(self.speculation.eagle_topk)

    @property
    def tokens_per_step(self) -> float:
        """Output tokens a request gets per decode step on average: 1, or the acceptance length."""
        return 1 if self.speculation is None else self.speculation.accept_length

    @property
    def weight_bytes(self) -> float:
        """Bytes of weights one GPU holds (:func:`pdmux_cli.costmodel.operators.rank_weight_bytes`; all
        of them, :func:`pdmux_cli.catalog.model.weight_bytes_total`, on one GPU); with :attr:`speculation`
        the draft's too (:func:`pdmux_cli.costmodel.speculative.draft_weight_bytes`)."""
        if self.tp == 1:
            weights = mdl.weight_bytes_total(self.model, self.weight_bytes_per_param)
        else:
            from ..costmodel.operators import rank_weight_bytes

            weights = rank_weight_bytes(self.model, self.weight_bytes_per_param, self.tp)
        if self.speculation is not None:
            from ..costmodel.speculative import draft_weight_bytes

            weights += draft_weight_bytes(self.speculation, self.weight_bytes_per_param, self.tp)
        return weights

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes per cached token, all layers, uncapped: SGLang's token pool allocates a full cell per
        token (:func:`pdmux_cli.catalog.model.kv_bytes_per_token`). One rank's with ``tp > 1``; with
        :attr:`speculation` the draft's layers too."""
        if self.tp == 1:
            cell = mdl.kv_bytes_per_token(self.model, self.kv_bytes_per_element)
        else:
            from ..costmodel.operators import rank_kv_bytes_per_token

            cell = rank_kv_bytes_per_token(self.model, self.kv_bytes_per_element, self.tp)
        if self.speculation is not None:
            from ..costmodel.speculative import draft_cell_factor

            cell *= draft_cell_factor(self.speculation, self.model.num_layers)
        return cell

    @property
    def graph_max_bs(self) -> int:
        """The largest decode batch run as a CUDA graph (0 with ``disable_cuda_graph``)."""
        if self.disable_cuda_graph:
            return 0
        if self.cuda_graph_max_bs is not None:
            return self.cuda_graph_max_bs
        return self.release.cuda_graph_max_bs(self.memory_bytes, self.tp)

    @property
    def default_chunk_tokens(self) -> int:
        """The release's default ``--chunked-prefill-size`` on this GPU (tokens; -1: chunking off, SGLang up
        to 0.2.12)."""
        return self.release.chunked_prefill_size(self.memory_bytes, self.tp)

    def prefill_launch_s(self, tokens: int, chunk_tokens: int, mixed: bool = False) -> float:
        """Host seconds to launch a prefill batch of ``tokens`` new tokens under ``--chunked-prefill-size
        chunk_tokens`` (``<= 0``: off), ``mixed`` with decode rows (``--enable-mixed-chunk``): from SGLang's
        prefill CUDA graph where it takes the batch (:attr:`prefill_cuda_graph`, not mixed, at most
        :func:`~pdmux_cli.sglang.server_defaults.prefill_graph_max_tokens`), eagerly otherwise
        (``StepModel.prefill_launch_s``)."""
        graphed = sgl.prefill_replays_from_graph(self.prefill_cuda_graph, tokens, chunk_tokens,
                                                 bool(self.model.is_mla), mixed)
        return self.step_model.prefill_launch_s(None, graphed)

    def kv_pool(self, chunk_tokens: int) -> sgl.KvPool:
        """SGLang's KV pool with ``--chunked-prefill-size chunk_tokens`` (``-1``: chunking off).
        Raises :class:`InputError` when the weights leave no room (naming the model and GPU)."""
        fraction = self.mem_fraction_static
        if fraction is None:
            fraction = self.release.mem_fraction_static(self.memory_bytes, chunk_tokens, self.tp,
                                                        max_prefill_tokens=self.max_prefill_tokens,
                                                        cuda_graph_max_bs=self.cuda_graph_max_bs,
                                                        graphs=not self.disable_cuda_graph)
        try:
            return sgl.kv_pool(self.memory_bytes, self.weight_bytes, self.kv_bytes_per_token, fraction)
        except InputError as exc:
            ranks = f" (each GPU of TP {self.tp} holds one rank's weights)" if self.tp > 1 else ""
            draft = f" with its draft {self.speculation.draft.name}" if self.speculation is not None else ""
            raise InputError(f"{self.model.name}{draft} does not fit {self.gpu_name or 'this GPU'}{ranks}: "
                             f"{exc}") from None

    def running_limit(self, pool_tokens: int) -> int:
        """``max_running_requests`` for a pool of ``pool_tokens`` (the flag; under speculative decoding
        SGLang's 48 when it is unset; else the release's rule)."""
        if self.max_running_requests is not None:
            return min(self.max_running_requests, max(1, pool_tokens // 2))
        if self.speculation is not None:  # SGLang 0.5.23 speculative_hook.py _handle_eagle_family
            return min(SPECULATIVE_MAX_RUNNING_REQUESTS, max(1, pool_tokens // 2))
        context = self.model.max_position_embeddings or pool_tokens
        return self.release.max_running_requests(pool_tokens, context)


def make_setup(
    gpu,
    model: Model,
    cost: CostModelOptions | None = None,
    *,
    calibration=None,
    weight_bytes_per_param: float | None = None,
    kv_bytes_per_element: float = 2.0,
    mem_fraction_static: float | None = None,
    max_prefill_tokens: int = sgl.MAX_PREFILL_TOKENS,
    ignore_eos: bool = False,
    disable_overlap: bool = False,
    cuda_graph_max_bs: int | None = None,
    max_running_requests: int | None = None,
    prefix_cache: bool = True,
    tp: int = 1,
    prefill_cuda_graph: bool | None = None,
    serial_frontend: bool | None = None,
    disable_cuda_graph: bool = False,
    release: ReleaseDefaults | str | None = None,
    speculation: Any = None,
    step_by_step: bool = False,
    **knobs: Any,
) -> Setup:
    """A :class:`Setup` for a GPU profile (:class:`pdmux_cli.catalog.hardware.Gpu`) and a model, with the cost
    model of :func:`pdmux_cli.costmodel.build_step_model`: ``cost`` (a
    :class:`~pdmux_cli.costmodel.options.CostModelOptions`; ``None``: the defaults) with ``knobs`` (its fields
    as keywords, ``step_overhead_ms=0``) on top, and ``calibration``, ``weight_bytes_per_param``,
    ``kv_bytes_per_element``, ``tp``, ``speculation``. ``disable_cuda_graph``: :class:`Setup`'s. ``release``:
    the SGLang release simulated (its version text or
    :class:`~pdmux_cli.sglang.release_defaults.ReleaseDefaults`; ``None``: 0.5.23), whose rules
    ``serial_frontend`` (``None``: the release's front end) and ``prefill_cuda_graph`` default to, and whose
    fused-MoE runner the step model times (:func:`pdmux_cli.costmodel.build_step_model`).
    ``prefill_cuda_graph``: ``None`` for the release's default (up to 0.5.8 eager; later SGLang 0.5.23's,
    :func:`pdmux_cli.sglang.server_defaults.prefill_cuda_graph_default`), ``False`` for a server that
    prefills eagerly (an older release, ``--disable-prefill-cuda-graph``). ``speculation``: :class:`Setup`'s
    (the step model's decode step becomes its round: :func:`pdmux_cli.costmodel.build_step_model`).
    ``step_by_step``: :class:`Setup`'s (the reference step loop). Raises
    :class:`InputError` for a GPU without an SM count, memory or bandwidth figures, or bad values, or a
    release pdmux has not read; :class:`TypeError` for a keyword that is no knob."""
    from ..costmodel import build_step_model
    from ..costmodel.options import CostModelOptions

    cost = (cost or CostModelOptions()).with_knobs(knobs, "make_setup")
    check_efficiency(cost.bandwidth_efficiency, "bandwidth_efficiency", where="bandwidth efficiency")
    check_efficiency(cost.mfu, "mfu", where="MFU")
    total = gpu.require_sm_count()
    if not gpu.memory_bytes or not gpu.hbm_bytes_per_s:
        raise InputError(
            "{name} has no memory or bandwidth figures: simulate needs a full GPU profile ({flag.gpu})",
            values={"name": gpu.name},
        )
    if release is None:
        release = LATEST
    elif not isinstance(release, ReleaseDefaults):
        release = release_defaults(release)
    step_model = build_step_model(
        gpu, model, cost, calibration=calibration, weight_bytes_per_param=weight_bytes_per_param,
        kv_bytes_per_element=kv_bytes_per_element, tp=tp, speculation=speculation, release=release)
    if serial_frontend is None:
        serial_frontend = release.serial_frontend
    if disable_cuda_graph:
        prefill_cuda_graph = False
    if prefill_cuda_graph is None:
        prefill_cuda_graph = release.prefill_cuda_graph
    if prefill_cuda_graph is None:
        prefill_cuda_graph = sgl.prefill_cuda_graph_default(tuple(getattr(model, "architectures", ())),
                                                            tuple(gpu.compute_capability))
    return Setup(
        model=model, step_model=step_model, total_sms=total, compute_capability=tuple(gpu.compute_capability),
        memory_bytes=float(gpu.memory_bytes), weight_bytes_per_param=weight_bytes_per_param,
        kv_bytes_per_element=kv_bytes_per_element, mem_fraction_static=mem_fraction_static,
        max_prefill_tokens=max_prefill_tokens, ignore_eos=ignore_eos, disable_overlap=disable_overlap,
        cuda_graph_max_bs=cuda_graph_max_bs, max_running_requests=max_running_requests, gpu_name=gpu.name,
        prefix_cache=prefix_cache, tp=tp, prefill_cuda_graph=prefill_cuda_graph,
        serial_frontend=serial_frontend, disable_cuda_graph=disable_cuda_graph, release=release,
        speculation=speculation, step_by_step=step_by_step,
    )


class DecodeBatch:
    """The running decode batch as totals, with per-request records for retraction.

    Totals: ``n`` requests; ``sum_context`` (cached tokens, the KV they hold); ``sum_window`` (sum of
    ``min(context, window)``, sliding-window models); ``sum_clip`` (sum of ``min(remaining output,
    clip)``, what admission reserves for them); ``sum_max_new`` (their ``max_new_tokens``) and
    ``sum_remaining``. A member joins with its context, the decode steps it still takes, and the step
    index of its first one; :meth:`complete` advances every member by one token in O(1) plus the
    members that finish or cross the window or clip boundary (heaps keyed by step, with lazily skipped
    entries for retracted members); :meth:`remove` takes one out (retraction). ``growth``: tokens a member's
    KV gains per step (1; under speculative decoding a step is a round and its KV gains the acceptance
    length on average, a float: then contexts are floats, and the window and clip boundaries still count
    steps).
    """

    __slots__ = ("_clip_cross", "_cross", "_finish", "_gen", "below_clip", "below_window", "clip", "growth",
                 "members", "n", "sum_clip", "sum_context", "sum_max_new", "sum_remaining", "sum_window",
                 "window")

    def __init__(self, window: int = 0, clip: int = sgl.CLIP_MAX_NEW_TOKENS, growth: float = 1) -> None:
        self.growth = growth
        self.n = 0
        self.sum_context = 0
        self.sum_window = 0
        self.below_window = 0
        self.sum_clip = 0
        self.below_clip = 0
        self.sum_max_new = 0
        self.sum_remaining = 0
        self.window = window
        self.clip = clip
        #: rid -> [join context, first step, steps, generation, max_new, output tokens before joining]
        self.members: dict[int, list[int]] = {}
        self._finish: list[tuple[int, int, int]] = []
        self._cross: list[tuple[int, int, int]] = []
        self._clip_cross: list[tuple[int, int, int]] = []
        self._gen = 0

    def join(self, rid: int, context: int, steps: int, first_step: int, max_new: int = 0,
             generated: int = 1) -> None:
        """Add request ``rid`` with ``context`` tokens cached, taking ``steps`` (>= 1) decode steps from
        step index ``first_step`` on; ``max_new``: its ``max_new_tokens``; ``generated``: output tokens it
        already has (1 after its first prefill)."""
        self._gen += 1
        gen = self._gen
        self.members[rid] = [context, first_step, steps, gen, max_new, generated]
        self.n += 1
        self.sum_context += context
        self.sum_max_new += max_new
        self.sum_remaining += steps
        heapq.heappush(self._finish, (first_step + steps - 1, rid, gen))
        w = self.window
        if w:
            if context < w:
                self.sum_window += context
                self.below_window += 1
                if w - context <= steps:
                    heapq.heappush(self._cross, (first_step + (w - context) - 1, rid, gen))
            else:
                self.sum_window += w
        c = self.clip
        if steps <= c:
            self.sum_clip += steps
            self.below_clip += 1
        else:
            self.sum_clip += c
            heapq.heappush(self._clip_cross, (first_step + steps - c, rid, gen))

    def _valid(self, rid: int, gen: int) -> bool:
        record = self.members.get(rid)
        return record is not None and record[3] == gen

    def complete(self, step: int) -> list[int]:
        """Step ``step`` is done: every member gained a token (:attr:`growth`). Returns the requests that
        finished."""
        growth = self.growth
        self.sum_context += self.n if growth == 1 else self.n * growth
        self.sum_remaining -= self.n
        self.sum_clip -= self.below_clip
        if self.window:
            self.sum_window += self.below_window
            cross = self._cross
            while cross and cross[0][0] <= step:
                _, rid, gen = heapq.heappop(cross)
                if self._valid(rid, gen):
                    self.below_window -= 1
        clip_cross = self._clip_cross
        while clip_cross and clip_cross[0][0] <= step:
            _, rid, gen = heapq.heappop(clip_cross)
            if self._valid(rid, gen):
                self.below_clip += 1
                self.sum_clip -= 1
        finish = self._finish
        if not finish or finish[0][0] > step:
            return []
        done = []
        while finish and finish[0][0] <= step:
            _, rid, gen = heapq.heappop(finish)
            if not self._valid(rid, gen):
                continue
            done.append(rid)
            self._drop(rid, step + 1)
        return done

    def quiet_steps(self, step: int) -> int:
        """Steps from ``step`` on that :meth:`complete` would pass without an event: no member finishing or
        crossing its window or clip boundary (the heaps' earliest entries, retracted members' stale ones
        included: a bound, never too long); about :data:`QUIET_FOREVER` with none ahead."""
        top = self._finish[0][0] if self._finish else QUIET_FOREVER
        if self._cross and self._cross[0][0] < top:
            top = self._cross[0][0]
        if self._clip_cross and self._clip_cross[0][0] < top:
            top = self._clip_cross[0][0]
        return top - step if top > step else 0

    def advance(self, steps: int, sum_context: float) -> None:
        """``steps`` :meth:`complete` calls at once, none of them an event (within :meth:`quiet_steps`):
        the totals move as they would one step at a time; ``sum_context``: the KV total after them, as
        the scheduler computed it step by step (a float under speculative decoding, summed in order)."""
        self.sum_context = sum_context
        self.sum_remaining -= self.n * steps
        self.sum_clip -= self.below_clip * steps
        if self.window:
            self.sum_window += self.below_window * steps

    def state(self, rid: int, step: int) -> tuple[int, int, int]:
        """``(context, remaining steps, output tokens generated)`` of member ``rid`` before step ``step``."""
        context, first, steps, _, max_new, generated = self.members[rid]
        done = step - first
        growth = self.growth
        if growth != 1:  # KV grows by the mean tokens a round; output tokens are whole, short of the last
            return (context + done * growth, steps - done,
                    min(generated + round(done * growth), max(generated, max_new - 1)))
        return context + done, steps - done, generated + done

    def _drop(self, rid: int, step: int) -> int:
        """Take ``rid`` out before step ``step``; returns its context (tokens it held)."""
        context, remaining, _ = self.state(rid, step)
        record = self.members.pop(rid)
        self.n -= 1
        self.sum_context -= context
        self.sum_max_new -= record[4]
        self.sum_remaining -= remaining
        w = self.window
        if w:
            if context < w:
                self.sum_window -= context
                self.below_window -= 1
            else:
                self.sum_window -= w
        if remaining <= self.clip:
            self.sum_clip -= remaining
            self.below_clip -= 1
        else:
            self.sum_clip -= self.clip
        return context

    def remove(self, rid: int, step: int) -> tuple[int, int]:
        """Retract member ``rid`` before step ``step``: ``(tokens it held, output tokens it had)``."""
        _, _, generated = self.state(rid, step)
        return self._drop(rid, step), generated


@dataclass
class RunResult:
    """The raw record of one policy over one workload (times in seconds from the first arrival).

    Per request ``i`` (trace requests first, then any initial decode requests of a scenario):
    ``arrival_s``, ``prompt_tokens``, ``output_tokens``, ``decode_steps`` (output - 1),
    ``first_token_s`` (``nan`` if it never got one), ``first_step`` (index into ``step_end_s`` of its
    first decode step, -1 when it takes none). ``stints``: for requests that were retracted, every run of
    tokens as ``(time of the token that starts it, first decode step, decode steps)``; a request in
    ``stints`` is judged on them, not on ``first_step`` / ``decode_steps``. ``rejected``: requests that
    never fit in KV memory. ``unfinished``: requests cut short by an SGLang crash (``crashed_at_s``).
    ``step_end_s``: end time of every decode step. ``end_s``: time of the last event. ``idle_s``: seconds
    the GPU had nothing to run. ``group_time_s``: pdmux only, seconds in each stream group (``groups``).
    ``counters``: prefill batches, rounds, retractions... ``kv_pool_tokens``: the pool simulated (one
    server's). ``gpus``: GPUs the policy ran on; ``layout``: how (``"TP 2"``, ``"DP 4 x TP 2"``,
    ``"1P1D x TP 1"``: a :class:`~pdmux_cli.multigpu.disaggregation.Layout`); ``router``: the load-balance
    method between its servers (``""`` for one server). ``server``: per request, the server that served it
    (a DP replica, or a disaggregation's decode instance; -1 where none did), empty for one server;
    ``prefill_server``: a disaggregation's prefill instance per request. ``output_delay_s``: how long a
    token takes from the end of its step to the client (times here are the server's; the metrics add it).
    ``arrival_s`` are the times the client sent each request (a closed-loop client's, as it sent them).
    ``fold``: a streamed run's :class:`~pdmux_cli.simulate.fold.Fold`, holding the per-request results;
    its per-request lists here are then empty, and ``step_end_s`` too. ``tokens_per_step``: output tokens a
    request gets per decode step on average (1; the acceptance length under speculative decoding, where a
    step is a round and ``decode_steps`` are rounds).
    """

    policy: str
    kind: str
    arrival_s: Sequence[float]
    prompt_tokens: Sequence[int]
    output_tokens: Sequence[int]
    decode_steps: Sequence[int]
    first_token_s: list[float]
    first_step: list[int]
    rejected: list[int]
    step_end_s: Sequence[float]
    end_s: float
    idle_s: float
    num_trace_requests: int
    notes: list[str] = field(default_factory=list)
    groups: list | None = None
    group_time_s: list[float] | None = None
    counters: dict = field(default_factory=dict)
    stints: dict[int, list[tuple[float, int, int]]] = field(default_factory=dict)
    unfinished: set[int] = field(default_factory=set)
    crashed_at_s: float | None = None
    kv_pool_tokens: int = 0
    gpus: int = 1
    layout: Layout = field(default_factory=Layout)
    router: str = ""
    server: list[int] = field(default_factory=list)
    prefill_server: list[int] = field(default_factory=list)
    output_delay_s: float = 0.0
    fold: Any = field(default=None, repr=False)
    tokens_per_step: float = 1

    def finish_s(self, rid: int) -> float:
        """When request ``rid`` produced its last token (s); ``nan`` if it never finished."""
        if rid in self.unfinished:
            return math.nan
        runs = self.stints.get(rid)
        if runs:
            token_s, first, steps = runs[-1]
            return self.step_end_s[first + steps - 1] if steps else token_s
        steps = self.decode_steps[rid]
        if steps and self.first_step[rid] >= 0:
            return self.step_end_s[self.first_step[rid] + steps - 1]
        return self.first_token_s[rid]


class _LazyKeys(dict):
    """A streamed run's prefix-cache block keys: computed for a request when first asked for
    (:func:`~pdmux_cli.simulate.prefix_cache.block_keys`), dropped when it finishes."""

    def __init__(self, hashes: Sequence[Sequence[int]], prompt: Sequence[int], block: int = HASH_BLOCK_TOKENS
                 ) -> None:
        super().__init__()
        self.hashes, self.prompt, self.block = hashes, prompt, block

    def __missing__(self, rid: int) -> tuple:
        hashes = self.hashes[rid] if rid < len(self.hashes) else ()
        keys = self[rid] = block_keys(hashes, self.prompt[rid], self.block)
        return keys


class Work:
    """The mutable state every scheduler shares: requests, queue, KV pool, decode batch, records.

    ``capacity``: KV pool tokens. ``extra_held``: KV tokens held outside the decode batch (a request
    being prefilled in chunks, a prefill batch in flight), cached prefixes they matched included.
    ``ratio``: SGLang's ``new_token_ratio``. ``batch_full``: SGLang's ``batch_is_full`` (admission
    paused after a failed one). ``cache``: the prefix cache (:class:`PrefixCache`) when ``hashes`` (per
    request, its prompt's hash ids) has any, else ``None``; ``cache_node``: each request's deepest node
    in it; ``cache_hit_tokens`` / ``cache_prompt_tokens``: cached and prompt tokens of trace requests'
    first admissions (SGLang's first-attempt hit rate leaves re-prefills after a retraction out).
    ``keys``: the prompts' block keys when already computed (replicas of one trace share them).

    ``fold``: a :class:`~pdmux_cli.simulate.fold.Fold` streams the run: each request's results go to it
    when it finishes and its state here is dropped (``first_token``, ``first_step``, ``cache_node``,
    ``keys`` are dicts of the requests in flight), and the step end times are a window
    (:class:`StepEnds`, trimmed by :meth:`tick`). Without one, every record is kept for a
    :class:`RunResult` (lists indexed by request).
    """

    def __init__(self, arrival: Sequence[float], prompt: Sequence[int], output: Sequence[int],
                 steps: Sequence[int], num_trace: int, capacity_tokens: int, window: int, setup: Setup,
                 hashes: Sequence[Sequence[int]] = (), keys: list | None = None, max_concurrency: int = 0,
                 fold=None, block_tokens: int = HASH_BLOCK_TOKENS) -> None:
        n = len(arrival)
        self.fold = fold
        stream = fold is not None
        serving = setup.step_model.serving
        #: seconds from a request's arrival until the scheduler can admit it, and from a token's step to
        #: the client (:class:`pdmux_cli.costmodel.efficiency.ServingProfile`)
        self.admission_delay = serving.admission_delay_s
        self.output_delay = serving.first_token_delay_s
        self.admission_interval = serving.admission_interval_s
        #: the front end's seconds per prompt token (template and tokenizer), and whether requests pass it one
        #: at a time (SGLang <= 0.5.21: on the event loop) or side by side (0.5.22 on: in an executor)
        self.frontend_token = serving.frontend_token_s
        self.serial_frontend = setup.serial_frontend
        #: decode steps for a number of output tokens (rounds under speculative decoding), and whether a step
        #: gives more than one token
        self.decode_steps = setup.decode_steps
        self.multi_token = setup.speculation is not None
        self.tokens_per_step = setup.tokens_per_step
        self.last_seen = -math.inf  # when the scheduler saw the last request received (the front end's queue)
        self._peek: tuple[int, float, float] = (-1, 0.0, 0.0)  # (next, last_seen, when the scheduler sees it)
        self.arrival, self.prompt, self.output, self.steps = arrival, prompt, output, steps
        self.num_trace = num_trace
        self.capacity = capacity_tokens
        self.max_running = setup.running_limit(capacity_tokens)
        self.max_prefill_tokens = setup.max_prefill_tokens
        self.ignore_eos = setup.ignore_eos
        release = setup.release
        #: the admission reserve's ratio for running requests is 1.0 when they ignore EOS (SGLang 0.5.22 on)
        self.full_reserve = setup.ignore_eos and release.full_reserve_for_ignore_eos
        #: retraction stops once this many free tokens per kept request are there (20 up to 0.5.1)
        self.retract_steps = release.retract_steps
        #: the ratio after a retraction divides by max_new + 1 (0.5.4 on) or max_new
        self.retract_plus_one = 1 if release.retract_ratio_plus_one else 0
        self.ratio_init = release.init_new_token_ratio
        self.ratio_floor = release.min_new_token_ratio
        self.ratio_decay = release.new_token_ratio_decay
        self.first_token: list[float] | dict[int, float] = {} if stream else [math.nan] * n
        self.first_step: list[int] | dict[int, int] = {} if stream else [-1] * n
        self.generated: dict[int, int] = {}  # output tokens a request had when it was last retracted (else 0)
        self.stints: dict[int, list[tuple[float, int, int]]] = {}
        self.ends = StepEnds(fold.max_steps if stream else None)
        self.batch = DecodeBatch(window, growth=setup.tokens_per_step)
        self.waiting: deque[int] = deque()
        self.extra_held = 0
        self.ratio = self.ratio_init
        self.batch_full = False
        self.retractions = 0
        # never admitted: more than the pool holds, or too much to pass admission into an empty pool
        clip = sgl.CLIP_MAX_NEW_TOKENS
        self.rejected = [i for i in range(num_trace)
                         if prompt[i] + output[i] > capacity_tokens
                         or prompt[i] + min(output[i], clip) + 1 >= capacity_tokens]
        rejected = set(self.rejected)
        kept = (i for i in range(num_trace) if i not in rejected) if rejected else range(num_trace)
        self.order = array("q", kept)
        self.next = 0  # index into order of the next arrival
        # a closed-loop client (bench_serving --max-concurrency): only the first `sent` requests of `order`
        # have been sent; each finished one lets the next go, at its scheduled arrival or when the client
        # got the last token, whichever is later (`arrival` is rewritten to that send time)
        self.max_concurrency = max_concurrency
        self.sent = min(max_concurrency, len(self.order)) if max_concurrency else -1
        self.finished = 0
        # request being prefilled in chunks, and its tokens done so far (cached included)
        self.chunked_rid = -1
        self.chunked_done = 0
        has_hashes = hashes.any_values() if isinstance(hashes, Ragged) else any(hashes)
        self.block = block_tokens  # tokens a prefix hash id stands for (the trace's)
        self.cache = PrefixCache(block_tokens) if has_hashes else None
        #: per request, its prompt's blocks as the prefix cache keys them
        if self.cache is None:
            self.keys = []
        elif stream:
            self.keys = _LazyKeys(hashes, prompt, block_tokens)
        else:
            self.keys = keys if keys is not None else [block_keys(h, p, block_tokens)
                                                       for h, p in zip(hashes, prompt)]
        if self.cache is None:
            self.cache_node = []
        else:
            self.cache_node = {} if stream else [0] * n
        self.cache_hit_tokens = 0
        self.cache_prompt_tokens = 0
        self.prefill_passes = 0  # scheduling passes with requests waiting (SGLang's calc_priority calls)
        # behind a router (pdmux_cli.simulate.cluster): the scheduler pauses before a round starting at
        # or past `horizon` (s); `open`: more requests may still be routed here; `finished_mark`: requests
        # finished before the round that is running (the router's count of outstanding requests)
        self.horizon = math.inf
        self.open = False
        self.finished_mark = 0
        #: a run cut in time (:mod:`pdmux_cli.simulate.time_split`): called by the default loop each time the
        #: server is idle, ``(t, the next arrival's start, deferred rounds, prefill batches, mixed steps)``;
        #: true ends the run there
        self.on_idle: Callable[[float, float, int, int, int], bool] | None = None

    # ---------------------------------------------------------------------------------------------
    def receive(self, t: float) -> None:
        """Move every request the scheduler can see by ``t`` (s) to the waiting queue: arrived by
        ``t - admission delay``, through the front end one per admission interval (plus its prompt's
        tokenization: :meth:`_seen`), and sent by a closed-loop client."""
        order, arrival, i = self.order, self.arrival, self.next
        n = len(order) if self.sent < 0 else self.sent
        delay, interval = self.admission_delay, self.admission_interval
        if interval or self.frontend_token:
            last = self.last_seen
            while i < n:
                seen = self._seen(order[i], last)
                if seen > t:
                    self._peek = (i, last, seen)  # next_arrival_time's answer, until one is received
                    break
                self.waiting.append(order[i])
                last = seen
                i += 1
            self.last_seen = last
        else:  # arrival + delay, as next_arrival_time computes it (t - delay could round below it)
            while i < n and arrival[order[i]] + delay <= t:
                self.waiting.append(order[i])
                i += 1
        self.next = i

    def _seen(self, rid: int, last: float) -> float:
        """When the scheduler sees ``rid``, the previous request having been seen at ``last``: its arrival
        plus the admission delay, at least one admission interval after the previous one, plus its own
        tokenization (``frontend_token`` x prompt tokens), after the previous request's where the front end
        takes one request at a time (``serial_frontend``)."""
        tokenize = self.frontend_token * self.prompt[rid]
        if self.serial_frontend:
            return max(self.arrival[rid] + self.admission_delay, last + self.admission_interval) + tokenize
        return max(self.arrival[rid] + self.admission_delay + tokenize, last + self.admission_interval)

    def next_arrival_time(self) -> float:
        """When the scheduler sees the next request not yet received (its arrival plus the admission
        delay, s); ``math.inf`` when none is (yet): none left, or a closed-loop client waiting."""
        i = self.next
        if i < (len(self.order) if self.sent < 0 else self.sent):
            if self.admission_interval or self.frontend_token:
                peek = self._peek  # receive's last look at request i, after the same one (a sent one's
                if peek[0] == i and peek[1] == self.last_seen:  # arrival is never rewritten)
                    return peek[2]
                return self._seen(self.order[i], self.last_seen)
            return self.arrival[self.order[i]] + self.admission_delay
        return math.inf

    def next_arrival(self) -> float | None:
        """:meth:`next_arrival_time`, ``None`` instead of ``math.inf``."""
        t = self.next_arrival_time()
        return None if t == math.inf else t

    def _send_next(self, finished: int, t: float) -> None:
        """Closed loop: ``finished`` requests finished on the server at ``t`` (s); the client gets their
        last token ``output_delay`` later and sends as many new ones (each at its scheduled arrival if
        that is later)."""
        order, arrival = self.order, self.arrival
        free_at = t + self.output_delay
        for _ in range(finished):
            if self.sent >= len(order):
                return
            rid = order[self.sent]
            arrival[rid] = max(arrival[rid], free_at)
            self.sent += 1

    @property
    def free(self) -> int:
        """KV slots not held by running, chunked or in-flight requests (finished requests' tokens, left
        in SGLang's radix cache, count as free: they are evicted on demand; cached blocks several running
        requests share are held once)."""
        cache = self.cache
        if cache is None:
            return self.capacity - self.batch.sum_context - self.extra_held
        return self.capacity - self.batch.sum_context - self.extra_held + cache.shared

    def make_room(self, tokens: int) -> None:
        """An allocation of ``tokens`` KV slots is coming: evict unlocked cached tokens, least recently
        used first, until that many are unused (SGLang's ``evict_to_free_tokens``). No-op without a cache."""
        cache = self.cache
        if cache is not None:
            limit = self.capacity - self.batch.sum_context - self.extra_held + cache.shared - tokens
            if cache.evictable > limit:
                cache.evict(limit)

    def warm_cache(self, count: int) -> None:
        """The radix cache as a client's warm-up on the same server left it
        (:attr:`~pdmux_cli.simulate.traces.Trace.warm_requests`): the first ``count`` trace requests each
        prefilled, decoded to its last token and released (SGLang's ``cache_finished_req``: a finished
        request's prompt and outputs stay in the tree, unlocked), one after another, the least recently
        used evicted past the KV pool (nothing runs yet: the whole pool is the cache's). The warm-up sent
        them ``max_concurrency`` at a time; one after another here, the tree ends the same wherever the pool
        holds them all. A request the pool cannot hold is left out; the cache's counters start at 0 after
        it. Each server of a deployment is warmed with them all (a router would have spread them). No-op
        without a prefix cache."""
        cache = self.cache
        if cache is None:
            return
        prompt, output = self.prompt, self.output
        for rid in range(min(count, self.num_trace)):
            context = prompt[rid] + output[rid] - 1  # the last token's KV is never written
            if context >= self.capacity:
                continue
            keys = self.keys[rid]
            node, _ = cache.match(keys)
            cache.lock_path(node)
            node = cache.extend(node, keys, len(keys), -2 - rid)  # an owner no request of the run is
            cache.release(node, context - cache.cum[node])
            if cache.evictable > self.capacity:
                cache.evict(self.capacity)
        cache.evicted_tokens = 0

    def _cache_done(self, rid: int, done: int) -> None:
        """``rid`` has ``done`` tokens prefilled: its complete prompt blocks among them enter the cache
        under its lock (SGLang's ``checkpoint_kv_cache`` after a chunk or a prefill)."""
        keys = self.keys[rid]
        blocks = len(keys) if done >= self.prompt[rid] else min(done // self.block, len(keys))
        cache = self.cache
        node = self.cache_node[rid]
        if blocks > cache.depth[node]:
            self.cache_node[rid] = cache.extend(node, keys, blocks, rid)

    def extend_tokens(self, rid: int) -> int:
        """Tokens a prefill of ``rid`` computes: its prompt, plus the outputs it had if it was retracted."""
        return self.prompt[rid] + self.generated.get(rid, 0)

    def form_prefill_batch(self, chunk_tokens: int | None,
                           mixed_rows: int = 0) -> tuple[list[tuple[int, int]], list[int]]:
        """One prefill batch as SGLang's ``PrefillAdder`` forms it (module docstring).

        ``chunk_tokens``: the chunk size (``None``: chunking off). ``mixed_rows``: decode rows riding in
        the batch (``--enable-mixed-chunk``), charged one token each against every budget.
        Returns ``(seqs, completing)``: ``(new tokens, cached tokens)`` per sequence (cached: its
        prompt's matched prefix, plus earlier chunks), and the requests whose prefill this batch
        completes (in order). Allocates the batch's KV (``extra_held``), evicting cached tokens for it
        and for the decode rows' slots when they ride (when ``free >= mixed_rows`` after it, as
        :func:`~pdmux_cli.simulate.schedulers.run_baseline` decides).
        """
        seqs: list[tuple[int, int]] = []
        completing: list[int] = []
        rem_input = self.max_prefill_tokens - mixed_rows
        rem_chunk = None if chunk_tokens is None else chunk_tokens - mixed_rows
        ratio = 1.0 if self.full_reserve else self.ratio
        offset = ratio * self.batch.sum_clip + mixed_rows
        clip = self.batch.clip
        allocated = 0
        waiting = self.waiting
        cache = self.cache
        chunked, done_before = self.chunked_rid, self.chunked_done
        if cache is not None:
            if chunked >= 0:
                # SGLang checkpoints each chunk into the tree after its step. Growing the request's own
                # leaf (PrefixCache.extend) changes nothing but what a match can find, so it waits for the
                # next match (below); anything else (a first node, a node shared or with children) is done
                # now.
                node = self.cache_node[chunked]
                if not (node and cache.owner[node] == chunked and cache.lock[node] == 1
                        and not cache.kids[node]):
                    self._cache_done(chunked, done_before)
            if waiting:  # calc_priority's _touch_waiting_prefixes: every 32nd pass, the queue's head last
                if self.prefill_passes % WAITING_PREFIX_REFRESH_INTERVAL == 0:
                    if chunked >= 0:
                        self._cache_done(chunked, done_before)
                    keys = self.keys
                    head = list(itertools.islice(waiting, WAITING_PREFIX_REFRESH_MAX))
                    cache.refresh([keys[rid] for rid in reversed(head)])
                self.prefill_passes += 1
        free = self.free
        if self.chunked_rid >= 0:  # the cut request goes first, past the batch-full and slot checks
            rid = self.chunked_rid
            left = self.extend_tokens(rid) - self.chunked_done
            take = max(1, min(left, rem_chunk if rem_chunk is not None else left))
            seqs.append((take, self.chunked_done))
            allocated += take
            rem_input -= take
            if rem_chunk is not None:
                rem_chunk -= take
            if take == left:
                completing.append(rid)
                offset += take + 1 + min(self.output[rid] - self.generated.get(rid, 0), clip)
                self.chunked_rid = -1
                self.chunked_done = 0
            else:
                offset += take + 1
                self.chunked_done += take
        # SGLang stops when the batch's requests (the continuing chunked one included) reach the request
        # rows left (scheduler.py get_new_batch_prefill: len(can_run_list) >= get_num_allocatable_reqs)
        slots = self.max_running - self.batch.n
        if cache is not None and chunked >= 0 and self.chunked_rid < 0 and waiting:
            self._cache_done(chunked, done_before)  # its earlier chunks, before candidates are matched
        while waiting and self.chunked_rid < 0 and not self.batch_full:
            if rem_input <= 0 or (rem_chunk is not None and rem_chunk <= 0):
                break
            if len(seqs) >= slots:
                self.batch_full = True
                break
            rid = waiting[0]
            extend = self.extend_tokens(rid)
            cached = pinned = node = 0
            if cache is not None:  # init_next_round_input: match, at most extend - 1 tokens
                node, pinned = cache.match(self.keys[rid])  # pinned: matched tokens no one locks
                cached = min(cache.cum[node], extend - 1)
            new = extend - cached
            reserve = min(self.output[rid] - self.generated.get(rid, 0), clip)
            if not new + reserve + 1 < free - offset - pinned:
                self.batch_full = bool(seqs) or self.batch.n > 0
                break
            if chunk_tokens is None and seqs and new >= rem_input:
                break
            waiting.popleft()
            if cache is not None:
                cache.lock_path(node)
                self.cache_node[rid] = node
                offset += pinned
                if rid < self.num_trace and not self.generated.get(rid, 0) and rid not in self.stints:
                    self.cache_hit_tokens += cached
                    self.cache_prompt_tokens += extend
            if rem_chunk is not None and new > rem_chunk:  # cut: this request continues next batch
                take = rem_chunk
                self.chunked_rid, self.chunked_done = rid, cached + take
                offset += take + 1
            else:
                take = new
                completing.append(rid)
                offset += take + 1 + reserve
            seqs.append((take, cached))
            allocated += cached + take
            rem_input -= take
            if rem_chunk is not None:
                rem_chunk -= take
        self.extra_held += allocated
        if cache is not None and seqs:  # evict for the batch, and for the decode rows when they ride
            free = self.free
            limit = free - mixed_rows if free >= mixed_rows else free
            if cache.evictable > limit:
                cache.evict(limit)
        return seqs, completing

    # ---------------------------------------------------------------------------------------------
    def first_tokens(self, rids: Sequence[int], t: float) -> None:
        """``rids`` got a token at ``t`` (s) from a prefill: they join decode from the next step on, or
        finish now when that was their last token. Their prefilled KV moves from ``extra_held`` to
        the decode batch; their prompt blocks enter the prefix cache."""
        step = self.ends.total
        batch, output = self.batch, self.output
        cache = self.cache
        for rid in rids:
            context = self.extend_tokens(rid)
            self.extra_held -= context
            if cache is not None:
                self._cache_done(rid, context)
            generated = self.generated.get(rid, 0) + 1
            steps = output[rid] - generated
            if self.multi_token:
                steps = self.decode_steps(steps)
            if rid in self.stints or self.generated.get(rid, 0):  # a re-prefill after a retraction
                self.stints.setdefault(rid, []).append((t, step, max(steps, 0)))
            else:
                self.first_token[rid] = t
                self.first_step[rid] = step if steps > 0 else -1
            if steps > 0:
                batch.join(rid, context, steps, step, output[rid], generated)
            else:
                self.finished += 1
                if cache is not None:
                    self._cache_release(rid, context)
                if self.sent >= 0:
                    self._send_next(1, t)
                if self.fold is not None:
                    self._done(rid)

    def _done(self, rid: int) -> None:
        """A streamed run: ``rid`` produced its last token; its results go to the fold, its state here
        goes."""
        stints = self.stints.pop(rid, None)
        tokens = self.output[rid] - 1
        multi = self.multi_token
        self.fold.request(rid, self.first_token.pop(rid, math.nan), self.first_step.pop(rid, -1),
                          self.decode_steps(tokens) if multi else tokens, self.ends, stints,
                          tokens if multi else None)
        self.generated.pop(rid, None)
        if self.cache is not None:
            self.cache_node.pop(rid, None)
            self.keys.pop(rid, None)

    def tick(self) -> None:
        """Every few thousand decode steps: the step limit or budget (:meth:`StepEnds.check_room`); a
        streamed run also folds the step end times no request in flight needs any more (before the first
        step of every running request's current run and of every retracted request's first) and writes
        the ``--csv`` rows that are final. Raises :class:`~pdmux_cli.simulate.fold.TargetMissed` for a
        fold told to stop below a target it cannot reach (:attr:`~pdmux_cli.simulate.fold.Fold.stop_below`).
        """
        ends = self.ends
        ends.check_room()
        fold = self.fold
        if fold is None:
            return
        fold.flush(ends)
        fold.check_target()
        left = ends.total
        for record in self.batch.members.values():
            left = min(left, record[1])
        for runs in self.stints.values():
            left = min(left, runs[0][1])
        if left - ends.base >= max(STEP_CHECK_EVERY, len(ends) // 2):
            fold.fold_steps(ends, left)
        if fold.csv is not None:
            fold.csv.flush(fold.columns)
        if fold.progress_steps is not None:
            fold.progress_steps(ends.total)

    def _cache_release(self, rid: int, context: int) -> None:
        """``rid`` finished holding ``context`` tokens: they stay cached, unlocked (``release_kv_cache``)."""
        node = self.cache_node[rid]
        self.cache.release(node, context - self.cache.cum[node])
        self.cache_node[rid] = 0

    def release(self, rids: Sequence[int], t: float = 0.0) -> None:
        """``rids`` finished decoding at ``t`` (s) (the batch already freed their KV; they leave it in the
        prefix cache, unlocked); a closed-loop client sends as many new requests."""
        self.finished += len(rids)
        if self.sent >= 0:
            self._send_next(len(rids), t)
        if self.cache is not None:
            prompt, output = self.prompt, self.output
            for rid in rids:
                # the last token's KV is never written
                self._cache_release(rid, prompt[rid] + output[rid] - 1)
        if self.fold is not None:
            for rid in rids:
                self._done(rid)

    def check_decode_memory(self) -> list[int]:
        """Before a decode step: when a running request has no free KV slot, retract requests until every
        kept one has ``retract_steps`` (SGLang's ``check_decode_mem`` / ``retract_decode``: one slot from
        0.5.2, 20 up to 0.5.1; cached tokens no one locks count as free and are evicted first); returns the
        retracted ones (appended to the queue)."""
        batch = self.batch
        cache = self.cache
        if cache is None:
            if self.capacity - batch.sum_context - self.extra_held >= batch.n or batch.n <= 1:
                return []
        else:
            free = self.capacity - batch.sum_context - self.extra_held + cache.shared
            if free >= batch.n or batch.n <= 1:
                if cache.evictable > free - batch.n:
                    cache.evict(free - batch.n)
                return []
        step = self.ends.total
        # fewest generated tokens first, ties to the longest prompt
        order = sorted(batch.members, key=lambda r: (batch.state(r, step)[2], -self.prompt[r]))
        retracted = []
        steps = self.retract_steps
        for rid in order:
            if self.free >= batch.n * steps or batch.n <= 1:
                break
            _, generated = batch.remove(rid, step)
            self.generated[rid] = generated
            if self.cache is not None:  # its prompt stays cached, unlocked; its outputs are freed
                self.cache.unlock_path(self.cache_node[rid])
                self.cache_node[rid] = 0
                self.make_room(batch.n * sgl.RETRACT_DECODE_STEPS)  # release_req evicts for the rest
            if rid not in self.stints:
                self.stints[rid] = [(self.first_token[rid], self.first_step[rid],
                                     step - self.first_step[rid])]
            else:
                t0, first, _ = self.stints[rid][-1]
                self.stints[rid][-1] = (t0, first, step - first)
            self.waiting.append(rid)
            retracted.append(rid)
        self.retractions += len(retracted)
        self.make_room(batch.n)
        if batch.n:
            generated = batch.sum_max_new - batch.sum_remaining
            self.ratio = min(1.0, (generated + sgl.RETRACT_DECODE_STEPS * batch.n)
                             / (batch.sum_max_new + self.retract_plus_one))
        self.batch_full = False
        return retracted

    def decay_ratio(self) -> None:
        """One decode step without retraction: ``new_token_ratio`` decays toward its floor."""
        if self.ratio > self.ratio_floor:
            self.ratio = max(self.ratio_floor, self.ratio - self.ratio_decay)

    def decay_ratio_steps(self, steps: int) -> None:
        """``steps`` decode steps without retraction: :meth:`decay_ratio` that many times, the same float
        (looked up in :func:`ratio_chain`, the same subtractions made once per release)."""
        ratio = self.ratio
        if not ratio > self.ratio_floor or steps < 1:
            return
        chain = ratio_chain(ratio, self.ratio_floor, self.ratio_decay, steps)
        if chain is None:  # one by one (a decay too slow to tabulate, a short run off the chains kept)
            floor, decay = self.ratio_floor, self.ratio_decay
            for _ in range(steps):
                ratio -= decay
                if not ratio > floor:
                    ratio = floor
                    break
            self.ratio = ratio
            return
        values, at = chain
        i = at[ratio] + steps
        self.ratio = values[i] if i < len(values) else values[-1]

    def idle(self) -> None:
        """The server is fully idle: SGLang resets ``new_token_ratio``."""
        self.ratio = self.ratio_init
        self.batch_full = False

    def cache_counters(self) -> dict[str, int]:
        """The prefix cache's counters for :attr:`RunResult.counters` (empty without a cache): tokens
        cached and prompt tokens of trace requests' first admissions, tokens evicted."""
        if self.cache is None:
            return {}
        return {"prefix_cache_hit_tokens": self.cache_hit_tokens,
                "prefix_cache_prompt_tokens": self.cache_prompt_tokens,
                "prefix_cache_evicted_tokens": self.cache.evicted_tokens}

    def pending(self) -> set[int]:
        """Requests not finished (after a crash): waiting, being prefilled, or decoding."""
        out = set(self.waiting) | set(self.batch.members) | set(self.order[self.next:])
        if self.chunked_rid >= 0:
            out.add(self.chunked_rid)
        return out


def prefix_cache_in_play(trace, setup: Setup) -> bool:
    """Whether a run of ``trace`` on ``setup`` simulates the prefix cache: ``setup.prefix_cache`` on and the
    trace has hash ids (:func:`build_work`)."""
    given = getattr(trace, "hash_ids", ())
    return setup.prefix_cache and bool(given.any_values() if isinstance(given, Ragged) else any(given))


def build_work(trace, setup: Setup, capacity_tokens: int, initial_decode: Sequence[tuple[int, int]] = (),
               keys: list | None = None, max_concurrency: int = 0, fold=None) -> Work:
    """The :class:`Work` for a trace (:class:`pdmux_cli.simulate.traces.Trace`) and a KV pool of
    ``capacity_tokens``, plus optional running decode requests ``(context_tokens, remaining_decode_steps)``
    present at time 0 (their first token counts as produced at 0; they take KV at once). ``keys``: the
    prompts' prefix-cache block keys when another server of the same trace computed them. The prefix
    cache is simulated when ``setup.prefix_cache`` is on and the trace has ``hash_ids``.
    ``max_concurrency``: a closed-loop client with that many requests in flight (0: open loop).
    ``fold``: stream the run into a :class:`~pdmux_cli.simulate.fold.Fold` (the trace's columns are read
    in place, the arrivals copied: 8 bytes a request). The trace's warm-up requests
    (:attr:`~pdmux_cli.simulate.traces.Trace.warm_requests`) fill the prefix cache first
    (:meth:`Work.warm_cache`). Raises :class:`InputError` when the initial requests do not fit in KV memory
    or have non-positive sizes."""
    stream = fold is not None
    if stream:
        arrival = array("d", trace.arrival_s)  # a copy: a closed-loop client rewrites it
        if initial_decode:
            prompt, output = array("q", trace.prompt_tokens), array("q", trace.output_tokens)
        else:
            prompt, output = fast(trace.prompt_tokens), fast(trace.output_tokens)
        steps: Sequence[int] = ()  # output - 1, not kept
    else:
        arrival = list(trace.arrival_s)
        prompt = list(trace.prompt_tokens)
        output = list(trace.output_tokens)
        steps = [setup.decode_steps(o - 1) for o in output]
    n = len(arrival)
    for context, remaining in initial_decode:
        if context < 1 or remaining < 1:
            raise InputError("initial decode requests need context >= 1 and remaining steps >= 1, got "
                             f"{context}, {remaining}")
        arrival.append(0.0)
        prompt.append(context)
        output.append(remaining + 1)
        if not stream:
            steps.append(setup.decode_steps(remaining))
    window = setup.model.sliding_window if setup.model.num_sliding_layers else 0
    hashes: Sequence = ()
    if prefix_cache_in_play(trace, setup):
        hashes = trace.hash_ids if stream else list(trace.hash_ids) + [()] * (len(arrival) - n)
    work = Work(arrival, prompt, output, steps, n, capacity_tokens, window, setup, hashes, keys,
                max_concurrency, fold, getattr(trace, "block_tokens", HASH_BLOCK_TOKENS))
    work.warm_cache(getattr(trace, "warm_requests", 0))
    held = sum(prompt[rid] for rid in range(n, len(arrival)))
    if held + len(arrival) - n > capacity_tokens:
        raise InputError(f"the initial decode batch needs {held} KV tokens, more than the {capacity_tokens} "
                         "that fit")
    for rid in range(n, len(arrival)):
        work.first_token[rid] = 0.0
        work.first_step[rid] = 0
        work.batch.join(rid, prompt[rid], setup.decode_steps(output[rid] - 1), 0, output[rid], 1)
    return work
