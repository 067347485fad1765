"""Several servers: data-parallel replicas behind a router, and PD disaggregation (xPyD).

Pure Python and deterministic, on the schedulers of :mod:`pdmux_cli.simulate.schedulers` run as
generators (one per server, all on one clock):

- **The router** (:func:`route`) takes the trace's requests in arrival order. Before it places a
  request arriving at ``a`` it runs every server up to ``a`` (each pauses before its first round starting
  at or after ``a``), so that it sees their state then: ``round_robin`` takes the servers in turn;
  ``total_requests`` takes the one with the fewest outstanding requests (routed, not finished by
  ``a``; ties to the lowest index). SGLang 0.5.23's ``DPBudget`` counts running + waiting requests
  from load snapshots the schedulers publish (``srt/managers/data_parallel_controller.py``), a moment
  old; here the count is exact. A server whose SGLang crashed (0.5.23's pdmux UnboundLocalError) takes
  no more requests; with none left, the rest are unfinished.
- **Data parallelism** (:func:`simulate_dp`): ``dp`` copies of the server of ``setup`` (each ``setup.tp``
  GPUs, its own KV pool and prefix cache) running the same policy.
- **PD disaggregation** (:func:`simulate_disagg`): X prefill instances run SGLang's prefill-first
  loop on the whole GPU, each request to its first token only (the KV cache is held until the prefill
  ends, then freed: the time it waits for its transfer is not charged to the pool); each request's KV
  cache (its prompt's tokens, one rank's share per GPU) then crosses the prefill instance's link, one
  transfer after another in order of prefill end (:class:`pdmux_cli.multigpu.disaggregation.KvLink`); Y decode
  instances receive them when the transfer ends (:func:`~pdmux_cli.simulate.schedulers.decode_instance_rounds`:
  admitted by KV memory, first token streamed on admission, decode on the whole GPU; no prefix cache).
  The receiving side's link is not modelled as a bottleneck.

The result is one :class:`~pdmux_cli.simulate.engine.RunResult` over every request of the trace, as for
one server: the servers' decode steps one after another in ``step_end_s`` (a request's steps are all on
one server, so its ITLs are the same), idle time averaged over the GPUs, counters summed.
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from ..sglang import server_defaults as sgl
from ..multigpu.disaggregation import MAX_INSTANCES, KvLink, Layout, check_dp_value, check_load_balance_method
from ..util.errors import Finding, InputError
from .columns import Column
from .engine import Progress, RunResult, Setup, Work, build_work
from .schedulers import (
    PrefillFirstPolicy,
    baseline_rounds,
    decode_instance_rounds,
    pdmux_rounds,
)
from .traces import Trace


@dataclass(frozen=True)
class DisaggPolicy:
    """PD disaggregation: ``prefill`` instances and ``decode`` instances, the KV cache crossing ``link``;
    ``load_balance_method`` routes requests to the instances of each side. ``instance_setup``: the server
    every instance is (its own TP, ``--disagg-tp``), ``None`` for the run's (:meth:`setup_for`)."""

    prefill: int
    decode: int
    link: KvLink
    load_balance_method: str = "round_robin"
    instance_setup: Setup | None = None

    kind = "disagg"
    chunk_tokens = -1

    def setup_for(self, setup: Setup) -> Setup:
        """The server of each instance: :attr:`instance_setup`, else ``setup``."""
        return self.instance_setup if self.instance_setup is not None else setup

    def gpus(self, setup: Setup) -> int:
        """GPUs of all instances: ``(X + Y) x`` their TP."""
        return (self.prefill + self.decode) * self.setup_for(setup).tp

    @property
    def label(self) -> str:
        """``"disagg 1P1D"``."""
        return f"disagg {self.prefill}P{self.decode}D"


def route(servers: Sequence, works: Sequence[Work], order: Iterable[int], arrival: Sequence[float],
          method: str, where: Sequence[int] | None = None) -> tuple[list[dict | None], Sequence[int], list[int]]:
    """Run the scheduler generators ``servers`` (one per :class:`Work` of ``works``) behind one router.

    ``order``: the requests to route (rids), in non-decreasing ``arrival`` (s). ``method``:
    ``round_robin`` or ``total_requests`` (module docstring). Returns ``(extras per server, server of
    each request of ``arrival`` (a :class:`~pdmux_cli.simulate.columns.Column` of int32; -1: never routed: rejected, or every server had
    crashed), rids in order never routed)``. ``where``: the array to write the servers into (-1 each;
    a streamed run's column, so that ``--csv`` rows written during the run have them).
    """
    n = len(servers)
    times = [0.0] * n
    extras: list[dict | None] = [None] * n
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
            extras[i] = stop.value
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
    return extras, where, unrouted


