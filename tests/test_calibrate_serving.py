"""``pdmux calibrate --bench-serving``: bench_serving's result files read, the serving terms fitted to them,
and simulate with the calibration reproducing the runs. The fixtures are written in bench_serving's own
format (``sglang/benchmark/serving.py`` ``benchmark``: the ``result`` dict, ``--output-details`` lists) from
runs of pdmux's simulator with known terms, so the fit has a truth to find."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from typer.testing import CliRunner

from pdmux_cli.costmodel.calibration_file import load_calibration
from pdmux_cli.cli import app
from pdmux_cli.util.errors import InputError
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.sglang.measurement_readers import parse_bench_serving
from pdmux_cli.simulate import serving_accuracy as sa
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.metrics import summarize
from pdmux_cli.simulate.runner import simulate
from pdmux_cli.simulate.schedulers import ChunkedPolicy
from pdmux_cli.simulate.traces import synthetic_trace

TRUTH = {"admission_delay_ms": 15.0, "per_request_overhead_ms": 0.03, "admission_interval_ms": 1.0}


def bench_serving_line(rate: float, concurrency: int, prompts: int, details: bool, seed: int = 42) -> dict:
    """One bench_serving result line for qwen3-8b on an H100 with the TRUTH terms (its keys as
    bench_serving writes them)."""
    trace = synthetic_trace(rate, "random:600", "random:120", prompts, None, seed)
    setup = make_setup(find_gpu("h100"), load_model("qwen3-8b"), ignore_eos=True, first_token_delay_ms=0,
                       **TRUTH)
    r = simulate(trace, setup, ChunkedPolicy(8192), max_concurrency=concurrency)
    m = summarize(r, 1e12, 1e12)
    fig = sa.client_metrics(m, trace)
    per = m.per_request
    line = {
        "tag": None, "backend": "sglang", "dataset_name": "random", "request_rate": rate if rate != math.inf
        else "inf", "max_concurrency": concurrency or None, "sharegpt_output_len": None,
        "random_input_len": 600, "random_output_len": 120, "random_range_ratio": 0.0,
        "server_info": {"tp_size": 1, "chunked_prefill_size": 8192, "disable_radix_cache": False,
                        "model_path": "Qwen/Qwen3-8B", "version": "0.5.23"},
        "duration": m.span_s, "completed": m.completed, "total_input_tokens": sum(trace.prompt_tokens),
        "total_input_text_tokens": sum(trace.prompt_tokens), "total_input_vision_tokens": 0,
        "total_output_tokens": sum(trace.output_tokens),
        "total_output_tokens_retokenized": sum(trace.output_tokens), "request_throughput": fig["request_rps"],
        "input_throughput": fig["input_tok_s"], "output_throughput": fig["output_tok_s"],
        "total_throughput": fig["total_tok_s"], "mean_e2e_latency_ms": statistics.mean(per["e2e_ms"]),
        "median_e2e_latency_ms": fig["e2e_p50_ms"], "mean_ttft_ms": statistics.mean(per["ttft_ms"]),
        "median_ttft_ms": fig["ttft_p50_ms"], "median_tpot_ms": fig["tpot_p50_ms"],
        "median_itl_ms": fig["itl_p50_ms"], "mean_itl_ms": fig["itl_p50_ms"], "p99_ttft_ms": m.ttft_ms["p99"],
        "concurrency": 1.0, "accept_length": None, "max_output_tokens_per_s": 0.0,
        "max_concurrent_requests": concurrency,
    }
    if details:
        line |= {"input_lens": list(trace.prompt_tokens), "output_lens": list(trace.output_tokens),
                 "ttfts": [x / 1e3 for x in per["ttft_ms"]], "itls": [[] for _ in per["ttft_ms"]],
                 "generated_texts": [""] * prompts, "errors": [""] * prompts}
    return line


@pytest.fixture(scope="module")
def result_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "sglang_0.5.23_result.jsonl"
    lines = [bench_serving_line(math.inf, 1, 8, details=True),
             bench_serving_line(math.inf, 24, 60, details=False),
             bench_serving_line(math.inf, 0, 80, details=True)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_reader_takes_what_bench_serving_writes(result_file) -> None:
    results, problems = parse_bench_serving(result_file.read_text() + "\nnot json\n[1]\n", "r.jsonl")
    assert problems == ["line 5: not JSON", "line 6: not a JSON object"]
    first, second, third = results
    assert (first.request_rate, first.max_concurrency, first.completed, first.dataset) == (
        math.inf, 1, 8, "random")
    assert len(first.input_lens) == 8 and second.input_lens == () and third.max_concurrency == 0
    assert set(first.metrics) == {"ttft_p50_ms", "itl_p50_ms", "tpot_p50_ms", "e2e_p50_ms", "output_tok_s",
                                  "total_tok_s", "input_tok_s", "request_rps"}
    assert first.server == {"tp_size": 1, "chunked_prefill_size": 8192, "disable_radix_cache": False,
                            "model_path": "Qwen/Qwen3-8B", "version": "0.5.23"}


def test_random_lengths_without_details_are_redrawn_with_the_seed_that_gives_the_totals(result_file) -> None:
    results, _ = parse_bench_serving(result_file.read_text(), "r.jsonl")
    runs, notes = sa.runs_from_bench_serving(results, "h100", "qwen3-8b")
    assert runs[1].lengths["seed"] == 42 and "seed 42 (the totals match)" in notes[1]
    assert runs[0].lengths["kind"] == "explicit" and "as sent" in notes[0]
    assert [r.tp for r in runs] == [1, 1, 1]
    with pytest.raises(InputError, match="--tp-size 1, not --tp 2"):
        sa.runs_from_bench_serving(results, "h100", "qwen3-8b", tp=2)


@pytest.mark.parametrize("text, problem", [
    ('{"request_rate": "trace", "completed": 3, "median_ttft_ms": 1}', "not a rate"),
    ('{"request_rate": 2, "completed": 0, "median_ttft_ms": 1}', "no completed requests"),
    ('{"request_rate": 2, "completed": 3}', "is a positive number"),
    ('{"request_rate": 2, "completed": 3, "median_ttft_ms": 5, "input_lens": [1, -2], "output_lens": [1, 2]}',
     "input_lens is not a list"),
])
def test_reader_refuses_lines_it_cannot_use(text, problem) -> None:
    with pytest.raises(InputError, match="no bench_serving run in it") as err:
        parse_bench_serving(text + "\n", "r.jsonl")
    assert problem in str(err.value)


def test_calibrate_recovers_the_terms_and_simulate_reproduces_the_runs(result_file, tmp_path) -> None:
    out = tmp_path / "calibration.yaml"
    r = CliRunner().invoke(app, ["calibrate", "--bench-serving", str(result_file), "--gpu", "h100", "--model",
                                 "qwen3-8b", "--workers", "1", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    got = data["terms"]
    assert got["admission_delay_ms"] == pytest.approx(TRUTH["admission_delay_ms"], abs=5)
    assert got["per_request_overhead_ms"] == pytest.approx(TRUTH["per_request_overhead_ms"], abs=0.011)
    assert got["admission_interval_ms"] == pytest.approx(TRUTH["admission_interval_ms"], abs=0.5)
    assert max(data["median_error"].values()) < 0.03
    cal = load_calibration(out)
    assert (cal.serving.runs == 3 and cal.whole_gpu is None
            and dict(cal.terms_from)["serving"].startswith("sglang"))
    # simulate with the calibration replays the first run's median TTFT
    first = bench_serving_line(math.inf, 1, 8, details=True)
    sim = CliRunner().invoke(app,
                             ["simulate", "--synthetic", "--qps", "inf", "--max-requests", "8",
                              "--prompt-tokens",
                                   "random:600", "--output-tokens", "random:120", "--seed", "42", "--gpu",
                                   "h100", "--policies", "chunked", "--max-concurrency", "1", "--ignore-eos",
                                   "--calibration", str(out), "--json"])
    assert sim.exit_code == 0, sim.output
    policy = json.loads(sim.stdout)["policies"][0]
    assert policy["itl_ms"]["p50"] == pytest.approx(first["median_itl_ms"], rel=0.03)
    assert policy["ttft_ms"]["p50"] == pytest.approx(first["median_ttft_ms"], rel=0.08)


@pytest.mark.parametrize("args, message", [
    (["--bench-serving", "missing.jsonl", "--gpu", "h100", "--model", "qwen3-8b"], "missing.jsonl"),
    (["--gpu", "h100", "--model", "qwen3-8b", "--workers", "2", "--sglang-log", "x.log"], "--workers"),
    (["--bench-serving", "a.jsonl", "--gpu", "h100"], "--model and --gpu"),
])
def test_calibrate_bench_serving_refusals(args, message, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.log").write_text("")
    r = CliRunner().invoke(app, ["calibrate", *args])
    assert r.exit_code == 2 and message in r.stderr, r.output


def test_a_calibration_keeps_its_residuals_and_narrows_the_intervals(result_file, tmp_path) -> None:
    """calibrate --bench-serving writes its fit's own residuals (ln(measured / predicted) per figure) into the
    calibration; simulate with it draws its intervals from them where a figure has 9 or more, else from the
    public runs' in-sample residuals: narrower than the out-of-sample ones either way (issue 29)."""
    from pdmux_cli.costmodel.calibration_file import load_calibration
    from pdmux_cli.costmodel import uncertainty as unc

    out = tmp_path / "cal.yaml"
    r = CliRunner().invoke(app, ["calibrate", "--bench-serving", str(result_file), "--gpu", "h100", "--model",
                                 "qwen3-8b", "-o", str(out), "--workers", "1"])
    assert r.exit_code == 0, r.output
    residuals = dict(load_calibration(out).serving.residuals)
    assert {"ttft_ms_p50", "output_tok_s"} <= set(residuals) and len(residuals["ttft_ms_p50"]) == 3
    base = ["simulate", "tests/fixtures/azure_conv_50.csv", "--policies", "chunked", "--json"]
    plain = json.loads(CliRunner().invoke(app, base).stdout)["policies"][0]["uncertainty"]
    cal = json.loads(CliRunner().invoke(app, [*base, "--calibration", str(out)]).stdout)["policies"][0]
    u = cal["uncertainty"]
    assert u["method"].startswith(unc.METHOD_CALIBRATION) or u["method"] == unc.METHOD_IN_SAMPLE
    # three runs a figure: the public runs' in-sample residuals, where TTFT's spread is half the
    # out-of-sample one (0.76 against 1.53 in log); ITL's and TPOT's are as wide either way (0.61
    # against 0.56)
    lo, hi = u["ttft_ms_p50"]
    plo, phi = plain["ttft_ms_p50"]
    assert hi / lo < 0.7 * phi / plo
