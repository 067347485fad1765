"""The bench and the whole-GPU fit return notes and errors as data (issue 21, item 2).

pdmux_cli/bench/ and pdmux_cli/costmodel/whole_gpu_fit.py name parameters by their Python names
(``InputError(..., param="gemm_shape")``, ``{flag.NAME}``) and return their notes as findings
(``bench.*``, ``fit.*``); pdmux_cli/messages.py words them. These tests pin the data (codes, values, the
parameter at fault), the CLI's text and exit code for the errors the command tests do not pin whole, the
API's keyword text, and a scan that fails on a new error or note there that writes a pdmux flag.
"""

from __future__ import annotations

import ast
import json
import pickle
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli import messages
from pdmux_cli.bench import greenctx, model_replay, runner
from pdmux_cli.bench import plan as bplan
from pdmux_cli.bench import replay_plan as rp
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.costmodel import build_step_model
from pdmux_cli.costmodel.whole_gpu_fit import CalPoint, check_points, fit_whole_gpu, predict
from pdmux_cli.util.errors import DeviceError, Finding, InputError

CORE = Path(__file__).resolve().parent.parent / "pdmux_cli"
H100 = bplan.PlanDevice.from_gpu(find_gpu("h100"))

# --- the scan: no error or note in bench/ or whole_gpu_fit.py writes a pdmux flag ----------------------

#: SGLang's own server arguments, quoted as SGLang's (text, not pdmux's flags).
_SGLANG_FLAGS = {"--tp-size", "--enable-pdmux", "--mem-fraction-static"}
#: Calls whose string arguments are an error's or a note's text.
_MESSAGE_CALLS = {"InputError", "Finding", "DeviceError", "append", "extend", "insert"}
_SCANNED = [*sorted((CORE / "bench").glob("*.py")), CORE / "costmodel" / "whole_gpu_fit.py"]


def _flags(node: ast.AST) -> tuple[str, ...]:
    text = " ".join(s.value for s in ast.walk(node)
                    if isinstance(s, ast.Constant) and isinstance(s.value, str))
    return tuple(sorted(set(re.findall(r"--[a-z][a-z0-9-]*", text)) - _SGLANG_FLAGS))


def _messages_with_flags(path: Path) -> set[tuple[str, str, tuple[str, ...], int]]:
    """(file, function, flags, line) of each error, note or returned text in ``path`` that writes a flag:
    the string arguments of :data:`_MESSAGE_CALLS` and the values ``return`` gives (a note returned as
    ``(None, why)``)."""
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        for node in ast.walk(func):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                parts = [*node.args, *(k.value for k in node.keywords)] if name in _MESSAGE_CALLS else []
            elif isinstance(node, ast.Return) and node.value is not None:
                parts = [node.value]
            else:
                continue
            for part in parts:
                if flags := _flags(part):
                    found.add((path.name, func.name, flags, node.lineno))
    return found


def test_no_bench_or_fit_error_or_note_writes_a_pdmux_flag() -> None:
    """InputErrors, DeviceErrors (templates since PdmuxError took them: the out-of-memory and no-driver
    errors name ``gemm_shape``, ``decode_bs``, ``dry_run``) and notes alike: no exceptions."""
    found = set().union(*(_messages_with_flags(p) for p in _SCANNED))
    assert not found, sorted(found)


