"""Tensor parallelism (issue 10 part 1): SGLang's sharding per rank, the all-reduce model, --tp on every
planning and simulation command.

Shapes are computed by hand from the models' config.json values (shared/reference/model-specs.md);
measured all-reduce times are literals from profiles/measurements/ (Vidur's NCCL on DGX H100,
aiconfigurator's SGLang custom all-reduce); SGLang's memory rules by hand from
``srt/arg_groups/memory_hook.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from pdmux_cli.catalog.hardware import Gpu, find_gpu, load_gpu_file, load_gpus
from pdmux_cli.catalog.model import Model, kv_bytes_per_token, list_models, load_model, weight_bytes_total
from pdmux_cli.cli import app
from pdmux_cli.costmodel import build_step_model
from pdmux_cli.costmodel.collectives import (
    CUSTOM_MAX_BYTES,
    LinkFit,
    choose_fits,
    load_allreduce_fits,
    ring_factor,
    tp_collectives,
)
from pdmux_cli.costmodel.measurements import AllReduce
from pdmux_cli.costmodel.operators import rank_kv_bytes_per_token, rank_weight_bytes, step_shapes
from pdmux_cli.messages import render, render_all
from pdmux_cli.multigpu.tensor_parallel import shard
from pdmux_cli.planning.estimate import Scenario, estimate, fitting_tp, memory_check
from pdmux_cli.sglang import server_defaults as sgl
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.util.errors import InputError

runner = CliRunner()
AZURE = str(Path(__file__).parent / "fixtures" / "azure_conv_50.csv")


def run(*args: str):
    return runner.invoke(app, list(args))


# ------------------------------------------------------------------------------------------------
# GPU profiles: the interconnect fields


@pytest.mark.parametrize("gpu", load_gpus(), ids=lambda g: g.key)
def test_every_profile_names_its_interconnect(gpu: Gpu) -> None:
    kind, bw, hop = gpu.require_interconnect(2)
    assert kind in ("nvlink", "pcie")
    assert "gpu-specs.md" in gpu.interconnect_source and "nccl" in gpu.interconnect_source.lower()
    if kind == "nvlink":
        assert 150e9 <= bw <= 900e9 and hop == 0.6e-6
    else:
        assert bw in (15.75e9, 31.5e9, 63e9) and hop == 1.0e-6


def test_interconnect_datasheet_figures() -> None:
    """NVLink figures are per direction: half the datasheet's both-ways total."""
    assert find_gpu("h100").interconnect_bytes_per_s == 450e9  # NVLink4 900 GB/s
    assert find_gpu("a100").interconnect_bytes_per_s == 300e9  # NVLink3 600 GB/s
    assert find_gpu("h800").interconnect_bytes_per_s == 200e9  # cut to 400 GB/s
    assert find_gpu("b200").interconnect_bytes_per_s == 900e9  # NVLink5 1.8 TB/s
    assert find_gpu("l40s").interconnect == "pcie" and find_gpu("l40s").interconnect_bytes_per_s == 31.5e9
    assert find_gpu("h100-pcie").interconnect_bytes_per_s == 63e9  # PCIe Gen5 x16


PROFILE = """\
name: Test GPU
sm_count: 132
compute_capability: "9.0"
memory_bytes: 85520809984
hbm_bytes_per_s: 3350000000000
bf16_dense_flops: 989000000000000
"""


