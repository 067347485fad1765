"""One MoE layer's routed experts as SGLang's fused MoE runs them (aiconfigurator-core 0.12.0's MoE tables).

- which runner SGLang 0.5.23 picks per GPU and model (:mod:`pdmux_cli.costmodel.moe`), one test per rule;
- the shipped MoE measurements (``profiles/measurements/aiconfigurator/<gpu>_moe.csv``) as read, against
  literals copied from the files, and the shapes against the models' config.json;
- the fit (recovers known constants; which points it takes), the shipped ``moe`` sections, and the
  roofline's routed experts with them (one fused operator a layer, its latency once).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model, model_from_config
from pdmux_cli.catalog.profile_files import efficiency_profiles_dir, model_profiles_dir
from pdmux_cli.costmodel import build_step_model, fit
from pdmux_cli.costmodel import measurements as meas
from pdmux_cli.costmodel.efficiency import OperatorEfficiency, load_profile, profile_for
from pdmux_cli.costmodel.moe import for_moe, moe_flops_per_s, moe_kernel
from pdmux_cli.costmodel.operators import ACTIVATION_BYTES
from pdmux_cli.messages import render, render_all
from pdmux_cli.util.errors import InputError

SM100, SM90, SM80, SM89 = (10, 0), (9, 0), (8, 0), (8, 9)


# --- SGLang 0.5.23's runner choice -------------------------------------------------------------------


def test_qwen3_moe_runs_trtllm_on_sm100_and_triton_elsewhere():
    """``srt/arg_groups/model_overrides/qwen3_moe.py``: bf16 (quantization None) or fp8 on SM100."""
    qwen = load_model("qwen3-235b-a22b")
    assert moe_kernel(qwen, SM100) == ("flashinfer_trtllm", "bf16")
    assert moe_kernel(qwen, (10, 3)) == ("flashinfer_trtllm", "bf16")  # B300, GB300
    assert moe_kernel(qwen, SM90) == ("triton", "bf16")
    assert moe_kernel(qwen, SM80) == ("triton", "bf16")
    assert moe_kernel(qwen, (12, 0)) == ("triton", "bf16")  # SM120 is not is_sm100


def test_qwen3_moe_bf16_ran_triton_on_sm100_before_0_5_8():
    """0.5.6-0.5.7 ``server_args.py`` ``_handle_model_specific_adjustments``: flashinfer_trtllm only for
    quantized experts (``self.quantization in ("fp8", "modelopt_fp4")``); 0.5.8 adds ``is None``."""
    qwen = load_model("qwen3-235b-a22b")
    assert moe_kernel(qwen, SM100, qwen3_bf16_trtllm=False) == ("triton", "bf16")
    assert moe_kernel(qwen, SM100, 1.0, qwen3_bf16_trtllm=False) == ("flashinfer_trtllm", "fp8_block")
    assert moe_kernel(load_model("deepseek-v3"), SM100, qwen3_bf16_trtllm=False) == (
        "flashinfer_trtllm", "fp8_block")


def test_a_release_before_0_5_8_times_qwen3_bf16_experts_as_triton_on_b200():
    """build_step_model(release=0.5.6): Qwen3-235B-A22B at TP 8 on a B200, batch 1: each of the 94 MoE
    layers pays b200.yaml's triton/bf16 latency (35.94 us) instead of flashinfer_trtllm/bf16's (13.5 us);
    the cookbook's 0.5.6 runs measured 10.12 ms TPOT at one stream (sglang_serving_runs.yaml)."""
    from pdmux_cli.sglang.release_defaults import release_defaults

    b200, qwen = find_gpu("b200"), load_model("qwen3-235b-a22b")
    old = build_step_model(b200, qwen, tp=8, release=release_defaults("0.5.6"))
    new = build_step_model(b200, qwen, tp=8)
    assert old.eff.moe_routed.latency_s == 3.594e-05 and new.eff.moe_routed.latency_s == 1.35e-05
    gained = old.decode_s(148, 1, 2000) - new.decode_s(148, 1, 2000)
    assert 94 * (3.594e-05 - 1.35e-05) * 0.9 < gained < 94 * (3.594e-05 - 1.35e-05) * 1.5
    assert old.eager_kernels_per_layer - new.eager_kernels_per_layer == 3  # triton 6, trtllm 3


