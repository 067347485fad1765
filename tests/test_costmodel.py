"""The roofline cost model: fitted curves against their measured points, the operators, the memory floor,
chunk-size effects, monotonicity, SM partitions, the efficiency files, SGLang's server defaults, and the
chapter's model behind the step interface."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdmux_cli.catalog import model as mdl
from pdmux_cli.catalog.hardware import find_gpu, load_gpus
from pdmux_cli.catalog.model import list_models, load_model
from pdmux_cli.costmodel import build_step_model, chapter, efficiency, fit, measurements
from pdmux_cli.costmodel.operators import step_shapes
from pdmux_cli.costmodel.partitions import BandwidthCurve, Interference, interpolate_clamped
from pdmux_cli.messages import render
from pdmux_cli.sglang import server_defaults as sgl
from pdmux_cli.util.errors import InputError

H100 = find_gpu("h100")
QWEN = load_model("qwen3-8b")
RL = build_step_model(H100, QWEN)
PROFILES = {p.fitted_on: p for p in efficiency.load_profiles()}


# ---- fitted curves against measured points (values as the files hold them) ----------------------------


def test_gemm_fit_against_aiconfigurator_points() -> None:
    """H100, SGLang's torch linear (aiconfigurator-core 0.12.0): the measured latencies of two GEMMs."""
    points = {(p.m, p.n, p.k): p.seconds for p in measurements.aic_gemms("h100-sxm")}
    e = PROFILES["h100-sxm"].gemm
    peak, hbm = H100.dense_flops("bf16"), H100.hbm_bytes_per_s
    # 4096 tokens through 4096x12288: 412 GFLOP in 0.520 ms, 0.80 of 989 TFLOP/s (compute-bound)
    big = points[(4096, 12288, 4096)]
    assert big == pytest.approx(0.51962e-3, rel=1e-4)
    assert fit.predict_gemm(e, fit.GemmPoint(4096, 4096, 12288, big), peak, hbm) == pytest.approx(
        big, rel=0.05)
    # one token through 16384x4096: 134 MB of weights read in 57.1 us (0.70 of 3.35 TB/s; memory-bound)
    small = points[(1, 16384, 4096)]
    assert small == pytest.approx(0.057132e-3, rel=1e-4)
    # the fit reads weights at 0.87 of datasheet bandwidth plus 3.2 us: 14% short for this shape (one of
    # the slowest GEMVs of the table; the GEMM term's median error is 6%)
    assert fit.predict_gemm(e, fit.GemmPoint(1, 4096, 16384, small), peak, hbm) == pytest.approx(
        small, rel=0.15)
    assert 0.8 < e.bandwidth_efficiency <= 0.95 and 0.7 < e.peak_efficiency < 0.85


def test_vidur_layer_against_the_model() -> None:
    """Vidur, H100, Llama-2-7B TP1 at one token: the gate+up GEMM (4096 x 22016) took 0.064 ms."""
    layer = next(x for x in measurements.vidur_layers()
                 if x.gpu == "h100-sxm" and x.model == "Llama-2-7b-hf" and x.tp == 1 and x.tokens == 1)
    assert layer.ops["mlp_up_proj"] == pytest.approx(0.064e-3)
    e = PROFILES["h100-sxm"].gemm
    k, n = layer.gemm_shapes()["mlp_up_proj"]
    assert (k, n) == (4096, 22016)
    predicted = fit.predict_gemm(e, fit.GemmPoint(1, k, n, 0.0), H100.dense_flops("bf16"),
                                 H100.hbm_bytes_per_s)
    assert predicted == pytest.approx(0.064e-3, rel=0.1)


def test_attention_fits_against_aiconfigurator_points() -> None:
    pre = {(p.heads, p.kv_heads, p.batch, p.length): p
           for p in measurements.aic_attention("h100-sxm", "prefill")}
    dec = {(p.heads, p.kv_heads, p.batch, p.length): p
           for p in measurements.aic_attention("h100-sxm", "decode")}
    peak, hbm = H100.dense_flops("bf16"), H100.hbm_bytes_per_s
    e = PROFILES["h100-sxm"]
    p = pre[(32, 8, 1, 8192)]  # fa3, 8192 tokens: 550 GFLOP in 0.950 ms, 0.59 of peak
    assert p.seconds == pytest.approx(0.95049e-3, rel=1e-4)
    assert fit.predict_prefill_attention(e.prefill_attention, p, peak, hbm) == pytest.approx(
        p.seconds, rel=0.1)
    d = dec[(32, 8, 64, 4096)]  # 64 requests x 4096 tokens of KV: 1.07 GB read at ~0.9 of 3.35 TB/s
    assert fit.attention_kv_bytes(d) == 64 * 4096 * 2 * 8 * 128 * 2
    assert fit.predict_decode_attention(e.decode_attention, d, hbm) == pytest.approx(d.seconds, rel=0.05)


