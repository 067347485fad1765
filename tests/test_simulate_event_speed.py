"""Event speed (issue 31): the decode steps between two events advanced at once
(:func:`pdmux_cli.simulate.schedulers._decode_run` in SGLang's default loop; pdmux's rounds with
:func:`~pdmux_cli.simulate.schedulers._pdmux_decode_run` and, with a prefill in flight,
:func:`~pdmux_cli.simulate.schedulers._pdmux_split_run`) against the step loop they replace
(``Setup.step_by_step``, ``--step-by-step``): the same admissions, batches, step end times and pdmux's
group seconds, to the bit, for every policy on the shipped fixtures and on synthetic traces that reach
each part of the fast path (long quiet runs as arrays, speculative rounds' fractional KV growth, sliding
windows, eager decode above the largest CUDA graph, a KV pool short enough to retract, intervals, the
overlap scheduler off, a router's horizons, a closed-loop client, disaggregation's decode instances;
pdmux's levels, token budgets, layer caps, manual divisions, long prompts split over many rounds).
Speed is measured by benchmarks/bench_simulate.py and benchmarks/bench_event_speed.py, never here."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import pdmux
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.sglang import server_defaults as sgl
from pdmux_cli.sglang.pdmux_config import PdmuxConfig
from pdmux_cli.sglang.speculative_args import resolve_speculation
from pdmux_cli.simulate import schedulers
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.runner import simulate
from pdmux_cli.simulate.schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy
from pdmux_cli.simulate.traces import load_trace, synthetic_trace

FIX = Path(__file__).parent / "fixtures"
H100 = find_gpu("h100")
QWEN = load_model("qwen3-8b")
SETUP = make_setup(H100, QWEN)
BASELINES = [ChunkedPolicy(8192), ChunkedPolicy(512), MixedChunkPolicy(512), PrefillFirstPolicy(),
             ChunkedPolicy(2048, 3), MixedChunkPolicy(512, 2), PrefillFirstPolicy(4)]
POLICIES = [PdmuxPolicy(), *BASELINES]


def _same_run(fast, ref) -> None:
    """Every record of the two runs equal: step end times to the bit, first tokens, steps, stints."""
    assert list(fast.step_end_s) == list(ref.step_end_s)
    assert len(fast.first_token_s) == len(ref.first_token_s)
    for a, b in zip(fast.first_token_s, ref.first_token_s):
        assert a == b or (math.isnan(a) and math.isnan(b))
    assert list(fast.first_step) == list(ref.first_step)
    assert fast.stints == ref.stints
    assert fast.counters == ref.counters
    assert (fast.end_s, fast.idle_s, fast.rejected, fast.unfinished) == (
        ref.end_s, ref.idle_s, ref.rejected, ref.unfinished)
    assert (fast.groups, fast.group_time_s, fast.crashed_at_s) == (
        ref.groups, ref.group_time_s, ref.crashed_at_s)


def _both(trace, setup, policy, **kw):
    return (simulate(trace, setup, policy, **kw),
            simulate(trace, replace(setup, step_by_step=True), policy, **kw))


class _Count:
    """Counts the quiet runs advanced and the steps they covered (that the fast path ran at all)."""

    def __init__(self, monkeypatch) -> None:
        self.runs = self.steps = self.arrays = self.first = 0
        self.run_t = math.nan  # the start of the quiet run in progress
        self.pdmux_steps = self.split_steps = self.merges = self.pdmux_arrays = 0
        run, array = schedulers._decode_run, schedulers._decode_array
        pdmux_run, split_run = schedulers._pdmux_decode_run, schedulers._pdmux_split_run
        pdmux_array = schedulers._pdmux_array

        def counted_run(*args, **kw):
            self.run_t = args[3]
            done, t = run(*args, **kw)
            self.runs += 1
            self.steps += done
            return done, t

        def counted_array(*args, **kw):
            self.arrays += 1
            self.first += args[3] == self.run_t  # arrays from the run's first step (no tight steps before)
            return array(*args, **kw)

        def counted_pdmux_run(*args, **kw):
            out = pdmux_run(*args, **kw)
            self.pdmux_steps += out[0]
            return out

        def counted_split_run(*args, **kw):
            out = split_run(*args, **kw)
            self.split_steps += out[0]
            layers = args[12][2]
            self.merges += out[0] > 0 and out[4] >= layers and out[3] <= out[1]
            return out

        def counted_pdmux_array(*args, **kw):
            self.pdmux_arrays += 1
            return pdmux_array(*args, **kw)

        monkeypatch.setattr(schedulers, "_decode_run", counted_run)
        monkeypatch.setattr(schedulers, "_decode_array", counted_array)
        monkeypatch.setattr(schedulers, "_pdmux_decode_run", counted_pdmux_run)
        monkeypatch.setattr(schedulers, "_pdmux_split_run", counted_split_run)
        monkeypatch.setattr(schedulers, "_pdmux_array", counted_pdmux_array)


@pytest.mark.parametrize("fixture", ["azure_conv_50.csv", "burstgpt_small.csv", "mooncake_small.jsonl"])
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.label)
def test_fixtures_every_policy_as_the_step_loop(fixture, policy) -> None:
    trace = load_trace(FIX / fixture)
    _same_run(*_both(trace, SETUP, policy))


LONG = synthetic_trace(0.4, "lognormal:800:1", "uniform:200:1500", 120, seed=3)  # long quiet runs
BUSY = synthetic_trace(12.0, "lognormal:1500:1", "lognormal:300:1", 500, seed=5)  # events every few steps


@pytest.mark.parametrize("trace", [LONG, BUSY], ids=["long", "busy"])
@pytest.mark.parametrize("policy", BASELINES, ids=lambda p: p.label)
def test_synthetic_as_the_step_loop(trace, policy, monkeypatch) -> None:
    count = _Count(monkeypatch)
    _same_run(*_both(trace, SETUP, policy))
    assert count.steps > 0


def test_long_runs_use_arrays(monkeypatch) -> None:
    """Most steps of long quiet runs go as arrays; the progress ticks (every STEP_CHECK_EVERY steps: the
    step limit, a streamed run's folding, the callback) come at the same steps with the same counts."""
    count = _Count(monkeypatch)
    ticks: dict[bool, list[int]] = {True: [], False: []}
    fast = simulate(LONG, SETUP, ChunkedPolicy(8192), progress=ticks[True].append)
    ref = simulate(LONG, replace(SETUP, step_by_step=True), ChunkedPolicy(8192), progress=ticks[False].append)
    _same_run(fast, ref)
    assert count.arrays > 0
    assert count.first > 0  # a stretch with room for LONG_RUN_STEPS takes arrays from its first step
    assert count.steps > 0.8 * len(ref.step_end_s)  # most steps advanced at once
    assert len(ticks[False]) >= 3 and ticks[True] == ticks[False]


PROMPTS = synthetic_trace(2.0, "lognormal:6000:0.8", "lognormal:400:1", 300, seed=7)  # long split prefills
PDMUX = [
    PdmuxPolicy(),
    PdmuxPolicy(PdmuxConfig(split_forward_token_budget=4096, decode_bs_divisor=12), name="budget 4096"),
    PdmuxPolicy(PdmuxConfig(sm_group_num=4, split_forward_token_budget=16384), name="capped",
                max_split_forward_layers=2),
    PdmuxPolicy(PdmuxConfig(sm_group_num=4, manual_divisions=((112, 20, 1), (96, 36, 16))), name="manual"),
    PdmuxPolicy(PdmuxConfig(sm_group_num=3, manual_divisions=((96, 36, 4),)), name="crashes"),  # 0.5.23 dies
    PdmuxPolicy(PdmuxConfig(sm_group_num=3, manual_divisions=((96, 36, 4),)), name="fallback",
                unreleased_fallback=True),
]


@pytest.mark.parametrize("trace", [LONG, BUSY, PROMPTS], ids=["long", "busy", "prompts"])
@pytest.mark.parametrize("policy", PDMUX, ids=lambda p: p.label)
def test_pdmux_as_the_round_loop(trace, policy, monkeypatch) -> None:
    """pdmux's rounds at event speed: with and without a prefill in flight, every level rule, budget,
    cap and a 0.5.23 crash, the same rounds, first tokens and group seconds as round by round."""
    count = _Count(monkeypatch)
    fast, ref = _both(trace, SETUP, policy)
    _same_run(fast, ref)
    assert count.pdmux_steps > 0
    if policy.label != "crashes":
        assert count.split_steps > 0


def test_pdmux_runs_arrays_splits_and_ticks(monkeypatch) -> None:
    """Long quiet stretches go as arrays; split prefills are merged at the end of a run's last round; most
    rounds are advanced at once; the progress ticks come at the same rounds with the same counts."""
    count = _Count(monkeypatch)
    ticks: dict[bool, list[int]] = {True: [], False: []}
    fast = simulate(LONG, SETUP, PdmuxPolicy(), progress=ticks[True].append)
    ref = simulate(LONG, replace(SETUP, step_by_step=True), PdmuxPolicy(), progress=ticks[False].append)
    _same_run(fast, ref)
    assert count.pdmux_arrays > 0
    assert count.pdmux_steps + count.split_steps > 0.8 * len(ref.step_end_s)
    assert len(ticks[False]) >= 3 and ticks[True] == ticks[False]
    count = _Count(monkeypatch)
    policy = PDMUX[1]
    fast, ref = _both(PROMPTS, SETUP, policy)
    _same_run(fast, ref)
    assert count.merges > 0 and count.split_steps > 0.3 * len(ref.step_end_s)
    # the runs go on past arrivals and take the event rounds: one round in ten or fewer left to the loop
    assert count.pdmux_steps + count.split_steps > 0.9 * len(ref.step_end_s)


def _speculative_setup():
    spec, _ = resolve_speculation(QWEN, "EAGLE", 3, 1, 4, 2.5)
    return make_setup(H100, QWEN, speculation=spec)


@pytest.mark.parametrize("setup_of", [
    _speculative_setup,                                                     # fractional KV growth
    lambda: make_setup(H100, load_model("gpt-oss-20b")),                    # sliding windows
    lambda: make_setup(H100, load_model("gemma-3-27b-it")),
    lambda: make_setup(H100, QWEN, cost_model="chapter", s_sat=66),        # the chapter's step model
    lambda: make_setup(H100, QWEN, disable_cuda_graph=True),               # eager decode: a floor
    lambda: make_setup(H100, QWEN, cuda_graph_max_bs=8),
    lambda: make_setup(H100, QWEN, disable_overlap=True),
    lambda: make_setup(H100, QWEN, ignore_eos=True),
    lambda: make_setup(H100, QWEN, tp=2),
], ids=["speculative", "gpt-oss-window", "gemma-window", "chapter", "no-cuda-graph", "graph-max-8",
        "no-overlap", "ignore-eos", "tp2"])
@pytest.mark.parametrize("trace", [LONG, BUSY], ids=["long", "busy"])
def test_setups_as_the_step_loop(setup_of, trace, monkeypatch) -> None:
    count = _Count(monkeypatch)
    setup = setup_of()
    for policy in (ChunkedPolicy(8192), MixedChunkPolicy(512), PdmuxPolicy(), PDMUX[1]):
        _same_run(*_both(trace, setup, policy))
    assert count.steps > 0 and count.pdmux_steps > 0


def _small_pool(tokens: int):
    fraction = (SETUP.weight_bytes + tokens * SETUP.kv_bytes_per_token) / (
        H100.memory_bytes - sgl.CONTEXT_RESERVE_BYTES)
    return replace(SETUP, mem_fraction_static=round(fraction, 6))


def test_retraction_as_the_step_loop(monkeypatch) -> None:
    """A pool a few long requests fill: decode runs stop at the step whose KV would not fit, retraction
    follows as in the step loop."""
    count = _Count(monkeypatch)
    trace = synthetic_trace(4.0, "uniform:2000:4000", "uniform:1500:3000", 60, seed=2)
    setup = _small_pool(40_000)
    fast, ref = _both(trace, setup, ChunkedPolicy(8192))
    _same_run(fast, ref)
    assert ref.counters["retracted_requests"] > 0 and count.steps > 0
    spec = replace(_speculative_setup(), mem_fraction_static=setup.mem_fraction_static)
    fast, ref = _both(trace, spec, ChunkedPolicy(8192))
    _same_run(fast, ref)
    assert ref.counters["retracted_requests"] > 0
    for on in (setup, spec):
        fast, ref = _both(trace, on, PdmuxPolicy())
        _same_run(fast, ref)
        assert ref.counters["retracted_requests"] > 0


def test_router_closed_loop_and_disaggregation_as_the_step_loop(monkeypatch) -> None:
    count = _Count(monkeypatch)
    for method in ("round_robin", "total_requests"):  # a router's horizons pause the replicas
        _same_run(*_both(BUSY, SETUP, ChunkedPolicy(8192), dp=3, load_balance_method=method))
        _same_run(*_both(BUSY, SETUP, PdmuxPolicy(), dp=3, load_balance_method=method))
    _same_run(*_both(LONG, SETUP, MixedChunkPolicy(512), max_concurrency=8))
    _same_run(*_both(LONG, SETUP, PdmuxPolicy(), max_concurrency=8))
    from pdmux_cli.workflows.deployment import DeploymentOptions, plan_deployment

    cluster = plan_deployment(SETUP, "h100", DeploymentOptions(disagg="1P2D"), colocated=False)
    _same_run(*_both(BUSY, SETUP, cluster.disagg))
    assert count.steps > 0


@pytest.mark.parametrize("kwargs", [
    {"trace": str(FIX / "azure_conv_50.csv")},
    {"synthetic": True, "qps": 3, "max_requests": 300, "output_tokens": "lognormal:400:1", "dp": 2},
    {"synthetic": True, "qps": 1, "max_requests": 80, "output_tokens": "uniform:300:900",
     "speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
     "speculative_num_draft_tokens": 4, "speculative_accept_length": 2.5, "policies": "chunked,mixed-chunk"},
    {"synthetic": True, "qps": 4, "max_requests": 200, "disagg": "1P1D", "policies": "chunked,disagg"},
])
def test_api_figures_as_the_step_loop(kwargs) -> None:
    """The streamed runs (folded as requests finish) the CLI and API give: every figure the same; the
    notes say what ran step by step."""
    fast = pdmux.simulate(**kwargs, workers=1).to_dict()
    ref = pdmux.simulate(**kwargs, workers=1, step_by_step=True).to_dict()
    assert any("--step-by-step" in n for n in ref["notes"])
    assert not any("--step-by-step" in n for n in fast["notes"])
    assert fast["policies"] == ref["policies"]


def test_notes_name_what_is_not_on_the_fast_path() -> None:
    """pdmux's rounds and a prefix cache are on the event-speed path (no note); a prefix cache under
    speculative rounds is not (a note)."""
    out = pdmux.simulate(str(FIX / "mooncake_small.jsonl"), workers=1).to_dict()
    assert not any("event-speed" in n or "step by step" in n for n in out["notes"])
    spec = pdmux.simulate(str(FIX / "mooncake_small.jsonl"), policies="chunked", workers=1,
                          speculative_algorithm="EAGLE", speculative_accept_length=2.5).to_dict()
    assert any("prefix cache" in n and "not on the event-speed path" in n for n in spec["notes"])
    for policies in ("chunked", "pdmux"):
        plain = pdmux.simulate(str(FIX / "azure_conv_50.csv"), policies=policies, workers=1).to_dict()
        assert not any("event-speed" in n or "step by step" in n for n in plain["notes"])


def _totals(rng, n, size, fractional):
    start = rng.integers(0, 2_000_000)
    if fractional:
        return np.add.accumulate(np.concatenate(([float(start)], np.full(size - 1, n * 2.37))))
    return start + n * np.arange(size)


@pytest.mark.parametrize("setup_of", [
    lambda: SETUP, lambda: make_setup(H100, load_model("gpt-oss-20b")),
    lambda: make_setup(H100, QWEN, cost_model="chapter", s_sat=66),
    lambda: make_setup(H100, QWEN, disable_cuda_graph=True),
], ids=["roofline", "window", "chapter", "eager"])
def test_decode_run_s_and_line_equal_decode_s_to_the_bit(setup_of) -> None:
    model = setup_of().step_model
    rng = np.random.default_rng(0)
    for n in (1, 7, 64, 300, 5000, 200_000):
        for fractional in (False, True):
            for graph in (True, False):
                contexts = _totals(rng, n, 300, fractional)
                windows = rng.integers(0, 10_000) + 3 * np.arange(300)
                got = model.decode_run_s(132, n, contexts, windows, 0, graph)
                want = [model.decode_s(132, n, c, w, 0, graph) for c, w in zip(contexts.tolist(),
                                                                               windows.tolist())]
                assert got.tolist() == want
                line = getattr(type(model), "decode_line", None)
                if line is not None:
                    base, full, window, floor = line(model, 132, n, 0, graph)
                    pairs = zip(contexts.tolist(), windows.tolist())
                    plain = [base + full * c + window * w for c, w in pairs]
                    inline = [max(x, floor) for x in plain] if floor else plain
                    assert inline == want
