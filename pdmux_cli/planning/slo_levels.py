"""SLO-aware levels: an ITL target compiled into SGLang's ``manual_divisions``.

The published PD-multiplexing results (LMSYS blog 2025-09-28; arXiv 2504.14489, MuxWise) come from a
dispatcher that gives decode just enough SMs to meet the ITL SLO and the rest to prefill. SGLang 0.5.23
ships only the linear rule (``decode_bs x levels // decode_bs_divisor``), which picks decode SMs by batch
size, not by latency; its ``manual_divisions`` (``[prefill_sm, decode_sm, decode_bs_threshold]`` per
level) can express the published policy. This module computes them. Pure: no I/O, no printing.

**The ITL of a level.** A pdmux round with a prefill in flight lasts one decode step on the decode
partition, next to the prefill on the other SMs, plus the CPU's work
(:func:`pdmux_cli.costmodel.pdmux_round.pdmux_round_s`, the function the simulator times rounds with), so
the predicted ITL of ``n`` decoding requests on a level is that round at the batch's KV
(:class:`BatchContext`): what ``pdmux simulate`` shows for the same YAML.

**The rule** (:func:`compile_levels`). For each decode batch size ``n`` from 1 to the largest batch the KV
pool holds (:func:`largest_batch`), the fewest decode SMs among the candidate splits whose round meets
the target, never fewer than a smaller batch got (so the levels' thresholds increase, as the
unreleased SGLang requires; more requests never get fewer SMs). Where even the largest decode share
misses the target, the largest share is kept and :attr:`SloLevels.unmeetable_from` says from which batch
on. When more distinct levels are needed than the stream groups allow (``max_levels``), levels are
merged into the next larger one kept, choosing the merges that give prefill back the most SM-batches
(decode SMs above the need, summed over batch sizes 1..N; exact, by dynamic programming), never a merge
that would miss the target where it was met.

**SGLang's semantics** (0.5.23 ``srt/multiplex/multiplexing_mixin.py`` ``adjust_stream_groups``): with a
prefill running and ``decode_bs`` requests decoding, every entry ``i`` whose threshold is ``<=
decode_bs`` sets the stream group to ``i + 1``: the last match wins, ``>=`` (not strict). When no entry
matches, the variable is never assigned and 0.5.23 dies with UnboundLocalError; a running batch has at
least one request, so the first level's threshold is written as 0. The thresholds strictly increase
(the unreleased loader refuses anything else, :func:`pdmux_cli.sglang.pdmux_config.validate`), so level ``i``
covers batch sizes from its threshold up to the next level's threshold - 1.

**Candidate splits** (:func:`candidate_splits`): the ones SGLang's own level rule chooses from
(``pdmux_context.py`` ``divide_sm``: prefill at least half the SMs, decode at least 16), at the CUDA
driver's granularity, so each runs exactly as written (``policy.driver_split``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any

from ..sglang import pdmux_config as pc
from ..sglang import split_levels
from ..util.errors import InputError

#: The share of decode batches whose KV the levels are sized for, with a trace's context distribution
#: (:func:`trace_context`): its 99th percentile, as ITL p99 is the figure SLOs name.
DEFAULT_QUANTILE = 0.99

#: Largest decode batch :func:`compile_levels` sizes levels for (SGLang's own cap on
#: ``max_running_requests`` is 4096, ``kv_cache_configurator.py`` ``resolve_max_num_reqs``).
MAX_BATCH = 4096


def check_target_ms(value: Any, param: str = "slo_itl") -> float:
    """``value`` as an ITL target in ms: a finite number > 0; :class:`InputError` about ``param`` (the
    parameter's Python name: the CLI prints its flag, ``--slo-itl``, the Python API its keyword) otherwise
    (0, negative, NaN, infinite, not a number)."""
    if isinstance(value, bool) or not isinstance(value,
                                                 (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError("{param_flag} must be a number of ms > 0 (the ITL target), got {value}", param=param,
                         values={"value": value})
    return float(value)


@dataclass(frozen=True)
class BatchContext:
    """The KV a decode batch holds, as the levels are sized for it.

    Per decoding request, over its decode steps: ``mean_tokens`` and ``sd_tokens`` (its cached tokens:
    prompt plus outputs so far), ``min_tokens``/``max_tokens``; the same for ``min(context, window)``
    (``mean_window``, ``sd_window``, ``window``: the sliding window of a model with one, tokens, else 0).
    ``quantile``: the share of batches whose KV :meth:`sums` covers (normal approximation of a sum of
    ``n`` independent requests: ``n x mean + z x sd x sqrt(n)``, within ``n x`` the smallest and largest
    context); a fixed context has ``sd_tokens`` 0. ``source``: one phrase for output.
    """

    mean_tokens: float
    sd_tokens: float
    min_tokens: float
    max_tokens: float
    mean_window: float = 0.0
    sd_window: float = 0.0
    window: int = 0
    quantile: float = DEFAULT_QUANTILE
    source: str = ""

    def sums(self, n: int) -> tuple[float, float]:
        """``(sum_context, sum_window)`` tokens of a batch of ``n`` requests at :attr:`quantile`."""
        z = NormalDist().inv_cdf(self.quantile) if self.sd_tokens or self.sd_window else 0.0
        root = math.sqrt(n)
        context = min(n * self.max_tokens,
                      max(n * self.min_tokens, n * self.mean_tokens + z * self.sd_tokens * root))
        if not self.window:
            return context, 0.0
        low = min(self.min_tokens, self.window)
        high = min(self.max_tokens, self.window)
        window = min(n * high, max(n * low, n * self.mean_window + z * self.sd_window * root))
        return context, window


def fixed_context(tokens: int, window: int = 0) -> BatchContext:
    """Every decoding request holds ``tokens`` cached tokens (``--context``); ``window``: the model's
    sliding window (0: none). Raises :class:`InputError` for ``tokens < 1``."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise InputError("{flag.context} must be a number of tokens >= 1, got {tokens}", param="context",
                         values={"tokens": tokens})
    capped = min(tokens, window) if window else 0
    return BatchContext(float(tokens), 0.0, float(tokens), float(tokens), float(capped), 0.0, window,
                        source=f"{tokens} tokens of context a request")


