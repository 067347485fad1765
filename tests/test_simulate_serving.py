"""What an SGLang server spends beyond the GPU kernels, against hand calculations: the request path's
delays (admission, the stream back to the client), the scheduler's CPU time per running request, the
overlap scheduler forming each batch one round ahead, and a closed-loop client (bench_serving
--max-concurrency)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from pdmux_cli.costmodel.efficiency import load_serving
from pdmux_cli.util.errors import InputError
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.metrics import summarize
from pdmux_cli.simulate.runner import simulate
from pdmux_cli.simulate.schedulers import ChunkedPolicy, PdmuxPolicy, PrefillFirstPolicy
from pdmux_cli.simulate.traces import Trace

H100 = find_gpu("h100")
QWEN = load_model("qwen3-8b")
# explicit serving terms, so that the hand calculations do not depend on serving.yaml's fitted values
PLAIN = make_setup(H100, QWEN, per_request_overhead_ms=0, admission_delay_ms=0, first_token_delay_ms=0,
                   frontend_token_ms=0,
                   eager_launch_ms=0)
DELAYED = make_setup(H100, QWEN, per_request_overhead_ms=0, admission_delay_ms=5, first_token_delay_ms=7,
                     eager_launch_ms=0, frontend_token_ms=0)


def trace(arrivals, prompt=1000, output=4) -> Trace:
    n = len(arrivals)
    return Trace(arrival_s=tuple(arrivals), prompt_tokens=(prompt,) * n, output_tokens=(output,) * n)


def test_serving_profile_ships_with_every_term_sourced() -> None:
    sched, serving, source = load_serving()
    assert set(sched) == {"step_s", "per_request_s", "per_request_step_s", "eager_launch_moe_s"} and source
    assert serving.admission_delay_s >= 0 and serving.first_token_delay_s >= 0 and serving.source


@pytest.mark.parametrize("pol", [PrefillFirstPolicy(), ChunkedPolicy(8192), PdmuxPolicy()],
                         ids=lambda p: p.label)
def test_idle_server_ttft_is_admission_delay_plus_prefill_plus_stream_back(pol) -> None:
    """An idle server sees the request 5 ms after it arrives and prefills it at once; the client gets the
    first token 7 ms after the step: TTFT = 5 + prefill + 7 ms. ITLs are the decode steps, untouched."""
    sm = DELAYED.step_model
    r = simulate(trace([0.2]), DELAYED, pol)
    prefill = sm.prefill_s(132, [(1000, 0)])
    if pol.kind == "pdmux":  # no overlap scheduler: the CPU adds
        prefill += sm.decode_cpu_s(1)
    else:
        prefill = max(prefill, sm.decode_cpu_s(1))
    assert r.first_token_s[0] == pytest.approx(0.2 + 0.005 + prefill, rel=1e-12)
    m = summarize(r, 1e9, 1e9)
    assert m.ttft_ms["p50"] == pytest.approx((0.005 + prefill + 0.007) * 1e3, rel=1e-9)
    base = summarize(simulate(trace([0.2]), PLAIN, pol), 1e9, 1e9)
    assert m.itl_ms == pytest.approx(base.itl_ms, rel=1e-9)
    assert m.e2e_ms["p50"] == pytest.approx(base.e2e_ms["p50"] + 12.0, rel=1e-9)


def _first_token_after(r) -> tuple[int, float]:
    """(decode steps that ended before the trace request's first token, the last one's end)."""
    ft = r.first_token_s[0]
    before = [e for e in r.step_end_s if e < ft]
    return len(before), before[-1]


def test_overlap_scheduler_admits_a_request_one_round_later() -> None:
    """16 requests decode; one prompt arrives in the middle of the third decode step. Without the overlap
    scheduler SGLang prefills it in the next round; with it the next round was already formed while the
    third step ran, so the prefill starts one decode step later (scheduler.py event_loop_overlap: the
    batch launched at an iteration was chosen before the previous batch's results were processed)."""
    sm = PLAIN.step_model
    decode = [(2048, 400)] * 16
    step = sm.decode_s(132, 16, 16 * 2048)
    arrival = 2.5 * step
    no_overlap = replace(PLAIN, disable_overlap=True)
    late = simulate(trace([arrival]), PLAIN, ChunkedPolicy(8192), initial_decode=decode)
    prompt_now = simulate(trace([arrival]), no_overlap, ChunkedPolicy(8192), initial_decode=decode)
    k_late, start_late = _first_token_after(late)
    k_now, start_now = _first_token_after(prompt_now)
    assert (k_now, k_late) == (3, 4)
    prefill = sm.prefill_s(132, [(1000, 0)])
    assert late.first_token_s[0] == pytest.approx(start_late + max(prefill, sm.decode_cpu_s(1)), rel=1e-12)
    assert prompt_now.first_token_s[0] == pytest.approx(start_now + prefill + sm.decode_cpu_s(1), rel=1e-12)


def test_pdmux_admits_at_the_next_round() -> None:
    """pdmux runs without the overlap scheduler (SGLang asserts it): a request arriving during round 2 is
    taken at the start of round 3, exactly as one arriving then."""
    decode = [(2048, 400)] * 16
    ends = simulate(Trace((), (), ()), PLAIN, PdmuxPolicy(), initial_decode=decode).step_end_s
    mid = simulate(trace([(ends[0] + ends[1]) / 2]), PLAIN, PdmuxPolicy(), initial_decode=decode)
    at = simulate(trace([ends[1]]), PLAIN, PdmuxPolicy(), initial_decode=decode)
    assert mid.first_token_s[0] == at.first_token_s[0]
    assert list(mid.step_end_s[:2]) == list(ends[:2])


def test_scheduler_cpu_per_request_is_hidden_up_to_the_gpu_step_and_paid_in_full_by_pdmux() -> None:
    """1 ms of scheduler CPU per running request (CpuProfile.per_request_s): 16 requests cost over 16 ms of
    CPU a step, more than the ~8 ms decode step, so the overlap scheduler's round is the CPU's; without it
    (and under pdmux) the round is GPU + CPU."""
    setup = make_setup(H100, QWEN, per_request_overhead_ms=0, admission_delay_ms=0, first_token_delay_ms=0,
                       frontend_token_ms=0)
    sm = setup.step_model
    sm.cpu = replace(sm.cpu, per_request_s=0.001)
    assert sm.decode_cpu_s(16) == pytest.approx(sm.cpu.step_s + 16 * 0.001, rel=1e-12)
    batch = [(2048, 40)] * 16
    r = simulate(Trace((), (), ()), setup, ChunkedPolicy(8192), initial_decode=batch)
    gaps = [b - a for a, b in itertools.pairwise(r.step_end_s)]
    gpu = [sm.decode_s(132, 16, 16 * (2048 + j)) for j in range(1, 4)]
    cpu = sm.decode_cpu_s(16)
    assert cpu > max(gpu)
    assert gaps[:3] == pytest.approx([cpu] * 3, rel=1e-12)
    slow = simulate(Trace((), (), ()), replace(setup, disable_overlap=True), ChunkedPolicy(8192),
                    initial_decode=batch)
    gaps = [b - a for a, b in itertools.pairwise(slow.step_end_s)]
    assert gaps[:3] == pytest.approx([g + cpu for g in gpu], rel=1e-12)
    mux = simulate(Trace((), (), ()), setup, PdmuxPolicy(), initial_decode=batch)
    gaps = [b - a for a, b in itertools.pairwise(mux.step_end_s)]
    assert gaps[:3] == pytest.approx([g + cpu for g in gpu], rel=1e-12)


@pytest.mark.parametrize("pol", [ChunkedPolicy(8192), PdmuxPolicy()], ids=lambda p: p.label)
def test_per_request_step_time_adds_to_every_step(pol) -> None:
    """--per-request-overhead-ms 0.05: every decode round of 16 requests takes 0.8 ms longer, with or without
    the overlap scheduler and under pdmux (time on the step's critical path, CpuProfile.per_request_step_s);
    the kernels' times (StepModel.decode_s, what a benchmark of the model alone measures) do not move."""
    batch = [(2048, 40)] * 16
    base = make_setup(H100, QWEN, per_request_overhead_ms=0, admission_delay_ms=0, first_token_delay_ms=0,
                      frontend_token_ms=0)
    more = make_setup(H100, QWEN, per_request_overhead_ms=0.05, admission_delay_ms=0, first_token_delay_ms=0,
                      frontend_token_ms=0)
    assert more.step_model.decode_s(132, 16, 16 * 2048) == base.step_model.decode_s(132, 16, 16 * 2048)
    assert more.step_model.request_s(16) == pytest.approx(16 * 0.05e-3, rel=1e-12)
    for overlap_off in (False, True):
        a = simulate(Trace((), (), ()), replace(base, disable_overlap=overlap_off), pol, initial_decode=batch)
        b = simulate(Trace((), (), ()), replace(more, disable_overlap=overlap_off), pol, initial_decode=batch)
        ga = [y - x for x, y in itertools.pairwise(a.step_end_s)][:5]
        gb = [y - x for x, y in itertools.pairwise(b.step_end_s)][:5]
        assert gb == pytest.approx([g + 16 * 0.05e-3 for g in ga], rel=1e-9)


def test_front_end_admits_a_burst_one_request_per_interval() -> None:
    """--admission-interval-ms 2 with 5 ms of admission delay: four requests arriving together are seen at
    5, 7, 9 and 11 ms (the tokenizer manager takes them one after another)."""
    setup = make_setup(H100, QWEN, per_request_overhead_ms=0, admission_delay_ms=5, first_token_delay_ms=0,
                       admission_interval_ms=2, frontend_token_ms=0)
    assert _seen(setup, 100) == [5.0, 7.0, 9.0, 11.0]


def _seen(setup, prompt: int) -> list[float]:
    """When the scheduler sees each of four requests that all arrive at t = 0 (ms)."""
    from pdmux_cli.simulate.engine import build_work

    work = build_work(trace([0.0] * 4, prompt=prompt, output=2), setup, 10**6)
    seen = []
    while (t := work.next_arrival_time()) != math.inf:
        work.receive(t)
        seen.append(round(t * 1e3, 9))
    assert list(work.waiting) == [0, 1, 2, 3]
    return seen


def test_front_end_tokenizes_each_prompt_one_at_a_time_up_to_0_5_21() -> None:
    """1 us a prompt token (serving.yaml's is measured: benchmarks/measure_frontend.py), 1000-token prompts:
    SGLang up to 0.5.21 tokenizes on its one event loop, so four requests arriving together are seen at
    5 + 1, then 2 ms (the interval) + 1 ms apart: 6, 9, 12, 15 ms; 0.5.22 on tokenizes in an executor: each
    request pays its own 1 ms, the interval alone keeps them apart: 6, 8, 10, 12 ms."""
    kw = dict(per_request_overhead_ms=0, admission_delay_ms=5, first_token_delay_ms=0,
              admission_interval_ms=2,
              frontend_token_ms=0.001)
    assert _seen(make_setup(H100, QWEN, serial_frontend=True, **kw), 1000) == [6.0, 9.0, 12.0, 15.0]
    assert _seen(make_setup(H100, QWEN, **kw), 1000) == [6.0, 8.0, 10.0, 12.0]
    # no interval: the serial front end alone spaces them by their tokenization
    kw["admission_interval_ms"] = 0
    assert _seen(make_setup(H100, QWEN, serial_frontend=True, **kw), 1000) == [6.0, 7.0, 8.0, 9.0]
    assert _seen(make_setup(H100, QWEN, **kw), 1000) == [6.0]  # all four at 6 ms, in one receive


def test_shipped_frontend_term_is_the_measured_one() -> None:
    from pdmux_cli.costmodel.efficiency import load_serving

    serving = load_serving()[1]
    assert serving.frontend_token_s == 1.6e-6
    assert "measure_frontend.py" in str(serving.source)


def test_closed_loop_client_sends_the_next_request_when_one_comes_back() -> None:
    """bench_serving --max-concurrency 1, three requests at t = 0: each is sent when the client has the
    previous one's last token (7 ms after the server's step), seen by the scheduler 5 ms later."""
    r = simulate(trace([0.0, 0.0, 0.0], prompt=500, output=3), DELAYED, ChunkedPolicy(8192),
                 max_concurrency=1)
    for rid in (1, 2):
        assert r.arrival_s[rid] == pytest.approx(r.finish_s(rid - 1) + 0.007, rel=1e-12)
        assert r.first_token_s[rid] > r.arrival_s[rid] + 0.005
    m = summarize(r, 1e9, 1e9)
    ttft = m.per_request["ttft_ms"]
    assert ttft[1] == pytest.approx((r.first_token_s[1] + 0.007 - r.arrival_s[1]) * 1e3, rel=1e-9)
    # two at a time: the third waits for the first to finish
    two = simulate(trace([0.0, 0.0, 0.0], prompt=500, output=3), DELAYED, ChunkedPolicy(8192),
                   max_concurrency=2)
    assert two.arrival_s[:2] == [0.0, 0.0]
    assert two.arrival_s[2] == pytest.approx(min(two.finish_s(0), two.finish_s(1)) + 0.007, rel=1e-12)


def test_a_request_is_received_at_the_time_it_is_said_to_be_seen() -> None:
    """Arrival 0.7 s plus 0.1 s of admission delay is 0.7999999999999999 s in floating point, and
    0.7999999999999999 - 0.1 < 0.7: receiving at the time next_arrival_time gives must still take it (a
    scheduler idling until then would otherwise wait forever)."""
    from pdmux_cli.simulate.engine import build_work

    setup = make_setup(H100, QWEN, per_request_overhead_ms=0, admission_delay_ms=100, first_token_delay_ms=0)
    work = build_work(trace([0.7], prompt=100, output=2), setup, 10**6)
    work.receive(work.next_arrival_time())
    assert list(work.waiting) == [0]


def test_closed_loop_keeps_scheduled_arrivals_that_come_later() -> None:
    """A slot frees at ~0.03 s, but the next request is only scheduled at 5 s: it is sent at 5 s."""
    r = simulate(trace([0.0, 5.0], prompt=500, output=3), DELAYED, ChunkedPolicy(8192), max_concurrency=1)
    assert r.arrival_s[1] == 5.0


@pytest.mark.parametrize("kwargs, message", [
    ({"max_concurrency": -1}, "max concurrency"),
    ({"max_concurrency": 2, "dp": 2}, "one server only"),
])
def test_closed_loop_refusals(kwargs, message) -> None:
    with pytest.raises(InputError, match=message):
        simulate(trace([0.0, 0.0]), PLAIN, ChunkedPolicy(8192), **kwargs)


@pytest.mark.parametrize("flag", ["per_request_overhead_ms", "admission_delay_ms", "first_token_delay_ms",
                                  "admission_interval_ms"])
def test_serving_terms_refused_out_of_range_and_on_the_chapter_model(flag) -> None:
    with pytest.raises(InputError, match="--" + flag.replace("_", "-")):
        make_setup(H100, QWEN, **{flag: -1.0})
    with pytest.raises(InputError, match="chapter"):
        make_setup(H100, QWEN, cost_model="chapter", **{flag: 1.0})
    assert math.isfinite(make_setup(H100, QWEN, **{flag: 0.0}).total_sms)
