"""A run cut in time (:mod:`pdmux_cli.simulate.time_split`, issue 31): segments of a trace simulated apart and
stitched where the server is idle give the one run's metrics, float for float (every per-request column,
the ITL entries, the counters, the GPU's idle time), whether the segments stop at each other's marks or run
on; and the runner uses it only where that holds. In-process here (the later segments first, so that their
marks are there when an earlier one looks), and once through the CLI on forked workers. Speed is measured
by benchmarks/bench_event_speed.py, never here."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.sglang.speculative_args import resolve_speculation
from pdmux_cli.simulate import pool, time_split
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.metrics import summarize
from pdmux_cli.simulate.runner import new_fold, simulate_metrics, simulate_policies
from pdmux_cli.simulate.schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy
from pdmux_cli.simulate.traces import Trace, load_trace, synthetic_trace
from pdmux_cli.util.errors import InputError

H100 = find_gpu("h100")
QWEN = load_model("qwen3-8b")
SETUP = make_setup(H100, QWEN)
BASELINES = [ChunkedPolicy(8192), MixedChunkPolicy(512), PrefillFirstPolicy(), ChunkedPolicy(2048, 2)]
SLO = (1000.0, 60.0)


def _figures(m) -> dict:
    """Everything a run's metrics say, floats as their exact repr."""
    cols = m.columns
    out = {name: repr(getattr(m, name)) for name in (
        "completed", "rejected", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "met", "span_s", "gpu_busy_share",
        "decode_steps", "counters", "notes", "goodput_rps", "slo_attainment", "itl_cdf", "kv_pool_tokens")}
    for name in cols.FLOATS:
        out[name] = repr(list(getattr(cols, name)))
    out["met_rows"], out["status"] = bytes(cols.met), bytes(cols.status)
    return out


def _stitched(trace, setup, policy, segments, *, window=None, reverse=True):
    """The segments run here one after another (the later first: their marks are there when an earlier one
    looks; else none is) and stitched: ``(metrics, runs)``."""
    starts = time_split.segment_starts(len(trace), segments)
    board = time_split.Board(segments)
    runs = [None] * segments
    for index in (reversed(range(segments)) if reverse else range(segments)):
        runs[index] = time_split.run_segment(trace, setup, policy, starts, index, board,
                                             new_fold(trace, policy, *SLO), window)
    result = time_split.stitch(trace, setup, policy, runs)
    return summarize(result, *SLO), runs


@pytest.mark.parametrize("policy", BASELINES, ids=lambda p: p.label)
@pytest.mark.parametrize(("requests", "segments", "seed"), [(4000, 2, 1), (9000, 4, 1), (6000, 3, 7)])
def test_stitched_run_is_the_one_run(policy, requests, segments, seed):
    trace = synthetic_trace(5.0 if seed == 1 else 4.0, "lognormal:1024:1", "exp:128", num_requests=requests,
                            seed=seed)
    one = simulate_metrics(trace, SETUP, policy, *SLO)
    cut, runs = _stitched(trace, SETUP, policy, segments, window=800)
    assert _figures(cut) == _figures(one)
    # every earlier segment stopped at the next one's marks: the stitch took each part from its own segment
    assert [run.stop[0] for run in runs[:-1]] == list(range(1, segments))
    assert runs[-1].stop is None and all(run.marks for run in runs[1:])


@pytest.mark.parametrize(("setup_of", "qps"), [
    (lambda: make_setup(H100, QWEN, speculation=resolve_speculation(QWEN, "EAGLE", 3, 1, 4, 2.5)[0]), 3.0),
    (lambda: make_setup(H100, load_model("gpt-oss-20b")), 3.0),              # sliding windows
    (lambda: make_setup(H100, QWEN, disable_overlap=True), 3.0),
    (lambda: make_setup(H100, QWEN, mem_fraction_static=0.2), 1.0),          # a short pool: retractions
], ids=["speculative", "sliding-window", "no-overlap", "short-pool"])
def test_stitched_run_is_the_one_run_on_other_servers(setup_of, qps):
    setup = setup_of()
    trace = synthetic_trace(qps, "lognormal:2048:1", "exp:256", num_requests=3000, seed=3)
    for policy in (ChunkedPolicy(8192), MixedChunkPolicy(512)):
        one = simulate_metrics(trace, setup, policy, *SLO)
        cut, runs = _stitched(trace, setup, policy, 3, window=1000)
        assert _figures(cut) == _figures(one)
        assert runs[0].stop is not None and runs[1].stop is not None


