"""One server's run cut in time: segments of a long trace simulated side by side on the cores, and stitched
where the server is idle, into the one run's result, float for float.

Why it is exact. SGLang's default loop keeps almost nothing across a moment its server is idle: nothing
runs, waits or is being prefilled, the KV pool is empty (no prefix cache: its tree outlives the idle time),
and ``new_token_ratio`` goes back to its initial value (``self_check_during_idle``, which
:meth:`~pdmux_cli.simulate.engine.Work.idle` simulates). What carries on is the *signature* of that
moment: the next request (rid), when the scheduler sees it (the front end's admission interval chains one
request's to the previous one's), when the next round starts, and the decode-only rounds still deferred
(``prefill_decode_interval``). Two runs over the same requests from that rid on that are idle before it
with the same signature go on identically: the same rounds, steps and floats.

So with ``k`` segments, segment ``j`` simulates the trace's requests from ``starts[j]`` on (``starts[0]``
is 0) on a server that starts empty, the first in the calling process and each other in a process of its
own (:func:`run_segments`):

- each segment after the first takes **marks**: its first idle moments (at most :data:`MARKS`, within
  :data:`WINDOW_REQUESTS` of its start) with their signatures, and what it had counted by then (ITL
  entries, finished requests, steps, counters); it publishes the signatures on a :class:`Board` (shared
  memory) once its window is over (an idle moment or a progress tick past it, :data:`MARKS` marks, or its
  run's end), and its ITL entries from then on go to a sample of their own (those before are kept exact,
  for a mark to cut them);
- a segment idle before a later segment's marked request, with the same signature, **stops** there: the
  later segment's run is the one run's from that request on (it never waits: a mark not there yet is a
  moment passed by);
- :func:`stitch` takes each request from the segment that ran it as the one run does (segment 0 up to its
  stop, then the segment it stopped at from the mark on...), the ITL entries and counters the same way,
  and sums the idle gaps in the one run's order (each segment keeps its own), so the result is the one
  run's, float for float.

A segment that finds no mark to stop at (a server never idle near the later segments' starts) runs on to
the end, its run taken from where it was entered to its end: the same result, only not sooner; a later
segment stops once no earlier one can stop at it any more (:meth:`Board.needed`). Used for SGLang's
default loop (chunked, mixed chunk, prefill-first:
:attr:`~pdmux_cli.simulate.schedulers.ServerPolicy.splits_in_time`),
one server without a router, open loop, no prefix cache, not ``--step-by-step`` (:func:`segments_for`).
"""

from __future__ import annotations

import bisect
import math
import multiprocessing
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..util.errors import InputError

#: Fewest requests a segment is given: below it the processes' start and the results' way back cost
#: more than the segment saves (about 25 us of simulation a request on a 2-core x86_64, 2026-12-04).
MIN_SEGMENT_REQUESTS = 50_000

#: Most idle moments a segment marks (the earlier segment needs one it is idle at too: mostly its first
#: idle moment past the segment's start).
MARKS = 256

#: Requests from a segment's start within which it marks its idle moments (at most its own). A server busy
#: 99% of the time is idle every 70 requests (median; 625 at most) on 1024-token prompts with 128 output
#: tokens at 5 requests/s (Qwen3-8B on an H100); the ITL entries before the window's end are kept exact
#: (about 25 a request: a few MB).
WINDOW_REQUESTS = 20_000

#: Values published per mark: rid, when the scheduler sees it, when the next round starts, deferred
#: rounds.
_FIELDS = 4


