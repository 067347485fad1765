"""SGLang's ``--disable-cuda-graph`` (0.5.23: both graph backends disabled, ``cuda_graph_hook.py``
``parse_cuda_graph_config``): every decode step launched kernel by kernel at SGLang's measured host time per
kernel (the term sgl-project/sglang PR 1401 measured on an eager decode step), pdmux's rounds too (SGLang's
eager runner serves pdmux's decode, ``eager_runner.py`` ``_resolve_decode_pdmux``), prefill eagerly, no
memory reserved for graphs; by hand, through the simulator, estimate, the CLI and the API."""

from __future__ import annotations

import json

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

import pdmux
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.sglang import server_defaults as sgl
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.runner import simulate
from pdmux_cli.simulate.schedulers import ChunkedPolicy, PdmuxPolicy, PrefillFirstPolicy
from pdmux_cli.simulate.traces import Trace

runner = CliRunner()
H100 = find_gpu("h100")
QWEN = load_model("qwen3-8b")
#: Qwen3-8B's eager decode step: 36 layers x 10 kernels (2 fused add-RMSNorms, QKV, RoPE, KV store,
#: attention, O, gate+up, SiLU-and-mul, down) x 25.7 us (common.yaml eager_launch_s)
LAUNCH_S = 36 * 10 * 25.7e-6
QUIET = dict(admission_delay_ms=0, first_token_delay_ms=0, admission_interval_ms=0)
F = "tests/fixtures/azure_conv_50.csv"


def one_request(prompt: int = 512, output: int = 5) -> Trace:
    return Trace(arrival_s=(0.0,), prompt_tokens=(prompt,), output_tokens=(output,))


def steps(r) -> list[float]:
    return [b - a for a, b in zip(r.step_end_s, r.step_end_s[1:])]


def test_the_eager_decode_step_launches_qwen3_8bs_360_kernels_at_25_7_us() -> None:
    setup = make_setup(H100, QWEN, decode_cuda_graph=False, prefill_cuda_graph=False)
    assert setup.step_model.decode_launch_s() == pytest.approx(LAUNCH_S, rel=1e-12) == pytest.approx(9.252e-3)
    assert setup.decode_launch_s() == setup.step_model.decode_launch_s()
    assert make_setup(H100, QWEN).decode_launch_s() == 0.0  # replayed from a CUDA graph
    # a MoE model's kernels at the MoE term: Qwen3-30B-A3B, 48 layers x 14 kernels (Triton's fused MoE: 6)
    moe = make_setup(H100, load_model("qwen3-30b-a3b"), decode_cuda_graph=False, prefill_cuda_graph=False)
    assert moe.decode_launch_s() == pytest.approx(48 * 14 * 60e-6, rel=1e-12)


@pytest.mark.parametrize("pol", [ChunkedPolicy(8192), PrefillFirstPolicy()], ids=lambda p: p.label)
def test_a_decode_step_with_and_without_cuda_graphs_by_hand(pol) -> None:
    """One request of 512 tokens decoding 4 steps. From a graph a step is max(GPU + its request's 0.1 ms,
    the scheduler's 0.31 ms) (overlap scheduler); eagerly the scheduler's thread launches the 360 kernels
    first: max(GPU + 0.1 ms, 0.31 ms + 9.252 ms) = 9.562 ms, the GPU's 6.8 ms hidden. Without the overlap
    scheduler: max(GPU, launches) + CPU."""
    graph = make_setup(H100, QWEN, **QUIET)
    eager = make_setup(H100, QWEN, decode_cuda_graph=False, prefill_cuda_graph=False, **QUIET)
    sm = graph.step_model
    gpu = [sm.decode_s(132, 1, 512 + i) for i in range(1, 4)]  # steps 2-4: contexts 513-515
    cpu, req = sm.decode_cpu_s(1), sm.request_s(1)
    assert cpu == pytest.approx(0.31e-3) and req == pytest.approx(0.1e-3) and max(gpu) < 7e-3
    assert steps(simulate(one_request(), graph, pol)) == pytest.approx([g + req for g in gpu], rel=1e-12)
    assert steps(simulate(one_request(), eager, pol)) == pytest.approx([cpu + LAUNCH_S] * 3, rel=1e-12)
    assert cpu + LAUNCH_S == pytest.approx(9.562e-3)
    no_overlap = make_setup(H100, QWEN, decode_cuda_graph=False, prefill_cuda_graph=False,
                            disable_overlap=True, **QUIET)
    assert steps(simulate(one_request(), no_overlap, pol)) == pytest.approx([LAUNCH_S + cpu] * 3, rel=1e-12)
    # a decode step longer than its launches is the GPU's: 64 requests decoding at 4000 tokens
    late = Trace(arrival_s=(5.0,), prompt_tokens=(16,), output_tokens=(2,))
    running = [(4000, 4)] * 64
    a, b = simulate(late, graph, pol, running), simulate(late, eager, pol, running)
    assert b.step_end_s[:4] == a.step_end_s[:4]
    assert a.step_end_s[0] == pytest.approx(sm.decode_s(132, 64, 64 * 4000) + 64 * req, rel=1e-12)
    assert a.step_end_s[0] > 0.012 > cpu + LAUNCH_S