def test_the_scan_sees_a_note_or_an_error_that_writes_a_flag(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text('def plan(notes):\n    notes.append(f"give --gpu {1}")\n'
                   'def check(x):\n    raise InputError("--levels " + x)\n'
                   'def why():\n    return None, "pass --gpu"\n'
                   'def oom(s):\n    raise DeviceError("no memory (" + s + "): use a smaller --gemm-shape")\n'
                   'def fine(notes):\n    notes.append(Finding("bench.l2_unknown", {"gpu": "x"}))\n')
    assert sorted((fn, flags) for _, fn, flags, _ in _messages_with_flags(bad)) == [
        ("check", ("--levels",)), ("oom", ("--gemm-shape",)), ("plan", ("--gpu",)), ("why", ("--gpu",))]


def test_every_bench_and_fit_code_has_a_sentence() -> None:
    codes = set()
    for path in _SCANNED:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                codes.add(node.args[0].value)
    assert len(codes) >= 30 and all(c.startswith(("bench.", "fit.")) for c in codes), sorted(codes)
    assert codes <= set(messages.TEMPLATES), sorted(codes - set(messages.TEMPLATES))


# --- the CLI's line and exit code; the core's parameter; the API's keyword ------------------------------

_CLI_ERRORS = [
    (["--gemm-shape", "0x1x1"], "gemm_shape", "--gemm-shape '0x1x1': M, N and K must all be > 0"),
    (["--gemm-shape", "9999999x1x1"], "gemm_shape",
     "--gemm-shape '9999999x1x1': each of M, N and K must be at most 1048576"),
    (["--gemm-shape", "{flag.tp}x1"], "gemm_shape",
     "--gemm-shape '{flag.tp}x1': write MxNxK with positive integers, e.g. 8192x4096x12288"),
    (["--skinny-gemm", "abc"], "skinny_gemm",
     "--skinny-gemm 'abc': write HIDDENxINTERMEDIATE with positive integers up to 1048576, e.g. 4096x12288"),
    (["--skinny-gemm", "1x1"], "skinny_gemm",
     "--skinny-gemm 1x1: its 2-byte weights would need 104857600 copies to stay out of L2; give a real layer "
     "(hidden x intermediate, e.g. 4096x12288)"),
    (["--buffer-bytes", "zz"], "buffer_bytes",
     "--buffer-bytes 'zz': give bytes, e.g. 1073741824, 1GiB or 512MiB"),
    (["--buffer-bytes", "0"], "buffer_bytes", "--buffer-bytes '0' must be > 0"),
    (["--buffer-bytes", "1000"], "buffer_bytes",
     "--buffer-bytes 1000 is below 4x the L2 of H100 SXM5 80GB (209715200 bytes): reads would hit L2, not "
     "HBM"),
    (["--levels", "1,,3"], "levels", "--levels: item 2 of '1,,3' is empty (e.g. 1,3)"),
    (["--levels", "0"], "levels", "--levels 0: level numbers start at 1 (the first green-context level)"),
    (["--levels", "a/b"], "levels",
     "--levels 'a/b': give level numbers (1,3) or PREFILL/DECODE SMs (112/20)"),
    (["--levels", " , "], "levels", "--levels: give at least one level, e.g. 1,3 or 112/20"),
    (["--levels", "9"], "levels",
     "--levels 9: level numbers run 1-6 (1=112/20, 2=104/28, 3=96/36, 4=88/44, 5=80/52, 6=72/60)"),
    (["--levels", "100/100"], "levels",
     "--levels 100/100: prefill and decode SMs must be > 0 and add up to at most 132"),
    (["--levels", "130/2"], "levels",
     "--levels 130/2: green contexts come in steps of 8 SMs (at least 8), so prefill 130 becomes 136 and "
     "leaves no SMs for decode: give a prefill count that is a multiple of 8"),
    (["--gemm-shape", "1048576x262144x131072", "--skinny-gemm", "4096x12288"], "gemm_shape",
     "the bench needs 895.80 GB (GEMM 1048576x262144x131072 893353197568 bytes, read buffer 2 x 1073741824 "
     "bytes, skinny GEMM 4096x12288 weights 3 x 100663296 bytes) but H100 SXM5 80GB has 85.5 GB: use a "
     "smaller --gemm-shape or --buffer-bytes or --skinny-gemm"),
    (["--model", "qwen3-8b", "--decode-bs-divisor", "0"], "decode_bs_divisor",
     "--decode-bs-divisor must be > 0, got 0"),
    (["--model", "qwen3-8b", "--token-budget", "-1"], "token_budget", "--token-budget must be > 0, got -1"),
    (["--model", "llama-3.1-70b", "--gpu", "l4", "--decode-bs", "512"], "decode_bs",
     "Llama-3.1-70B does not fit L4 24GB: 4 layers (6.85 GB) + KV cache of 512 x 2048 tokens (17.19 GB) + "
     "the 8192-token prefill (2.69 GB) + lm_head (2.10 GB) + headroom need 29.36 GB, 24.15 GB is free: use a "
     "smaller --decode-bs, --context or --prompt-tokens, or a GPU with more memory"),
]


@pytest.mark.parametrize(("args", "param", "line"), _CLI_ERRORS, ids=[" ".join(a) for a, _, _ in _CLI_ERRORS])
def test_bench_errors_print_as_before(args, param, line) -> None:
    r = CliRunner().invoke(app, ["bench", "--dry-run", *args])
    assert_one_line_error(r, 2)
    assert r.stderr.strip() == f"pdmux: error: {line}"


def _raised(call, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as caught:
        call(*args, **kwargs)
    return caught.value


def test_the_core_names_the_parameter_and_the_api_its_keyword() -> None:
    cases = [
        (_raised(bplan.parse_gemm_shape, "0x1x1"), "gemm_shape",
         "gemm_shape '0x1x1': M, N and K must all be > 0"),
        (_raised(bplan.parse_skinny, "abc"), "skinny_gemm", "skinny_gemm 'abc': write HIDDENxINTERMEDIATE"),
        (_raised(bplan.parse_bytes, "1e400"), "buffer_bytes",
         "buffer_bytes '1e400': at most 1099511627776 bytes"),
        (_raised(bplan.parse_level_items, "0"), "levels", "levels 0: level numbers start at 1"),
        (_raised(bplan.make_plan, H100, repeats=0), "repeats", "repeats must be from 1 to 1000, got 0"),
        (_raised(bplan.make_plan, H100, device_index=-1), "device", "device must be >= 0, got -1"),
        (_raised(bplan.make_plan, H100, levels="130/2"), "levels",
         "levels 130/2: green contexts come in steps"),
        (_raised(bplan.make_plan, H100, gemm=bplan.GemmShape(1 << 20, 1 << 18, 1 << 17)), "gemm_shape",
         "the bench needs 895.50 GB"),
        (_raised(rp.make_replay_plan, load_model("qwen3-8b"), H100, token_budget=0), "token_budget",
         "token_budget must be > 0, got 0"),
        (_raised(rp.make_replay_plan, load_model("qwen3-8b"), H100, available_bytes=10**9), "decode_bs",
         "Qwen3-8B does not fit H100 SXM5 80GB: 4 layers"),
    ]
    for exc, param, api_start in cases:
        assert exc.param == param, (str(exc), exc.param)
        assert messages.api_error_text(exc).startswith(api_start), messages.api_error_text(exc)
        assert str(exc) == messages.error_text(exc)
    memory = cases[7][0]
    assert messages.api_error_text(memory).endswith("use a smaller gemm_shape or buffer_bytes")
    replay = cases[9][0]
    assert messages.api_error_text(replay).endswith(
        "use a smaller decode_bs, context or prompt_tokens, or a GPU with more memory")


# --- the DeviceErrors (runtime failures, exit 1) name parameters too: the CLI's flags, the API's keywords --

_SIZES = "GEMM 8192x4096x12288 bf16 (369098752 bytes), read buffer and its copy 2 x 1073741824 bytes"
_SKINNY_SIZES = _SIZES + ", skinny GEMM weights 3 x 100663296 bytes"


class _FakeOom(Exception):
    """torch.cuda.OutOfMemoryError's stand-in."""


def _fake_torch(free_bytes: int, oom: bool = False) -> SimpleNamespace:
    """torch as Workloads._allocate sees it: ``free_bytes`` free on the device; every allocation out of
    memory when ``oom``."""
    def generator(device=None):
        if oom:
            raise _FakeOom("CUDA out of memory")
        return SimpleNamespace(manual_seed=lambda seed: None)

    return SimpleNamespace(cuda=SimpleNamespace(mem_get_info=lambda dev: (free_bytes, 80 << 30),
                                                OutOfMemoryError=_FakeOom),
                           Generator=generator, bfloat16="bf16")


def _allocate_error(free_bytes: int, oom: bool, **plan_options) -> DeviceError:
    work = runner.Workloads.__new__(runner.Workloads)  # the buffers only: no driver, no NVRTC library
    work.torch, work.dev = _fake_torch(free_bytes, oom), "cuda:1"
    work.plan = bplan.make_plan(H100, **plan_options)
    with pytest.raises(DeviceError) as caught:
        work._allocate()
    return caught.value


@pytest.mark.parametrize(("free_bytes", "oom", "skinny", "cli_line"), [
    (10**9, False, None,
     f"out of device memory: the bench needs 3.05 GB ({_SIZES}) but 1.00 GB is free on device 1: use a "
     "smaller --gemm-shape or --buffer-bytes"),
    (10**9, False, "4096x12288",
     f"out of device memory: the bench needs 3.36 GB ({_SKINNY_SIZES}) but 1.00 GB is free on device 1: "
     "use a smaller --gemm-shape or --buffer-bytes"),
    (80 << 30, True, None,
     f"out of device memory allocating {_SIZES} on device 1: use a smaller --gemm-shape or --buffer-bytes"),
    (80 << 30, True, "4096x12288",
     f"out of device memory allocating {_SKINNY_SIZES} on device 1: use a smaller --gemm-shape or "
     "--buffer-bytes"),
], ids=["short", "short-skinny", "oom", "oom-skinny"])
def test_bench_out_of_memory_names_gemm_shape_and_buffer_bytes(free_bytes, oom, skinny, cli_line) -> None:
    options = {"skinny": bplan.parse_skinny(skinny)} if skinny else {}
    exc = _allocate_error(free_bytes, oom, device_index=1, **options)
    assert exc.exit_code == 1 and exc.param == "gemm_shape"
    assert str(exc) == messages.error_text(exc) == cli_line
    assert messages.api_error_text(exc) == cli_line.replace("--gemm-shape or --buffer-bytes",
                                                            "gemm_shape or buffer_bytes")
    assert "{" not in exc.text(lambda name: name)  # every field filled: a template, not text with braces


def test_bench_out_of_memory_during_the_run_quotes_torch_as_a_value() -> None:
    work = runner.Workloads.__new__(runner.Workloads)
    work.plan = bplan.make_plan(H100)
    exc = runner._device_error(RuntimeError("CUDA out of memory. Tried to allocate {flag.tp} 2 GiB"), work)
    assert str(exc) == (f"out of device memory during the run ({_SIZES}): CUDA out of memory. Tried to "
                        "allocate {flag.tp} 2 GiB")  # torch's text is a value: never read as a template


def test_model_replay_out_of_memory_names_decode_bs_context_and_prompt_tokens() -> None:
    plan = rp.make_replay_plan(load_model("qwen3-8b"), H100)

    def no_memory(*args, **kwargs):
        raise MemoryError

    torch = SimpleNamespace(nn=SimpleNamespace(functional=None), bfloat16="bf16", randn=no_memory,
                            Generator=lambda device=None: SimpleNamespace(manual_seed=lambda seed: None))
    with pytest.raises(DeviceError) as caught:
        model_replay.ReplayModel(torch, plan, SimpleNamespace(dev="cpu", is_cuda=False))
    exc = caught.value
    assert exc.exit_code == 1 and exc.param == "decode_bs"
    assert str(exc) == ("out of memory building Qwen3-8B's 36 layers (planned 27.57 GB of 85.52 GB free): "
                        "use a smaller --decode-bs, --context or --prompt-tokens")
    assert messages.api_error_text(exc).endswith("use a smaller decode_bs, context or prompt_tokens")


class _NoLibcuda:
    """cuda.bindings.driver where libcuda cannot be loaded (cuda.pathfinder raises at the first call)."""

    def cuInit(self, flags):
        raise RuntimeError("Failure finding libcuda.so.1: not found. Searched /usr/lib64")


_NO_DRIVER = ("no NVIDIA driver: the CUDA driver library (libcuda) could not be loaded (Failure finding "
              "libcuda.so.1: not found); pdmux bench needs an NVIDIA GPU and driver (pdmux bench --dry-run "
              "shows the plan on any machine)")


def test_no_driver_names_dry_run(monkeypatch) -> None:
    with pytest.raises(DeviceError) as caught:
        greenctx._init_driver(_NoLibcuda())
    exc = caught.value
    assert exc.param == "dry_run" and str(exc) == _NO_DRIVER
    assert messages.api_error_text(exc) == _NO_DRIVER.replace("pdmux bench --dry-run", "pdmux bench dry_run")
    back = pickle.loads(pickle.dumps(exc.prefixed("task 1: ")))  # across a process pool: still a template
    assert type(back) is DeviceError and back.param == "dry_run" and str(back) == "task 1: " + _NO_DRIVER


def test_cli_prints_a_templated_device_error_with_its_flag(monkeypatch) -> None:
    """The CLI's handler (pdmux_cli/cli/common.py, every PdmuxError) prints a DeviceError's template as
    error_text does: flags, exit 1, one line."""
    monkeypatch.setattr(greenctx, "driver_module", lambda: _NoLibcuda())
    monkeypatch.setattr(greenctx, "set_max_connections", lambda: None)
    r = CliRunner().invoke(app, ["bench"])
    assert_one_line_error(r, 1)
    assert r.stderr.strip() == f"pdmux: error: {_NO_DRIVER}"


def test_untemplated_device_errors_print_as_written() -> None:
    exc = DeviceError("cuda-python is not installed: pip install 'pdmux[bench]' {x}")
    assert exc.values is None and str(exc) == exc.args[0] == messages.api_error_text(exc)
    assert str(pickle.loads(pickle.dumps(exc))) == str(exc)


# --- notes as findings: codes and values; the CLI's and the JSON's text -------------------------------


def test_plan_notes_are_findings() -> None:
    custom = bplan.PlanDevice("custom GPU", 132, (9, 0), None, None)
    notes = bplan.make_plan(custom).notes
    assert [(n.code, n.values) for n in notes] == [("bench.l2_unknown", {"gpu": "custom GPU", "multiple": 4})]
    rounded = bplan.make_plan(H100, levels="20/20").notes
    assert [(n.code, n.values) for n in rounded] == [
        ("bench.level_rounded_up", {"prefill_sms": 20, "decode_sms": 20, "multiple": 8})]
    assert messages.render(rounded[0]) == (
        "level 20/20: 20 prefill SMs is not a multiple of 8; the driver rounds it up")
    none = bplan.make_plan(bplan.PlanDevice("x", 16, (9, 0), 1 << 20, None)).notes
    assert none[0].code == "bench.no_levels" and messages.render(none[0]).startswith(
        "no SGLang levels: No valid partitions for 16 SMs at compute capability 9.0")


def test_dry_run_prints_and_writes_the_notes_as_before() -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["bench", "--dry-run", "--sms", "132", "--cc", "9.0"])
    assert r.exit_code == 0
    assert "note: L2 size of custom GPU unknown: cannot check the read buffer is >= 4x L2" in r.stdout
    r = runner.invoke(app, ["bench", "--dry-run", "--sms", "132", "--cc", "9.0", "--json"])
    assert json.loads(r.stdout)["notes"] == [
        "L2 size of custom GPU unknown: cannot check the read buffer is >= 4x L2"]


def test_replay_plan_notes_are_findings_and_read_as_before() -> None:
    plan = rp.make_replay_plan(load_model("gpt-oss-120b"), H100, available_bytes=40 * 10**9,
                               device_kind="cpu")
    assert [n.code for n in plan.notes] == ["bench.replay.layers_reused", "bench.replay.bf16_weights",
                                            "bench.replay.cpu"]
    assert plan.notes[0].values == {"built": 5, "layers": 36}
    assert messages.render_all(plan.notes)[:2] == [
        "5 of 36 layers built (all that fit beside the KV cache); each step runs all the model's layers, "
        "reusing the built ones in turn",
        "gpt-oss-120b stores mxfp4 weights; the replay holds and multiplies them in bf16 (the predictions "
        "below are for bf16 weights too)"]
    small_l2 = bplan.PlanDevice("tiny", 132, (9, 0), 10**9, 80 * 10**9)
    in_l2 = rp.make_replay_plan(load_model("qwen3-8b"), small_l2, available_bytes=6 * 10**9).notes[1]
    assert in_l2.code == "bench.replay.weights_in_l2" and messages.render(in_l2) == (
        "the built layers' weights (1544 MB) are under 4x the L2 (1000 MB): reused layers may be read from "
        "L2, not HBM, and decode comes out faster than the model would")


def test_a_blackwell_replay_plan_keeps_the_levels_note() -> None:
    """The levels note of a compute capability SGLang's automatic split refuses is a finding: the replay plan
    drops the L2 note by its code and keeps this one (it failed on ``startswith`` when notes were text)."""
    plan = rp.make_replay_plan(load_model("qwen3-8b"), bplan.PlanDevice.from_gpu(find_gpu("b200")))
    assert [n.code for n in plan.notes] == ["levels.cuda_granularity"]
    r = CliRunner().invoke(app, ["bench", "--dry-run", "--model", "qwen3-8b", "--gpu", "b200"])
    assert r.exit_code == 0, r.stderr
    assert ("note: SGLang's automatic split raises 'Unsupported compute capability: 10.0' at start-up"
            in r.stdout)
    r = CliRunner().invoke(app, ["bench", "--dry-run", "--model", "qwen3-8b", "--gpu", "b200", "--json"])
    assert json.loads(r.stdout)["notes"][0].startswith("SGLang's automatic split raises 'Unsupported compute")


def test_run_notes_word_as_the_bench_wrote_them() -> None:
    serialised = Finding("bench.serialised", {"prefill_sms": 104, "decode_sms": 28, "flops_factor": 0.5,
                                              "bandwidth_factor": 0.45, "limit": 1.1, "overlap_share": 0.05})
    assert messages.render(serialised) == (
        "level 104/28: flop factor 0.50 + bandwidth factor 0.45 <= 1.1: the GPU took turns instead of "
        "running both (overlap share 5%)")
    unknown = Finding("bench.serialised", {**serialised.values, "overlap_share": None})
    assert messages.render(unknown).endswith("(overlap share ?)")
    assert messages.render(Finding("bench.gate_retries", {"retries": 2})) == (
        "2 launch gate(s) opened before their work was queued and were retried longer (the host queues "
        "launches slowly)")
    stopped = [Finding("bench.interrupted"), Finding("bench.stopped", {"error": "x {y}"})]
    assert messages.render_all(stopped) == [
        "interrupted by Ctrl-C: the results hold the steps that finished", "stopped by an error: x {y}"]
    same = Finding("bench.connections_set",
                   {"var": "CUDA_DEVICE_MAX_CONNECTIONS", "value": 32, "previous": "32"})
    assert messages.render(same).endswith("as SGLang sets)")
    nvml = Finding("bench.clocks.no_device", {"pci_bus_id": "0000:3B:00.0", "error": "Not Found"})
    assert messages.render(nvml) == (
        "NVML has no device at PCI bus 0000:3B:00.0 (Not Found): no SM or memory clocks recorded")


# --- the whole-GPU fit ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen_h100():
    return build_step_model(find_gpu("h100"), load_model("qwen3-8b")), find_gpu("h100")


def _scaled(base, kind: str, batch: int, tokens: float, scale: float, where: str = "f.jsonl:{1}") -> CalPoint:
    point = CalPoint(kind, "one-batch", batch, tokens, 1.0, where)
    return CalPoint(kind, "one-batch", batch, tokens, predict(base, point) * scale, where)


def test_fit_refusals_name_model_and_gpu(qwen_h100) -> None:
    base, gpu = qwen_h100
    kv = _raised(check_points, base, gpu, [CalPoint("decode", "one-batch", 10000, 1e6, 0.01, "w.jsonl:1")])
    assert kv.param == "model" and str(kv) == (
        "w.jsonl:1: 10000 x 1,000,000 tokens of KV cache do not fit Qwen3-8B on H100 SXM5 80GB (at most "
        "461,604): not measured with this model and GPU (--model, --gpu)")
    assert messages.api_error_text(kv).endswith("not measured with this model and GPU (model, gpu)")
    ctx = _raised(check_points, base, gpu, [CalPoint("decode", "one-batch", 1, 50000, 0.01, "w.jsonl:2")])
    assert str(ctx) == ("w.jsonl:2: 50,000 tokens of context, past Qwen3-8B's 40,960: not measured with this "
                        "model (--model)")
    outliers = [_scaled(base, "decode", b, 1000, 1.1) for b in (1, 2, 4, 8, 16, 32, 64, 128)]
    many = _raised(check_points, base, gpu, [*outliers, _scaled(base, "decode", 3, 1000, 5),
                                             _scaled(base, "decode", 5, 1000, 6)])
    assert str(many) == (
        "2 of 10 points are more than 2.5x from what Qwen3-8B on H100 SXM5 80GB takes (first: f.jsonl:{1}): "
        "measured with another model, GPU or tensor parallelism? (--model, --gpu; pdmux calibrate fits "
        "single-GPU measurements)")
    fast = [_scaled(base, "prefill", 1, 512, 0.5), _scaled(base, "prefill", 4, 2048, 0.5)]
    peak = _raised(fit_whole_gpu, base, fast)
    assert peak.param == "model" and str(peak) == (
        "the measurements need a GEMM compute efficiency above the datasheet's peak on H100 SXM5 80GB "
        "(faster than the GPU can be): not measured with Qwen3-8B on H100 SXM5 80GB? (--model, --gpu; pdmux "
        "calibrate fits single-GPU measurements)")
    assert messages.api_error_text(peak).endswith(
        "(model, gpu; pdmux calibrate fits single-GPU measurements)")


def test_fit_notes_are_findings(qwen_h100) -> None:
    base, gpu = qwen_h100
    points = [_scaled(base, "decode", b, 1000, 1.1) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 3, 5, 7)]
    kept, notes = check_points(base, gpu, [*points, _scaled(base, "decode", 9, 1000, 5)])
    assert kept == points and [(n.code, n.values) for n in notes] == [
        ("fit.outliers_left_out", {"dropped": 1, "mismatch": 2.5, "first": "f.jsonl:{1}"})]
    fit = fit_whole_gpu(base, kept, "src", [*notes, *notes])  # each note once
    assert messages.render_all(fit.notes) == [
        "1 point(s) more than 2.5x from the model left out as outliers (first: f.jsonl:{1})"]
