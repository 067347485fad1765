"""The schedulers, as discrete-event simulations of one SGLang 0.5.23 server on one GPU.

Admission, KV pool, retraction and records are in :mod:`pdmux_cli.simulate.engine`. Two loops:

**SGLang's default loop** (:func:`run_baseline`; ``srt/managers/scheduler.py`` ``get_next_batch_to_run``
and ``event_loop_overlap``) for three policies, named by the server arguments that give them:

- ``chunked N`` (SGLang's default, ``--chunked-prefill-size N``; N defaults to 8192 on 60-160 GB GPUs):
  every round runs a prefill batch whenever one can be formed, the request cut at the chunk's end
  going first in the next one, so **decode runs only when no prefill batch can be formed**: running
  requests wait for every chunk of a long prompt. ``--prefill-decode-interval K`` (0 by default) makes
  the K rounds after each prefill batch decode-only;
- ``mixed-chunk N`` (``--enable-mixed-chunk``): the running requests ride in every prefill batch as one
  token each (charged against the chunk, ``max_prefill_tokens`` and memory), when their KV fits;
- ``prefill-first`` (``--chunked-prefill-size -1``): whole prompts, never cut; a request other than a
  batch's first must fit under what is left of ``--max-prefill-tokens`` (16384).

A round is one prefill or decode step on the whole GPU. The overlap scheduler prepares round ``k + 1``
on the CPU while the GPU runs round ``k``, so a round lasts ``max(GPU time, CPU time)``
(``--disable-overlap-schedule``: the sum; the sum too under speculative decoding on a release that turns
the overlap scheduler off there, up to 0.5.10: :attr:`~pdmux_cli.simulate.engine.Setup.overlap`). Decode
batches larger than SGLang's largest CUDA graph
(``cuda_graph_max_bs``, 256 on 60-160 GB GPUs) are launched kernel by kernel, every one with
``--disable-cuda-graph`` (:attr:`~pdmux_cli.simulate.engine.Setup.graph_max_bs` 0).

**pdmux** (:func:`run_pdmux`; ``srt/multiplex/multiplexing_mixin.py`` ``event_loop_pdmux``): a round is

1. requests that arrived join the queue;
2. with no prefill batch in flight and the batch not "full", one is formed (whole prompts, as
   prefill-first); the stream group is chosen now (:func:`pdmux_cli.sglang.split_levels.choose_group`);
3. the running batch drops the requests that finished last round (which clears "full": so after a KV
   shortage new requests are admitted one round late), then gets a free KV slot per request, retracting
   if short;
4. one decode step runs on the decode partition (``d`` SMs, with co-run interference while the prefill
   stream is busy) and the next slice of :func:`pdmux_cli.sglang.split_levels.prefill_layers_per_round` layers
   is submitted to the prefill stream (``p`` SMs), at most :attr:`PdmuxPolicy.max_split_forward_layers` of
   them where the revision has that cap;
5. SGLang waits for the decode stream only and processes its results on the CPU, with the overlap
   scheduler off (SGLang asserts it): **a round lasts one decode step plus the CPU's work**.
   The prefill stream runs asynchronously: a slice starts when submitted or when the previous slice
   ends, and lasts ``layers / num_layers`` of the batch's prefill time on ``p`` SMs. Its layers are
   launched eagerly on the round's thread after the decode step (``run_batch`` on the decode stream
   first): a round is not done before both launches, one after the other without CUDA graphs
   (``--disable-cuda-graph``), which also holds the slice back by the decode step's launches (a batch
   above the largest graph, eager too, keeps the longer of the two: runs without the flag are as they
   were);
6. the prefill batch is merged into the decode batch at the end of the first round ending after its
   last slice finished (their first-token time); the group is chosen again then.

With no decode running the group is 0 (whole GPU to prefill): every slice is submitted at once. If the
decode batch empties during a split prefill, SGLang moves to group 0 (both streams synchronised).
In SGLang 0.5.23 a manual_divisions config whose thresholds are all above the decode batch at a
prefill's start raises UnboundLocalError and the server dies: the simulation stops there and says so
(requests not finished count as missing the SLO), unless the unreleased branches' fallback (group 1)
is asked for by name.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..costmodel.pdmux_round import pdmux_round_s
from ..sglang import split_levels
from ..sglang.pdmux_config import PdmuxConfig
from ..util.errors import Finding, InputError
from .engine import Progress, RunResult, Setup, Work
from .policies import Deployment, Rounds, ServerOutcome
from .servers import drive, serve

if TYPE_CHECKING:
    from .traces import Trace


class ServerPolicy(ABC):
    """The schedules one SGLang server runs (a :class:`~pdmux_cli.simulate.policies.ServerSchedule`):
    what they share. Run on one server, or on ``dp`` replicas of it behind a router, by one code path
    (:func:`pdmux_cli.simulate.servers.serve`); each subclass gives its scheduler loop (:meth:`rounds`)."""

    kind: ClassVar[str]
    prefill_apart: ClassVar[bool] = False
    multiplexes: ClassVar[bool] = False
    #: whether a long run may be cut in time, its segments simulated side by side
    #: (:mod:`pdmux_cli.simulate.time_split`): SGLang's default loop, which keeps nothing across an idle
    #: moment but its signature
    splits_in_time: ClassVar[bool] = False
    chunk_tokens: int

    @property
    @abstractmethod
    def label(self) -> str:
        """The schedule as printed (each subclass names itself)."""
        raise NotImplementedError

    @abstractmethod
    def launch_args(self, config_path: str | None = None) -> list[str]:
        """SGLang's arguments for the schedule (each subclass gives its own; ``config_path``: pdmux's)."""
        raise NotImplementedError

    def check(self) -> None:
        """Nothing to refuse (subclasses check their knobs)."""

    def servers(self, dp: int = 1) -> int:
        """``dp``: the replicas asked for."""
        return dp

    def deployment(self, setup: Setup, dp: int = 1, method: str = "round_robin",
                   routed: bool | None = None) -> Deployment:
        """``dp`` replicas of ``setup``'s ``setup.tp`` GPUs; routed (by default) when more than one."""
        return Deployment(tp=setup.tp, dp=dp, method=method, routed=dp > 1 if routed is None else routed)

    def routing_known(self, setup: Setup, dp: int, method: str) -> bool:
        """Round-robin replicas stay in turn: no replica stops taking requests."""
        return True

    @abstractmethod
    def rounds(self, work: Work, setup: Setup, progress: Progress | None = None) -> Rounds:
        """Its scheduler loop over ``work`` as a generator (:data:`~pdmux_cli.simulate.policies.Rounds`)."""
        raise NotImplementedError

    def run(self, trace: Trace, setup: Setup, *, dp: int = 1, method: str = "round_robin",
            progress: Progress | None = None, fold: Any = None,
            initial_decode: Sequence[tuple[int, int]] = (), max_concurrency: int = 0) -> RunResult:
        """:func:`pdmux_cli.simulate.servers.serve`: one server, or ``dp`` replicas behind a router."""
        return serve(trace, setup, self, dp, method, progress, fold, initial_decode=initial_decode,
                     max_concurrency=max_concurrency)


@dataclass(frozen=True)
class PdmuxPolicy(ServerPolicy):
    """SGLang's PD multiplexing with a pdmux YAML's knobs (``config``). ``unreleased_fallback``: when
    0.5.23 would crash (no manual threshold matches), use group 1 as SGLang's unreleased branches do,
    instead of stopping. ``max_split_forward_layers``: the cap on layers per round the chosen revision
    applies (:func:`pdmux_cli.sglang.revision_rules.layer_cap`; 0, the default, for revisions without it).
    ``sglang``: the revision whose rule on speculative decoding beside pdmux a run checks
    (:func:`pdmux_cli.sglang.speculative_args.check_pdmux_speculation`; ``None``: checked by the caller)."""

    config: PdmuxConfig = field(default_factory=PdmuxConfig)
    name: str = ""
    unreleased_fallback: bool = False
    max_split_forward_layers: int = 0
    sglang: str | None = None
    #: where given, a run fills it with the points at which it read the knobs (:func:`pdmux_choices`):
    #: ``"batches"``, the decode batch sizes at a prefill's start; ``"tokens"``, the prefills' token counts
    record: dict | None = field(default=None, compare=False, repr=False)

    kind = "pdmux"
    multiplexes = True
    chunk_tokens = -1  # chunked prefill is off under pdmux (SGLang asserts it)

    @property
    def label(self) -> str:
        """``"pdmux"`` or the given name."""
        return self.name or "pdmux"

    def launch_args(self, config_path: str | None = None) -> list[str]:
        """:func:`pdmux_cli.sglang.pdmux_config.launch_flags` for the YAML at ``config_path`` with its
        ``sm_group_num``; ``None``: SGLang's default pdmux config, no YAML, with the flags 0.5.23 needs
        beside ``--enable-pdmux`` (``--chunked-prefill-size -1``, ``--disable-overlap-schedule``)."""
        if config_path:
            from ..sglang.pdmux_config import launch_flags

            return launch_flags(config_path, self.config.sm_group_num)
        return ["--enable-pdmux", "--chunked-prefill-size", "-1", "--disable-overlap-schedule"]

    def check(self) -> None:
        """:class:`InputError` for a ``split_forward_token_budget`` or ``decode_bs_divisor`` below 1."""
        for name in ("split_forward_token_budget", "decode_bs_divisor"):
            if getattr(self.config, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self.config, name)}")

    def routing_known(self, setup: Setup, dp: int, method: str) -> bool:
        """Not when SGLang 0.5.23 can crash on the config (a server that stops takes no more requests,
        which moves the turn): every manual threshold above 1 and no fallback asked for."""
        if self.unreleased_fallback:
            return True
        cfg = self.config
        thresholds = split_levels.plan_groups(setup.total_sms, setup.compute_capability, cfg.sm_group_num,
                                              cfg.manual_divisions or None).thresholds
        return not (thresholds and min(thresholds) > 1)  # a decode batch of 1 at a prefill's start crashes

    def rounds(self, work: Work, setup: Setup, progress: Progress | None = None) -> Rounds:
        """:func:`pdmux_rounds`."""
        return pdmux_rounds(work, setup, self, progress)