def _routed_works(trace: Trace, setup: Setup, pool_tokens: int, count: int, fold=None) -> list[Work]:
    """``count`` empty servers for ``trace`` (each gets the requests routed to it), sharing the prompts'
    prefix-cache keys (each its own, computed as needed, when streamed into ``fold``)."""
    works = [build_work(trace, setup, pool_tokens, fold=fold)]
    keys = works[0].keys or None if fold is None else None
    works += [build_work(trace, setup, pool_tokens, keys=keys, fold=fold) for _ in range(count - 1)]
    for work in works:
        work.order = array("q")
        work.next = 0
    return works


def _unrejected(count: int, rejected: Iterable[int]) -> Iterator[int]:
    """``0 .. count - 1`` without ``rejected``, in order."""
    skip = set(rejected)
    return (rid for rid in range(count) if rid not in skip) if skip else iter(range(count))


def _progress_of(works: Sequence[Work], progress: Progress | None) -> Progress | None:
    if progress is None:
        return None
    return lambda _done: progress(sum(w.finished for w in works))


def _merge(label: str, kind: str, trace: Trace, works: Sequence[Work], extras: Sequence[dict | None],
           where: Sequence[int], *, rejected: Sequence[int] = (), extra_idle: Sequence[tuple[float, float]] = (),
           unrouted: Sequence[int] = (), fold=None) -> dict:
    """The fields of one :class:`RunResult` from servers' works (module docstring). ``where``: server
    of each request. ``extra_idle``: ``(idle s, end s)`` of other GPUs (prefill instances) to average in.
    ``fold``: the run was streamed into it (the per-request records stay there; ``where`` goes to its
    columns)."""
    n = len(trace)
    first_token: list[float] = []
    first_step: list[int] = []
    stints: dict[int, list[tuple[float, int, int]]] = {}
    ends = array("d")
    if fold is None:
        offsets = []
        for work in works:
            offsets.append(len(ends))
            ends.extend(work.ends)
        first_token = [math.nan] * n
        first_step = [-1] * n
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
    else:
        for work in works:
            fold.finish_server(work.ends)
    unfinished: set[int] = set(unrouted)
    crashed = [e["crashed_at_s"] for e in extras if e and e.get("crashed_at_s") is not None]
    notes: list[str] = []
    counters: dict = {}
    group_time = None
    groups = None
    for i, e in enumerate(extras):
        if not e:
            continue
        unfinished |= set(e.get("unfinished", ()))
        for note in e.get("notes", []):
            text = Finding("simulate.server_note", {"server": i, "note": note}) if e.get("crashed_at_s") is not None \
                else note
            if text not in notes:
                notes.append(text)
        for key, value in e.get("counters", {}).items():
            counters[key] = counters.get(key, 0) + value
        if e.get("group_time_s") is not None:
            groups = e["groups"]
            group_time = [a + b for a, b in zip(group_time, e["group_time_s"])] if group_time else list(e["group_time_s"])
    end = max([e["end_s"] for e in extras if e] + [x[1] for x in extra_idle] + [0.0])
    idles = [e["idle_s"] + (end - e["end_s"]) for e in extras if e] + [i + (end - e_) for i, e_ in extra_idle]
    if unrouted:
        notes.append(Finding("simulate.never_routed", {"requests": len(unrouted)}))
    streamed = fold is not None
    return {
        "policy": label, "kind": kind, "arrival_s": trace.arrival_s if streamed else list(trace.arrival_s),
        "prompt_tokens": () if streamed else list(trace.prompt_tokens),
        "output_tokens": () if streamed else list(trace.output_tokens),
        "decode_steps": () if streamed else [o - 1 for o in trace.output_tokens], "first_token_s": first_token,
        "first_step": first_step, "rejected": sorted(set(rejected)), "step_end_s": ends, "end_s": end,
        "idle_s": sum(idles) / len(idles) if idles else 0.0, "num_trace_requests": n, "notes": notes,
        "groups": groups, "group_time_s": group_time, "counters": counters, "stints": stints,
        "unfinished": unfinished, "crashed_at_s": min(crashed) if crashed else None,
        "kv_pool_tokens": works[0].capacity if works else 0, "server": [] if streamed else list(where),
        "output_delay_s": works[0].output_delay if works else 0.0, "fold": fold,
    }