def test_bandwidth_curve_against_nanoflow() -> None:
    """NanoFlow A100 (batch 128, seqlen 2048): 1.281 TB/s on 44 SMs of 108, 1.748 TB/s on all."""
    rates = {s: r for s, b, q, r in measurements.nanoflow_bandwidth() if (b, q) == (128, 2048)}
    assert rates[44] == pytest.approx(1.280897975875e12) and rates[108] == pytest.approx(1.748401760133e12)
    part, _ = efficiency.load_common()
    a100 = find_gpu("a100-sxm-80gb")
    curve, note = part.bandwidth_curve(108, a100.hbm_bytes_per_s, a100.compute_capability)
    assert curve.share(44) == pytest.approx(rates[44] / rates[108], rel=0.05) and note is None
    # S_SAT: 95% of the whole GPU only past ~77% of the SMs (83 of 108)
    assert curve.s_sat == 83


def test_interference_table_from_nanoflow() -> None:
    part, _ = efficiency.load_common()
    table = part.interference.decode_bandwidth
    factors = [f for _, f in table]
    assert factors == sorted(factors)  # non-decreasing in decode's share: more SMs never cost bandwidth
    assert 0.8 < part.interference.decode_bandwidth_factor(0.4) < 0.9  # 7-17% lost, as measured
    assert part.interference.decode_bandwidth_factor(0.9) == pytest.approx(0.967)
    assert part.interference.prefill_flops_factor(0.5) == 1.0  # not measured


# ---- operators, memory floor, chunk sizes --------------------------------------------------------------


@pytest.mark.parametrize("name", list_models())
def test_gemms_cover_the_linear_params(name: str) -> None:
    m = load_model(name)
    shapes = step_shapes(m)
    params = sum(g.count * g.k * g.n for g in shapes.token_gemms) + shapes.lm_head.k * shapes.lm_head.n
    routed = mdl.moe_layers(m) * m.experts_per_token * mdl.expert_params(m)
    assert params == pytest.approx(mdl.decode_linear_params(m) - routed, rel=1e-12)


def test_prefill_has_a_memory_floor() -> None:
    """A 16-token prefill of Qwen3-8B on an H100 reads every linear weight once (15.1 GB: all but the
    embedding, of which 16 rows are gathered): at least 15.1 GB / 3.35 TB/s = 4.5 ms."""
    read = mdl.decode_weight_bytes(QWEN, 1)
    assert read == pytest.approx(15.14e9, rel=0.01)
    assert RL.prefill_s(132, [(16, 0)]) >= read / H100.hbm_bytes_per_s
    # the chapter's model had no floor: 0.49 ms
    chap = build_step_model(H100, QWEN, cost_model="chapter")
    assert chap.prefill_s(132, [(16, 0)]) == pytest.approx(0.49e-3, rel=0.05)


def test_small_chunks_cost_what_the_gemm_curve_says() -> None:
    """8192 prompt tokens in 256-token chunks vs 2048-token chunks: the linear part differs exactly by
    the GEMM formula (weights re-read by every chunk), and the whole prefill is >= 10% slower."""
    def total(chunk: int) -> float:
        return sum(RL.prefill_s(132, [(chunk, start)]) for start in range(0, 8192, chunk))

    assert total(256) > 1.1 * total(2048)
    e = PROFILES["h100-sxm"].gemm
    peak, hbm = H100.dense_flops("bf16"), H100.hbm_bytes_per_s
    for rows in (256, 2048):
        by_hand = sum(g.count * e.time_s(g.bytes(rows), g.flops(rows), rows, hbm, peak)
                      for g in RL.shapes.token_gemms)
        el = PROFILES["h100-sxm"].elementwise
        per_token = RL.shapes.elementwise_bytes_per_token * 36 + RL.shapes.embedding_bytes_per_token
        by_hand += 36 * el.latency_s + rows * per_token / (hbm * el.bandwidth_efficiency)
        assert RL._linear_s(rows, 132, 0, "prefill") == pytest.approx(by_hand, rel=1e-12)


