"""Metrics on a hand-built run: TTFT, ITL (all tokens and per request), TPOT, E2E, SLO, goodput."""

from __future__ import annotations

import math

import pytest

from pdmux_cli.simulate.engine import RunResult
from pdmux_cli.simulate.metrics import nearest_rank, summarize, weighted_nearest_rank


def hand_run() -> RunResult:
    # request 0: arrives 0, first token 0.1, decode steps 0..2 (ends 0.2, 0.3, 0.6) -> ITLs 0.1 0.1 0.3
    # request 1: arrives 0.15, first token 0.3, decode steps 2..3 (ends 0.6, 0.7)  -> ITLs 0.3 0.1
    # request 2: never fits
    return RunResult(
        policy="x", kind="chunked", arrival_s=[0.0, 0.15, 0.2], prompt_tokens=[10, 10, 10**9],
        output_tokens=[4, 3, 5], decode_steps=[3, 2, 4], first_token_s=[0.1, 0.3, math.nan],
        first_step=[0, 2, -1], rejected=[2], step_end_s=[0.2, 0.3, 0.6, 0.7], end_s=0.7, idle_s=0.07,
        num_trace_requests=3,
    )


def test_percentile_helpers() -> None:
    assert nearest_rank([1, 2, 3, 4], 50) == 2
    assert nearest_rank(list(range(1, 101)), 99) == 99
    assert nearest_rank(list(range(1, 101)), 100) == 100
    assert math.isnan(nearest_rank([], 50))
    assert weighted_nearest_rank([1, 2, 3], [1, 1, 8], 50) == 3
    assert weighted_nearest_rank([1, 2, 3], [5, 1, 4], 50) == 1


def test_hand_built_run() -> None:
    m = summarize(hand_run(), slo_ttft_ms=200, slo_itl_ms=350)
    assert m.requests == 3 and m.completed == 2 and m.rejected == 1
    pr = m.per_request
    assert pr["ttft_ms"][:2] == pytest.approx([100, 150])
    assert pr["itl_max_ms"][:2] == pytest.approx([300, 300])
    assert pr["itl_p99_ms"][:2] == pytest.approx([300, 300])
    assert pr["tpot_ms"][:2] == pytest.approx([500 / 3, 200])
    assert pr["e2e_ms"][:2] == pytest.approx([600, 550])
    assert math.isnan(pr["ttft_ms"][2]) and pr["met_slo"] == [True, True, False]
    # all-token ITLs: 0.1 0.1 0.3 | 0.3 0.1 -> sorted 100 100 100 300 300 ms
    assert m.itl_ms == pytest.approx({"p50": 100, "p90": 300, "p99": 300, "max": 300})
    assert m.ttft_ms == pytest.approx({"p50": 100, "p90": 150, "p99": 150, "max": 150})
    assert m.slo_attainment == pytest.approx(2 / 3)
    assert m.span_s == pytest.approx(0.7)
    assert m.goodput_rps == pytest.approx(2 / 0.7)
    assert m.gpu_busy_share == pytest.approx(0.9)
    xs, ys = m.itl_cdf
    assert xs[-1] == pytest.approx(300) and ys[-1] == pytest.approx(1.0)


def test_slo_uses_ttft_and_request_p99_itl() -> None:
    assert summarize(hand_run(), slo_ttft_ms=120, slo_itl_ms=350).met == 1  # request 1: TTFT 150
    assert summarize(hand_run(), slo_ttft_ms=200, slo_itl_ms=250).met == 0  # both have a 300 ms gap


def test_p99_of_long_request_ignores_one_outlier() -> None:
    steps = 200
    ends = [0.01 * (i + 1) for i in range(steps)]
    ends[100:] = [e + 0.5 for e in ends[100:]]  # one 510 ms stall among 200 gaps
    run = RunResult(policy="x", kind="chunked", arrival_s=[0.0], prompt_tokens=[1], output_tokens=[steps + 1],
                    decode_steps=[steps], first_token_s=[0.0], first_step=[0], rejected=[], step_end_s=ends,
                    end_s=ends[-1], idle_s=0.0, num_trace_requests=1)
    m = summarize(run, slo_ttft_ms=1, slo_itl_ms=20)
    assert m.per_request["itl_max_ms"][0] == pytest.approx(510)
    assert m.per_request["itl_p99_ms"][0] == pytest.approx(10)  # 2 of 200 may exceed: nearest rank 198
    assert m.met == 1
