"""SGLang's --disable-cuda-graph (0.5.23 srt/arg_groups/cuda_graph_hook.py parse_cuda_graph_config: decode and
prefill graphs off; memory_hook.py reserve_for_graph_mb counts no graph): every decode step and prefill is
launched kernel by kernel, at SGLang's measured host time per kernel (PR 1401, common.yaml eager_launch_s)."""

from __future__ import annotations

import json

import pytest

from pdmux_cli.costmodel.efficiency import load_serving
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.sglang import server_defaults as sgl
import pdmux
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.runner import simulate
from pdmux_cli.simulate.schedulers import ChunkedPolicy, PdmuxPolicy, PrefillFirstPolicy
from pdmux_cli.simulate.traces import Trace
from pdmux_cli.util.errors import InputError

H100 = find_gpu("h100")
SMALL = load_model("qwen3-0.6b")
QWEN = load_model("qwen3-8b")
#: common.yaml eager_launch_s: SGLang's host time per kernel of an eager forward (PR 1401)
KERNEL_S = 25.7e-6
#: serving.yaml's per-request step time of the 0.5 line (s a request a step), fitted: read, not copied.
PER_REQUEST_S = load_serving()[0]["per_request_step_s"]
#: the serving terms' arrival delays off, so that a lone request's steps are the step model's
QUIET = dict(admission_delay_ms=0, first_token_delay_ms=0, admission_interval_ms=0)


def _gaps(result) -> list[float]:
    return [b - a for a, b in zip(result.step_end_s, result.step_end_s[1:])]


def test_decode_outside_a_graph_takes_its_launches_by_hand() -> None:
    """Qwen3-0.6B: 28 layers x 10 kernels x 25.7 us = 7.196 ms of launches, more than its GPU step at batch 8;
    in a graph the GPU's time alone."""
    on = make_setup(H100, SMALL)
    off = make_setup(H100, SMALL, disable_cuda_graph=True)
    assert on.graph_max_bs > 8 and off.graph_max_bs == 0 and off.prefill_cuda_graph is False
    sm = off.step_model
    gpu = sm.decode_s(132, 8, 8 * 1000)
    assert sm.launch_cpu_s() == pytest.approx(28 * 10 * 25.7e-6, rel=1e-9)
    assert gpu < sm.launch_cpu_s()
    assert sm.decode_s(132, 8, 8 * 1000, cuda_graph=False) == pytest.approx(28 * 10 * 25.7e-6, rel=1e-9)


def test_no_graph_reserve_in_the_memory_default() -> None:
    """memory_hook.py: 512 + 1.5 x 8192 (activations) + 128 (TP 1) + 2 x max_bs + 8 x buckets with graphs,
    without them the graphs' part gone (an L4 here; an H100 below)."""
    l4 = find_gpu("l4").memory_bytes
    with_graphs = sgl.mem_fraction_static(l4, 8192)
    without = sgl.mem_fraction_static(l4, 8192, graphs=False)
    mib = l4 / sgl.MIB
    max_bs = sgl.default_cuda_graph_max_bs(l4)
    graph_mib = 2 * max_bs + 8 * sgl.prefill_graph_buckets(8192)
    assert without - with_graphs == pytest.approx(graph_mib / mib, abs=2e-3)