def pdmux_choices(policy: PdmuxPolicy, setup: Setup) -> Callable[[Sequence[int], Sequence[int]], tuple]:
    """What :func:`pdmux_rounds` reads of ``policy`` under ``setup``, as a function of the points it reads
    them at: ``choices(batches, tokens)`` gives, for each decode batch size of ``batches`` at a prefill's
    start, the chosen stream group's SMs (prefill, decode), whether it is group 0 and whether SGLang 0.5.23
    crashes there; for each prefill's token count of ``tokens``, its layers a round; and the fallback and
    the revision checked. A run reads nothing else of the policy's knobs, so a policy whose choices at the
    points another's run read (:attr:`PdmuxPolicy.record`) equal that run's makes the same decisions at
    each of them, reads the same points, and runs the same rounds: every figure but the names of the stream
    groups and the seconds credited to each is the same (tune simulates such a policy once)."""
    import numpy as np

    cfg = policy.config
    plan = split_levels.plan_groups(setup.total_sms, setup.compute_capability, cfg.sm_group_num,
                                    cfg.manual_divisions or None)
    count = len(plan.groups)
    splits = np.array([tuple(g) for g in plan.groups], dtype=np.int64)
    thresholds, divisor = plan.thresholds, cfg.decode_bs_divisor
    layers, budget = setup.model.num_layers, cfg.split_forward_token_budget
    cap = policy.max_split_forward_layers

    def choices(batches: Sequence[int], tokens: Sequence[int]) -> tuple:
        sizes = np.array(batches, dtype=np.int64)
        crash = np.zeros(len(sizes), dtype=bool)
        if thresholds:  # the last threshold <= the batch (choose_group); 0.5.23 crashes below them all
            chosen = np.ones(len(sizes), dtype=np.int64)
            crash |= sizes > 0
            for i, threshold in enumerate(thresholds):
                chosen[sizes >= threshold] = i + 1
                crash &= sizes < threshold
        else:
            chosen = np.maximum(1, np.minimum(count - 2, sizes * (count - 2) // divisor))
        chosen[sizes == 0] = 0  # no decode batch: group 0
        rows = np.column_stack([splits[chosen], chosen == 0, crash]).tolist()
        return rows, _layers_per_round(tokens, layers, budget, cap), policy.unreleased_fallback, policy.sglang

    return choices


def _layers_per_round(tokens: Sequence[int], layers: int, budget: int, cap: int) -> list[int]:
    """:func:`~pdmux_cli.sglang.split_levels.prefill_layers_per_round` of each prefill token count of
    ``tokens`` (its arguments checked once, the same integers from int64 arithmetic: ``min(layers, max(1,
    budget // t))``, capped at ``cap`` > 0, all ``layers`` for ``t = 0``)."""
    import numpy as np

    split_levels.prefill_layers_per_round(0, layers, budget, cap)  # its checks of the knobs, once
    t = np.array(tokens, dtype=np.int64)
    if (t < 0).any():
        split_levels.prefill_layers_per_round(int(t[t < 0][0]), layers, budget, cap)  # its InputError
    per_round = np.minimum(layers, np.maximum(1, budget // np.maximum(t, 1)))
    if cap:
        per_round = np.minimum(per_round, cap)
    per_round[t == 0] = layers
    return per_round.tolist()


@dataclass(frozen=True)
class ChunkedPolicy(ServerPolicy):
    """SGLang's default scheduling with ``--chunked-prefill-size chunk_tokens`` (tokens), decode only when
    no prefill batch can be formed; ``prefill_decode_interval``: decode-only rounds after each prefill."""

    chunk_tokens: int
    prefill_decode_interval: int = 0

    kind = "chunked"
    mixed = False
    splits_in_time = True

    @property
    def label(self) -> str:
        """``"chunked 8192"`` (``"chunked 8192 interval 4"`` with an interval)."""
        extra = f" interval {self.prefill_decode_interval}" if self.prefill_decode_interval else ""
        return f"chunked {self.chunk_tokens}{extra}"

    def launch_args(self, config_path: str | None = None) -> list[str]:
        """``--chunked-prefill-size N`` (SGLang's default schedule; ``config_path`` does not apply)."""
        return ["--chunked-prefill-size", str(self.chunk_tokens)]

    def check(self) -> None:
        """:class:`InputError` for a chunk below 1 token."""
        if self.chunk_tokens < 1:
            raise InputError(f"chunk size must be >= 1 token, got {self.chunk_tokens}")

    def rounds(self, work: Work, setup: Setup, progress: Progress | None = None) -> Rounds:
        """:func:`baseline_rounds`."""
        return baseline_rounds(work, setup, self, progress)


@dataclass(frozen=True)
class MixedChunkPolicy(ServerPolicy):
    """``--enable-mixed-chunk`` with ``chunk_tokens`` per step: decode rows ride in every prefill batch."""

    chunk_tokens: int
    prefill_decode_interval: int = 0

    kind = "mixed-chunk"
    mixed = True
    splits_in_time = True

    @property
    def label(self) -> str:
        """``"mixed-chunk 512"`` (``"mixed-chunk 512 interval 4"`` with an interval)."""
        extra = f" interval {self.prefill_decode_interval}" if self.prefill_decode_interval else ""
        return f"mixed-chunk {self.chunk_tokens}{extra}"

    def launch_args(self, config_path: str | None = None) -> list[str]:
        """``--enable-mixed-chunk --chunked-prefill-size N`` (``config_path`` does not apply)."""
        return ["--enable-mixed-chunk", "--chunked-prefill-size", str(self.chunk_tokens)]

    def check(self) -> None:
        """:class:`InputError` for a chunk below 1 token."""
        if self.chunk_tokens < 1:
            raise InputError(f"chunk size must be >= 1 token, got {self.chunk_tokens}")

    def rounds(self, work: Work, setup: Setup, progress: Progress | None = None) -> Rounds:
        """:func:`baseline_rounds`."""
        return baseline_rounds(work, setup, self, progress)


@dataclass(frozen=True)
class PrefillFirstPolicy(ServerPolicy):
    """``--chunked-prefill-size -1``: whole prefills first, on the whole GPU; ``prefill_decode_interval``
    as for :class:`ChunkedPolicy` (SGLang's deferral is general scheduler logic: ``scheduler.py``
    ``_should_defer_prefill``)."""

    prefill_decode_interval: int = 0

    kind = "prefill-first"
    chunk_tokens = -1
    mixed = False
    splits_in_time = True

    @property
    def label(self) -> str:
        """``"prefill-first"`` (``"prefill-first interval 4"`` with an interval)."""
        return "prefill-first" + (f" interval {self.prefill_decode_interval}" if self.prefill_decode_interval
                                  else "")

    def launch_args(self, config_path: str | None = None) -> list[str]:
        """``--chunked-prefill-size -1`` (chunking off; ``config_path`` does not apply)."""
        return ["--chunked-prefill-size", "-1"]

    def rounds(self, work: Work, setup: Setup, progress: Progress | None = None) -> Rounds:
        """:func:`baseline_rounds`."""
        return baseline_rounds(work, setup, self, progress)


Baseline = ChunkedPolicy | MixedChunkPolicy | PrefillFirstPolicy


class _CpuCache(dict):
    """CPU seconds of a step per batch size, computed once each (``get(n) or add(n)``)."""

    def __init__(self, cpu_s) -> None:
        super().__init__()
        self.cpu_s = cpu_s

    def add(self, n: int) -> float:
        value = self[n] = self.cpu_s(n)
        return value


def _idle_until_next(work: Work, t: float) -> float | None:
    """Next arrival time (s) when the GPU has nothing to run; ``None`` when the run is over."""
    work.idle()
    nxt = work.next_arrival()
    if nxt is None:
        if work.waiting:  # cannot happen: with nothing running all KV is free and rejects are removed
            raise RuntimeError("simulator stalled with requests waiting and nothing running")
        return None
    return max(t, nxt)


def _wait_for_arrival(work: Work, t: float):
    """Generator: the next arrival time (s) when the server has nothing to run (its ``return`` value),
    ``None`` when the run is over. Behind a router (``work.open``) with nothing routed to it yet, it
    yields ``math.inf`` (idle, waiting) until the router gives it a request or closes it."""
    nxt = _idle_until_next(work, t)
    while nxt is None and work.open:
        yield math.inf
        nxt = work.next_arrival()
        if nxt is not None:
            nxt = max(t, nxt)
    return nxt


#: Steps of a quiet run taken one by one (a tight loop) before the rest are computed as arrays
#: (:func:`_decode_run`): most runs between two events are shorter, and arrays cost more than such steps.
TIGHT_DECODE_STEPS = 24
#: Fewest steps left worth arrays (below: the tight loop goes on).
MIN_ARRAY_STEPS = 48
#: Most steps one array computes (bounds its memory; a longer quiet stretch takes several).
MAX_ARRAY_STEPS = 1 << 16
#: A quiet run with room for this many steps (its batch's quiet steps, and the time before the next arrival
#: or horizon at its first step's length) goes to arrays from its first step: the tight loop would
#: only reach them later (:func:`_decode_run`).
LONG_RUN_STEPS = TIGHT_DECODE_STEPS + MIN_ARRAY_STEPS


def _own_method(step_model: Any, name: str) -> Any:
    """``step_model``'s method ``name`` where its class defines it, else ``None``: never one a wrapper hands
    on from the model it wraps (a speculative model's ``__getattr__`` gives the target's, whose decode step
    is not the round's)."""
    method = getattr(type(step_model), name, None)
    return None if method is None else method.__get__(step_model)


def _run_state(work: Work, n: int) -> tuple[Any, Any, Any, int, bool, int, Any, Any]:
    """What a run of quiet steps (or rounds) of ``n`` requests starts from: the batch's KV totals
    ``(sc, sw)``, their growth a step ``(inc, winc)`` (``n`` x the tokens a step gives; the members below
    the window), whether each step must check the pool (fractional growth, speculative rounds: whole tokens
    have the pool's bound in ``limit`` already), the pool and the KV held outside the batch, and the end
    times' append."""
    batch = work.batch
    growth = batch.growth
    return (batch.sum_context, batch.sum_window, n if growth == 1 else n * growth,
            batch.below_window if batch.window else 0, growth != 1, work.capacity, work.extra_held,
            work.ends.fast_append)


def _decode_run(work: Work, setup: Setup, n: int, t: float, limit: int, overlap: bool, cpu: float,
                per_request: float, cuda_graph: bool, next_t: float, horizon: float,
                lines: dict | None = None) -> tuple[int, float]:
    """Up to ``limit`` decode steps of the fixed batch of ``n`` requests at once, from ``t`` (s): the
    event-speed path of :func:`baseline_rounds`. ``limit``: steps in which nothing can happen (the batch's
    :meth:`~pdmux_cli.simulate.engine.DecodeBatch.quiet_steps`, the progress tick, the deferred rounds, the
    KV pool for whole-token growth). The run stops before the first step after which the step loop would
    leave its decode rounds (its end at or past ``horizon``; the scheduler seeing the next arrival
    ``next_t``: at the step's start with the overlap scheduler, else at its end) or whose KV does not fit
    (checked here under speculative decoding's fractional growth). The step times are the step loop's to
    the bit: the step model's ``decode_s`` with the same totals, each over its CPU time (overlap) or plus
    it, the end times summed in order. The first :data:`TIGHT_DECODE_STEPS` one by one; the rest, when
    :data:`MIN_ARRAY_STEPS` or more may follow, as numpy arrays (:func:`_decode_array`); all of them as
    arrays where :data:`LONG_RUN_STEPS` fit from the first. Appends the end
    times, moves the batch's totals; returns ``(steps, end time)``. ``lines``: the step model's
    ``decode_line`` per ``(n, cuda_graph)``, kept by the caller across runs."""
    batch = work.batch
    decode_s = setup.step_model.decode_s
    total = setup.total_sms
    sc, sw, inc, winc, check_memory, capacity, extra, append = _run_state(work, n)
    nreq = n * per_request
    done = 0
    key = (n, cuda_graph)
    terms = lines.get(key) if lines is not None else None
    if terms is None:  # False: the step model's class defines no decode_line
        line = _own_method(setup.step_model, "decode_line")
        terms = False if line is None else line(total, n, 0, cuda_graph)
        if lines is not None:
            lines[key] = terms
    if terms:  # decode_s inlined: base + full x sum_context + window x sum_window, at least floor
        base, full, wrate, floor = terms
    tight = min(limit, TIGHT_DECODE_STEPS)
    if limit - tight < MIN_ARRAY_STEPS:  # too few left for arrays: the tight loop takes them all
        tight = limit
    elif terms and not check_memory:  # a long quiet stretch: arrays from the first step when as many fit
        gpu = base + full * sc + wrate * sw  # the first step's, as the tight loop times it
        if floor > gpu:
            gpu = floor
        gpu += nreq
        until = horizon if horizon < next_t else next_t
        if until - t >= ((cpu if cpu > gpu else gpu) if overlap else gpu + cpu) * LONG_RUN_STEPS:
            tight = 0
    if terms and overlap and not check_memory and not wrate and not winc:
        # SGLang's default (the overlap scheduler, whole tokens, no sliding window): the loop below with
        # its other branches settled, the same tests in the same order (a step starts before the next
        # arrival and ends before the horizon) and the same floats (no window term: + 0.0 changes none)
        while done < tight and t < next_t:
            gpu = base + full * sc
            if floor > gpu:
                gpu = floor
            gpu += nreq
            end = t + (cpu if cpu > gpu else gpu)
            if end >= horizon:
                break
            append(end)
            t = end
            sc += inc
            done += 1
    else:
        while done < tight:
            if check_memory and not capacity - sc - extra >= n:  # the step loop's test, in its order
                break
            if terms:
                gpu = base + full * sc + wrate * sw
                if floor > gpu:
                    gpu = floor
                gpu += nreq
            else:
                gpu = decode_s(total, n, sc, sw, 0, cuda_graph) + nreq
            if overlap:
                end = t + (cpu if cpu > gpu else gpu)
                if end >= horizon or t >= next_t:
                    break
            else:
                end = t + (gpu + cpu)
                if end >= horizon or end >= next_t:
                    break
            append(end)
            t = end
            sc += inc
            sw += winc
            done += 1
    if done == tight and limit - done >= MIN_ARRAY_STEPS:
        until = horizon if horizon < next_t else next_t
        left = limit - done
        if until < math.inf:  # the steps grow no shorter: at most this many start before `until`
            left = min(left, int((until - t) / (gpu + cpu if not overlap else max(gpu, cpu))) + 2)
        if left >= MIN_ARRAY_STEPS:
            more, t, sc = _decode_array(work, setup, n, t, min(left, MAX_ARRAY_STEPS), overlap, cpu,
                                        nreq, cuda_graph, next_t, horizon, sc, sw, inc, winc)
            done += more
    if done:
        batch.advance(done, sc)
    return done, t


def _run_gpu_s(setup: Setup, n: int, limit: int, cuda_graph: bool, sc: float, sw: float, inc: float,
               winc: int) -> tuple[Any, Any]:
    """The GPU seconds of ``limit`` decode steps (or whole-GPU rounds) of ``n`` requests whose KV totals start
    at ``sc``, ``sw`` and grow by ``inc``, ``winc`` a step, as an array: the step model's ``decode_run_s``
    (``decode_s``'s arithmetic over arrays, equal to the bit), or ``decode_s`` step by step where its class
    has none; and the fractional KV totals summed in order (``numpy.add.accumulate``; ``None`` for whole
    tokens, exact in int64). Shared by :func:`_decode_array` and :func:`_pdmux_array`."""
    import numpy as np

    step_model = setup.step_model
    total = setup.total_sms
    offsets = np.arange(limit)
    if isinstance(inc, int) and isinstance(sc, int):
        contexts = sc + inc * offsets
        sums = None
    else:
        sums = np.full(limit + 1, float(inc))
        sums[0] = sc
        sums = np.add.accumulate(sums)
        contexts = sums[:limit]
    windows = sw + winc * offsets if winc else sw
    run_s = _own_method(step_model, "decode_run_s")
    if run_s is not None:
        return run_s(total, n, contexts, windows, 0, cuda_graph), sums
    decode_s = step_model.decode_s
    w_list = windows.tolist() if winc else [sw] * limit
    gpu = [decode_s(total, n, c, w, 0, cuda_graph) for c, w in zip(contexts.tolist(), w_list)]
    return np.array(gpu), sums


def _decode_array(work: Work, setup: Setup, n: int, t: float, limit: int, overlap: bool, cpu: float,
                  nreq: float, cuda_graph: bool, next_t: float, horizon: float, sc: float, sw: float,
                  inc: float, winc: int) -> tuple[int, float, float]:
    """:func:`_decode_run`'s long runs as numpy arrays: up to ``limit`` steps from ``t`` with the totals
    ``sc``, ``sw`` growing by ``inc``, ``winc`` a step. The step model's ``decode_run_s`` (``decode_s``'s
    arithmetic over arrays, equal to the bit; ``decode_s`` step by step where it has none); whole-token
    totals in int64 (exact), fractional ones summed in order (``numpy.add.accumulate``, sequential, as the
    end times). Returns ``(steps, end time, KV total after them)``."""
    import numpy as np

    gpu, sums = _run_gpu_s(setup, n, limit, cuda_graph, sc, sw, inc, winc)
    gpu = gpu + nreq
    ends = np.empty(limit + 1)
    ends[0] = t
    ends[1:] = np.maximum(gpu, cpu) if overlap else gpu + cpu
    ends = np.add.accumulate(ends)
    ok = ends[1:] < horizon
    ok &= (ends[:-1] if overlap else ends[1:]) < next_t
    if sums is not None:  # the memory check before each step, on the fractional totals
        ok &= work.capacity - sums[:limit] - work.extra_held >= n
    first_bad = int(ok.argmin())  # the first False; 0 when every one is True
    steps = limit if ok[first_bad] else first_bad
    if steps < 1:
        return 0, t, sc
    work.ends.frombytes(ends[1:steps + 1].tobytes())
    return steps, float(ends[steps]), (sc + inc * steps if sums is None else float(sums[steps]))


def _line_terms(step_model: Any, lines: dict, sms: int, n: int, corun: int, cuda_graph: bool) -> tuple | None:
    """The step model's ``decode_line`` of ``n`` requests on ``sms`` SMs beside a prefill on ``corun``
    (``None`` where its class defines none: a speculative round, timed by ``decode_s`` itself), kept in
    ``lines`` per ``(sms, n, corun, cuda_graph)``."""
    key = (sms, n, corun, cuda_graph)
    terms = lines.get(key)
    if terms is None and key not in lines:
        line = _own_method(step_model, "decode_line")
        terms = lines[key] = None if line is None else line(sms, n, corun, cuda_graph)
    return terms


def _pdmux_decode_run(work: Work, setup: Setup, n: int, t: float, limit: int, quiet: int, cpu: float,
                      req: float, cuda_graph: bool, until: float, gtime: float,
                      lines: dict) -> tuple[int, float, float]:
    """Up to ``limit`` pdmux rounds with no prefill in flight at once, from ``t`` (s): the decode step of
    the fixed batch of ``n`` requests on the whole GPU, each round lasting :func:`pdmux_round_s`'s
    ``(decode_s + CPU) + per request`` (``cpu``, ``req``: the step model's ``decode_cpu_s(n)`` and
    ``request_s(n)``), as :func:`pdmux_rounds` times them one by one, to the bit. ``quiet``: rounds in
    which nothing can happen (the batch's quiet steps, the progress tick, the KV pool for whole-token
    growth), advanced here; ``limit`` (at most ``quiet + 1``): with the event round after them, whose time
    is the same but whose records (finishes, crossings, the tick) the caller makes (``DecodeBatch.complete``).
    The run stops before a round starting at or past ``until`` (a horizon, or the next arrival the
    scheduler sees: the checks at a round's top) or whose KV does not fit (fractional growth, speculative
    rounds). ``gtime``: the whole-GPU group's seconds so far, the rounds' times added in order. The first
    :data:`TIGHT_DECODE_STEPS` one by one, then as numpy arrays (:func:`_pdmux_array`) when
    :data:`MIN_ARRAY_STEPS` or more quiet ones may follow, the event round one by one. Appends the end
    times, moves the batch's totals over the quiet rounds; returns ``(rounds, end time, group seconds)``."""
    batch = work.batch
    step_model = setup.step_model
    total = setup.total_sms
    sc, sw, inc, winc, check_memory, capacity, extra, append = _run_state(work, n)
    terms = _line_terms(step_model, lines, total, n, 0, cuda_graph)
    decode_s = step_model.decode_s
    if terms is not None:
        base, full, wrate, floor = terms
    done = 0
    tau = 0.0
    prev = sc  # the KV total before the last round's growth
    stop = min(limit, TIGHT_DECODE_STEPS)
    arrays = True
    while True:
        halted = False
        while done < stop:
            if t >= until or (check_memory and not capacity - sc - extra >= n):  # the round-top checks
                halted = True
                break
            if terms is not None:
                gpu = base + full * sc + wrate * sw
                if floor > gpu:
                    gpu = floor
            else:
                gpu = decode_s(total, n, sc, sw, 0, cuda_graph)
            tau = gpu + cpu + req
            gtime += tau
            t += tau
            append(t)
            prev = sc
            sc += inc
            sw += winc
            done += 1
        if halted or done >= limit:
            break
        if arrays and quiet - done >= MIN_ARRAY_STEPS:
            arrays = False
            left = quiet - done
            if until < math.inf:  # rounds grow no shorter: at most this many start before `until`
                left = min(left, int((until - t) / tau) + 2)
            if left >= MIN_ARRAY_STEPS:
                asked = min(left, MAX_ARRAY_STEPS)
                more, t, sc, gtime = _pdmux_array(work, setup, n, t, asked, cpu, req, cuda_graph, until, sc,
                                                  sw, inc, winc, gtime)
                done += more
                sw += winc * more
                if more < asked:
                    break  # a round starting at `until`, or KV that does not fit
        stop = limit
    if done:
        if done > quiet:  # the event round: its records are the caller's (DecodeBatch.complete)
            batch.advance(quiet, prev)
        else:
            batch.advance(done, sc)
    return done, t, gtime


def _pdmux_array(work: Work, setup: Setup, n: int, t: float, limit: int, cpu: float, req: float,
                 cuda_graph: bool, until: float, sc: float, sw: float, inc: float, winc: int,
                 gtime: float) -> tuple[int, float, float, float]:
    """:func:`_pdmux_decode_run`'s long runs as numpy arrays (as :func:`_decode_array` for the default
    loop): the step model's ``decode_run_s`` (or ``decode_s`` round by round where its class has none),
    each round ``(gpu + cpu) + req``, end times and group seconds summed in order
    (``numpy.add.accumulate``, sequential). Returns ``(rounds, end time, KV total, group seconds)``."""
    import numpy as np

    gpu, sums = _run_gpu_s(setup, n, limit, cuda_graph, sc, sw, inc, winc)
    taus = np.empty(limit + 1)
    taus[1:] = gpu + cpu
    taus[1:] += req
    taus[0] = t
    ends = np.add.accumulate(taus)
    ok = ends[:-1] < until  # each round starts before a horizon or the next arrival
    if sums is not None:  # the memory check before each round, on the fractional totals
        ok &= work.capacity - sums[:limit] - work.extra_held >= n
    first_bad = int(ok.argmin())  # the first False; 0 when every one is True
    steps = limit if ok[first_bad] else first_bad
    if steps < 1:
        return 0, t, sc, gtime
    work.ends.frombytes(ends[1:steps + 1].tobytes())
    taus[0] = gtime
    gtime = float(np.add.accumulate(taus[:steps + 1])[steps])
    return steps, float(ends[steps]), (sc + inc * steps if sums is None else float(sums[steps])), gtime


def _pdmux_split_run(work: Work, setup: Setup, n: int, t: float, limit: int, quiet: int, cpu: float,
                     req: float, cuda_graph: bool, until: float, gtime: float, lines: dict, split: tuple,
                     stream_free: float, submitted: int) -> tuple[int, float, float, float, int]:
    """Up to ``limit`` pdmux rounds with a prefill in flight at once, from ``t`` (s): as
    :func:`_pdmux_decode_run` (``quiet`` rounds advanced here, the event round after them left to the
    caller's records), the decode step on the group's decode SMs, with co-run interference while the
    prefill stream is busy, and each round submitting the next slice of layers while some are left, as
    :func:`pdmux_rounds` does one by one, to the bit. ``split``: ``(decode SMs, prefill SMs, layers,
    layers a round, seconds a layer on the stream, host seconds a layer's launches, the decode step's
    launches ahead of them)``; ``stream_free``, ``submitted``: the prefill stream's state. The run stops
    as :func:`_pdmux_decode_run` does, and after the round at whose end the last slice is done (the
    caller merges the prefill). Returns ``(rounds, end time, group seconds, stream_free, submitted)``."""
    batch = work.batch
    step_model = setup.step_model
    decode_sms, prefill_sms, layers, per_round, layer_s, launch_layer_s, ahead = split
    sc, sw, inc, winc, check_memory, capacity, extra, append = _run_state(work, n)
    key = (decode_sms, n, prefill_sms, cuda_graph, "both")  # the two lines at once (a key of its own length)
    pair = lines.get(key)
    if pair is None:
        pair = lines[key] = (_line_terms(step_model, lines, decode_sms, n, prefill_sms, cuda_graph),
                             _line_terms(step_model, lines, decode_sms, n, 0, cuda_graph))
    busy, alone = pair
    lined = busy is not None and alone is not None  # (a speculative round has no line: decode_s times it)
    if lined:
        b_base, b_full, b_window, b_floor = busy
        a_base, a_full, a_window, a_floor = alone
    decode_s = step_model.decode_s
    done = 0
    prev = sc  # the KV total before the last round's growth
    while done < limit:
        if t >= until or (check_memory and not capacity - sc - extra >= n):  # the round-top checks
            break
        launch = 0.0
        if submitted < layers:
            k = per_round if submitted + per_round <= layers else layers - submitted
            start = t + ahead
            free = (stream_free if stream_free > start else start) + k * layer_s  # max(start, stream_free)
            stream_free = start + k * launch_layer_s
            if free > stream_free:
                stream_free = free
            launch = ahead + k * launch_layer_s
            submitted += k
        if lined:  # decode_s inlined, beside the prefill while its stream is busy, else alone
            if stream_free > t:
                gpu = b_base + b_full * sc + b_window * sw
                if b_floor > gpu:
                    gpu = b_floor
            else:
                gpu = a_base + a_full * sc + a_window * sw
                if a_floor > gpu:
                    gpu = a_floor
        else:
            gpu = decode_s(decode_sms, n, sc, sw, prefill_sms if stream_free > t else 0, cuda_graph)
        tau = gpu + cpu + req
        if launch:  # the round's CPU launches the prefill layers too (max(tau, ...), exactly)
            floor = launch + cpu + req
            if floor > tau:
                tau = floor
        gtime += tau
        t += tau
        append(t)
        prev = sc
        sc += inc
        sw += winc
        done += 1
        if submitted >= layers and stream_free <= t:
            break  # the prefill's last slice is done: merged at this round's end
    if done:
        if done > quiet:  # the event round: its records are the caller's (DecodeBatch.complete)
            batch.advance(quiet, prev)
        else:
            batch.advance(done, sc)
    return done, t, gtime, stream_free, submitted


def run_baseline(work: Work, setup: Setup, policy: Baseline,
                 progress: Progress | None = None) -> ServerOutcome:
    """Simulate SGLang's default loop for ``policy`` (module docstring) on a lone server. Returns its
    :class:`~pdmux_cli.simulate.policies.ServerOutcome`: end time, idle seconds, counters."""
    return drive(baseline_rounds(work, setup, policy, progress))


def baseline_rounds(work: Work, setup: Setup, policy: Baseline, progress: Progress | None = None,
                    transferred: bool = False) -> Rounds:
    """:func:`run_baseline` as a generator: before a round that starts at or past ``work.horizon`` (s)
    it yields that round's start time and waits (a router routes the arrivals up to then, see
    :mod:`pdmux_cli.simulate.cluster`); idle behind an open router it yields ``math.inf``. Its return
    value is :func:`run_baseline`'s. ``transferred``: a disaggregation decode instance
    (:func:`decode_instance_rounds`): admitted requests arrive with their KV cache and join the decode
    step of the same round without a forward pass (a retracted one is prefilled again). A round's top
    here; a prefill batch in :func:`_baseline_prefill` (:func:`_baseline_transferred` on a decode
    instance), the decode rounds after it in :func:`_baseline_decode`."""
    fixed = _baseline_fixed(work, setup, policy)
    interval = policy.prefill_decode_interval
    chunk = policy.chunk_tokens if policy.chunk_tokens > 0 else None
    mixed, overlap = policy.mixed, setup.overlap
    batch, ends = work.batch, work.ends
    t = idle = 0.0
    defer = prefill_batches = mixed_steps = 0
    next_progress = ends.check_every
    horizon = work.horizon
    next_t = work.next_arrival_time()
    # With the overlap scheduler, the batch that runs from `t` was formed on the CPU while the previous
    # one ran: it sees the requests received by the previous round's start (`last_start`). Without it
    # (and after an idle wait) the batch is formed at `t`.
    last_start = 0.0
    while True:
        if t >= horizon:
            yield t
            horizon = work.horizon
            next_t = work.next_arrival_time()
        work.finished_mark = work.finished
        seen = last_start if overlap else t
        last_start = t
        if seen >= next_t:
            work.receive(seen)
            next_t = work.next_arrival_time()
        n = batch.n
        if not n:
            work.batch_full = False  # SGLang clears it when the running batch is empty
        seqs: list = []
        deferred = defer > 0
        if deferred:
            defer -= 1
        elif work.chunked_rid >= 0 or (work.waiting and not work.batch_full):
            seqs, completing = work.form_prefill_batch(chunk, n if mixed else 0)
        if seqs:
            prefill_batches += 1
            if transferred:
                t, again = _baseline_transferred(work, setup, policy, fixed, seqs, completing, t)
                mixed_steps += again
            else:
                t, mixed_step = _baseline_prefill(work, setup, policy, fixed, seqs, completing, n, t)
                mixed_steps += mixed_step
            if fixed[-1]:  # a closed-loop client: a finish or a first token may send the next request
                next_t = work.next_arrival_time()
            if not transferred:
                defer = interval
                continue
            n = batch.n
            if not n and work.waiting:
                continue  # admitted requests that finished at once (one output token): admit more next round
        if n:
            t, last_start, defer, next_t, next_progress = _baseline_decode(
                work, fixed, n, t, last_start, defer, next_t, next_progress, horizon, progress)
            continue
        if work.chunked_rid >= 0 or (work.waiting and deferred):
            continue  # deferred rounds with nothing to decode (an idle round each, the last one included)
        nxt = yield from _wait_for_arrival(work, t)
        if nxt is None:
            break
        if work.on_idle is not None and work.on_idle(t, nxt, defer, prefill_batches, mixed_steps):
            break  # a segment of the run cut in time ends here, before this wait (time_split)
        idle += nxt - t
        t = last_start = nxt
        next_t = work.next_arrival_time()
    if transferred:
        counters = {"steps": ends.total, "admission_rounds": prefill_batches, "re_prefills": mixed_steps,
                    "retracted_requests": work.retractions}
    else:
        counters = {"steps": ends.total, "prefill_batches": prefill_batches, "mixed_steps": mixed_steps,
                    "retracted_requests": work.retractions, **work.cache_counters()}
    return ServerOutcome(end_s=t, idle_s=idle, counters=counters)


def _baseline_fixed(work: Work, setup: Setup, policy: Baseline) -> tuple:
    """What :func:`baseline_rounds`' handlers read and never change over a run, as one tuple (unpacked
    once a call): the step model and its terms, the GPU's SMs, the largest CUDA graph's batch, the overlap
    scheduler, caches per batch size, the KV pool and the prefix cache, ``new_token_ratio``'s floor and
    decay, whether quiet runs go at once, the step ends' append and tick interval, the interval of deferred
    rounds, a closed-loop client (last)."""
    step_model = setup.step_model
    cache = work.cache
    fast_memory = cache is None
    # event speed: quiet decode steps advanced at once (_decode_run), with a prefix cache too where KV grows
    # by whole tokens: each step's memory check would evict the least recently used unlocked leaves down to
    # its free slots beyond the batch, and the check of the step after the run, made at once below, evicts
    # down to fewer in the same order (nothing touches the cache in between), so the cache ends the same;
    # the step loop with --step-by-step, and with a prefix cache under speculative rounds' fractional growth
    runs = (fast_memory or work.batch.growth == 1) and not setup.step_by_step
    ends = work.ends
    # per_request: a step's time per request beyond the kernels (linear in them); lines: the step model's
    # decode_line per (batch, CUDA graph), for _decode_run
    return (setup, step_model, setup.total_sms, setup.graph_max_bs, setup.overlap, step_model.decode_cpu_s,
            step_model.decode_s, step_model.request_s(1), _CpuCache(step_model.decode_cpu_s), cache,
            fast_memory, work.ratio_floor, work.ratio_decay, work.capacity, runs, {}, ends.fast_append,
            ends.check_every, work.sent >= 0)


def _baseline_prefill(work: Work, setup: Setup, policy: Baseline, fixed: tuple, seqs: list,
                      completing: list, n: int, t: float) -> tuple[float, int]:
    """A prefill batch ``seqs`` formed at a round's top (from ``t``, s, beside ``n`` running requests):
    alone, or with the decode rows (mixed chunk) when their KV fits; their step's records; the first tokens
    of ``completing``. Returns ``(end time, 1 for a mixed step else 0)``."""
    (_, step_model, total, _, overlap, cpu_s, _, per_request, _, _, _, _, _, _, _, _, append, _, _) = fixed
    batch = work.batch
    # decode rows sit out when their KV does not fit
    rows = n if policy.mixed and n and work.free >= n else 0
    if rows:  # (their KV slots were made room for with the batch's)
        gpu = step_model.mixed_s(seqs, rows, batch.sum_context, batch.sum_window)
    else:
        gpu = step_model.prefill_s(total, seqs)
    gpu += (len(seqs) + rows) * per_request
    cpu = cpu_s(len(seqs) + rows)
    # the batch is not done before its kernels are launched: eagerly, or replayed from SGLang's
    # prefill CUDA graph (Setup.prefill_launch_s); with the overlap scheduler on the CPU's thread
    # after the step's own work
    launch = setup.prefill_launch_s(sum(new for new, _ in seqs), policy.chunk_tokens, bool(rows))
    t += max(gpu, cpu + launch) if overlap else max(gpu, launch) + cpu
    if rows:
        ends = work.ends
        step = ends.base + len(ends)
        append(t)
        finished = batch.complete(step)
        if finished:
            work.release(finished, t)  # (a closed-loop client's next arrival: the caller's, as below)
            work.batch_full = False
    work.first_tokens(completing, t)
    return t, 1 if rows else 0


def _baseline_transferred(work: Work, setup: Setup, policy: Baseline, fixed: tuple, seqs: list,
                          completing: list, t: float) -> tuple[float, int]:
    """A disaggregation decode instance's admission round (``seqs`` admitted from ``t``, s): the requests
    retracted here earlier are prefilled again (their KV recomputed), then every admitted one has its first
    token. Returns ``(end time, re-prefilled requests)``."""
    (_, step_model, total, _, overlap, cpu_s, _, per_request, _, _, _, _, _, _, _, _, _, _, _) = fixed
    again = [seq for seq, rid in zip(seqs, completing) if work.generated.get(rid, 0)]
    if again:  # retracted here earlier: their KV is recomputed
        gpu = step_model.prefill_s(total, again) + len(again) * per_request
        cpu = cpu_s(len(again))
        launch = setup.prefill_launch_s(sum(new for new, _ in again), policy.chunk_tokens)
        t += max(gpu, cpu + launch) if overlap else max(gpu, launch) + cpu
    work.first_tokens(completing, t)
    return t, len(again)


def _baseline_decode(work: Work, fixed: tuple, n: int, t: float, last_start: float, defer: int,
                     next_t: float, next_progress: int, horizon: float,
                     progress: Progress | None) -> tuple[float, float, int, float, int]:
    """Decode rounds of the running batch (``n`` requests) from ``t`` (s), the next one too while it would
    be one (the checks at a round's top, in order): quiet runs at once (:func:`_decode_run`), each round's
    memory check (a retraction), ``new_token_ratio``'s decay, the step and its records (finishes, the
    progress tick). Returns ``(t, last_start, defer, next_t, next_progress)`` at the top of the round
    that does something else."""
    (setup, _, total, graph_max, overlap, _, decode_s, per_request, cpu_of, cache, fast_memory, min_ratio,
     ratio_decay, capacity, runs, lines, append, every, closed) = fixed
    batch, ends = work.batch, work.ends
    while True:  # decode rounds; the next one too while it would be one (the checks above, in order)
        if runs and (defer > 1 or not (work.chunked_rid >= 0 or (work.waiting and not work.batch_full))):
            step = ends.base + len(ends)
            limit = min(batch.quiet_steps(step), next_progress - step)
            if defer and (work.chunked_rid >= 0 or (work.waiting and not work.batch_full)):
                limit = min(limit, defer)  # a prefill batch may be formed once they are over
            if batch.growth == 1:  # (cached tokens several running requests share count once)
                held = work.extra_held if fast_memory else work.extra_held - cache.shared
                limit = min(limit, (capacity - held - n - batch.sum_context) // n + 1)
            if limit > 1:
                cpu = cpu_of.get(n) or cpu_of.add(n)
                done, t = _decode_run(work, setup, n, t, limit, overlap, cpu, per_request,
                                      n <= graph_max, next_t, horizon, lines)
                if done:
                    last_start = t
                    defer = defer - done if defer > done else 0
                    if work.ratio > min_ratio:  # the steps' decays (as below, one by one)
                        work.decay_ratio_steps(done)
        if fast_memory and capacity - batch.sum_context - work.extra_held >= n:
            ratio = work.ratio
            # Work.decay_ratio, inline: the hot path (max(min_ratio, r), exactly)
            if ratio > min_ratio:
                ratio -= ratio_decay
                work.ratio = ratio if ratio > min_ratio else min_ratio  # noqa: FURB136 - no call
        elif work.check_decode_memory():
            n = batch.n
        else:
            work.decay_ratio()
        gpu = decode_s(total, n, batch.sum_context, batch.sum_window, 0, n <= graph_max) + n * per_request
        cpu = cpu_of.get(n) or cpu_of.add(n)
        if overlap:
            t += cpu if cpu > gpu else gpu  # noqa: FURB136 - max(gpu, cpu) exactly, no call
        else:
            t += gpu + cpu
        step = ends.base + len(ends)
        append(t)
        finished = batch.complete(step)
        if finished:
            work.release(finished, t)
            if closed:  # a closed-loop client sends on a finish (else the next arrival stays)
                next_t = work.next_arrival_time()
            work.batch_full = False
        if step >= next_progress:
            next_progress += every
            work.tick()
            if progress is not None:
                progress(work.finished)
        if finished or t >= horizon or (last_start if overlap else t) >= next_t:
            return t, last_start, defer, next_t, next_progress
        if defer > 0:  # a deferred round: decode only
            defer -= 1
        elif work.chunked_rid >= 0 or (work.waiting and not work.batch_full):
            # a prefill batch may be formed: the full round
            return t, last_start, defer, next_t, next_progress
        work.finished_mark = work.finished
        last_start = t


def run_pdmux(work: Work, setup: Setup, policy: PdmuxPolicy,
              progress: Progress | None = None) -> ServerOutcome:
    """Simulate SGLang's pdmux loop over ``work`` (see the module docstring) on a lone server. Returns
    its :class:`~pdmux_cli.simulate.policies.ServerOutcome`: end time, idle seconds, groups, time per group,
    counters, notes and, when 0.5.23 would crash, the time and the requests cut short."""
    return drive(pdmux_rounds(work, setup, policy, progress))


def _evict_after(work: Work, n: int, before: int) -> None:
    """After a run of pdmux rounds of ``n`` requests (whole-token growth) with a prefix cache: the eviction
    its last round's memory check makes (:meth:`~pdmux_cli.simulate.engine.Work.check_decode_memory`, the
    batch's KV ``before`` that round: unlocked cached tokens down to the free slots beyond its ``n`` tokens).
    Each earlier round's check evicted the same least-recently-used leaves down to a higher bound, and
    nothing touches the cache in between, so this one call leaves the cache (and its evicted-token count) as
    the rounds one by one do, before a prefill batch matches it at the next round's top."""
    cache = work.cache
    free = work.capacity - before - work.extra_held + cache.shared
    if cache.evictable > free - n:
        cache.evict(free - n)


def _record(record: dict, batches: Sequence[int], tokens: Sequence[int]) -> None:
    """Add to ``record`` (:attr:`PdmuxPolicy.record`) the decode batch sizes a run chose a stream group at
    (or crashed at) and the prefills' token counts it read layers a round for."""
    record.setdefault("batches", set()).update(batches)
    record.setdefault("tokens", set()).update(tokens)


class _PdmuxRun:
    """:func:`pdmux_rounds`' state: what the run's handlers share (:func:`_pdmux_admit`,
    :func:`_pdmux_prefill_alone`, :func:`_pdmux_round`, :func:`_pdmux_runs`, :func:`_pdmux_steps`,
    :func:`_pdmux_outcome`). Fixed for the run: the step model's terms, the stream groups and their
    thresholds, the knobs, caches per batch size (``group_of``, ``layers_of``, ``cpu_of``, ``lines``).
    Moving: the time ``t`` (s), the next arrival the scheduler sees ``next_t``, the router's ``horizon``, the
    progress tick, the group running, the prefill batch in flight (``pf``: its requests, ``None`` when
    none; its sequences, the group's prefill and decode SMs, layers submitted and a round, seconds a layer
    on its stream, when that stream is free), counters, group seconds, 0.5.23's crash."""

    __slots__ = (
        "setup", "step_model", "total", "groups", "n_groups", "last", "thresholds", "divisor", "budget",
        "layers",
        "graph_max", "cpu_s", "request_s", "launch_layer_s", "decode_launch_s", "eager_decode", "cache",
        "fast_memory", "min_ratio", "ratio_decay", "capacity", "runs", "lines", "closed", "group_of",
        "layers_of", "cpu_of", "plan", "max_layers", "fallback", "append", "every",
        "ahead", "group_time", "counters", "crash_first", "crashed_at", "unfinished", "t", "idle", "group",
        "pf", "pf_seqs", "pf_p", "pf_d", "submitted", "per_round", "layer_s", "stream_free",
        "finished_last_round", "next_progress", "horizon", "next_t", "fixed")

    def __init__(self, work: Work, setup: Setup, policy: PdmuxPolicy) -> None:
        self.setup = setup
        step_model = self.step_model = setup.step_model
        cfg = policy.config
        self.total = total = setup.total_sms
        plan = self.plan = split_levels.plan_groups(total, setup.compute_capability, cfg.sm_group_num,
                                                    cfg.manual_divisions or None)
        self.groups = [tuple(g) for g in plan.groups]
        self.n_groups = len(self.groups)
        self.last = self.n_groups - 1
        self.thresholds = plan.thresholds
        self.divisor, self.budget = cfg.decode_bs_divisor, cfg.split_forward_token_budget
        self.max_layers = policy.max_split_forward_layers
        self.fallback = policy.unreleased_fallback
        self.layers = setup.model.num_layers
        self.graph_max = setup.graph_max_bs
        self.cpu_s = step_model.decode_cpu_s
        self.request_s = step_model.request_s
        # SGLang launches the split prefill's layers eagerly (model_runner.forward_split_prefill), on the CPU
        # thread that launches the decode step: host seconds a layer
        self.launch_layer_s = step_model.prefill_launch_s(1)
        self.decode_launch_s = step_model.launch_cpu_s()  # a decode step's launches outside a CUDA graph
        self.eager_decode = setup.disable_cuda_graph  # --disable-cuda-graph: every decode step eager
        cache = self.cache = work.cache
        self.fast_memory = cache is None
        self.min_ratio, self.ratio_decay = work.ratio_floor, work.ratio_decay  # the release's (decay_ratio)
        self.capacity = work.capacity
        # event speed: the quiet rounds between two events advanced at once (_pdmux_decode_run without a
        # prefill in flight, _pdmux_split_run with one), with a prefix cache too (the evictions of the
        # rounds' memory checks made once after each run: _evict_after); round by round with --step-by-step,
        # and with a prefix cache under speculative rounds' fractional growth
        self.runs = (cache is None or work.batch.growth == 1) and not setup.step_by_step
        self.lines: dict = {}  # the step model's decode_line per (SMs, batch, co-run SMs, CUDA graph)
        self.closed = work.sent >= 0  # a closed-loop client: a finish may send the next request
        self.group_of: dict[int, int] = {}  # choose_group per decode batch at a prefill's start
        self.layers_of: dict[int, int] = {}  # prefill_layers_per_round per prefill batch's tokens
        self.cpu_of = _CpuCache(self.cpu_s)
        self.append = work.ends.fast_append
        self.ahead = self.decode_launch_s if self.eager_decode else 0.0
        self.group_time = [0.0] * self.n_groups
        self.counters = {"prefill_batches": 0, "rounds": 0, "older_sglang_crash_rounds": 0,
                         "decode_emptied_during_prefill": 0}
        self.crash_first: tuple[float, int] | None = None
        self.crashed_at: float | None = None
        self.unfinished: set[int] = set()
        self.t = self.idle = 0.0
        self.group = self.last if work.batch.n else 0
        self.pf: list[int] | None = None
        self.pf_seqs: list[tuple[int, int]] = []
        self.pf_p = self.pf_d = self.submitted = self.per_round = 0
        self.layer_s = self.stream_free = 0.0
        self.finished_last_round = False
        self.next_progress = self.every = work.ends.check_every
        self.horizon = work.horizon
        self.next_t = work.next_arrival_time()
        # what _pdmux_runs reads and never changes, unpacked once a call
        self.fixed = (work.batch, work.ends, setup, cache, self.fast_memory, self.capacity, self.closed,
                      self.min_ratio, self.layers, self.last, self.group_time, self.cpu_of, self.request_s,
                      self.graph_max, self.lines)


def pdmux_rounds(work: Work, setup: Setup, policy: PdmuxPolicy, progress: Progress | None = None) -> Rounds:
    """:func:`run_pdmux` as a generator, pausing as :func:`baseline_rounds` does. The quiet rounds between
    two events (a finish or window/clip crossing, a horizon, a prefill batch that can be formed, the KV pool,
    the progress tick, a prefill's merge) are advanced at once (:func:`_pdmux_runs`), the event round with
    them (its records made as the round loop makes them), going on past the arrivals the scheduler sees
    (received at the round's top, as there); equal to the round loop to the bit, with a prefix cache too
    (:func:`_evict_after`); round by round with ``setup.step_by_step`` (the reference,
    :func:`_pdmux_steps`) and with a prefix cache under speculative rounds. A round's top here; a prefill
    batch's admission (:func:`_pdmux_admit`), a prefill left alone (:func:`_pdmux_prefill_alone`) and a
    round with a decode step (:func:`_pdmux_round`) in their handlers. Raises :class:`InputError` where the
    policy's revision cannot run pdmux beside ``setup.speculation``."""
    if setup.speculation is not None and policy.sglang is not None:
        from ..sglang.speculative_args import check_pdmux_speculation

        check_pdmux_speculation(policy.sglang, setup.speculation)
    run = _PdmuxRun(work, setup, policy)
    batch = work.batch
    fast_memory, capacity = run.fast_memory, run.capacity
    min_ratio, ratio_decay = run.min_ratio, run.ratio_decay
    while True:
        if run.t >= run.horizon:
            yield run.t
            run.horizon = work.horizon
            run.next_t = work.next_arrival_time()
        work.finished_mark = work.finished
        if run.t >= run.next_t:
            work.receive(run.t)
            run.next_t = work.next_arrival_time()
        if not batch.n:
            work.batch_full = False
        if run.pf is None and work.waiting and not work.batch_full and not _pdmux_admit(work, run):
            break  # 0.5.23 crashes
        if run.finished_last_round:  # update_running_batch drops them: "full" clears one round late
            work.batch_full = False
            run.finished_last_round = False
        n = batch.n
        if n:
            if fast_memory and capacity - batch.sum_context - work.extra_held >= n:
                ratio = work.ratio
                if ratio > min_ratio:  # Work.decay_ratio, inline: the hot path
                    work.ratio = max(min_ratio, ratio - ratio_decay)
            elif not work.check_decode_memory():
                work.decay_ratio()
            n = batch.n
        if n == 0:
            if run.pf is not None:
                _pdmux_prefill_alone(work, run)
                continue
            nxt = yield from _wait_for_arrival(work, run.t)
            if nxt is None:
                break
            run.idle += nxt - run.t
            run.t = nxt
            run.next_t = work.next_arrival_time()
            continue
        finished = _pdmux_round(work, run, n, progress)
        if run.runs:
            _pdmux_runs(work, run, finished, progress)
        elif run.pf is None and not finished:
            _pdmux_steps(work, run, progress)
    return _pdmux_outcome(work, run, policy)


def _pdmux_admit(work: Work, run: _PdmuxRun) -> bool:
    """A round's top with no prefill in flight and requests waiting: forms a prefill batch and starts it on
    the stream group chosen for the decode batch (``choose_group``) with its layers a round
    (``prefill_layers_per_round``). ``False`` when 0.5.23 crashes at that choice without the fallback."""
    seqs, rids = work.form_prefill_batch(None)
    if not rids:
        return True
    run.counters["prefill_batches"] += 1
    bs = work.batch.n
    if run.thresholds and split_levels.older_sglang_crashes(run.thresholds, bs):
        run.counters["older_sglang_crash_rounds"] += 1
        if run.crash_first is None:
            run.crash_first = (run.t, bs)
        if not run.fallback:
            run.crashed_at = run.t
            run.unfinished = work.pending() | set(rids)
            return False
    group = run.group_of.get(bs)
    if group is None:
        group = run.group_of[bs] = split_levels.choose_group(run.n_groups, bs, True, run.divisor,
                                                             run.thresholds)
    run.group = group
    run.pf_p, run.pf_d = run.groups[group]
    run.pf, run.pf_seqs = rids, seqs
    run.layer_s = run.step_model.prefill_s(run.pf_p, seqs, run.pf_d if bs else 0) / run.layers
    tokens = sum(new for new, _ in seqs)
    per_round = run.layers_of.get(tokens)
    if per_round is None:
        per_round = run.layers_of[tokens] = split_levels.prefill_layers_per_round(
            tokens, run.layers, run.budget, run.max_layers)
    run.per_round = per_round
    run.submitted = 0
    run.stream_free = run.t
    return True


def _pdmux_prefill_alone(work: Work, run: _PdmuxRun) -> None:
    """The decode batch is empty with a prefill in flight: the prefill's remaining layers run to its end
    (on the whole GPU: a split's streams synchronised first, moving to group 0), then its first tokens."""
    t = run.t
    step_model = run.step_model
    if run.group != 0:
        # decode emptied during a split prefill: sync both streams, move to group 0
        run.counters["decode_emptied_during_prefill"] += 1
        if run.stream_free > t:
            run.group_time[run.group] += run.stream_free - t
            t = run.stream_free
        run.group = 0
        run.layer_s = step_model.prefill_s(run.total, run.pf_seqs) / run.layers
    left = run.layers - run.submitted
    pf = run.pf
    done = (max(t, run.stream_free) + max(left * run.layer_s, left * run.launch_layer_s) + run.cpu_s(len(pf))
            + step_model.request_s(len(pf)))
    run.group_time[0] += done - t
    run.t = done
    work.first_tokens(pf, done)
    if run.closed:
        run.next_t = work.next_arrival_time()
    run.pf = None
    run.group = run.last if work.batch.n else 0


def _pdmux_round(work: Work, run: _PdmuxRun, n: int, progress: Progress | None) -> list[int]:
    """One round with a decode step of ``n`` requests (after the round's top): beside the prefill in flight
    (the next slice of its layers submitted, co-run interference while its stream is busy) or on the whole
    GPU; its records (finishes, the prefill's merge, the progress tick). Returns the requests it finished."""
    batch = work.batch
    step_model = run.step_model
    t = run.t
    if run.pf is not None:
        launch = 0.0
        layers, submitted = run.layers, run.submitted
        if submitted < layers:
            per_round = run.per_round
            k = per_round if submitted + per_round <= layers else layers - submitted
            # the round's thread launches the decode step first (run_batch on the decode stream), then
            # the prefill layers: without CUDA graphs the decode step's kernels go one by one ahead of
            # them (0 from a graph). A batch above cuda_graph_max_bs is eager too and its launches come
            # first as well, but keeps the longer of the two as before --disable-cuda-graph, so that
            # runs without the flag stay as they were
            ahead = run.ahead = run.decode_launch_s if run.eager_decode else 0.0
            start = t + ahead
            run.stream_free = max(start + k * run.launch_layer_s,
                                  max(start, run.stream_free) + k * run.layer_s)
            launch = ahead + k * run.launch_layer_s
            run.submitted = submitted + k
        tau = pdmux_round_s(step_model, run.pf_d, n, batch.sum_context, batch.sum_window,
                            run.pf_p if run.stream_free > t else 0, n <= run.graph_max)
        if launch:  # the round's CPU launches the prefill layers too: not done before they are
            tau = max(tau, launch + run.cpu_s(n) + step_model.request_s(n))
        run.group_time[run.group] += tau
    else:
        tau = pdmux_round_s(step_model, run.total, n, batch.sum_context, batch.sum_window, 0,
                            n <= run.graph_max)
        run.group_time[run.last] += tau
    t += tau
    run.t = t
    ends = work.ends
    step = ends.base + len(ends)
    run.append(t)
    finished = batch.complete(step)
    if finished:
        work.release(finished, t)
        if run.closed:  # a closed-loop client sends on a finish (else the next arrival stays)
            run.next_t = work.next_arrival_time()
        run.finished_last_round = True
    if run.pf is not None and run.submitted >= run.layers and run.stream_free <= t:
        work.first_tokens(run.pf, t)
        if run.closed:
            run.next_t = work.next_arrival_time()
        run.pf = None
        run.group = run.last if batch.n else 0
    if step >= run.next_progress:
        run.next_progress += run.every
        work.tick()
        if progress is not None:
            progress(work.finished)
    return finished


def _pdmux_runs(work: Work, run: _PdmuxRun, finished: list[int], progress: Progress | None) -> None:
    """After a round: the next rounds at once while the round-top checks say nothing else happens (the
    quiet rounds and the event round after them: :func:`_pdmux_decode_run` with no prefill in flight,
    :func:`_pdmux_split_run` with one), each run's records as the round loop makes them; returns at the
    top of a round that does something else (a pause, a prefill batch, an idle server, a memory check that
    may retract)."""
    (batch, ends, setup, cache, fast_memory, capacity, closed, min_ratio, layers, last, group_time, cpu_of,
     request_s, graph_max, lines) = run.fixed
    t, next_t, horizon, next_progress, pf = run.t, run.next_t, run.horizon, run.next_progress, run.pf
    split = None  # the prefill in flight's terms (:func:`_pdmux_split_run`), the same until it is merged
    while True:
        if t >= horizon:
            break  # a pause: the top of the next round
        if t >= next_t:  # the next round's top: arrivals join the queue (as there, once at this time)
            work.finished_mark = work.finished
            work.receive(t)
            next_t = work.next_arrival_time()
        if pf is None and work.waiting and not work.batch_full:
            break  # a prefill batch is formed at the next round's top
        n = batch.n
        held = work.extra_held if fast_memory else work.extra_held - cache.shared  # (shared cache once)
        if not n or not capacity - batch.sum_context - held >= n:
            break  # an idle server, or a memory check that may retract
        step = ends.base + len(ends)
        # the quiet rounds, then the event round (a finish, a window or clip crossing, the progress tick)
        quiet = min(batch.quiet_steps(step), next_progress - step)
        limit = quiet + 1
        if batch.growth == 1:
            room = (capacity - held - n - batch.sum_context) // n + 1  # rounds whose KV fits
            if room < limit:
                limit = quiet = room
        if limit < 1:
            break
        if finished:  # the round after a finish: its top clears "full", after the check for a prefill
            work.batch_full = False
            run.finished_last_round = False
            finished = None
            if pf is None and work.waiting:
                limit = 1  # the round after it may form a prefill batch
                quiet = min(quiet, 1)
        work.finished_mark = work.finished
        until = horizon if horizon < next_t else next_t
        cpu = cpu_of.get(n) or cpu_of.add(n)
        if pf is None:
            done, t, group_time[last] = _pdmux_decode_run(
                work, setup, n, t, limit, quiet, cpu, request_s(n), n <= graph_max, until,
                group_time[last], lines)
        else:
            if split is None:
                split = (run.pf_d, run.pf_p, layers, run.per_round, run.layer_s, run.launch_layer_s,
                         run.ahead)
            done, t, group_time[run.group], run.stream_free, run.submitted = _pdmux_split_run(
                work, setup, n, t, limit, quiet, cpu, request_s(n), n <= graph_max, until,
                group_time[run.group], lines, split, run.stream_free, run.submitted)
        if not done:
            break
        if cache is not None:  # the evictions of the rounds' memory checks, before any record of theirs
            _evict_after(work, n, batch.sum_context if done > quiet else batch.sum_context - n)
        if work.ratio > min_ratio:  # the rounds' decays (as the round loop's, one by one)
            work.decay_ratio_steps(done)
        if done > quiet:  # the run's last round was the event round: its records, as the round loop's
            step = ends.base + len(ends) - 1
            finished = batch.complete(step)
            if finished:
                work.release(finished, t)
                if closed:  # a closed-loop client sends on a finish (else the next arrival stays)
                    next_t = work.next_arrival_time()
                run.finished_last_round = True
        if pf is not None and run.submitted >= layers and run.stream_free <= t:
            work.first_tokens(pf, t)  # merged at the end of the run's last round
            if closed:
                next_t = work.next_arrival_time()
            pf = run.pf = None
            run.group = last if batch.n else 0
        if done > quiet and step >= next_progress:
            next_progress += run.every
            work.tick()
            if progress is not None:
                progress(work.finished)
    run.t, run.next_t, run.next_progress = t, next_t, next_progress


def _pdmux_steps(work: Work, run: _PdmuxRun, progress: Progress | None) -> None:
    """The step loop (``setup.step_by_step``, the reference; and a prefix cache under speculative rounds):
    after a round with no prefill in flight and no finish, each next round on the whole GPU while the
    checks at a round's top say nothing else happens (a pause, arrivals, a prefill batch, an idle server,
    a memory check that may retract), one at a time."""
    batch, ends, step_model = work.batch, work.ends, run.step_model
    capacity, min_ratio, ratio_decay, total = run.capacity, run.min_ratio, run.ratio_decay, run.total
    append, graph_max, last, group_time = run.append, run.graph_max, run.last, run.group_time
    t = run.t
    finished = None
    while not finished:
        if t >= run.horizon or t >= run.next_t or (work.waiting and not work.batch_full):
            break  # (the checks at the top of a round, in order: a pause, arrivals, a prefill batch)
        n = batch.n  # (a prefill merged at the end of the round changes it)
        if not n or not (run.fast_memory and capacity - batch.sum_context - work.extra_held >= n):
            break  # an idle server, or a memory check that may retract
        work.finished_mark = work.finished
        ratio = work.ratio
        if ratio > min_ratio:  # max(min_ratio, ratio - ratio_decay), exactly
            ratio -= ratio_decay
            work.ratio = ratio if ratio > min_ratio else min_ratio  # noqa: FURB136 - no call (hot path)
        tau = pdmux_round_s(step_model, total, n, batch.sum_context, batch.sum_window, 0, n <= graph_max)
        group_time[last] += tau
        t += tau
        step = ends.base + len(ends)
        append(t)
        finished = batch.complete(step)
        if finished:
            work.release(finished, t)
            run.next_t = work.next_arrival_time()
            run.finished_last_round = True
        if step >= run.next_progress:
            run.next_progress += run.every
            work.tick()
            if progress is not None:
                progress(work.finished)
    run.t = t


def _pdmux_outcome(work: Work, run: _PdmuxRun, policy: PdmuxPolicy) -> ServerOutcome:
    """:func:`pdmux_rounds`' :class:`~pdmux_cli.simulate.policies.ServerOutcome`: counters, notes (0.5.23's
    crash, or the choices at which it would have crashed; the plan's), and the points the run read the
    knobs at (:attr:`PdmuxPolicy.record`, for :func:`pdmux_choices`)."""
    crash_first, counters = run.crash_first, run.counters
    if policy.record is not None:  # the points this run read the knobs at (pdmux_choices)
        _record(policy.record, [*run.group_of, *([crash_first[1]] if crash_first else [])], run.layers_of)
    counters["rounds"] = work.ends.total
    counters["retracted_requests"] = work.retractions
    counters.update(work.cache_counters())
    notes: list = []
    if run.crashed_at is not None:
        values = {"at_s": run.crashed_at, "decode_bs": crash_first[1], "unfinished": len(run.unfinished)}
        notes.append(Finding("simulate.release_crashes", values, "unreleased_fallback"))
    elif crash_first is not None:
        notes.append(Finding("simulate.release_would_crash", {
            "choices": counters["older_sglang_crash_rounds"], "first_at_s": crash_first[0],
            "decode_bs": crash_first[1]}, "unreleased_fallback"))
    if run.plan.note:
        notes.append(run.plan.note)
    return ServerOutcome(end_s=run.t, idle_s=run.idle, counters=counters, notes=notes, groups=run.groups,
                         group_time_s=run.group_time, crashed_at_s=run.crashed_at, unfinished=run.unfinished)


def decode_instance_rounds(work: Work, setup: Setup, progress: Progress | None = None) -> Rounds:
    """A PD-disaggregation decode instance (SGLang 0.5.23 ``--disaggregation-mode decode``), as a generator
    pausing as :func:`baseline_rounds` does. Requests arrive (``work.arrival``) when their KV cache has
    been transferred; each round the waiting ones are admitted by KV memory (the same admission as a
    prefill batch, :meth:`Work.form_prefill_batch`) and merged into the running batch without a forward
    pass, their first token streamed then (``srt/disaggregation/decode.py``
    ``get_next_disagg_decode_batch_to_run``: the prebuilt batch), then one decode step runs on the whole
    GPU; a round lasts ``max(GPU, CPU)`` with the overlap scheduler. A request retracted for KV memory
    is prefilled again here (prompt and the outputs it had) when readmitted. Returns its
    :class:`~pdmux_cli.simulate.policies.ServerOutcome`."""
    return (yield from baseline_rounds(work, setup, PrefillFirstPolicy(), progress, transferred=True))