def test_short_pool_fixture_retracts():
    """The short pool above does reach retraction (else that case tests nothing more)."""
    setup = make_setup(H100, QWEN, mem_fraction_static=0.2)
    trace = synthetic_trace(1.0, "lognormal:2048:1", "exp:256", num_requests=3000, seed=3)
    assert simulate_metrics(trace, setup, ChunkedPolicy(8192), *SLO).counters["retracted_requests"] > 0


def test_segments_in_order_find_no_marks_and_the_first_runs_to_the_end():
    """Run first, the first segment finds no mark of the later ones (not published yet): it runs on to the
    end, and its run is taken whole."""
    trace = synthetic_trace(5.0, "lognormal:1024:1", "exp:128", num_requests=4000, seed=1)
    policy = ChunkedPolicy(8192)
    cut, runs = _stitched(trace, SETUP, policy, 2, window=800, reverse=False)
    assert runs[0].stop is None
    assert _figures(cut) == _figures(simulate_metrics(trace, SETUP, policy, *SLO))


def test_a_server_never_idle_is_taken_whole():
    """Overloaded (a queue that only grows): no idle moment past a later segment's start, so the first
    segment runs to the end and its run is taken whole."""
    trace = synthetic_trace(9.0, 1024, 512, num_requests=6000, seed=2)
    policy = ChunkedPolicy(8192)
    cut, runs = _stitched(trace, SETUP, policy, 3, window=500)
    assert runs[0].stop is None and len(runs[0].gaps) == 1  # idle only before the first request
    assert _figures(cut) == _figures(simulate_metrics(trace, SETUP, policy, *SLO))


def test_a_segment_no_earlier_one_can_stop_at_stops():
    """Once every earlier segment went past it (here: ran to its end first), a segment stops at its next
    progress tick and sends nothing back: the stitch never needs it."""
    trace = synthetic_trace(9.0, 1024, 512, num_requests=6000, seed=2)
    policy = ChunkedPolicy(8192)
    cut, runs = _stitched(trace, SETUP, policy, 3, window=500, reverse=False)
    assert runs[0].stop is None
    assert [(run.fold, run.marks) for run in runs[1:]] == [(None, [])] * 2
    assert _figures(cut) == _figures(simulate_metrics(trace, SETUP, policy, *SLO))


def test_board_says_who_is_needed():
    board = time_split.Board(4, marks=2)
    assert board.needed(1) and board.needed(3)
    board.passed(0, 2)  # segment 0 went past segment 1
    assert not board.needed(1) and board.needed(2)
    board.stopped(1, 3)  # segment 1 stopped at 3; 0 may still stop at 2
    assert board.needed(2) and board.needed(3)
    board.stopped(0, 2)  # ...and did: 1 stopped elsewhere, so 2 and 3 are still needed (3 by 1)
    assert board.needed(2) and board.needed(3)
    board.unused(1)  # (1 of no use after all: 3 waits on 2 alone, which may still stop at it)
    assert board.needed(3)
    board.passed(2, 4)
    assert not board.needed(3)


def test_board_round_trip():
    board = time_split.Board(3, marks=4)
    assert board.state(2) == (0, False)
    board.publish(2, [(7.0, 1.5, 1.5, 0.0), (9.0, 2.25, 2.5, 1.0)])
    board.close(2)
    assert board.state(2) == (2, True) and board.state(1) == (0, False)
    assert board.signature(2, 1) == (9.0, 2.25, 2.5, 1.0)


def test_segment_starts():
    assert time_split.segment_starts(10, 3) == [0, 3, 6]
    assert time_split.segment_starts(1_000_000, 2) == [0, 500_000]


def test_segments_for_only_where_the_cut_is_exact(monkeypatch):
    monkeypatch.setattr(pool, "default_workers", lambda: 4)
    big = synthetic_trace(50.0, 64, 8, num_requests=120_000, seed=0)
    assert time_split.segments_for(big, SETUP, ChunkedPolicy(8192), None) == 2  # 60,000 requests each
    assert time_split.segments_for(big, SETUP, ChunkedPolicy(8192), None, min_requests=30_000) == 4
    assert time_split.segments_for(big, SETUP, ChunkedPolicy(8192), 3, min_requests=30_000) == 3
    assert time_split.segments_for(big, SETUP, ChunkedPolicy(8192), 1) == 1
    assert time_split.segments_for(big, SETUP, PdmuxPolicy(), None) == 1  # its rounds keep group state
    assert time_split.segments_for(big, replace(SETUP, step_by_step=True), ChunkedPolicy(8192), None) == 1
    small = synthetic_trace(50.0, 64, 8, num_requests=90_000, seed=0)
    assert time_split.segments_for(small, SETUP, ChunkedPolicy(8192), None) == 1
    # a prefix cache outlives an idle moment: not cut while it is on and the trace has hash ids
    hashed = Trace(arrival_s=big.arrival_s, prompt_tokens=big.prompt_tokens, output_tokens=big.output_tokens,
                   hash_ids=[(i % 7,) for i in range(len(big))], source="hashed", format="synthetic")
    assert time_split.segments_for(hashed, SETUP, ChunkedPolicy(8192), None) == 1
    assert time_split.segments_for(hashed, replace(SETUP, prefix_cache=False), ChunkedPolicy(8192), None) == 2
    monkeypatch.setattr(time_split.multiprocessing, "get_start_method", lambda allow_none=False: "spawn")
    assert time_split.segments_for(big, SETUP, ChunkedPolicy(8192), None) == 1


