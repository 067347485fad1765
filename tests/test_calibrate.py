"""pdmux calibrate: SGLang's one-batch results and server logs read, the whole-GPU fit, the merge, the CLI.

Fixtures in tests/fixtures/sglang/ (SOURCES.md cites each): excerpts of public SGLang logs, files
written in SGLang 0.5.23's formats, and ``model_made_*`` files timed by the roofline model with known
terms (``benchmarks/bench_calibrate.py``: KV reads x0.8, +1.5 ms per decode step, GEMM compute x0.9,
prefill attention x1.1).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.costmodel.calibration_file import Calibration, dump_calibration, load_calibration
from pdmux_cli.cli import app
from pdmux_cli.messages import render_all
from pdmux_cli.costmodel import build_step_model
from pdmux_cli.costmodel.whole_gpu_fit import (
    CalPoint,
    _scaled,
    _with,
    check_points,
    fit_whole_gpu,
    points_from,
    predict,
)
from pdmux_cli.util.errors import InputError
from pdmux_cli.planning.estimate import Scenario, estimate
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.sglang.measurement_readers import (
    DecodeInterval,
    parse_one_batch,
    parse_server_log,
    read_one_batch,
    read_server_log,
)

FIXTURES = Path(__file__).parent / "fixtures" / "sglang"
MADE_LOG = FIXTURES / "model_made_server_0.5.23_h100_qwen3_8b.log"
MADE_BENCH = FIXTURES / "model_made_one_batch_h100_qwen3_8b.jsonl"
runner = CliRunner()


# --------------------------------------------------------------------------------------------------
# one-batch results


def test_one_batch_fixture_read_as_written() -> None:
    points, problems = read_one_batch(FIXTURES / "synthetic_one_batch_0.5.23.jsonl")
    assert problems == [] and len(points) == 3
    first = points[0]
    assert (first.batch_size, first.input_len, first.output_len) == (1, 1024, 16)
    assert first.prefill_s == pytest.approx(0.021873412001878024)
    assert first.decode_step_s == pytest.approx(0.006103339272964078)
    assert first.decode_context == 1024 + 7 + 1  # the median of 15 timed steps, the 8th, after 1 token
    assert first.run_name == "h200_llama8b"


def test_one_batch_without_decode_steps() -> None:
    (point,), _ = read_one_batch(FIXTURES / "synthetic_one_batch_0.5.23_output_len_1.jsonl")
    assert point.output_len == 1 and point.decode_step_s is None


def test_one_batch_stdout_is_not_the_result_file() -> None:
    for name in ("synthetic_one_batch_0.5.23_stdout.txt",
                 "public_sglang_pr_30147_one_batch_stdout_mlx_qwen3_0.6b.txt"):
        with pytest.raises(InputError, match="--result-filename"):
            read_one_batch(FIXTURES / name)


def test_one_batch_bad_lines_are_counted() -> None:
    good = ('{"batch_size": 8, "input_len": 512, "output_len": 4, "prefill_latency": 0.05, '
            '"median_decode_latency": 0.01}')
    text = "\n".join([good, "{not json", "[1, 2]", ('{"batch_size": 0, "input_len": 512, "output_len": 4, '
                      '"prefill_latency": 0.05}'), ('{"batch_size": 8, "input_len": 512, "output_len": 4, '
                      '"prefill_latency": "fast"}'), ('{"batch_size": 8, "input_len": 512, "output_len": 4, '
                      '"prefill_latency": 0.05, "median_decode_latency": -1}'), "", "[" * 100_000])
    points, problems = parse_one_batch(text, "x.jsonl")
    assert len(points) == 1 and points[0].decode_step_s == 0.01
    assert len(problems) == 6
    assert (problems[0] == "line 2: not JSON" and "batch_size" in problems[2]
            and "prefill_latency" in problems[3])
    with pytest.raises(InputError, match="no one-batch result"):
        parse_one_batch("", "empty.jsonl")


# --------------------------------------------------------------------------------------------------
# server logs

#: file: (lines, decode lines, prefill lines, retractions, clean intervals, skipped by reason)
LOGS = {
    "public_sglang_issue_15869_deepseek_v3_2025_12.log": (8, 5, 1, 0, 4, {"first of its rank": 1}),
    "public_sglang_issue_3909_deepseek_r1_tp16_2nodes.log": (9, 9, 0, 0, 8, {"first of its rank": 1}),
    "public_sglang_issue_4417_h100x16_deepseek_r1_eagle.log": (2, 1, 1, 0, 0, {"speculative decoding": 1}),
    "public_sglang_issue_4759_deepseek_r1_tp8_eagle.log": (9, 1, 8, 0, 0, {"speculative decoding": 1}),
    "public_sglang_issue_5429_h100x16_deepseek_r1_dp_attention.log": (
        5, 1, 0, 0, 0, {"first of its rank": 1}),
    "public_sglang_issue_938_a100_llama2_13b.log": (1, 1, 0, 0, 0, {"first of its rank": 1}),
    "public_sglang_pr_11854_h20_96g_deepseek_r1_pd_decode_custom_logfmt.log": (4, 4, 0, 0, 0,
                                                                               {"speculative decoding": 4}),
    "public_sglang_pr_22166_2026_04_no_rank_prefix.log": (7, 1, 3, 0, 0, {"first of its rank": 1}),
    "public_sglang_pr_22331_2026_04_tp0_constant_batch.log": (4, 4, 0, 0, 3, {"first of its rank": 1}),
    # three servers (two Ray engines by pid, one DP/TP/EP rank) in one file: each line is the first of its own
    "public_sglang_test_log_parser_ray_prefix_2025_10.log": (3, 3, 0, 0, 0, {"first of its rank": 3}),
    "synthetic_server_0.5.23_field_variants.log": (16, 9, 5, 2, 0, {
        "speculative decoding": 1, "prefill or retraction in the interval": 5, "first of its rank": 1,
        "missing fields": 1, "not a CUDA GPU": 1}),
    "synthetic_server_0.5.23_tp2.log": (31, 16, 9, 2, 7, {
        "first of its rank": 3, "prefill or retraction in the interval": 5, "batch size changed": 1}),
    "model_made_server_0.5.23_h100_qwen3_8b.log": (300, 245, 51, 2, 188, {
        "first of its rank": 1, "prefill or retraction in the interval": 43, "batch size changed": 13}),
}


@pytest.mark.parametrize("name", sorted(LOGS))
def test_server_log_fixtures(name: str) -> None:
    r = read_server_log(FIXTURES / name)
    lines, decode, prefill, retract, clean, skipped = LOGS[name]
    assert (r.lines, r.decode_lines, r.prefill_lines, r.retractions, len(r.intervals)) == (
        lines, decode, prefill, retract, clean)
    assert dict(r.skipped) == skipped
    assert sum(r.skipped.values()) + len(r.intervals) == r.decode_lines
    assert all(1e-5 < i.step_s < 10 and i.context > 0 for i in r.intervals)


def test_constant_batch_interval_values() -> None:
    """The public excerpt of SGLang PR 22331: 5 requests, 20,800 tokens, 140.27 tokens/s."""
    r = read_server_log(FIXTURES / "public_sglang_pr_22331_2026_04_tp0_constant_batch.log")
    first = r.intervals[0]
    assert (first.running, first.context, first.cuda_graph) == (5, 4160.0, True)
    assert first.step_s == pytest.approx(5 / 140.27)
    assert first.where.endswith(":2")


def test_log_without_decode_lines_is_refused() -> None:
    with pytest.raises(InputError, match="no 'Decode batch' line"):
        read_server_log(FIXTURES / "public_sglang_issue_2255_prefill_cache_hit_rate_field.log")


def _decode(rank: str, running: int, tokens: int, throughput: float) -> str:
    prefix = f"[2026-10-30 10:00:00 {rank}] " if rank else "[2026-10-30 10:00:00] "
    return (f"{prefix}Decode batch, #running-req: {running}, #token: {tokens}, token usage: 0.10, cuda "
            f"graph: True, gen throughput (token/s): {throughput:.2f}, #queue-req: 0\n")


def test_interleaved_ranks_are_read_apart() -> None:
    lines = []
    for _ in range(4):
        lines += [_decode("DP0 TP0", 32, 65536, 1600.0), _decode("DP1 TP1", 8, 8192, 800.0)]
    r = parse_server_log(lines, "x.log")
    assert len(r.intervals) == 6 and r.skipped == {"first of its rank": 2}
    assert {(i.running, i.step_s) for i in r.intervals} == {(32, 0.02), (8, 0.01)}


def test_hostile_lines_are_counted_not_fatal() -> None:
    cut = _decode("TP0", 32, 65536, 1600.0)[:70] + "\n"  # a line cut in the middle
    lines = [_decode("TP0", 32, 65536, 1600.0), "Decode batch, " + "x" * 200_000 + "\n", cut,
             _decode("TP0", 32, 65536, 1600.0), _decode("TP0", 32, 65536, 1600.0),
             _decode("TP0", 0, 0, 0.0), "\x00\xff" * 50 + "\n", _decode("TP0", 32, 66000, 1600.0)]
    r = parse_server_log(lines, "x.log")
    assert r.decode_lines == 7 and len(r.intervals) == 2  # the two after the cut line: G spans from it
    assert dict(r.skipped) == {"first of its rank": 1, "line too long": 1, "missing fields": 1,
                               "empty batch": 1, "batch size changed": 1}


def test_binary_and_utf16_files_are_one_error(tmp_path) -> None:
    path = tmp_path / "core.bin"
    path.write_bytes(bytes(range(256)) * 4000)
    with pytest.raises(InputError, match="not UTF-8 text"):
        read_server_log(path)
    path.write_bytes(MADE_LOG.read_text().encode("utf-16"))
    with pytest.raises(InputError, match="UTF-16"):
        read_server_log(path)
    # no newline, no NUL: one long line, read in bounded pieces
    path.write_bytes(bytes(b for b in range(1, 256) if b != 10) * 4000)
    with pytest.raises(InputError, match="no 'Decode batch' line in 1 line"):
        read_server_log(path)


def test_multi_gpu_logs_are_told_apart() -> None:
    assert read_server_log(MADE_LOG).tp_size == 1
    assert read_server_log(FIXTURES / "synthetic_server_0.5.23_tp2.log").tp_size == 2
    # DP attention: every rank logs (DP6 TP6 -> at least 7 ranks); plain TP logs from TP0 only, so a log cut
    # before the server's arguments is caught by the plausibility checks instead
    assert read_server_log(FIXTURES / "public_sglang_test_log_parser_ray_prefix_2025_10.log").tp_size == 7
    assert read_server_log(FIXTURES / "public_sglang_issue_3909_deepseek_r1_tp16_2nodes.log").tp_size == 1
    args = parse_server_log(["[2026-11-30 09:00:00] server_args=ServerArgs(model_path='x', tp_size=4, "
                             "dp_size=1)\n",
                             _decode("", 8, 8192, 800.0)], "x.log")
    assert args.tp_size == 4


# --------------------------------------------------------------------------------------------------
# the fit


def _truth(gpu: str, model: str, kv: float, fixed: float, gemm: float, attention: float):
    base = build_step_model(find_gpu(gpu), load_model(model))
    return base, _with(base, _scaled(base.eff, 1.0, kv, gemm, attention), fixed)


def _made_points(truth) -> list[CalPoint]:
    points = []
    for batch, tokens in ((1, 512), (1, 8192), (4, 2048), (8, 512)):
        p = CalPoint("prefill", "one-batch", batch, tokens, 1.0)
        points.append(CalPoint("prefill", "one-batch", batch, tokens, predict(truth, p)))
    for batch, context in ((1, 1024), (8, 2048), (32, 4096), (64, 1024), (16, 8192)):
        p = CalPoint("decode", "one-batch", batch, context, 1.0)
        points.append(CalPoint("decode", "one-batch", batch, context, predict(truth, p)))
    return points


@pytest.mark.parametrize("gpu, model, kv, fixed, gemm, attention", [
    ("h100", "qwen3-8b", 0.8, 1.5e-3, 0.9, 1.1),
    ("a100", "llama-3.1-8b", 1.2, 0.4e-3, 1.05, 0.7),
    ("h200", "qwen3-32b", 0.65, 3.0e-3, 0.8, 1.0),
])
def test_fit_recovers_the_terms_points_were_made_with(gpu, model, kv, fixed, gemm, attention) -> None:
    base, truth = _truth(gpu, model, kv, fixed, gemm, attention)
    fit = fit_whole_gpu(base, _made_points(truth))
    t = fit.terms
    assert t.kv_bandwidth_efficiency == pytest.approx(truth.eff.decode_attention.bandwidth_efficiency,
                                                      rel=0.02)
    assert t.decode_fixed_s == pytest.approx(fixed, rel=0.02)
    assert t.gemm_peak_efficiency == pytest.approx(truth.eff.gemm.peak_efficiency, rel=0.02)
    assert t.attention_peak_efficiency == pytest.approx(truth.eff.prefill_attention.peak_efficiency, rel=0.02)
    assert t.gemm_bandwidth_efficiency == base.eff.gemm.bandwidth_efficiency  # kept: see the module docstring
    assert t.median_error < 0.02 < t.uncalibrated_median_error
    assert fit.decode_mode == "KV read efficiency and a fixed time per step"
    assert fit.prefill_mode == "GEMM and attention compute"


def test_points_of_one_size_fit_only_what_they_can() -> None:
    base, truth = _truth("h100", "qwen3-8b", 0.8, 2e-3, 0.9, 0.9)
    decode = CalPoint("decode", "one-batch", 16, 2048, 1.0)
    prefill = CalPoint("prefill", "one-batch", 1, 2048, 1.0)
    points = [CalPoint("decode", "one-batch", 16, 2048, predict(truth, decode)),
              CalPoint("prefill", "one-batch", 1, 2048, predict(truth, prefill))]
    fit = fit_whole_gpu(base, points)
    assert fit.decode_mode == "fixed time per step" and fit.prefill_mode == "one compute scale"
    assert fit.terms.kv_bandwidth_efficiency == base.eff.decode_attention.bandwidth_efficiency
    assert [n.code for n in fit.notes] == ["fit.decode_fixed_time_only", "fit.prefill_one_scale"]
    assert any("same KV cache" in n for n in render_all(fit.notes))
    assert any("too alike" in n for n in render_all(fit.notes))
    assert [r.calibrated_s for r in fit.rows] == pytest.approx([p.measured_s for p in points], rel=0.01)


def test_server_log_intervals_are_grouped_by_batch_and_context() -> None:
    intervals = [DecodeInterval(32, 2000 + i, 0.02 + i * 1e-4, True, f"x.log:{i}") for i in range(5)]
    intervals += [DecodeInterval(32, 4000, 0.03, True, "x.log:9"),
                  DecodeInterval(16, 2000, 0.015, None, "x.log:10")]
    points = points_from([], intervals)
    assert [(p.batch, p.tokens, p.measured_s, p.count) for p in points] == [
        (16, 2000, 0.015, 1), (32, 2002, pytest.approx(0.0202), 5), (32, 4000, 0.03, 1)]
    assert points[1].where == "x.log:0 and 4 more"


def test_points_that_cannot_be_this_model_and_gpu_are_refused() -> None:
    base = build_step_model(find_gpu("h100"), load_model("qwen3-8b"))
    gpu = find_gpu("h100")
    with pytest.raises(InputError, match="do not fit Qwen3-8B"):
        check_points(base, gpu, [CalPoint("decode", "one-batch", 64, 8192, 0.05, "b.jsonl:3")])
    with pytest.raises(InputError, match="past Qwen3-8B's"):
        check_points(base, gpu, [CalPoint("decode", "one-batch", 1, 50_000, 0.05, "b.jsonl:3")])
    fine = predict(base, CalPoint("decode", "one-batch", 8, 1024, 1.0))
    with pytest.raises(InputError, match="another model, GPU or tensor parallelism"):
        check_points(base, gpu, [CalPoint("decode", "one-batch", 8, 1024, fine * 6, "b.jsonl:1")])
    log = [CalPoint("decode", "server log", 8, 1024 + i, fine * 1.1, f"a:{i}") for i in range(10)]
    kept, notes = check_points(base, gpu, [*log, CalPoint("decode", "server log", 8, 1536, fine * 9, "a:99")])
    assert (kept == log
            and render_all(notes) == [
                "1 point(s) more than 2.5x from the model left out as outliers (first: a:99)"])
    with pytest.raises(InputError, match="2 of 11 points are more than 2.5x"):  # over 10%: not outliers
        check_points(base, gpu,
                     [*log[:9], *(CalPoint("decode", "server log", 8, 1536, fine * 9, "a:99"),) * 2])


@pytest.mark.parametrize("gpu, text", [
    # an H100's times on a B200: far too slow for it (the KV reads a third of what a B200 reaches)
    ("b200", "3.0x below what B200 180GB (HGX/DGX) reaches"),
    ("h100-pcie", "above the datasheet's peak"),  # on a slower H100: faster than that GPU can be
    ("h20", "0.18x the model at the median"),
])
def test_another_gpus_times_are_refused(gpu, text) -> None:
    r = runner.invoke(app, ["calibrate", "--sglang-bench", str(MADE_BENCH), "--sglang-log", str(MADE_LOG),
                            "--model", "qwen3-8b", "--gpu", gpu])
    assert_one_line_error(r, 2, text)


def test_implausible_fits_are_refused() -> None:
    base = build_step_model(find_gpu("h100"), load_model("qwen3-8b"))
    slow = _with(base, _scaled(base.eff, 1.0, 0.35, 1.0, 1.0))  # KV reads at 0.35x: past 1 / 2.5
    points = [CalPoint("decode", "one-batch", b, c, predict(slow, CalPoint("decode", "one-batch", b, c, 1.0)))
              for b, c in ((1, 1024), (32, 8192), (64, 4096))]
    with pytest.raises(InputError, match="KV read efficiency of 0.3.*below what H100 SXM5 80GB reaches"):
        fit_whole_gpu(base, points)
    # fixed time only
    same_kv = [CalPoint("decode", "one-batch", b, c, 1.0) for b, c in ((1, 2048), (2, 1024))]
    quick = [CalPoint("decode", "one-batch", p.batch, p.tokens, predict(base, p) - 3e-3) for p in same_kv]
    with pytest.raises(InputError, match="fixed time per decode step of -2.0 ms"):
        fit_whole_gpu(base, quick)


# --------------------------------------------------------------------------------------------------
# the command


def _calibrate(tmp_path, *extra: str) -> tuple[dict, Path]:
    out = tmp_path / "cal.yaml"
    r = runner.invoke(app, ["calibrate", "--sglang-bench", str(MADE_BENCH), "--sglang-log", str(MADE_LOG),
                            "--model", "qwen3-8b", "--gpu", "h100", "-o", str(out), "--json", *extra])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), out


def test_cli_recovers_the_model_made_terms(tmp_path) -> None:
    result, out = _calibrate(tmp_path)
    shipped, terms = result["shipped"], result["terms"]
    assert terms["kv_bandwidth_efficiency"] / shipped["kv_bandwidth_efficiency"] == pytest.approx(
        0.8, rel=0.02)
    assert terms["decode_fixed_ms"] == pytest.approx(1.5, rel=0.02)
    assert terms["gemm_peak_efficiency"] / shipped["gemm_peak_efficiency"] == pytest.approx(0.9, rel=0.02)
    assert terms["attention_peak_efficiency"] / shipped["attention_peak_efficiency"] == pytest.approx(
        1.1, rel=0.02)
    assert result["median_error"] < 0.01 and result["uncalibrated_median_error"] > 0.1
    assert result["points"] == len(result["rows"]) == 11 + 11 + 78
    cal = load_calibration(out)
    assert cal.whole_gpu is not None and not cal.has_partitions and cal.gpu_key == "h100-sxm"
    assert dict(cal.terms_from)["whole_gpu"].startswith("SGLang one-batch model_made_one_batch")
    assert any("188 clean decode interval(s) of 245" in n for n in result["notes"])


def test_estimate_with_the_calibration_reproduces_the_points(tmp_path) -> None:
    """estimate --calibration gives back the decode steps and prefills it was fitted on, within the fit's
    stated error (here the points are the model's own, so within rounding)."""
    result, out = _calibrate(tmp_path)
    cal = load_calibration(out)
    gpu, model = find_gpu("h100"), load_model("qwen3-8b")
    tolerance = max(result["median_error"], 0.01)
    checked = 0
    for row in result["rows"]:
        if row["kind"] == "decode" and row["source"] == "server log" and row["count"] >= 3:
            e = estimate(gpu, model, Scenario(decode_bs=row["batch"], context_tokens=round(row["tokens"])),
                         calibration=cal)
            decode_only = next(r for r in e.rows if r.policy == "decode-only")
            assert decode_only.itl_ms == pytest.approx(row["measured_ms"], rel=tolerance)
            checked += 1
        if row["kind"] == "prefill" and row["batch"] == 1:
            e = estimate(gpu, model, Scenario(prompt_tokens=round(row["tokens"])), calibration=cal)
            alone = next(r for r in e.rows if r.policy == "prefill-first")
            # the one-batch prefill is the model alone; the estimate's is a server's (its time per request)
            assert alone.prefill_ms == pytest.approx(row["measured_ms"] + e.per_request_ms, rel=tolerance)
            checked += 1
    assert checked >= 10


def test_cli_table_and_yaml_on_stdout() -> None:
    r = runner.invoke(app,
                      ["calibrate", "--sglang-bench", str(MADE_BENCH), "--model", "qwen3-8b", "--gpu",
                       "h100"])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("# pdmux calibration") and "format: pdmux-calibration/2" in r.stdout
    assert "ms: measured, calibrated, shipped model" in r.stderr and "decode" in r.stderr


def test_cli_refuses_what_it_cannot_use(tmp_path) -> None:
    common = ["--model", "qwen3-8b", "--gpu", "h100"]
    cases = [
        (["calibrate", *common], "--sglang-bench"),
        (["calibrate", "--sglang-bench", str(MADE_BENCH)], "--model and --gpu"),
        (["calibrate", "--sglang-bench", str(MADE_BENCH), *common, "--tp", "2"], "a tensor-parallel server"),
        (["calibrate", "--sglang-bench", str(FIXTURES / "synthetic_one_batch_0.5.23_stdout.txt"), *common],
         "--result-filename"),
        (["calibrate", "--sglang-log", str(FIXTURES / "synthetic_server_0.5.23_tp2.log"), "--model",
          "llama-3.1-8b", "--gpu", "h200"], "a server on 2 GPUs"),
        (["calibrate", "--sglang-bench", str(FIXTURES / "synthetic_one_batch_0.5.23.jsonl"), "--model",
          "llama-3.1-70b", "--gpu", "h100"], "do not fit"),
        (["calibrate", "--sglang-bench", str(MADE_BENCH), "--sglang-bench", str(MADE_BENCH), *common],
         "given twice"),
        (["calibrate", "--sglang-bench", str(MADE_BENCH), *common, "--tp", "0"],
         "--tp must be a number of GPUs from 1 to 8"),
        (["calibrate", "--merge", str(MADE_BENCH), "--merge", str(MADE_BENCH), "--gpu", "h100"],
         "takes no --gpu"),
        (["calibrate", "--sglang-bench", str(MADE_BENCH), "--model", "qwen3-8b", "--gpu", "a100"],
         "another model, GPU"),
        (["calibrate", "--sglang-bench", str(tmp_path / "missing.jsonl"), *common], "missing.jsonl"),
        (["calibrate", "--sglang-bench", str(MADE_BENCH), *common, "-o", str(MADE_BENCH)], ""),
        (["calibrate", "--sglang-log",
          str(FIXTURES / "public_sglang_issue_4417_h100x16_deepseek_r1_eagle.log"), *common],
          "nothing to calibrate"),
        (["calibrate", "--merge", str(MADE_BENCH), "--sglang-log", str(MADE_LOG)], "takes no --sglang-log"),
    ]
    for args, text in cases:
        assert_one_line_error(runner.invoke(app, args), 2, text)
    out = tmp_path / "never.yaml"
    r = runner.invoke(app,
                      ["calibrate", "--sglang-bench", str(MADE_BENCH), "--model", "qwen3-8b", "--gpu", "a100",
                            "-o", str(out)])
    assert r.exit_code == 2 and not out.exists()


# --------------------------------------------------------------------------------------------------
# the merge


def _bench_calibration() -> Calibration:
    return Calibration(
        gpu_name="NVIDIA H100 80GB HBM3", sm_count=132, compute_capability=(9, 0), driver_cuda_version="12.8",
        cuda_version="12.6", date="2026-11-20", bandwidth_curve=((16, 1.2e12), (64, 2.9e12), (132, 3.0e12)),
        flops_curve=((8, 40e12), (132, 660e12)), copy_bytes_per_s=3.0e12, matmul_flops_per_s=670e12,
        corun=((66, 66, 0.9, 0.95),), s_sat_sms=64, complete=True, source="pdmux bench test",
    )


def test_merge_joins_partition_and_whole_gpu_terms(tmp_path) -> None:
    _, sglang = _calibrate(tmp_path)
    bench = tmp_path / "bench.yaml"
    bench.write_text(dump_calibration(_bench_calibration()))
    merged = tmp_path / "merged.yaml"
    r = runner.invoke(app, ["calibrate", "--merge", str(bench), "--merge", str(sglang), "-o", str(merged)])
    assert r.exit_code == 0, r.stderr
    cal = load_calibration(merged)
    whole = load_calibration(sglang).whole_gpu
    assert cal.has_partitions and cal.whole_gpu == whole
    assert cal.bandwidth_curve == ((16, 1.2e12), (64, 2.9e12), (132, 3.0e12)) and cal.s_sat_sms == 64
    froms = dict(cal.terms_from)
    assert froms["partitions"] == "pdmux bench 2026-11-20" and froms["whole_gpu"].startswith("SGLang "
                                                                                             "one-batch")
    e = runner.invoke(app, ["estimate", "--gpu", "h100", "--model", "qwen3-8b", "--calibration", str(merged)])
    assert e.exit_code == 0, e.stderr
    # the same file twice, or two of one kind, is not a pair
    assert_one_line_error(runner.invoke(app, ["calibrate", "--merge", str(sglang), "--merge", str(sglang)]),
                          2, "do not make that pair")
    other = tmp_path / "a100.yaml"
    a100 = replace(_bench_calibration(), gpu_name="NVIDIA A100-SXM4-80GB", sm_count=108,
                   compute_capability=(8, 0), bandwidth_curve=((16, 1.0e12), (108, 1.9e12)),
                   flops_curve=((8, 20e12), (108, 280e12)), corun=((54, 54, 0.9, 0.95),), s_sat_sms=108)
    other.write_text(dump_calibration(a100))
    assert_one_line_error(runner.invoke(app, ["calibrate", "--merge", str(other), "--merge", str(sglang)]), 2,
                          "different GPUs")
    assert_one_line_error(runner.invoke(app, ["calibrate", "--merge", str(sglang)]), 2,
                          "two calibration files")
    # an H100 bench file (no gpu_key: known by its reported name) and an H200 calibration: same SMs, other GPU
    h200 = tmp_path / "h200.yaml"
    h200.write_text(sglang.read_text().replace("gpu_key: h100-sxm", "gpu_key: h200-sxm"))
    assert_one_line_error(runner.invoke(app, ["calibrate", "--merge", str(bench), "--merge", str(h200)]), 2,
                          "different GPUs")