def simulate_dp(trace: Trace, setup: Setup, policy, dp: int, method: str = "round_robin",
                progress: Progress | None = None, fold=None) -> RunResult:
    """Replay ``trace`` on ``dp`` replicas of the server of ``setup`` running ``policy`` (a
    :class:`~pdmux_cli.simulate.schedulers.PdmuxPolicy` or a baseline) behind a router (``method``:
    ``round_robin`` or ``total_requests``). Returns one :class:`RunResult` over every request, with
    ``gpus = dp x setup.tp``. ``fold``: stream the run (:func:`pdmux_cli.simulate.runner.simulate`).
    The replicas run here one after another, behind the router; :func:`split_round_robin` runs them
    apart. Raises :class:`InputError` for a bad ``dp`` or method, or when the model does not fit."""
    check_dp_value(dp)
    method = check_load_balance_method(method)
    pool = setup.kv_pool(policy.chunk_tokens)
    works = _routed_works(trace, setup, pool.tokens, dp, fold)
    if fold is not None:
        fold.attach(trace.arrival_s, works[0].output_delay)
        fold.reject(works[0].rejected)
    order = _unrejected(len(trace), works[0].rejected)
    tick = _progress_of(works, progress)
    if policy.kind == "pdmux":
        servers = [pdmux_rounds(w, setup, policy, tick) for w in works]
    else:
        servers = [baseline_rounds(w, setup, policy, tick) for w in works]
    extras, where, unrouted = route(servers, works, order, trace.arrival_s, method,
                                    fold.columns.server if fold is not None else None)
    fields = _merge(policy.label, policy.kind, trace, works, extras, where,
                    rejected=works[0].rejected, unrouted=unrouted, fold=fold)
    if fold is not None and fold.csv is not None:
        fold.csv.flush(fold.columns, crashed=fields["crashed_at_s"] is not None, final=True)
    crashed = sum(1 for e in extras if e and e.get("crashed_at_s") is not None)
    if crashed:
        kept = ("every replica crashed" if crashed == dp else
                f"{crashed} of {dp} replicas crashed; the others kept serving, as separate servers behind a router do")
        fields["notes"].append(
            f"{kept} (one SGLang server with --dp-size goes down whole when a rank dies: everything after the first "
            "crash would be lost)")
    idle_replicas = dp - len(set(where) - {-1})
    if idle_replicas and not unrouted:
        routed = len(trace) - len(works[0].rejected)
        fields["notes"].append(f"{idle_replicas} of {dp} replicas got no request ({routed} routed)")
    _note_pool(fields, works, pool)
    if progress is not None:
        progress(sum(w.finished for w in works))
    return RunResult(**fields, gpus=dp * setup.tp, layout=Layout(setup.tp, dp), router=method)


def replicas_apart(policy, setup: Setup, dp: int, method: str) -> bool:
    """Whether ``dp`` replicas running ``policy`` can be simulated apart (:func:`replica_run`, then
    :func:`merge_replicas`) with the same result as behind the router (:func:`simulate_dp`): the routing is
    known up front (``round_robin``: the k-th request not refused goes to replica ``k mod dp``) and stays
    so (no replica can stop: a pdmux config SGLang 0.5.23 crashes on takes no more requests, which moves
    the turn). ``total_requests`` needs every replica's queue at each arrival: it runs behind the router."""
    if dp <= 1 or check_load_balance_method(method) != "round_robin" or policy.kind == "disagg":
        return False
    if policy.kind == "pdmux" and not policy.unreleased_fallback:
        from ..sglang import split_levels

        cfg = policy.config
        thresholds = split_levels.plan_groups(setup.total_sms, setup.compute_capability, cfg.sm_group_num,
                                     cfg.manual_divisions or None).thresholds
        if thresholds and min(thresholds) > 1:  # a decode batch of 1 at a prefill's start crashes 0.5.23
            return False
    return True