class Board:
    """What the segments tell each other, in shared memory (inherited by forked workers), under one lock.

    Per segment: up to ``marks`` signatures ``(rid, seen s, next round s, deferred rounds)`` in rid order,
    how many there are and whether more may come (marks are written before their count, so a reader sees
    whole ones); the segment it stopped at (-1: none yet), the first segment it may still stop at (past the
    last one once it stopped or ran to its end), and whether it is of no use. From those a segment learns
    it is not :meth:`needed`: every earlier one went past it, stopped elsewhere, or is of no use itself."""

    def __init__(self, segments: int, marks: int = MARKS) -> None:
        self.segments, self.marks = segments, marks
        self._values = multiprocessing.RawArray("d", segments * marks * _FIELDS)
        self._counts = multiprocessing.RawArray("i", segments)
        self._closed = multiprocessing.RawArray("b", segments)
        self._stopped = multiprocessing.RawArray("i", [-1] * segments)
        self._next = multiprocessing.RawArray("i", [j + 1 for j in range(segments)])
        self._unused = multiprocessing.RawArray("b", segments)
        self._finished = multiprocessing.RawArray("q", segments)
        self._steps = multiprocessing.RawArray("q", segments)
        self._lock = multiprocessing.Lock()

    def publish(self, segment: int, signatures: Sequence[tuple[float, ...]]) -> None:
        """``segment``'s marks (at most :attr:`marks`), all at once."""
        at = segment * self.marks * _FIELDS
        flat = [value for signature in signatures for value in signature]
        with self._lock:
            self._values[at:at + len(flat)] = flat
            self._counts[segment] = len(signatures)

    def close(self, segment: int) -> None:
        """``segment`` publishes no more marks."""
        with self._lock:
            self._closed[segment] = 1

    def state(self, segment: int) -> tuple[int, bool]:
        """``(marks published, whether no more come)`` of ``segment``."""
        with self._lock:
            return self._counts[segment], bool(self._closed[segment])

    def signature(self, segment: int, index: int) -> tuple[float, ...]:
        """Mark ``index`` of ``segment`` (published already)."""
        at = (segment * self.marks + index) * _FIELDS
        return tuple(self._values[at:at + _FIELDS])

    def passed(self, segment: int, target: int) -> None:
        """``segment`` stops at no segment before ``target`` (:attr:`segments`: at none; it ran to its
        end)."""
        with self._lock:
            self._next[segment] = max(self._next[segment], target)

    def stopped(self, segment: int, target: int) -> None:
        """``segment`` stopped at a mark of ``target``."""
        with self._lock:
            self._stopped[segment] = target
            self._next[segment] = self.segments

    def unused(self, segment: int) -> None:
        """Nothing of ``segment``'s run is used."""
        with self._lock:
            self._unused[segment] = 1

    def report(self, segment: int, finished: int, steps: int) -> None:
        """``segment`` has finished ``finished`` requests in ``steps`` decode steps so far."""
        with self._lock:
            self._finished[segment], self._steps[segment] = finished, steps

    def progress(self) -> tuple[int, int]:
        """Requests finished and decode steps over every segment so far (a segment's first requests may
        be counted by an earlier one too: a progress bar's figures)."""
        with self._lock:
            return sum(self._finished), sum(self._steps)

    def needed(self, segment: int) -> bool:
        """Whether an earlier segment may still stop at ``segment``, or has."""
        with self._lock:
            return not all(self._unused[j] or (self._stopped[j] != segment and self._next[j] > segment)
                           for j in range(segment))


@dataclass(frozen=True)
class Mark:
    """What a segment had at one of its marks, for :func:`stitch`: the rid it is idle before, the index of
    that idle gap in its gaps, its ITL entries, finished requests, those meeting the SLO, decode steps, and
    its counters (prefill batches, mixed steps, retracted requests) so far."""

    rid: int
    gap: int
    entries: int
    completed: int
    met: int
    steps: int
    prefill_batches: int
    mixed_steps: int
    retracted: int


class _Unused(Exception):
    """A segment no earlier one can stop at (its window ended without a mark, or every earlier segment went
    past it): its run is of no use."""


