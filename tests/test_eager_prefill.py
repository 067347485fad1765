"""A prefill batch SGLang launches kernel by kernel: the kernels a layer launches (counted from SGLang's
code), when SGLang replays prefills from its CUDA graph instead (0.5.23's rules), and what the host time
does to a step in the simulator and the estimate (a step is not done before its last kernel is queued)."""

from __future__ import annotations

import pytest

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.costmodel import build_step_model
from pdmux_cli.costmodel.efficiency import load_common, load_serving
from pdmux_cli.costmodel.operators import eager_kernels_per_layer, step_shapes
from pdmux_cli.sglang import server_defaults as sgl
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.runner import simulate
from pdmux_cli.simulate.schedulers import ChunkedPolicy, PdmuxPolicy, PrefillFirstPolicy
from pdmux_cli.simulate.traces import Trace
from pdmux_cli.util.errors import InputError

H100, B200 = find_gpu("h100"), find_gpu("b200")
QWEN = load_model("qwen3-8b")


def test_a_dense_layer_launches_the_ten_kernels_common_yaml_counts() -> None:
    """2 add-RMSNorms, RoPE, KV store, attention, QKV, O, gate+up, SiLU-and-mul, down: 10; the two
    all-reduces of a TP layer make 12."""
    assert eager_kernels_per_layer(step_shapes(QWEN)) == load_common()[1].kernels_per_layer == 10
    assert eager_kernels_per_layer(step_shapes(load_model("Llama-3.1-70B"), tp=8)) == 12


def test_deepseek_v3_layer_kernels_by_hand() -> None:
    """DeepSeek-V3 (61 layers, 3 dense, 58 MoE) at TP 8 with block-fp8 linear layers and FlashInfer's fused
    MoE: 5 + 3 (MLA) + 2 x (5 attention GEMMs + 2 x 3/61 dense + 2 x 58/61 shared) + 58/61 (router)
    + (3 + 58)/61 gated activations + 3 x 58/61 (top-k, fused MoE) + 2 all-reduces."""
    shapes = step_shapes(load_model("DeepSeek-V3"), tp=8)
    by_hand = 5 + 3 + 2 * (5 + 6 / 61 + 116 / 61) + 58 / 61 + 61 / 61 + 3 * 58 / 61 + 2
    got = eager_kernels_per_layer(shapes, mla=True, fp8_linear=True, moe_runner="flashinfer_trtllm")
    assert got == pytest.approx(by_hand, rel=1e-12) == pytest.approx(28.80, abs=0.01)
    # Triton's fused MoE launches 6 a layer, not 3; bf16 linear layers no quantization kernels
    triton = eager_kernels_per_layer(shapes, mla=True, fp8_linear=False, moe_runner="triton")
    assert triton == pytest.approx(by_hand - (5 + 6 / 61 + 116 / 61) + 3 * 58 / 61, rel=1e-12)


def test_step_model_launch_time_is_layers_times_kernels_times_the_fitted_cost() -> None:
    sm = build_step_model(B200, load_model("DeepSeek-V3"), tp=8, eager_launch_ms=0.05)
    assert sm.eager_kernels_per_layer == pytest.approx(28.80, abs=0.01)
    assert sm.prefill_launch_s() == pytest.approx(61 * sm.eager_kernels_per_layer * 50e-6, rel=1e-12)
    assert sm.prefill_launch_s(8) == pytest.approx(8 * sm.eager_kernels_per_layer * 50e-6, rel=1e-12)
    assert sm.prefill_launch_s(None, graphed=True) == pytest.approx(61 * 2 * 50e-6, rel=1e-12)
    chapter = build_step_model(H100, QWEN, cost_model="chapter")
    assert chapter.prefill_launch_s() == 0.0
    with pytest.raises(InputError, match="eager_launch_ms|eager-launch-ms"):
        build_step_model(H100, QWEN, eager_launch_ms=2.0)
    with pytest.raises(InputError):
        build_step_model(H100, QWEN, cost_model="chapter", eager_launch_ms=0.01)


def test_eager_launch_costs_are_sourced() -> None:
    """A dense model's host time per kernel is measured (common.yaml: SGLang PR 1401, Llama-3-8B's eager
    decode 8.23 ms over 32 x 10 kernels); a MoE model's is fitted (serving.yaml)."""
    cpu = load_common()[1]
    assert cpu.eager_launch_s == pytest.approx(8.23e-3 / 320, rel=0.01) and "PR 1401" in cpu.source
    sched, _, source = load_serving()
    assert 0 <= sched["eager_launch_moe_s"] <= 1e-3 and "eager_launch_moe_s" in source
    assert cpu.eager_launch_moe_s == sched["eager_launch_moe_s"]
    dense = build_step_model(H100, QWEN)
    assert dense.prefill_launch_s() == pytest.approx(36 * 10 * cpu.eager_launch_s, rel=1e-12)
    moe = build_step_model(B200, load_model("Qwen3-235B-A22B"), tp=8)
    assert moe.prefill_launch_s() == pytest.approx(94 * 13 * cpu.eager_launch_moe_s, rel=1e-12)
    only_moe = build_step_model(H100, QWEN, eager_launch_moe_ms=0.5)  # the fit's term leaves dense models
    assert only_moe.prefill_launch_s() == dense.prefill_launch_s()