def _moments(first: int, count: int) -> tuple[float, float]:
    """Sum and sum of squares of the ``count`` integers ``first, first + 1, ...``."""
    last = first + count - 1
    total = count * (first + last) / 2
    squares = (last * (last + 1) * (2 * last + 1) - (first - 1) * first * (2 * first - 1)) / 6
    return total, squares


def trace_context(prompt_tokens: Sequence[int], output_tokens: Sequence[int], window: int = 0,
                  quantile: float = DEFAULT_QUANTILE, source: str = "") -> BatchContext:
    """The context distribution of a trace's decode steps, each step of each request counted once.

    A request of ``P`` prompt and ``O`` output tokens decodes ``O - 1`` steps (its first token comes from
    the prefill) at ``P, P + 1, ..., P + O - 2`` cached tokens, as the simulator's batch holds it
    (:class:`pdmux_cli.simulate.engine.DecodeBatch`): a batch met at a random decode step holds requests
    drawn by their decode steps, so a long output weighs more. ``window``: the model's sliding window (0:
    none). Raises :class:`InputError` when no request decodes (every output is one token), for a
    ``quantile`` outside 0.5-0.9999, or sequences of different lengths.
    """
    if len(prompt_tokens) != len(output_tokens):
        raise InputError(f"{len(prompt_tokens)} prompt lengths for {len(output_tokens)} output lengths")
    if not (isinstance(quantile, (int, float)) and 0.5 <= quantile <= 0.9999):
        raise InputError(f"the context quantile must be from 0.5 to 0.9999, got {quantile}")
    steps = total = squares = 0.0
    w_total = w_squares = 0.0
    low, high = math.inf, 0
    for prompt, output in zip(prompt_tokens, output_tokens):
        m = output - 1
        if m <= 0:
            continue
        steps += m
        s, q = _moments(prompt, m)
        total += s
        squares += q
        low, high = min(low, prompt), max(high, prompt + m - 1)
        if window:
            below = max(0, min(m, window - prompt))  # steps with context < window
            s, q = _moments(prompt, below) if below else (0.0, 0.0)
            w_total += s + (m - below) * window
            w_squares += q + (m - below) * window * window
    if not steps:
        raise InputError(
            "no request of the trace decodes (every output is one token): there is no decode batch "
            "to size levels for; give {flag.context}",
            param="context",
            values={},
        )
    mean = total / steps
    sd = math.sqrt(max(0.0, squares / steps - mean * mean))
    w_mean = w_total / steps if window else 0.0
    w_sd = math.sqrt(max(0.0, w_squares / steps - w_mean * w_mean)) if window else 0.0
    what = source or "the trace"
    return BatchContext(mean, sd, float(low), float(high), w_mean, w_sd, window, quantile,
                        f"the decode steps of {what}: mean {mean:.0f} tokens of context a request, sd "
                        f"{sd:.0f}; a batch's KV at its p{quantile * 100:g}, its requests taken as "
                        "independent")