def test_moe_runner_backend_picks_the_kernel_timed() -> None:
    """SGLang's ``--moe-runner-backend``: ``triton`` on a B200 times Qwen3's bf16 experts with b200.yaml's
    triton/bf16 fit (the 0.5.6 rule's kernel); ``flashinfer_trtllm`` off SM100 and an unmeasured runner are
    refused naming the flag; a dense model takes any of them and changes nothing."""
    qwen = load_model("qwen3-235b-a22b")
    assert moe_kernel(qwen, SM100, runner="triton") == ("triton", "bf16")
    assert moe_kernel(qwen, SM100, runner="auto") == moe_kernel(qwen, SM100) == ("flashinfer_trtllm", "bf16")
    assert moe_kernel(qwen, SM100, qwen3_bf16_trtllm=False, runner="flashinfer_trtllm") == (
        "flashinfer_trtllm", "bf16")
    assert moe_kernel(load_model("gpt-oss-120b"), SM90, runner="triton") == ("triton", "w4a16_mxfp4")
    assert moe_kernel(load_model("qwen3-8b"), SM90, runner="triton") is None
    with pytest.raises(InputError, match=r"^--moe-runner-backend flashinfer_trtllm runs on SM100 GPUs only"):
        moe_kernel(qwen, SM90, runner="flashinfer_trtllm")
    with pytest.raises(InputError, match="must be one of auto, triton, flashinfer_trtllm"):
        moe_kernel(qwen, SM100, runner="cutlass")
    b200 = find_gpu("b200")
    forced = build_step_model(b200, qwen, tp=8, moe_runner_backend="triton")
    from pdmux_cli.sglang.release_defaults import release_defaults

    old = build_step_model(b200, qwen, tp=8, release=release_defaults("0.5.6"))
    assert forced.decode_s(148, 1, 2000) == old.decode_s(148, 1, 2000)
    assert forced.eager_kernels_per_layer == old.eager_kernels_per_layer


def test_moe_runner_backend_on_the_command_line() -> None:
    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    runner = CliRunner()
    base = ["estimate", "--gpu", "b200", "--model", "qwen3-235b-a22b", "--tp", "8", "--decode-bs", "1",
            "--json"]
    auto = json.loads(runner.invoke(app, base).stdout)["rows"][0]["itl_ms"]
    triton = json.loads(runner.invoke(app, [*base, "--moe-runner-backend", "triton"]).stdout)["rows"][0]
    assert triton["itl_ms"] > auto + 94 * 20e-3  # 94 layers of Triton's latency (35.9 us against 13.5)
    out = runner.invoke(app, ["estimate", "--model", "qwen3-235b-a22b", "--tp", "8",
                              "--moe-runner-backend", "flashinfer_trtllm"])
    assert out.exit_code == 2 and out.stderr.strip().splitlines() == [
        "pdmux: error: --moe-runner-backend flashinfer_trtllm runs on SM100 GPUs only (B200, B300, GB200, "
        "GB300): give triton or auto"]
    out = runner.invoke(app, ["estimate", "--cost-model", "chapter", "--moe-runner-backend", "triton"])
    assert out.exit_code == 2 and "applies to --cost-model roofline" in out.stderr


def test_deepseek_fp8_runs_trtllm_on_sm100_and_triton_on_hopper():
    ds = load_model("deepseek-v3")
    assert moe_kernel(ds, SM100) == ("flashinfer_trtllm", "fp8_block")
    assert moe_kernel(ds, SM90) == ("triton", "fp8_block")
    assert moe_kernel(ds, SM100, 2.0) == ("flashinfer_trtllm", "bf16")  # --weight-bytes-per-param 2