def test_sglang_0523_replays_prefill_from_its_graph_but_deepseek_on_sm100() -> None:
    """cuda_graph_config.default_prefill_backend (breakable on CUDA); DeepSeek-V3 on SM100 takes trtllm_mla
    and cuda_graph_hook turns the prefill graph off; the graph takes up to the chunk (8192 for MLA)."""
    assert sgl.prefill_cuda_graph_default(("Qwen3ForCausalLM",), (9, 0))
    assert sgl.prefill_cuda_graph_default(("DeepseekV3ForCausalLM",), (9, 0))
    assert not sgl.prefill_cuda_graph_default(("DeepseekV3ForCausalLM",), (10, 0))
    assert sgl.prefill_cuda_graph_default(("Qwen3MoeForCausalLM",), (10, 0))
    assert sgl.prefill_graph_max_tokens(16384, mla=False) == 16384
    assert sgl.prefill_graph_max_tokens(16384, mla=True) == 8192
    assert sgl.prefill_graph_max_tokens(-1, mla=False) == 0
    assert not make_setup(B200, load_model("DeepSeek-V3"), tp=8).prefill_cuda_graph
    assert make_setup(H100, QWEN).prefill_cuda_graph


def test_setup_launch_by_batch() -> None:
    setup = make_setup(H100, QWEN, eager_launch_ms=0.05)
    sm = setup.step_model
    eager, graphed = sm.prefill_launch_s(), sm.prefill_launch_s(None, True)
    assert eager == pytest.approx(36 * 10 * 50e-6) and graphed == pytest.approx(36 * 2 * 50e-6)
    assert setup.prefill_launch_s(8192, 8192) == graphed
    assert setup.prefill_launch_s(8193, 8192) == eager  # past the graph's largest batch
    assert setup.prefill_launch_s(512, -1) == eager  # chunking off: no graph
    assert setup.prefill_launch_s(512, 8192, mixed=True) == eager  # mixed batches run eagerly
    off = make_setup(H100, QWEN, eager_launch_ms=0.05, prefill_cuda_graph=False)
    assert off.prefill_launch_s(512, 8192) == eager


def one_request(prompt: int = 64) -> Trace:
    return Trace(arrival_s=(0.1,), prompt_tokens=(prompt,), output_tokens=(4,))


@pytest.mark.parametrize("pol", [ChunkedPolicy(8192), PrefillFirstPolicy()], ids=lambda p: p.label)
def test_a_short_eager_prefill_takes_its_launches(pol) -> None:
    """64 tokens of Qwen3-8B on an H100 take ~7 ms of GPU (the weights' read); launched eagerly at 0.1 ms a
    kernel, the step takes 36 x 10 x 0.1 = 36 ms plus the scheduler's step (overlap scheduler: on the same
    thread)."""
    kw = dict(per_request_overhead_ms=0, admission_delay_ms=0, first_token_delay_ms=0, eager_launch_ms=0.1,
              frontend_token_ms=0)
    setup = make_setup(H100, QWEN, prefill_cuda_graph=False, **kw)
    sm = setup.step_model
    gpu = sm.prefill_s(132, [(64, 0)])
    assert gpu < 0.01
    r = simulate(one_request(), setup, pol)
    assert r.first_token_s[0] == pytest.approx(0.1 + sm.decode_cpu_s(1) + 0.036, rel=1e-9)
    graphed = simulate(one_request(), make_setup(H100, QWEN, **kw), pol)
    if pol.chunk_tokens > 0:  # replayed from the graph: 36 x 2 launches
        expected = 0.1 + max(gpu, sm.decode_cpu_s(1) + 0.0072)
        assert graphed.first_token_s[0] == pytest.approx(expected, rel=1e-9)
    else:  # chunking off: SGLang captures no prefill graph
        assert graphed.first_token_s[0] == r.first_token_s[0]
    # without the overlap scheduler the launches overlap the GPU; the scheduler's CPU time adds after
    eager_no_overlap = make_setup(H100, QWEN, prefill_cuda_graph=False, disable_overlap=True, **kw)
    no_overlap = simulate(one_request(), eager_no_overlap, pol)
    assert no_overlap.first_token_s[0] == pytest.approx(0.1 + 0.036 + sm.decode_cpu_s(1), rel=1e-9)