def candidate_splits(total_sms: int, cc: tuple[int, int]) -> list[split_levels.Split]:
    """The splits levels are chosen from, fewest decode SMs first: every prefill count SGLang's level
    rule considers (:func:`pdmux_cli.sglang.split_levels.candidate_prefill_sms`: at least half the SMs to
    prefill, at least 16 to decode) in steps of the CUDA driver's granularity
    (:func:`pdmux_cli.sglang.split_levels.cuda_sm_granularity`), decode the rest: each runs exactly as
    written. Raises :class:`InputError` when there is none."""
    minimum, multiple = split_levels.cuda_sm_granularity(cc[0])
    prefills = split_levels.candidate_prefill_sms(total_sms, minimum, multiple)
    if not prefills:
        raise InputError(f"no SM split for {total_sms} SMs at compute capability {cc[0]}.{cc[1]}: decode "
                         f"needs at least {split_levels.MIN_DECODE_SMS} SMs and prefill at least half, in "
                         f"steps of {multiple}")
    return [split_levels.Split(p, total_sms - p) for p in reversed(prefills)]


@dataclass(frozen=True)
class Level:
    """One level of the compiled config: ``prefill_sms``/``decode_sms`` (SMs), the decode batch sizes it
    serves (``first_bs`` to ``last_bs``, requests; its threshold is ``first_bs``, 0 for the first level),
    and the predicted ITL over them (``itl_min_ms``, ``itl_max_ms``: the round with a prefill running)."""

    prefill_sms: int
    decode_sms: int
    first_bs: int
    last_bs: int
    itl_min_ms: float
    itl_max_ms: float


@dataclass(frozen=True)
class SloLevels:
    """The levels for an ITL target (:func:`compile_levels`).

    ``target_ms``: the target the levels meet. ``levels``: fewest decode SMs first. ``max_bs``: the
    largest decode batch sized for. ``unmeetable_from``: the smallest batch at which even the largest
    decode share misses the target (``None``: met everywhere), with its ITL there
    (``unmeetable_itl_ms``) and at ``max_bs`` (``itl_at_max_ms``, on the largest share). ``needed``: the
    distinct levels the rule asked for before merging to ``max_levels``. ``candidates``: the splits chosen
    from. ``itl_ms``: the predicted ITL of every batch size 1..``max_bs`` on its level (index ``n - 1``).
    ``context_source``: the workload's context the ITL is for (:attr:`BatchContext.source`), when known.
    """

    target_ms: float
    levels: tuple[Level, ...]
    max_bs: int
    unmeetable_from: int | None
    unmeetable_itl_ms: float | None
    itl_at_max_ms: float
    needed: int
    candidates: tuple[split_levels.Split, ...]
    itl_ms: tuple[float, ...]
    context_source: str = ""

    @property
    def thresholds(self) -> list[int]:
        """The decode_bs_threshold of each level (the first 0)."""
        return [0 if i == 0 else level.first_bs for i, level in enumerate(self.levels)]

    def config(
        self, split_forward_token_budget: int = split_levels.DEFAULT_SPLIT_FORWARD_TOKEN_BUDGET,
    ) -> pc.PdmuxConfig:
        """The pdmux YAML's content: one manual_divisions entry per level, ``sm_group_num`` levels + 2
        (SGLang needs exactly ``sm_group_num - 2`` entries), the token budget given; ``decode_bs_divisor``
        is SGLang's default (the thresholds choose, it is never read)."""
        divisions = tuple((lv.prefill_sms, lv.decode_sms, t) for lv, t in zip(self.levels, self.thresholds))
        return pc.PdmuxConfig(sm_group_num=len(divisions) + 2, manual_divisions=divisions,
                              split_forward_token_budget=split_forward_token_budget)

    def level_for(self, n: int) -> int:
        """The level (index into :attr:`levels`) SGLang picks for ``n`` decoding requests: the last whose
        threshold is <= ``n``, as ``adjust_stream_groups`` does
        (:func:`pdmux_cli.sglang.split_levels.choose_group`)."""
        return split_levels.choose_group(len(self.levels) + 2, n, True, thresholds=self.thresholds) - 1


