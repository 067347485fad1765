"""The Python API (``import pdmux``): the CLI's names and defaults, ``to_dict()`` equal to ``--json``, the
``"pdmux"`` provenance block, errors as :class:`InputError`, README's examples, a light import, packaging."""

from __future__ import annotations

import dataclasses
import doctest
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pdmux
from pdmux_cli import __version__, messages
from pdmux_cli.cli import app
from pdmux_cli.cli import check_config as cli_check_config
from pdmux_cli.cli import estimate as cli_estimate
from pdmux_cli.cli import gen_config as cli_gen_config
from pdmux_cli.cli import splits as cli_splits
from pdmux_cli.util.errors import printable
from pdmux_cli.workflows.check_config import CheckConfigRequest
from pdmux_cli.workflows.estimate import EstimateRequest
from pdmux_cli.workflows.gen_config import GenConfigRequest
from pdmux_cli.workflows.planning_inputs import float_tuple, int_tuple
from pdmux_cli.workflows.splits import SplitsRequest

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

#: (API function, request dataclass, CLI command function, request fields that are no CLI option)
COMMANDS = [
    (pdmux.splits, SplitsRequest, cli_splits.splits, set()),
    (pdmux.estimate, EstimateRequest, cli_estimate.estimate, set()),
    (pdmux.gen_config, GenConfigRequest, cli_gen_config.gen_config, set()),
    (pdmux.check_config, CheckConfigRequest, cli_check_config.check_config, set()),
]


def cli_json(*args: str) -> dict:
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code in (0, 2), r.stderr
    return json.loads(r.stdout)


def as_json(data: dict) -> dict:
    """``data`` as the CLI prints it (tuples become lists)."""
    return json.loads(json.dumps(data, allow_nan=False))


@pytest.mark.parametrize("api, request_cls, command, extra", COMMANDS)
def test_api_keywords_are_the_requests_fields_and_the_cli_options(api, request_cls, command, extra) -> None:
    """Same names, same defaults: API keyword = request field = CLI option (list options: the CLI's text
    parses to the API's sequence)."""
    fields = {f.name: f.default for f in dataclasses.fields(request_cls) if f.name not in extra}
    params = {name: p.default for name, p in inspect.signature(api).parameters.items()}
    assert params.keys() == fields.keys()
    for name, default in params.items():
        want = fields[name]
        assert (default is inspect.Parameter.empty and want is dataclasses.MISSING) or default == want, name
    cli = {
        name: p.default.default
        for name, p in inspect.signature(command).parameters.items()
        if name != "as_json"
    }
    assert cli.keys() == fields.keys()
    for name, value in cli.items():
        want = fields[name]
        if value is Ellipsis:  # a required argument (check-config's path)
            assert want is dataclasses.MISSING, name
        elif isinstance(value, str) and isinstance(want, tuple):
            parse = float_tuple if isinstance(want[0], float) else int_tuple
            assert parse(value, name) == want, name
        else:
            assert value == want, name


def test_splits_to_dict_is_the_cli_json() -> None:
    result = pdmux.splits(gpu="h100", decode_bs=[1, 32], prompt_tokens="8192")
    assert as_json(result.to_dict()) == cli_json(
        "splits", "--gpu", "h100", "--decode-bs", "1,32", "--prompt-tokens", "8192"
    )
    assert [(bs, k) for bs, k, _ in result.choices] == [(1, 1), (32, 5)]  # 112/20, then 80/52
    assert result.layers == [(8192, 8, 5)]
    every = pdmux.splits(all_gpus=True)
    assert as_json(every.to_dict()) == cli_json("splits", "--all")
    h100 = next(g for g in every.gpus if g["key"] == "h100-sxm")
    assert [(g["prefill_sms"], g["decode_sms"]) for g in h100["groups"]][1:3] == [(112, 20), (104, 28)]