def test_decode_step_parts() -> None:
    """Qwen3-8B, 32 requests at 2048 tokens on a whole H100: weights (15.1 GB) at 0.87 of 3.35 TB/s,
    KV (9.7 GB) at 0.93, plus 36 layers of fixed kernel time: ~10 ms; the chapter said 8.7 ms."""
    step = RL.decode_s(132, 32, 32 * 2048)
    weights = mdl.decode_weight_bytes(QWEN,
                                      32) / (H100.hbm_bytes_per_s
                                             * PROFILES["h100-sxm"].gemm.bandwidth_efficiency)
    kv = 32 * mdl.kv_bytes(QWEN,
                           2048) / (H100.hbm_bytes_per_s
                                    * PROFILES["h100-sxm"].decode_attention.bandwidth_efficiency)
    assert weights + kv < step < weights + kv + 36 * 60e-6
    assert step > 1.1 * build_step_model(H100, QWEN, cost_model="chapter").decode_s(132, 32, 32 * 2048)


def test_moe_decode_reads_the_experts_it_touches() -> None:
    moe = load_model("qwen3-30b-a3b")
    sm = build_step_model(H100, moe)
    one, many = sm.decode_s(132, 1, 1000), sm.decode_s(132, 64, 64 * 1000)
    # one token touches 8 of 128 experts a layer; 64 tokens touch most: reads grow ~10x
    assert 4 < many / one < 20


# ---- monotonicity ------------------------------------------------------------------------------------


MODELS = [QWEN, load_model("gpt-oss-20b"), load_model("deepseek-v3"), load_model("gemma-3-27b-it")]
GPUS = [H100, find_gpu("a100"), find_gpu("b200"), find_gpu("l40s")]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3), st.integers(0, 3), st.integers(1, 512), st.integers(1, 8000), st.integers(8, 100),
       st.integers(0, 2))
def test_more_work_never_cheaper_more_sms_never_dearer(mi, gi, n, ctx, sms, extra) -> None:
    m, gpu = MODELS[mi], GPUS[gi]
    sm = build_step_model(gpu, m)
    total = gpu.sm_count
    s = min(sms, total - 1)
    window = m.sliding_window if m.num_sliding_layers else 0
    def win(c: int) -> int:
        return n * min(c, window) if window else 0
    base = sm.decode_s(s, n, n * ctx, win(ctx))
    assert sm.decode_s(s, n + 1 + extra, (n + 1 + extra) * ctx, win(ctx) * (n + 1 + extra) / n) >= base
    assert sm.decode_s(s, n, n * (ctx + 1 + extra), win(ctx + 1 + extra)) >= base
    assert sm.decode_s(s + 1, n, n * ctx, win(ctx)) <= base * (1 + 1e-12)
    pf = sm.prefill_s(s, [(ctx, 0)])
    assert sm.prefill_s(s, [(ctx + 1 + extra, 0)]) >= pf
    assert sm.prefill_s(s, [(ctx, 1 + extra)]) >= pf
    assert sm.prefill_s(s + 1, [(ctx, 0)]) <= pf * (1 + 1e-12)


def test_corun_never_faster_than_alone() -> None:
    for p, d in ((112, 20), (80, 52), (72, 60)):
        assert RL.decode_s(d, 32, 32 * 2048, corun_sms=p) >= RL.decode_s(d, 32, 32 * 2048)
        assert RL.prefill_s(p, [(8192, 0)], corun_sms=d) >= RL.prefill_s(p, [(8192, 0)])


# ---- SM partitions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("s_sat", [1, 20, 44, 66, 102, 125, 132])
def test_bandwidth_curve_reaches_95_percent_at_s_sat(s_sat: float) -> None:
    curve = BandwidthCurve(132, s_sat, 2.3)
    shares = [curve.share(s) for s in range(133)]
    assert shares[0] == 0 and shares[132] == 1.0
    assert all(b >= a for a, b in itertools.pairwise(shares))
    if s_sat < 0.95 * 132:
        assert curve.share(s_sat) == pytest.approx(0.95, abs=1e-6)
    else:  # the most a curve reaching 1.0 at 132 SMs can lose: linear
        assert curve.share(66) == pytest.approx(0.5)


