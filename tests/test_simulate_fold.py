"""Streamed runs (simulate/fold.py): the same figures as a run's whole record, in memory bounded by what is in
flight; the all-token ITL distribution exact, then a histogram within its stated bound; the step budget."""

from __future__ import annotations

import csv
import itertools
import io
import json
import math
import random
from array import array
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdmux_cli.sglang import pdmux_config as pc
from pdmux_cli.multigpu.disaggregation import kv_link
from pdmux_cli.util.errors import InputError
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.simulate import engine, fold
from pdmux_cli.simulate.cluster import DisaggPolicy
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.fold import CsvSink, WeightedSample, percentiles, select_rank
from pdmux_cli.simulate.metrics import nearest_rank, summarize, weighted_nearest_rank
from pdmux_cli.simulate.report import metrics_dict, per_request_csv
from pdmux_cli.simulate.runner import simulate, simulate_metrics
from pdmux_cli.simulate.schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy
from pdmux_cli.simulate.traces import Trace, synthetic_trace
from pdmux_cli.messages import render_all

FIX = Path(__file__).parent / "fixtures"
H100 = find_gpu("h100")
SETUP = make_setup(H100, load_model("qwen3-8b"))
TIGHT = replace(SETUP, mem_fraction_static=0.3)  # a small KV pool: retractions
# 0.5.23 crashes at bs < 4
CRASHING = PdmuxPolicy(pc.PdmuxConfig(sm_group_num=3, manual_divisions=((96, 36, 4),)))
POLICIES = [ChunkedPolicy(2048), MixedChunkPolicy(512), PrefillFirstPolicy(), PdmuxPolicy(), CRASHING]


def _sessions(n: int, seed: int) -> Trace:
    """``n`` requests of four conversations whose prompts extend each other (shared prefix blocks: the radix
    cache hits), outputs of 200-2,500 tokens, a few a second."""
    rng = random.Random(seed)
    t, length = 0.0, [0] * 4
    arrival, prompt, output, hashes = [], [], [], []
    for _ in range(n):
        session = rng.randrange(4)
        t += rng.uniform(0, 0.2)
        length[session] = min(length[session] + rng.randint(1, 3), 10)
        arrival.append(t)
        prompt.append(length[session] * 512 - rng.randint(0, 300))
        output.append(rng.randint(200, 2500))
        hashes.append(tuple(1000 * session + j for j in range(length[session])))
    return Trace(tuple(a - arrival[0] for a in arrival), tuple(prompt), tuple(output), hash_ids=tuple(hashes),
                 source="sessions")


def _same(recorded, streamed) -> None:
    """Every figure, per-request value and CDF point equal (NaN equal to NaN)."""
    assert json.dumps(metrics_dict(recorded)) == json.dumps(metrics_dict(streamed))
    for key in recorded.per_request:
        assert [repr(v) for v in recorded.per_request[key]] == [repr(v)
                                                                for v in streamed.per_request[key]], key
    assert recorded.itl_cdf == streamed.itl_cdf


