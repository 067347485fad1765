"""Event speed (issue 31), third step: the work at events done in bulk, checked against the code it replaces.

- :meth:`pdmux_cli.simulate.fold.Fold.flush`: finished requests folded at once (numpy) instead of one at a
  time (:meth:`~pdmux_cli.simulate.fold.Fold.request` on a window without a ``pending`` list): the same
  columns, ITL distribution, counts and last finish, to the bit.
- :func:`pdmux_cli.simulate.schedulers._decode_run`: runs too short for arrays taken whole by the tight loop
  (one call instead of several around single rounds of the step loop): the same steps as ``--step-by-step``.
- tune's shared runs (:func:`pdmux_cli.simulate.tune._run_sharing`): a config whose choices at the points
  another's run read are the same (:func:`pdmux_cli.simulate.schedulers.pdmux_choices`) takes that run's
  figures: the same tune result as simulating every config, fewer simulations.
- a prefix cache on the event-speed path (every schedule, whole-token growth): the evictions of the steps'
  memory checks made once after a run: the same steps, hits and evicted tokens as ``--step-by-step``, on
  shared-prefix sessions in pools small enough to evict.

Speed is measured by benchmarks/bench_simulate.py and benchmarks/bench_capacity.py, never here."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.sglang import server_defaults as sgl
from pdmux_cli.sglang import split_levels
from pdmux_cli.sglang.pdmux_config import PdmuxConfig
from pdmux_cli.simulate import engine, fold, schedulers, tune
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.metrics import summarize
from pdmux_cli.simulate.runner import simulate, simulate_metrics
from pdmux_cli.simulate.schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy
from pdmux_cli.simulate.traces import Trace, load_trace, synthetic_trace

FIX = Path(__file__).parent / "fixtures"
H100 = find_gpu("h100")
QWEN = load_model("qwen3-8b")
SETUP = make_setup(H100, QWEN)


# ---- Fold.flush against Fold.request one at a time ---------------------------------------------------
def _requests(seed: int, count: int) -> tuple[list[float], list[tuple]]:
    """A window of step end times and ``count`` finished requests ``(rid, first token, first step, steps,
    tokens)`` over it: steps 1 to 700 (under and over 100 ITLs), ties among the gaps, one-token outputs."""
    rng = random.Random(seed)
    gaps = [rng.choice([0.001, 0.002, 0.0025, 0.04]) if rng.random() < 0.3 else rng.uniform(1e-4, 0.1)
            for _ in range(3000)]
    ends = list(itertools.accumulate(gaps, initial=5.0))[1:]
    out = []
    for rid in range(count):
        r = rng.choice([0, 1, 2, 50, 99, 100, 101, 250, 700, rng.randint(1, 400)])
        s0 = rng.randint(1, len(ends) - max(r, 1))
        ft = ends[s0 - 1] + rng.uniform(0, 0.01) if r else rng.uniform(5.0, 20.0)
        tokens = rng.choice([None, None, max(r, 1) * 2])
        out.append((rid, ft, s0, r, tokens))
    return ends, out


def _folded(ends_s: list[float], requests: list[tuple], deferred: bool, rows=None) -> fold.Fold:
    ends = engine.StepEnds.window_of(ends_s)
    ends.prev = 4.9
    if not deferred:
        ends.pending = None  # Fold.request folds each request at once
    n = len(requests) + 3
    f = fold.Fold(n, 2000.0, 30.0, first_token=True, rows=rows)
    f.attach([0.1 * rid for rid in range(n)], 0.004)
    for rid, ft, s0, r, tokens in requests:
        if rows is None or rid in rows:
            f.request(rid, ft, s0, r, ends, None, tokens)
    f.finish_server(ends)
    return f


def _same_fold(a: fold.Fold, b: fold.Fold) -> None:
    for name in (*fold.RequestColumns.FLOATS, "first_token_s"):
        x, y = getattr(a.columns, name), getattr(b.columns, name)
        assert len(x) == len(y)
        assert all(u == v or (math.isnan(u) and math.isnan(v)) for u, v in zip(x, y)), name
    assert a.columns.met == b.columns.met and a.columns.status == b.columns.status
    assert (a.completed, a.met, a.last, a.steps) == (b.completed, b.met, b.last, b.steps)
    assert sorted(zip(a.itl.values, a.itl.weights)) == sorted(zip(b.itl.values, b.itl.weights))
    assert (a.itl.count, a.itl.total, a.itl.max) == (b.itl.count, b.itl.total, b.itl.max)
    assert a.itl.summary() == b.itl.summary()


@pytest.mark.parametrize("seed", range(6))
def test_flush_folds_as_one_request_at_a_time(seed) -> None:
    ends, requests = _requests(seed, 300)
    _same_fold(_folded(ends, requests, True), _folded(ends, requests, False))


@pytest.mark.parametrize("matrix_rows", [1, 10**9])
def test_ranked_gaps_as_matrix_or_one_by_one_are_a_sort(matrix_rows, monkeypatch) -> None:
    """A request's p99 and largest ITL from a matrix of its length's requests, or one partition each, are
    the top-th largest and the largest of its gaps and first gap as a sort gives them, ties included."""
    monkeypatch.setattr(fold, "MATRIX_ROWS", matrix_rows)
    rng = np.random.default_rng(4)
    gaps = rng.choice([0.001, 0.002, 0.04, 0.5], 4000) * rng.choice([1.0, 1.0, 1.5], 4000)
    lengths = rng.choice([99, 127, 127, 300], 60)
    first = rng.integers(0, 3500, 60)
    tops = np.array([int(length + 1 - math.ceil(0.99 * (length + 1) - 1e-9) + 1) for length in lengths])
    g0 = rng.choice([0.001, 0.7], 60)
    ranked, largest = fold._ranked_gaps(gaps, first, lengths, tops, g0)
    for i in range(60):
        values = sorted([*gaps[first[i]:first[i] + lengths[i]].tolist(), float(g0[i])])
        assert (ranked[i], largest[i]) == (values[-tops[i]], values[-1])


def test_flush_keeps_a_replicas_rows() -> None:
    """A fold restricted to one DP replica's requests (rows found by bisection) flushes into the same rows."""
    ends, requests = _requests(11, 120)
    rows = list(range(0, 123, 3))
    _same_fold(_folded(ends, requests, True, rows), _folded(ends, requests, False, rows))


