"""Entry points: run one policy over a trace, and the chapter's scenario (a running decode batch plus
one prompt) through any policy."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..util.errors import InputError
from .engine import Progress, RunResult, Setup, step_budget
from .fold import Fold
from .metrics import PolicyMetrics, summarize
from .policies import Policy
from .servers import merge_replicas, replica_run, replicas_apart
from .traces import Trace


def simulate(
    trace: Trace,
    setup: Setup,
    policy: Policy,
    initial_decode: Sequence[tuple[int, int]] = (),
    progress: Progress | None = None,
    dp: int = 1,
    load_balance_method: str = "round_robin",
    max_concurrency: int = 0,
    fold: Fold | None = None,
) -> RunResult:
    """Replay ``trace`` through ``policy`` on the simulated server of ``setup``.

    ``initial_decode``: ``(context_tokens, remaining_decode_steps)`` of requests already decoding at
    time 0 (appended after the trace's requests in the result; one server only). ``progress``: called
    now and then with the number of finished requests. The KV pool is SGLang's for the policy's chunk
    size (:meth:`Setup.kv_pool`). ``dp``: replicas of the server behind a router
    (``load_balance_method``; :func:`pdmux_cli.simulate.servers.serve`: one server is DP 1); a
    :class:`~pdmux_cli.simulate.cluster.DisaggPolicy` runs its own instances (``dp`` does not apply).
    ``max_concurrency``: a closed-loop client keeping at most that many requests in flight, as
    ``python -m sglang.bench_serving --max-concurrency`` does (each request sent at its arrival or when a
    slot frees, whichever is later; TTFT from the send); 0 for none. One server only.
    ``fold``: stream the run (:class:`~pdmux_cli.simulate.fold.Fold`: per-request results folded as
    requests finish, a window of step end times, its step budget); the result then holds no per-request
    records (:func:`~pdmux_cli.simulate.metrics.summarize` finishes it from the fold).
    Raises :class:`InputError` for a policy SGLang would refuse (no valid split, bad chunk size), a
    model that does not fit, or a streamed run past its step budget; requests that can never fit in KV
    memory are listed in ``RunResult.rejected``, not raised. The policy runs itself
    (:meth:`~pdmux_cli.simulate.policies.Policy.run`) once the arguments are checked here.
    """
    one = policy.servers(dp) == 1
    if initial_decode and not one:
        raise InputError(
            "a running decode batch at time 0 is simulated on one server only (no {flag.dp}, no disagg)",
            values={},
        )
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 0:
        raise InputError(f"max concurrency must be a whole number >= 1 (0: no limit), got "
                         f"{max_concurrency!r}")
    if max_concurrency and not one:
        raise InputError(
            "{flag.max_concurrency} (a closed-loop client) is simulated on one server only (no "
            "{flag.dp}, no {flag.disagg})",
            values={},
        )
    policy.check()
    return policy.run(trace, setup, dp=dp, method=load_balance_method, progress=progress, fold=fold,
                      initial_decode=initial_decode, max_concurrency=max_concurrency)


def simulate_metrics(trace: Trace, setup: Setup, policy: Policy, slo_ttft_ms: float, slo_itl_ms: float, *,
                     progress: Progress | None = None, dp: int = 1, load_balance_method: str = "round_robin",
                     max_concurrency: int = 0, max_steps: int | None = None, csv: Any = None,
                     progress_steps: Callable[[int], None] | None = None,
                     stop_below: float | None = None, all_token_itl: bool = True,
                     itl_cdf: bool = True) -> PolicyMetrics:
    """:func:`simulate` streamed, and summarized: memory bounded by the requests in flight (plus compact
    per-request columns), the same figures as ``summarize(simulate(...))``.

    ``max_steps``: the decode-step budget of each simulated server (:func:`~pdmux_cli.simulate.engine.
    step_budget`: default the larger of 6,000,000 and 2,000 a request; 0 for none). ``csv``: a
    ``csv.writer`` the per-request rows go to as requests finish (:class:`~pdmux_cli.simulate.fold.CsvRows`,
    request order). ``progress_steps``: called with the decode steps of the server simulated, now and
    then. ``stop_below``: a target SLO attainment (share) at which to stop the run as soon as it cannot be
    reached (:meth:`~pdmux_cli.simulate.fold.Fold.check_target`, raising
    :class:`~pdmux_cli.simulate.fold.TargetMissed`: a search's verdict, no figures). ``all_token_itl``: keep
    the ITL distribution over all tokens (``itl_ms``, ``itl_cdf``); ``False`` where the caller reads neither
    (NaN and empty then; each request's own ITL figures are kept); ``itl_cdf``: :func:`~pdmux_cli.simulate.
    metrics.summarize`'s (``False``: no CDF, which only plots draw). The other arguments are
    :func:`simulate`'s. Raises :class:`InputError` as it does.
    """
    fold = new_fold(trace, policy, slo_ttft_ms, slo_itl_ms, dp=dp, max_steps=max_steps, csv=csv,
                    progress_steps=progress_steps, all_token_itl=all_token_itl)
    fold.stop_below = stop_below
    result = simulate(trace, setup, policy, progress=progress, dp=dp, load_balance_method=load_balance_method,
                      max_concurrency=max_concurrency, fold=fold)
    return summarize(result, slo_ttft_ms, slo_itl_ms, itl_cdf=itl_cdf)


def new_fold(trace: Trace, policy: Policy, slo_ttft_ms: float, slo_itl_ms: float, *, dp: int = 1,
             max_steps: int | None = None, csv: Any = None,
             progress_steps: Callable[[int], None] | None = None, rows: Sequence[int] | None = None,
             all_token_itl: bool = True) -> Fold:
    """The :class:`~pdmux_cli.simulate.fold.Fold` a streamed run of ``policy`` on ``trace`` fills: which
    server served each request kept for DP replicas and disaggregation, each first token for the
    latter, ``csv`` rows written under the policy's label."""
    from .fold import CsvRows

    return Fold(len(trace), slo_ttft_ms, slo_itl_ms, max_steps=step_budget(len(trace), max_steps),
                servers=policy.servers(dp) > 1, first_token=policy.prefill_apart,
                csv=CsvRows(csv, policy.label, trace) if csv is not None else None,
                progress_steps=progress_steps, rows=rows, all_token_itl=all_token_itl)


def _policy_task(shared: tuple, policy: Policy) -> PolicyMetrics | InputError:
    """One policy simulated and summarized, streamed (a task of :mod:`.executors`): its metrics, or the
    InputError that refused it. ``shared``: ``(trace, setup, slo_ttft_ms, slo_itl_ms, dp, method,
    max_concurrency, max_steps)``."""
    trace, setup, slo_ttft_ms, slo_itl_ms, dp, method, concurrency, max_steps = shared
    try:
        return simulate_metrics(trace, setup, policy, slo_ttft_ms, slo_itl_ms, dp=dp,
                                load_balance_method=method, max_concurrency=concurrency, max_steps=max_steps)
    except InputError as exc:
        return exc


def _replica_task(shared: tuple, task: tuple) -> tuple | InputError:
    """One DP replica of one policy, simulated apart (:func:`pdmux_cli.simulate.servers.replica_run`)."""
    trace, setup, slo_ttft_ms, slo_itl_ms, dp, _method, _concurrency, max_steps = shared
    policy, index = task
    try:
        return replica_run(trace, setup, policy, index, dp,
                           lambda: new_fold(trace, policy, slo_ttft_ms, slo_itl_ms, dp=dp,
                                            max_steps=max_steps))
    except InputError as exc:
        return exc


def simulate_policies(trace: Trace, setup: Setup, policies: Sequence[Policy], slo_ttft_ms: float,
                      slo_itl_ms: float, *, dp: int = 1, load_balance_method: str = "round_robin",
                      workers: int = 1, progress: Progress | None = None, max_concurrency: int = 0,
                      executor: Any = "local", ray_address: str | None = None, max_steps: int | None = None,
                      csv: Any = None, progress_steps: Callable[[int], None] | None = None,
                      ) -> list[PolicyMetrics | InputError]:
    """:func:`simulate` and :func:`~pdmux_cli.simulate.metrics.summarize` each of ``policies``, streamed
    (:func:`simulate_metrics`), in order: its :class:`PolicyMetrics`, or the :class:`InputError` with which
    it was refused (the others still run).

    ``executor`` (:mod:`.executors`: ``local``, ``ray`` at ``ray_address``, or one already open) and
    ``workers``: with more than one worker, each policy is a task, and with ``dp`` round-robin replicas
    (:func:`~pdmux_cli.simulate.servers.replicas_apart`) each replica is (``total_requests`` needs every
    replica's queue at each arrival: its replicas run in one task, behind the router). ``progress``: called
    with the requests finished over all policies (per task when they run in workers). ``csv``: a
    ``csv.writer`` or a :class:`~pdmux_cli.simulate.fold.CsvSink` for every policy's per-request rows, in
    policy order (as requests finish when the policies run here, one after another, a refused policy's
    rows cut off again from a sink; else as each policy's results come back). ``max_steps``,
    ``progress_steps``: :func:`simulate_metrics`'s. ``max_concurrency``: a closed-loop client
    (:func:`simulate`).
    """
    from .executors import check_executor, local_workers, using

    n = len(trace)
    tasks = _tasks(policies, setup, dp, load_balance_method)
    local = isinstance(executor, str) and check_executor(executor, ray_address) == "local"
    if local and len(tasks) == 1 and dp == 1 and not max_concurrency:
        from .time_split import segments_for

        segments = segments_for(trace, setup, policies[0], workers)
        if segments > 1:  # one long run: cut in time, its segments side by side on the cores
            return [_policy_split(trace, setup, policies[0], slo_ttft_ms, slo_itl_ms, segments,
                                  max_steps=max_steps, csv=csv, progress=progress,
                                  progress_steps=progress_steps)]
    here = local and local_workers(workers, len(tasks)) == 1
    if here:  # one after another in this process: rows and progress as requests finish
        options = {"dp": dp, "load_balance_method": load_balance_method, "max_concurrency": max_concurrency,
                   "max_steps": max_steps, "csv": csv, "progress_steps": progress_steps}
        return [_policy_here(trace, setup, policy, slo_ttft_ms, slo_itl_ms, _from(progress, i * n), **options)
                for i, policy in enumerate(policies)]
    parts: dict[int, list] = {i: [None] * dp for i, r in tasks if r >= 0}
    out: list[PolicyMetrics | InputError | None] = [None] * len(policies)
    left = {i: sum(1 for j, _ in tasks if j == i) for i in range(len(policies))}
    written = 0
    finished = 0.0
    with using(executor, workers, len(tasks), ray_address) as ex:
        shared = ex.share((trace, setup, slo_ttft_ms, slo_itl_ms, dp, load_balance_method, max_concurrency,
                           max_steps))
        # the costliest first, so that the others fill the workers beside it: mixed-chunk schedules (a decode
        # step's rows in every prefill batch: on the conv trace 0.75 s against 0.49-0.54 s CPU for pdmux and
        # chunked 8192, 2026-12-04); the outputs go back in policy order whatever the order they run in
        for i, r in sorted(tasks, key=lambda task: not getattr(policies[task[0]], "mixed", False)):
            policy = policies[i]
            if r < 0:
                ex.submit(_policy_task, shared, policy, f"{policy.label}", tag=(i, r))
            else:
                ex.submit(_replica_task, shared, (policy, r), f"{policy.label}, replica {r} of DP {dp}",
                          tag=(i, r))
        while ex.pending():
            job = ex.next_done()
            i, r = job.tag
            value = job.result()
            left[i] -= 1
            if r < 0:
                out[i] = value
                finished += n
            else:
                parts[i][r] = value
                finished += n / dp
                if not left[i]:
                    out[i] = _merged(trace, setup, policies[i], slo_ttft_ms, slo_itl_ms, dp, max_steps,
                                     parts.pop(i))
            if progress is not None:
                progress(round(finished))
            while written < len(policies) and out[written] is not None:  # rows in policy order
                if csv is not None and isinstance(out[written], PolicyMetrics):
                    _write_rows(csv, policies[written].label, trace, out[written])
                written += 1
    return out  # type: ignore[return-value]


def _tasks(policies: Sequence[Policy], setup: Setup, dp: int, method: str) -> list[tuple[int, int]]:
    """``(policy index, replica)`` per task: each replica of a policy whose replicas run apart
    (:func:`~pdmux_cli.simulate.servers.replicas_apart`), else the policy whole (replica -1)."""
    tasks: list[tuple[int, int]] = []
    for i, policy in enumerate(policies):
        if replicas_apart(policy, setup, dp, method):
            tasks += [(i, r) for r in range(dp)]
        else:
            tasks.append((i, -1))
    return tasks


def _from(progress: Progress | None, base: int) -> Progress | None:
    """``progress`` called with ``base`` more requests finished (the policies before), or ``None``."""
    if progress is None:
        return None
    return lambda finished: progress(base + finished)


def _policy_here(trace: Trace, setup: Setup, policy: Policy, slo_ttft_ms: float, slo_itl_ms: float,
                 progress: Progress | None, *, csv: Any = None, **options: Any) -> PolicyMetrics | InputError:
    """One policy of :func:`simulate_policies` run in this process (:func:`simulate_metrics`, ``options``
    its keywords): its metrics, or the InputError that refused it (its rows then cut off a
    :class:`~pdmux_cli.simulate.fold.CsvSink`)."""
    if hasattr(csv, "begin"):
        csv.begin()
    try:
        return simulate_metrics(trace, setup, policy, slo_ttft_ms, slo_itl_ms, progress=progress, csv=csv,
                                **options)
    except InputError as exc:
        if hasattr(csv, "abandon"):
            csv.abandon()  # a refused policy has no rows
        return exc


def _policy_split(trace: Trace, setup: Setup, policy: Policy, slo_ttft_ms: float, slo_itl_ms: float,
                  segments: int, *, max_steps: int | None = None, csv: Any = None,
                  progress: Progress | None = None,
                  progress_steps: Callable[[int], None] | None = None) -> PolicyMetrics | InputError:
    """One policy's run cut in time into ``segments`` simulated side by side and stitched
    (:mod:`.time_split`): the same metrics as :func:`simulate_metrics`, float for float, or the InputError
    that refused it. ``progress`` and ``progress_steps`` as the segments go
    (:func:`~.time_split.run_segments`); ``csv`` rows once the run is stitched."""
    from .time_split import run_segments, stitch

    def fold_of() -> Fold:
        return new_fold(trace, policy, slo_ttft_ms, slo_itl_ms, max_steps=max_steps)

    try:
        policy.check()
        runs = run_segments(trace, setup, policy, segments, fold_of, progress=progress,
                            progress_steps=progress_steps)
        metrics = summarize(stitch(trace, setup, policy, runs), slo_ttft_ms, slo_itl_ms)
    except InputError as exc:
        return exc
    if progress is not None:
        progress(len(trace))
    if progress_steps is not None:
        progress_steps(metrics.decode_steps)
    if csv is not None:
        _write_rows(csv, policy.label, trace, metrics)
    return metrics


def _merged(trace: Trace, setup: Setup, policy: Policy, slo_ttft_ms: float, slo_itl_ms: float, dp: int,
            max_steps: int | None, parts: Sequence) -> PolicyMetrics | InputError:
    """A policy's ``dp`` replicas simulated apart (:func:`_replica_task`, in replica order) merged and
    summarized, or the first replica's refusal."""
    refused = next((p for p in parts if isinstance(p, InputError)), None)
    if refused is not None:
        return refused
    fold = new_fold(trace, policy, slo_ttft_ms, slo_itl_ms, dp=dp, max_steps=max_steps)
    return summarize(merge_replicas(trace, setup, policy, dp, parts, fold), slo_ttft_ms, slo_itl_ms)


def _write_rows(csv: Any, label: str, trace: Trace, metrics: PolicyMetrics) -> None:
    """A policy's per-request rows from its columns, streamed to ``csv``."""
    from .fold import CsvRows

    CsvRows(csv, label, trace).flush(metrics.columns, crashed=metrics.crashed_at_s is not None, final=True)


@dataclass(frozen=True)
class ScenarioOutcome:
    """The chapter's question for one policy: while the prompt is prefilled, what is decode's ITL?

    ``itl_ms``: mean gap between the running requests' tokens over the decode steps that end by the
    prompt's first token (ms); ``itl_max_ms``: the longest such gap; ``steps``: those decode steps
    (tokens each running request gained); ``ttft_ms``: the prompt's time to first token (ms).
    """

    policy: str
    itl_ms: float
    itl_max_ms: float
    steps: int
    ttft_ms: float
    result: RunResult


def run_scenario(
    setup: Setup,
    policy: Policy,
    decode_bs: int = 32,
    context_tokens: int = 2048,
    prompt_tokens: int = 8192,
    output_tokens: int = 16,
    remaining_steps: int = 256,
) -> ScenarioOutcome:
    """The chapter's scenario ("Is it worth it: an estimate"): ``decode_bs`` requests decoding at
    ``context_tokens`` when one prompt of ``prompt_tokens`` arrives at t = 0 (defaults: 32 x 2048 and
    8192). The running requests keep decoding for ``remaining_steps`` steps (far past the prefill).
    Raises :class:`InputError` for non-positive sizes or when it does not fit in memory.
    """
    for name, value in (("decode_bs", decode_bs), ("context_tokens", context_tokens),
                        ("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens)):
        if value < 1:
            raise InputError(f"{name} must be >= 1, got {value}")
    trace = Trace(arrival_s=(0.0,), prompt_tokens=(prompt_tokens,), output_tokens=(output_tokens,),
                  source="chapter scenario", format="synthetic")
    result = simulate(trace, setup, policy, initial_decode=[(context_tokens, remaining_steps)] * decode_bs)
    ttft = result.first_token_s[0]
    if math.isnan(ttft):
        raise InputError("the scenario's prompt does not fit in KV memory next to the decode batch")
    ends = result.step_end_s
    prev = 0.0
    gaps = []
    for end in ends:
        if end > ttft + 1e-12:
            break
        gaps.append(end - prev)
        prev = end
    if not gaps:  # prompt done before any decode step: the next one carries the stall
        gaps = [ends[0]]
    return ScenarioOutcome(policy.label, sum(gaps) / len(gaps) * 1e3, max(gaps) * 1e3, len(gaps), ttft * 1e3,
                           result)