def test_partition_inputs_are_checked() -> None:
    for args in ((132, 0, 2.3), (132, 200, 2.3), (0, 10, 2.3), (132, 60, 0.1)):
        with pytest.raises(InputError):
            BandwidthCurve(*args)
    with pytest.raises(InputError):
        Interference(((0.5, 0.9), (0.2, 0.8)))
    with pytest.raises(InputError):
        Interference(((0.5, 1.5),))
    assert interpolate_clamped((), 0.3) == 1.0
    assert interpolate_clamped(((0.2, 0.8), (0.4, 1.0)), 0.3) == pytest.approx(0.9)


def test_gemm_flops_on_fewer_sms_by_equivalent_tokens() -> None:
    """Large GEMMs scale ~linearly with SMs; a 64-row GEMM on a quarter of the SMs runs like 256 rows
    on the whole GPU, so it keeps more than a quarter of the FLOP/s."""
    e = PROFILES["h100-sxm"].gemm
    def share(m: int, s: int) -> float:
        return s / 132 * e.flops_efficiency(m * 132 / s) / e.flops_efficiency(m)
    assert share(8192, 33) == pytest.approx(0.25, rel=0.01)
    assert share(64, 33) >= 0.25


# ---- efficiency files ------------------------------------------------------------------------------------


def test_every_gpu_profile_gets_efficiencies() -> None:
    for gpu in load_gpus():
        profile, note = efficiency.profile_for(gpu.key, gpu.compute_capability)
        assert profile.gemm.peak_efficiency > 0
        if gpu.key in PROFILES:
            assert note is None
    assert efficiency.profile_for("h800-sxm", (9, 0))[0].fitted_on == "h100-sxm"
    assert "same-chip" in render(efficiency.profile_for("h800-sxm", (9, 0))[1])
    v100, note = efficiency.profile_for("v100-sxm2-16gb", (7, 0))
    assert v100.fitted_on == "a100-sxm-80gb" and "compute capability 7" in render(note)


def test_every_constant_names_its_measurement() -> None:
    for p in PROFILES.values():
        for section in (p.gemm, p.prefill_attention, p.decode_attention, p.elementwise):
            assert section.source and section.median_error is not None
    part, cpu = efficiency.load_common()
    assert "NanoFlow" in part.source and "tt-inference-server" in cpu.source
    assert cpu.step_cpu_s(0) == pytest.approx(0.31e-3)


def test_malformed_efficiency_file_is_one_clear_error(tmp_path, monkeypatch) -> None:
    from pdmux_cli.catalog.profile_files import efficiency_profiles_dir

    good = (efficiency_profiles_dir() / "h100-sxm.yaml").read_text()
    for broken, fragment in ((good.replace("format: pdmux-efficiency/1", "format: x"),
                              "not a pdmux-efficiency"),
                             (good.replace("bandwidth_efficiency: 0.", "bandwidth_efficiency: 7"),
                              "bandwidth_efficiency"),
                             (good.replace("applies_to:", "applies_to: 3\nx:"), "applies_to")):
        path = tmp_path / "h100-sxm.yaml"
        path.write_text(broken)
        with pytest.raises(InputError, match=fragment):
            efficiency.load_profile(path)


def test_fit_is_deterministic_and_recovers_a_known_curve() -> None:
    truth = efficiency.OperatorEfficiency(4e-6, 0.85, 0.75, 200.0, "synthetic")
    rng = random.Random(0)
    points = []
    for _ in range(300):
        m, k, n = rng.choice([1, 4, 16, 64, 256, 1024, 4096]), rng.choice([2048, 4096]), rng.choice([
            4096, 8192])
        p = fit.GemmPoint(m, k, n, 0.0)
        points.append(replace(p, seconds=fit.predict_gemm(truth, p, 989e12, 3.35e12)))
    got = fit.fit_gemm(points, 989e12, 3.35e12, "synthetic")
    assert got.latency_s == pytest.approx(4e-6, abs=1e-6) and got.bandwidth_efficiency == pytest.approx(
        0.85, abs=0.02)
    assert got.median_error < 0.02
    assert fit.fit_gemm(points, 989e12, 3.35e12, "synthetic") == got