def test_nothing_waits_after_a_run() -> None:
    """A streamed run folds every finished request: nothing is left pending on the window, and a progress
    tick's folding of old steps takes the waiting requests first (the same figures as the recorded run)."""
    trace = load_trace(FIX / "azure_conv_50.csv")
    for policy in (PdmuxPolicy(), ChunkedPolicy(512)):
        m = simulate_metrics(trace, SETUP, policy, 2000, 60)
        ref = summarize(simulate(trace, SETUP, policy), 2000, 60)
        assert m.completed == ref.completed == 50
        assert (m.ttft_ms, m.itl_ms, m.tpot_ms, m.e2e_ms, m.met) == (ref.ttft_ms, ref.itl_ms, ref.tpot_ms,
                                                                    ref.e2e_ms, ref.met)


# ---- _decode_run: short runs taken whole by the tight loop --------------------------------------------
MEDIUM = synthetic_trace(3.0, "lognormal:600:1", "lognormal:120:0.6", 400, seed=17)  # runs of tens of steps


@pytest.mark.parametrize("policy", [ChunkedPolicy(8192), MixedChunkPolicy(512), PrefillFirstPolicy(),
                                    ChunkedPolicy(2048, 3)], ids=lambda p: p.label)
def test_runs_too_short_for_arrays_go_whole_as_the_step_loop(policy, monkeypatch) -> None:
    """Quiet runs of between TIGHT_DECODE_STEPS and TIGHT_DECODE_STEPS + MIN_ARRAY_STEPS steps go in one
    call of the tight loop: the same steps, first tokens and counters as the step loop."""
    longest = []
    run = schedulers._decode_run

    def counted(*args, **kw):
        done, t = run(*args, **kw)
        longest.append(done)
        return done, t

    monkeypatch.setattr(schedulers, "_decode_run", counted)
    fast = simulate(MEDIUM, SETUP, policy)
    monkeypatch.setattr(schedulers, "_decode_run", run)
    ref = simulate(MEDIUM, replace(SETUP, step_by_step=True), policy)
    assert list(fast.step_end_s) == list(ref.step_end_s)
    assert list(fast.first_step) == list(ref.first_step)
    assert fast.counters == ref.counters and fast.end_s == ref.end_s
    assert any(schedulers.TIGHT_DECODE_STEPS < d < schedulers.TIGHT_DECODE_STEPS + schedulers.MIN_ARRAY_STEPS
               for d in longest)