def test_pdmux_rounds_wait_for_the_split_prefill_launches() -> None:
    """A pdmux round launches its split prefill's layers eagerly after the decode step's graph: at 0.5 ms a
    kernel, a round's layers (8192 tokens under the 65536-token budget: 8) of 10 kernels take 40 ms, past
    the decode step, so each round during the prefill lasts at least that."""
    from pdmux_cli.sglang.split_levels import prefill_layers_per_round

    kw = dict(per_request_overhead_ms=0, admission_delay_ms=0, first_token_delay_ms=0, frontend_token_ms=0)
    fast = make_setup(H100, QWEN, eager_launch_ms=0, **kw)
    slow = make_setup(H100, QWEN, eager_launch_ms=0.5, **kw)
    trace = Trace(arrival_s=(0.0,) * 8 + (1.5,), prompt_tokens=(2048,) * 8 + (8192,),
                  output_tokens=(400,) * 8 + (4,))
    a, b = simulate(trace, fast, PdmuxPolicy()), simulate(trace, slow, PdmuxPolicy())
    per_round = prefill_layers_per_round(8192, 36, 65536, 0)
    assert per_round == 8
    launch = per_round * 10 * 0.5e-3
    during = [y - x for x, y in zip(b.step_end_s, b.step_end_s[1:]) if 1.5 < x and y < b.first_token_s[8]]
    # 36 layers: rounds of 8, 8, 8, 8 and 4 launched layers; then the prefill's GPU work runs out
    assert during[:5] == pytest.approx([launch + b_cpu for b_cpu in [slow.step_model.decode_cpu_s(8)] * 4]
                                       + [launch / 2 + slow.step_model.decode_cpu_s(8)], rel=1e-9)
    assert max(during[5:]) < launch / 2
    before = [y - x for x, y in zip(a.step_end_s, a.step_end_s[1:]) if 1.5 < x and y < a.first_token_s[8]]
    assert before and max(before) < launch  # without the launches the rounds are the decode steps
    assert b.first_token_s[8] > a.first_token_s[8]


def _cli(*args: str) -> dict:
    import json

    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_cli_options_move_a_short_prefill() -> None:
    """simulate: --eager-launch-ms and --disable-prefill-cuda-graph; estimate: --eager-launch-ms (mixed chunks
    run eagerly); a bad value is one line, exit 2."""
    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    base = ["simulate", "--synthetic", "--qps", "1", "--max-requests", "4", "--prompt-tokens", "64",
            "--output-tokens", "8", "--policies", "chunked", "--admission-delay-ms", "0",
            "--per-request-overhead-ms", "0.1"]

    def ttft(*extra: str) -> float:
        return _cli(*base, *extra)["policies"][0]["ttft_ms"]["p50"]

    graphed, eager = ttft("--eager-launch-ms", "0.1"), ttft("--eager-launch-ms", "0.1",
                                                            "--disable-prefill-cuda-graph")
    gpu_ms = build_step_model(H100, QWEN).prefill_s(132, [(64, 0)]) * 1e3 + 0.1  # + one request's step time
    cpu_ms = 0.31
    # one request at a time: TTFT = the prefill step (+ the same stream back); the step is the larger of
    # the GPU's work and the CPU's step plus the launches (36 x 10 x 0.1 ms eager, 36 x 2 x 0.1 replayed)
    assert eager - graphed == pytest.approx(max(gpu_ms, cpu_ms + 36.0) - max(gpu_ms, cpu_ms + 7.2), abs=1e-6)
    assert ttft("--eager-launch-ms", "0", "--disable-prefill-cuda-graph") == pytest.approx(
        graphed - max(gpu_ms, cpu_ms + 7.2) + max(gpu_ms, cpu_ms), abs=1e-6)

    est = ["estimate", "--decode-bs", "32", "--mixed-chunk-sizes", "512"]
    def mixed_itl(*extra: str) -> float:
        rows = _cli(*est, *extra)["rows"]
        return next(r["itl_ms"] for r in rows if r["policy"] == "mixed-chunk")

    # a mixed step launches eagerly: 36 x 10 x 0.2 = 72 ms after the CPU's 0.31 ms, far past its GPU work
    assert mixed_itl("--eager-launch-ms", "0.2") == pytest.approx(72.0 + 0.31, abs=1e-6)
    assert mixed_itl("--eager-launch-ms", "0") < 30

    bad = CliRunner().invoke(app, [*base, "--eager-launch-ms", "5"])
    assert bad.exit_code == 2 and "--eager-launch-ms" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_new_user_bad_inputs_are_one_line() -> None:
    """Found by a new-user try: an empty --gpu on simulate ran on the H100 default;
    --disable-prefill-cuda-graph beside the chapter's model did nothing; the API's model=None raised a
    TypeError."""
    import pdmux
    from cli_assertions import assert_one_line_error
    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    base = ["--synthetic", "--qps", "2", "--max-requests", "5"]
    for command in ("simulate", "capacity"):
        result = CliRunner().invoke(app, [command, *base, "--gpu", ""])
        assert_one_line_error(result, contains="--gpu is empty")
    assert_one_line_error(CliRunner().invoke(app, ["simulate", *base, "--cost-model", "chapter",
                                                   "--disable-prefill-cuda-graph"]),
                          contains="--disable-prefill-cuda-graph applies to --cost-model roofline")
    with pytest.raises(InputError) as caught:
        pdmux.estimate(model=None)
    assert caught.value.param == "model"