def _both(trace, setup, policy, **kwargs):
    recorded = summarize(simulate(trace, setup, policy, **kwargs), 1000, 60)
    rows = io.StringIO()
    streamed = simulate_metrics(trace, setup, policy, 1000, 60, csv=csv.writer(rows, lineterminator="\n"),
                                **kwargs)
    return recorded, streamed, rows.getvalue()


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.label + (" crashing" if p is CRASHING else ""))
@pytest.mark.parametrize("setup", [SETUP, TIGHT], ids=["pool", "tight pool"])
def test_streamed_run_gives_the_recorded_figures(policy, setup, monkeypatch) -> None:
    """A trace with prefix hashes (the radix cache), in a pool tight enough to retract (0.3 of H100's memory),
    under every schedule
    (and a pdmux config SGLang 0.5.23 crashes on): summarize of the whole record equals the streamed run,
    float for float, and the streamed --csv rows equal those written from the record. The window is
    trimmed every 5 steps (STEP_CHECK_EVERY), so that folding steps out of it is exercised."""
    monkeypatch.setattr(engine, "STEP_CHECK_EVERY", 5)
    trace = _sessions(150, 1)
    retracted = 0
    for kwargs in ({}, {"dp": 3}, {"dp": 2, "load_balance_method": "total_requests"}, {"max_concurrency": 4}):
        recorded, streamed, rows = _both(trace, setup, policy, **kwargs)
        _same(recorded, streamed)
        assert rows == per_request_csv(trace, [recorded]).split("\n", 1)[1]
        retracted += recorded.counters["retracted_requests"]
        assert recorded.prefix_cache_hit_rate > 0 or policy is CRASHING
    assert retracted > 0 or setup is SETUP or policy is CRASHING


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.label + (" crashing" if p is CRASHING else ""))
def test_a_run_without_the_all_token_itl_keeps_every_other_figure(policy, monkeypatch) -> None:
    """``all_token_itl=False`` (a capacity search's points): no ITL distribution over all tokens (its
    percentiles NaN, its CDF empty), every other figure and per-request value as the full run's, in a pool
    tight enough to retract, with replicas and with a closed-loop client; the window trimmed every 5 steps.
    ``itl_cdf=False`` (tune's rows, the serving replays): only the CDF left out."""
    monkeypatch.setattr(engine, "STEP_CHECK_EVERY", 5)
    trace = _sessions(150, 1)
    for kwargs in ({}, {"dp": 2}, {"max_concurrency": 4}):
        full = simulate_metrics(trace, TIGHT, policy, 1000, 60, **kwargs)
        lean = simulate_metrics(trace, TIGHT, policy, 1000, 60, all_token_itl=False, **kwargs)
        assert all(math.isnan(v) for v in lean.itl_ms.values()) and lean.itl_cdf == ([], [])
        assert policy is CRASHING or (full.itl_cdf[0] and not math.isnan(full.itl_ms["p99"]))
        lean_dict, full_dict = metrics_dict(lean), metrics_dict(full)
        for figures in (lean_dict, full_dict):
            figures.pop("itl_ms")
        assert json.dumps(lean_dict) == json.dumps(full_dict)
        for key in full.per_request:
            assert [repr(v) for v in full.per_request[key]] == [repr(v) for v in lean.per_request[key]], key
        assert (lean.met, lean.decode_steps) == (full.met, full.decode_steps)
        plotless = simulate_metrics(trace, TIGHT, policy, 1000, 60, itl_cdf=False, **kwargs)  # tune's rows
        assert plotless.itl_cdf == ((), ()) and plotless.itl_ms == full.itl_ms
        assert json.dumps(metrics_dict(plotless)) == json.dumps(metrics_dict(full))


def test_streamed_run_cut_short_by_a_crash_gives_the_recorded_figures(monkeypatch) -> None:
    """Ten requests alone (each done before the next), then a burst: SGLang 0.5.23 crashes at the burst's
    second prefill; the ten are done, the rest unfinished, in the figures and the --csv rows alike."""
    monkeypatch.setattr(engine, "STEP_CHECK_EVERY", 5)
    arrival = [30.0 * i for i in range(10)] + [300 + 0.01 * i for i in range(20)]
    trace = Trace(tuple(arrival), (2000,) * 30, (50,) * 30)
    recorded, streamed, rows = _both(trace, SETUP, CRASHING)
    _same(recorded, streamed)
    assert recorded.crashed_at_s is not None and 10 <= recorded.completed < 30
    statuses = [line.split(",")[5] for line in rows.splitlines()]
    assert (statuses.count("done") == recorded.completed
            and statuses.count("unfinished") == 30 - recorded.completed)