RoundMs = Callable[[split_levels.Split, int], float]


def compile_levels(round_ms: RoundMs, candidates: Sequence[split_levels.Split], target_ms: float, max_bs: int,
                   max_levels: int = split_levels.DEFAULT_SM_GROUP_NUM - 2) -> SloLevels:
    """The levels that meet ``target_ms`` with the fewest decode SMs per decode batch (module docstring).

    ``round_ms(split, n)``: the predicted ITL, ms, of ``n`` decoding requests on ``split`` with a prefill
    running beside them (:func:`round_ms_function` builds it from a cost model). ``candidates``: the
    splits to choose from, fewest decode SMs first. ``max_bs``: batch sizes 1..``max_bs`` (requests).
    ``max_levels``: the most levels written (``sm_group_num - 2``).
    Raises :class:`InputError` for a target that is not a number of ms > 0, no candidates, ``max_bs``
    outside 1..:data:`MAX_BATCH` or ``max_levels < 1``.
    """
    target_ms = check_target_ms(target_ms)
    if not candidates:
        raise InputError("no candidate SM split to build levels from")
    if any(later.decode_sms <= earlier.decode_sms for earlier, later in itertools.pairwise(candidates)):
        raise InputError("candidate splits must be ordered by strictly increasing decode SMs")
    if isinstance(max_bs, bool) or not isinstance(max_bs, int) or not 1 <= max_bs <= MAX_BATCH:
        raise InputError(f"the largest decode batch must be from 1 to {MAX_BATCH} requests, got {max_bs}")
    if isinstance(max_levels, bool) or not isinstance(max_levels, int) or max_levels < 1:
        raise InputError(f"at least one level is needed, got {max_levels} (sm_group_num must be >= 3)")
    cands = list(candidates)
    top = len(cands) - 1
    cache: dict[tuple[int, int], float] = {}

    def itl(j: int, n: int) -> float:
        key = (j, n)
        if key not in cache:
            value = cache[key] = float(round_ms(cands[j], n))
            if not math.isfinite(value) or value <= 0:
                raise InputError(f"the cost model gives a round of {value} ms for {n} requests on "
                                 f"{cands[j].prefill_sms}/{cands[j].decode_sms} SMs: not a duration")
        return cache[key]

    need: list[int] = []
    unmeetable_from = None
    j = 0
    for n in range(1, max_bs + 1):
        while j < top and itl(j, n) > target_ms:
            j += 1
        need.append(j)
        if unmeetable_from is None and itl(top, n) > target_ms:
            unmeetable_from = n
    runs = _runs(need)
    kept = _merge(runs, cands, itl, target_ms, max_levels) if len(runs) > max_levels else [r[0] for r in runs]
    # Each batch size on the smallest kept level at or above the one it needs.
    chosen = [next(k for k in kept if k >= j) for j in need]
    levels = []
    for k in kept:
        sizes = [n for n in range(1, max_bs + 1) if chosen[n - 1] == k]
        times = [itl(k, n) for n in sizes]
        levels.append(Level(cands[k].prefill_sms, cands[k].decode_sms, sizes[0], sizes[-1], min(times),
                            max(times)))
    return SloLevels(
        target_ms=target_ms, levels=tuple(levels), max_bs=max_bs, unmeetable_from=unmeetable_from,
        unmeetable_itl_ms=itl(top, unmeetable_from) if unmeetable_from is not None else None,
        itl_at_max_ms=itl(top, max_bs), needed=len(runs), candidates=tuple(cands),
        itl_ms=tuple(itl(k, n) for n, k in enumerate(chosen, start=1)),
    )


