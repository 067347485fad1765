"""The workflows' notes and the core's stored sources as findings: each code, its values and its line.

The commands' tests pin the printed text; these pin the data a workflow returns (the code, the values,
the parameter at fault) and the sentence :mod:`pdmux_cli.messages` makes of it, flags named by the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from pdmux_cli import messages
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.messages import render, render_all
from pdmux_cli.util.errors import Finding, InputError

FIX = Path(__file__).parent / "fixtures"
SGLANG = FIX / "sglang"


def _codes(notes) -> list[str]:
    return [n.code for n in notes if isinstance(n, Finding)]


@pytest.fixture(scope="module")
def h100():
    from pdmux_cli.workflows.server import ServerOptions, build_setup

    return build_setup(ServerOptions())


# --- capacity, tune, deployment -------------------------------------------------------------------------


def test_capacity_launch_notes(h100) -> None:
    from pdmux_cli.workflows.capacity import launch_notes
    from pdmux_cli.workflows.deployment import DeploymentOptions, plan_deployment

    cluster = plan_deployment(h100, "h100", DeploymentOptions(dp=2, disagg="1P1D"))
    dp, disagg = launch_notes(cluster, 1)
    assert (dp.code, dp.values) == ("capacity.dp_launch", {"dp": 2, "method": "round_robin", "gpus": 2})
    assert (disagg.code, disagg.values) == ("capacity.disagg_launch",
                                            {"label": "disagg 1P1D", "prefill": 1, "decode": 1, "tp": 1})
    assert render(dp) == (
        "DP 2: the verdict's --dp-size 2 --load-balance-method round_robin runs the replicas as one SGLang "
        "server (its data-parallel controller, 2 GPUs); 2 servers with the other flags behind sgl-router are "
        "the same replicas. SGLang 0.5.23's checks do not refuse --dp-size with --enable-pdmux "
        "(srt/arg_groups/validation_hook.py), but pdmux under DP is untried here")
    assert render(disagg) == (
        "disagg 1P1D: 1 prefill server(s) (--disaggregation-mode prefill --chunked-prefill-size -1: whole "
        "prompts, as simulated) and 1 decode server(s) (--disaggregation-mode decode), each TP 1, fronted by "
        "a router: python -m sglang_router.launch_router --pd-disaggregation --prefill URL ... --decode URL "
        "... (SGLang 0.5.23 refuses --enable-pdmux with either mode: srt/arg_groups/validation_hook.py)")
    assert launch_notes(cluster, 1, colocated=False) == [disagg]


def test_capacity_pdmux_support_notes() -> None:
    from pdmux_cli.sglang.revisions import model_support
    from pdmux_cli.workflows.capacity import CapacityRequest, _support_notes

    no = model_support(("GptOssForCausalLM",))
    names, [note] = _support_notes(CapacityRequest(), no, ["pdmux", "chunked"])
    assert names == ["chunked"] and (note.code, note.param) == ("capacity.pdmux_not_sized", "sglang")
    assert note.values["reason"] == no.why
    assert render(note) == f"pdmux not sized: {no.reason}"
    unknown = model_support(())
    _, [note] = _support_notes(CapacityRequest(), unknown, ["pdmux"])
    assert note.code == "capacity.pdmux_support_unknown" and render(note) == f"pdmux: {unknown.reason}"
    assert messages.as_dict(note)["values"]["reason"]["code"] == "sglang.support.no_architectures"


def test_tune_dp_note() -> None:
    note = Finding("tune.dp_launch", {"dp": 4})
    assert render(note) == (
        "DP 4: --dp-size 4 runs the replicas as one SGLang server; SGLang 0.5.23's checks do not refuse it "
        "with --enable-pdmux, but pdmux under DP is untried here (servers behind sgl-router are the replicas "
        "simulated)")


def test_one_server_has_nothing_to_route() -> None:
    from pdmux_cli.workflows.deployment import DeploymentOptions, plan_deployment

    one = DeploymentOptions(load_balance_method="round_robin")
    cluster = plan_deployment(SimpleNamespace(tp=1), None, one)
    [note] = cluster.notes
    assert (note.code, note.values, note.param) == ("deploy.one_server", {}, "load_balance_method")
    assert render(note) == "one server: --load-balance-method has nothing to route (give --dp N)"


# --- simulate -------------------------------------------------------------------------------------------


def test_simulate_notes_render() -> None:
    from pdmux_cli.sglang.revisions import model_support

    no = model_support(("GptOssForCausalLM",))
    assert render(Finding("simulate.pdmux_not_simulated", {"reason": no.why}, "sglang")) == (
        f"pdmux not simulated: {no.reason}")
    assert render(Finding("simulate.pdmux_support_unknown", {"reason": no.why})) == f"pdmux: {no.reason}"
    refused = Finding("simulate.not_simulated", {"policy": "chunked 8192", "error": "--tp 3 does not divide"})
    assert render(refused) == "chunked 8192 not simulated: --tp 3 does not divide"
    inner = Finding("simulate.failed_rows", {"rows": 2})
    assert render(Finding("simulate.policy_note", {"policy": "pdmux", "note": inner})) == (
        "pdmux: 2 failed request row(s) (0 response tokens) skipped")
    assert render(Finding("simulate.policy_note", {"policy": "pdmux", "note": "as text"})) == "pdmux: as text"


def test_simulate_returns_its_notes_as_findings() -> None:
    from pdmux_cli.workflows.simulate import SimulateRequest, simulate

    result = simulate(SimulateRequest(trace=FIX / "azure_conv_50.csv", model="gpt-oss-20b",
                                      policies="pdmux,chunked", chunk_sizes="2048", workers=1))
    first = result.notes[0]
    assert (first.code, first.param) == ("simulate.pdmux_not_simulated", "sglang")
    assert first.values["reason"].code == "sglang.support.no_method"
    data = result.to_dict()
    assert data["notes"][0] == render(first) and data["notes"][0].startswith("pdmux not simulated: no ")
    json.dumps(data)  # every note a line: no finding left for json_default
    assert all(isinstance(n, str) for n in data["notes"])
    assert result.table_notes() == result.notes  # no policy noted anything of its own here


def test_simulate_table_notes_name_each_policy() -> None:
    from pdmux_cli.workflows.simulate import SimulateRequest, SimulateResult

    retracted = Finding("simulate.retractions", {"retractions": 2})
    metrics = [SimpleNamespace(policy="chunked 2048", notes=[retracted, "as text"])]
    result = SimulateResult(SimulateRequest(), None, None, None, None, metrics, "", ["run"])
    run, first, second = result.table_notes()
    assert run == "run" and (first.code, first.values) == ("simulate.policy_note",
                                                           {"policy": "chunked 2048", "note": retracted})
    assert render_all([first, second]) == [f"chunked 2048: {render(retracted)}", "chunked 2048: as text"]


# --- workload, pdmux YAML, planning inputs, splits, estimate ---------------------------------------------


def test_workload_bad_rows() -> None:
    from pdmux_cli.simulate.traces import Trace
    from pdmux_cli.workflows.workload import workload_notes

    trace = Trace((0.0,), (10,), (5,), source="t.csv", bad_rows=3, bad_examples=((4, "x"), (0, "too long")))
    [note] = workload_notes(trace)
    assert (note.code, note.values) == ("workload.bad_rows", {"rows": 3, "source": "t.csv",
                                                              "examples": [[4, "x"], [0, "too long"]]})
    assert render(note) == trace.bad_rows_text() == (
        "3 bad row(s) skipped in t.csv, first: line 4: x; too long")
    every = Trace((0.0,), (10,), (5,), source="t.csv", bad_rows=1, bad_examples=((4, "x"),))
    assert render(workload_notes(every)[0]) == "1 bad row(s) skipped in t.csv: line 4: x"
    clean = Trace((0.0,), (10,), (5,))
    assert workload_notes(clean) == [] and clean.bad_rows_text() == ""


def test_pdmux_yaml_notes(tmp_path) -> None:
    from pdmux_cli.workflows.pdmux_yaml import PdmuxYaml, resolve_config

    setup = SimpleNamespace(total_sms=132, compute_capability=(9, 0))
    path = tmp_path / "p.yaml"
    path.write_text("sm_group_num: 4\nmanual_divisions:\n  - [66, 66, 0]\n  - [88, 44, 0.5]\n")
    _, notes = resolve_config(PdmuxYaml(config=path), setup)
    problem = next(n for n in notes if n.code == "pdmux_yaml.problem")
    assert problem.values["where"] == "manual_divisions[1]" and problem.param == "config"
    assert render(problem) == (f"config: {problem.values['where']}: {problem.values['message']} "
                               f"[{problem.values['rule']}]")
    rounded = next(n for n in notes if n.code == "pdmux_yaml.rounded")
    assert rounded.values["message"].startswith("manual_divisions[0] [66, 66] runs as 72/60 SMs")
    assert render(rounded) == "config: " + rounded.values["message"]


def test_planning_config_notes(tmp_path) -> None:
    from pdmux_cli.workflows.planning_inputs import load_pdmux_yaml, resolve_device

    path = tmp_path / "p.yaml"
    path.write_text("sm_group_num: 4\nmanual_divisions:\n  - [66, 66, 0]\n  - [88, 44, 0.5]\n")
    _, notes = load_pdmux_yaml(path, resolve_device("h100", None, None))
    assert _codes(notes) == ["planning.config_warning", "planning.config_rounded"]
    warning, rounded = notes
    assert warning.values["path"] == str(path) and warning.values["where"] == "manual_divisions[1]"
    assert render(warning) == f"{path}: manual_divisions[1]: {warning.values['message']}"
    assert render(rounded) == f"{path}: {rounded.values['message']}"
    assert "[66, 66] runs as 72/60" in rounded.values["message"]


def test_splits_tp_note() -> None:
    import pdmux

    result = pdmux.splits(gpu="h100", tp=2)
    note = next(n for n in result.notes if getattr(n, "code", "") == "splits.tp_same_levels")
    assert (note.values, note.param) == ({"tp": 2}, "tp")
    assert render(note).startswith("TP 2: every GPU builds these stream groups and picks the same level")
    assert render(note) in result.to_dict()["notes"]


@pytest.mark.parametrize("gpu,asked,groups", [("h100", 10, 8), ("h100", 134, 8), ("a100", 30, 22)])
def test_splits_says_when_sglang_builds_more_groups_than_levels_use(gpu, asked, groups) -> None:
    import pdmux

    result = pdmux.splits(gpu=gpu, sm_group_num=asked)
    assert len(result.groups) == groups
    note = next(n for n in result.notes if getattr(n, "code", "") == "levels.fewer_groups")
    assert (note.values, note.param) == ({"asked": asked, "groups": groups, "levels": groups - 2},
                                         "sm_group_num")
    assert render(note).startswith(f"sm_group_num {asked}: SGLang's automatic rule finds {groups - 2} split "
                                   f"levels on this GPU, so {groups} stream groups")
    # as many as asked, or fewer: no note
    for fewer in (3, 8):
        assert not any(getattr(n, "code", "") == "levels.fewer_groups"
                       for n in pdmux.splits(gpu=gpu, sm_group_num=fewer).notes)


def test_gen_config_says_when_sglang_builds_more_groups_than_levels_use() -> None:
    import pdmux

    fewer = "sm_group_num 8: SGLang's automatic rule finds 3 split levels on this GPU, so 5 stream groups"
    notes = pdmux.gen_config(gpu="h20").sglang_notes
    assert any(n.startswith(fewer) and n.endswith("sm_group_num 5 gives the same levels without them")
               for n in notes)
    assert not any("split levels on this GPU" in n for n in pdmux.gen_config(gpu="h100").sglang_notes)
    manual = pdmux.gen_config(gpu="h20", manual=True)  # manual_divisions: sm_group_num 5, no group unused
    assert manual.config.sm_group_num == 5
    assert not any("split levels on this GPU" in n for n in manual.sglang_notes)


def test_estimate_calibration_replaces_the_chapter_knobs() -> None:
    note = Finding("estimate.calibration_replaces_knobs", param="calibration")
    assert render(note) == ("--mfu and --bandwidth-efficiency are not used with --calibration: the measured "
                            "curves replace them")


# --- calibrate --------------------------------------------------------------------------------------------


def test_calibrate_notes_and_sources(tmp_path) -> None:
    from pdmux_cli.workflows.calibrate import CalibrateRequest, calibrate

    bench = tmp_path / "bench.jsonl"
    bench.write_text((SGLANG / "model_made_one_batch_h100_qwen3_8b.jsonl").read_text()
                     + "".join(f'{{"bad": {i}}}\n' for i in range(7)))
    log = SGLANG / "model_made_server_0.5.23_h100_qwen3_8b.log"
    result = calibrate(CalibrateRequest(sglang_bench=(bench,), sglang_log=(log,), model="qwen3-8b",
                                        gpu="h100"))
    unreadable = [n for n in result.notes if getattr(n, "code", "") == "calibrate.unreadable"]
    assert len(unreadable) == 5 and unreadable[0].values["path"] == str(bench)
    assert render(unreadable[0]) == f"{bench}: {unreadable[0].values['problem']}"
    [reading] = [n for n in result.notes if getattr(n, "code", "") == "calibrate.log_reading"]
    assert reading.values["path"] == str(log) and render(reading).startswith(f"{log}: 188 clean decode")
    [more] = [n for n in result.notes if getattr(n, "code", "") == "calibrate.more_unreadable"]
    assert more.values == {"count": 2} and render(more) == "2 more unreadable one-batch line(s)"
    assert result.to_dict()["notes"] == render_all(result.notes)
    cal = result.calibration
    assert cal.source == "pdmux calibrate --model Qwen3-8B"
    assert dict(cal.terms_from)["whole_gpu"] == ("SGLang one-batch bench.jsonl (11 results); "
                                                 f"SGLang server log {log.name} (188 clean decode intervals)")


def test_calibrate_source_sentences() -> None:
    assert render(Finding("calibrate.source.serving", {"model": "Qwen3-8B"})) == (
        "pdmux calibrate --bench-serving --model Qwen3-8B")
    two = Finding("calibrate.source.bench_serving", {"files": ["a.jsonl", "b.jsonl"], "runs": 3})
    assert render(two) == "sglang.bench_serving a.jsonl; sglang.bench_serving b.jsonl (3 runs)"


# --- stored sources: the KV link, the KV cache, the CPU and serving terms -------------------------------


def test_kv_link_source_is_data() -> None:
    from pdmux_cli.multigpu.disaggregation import kv_link

    given = kv_link(find_gpu("h100"), 2, "pcie", gb_per_s=64, latency_us=1)
    assert given.origin.code == "disagg.kv_link_source" and given.origin.values == {
        "bandwidth": "given", "latency": "given", "gpu": "H100 SXM5 80GB", "link": "pcie", "given": True,
        "gpus": 2, "per_node": 8}
    assert given.source == "--kv-link-gb-s; latency: --kv-link-latency-us; --kv-link pcie"
    nv = kv_link(find_gpu("h100"), 2, gb_per_s=20)
    assert (nv.origin.values["bandwidth"], nv.origin.values["latency"]) == ("given", "profile")
    assert nv.source == "--kv-link-gb-s; latency: the profile's nvlink latency; 2 GPUs fit one node of 8"
    assert kv_link(find_gpu("h100"), 16).origin.values["bandwidth"] == "rdma"
    from pdmux_cli.workflows.planning_json import link_dict

    assert link_dict(given)["source"] == given.source  # the JSON's line


def test_kv_cache_source_is_data() -> None:
    from pdmux_cli.sglang.kv_cache import resolve_kv_cache

    qwen = load_model("qwen3-8b")
    custom = resolve_kv_cache(qwen, None, 1.5)
    assert (custom.chosen_by.code, custom.chosen_by.values, custom.chosen_by.param) == (
        "kv_cache.bytes_given", {"kv_bytes": 1.5}, "kv_bytes")
    given = resolve_kv_cache(qwen, "FP8_E4M3")
    assert (given.chosen_by.code, given.chosen_by.values) == ("kv_cache.dtype_given", {"dtype": "fp8_e4m3"})
    assert given.source == "--kv-cache-dtype fp8_e4m3"
    auto = resolve_kv_cache(qwen)
    assert auto.chosen_by.code == "kv_cache.auto"
    assert auto.source == "--kv-cache-dtype auto: the model's dtype (bf16)"


def test_serving_terms_sources_and_bounds_by_parameter() -> None:
    import inspect

    from pdmux_cli.costmodel import SERVING_OPTION_BOUNDS_MS, serving_terms
    from pdmux_cli.costmodel.efficiency import CpuProfile, ServingProfile

    keywords = [p for p in inspect.signature(serving_terms).parameters if p.endswith("_ms")]
    assert sorted(SERVING_OPTION_BOUNDS_MS) == sorted(keywords)
    cpu, serving = serving_terms(CpuProfile(0.001, 0.0, 0.0, 1, "profile"), ServingProfile(0.0, 0.0, "fit"),
                                 step_overhead_ms=2, per_request_overhead_ms=0.1, admission_delay_ms=3,
                                 admission_interval_ms=0.5)
    assert cpu.source.code == "costmodel.per_request_overhead" and cpu.source.values["base"].values == {
        "step_overhead_ms": 2}
    assert str(cpu.source) == "--step-overhead-ms 2; --per-request-overhead-ms 0.1"
    assert serving.source.values["given"] == {"admission_delay_ms": 3, "admission_interval_ms": 0.5}
    assert str(serving.source) == "fit; --admission-delay-ms 3, --admission-interval-ms 0.5"
    with pytest.raises(InputError) as caught:
        serving_terms(cpu, serving, first_token_delay_ms=20_000)
    assert caught.value.param == "first_token_delay_ms"
    assert str(caught.value) == "--first-token-delay-ms must be from 0 to 10000 ms, got 20000"
    assert messages.api_error_text(caught.value).startswith("first_token_delay_ms must be from 0 to 10000 ms")


def test_roofline_step_overhead_source() -> None:
    from pdmux_cli.costmodel import build_step_model

    model = build_step_model(find_gpu("h100"), load_model("qwen3-8b"), step_overhead_ms=1.5)
    assert model.cpu.source.code == "costmodel.step_overhead"
    assert str(model.cpu.source) == "--step-overhead-ms 1.5"


# --- estimate's provenance: the simulation commands' builder, the PD-mux rows' S_SATs --------------------


@pytest.mark.parametrize("s_sat, expected", [(None, 88.0), ("66", 66.0), ("44,66,88", [44.0, 66.0, 88.0])])
def test_estimate_provenance_is_the_step_models(s_sat, expected) -> None:
    from pdmux_cli.provenance import step_model_provenance
    from pdmux_cli.workflows.estimate import EstimateRequest, estimate

    result = estimate(EstimateRequest(s_sat=s_sat))
    block = result.provenance["cost_model"]
    assert block == {**step_model_provenance(result.estimate.step_model), "s_sat": expected}
    assert block["efficiency"] == "h100-sxm.yaml" and block["serving"] == "0.5"
    chapter = estimate(EstimateRequest(cost_model="chapter")).provenance["cost_model"]
    assert chapter == {"name": "chapter", "efficiency": None, "calibration": None, "serving": None,
                       "s_sat": [44.0, 66.0, 88.0]}
