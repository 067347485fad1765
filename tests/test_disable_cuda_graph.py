"""SGLang's --disable-cuda-graph (0.5.23 srt/arg_groups/cuda_graph_hook.py parse_cuda_graph_config: decode and
prefill graphs off; memory_hook.py reserve_for_graph_mb counts no graph): every decode step and prefill is
launched kernel by kernel, at SGLang's measured host time per kernel (PR 1401, common.yaml eager_launch_s)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.sglang import server_defaults as sgl
from pdmux_cli.simulate.engine import make_setup

H100 = find_gpu("h100")
SMALL = load_model("qwen3-0.6b")


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
    """H100 80GB at --chunked-prefill-size 8192: the reserve is floored at 10 GiB either way; an L4's is not:
    512 + 1.5 x 8192 (activations) + 128 (TP 1) + 2 x max_bs + 8 x buckets with graphs, without them the
    graphs' part gone."""
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
