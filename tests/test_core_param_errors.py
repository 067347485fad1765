"""The last core errors that wrote pdmux flags themselves name parameters (issue 21 item 2).

Each: the CLI prints one line naming the flag (exit 2), byte for byte as before; the Python API's text
names the keyword; the error carries the parameter at fault. check-config's problems about SGLang's own
``--sm-group-num`` launch argument keep naming SGLang's flag (a scan keeps pdmux flags out of every
``Problem``).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pdmux
from pdmux_cli import messages
from pdmux_cli.cli import app
from pdmux_cli.planning.slo_levels import check_target_ms
from pdmux_cli.simulate.capacity import check_slos
from pdmux_cli.simulate.traces import unreadable_format
from pdmux_cli.util.errors import InputError
from cli_assertions import one_error_line, raised_input_error

CORE = Path(__file__).resolve().parent.parent / "pdmux_cli"
FIX = Path(__file__).resolve().parent / "fixtures"
TRACE = str(FIX / "azure_conv_50.csv")

_NO_KNOBS = ("{what}: no forward_split_prefill in SGLang 0.5.23's GptOssForCausalLM (srt/models/gpt_oss.py): "
             "pdmux fails at the first prefill; there are no pdmux knobs to tune for it ({sglang} picks "
             "another SGLang revision)")
_SHAREGPT = ("sharegpt.json: a ShareGPT-style conversation file (SGLang's and vLLM's bench_serving default "
             "dataset): it holds prompts as text, with no token counts or arrival times, and pdmux has no "
             "tokenizer; give a trace of token counts (Azure CSV, Mooncake JSONL, BurstGPT CSV), or "
             "{synthetic} {qps} N with {prompt}/{output} (random:L for bench_serving's random dataset)")
_BENCH_RESULT = ("result.json: a bench_serving result (per-request input_lens and output_lens, no arrival "
                 "times): give it to 'pdmux calibrate --bench-serving'; to replay its workload use "
                 "{synthetic} {qps} RATE with {prompt}/{output} (random:L as its --random-input-len)")
_DIVISIONS = ("{divisions}: manual_divisions[0]: prefill_sm + decode_sm = 220 exceeds the device's 132 SMs; "
              "SGLang fails at start-up (sgl-kernel: 'Not enough SMs available'): make them add up to 132")
_CLI = {"what": "gen-config --tune", "sglang": "--sglang", "synthetic": "--synthetic", "qps": "--qps",
        "prompt": "--prompt-tokens", "output": "--output-tokens", "divisions": "--divisions"}
_API = {"what": "gen-config tune", "sglang": "sglang", "synthetic": "synthetic", "qps": "qps",
        "prompt": "prompt_tokens", "output": "output_tokens", "divisions": "divisions"}


_raised = raised_input_error
_one_error_line = one_error_line


def _traces(tmp_path: Path) -> dict[str, Path]:
    files = {"sharegpt.json": '[{"id": "a", "conversations": [{"from": "human", "value": "hi"}]}]\n',
             "result.json": '{"input_lens": [10], "output_lens": [5], "duration": 1.0}\n'}
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return {name: tmp_path / name for name in files}


@pytest.mark.parametrize(
    "args, param, cli_line, api_line, call",
    [
        (["gen-config", "--slo-itl", "0"], "slo_itl",
         "--slo-itl must be a number of ms > 0, got 0.0",
         "slo_itl must be a number of ms > 0, got 0.0",
         lambda: pdmux.gen_config(slo_itl=0.0)),
        (["gen-config", "--slo-itl", "nan"], "slo_itl",
         "--slo-itl must be a number of ms > 0, got nan",
         "slo_itl must be a number of ms > 0, got nan",
         lambda: pdmux.gen_config(slo_itl=float("nan"))),
        (["capacity", "--trace", TRACE, "--slo-ttft", "0", "--slo-itl", "50"], "slo_ttft",
         "--slo-ttft must be a number of ms > 0, got 0.0", "slo_ttft must be a number of ms > 0, got 0.0",
         lambda: pdmux.capacity(trace=TRACE, slo_ttft=0.0, slo_itl=50.0)),
        (["capacity", "--trace", TRACE, "--slo-ttft", "1000", "--slo-itl", "inf"], "slo_itl",
         "--slo-itl must be a number of ms > 0, got inf", "slo_itl must be a number of ms > 0, got inf",
         lambda: pdmux.capacity(trace=TRACE, slo_ttft=1000.0, slo_itl=float("inf"))),
        (["simulate", "--synthetic", "--qps", "1", "--divisions", "200:20:0"], "divisions",
         _DIVISIONS.format(**_CLI), _DIVISIONS.format(**_API),
         lambda: pdmux.simulate(synthetic=True, qps=1.0, divisions="200:20:0")),
        (["gen-config", "--tune", "--trace", TRACE, "--slo-ttft", "1000", "--slo-itl", "50", "--model",
          "gpt-oss-20b"], "sglang", _NO_KNOBS.format(**_CLI), _NO_KNOBS.format(**_API),
         lambda: pdmux.gen_config(tune=True, trace=TRACE, slo_ttft=1000, slo_itl=50, model="gpt-oss-20b")),
        (["tune", "--trace", TRACE, "--slo-ttft", "1000", "--slo-itl", "50", "--model", "gpt-oss-20b"],
         "sglang", _NO_KNOBS.format(**{**_CLI, "what": "tune"}), _NO_KNOBS.format(**{**_API, "what": "tune"}),
         lambda: pdmux.tune(TRACE, slo_ttft=1000, slo_itl=50, model="gpt-oss-20b")),
    ],
)
def test_the_cli_names_the_flag_and_the_api_the_keyword(args, param, cli_line, api_line, call) -> None:
    assert _one_error_line(args) == cli_line
    exc = _raised(call)  # raised by the API: str() names the keyword
    assert exc.param == param and messages.error_text(exc) == cli_line
    assert str(exc) == messages.api_error_text(exc) == api_line


@pytest.mark.parametrize("name, template", [("sharegpt.json", _SHAREGPT), ("result.json", _BENCH_RESULT)])
def test_an_unreadable_trace_names_the_options_to_give_instead(tmp_path, name, template) -> None:
    path = _traces(tmp_path)[name]
    cli_line = template.format(**_CLI)
    for command in (["simulate", "--trace", str(path)],
                    ["capacity", "--trace", str(path), "--slo-ttft", "1000", "--slo-itl", "50"]):
        assert _one_error_line(command) == cli_line
    exc = _raised(pdmux.simulate, trace=path)
    assert exc.param == "trace" and messages.error_text(exc) == cli_line
    assert str(exc) == messages.api_error_text(exc) == template.format(**_API)


def test_unreadable_format_is_an_error_about_the_trace_or_none() -> None:
    refusal = unreadable_format('{"prompt_len": 10, "output_len": 5, "timestamp": 1}\n', "a.jsonl")
    assert isinstance(refusal, InputError) and refusal.param == "trace"
    assert str(refusal).startswith("a.jsonl: JSONL of prompt_len, output_len and timestamp: ")
    assert str(refusal).endswith("jq -c '{timestamp: (.timestamp * 1000), input_length: .prompt_len, "
                                 "output_length: .output_len}' IN.jsonl > trace.jsonl (timestamp in seconds; "
                                 "without '* 1000' if it is in milliseconds)")  # braces in a value: as given
    assert str(unreadable_format("[1, 2]", "{flag.qps}.json")).startswith("{flag.qps}.json: a JSON array")
    assert unreadable_format("a,b,c\n", "a.csv") is None


def test_a_config_file_sglang_refuses_names_the_file(tmp_path) -> None:
    config = tmp_path / "c8.yaml"
    config.write_text("sm_group_num: 8\n", encoding="utf-8")
    line = (f"{config}: sm_group_num: is 2, must be >= 3 (the all-prefill group, at least one split level, "
            "the all-decode group); SGLang's loader refuses it ('sm_group_num must be >= 3') (pdmux "
            f"check-config {config} lists every problem)")
    assert _one_error_line(["simulate", "--synthetic", "--qps", "1", "--config", str(config),
                            "--sm-group-num", "2"]) == line
    exc = _raised(pdmux.simulate, synthetic=True, qps=1.0, config=config, sm_group_num=2)
    assert exc.param == "config" and str(exc) == messages.api_error_text(exc) == line


@pytest.mark.parametrize("check, args, param", [(check_slos, (0.0, 50.0), "slo_ttft"),
                                                (check_slos, (100.0, float("nan")), "slo_itl"),
                                                (check_target_ms, (-5,), "slo_itl"),
                                                (check_target_ms, ("30",), "slo_itl")])
def test_the_slo_checks_name_their_parameter(check, args, param) -> None:
    exc = _raised(check, *args)
    assert exc.param == param and str(exc).startswith(messages.flag(param) + " must be a number of ms > 0")
    assert messages.api_error_text(exc).startswith(param + " must be")
    other = _raised(check_target_ms, 0, "slo_target")  # another caller's parameter
    assert str(other).startswith("--slo-target must") and other.param == "slo_target"


def test_check_config_keeps_sglangs_own_sm_group_num_flag(tmp_path) -> None:
    config = tmp_path / "c8.yaml"
    config.write_text("sm_group_num: 8\n", encoding="utf-8")
    args = ["check-config", str(config), "--gpu", "h100", "--sm-group-num", "6", "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.stderr
    (problem,) = json.loads(r.stdout)["problems"]
    assert problem["where"] == "--sm-group-num" and problem["rule"] == "both"
    assert problem["message"].startswith("the launch flag --sm-group-num 6 differs from the YAML's "
                                         "sm_group_num 8; ")
    assert "or with --disable-cuda-graph at the first switch to group 6 or above): pass --sm-group-num 8" in (
        problem["message"])
    api = pdmux.check_config(config, gpu="h100", sm_group_num=6).to_dict()["problems"]
    assert api == json.loads(r.stdout)["problems"]  # SGLang's launch argument, for every caller


def test_the_plot_and_calibration_errors_name_their_parameter(tmp_path, monkeypatch) -> None:
    from dataclasses import replace
    from types import SimpleNamespace

    from pdmux_cli.catalog.hardware import find_gpu
    from pdmux_cli.costmodel.calibration_file import Calibration
    from pdmux_cli.planning.plot import write_tradeoff_plot

    no_levels = _raised(write_tradeoff_plot, tmp_path / "p.png", SimpleNamespace(levels=()))
    assert no_levels.param == "plot"
    assert str(no_levels) == "--plot needs every level's figures: the estimate has none"
    assert messages.api_error_text(no_levels).startswith("plot needs every level's figures")
    monkeypatch.setitem(__import__("sys").modules, "matplotlib.backends.backend_agg", None)
    assert _one_error_line(["estimate", "--plot", str(tmp_path / "p.png")]) == (
        "--plot needs matplotlib: pip install 'pdmux[plot]' (or pip install matplotlib)")
    cal = Calibration(
        gpu_name="NVIDIA H100 80GB HBM3", sm_count=132, compute_capability=(9, 0), driver_cuda_version="12.8",
        cuda_version="12.6", date="2025-06-01", bandwidth_curve=((16, 1.2e12), (64, 2.9e12), (132, 3.0e12)),
        flops_curve=((8, 40e12), (132, 660e12)), copy_bytes_per_s=3.0e12, matmul_flops_per_s=670e12,
        corun=(), s_sat_sms=64, complete=True, source="test")
    other = _raised(cal.check_device, find_gpu("a100"))
    assert other.param == "gpu" and str(other) == (
        "calibration was measured on NVIDIA H100 80GB HBM3 (132 SMs, cc 9.0, profile h100-sxm) but the "
        "estimate is for A100 SXM4 80GB (108 SMs, cc 8.0, profile a100-sxm-80gb): pass --gpu for the "
        "calibrated GPU, or calibrate this one ('pdmux bench', 'pdmux calibrate')")
    assert "pass gpu for the calibrated GPU" in messages.api_error_text(other)
    chapter = _raised(replace(cal, bandwidth_curve=None).throughput, find_gpu("h100"))
    assert chapter.param == "cost_model" and str(chapter).endswith(
        "the chapter model needs them; use --cost-model roofline, or merge a bench calibration into it")
    assert "use cost_model roofline" in messages.api_error_text(chapter)


@pytest.mark.parametrize("workers", [1, 2])
def test_an_error_from_a_worker_keeps_its_parameter(workers) -> None:
    """The executor prefixes an InputError a task raised with the task's name, its template kept: the CLI
    reads ``--max-steps``, the API ``max_steps`` (it was flattened to the CLI's text)."""
    from pdmux_cli.catalog.hardware import find_gpu
    from pdmux_cli.catalog.model import load_model
    from pdmux_cli.simulate import tune
    from pdmux_cli.simulate.engine import make_setup
    from pdmux_cli.simulate.executors import executor
    from pdmux_cli.simulate.schedulers import PdmuxPolicy
    from pdmux_cli.simulate.traces import load_trace, reshape

    setup = make_setup(find_gpu("h100"), load_model("qwen3-8b"))
    trace = reshape(load_trace(TRACE), max_requests=10)
    with pytest.raises(InputError) as caught, executor("local", workers, tasks=2) as ex:
        ex.run(tune._evaluate, ex.share((trace, setup, 1000, 60, 1, "round_robin", 10)), [PdmuxPolicy()] * 2,
               ["pdmux config {flag.x}"] * 2)
    exc = caught.value
    assert exc.prefix == "pdmux config {flag.x}: " and exc.values == {"budget": 10}
    assert str(exc).startswith("pdmux config {flag.x}: the simulation passed its budget of 10 decode steps")
    assert "raise it with --max-steps N (0: no limit)" in str(exc)
    assert "raise it with max_steps N (0: no limit)" in messages.api_error_text(exc)


# --- the scans ------------------------------------------------------------------------------------------

#: pdmux's flags (the CLI's options) that a string literal in a Problem(...) must not write: every flag
#: the CLI declares, read from its typer options.
def _pdmux_flags() -> set[str]:
    import typer.main

    command = typer.main.get_command(app)
    return {opt for sub in command.commands.values() for p in sub.params
            for opt in getattr(p, "opts", []) if opt.startswith("--")}


def _problem_literal_flags(tree: ast.AST, flags: set[str]) -> list[tuple[int, str]]:
    """``(line, flag)`` of each pdmux flag written as a string literal (f-strings' parts too) in a
    ``Problem(...)``'s arguments."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Problem":
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                for s in ast.walk(arg):
                    if isinstance(s, ast.Constant) and isinstance(s.value, str):
                        found += [(node.lineno, f) for f in re.findall(r"--[a-z][a-z0-9-]*", s.value)
                                  if f in flags]
    return sorted(found)


def test_the_problem_scan_finds_a_flag_written_into_a_problem() -> None:
    tree = ast.parse('Problem("--sm-group-num", f"pass --sm-group-num {n}", "new")\n'
                     'Problem(SGLANG_SM_GROUP_NUM_FLAG, f"pass {SGLANG_SM_GROUP_NUM_FLAG} {n}", "new")\n')
    assert _problem_literal_flags(tree, {"--sm-group-num"}) == [(1, "--sm-group-num"), (1, "--sm-group-num")]


def test_no_problem_writes_a_pdmux_flag() -> None:
    """A :class:`pdmux_cli.sglang.pdmux_config.Problem` about SGLang's launch argument names it through
    the SGLang constant (``SGLANG_SM_GROUP_NUM_FLAG``), never as a literal a pdmux option shares."""
    flags = _pdmux_flags()
    assert {"--sm-group-num", "--slo-itl", "--divisions", "--workers"} <= flags
    written = [f"{path.relative_to(CORE)}:{line} {flag}" for path in sorted(CORE.rglob("*.py"))
               for line, flag in _problem_literal_flags(ast.parse(path.read_text(encoding="utf-8")), flags)]
    assert not written, written


# --- runtime failures (exit 1) name the parameter to change: PdmuxError takes templates (devicerr) ---------

def _die(shared, arg):  # a task whose worker dies (the OOM killer's SIGKILL, in effect)
    import os

    os._exit(1)


def test_a_dead_worker_names_workers_for_the_cli_and_the_api() -> None:
    from pdmux_cli.simulate.executors import TaskFailed, executor

    with pytest.raises(TaskFailed) as caught, executor("local", 2, tasks=2) as ex:
        ex.run(_die, ex.share(None), [1, 2], ["pdmux {flag.x}"] * 2)
    exc = caught.value
    assert exc.param == "workers" and exc.exit_code == 1
    assert str(exc) == ("a worker process died while simulating pdmux {flag.x} (out of memory, or killed): "
                        "run again, with fewer --workers if memory is short")
    assert messages.api_error_text(exc).endswith("run again, with fewer workers if memory is short")


def test_a_broken_pool_names_workers() -> None:
    from concurrent.futures.process import BrokenProcessPool

    from pdmux_cli.simulate import pool
    from pdmux_cli.util.errors import PdmuxError

    with pytest.raises(PdmuxError) as caught, pool.process_pool(1):
        raise BrokenProcessPool("gone")
    exc = caught.value
    assert exc.param == "workers" and str(exc) == (
        "a worker process died before finishing its simulation (out of memory, or killed): run again, with "
        "fewer --workers if memory is short")
    assert messages.api_error_text(exc).endswith("with fewer workers if memory is short")


def test_ray_unreachable_names_executor(monkeypatch) -> None:
    from types import SimpleNamespace

    from pdmux_cli.simulate import executors

    def init(**options):
        raise ConnectionError("no cluster at {flag.x}\nsecond line")

    fake = SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setattr(executors, "import_ray", lambda: fake)
    monkeypatch.setattr(executors, "_probe", lambda address, where: None)  # it answers; ray.init fails
    with pytest.raises(executors.PdmuxError) as caught:
        executors.OnRay(2, "ray://head:10001")
    exc = caught.value
    assert exc.param == "executor" and exc.exit_code == 1
    assert str(exc) == ("--executor ray: cannot start or reach the Ray cluster at ray://head:10001: no "
                        "cluster at {flag.x}")
    assert messages.api_error_text(exc).startswith("executor ray: cannot start or reach the Ray cluster")
    r = CliRunner().invoke(app, ["simulate", TRACE, "--policies", "chunked", "--executor", "ray",
                                 "--ray-address", "ray://head:10001"])
    assert r.exit_code == 1 and r.stderr == (
        "pdmux: error: --executor ray: cannot start or reach the Ray cluster at ray://head:10001: no cluster "
        "at {flag.x}\n")


def test_a_broken_matplotlib_names_plot(tmp_path, monkeypatch) -> None:
    import sys
    import types

    class Broken(types.ModuleType):
        def __getattr__(self, name):
            raise RuntimeError("bad matplotlibrc line 3:\n  backend: frob")

    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", Broken("backend_agg"))
    r = CliRunner().invoke(app, ["estimate", "--plot", str(tmp_path / "p.png")])
    assert r.exit_code == 1 and r.stderr == (
        "pdmux: error: --plot: matplotlib failed to start (bad matplotlibrc line 3: backend: frob); check "
        "its installation and matplotlibrc\n")
    from pdmux_cli.util.errors import PdmuxError
    from pdmux_cli.util.plotting import png_figure

    with pytest.raises(PdmuxError) as caught, png_figure(tmp_path / "q.png", (1, 1), ""):
        pass
    assert caught.value.param == "plot"
    assert messages.api_error_text(caught.value).startswith("plot: matplotlib failed to start (bad")