def test_the_flag_on_simulate_capacity_and_estimate() -> None:
    run = CliRunner()
    base = ["--synthetic", "--qps", "4", "--max-requests", "40", "--prompt-tokens", "200", "--output-tokens",
            "50", "--model", "qwen3-0.6b", "--policies", "chunked", "--json"]
    on = json.loads(run.invoke(app, ["simulate", *base]).stdout)["policies"][0]
    off = json.loads(run.invoke(app, ["simulate", *base, "--disable-cuda-graph"]).stdout)["policies"][0]
    assert off["itl_ms"]["p50"] > on["itl_ms"]["p50"]  # launch-bound without a graph
    assert off["itl_ms"]["p50"] >= 28 * 10 * 25.7e-3
    est = json.loads(run.invoke(app, ["estimate", "--model", "qwen3-0.6b", "--disable-cuda-graph",
                                      "--json"]).stdout)
    assert est["rows"][0]["itl_ms"] >= 28 * 10 * 25.7e-3
    r = run.invoke(app, ["capacity", "--synthetic", "--qps", "4", "--max-requests", "40", "--model",
                         "qwen3-0.6b", "--policies", "chunked", "--disable-cuda-graph", "--workers", "1",
                         "--json"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("command", ["simulate", "estimate"])
def test_refused_beside_the_chapter_model(command) -> None:
    args = [command, "--cost-model", "chapter", "--disable-cuda-graph"]
    if command == "simulate":
        args += ["--synthetic", "--qps", "1", "--max-requests", "5"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "--disable-cuda-graph applies to --cost-model roofline" in r.output


def test_the_h100_memory_default_by_hand() -> None:
    """H100 SXM (81559 MiB): without graphs the reserve is 512 + 1.5 x 8192 + 128 = 12928 MiB at chunk 8192
    (0.841 where the graphs' 512 + 8 x 64 MiB made it 0.83) and 512 + 1.5 x 16384 + 128 = 25216 MiB with
    chunking off, pdmux's (0.691, 0.685 with graphs); the KV pool grows with it."""
    memory = H100.memory_bytes
    mib = memory / sgl.MIB
    assert mib == 81559
    assert sgl.mem_fraction_static(memory, 8192, graphs=False) == round((mib - 12928) / mib, 3) == 0.841
    assert sgl.mem_fraction_static(memory, -1, graphs=False) == round((mib - 25216) / mib, 3) == 0.691
    assert (sgl.mem_fraction_static(memory, 8192), sgl.mem_fraction_static(memory, -1)) == (0.83, 0.685)
    graphs, eager = make_setup(H100, QWEN), make_setup(H100, QWEN, disable_cuda_graph=True)
    assert eager.kv_pool(-1).tokens > graphs.kv_pool(-1).tokens


@pytest.mark.parametrize("policy", [ChunkedPolicy(8192), PrefillFirstPolicy()], ids=lambda p: p.label)
def test_a_decode_step_with_and_without_cuda_graphs_by_hand(policy) -> None:
    """One Qwen3-8B request of 512 tokens on an H100 decoding 4 more tokens, the overlap scheduler hiding the
    CPU's 0.31 ms. From a graph a step is its GPU work (6.9 ms) + its request's term (serving.yaml's 0.5
    line, 0.04 ms); launched kernel by kernel it is not done before its 36 x 10 launches at 25.7 us, 9.252 ms,
    + that term; without the overlap
    scheduler the CPU's 0.31 ms adds to both."""
    launches = 36 * 10 * KERNEL_S
    lone = Trace(arrival_s=(0.0,), prompt_tokens=(512,), output_tokens=(5,))
    graphs = make_setup(H100, QWEN, **QUIET)
    eager = make_setup(H100, QWEN, disable_cuda_graph=True, **QUIET)
    sm = graphs.step_model
    gpu = [sm.decode_s(132, 1, 512 + i) for i in (1, 2, 3)]  # the second to fourth steps: KV 513-515
    cpu, req = sm.decode_cpu_s(1), sm.request_s(1)
    assert cpu == pytest.approx(0.31e-3) and req == pytest.approx(PER_REQUEST_S)
    assert 6.5e-3 < min(gpu) and max(gpu) < 7.2e-3 < launches
    assert eager.step_model.launch_cpu_s() == pytest.approx(launches, rel=1e-12) == pytest.approx(9.252e-3)
    assert _gaps(simulate(lone, graphs, policy)) == pytest.approx([g + req for g in gpu], rel=1e-12)
    assert _gaps(simulate(lone, eager, policy)) == pytest.approx([launches + req] * 3, rel=1e-12)
    serial = make_setup(H100, QWEN, disable_cuda_graph=True, disable_overlap=True, **QUIET)
    assert _gaps(simulate(lone, serial, policy)) == pytest.approx([launches + req + cpu] * 3, rel=1e-12)
    # a step whose GPU work outlasts its launches is the same either way: 64 requests at 4000 tokens
    late = Trace(arrival_s=(5.0,), prompt_tokens=(16,), output_tokens=(2,))
    running = [(4000, 4)] * 64
    a, b = simulate(late, graphs, policy, running), simulate(late, eager, policy, running)
    assert a.step_end_s[0] == pytest.approx(sm.decode_s(132, 64, 64 * 4000) + 64 * req, rel=1e-12)
    assert a.step_end_s[0] > launches and b.step_end_s[:4] == a.step_end_s[:4]


def test_a_pdmux_round_launches_its_decode_step_then_its_prefill_layers() -> None:
    """SGLang 0.5.23 runs pdmux without graphs (eager_runner.py _resolve_decode_pdmux picks the stream
    group's decode attention backend). event_loop_pdmux's thread launches the decode step (run_batch on the
    decode stream), then the round's prefill layers, then waits for decode: Qwen3-0.6B's 28 x 10 kernels
    (7.196 ms), then 8 layers' 80 (2.056 ms: an 8192-token prompt under the 65536-token budget), then the
    CPU's 0.31 ms and the request's 0.04 ms (serving.yaml): 9.602 ms a round beside the prefill, where its
    decode step on the decode partition is far shorter. Alone, a round is its decode step's launches
    + 0.35 ms."""
    launches, eight_layers = 28 * 10 * KERNEL_S, 8 * 10 * KERNEL_S
    graphs = make_setup(H100, SMALL, **QUIET)
    eager = make_setup(H100, SMALL, disable_cuda_graph=True, **QUIET)
    sm = graphs.step_model
    cpu, req = sm.decode_cpu_s(1), sm.request_s(1)
    assert sm.decode_s(20, 1, 600, 0.0, 112) < launches
    lone = simulate(Trace(arrival_s=(0.0,), prompt_tokens=(512,), output_tokens=(5,)), eager, PdmuxPolicy())
    assert _gaps(lone) == pytest.approx([launches + cpu + req] * 3, rel=1e-12)
    trace = Trace(arrival_s=(0.0, 0.5), prompt_tokens=(256, 8192), output_tokens=(200, 2))
    r = simulate(trace, eager, PdmuxPolicy())
    # the rounds from its arrival to its first token: the lone ones while the front end tokenizes it, then
    # 28 layers in rounds of 8, 8, 8 and 4
    window = [d for end, d in zip(r.step_end_s[1:], _gaps(r)) if 0.5 < end <= r.first_token_s[1]]
    both = launches + eight_layers + cpu + req
    assert both == pytest.approx(9.252e-3 * 28 / 36 + 2.056e-3 + 0.31e-3 + PER_REQUEST_S, abs=1e-6)
    assert [d for d in window if d != pytest.approx(launches + cpu + req, rel=1e-12)] == pytest.approx(
        [both] * 3 + [launches + 4 * 10 * KERNEL_S + cpu + req], rel=1e-12)


def test_estimates_pdmux_round_without_graphs_by_hand() -> None:
    """estimate's PD-mux row for Qwen3-0.6B, 4 requests at 1024 tokens: the round's thread launches the
    decode step's 280 kernels, then 8 prefill layers' 80, before the CPU's 0.31 ms and the requests'
    4 x 0.04 ms;
    from a graph the prefill layers' launches alone (or the decode step, when longer)."""
    scenario = dict(model="qwen3-0.6b", decode_bs=4, context=1024)
    row = next(r for r in pdmux.estimate(**scenario, disable_cuda_graph=True).to_dict()["rows"]
               if r["policy"] == "pdmux")
    launches_ms = (28 * 10 + 8 * 10) * KERNEL_S * 1e3
    assert row["decode_corun_ms"] < launches_ms
    assert row["itl_ms"] == pytest.approx(launches_ms + 0.31 + 4 * PER_REQUEST_S * 1e3, rel=1e-9)
    graphs = next(r for r in pdmux.estimate(**scenario).to_dict()["rows"] if r["policy"] == "pdmux")
    assert graphs["itl_ms"] == pytest.approx(max(graphs["decode_corun_ms"], 8 * 10 * KERNEL_S * 1e3) + 0.31
                                             + 4 * PER_REQUEST_S * 1e3, rel=1e-9)


F = "tests/fixtures/azure_conv_50.csv"


@pytest.mark.parametrize("args", [
    ["simulate", F, "--cost-model", "chapter"],
    ["capacity", F, "--cost-model", "chapter"],
    ["tune", "--trace", F, "--slo-ttft", "1000", "--slo-itl", "60", "--cost-model", "chapter"],
    ["estimate", "--cost-model", "chapter"],
], ids=lambda a: a[0])
def test_bad_input_is_one_line_on_stderr_exit_2(args) -> None:
    assert_one_line_error(CliRunner().invoke(app, [*args, "--disable-cuda-graph"]), 2,
                          "--disable-cuda-graph applies to --cost-model roofline")


def test_the_api_names_the_keyword() -> None:
    with pytest.raises(InputError, match="^disable_cuda_graph applies to cost_model roofline") as caught:
        pdmux.simulate(F, cost_model="chapter", disable_cuda_graph=True, workers=1)
    assert caught.value.param == "disable_cuda_graph"
