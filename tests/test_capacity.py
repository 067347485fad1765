"""pdmux capacity: the rate search, its verdict, and the command."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error
from policy_rows import policy_fields
from typer.testing import CliRunner

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.messages import render_all
from pdmux_cli.simulate import capacity as cap
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.metrics import summarize
from pdmux_cli.simulate.runner import simulate
from pdmux_cli.simulate.schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy
from pdmux_cli.simulate.traces import reshape, synthetic_trace

FIX = Path(__file__).parent / "fixtures"
AZURE = str(FIX / "azure_conv_50.csv")
runner = CliRunner()


def _drive(search, attainment) -> tuple[tuple[float, str], list[float]]:
    """Run a :func:`capacity._search` generator against ``attainment(rate)``; the result and the rates
    tried."""
    rates = [next(search)]
    try:
        while True:
            rate = rates[-1]
            rates.append(search.send(cap.RatePoint(rate, attainment(rate), 0.0, 0.0, 0.0)))
    except StopIteration as stop:
        return stop.value, rates


def test_search_brackets_and_bisects_to_the_tolerance() -> None:
    trace = synthetic_trace(2.0, 512, 64, num_requests=50)
    (rate, bound), rates = _drive(cap._search(trace, 0.99, 0.02), lambda r: 1.0 if r <= 7.3 else 0.5)
    assert bound == "" and 7.3 / 1.02 <= rate <= 7.3
    assert rates[:4] == pytest.approx([trace.mean_qps * 2**k for k in range(4)])  # 1.77 to 14.2 req/s
    assert len(rates) == 4 + 6  # three doublings, then ceil(log2(ln 2 / ln 1.02)) = 6 bisections
    (rate, bound), _ = _drive(cap._search(trace, 0.99, 0.02), lambda r: 1.0 if r <= 0.3 else 0.9)
    assert bound == "" and 0.3 / 1.02 <= rate <= 0.3


def test_search_reports_an_open_bracket() -> None:
    trace = synthetic_trace(2.0, 512, 64, num_requests=50)
    (rate, bound), rates = _drive(cap._search(trace, 0.99, 0.02), lambda r: 1.0)
    assert bound == "above" and rate == pytest.approx(trace.mean_qps * 2 ** cap.MAX_BRACKET_STEPS)
    (rate, bound), rates = _drive(cap._search(trace, 0.99, 0.02), lambda r: 0.0)
    assert (rate, bound) == (0.0, "below") and len(rates) == 1 + cap.MAX_BRACKET_STEPS


@pytest.fixture(scope="module")
def small():
    trace = synthetic_trace(4.0, "lognormal:1024:1", "exp:128", num_requests=300, seed=3)
    setup = make_setup(find_gpu("h100"), load_model("qwen3-8b"))
    return trace, setup


def _attainment(trace, setup, policy, rate: float) -> float:
    return summarize(simulate(reshape(trace, qps=rate), setup, policy), 1000, 60).slo_attainment


def test_capacity_holds_below_and_fails_above_the_rate_found(small) -> None:
    """Checked by direct simulation: at 0.9x the reported rate the target holds, at 1.1x it does not."""
    trace, setup = small
    policies = [PdmuxPolicy(), ChunkedPolicy(2048), MixedChunkPolicy(512)]
    result = cap.capacity(trace, setup, policies, 1000, 60, target=0.99, tolerance=0.02, workers=1)
    for policy, row in zip(policies, result.policies, strict=True):
        assert row.bound == "" and row.max_rate_rps > 0, row
        assert row.at.slo_attainment >= 0.99 and row.at.rate_rps == row.max_rate_rps
        assert _attainment(trace, setup, policy, 0.9 * row.max_rate_rps) >= 0.99
        assert _attainment(trace, setup, policy, 1.1 * row.max_rate_rps) < 0.99
        rates = [p.rate_rps for p in row.points]
        assert rates == sorted(rates) and row.max_rate_rps in rates
    assert result.trace_rate_rps == pytest.approx(trace.mean_qps)


def test_capacity_does_not_depend_on_the_workers(small) -> None:
    trace, setup = small
    policies = [PdmuxPolicy(), ChunkedPolicy(2048)]
    one = cap.capacity(trace, setup, policies, 1000, 60, workers=1)
    two = cap.capacity(trace, setup, policies, 1000, 60, workers=2)
    assert [p.max_rate_rps for p in one.policies] == [p.max_rate_rps for p in two.policies]
    assert [p.points for p in one.policies] == [p.points for p in two.policies]


def _row(label: str, kind: str, rate: float, bound: str = "", path: str | None = None,
         chunk: int = 0) -> cap.PolicyCapacity:
    point = cap.RatePoint(rate or 0.5, 0.99 if rate else 0.5, rate, 100.0, 20.0)
    return cap.PolicyCapacity(label, kind, rate, point if rate else None, (point,), bound, path,
                              5 if path else None, chunk,
                              **policy_fields(kind, path, chunk, sm_group_num=5))


def _result(*rows: cap.PolicyCapacity) -> cap.CapacityResult:
    return cap.CapacityResult(list(rows), 0.99, 0.02, 4.0, 1000, 60, 1)


def test_verdicts() -> None:
    pd = _row("pdmux (tuned.yaml)", "pdmux", 5.2, path="my dir/tuned.yaml")
    assert _result(pd, _row("chunked 512", "chunked", 3.9, chunk=512)).verdict() == (
        "pdmux (tuned.yaml) sustains 5.2 req/s against 3.9 for chunked 512: +33%; enable it with: "
        "--enable-pdmux --pdmux-config-path 'my dir/tuned.yaml' --sm-group-num 5 --chunked-prefill-size -1 "
        "--disable-overlap-schedule")
    assert _result(_row("pdmux", "pdmux", 5.2),
                   _row("chunked 512", "chunked", 3.9, chunk=512)).verdict().endswith(
        "enable it with: --enable-pdmux --chunked-prefill-size -1 --disable-overlap-schedule")
    assert _result(_row("pdmux", "pdmux", 3.0),
                   _row("mixed-chunk 512", "mixed-chunk", 4.0, chunk=512)).verdict() == (
        "mixed-chunk 512 serves more (4 req/s against 3 for pdmux): keep it (--enable-mixed-chunk "
        "--chunked-prefill-size 512)")
    assert "both sustain 4 req/s" in _result(_row("pdmux", "pdmux", 4.0), _row("chunked 8192", "chunked", 4.0,
                                                                                  chunk=8192)).verdict()
    assert _result(_row("pdmux", "pdmux", 9.0, "above"), _row("chunked 8192", "chunked", 0.0, "below",
                                                              chunk=8192)).verdict().startswith(
        "pdmux sustains >=9 req/s against <0.5 for chunked 8192: where it meets the SLO at no rate")
    # met at every rate tried: the gain is a floor (a new user's report: "+89%" from ">=474")
    assert _result(_row("pdmux", "pdmux", 474.0, "above"), _row("mixed-chunk 512", "mixed-chunk", 250.0,
                                                                chunk=512)).verdict().startswith(
        "pdmux sustains >=474 req/s against 250 for mixed-chunk 512: +90% or more (pdmux met the SLO at "
        "every rate tried); enable it with:")
    assert "no policy meets" in _result(_row("pdmux", "pdmux", 0.0, "below"),
                                        _row("chunked 8192", "chunked", 0.0, "below")).verdict()


def test_cli_table_json_and_plot(tmp_path) -> None:
    r = runner.invoke(app,
                      ["capacity", AZURE, "--policies", "pdmux,chunked", "--chunk-sizes", "2048", "--workers",
                            "1", "--json"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert [p["policy"] for p in data["policies"]] == ["pdmux", "chunked 2048"]
    assert data["target"] == 0.99 and data["requests"] == 50 and data["verdict"]
    for p in data["policies"]:
        assert p["max_rate_rps"] > 0 and p["at"]["slo_attainment"] >= 0.99
        assert p["at"] in p["points"]
    pytest.importorskip("matplotlib")
    png = tmp_path / "capacity.png"
    r = runner.invoke(app,
                      ["capacity", AZURE, "--policies", "chunked", "--chunk-sizes", "2048", "--plot",
                       str(png)])
    assert r.exit_code == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "max rate" in r.stdout and "verdict: " in r.stdout


def test_cli_sizes_a_given_yaml_beside_the_defaults(tmp_path) -> None:
    yaml = tmp_path / "tuned.yaml"
    yaml.write_text("sm_group_num: 3\nmanual_divisions:\n  - [88, 44, 0]\nsplit_forward_token_budget: "
                    "16384\n")
    r = runner.invoke(app, ["capacity", AZURE, "--policies", "chunked", "--config", str(yaml), "--json"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert [p["policy"] for p in data["policies"]] == ["chunked 8192", "pdmux", "pdmux (tuned.yaml)"]
    assert data["policies"][2]["config"] == str(yaml)


def test_cli_bad_input(tmp_path) -> None:
    once = tmp_path / "once.csv"
    once.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "2023-11-16 18:15:46.6805900,374,44\n" * 5)
    for args, text in [
        (["capacity", AZURE, "--target", "0"], "--target"),
        (["capacity", AZURE, "--target", "1.5"], "--target"),
        (["capacity", AZURE, "--target", "nan"], "--target"),
        (["capacity", AZURE, "--tolerance", "0"], "--tolerance"),
        (["capacity", AZURE, "--tolerance", "1"], "--tolerance"),
        (["capacity", AZURE, "--tolerance", "1e-300"], "--tolerance is a relative precision from 0.0001"),
        (["capacity", AZURE, "--slo-itl", "-5"], "--slo-itl"),
        (["capacity", AZURE, "--workers", "0"], "--workers"),
        (["capacity", AZURE, "--plot", "x.jpg"], ".png"),
        (["capacity", AZURE, "--policies", "fast"], "unknown fast"),
        (["capacity", str(once)], "all arrive at once"),
        (["capacity"], "trace"),
        (["capacity", AZURE, "--trace", AZURE], "once"),
    ]:
        assert_one_line_error(runner.invoke(app, args), 2, text)


def test_tune_says_when_the_trace_overloads_the_gpu(small) -> None:
    from pdmux_cli.simulate.tune import tune

    trace, setup = small
    heavy = reshape(trace, qps=60.0)  # far past what one H100 serves (about 20 req/s here: capacity above)
    result = tune(
        heavy,
        setup,
        1000,
        60,
        sm_group_nums=[8],
        divisors=[36],
        budgets=[65536],
        single_levels=False,
        workers=1,
        schedules=(),
    )
    note = next(n for n in render_all(result.notes) if "overloads the GPU" in n)
    rate = float(note.split("up to ")[1].split(" req/s")[0])
    assert "the queue grows" in note and 0 < rate < 60
    winner = PdmuxPolicy(result.best_row.candidate.config)
    assert _attainment(trace, setup, winner, rate) >= 0.99
    light = reshape(trace, qps=1.0)
    calm = tune(
        light,
        setup,
        1000,
        60,
        sm_group_nums=[8],
        divisors=[36],
        budgets=[65536],
        single_levels=False,
        workers=1,
        schedules=(),
    )
    assert not any("overload" in n for n in render_all(calm.notes))


def test_tune_runs_its_schedules_beside_the_overload_search(small) -> None:
    """SGLang's other schedules run on the worker the overload search's chain leaves idle (two workers) or
    after it (one): the same rows, schedules and notes either way, the schedules' figures those of their own
    simulations."""
    from pdmux_cli.sglang.server_defaults import default_chunked_prefill_size
    from pdmux_cli.simulate.tune import tune

    trace, setup = small
    heavy = reshape(trace, qps=60.0)
    knobs = {"sm_group_nums": [8], "divisors": [36], "budgets": [65536], "single_levels": False}
    one = tune(heavy, setup, 1000, 60, workers=1, **knobs)
    two = tune(heavy, setup, 1000, 60, workers=2, **knobs)
    assert any("overloads the GPU" in n for n in render_all(two.notes))
    assert (two.rows, two.schedules) == (one.rows, one.schedules)
    assert render_all(two.notes) == render_all(one.notes)
    chunked = ChunkedPolicy(default_chunked_prefill_size(setup.memory_bytes))
    alone = [summarize(simulate(heavy, setup, p), 1000, 60) for p in (chunked, MixedChunkPolicy(512))]
    assert [(s.label, s.slo_attainment, s.goodput_rps) for s in two.schedules] == [
        (m.policy, m.slo_attainment, m.goodput_rps) for m in alone]
    assert all(s.slo_attainment < 0.99 for s in two.schedules)


def test_ctrl_c_stops_tune_and_its_workers(tmp_path) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) ends tune with status 130 and
    leaves no worker behind: they ignore it, the parent terminates them."""
    import os
    import signal
    import subprocess
    import sys
    import time

    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:{15 + i // 600:02d}:{(i // 10) % 60:02d}.{i % 10}000000,{500 + 37 * i % 3000},"
             f"{20 + i % 300}" for i in range(3000)]
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(rows) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "pdmux_cli", "tune", "--trace", str(trace), "--slo-ttft",
                             "1000", "--slo-itl", "60", "--workers", "2"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE,
                            start_new_session=True)
    time.sleep(3)  # past start-up, into the simulations
    assert proc.poll() is None, proc.stderr.read()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # nothing of the group is left