class _Segment:
    """A segment's hooks on its server (:attr:`~pdmux_cli.simulate.engine.Work.on_idle` at each idle moment,
    :meth:`tick` every few thousand steps): its idle gaps, its marks while its window is open, and its stop
    at a later segment's mark."""

    def __init__(self, index: int, starts: Sequence[int], board: Board, work: Any, fold: Any,
                 window_end: int, on_tick: Any = None) -> None:
        self.index, self.starts, self.board, self.work, self.fold = index, starts, board, work, fold
        self.window_end, self.on_tick = window_end, on_tick
        self.gaps = array("d")
        self.marks: list[Mark] = []
        self.signatures: list[tuple[float, ...]] = []
        self.marking = index > 0
        self.unused = False  # no earlier segment can stop at it
        self.early: Any = None  # the ITL entries up to the window's end, once it has ended
        self.target = index + 1  # the segment whose marks it looks for
        self.seen = 0  # how many of the target's marks are behind
        self.stop: tuple[int, int] | None = None  # (segment, mark) where it stopped

    def __call__(self, t: float, nxt: float, defer: int, prefill_batches: int, mixed_steps: int) -> bool:
        work = self.work
        self.gaps.append(nxt - t)
        batch = work.batch
        if work.waiting or batch.n or batch.sum_context or work.chunked_rid >= 0 or work.extra_held:
            # not empty (never, waiting for an arrival), or a KV total left over from speculative rounds'
            # fractional growth (a float that need not come back to 0 exactly): no signature to match
            return False
        rid = work.order[work.next]
        signature = (float(rid), work.next_arrival_time(), nxt, float(defer))
        if self.marking:
            self._mark(signature, prefill_batches, mixed_steps)
            if self.unused:
                return True
        if self.target < len(self.starts) and rid >= self.starts[self.target]:
            return self._couple(rid, signature)
        return False

    def _mark(self, signature: tuple[float, ...], prefill_batches: int, mixed_steps: int) -> None:
        work, fold = self.work, self.fold
        rid = int(signature[0])
        if rid >= self.window_end:
            self.close(publish=True)
            return
        fold.fold_steps(work.ends, work.ends.total)  # every entry so far counted: a mark cuts them
        if fold.itl.approximate:  # past the exact sample's limit: no cut possible
            self.close(publish=False)
            return
        self.marks.append(Mark(rid, len(self.gaps) - 1, fold.itl.count, fold.completed, fold.met, fold.steps,
                               prefill_batches, mixed_steps, work.retractions))
        self.signatures.append(signature)
        if len(self.marks) >= self.board.marks:
            self.close(publish=True)

    def tick(self, finished: int) -> None:
        """The scheduler's progress tick (``finished`` requests): the window ends once every request in it
        has been received; the segments whose marks are all behind the next request are passed (so that
        they learn it where this server is never idle again); a segment left without a mark, or that no
        earlier one may stop at any more (:meth:`Board.needed`), stops (:class:`_Unused`)."""
        work = self.work
        self.board.report(self.index, finished, work.ends.total)
        i = work.next
        upcoming = work.order[i] if i < len(work.order) else math.inf
        if self.marking and upcoming >= self.window_end:
            self.close(publish=True)
        if self.target < len(self.starts):  # (a server busy for good passes the later marks here)
            self._look(upcoming)
        if self.on_tick is not None:
            self.on_tick()
        if self.index and not self.unused and not self.board.needed(self.index):
            self.unused = True
        if self.unused:
            self.board.unused(self.index)
            raise _Unused

    def close(self, publish: bool = False) -> None:
        """No more marks. ``publish``: the marks go on the board (where there are any and the ITL sample is
        still exact), and the ITL entries from here on to a sample of their own, so that a mark still cuts
        the earlier ones (each mark counted every entry before it); else none is (a failed run). A segment
        after the first left without a mark is :attr:`unused`."""
        if not self.marking:
            return
        self.marking = False
        fold = self.fold
        if publish and self.marks and not fold.itl.approximate:
            self.early = fold.itl
            fold.itl = type(fold.itl)()
            self.board.publish(self.index, self.signatures)
        else:
            self.marks.clear()
            self.signatures.clear()
            self.unused = True
        self.board.close(self.index)

    def _look(self, rid: float) -> int | None:
        """The first mark of the segment it looks at (:attr:`target`) at ``rid`` or past it (the next
        request not received yet: an idle moment from now on comes before it or a later one), moving on past
        segments whose marks are all behind (published, no more to come); ``None`` where none is there
        (yet)."""
        board = self.board
        while self.target < len(self.starts) and rid >= self.starts[self.target]:
            count, closed = board.state(self.target)
            i = self.seen
            while i < count and board.signature(self.target, i)[0] < rid:
                i += 1
            self.seen = i
            if i < count:
                return i
            if not closed:
                return None  # its marks may still come
            self.target += 1  # none matched: the next segment's, once past its start
            self.seen = 0
            board.passed(self.index, self.target)
        return None

    def _couple(self, rid: int, signature: tuple[float, ...]) -> bool:
        i = self._look(rid)
        if i is not None and self.board.signature(self.target, i) == signature:
            self.stop = (self.target, i)
            self.board.stopped(self.index, self.target)
            return True
        return False  # a later idle moment may match


@dataclass
class SegmentRun:
    """One segment's run (:func:`run_segment`): its fold (rows for its requests), its scheduler's outcome,
    what :func:`stitch` needs of its work (the pool, rejected requests), its idle gaps (s, in order), its
    marks, its ITL entries up to its window's end (``None``: all in the fold's), and where it stopped
    (``(segment, mark)``; ``None``: it ran to the end)."""

    fold: Any
    outcome: Any
    work: Any
    gaps: array
    marks: list[Mark]
    early: Any
    stop: tuple[int, int] | None


