"""The simulation workflows (pdmux_cli/workflows/): typed requests in, results whose to_dict() is exactly the
command's --json; the decisions they took over from the CLI (DP at equal GPU count, the policy factory, the
pdmux YAML, burst notes, retiming after the context drop) and the "pdmux" provenance block."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from pdmux_cli import __version__
from pdmux_cli.cli import app
from pdmux_cli.messages import render, render_all
from pdmux_cli.util.errors import InputError
from pdmux_cli.workflows import capacity as capacity_wf
from pdmux_cli.workflows.accuracy import AccuracyRequest, accuracy
from pdmux_cli.workflows.calibrate import CalibrateRequest, calibrate
from pdmux_cli.workflows.capacity import CapacityRequest, capacity
from pdmux_cli.workflows.deployment import DeploymentOptions, plan_deployment
from pdmux_cli.workflows.pdmux_yaml import PdmuxYaml, resolve_config
from pdmux_cli.workflows.policies import PolicyChoice, build_policies, policy_names
from pdmux_cli.workflows.server import ServerOptions, build_setup
from pdmux_cli.workflows.simulate import SimulateRequest, simulate
from pdmux_cli.workflows.tune import TuneRequest, tune
from pdmux_cli.workflows.workload import WorkloadOptions, fit_to_model, load_workload, workload_notes

FIX = Path(__file__).parent / "fixtures"
AZURE = FIX / "azure_conv_50.csv"
SGLANG = FIX / "sglang"
runner = CliRunner()


def cli_json(*args: str) -> dict:
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def as_json(data: dict) -> dict:
    """``data`` through JSON, as the CLI prints it (tuples become lists)."""
    return json.loads(json.dumps(data, allow_nan=False))


@pytest.fixture(scope="module")
def h100() -> object:
    return build_setup(ServerOptions())


def test_simulate_result_is_the_cli_json() -> None:
    request = SimulateRequest(trace=AZURE, policies="pdmux,chunked", chunk_sizes="2048", dp=2, workers=1)
    data = simulate(request).to_dict()
    assert as_json(data) == cli_json("simulate", str(AZURE), "--policies", "pdmux,chunked", "--chunk-sizes",
                                     "2048", "--dp", "2", "--workers", "1")
    assert [p["policy"] for p in data["policies"]] == ["pdmux", "chunked 2048"]
    assert (data["dp"], data["gpus"], data["load_balance_method"]) == (2, 2, "round_robin")
    assert list(data)[-1] == "pdmux"


def test_provenance_names_the_rule_set_and_the_cost_model() -> None:
    block = simulate(SimulateRequest(trace=AZURE, policies="chunked", workers=1)).to_dict()["pdmux"]
    assert block["version"] == __version__ and block["sglang"] == "0.5.23"
    cm = block["cost_model"]
    assert (cm["name"], cm["efficiency"], cm["calibration"], cm["serving"], cm["s_sat"]) == (
        "roofline", "h100-sxm.yaml", None, "0.5", 88.0)  # H100 SXM: S_SAT 88 of 132 SMs; serving.yaml's fit
    chapter = simulate(SimulateRequest(trace=AZURE, policies="chunked", cost_model="chapter", workers=1,
                                       sglang="standard@b875545")).to_dict()["pdmux"]
    assert chapter["sglang"] == "standard@b875545"
    assert (chapter["cost_model"]["name"], chapter["cost_model"]["efficiency"],
            chapter["cost_model"]["serving"]) == ("chapter", None, None)


def test_provenance_of_a_calibrated_model(tmp_path: Path) -> None:
    cal = tmp_path / "calibration.yaml"
    calibrate(CalibrateRequest(sglang_bench=(SGLANG / "model_made_one_batch_h100_qwen3_8b.jsonl",),
                               model="qwen3-8b", gpu="h100", output=cal))
    cm = simulate(SimulateRequest(trace=AZURE, policies="chunked", calibration=cal,
                                  workers=1)).to_dict()["pdmux"]["cost_model"]
    # the profile the whole-GPU terms replace, and the file that replaces them
    assert (cm["efficiency"], cm["calibration"], cm["serving"]) == ("h100-sxm.yaml", str(cal), "0.5")


def test_simulate_writes_the_csv_it_names(tmp_path: Path) -> None:
    out = tmp_path / "rows.csv"
    result = simulate(SimulateRequest(trace=AZURE, policies="chunked", csv=out, workers=1))
    assert result.csv == out and result.to_dict()["csv"] == str(out)
    assert len(out.read_text().splitlines()) == 1 + 50  # the header, a row per request of the fixture


def test_simulate_refuses_bad_requests_as_the_cli_does() -> None:
    with pytest.raises(InputError, match="--max-concurrency"):
        simulate(SimulateRequest(trace=AZURE, max_concurrency=2, dp=2))
    with pytest.raises(InputError, match="--policies disagg needs --disagg"):
        simulate(SimulateRequest(trace=AZURE, policies="disagg"))
    with pytest.raises(InputError, match="--synthetic needs --qps"):
        simulate(SimulateRequest(synthetic=True))


def test_capacity_result_is_the_cli_json() -> None:
    request = CapacityRequest(trace=AZURE, policies="chunked", chunk_sizes="2048", tolerance=0.2, workers=1)
    data = capacity(request).to_dict()
    assert as_json(data) == cli_json("capacity", str(AZURE), "--policies", "chunked", "--chunk-sizes", "2048",
                                     "--tolerance", "0.2", "--workers", "1")
    assert [p["policy"] for p in data["policies"]] == ["chunked 2048"]
    assert data["pdmux"]["cost_model"]["name"] == "roofline"


def test_tune_result_is_the_cli_json(tmp_path: Path) -> None:
    options = {"sm_group_nums": "3", "divisors": "12", "budgets": "4096", "slo_margins": "none", "workers": 1}
    out = tmp_path / "best.yaml"
    outcome = tune(TuneRequest(trace=AZURE, slo_ttft=1000.0, slo_itl=60.0, output=out, **options))
    data = outcome.to_dict()
    assert out.read_text() == outcome.yaml == data["yaml"]
    cli = cli_json("tune", "--trace", str(AZURE), "--slo-ttft", "1000", "--slo-itl", "60",
                   "--sm-group-nums", "3", "--divisors", "12", "--budgets", "4096", "--slo-margins", "none",
                   "--workers", "1", "-o", str(tmp_path / "cli.yaml"))
    cli["output"] = str(out)
    assert as_json(data) == cli
    with pytest.raises(InputError, match="tune searches pdmux knobs"):
        tune(TuneRequest(trace=AZURE, slo_ttft=1000.0, slo_itl=60.0, disagg="1P1D", **options))


def test_calibrate_and_accuracy_results_are_the_cli_json() -> None:
    bench = SGLANG / "model_made_one_batch_h100_qwen3_8b.jsonl"
    result = calibrate(CalibrateRequest(sglang_bench=(bench,), model="qwen3-8b", gpu="h100"))
    assert result.mode == "whole_gpu" and result.points == result.to_dict()["points"] > 0
    assert as_json(result.to_dict()) == cli_json("calibrate", "--sglang-bench", str(bench), "--model",
                                                 "qwen3-8b", "--gpu", "h100")
    assert result.to_dict()["pdmux"]["cost_model"]["efficiency"] == "h100-sxm.yaml"
    with pytest.raises(InputError, match="give --model and --gpu"):
        calibrate(CalibrateRequest(sglang_bench=(bench,)))
    assert as_json(accuracy(AccuracyRequest()).to_dict()) == cli_json("accuracy")
    with pytest.raises(InputError, match="--runs and --workers go with --serving"):
        accuracy(AccuracyRequest(runs=True))


def test_dp_default_puts_every_policy_on_the_disaggregation_gpus(h100: object) -> None:
    # 2P2D of TP 1 is 4 GPUs: the colocated policies become 4 replicas of TP 1 behind the router
    cluster = plan_deployment(h100, None, DeploymentOptions(disagg="2P2D"))
    assert (cluster.dp, cluster.gpus, cluster.router) == (4, 4, "round_robin")
    assert render_all(cluster.notes) == [("every policy on 4 GPUs: disagg 2P2D as 4 instances of TP 1, the "
                                          "others as DP 4 replicas behind the router (round_robin) of TP 1")]
    # a --dp that does not match is run as given and said
    cluster = plan_deployment(h100, None, DeploymentOptions(disagg="1P1D", dp=3))
    assert cluster.dp == 3 and render(cluster.notes[0]) == (
        "not at equal GPU count: disagg 1P1D uses 2 GPUs (TP 1 each), the other policies DP 3 x TP 1 = 3 "
        "(give --dp, --tp or --disagg-tp so that they match)")
    assert cluster.notes[0].code == "deploy.unequal_gpus" and cluster.notes[0].values["dp"] == 3
    # disagg alone: no replicas of the others
    cluster = plan_deployment(h100, None, DeploymentOptions(disagg="3P1D"), colocated=False)
    assert (cluster.dp, cluster.gpus) == (1, 4)
    with pytest.raises(InputError, match="apply to --disagg XPYD"):
        plan_deployment(h100, None, DeploymentOptions(kv_link="rdma"))
    lone = plan_deployment(h100, None, DeploymentOptions(load_balance_method="total_requests"))
    assert lone.router is None and "nothing to route" in render(lone.notes[0])


def test_policy_factory_builds_each_policy_once(h100: object) -> None:
    names = policy_names("chunked,pdmux,mixed-chunk,prefill-first", None)
    built = build_policies(PolicyChoice(names=tuple(names), mixed_chunk_sizes=(512, 512, 1024)), h100)
    # chunked at SGLang's default for an 80 GB GPU (8192 tokens), mixed chunks once each
    assert [p.label for p in built.policies] == ["chunked 8192", "pdmux", "mixed-chunk 512",
                                                 "mixed-chunk 1024", "prefill-first"]
    assert built.config_paths == [None] * 5
    assert policy_names("pdmux", "1P1D") == ["pdmux", "disagg"]


def test_capacity_sizes_each_config_beside_sglangs_defaults(h100: object, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for folder in (a, b):
        (folder / "pdmux.yaml").write_text("sm_group_num: 3\nmanual_divisions:\n  - [66, 66, 0]\n")
    files = (a / "pdmux.yaml", b / "pdmux.yaml")
    built = build_policies(PolicyChoice(names=("pdmux",), pdmux_files=files), h100)
    # two files of one name are told apart by their paths
    assert [p.label for p in built.policies] == ["pdmux", f"pdmux ({a / 'pdmux.yaml'})",
                                                 f"pdmux ({b / 'pdmux.yaml'})"]
    assert built.config_paths == [None, str(a / "pdmux.yaml"), str(b / "pdmux.yaml")]


def test_pdmux_yaml_is_resolved_in_one_place(h100: object) -> None:
    # the CUDA driver rounds green-context SM counts up to multiples of 8 on compute capability 9.x: 66 -> 72
    cfg, notes = resolve_config(PdmuxYaml(divisions="66:66:0,88:44:32"), h100)
    assert cfg.sm_group_num == 4 and [tuple(e) for e in cfg.manual_divisions] == [(72, 60, 0), (88, 44, 32)]
    assert render_all(notes) == [("config: manual_divisions[0] [66, 66] runs as 72/60 SMs (the CUDA driver "
                                  "rounds green-context SM counts up to multiples of 8 on compute capability "
                                  "9.x): computed with 72/60")]
    assert resolve_config(PdmuxYaml(divisions="72:60:0,88:44:32"), h100)[1] == []
    cfg, _ = resolve_config(PdmuxYaml(decode_bs_divisor=24, token_budget=4096), h100)
    assert (cfg.sm_group_num, cfg.decode_bs_divisor, cfg.split_forward_token_budget) == (8, 24, 4096)
    with pytest.raises(InputError, match="give --config or --divisions, not both"):
        resolve_config(PdmuxYaml(config=Path("x.yaml"), divisions="66:66:0"), h100)
    with pytest.raises(InputError, match="does not match the 1 manual divisions"):
        resolve_config(PdmuxYaml(divisions="66:66:0", sm_group_num=5), h100)
    with pytest.raises(InputError, match="--token-budget must be > 0"):
        resolve_config(PdmuxYaml(token_budget=0), h100)


def test_retiming_follows_the_context_drop(h100: object) -> None:
    from pdmux_cli.simulate.traces import Trace

    workload = load_workload(WorkloadOptions(trace=AZURE))
    assert len(workload) == 50
    retimed = fit_to_model(workload, h100.model, qps=5.0)
    assert len(retimed) == 50 and retimed.mean_qps == pytest.approx(5.0, rel=0.05)
    cut = fit_to_model(workload, h100.model, qps=5.0, duration=4.0)
    assert 0 < len(cut) < 50 and max(cut.arrival_s) <= 4.0
    # four requests a second apart, the second past Qwen3-8B's 40,960-token context: dropped first, so that
    # --qps is the rate of the three simulated (retimed before the drop, it would be of four)
    trace = Trace(arrival_s=(0.0, 1.0, 2.0, 3.0), prompt_tokens=(100, 50_000, 100, 100),
                  output_tokens=(10, 10, 10, 10), source="made", format="azure")
    fitted = fit_to_model(trace, h100.model, qps=2.0)
    assert len(fitted) == 3 and fitted.mean_qps == pytest.approx(2.0, rel=0.05)
    # the server rejects it (no bad row of the file), and the retimed trace still says so
    assert fitted.bad_rows == 0 and fitted.past_context == 1
    assert [n.code for n in workload_notes(fitted)] == ["workload.past_context"]


def _capacity_of(label: str, rate: float, bound: str = "", xpyd: tuple = (), kind: str = "chunked") -> object:
    return SimpleNamespace(label=label, max_rate_rps=rate, bound=bound, xpyd=xpyd, kind=kind,
                           points=[SimpleNamespace(rate_rps=rate, crashed=False)])


def test_burst_notes() -> None:
    # 100 requests at 10 req/s arrive within 10 s: shorter than 30 s, a burst's rate
    notes = render_all(capacity_wf.policy_notes(_capacity_of("chunked 8192", 10.0), 100, 1))
    assert notes == [("chunked 8192: at 10 req/s the 100 requests arrive within 10 s: a burst, not a "
                      "sustained rate (the rate is optimistic); give more requests (--max-requests, "
                      "--duration)")]
    # 1000 requests over 4 replicas at 5 req/s: 200 s, 250 a server: sustained
    assert capacity_wf.policy_notes(_capacity_of("chunked 8192", 5.0), 1000, 4) == []
    # 1000 over 8 replicas: 125 a server, fewer than 200
    assert "125 a server: a burst its 8 servers drain" in render(capacity_wf.policy_notes(
        _capacity_of("chunked 8192", 5.0), 1000, 8)[0])
    # a disaggregated policy: the side with more instances
    assert "3 servers drain" in render(capacity_wf.policy_notes(
        _capacity_of("disagg 1P3D", 5.0, xpyd=(1, 3), kind="disagg"), 500, 8)[0])
    assert render_all(capacity_wf.policy_notes(_capacity_of("pdmux", 50.0, bound="above"), 20, 1)) == [
        "pdmux: met the target at every rate tried, up to 50 req/s"]