def test_tune_and_capacity_take_no_prefix_cache() -> None:
    moon = str(FIX / "mooncake_small.jsonl")
    r = runner.invoke(app,
                      ["capacity", moon, "--policies", "chunked", "--no-prefix-cache", "--slo-ttft", "5000",
                            "--json"])
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app,
                      ["tune", "--trace", moon, "--slo-ttft", "5000", "--slo-itl", "100", "--no-prefix-cache",
                            "--sm-group-nums", "8", "--divisors", "36", "--budgets", "65536", "--workers",
                            "1", "--json"])
    assert r.exit_code == 0, r.stderr


def test_tune_on_an_offline_batch_still_writes_its_winner(tmp_path) -> None:
    """Requests all at time 0: the overload note says so instead of searching a rate there is none of."""
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(f'{{"timestamp": 0, "input_length": {2000 + 10 * i}, "output_length": 64}}\n'
                             for i in range(300)))
    out = tmp_path / "tuned.yaml"
    r = runner.invoke(app,
                      ["tune", "--trace", str(batch), "--slo-ttft", "1000", "--slo-itl", "60",
                       "--sm-group-nums",
                            "8", "--divisors", "36", "--budgets", "65536", "--workers", "1", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    assert out.exists() and "all arrive at once" in " ".join(r.stdout.split())


def test_tune_verdict_calls_a_drain_time_difference_a_tie() -> None:
    from pdmux_cli.simulate.tune import Candidate, ScheduleRow, TuneResult, TuneRow

    cand = Candidate(PdmuxPolicy().config, "auto, 8 groups, div 36, budget 65536")
    pd = TuneRow(0, cand, 1.0, 1.7431, 100.0, 20.0, 0)
    tie = TuneResult([pd], 0, 0, 0, 1, [], [ScheduleRow("mixed-chunk 512", 1.0, 1.7442, 90.0, 15.0)])
    assert tie.verdict().endswith("a tie on this trace; --enable-pdmux buys nothing here")
    win = TuneResult([pd], 0, 0, 0, 1, [], [ScheduleRow("mixed-chunk 512", 1.0, 1.70, 90.0, 15.0)])
    assert win.verdict().endswith("turn on --enable-pdmux")
    lose = TuneResult([pd], 0, 0, 0, 1, [], [ScheduleRow("mixed-chunk 512", 1.0, 1.80, 90.0, 15.0)])
    assert lose.verdict().endswith("keep mixed-chunk 512")


def test_capacity_notes_and_refusals(tmp_path) -> None:
    two = tmp_path / "two.csv"
    two.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,100,20\n"
                   "2023-11-16 18:15:47.5,100,20\n")
    r = runner.invoke(app, ["capacity", str(two), "--policies", "chunked", "--json"])
    assert r.exit_code == 0, r.stderr
    assert any("too few to measure a sustained rate" in n for n in json.loads(r.stdout)["notes"])
    assert_one_line_error(runner.invoke(app, ["capacity", AZURE, "--qps", "5"]), 2, "--synthetic")
    # thresholds from 4 up: a decode batch of 1-3 matches none (0.5.23 crashes)
    crash = tmp_path / "crash.yaml"
    crash.write_text("sm_group_num: 4\nmanual_divisions:\n  - [112, 20, 4]\n  - [96, 36, 10]\n")
    r = runner.invoke(app, ["capacity", AZURE, "--policies", "chunked", "--config", str(crash), "--json"])
    assert r.exit_code == 0, r.stderr
    notes = json.loads(r.stdout)["notes"]
    assert any(n.startswith("pdmux (crash.yaml): SGLang 0.5.23 crashes with this config") for n in notes)


def test_capacity_stopped_early_finds_the_same_rate_from_fewer_steps(small) -> None:
    """``stop_early``: a run stops once its misses settle that it misses the target; the search asks for
    the same rates and finds the same capacity, each stopped point keeps a bound at least its attainment
    (and below the target), no other figure."""
    trace, setup = small
    heavy = reshape(synthetic_trace(4.0, "lognormal:1024:1", "exp:128", num_requests=1500, seed=3), qps=60.0)
    for policy in (PdmuxPolicy(), ChunkedPolicy(2048)):
        full = cap.capacity(heavy, setup, [policy], 1000, 60, workers=1, intervals=False).policies[0]
        fast = cap.capacity(heavy, setup, [policy], 1000, 60, workers=1, intervals=False,
                            stop_early=True).policies[0]
        assert (fast.max_rate_rps, fast.bound, fast.at) == (full.max_rate_rps, full.bound, full.at)
        assert [p.rate_rps for p in fast.points] == [p.rate_rps for p in full.points]
        stopped = [(f, p) for f, p in zip(fast.points, full.points, strict=True) if f.stopped]
        assert stopped  # at 60 req/s the queue grows from the start: the misses settle it early
        for f, p in stopped:
            assert p.slo_attainment <= f.slo_attainment < 0.99 and math.isnan(f.ttft_p99_ms)
        assert all(f == p for f, p in zip(fast.points, full.points, strict=True) if not f.stopped)
