"""pdmux's Python API for the simulation commands (pdmux/simulation.py): keyword functions with the CLI's
names and defaults, returning the workflows' results (to_dict() is the --json), InputError on bad input."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdmux.simulation import accuracy, calibrate, capacity, simulate, tune
from pdmux_cli.cli import app
from pdmux_cli.util.errors import InputError
from pdmux_cli.workflows.accuracy import AccuracyRequest
from pdmux_cli.workflows.calibrate import CalibrateRequest
from pdmux_cli.workflows.capacity import CapacityRequest
from pdmux_cli.workflows.simulate import SimulateRequest, SimulateResult
from pdmux_cli.workflows.tune import TuneRequest

FIX = Path(__file__).parent / "fixtures"
AZURE = FIX / "azure_conv_50.csv"


#: CLI parameters that are not options of the call: the trace's second spelling, the output form, the table.
RENDERING = {"trace_option", "as_json", "show_all"}


@pytest.mark.parametrize("function, request_class, command", [
    (simulate, SimulateRequest, "simulate"), (capacity, CapacityRequest, "capacity"),
    (tune, TuneRequest, "tune"), (calibrate, CalibrateRequest, "calibrate"),
    (accuracy, AccuracyRequest, "accuracy")])
def test_keywords_are_the_commands_options_with_the_requests_defaults(function, request_class,
                                                                      command) -> None:
    """Every option of the command, named as the CLI names it, defaulted as its request has it (the CLI's)."""
    import typer

    params = {n: p for n, p in inspect.signature(function).parameters.items() if n != "progress"}
    refused = {"disagg"} if command == "tune" else set()  # tune --disagg says: use simulate or capacity
    cli = {p.name for p in typer.main.get_command(app).commands[command].params} - RENDERING - refused
    assert set(params) == cli
    fields = {f.name: f for f in dataclasses.fields(request_class)}
    for name, param in params.items():
        field = fields[name]
        default = field.default if field.default is not dataclasses.MISSING else inspect.Parameter.empty
        assert param.default == default, name


def test_simulate_takes_sequences_and_text_paths_as_the_cli_takes_lists() -> None:
    result = simulate(str(AZURE), policies=["pdmux", "chunked"], chunk_sizes=(512, 2048), workers=1)
    assert isinstance(result, SimulateResult)
    data = result.to_dict()
    assert [p["policy"] for p in data["policies"]] == ["pdmux", "chunked 512", "chunked 2048"]
    r = CliRunner().invoke(app, ["simulate", str(AZURE), "--policies", "pdmux,chunked", "--chunk-sizes",
                                 "512,2048", "--workers", "1", "--json"])
    assert json.loads(json.dumps(data)) == json.loads(r.stdout)
    assert data["trace"]["requests"] == 50 and data["pdmux"]["sglang"] == "0.5.23"


def test_capacity_takes_one_config_or_several(tmp_path: Path) -> None:
    yaml = tmp_path / "levels.yaml"
    yaml.write_text("sm_group_num: 3\nmanual_divisions:\n  - [72, 60, 0]\n")
    outcome = capacity(AZURE, policies="pdmux", config=yaml, tolerance=0.2, workers=1)
    assert [p["policy"] for p in outcome.to_dict()["policies"]] == ["pdmux", "pdmux (levels.yaml)"]
    assert outcome.to_dict()["policies"][1]["config"] == str(yaml)


def test_tune_returns_the_winning_config(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    outcome = tune(AZURE, slo_ttft=1000, slo_itl=60, sm_group_nums=[3], divisors=[12, 48], budgets=[4096],
                   slo_margins="none", workers=1, output=str(out))
    assert out.read_text() == outcome.yaml
    assert outcome.config.sm_group_num == 3 and outcome.to_dict()["rows"][outcome.search.best]["config"][
        "sm_group_num"] == 3


def test_calibrate_and_accuracy() -> None:
    bench = FIX / "sglang" / "model_made_one_batch_h100_qwen3_8b.jsonl"
    result = calibrate(sglang_bench=[str(bench)], model="qwen3-8b", gpu="h100")
    assert result.mode == "whole_gpu" and result.calibration.gpu_name == "H100 SXM5 80GB"
    assert result.calibration.whole_gpu is not None and "whole_gpu" in result.yaml
    terms = accuracy().to_dict()["terms"]
    assert terms and all({"term", "method"} <= set(t) for t in terms)


def test_bad_input_raises_input_error_with_the_cli_line_in_keywords() -> None:
    """The CLI's line, each flag as its keyword (``--policies`` is ``policies``)."""
    with pytest.raises(InputError, match="^policies: unknown fifo; use pdmux, chunked"):
        simulate(AZURE, policies="fifo")
    with pytest.raises(InputError, match="^qps draws synthetic arrivals"):
        capacity(AZURE, qps=3)
    with pytest.raises(InputError, match="^runs and workers go with serving"):
        accuracy(workers=2)
    with pytest.raises(TypeError):
        simulate(AZURE, no_such_option=1)


def test_the_speculative_keywords_are_the_groups_fields() -> None:
    """simulate, capacity, tune and estimate take the speculative options as typed keywords
    (``SpeculativeKeywords`` in ``ServerKeywords`` / ``EstimateKeywords``, PEP 692): the keys are
    ServerOptions' SPECULATIVE fields, each keyword-only with default None, and the estimate request has
    them all; a value reaches the request (a bad one is refused by its name)."""
    import typing

    from pdmux import estimate
    from pdmux_cli.workflows.estimate import EstimateKeywords, EstimateRequest
    from pdmux_cli.workflows.fields import SPECULATIVE, group_fields
    from pdmux_cli.workflows.server import ServerKeywords, ServerOptions, SpeculativeKeywords

    group = {f.name for f in group_fields(ServerOptions, SPECULATIVE)}
    assert set(typing.get_type_hints(SpeculativeKeywords)) == group and len(group) == 6
    assert group <= set(typing.get_type_hints(ServerKeywords)) and group <= set(
        typing.get_type_hints(EstimateKeywords))
    assert group <= {f.name for f in dataclasses.fields(EstimateRequest)}
    for function in (simulate, capacity, tune, estimate):
        params = inspect.signature(function).parameters
        assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY and params[name].default is None
                   for name in group), function.__name__
    with pytest.raises(InputError) as err:
        simulate(AZURE, speculative_algorithm="EAGLE", speculative_accept_length=9.0)
    assert err.value.param == "speculative_accept_length"


def test_the_serving_terms_keywords_are_the_groups_fields() -> None:
    """simulate, capacity and tune take the serving terms as ``ServingTerms`` (in ``**keywords:
    Unpack[ServerKeywords]``)
    (typed for editors, PEP 692): its keys and types are ServerOptions' SERVING_TERMS fields', each a
    keyword of the functions' signatures, and a keyword that is none is a TypeError."""
    import typing

    from pdmux_cli.workflows.fields import SERVING_TERMS, group_fields
    from pdmux_cli.workflows.server import ServerOptions, ServingTerms

    hints = typing.get_type_hints(ServerOptions)
    group = {f.name: hints[f.name] for f in group_fields(ServerOptions, SERVING_TERMS)}
    assert typing.get_type_hints(ServingTerms) == group and len(group) == 5
    for function in (simulate, capacity, tune):
        params = inspect.signature(function).parameters
        assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY and params[name].default is None
                   for name in group), function.__name__
    with pytest.raises(TypeError, match=r"simulate\(\) got an unexpected keyword argument 'eager_launch'"):
        simulate(AZURE, eager_launch=0.1)
    with pytest.raises(InputError, match="^eager_launch_ms must be from 0 to 1 ms, got 2$"):
        simulate(AZURE, eager_launch_ms=2)