def test_estimate_to_dict_is_the_cli_json() -> None:
    chapter = pdmux.estimate(cost_model="chapter")
    assert as_json(chapter.to_dict()) == cli_json("estimate", "--cost-model", "chapter")
    # the chapter's table (pd-multiplexing-chapter.txt), as tests/test_cli.py pins it through the CLI
    assert [round(r.itl_ms) for r in chapter.rows] == [9, 299, 74, 19, 9, 11, 15]
    assert [r.tokens_during_prefill for r in chapter.rows] == [None, 0, 4, 16, 55, 43, 33]
    disagg = pdmux.estimate(model="llama-3.1-70b", tp=8, disagg="1P1D", all_levels=True, level=(96, 36))
    assert as_json(disagg.to_dict()) == cli_json(
        "estimate",
        "--model",
        "llama-3.1-70b",
        "--tp",
        "8",
        "--disagg",
        "1P1D",
        "--all-levels",
        "--level",
        "96/36",
    )
    assert disagg.to_dict()["disagg"]["gpus"] == 16 and disagg.to_dict()["level"]["decode_sms"] == 36


def test_gen_config_and_check_config_to_dict_are_the_cli_json(tmp_path) -> None:
    cfg = pdmux.gen_config(gpu="b200")
    assert as_json(cfg.to_dict()) == cli_json("gen-config", "--gpu", "b200")
    assert cfg.config.manual_divisions[0] == (120, 28, 0)  # Blackwell: always written out
    path = tmp_path / "b200.yaml"
    written = pdmux.gen_config(gpu="b200", output=path)
    assert path.read_text() == written.yaml == cfg.yaml
    assert written.launch_flags[:3] == ["--enable-pdmux", "--pdmux-config-path", str(path)]
    ok = pdmux.check_config(path, gpu="b200")
    assert ok.ok and as_json(ok.to_dict()) == cli_json("check-config", str(path), "--gpu", "b200")
    bad = pdmux.check_config(path, gpu="h100")  # 148-SM levels on a 132-SM GPU: a result, not an exception
    assert not bad.ok and bad.problems[0].rule == "both"
    assert as_json(bad.to_dict()) == cli_json("check-config", str(path), "--gpu", "h100")


def test_gen_config_tune_is_the_cli_json(tmp_path) -> None:
    """--tune through the API: the same winner, summary and provenance as the CLI's JSON."""
    args = dict(tune=True, trace=str(ROOT / "tests" / "fixtures" / "azure_conv_50.csv"), slo_ttft=2000,
                slo_itl=100, workers=1)
    tuned = pdmux.gen_config(**args)
    cli = cli_json("gen-config", "--tune", "--trace", args["trace"], "--slo-ttft", "2000", "--slo-itl", "100",
                   "--workers", "1")
    assert as_json(tuned.to_dict()) == cli
    assert tuned.tune["best"] == cli["tune"]["best"]
    assert tuned.to_dict()["pdmux"]["cost_model"]["s_sat"] == 88.0
    assert tuned.tune_search.best == cli["tune"]["best"]  # the search itself, for a caller's own table