# ---- knobs ---------------------------------------------------------------------------------------------


def test_step_overhead_and_knobs() -> None:
    assert build_step_model(H100, QWEN, step_overhead_ms=0).decode_cpu_s(100) == 0
    assert build_step_model(H100, QWEN, step_overhead_ms=2).decode_cpu_s(1) == pytest.approx(2e-3)
    for kwargs in ({"mfu": 0.6}, {"bandwidth_efficiency": 0.9}, {"step_overhead_ms": -1},
                   {"cost_model": "chapter", "step_overhead_ms": 1}, {"cost_model": "other"}):
        with pytest.raises(InputError):
            build_step_model(H100, QWEN, **kwargs)
    assert RL.s_sat == 88 and build_step_model(H100, QWEN, s_sat=44).s_sat == 44


# ---- SGLang 0.5.23's server defaults
# ------------------------------------------------------------------------


@pytest.mark.parametrize(("gpu", "off", "chunk8k", "default_chunk", "default_fraction"), [
    ("h100", 0.685, 0.83, 8192, 0.83),    # 81559 MiB
    ("a100-sxm-80gb", 0.686, 0.83, 8192, 0.83),   # 81920 MiB
    ("h200", 0.821, 0.903, 8192, 0.903),  # 143771 MiB
    ("b200", 0.857, 0.921, 16384, 0.854),  # 183359 MiB: 16384-token chunks, CUDA graphs to 512
])
def test_mem_fraction_static_as_sglang_computes_it(gpu, off, chunk8k, default_chunk,
                                                   default_fraction) -> None:
    mem = find_gpu(gpu).memory_bytes
    assert sgl.mem_fraction_static(mem, -1) == off
    assert sgl.mem_fraction_static(mem, 8192) == chunk8k
    assert sgl.default_chunked_prefill_size(mem) == default_chunk
    assert sgl.mem_fraction_static(mem, default_chunk) == default_fraction


def test_sglang_defaults() -> None:
    assert sgl.prefill_graph_buckets(-1) == 0
    assert sgl.prefill_graph_buckets(8192) == 58 and sgl.prefill_graph_buckets(16384) == 74
    assert sgl.default_cuda_graph_max_bs(find_gpu("h100").memory_bytes) == 256
    assert sgl.default_cuda_graph_max_bs(find_gpu("b200").memory_bytes) == 512
    assert sgl.max_running_requests(415_000, 131072) == 2048  # clamped up
    assert sgl.max_running_requests(907_000, 131072) == 3542
    assert sgl.max_running_requests(3_000, 4096) == 1500  # at most half the pool
    assert sgl.MIN_NEW_TOKEN_RATIO == pytest.approx(0.098)
    assert sgl.NEW_TOKEN_RATIO_DECAY == pytest.approx(0.0010033, rel=1e-4)


# ---- the chapter's model behind the step interface -------------------------------------------------------


@pytest.mark.parametrize("name",
                         ["qwen3-8b", "gpt-oss-20b", "gemma-3-27b-it", "deepseek-v3", "qwen3-30b-a3b"])
def test_chapter_model_equals_the_chapters_functions(name: str) -> None:
    m = load_model(name)
    sm = build_step_model(find_gpu("h200"), m, cost_model="chapter", s_sat=50)
    thr = sm.throughput
    rng = random.Random(1)
    window = m.sliding_window if m.num_sliding_layers else 0
    for _ in range(30):
        contexts = [rng.randint(1, 5000) for _ in range(rng.randint(1, 40))]
        kv = sum(mdl.kv_bytes(m, c) for c in contexts)
        attn = sum(mdl.decode_attention_flops(m, c) for c in contexts)
        sms, p = rng.choice([(132, 0), (52, 80), (20, 112)])
        want = chapter.decode_step_s_batch(m, thr, sms, len(contexts), kv, attn, concurrent_prefill_sms=p)
        got = sm.decode_s(sms, len(contexts), sum(contexts), sum(min(c, window) for c in contexts) if window
                          else 0, p)
        assert got == pytest.approx(want, rel=1e-9)
    assert sm.prefill_s(132, [(3000, 500)]) == pytest.approx(chapter.prefill_s(m, thr, 132, 3000, 500),
                                                             rel=1e-12)
    assert sm.mixed_s([(512, 1024)], 32, 32 * 2048, 32 * min(2048, window) if window else 0) == pytest.approx(
        chapter.chunked_step_s(m, thr, 132, 32, 2048, 512, 1024), rel=1e-12)
    assert sm.decode_cpu_s(50) == 0 and math.isfinite(sm.bandwidth_share(20))