def test_gpt_oss_mxfp4_takes_mxfp8_activations_on_sm100_only():
    """``gpt_oss.py``: flashinfer_mxfp4 on SM100 (MXFP8 activations by default, ``mxfp4.py``);
    triton_kernel (triton_kernels' matmul_ogs) elsewhere, which no table measures."""
    oss = load_model("gpt-oss-120b")
    assert moe_kernel(oss, SM100) == ("flashinfer_trtllm", "w4a8_mxfp4_mxfp8")
    assert moe_kernel(oss, SM90) == ("triton_kernel", "w4a16_mxfp4")
    assert moe_kernel(oss, SM89) == ("triton_kernel", "w4a16_mxfp4")


def test_mixtral_and_unknown_architectures_run_triton_dense_models_none():
    assert moe_kernel(load_model("mixtral-8x7b"), SM100) == ("triton", "bf16")
    config = json.loads((model_profiles_dir() / "Qwen3-30B-A3B.json").read_text(encoding="utf-8"))
    config.pop("architectures", None)
    assert moe_kernel(model_from_config(config, name="no-arch"), SM100) == ("triton", "bf16")
    assert moe_kernel(load_model("llama-3.1-8b"), SM100) is None
    assert moe_kernel(load_model("qwen3-30b-a3b"), SM100, 0.5) is None  # no table dtype for 4-bit weights


# --- the measurements ----------------------------------------------------------------------------------


def test_shapes_are_the_models_config():
    for name, (hidden, inter, experts, top_k, grouped) in meas.AIC_MOE_MODELS.items():
        model = load_model(name)
        assert (model.hidden_size, model.moe_intermediate_size, model.num_experts,
                model.experts_per_token) == (
            hidden, inter, experts, top_k), name
        assert grouped == (name == "DeepSeek-V3")


def test_moe_points_as_shipped():
    """Literals from b200_sxm_moe.csv / h200_sxm_moe.csv (latency_ms, weights_fit_l2)."""
    b200 = {(p.kernel, p.dtype, p.model, p.tp, p.tokens): p for p in meas.aic_moe("b200")}
    qwen = b200[("flashinfer_trtllm", "bf16", "Qwen3-235B-A22B", 8, 1)]
    assert qwen.seconds == pytest.approx(0.019746e-3) and qwen.weights_fit_l2
    assert (qwen.width, qwen.touched) == (192, 8)
    assert b200[("flashinfer_trtllm", "fp8_block", "DeepSeek-V3", 8, 1)].seconds == pytest.approx(0.036127e-3)
    assert b200[("flashinfer_trtllm", "w4a8_mxfp4_mxfp8", "gpt-oss-120b", 8,
                 1)].seconds == pytest.approx(0.01649e-3)
    assert b200[("flashinfer_trtllm", "bf16", "Qwen3-235B-A22B", 8, 16)].touched == 128
    assert not any(p.model == "DeepSeek-V3" and p.tokens > 1 for p in b200.values())
    h200 = {(p.kernel, p.dtype, p.model, p.tp, p.tokens): p for p in meas.aic_moe("h200-sxm")}
    assert h200[("triton", "bf16", "Qwen3-235B-A22B", 8, 1)].seconds == pytest.approx(0.031216e-3)
    assert h200[("triton", "fp8_block", "DeepSeek-V3", 8, 1)].seconds == pytest.approx(0.036394e-3)
    assert {p.kernel for p in h200.values()} == {"triton"}
    for gpu in meas.aic_gpus():
        assert meas.aic_moe(gpu), gpu


# --- the fit --------------------------------------------------------------------------------------------


def _synthetic(eff: OperatorEfficiency, peak: float, hbm: float) -> list[meas.AicMoe]:
    out = []
    for model in ("Qwen3-235B-A22B", "Qwen3-30B-A3B", "Mixtral-8x7B"):
        h, inter, experts, top_k, _ = meas.AIC_MOE_MODELS[model]
        for tp in (1, 2, 4, 8):
            for tokens in (1, 2, 4, 8, 16, 64, 256, 1024, 4096):
                p = meas.AicMoe("h100-sxm", "triton", "bf16", model, h, inter, experts, top_k, tp, tokens,
                                1.0)
                out.append(replace(p, seconds=fit.predict_moe(eff, p, peak, hbm)))
    return out