def test_gen_config_workflow_needs_no_cli_package() -> None:
    """SLO levels and the tune are workflows: gen-config's runs them without importing pdmux_cli.cli."""
    code = ("import sys; from pdmux_cli.workflows.gen_config import GenConfigRequest, gen_config\n"
            "r = gen_config(GenConfigRequest(gpu='h100', slo_itl=20, context=2048))\n"
            "assert r.slo_levels['target_itl_ms'] == 20 and r.tune_search is None, r.slo_levels\n"
            "bad = sorted(m for m in sys.modules if m.startswith('pdmux_cli.cli'))\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_provenance_block() -> None:
    """The "pdmux" key: version, rule set, and the cost model's sources, last in every planning JSON."""
    d = pdmux.estimate().to_dict()
    assert list(d)[-1] == "pdmux"
    assert d["pdmux"] == {
        "version": __version__,
        "sglang": "0.5.23",
        "cost_model": {
            "name": "roofline",
            "efficiency": "h100-sxm.yaml",
            "calibration": None,
            "serving": "0.5",
            "s_sat": 88.0,
        },
    }
    # S_SAT 88 of 132 SMs: the default the roofline's fit gives H100 (README), the PD-mux row's
    assert next(r for r in d["rows"] if r["policy"] == "pdmux")["s_sat_sms"] == 88.0
    chapter = pdmux.estimate(cost_model="chapter").to_dict()["pdmux"]["cost_model"]
    assert chapter == {
        "name": "chapter",
        "efficiency": None,
        "calibration": None,
        "serving": None,
        "s_sat": [44.0, 66.0, 88.0],
    }  # the chapter's 1/3, 1/2, 2/3 of 132 SMs
    assert pdmux.estimate(gpu="a100").to_dict()["pdmux"]["cost_model"]["efficiency"] == "a100-sxm-80gb.yaml"
    assert pdmux.estimate(sglang="standard@b875545").to_dict()["pdmux"]["sglang"] == "standard@b875545"
    assert pdmux.splits().to_dict()["pdmux"] == {
        "version": __version__,
        "sglang": "0.5.23",
        "cost_model": None,
    }
    assert pdmux.splits(all_gpus=True).to_dict()["pdmux"]["sglang"] == "0.5.23"
    assert pdmux.gen_config().to_dict()["pdmux"]["cost_model"] is None
    slo = pdmux.gen_config(slo_itl=20, context=2048).to_dict()["pdmux"]["cost_model"]
    assert slo["name"] == "roofline" and slo["efficiency"] == "h100-sxm.yaml" and slo["serving"] == "0.5"


def test_provenance_names_a_calibration_file(tmp_path) -> None:
    from pdmux_cli.costmodel.calibration_file import Calibration, dump_calibration

    cal = Calibration(
        gpu_name="NVIDIA H100 80GB HBM3",
        sm_count=132,
        compute_capability=(9, 0),
        driver_cuda_version="12.8",
        cuda_version="12.6",
        date="2025-06-01",
        bandwidth_curve=((16, 1.2e12), (64, 2.9e12), (132, 3.0e12)),
        flops_curve=((8, 40e12), (132, 660e12)),
        copy_bytes_per_s=3.0e12,
        matmul_flops_per_s=670e12,
        corun=(),
        s_sat_sms=64,
        complete=True,
        source="test",
    )
    path = tmp_path / "calibration.yaml"
    path.write_text(dump_calibration(cal))
    block = pdmux.estimate(calibration=path).to_dict()["pdmux"]["cost_model"]
    # the measured curve replaces S_SAT; the serving terms stay serving.yaml's (the file has none)
    assert block == {
        "name": "roofline",
        "efficiency": "h100-sxm.yaml",
        "calibration": str(path),
        "serving": "0.5",
        "s_sat": None,
    }
    assert cli_json("estimate", "--calibration", str(path))["pdmux"]["cost_model"] == block


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: pdmux.estimate(decode_bs="32"), "decode_bs must be an integer, got '32'"),
        (lambda: pdmux.estimate(decode_bs=True), "decode_bs must be an integer"),
        (lambda: pdmux.estimate(decode_bs=0), "decode_bs must be from 1"),
        (lambda: pdmux.estimate(level=(80,)), "level takes two integers, e.g. (80, 52), got (80,)"),
        (lambda: pdmux.estimate(level="80/"), "level '80/'"),
        (lambda: pdmux.estimate(chunk_sizes=[0]), "chunk_sizes: 0 must be >= 1"),
        (lambda: pdmux.estimate(s_sat=[float("nan")]), "s_sat takes a list of finite numbers"),
        (lambda: pdmux.estimate(gpu="h1000"), "unknown GPU 'h1000'"),
        # "~user" with no such user: a name, not a home to expand (Path.expanduser raised RuntimeError)
        (lambda: pdmux.estimate(model="~no-such-user-pdmux"), "unknown model '~no-such-user-pdmux'"),
        (lambda: pdmux.splits(decode_bs=[]), "decode_bs: give at least one value"),
        (lambda: pdmux.splits(decode_bs=7), "decode_bs takes a list of integers"),
        # splits' prompt_tokens is a list, not simulate's length spec (which takes an integer)
        (lambda: pdmux.splits(prompt_tokens=1024), "prompt_tokens takes a list of integers or text (a str)"),
        (lambda: pdmux.splits(decode_bs="1,,2"), "decode_bs: item 2 of '1,,2' is empty"),
        (lambda: pdmux.splits(all_gpus=True, tp=2), "tp describes one deployment"),
        (lambda: pdmux.splits(sms=132), "sms and cc go together"),
        (lambda: pdmux.gen_config(sm_group_num=0), "sm_group_num must be > 0, got 0"),
        (lambda: pdmux.gen_config(qps=3), "qps goes with tune"),
        (lambda: pdmux.check_config("x.yaml", sglang="nope"), "nope"),
        (lambda: pdmux.simulate(1), "trace takes a file path (str or os.PathLike), got 1"),
        (lambda: pdmux.simulate(policies=1), "policies takes a list of names or comma-separated text, got 1"),
        (lambda: pdmux.capacity(cost_model=3), "cost_model must be text (a str), got 3"),
        (lambda: pdmux.calibrate(sglang_bench=[b"x.jsonl"]), "sglang_bench takes a file path"),
        (lambda: pdmux.tune("t.csv", slo_ttft="1000", slo_itl=60), "slo_ttft must be a number, got '1000'"),
        (lambda: pdmux.simulate(synthetic=True, qps=1, progress=3), "progress takes a callable"),
        # user text quoted in the message with its control characters escaped: still one line
        (lambda: pdmux.simulate("no\nfile.csv"), "trace file no\\nfile.csv: no such file"),
    ],
)
def test_bad_input_raises_input_error(call, message) -> None:
    """The API's errors name keywords (``decode_bs``), the CLI's rendering of the same error flags
    (``--decode-bs``); an ``InputError`` is a ``ValueError`` and a ``TypeError``."""
    with pytest.raises(pdmux.InputError) as info:
        call()
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    assert str(info.value) == printable(messages.api_error_text(info.value))  # escaped as the CLI prints
    if info.value.param and str(info.value).startswith(info.value.param):  # the CLI's line: its flag
        assert messages.error_text(info.value).startswith(messages.flag(info.value.param))