def test_streamed_disaggregation_gives_the_recorded_figures(monkeypatch) -> None:
    monkeypatch.setattr(engine, "STEP_CHECK_EVERY", 7)
    trace = synthetic_trace(30, "uniform:100:6000", "exp:200", num_requests=300, seed=4)
    for setup in (SETUP, TIGHT):
        recorded, streamed, rows = _both(trace, setup, DisaggPolicy(1, 2, kv_link(H100, 3, "auto")))
        _same(recorded, streamed)
        assert recorded.counters == streamed.counters and rows == per_request_csv(
            trace, [recorded]).split("\n", 1)[1]


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(range(4)), st.floats(2, 60), st.sampled_from([0, 2]))
def test_streamed_equals_recorded_on_random_traces(seed, which, rate, concurrency) -> None:
    monkeypatch_every = engine.STEP_CHECK_EVERY
    engine.STEP_CHECK_EVERY = 3
    try:
        trace = synthetic_trace(rate, "lognormal:800:1.2", "exp:150", num_requests=60, seed=seed)
        recorded, streamed, _ = _both(trace, TIGHT, POLICIES[which], max_concurrency=concurrency)
    finally:
        engine.STEP_CHECK_EVERY = monkeypatch_every
    _same(recorded, streamed)


def test_the_window_of_step_ends_stays_bounded_by_what_is_in_flight(monkeypatch) -> None:
    """20,000 requests at 5 req/s (465,000 decode steps): the window the streamed run keeps never holds more
    than a few thousand step end times (the oldest running request's steps on, trimmed every 4096)."""
    peak = []
    tick = engine.Work.tick

    def watched(self) -> None:
        tick(self)
        peak.append(len(self.ends) + len(self.ends.cont))

    monkeypatch.setattr(engine.Work, "tick", watched)
    trace = synthetic_trace(5, 1024, 128, num_requests=20_000, seed=1)
    m = simulate_metrics(trace, SETUP, ChunkedPolicy(8192), 1000, 60)
    assert m.decode_steps > 400_000 and m.completed == 20_000
    assert max(peak) < 3 * engine.STEP_CHECK_EVERY


# ---- the step budget
# ------------------------------------------------------------------------------------------


def test_step_budget_stops_a_streamed_run_and_can_be_raised_or_lifted() -> None:
    trace = synthetic_trace(1, 100, 400, num_requests=3, seed=0)  # 3 x 399 decode steps, barely overlapping
    with pytest.raises(InputError, match=r"budget of 100 decode steps .*--max-steps N \(0: no limit\)"):
        simulate_metrics(trace, SETUP, ChunkedPolicy(8192), 1000, 60, max_steps=100)
    assert simulate_metrics(trace, SETUP, ChunkedPolicy(8192), 1000, 60, max_steps=0).completed == 3
    assert simulate_metrics(trace, SETUP, ChunkedPolicy(8192), 1000, 60, max_steps=5000).completed == 3
    assert engine.step_budget(10) == engine.MIN_STEP_BUDGET == 6_000_000
    assert engine.step_budget(5_000_000) == 10_000_000_000  # 2,000 a request: a trace of any length runs
    for bad in (-1, 1.5, True):
        with pytest.raises(InputError, match="--max-steps"):
            engine.step_budget(10, bad)


def test_a_refused_policy_leaves_no_rows_in_the_csv(tmp_path, monkeypatch) -> None:
    """pdmux is refused (its budget, say) after its first rows were written: they are cut off again, and the
    file holds the other policy's rows whole."""
    from pdmux_cli.simulate.runner import simulate_policies

    monkeypatch.setattr(engine, "STEP_CHECK_EVERY", 50)
    tick = engine.Work.tick

    def refusing(self) -> None:
        tick(self)
        if self.fold.csv.policy == "pdmux" and self.fold.csv.next > 5:
            raise InputError("refused half-way")

    monkeypatch.setattr(engine.Work, "tick", refusing)
    trace = synthetic_trace(4, 500, 100, num_requests=200, seed=0)
    path = tmp_path / "rows.csv"
    with path.open("w", newline="") as handle:
        out = simulate_policies(trace, SETUP, [ChunkedPolicy(8192), PdmuxPolicy(), PrefillFirstPolicy()],
                                1000, 60, workers=1, csv=CsvSink(handle))
    assert isinstance(out[1], InputError) and "refused half-way" in str(out[1])
    rows = list(csv.reader(path.open()))
    assert [r[0] for r in rows] == ["chunked 8192"] * 200 + ["prefill-first"] * 200
    assert [int(r[1]) for r in rows] == list(range(200)) * 2


