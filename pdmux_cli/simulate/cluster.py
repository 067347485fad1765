"""PD disaggregation (xPyD): prefill instances and decode instances, the KV cache crossing a link.

Pure Python and deterministic, on the schedulers of :mod:`pdmux_cli.simulate.schedulers` run as
generators behind the router of :mod:`pdmux_cli.simulate.servers` (one per instance, all on one clock;
DP replicas of one server are :func:`pdmux_cli.simulate.servers.serve`):

- **PD disaggregation** (:func:`simulate_disagg`, :class:`DisaggPolicy`): X prefill instances run
  SGLang's prefill-first loop on the whole GPU, each request to its first token only (the KV cache is
  held until the prefill ends, then freed: the time it waits for its transfer is not charged to the
  pool); each request's KV cache (its prompt's tokens, one rank's share per GPU) then crosses the
  prefill instance's link, one transfer after another in order of prefill end
  (:class:`pdmux_cli.multigpu.disaggregation.KvLink`, :func:`transfer_ends`); Y decode instances
  receive them when the transfer ends (:func:`~pdmux_cli.simulate.schedulers.decode_instance_rounds`:
  admitted by KV memory, first token streamed on admission, decode on the whole GPU; no prefix cache).
  The receiving side's link is not modelled as a bottleneck. Each side's requests are routed by
  ``load_balance_method`` (:func:`pdmux_cli.simulate.servers.route`).

The result is one :class:`~pdmux_cli.simulate.engine.RunResult` over every request of the trace, as for
one server (:func:`pdmux_cli.simulate.servers.run_result`): the decode instances' steps one after another
in ``step_end_s``, idle time averaged over all the GPUs, counters summed.
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..multigpu.disaggregation import MAX_INSTANCES, KvLink, check_load_balance_method
from ..sglang import server_defaults as sgl
from ..util.errors import Finding, InputError
from .columns import Column
from .engine import Progress, RunResult, Setup
from .policies import Deployment, ServerOutcome
from .schedulers import PrefillFirstPolicy, decode_instance_rounds
from .servers import combine, note_pool, progress_of, route, routed_works, run_result, unrejected
from .traces import Trace


@dataclass(frozen=True)
class DisaggPolicy:
    """PD disaggregation: ``prefill`` instances and ``decode`` instances, the KV cache crossing ``link``;
    ``load_balance_method`` routes requests to the instances of each side. ``instance_setup``: the server
    every instance is (its own TP, ``--disagg-tp``), ``None`` for the run's (:meth:`setup_for`). A
    :class:`~pdmux_cli.simulate.policies.Policy` whose servers are its own (a run's ``dp`` does not apply)."""

    prefill: int
    decode: int
    link: KvLink
    load_balance_method: str = "round_robin"
    instance_setup: Setup | None = None

    kind: ClassVar[str] = "disagg"
    prefill_apart: ClassVar[bool] = True
    multiplexes: ClassVar[bool] = False
    chunk_tokens: ClassVar[int] = -1

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

    def check(self) -> None:
        """Nothing here: :func:`simulate_disagg` checks the instances and the method."""

    def servers(self, dp: int = 1) -> int:
        """X + Y instances, whatever ``dp``."""
        return self.prefill + self.decode

    def launch_args(self, config_path: str | None = None) -> list[str]:
        """Empty: no one server runs a disaggregation; its X prefill and Y decode instances are launched
        apart (capacity's verdict names them from :meth:`deployment`'s ``xpyd``)."""
        return []

    def deployment(self, setup: Setup, dp: int = 1, method: str = "round_robin") -> Deployment:
        """X + Y instances of :meth:`setup_for` each, behind :attr:`load_balance_method` (``dp`` and
        ``method`` do not apply); a router chooses where a side has more than one instance."""
        return _deployment((self.prefill, self.decode), self.setup_for(setup).tp, self.load_balance_method)

    def routing_known(self, setup: Setup, dp: int, method: str) -> bool:
        """Never: a disaggregation routes its own instances, in one task."""
        return False

    def run(self, trace: Trace, setup: Setup, *, dp: int = 1, method: str = "round_robin",
            progress: Progress | None = None, fold: Any = None,
            initial_decode: Sequence[tuple[int, int]] = (), max_concurrency: int = 0) -> RunResult:
        """:func:`simulate_disagg` on :meth:`setup_for` (``dp``, ``method`` do not apply; a running batch
        and a closed-loop client are refused by :func:`pdmux_cli.simulate.runner.simulate`)."""
        return simulate_disagg(trace, self.setup_for(setup), self, progress, fold=fold)


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
    for rid in sorted(itertools.filterfalse(lambda r: math.isnan(prefill_end[r]), range(n)),
                      key=prefill_end.__getitem__):
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
            raise InputError(
                "{flag.disagg}: {side} instances must be 1 to {MAX_INSTANCES}, got {count!r}",
                values={"side": side, "MAX_INSTANCES": MAX_INSTANCES, "count": count},
            )
    n = len(trace)
    kv_token = setup.kv_bytes_per_token if rank_kv_bytes_per_token is None else rank_kv_bytes_per_token
    # prefill side: every request to its first token
    prefill_trace = replace(trace, output_tokens=array("q", [1]) * n)
    pool = setup.kv_pool(-1)
    p_fold = None
    if fold is not None:
        from .fold import Fold

        p_fold = Fold(n, fold.slo_ttft_ms, fold.slo_itl_ms, max_steps=fold.max_steps, servers=True,
                      first_token=True)
    p_works = routed_works(prefill_trace, setup, pool.tokens, policy.prefill, p_fold)
    decode_setup = replace(setup, prefix_cache=False)
    d_pool = decode_setup.kv_pool(-1)
    # a request the decode pool can never hold is refused before its prefill (SGLang's decode side
    # refuses it at pre-allocation)
    clip = sgl.CLIP_MAX_NEW_TOKENS
    prompts, outputs = trace.prompt_tokens, trace.output_tokens
    never = {rid for rid in range(n)
             if prompts[rid] + outputs[rid] > d_pool.tokens
             or prompts[rid] + min(outputs[rid], clip) + 1 >= d_pool.tokens}
    rejected = set(p_works[0].rejected) | never
    order = array("q", unrejected(n, rejected))
    if p_fold is not None:
        p_fold.attach(trace.arrival_s, p_works[0].output_delay)
    prefill_first = PrefillFirstPolicy()
    servers = [prefill_first.rounds(w, setup) for w in p_works]
    p_outcomes, p_where, p_unrouted = route(servers, p_works, order, trace.arrival_s, method)
    if p_fold is not None:
        prefill_end = p_fold.columns.first_token_s
        del p_fold
    else:
        prefill_end = array("d", (p_works[i].first_token[rid] if i >= 0 else math.nan
                                  for rid, i in enumerate(p_where)))
    rank_bytes = array("d", (p * kv_token for p in prompts))
    arrive, queued = transfer_ends(prefill_end, p_where, rank_bytes, policy.link)
    # decode side: requests arrive when their KV cache has
    d_trace = replace(trace, arrival_s=array("d", (0.0 if math.isnan(x) else x for x in arrive)), hash_ids=())
    d_works = routed_works(d_trace, decode_setup, d_pool.tokens, policy.decode, fold)
    for work in d_works:
        work.max_prefill_tokens = 1 << 62  # transferred requests join without a prefill batch's token limit
        work.admission_delay = 0.0  # they reach the decode scheduler with their KV cache, not through HTTP
    if fold is not None:
        fold.attach(trace.arrival_s, d_works[0].output_delay)
        fold.reject(rejected)
        fold.columns.prefill_server = array("i", p_where)
    # a stable sort on the arrival times: ties stay in request order
    d_order = sorted(itertools.filterfalse(lambda r: math.isnan(arrive[r]), order), key=arrive.__getitem__)
    tick = progress_of(d_works, progress)
    servers = [decode_instance_rounds(w, decode_setup, tick) for w in d_works]
    d_outcomes, d_where, d_unrouted = route(servers, d_works, d_order, d_works[0].arrival, method,
                                          fold.columns.server if fold is not None else None)
    del d_order
    p_ran = [e for e in p_outcomes if e is not None]
    outcome = combine(d_outcomes, extra_idle=[(e.idle_s, e.end_s) for e in p_ran])
    result = run_result(policy, trace, d_works, outcome, d_where,
                        _deployment((policy.prefill, policy.decode), setup.tp, method), rejected=rejected,
                        unrouted=list(p_unrouted) + list(d_unrouted), fold=fold)
    counters = result.counters
    _prefill_counters(counters, p_ran)
    counters["retracted_requests"] = sum(w.retractions for w in d_works)
    moved = [rid for rid in range(n) if not math.isnan(arrive[rid])]
    if moved:
        first = result.first_token_s if fold is None else fold.columns.first_token_s
        _note_transfers(counters, result.notes, policy.link, trace, moved, prefill_end, queued, arrive, first)
    _note_pools(result.notes, trace, never if never - set(p_works[0].rejected) else set(), d_pool.tokens,
                p_works, pool, counters["retracted_requests"])
    result.kv_pool_tokens = d_pool.tokens
    if fold is None:
        result.prefill_server = list(p_where)
    elif fold.csv is not None:
        fold.csv.flush(fold.columns, crashed=result.crashed_at_s is not None, final=True)
    if progress is not None:
        progress(sum(w.finished for w in d_works))
    return result


def _prefill_counters(counters: dict, prefill: Sequence[ServerOutcome]) -> None:
    """The prefill instances' prefill batches and prefix cache tokens, summed into ``counters``."""
    for key in ("prefill_batches", "prefix_cache_hit_tokens", "prefix_cache_prompt_tokens",
                "prefix_cache_evicted_tokens"):
        if any(key in e.counters for e in prefill):
            counters[key] = sum(e.counters.get(key, 0) for e in prefill)


def _note_pools(notes: list[str], trace: Trace, never: set[int], decode_pool_tokens: int, p_works: Sequence,
                pool, retracted: int) -> None:
    """The KV pools' notes (``notes`` changed in place): requests no decode instance can ever hold
    (``never``, when some the prefill side admits are among them), requests the prefill side never
    admits, retractions on the decode instances."""
    if never:
        first = min(never)
        notes.insert(0, Finding("simulate.never_fits_decode_pool", {
            "rejected": len(never), "pool_tokens": decode_pool_tokens, "first": first,
            "prompt_tokens": trace.prompt_tokens[first], "output_tokens": trace.output_tokens[first]}))
    if p_works[0].rejected:
        note_pool(notes, p_works, pool, "prefill instance's ")
    if retracted:
        notes.append(Finding("simulate.decode_retractions", {"retractions": retracted}))


def _deployment(xpyd: tuple[int, int], tp: int, method: str) -> Deployment:
    """X + Y instances of ``tp`` GPUs behind ``method``, a router choosing where a side has more than one."""
    return Deployment(tp=tp, xpyd=xpyd, method=method, routed=max(xpyd) > 1)


def _note_transfers(counters: dict, notes: list[str], link: KvLink, trace: Trace, moved: Sequence[int],
                    prefill_end: Sequence[float], queued: Sequence[float], arrive: Sequence[float],
                    first: Sequence[float]) -> None:
    """The KV transfers' counters and notes (``counters``, ``notes`` changed in place): transfer time
    and link wait over the ``moved`` requests, and where a served request's TTFT goes, on average (ms)."""
    times = sorted(arrive[r] - prefill_end[r] - queued[r] for r in moved)
    waits = sorted(queued[r] for r in moved)
    counters["kv_transfer_ms_mean"] = sum(times) / len(times) * 1e3
    counters["kv_transfer_ms_max"] = times[-1] * 1e3
    counters["kv_link_wait_ms_mean"] = sum(waits) / len(waits) * 1e3
    notes.append(
        f"KV cache over {link.text} ({link.source}): transfer mean {sum(times) / len(times) * 1e3:.2f} ms, "
        f"max {times[-1] * 1e3:.2f} ms; waiting for the prefill instance's link mean "
        f"{sum(waits) / len(waits) * 1e3:.2f} ms")
    served = [r for r in moved if not math.isnan(first[r])]
    if not served:
        return
    parts = {"prefill": [prefill_end[r] - trace.arrival_s[r] for r in served],
             "link wait": [queued[r] for r in served],
             "transfer": [arrive[r] - prefill_end[r] - queued[r] for r in served],
             "decode-side wait": [first[r] - arrive[r] for r in served]}
    means = {k: sum(v) / len(v) * 1e3 for k, v in parts.items()}
    for key, value in means.items():
        counters[f"ttft_{key.replace(' ', '_').replace('-', '_')}_ms_mean"] = value
    notes.append(
        f"TTFT mean {sum(means.values()):.1f} ms = " + " + ".join(f"{k} {v:.1f}" for k, v in means.items())
        + " (prefill: queue and compute on a prefill instance; decode-side wait: until a decode instance "
        "admits it)")


__all__ = ["DisaggPolicy", "simulate_disagg", "transfer_ends"]