def test_pdmux_decodes_eagerly_too_its_rounds_wait_for_both_launches() -> None:
    """SGLang runs pdmux without CUDA graphs (its eager runner picks the stream group's decode attention
    backend; nothing refuses the pair). A round without a prefill: max(decode, its launches) + CPU + the
    request's time; beside a split prefill the round's thread launches the decode step, then the round's
    prefill layers, before it waits for decode: Qwen3-0.6B's 28 x 10 kernels, then 8 layers' 80 (an
    8192-token prompt under the 65536-token budget), at 25.7 us each, past its decode step on 20 SMs."""
    small = load_model("qwen3-0.6b")
    graph = make_setup(H100, small, **QUIET)
    eager = make_setup(H100, small, decode_cuda_graph=False, prefill_cuda_graph=False, **QUIET)
    sm = graph.step_model
    launch = 28 * 10 * 25.7e-6
    assert eager.decode_launch_s() == pytest.approx(launch, rel=1e-12)
    cpu, req = sm.decode_cpu_s(1), sm.request_s(1)
    lone = simulate(one_request(), eager, PdmuxPolicy())
    assert steps(lone) == pytest.approx([max(sm.decode_s(132, 1, 512 + i), launch) + cpu + req
                                         for i in range(1, 4)], rel=1e-12)
    assert steps(lone)[0] == pytest.approx(launch + cpu + req, rel=1e-12)
    assert steps(simulate(one_request(), graph, PdmuxPolicy())) == pytest.approx(
        [sm.decode_s(132, 1, 512 + i) + cpu + req for i in range(1, 4)], rel=1e-12)
    trace = Trace(arrival_s=(0.0, 0.5), prompt_tokens=(256, 8192), output_tokens=(200, 2))
    r = simulate(trace, eager, PdmuxPolicy())
    both = launch + 8 * 10 * 25.7e-6 + cpu + req
    beside = [d for x, d in zip(r.step_end_s, steps(r)) if 0.5 < x < r.first_token_s[1]]
    assert beside.count(pytest.approx(both, rel=1e-12)) >= 3  # 28 layers: rounds of 8, 8, 8 and 4
    assert max(beside) == pytest.approx(both, rel=1e-12)
    assert sm.decode_s(20, 1, 300, 0.0, 112) < launch  # the decode step on 20 SMs is shorter


def test_no_memory_is_reserved_for_graphs() -> None:
    """memory_hook.py reserve_for_graph_mb: 2 MiB a decode graph batch size, 8 MiB a prefill bucket, none
    when disabled: on an H100 (81559 MiB) at chunk 8192 the reserve is 512 + 1.5 x 8192 + 128 = 12928 MiB
    (0.841), chunking off 512 + 1.5 x 16384 + 128 = 25216 MiB (0.691); the KV pool grows with it."""
    mib = H100.memory_bytes / 2**20
    assert mib == 81559
    memory = H100.memory_bytes
    assert sgl.mem_fraction_static(memory, 8192, cuda_graphs=False) == round((mib - 12928) / mib, 3) == 0.841
    assert sgl.mem_fraction_static(memory, -1, cuda_graphs=False) == round((mib - 25216) / mib, 3) == 0.691
    assert (sgl.mem_fraction_static(memory, 8192), sgl.mem_fraction_static(memory, -1)) == (0.83, 0.685)
    graph, eager = make_setup(H100, QWEN), make_setup(H100, QWEN, decode_cuda_graph=False,
                                                      prefill_cuda_graph=False)
    assert eager.kv_pool(-1).tokens > graph.kv_pool(-1).tokens


def _rows(*args: str) -> dict:
    r = runner.invoke(app, ["estimate", *args, "--json"])
    assert r.exit_code == 0, r.stderr
    return {row["policy"]: row for row in json.loads(r.stdout)["rows"]}