def test_fit_recovers_known_constants():
    h100 = find_gpu("h100")
    peak, hbm = h100.bf16_dense_flops, h100.hbm_bytes_per_s
    truth = OperatorEfficiency(24e-6, 0.85, 0.6, 64.0)
    got = fit.fit_moe(_synthetic(truth, peak, hbm), peak, hbm, "synthetic")
    assert got.latency_s == pytest.approx(24e-6, abs=1e-6)
    assert got.bandwidth_efficiency == pytest.approx(0.85, abs=0.01)
    assert got.peak_efficiency == pytest.approx(0.6, abs=0.05)
    assert got.median_error < 0.01 and got.source == "synthetic"
    with pytest.raises(ValueError):
        fit.fit_moe([], peak, hbm, "none")


def test_fit_points_drop_cached_reads_and_grouped_routing_past_one_token():
    b200 = find_gpu("b200")
    h, inter, experts, top_k, _ = meas.AIC_MOE_MODELS["Qwen3-235B-A22B"]
    base = meas.AicMoe("b200", "flashinfer_trtllm", "bf16", "Qwen3-235B-A22B", h, inter, experts, top_k, 8, 1,
                       19.746e-6, True)
    # 8 experts x 4.7 MB in L2, read at 8 TB/s in 4.7 us: 24% of 19.7 us > 10%: may be cached, dropped
    assert fit.moe_fit_points([base], b200.hbm_bytes_per_s) == []
    tiny = replace(base, model="Qwen3-30B-A3B", hidden=2048, inter=768, seconds=14.8e-6)
    # 1.2 us of 14.8 us: latency-bound, kept
    assert fit.moe_fit_points([tiny], b200.hbm_bytes_per_s) == [tiny]
    hbm_read = replace(base, weights_fit_l2=False)
    assert fit.moe_fit_points([hbm_read], b200.hbm_bytes_per_s) == [hbm_read]
    dh, di, de, dk, _ = meas.AIC_MOE_MODELS["DeepSeek-V3"]
    ds = meas.AicMoe("b200", "flashinfer_trtllm", "fp8_block", "DeepSeek-V3", dh, di, de, dk, 1, 2, 1e-4)
    assert fit.moe_fit_points([ds, replace(ds, tokens=1)], b200.hbm_bytes_per_s) == [replace(ds, tokens=1)]


def test_shipped_sections_name_their_measurement_and_kernels():
    for key, fitted in (("b200", ("flashinfer_trtllm/bf16", "flashinfer_trtllm/fp8_block",
                                  "flashinfer_trtllm/w4a8_mxfp4_mxfp8", "triton/bf16", "triton/fp8_block")),
                        ("h100-sxm", ("triton/bf16", "triton/fp8_block", "triton/w4a16_mxfp4")),
                        ("a100-sxm-80gb", ("triton/bf16",))):
        profile = load_profile(efficiency_profiles_dir() / f"{key}.yaml")
        assert tuple(k for k, _ in profile.moe) == fitted, key
        for _, e in profile.moe:
            assert "aiconfigurator-core 0.12.0" in e.source and "fused MoE" in e.source
            assert e.median_error is not None and 0 < e.latency_s < 1e-4


def test_malformed_moe_section_is_one_clear_error(tmp_path):
    good = (efficiency_profiles_dir() / "h100-sxm.yaml").read_text()
    path = tmp_path / "h100-sxm.yaml"
    path.write_text(good.replace("  triton/bf16:", "  triton-bf16:"))
    with pytest.raises(InputError, match="'<kernel>/<dtype>'"):
        load_profile(path)


# --- the cost model -------------------------------------------------------------------------------------


def test_for_moe_takes_the_kernel_then_the_dtype_then_notes():
    b200 = profile_for("b200", SM100)[0]
    chosen, note = for_moe(b200, ("flashinfer_trtllm", "bf16"))
    assert chosen.moe_routed == b200.moe_section("flashinfer_trtllm", "bf16") and note is None
    h100 = profile_for("h100-sxm", SM90)[0]
    chosen, note = for_moe(h100, ("flashinfer_trtllm", "bf16"))
    assert chosen.moe_routed == h100.moe_section(
        "triton", "bf16"
    ) and "triton MoE efficiency stands in" in render(note)
    a100 = profile_for("a100-sxm-80gb", SM80)[0]
    chosen, note = for_moe(a100, ("triton", "fp8_block"))
    assert chosen.moe_routed is None and "timed as two GEMMs" in render(note)
    assert for_moe(a100, None) == (a100, None)
    # gpt-oss's triton_kernel off SM100 is not the Triton MXFP4 path the Hopper table timed: no stand-in
    chosen, note = for_moe(h100, ("triton_kernel", "w4a16_mxfp4"))
    assert h100.moe_section("triton", "w4a16_mxfp4") is not None
    assert (
        chosen.moe_routed is None
        and "triton_kernel MoE (w4a16_mxfp4) is not in any public table" in render(note)
    )