@pytest.mark.parametrize("name", ["qwen3-8b", "gpt-oss-20b", "deepseek-v3", "gemma-3-27b-it"])
def test_prefill_attention_inlined_equals_attention_flops(name) -> None:
    """RooflineModel._prefill_attention_s computes mdl.attention_flops inline for whole-token sequences:
    the same seconds to the bit as the function itself (what other token types still call)."""
    model = build_step_model(H100, load_model(name))
    rng = random.Random(11)
    bw, flops = model._rates(132, 0, "prefill")
    for _ in range(200):
        seqs = [(rng.randint(0, 20_000), rng.choice([0, rng.randint(1, 300_000)]))
                for _ in range(rng.randint(1, 6))]
        inline = model._prefill_attention_s(seqs, 132, bw, flops)
        called = model._prefill_attention_s([(float(n), float(c)) for n, c in seqs], 132, bw, flops)
        e = model.eff.prefill_attention
        want = model.shapes.layers * e.latency_s
        for new, cached in seqs:
            if new <= 0:
                continue
            length = new + cached
            if model.window:
                kv = model.kv_full * length + model.kv_window * min(length, model.window)
            else:
                kv = (model.kv_full + model.kv_window) * length
            attn = mdl.attention_flops(model.model, new, cached) * model.shapes.attention_share
            want += max(attn / (flops * e.flops_efficiency(length)), kv / (bw * e.bandwidth_efficiency))
        assert inline == want == called


@pytest.mark.parametrize("model, tp", [("qwen3-8b", 1), ("qwen3-30b-a3b", 2), ("gpt-oss-20b", 1),
                                       ("llama-3.1-70b", 4)])
def test_whole_gpu_prefill_and_mixed_steps_are_their_terms_to_the_bit(model, tp) -> None:
    """prefill_s (on the whole GPU and on part of it, beside decode or alone) and mixed_s
    (RooflineModel._whole_gpu) look their cached terms up inline: each time equals the terms composed as
    the methods define them (GEMMs and the rest over the tokens, the lm_head over the rows, each
    sequence's attention, the prefill pass's fixed time, the decode rows' KV, at least the rows' decode
    step), to the bit, first calls and repeats, dense and MoE, a sliding window, TP > 1 (a fixed time a
    layer)."""
    rl = build_step_model(H100, load_model(model), tp=tp)
    sms = rl.total_sms
    rng = random.Random(11)
    for _ in range(300):
        seqs = [(rng.randint(1, 8192), rng.choice([0, rng.randint(1, 30000)]))
                for _ in range(rng.randint(0, 3))]
        n = rng.choice([0, rng.randint(1, 300)])
        sc = n * rng.randint(1, 20000)
        sw = min(sc, n * rl.window) if rl.window else 0.0
        bw, flops = rl._rates(sms, 0, "prefill")
        tokens = sum(new for new, _ in seqs)
        part = rng.choice([sms, 100, 32])  # a pdmux prefill on part of the GPU, beside decode or alone
        corun = rng.choice([0, sms - part]) if part < sms else 0
        if tokens:
            p_bw, p_flops = rl._rates(part, corun, "prefill")
            ref = (rl._linear_s(tokens, part, corun, "prefill")
                   + rl._lm_head_s(len(seqs), part, corun, "prefill")
                   + rl._prefill_attention_s(seqs, part, p_bw, p_flops)
                   + rl.shapes.layers * rl.prefill_layer_s)
            assert rl.prefill_s(part, seqs, corun) == ref
        if tokens + n:
            ref = (rl._linear_s(tokens + n, sms, 0, "prefill")
                   + rl._lm_head_s(len(seqs) + n, sms, 0, "prefill"))
            ref += rl._prefill_attention_s(seqs, sms, bw, flops)
            if seqs:
                ref += rl.shapes.layers * rl.prefill_layer_s
            if n:
                full, window = rl._kv_rates(sms, 0)
                ref += full * sc + window * sw
                ref = max(ref, rl.decode_s(sms, n, sc, sw))
            assert rl.mixed_s(seqs, n, sc, sw) == ref