def _runs(need: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(candidate, first_bs, last_bs)`` for each stretch of batch sizes needing the same candidate."""
    runs: list[tuple[int, int, int]] = []
    for n, j in enumerate(need, start=1):
        if runs and runs[-1][0] == j:
            runs[-1] = (j, runs[-1][1], n)
        else:
            runs.append((j, n, n))
    return runs


def _merge(runs: list[tuple[int, int, int]], cands: Sequence[split_levels.Split],
           itl: Callable[[int, int], float], target_ms: float, max_levels: int) -> list[int]:
    """The candidates to keep (at most ``max_levels``, the last run's always): each dropped run's batch
    sizes move up to the next kept run's candidate. Minimises the decode SMs given beyond the need,
    summed over batch sizes; a move that misses the target where the run met it is not allowed."""
    k = len(runs)

    def cost(a: int, b: int) -> float:
        """Runs ``a..b`` all on run ``b``'s candidate."""
        j_b = runs[b][0]
        total = 0.0
        for j, first, last in runs[a:b]:
            extra = cands[j_b].decode_sms - cands[j].decode_sms
            for n in range(first, last + 1):
                if itl(j_b, n) > target_ms >= itl(j, n):
                    return math.inf
            total += extra * (last - first + 1)
        return total

    inf = math.inf
    # best[m][b]: least cost covering runs 0..b with m kept levels, run b kept; back[m][b]: previous kept run.
    best = [[inf] * k for _ in range(max_levels + 1)]
    back = [[-1] * k for _ in range(max_levels + 1)]
    for b in range(k):
        best[1][b] = cost(0, b)
    for m in range(2, max_levels + 1):
        for b in range(k):
            for a in range(b):
                if best[m - 1][a] < inf:
                    value = best[m - 1][a] + cost(a + 1, b)
                    if value < best[m][b]:
                        best[m][b], back[m][b] = value, a
    m = min(range(1, max_levels + 1), key=lambda m: (best[m][k - 1], m))
    if best[m][k - 1] == inf:  # cannot happen: one level, the last run's (the most decode SMs), always meets
        m = 1
    kept, b = [], k - 1
    while b >= 0 and m >= 1:
        kept.append(runs[b][0])
        b, m = back[m][b], m - 1
    return sorted(kept)


def round_ms_function(step_model: Any, context: BatchContext, graph_max_bs: int) -> RoundMs:
    """``round_ms(split, n)``: the ITL, ms, of ``n`` requests at ``context``'s KV decoding on ``split``
    next to a running prefill, from :func:`pdmux_cli.costmodel.pdmux_round.pdmux_round_s` (the simulator's
    own round time); batches above ``graph_max_bs`` run without a CUDA graph, as in the simulator."""
    from ..costmodel.pdmux_round import pdmux_round_s

    def round_ms(split: split_levels.Split, n: int) -> float:
        sum_context, sum_window = context.sums(n)
        return 1e3 * pdmux_round_s(step_model, split.decode_sms, n, sum_context, sum_window,
                                   split.prefill_sms, n <= graph_max_bs)

    return round_ms


def largest_batch(setup: Any, context: BatchContext) -> int:
    """The largest decode batch to size levels for: requests at ``context``'s mean KV that fit SGLang's KV
    pool under pdmux (chunked prefill off, :meth:`pdmux_cli.simulate.engine.Setup.kv_pool`), at most its
    ``max_running_requests`` (:meth:`~pdmux_cli.simulate.engine.Setup.running_limit`) and
    :data:`MAX_BATCH`. Raises :class:`InputError` when not one request fits (or the model does not)."""
    pool = setup.kv_pool(-1).tokens
    fits = int(pool // max(1.0, context.mean_tokens))
    if fits < 1:
        raise InputError(f"a request of {context.mean_tokens:.0f} tokens of context does not fit the {pool} "
                         f"tokens of KV pool {setup.model.name} leaves on {setup.gpu_name or 'this GPU'}")
    return max(1, min(fits, setup.running_limit(pool), MAX_BATCH))


def levels_for_setup(setup: Any, context: BatchContext, target_ms: float,
                     max_levels: int = split_levels.DEFAULT_SM_GROUP_NUM - 2) -> SloLevels:
    """:func:`compile_levels` for a simulated server (:class:`pdmux_cli.simulate.engine.Setup`): its cost
    model and CUDA-graph limit (:func:`round_ms_function`), its GPU's candidate splits
    (:func:`candidate_splits`) and the largest batch its KV pool holds (:func:`largest_batch`). Raises
    :class:`InputError` as those do."""
    target_ms = check_target_ms(target_ms)
    cands = candidate_splits(setup.total_sms, setup.compute_capability)
    levels = compile_levels(round_ms_function(setup.step_model, context, setup.graph_max_bs), cands,
                            target_ms, largest_batch(setup, context), max_levels)
    return replace(levels, context_source=context.source)


def model_window(model: Any) -> int:
    """The sliding window (tokens) of a model's sliding-window layers, 0 for none (as the simulator)."""
    return model.sliding_window if getattr(model, "num_sliding_layers", 0) else 0