def segments_for(trace: Any, setup: Any, policy: Any, workers: int | None, *,
                 min_requests: int | None = None) -> int:
    """How many segments to cut a run of ``policy`` over ``trace`` into (1: not cut): one per core this
    process may use (at most ``workers``), each of at least ``min_requests`` requests, where the cut is
    exact (module docstring): a policy whose loop splits in time, SGLang's default loop with no prefix cache
    in play, not the step-by-step reference, and workers that are forked (they inherit the shared marks).
    ``min_requests``: default :data:`MIN_SEGMENT_REQUESTS`."""
    from .engine import prefix_cache_in_play
    from .pool import default_workers

    if not getattr(policy, "splits_in_time", False) or setup.step_by_step:
        return 1
    if prefix_cache_in_play(trace, setup):
        return 1
    if multiprocessing.get_start_method(allow_none=False) != "fork":
        return 1
    cores = default_workers()
    return max(1, min(workers or cores, cores, len(trace) // max(1, min_requests or MIN_SEGMENT_REQUESTS)))


def segment_starts(n: int, segments: int) -> list[int]:
    """The first rid of each of ``segments`` segments of ``n`` requests (equal shares)."""
    return [n * j // segments for j in range(segments)]


def run_segment(trace: Any, setup: Any, policy: Any, starts: Sequence[int], index: int, board: Board,
                fold: Any, window: int | None = None, on_tick: Any = None) -> SegmentRun:
    """Segment ``index`` of the run (module docstring): the requests of ``trace`` from ``starts[index]`` on,
    on an empty server of ``setup`` running ``policy``, streamed into ``fold`` (restricted here to them),
    marking (within ``window`` requests of its start, default :data:`WINDOW_REQUESTS`) and stopping as the
    module docstring says. ``on_tick()``: called at each of its progress ticks. Raises what the run
    raises."""
    from .engine import build_work
    from .servers import _Replica, drive

    work = build_work(trace, setup, setup.kv_pool(policy.chunk_tokens).tokens, fold=fold)
    first = starts[index]
    if index:
        order = work.order
        rows = order[bisect.bisect_left(order, first):]
        fold.restrict(rows)
        work.order = rows
        work.next = 0
    end = starts[index + 1] if index + 1 < len(starts) else len(trace)
    window_end = first + max(1, min(window or WINDOW_REQUESTS, end - first))
    hook = _Segment(index, starts, board, work, fold, window_end, on_tick)
    work.on_idle = hook
    fold.attach(work.arrival, work.output_delay)
    try:
        outcome = drive(policy.rounds(work, setup, hook.tick))
        fold.finish_server(work.ends)
        hook.close(publish=True)  # its window went on to the end
    except _Unused:
        pass
    finally:
        hook.close()  # (a failed run: none published)
        if hook.stop is None:
            board.passed(index, len(starts))  # it stops at none
    if hook.unused:  # no earlier segment can stop at it: nothing of it is needed
        board.unused(index)
        return SegmentRun(None, None, None, hook.gaps, [], None, None)
    return SegmentRun(fold, outcome, _Replica(work), hook.gaps, hook.marks, hook.early, hook.stop)


def stitch(trace: Any, setup: Any, policy: Any, runs: Sequence[SegmentRun]) -> Any:
    """The one run's :class:`~pdmux_cli.simulate.engine.RunResult` from its segments' runs
    (:func:`run_segment`, in segment order): segment 0 up to where it stopped, the segment it stopped at
    from that mark on, and so on to one that ran to the end. The result streams into segment 0's fold (rows
    for every request), the later parts merged into it (each one's fold then dropped from ``runs``: its
    memory goes). Raises :class:`~pdmux_cli.util.errors.InputError` when the steps stitched pass the
    fold's step budget."""
    from .engine import StepEnds
    from .policies import ServerOutcome
    from .servers import note_pool, run_result

    run = runs[0]  # its fold is the stitched one: everything it has up to its stop
    lead, fold = run.work, run.fold
    fold.attach(trace.arrival_s, lead.output_delay)
    fold.reject(lead.rejected)
    counters: dict[str, float] = dict(run.outcome.counters)
    idle = 0.0
    for gap in run.gaps:  # the one run's sum, in its order
        idle += gap
    while run.stop is not None:
        index, mark = run.stop
        run = runs[index]
        at = run.marks[mark]
        hi = runs[run.stop[0]].marks[run.stop[1]].rid if run.stop is not None else len(trace)
        rows = run.fold.rows
        start = bisect.bisect_left(rows, at.rid)
        itl = (run.early if run.early is not None else run.fold.itl).tail(at.entries)
        if run.early is not None:
            itl.merge(run.fold.itl)
        fold.merge_part(run.fold, rows[start:bisect.bisect_left(rows, hi)], start, itl,
                        run.fold.completed - at.completed, run.fold.met - at.met, run.fold.steps - at.steps)
        runs[index].fold = None  # merged: its memory can go
        before = {"steps": at.steps, "prefill_batches": at.prefill_batches, "mixed_steps": at.mixed_steps,
                  "retracted_requests": at.retracted}
        for key, value in run.outcome.counters.items():
            counters[key] = counters.get(key, 0) + value - before.get(key, 0)
        for gap in run.gaps[at.gap + 1:]:
            idle += gap
    budget = StepEnds(fold.max_steps)
    budget.base = fold.steps
    budget.check_room()
    outcome = ServerOutcome(end_s=run.outcome.end_s, idle_s=idle, counters=counters)
    lead.stints, lead.arrival, lead.retractions = {}, trace.arrival_s, counters.get("retracted_requests", 0)
    result = run_result(policy, trace, [lead], outcome, None, policy.deployment(setup, 1, routed=False),
                        rejected=lead.rejected, fold=fold)
    note_pool(result.notes, [lead], setup.kv_pool(policy.chunk_tokens))
    return result


def _segment_task(shared: tuple, index: int) -> SegmentRun | InputError:
    """One segment on an executor's worker (:func:`run_segments`), or the InputError that refused it."""
    trace, setup, policy, starts, board, fold_of = shared
    try:
        run = run_segment(trace, setup, policy, starts, index, board, fold_of())
    except InputError as exc:
        return exc
    if run.fold is not None:
        run.fold.arrival = ()  # the trace's: not sent back
        if run.stop is not None:  # the rows from its stop on are another segment's: not sent back either
            run.fold.keep_below(int(board.signature(*run.stop)[0]))
    return run


#: Seconds between two looks at the segments' progress (a progress bar's).
PROGRESS_EVERY_S = 0.25


def run_segments(trace: Any, setup: Any, policy: Any, segments: int, fold_of: Any, *,
                 progress: Any = None, progress_steps: Any = None) -> list[SegmentRun]:
    """Every segment's run, in segment order: the first here, the others side by side on local processes
    (:mod:`.executors`: Ctrl-C and a dead worker handled as for every parallel run; the first's fold, the
    largest, never crosses a pipe). ``fold_of()``: a fresh :class:`~pdmux_cli.simulate.fold.Fold` of every
    request (each later segment restricts its own). ``progress``, ``progress_steps``: called now and then
    (the first segment's ticks, then every :data:`PROGRESS_EVERY_S`) with the requests finished (at most all
    but one) and the decode steps taken over the segments so far. Raises the first segment's refusal
    (:class:`~pdmux_cli.util.errors.InputError`), in segment order."""
    from .executors import Processes

    n = len(trace)
    starts = segment_starts(n, segments)
    board = Board(segments)

    def report() -> None:
        finished, steps = board.progress()
        if progress is not None:
            progress(min(finished, n - 1))
        if progress_steps is not None:
            progress_steps(steps)

    watch = progress is not None or progress_steps is not None
    runs: list[Any] = [None] * segments
    with Processes(segments - 1) as ex:
        shared = ex.share((trace, setup, policy, starts, board, fold_of))
        for index in range(1, segments):
            ex.submit(_segment_task, shared, index, f"{policy.label}, cut in time in {segments} segments",
                      tag=index)
        # (refused here: raised at once, which stops the others: the first refusal in segment order)
        runs[0] = run_segment(trace, setup, policy, starts, 0, board, fold_of(),
                              on_tick=report if watch else None)
        while ex.pending():
            job = ex.next_done(PROGRESS_EVERY_S if watch else None)
            if job is None:
                report()
                continue
            runs[job.tag] = job.result()
    refused = next((run for run in runs if isinstance(run, InputError)), None)
    if refused is not None:
        raise refused
    return runs


__all__ = ["MARKS", "MIN_SEGMENT_REQUESTS", "Board", "Mark", "SegmentRun", "run_segment", "run_segments",
           "segment_starts", "segments_for", "stitch"]