def test_user_profile_without_interconnect_cannot_do_tp(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(PROFILE)
    gpu = load_gpu_file(path)
    assert gpu.interconnect == "" and gpu.interconnect_bytes_per_s is None
    with pytest.raises(InputError, match="no interconnect figures"):
        gpu.require_interconnect(8)
    r = run("estimate", "--gpu", str(path), "--tp", "2")
    assert_one_line_error(r, 2, "interconnect")
    assert run("estimate", "--gpu", str(path)).exit_code == 0  # one GPU needs no link


@pytest.mark.parametrize("extra, message", [
    ("interconnect: infiniband\ninterconnect_bytes_per_s: 5.0e10\ninterconnect_latency_s: 1.0e-6\n",
     "nvlink, pcie"),
    ("interconnect: nvlink\n", "go together"),
    ("interconnect: nvlink\ninterconnect_bytes_per_s: 4.5e14\ninterconnect_latency_s: 6.0e-7\n", "from"),
])
def test_bad_interconnect_fields(tmp_path: Path, extra: str, message: str) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(PROFILE + extra)
    with pytest.raises(InputError, match=message):
        load_gpu_file(path)


# ------------------------------------------------------------------------------------------------
# sharding (SGLang's QKVParallelLinear, FusedMoE, MLA)


def test_sharding_splits_heads_and_replicates_kv_heads() -> None:
    llama = load_model("llama-3.1-70b")  # 64 heads, 8 KV heads
    assert shard(llama, 8) == shard(llama, 8)
    s8 = shard(llama, 8)
    assert (s8.heads, s8.kv_heads, s8.kv_replicas, s8.attention_share) == (8, 1, 1, 1 / 8)
    qwen = load_model("qwen3-235b-a22b")  # 64 heads, 4 KV heads: TP 8 keeps one, each on 2 ranks
    s = shard(qwen, 8)
    assert (s.heads, s.kv_heads, s.kv_replicas) == (8, 1, 2)
    assert rank_kv_bytes_per_token(qwen, 2.0, 8) == 94 * 2 * 1 * 128 * 2  # 48128: a quarter, not an eighth
    assert rank_kv_bytes_per_token(llama, 2.0, 8) == 80 * 2 * 1 * 128 * 2  # 40960: an eighth


def test_sharding_refusals_name_the_dimension() -> None:
    with pytest.raises(InputError, match="32 attention heads"):
        shard(load_model("qwen3-8b"), 3)
    gqa = Model("gqa", 4, 1024, 4096, 24, 6, 64, 32000, False)  # 6 KV heads: TP 4 divides neither way
    with pytest.raises(InputError, match="6 KV heads"):
        shard(gqa, 4)
    odd_mlp = Model("odd", 4, 1024, 4100, 16, 8, 64, 32000, False)
    with pytest.raises(InputError, match="intermediate_size"):
        shard(odd_mlp, 8)
    for bad in (0, 9, 16):
        with pytest.raises(InputError, match="--tp must"):
            shard(odd_mlp, bad)


def test_rank_shapes_llama_70b_tp8() -> None:
    """Column/row-parallel shapes, by hand: heads 64/8 = 8 x 128, one KV head, I = 28672/8, vocab/8."""
    shapes = step_shapes(load_model("llama-3.1-70b"), None, 8)
    gemms = {g.name: (g.k, g.n) for g in shapes.token_gemms}
    assert gemms == {"qkv": (8192, (8 + 2) * 128), "o": (8 * 128, 8192), "gate_up": (8192, 2 * 3584),
                     "down": (3584, 8192)}
    assert (shapes.lm_head.k, shapes.lm_head.n) == (8192, 128256 // 8)
    assert shapes.allreduces == 2 * 80 + 1 and shapes.allreduce_bytes_per_token == 8192 * 2
    assert shapes.kv_elements_per_token_per_layer == 2 * 128
    # weights per GPU: (8192 x (1024 + 256 + 1024) + 3 x 8192 x 3584) x 80 layers + lm_head + embedding, bf16
    params = (8192 * (1024 + 256 + 1024) + 3 * 8192 * 3584) * 80 + 2 * 8192 * 16032
    assert rank_weight_bytes(load_model("llama-3.1-70b"), None, 8) == 2 * params == 17_638_096_896


def test_rank_shapes_deepseek_v3_tp8() -> None:
    """MLA: q_a and kv_a replicated, q_b/kv_b/o split by the 128/8 heads, the latent KV whole; experts
    2048/8 wide (FusedMoE), the router whole."""
    shapes = step_shapes(load_model("deepseek-v3"), None, 8)
    gemms = {g.name: (g.k, g.n) for g in shapes.token_gemms}
    assert gemms["q_a"] == (7168, 1536) and gemms["kv_a"] == (7168, 512 + 64)
    assert gemms["q_b"] == (1536, 16 * 192) and gemms["kv_b"] == (512, 16 * (128 + 128))
    assert gemms["o"] == (16 * 128, 7168) and gemms["router"] == (7168, 256)
    assert gemms["shared_gate_up"] == (7168, 2 * 256) and shapes.experts.width == 2048 // 8
    assert shapes.kv_elements_per_token_per_layer == 512 + 64


@pytest.mark.parametrize("name", list_models())
def test_one_rank_is_the_whole_model(name: str) -> None:
    model = load_model(name)
    assert rank_weight_bytes(model) == weight_bytes_total(model)
    assert rank_kv_bytes_per_token(model) == kv_bytes_per_token(model)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(list_models()), tp=st.sampled_from([2, 4, 8]))
def test_shards_add_up_to_at_least_the_model(name: str, tp: int) -> None:
    """Replicated pieces (KV heads past tp, MLA's q_a/kv_a, the router) only add: tp ranks hold at least
    the whole model, and each holds less than the whole."""
    model = load_model(name)
    try:
        rank = rank_weight_bytes(model, None, tp)
    except InputError:
        return  # SGLang refuses this split
    whole = weight_bytes_total(model)
    assert whole / tp <= rank * (1 + 1e-12) and rank < whole
    assert rank_kv_bytes_per_token(model, 2.0, tp) <= kv_bytes_per_token(model)


# ------------------------------------------------------------------------------------------------
# the all-reduce model


def test_allreduce_against_measured_points() -> None:
    """Measured: Vidur NCCL, DGX H100, 8 GPUs, 64 MiB: 0.322 ms; aiconfigurator's SGLang custom
    all-reduce (CUDA graph), H100, 8 GPUs, 4 MiB: 0.0333366 ms, 512 KiB: 0.0105891 ms. At 512 KiB the
    model is 27% short: the kernel switches from one-shot to two-shot at 256 KiB on 8 GPUs, a bend a
    latency + bandwidth line does not follow (pdmux accuracy's custom term: median 4.6%, p90 18.8%)."""
    c = tp_collectives(find_gpu("h100"), 8)
    assert c.allreduce_s(67108864) == pytest.approx(0.322e-3, rel=0.10)
    assert c.allreduce_s(4194304) == pytest.approx(0.0333366e-3, rel=0.15)
    assert c.allreduce_s(524288) == pytest.approx(0.0105891e-3, rel=0.30)
    # A100 NCCL, 4 GPUs, the largest size Vidur measured: 0.603 ms
    assert tp_collectives(find_gpu("a100"), 4).allreduce_s(67108864) == pytest.approx(0.603e-3, rel=0.10)


def test_custom_allreduce_up_to_8_mib_nccl_above() -> None:
    c = tp_collectives(find_gpu("h100"), 8)
    assert c.custom is not None and c.allreduce_s(CUSTOM_MAX_BYTES) == pytest.approx(
        c.custom.time_s(CUSTOM_MAX_BYTES, 8, 450e9))
    assert c.allreduce_s(CUSTOM_MAX_BYTES + 16) == pytest.approx(c.nccl.time_s(
        CUSTOM_MAX_BYTES + 16, 8, 450e9))
    # PCIe beyond 2 GPUs: SGLang's custom all-reduce needs full NVLink, so NCCL at every size, with
    # NCCL's 1 us per extra ring step (2 (N - 1) steps) beyond the 2-GPU fit
    l40s = tp_collectives(find_gpu("l40s"), 4)
    assert l40s.custom is None and l40s.extra_nccl_latency_s == pytest.approx(4 * 1.0e-6)
    assert any("2 GPUs" in n for n in render_all(l40s.notes))


def test_link_fit_formula() -> None:
    """latency + 2 (N - 1) / N x bytes / (link x efficiency), by hand."""
    fit = LinkFit(latency_s=5e-6, bandwidth_efficiency=0.5)
    assert ring_factor(8) == 1.75
    assert fit.time_s(1e6, 8, 400e9) == pytest.approx(5e-6 + 1.75 * 1e6 / 200e9)
    assert fit.time_s(0, 8, 400e9) == 0 and fit.time_s(1e6, 1, 400e9) == 0


def test_unmeasured_gpus_take_the_closest_measured_link() -> None:
    fits = load_allreduce_fits()
    assert choose_fits(fits, "h800-sxm", "nvlink", (9, 0))[0].gpu == "h100-sxm"
    assert choose_fits(fits, "h100-pcie", "pcie", (9, 0))[0].gpu == "l40s"
    assert choose_fits(fits, "rtx-5090", "pcie", (12, 0))[0].gpu == "rtx-pro-6000"
    assert choose_fits(fits, "v100-sxm2-32gb", "nvlink", (7, 0))[0].gpu == "a100-sxm-80gb"
    own, note = choose_fits(fits, "b200", "nvlink", (10, 0))
    assert own.gpu == "b200" and note is None
    assert "h100-sxm" in render(tp_collectives(find_gpu("h800"), 8).notes[0])


@settings(max_examples=60, deadline=None)
@given(a=st.integers(16, CUSTOM_MAX_BYTES), b=st.integers(16, CUSTOM_MAX_BYTES), n=st.sampled_from([2, 4, 8]),
       gpu=st.sampled_from(["h100", "a100", "b200", "l40s", "h20"]))
def test_allreduce_grows_with_bytes_within_a_kernel(a: int, b: int, n: int, gpu: str) -> None:
    c = tp_collectives(find_gpu(gpu), n)
    lo, hi = sorted((a, b))
    assert 0 < c.allreduce_s(lo) <= c.allreduce_s(hi)
    assert c.allreduce_s(lo + CUSTOM_MAX_BYTES) <= c.allreduce_s(hi + CUSTOM_MAX_BYTES)


def test_fit_recovers_its_own_constants() -> None:
    """A fit to points made by the formula gives the formula's constants back."""
    from pdmux_cli.costmodel.fit import fit_allreduce

    truth = LinkFit(8e-6, 0.7)
    points = [AllReduce("x", "nccl", 8, b, truth.time_s(b, 8, 450e9))
              for b in (2 ** k for k in range(12, 27))]
    got = fit_allreduce(points, 450e9, "synthetic")
    assert got.latency_s == pytest.approx(8e-6, abs=0.6e-6) and got.bandwidth_efficiency == pytest.approx(
        0.7, abs=0.02)
    assert got.median_error < 0.02 and got.points == 15


# ------------------------------------------------------------------------------------------------
# the cost model per rank


def test_rank_step_adds_its_collectives() -> None:
    gpu, model = find_gpu("h100"), load_model("llama-3.1-70b")
    one, eight = build_step_model(gpu, model), build_step_model(gpu, model, tp=8)
    assert eight.collectives_s(32) == pytest.approx(161 * eight.collectives.allreduce_s(32 * 8192 * 2))
    assert one.collectives_s(32) == 0
    # a rank reads an eighth of the weights: decode is much faster, though not 8x (collectives, latencies)
    d1, d8 = one.decode_s(132, 32, 32 * 2048), eight.decode_s(132, 32, 32 * 2048)
    assert 3 < d1 / d8 < 8
    p1, p8 = one.prefill_s(132, [(8192, 0)]), eight.prefill_s(132, [(8192, 0)])
    assert p8 > p1 / 8 + eight.collectives_s(8192) * 0.99
    assert "TP 8" in eight.source


def test_chapter_model_refuses_tp() -> None:
    with pytest.raises(InputError, match="roofline"):
        build_step_model(find_gpu("h100"), load_model("qwen3-8b"), cost_model="chapter", tp=2)


# ------------------------------------------------------------------------------------------------
# memory per rank, SGLang's reserve and pool per rank


def test_sglang_reserve_per_rank() -> None:
    """H100 (81559 MiB), chunking off, TP 8: reserve = max(512 + 1.5 x 16384 + 8/8 x 1024 + 2 x 512,
    10240) = 27136 MiB (max_bs 512 at tp >= 4): (81559 - 27136) / 81559 = 0.667."""
    assert sgl.default_cuda_graph_max_bs(find_gpu("h100").memory_bytes, 8) == 512
    assert sgl.mem_fraction_static(find_gpu("h100").memory_bytes, -1, 8) == 0.667


def test_models_that_need_tp_fit_with_tp8() -> None:
    h100 = find_gpu("h100")
    for name in ("llama-3.1-70b", "qwen3-235b-a22b"):
        model = load_model(name)
        assert not memory_check(h100, model, Scenario()).fits
        est = estimate(h100, model, Scenario(tp=8))
        assert est.memory.fits and est.tp == 8 and all(r.gpus == 8 for r in est.rows)
        assert not any(n.startswith("does not fit") for n in render_all(est.notes))
    assert fitting_tp(h100, load_model("llama-3.1-70b"), Scenario()) == 2
    # gpt-oss-120b (MXFP4 experts, 65 GB) already fits one H100; with TP 8 each GPU holds 8.2 GB
    assert memory_check(h100, load_model("gpt-oss-120b"),
                        Scenario(tp=8)).weight_bytes == pytest.approx(8.17e9, rel=0.01)


def test_deepseek_v3_needs_h200_for_one_server() -> None:
    """671B FP8 weights are 85.1 GB a rank at TP 8 (q_a/kv_a replicated): past an H100's 80 GB, as
    SGLang's DeepSeek docs say (8 x H200, or two H100 nodes); an H200 holds it."""
    model = load_model("deepseek-v3")
    est = estimate(find_gpu("h100"), model, Scenario(tp=8))
    assert not est.memory.fits and est.memory.weight_bytes == pytest.approx(85.1e9, rel=0.01)
    assert "per GPU (one of 8 ranks)" in render(est.notes[0])
    assert estimate(find_gpu("h200"), model, Scenario(tp=8)).memory.fits


def test_simulated_pool_is_one_ranks() -> None:
    """KV pool under pdmux, Llama-3.1-70B, TP 8, H100: ((85520809984 - 2**30) x 0.667 - 17638096896) //
    40960 bytes per token."""
    setup = make_setup(find_gpu("h100"), load_model("llama-3.1-70b"), tp=8)
    assert setup.weight_bytes == 17_638_096_896 and setup.kv_bytes_per_token == 40960
    assert setup.graph_max_bs == 512
    expected = int(((85520809984 - 2**30) * 0.667 - 17638096896) // 40960)
    assert setup.kv_pool(-1).tokens == expected
    with pytest.raises(InputError, match="one rank's weights"):
        make_setup(find_gpu("h100"), load_model("deepseek-v3"), tp=8).kv_pool(-1)


# ------------------------------------------------------------------------------------------------
# the commands


def test_estimate_tp_table_and_json() -> None:
    r = run("estimate", "--model", "llama-3.1-70b", "--tp", "8")
    assert r.exit_code == 0, r.stderr
    assert "8 x H100 SXM5 80GB (TP 8)" in r.stdout and "GPUs" in r.stdout and "DOES NOT FIT" not in r.stdout
    assert "memory per GPU" in r.stdout
    d = json.loads(run("estimate", "--model", "llama-3.1-70b", "--tp", "8", "--json").stdout)
    assert d["tp"] == d["gpus"] == 8 and d["fits"] and {row["gpus"] for row in d["rows"]} == {8}
    assert d["memory"]["weight_bytes"] == 17_638_096_896
    one = json.loads(run("estimate", "--json").stdout)
    assert one["gpus"] == 1 and {row["gpus"] for row in one["rows"]} == {1}
    assert "GPUs" not in run("estimate").stdout  # one GPU: the title says which


@pytest.mark.parametrize("args, text", [
    (("estimate", "--tp", "0"), "--tp must"),
    (("estimate", "--tp", "16"), "--tp must"),
    (("estimate", "--tp", "3"), "attention heads"),
    (("estimate", "--tp", "2", "--cost-model", "chapter"), "roofline"),
    (("estimate", "--tp", "8", "--gpu", "b100"), "SM count"),
    (("splits", "--all", "--tp", "2"), "--tp"),
    (("splits", "--tp", "9"), "--tp must"),
    (("gen-config", "--tp", "3"), "attention heads"),
    (("simulate", "--synthetic", "--qps", "1", "--max-requests", "3", "--tp", "5"), "attention heads"),
    (("capacity", "--synthetic", "--qps", "1", "--max-requests", "3", "--tp", "-1"), "--tp must"),
])
def test_bad_tp_is_one_line(args: tuple[str, ...], text: str) -> None:
    assert_one_line_error(run(*args), 2, text)


def test_gen_config_launch_line_gains_tp_size(tmp_path: Path) -> None:
    out = tmp_path / "pdmux.yaml"
    r = run("gen-config", "--tp", "8", "--model", "llama-3.1-70b", "--output", str(out))
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[-1].endswith("--disable-overlap-schedule --tp-size 8")
    d = json.loads(run("gen-config", "--tp", "4", "--json").stdout)
    assert d["launch_flags"][-2:] == ["--tp-size", "4"] and d["gpus"] == 4
    assert "--tp-size" not in json.loads(run("gen-config", "--json").stdout)["launch_flags"]


def test_splits_tp_says_every_gpu_takes_the_same_level() -> None:
    d = json.loads(run("splits", "--tp", "8", "--model", "llama-3.1-70b", "--json").stdout)
    assert d["tp"] == d["gpus"] == 8 and any("every GPU builds these stream groups" in n for n in d["notes"])
    assert "each of 8 GPUs (TP 8)" in run("splits", "--tp", "8").stdout


def test_simulate_tp_reports_gpus_per_policy() -> None:
    r = run("simulate", AZURE, "--model", "llama-3.1-70b", "--tp", "8", "--max-requests", "20", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["tp"] == d["gpus"] == 8 and {p["gpus"] for p in d["policies"]} == {8}
    assert all(p["completed"] == 20 for p in d["policies"])
    table = run("simulate", AZURE, "--model", "llama-3.1-70b", "--tp", "8", "--max-requests", "20").stdout
    assert "8 x H100 SXM5 80GB (TP 8)" in table and "GPUs" in table
    # one GPU cannot hold it: every policy is refused with the reason
    assert_one_line_error(run("simulate", AZURE, "--model", "llama-3.1-70b", "--max-requests", "5"), 2,
                          "does not fit")


def test_capacity_and_tune_take_tp(tmp_path: Path) -> None:
    r = run("capacity", AZURE, "--model", "llama-3.1-70b", "--tp", "8", "--max-requests", "20", "--policies",
            "pdmux,mixed-chunk", "--workers", "1", "--tolerance", "0.2", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["gpus"] == 8 and {p["gpus"] for p in d["policies"]} == {8}
    assert "--tp-size 8" in d["verdict"] or "sustain" in d["verdict"]
    out = tmp_path / "t.yaml"
    r = run("tune", "--trace", AZURE, "--model", "llama-3.1-70b", "--tp", "8", "--slo-ttft", "2000",
            "--slo-itl", "60", "--max-requests", "20", "--budgets", "65536", "--divisors", "36",
            "--sm-group-nums", "8", "--workers", "1", "--output", str(out))
    assert r.exit_code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "every policy on 8 GPU(s) (TP 8, one rank simulated)" in text and text.endswith("--tp-size 8")


def test_tune_json_says_gpus_per_row() -> None:
    r = run("tune", "--trace", AZURE, "--model", "llama-3.1-70b", "--tp", "8", "--slo-ttft", "2000",
            "--slo-itl", "60", "--max-requests", "10", "--budgets", "65536", "--divisors", "36",
            "--sm-group-nums", "8", "--workers", "1", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["gpus"] == d["tp"] == 8
    assert {row["gpus"] for row in d["rows"]} == {8} and {s["gpus"] for s in d["schedules"]} == {8}