# ---- tune: runs shared between configs that choose alike -------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_pdmux_choices_are_the_rules(seed) -> None:
    """pdmux_choices gives, at any points, SGLang's level choice, the 0.5.23 crash and layers a round."""
    rng = random.Random(seed)
    configs = [PdmuxPolicy(PdmuxConfig(sm_group_num=rng.randint(3, 9), decode_bs_divisor=rng.randint(1, 80),
                                       split_forward_token_budget=rng.choice([1, 512, 4096, 65536])),
                           max_split_forward_layers=rng.choice([0, 1, 3])),
               PdmuxPolicy(PdmuxConfig(sm_group_num=4, manual_divisions=((112, 20, 3), (96, 36, 2.5),
                                                                          (88, 44, 40)))),
               PdmuxPolicy(PdmuxConfig(sm_group_num=3, manual_divisions=((96, 36, 0),)))]
    batches = sorted({0, 1, 2, 3, 39, 40, 41, *(rng.randint(0, 600) for _ in range(40))})
    tokens = sorted({0, 1, *(rng.randint(1, 100000) for _ in range(40))})
    for policy in configs:
        cfg = policy.config
        plan = split_levels.plan_groups(SETUP.total_sms, SETUP.compute_capability, cfg.sm_group_num,
                                        cfg.manual_divisions or None)
        rows, per_round, fallback, sglang = schedulers.pdmux_choices(policy, SETUP)(batches, tokens)
        for bs, row in zip(batches, rows):
            g = split_levels.choose_group(len(plan.groups), bs, True, cfg.decode_bs_divisor, plan.thresholds)
            crash = bool(plan.thresholds) and split_levels.older_sglang_crashes(plan.thresholds, bs)
            assert row == [*plan.groups[g], int(g == 0), int(crash)]
        assert per_round == [split_levels.prefill_layers_per_round(t, QWEN.num_layers,
                                                                   cfg.split_forward_token_budget,
                                                                   policy.max_split_forward_layers)
                             for t in tokens]
        assert (fallback, sglang) == (False, None)


def _tune(trace, monkeypatch, share: bool, layer_caps=()):
    simulated = []
    evaluate = tune._evaluate_recorded

    def counted(shared, policy):
        simulated.append(policy)
        return evaluate(shared, policy)

    monkeypatch.setattr(tune, "_evaluate_recorded", counted)
    if not share:
        monkeypatch.setattr(tune, "_same_run", lambda *_: None)
    result = tune.tune(trace, SETUP, 1000.0, 60.0, workers=1, layer_caps=layer_caps)
    monkeypatch.undo()
    return result, len(simulated)


@pytest.mark.parametrize("fixture", ["azure_conv_50.csv", "burstgpt_small.csv"])
def test_tune_shares_runs_with_the_same_result(fixture, monkeypatch) -> None:
    """Tune with runs shared: every row, schedule, winner and note as with every config simulated, in fewer
    simulations; the layer caps searched on the winner too."""
    trace = load_trace(FIX / fixture)
    for caps in ((), (1, 2, 8, 64)):
        shared, fewer = _tune(trace, monkeypatch, True, caps)
        every, count = _tune(trace, monkeypatch, False, caps)
        assert [r[1:] for r in map(_row, shared.rows)] == [r[1:] for r in map(_row, every.rows)]
        assert (shared.schedules, shared.best, shared.baseline, [str(n) for n in shared.notes]) == (
            every.schedules, every.best, every.baseline, [str(n) for n in every.notes])
        assert fewer < count


def _row(row) -> tuple:
    return (row.index, row.candidate.config, row.slo_attainment, row.goodput_rps, row.ttft_p99_ms,
            row.itl_p99_ms, row.older_sglang_crash_rounds, row.ttft_quarters_ms)


def test_a_shared_run_is_the_same_run() -> None:
    """Two configs that choose alike at the points one's run read run the same rounds (all but the groups'
    names and seconds), and a run records those points."""
    trace = synthetic_trace(2.0, "lognormal:3000:0.8", "lognormal:200:1", 150, seed=23)
    a = replace(PdmuxPolicy(PdmuxConfig(sm_group_num=4, decode_bs_divisor=12)), record={})
    ra = simulate(trace, SETUP, a)
    batches, tokens = sorted(a.record["batches"]), sorted(a.record["tokens"])
    assert batches and tokens
    chosen = schedulers.pdmux_choices(a, SETUP)(batches, tokens)
    # budgets whose layers a round differ from 65536's only at a few token counts; divisors near 12
    candidates = [PdmuxPolicy(PdmuxConfig(sm_group_num=4, decode_bs_divisor=d, split_forward_token_budget=b))
                  for d in (11, 12, 13) for b in (65536, 65537, 65539)]
    alike = [p for p in candidates if p.config != a.config
             and schedulers.pdmux_choices(p, SETUP)(batches, tokens) == chosen]
    assert alike
    for p in alike[:3]:
        rb = simulate(trace, SETUP, p)
        assert list(rb.step_end_s) == list(ra.step_end_s)
        assert list(rb.first_token_s) == list(ra.first_token_s) and rb.counters == ra.counters


def test_tune_shares_runs_across_workers(monkeypatch) -> None:
    """Two workers (blocks of the list side by side, a config matched against the runs finished so far): the
    same result as one worker simulating every config."""
    trace = load_trace(FIX / "azure_conv_50.csv")
    every, _ = _tune(trace, monkeypatch, False)
    two = tune.tune(trace, SETUP, 1000.0, 60.0, workers=2)
    assert list(map(_row, two.rows)) == list(map(_row, every.rows))
    assert (two.schedules, two.best, two.baseline) == (every.schedules, every.best, every.baseline)


