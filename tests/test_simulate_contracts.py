"""The simulator's typed contracts (pdmux_cli/simulate/policies.py): every policy meets the Policy
protocol, the runner never branches on a policy's kind (a schedule it has never heard of runs on one
server, on DP replicas and in a capacity search), one server's outcome is typed and merged as the
module says, and a policy's deployment is what RunResult and capacity report."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import pytest

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.messages import render_all
from pdmux_cli.multigpu.disaggregation import KvLink
from pdmux_cli.simulate.capacity import capacity
from pdmux_cli.simulate.cluster import DisaggPolicy
from pdmux_cli.simulate.engine import RunResult, build_work, make_setup
from pdmux_cli.simulate.metrics import summarize
from pdmux_cli.simulate.policies import Deployment, Policy, ServerOutcome
from pdmux_cli.simulate.runner import simulate, simulate_metrics
from pdmux_cli.simulate.schedulers import (
    ChunkedPolicy,
    MixedChunkPolicy,
    PdmuxPolicy,
    PrefillFirstPolicy,
    run_baseline,
    run_pdmux,
)
from pdmux_cli.simulate.servers import combine, serve, simulate_dp
from pdmux_cli.simulate.traces import synthetic_trace
from pdmux_cli.util.errors import InputError

INSTANT = KvLink("nvlink", math.inf, 0.0, "test: an infinitely fast link")
POLICIES = [PdmuxPolicy(), ChunkedPolicy(2048), MixedChunkPolicy(512), PrefillFirstPolicy(),
            DisaggPolicy(1, 2, INSTANT)]


@pytest.fixture(scope="module")
def setup():
    return make_setup(find_gpu("h100"), load_model("qwen3-8b"))


@pytest.fixture(scope="module")
def trace():
    """300 requests at 8 req/s: one H100 queues and batches them."""
    return synthetic_trace(8.0, "lognormal:1500:1", "exp:200", 300, None, 3)


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.label)
def test_every_policy_meets_the_protocol(policy, setup) -> None:
    members = set(Policy.__annotations__) | {name for name in vars(Policy) if not name.startswith("_")}
    assert members == {"kind", "label", "chunk_tokens", "prefill_apart", "multiplexes", "check", "servers",
                       "launch_args", "deployment", "routing_known", "run"}
    for name in members:
        assert hasattr(policy, name), name
    assert isinstance(policy.kind, str) and isinstance(policy.label, str)
    assert isinstance(policy.chunk_tokens, int)
    deployment = policy.deployment(setup, 2, "total_requests")
    assert isinstance(deployment, Deployment) and deployment.servers == policy.servers(2)
    assert isinstance(policy.multiplexes, bool) and all(isinstance(x, str) for x in policy.launch_args())


def test_policies_give_their_sglang_launch_arguments() -> None:
    """The data capacity's verdict reads in place of kind checks: SGLang 0.5.23's server arguments of each
    schedule (no --tp-size/--dp-size: the verdict adds them) and which one is pdmux."""
    assert [p.multiplexes for p in POLICIES] == [True, False, False, False, False]
    assert [p.launch_args() for p in POLICIES] == [
        ["--enable-pdmux", "--chunked-prefill-size", "-1", "--disable-overlap-schedule"],
        ["--chunked-prefill-size", "2048"],
        ["--enable-mixed-chunk", "--chunked-prefill-size", "512"],
        ["--chunked-prefill-size", "-1"],
        [],
    ]
    assert PdmuxPolicy().launch_args("-my.yaml") == [
        "--enable-pdmux", "--pdmux-config-path", "./-my.yaml", "--sm-group-num", "8",
        "--chunked-prefill-size", "-1", "--disable-overlap-schedule"]
    assert ChunkedPolicy(2048).launch_args("ignored.yaml") == ["--chunked-prefill-size", "2048"]
    # a schedule no module knows by its kind launches as the class it extends
    assert SplitwiseChunked(1024).launch_args() == ["--chunked-prefill-size", "1024"]


@dataclass(frozen=True)
class SplitwiseChunked(ChunkedPolicy):
    """A schedule no module of pdmux knows by its kind: SGLang's chunked loop under another name."""

    kind = "my-chunked"

    @property
    def label(self) -> str:
        return f"mine {self.chunk_tokens}"


def _same_figures(a, b) -> bool:
    # output_tok_s and uncertainty: the workflow's, not the runner's
    skip = {"policy", "kind", "per_request", "itl_cdf", "columns", "output_tok_s", "uncertainty"}
    return all(getattr(a, f.name) == getattr(b, f.name) for f in fields(a) if f.name not in skip)


def test_a_schedule_the_runner_never_heard_of_runs_everywhere(setup, trace) -> None:
    """Nothing branches on the kind: a new ServerPolicy runs on one server, on DP replicas behind the
    router and in the capacity search, with the figures of the schedule it reuses; its check refuses
    the same chunk size."""
    mine, theirs = SplitwiseChunked(2048), ChunkedPolicy(2048)
    for dp, method in ((1, "round_robin"), (2, "round_robin"), (3, "total_requests")):
        a = simulate_metrics(trace, setup, mine, 1000, 60, dp=dp, load_balance_method=method)
        b = simulate_metrics(trace, setup, theirs, 1000, 60, dp=dp, load_balance_method=method)
        assert (a.policy, a.kind) == ("mine 2048", "my-chunked")
        assert _same_figures(a, b) and a.completed == b.completed > 0
    recorded = simulate(trace, setup, mine)
    assert recorded.kind == "my-chunked" and recorded.first_token_s == simulate(trace, setup,
                                                                                theirs).first_token_s
    sized = capacity(trace, setup, [mine, theirs], 1000, 60, tolerance=0.2, workers=1)
    assert [p.kind for p in sized.policies] == ["my-chunked", "chunked"]
    assert sized.policies[0].max_rate_rps == sized.policies[1].max_rate_rps > 0
    with pytest.raises(InputError, match="chunk size must be >= 1 token, got 0"):
        simulate(trace, setup, SplitwiseChunked(0))


