"""A bench_serving result line is replayed only when its own figures agree as bench_serving computes them
(issue 34: a line saying ``"completed": 1000000000`` beside 17,485 input tokens and a 2 s duration made
calibrate simulate a billion requests).

The lines here are made by :func:`bench_serving_dump`, a transcription of SGLang 0.5.23's
``sglang/benchmark/serving.py`` (``calculate_metrics`` and the ``result`` / ``result_details`` dicts of
``benchmark``, ``json.dumps``), from per-request outputs; and one is the rounded printout of a real run.
"""

from __future__ import annotations

import json
import statistics

import pytest
from cli_assertions import assert_one_line_error, raised_input_error
from typer.testing import CliRunner

from pdmux_cli.cli import app
from pdmux_cli.sglang.measurement_readers import (
    bench_serving_disagreements,
    parse_bench_serving,
    written_half_unit,
)

#: Per request: (prompt_len, output_len, ttft s, itl s list, latency s, error); a failed request has an
#: error, output_len 0 and ttft 0 (``RequestFuncOutput``'s defaults).
OUTPUTS = [
    (612, 120, 0.0412, [0.0071, 0.0069, 0.0074], 0.91, ""),
    (598, 118, 0.0398, [0.0070, 0.0072], 0.88, ""),
    (640, 0, 0.0, [], 0.0, "Bad Gateway: upstream"),
    (605, 121, 0.0455, [0.0068, 0.0075, 0.0071, 0.0070], 0.93, ""),
    (587, 119, 0.0431, [0.0073], 0.90, ""),
    (620, 120, 0.0388, [0.0069, 0.0071], 0.87, ""),
    (611, 122, 0.0420, [0.0072, 0.0070, 0.0076], 0.92, ""),
    (603, 120, 0.0401, [0.0074], 0.89, ""),
]
DURATION_S = 3.7318204350024462


def bench_serving_dump(outputs=OUTPUTS, duration: float = DURATION_S, details: bool = True) -> dict:
    """The JSON object bench_serving appends to ``--output-file`` for these outputs (SGLang 0.5.23
    ``calculate_metrics``: totals and medians over the successful requests, ``total_output =
    sum(output_lens)`` with 0 for a failed one, each throughput a count over ``dur_s``; numpy's median is
    ``statistics.median``'s)."""
    ok = [o for o in outputs if not o[5]]
    output_lens = [o[1] if not o[5] else 0 for o in outputs]
    total_input = sum(o[0] for o in ok)
    itls = [x for o in ok for x in o[3]]
    result = {
        "tag": None, "backend": "sglang", "dataset_name": "random", "request_rate": 4.0,
        "max_concurrency": 16, "sharegpt_output_len": None, "random_input_len": 620,
        "random_output_len": 122, "random_range_ratio": 0.9,
        "server_info": {"tp_size": 1, "version": "0.5.23", "model_path": "Qwen/Qwen3-8B"},
        "duration": duration, "completed": len(ok), "total_input_tokens": total_input,
        "total_input_text_tokens": total_input, "total_input_vision_tokens": 0,
        "total_output_tokens": sum(output_lens), "total_output_tokens_retokenized": sum(output_lens),
        "request_throughput": len(ok) / duration, "input_throughput": total_input / duration,
        "output_throughput": sum(output_lens) / duration,
        "total_throughput": (total_input + sum(output_lens)) / duration,
        "mean_e2e_latency_ms": statistics.mean(o[4] for o in ok) * 1000,
        "median_e2e_latency_ms": statistics.median(o[4] for o in ok) * 1000,
        "mean_ttft_ms": statistics.mean(o[2] for o in ok) * 1000,
        "median_ttft_ms": statistics.median(o[2] for o in ok) * 1000,
        "median_tpot_ms": statistics.median((o[4] - o[2]) / (o[1] - 1) for o in ok) * 1000,
        "mean_itl_ms": statistics.mean(itls) * 1000, "median_itl_ms": statistics.median(itls) * 1000,
        "concurrency": sum(o[4] for o in ok) / duration, "accept_length": None,
    }
    if details:
        result |= {"input_lens": [o[0] for o in outputs], "output_lens": output_lens,
                   "ttfts": [o[2] for o in outputs], "itls": [o[3] for o in outputs],
                   "generated_texts": ["..."] * len(outputs), "errors": [o[5] for o in outputs]}
    return result


def _parse(*lines: dict):
    return parse_bench_serving("".join(json.dumps(x) + "\n" for x in lines), "r.jsonl")


def test_a_line_as_bench_serving_writes_it_is_read() -> None:
    line = bench_serving_dump()
    assert bench_serving_disagreements(line) == []
    (run,), problems = _parse(line)
    assert problems == []
    # the failed request is left out of the lengths replayed; completed is the 7 that succeeded
    assert run.completed == 7 and run.requests == 7
    assert run.input_lens == (612, 598, 605, 587, 620, 611, 603)
    assert run.output_lens == (120, 118, 121, 119, 120, 122, 120)
    assert run.total_input_tokens == 4236 and run.total_output_tokens == 840
    assert run.metrics["request_rps"] == pytest.approx(7 / DURATION_S)
    assert run.metrics["ttft_p50_ms"] == pytest.approx(41.2)
    assert run.metrics["itl_p50_ms"] == pytest.approx(7.1)
    (plain,), _ = _parse(bench_serving_dump(details=False))
    assert plain.input_lens == () and plain.requests == 7


