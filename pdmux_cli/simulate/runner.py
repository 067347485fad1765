"""Entry points: run one policy over a trace, and the chapter's scenario (a running decode batch plus
one prompt) through any policy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..disaggregation import layout_text
from ..errors import InputError
from .cluster import DisaggPolicy, simulate_disagg, simulate_dp
from .engine import Progress, RunResult, Setup, build_work
from .metrics import PolicyMetrics, summarize
from .schedulers import (
    ChunkedPolicy,
    MixedChunkPolicy,
    PdmuxPolicy,
    PrefillFirstPolicy,
    run_baseline,
    run_pdmux,
)
from .traces import Trace

Policy = PdmuxPolicy | ChunkedPolicy | MixedChunkPolicy | PrefillFirstPolicy | DisaggPolicy


def simulate(
    trace: Trace,
    setup: Setup,
    policy: Policy,
    initial_decode: Sequence[tuple[int, int]] = (),
    progress: Progress | None = None,
    dp: int = 1,
    load_balance_method: str = "round_robin",
    max_concurrency: int = 0,
) -> RunResult:
    """Replay ``trace`` through ``policy`` on the simulated server of ``setup``.

    ``initial_decode``: ``(context_tokens, remaining_decode_steps)`` of requests already decoding at
    time 0 (appended after the trace's requests in the result; one server only). ``progress``: called
    now and then with the number of finished requests. The KV pool is SGLang's for the policy's chunk
    size (:meth:`Setup.kv_pool`). ``dp``: replicas of the server behind a router
    (``load_balance_method``; :func:`pdmux_cli.simulate.cluster.simulate_dp`); a
    :class:`~pdmux_cli.simulate.cluster.DisaggPolicy` runs its own instances (``dp`` does not apply).
    ``max_concurrency``: a closed-loop client keeping at most that many requests in flight, as
    ``python -m sglang.bench_serving --max-concurrency`` does (each request sent at its arrival or when a
    slot frees, whichever is later; TTFT from the send); 0 for none. One server only.
    Raises :class:`InputError` for a policy SGLang would refuse (no valid split, bad chunk size) or a
    model that does not fit; requests that can never fit in KV memory are listed in
    ``RunResult.rejected``, not raised.
    """
    if (dp != 1 or policy.kind == "disagg") and initial_decode:
        raise InputError("a running decode batch at time 0 is simulated on one server only (no --dp, no disagg)")
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 0:
        raise InputError(f"max concurrency must be a whole number >= 1 (0: no limit), got {max_concurrency!r}")
    if max_concurrency and (dp != 1 or policy.kind == "disagg"):
        raise InputError("--max-concurrency (a closed-loop client) is simulated on one server only (no --dp, no "
                         "--disagg)")
    if policy.kind in ("chunked", "mixed-chunk") and policy.chunk_tokens < 1:
        raise InputError(f"chunk size must be >= 1 token, got {policy.chunk_tokens}")
    if isinstance(policy, PdmuxPolicy):
        for name in ("split_forward_token_budget", "decode_bs_divisor"):
            if getattr(policy.config, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(policy.config, name)}")
    if policy.kind == "disagg":
        return simulate_disagg(trace, policy.setup_for(setup), policy, progress)
    if dp != 1:
        return simulate_dp(trace, setup, policy, dp, load_balance_method, progress)
    pool = setup.kv_pool(policy.chunk_tokens)
    work = build_work(trace, setup, pool.tokens, initial_decode, max_concurrency=max_concurrency)
    if policy.kind == "pdmux":
        extra = run_pdmux(work, setup, policy, progress)
    else:
        extra = run_baseline(work, setup, policy, progress)
    notes = list(extra.get("notes", []))
    if work.rejected:
        first = work.rejected[0]
        notes.insert(0, (
            f"{len(work.rejected)} request(s) can never fit in the KV pool ({work.capacity:,} tokens at "
            f"mem_fraction_static {pool.mem_fraction_static:g}): first is request {first} with {work.prompt[first]} "
            f"+ {work.output[first]} tokens; counted as missing the SLO"
        ))
    if work.retractions:
        notes.append(f"{work.retractions} retraction(s): requests sent back to the queue when decode ran out of KV "
                     "slots, prefilled again with their outputs (SGLang's retract_decode)")
    if progress is not None:
        progress(work.finished)
    return RunResult(
        policy=policy.label, kind=policy.kind, arrival_s=work.arrival, prompt_tokens=work.prompt,
        output_tokens=work.output, decode_steps=work.steps, first_token_s=work.first_token,
        first_step=work.first_step, rejected=work.rejected, step_end_s=work.ends, end_s=extra["end_s"],
        idle_s=extra["idle_s"], num_trace_requests=work.num_trace, notes=notes, groups=extra.get("groups"),
        group_time_s=extra.get("group_time_s"), counters=extra.get("counters", {}), stints=work.stints,
        unfinished=extra.get("unfinished", set()), crashed_at_s=extra.get("crashed_at_s"), kv_pool_tokens=pool.tokens,
        gpus=setup.tp, layout=layout_text(setup.tp), output_delay_s=work.output_delay,
    )


def _simulate_summarized(args: tuple) -> PolicyMetrics | InputError:
    """One policy simulated and summarized (a worker's task): its metrics, or the InputError that refused it."""
    trace, setup, policy, slo_ttft_ms, slo_itl_ms, dp, method, concurrency = args
    try:
        return summarize(simulate(trace, setup, policy, dp=dp, load_balance_method=method,
                                  max_concurrency=concurrency), slo_ttft_ms, slo_itl_ms)
    except InputError as exc:
        return exc


def simulate_policies(trace: Trace, setup: Setup, policies: Sequence[Policy], slo_ttft_ms: float, slo_itl_ms: float,
                      *, dp: int = 1, load_balance_method: str = "round_robin", workers: int = 1,
                      progress: Progress | None = None, max_concurrency: int = 0) -> list[PolicyMetrics | InputError]:
    """:func:`simulate` and :func:`~pdmux_cli.simulate.metrics.summarize` each of ``policies``, in order:
    its :class:`PolicyMetrics`, or the :class:`InputError` with which it was refused (the others still run).

    ``workers`` > 1 with several policies: that many processes, one policy each
    (:func:`pdmux_cli.simulate.tune.process_pool`; Ctrl-C stops them all). ``progress``: called with the
    requests finished over all policies (per policy when they run in processes). ``max_concurrency``: a
    closed-loop client (:func:`simulate`).
    """
    n = len(trace)
    if workers > 1 and len(policies) > 1:
        from .tune import process_pool

        out: list[PolicyMetrics | InputError | None] = [None] * len(policies)
        with process_pool(min(workers, len(policies))) as pool:
            futures = {pool.submit(_simulate_summarized, (trace, setup, p, slo_ttft_ms, slo_itl_ms, dp,
                                                          load_balance_method, max_concurrency)): i
                       for i, p in enumerate(policies)}
            from concurrent.futures import as_completed

            for done, future in enumerate(as_completed(futures), 1):
                out[futures[future]] = future.result()
                if progress is not None:
                    progress(done * n)
        return out  # type: ignore[return-value]
    results: list[PolicyMetrics | InputError] = []
    for i, policy in enumerate(policies):
        callback = (lambda finished, base=i * n: progress(base + finished)) if progress is not None else None
        try:
            result = simulate(trace, setup, policy, progress=callback, dp=dp, load_balance_method=load_balance_method,
                              max_concurrency=max_concurrency)
        except InputError as exc:
            results.append(exc)
            continue
        results.append(summarize(result, slo_ttft_ms, slo_itl_ms))
    return results


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
    return ScenarioOutcome(policy.label, sum(gaps) / len(gaps) * 1e3, max(gaps) * 1e3, len(gaps), ttft * 1e3, result)
