"""gen-config's errors and notes as data (issue 21 item 2), and the other errors that wrote flags themselves.

Each converted error: the CLI prints one line naming the flag (exit 2), the Python API's text names the
keyword, and the error carries the parameter at fault. The notes under gen-config --slo-itl's table are
findings (``gen_config.*``) worded in :mod:`pdmux_cli.messages`. A scan keeps flags out of the converted
files.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pdmux
from pdmux_cli import messages
from pdmux_cli.cli import app
from pdmux_cli.util.errors import Finding
from cli_assertions import one_error_line, raised_input_error

CORE = Path(__file__).resolve().parent.parent / "pdmux_cli"
FIX = Path(__file__).resolve().parent / "fixtures"
TRACE = str(FIX / "azure_conv_50.csv")

_DP = ("gen-config {tune} tunes one server: for {dp} replicas behind a router run 'pdmux tune --dp N -o "
       "FILE' (same options; it writes the winning YAML and the launch line)")
_KNOBS = ("{tune} searches sm_group_num, decode_bs_divisor and the token budget itself: drop "
          "{sgn}/{dbd}/{tb} ('pdmux tune' can narrow the search)")

#: (gen-config's keywords, its command line's options, the parameter at fault, the CLI's line, the API's line)
GEN_CONFIG_ERRORS = [
    (dict(max_requests=5), ["--max-requests", "5"], "max_requests",
     "--max-requests cuts a --trace: give one, or drop --max-requests",
     "max_requests cuts a trace: give one, or drop max_requests"),
    (dict(tune=True, trace=TRACE, slo_ttft=1, slo_itl=1, dp=2),
     ["--tune", "--trace", TRACE, "--slo-ttft", "1", "--slo-itl", "1", "--dp", "2"], "dp",
     _DP.format(tune="--tune", dp="--dp"), _DP.format(tune="tune", dp="dp")),
    (dict(workers=0), ["--workers", "0"], "workers", "--workers must be >= 1, got 0",
     "workers must be >= 1, got 0"),
    (dict(trace_format="azure"), ["--format", "azure"], "trace_format",
     "--format goes with --tune (it shapes the trace tune simulates)",
     "trace_format goes with tune (it shapes the trace tune simulates)"),
    (dict(qps=3), ["--qps", "3"], "qps", "--qps goes with --tune (it shapes the trace tune simulates)",
     "qps goes with tune (it shapes the trace tune simulates)"),
    (dict(rate_scale=2.0), ["--rate-scale", "2"], "rate_scale",
     "--rate-scale goes with --tune (it shapes the trace tune simulates)",
     "rate_scale goes with tune (it shapes the trace tune simulates)"),
    (dict(duration=5.0), ["--duration", "5"], "duration",
     "--duration goes with --tune (it shapes the trace tune simulates)",
     "duration goes with tune (it shapes the trace tune simulates)"),
    (dict(workers=2), ["--workers", "2"], "workers",
     "--workers goes with --tune (it shapes the trace tune simulates)",
     "workers goes with tune (it shapes the trace tune simulates)"),
    (dict(context=2048), ["--context", "2048"], "context", "--context goes with --slo-itl (SLO levels)",
     "context goes with slo_itl (SLO levels)"),
    (dict(calibration="x.yaml"), ["--calibration", "x.yaml"], "calibration",
     "--calibration goes with --slo-itl (SLO levels) or --tune",
     "calibration goes with slo_itl (SLO levels) or tune"),
    (dict(cost_model="chapter"), ["--cost-model", "chapter"], "cost_model",
     "--cost-model goes with --slo-itl (SLO levels), without --tune",
     "cost_model goes with slo_itl (SLO levels), without tune"),
    (dict(step_overhead_ms=1.0), ["--step-overhead-ms", "1"], "step_overhead_ms",
     "--step-overhead-ms goes with --slo-itl (SLO levels), without --tune",
     "step_overhead_ms goes with slo_itl (SLO levels), without tune"),
    (dict(per_request_overhead_ms=1.0), ["--per-request-overhead-ms", "1"], "per_request_overhead_ms",
     "--per-request-overhead-ms goes with --slo-itl (SLO levels), without --tune",
     "per_request_overhead_ms goes with slo_itl (SLO levels), without tune"),
    (dict(max_running_requests=8), ["--max-running-requests", "8"], "max_running_requests",
     "--max-running-requests goes with --slo-itl (SLO levels), without --tune",
     "max_running_requests goes with slo_itl (SLO levels), without tune"),
    (dict(slo_itl=30, context=2048, divisions="112:20:0"),
     ["--slo-itl", "30", "--context", "2048", "--divisions", "112:20:0"], "divisions",
     "--slo-itl writes its own levels and thresholds: drop --divisions/--manual",
     "slo_itl writes its own levels and thresholds: drop divisions/manual"),
    (dict(slo_itl=30, context=2048, manual=True), ["--slo-itl", "30", "--context", "2048", "--manual"],
     "manual",
     "--slo-itl writes its own levels and thresholds: drop --divisions/--manual",
     "slo_itl writes its own levels and thresholds: drop divisions/manual"),
    (dict(slo_itl=30, context=2048, decode_bs_divisor=10),
     ["--slo-itl", "30", "--context", "2048", "--decode-bs-divisor", "10"], "decode_bs_divisor",
     "--slo-itl's thresholds replace the linear rule, which never reads decode_bs_divisor: drop "
     "--decode-bs-divisor",
     "slo_itl's thresholds replace the linear rule, which never reads decode_bs_divisor: drop "
     "decode_bs_divisor"),
    (dict(slo_itl=30, context=2048, slo_ttft=100),
     ["--slo-itl", "30", "--context", "2048", "--slo-ttft", "100"], "slo_ttft",
     "--slo-ttft goes with --tune (SLO levels size decode for the ITL target alone)",
     "slo_ttft goes with tune (SLO levels size decode for the ITL target alone)"),
    (dict(tune=True, divisions="112:20:0"), ["--tune", "--divisions", "112:20:0"], "divisions",
     "--tune picks the levels itself: drop --divisions/--manual",
     "tune picks the levels itself: drop divisions/manual"),
    (dict(tune=True, token_budget=100), ["--tune", "--token-budget", "100"], "token_budget",
     _KNOBS.format(tune="--tune", sgn="--sm-group-num", dbd="--decode-bs-divisor", tb="--token-budget"),
     _KNOBS.format(tune="tune", sgn="sm_group_num", dbd="decode_bs_divisor", tb="token_budget")),
    (dict(tune=True, sm_group_num=4), ["--tune", "--sm-group-num", "4"], "sm_group_num",
     _KNOBS.format(tune="--tune", sgn="--sm-group-num", dbd="--decode-bs-divisor", tb="--token-budget"),
     _KNOBS.format(tune="tune", sgn="sm_group_num", dbd="decode_bs_divisor", tb="token_budget")),
    (dict(tune=True, context=100), ["--tune", "--context", "100"], "context",
     "--tune takes the workload from --trace: drop --context",
     "tune takes the workload from trace: drop context"),
    (dict(trace=TRACE), ["--trace", TRACE], "trace",
     "--trace and --slo-ttft go with --tune (or --trace with --slo-itl)",
     "trace and slo_ttft go with tune (or trace with slo_itl)"),
    (dict(slo_ttft=100.0), ["--slo-ttft", "100"], "slo_ttft",
     "--trace and --slo-ttft go with --tune (or --trace with --slo-itl)",
     "trace and slo_ttft go with tune (or trace with slo_itl)"),
    (dict(divisions="112:20:0", sm_group_num=5), ["--divisions", "112:20:0", "--sm-group-num", "5"],
     "sm_group_num",
     "--divisions has 1 level(s), so sm_group_num is 3, not 5: drop --sm-group-num or change the divisions",
     "divisions has 1 level(s), so sm_group_num is 3, not 5: drop sm_group_num or change the divisions"),
    (dict(slo_itl=30, sms=132, cc="9.0"), ["--slo-itl", "30", "--sms", "132", "--cc", "9.0"], "gpu",
     "--slo-itl needs a GPU profile (--gpu), not --sms/--cc: the cost model needs its bandwidth and FLOP/s",
     "slo_itl needs a GPU profile (gpu), not sms/cc: the cost model needs its bandwidth and FLOP/s"),
    (dict(slo_itl=30), ["--slo-itl", "30"], "context",
     "--slo-itl sizes levels at the workload's context: give --context TOKENS (every decoding request's) or "
     "--trace FILE (the distribution of its decode steps), one of them",
     "slo_itl sizes levels at the workload's context: give context TOKENS (every decoding request's) or "
     "trace FILE (the distribution of its decode steps), one of them"),
    (dict(slo_itl=30, context=2048, trace=TRACE), ["--slo-itl", "30", "--context", "2048", "--trace", TRACE],
     "context", "give --context or --trace, not both", "give context or trace, not both"),
    (dict(slo_itl=30, context=2048, sm_group_num=2),
     ["--slo-itl", "30", "--context", "2048", "--sm-group-num", "2"], "sm_group_num",
     "--sm-group-num must be >= 3 (one level at least), got 2",
     "sm_group_num must be >= 3 (one level at least), got 2"),
    (dict(slo_itl=30, context=99999999), ["--slo-itl", "30", "--context", "99999999"], "context",
     "--context 99999999 is past Qwen3-8B's context length of 40960 tokens",
     "context 99999999 is past Qwen3-8B's context length of 40960 tokens"),
]


_raised = raised_input_error
_one_error_line = one_error_line


@pytest.mark.parametrize("kwargs, args, param, cli_line, api_line", GEN_CONFIG_ERRORS)
def test_gen_config_errors_name_the_flag_for_the_cli(kwargs, args, param, cli_line, api_line) -> None:
    assert _one_error_line(["gen-config", *args]) == cli_line


@pytest.mark.parametrize("kwargs, args, param, cli_line, api_line", GEN_CONFIG_ERRORS)
def test_gen_config_errors_name_the_keyword_for_the_api(kwargs, args, param, cli_line, api_line) -> None:
    exc = _raised(pdmux.gen_config, **kwargs)  # raised by the API: str() names the keyword
    assert exc.param == param
    assert messages.error_text(exc) == cli_line
    assert str(exc) == messages.api_error_text(exc) == api_line


def test_a_config_sglang_refuses_is_one_line_with_the_count_of_the_rest() -> None:
    exc = _raised(pdmux.gen_config, divisions="200:20:0")
    assert str(exc).startswith(
        "manual_divisions[0]: prefill_sm + decode_sm = 220 exceeds the device's 132 SMs")
    assert messages.api_error_text(exc) == str(exc)  # no parameter: SGLang's field, quoted
    exc = _raised(pdmux.gen_config, divisions="200:20:0,30:20:12")
    more = r" \(and [1-9][0-9]* more problem\(s\): pdmux check-config lists them\)$"
    assert re.search(more, str(exc)), str(exc)


@pytest.mark.parametrize(
    "args, param, cli_line, api_line, call",
    [
        (["splits", "--decode-bs", "1,99999999"], "decode_bs", "--decode-bs 99999999: give 1 to 1,000,000",
         "decode_bs 99999999: give 1 to 1,000,000", lambda: pdmux.splits(decode_bs=[1, 99999999])),
        (["splits", "--prompt-tokens", "512,999999999999"], "prompt_tokens",
         "--prompt-tokens 999999999999: give 1 to 10,000,000",
         "prompt_tokens 999999999999: give 1 to 10,000,000",
         lambda: pdmux.splits(prompt_tokens=[512, 999999999999])),
        (["simulate", "--synthetic", "--qps", "1", "--cuda-graph-max-bs", "0"], "cuda_graph_max_bs",
         "--cuda-graph-max-bs must be >= 1, got 0", "cuda_graph_max_bs must be >= 1, got 0",
         lambda: pdmux.simulate(synthetic=True, qps=1.0, cuda_graph_max_bs=0)),
        (["simulate", "--synthetic", "--qps", "1", "--max-running-requests", "0"], "max_running_requests",
         "--max-running-requests must be >= 1, got 0", "max_running_requests must be >= 1, got 0",
         lambda: pdmux.simulate(synthetic=True, qps=1.0, max_running_requests=0)),
        (["calibrate", "--merge", "a.yaml", "--merge", "b.yaml", "--gpu", "h100", "--tp", "2", "--kv-bytes",
          "1"],
         "gpu", "--merge joins two calibration files and takes no --gpu, --tp, --kv-bytes: give those to the "
         "'pdmux calibrate' run that wrote the file",
         "merge joins two calibration files and takes no gpu, tp, kv_bytes: give those to the 'pdmux "
         "calibrate' run that wrote the file",
         lambda: pdmux.calibrate(merge=["a.yaml", "b.yaml"], gpu="h100", tp=2, kv_bytes=1.0)),
        (["calibrate", "--merge", "a.yaml", "--merge", "b.yaml", "--sglang-log", "c.log", "--kv-cache-dtype",
          "fp8_e4m3"], "sglang_log",
         "--merge joins two calibration files and takes no --sglang-log, --kv-cache-dtype: give those to the "
         "'pdmux calibrate' run that wrote the file",
         "merge joins two calibration files and takes no sglang_log, kv_cache_dtype: give those to the "
         "'pdmux calibrate' run that wrote the file",
         lambda: pdmux.calibrate(merge=["a.yaml", "b.yaml"], sglang_log=["c.log"],
                                 kv_cache_dtype="fp8_e4m3")),
        (["calibrate", "--bench-serving", "x.json", "--bench-serving", "./x.json", "--gpu", "h100", "--model",
          "qwen3-8b"], "bench_serving", "x.json is given twice: its points would count double",
         "x.json is given twice: its points would count double",
         lambda: pdmux.calibrate(bench_serving=["x.json", "./x.json"], gpu="h100", model="qwen3-8b")),
    ],
)
def test_the_other_converted_errors(args, param, cli_line, api_line, call) -> None:
    assert _one_error_line(args) == cli_line
    exc = _raised(call)
    assert exc.param == param and messages.error_text(exc) == cli_line
    assert str(exc) == messages.api_error_text(exc) == api_line


@pytest.mark.parametrize(
    "slos, param, line",
    [((0.0, 50.0), "slo_ttft", "slo-ttft must be a number of ms > 0, got 0.0"),
     ((100.0, float("inf")), "slo_itl", "slo-itl must be a number of ms > 0, got inf"),
     ((100.0, float("nan")), "slo_itl", "slo-itl must be a number of ms > 0, got nan")],
)
def test_the_simulators_tune_names_the_slo_it_refuses(slos, param, line) -> None:
    from pdmux_cli.simulate.tune import tune

    exc = _raised(tune, None, None, *slos)  # checked before the trace or the set-up is read
    assert exc.param == param and str(exc) == "--" + line
    assert messages.api_error_text(exc) == line.replace("slo-", "slo_")


# --- the notes under gen-config --slo-itl's table ---------------------------------------------------------

def test_the_slo_levels_notes_are_findings_with_values() -> None:
    result = pdmux.gen_config(slo_itl=15, context=2048)
    levels, _, notes = result.slo
    assert [n.code for n in notes] == ["gen_config.slo_batch_range", "gen_config.slo_at_the_edge",
                                       "gen_config.slo_unmeetable"]
    assert all(isinstance(n, Finding) for n in notes)
    edge, unmeetable = notes[1], notes[2]
    assert edge.values == {"target_ms": 15.0} and edge.param == "config"
    assert unmeetable.param == "tp"
    assert (unmeetable.values["from_bs"], unmeetable.values["prefill_sms"], unmeetable.values["decode_sms"],
            unmeetable.values["max_bs"]) == (levels.unmeetable_from, 72, 60, levels.max_bs)
    assert messages.render(notes[0]) == (
        f"sized for decode batches 1-{levels.max_bs} (the most requests SGLang's KV pool under pdmux holds "
        f"at this context, within max_running_requests), at {levels.context_source}")
    merged = pdmux.gen_config(slo_itl=30, context=2048, sm_group_num=3).slo[2]
    assert [n.code for n in merged][:2] == ["gen_config.slo_batch_range", "gen_config.slo_levels_merged"]
    assert merged[1].param == "sm_group_num" and merged[1].values["levels"] == 1
    assert merged[1].values["sm_group_num"] == 3 and merged[1].values["needed"] > 1


def test_the_slo_levels_notes_keep_the_trace_rows_first() -> None:
    notes = pdmux.gen_config(slo_itl=30, trace=FIX / "azure_bad_rows.csv").slo[2]
    assert notes[0].code == "workload.bad_rows" and notes[1].code == "gen_config.slo_batch_range"


def test_render_the_slo_levels_notes() -> None:
    merged = Finding("gen_config.slo_levels_merged", {"needed": 4, "levels": 1, "sm_group_num": 3},
                     "sm_group_num")
    assert messages.render(merged) == (
        "the rule asked for 4 levels; 1 fit --sm-group-num 3: some batch sizes get the next larger level "
        "(more decode SMs than they need, ITL within the target)")
    assert messages.render(Finding("gen_config.slo_at_the_edge", {"target_ms": 30.0})) == (
        "levels sized for exactly 30 ms leave the rounds at its edge: a batch holding longer requests than "
        "assumed goes past it; pdmux tune tries these levels and ones for 0.9x and 0.8x 30 ms on a trace, "
        "and capacity sizes them (--config, repeatable)")
    batches = Finding("gen_config.slo_batch_range", {"max_bs": 137, "context": "2048 tokens"})
    assert messages.render(batches) == (
        "sized for decode batches 1-137 (the most requests SGLang's KV pool under pdmux holds at this "
        "context, within max_running_requests), at 2048 tokens")
    values = {"from_bs": 28, "prefill_sms": 72, "decode_sms": 60, "target_ms": 15.0, "itl_ms": 15.24,
              "itl_at_max_ms": 40.63, "max_bs": 137}
    tail = "; fewer decoding requests (SGLang's --max-running-requests) or more GPUs (--tp) meet it"
    assert messages.render(Finding("gen_config.slo_unmeetable", values, "tp")) == (
        "from decode batch 28 on, even the largest decode share, 72/60 SMs, misses 15 ms: 15.2 ms there "
        "(40.6 ms at 137)" + tail)
    from_one = {**values, "from_bs": 1, "itl_ms": 8.94}  # not even one request meets it (a new user's report)
    assert messages.render(Finding("gen_config.slo_unmeetable", from_one, "tp")) == (
        "from decode batch 1 on, even the largest decode share, 72/60 SMs, misses 15 ms: 8.9 ms there "
        "(40.6 ms at 137): not even one request meets it on this GPU beside a running prefill; raise the "
        "SLO, or try more GPUs (--tp) or a faster GPU")
    at_the_top = {**values, "from_bs": 137}  # the largest batch is where it starts: no second ITL
    assert messages.render(Finding("gen_config.slo_unmeetable", at_the_top, "tp")) == (
        "from decode batch 137 on, even the largest decode share, 72/60 SMs, misses 15 ms: 15.2 ms there"
        + tail)


def test_the_cli_prints_the_slo_levels_notes_as_before() -> None:
    r = CliRunner().invoke(app, ["gen-config", "--slo-itl", "30", "--context", "2048", "--sm-group-num", "3"])
    assert r.exit_code == 0, r.stderr
    text = " ".join(r.stderr.split())
    assert "note: the rule asked for " in text and " levels; 1 fit --sm-group-num 3: some batch sizes" in text
    assert "capacity sizes them (--config, repeatable)" in text and "more GPUs (--tp) meet it" in text


# --- no flag in the converted files -----------------------------------------------------------------------

#: The files whose errors and notes were converted: no string in them (docstrings aside) names a pdmux flag.
_CONVERTED = [CORE / "workflows" / name
              for name in ("gen_config.py", "splits.py", "server.py", "calibrate.py")]
_CONVERTED += [CORE / "simulate" / "tune.py", CORE / "workflows" / "tune.py",
               CORE / "workflows" / "pdmux_yaml.py", CORE / "planning" / "slo_levels.py"]
#: SGLang's own arguments (a sentence about SGLang quotes them: its server's, and its benchmark scripts' that
#: calibrate's help names, one_batch's --result-filename, bench_serving's --output-file and --output-details)
#: and a quoted pdmux command line for the shell.
_SGLANG_FLAGS = {"--tp-size", "--enable-pdmux", "--disable-radix-cache", "--result-filename", "--output-file",
                 "--output-details"}
_QUOTED_PDMUX_COMMAND = re.compile(r"'pdmux [a-z][a-z-]*( [^']*)?'")


def _flags_outside_docstrings(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, flag)`` of every ``--flag`` in a string literal (an f-string's parts too, a loop's
    ``("--qps", r.qps)`` pairs too) that is no docstring, outside a quoted ``'pdmux ...'`` command line."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = _QUOTED_PDMUX_COMMAND.sub("", node.value)
            found += [(node.lineno, f) for f in re.findall(r"--[a-z][a-z0-9-]*", text)
                      if f not in _SGLANG_FLAGS]
    return sorted(found)


def test_the_flag_scan_finds_flags_as_data_and_in_f_strings() -> None:
    tree = ast.parse('"""Doc: --tp."""\ndef f(r):\n    """--qps doc."""\n'
                     '    for name, v in (("--qps", r.qps), ("rate_scale", r.rate_scale)):\n'
                     '        raise InputError(f"{name} goes with --tune")\n'
                     '    x = "run \'pdmux tune --dp N\' with --workers"\n')
    assert _flags_outside_docstrings(tree) == [(4, "--qps"), (5, "--tune"), (6, "--workers")]


def test_no_converted_file_names_a_flag() -> None:
    written = [f"{path.relative_to(CORE)}:{line} {flag}" for path in _CONVERTED
               for line, flag in _flags_outside_docstrings(ast.parse(path.read_text(encoding="utf-8")))]
    assert not written, written