def test_simulate_cuts_a_long_run_on_forked_workers(monkeypatch):
    """Through the CLI: one policy on a trace long enough (the floor lowered here) runs as segments on
    processes, with the same JSON as one process (``--workers 1``)."""
    monkeypatch.setattr(pool, "default_workers", lambda: 2)
    monkeypatch.setattr(time_split, "MIN_SEGMENT_REQUESTS", 2000)
    monkeypatch.setattr(time_split, "WINDOW_REQUESTS", 600)
    calls = []
    real = time_split.run_segments
    monkeypatch.setattr(time_split, "run_segments", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    runner = CliRunner()
    args = ["simulate", "--synthetic", "--qps", "5", "--max-requests", "4000", "--policies", "chunked",
            "--json"]
    cut = runner.invoke(app, args)
    one = runner.invoke(app, [*args, "--workers", "1"])
    assert cut.exit_code == 0 and one.exit_code == 0, cut.output + one.output
    assert calls == [2]
    assert cut.stdout == one.stdout


def test_refusals_come_back_as_the_one_run_gives_them(monkeypatch):
    monkeypatch.setattr(pool, "default_workers", lambda: 2)
    monkeypatch.setattr(time_split, "MIN_SEGMENT_REQUESTS", 1000)
    calls = []
    real = time_split.run_segments
    monkeypatch.setattr(time_split, "run_segments", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    trace = synthetic_trace(5.0, 1024, 128, num_requests=3000, seed=1)
    bad = simulate_policies(trace, SETUP, [ChunkedPolicy(0)], *SLO, workers=2)[0]
    assert isinstance(bad, InputError) and "chunk size must be >= 1" in str(bad)
    assert calls == []  # refused before any segment ran
    # a step budget the run passes: the same refusal as in one process
    cut = simulate_policies(trace, SETUP, [ChunkedPolicy(8192)], *SLO, max_steps=5000, workers=2)[0]
    assert calls == [2]
    one = simulate_policies(trace, SETUP, [ChunkedPolicy(8192)], *SLO, max_steps=5000, workers=1)[0]
    assert isinstance(one, InputError) and isinstance(cut, InputError)
    assert str(cut) == str(one)


def test_tail_of_a_sample():
    from pdmux_cli.simulate.fold import WeightedSample

    sample = WeightedSample()
    for value, weight in ((0.5, 2), (0.25, 1), (0.75, 3)):
        sample.add(value, weight)
    tail = sample.tail(1)
    assert (list(tail.values), list(tail.weights), tail.total, tail.max, tail.count) == (
        [0.25, 0.75], [1, 3], 4, 0.75, 2)
    sample._to_histogram()
    with pytest.raises(ValueError, match="histogram"):
        sample.tail(1)
    assert math.isinf(WeightedSample().tail(0).max)


def test_csv_progress_and_steps_of_a_cut_run(monkeypatch, tmp_path):
    """The per-request CSV of a cut run is the one process's, byte for byte; the progress callbacks end at
    every request and the run's decode steps."""
    monkeypatch.setattr(pool, "default_workers", lambda: 2)
    monkeypatch.setattr(time_split, "MIN_SEGMENT_REQUESTS", 2000)
    monkeypatch.setattr(time_split, "WINDOW_REQUESTS", 600)
    runner = CliRunner()
    base = ["simulate", "--synthetic", "--qps", "5", "--max-requests", "4000", "--policies", "mixed-chunk",
            "--json"]
    cut = runner.invoke(app, [*base, "--csv", str(tmp_path / "cut.csv")])
    one = runner.invoke(app, [*base, "--csv", str(tmp_path / "one.csv"), "--workers", "1"])
    assert cut.exit_code == 0 and one.exit_code == 0, cut.output + one.output
    assert (tmp_path / "cut.csv").read_bytes() == (tmp_path / "one.csv").read_bytes()
    assert len((tmp_path / "cut.csv").read_text().splitlines()) == 4001
    trace = synthetic_trace(5.0, 1024, 128, num_requests=4000, seed=1)
    done, steps = [], []
    calls = []
    real = time_split.run_segments
    monkeypatch.setattr(time_split, "run_segments", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    metrics = simulate_policies(trace, SETUP, [ChunkedPolicy(8192)], *SLO, progress=done.append,
                                progress_steps=steps.append, workers=2)[0]
    assert calls == [2]
    assert done[-1] == 4000 and max(done[:-1], default=0) < 4000
    assert steps[-1] == metrics.decode_steps


def _nap(shared, seconds):
    import time

    time.sleep(seconds)
    return seconds


def test_processes_next_done_waits_at_most_its_timeout():
    from pdmux_cli.simulate.executors import Processes

    with Processes(1) as ex:
        ex.submit(_nap, None, 0.5, "a nap")
        assert ex.next_done(0.01) is None
        assert ex.next_done().result() == 0.5


def test_bursts_and_the_shipped_fixture_stitch_to_the_one_run():
    """Requests in bursts (many seen at once, an idle moment before each burst) and the shipped Azure
    fixture repeated end to end: the same figures cut in three."""
    rng = random.Random(5)
    arrival, prompt, output = [], [], []
    for burst in range(150):
        for _ in range(rng.randint(5, 30)):
            arrival.append(burst * 12.0)
            prompt.append(rng.randint(64, 6000))
            output.append(rng.randint(1, 600))
    bursts = Trace(arrival_s=arrival, prompt_tokens=prompt, output_tokens=output, source="bursts",
                   format="synthetic")
    azure = load_trace(Path(__file__).parent / "fixtures" / "azure_conv_50.csv")
    span = azure.arrival_s[-1] + 5.0
    laps = 60
    repeated = Trace(arrival_s=[a + lap * span for lap in range(laps) for a in azure.arrival_s],
                     prompt_tokens=list(azure.prompt_tokens) * laps,
                     output_tokens=list(azure.output_tokens) * laps, source="azure fixture x60",
                     format="synthetic")
    for trace in (bursts, repeated):
        for policy in (ChunkedPolicy(8192), MixedChunkPolicy(512), PrefillFirstPolicy()):
            cut, runs = _stitched(trace, SETUP, policy, 3, window=len(trace) // 8)
            assert _figures(cut) == _figures(simulate_metrics(trace, SETUP, policy, *SLO))
            assert runs[0].stop is not None and runs[1].stop is not None


def test_a_server_never_idle_passes_the_later_marks_at_its_ticks(monkeypatch):
    """With no idle moment to look at them, the first segment still learns at its progress ticks that the
    next one's marks are all behind it (and says so, so that the later segment can stop): before its run
    ends, which passes every segment at once."""
    trace = synthetic_trace(9.0, 1024, 512, num_requests=6000, seed=2)
    policy = ChunkedPolicy(8192)
    calls = []
    real = time_split.Board.passed
    monkeypatch.setattr(time_split.Board, "passed", lambda self, segment, target: calls.append(
        (segment, target)) or real(self, segment, target))
    cut, runs = _stitched(trace, SETUP, policy, 2, window=300)
    assert len(runs[0].gaps) == 1 and runs[0].stop is None  # idle only before its first request
    assert calls == [(1, 2), (0, 2), (0, 2)]  # segment 1's end; segment 0 passed 1 at a tick, then its end


def test_the_step_budget_holds_at_the_run_end_cut_or_not(monkeypatch):
    """``--max-steps N``: a run of N decode steps passes and one of N + 1 fails, however its progress ticks
    fell, in one process and cut in time alike (the budget checked at the run's end too)."""
    monkeypatch.setattr(pool, "default_workers", lambda: 2)
    monkeypatch.setattr(time_split, "MIN_SEGMENT_REQUESTS", 1000)
    monkeypatch.setattr(time_split, "WINDOW_REQUESTS", 300)
    trace = synthetic_trace(5.0, 1024, 128, num_requests=2500, seed=4)
    policy = ChunkedPolicy(8192)
    steps = simulate_policies(trace, SETUP, [policy], *SLO, max_steps=0, workers=1)[0].decode_steps
    assert steps % 4096  # not on a tick: the end's check decides
    for workers in (1, 2):
        ok = simulate_policies(trace, SETUP, [policy], *SLO, max_steps=steps, workers=workers)[0]
        over = simulate_policies(trace, SETUP, [policy], *SLO, max_steps=steps - 1, workers=workers)[0]
        assert ok.decode_steps == steps
        assert isinstance(over, InputError) and f"budget of {steps - 1:,} decode steps" in str(over)
