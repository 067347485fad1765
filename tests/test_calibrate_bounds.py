"""``pdmux calibrate`` bounds the work its input files may ask for (issue 34): the requests the serving fit
replays (``--max-replay-requests``), the points the whole-GPU fit takes (``--max-points``) and the
server-log lines read (``--max-log-lines``), each refused in one line before the work starts, saying the
bound and how to lift it (0: no limit)."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error, raised_input_error
from test_bench_serving_agreement import bench_serving_dump
from typer.testing import CliRunner

import pdmux
from pdmux_cli import messages
from pdmux_cli.cli import app
from pdmux_cli.sglang.measurement_readers import parse_bench_serving, parse_server_log
from pdmux_cli.workflows import calibrate as wf

FIX = Path(__file__).parent / "fixtures" / "sglang"
LOG = FIX / "model_made_server_0.5.23_h100_qwen3_8b.log"
ONE_BATCH = FIX / "model_made_one_batch_h100_qwen3_8b.jsonl"
COMMON = ["--gpu", "h100", "--model", "qwen3-8b"]


def huge_run(completed: int = 1_000_000) -> dict:
    """A random-dataset run whose figures agree (``--output-details`` off): ``completed`` requests of 1,000
    prompt and 1,000 output tokens at 1,000 req/s."""
    duration = completed / 1000
    return {"backend": "sglang", "dataset_name": "random", "request_rate": "inf", "max_concurrency": 256,
            "random_input_len": 1000, "random_output_len": 1000, "random_range_ratio": 1.0,
            "server_info": {"tp_size": 1, "version": "0.5.23"}, "duration": duration,
            "completed": completed, "total_input_tokens": completed * 1000,
            "total_output_tokens": completed * 1000, "request_throughput": 1000.0,
            "input_throughput": 1e6, "output_throughput": 1e6, "total_throughput": 2e6,
            "median_ttft_ms": 900.0, "median_itl_ms": 30.0}


def _write(path: Path, *lines: dict) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_the_defaults_and_what_one_run_costs() -> None:
    assert (wf.DEFAULT_MAX_REPLAY_REQUESTS, wf.DEFAULT_MAX_POINTS, wf.DEFAULT_MAX_LOG_LINES) == (
        100_000, 20_000, 4_000_000)
    assert wf.replays_per_run() == 71  # shipped terms, start, 2 passes x (12 + 13 + 9) trials, residuals
    request = wf.CalibrateRequest()
    assert (request.max_replay_requests, request.max_points, request.max_log_lines) == (
        100_000, 20_000, 4_000_000)


def test_a_million_request_run_is_refused_at_once_by_the_cli(tmp_path) -> None:
    path = _write(tmp_path / "run.jsonl", huge_run())
    start = time.perf_counter()
    r = CliRunner().invoke(app, ["calibrate", "--bench-serving", str(path), *COMMON])
    assert time.perf_counter() - start < 20  # nothing drawn, nothing replayed
    assert_one_line_error(r, 2, "the bench_serving runs ask for 1,000,000 requests of replay (1 run(s) "
                                "of 1,000,000 requests, each run counted as at least 100; the largest, "
                                f"{path}:1, 1,000,000), more than the 100,000 calibrate replays at most (the "
                                "serving fit replays every run 71 times")
    assert "raise the bound with --max-replay-requests N (0: no limit)" in r.stderr


def test_the_api_refuses_it_too_naming_its_keyword(tmp_path) -> None:
    path = _write(tmp_path / "run.jsonl", huge_run())
    start = time.perf_counter()
    err = raised_input_error(pdmux.calibrate, bench_serving=[path], gpu="h100", model="qwen3-8b")
    assert time.perf_counter() - start < 20
    assert err.param == "max_replay_requests"
    assert messages.api_error_text(err).endswith("raise the bound with max_replay_requests N (0: no limit)")
    # the issue's line (a billion completed beside 17,485 input tokens in 2 s) never gets that far
    issue = {**huge_run(), "completed": 1_000_000_000, "total_input_tokens": 17485, "duration": 2}
    err = raised_input_error(pdmux.calibrate, bench_serving=[_write(tmp_path / "issue.jsonl", issue)],
                             gpu="h100", model="qwen3-8b", max_replay_requests=0)
    assert err.param == "bench_serving"
    assert "request_throughput 1000 req/s is not completed / duration" in str(err)


def test_runs_count_their_setup_and_the_total_is_over_every_file(tmp_path) -> None:
    small = bench_serving_dump()  # 7 requests: counts as 100
    results, _ = parse_bench_serving(json.dumps(small) + "\n" + json.dumps(huge_run(150)) + "\n", "r.jsonl")
    assert [r.requests for r in results] == [7, 150]
    wf.check_replay_work(results, 250)  # 100 + 150
    err = raised_input_error(wf.check_replay_work, results, 249)
    assert str(err).startswith("the bench_serving runs ask for 250 requests of replay (2 run(s) of 157 "
                               "requests, each run counted as at least 100; the largest, r.jsonl:2, 150)")
    wf.check_replay_work(results * 1000, 0)  # 0: no limit
    a, b = _write(tmp_path / "a.jsonl", small), _write(tmp_path / "b.jsonl", huge_run(150))
    r = CliRunner().invoke(app, ["calibrate", "--bench-serving", str(a), "--bench-serving", str(b), *COMMON,
                                 "--max-replay-requests", "200"])
    assert_one_line_error(r, 2, "ask for 250 requests of replay")


def test_a_run_within_the_bound_is_fitted(tmp_path) -> None:
    path = _write(tmp_path / "run.jsonl", bench_serving_dump())
    r = CliRunner().invoke(app, ["calibrate", "--bench-serving", str(path), *COMMON, "--workers", "1",
                                 "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["runs"] == 1


@pytest.mark.parametrize("option", ["--max-replay-requests", "--max-points", "--max-log-lines"])
def test_a_bound_is_a_whole_number_from_0(option) -> None:
    r = CliRunner().invoke(app, ["calibrate", "--sglang-bench", str(ONE_BATCH), *COMMON, option, "-1"])
    assert_one_line_error(r, 2, f"{option} must be a whole number >= 0 (0: no limit), got -1")


def test_merge_takes_no_bound() -> None:
    r = CliRunner().invoke(app, ["calibrate", "--merge", "a.yaml", "--merge", "b.yaml", "--max-points", "5"])
    assert_one_line_error(r, 2, "--merge joins two calibration files and takes no --max-points")


def test_a_log_is_read_up_to_the_bound_over_every_log(tmp_path) -> None:
    lines = LOG.read_text().splitlines(keepends=True)
    assert len(lines) == 300
    big = tmp_path / "big.log"
    big.write_text("".join(lines * 5))
    r = CliRunner().invoke(app, ["calibrate", "--sglang-log", str(big), *COMMON, "--max-log-lines", "1000"])
    assert_one_line_error(r, 2, f"{big}: more than the 1,000 server-log lines calibrate reads at most (1,000 "
                                "read, with the logs before it")
    assert "raise the bound with --max-log-lines N (0: no limit)" in r.stderr
    # two logs of 300 lines: the second passes the bound of 500 on its 201st line
    second = tmp_path / "second.log"
    second.write_text("".join(lines))
    r = CliRunner().invoke(app, ["calibrate", "--sglang-log", str(LOG), "--sglang-log", str(second), *COMMON,
                                 "--max-log-lines", "500"])
    assert_one_line_error(r, 2, f"{second}: more than the 500 server-log lines calibrate reads at most (500 "
                                "read")
    r = CliRunner().invoke(app, ["calibrate", "--sglang-log", str(LOG), "--sglang-log", str(second), *COMMON,
                                 "--max-log-lines", "600", "--json"])
    assert r.exit_code == 0, r.output


def test_an_endless_log_stops_at_the_bound() -> None:
    line = ("[2026-11-30 09:00:00 TP0] Decode batch, #running-req: 19, #token: 36600, token usage: 0.12, "
            "cuda graph: True, gen throughput (token/s): 1543.93, #queue-req: 0\n")
    start = time.perf_counter()
    err = raised_input_error(parse_server_log, itertools.repeat(line), "endless.log", max_lines=50_000)
    assert time.perf_counter() - start < 20
    assert err.param == "max_log_lines"
    assert str(err).startswith("endless.log: more than the 50,000 server-log lines calibrate reads at most "
                               "(50,000 read")


def test_one_batch_points_past_the_bound_are_refused_before_the_fit(tmp_path) -> None:
    rows = ONE_BATCH.read_text().splitlines(keepends=True)  # 11 results, 22 points
    r = CliRunner().invoke(app, ["calibrate", "--sglang-bench", str(ONE_BATCH), *COMMON, "--max-points",
                                 "20"])
    assert_one_line_error(r, 2, f"22 points to fit (22 from {ONE_BATCH}), more than the 20 calibrate fits at "
                                "most (about 6 ms each")
    assert "raise the bound with --max-points N (0: no limit)" in r.stderr
    # a file of 10,010 results (20,020 points) by default, quickly, through the API
    big = tmp_path / "big.jsonl"
    big.write_text("".join(rows * 910))
    start = time.perf_counter()
    err = raised_input_error(pdmux.calibrate, sglang_bench=[big], gpu="h100", model="qwen3-8b")
    assert time.perf_counter() - start < 30
    assert err.param == "max_points"
    assert messages.api_error_text(err).startswith(
        f"20,020 points to fit (20,020 from {big}), more than the 20,000 calibrate fits at most")
    # with the log's groups, counted apart
    r = CliRunner().invoke(app, ["calibrate", "--sglang-bench", str(ONE_BATCH), "--sglang-log", str(LOG),
                                 *COMMON, "--max-points", "22"])
    assert_one_line_error(r, 2, f"100 points to fit (78 from server logs, 22 from {ONE_BATCH}), more than "
                                "the 22 calibrate fits at most")