def test_gen_config_writes_nothing_on_bad_input_and_never_over_an_input(tmp_path) -> None:
    out = tmp_path / "pdmux.yaml"
    with pytest.raises(pdmux.InputError, match="sm_group_num is 3, not 5"):
        pdmux.gen_config(divisions="112:20:0", sm_group_num=5, output=out)
    assert not out.exists()
    model = tmp_path / "config.json"
    model.write_text((ROOT / "profiles" / "models" / "Qwen3-8B.json").read_text())
    with pytest.raises(pdmux.InputError):
        pdmux.gen_config(slo_itl=20, context=2048, model=str(model), output=model)
    assert json.loads(model.read_text())["num_hidden_layers"] == 36  # untouched


def test_readme_python_api_examples_run(tmp_path, monkeypatch) -> None:
    """The manual's "Python API" (docs/python-api.md): every ``>>>`` example gives the output written under
    it (real figures of the shipped profiles: a change of the cost model that moves them must update it)."""
    text = (ROOT / "docs" / "python-api.md").read_text()
    section = re.search(r"^## Python API.*?(?=^## |\Z)", text, re.MULTILINE | re.DOTALL).group(0)
    section = re.sub(r"^```.*$", "", section, flags=re.MULTILINE)  # a fence ends an example's output
    test = doctest.DocTestParser().get_doctest(section, {}, "Python API", "docs/python-api.md", 0)
    assert len(test.examples) >= 15
    monkeypatch.chdir(tmp_path)  # gen_config writes pdmux-b200.yaml here
    out: list[str] = []
    result = doctest.DocTestRunner(verbose=False).run(test, out=out.append)
    assert result.failed == 0, "".join(out)
    assert (tmp_path / "pdmux-b200.yaml").exists()


LIGHT = """
import sys
import pdmux
{calls}
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(",".join(heavy))
"""