class _Replica:
    """What :func:`_merge` and :func:`_note_pool` read of a replica simulated apart."""

    def __init__(self, work: Work) -> None:
        from .engine import StepEnds

        self.capacity, self.output_delay, self.rejected = work.capacity, work.output_delay, work.rejected
        self.retractions, self.finished = work.retractions, work.finished
        self.first = {rid: (work.prompt[rid], work.output[rid]) for rid in work.rejected[:1]}
        self.ends = StepEnds(0)  # folded already

    @property
    def prompt(self) -> dict[int, int]:
        return {rid: p for rid, (p, _) in self.first.items()}

    @property
    def output(self) -> dict[int, int]:
        return {rid: o for rid, (_, o) in self.first.items()}


def replica_run(trace: Trace, setup: Setup, policy, index: int, dp: int, fold_of) -> tuple:
    """Replica ``index`` of ``dp`` (round robin, :func:`replicas_apart`) simulated alone on its requests,
    streamed into ``fold_of()`` (a :class:`~pdmux_cli.simulate.fold.Fold`, restricted to them); returns
    ``(fold, its scheduler's extras, what the merge needs of its work)`` for :func:`merge_replicas`."""
    pool = setup.kv_pool(policy.chunk_tokens)
    fold = fold_of()
    work = build_work(trace, setup, pool.tokens, fold=fold)
    rows = array("q", itertools.islice(work.order, index, None, dp))
    fold.restrict(rows)
    work.order = rows
    work.next = 0
    fold.attach(trace.arrival_s, work.output_delay)
    rounds = pdmux_rounds(work, setup, policy) if policy.kind == "pdmux" else baseline_rounds(work, setup, policy)
    from .schedulers import drive

    extras = drive(rounds)
    fold.finish_server(work.ends)
    return fold, extras, _Replica(work)


def merge_replicas(trace: Trace, setup: Setup, policy, dp: int, parts: Sequence[tuple], fold) -> RunResult:
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
    fields = _merge(policy.label, policy.kind, trace, works, [part[1] for part in parts], where,
                    rejected=works[0].rejected, fold=fold)
    idle_replicas = sum(1 for part in parts if not len(part[0].rows))
    if idle_replicas:
        routed = len(trace) - len(works[0].rejected)
        fields["notes"].append(f"{idle_replicas} of {dp} replicas got no request ({routed} routed)")
    _note_pool(fields, works, pool)
    method = "round_robin"
    return RunResult(**fields, gpus=dp * setup.tp, layout=Layout(setup.tp, dp), router=method)


def _note_pool(fields: dict, works: Sequence[Work], pool, what: str = "") -> None:
    """The notes :func:`pdmux_cli.simulate.runner.simulate` gives one server, for the replicas."""
    if works[0].rejected:
        first = works[0].rejected[0]
        fields["notes"].insert(0, (
            f"{len(works[0].rejected)} request(s) can never fit in the {what}KV pool ({works[0].capacity:,} tokens at "
            f"mem_fraction_static {pool.mem_fraction_static:g}): first is request {first} with "
            f"{works[0].prompt[first]} + {works[0].output[first]} tokens; counted as missing the SLO"))
    retracted = sum(w.retractions for w in works)
    if retracted:
        fields["notes"].append(f"{retracted} retraction(s): requests sent back to the queue when decode ran out of KV "
                               "slots, prefilled again with their outputs (SGLang's retract_decode)")


def transfer_ends(prefill_end: Sequence[float], instance: Sequence[int], rank_bytes: Sequence[float],
                  link: KvLink) -> tuple[Column, Column]:
    """When each request's KV cache reaches its decode instance (s; ``nan`` where ``prefill_end`` is
    ``nan``), with every prefill instance's transfers one after another in order of prefill end (ties
    by request index), and how long each waited for its link (s). ``instance``: the prefill instance of
    each request; ``rank_bytes``: one rank's share of its KV cache, bytes."""
    n = len(prefill_end)
    done = Column("d", array("d", [math.nan]) * n)
    queued = Column("d", array("d", [0.0]) * n)
    free: dict[int, float] = {}
    # a stable sort on the end times: ties stay in request order
    for rid in sorted(itertools.filterfalse(lambda r: math.isnan(prefill_end[r]), range(n)), key=prefill_end.__getitem__):
        start = max(prefill_end[rid], free.get(instance[rid], 0.0))
        queued[rid] = start - prefill_end[rid]
        done[rid] = start + link.transfer_s(rank_bytes[rid])
        free[instance[rid]] = done[rid]
    return done, queued