def test_estimate_rows_decode_eagerly() -> None:
    """4 requests at 1024 tokens: the reference decode step (6.9 ms of GPU, + 0.4 ms for its requests) becomes
    0.31 + 9.252 ms; the PD-mux round on 20 SMs stays the GPU's (longer than both launches); Qwen3-0.6B's
    rounds are its launches: max(decode, 8 prefill layers' + the decode step's launches) + CPU + requests."""
    scenario = ("--decode-bs", "4", "--context", "1024")
    graph, eager = _rows(*scenario), _rows(*scenario, "--disable-cuda-graph")
    assert graph["decode-only"]["itl_ms"] < 7.5
    assert eager["decode-only"]["itl_ms"] == pytest.approx(0.31 + LAUNCH_S * 1e3, abs=1e-9)
    assert eager["pdmux"]["itl_ms"] == graph["pdmux"]["itl_ms"]  # 14 ms of decode on 20 SMs hide them
    assert eager["mixed-chunk"]["itl_ms"] == graph["mixed-chunk"]["itl_ms"]  # mixed batches: eager already
    small = pdmux.estimate(model="qwen3-0.6b", decode_bs=4, context=1024, disable_cuda_graph=True)
    row = next(r for r in small.to_dict()["rows"] if r["policy"] == "pdmux")
    per_round = 8  # 8192 tokens under the 65536-token budget
    launches_ms = (28 * 10 * 25.7e-3) + per_round * 10 * 25.7e-3
    assert row["decode_corun_ms"] < launches_ms
    assert row["itl_ms"] == pytest.approx(launches_ms + 0.31 + 4 * 0.1, rel=1e-9)
    assert [n for n in small.to_dict()["notes"] if "no CUDA graph" in n] == [
        "--disable-cuda-graph: no CUDA graph, so every decode step launches its 280 kernels one by one, "
        "7.20 ms at 25.7 us each (SGLang's host time per kernel of an eager forward, --eager-launch-ms) "
        "before the scheduler's own work; prefills launch eagerly too, and no memory is reserved for graphs"]
    # the pool SGLang sizes without graphs: more KV
    assert json.loads(runner.invoke(app, ["estimate", "--disable-cuda-graph", "--json"]).stdout)["memory"][
        "sglang_pdmux_kv_pool_tokens"] > json.loads(runner.invoke(app, ["estimate", "--json"]).stdout)[
        "memory"]["sglang_pdmux_kv_pool_tokens"]


def test_simulate_capacity_and_tune_take_it() -> None:
    def itl(command: list[str], *extra: str) -> dict:
        r = runner.invoke(app, [*command, *extra, "--json"])
        assert r.exit_code == 0, r.stderr
        return json.loads(r.stdout)

    sim = ["simulate", F, "--workers", "1"]
    a, b = itl(sim), itl(sim, "--disable-cuda-graph")
    for pa, pb in zip(a["policies"], b["policies"]):
        assert pb["itl_ms"]["p50"] > pa["itl_ms"]["p50"] + 2, pa["policy"]  # 7 ms -> 9.6 ms
    assert [p["policy"] for p in b["policies"]] == ["pdmux", "chunked 8192", "mixed-chunk 512"]
    api = pdmux.simulate(F, workers=1, disable_cuda_graph=True)
    assert json.loads(json.dumps(api.to_dict())) == b
    cap = itl(["capacity", F, "--policies", "chunked", "--workers", "1"], "--disable-cuda-graph")
    assert cap["policies"][0]["max_rate_rps"] > 0
    tune = runner.invoke(app, ["tune", "--trace", F, "--slo-ttft", "2000", "--slo-itl", "60", "--workers",
                               "1", "--disable-cuda-graph", "--sm-group-nums", "4", "--json", "-o", "-"])
    assert tune.exit_code == 0, tune.stderr
    note = ("--disable-cuda-graph: no CUDA graph, so every decode step launches its 360 kernels one by one, "
            "9.25 ms at 25.7 us each")
    assert any(n.startswith(note) for n in b["notes"]) and not any("CUDA graph" in n for n in a["notes"])
    assert any(n.startswith(note) for n in cap["notes"])
    assert any(n.startswith(note) for n in json.loads(tune.stdout)["notes"])


def test_tune_launches_the_server_it_tuned_for(tmp_path) -> None:
    args = ["tune", "--trace", F, "--slo-ttft", "2000", "--slo-itl", "60", "--workers", "1",
            "--sm-group-nums", "4", "--no-fixed-splits", "--slo-margins", "none", "-o",
            str(tmp_path / "t.yaml")]
    eager = runner.invoke(app, [*args, "--disable-cuda-graph"])
    assert eager.exit_code == 0 and eager.stdout.rstrip().endswith("--disable-cuda-graph")
    graphs = runner.invoke(app, args)
    assert graphs.exit_code == 0 and "launch with" in graphs.stdout
    assert "--disable-cuda-graph" not in graphs.stdout


@pytest.mark.parametrize("args, fragment", [
    (["simulate", F, "--disable-cuda-graph", "--cost-model", "chapter"], "--disable-cuda-graph applies to"),
    (["capacity", F, "--disable-cuda-graph", "--cost-model", "chapter"], "--disable-cuda-graph applies to"),
    (["tune", "--trace", F, "--slo-ttft", "1000", "--slo-itl", "60", "--disable-cuda-graph", "--cost-model",
      "chapter"], "--disable-cuda-graph applies to"),
    (["estimate", "--disable-cuda-graph", "--cost-model", "chapter"], "--disable-cuda-graph applies to"),
    (["simulate", F, "--disable-cuda-graph", "--cuda-graph-max-bs", "8"], "give one or the other"),
])
def test_bad_input_is_one_line_exit_2(args, fragment) -> None:
    assert_one_line_error(runner.invoke(app, args), 2, fragment)