# ---- percentiles
# -----------------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=300), st.integers(1, 4))
def test_percentiles_are_nearest_rank(values, copies) -> None:
    values = values * copies
    ordered = sorted(values)
    got = percentiles(values)
    assert got == {**{f"p{q}": nearest_rank(ordered, q) for q in (50, 90, 99)}, "max": ordered[-1]}


def test_percentiles_of_a_large_column_are_exact_without_sorting_it(monkeypatch) -> None:
    """Past SORT_BELOW values, buckets of the float bits and a sort of the few buckets the ranks fall in."""
    rng = random.Random(3)
    values = array("d", (rng.lognormvariate(3, 1.5) for _ in range(20_000)))
    values.extend([0.0, 0.0, 1e-300])
    monkeypatch.setattr(fold, "SORT_BELOW", 100)
    ordered = sorted(values)
    assert percentiles(values) == {**{f"p{q}": nearest_rank(ordered, q) for q in (50, 90, 99)},
                                   "max": ordered[-1]}
    for rank in (1, 2, 11_000, len(values)):
        assert select_rank(values, rank) == ordered[rank - 1]


def _weighted(sample_values, weights):
    order = sorted(range(len(sample_values)), key=sample_values.__getitem__)
    values = [sample_values[i] for i in order]
    cum = [0]
    for i in order:
        cum.append(cum[-1] + weights[i])
    return {f"p{q}": weighted_nearest_rank(values, [], q, cum[1:])
            for q in (50, 90, 99)} | {"max": values[-1]}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-6, 10.0), st.integers(1, 50)), min_size=1, max_size=200))
def test_weighted_sample_is_exact_below_its_limit(pairs) -> None:
    sample = WeightedSample()
    for value, weight in pairs:
        sample.add(value, weight)
    assert not sample.approximate
    assert sample.summary() == _weighted([v for v, _ in pairs], [w for _, w in pairs])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 1e-300, 0.002, 0.0025, 3.0]) | st.floats(1e-6, 10.0),
                          st.integers(1, 50)), min_size=1, max_size=300))
def test_weighted_sample_of_many_entries_counts_buckets_with_numpy_exactly(pairs) -> None:
    """Past SORT_BELOW entries the buckets are counted with numpy's bincount (a narrow span of keys) or a
    dict (a wide one): the same percentiles as a sort, the same CDF either way."""
    sample = WeightedSample()
    for value, weight in pairs:
        sample.add(value, weight)
    exact = _weighted([v for v, _ in pairs], [w for _, w in pairs])
    old = fold.SORT_BELOW, fold.BINCOUNT_SPAN
    try:
        fold.SORT_BELOW = 1
        got, cdf = sample.summary(), sample.cdf(points=50)
        fold.BINCOUNT_SPAN = -1  # every span too wide: the dict
        sample._cached = None
        assert (sample.summary(), sample.cdf(points=50)) == (got, cdf)
    finally:
        fold.SORT_BELOW, fold.BINCOUNT_SPAN = old
    assert got == exact


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-6, 10.0), st.integers(1, 50)), min_size=1, max_size=200))
def test_weighted_sample_past_its_limit_is_within_the_stated_error(pairs) -> None:
    """A histogram (limit 0: from the first entry): every percentile within RELATIVE_ERROR (2^-14) of the
    exact one, the maximum exact, and the result the same whether the entries came one by one or merged."""
    exact = _weighted([v for v, _ in pairs], [w for _, w in pairs])
    old = fold.EXACT_LIMIT
    fold.EXACT_LIMIT = 0
    try:
        one, a, b = WeightedSample(), WeightedSample(), WeightedSample()
        for i, (value, weight) in enumerate(pairs):
            one.add(value, weight)
            (a if i % 2 else b).add(value, weight)
        a.merge(b)
    finally:
        fold.EXACT_LIMIT = old
    got = one.summary()
    assert one.approximate and got["max"] == exact["max"] and a.summary() == got
    for q in ("p50", "p90", "p99"):
        assert abs(got[q] - exact[q]) <= fold.RELATIVE_ERROR * exact[q] * (1 + 1e-12)