def test_the_rounded_printout_of_a_real_run_agrees() -> None:
    """SGLang's printed summary of a real run (WILLIAM-qmul/SGLang-dLoRA, sglang+dLoRA/lora/migration_ilp/
    dlora_results.md, request rate 2: 996 successful requests in 264.25 s), written back as a result line
    with its figures rounded to 2 decimals: every throughput agrees within that rounding."""
    line = {"backend": "sglang", "dataset_name": "sharegpt", "request_rate": 2.0, "duration": 264.25,
            "completed": 996, "total_input_tokens": 342460, "total_output_tokens": 218257,
            "request_throughput": 3.77, "input_throughput": 1295.95, "output_throughput": 825.94,
            "total_throughput": 2121.89, "median_e2e_latency_ms": 606.86, "median_ttft_ms": 606.88}
    assert bench_serving_disagreements(line) == []
    (run,), _ = _parse(line)
    assert (run.completed, run.metrics["output_tok_s"]) == (996, 825.94)
    # one hundredth more than the figures allow is refused
    assert [d.split(" ")[0] for d in bench_serving_disagreements({**line, "request_throughput": 3.79})] == [
        "request_throughput"]


def test_written_half_unit_is_the_last_decimal_written() -> None:
    assert written_half_unit(8.74) == pytest.approx(0.005)
    assert written_half_unit(2) == 0.5
    assert written_half_unit(264.25) == pytest.approx(0.005)
    assert written_half_unit(1e-05) == pytest.approx(5e-06)
    assert written_half_unit(DURATION_S) < 1e-15


def _with(**changes) -> dict:
    line = bench_serving_dump()
    for key, value in changes.items():
        if value is None:
            line.pop(key)
        else:
            line[key] = value
    return line


def _details_changed(key: str, index: int, value) -> dict:
    line = bench_serving_dump()
    line[key] = list(line[key])
    line[key][index] = value
    return line


@pytest.mark.parametrize("line, fields", [
    # the line: a billion completed beside 17,485 input tokens and 2 s
    ({**bench_serving_dump(details=False), "completed": 1_000_000_000, "total_input_tokens": 17485,
      "duration": 2}, ["request_throughput", "completed / duration", "input_throughput",
                       "total_input_tokens / duration"]),
    (_with(output_throughput=300.0), ["output_throughput", "total_output_tokens / duration"]),
    (_with(input_throughput=1.5), ["input_throughput", "total_input_tokens / duration"]),
    (_with(total_throughput=10.0), ["total_throughput",
                                    "(total_input_tokens + total_output_tokens) / duration"]),
    (_with(duration=7.5), ["request_throughput", "input_throughput", "output_throughput",
                           "total_throughput"]),
    # no duration: the others against the one request_throughput implies
    (_with(duration=None, output_throughput=400.0),
     ["output_throughput 400 tok/s is not total_output_tokens / duration (none written: completed / "
      "request_throughput) = 840 / 3.73182 s = 225.091"]),
    (_with(completed=8, request_throughput=8 / DURATION_S),
     ["completed 8 is not the 7 requests with no error"]),
    (_details_changed("output_lens", 0, 130), ["total_output_tokens 840 is not the sum of output_lens 850"]),
    (_details_changed("input_lens", 1, 700), ["total_input_tokens 4,236 is not the sum of input_lens"]),
    (_with(ttfts=[0.04] * 7), ["input_lens (8)", "ttfts (7)", "differ in length"]),
    (_with(median_ttft_ms=45.0), ["median_ttft_ms 45 is not the median of ttfts", "41.2 ms"]),
    (_with(median_itl_ms=9.0), ["median_itl_ms 9 is not the median of itls", "7.1 ms"]),
])
def test_each_disagreement_is_refused_naming_the_file_line_and_fields(line, fields) -> None:
    good = bench_serving_dump()
    text = "".join(json.dumps(x) + "\n" for x in (good, {}, line)).replace("{}\n", "\n")
    err = raised_input_error(parse_bench_serving, text, "r.jsonl")
    message = str(err)
    assert message.startswith("r.jsonl, line 3: bench_serving's own figures disagree (")
    assert err.param == "bench_serving"
    for field in fields:
        assert field in message, (field, message)


def test_retokenized_itls_are_not_held_to_the_median() -> None:
    """With speculative decoding on an OpenAI-compatible backend bench_serving re-tokenises the ITLs
    (``use_retokenized_itl``), so median_itl_ms is not the median of itls."""
    line = _with(median_itl_ms=3.2, accept_length=2.4, backend="sglang-oai")
    assert bench_serving_disagreements(line) == []
    assert bench_serving_disagreements({**line, "backend": "sglang"})[0].startswith("median_itl_ms 3.2")


def test_malformed_time_lists_are_lines_not_used() -> None:
    runs, problems = _parse(bench_serving_dump(), _with(ttfts=["fast"] * 8), _with(itls=[0.1] * 8))
    assert len(runs) == 1
    assert problems == ["line 2: ttfts is not a list of times (s)",
                        "line 3: itls is not a list of lists of times (s)"]


def test_the_cli_refuses_a_disagreeing_file_in_one_line(tmp_path) -> None:
    path = tmp_path / "run.jsonl"
    lines = (bench_serving_dump(), _with(output_throughput=300.0))
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = CliRunner().invoke(app, ["calibrate", "--bench-serving", str(path), "--gpu", "h100", "--model",
                                 "qwen3-8b"])
    assert_one_line_error(r, 2, f"{path}, line 2: bench_serving's own figures disagree (output_throughput "
                                "300 tok/s is not total_output_tokens / duration")
