"""SGLang servers on one clock: one server, or ``dp`` replicas of it behind a router, as one code path.

Pure Python and deterministic, on the scheduler loops of :mod:`pdmux_cli.simulate.schedulers` run as
generators (:meth:`~pdmux_cli.simulate.policies.ServerSchedule.rounds`, one per server):

- **One path** (:func:`serve`): ``dp`` servers of ``setup`` (each ``setup.tp`` GPUs, its own KV pool and
  prefix cache) running one schedule; a lone server is DP 1. Without a router (one server) every
  request is in its queue from the start (a running decode batch at time 0 and a closed-loop client
  are simulated there: both need the whole order up front); behind one (:func:`route`) each server
  gets the requests routed to it. Either way the servers' outcomes are merged (:func:`combine`) and
  their records assembled (:func:`run_result`) the same way.
- **The router** (:func:`route`) takes the trace's requests in arrival order. Before it places a
  request arriving at ``a`` it runs every server up to ``a`` (each pauses before its first round starting
  at or after ``a``), so that it sees their state then: ``round_robin`` takes the servers in turn;
  ``total_requests`` takes the one with the fewest outstanding requests (routed, not finished by
  ``a``; ties to the lowest index). SGLang 0.5.23's ``DPBudget`` counts running + waiting requests
  from load snapshots the schedulers publish (``srt/managers/data_parallel_controller.py``), a moment
  old; here the count is exact. A server whose SGLang crashed (0.5.23's pdmux UnboundLocalError) takes
  no more requests; with none left, the rest are unfinished.
- **Replicas apart** (:func:`replicas_apart`, :func:`replica_run`, :func:`merge_replicas`): round-robin
  replicas simulated one by one (in parallel, on an executor), the routing known up front.

The result is one :class:`~pdmux_cli.simulate.engine.RunResult` over every request of the trace: the
servers' decode steps one after another in ``step_end_s`` (a request's steps are all on one server, so
its ITLs are the same), idle time averaged over the GPUs, counters summed. PD disaggregation
(:mod:`pdmux_cli.simulate.cluster`) runs its instances through :func:`route` and :func:`run_result` too.
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from ..multigpu.disaggregation import check_dp_value, check_load_balance_method
from ..util.errors import Finding
from .columns import Column
from .engine import Progress, RunResult, Setup, StepEnds, Work, build_work
from .policies import Deployment, Policy, Rounds, ServerOutcome, ServerSchedule
from .traces import Trace

if TYPE_CHECKING:
    from .fold import Fold


def drive(rounds: Rounds) -> ServerOutcome:
    """Run a scheduler generator (:meth:`~pdmux_cli.simulate.policies.ServerSchedule.rounds`) to its
    end; returns its outcome. A lone server (``work.horizon`` infinite, ``work.open`` false) never
    pauses, so this is one call."""
    try:
        while True:
            next(rounds)
    except StopIteration as stop:
        return stop.value


def route(servers: Sequence[Rounds], works: Sequence[Work], order: Iterable[int], arrival: Sequence[float],
          method: str, where: Sequence[int] | None = None
          ) -> tuple[list[ServerOutcome | None], Sequence[int], list[int]]:
    """Run the scheduler generators ``servers`` (one per :class:`Work` of ``works``) behind one router.

    ``order``: the requests to route (rids), in non-decreasing ``arrival`` (s). ``method``:
    ``round_robin`` or ``total_requests`` (module docstring). Returns ``(outcome per server, server of
    each request of arrival (a :class:`~pdmux_cli.simulate.columns.Column` of int32; -1: never routed:
    rejected, or every server had crashed), rids in order never routed)``. ``where``: the array to
    write the servers into (-1 each; a streamed run's column, so that ``--csv`` rows written during the
    run have them).
    """
    n = len(servers)
    times = [0.0] * n
    outcomes: list[ServerOutcome | None] = [None] * n
    live = list(range(n))
    assigned = [0] * n
    if where is None:
        where = Column("i", array("i", [-1]) * len(arrival))
    unrouted: list[int] = []
    turn = 0
    least = method == "total_requests"

    def resume(i: int) -> None:
        try:
            times[i] = next(servers[i])
        except StopIteration as stop:
            outcomes[i] = stop.value
            live.remove(i)

    for work in works:
        work.open = True
    for rid in order:
        a = arrival[rid]
        for i in list(live):
            works[i].horizon = a
            while i in live and times[i] < a:
                resume(i)
        if not live:
            unrouted.append(rid)
            continue
        if least:
            best, best_load = live[0], math.inf
            for i in live:
                work = works[i]
                done = work.finished if times[i] <= a else work.finished_mark
                load = assigned[i] - done
                if load < best_load:
                    best, best_load = i, load
            i = best
        else:
            i = live[turn % len(live)]
            turn += 1
        works[i].order.append(rid)
        assigned[i] += 1
        where[rid] = i
        if times[i] == math.inf:  # idle, waiting: it takes the request now
            resume(i)
    for i in range(n):
        works[i].open = False
        works[i].horizon = math.inf
    for i in list(live):
        while i in live:
            resume(i)
    return outcomes, where, unrouted


def routed_works(trace: Trace, setup: Setup, pool_tokens: int, count: int,
                 fold: Fold | None = None) -> list[Work]:
    """``count`` empty servers for ``trace`` (each gets the requests routed to it), sharing the prompts'
    prefix-cache keys (each its own, computed as needed, when streamed into ``fold``)."""
    works = [build_work(trace, setup, pool_tokens, fold=fold)]
    keys = works[0].keys or None if fold is None else None
    works += [build_work(trace, setup, pool_tokens, keys=keys, fold=fold) for _ in range(count - 1)]
    for work in works:
        work.order = array("q")
        work.next = 0
    return works


def unrejected(count: int, rejected: Iterable[int]) -> Iterator[int]:
    """``0 .. count - 1`` without ``rejected``, in order."""
    skip = set(rejected)
    return (rid for rid in range(count) if rid not in skip) if skip else iter(range(count))


def progress_of(works: Sequence[Work], progress: Progress | None) -> Progress | None:
    """``progress`` called with the requests finished over every one of ``works``."""
    if progress is None:
        return None
    return lambda _done: progress(sum(w.finished for w in works))


def combine(outcomes: Sequence[ServerOutcome | None], *, prefixed: bool = True,
            extra_idle: Sequence[tuple[float, float]] = ()) -> ServerOutcome:
    """One outcome for a deployment's servers (``None``: a server that never ran): the last end, idle
    time averaged over the servers (each idle from its own end to the last), counters summed, notes
    once each (a crashed server's prefixed with ``server i:`` when ``prefixed``), pdmux's time per
    stream group summed, the first crash, every request cut short. ``extra_idle``: ``(idle s, end s)``
    of other GPUs (a disaggregation's prefill instances) to average in."""
    unfinished: set[int] = set()
    notes: list[str] = []
    counters: dict[str, float] = {}
    group_time: list[float] | None = None
    groups = None
    ran = [(i, e) for i, e in enumerate(outcomes) if e is not None]
    for i, e in ran:
        unfinished |= e.unfinished
        for note in e.notes:
            crashed = prefixed and e.crashed
            text = Finding("simulate.server_note", {"server": i, "note": note}) if crashed else note
            if text not in notes:
                notes.append(text)
        for key, value in e.counters.items():
            counters[key] = counters.get(key, 0) + value
        if e.group_time_s is not None:
            groups = e.groups
            group_time = list(e.group_time_s) if not group_time else [
                a + b for a, b in zip(group_time, e.group_time_s)]
    end = max([e.end_s for _, e in ran] + [x[1] for x in extra_idle] + [0.0])
    idles = [e.idle_s + (end - e.end_s) for _, e in ran] + [i + (end - e_) for i, e_ in extra_idle]
    crashed = [e.crashed_at_s for _, e in ran if e.crashed_at_s is not None]
    return ServerOutcome(end_s=end, idle_s=sum(idles) / len(idles) if idles else 0.0, counters=counters,
                         notes=notes,
                         groups=groups, group_time_s=group_time,
                         crashed_at_s=min(crashed) if crashed else None, unfinished=unfinished)


def run_result(policy: Policy, trace: Trace, works: Sequence[Work], outcome: ServerOutcome,
               where: Sequence[int] | None, deployment: Deployment, *, rejected: Sequence[int] = (),
               unrouted: Sequence[int] = (), fold: Fold | None = None) -> RunResult:
    """The :class:`RunResult` of ``policy`` from its servers' works and their combined ``outcome``.

    ``where``: the server of each request behind a router, ``None`` for one server without one (its
    records are the result's as they are, a scenario's initial decode requests and a closed-loop
    client's send times included); else every request's records are gathered from its server, its
    decode steps offset by the steps of the servers before. ``unrouted``: requests no server took
    (every one had crashed). ``fold``: the run was streamed into it (the per-request records stay
    there; each server's step window is finished into it here). Raises
    :class:`~pdmux_cli.util.errors.InputError` for a server whose steps reached its budget or limit
    (:meth:`~pdmux_cli.simulate.engine.StepEnds.check_room`: checked at the run's end as at its ticks)."""
    n = len(trace)
    streamed = fold is not None
    lead = works[0]
    for work in works:  # the step budget on the whole run: past its last progress tick too
        work.ends.check_room()
    if streamed:
        for work in works:
            fold.finish_server(work.ends)
        first_token, first_step, ends = [], [], array("d")
        stints = lead.stints if where is None else {}
    elif where is None:
        first_token, first_step, stints, ends = lead.first_token, lead.first_step, lead.stints, lead.ends
    else:
        first_token, first_step, stints, ends = _gathered(works, where, n)
    notes = outcome.notes
    if unrouted:
        notes.append(Finding("simulate.never_routed", {"requests": len(unrouted)}))
    if where is None:  # a closed-loop client's send times
        arrival = lead.arrival
    else:  # the router's: the trace's
        arrival = trace.arrival_s if streamed else list(trace.arrival_s)
    return RunResult(
        policy=policy.label, kind=policy.kind, arrival_s=arrival,
        prompt_tokens=() if streamed else lead.prompt, output_tokens=() if streamed else lead.output,
        decode_steps=() if streamed else lead.steps, first_token_s=first_token, first_step=first_step,
        rejected=sorted(set(rejected)),
        step_end_s=ends, end_s=outcome.end_s, idle_s=outcome.idle_s, num_trace_requests=n,
        notes=notes, groups=outcome.groups, group_time_s=outcome.group_time_s, counters=outcome.counters,
        stints=stints, unfinished=outcome.unfinished | set(unrouted), crashed_at_s=outcome.crashed_at_s,
        kv_pool_tokens=lead.capacity, gpus=deployment.gpus, layout=deployment.layout,
        router=deployment.router,
        server=list(where) if where is not None and not streamed else [], output_delay_s=lead.output_delay,
        fold=fold, tokens_per_step=lead.tokens_per_step,
    )


def _gathered(works: Sequence[Work], where: Sequence[int], n: int
              ) -> tuple[list[float], list[int], dict[int, list[tuple[float, int, int]]], array]:
    """Each of the ``n`` requests' first token, first decode step and stints from the server that
    served it (``where``), steps offset by the steps of the servers before; and every server's step
    end times one after another."""
    ends = array("d")
    offsets = []
    for work in works:
        offsets.append(len(ends))
        ends.extend(work.ends)
    first_token = [math.nan] * n
    first_step = [-1] * n
    stints: dict[int, list[tuple[float, int, int]]] = {}
    for rid in range(n):
        i = where[rid]
        if i < 0:
            continue
        work, off = works[i], offsets[i]
        first_token[rid] = work.first_token[rid]
        fs = work.first_step[rid]
        first_step[rid] = fs + off if fs >= 0 else -1
        if rid in work.stints:
            stints[rid] = [(t0, s0 + off, k) for t0, s0, k in work.stints[rid]]
    return first_token, first_step, stints, ends


def serve(trace: Trace, setup: Setup, policy: ServerSchedule, dp: int = 1, method: str = "round_robin",
          progress: Progress | None = None, fold: Fold | None = None, *,
          initial_decode: Sequence[tuple[int, int]] = (), max_concurrency: int = 0,
          routed: bool | None = None) -> RunResult:
    """Replay ``trace`` on ``dp`` servers of ``setup`` running ``policy`` (module docstring): one
    :class:`RunResult` over every request, ``gpus = dp x setup.tp``.

    ``routed``: behind a router (``method``: ``round_robin`` or ``total_requests``); default: with
    more than one server. ``initial_decode``, ``max_concurrency``: a running decode batch at time 0 and
    a closed-loop client (:func:`pdmux_cli.simulate.runner.simulate`), on one server without a router
    only (the runner refuses them elsewhere). ``fold``: stream the run. Raises
    :class:`~pdmux_cli.util.errors.InputError` for a bad ``dp`` or method, or when the model does not
    fit; ``ValueError`` for several servers without a router."""
    check_dp_value(dp)
    routed = dp > 1 if routed is None else routed
    if routed:
        method = check_load_balance_method(method)
    elif dp != 1:
        raise ValueError("several servers are simulated behind a router")
    pool = setup.kv_pool(policy.chunk_tokens)
    if routed:
        works = routed_works(trace, setup, pool.tokens, dp, fold)
    else:
        works = [build_work(trace, setup, pool.tokens, initial_decode, max_concurrency=max_concurrency,
                            fold=fold)]
    lead = works[0]
    if fold is not None:
        fold.attach(lead.arrival, lead.output_delay)
        fold.reject(lead.rejected)
    tick = progress_of(works, progress)
    servers = [policy.rounds(w, setup, tick) for w in works]
    if routed:
        outcomes, where, unrouted = route(servers, works, unrejected(len(trace), lead.rejected),
                                          trace.arrival_s,
                                          method, fold.columns.server if fold is not None else None)
    else:
        outcomes, where, unrouted = [drive(servers[0])], None, []
    result = run_result(policy, trace, works, combine(outcomes, prefixed=routed), where,
                        policy.deployment(setup, dp, method, routed=routed), rejected=lead.rejected,
                        unrouted=unrouted, fold=fold)
    if fold is not None and fold.csv is not None:
        fold.csv.flush(fold.columns, crashed=result.crashed_at_s is not None, final=True)
    if routed:
        _note_replicas(result.notes, outcomes, where, dp, len(trace) - len(lead.rejected), unrouted)
    note_pool(result.notes, works, pool)
    if progress is not None:
        progress(sum(w.finished for w in works))
    return result


def _note_replicas(notes: list[str], outcomes: Sequence[ServerOutcome | None], where: Sequence[int], dp: int,
                   routed: int, unrouted: Sequence[int]) -> None:
    """The notes on ``dp`` replicas behind a router (``notes`` changed in place): replicas that crashed,
    and replicas that got none of the ``routed`` requests."""
    crashed = sum(1 for e in outcomes if e is not None and e.crashed)
    if crashed:
        kept = ("every replica crashed" if crashed == dp else
                f"{crashed} of {dp} replicas crashed; the others kept serving, as separate servers behind a "
                "router do")
        notes.append(f"{kept} (one SGLang server with --dp-size goes down whole when a rank dies: everything "
                     "after the first crash would be lost)")
    idle_replicas = dp - len(set(where) - {-1})
    if idle_replicas and not unrouted:
        notes.append(f"{idle_replicas} of {dp} replicas got no request ({routed} routed)")


def simulate_dp(trace: Trace, setup: Setup, policy: ServerSchedule, dp: int, method: str = "round_robin",
                progress: Progress | None = None, fold: Fold | None = None) -> RunResult:
    """Replay ``trace`` on ``dp`` replicas of the server of ``setup`` running ``policy`` (a
    :class:`~pdmux_cli.simulate.schedulers.PdmuxPolicy` or a baseline) behind a router (``method``:
    ``round_robin`` or ``total_requests``; DP 1 too): :func:`serve` with its router. Returns one
    :class:`RunResult` over every request, with ``gpus = dp x setup.tp``. ``fold``: stream the run
    (:func:`pdmux_cli.simulate.runner.simulate`). The replicas run here one after another, behind the
    router; :func:`replica_run` runs them apart. Raises :class:`~pdmux_cli.util.errors.InputError` for a bad
    ``dp`` or method, or when the model does not fit."""
    return serve(trace, setup, policy, dp, method, progress, fold, routed=True)


def replicas_apart(policy: Policy, setup: Setup, dp: int, method: str) -> bool:
    """Whether ``dp`` replicas running ``policy`` can be simulated apart (:func:`replica_run`, then
    :func:`merge_replicas`) with the same result as behind the router (:func:`simulate_dp`): the routing is
    known up front (``round_robin``: the k-th request not refused goes to replica ``k mod dp``) and stays
    so (:meth:`~pdmux_cli.simulate.policies.Policy.routing_known`: no replica can stop; a pdmux config
    SGLang 0.5.23 crashes on takes no more requests, which moves the turn; a disaggregation routes
    itself). ``total_requests`` needs every replica's queue at each arrival: it runs behind the router."""
    if dp <= 1 or check_load_balance_method(method) != "round_robin":
        return False
    return policy.routing_known(setup, dp, method)


class _Replica:
    """What :func:`run_result` and :func:`note_pool` read of a replica simulated apart."""

    def __init__(self, work: Work) -> None:
        self.capacity, self.output_delay, self.rejected = work.capacity, work.output_delay, work.rejected
        self.retractions, self.finished = work.retractions, work.finished
        self.tokens_per_step = work.tokens_per_step
        self.first = {rid: (work.prompt[rid], work.output[rid]) for rid in work.rejected[:1]}
        self.ends = StepEnds(0)  # folded already

    @property
    def prompt(self) -> dict[int, int]:
        return {rid: p for rid, (p, _) in self.first.items()}

    @property
    def output(self) -> dict[int, int]:
        return {rid: o for rid, (_, o) in self.first.items()}


def replica_run(trace: Trace, setup: Setup, policy: ServerSchedule, index: int, dp: int,
                fold_of) -> tuple[Fold, ServerOutcome, _Replica]:
    """Replica ``index`` of ``dp`` (round robin, :func:`replicas_apart`) simulated alone on its requests,
    streamed into ``fold_of()`` (a :class:`~pdmux_cli.simulate.fold.Fold`, restricted to them); returns
    ``(fold, its scheduler's outcome, what the merge needs of its work)`` for :func:`merge_replicas`."""
    pool = setup.kv_pool(policy.chunk_tokens)
    fold = fold_of()
    work = build_work(trace, setup, pool.tokens, fold=fold)
    rows = array("q", itertools.islice(work.order, index, None, dp))
    fold.restrict(rows)
    work.order = rows
    work.next = 0
    fold.attach(trace.arrival_s, work.output_delay)
    outcome = drive(policy.rounds(work, setup))
    work.ends.check_room()  # its step budget: past its last progress tick too
    fold.finish_server(work.ends)
    return fold, outcome, _Replica(work)


def merge_replicas(trace: Trace, setup: Setup, policy: ServerSchedule, dp: int,
                   parts: Sequence[tuple[Fold, ServerOutcome, _Replica]], fold: Fold) -> RunResult:
    """One :class:`RunResult` (streamed into ``fold``, over every request) from the ``dp`` replicas of
    :func:`replica_run`, in replica order: the same as :func:`simulate_dp` gives behind the router."""
    pool = setup.kv_pool(policy.chunk_tokens)
    works = [part[2] for part in parts]
    fold.attach(trace.arrival_s, works[0].output_delay)
    fold.reject(works[0].rejected)
    where = fold.columns.server
    for i, (part_fold, _, _) in enumerate(parts):
        fold.merge(part_fold, part_fold.rows)
        for rid in part_fold.rows:
            where[rid] = i
    result = run_result(policy, trace, works, combine([part[1] for part in parts]),
                        where,  # type: ignore[arg-type]
                        policy.deployment(setup, dp, "round_robin"), rejected=works[0].rejected, fold=fold)
    idle_replicas = sum(1 for part in parts if not len(part[0].rows))
    if idle_replicas:
        routed = len(trace) - len(works[0].rejected)
        result.notes.append(f"{idle_replicas} of {dp} replicas got no request ({routed} routed)")
    note_pool(result.notes, works, pool)
    return result


def note_pool(notes: list[str], works: Sequence[Work], pool, what: str = "") -> None:
    """The KV pool's notes on a run (``notes`` changed in place): requests that never fit (first), and
    retractions (last). ``what``: which pool (``"prefill instance's "``), ``""`` for a server's."""
    if works[0].rejected:
        first = works[0].rejected[0]
        notes.insert(0, Finding("simulate.never_fits_pool", {
            "rejected": len(works[0].rejected), "pool": what, "pool_tokens": works[0].capacity,
            "mem_fraction": pool.mem_fraction_static, "first": first, "prompt_tokens": works[0].prompt[first],
            "output_tokens": works[0].output[first]}))
    retracted = sum(w.retractions for w in works)
    if retracted:
        notes.append(Finding("simulate.retractions", {"retractions": retracted}))


__all__ = ["combine", "drive", "merge_replicas", "replica_run", "replicas_apart", "route", "run_result",
           "serve", "simulate_dp"]