def test_a_run_past_the_exact_limit_says_its_itl_percentiles_are_approximate(monkeypatch) -> None:
    monkeypatch.setattr(fold, "EXACT_LIMIT", 1000)
    trace = synthetic_trace(5, 1024, 128, num_requests=200, seed=2)
    approx = simulate_metrics(trace, SETUP, ChunkedPolicy(8192), 1000, 60)
    monkeypatch.setattr(fold, "EXACT_LIMIT", 1 << 23)
    exact = simulate_metrics(trace, SETUP, ChunkedPolicy(8192), 1000, 60)
    assert any("histogram" in note and "6.1e-05" in note for note in render_all(approx.notes))
    assert not any("histogram" in note for note in render_all(exact.notes))
    assert approx.itl_ms["max"] == exact.itl_ms["max"]
    for q in ("p50", "p90", "p99"):
        assert math.isclose(approx.itl_ms[q], exact.itl_ms[q], rel_tol=fold.RELATIVE_ERROR)
    assert approx.per_request["itl_p99_ms"] == exact.per_request["itl_p99_ms"]  # what the SLO judges: exact
    assert approx.met == exact.met


def test_ctrl_c_leaves_no_half_written_csv(tmp_path) -> None:
    """The rows stream into a temporary file beside --csv (it grows while the run goes on); Ctrl-C removes it
    and writes nothing: status 130, no file, no temporary file."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "rows.csv"
    proc = subprocess.Popen([sys.executable, "-m", "pdmux_cli", "simulate", "--synthetic", "--qps", "5",
                             "--max-requests", "300000", "--policies", "chunked", "--csv", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    growing = []
    while time.monotonic() < deadline and proc.poll() is None:
        temps = [p for p in tmp_path.iterdir() if p.name.startswith(".rows.csv.")]
        if temps and temps[0].stat().st_size > 100_000:
            growing.append(temps[0].stat().st_size)
            break
        time.sleep(0.2)
    assert growing, "the rows never streamed into the temporary file"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from([0.001, 0.002, 0.0025, 0.04]) | st.floats(1e-4, 0.1), min_size=1,
                max_size=700),
       st.integers(0, 50))
def test_a_requests_p99_and_max_itl_are_the_nearest_rank_of_its_gaps(gaps, offset) -> None:
    """Fold.request's p99 ITL (a sort under 100 ITLs, numpy's partition of the largest above) and maximum
    are the nearest rank and the largest of the request's own gaps, ties included, to the float."""
    ft = 3.0
    ends = engine.StepEnds(0)
    t = ft - 1.0
    for _ in range(offset):  # steps of other requests before its first
        t += 0.5
        ends.append(t)
    t = ft
    for gap in gaps:
        t += gap
        ends.append(t)
    r = len(gaps)
    f = fold.Fold(1, 1000.0, 50.0)
    f.attach([0.0], 0.0)
    f.request(0, ft, offset, r, ends)
    f.flush(ends)  # a request with decode steps waits on the window until then
    own = sorted([ends[offset] - ft] + [ends[offset + j] - ends[offset + j - 1] for j in range(1, r)])
    assert f.columns.itl_p99_ms[0] == nearest_rank(own, 99) * 1e3
    assert f.columns.itl_max_ms[0] == own[-1] * 1e3


def test_step_gaps_are_the_same_by_numpy_or_one_by_one(monkeypatch) -> None:
    """StepEnds.gaps_upto: long stretches subtracted with numpy, short ones one by one: the same floats."""
    rng = random.Random(5)
    times = list(itertools.accumulate(rng.lognormvariate(-4, 1) for _ in range(3000)))
    got = {}
    for cut in (1, 10**9):
        monkeypatch.setattr(engine, "GAPS_BY_NUMPY", cut)
        ends = engine.StepEnds.window_of(times)
        ends.prev = 0.25
        for k in (1, 2, 700, 701, 2999, 3000):
            ends.gaps_upto(k)
        got[cut] = list(ends.gaps)
    assert got[1] == got[10**9] == [times[0] - 0.25] + [b - a for a, b in zip(times, times[1:])]