def simulate_disagg(trace: Trace, setup: Setup, policy: DisaggPolicy, progress: Progress | None = None,
                    rank_kv_bytes_per_token: float | None = None, fold=None) -> RunResult:
    """Replay ``trace`` on ``policy.prefill`` prefill and ``policy.decode`` decode instances (module
    docstring). ``rank_kv_bytes_per_token``: one rank's KV bytes per token (default: ``setup``'s).
    ``fold``: stream the run (:func:`pdmux_cli.simulate.runner.simulate`; it must keep first tokens and
    servers); the prefill side then streams into a fold of its own, of which only each request's prefill
    end is kept. Returns one :class:`RunResult` (``gpus = (X + Y) x setup.tp``); TTFT is prefill, queueing,
    transfer and the decode instance's admission. Raises :class:`InputError` when the model does not fit."""
    method = check_load_balance_method(policy.load_balance_method)
    for side, count in (("prefill", policy.prefill), ("decode", policy.decode)):
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_INSTANCES:
            raise InputError(f"--disagg: {side} instances must be 1 to {MAX_INSTANCES}, got {count!r}")
    n = len(trace)
    kv_token = setup.kv_bytes_per_token if rank_kv_bytes_per_token is None else rank_kv_bytes_per_token
    # prefill side: every request to its first token
    prefill_trace = replace(trace, output_tokens=array("q", [1]) * n)
    pool = setup.kv_pool(-1)
    p_fold = None
    if fold is not None:
        from .fold import Fold

        p_fold = Fold(n, fold.slo_ttft_ms, fold.slo_itl_ms, max_steps=fold.max_steps, servers=True, first_token=True)
    p_works = _routed_works(prefill_trace, setup, pool.tokens, policy.prefill, p_fold)
    decode_setup = replace(setup, prefix_cache=False)
    d_pool = decode_setup.kv_pool(-1)
    # a request the decode pool can never hold is refused before its prefill (SGLang's decode side
    # refuses it at pre-allocation)
    clip = sgl.CLIP_MAX_NEW_TOKENS
    prompts, outputs = trace.prompt_tokens, trace.output_tokens
    never = {rid for rid in range(n)
             if prompts[rid] + outputs[rid] > d_pool.tokens or prompts[rid] + min(outputs[rid], clip) + 1 >= d_pool.tokens}
    rejected = set(p_works[0].rejected) | never
    order = array("q", _unrejected(n, rejected))
    if p_fold is not None:
        p_fold.attach(trace.arrival_s, p_works[0].output_delay)
    servers = [baseline_rounds(w, setup, PrefillFirstPolicy()) for w in p_works]
    p_extras, p_where, p_unrouted = route(servers, p_works, order, trace.arrival_s, method)
    if p_fold is not None:
        prefill_end = p_fold.columns.first_token_s
        del p_fold
    else:
        prefill_end = array("d", (p_works[i].first_token[rid] if i >= 0 else math.nan for rid, i in enumerate(p_where)))
    rank_bytes = array("d", (p * kv_token for p in prompts))
    arrive, queued = transfer_ends(prefill_end, p_where, rank_bytes, policy.link)
    # decode side: requests arrive when their KV cache has
    d_trace = replace(trace, arrival_s=array("d", (0.0 if math.isnan(x) else x for x in arrive)), hash_ids=())
    d_works = _routed_works(d_trace, decode_setup, d_pool.tokens, policy.decode, fold)
    for work in d_works:
        work.max_prefill_tokens = 1 << 62  # transferred requests join without a prefill batch's token limit
        work.admission_delay = 0.0  # they reach the decode scheduler with their KV cache, not through HTTP
    if fold is not None:
        fold.attach(trace.arrival_s, d_works[0].output_delay)
        fold.reject(rejected)
        fold.columns.prefill_server = array("i", p_where)
    # a stable sort on the arrival times: ties stay in request order
    d_order = sorted(itertools.filterfalse(lambda r: math.isnan(arrive[r]), order), key=arrive.__getitem__)
    tick = _progress_of(d_works, progress)
    servers = [decode_instance_rounds(w, decode_setup, tick) for w in d_works]
    d_extras, d_where, d_unrouted = route(servers, d_works, d_order, d_works[0].arrival, method,
                                          fold.columns.server if fold is not None else None)
    del d_order
    fields = _merge(policy.label, policy.kind, trace, d_works, d_extras, d_where,
                    rejected=rejected, extra_idle=[(e["idle_s"], e["end_s"]) for e in p_extras if e],
                    unrouted=list(p_unrouted) + list(d_unrouted), fold=fold)
    for key in ("prefill_batches", "prefix_cache_hit_tokens", "prefix_cache_prompt_tokens",
                "prefix_cache_evicted_tokens"):
        total = sum(e["counters"].get(key, 0) for e in p_extras if e)
        if any(key in e["counters"] for e in p_extras if e):
            fields["counters"][key] = total
    fields["counters"]["retracted_requests"] = sum(w.retractions for w in d_works)
    moved = [rid for rid in range(n) if not math.isnan(arrive[rid])]
    if moved:
        times = sorted(arrive[r] - prefill_end[r] - queued[r] for r in moved)
        waits = sorted(queued[r] for r in moved)
        fields["counters"]["kv_transfer_ms_mean"] = sum(times) / len(times) * 1e3
        fields["counters"]["kv_transfer_ms_max"] = times[-1] * 1e3
        fields["counters"]["kv_link_wait_ms_mean"] = sum(waits) / len(waits) * 1e3
        fields["notes"].append(
            f"KV cache over {policy.link.text} ({policy.link.source}): transfer mean {sum(times) / len(times) * 1e3:.2f} ms, "
            f"max {times[-1] * 1e3:.2f} ms; waiting for the prefill instance's link mean "
            f"{sum(waits) / len(waits) * 1e3:.2f} ms")
        first = fields["first_token_s"] if fold is None else fold.columns.first_token_s
        served = [r for r in moved if not math.isnan(first[r])]
        if served:  # where a request's TTFT goes, on average
            parts = {"prefill": [prefill_end[r] - trace.arrival_s[r] for r in served],
                     "link wait": [queued[r] for r in served],
                     "transfer": [arrive[r] - prefill_end[r] - queued[r] for r in served],
                     "decode-side wait": [first[r] - arrive[r] for r in served]}
            means = {k: sum(v) / len(v) * 1e3 for k, v in parts.items()}
            for key, value in means.items():
                fields["counters"][f"ttft_{key.replace(' ', '_').replace('-', '_')}_ms_mean"] = value
            fields["notes"].append(
                f"TTFT mean {sum(means.values()):.1f} ms = " + " + ".join(f"{k} {v:.1f}" for k, v in means.items())
                + " (prefill: queue and compute on a prefill instance; decode-side wait: until a decode instance "
                "admits it)")
    if never - set(p_works[0].rejected):
        first = min(never)
        fields["notes"].insert(0, (
            f"{len(never)} request(s) can never fit in a decode instance's KV pool ({d_pool.tokens:,} tokens): first "
            f"is request {first} with {trace.prompt_tokens[first]} + {trace.output_tokens[first]} tokens; counted as "
            "missing the SLO"))
    if p_works[0].rejected:
        _note_pool(fields, p_works, pool, "prefill instance's ")
    retracted = fields["counters"]["retracted_requests"]
    if retracted:
        fields["notes"].append(f"{retracted} retraction(s) on the decode instances: requests sent back to their queue "
                               "when decode ran out of KV slots, prefilled again there")
    fields["kv_pool_tokens"] = d_pool.tokens
    if fold is None:
        fields["prefill_server"] = list(p_where)
    elif fold.csv is not None:
        fold.csv.flush(fold.columns, crashed=fields["crashed_at_s"] is not None, final=True)
    if progress is not None:
        progress(sum(w.finished for w in d_works))
    routed = policy.prefill > 1 or policy.decode > 1
    return RunResult(**fields, gpus=(policy.prefill + policy.decode) * setup.tp,
                     layout=Layout(setup.tp, xpyd=(policy.prefill, policy.decode)), router=method if routed else "")

__all__ = ["DisaggPolicy", "merge_replicas", "replica_run", "replicas_apart", "route", "simulate_disagg",
           "simulate_dp", "transfer_ends"]
