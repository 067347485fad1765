"""One declaration per option (issue 32, items 1 and 2): the cost model's knobs travel as one
:class:`CostModelOptions` to ``build_step_model``; the serving terms simulate, tune and capacity share,
and the speculative decoding options estimate takes too, are declared once, on ``ServerOptions``'
fields, the commands' options built from them."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import capacity as cli_capacity
from pdmux_cli.cli import estimate as cli_estimate
from pdmux_cli.cli import simulate as cli_simulate
from pdmux_cli.costmodel import build_step_model
from pdmux_cli.costmodel.options import CostModelOptions
from pdmux_cli.messages import flag, flags_in
from pdmux_cli.planning.estimate import Scenario, estimate
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.util.errors import InputError
from pdmux_cli.workflows.deployment import DeploymentOptions
from pdmux_cli.workflows.capacity import CapacityRequest
from pdmux_cli.workflows.estimate import EstimateRequest
from pdmux_cli.workflows.fields import (
    DEPLOYMENT,
    GENERATED_SHARED_PREFIX,
    HELP,
    RUN,
    SERVING_TERMS,
    SPECULATIVE,
    WORDINGS,
    WORKLOAD,
    group_fields,
)
from pdmux_cli.workflows.run_options import RunOptions
from pdmux_cli.workflows.server import ServerOptions
from pdmux_cli.workflows.workload import GSP_OPTIONS, WorkloadOptions

H100 = find_gpu("h100")
QWEN = load_model("qwen3-8b")
KNOBS = {"step_overhead_ms": 0.5, "per_request_overhead_ms": 0.2, "admission_delay_ms": 3.0,
         "first_token_delay_ms": 1.0, "admission_interval_ms": 0.5, "eager_launch_ms": 0.05,
         "frontend_token_ms": 0.01}


def _times(step_model) -> tuple:
    return (step_model.decode_s(132, 32, 32 * 2048), step_model.prefill_s(132, [(4096, 0)]),
            step_model.decode_cpu_s(32), step_model.request_s(32), step_model.launch_cpu_s(),
            step_model.serving, step_model.source)


def test_options_and_loose_knobs_build_the_same_model() -> None:
    assert _times(build_step_model(H100, QWEN, CostModelOptions(**KNOBS))) == _times(
        build_step_model(H100, QWEN, **KNOBS))
    # loose knobs go on top of the options
    on_top = build_step_model(H100, QWEN, CostModelOptions(step_overhead_ms=9.0), step_overhead_ms=0.5)
    assert _times(on_top) == _times(build_step_model(H100, QWEN, step_overhead_ms=0.5))
    chapter = CostModelOptions(cost_model="chapter", mfu=0.6, s_sat=60)
    assert _times(build_step_model(H100, QWEN, chapter)) == _times(
        build_step_model(H100, QWEN, cost_model="chapter", mfu=0.6, s_sat=60))


def test_make_setup_takes_the_options() -> None:
    by_options = make_setup(H100, QWEN, CostModelOptions(**KNOBS))
    by_keywords = make_setup(H100, QWEN, **KNOBS)
    assert _times(by_options.step_model) == _times(by_keywords.step_model)


def test_a_keyword_that_is_no_knob_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="build_step_model.*'step_overhead'"):
        build_step_model(H100, QWEN, step_overhead=1.0)
    with pytest.raises(TypeError, match="make_setup.*'nonsense'"):
        make_setup(H100, QWEN, nonsense=1)


def test_each_model_refuses_the_others_knobs_in_declaration_order() -> None:
    both = CostModelOptions(cost_model="chapter", step_overhead_ms=1.0, eager_launch_ms=0.1)
    assert both.given_outside("chapter") == ["step_overhead_ms", "eager_launch_ms"]
    with pytest.raises(InputError) as exc:
        build_step_model(H100, QWEN, both)
    assert exc.value.param == "step_overhead_ms"
    assert CostModelOptions(mfu=0.5, bandwidth_efficiency=0.8).given_outside("roofline") == [
        "bandwidth_efficiency", "mfu"]


def test_of_reads_a_requests_fields() -> None:
    request = ServerOptions(cost_model="roofline", s_sat=80, eager_launch_ms=0.02, admission_delay_ms=4)
    options = CostModelOptions.of(request)
    assert (options.s_sat, options.eager_launch_ms, options.admission_delay_ms) == (80, 0.02, 4)
    assert options.frontend_token_ms is None  # not a request field: the default
    assert CostModelOptions.of(request, s_sat=None).s_sat is None


def test_the_request_fields_default_as_the_options_do() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(CostModelOptions)}
    shared = [f for f in dataclasses.fields(ServerOptions) if f.name in defaults]
    assert len(shared) >= 10
    for f in shared:
        assert f.default == defaults[f.name], f.name


def test_the_scenario_carries_the_options() -> None:
    chapter = Scenario(cost=CostModelOptions(cost_model="chapter"))
    assert chapter.cost_model == "chapter"
    assert estimate(H100, QWEN, chapter).cost_model == "chapter"


SHARED = (cli_simulate.simulate, cli_simulate.tune, cli_capacity.capacity)
SIM_CAP = (cli_simulate.simulate, cli_capacity.capacity)
#: (request class, group, the parameter the group follows, its fields, the commands taking it)
GROUPS = [
    (WorkloadOptions, GENERATED_SHARED_PREFIX, "output_tokens", ("dataset_name", *GSP_OPTIONS), SIM_CAP),
    (DeploymentOptions, DEPLOYMENT, "tp", ("dp", "load_balance_method", "disagg", "disagg_tp", "kv_link",
                                           "kv_link_gb_s", "kv_link_latency_us"), SIM_CAP),
    (ServerOptions, SERVING_TERMS, "step_overhead_ms", ("per_request_overhead_ms", "eager_launch_ms",
                                                        "admission_delay_ms", "first_token_delay_ms",
                                                        "admission_interval_ms"), SHARED),
    (EstimateRequest, SERVING_TERMS, "step_overhead_ms", ("per_request_overhead_ms", "eager_launch_ms"),
     (cli_estimate.estimate,)),
    (EstimateRequest, DEPLOYMENT, "tp",
     ("disagg", "kv_link", "kv_link_gb_s", "kv_link_latency_us", "disagg_tp"), (cli_estimate.estimate,)),
    (WorkloadOptions, WORKLOAD, "trace_option",
     ("synthetic", "trace_format", "qps", "rate_scale", "max_requests", "duration", "seed", "prompt_tokens",
      "output_tokens"), (cli_simulate.simulate,)),
    (CapacityRequest, WORKLOAD, "trace_option",
     ("synthetic", "trace_format", "qps", "max_requests", "duration", "seed", "prompt_tokens",
      "output_tokens"), (cli_capacity.capacity,)),
    (RunOptions, RUN, "max_concurrency", ("workers", "executor", "ray_address", "max_steps"),
     (cli_simulate.simulate,)),
    (RunOptions, RUN, "speculative_accept_length", ("workers", "executor", "ray_address", "max_steps"),
     (cli_simulate.tune, cli_capacity.capacity)),
    (ServerOptions, SPECULATIVE, "disable_cuda_graph",
     ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
      "speculative_num_draft_tokens", "speculative_draft_model_path", "speculative_accept_length"),
     (*SHARED, cli_estimate.estimate)),
]


@pytest.mark.parametrize("cls, group, after, names, command",
                         [(*g[:4], c) for g in GROUPS for c in g[4]])
def test_a_groups_options_are_built_from_their_declarations(cls, group, after, names, command) -> None:
    declared = group_fields(cls, group)
    assert tuple(f.name for f in declared) == names
    assert GSP_OPTIONS == ("gsp_num_groups", "gsp_prompts_per_group", "gsp_system_prompt_len",
                           "gsp_question_len", "gsp_output_len", "gsp_range_ratio", "gsp_ordered")
    params = inspect.signature(command).parameters
    names = list(params)
    at = names.index(after)
    assert names[at + 1:at + 1 + len(declared)] == [f.name for f in declared]
    for f in declared:
        option = params[f.name].default
        assert option.default == f.default and option.help == flags_in(_help(f, command)), f.name
        assert option.param_decls[0] == flag(f.name)


def _help(f: dataclasses.Field, command: object) -> str:
    """``f``'s help as ``command`` words it: its own wording on the declaration, else the declared help."""
    return f.metadata.get(WORDINGS, {}).get(command.__name__, f.metadata[HELP])


#: An option tune words in its signature: none (--disagg, refused, is DeploymentOptions' with tune's wording).
TUNE_OWN: set[str] = set()


@pytest.mark.parametrize("command, own", [(cli_simulate.simulate, set()), (cli_capacity.capacity, set()),
                                          (cli_simulate.tune, TUNE_OWN)])
def test_every_declared_option_a_command_takes_is_its_declaration(command, own) -> None:
    """An option declared on a request group's field (help, default, flag) is the command's option, the
    parameters its help names written as their flags."""
    params = inspect.signature(command).parameters
    checked = 0
    for cls in (WorkloadOptions, ServerOptions, DeploymentOptions, RunOptions):
        for f in dataclasses.fields(cls):
            if HELP not in f.metadata or f.name not in params or f.name in own:
                continue
            option = params[f.name].default
            assert (option.default, option.help) == (f.default, flags_in(_help(f, command))), f.name
            checked += 1
    assert checked >= 20
