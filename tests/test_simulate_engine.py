"""The schedulers against the cost model and the chapter: one request alone, the chapter's scenario,
conservation (every request finishes once with its output), FIFO order, load monotonicity, KV limits."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from pdmux_cli import cost, policy
from pdmux_cli import model as mdl
from pdmux_cli.errors import InputError
from pdmux_cli.estimate import Scenario, estimate
from pdmux_cli.hardware import find_gpu
from pdmux_cli.model import load_model
from pdmux_cli.pdmux_config import PdmuxConfig
from pdmux_cli.simulate import engine
from pdmux_cli.simulate.engine import DecodeBatch, StepCost, make_setup
from pdmux_cli.simulate.metrics import summarize
from pdmux_cli.simulate.runner import run_scenario, simulate
from pdmux_cli.simulate.schedulers import ChunkedPolicy, PdmuxPolicy, PrefillFirstPolicy
from pdmux_cli.simulate.traces import Trace, load_trace, reshape, synthetic_trace

FIX = Path(__file__).parent / "fixtures"
H100 = find_gpu("h100")
QWEN = load_model("qwen3-8b")
SETUP = make_setup(H100, QWEN, s_sat=66)
THR = SETUP.throughput
POLICIES = [PdmuxPolicy(), ChunkedPolicy(512), ChunkedPolicy(2048), PrefillFirstPolicy()]


def one(prompt: int, output: int, at: float = 0.0) -> Trace:
    return Trace(arrival_s=(at,), prompt_tokens=(prompt,), output_tokens=(output,))


# ---- one request alone ------------------------------------------------------------------------------


@pytest.mark.parametrize("pol", [PdmuxPolicy(), PrefillFirstPolicy(), ChunkedPolicy(65536)], ids=str)
def test_single_request_ttft_is_whole_gpu_prefill_and_itl_is_decode_step(pol) -> None:
    prompt, output = 3000, 6
    r = simulate(one(prompt, output), SETUP, pol)
    assert r.first_token_s[0] == pytest.approx(cost.prefill_s(QWEN, THR, 132, prompt), rel=1e-12)
    m = summarize(r, 1e9, 1e9)
    expected = [cost.decode_step_s(QWEN, THR, 132, 1, prompt + j) for j in range(output - 1)]
    gaps = [b - a for a, b in zip([r.first_token_s[0], *r.step_end_s], r.step_end_s)]
    assert gaps == pytest.approx(expected, rel=1e-12)
    assert m.itl_ms["max"] == pytest.approx(max(expected) * 1e3, rel=1e-9)
    assert m.ttft_ms["p50"] == pytest.approx(r.first_token_s[0] * 1e3)
    assert r.counters.get("rounds", len(r.step_end_s)) == output - 1


def test_single_request_chunked_ttft_is_sum_of_chunk_steps() -> None:
    r = simulate(one(1200, 2), SETUP, ChunkedPolicy(512))
    flops = [cost.prefill_flops(QWEN, n, start) for n, start in ((512, 0), (512, 512), (176, 1024))]
    assert r.first_token_s[0] == pytest.approx(sum(flops) / THR.flops_per_s(132), rel=1e-12)


def test_pdmux_prompt_next_to_decode_uses_the_chosen_split() -> None:
    # a long request decodes (decode batch 1 -> group 1, 112/20 on H100) when a prompt arrives
    trace = Trace(arrival_s=(0.0, 1.0), prompt_tokens=(100, 8192), output_tokens=(2000, 2))
    r = simulate(trace, SETUP, PdmuxPolicy())
    groups = policy.stream_groups(132, 9)
    p, d = groups[policy.choose_group(len(groups), 1, True)]
    assert (p, d) == (112, 20)
    ttft = r.first_token_s[1] - 1.0
    pf = cost.prefill_s(QWEN, THR, p, 8192, concurrent_decode_sms=d)
    step = cost.decode_step_s(QWEN, THR, d, 1, 100 + 2000)  # a round, upper bound
    assert pf <= ttft <= pf + 2 * step
    # decode steps during the prefill ran on 20 SMs: slower than on the whole GPU
    m = summarize(r, 1e9, 1e9)
    assert m.itl_ms["max"] > cost.decode_step_s(QWEN, THR, 132, 1, 2100) * 1e3 * 2


# ---- the chapter's scenario ---------------------------------------------------------------------------


def test_chapter_scenario_matches_the_estimate() -> None:
    est = {row.label: row for row in estimate(H100, QWEN, Scenario(s_sat_values=(44, 66, 88))).rows}
    chunk512 = run_scenario(SETUP, ChunkedPolicy(512))
    chunk2048 = run_scenario(SETUP, ChunkedPolicy(2048))
    first = run_scenario(SETUP, PrefillFirstPolicy())
    mux = run_scenario(SETUP, PdmuxPolicy())
    # chapter: 19 ms x 16 steps, 74 ms x 4 steps, one 299 ms step, 11 ms at 80/52 with S_SAT 66
    assert chunk512.steps == 16 and chunk512.itl_ms == pytest.approx(19.15, abs=0.1)
    assert chunk2048.steps == 4 and chunk2048.itl_ms == pytest.approx(73.7, abs=0.2)
    assert first.steps == 1 and first.itl_ms == pytest.approx(299.5, rel=0.005)
    assert mux.itl_ms == pytest.approx(11.05, rel=0.02)
    pd_row = next(r for label, r in est.items() if r.policy == "pdmux" and r.s_sat == 66)
    assert (pd_row.prefill_sms, pd_row.decode_sms) == (80, 52)
    assert mux.itl_ms == pytest.approx(pd_row.itl_ms, rel=0.02)
    assert pd_row.prefill_ms <= mux.ttft_ms <= pd_row.prefill_ms + 2 * mux.itl_ms
    assert abs(mux.steps - pd_row.tokens_during_prefill) <= 2
    assert chunk512.itl_ms == pytest.approx(next(r for r in est.values() if r.chunk_tokens == 512).itl_ms, rel=1e-3)
    # the trade-off: pdmux keeps ITL low and pays with TTFT
    assert mux.itl_ms < chunk512.itl_ms < chunk2048.itl_ms < first.itl_ms
    assert mux.ttft_ms > chunk512.ttft_ms > first.ttft_ms


@pytest.mark.parametrize("s_sat, itl", [(44, 8.71), (88, 14.74)])
def test_chapter_scenario_other_s_sat(s_sat: float, itl: float) -> None:
    out = run_scenario(make_setup(H100, QWEN, s_sat=s_sat), PdmuxPolicy())
    assert out.itl_ms == pytest.approx(itl, rel=0.02)


# ---- conservation, order, load ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def azure50() -> Trace:
    return load_trace(FIX / "azure_conv_50.csv")


@pytest.mark.parametrize("pol", POLICIES, ids=lambda p: p.label)
def test_every_request_finishes_once_with_its_output(pol, azure50, monkeypatch) -> None:
    trace = reshape(azure50, rate_scale=20)  # overlapping requests
    released: list[tuple[int, int]] = []
    firsts: list[int] = []
    orig_release, orig_first = engine.Work.release, engine.Work.first_tokens

    def release(self, rids):
        released.extend((rid, len(self.ends) - 1 - self.first_step[rid] + 1) for rid in rids)
        orig_release(self, rids)

    def first_tokens(self, rids, t):
        firsts.extend(rids)
        orig_first(self, rids, t)

    monkeypatch.setattr(engine.Work, "release", release)
    monkeypatch.setattr(engine.Work, "first_tokens", first_tokens)
    r = simulate(trace, SETUP, pol)
    assert sorted(firsts) == list(range(len(trace)))
    done = {rid: steps for rid, steps in released}
    assert len(done) == len(released)  # each released once
    for rid in range(len(trace)):
        out = trace.output_tokens[rid]
        if out > 1:
            assert done[rid] == out - 1  # decode steps taken = output tokens after the first
        else:
            assert rid not in done
        assert r.finish_s(rid) >= r.first_token_s[rid] >= trace.arrival_s[rid]
    # tokens made by decode steps = sum of (output - 1)
    m = summarize(r, 1e9, 1e9)
    assert m.completed == len(trace) and m.rejected == 0


@pytest.mark.parametrize("pol", POLICIES, ids=lambda p: p.label)
def test_fifo_first_tokens_follow_arrival_order(pol, azure50) -> None:
    trace = reshape(azure50, rate_scale=30)
    r = simulate(trace, SETUP, pol)
    firsts = r.first_token_s[: len(trace)]
    assert all(f >= a for f, a in zip(firsts, trace.arrival_s))
    assert all(b >= a for a, b in itertools.pairwise(firsts))


@pytest.fixture(scope="module")
def poisson400() -> Trace:
    return synthetic_trace(1.0, "lognormal:1000:1.0", "exp:150", num_requests=400, seed=11)


@pytest.mark.parametrize("pol", POLICIES, ids=lambda p: p.label)
def test_more_load_never_lowers_p99_ttft(pol, azure50, poisson400) -> None:
    """Rate-scale property: the same trace, arrivals compressed, never a lower p99 TTFT.

    On the 50-request Azure excerpt the property is checked from 4x the recorded rate on: below it
    the requests barely overlap, p99 is the largest isolated prefill, and which decode batch a long
    prompt happens to meet (a pdmux split, a chunked step's decode share) moves it by a few percent
    either way: a real effect of the policies, not queueing.
    """
    for trace, scales in ((poisson400, (1, 2, 4, 8, 16, 32)), (azure50, (4, 8, 16, 32, 64))):
        p99 = []
        for scale in scales:
            r = simulate(reshape(trace, rate_scale=scale), SETUP, pol)
            p99.append(summarize(r, 1e9, 1e9).ttft_ms["p99"])
        assert all(b >= a - 1e-9 for a, b in itertools.pairwise(p99)), (trace.source, p99)
    assert p99[-1] > 2 * p99[0]


def test_deterministic() -> None:
    trace = synthetic_trace(20, "uniform:100:4000", "exp:100", num_requests=300, seed=7)
    a = simulate(trace, SETUP, PdmuxPolicy())
    b = simulate(trace, SETUP, PdmuxPolicy())
    assert a.first_token_s == b.first_token_s and a.step_end_s == b.step_end_s


# ---- KV memory ----------------------------------------------------------------------------------------


def test_request_that_never_fits_is_reported_not_a_hang() -> None:
    cap = SETUP.kv_capacity_tokens()
    trace = Trace(arrival_s=(0.0, 0.1, 0.2), prompt_tokens=(100, cap, 100), output_tokens=(5, 5, 5))
    for pol in POLICIES:
        r = simulate(trace, SETUP, pol)
        assert r.rejected == [1] and math.isnan(r.first_token_s[1])
        m = summarize(r, 1e9, 1e9)
        assert m.completed == 2 and m.rejected == 1 and m.slo_attainment == pytest.approx(2 / 3)
        assert "never fit" in r.notes[0]


def test_kv_full_makes_requests_wait() -> None:
    small = replace(SETUP, memory_reserve=1 - (SETUP.weight_bytes + 30_000 * SETUP.kv_bytes_per_token) / SETUP.memory_bytes)
    cap = small.kv_capacity_tokens()
    assert 29_000 < cap <= 30_000
    trace = Trace(arrival_s=(0.0, 0.0), prompt_tokens=(10_000, 10_000), output_tokens=(cap - 10_000 - 100, 3))
    for pol in POLICIES:
        r = simulate(trace, small, pol)
        assert r.first_token_s[1] >= r.finish_s(0)  # waited for the first to free its KV


def test_weights_that_do_not_fit_raise() -> None:
    with pytest.raises(InputError, match="does not fit"):
        make_setup(find_gpu("l4"), load_model("llama-3.1-70b")).kv_capacity_tokens()


# ---- pdmux specifics ----------------------------------------------------------------------------------


def test_manual_thresholds_flag_older_sglang_crash() -> None:
    cfg = PdmuxConfig(sm_group_num=3, manual_divisions=((80, 52, 5),))
    trace = Trace(arrival_s=(0.0, 0.5), prompt_tokens=(100, 4000), output_tokens=(500, 2))
    r = simulate(trace, SETUP, PdmuxPolicy(cfg))
    assert r.counters["older_sglang_crash_rounds"] == 1
    assert any("UnboundLocalError" in n for n in r.notes)
    # newer SGLang's group 1 was used: prefill on 80 SMs
    ttft = r.first_token_s[1] - 0.5
    assert ttft >= cost.prefill_s(QWEN, THR, 80, 4000)


def test_decode_emptying_mid_prefill_moves_to_group_0() -> None:
    # the decoding request ends soon after a long prompt starts: the rest runs on the whole GPU
    trace = Trace(arrival_s=(0.0, 0.02), prompt_tokens=(50, 30000), output_tokens=(12, 2))
    r = simulate(trace, SETUP, PdmuxPolicy())
    assert r.counters["decode_emptied_during_prefill"] == 1
    ttft = r.first_token_s[1] - 0.02
    assert cost.prefill_s(QWEN, THR, 132, 30000) < ttft < cost.prefill_s(QWEN, THR, 112, 30000)


def test_small_token_budget_starves_the_prefill_stream() -> None:
    trace = Trace(arrival_s=(0.0, 0.01), prompt_tokens=(50, 8192), output_tokens=(3000, 2))
    fast = simulate(trace, SETUP, PdmuxPolicy(PdmuxConfig(split_forward_token_budget=65536)))
    slow = simulate(trace, SETUP, PdmuxPolicy(PdmuxConfig(split_forward_token_budget=1)))
    assert slow.first_token_s[1] > fast.first_token_s[1] * 1.5  # 36 rounds of 1 layer, waits for rounds


@dataclass(frozen=True)
class HalfSpeedCorun(cost.AnalyticThroughput):
    @property
    def source(self) -> str:
        return "test"

    def corun_bandwidth_factor(self, prefill_sms: int, decode_sms: int) -> float:
        return 0.5

    def corun_flops_factor(self, prefill_sms: int, decode_sms: int) -> float:
        return 0.8


def test_corun_interference_is_applied() -> None:
    thr = HalfSpeedCorun(132, H100.hbm_bytes_per_s, H100.bf16_dense_flops, 0.85, 0.5, 66)
    setup = replace(SETUP, throughput=thr)
    out = run_scenario(setup, PdmuxPolicy())
    plain = run_scenario(SETUP, PdmuxPolicy())
    assert out.itl_ms == pytest.approx(plain.itl_ms * 2, rel=0.02)
    assert out.ttft_ms == pytest.approx(plain.ttft_ms / 0.8, rel=0.05)


# ---- step costs and decode batch totals ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["qwen3-8b", "gpt-oss-20b", "gemma-3-27b-it", "deepseek-v3", "qwen3-30b-a3b"])
def test_step_cost_equals_cost_model(name: str) -> None:
    m = load_model(name)
    setup = make_setup(find_gpu("h200"), m, s_sat=50)
    sc = StepCost(setup)
    rng = random.Random(1)
    for _ in range(30):
        contexts = [rng.randint(1, 5000) for _ in range(rng.randint(1, 40))]
        w = sc.window
        kv = sum(mdl.kv_bytes(m, c) for c in contexts)
        attn = sum(mdl.decode_attention_flops(m, c) for c in contexts)
        sms, p = rng.choice([(132, 0), (52, 80), (20, 112)])
        want = cost.decode_step_s_batch(m, setup.throughput, sms, len(contexts), kv, attn, concurrent_prefill_sms=p)
        got = sc.decode_s(sms, len(contexts), sum(contexts), sum(min(c, w) for c in contexts) if w else 0, p)
        assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("window", [0, 128])
def test_decode_batch_totals_match_brute_force(window: int) -> None:
    rng = random.Random(window)
    batch = DecodeBatch(window)
    live: dict[int, list[int]] = {}  # rid -> [context, steps left]
    rid = 0
    for step in range(400):
        for _ in range(rng.randint(0, 2)):
            ctx, steps = rng.randint(1, 300), rng.randint(1, 200)
            batch.join(rid, ctx, steps, step)
            live[rid] = [ctx, steps]
            rid += 1
        assert batch.n == len(live)
        assert batch.sum_context == sum(c for c, _ in live.values())
        if window:
            assert batch.sum_window == sum(min(c, window) for c, _ in live.values())
        done = batch.complete(step)
        for r in live.values():
            r[0] += 1
            r[1] -= 1
        assert sorted(done) == sorted(k for k, v in live.items() if v[1] == 0)
        for k in done:
            del live[k]


@pytest.mark.parametrize("pol", POLICIES, ids=lambda p: p.label)
def test_kv_pool_is_whole_again_at_the_end(pol, monkeypatch) -> None:
    captured = {}
    orig = engine.build_work

    def build(*args, **kwargs):
        captured["work"] = work = orig(*args, **kwargs)
        return work

    monkeypatch.setattr("pdmux_cli.simulate.runner.build_work", build)
    trace = synthetic_trace(30, "uniform:10:3000", "uniform:1:300", num_requests=200, seed=5)
    simulate(trace, SETUP, pol, initial_decode=[(2048, 40)] * 8)
    work = captured["work"]
    assert work.free == work.capacity and work.batch.n == 0 and not work.waiting


# ---- bounds on the setup's numbers ------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value", "fragment"), [
    ("kv_bytes_per_element", 5e-324, "KV bytes"),
    ("kv_bytes_per_element", 1e308, "KV bytes"),
    ("kv_bytes_per_element", math.nan, "KV bytes"),
    ("weight_bytes_per_param", 1e308, "weight bytes"),
    ("weight_bytes_per_param", 0.01, "weight bytes"),
    ("memory_reserve", 0.99999, "memory reserve"),
    ("memory_reserve", -0.01, "memory reserve"),
    ("memory_reserve", math.inf, "memory reserve"),
])
def test_setup_refuses_numbers_out_of_range(field: str, value: float, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        replace(SETUP, **{field: value})


def test_make_setup_refuses_tiny_efficiencies() -> None:
    for kwargs, fragment in (({"mfu": 5e-324}, "MFU"), ({"bandwidth_efficiency": 5e-324}, "bandwidth"),
                             ({"mfu": 1.01}, "MFU")):
        with pytest.raises(InputError, match=fragment):
            make_setup(H100, QWEN, **kwargs)


def test_setup_range_ends_give_finite_capacity() -> None:
    lo, hi = engine.BYTES_PER_ELEMENT_RANGE
    small_kv = replace(SETUP, kv_bytes_per_element=lo)
    # Qwen3-8B: 36 layers x 2 x 8 KV heads x 128 x 1/16 byte = 4608 B/token; weights in bf16
    assert small_kv.kv_bytes_per_token == 4608.0
    expected = int((H100.memory_bytes * 0.9 - SETUP.weight_bytes) // 4608.0)
    assert small_kv.kv_capacity_tokens() == expected
    assert SETUP.kv_capacity_tokens() == int((H100.memory_bytes * 0.9 - SETUP.weight_bytes) // 147456.0)
    h200, tiny = find_gpu("h200"), load_model("qwen3-0.6b")
    big = make_setup(h200, tiny, kv_bytes_per_element=hi, weight_bytes_per_param=hi, memory_reserve=0.9, mfu=0.001)
    assert big.weight_bytes == 8 * mdl.weight_bytes_total(tiny)  # 16 bytes a weight, bf16 is 2
    per_token = 16 / 2 * mdl.kv_bytes_per_token(tiny)
    assert big.kv_capacity_tokens() == int((h200.memory_bytes * 0.1 - big.weight_bytes) // per_token) > 0
    assert big.throughput.flops_per_s(h200.sm_count) == pytest.approx(0.001 * big.throughput.dense_flops)


@pytest.mark.parametrize("pol", POLICIES, ids=str)
def test_decode_steps_are_bounded(pol, monkeypatch) -> None:
    """Memory grows with decode steps: past MAX_DECODE_STEPS a run stops with one clear line."""
    monkeypatch.setattr(engine, "MAX_DECODE_STEPS", 50)
    with pytest.raises(InputError, match="passed 50 decode steps"):
        simulate(one(100, 80), SETUP, pol)
    monkeypatch.setattr(engine, "MAX_DECODE_STEPS", 80)
    assert len(simulate(one(100, 80), SETUP, pol).step_end_s) == 79  # the first token comes from prefill
