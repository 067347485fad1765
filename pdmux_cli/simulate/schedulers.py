"""The three schedulers, as discrete-event simulations of one GPU: pdmux, chunked prefill, prefill-first.

Common ground (KV admission, cost model, records) is in :mod:`pdmux_cli.simulate.engine`. Policies:

**pdmux** (SGLang's ``event_loop_pdmux``, sglang-pdmux.md "The scheduler loop"). One loop iteration
is a *round*:

1. requests that have arrived join the waiting queue;
2. with no prefill batch in flight, one is formed: waiting requests FIFO while their prompts fit
   ``max_prefill_tokens`` (at least one; SGLang's ``--max-prefill-tokens``, default 16384) and their
   KV fits; the whole batch runs as a split prefill. The stream group is chosen now
   (:func:`pdmux_cli.policy.choose_group`, newer SGLang: group 1 when no manual threshold matches;
   rounds where older SGLang would crash instead are counted and reported);
3. one decode step runs on the decode partition (``d`` SMs; co-run bandwidth factor with the ``p``
   prefill SMs while the prefill stream is busy), and the next slice of
   :func:`pdmux_cli.policy.prefill_layers_per_round` layers is *submitted* to the prefill stream;
4. SGLang waits for the decode stream only, so **a round lasts one decode step**. The prefill stream
   runs asynchronously: a slice starts when it is submitted or when the previous slice ends, whichever
   is later, and lasts ``layers / num_layers`` of the batch's prefill time on ``p`` SMs (co-run FLOP/s
   factor with the ``d`` decode SMs). When the slices arrive faster than they run (the usual case:
   rounds are ~10 ms), prefill ends at its start plus its whole time on ``p`` SMs; with a small
   ``split_forward_token_budget`` the stream can starve between rounds and prefill takes longer;
5. the prefill batch is merged into the decode batch at the end of the first round ending after the
   prefill stream finished its last slice: that is the requests' first-token time. The group is
   re-chosen then (decode only: the last group, whole GPU to decode).

With no decode running, the chosen group is 0 (whole GPU to prefill) and the rounds have no decode
step to wait for: every slice is submitted at once and the batch merges when the prefill is done
(TTFT = whole-GPU prefill time for a request that arrives to an idle GPU). If the decode batch
empties during a split prefill, SGLang changes to group 0: both streams are synchronised (the slices
already submitted finish on ``p`` SMs) and the remaining layers run on the whole GPU. Group changes
themselves cost no time, nor does the CPU's scheduling work.

**chunked prefill** (Sarathi-style, the chapter's chunked model, :func:`pdmux_cli.cost.chunked_step_s`
generalised to mixed lengths): every step runs the whole running decode batch plus up to
``chunk_tokens`` prompt tokens: first the rest of a partially prefilled request, then waiting
requests FIFO (each admitted when its KV fits). Step time on the whole GPU =
``max((chunks' prefill FLOPs incl. attention over their cached prefix + decode_bs x linear FLOPs) /
FLOP/s, decode-only step)``. A request whose last chunk ran gets its first token at that step's end.

**prefill-first** (no chunking, SGLang's default without ``--chunked-prefill-size``): whenever
requests wait and fit, a prefill batch (as in pdmux) runs on the whole GPU before the next decode
step; decode steps run only when nothing can be prefilled. Every decode request stalls for each
prefill.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import policy as pol
from ..pdmux_config import PdmuxConfig
from .engine import Progress, Setup, StepCost, Work

#: Decode steps between two progress callbacks.
PROGRESS_EVERY = 4096


@dataclass(frozen=True)
class PdmuxPolicy:
    """SGLang's PD multiplexing with a pdmux YAML's knobs (``config``)."""

    config: PdmuxConfig = field(default_factory=PdmuxConfig)
    name: str = ""

    kind = "pdmux"

    @property
    def label(self) -> str:
        """``"pdmux"`` or the given name."""
        return self.name or "pdmux"


@dataclass(frozen=True)
class ChunkedPolicy:
    """Chunked prefill with ``chunk_tokens`` prompt tokens per step (tokens)."""

    chunk_tokens: int

    kind = "chunked"

    @property
    def label(self) -> str:
        """``"chunked 512"``."""
        return f"chunked {self.chunk_tokens}"


@dataclass(frozen=True)
class PrefillFirstPolicy:
    """Whole prefills first, on the whole GPU (no chunking)."""

    kind = "prefill-first"

    @property
    def label(self) -> str:
        """``"prefill-first"``."""
        return "prefill-first"


def _idle_until_next(work: Work, t: float) -> float | None:
    """Next arrival time (s) when the GPU has nothing to run; ``None`` when the run is over."""
    nxt = work.next_arrival()
    if nxt is None:
        if work.waiting:  # cannot happen: with nothing running all KV is free and rejects are removed
            raise RuntimeError("simulator stalled with requests waiting and nothing running")
        return None
    return max(t, nxt)


def run_pdmux(work: Work, setup: Setup, policy: PdmuxPolicy, costs: StepCost,
              progress: Progress | None = None) -> dict:
    """Simulate SGLang's pdmux loop over ``work`` (see the module docstring). Returns the extras
    for :class:`~pdmux_cli.simulate.engine.RunResult`: end time, idle seconds, groups, time per group,
    counters and notes. Raises :class:`~pdmux_cli.errors.InputError` for a config SGLang rejects."""
    cfg = policy.config
    total = setup.total_sms
    plan = pol.plan_groups(total, setup.compute_capability, cfg.sm_group_num, cfg.manual_divisions or None)
    groups = [tuple(g) for g in plan.groups]
    n_groups = len(groups)
    last = n_groups - 1
    thresholds = plan.thresholds
    divisor, budget = cfg.decode_bs_divisor, cfg.split_forward_token_budget
    layers = setup.model.num_layers
    max_tokens = setup.max_prefill_tokens
    prompt = work.prompt
    batch = work.batch
    ends = work.ends
    append = ends.append
    decode_s = costs.decode_s
    group_time = [0.0] * n_groups
    counters = {"prefill_batches": 0, "rounds": 0, "older_sglang_crash_rounds": 0, "decode_emptied_during_prefill": 0}
    notes: list[str] = []
    crash_first: tuple[float, int] | None = None

    t = 0.0
    idle = 0.0
    group = last if batch.n else 0
    pf = None  # requests of the prefill batch in flight
    pf_flops = 0.0
    pf_p = pf_d = 0
    submitted = per_round = 0
    layer_s = 0.0
    stream_free = 0.0
    next_progress = PROGRESS_EVERY

    while True:
        work.receive(t)
        if pf is None and work.waiting:
            rids, tokens = work.take_batch(max_tokens)
            if rids:
                counters["prefill_batches"] += 1
                bs = batch.n
                group = pol.choose_group(n_groups, bs, True, divisor, thresholds)
                if thresholds and pol.older_sglang_crashes(thresholds, bs):
                    counters["older_sglang_crash_rounds"] += 1
                    if crash_first is None:
                        crash_first = (t, bs)
                pf_p, pf_d = groups[group]
                pf = rids
                pf_flops = sum(costs.prefill_flops(prompt[r]) for r in rids)
                layer_s = costs.prefill_s(pf_p, pf_flops, pf_d if bs else 0) / layers
                per_round = pol.prefill_layers_per_round(tokens, layers, budget)
                submitted = 0
                stream_free = t
        if batch.n == 0:
            if pf is not None:
                if group != 0:
                    # decode emptied during a split prefill: sync both streams, move to group 0
                    counters["decode_emptied_during_prefill"] += 1
                    if stream_free > t:
                        group_time[group] += stream_free - t
                        t = stream_free
                    group = 0
                    layer_s = costs.prefill_s(total, pf_flops) / layers
                done = max(t, stream_free) + (layers - submitted) * layer_s
                group_time[0] += done - t
                t = done
                work.first_tokens(pf, t)
                pf = None
                group = last if batch.n else 0
                continue
            nxt = _idle_until_next(work, t)
            if nxt is None:
                break
            idle += nxt - t
            t = nxt
            continue
        # a round with a decode step
        if pf is not None:
            if submitted < layers:
                k = per_round if submitted + per_round <= layers else layers - submitted
                stream_free = (max(t, stream_free)) + k * layer_s
                submitted += k
            tau = decode_s(pf_d, batch.n, batch.sum_context, batch.sum_window, pf_p if stream_free > t else 0)
            group_time[group] += tau
        else:
            tau = decode_s(total, batch.n, batch.sum_context, batch.sum_window, 0)
            group_time[last] += tau
        t += tau
        step = len(ends)
        append(t)
        finished = batch.complete(step)
        if finished:
            work.release(finished)
        if pf is not None and submitted >= layers and stream_free <= t:
            work.first_tokens(pf, t)
            pf = None
        if progress is not None and step >= next_progress:
            next_progress += PROGRESS_EVERY
            progress(work.finished)
    counters["rounds"] = len(ends)
    if crash_first is not None:
        notes.append(
            f"older SGLang main would crash (UnboundLocalError) at {counters['older_sglang_crash_rounds']} level "
            f"choice(s), first at t={crash_first[0]:.2f} s with {crash_first[1]} decode request(s): no "
            "manual_divisions threshold is <= the decode batch (newer SGLang uses group 1, as simulated)"
        )
    if plan.note:
        notes.append(plan.note)
    return {"end_s": t, "idle_s": idle, "groups": groups, "group_time_s": group_time, "counters": counters,
            "notes": notes}


def run_chunked(work: Work, setup: Setup, policy: ChunkedPolicy, costs: StepCost,
                progress: Progress | None = None) -> dict:
    """Simulate chunked prefill with ``policy.chunk_tokens`` prompt tokens per step (module docstring)."""
    chunk = policy.chunk_tokens
    total = setup.total_sms
    prompt = work.prompt
    batch = work.batch
    ends = work.ends
    waiting = work.waiting
    decode_s = costs.decode_s
    prefill_flops = costs.prefill_flops
    linear = costs.linear_flops
    inv_flops = 1.0 / costs.flops_rate(total)
    partial = -1  # request being prefilled across steps, and its prefilled tokens
    partial_done = 0
    t = 0.0
    idle = 0.0
    steps_with_prefill = 0
    next_progress = PROGRESS_EVERY
    while True:
        work.receive(t)
        budget = chunk
        flops = 0.0
        completed = []
        if partial >= 0:
            take = min(budget, prompt[partial] - partial_done)
            flops += prefill_flops(take, partial_done)
            partial_done += take
            budget -= take
            if partial_done == prompt[partial]:
                completed.append(partial)
                partial = -1
        while budget > 0 and waiting and partial < 0:
            rid = waiting[0]
            if not work.admit(rid):
                break
            waiting.popleft()
            take = min(budget, prompt[rid])
            flops += prefill_flops(take, 0)
            budget -= take
            if take == prompt[rid]:
                completed.append(rid)
            else:
                partial, partial_done = rid, take
        n = batch.n
        if not flops and not n:
            nxt = _idle_until_next(work, t)
            if nxt is None:
                break
            idle += nxt - t
            t = nxt
            continue
        if flops:
            steps_with_prefill += 1
            compute_s = (flops + n * linear) * inv_flops
            decode_only = decode_s(total, n, batch.sum_context, batch.sum_window) if n else 0.0
            t += max(decode_only, compute_s)
        else:
            t += decode_s(total, n, batch.sum_context, batch.sum_window)
        if n:
            step = len(ends)
            ends.append(t)
            finished = batch.complete(step)
            if finished:
                work.release(finished)
            if progress is not None and step >= next_progress:
                next_progress += PROGRESS_EVERY
                progress(work.finished)
        if completed:
            work.first_tokens(completed, t)
    return {"end_s": t, "idle_s": idle, "counters": {"steps": len(ends), "steps_with_prefill": steps_with_prefill},
            "notes": []}


def run_prefill_first(work: Work, setup: Setup, policy: PrefillFirstPolicy, costs: StepCost,
                      progress: Progress | None = None) -> dict:
    """Simulate prefill-first scheduling without chunking (module docstring)."""
    total = setup.total_sms
    max_tokens = setup.max_prefill_tokens
    prompt = work.prompt
    batch = work.batch
    ends = work.ends
    decode_s = costs.decode_s
    t = 0.0
    idle = 0.0
    batches = 0
    next_progress = PROGRESS_EVERY
    while True:
        work.receive(t)
        if work.waiting:
            rids, _ = work.take_batch(max_tokens)
            if rids:
                batches += 1
                t += costs.prefill_s(total, sum(costs.prefill_flops(prompt[r]) for r in rids))
                work.first_tokens(rids, t)
                continue
        if not batch.n:
            nxt = _idle_until_next(work, t)
            if nxt is None:
                break
            idle += nxt - t
            t = nxt
            continue
        t += decode_s(total, batch.n, batch.sum_context, batch.sum_window)
        step = len(ends)
        ends.append(t)
        finished = batch.complete(step)
        if finished:
            work.release(finished)
        if progress is not None and step >= next_progress:
            next_progress += PROGRESS_EVERY
            progress(work.finished)
    return {"end_s": t, "idle_s": idle, "counters": {"steps": len(ends), "prefill_batches": batches}, "notes": []}