def test_one_server_is_dp_1_on_the_same_path(setup, trace) -> None:
    """simulate with one server is serve(dp=1) without a router; behind the router (simulate_dp with DP 1)
    the run is the same step for step, only the router is named."""
    policy = ChunkedPolicy(8192)
    alone = simulate(trace, setup, policy)
    same = serve(trace, setup, policy)
    routed = simulate_dp(trace, setup, policy, 1, "total_requests")
    for other in (same, routed):
        assert other.first_token_s == alone.first_token_s and list(other.step_end_s) == list(alone.step_end_s)
        assert (other.idle_s, other.end_s, other.counters) == (alone.idle_s, alone.end_s, alone.counters)
    assert (alone.gpus, str(alone.layout), alone.router, alone.server) == (1, "1 GPU", "", [])
    assert (routed.gpus, str(routed.layout), routed.router) == (1, "1 GPU", "total_requests")
    assert routed.server == [0] * len(trace)
    with pytest.raises(ValueError, match="behind a router"):
        serve(trace, setup, policy, dp=2, routed=False)


@pytest.mark.parametrize("policy", [PdmuxPolicy(), ChunkedPolicy(2048)], ids=lambda p: p.label)
def test_a_server_returns_a_typed_outcome(policy, setup, trace) -> None:
    work = build_work(trace, setup, setup.kv_pool(policy.chunk_tokens).tokens)
    run = run_pdmux if isinstance(policy, PdmuxPolicy) else run_baseline
    outcome = run(work, setup, policy)
    assert isinstance(outcome, ServerOutcome) and not outcome.crashed and not outcome.unfinished
    assert outcome.counters["retracted_requests"] == work.retractions
    assert outcome.end_s >= work.ends[-1] > 0 and 0 <= outcome.idle_s < outcome.end_s
    if isinstance(policy, PdmuxPolicy):
        assert outcome.groups and len(outcome.group_time_s) == len(outcome.groups)
        assert outcome.counters["rounds"] == len(work.ends)
    else:
        assert outcome.groups is None and outcome.counters["steps"] == len(work.ends)


def test_outcomes_combine_as_documented() -> None:
    """End: the last; idle: each server idle from its end to the last, averaged (other GPUs too);
    counters summed; a crashed server's notes named; stream-group times summed; the first crash."""
    a = ServerOutcome(end_s=10.0, idle_s=1.0, counters={"steps": 5, "retracted_requests": 1}, notes=["x"],
                      groups=[(66, 66), (100, 32)], group_time_s=[2.0, 3.0])
    b = ServerOutcome(end_s=8.0, idle_s=2.0, counters={"steps": 7}, notes=["crash", "x"],
                      groups=[(66, 66), (100, 32)], group_time_s=[1.0, 1.5], crashed_at_s=4.0,
                      unfinished={3, 9})
    c = combine([a, None, b])
    assert (c.end_s, c.idle_s) == (10.0, 2.5)  # (1 + 0 + 2 + 2) / 2
    assert c.counters == {"steps": 12, "retracted_requests": 1}
    assert render_all(c.notes) == ["x", "server 2: crash", "server 2: x"]
    assert c.group_time_s == [3.0, 4.5] and c.groups == [(66, 66), (100, 32)]
    assert (c.crashed_at_s, c.unfinished) == (4.0, {3, 9})
    assert combine([a, b], prefixed=False).notes == ["x", "crash"]
    assert combine([a], extra_idle=[(0.5, 12.0)]).idle_s == (1.0 + 2.0 + 0.5) / 2
    assert combine([]) == ServerOutcome(end_s=0.0, idle_s=0.0)


def test_deployments_name_gpus_layout_and_router(setup) -> None:
    tp2 = make_setup(find_gpu("h100"), load_model("qwen3-8b"), tp=2)
    cases = [
        (ChunkedPolicy(8192).deployment(setup), (1, "1 GPU", 1, "", None)),
        (PdmuxPolicy().deployment(tp2, 4, "total_requests"), (8, "DP 4 x TP 2", 4, "total_requests", None)),
        (DisaggPolicy(1, 1, INSTANT).deployment(setup, 8), (2, "1P1D x TP 1", 2, "", (1, 1))),
        (DisaggPolicy(2, 3, INSTANT, "total_requests", instance_setup=tp2).deployment(setup),
         (10, "2P3D x TP 2", 5, "total_requests", (2, 3))),
    ]
    for d, (gpus, layout, servers, router, xpyd) in cases:
        assert (d.gpus, str(d.layout), d.servers, d.router, d.xpyd) == (gpus, layout, servers, router, xpyd)


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.label)
def test_a_run_reports_its_deployment(policy, setup, trace) -> None:
    dp = 2
    result: RunResult = simulate(trace, setup, policy, dp=dp)
    d = policy.deployment(setup, dp)
    assert (result.gpus, result.layout, result.router) == (d.gpus, d.layout, d.router)
    assert summarize(result, 1000, 60).requests == len(trace)