def test_routed_experts_are_one_fused_operator_a_layer():
    """Qwen3-235B-A22B at TP 8 on B200, one decode row: 94 layers of 8 touched experts, each layer the fitted
    flashinfer_trtllm bf16 MoE (its latency once, weights at its bandwidth)."""
    gpu, model = find_gpu("b200"), load_model("qwen3-235b-a22b")
    step = build_step_model(gpu, model, tp=8)
    eff = profile_for("b200", SM100)[0].moe_section("flashinfer_trtllm", "bf16")
    assert step.eff.moe_routed == eff and step.moe_peak == gpu.bf16_dense_flops
    ex = step.shapes.experts
    weights = 8 * ex.expert_params * 2.0
    act = ACTIVATION_BYTES * 8 * (2 * ex.hidden + 3 * ex.width)
    bw, flops = step._rates(gpu.sm_count, 0, "decode")
    memory = (weights + act) / (bw * eff.bandwidth_efficiency)
    # one row per touched expert: the GEMMs' x / (x + half) at x = 1 makes compute as long as the reads
    compute = 2 * 8 * ex.expert_params / (gpu.bf16_dense_flops * eff.peak_efficiency / (1 + eff.half))
    expected = 94 * (eff.latency_s + max(memory, compute))
    assert step._experts_s(1, gpu.sm_count, bw, flops) == pytest.approx(expected)
    # the gated activation is inside the fused MoE: its bytes leave the element-wise ops
    assert step._elementwise_per_token == pytest.approx(
        step.shapes.elementwise_bytes_per_token * 94 + step.shapes.embedding_bytes_per_token
        - 94 * 3 * 8 * 192 * ACTIVATION_BYTES)


def test_measured_moe_is_slower_at_one_token_than_two_gemms_were():
    """The measured fused MoE pays its routing and kernel tails: at one decode row it is longer than the two
    grouped GEMMs at the GEMM efficiency that stood in before (B200, H100; TP 8)."""
    for key, cc in (("b200", SM100), ("h100", SM90)):
        gpu, model = find_gpu(key), load_model("qwen3-235b-a22b")
        step = build_step_model(gpu, model, tp=8)
        legacy = build_step_model(gpu, model, tp=8)
        legacy.eff = replace(legacy.eff, moe_routed=None)
        bw, flops = step._rates(gpu.sm_count, 0, "decode")
        assert step._experts_s(1, gpu.sm_count, bw, flops) > 1.1 * legacy._experts_s(
            1, gpu.sm_count, bw, flops), key


def test_fp8_math_moe_runs_at_the_fp8_peak():
    b200 = find_gpu("b200")
    assert moe_flops_per_s(b200, ("flashinfer_trtllm", "w4a8_mxfp4_mxfp8")) == b200.fp8_dense_flops
    assert moe_flops_per_s(b200, ("triton", "bf16")) == b200.bf16_dense_flops
    assert moe_flops_per_s(b200, None) is None
    step = build_step_model(b200, load_model("gpt-oss-120b"), tp=8)
    assert step.moe_peak == b200.fp8_dense_flops and step.gemm_peak == b200.bf16_dense_flops


def test_no_moe_measurement_keeps_the_gemm_experts_with_a_note():
    step = build_step_model(find_gpu("a100"), load_model("deepseek-v3"), tp=8, weight_bytes_per_param=1.0)
    assert step.eff.moe_routed is None
    assert any("no fp8_block MoE measured on a100-sxm-80gb" in n for n in render_all(step.notes))
