"""The simulated GPU: setup, step costs, the running decode batch, KV memory, and one run's raw record.

Shared by the three schedulers in :mod:`pdmux_cli.simulate.schedulers` (see that module's docstring
for the modelling choices of each policy). Everything here is pure Python and deterministic.

Modelling choices common to every policy:

- **Times** come from the roofline cost model (:mod:`pdmux_cli.cost`): a decode step of ``n``
  requests is ``max((weights read + KV read) / bandwidth, (linear + attention FLOPs) / FLOP/s)``
  exactly as :func:`pdmux_cli.cost.decode_step_s_batch` (re-stated in :class:`StepCost` with
  per-SM-count caches, and tested equal); prefill is compute-bound, ``cost.prefill_flops / FLOP/s``.
- **Decode batch totals** are kept as running sums so one step costs O(1): the sum of contexts
  (``kv_bytes`` and ``decode_attention_flops`` are ``a * context + b * min(context, window)``; the
  coefficients are read off :mod:`pdmux_cli.model` once) and, for sliding-window models, the sum of
  ``min(context, window)`` with a heap of the steps where requests cross the window.
- **A request's context** at its j-th decode step is ``prompt + j - 1`` tokens (the KV already cached;
  the step writes one more). The first output token comes out of prefill; the other ``output - 1``
  come from decode steps, one per step; a request is in every decode step from the one after its
  first token until its last.
- **KV memory**: capacity in tokens = ``(memory * (1 - reserve) - weight bytes) / KV bytes per
  token`` (uncapped by sliding windows: SGLang's token pool allocates per token). A request reserves
  ``prompt + output`` tokens when admitted (its output length is in the trace, so nothing is ever
  preempted) and frees them when it finishes; waiting requests are admitted FIFO with head-of-line
  blocking. A request that needs more than the whole capacity is *rejected* up front and reported.
- **Records**: the end time of every decode step (one float a step) and, per request, its first-token
  time and the index of its first decode step; ITLs are recovered from step end times afterwards
  (:mod:`pdmux_cli.simulate.metrics`), so no per-token Python work is done during the run.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .. import cost
from .. import model as mdl
from ..errors import InputError
from ..model import Model

#: SGLang's default ``--max-prefill-tokens``: the token cap of one prefill batch (without chunking
#: a longer prompt still runs, alone).
DEFAULT_MAX_PREFILL_TOKENS = 16384

#: Default share of GPU memory kept free of KV cache (activations, CUDA graphs, fragmentation).
DEFAULT_MEMORY_RESERVE = 0.10

#: Largest share of GPU memory that may be kept free of KV cache (a larger reserve is a typo, and
#: ``{:.0%}`` would print 0.99999 as "100%").
MAX_MEMORY_RESERVE = 0.95

#: Bytes per weight or KV-cache element pdmux accepts: a 0.5-bit format (1/16 byte) up to fp128.
BYTES_PER_ELEMENT_RANGE = (0.0625, 16.0)

#: Bandwidth efficiency and MFU: fractions of the datasheet figures, at least 0.1 %.
EFFICIENCY_RANGE = (0.001, 1.0)

#: Most decode steps one simulated policy may take. Memory grows with the steps (their end times,
#: then sorting the ITL distribution: about 130 bytes a step at the peak, so under 1 GB here); the
#: whole Azure conv trace takes 0.5 M steps (3.9 M with chunked prefill of 1 token per step).
MAX_DECODE_STEPS = 6_000_000


class StepEnds(array):
    """End time (s) of every decode step, 8 bytes each (an ``array('d')``), at most
    :data:`MAX_DECODE_STEPS`: ``append`` raises :class:`InputError` past it, naming the way out."""

    def __new__(cls) -> StepEnds:  # noqa: PYI034 - typing.Self needs Python 3.11
        return super().__new__(cls, "d")

    def append(self, end_s: float) -> None:
        if len(self) >= MAX_DECODE_STEPS:
            raise InputError(
                f"the simulation passed {MAX_DECODE_STEPS:,} decode steps (long outputs that barely overlap, or "
                "tiny chunks): simulate fewer requests (--max-requests, --duration) or larger --chunk-sizes"
            )
        super().append(end_s)


#: A progress callback receives the number of requests finished so far.
Progress = Callable[[int], None]


def _real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_memory_reserve(value: float, name: str = "memory reserve") -> None:
    """:class:`InputError` unless ``value`` is a fraction in [0, :data:`MAX_MEMORY_RESERVE`]."""
    if not (_real(value) and 0 <= value <= MAX_MEMORY_RESERVE):
        raise InputError(f"{name} must be a fraction in [0, {MAX_MEMORY_RESERVE:g}], got {value}")


def check_bytes_per_element(value: float | None, name: str) -> None:
    """:class:`InputError` unless ``value`` (bytes per weight or KV element) is ``None`` or within
    :data:`BYTES_PER_ELEMENT_RANGE`."""
    lo, hi = BYTES_PER_ELEMENT_RANGE
    if value is not None and not (_real(value) and lo <= value <= hi):
        raise InputError(f"{name} must be between {lo:g} and {hi:g} bytes per element (a few bits to fp128), "
                         f"got {value}")


def check_efficiency(value: float, name: str) -> None:
    """:class:`InputError` unless ``value`` is a fraction within :data:`EFFICIENCY_RANGE`."""
    lo, hi = EFFICIENCY_RANGE
    if not (_real(value) and lo <= value <= hi):
        raise InputError(f"{name} must be a fraction in [{lo:g}, {hi:g}], got {value}")


@dataclass(frozen=True)
class Setup:
    """The simulated device and model.

    ``throughput``: a :class:`pdmux_cli.cost.Throughput` (analytic or calibrated).
    ``total_sms``: SMs. ``compute_capability``: ``(major, minor)`` (for SGLang's split levels).
    ``memory_bytes``: device memory, bytes. ``weight_bytes_per_param``: ``None`` for the model's
    dtype. ``kv_bytes_per_element``: bytes (bf16 2, fp8 1). ``memory_reserve``: fraction of memory
    kept free (0-1). ``max_prefill_tokens``: tokens of one prefill batch (prefill-first and pdmux).
    ``gpu_name``: for output.
    """

    model: Model
    throughput: cost.Throughput
    total_sms: int
    compute_capability: tuple[int, int]
    memory_bytes: float
    weight_bytes_per_param: float | None = None
    kv_bytes_per_element: float = 2.0
    memory_reserve: float = DEFAULT_MEMORY_RESERVE
    max_prefill_tokens: int = DEFAULT_MAX_PREFILL_TOKENS
    gpu_name: str = ""

    def __post_init__(self) -> None:
        check_memory_reserve(self.memory_reserve)
        check_bytes_per_element(self.kv_bytes_per_element, "KV bytes per element")
        check_bytes_per_element(self.weight_bytes_per_param, "weight bytes per parameter")
        if not (_real(self.memory_bytes) and self.memory_bytes > 0):
            raise InputError(f"device memory must be a positive number of bytes, got {self.memory_bytes}")
        if self.max_prefill_tokens < 1:
            raise InputError(f"max prefill tokens must be >= 1, got {self.max_prefill_tokens}")
        if self.total_sms < 1:
            raise InputError(f"SM count must be >= 1, got {self.total_sms}")

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights (:func:`pdmux_cli.model.weight_bytes_total`)."""
        return mdl.weight_bytes_total(self.model, self.weight_bytes_per_param)

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes per cached token, all layers, uncapped (:func:`pdmux_cli.model.kv_bytes_per_token`)."""
        return mdl.kv_bytes_per_token(self.model, self.kv_bytes_per_element)

    def kv_capacity_tokens(self) -> int:
        """Tokens the KV cache holds: ``(memory * (1 - reserve) - weights) // KV bytes per token``.

        Raises :class:`InputError` when the weights alone do not fit (no KV space left).
        """
        free = self.memory_bytes * (1.0 - self.memory_reserve) - self.weight_bytes
        per_token = self.kv_bytes_per_token
        room = free // per_token if free > 0 else 0.0
        if not math.isfinite(room):  # cannot happen within the checked ranges; never an OverflowError
            raise InputError(f"KV capacity is not a finite number of tokens ({free:g} B free, {per_token:g} B/token)")
        tokens = int(room)
        if tokens < 1:
            raise InputError(
                f"{self.model.name} does not fit {self.gpu_name or 'this GPU'}: {self.weight_bytes / 1e9:.1f} GB of "
                f"weights leave no KV cache in {self.memory_bytes / 1e9:.1f} GB less a "
                f"{self.memory_reserve:.0%} reserve (use fewer bytes per weight or a bigger GPU)"
            )
        return tokens


def make_setup(
    gpu,
    model: Model,
    *,
    s_sat: float | None = None,
    bandwidth_efficiency: float = 0.85,
    mfu: float = 0.5,
    calibrated: cost.Throughput | None = None,
    weight_bytes_per_param: float | None = None,
    kv_bytes_per_element: float = 2.0,
    memory_reserve: float = DEFAULT_MEMORY_RESERVE,
    max_prefill_tokens: int = DEFAULT_MAX_PREFILL_TOKENS,
    flops_dtype: str | None = None,
) -> Setup:
    """A :class:`Setup` for a GPU profile (:class:`pdmux_cli.hardware.Gpu`) and a model.

    Throughput: ``calibrated`` when given (with its measured co-run interference), else
    :class:`pdmux_cli.cost.AnalyticThroughput` with ``s_sat`` SMs (default half the SM count),
    ``bandwidth_efficiency`` and ``mfu`` (fractions), dense FLOP/s of ``flops_dtype`` (default as
    :func:`pdmux_cli.estimate.pick_flops_dtype`). Raises :class:`InputError` for a GPU without an
    SM count, memory or bandwidth figures, or bad fractions.
    """
    from ..estimate import pick_flops_dtype

    check_efficiency(bandwidth_efficiency, "bandwidth efficiency")
    check_efficiency(mfu, "MFU")
    total = gpu.require_sm_count()
    if not gpu.memory_bytes or not gpu.hbm_bytes_per_s:
        raise InputError(f"{gpu.name} has no memory or bandwidth figures: simulate needs a full GPU profile (--gpu)")
    if calibrated is not None:
        throughput = calibrated
    else:
        dense = gpu.dense_flops(pick_flops_dtype(gpu, model, flops_dtype))
        throughput = cost.AnalyticThroughput(
            total, gpu.hbm_bytes_per_s, dense, bandwidth_efficiency, mfu, float(s_sat if s_sat is not None else total / 2)
        )
    return Setup(
        model=model, throughput=throughput, total_sms=total, compute_capability=tuple(gpu.compute_capability),
        memory_bytes=float(gpu.memory_bytes), weight_bytes_per_param=weight_bytes_per_param,
        kv_bytes_per_element=kv_bytes_per_element, memory_reserve=memory_reserve,
        max_prefill_tokens=max_prefill_tokens, gpu_name=gpu.name,
    )


def _linear_window_coefficients(fn: Callable[[int], float], window: int) -> tuple[float, float]:
    """``(a, b)`` with ``fn(c) == a * c + b * min(c, window)`` (``b = 0`` without a window)."""
    if not window:
        return fn(1), 0.0
    a = (fn(2 * window) - fn(window)) / window
    b = fn(window) / window - a
    return a, b


class StepCost:
    """Step times for one :class:`Setup`, with the per-SM-count throughputs cached.

    :meth:`decode_s` equals :func:`pdmux_cli.cost.decode_step_s_batch` for the batch totals (tested);
    :meth:`prefill_s` equals :func:`pdmux_cli.cost.prefill_s` given the FLOPs.
    """

    def __init__(self, setup: Setup) -> None:
        m = setup.model
        self.setup = setup
        self.model = m
        self.throughput = setup.throughput
        self.linear_flops = mdl.flops_per_token_linear(m)
        self.window = m.sliding_window if m.num_sliding_layers else 0
        kvb = setup.kv_bytes_per_element
        self.kv_a, self.kv_b = _linear_window_coefficients(lambda c: mdl.kv_bytes(m, c, kvb), self.window)
        self.attn_a, self.attn_b = _linear_window_coefficients(lambda c: mdl.decode_attention_flops(m, c), self.window)
        self._weight_bytes: list[float] = [0.0]
        self._decode_rates: dict[tuple[int, int], tuple[float, float]] = {}
        self._prefill_rates: dict[tuple[int, int], float] = {}

    def weight_bytes(self, decode_bs: int) -> float:
        """Bytes of weights a decode step of ``decode_bs`` requests reads (cached per batch size)."""
        cache = self._weight_bytes
        while len(cache) <= decode_bs:
            cache.append(mdl.decode_weight_bytes(self.model, len(cache), self.setup.weight_bytes_per_param))
        return cache[decode_bs]

    def _decode_rate(self, sms: int, corun_prefill_sms: int) -> tuple[float, float]:
        key = (sms, corun_prefill_sms)
        rates = self._decode_rates.get(key)
        if rates is None:
            if sms < 1:
                raise InputError(f"a decode step needs at least 1 SM, got {sms}")
            bandwidth = self.throughput.bandwidth_bytes_per_s(sms)
            if corun_prefill_sms:
                bandwidth *= self.throughput.corun_bandwidth_factor(corun_prefill_sms, sms)
            rates = (1.0 / bandwidth, 1.0 / self.throughput.flops_per_s(sms))
            self._decode_rates[key] = rates
        return rates

    def decode_s(self, sms: int, decode_bs: int, sum_context: float, sum_window: float = 0.0,
                 corun_prefill_sms: int = 0) -> float:
        """Seconds of one decode step on ``sms`` SMs for ``decode_bs`` requests whose contexts sum to
        ``sum_context`` tokens (``sum_window``: sum of ``min(context, window)``, sliding-window models).
        ``corun_prefill_sms`` > 0: prefill runs on that many other SMs (co-run bandwidth factor)."""
        if decode_bs <= 0:
            return 0.0
        inv_bw, inv_flops = self._decode_rate(sms, corun_prefill_sms)
        kv = self.kv_a * sum_context + self.kv_b * sum_window
        attn = self.attn_a * sum_context + self.attn_b * sum_window
        weights = self._weight_bytes[decode_bs] if decode_bs < len(self._weight_bytes) else self.weight_bytes(decode_bs)
        memory_s = (weights + kv) * inv_bw
        compute_s = (decode_bs * self.linear_flops + attn) * inv_flops
        return max(compute_s, memory_s)

    def prefill_flops(self, tokens: int, cached_tokens: int = 0) -> float:
        """FLOPs of prefilling ``tokens`` after ``cached_tokens`` (:func:`pdmux_cli.cost.prefill_flops`)."""
        return cost.prefill_flops(self.model, tokens, cached_tokens)

    def flops_rate(self, sms: int, corun_decode_sms: int = 0) -> float:
        """Prefill FLOP/s on ``sms`` SMs, with the co-run factor when decode runs on ``corun_decode_sms``."""
        key = (sms, corun_decode_sms)
        rate = self._prefill_rates.get(key)
        if rate is None:
            if sms < 1:
                raise InputError(f"a prefill needs at least 1 SM, got {sms}")
            rate = self.throughput.flops_per_s(sms)
            if corun_decode_sms:
                rate *= self.throughput.corun_flops_factor(sms, corun_decode_sms)
            self._prefill_rates[key] = rate
        return rate

    def prefill_s(self, sms: int, flops: float, corun_decode_sms: int = 0) -> float:
        """Seconds to do ``flops`` of prefill on ``sms`` SMs (:func:`pdmux_cli.cost.prefill_s`)."""
        return flops / self.flops_rate(sms, corun_decode_sms)


class DecodeBatch:
    """The running decode batch as totals: size, sum of contexts, sum of windowed contexts.

    Requests join with their context (tokens cached) and the number of decode steps they still take;
    :meth:`complete` advances every member by one token (O(1) plus the members that finish, which
    come off a heap keyed by their last step index).
    """

    __slots__ = ("_cross", "_final", "_finish", "below_window", "n", "sum_context", "sum_window", "window")

    def __init__(self, window: int = 0) -> None:
        self.n = 0
        self.sum_context = 0
        self.sum_window = 0
        self.below_window = 0
        self.window = window
        self._finish: list[tuple[int, int]] = []
        self._cross: list[int] = []
        self._final: dict[int, int] = {}

    def join(self, rid: int, context: int, steps: int, first_step: int) -> None:
        """Add request ``rid`` with ``context`` tokens cached, taking ``steps`` (>= 1) decode steps from
        step index ``first_step`` on."""
        self.n += 1
        self.sum_context += context
        heapq.heappush(self._finish, (first_step + steps - 1, rid))
        self._final[rid] = context + steps
        w = self.window
        if w:
            if context < w:
                self.sum_window += context
                self.below_window += 1
                if w - context <= steps:
                    heapq.heappush(self._cross, first_step + (w - context) - 1)
            else:
                self.sum_window += w

    def complete(self, step: int) -> list[int]:
        """Step ``step`` is done: every member gained a token. Returns the requests that finished."""
        self.sum_context += self.n
        if self.window:
            self.sum_window += self.below_window
            cross = self._cross
            while cross and cross[0] <= step:
                heapq.heappop(cross)
                self.below_window -= 1
        finish = self._finish
        if not finish or finish[0][0] > step:
            return []
        done = []
        w = self.window
        while finish and finish[0][0] <= step:
            rid = heapq.heappop(finish)[1]
            done.append(rid)
            final = self._final.pop(rid)
            self.n -= 1
            self.sum_context -= final
            if w:
                if final < w:
                    self.sum_window -= final
                    self.below_window -= 1
                else:
                    self.sum_window -= w
        return done


@dataclass
class RunResult:
    """The raw record of one policy over one workload (times in seconds from the first arrival).

    Per request ``i`` (trace requests first, then any initial decode requests of a scenario):
    ``arrival_s``, ``prompt_tokens``, ``output_tokens``, ``decode_steps`` (output - 1 for trace
    requests), ``first_token_s`` (``nan`` if rejected), ``first_step`` (index into ``step_end_s`` of its
    first decode step, -1 when it takes none). ``rejected``: indices of requests that never fit in KV
    memory. ``step_end_s``: end time of every decode step. ``end_s``: time of the last event.
    ``idle_s``: seconds the GPU had nothing to run. ``group_time_s``: pdmux only, seconds spent in
    each stream group (``groups``). ``counters``: prefill batches, rounds, chunks...
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

    def finish_s(self, rid: int) -> float:
        """When request ``rid`` produced its last token (s); ``nan`` if rejected."""
        steps = self.decode_steps[rid]
        if steps and self.first_step[rid] >= 0:
            return self.step_end_s[self.first_step[rid] + steps - 1]
        return self.first_token_s[rid]


class Work:
    """The mutable state every scheduler shares: requests, queue, KV pool, decode batch, records."""

    def __init__(self, arrival: Sequence[float], prompt: Sequence[int], output: Sequence[int],
                 steps: Sequence[int], num_trace: int, capacity_tokens: int, window: int) -> None:
        n = len(arrival)
        self.arrival, self.prompt, self.output, self.steps = arrival, prompt, output, steps
        self.num_trace = num_trace
        self.capacity = capacity_tokens
        self.first_token = [math.nan] * n
        self.first_step = [-1] * n
        self.ends = StepEnds()
        self.batch = DecodeBatch(window)
        self.waiting: deque[int] = deque()
        self.free = capacity_tokens
        self.rejected = [i for i in range(num_trace) if prompt[i] + output[i] > capacity_tokens]
        rejected = set(self.rejected)
        self.order = [i for i in range(num_trace) if i not in rejected] if rejected else list(range(num_trace))
        self.next = 0  # index into order of the next arrival
        self.finished = 0

    def receive(self, t: float) -> None:
        """Move every request arrived by ``t`` (s) to the waiting queue."""
        order, arrival, i = self.order, self.arrival, self.next
        n = len(order)
        while i < n and arrival[order[i]] <= t:
            self.waiting.append(order[i])
            i += 1
        self.next = i

    def next_arrival(self) -> float | None:
        """Arrival time of the next request not yet received, or ``None``."""
        return self.arrival[self.order[self.next]] if self.next < len(self.order) else None

    def take_batch(self, max_tokens: int) -> tuple[list[int], int]:
        """A prefill batch: waiting requests FIFO while their prompts fit ``max_tokens`` (at least one)
        and their ``prompt + output`` fit the free KV tokens (head-of-line blocking). Reserves KV."""
        waiting, prompt, output = self.waiting, self.prompt, self.output
        batch: list[int] = []
        tokens = 0
        free = self.free
        while waiting:
            rid = waiting[0]
            p = prompt[rid]
            need = p + output[rid]
            if (batch and tokens + p > max_tokens) or need > free:
                break
            waiting.popleft()
            batch.append(rid)
            tokens += p
            free -= need
        self.free = free
        return batch, tokens

    def admit(self, rid: int) -> bool:
        """Reserve ``prompt + output`` KV tokens for ``rid`` if they fit; True when admitted."""
        need = self.prompt[rid] + self.output[rid]
        if need > self.free:
            return False
        self.free -= need
        return True

    def first_tokens(self, rids: Sequence[int], t: float) -> None:
        """``rids`` got their first token at ``t`` (s): they join decode from the next step on, or
        finish now when they want one token."""
        step = len(self.ends)
        batch, steps, prompt = self.batch, self.steps, self.prompt
        for rid in rids:
            self.first_token[rid] = t
            s = steps[rid]
            if s > 0:
                self.first_step[rid] = step
                batch.join(rid, prompt[rid], s, step)
            else:
                self.free += prompt[rid] + self.output[rid]
                self.finished += 1

    def release(self, rids: Sequence[int]) -> None:
        """``rids`` finished decoding: free their KV tokens."""
        prompt, output = self.prompt, self.output
        for rid in rids:
            self.free += prompt[rid] + output[rid]
        self.finished += len(rids)


def build_work(trace, setup: Setup, initial_decode: Sequence[tuple[int, int]] = ()) -> Work:
    """The :class:`Work` for a trace (:class:`pdmux_cli.simulate.traces.Trace`) plus optional running
    decode requests ``(context_tokens, remaining_decode_steps)`` present at time 0 (their first token
    counts as produced at 0; they take KV at once). Raises :class:`InputError` when the initial
    requests do not fit in KV memory or have non-positive sizes."""
    capacity = setup.kv_capacity_tokens()
    arrival = list(trace.arrival_s)
    prompt = list(trace.prompt_tokens)
    output = list(trace.output_tokens)
    steps = [o - 1 for o in output]
    n = len(arrival)
    for context, remaining in initial_decode:
        if context < 1 or remaining < 1:
            raise InputError(f"initial decode requests need context >= 1 and remaining steps >= 1, got {context}, {remaining}")
        arrival.append(0.0)
        prompt.append(context)
        output.append(remaining + 1)
        steps.append(remaining)
    window = setup.model.sliding_window if setup.model.num_sliding_layers else 0
    work = Work(arrival, prompt, output, steps, n, capacity, window)
    reserved = sum(prompt[rid] + output[rid] for rid in range(n, len(arrival)))  # context + remaining + 1
    if reserved > capacity:
        raise InputError(f"the initial decode batch needs {reserved} KV tokens, more than the {capacity} that fit")
    work.free -= reserved
    for rid in range(n, len(arrival)):
        work.first_token[rid] = 0.0
        work.first_step[rid] = 0
        work.batch.join(rid, prompt[rid], steps[rid], 0)
    return work