def test_tune_starts_a_run_away_from_the_runs_in_flight() -> None:
    """Tune's next candidate: the first more than NEIGHBOURS places from every run in flight (a neighbour,
    alike, would be simulated beside the run it repeats), else the first; taken out of the queue."""
    from collections import deque

    assert tune.NEIGHBOURS == 2
    queue = deque([3, 53, 4, 54, 5, 55, 6])
    assert tune._next_apart(queue, {2, 52}) == 5 and list(queue) == [3, 53, 4, 54, 55, 6]
    assert tune._next_apart(queue, {4, 54}) == 3 and list(queue) == [53, 4, 54, 55, 6]
    assert tune._next_apart(queue, {54}) == 4
    assert tune._next_apart(queue, {53, 55, 7}) == 53 and list(queue) == [54, 55, 6]  # none apart: the first
    assert tune._next_apart(queue, set()) == 54


# ---- a prefix cache on the event-speed path (SGLang's default loop) ----------------------------------------
def _cached_trace(seed: int, count: int = 120) -> Trace:
    """Sessions whose prompts share prefixes (512-token blocks), long outputs: quiet decode runs while the
    pool fills with cached prompts that the steps' memory checks evict."""
    rng = random.Random(seed)
    arrivals, prompts, outputs, hashes = [], [], [], []
    t = 0.0
    for _ in range(count):
        t += rng.expovariate(1.5)
        session, blocks = rng.randint(0, 5), rng.randint(1, 12)
        own = rng.randint(1, 3)
        hashes.append(tuple(range(session * 100, session * 100 + blocks)) + tuple(
            10_000 + len(hashes) * 10 + k for k in range(own)))
        prompts.append(512 * (blocks + own) - rng.randint(0, 300))
        outputs.append(rng.randint(20, 1500))
        arrivals.append(t)
    return Trace(arrival_s=tuple(arrivals), prompt_tokens=tuple(prompts), output_tokens=tuple(outputs),
                 hash_ids=tuple(hashes))


def _small_pool(tokens: int):
    usable = H100.memory_bytes - sgl.CONTEXT_RESERVE_BYTES
    return replace(SETUP, mem_fraction_static=round((SETUP.weight_bytes + tokens * SETUP.kv_bytes_per_token)
                                                    / usable, 6))


BUDGET_4096 = PdmuxPolicy(PdmuxConfig(split_forward_token_budget=4096, decode_bs_divisor=12),
                          name="budget 4096")


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("pool", [12_000, 30_000, None], ids=["12k", "30k", "default"])
@pytest.mark.parametrize("policy", [ChunkedPolicy(8192), ChunkedPolicy(2048), MixedChunkPolicy(512),
                                    PrefillFirstPolicy(), ChunkedPolicy(4096, 2), PdmuxPolicy(), BUDGET_4096],
                         ids=lambda p: p.label)
def test_prefix_cache_runs_as_the_step_loop(seed, pool, policy, monkeypatch) -> None:
    """With a prefix cache the quiet steps (pdmux: rounds, with and without a prefill in flight) go at once
    too, the evictions of their memory checks made once after each run (SGLang's default loop: by the step
    that follows it): the same steps, first tokens, retractions, hits and evicted tokens as the step loop."""
    setup = SETUP if pool is None else _small_pool(pool)
    trace = _cached_trace(seed)
    steps = []
    names = ("_decode_run", "_pdmux_decode_run", "_pdmux_split_run")
    runs = {name: getattr(schedulers, name) for name in names}

    def counted(name):
        def run(*args, **kw):
            out = runs[name](*args, **kw)
            steps.append(out[0])
            return out
        return run

    for name in names:
        monkeypatch.setattr(schedulers, name, counted(name))
    fast = simulate(trace, setup, policy)
    monkeypatch.undo()
    ref = simulate(trace, replace(setup, step_by_step=True), policy)
    assert list(fast.step_end_s) == list(ref.step_end_s)
    assert list(fast.first_token_s) == list(ref.first_token_s)
    assert list(fast.first_step) == list(ref.first_step) and fast.stints == ref.stints
    assert fast.counters == ref.counters and fast.end_s == ref.end_s
    assert (fast.group_time_s, fast.groups) == (ref.group_time_s, ref.groups)
    assert sum(steps) > 0.5 * len(ref.step_end_s)
    assert ref.counters["prefix_cache_hit_tokens"] > 0
    if pool == 12_000:
        assert ref.counters["prefix_cache_evicted_tokens"] > 0