PLANNING_CALLS = """
pdmux.splits().to_dict(); pdmux.splits(all_gpus=True).to_dict()
pdmux.estimate(all_levels=True).to_dict(); pdmux.estimate(model="deepseek-v3", gpu="b200").to_dict()
pdmux.gen_config(gpu="b200").to_dict()
pdmux.check_config("tests/fixtures/sglang_runbooks/layerwise_a64f33f0_h100.yaml").to_dict()
"""
HEAVY = ("torch", "cuda", "numpy", "matplotlib", "aiconfigurator")


@pytest.mark.parametrize(
    "calls, heavy",
    [
        ("", HEAVY + ("typer", "rich")),
        # the API needs no CLI: neither typer nor rich either
        (PLANNING_CALLS, HEAVY + ("typer", "rich")),
        # SLO levels are sized by the simulator's set-up, still in pdmux_cli/cli/ (typer comes along)
        ("pdmux.gen_config(slo_itl=20, context=2048).to_dict()", HEAVY),
    ],
)
def test_import_pdmux_loads_nothing_heavy(calls, heavy) -> None:
    """Neither torch, cuda-python, numpy, matplotlib nor aiconfigurator, on import or in the calls."""
    out = subprocess.run(
        [sys.executable, "-c", LIGHT.format(calls=calls, heavy=heavy)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"heavy modules imported: {out.stdout.strip()}"


def test_every_package_ships() -> None:
    """pyproject's packages list every package of pdmux_cli/ and pdmux/ (a missing one would be left out of
    the wheel, and ``pip install .`` would break where the editable install works)."""
    text = (ROOT / "pyproject.toml").read_text()
    listed = set(
        re.findall(r'"(pdmux(?:_cli)?(?:\.[a-z_.]+)?)"', text.split("packages = [", 1)[1].split("]", 1)[0])
    )
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("pdmux", "pdmux_cli")
        for p in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found <= listed, sorted(found - listed)
    assert {"pdmux", "pdmux_cli.workflows"} <= listed


def test_package_docstring_example_runs() -> None:
    """``pdmux/__init__.py``'s example gives what it says (the level SGLang picks for 64 decode requests)."""
    result = doctest.testmod(pdmux, verbose=False)
    assert result.attempted >= 2 and result.failed == 0


def test_runtime_failures_raise_the_exported_pdmux_error() -> None:
    """A runtime failure (here: a Ray address nothing listens on) raises ``pdmux.PdmuxError`` with the
    CLI's line, not an input error; ``InputError`` is a ``PdmuxError`` too."""
    pytest.importorskip("ray")
    assert issubclass(pdmux.InputError, pdmux.PdmuxError) and issubclass(pdmux.DeviceError, pdmux.PdmuxError)
    with pytest.raises(pdmux.PdmuxError) as info:
        pdmux.simulate(trace=str(ROOT / "tests" / "fixtures" / "azure_conv_50.csv"), executor="ray",
                       ray_address="127.0.0.1:1", max_requests=5)
    assert not isinstance(info.value, pdmux.InputError)
    assert str(info.value).startswith("executor ray: cannot reach the Ray cluster at 127.0.0.1:1")
    assert "\n" not in str(info.value)


def test_estimates_serving_terms_keywords_are_its_requests_group() -> None:
    """``pdmux.estimate`` takes its serving terms as ``EstimateServingTerms`` (in ``**keywords:
    Unpack[EstimateKeywords]``, typed
    for editors): the keys and types are EstimateRequest's SERVING_TERMS fields'."""
    import typing

    from pdmux_cli.workflows.estimate import EstimateServingTerms
    from pdmux_cli.workflows.fields import SERVING_TERMS, group_fields

    hints = typing.get_type_hints(EstimateRequest)
    group = {f.name: hints[f.name] for f in group_fields(EstimateRequest, SERVING_TERMS)}
    assert typing.get_type_hints(EstimateServingTerms) == group
    assert list(group) == ["per_request_overhead_ms", "eager_launch_ms"]
    with pytest.raises(pdmux.InputError, match="^eager_launch_ms must be from 0 to 1 ms, got 2$"):
        pdmux.estimate(eager_launch_ms=2)
