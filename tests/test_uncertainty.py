"""Intervals and verdicts from the simulator's measured error (issue 29): split-conformal bounds by hand, the
regime cells, the same-server pairs, and the intervals on simulate, capacity and estimate."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from pdmux_cli.cli import app
from pdmux_cli.costmodel import uncertainty as unc
from pdmux_cli.costmodel.uncertainty import Regime, Residual, ResidualSet


def _set(values: dict[str, list[float]], splits: dict | None = None, regimes: list[Regime] | None = None,
         servers: list[str] | None = None, min_cell: int = 12) -> ResidualSet:
    out = []
    for figure, vals in values.items():
        for k, v in enumerate(vals):
            regime = regimes[k] if regimes else Regime("open", 10.0, "hopper")
            out.append(Residual(f"run{k}", figure, v, v / 2, servers[k] if servers else f"s{k}", regime))
    return ResidualSet(tuple(out), splits or {}, (4.0, 32.0), min_cell, "test")


def test_conformal_bounds_by_hand() -> None:
    """n = 9 at 80%: a = 0.1, the floor(10 x 0.1) = 1st and ceil(10 x 0.9) = 9th of the sorted values;
    n = 19: the 2nd and 18th; fewer than 9 values: no interval."""
    nine = [0.3, -0.1, 0.0, 0.2, -0.4, 0.1, 0.5, -0.2, 0.05]
    assert unc.conformal_bounds(nine) == (-0.4, 0.5)
    nineteen = [x / 10 for x in range(-9, 10)]  # -0.9 .. 0.9
    assert unc.conformal_bounds(nineteen) == pytest.approx((-0.8, 0.8))
    assert unc.conformal_bounds(nine[:8]) is None
    assert unc.conformal_bounds([]) is None
    # 50% coverage of 19 values: a = 0.25, the 5th and 15th
    assert unc.conformal_bounds(nineteen, 0.5) == pytest.approx((-0.5, 0.5))


def test_interval_scales_the_prediction_by_the_bounds() -> None:
    """lo = p e^q_lo, hi = p e^q_hi with r = ln(measured / predicted)."""
    rs = _set({"itl_ms_p50": [0.3, -0.1, 0.0, 0.2, -0.4, 0.1, 0.5, -0.2, 0.05]})
    bounds, cell, method = unc.figure_interval("itl_ms_p50", 10.0, residuals=rs)
    assert bounds == pytest.approx((10 * math.exp(-0.4), 10 * math.exp(0.5)))
    assert cell == {"runs": 9} and method == unc.METHOD_OUT_OF_SAMPLE
    assert unc.figure_interval("itl_ms_p50", math.nan, residuals=rs)[0] is None
    assert unc.figure_interval("itl_ms_p50", 0.0, residuals=rs)[0] is None


def test_cells_follow_the_split_and_fall_back_to_the_whole_sample() -> None:
    """ttft split by loop: an open-loop figure takes the open runs' residuals when there are min_cell of them,
    else every run's."""
    regimes = [Regime("open", 2.0, "hopper")] * 12 + [Regime("burst", 500.0, "hopper")] * 12
    values = [0.01 * k for k in range(12)] + [1.0 + 0.01 * k for k in range(12)]
    rs = _set({"ttft_ms_p50": values}, {"ttft_ms_p50": ("loop",)}, regimes)
    sample, cell = rs.cell("ttft_ms_p50", Regime("open", 3.0, "ampere"))
    assert cell == {"loop": "open"} and max(sample) == pytest.approx(0.11)
    sample, cell = rs.cell("ttft_ms_p50", Regime("closed", 3.0, "ampere"))  # no closed runs: all of them
    assert cell == {} and len(sample) == 24
    sample, cell = rs.cell("ttft_ms_p50", None)
    assert cell == {} and len(sample) == 24
    small = _set({"ttft_ms_p50": values}, {"ttft_ms_p50": ("loop",)}, regimes, min_cell=13)
    assert small.cell("ttft_ms_p50", Regime("open", 3.0, "ampere"))[1] == {}


def test_e2e_borrows_tpot_when_it_has_too_few_runs() -> None:
    rs = _set({"e2e_ms_p50": [0.1, 0.2], "tpot_ms_p50": [0.3, -0.1, 0.0, 0.2, -0.4, 0.1, 0.5, -0.2, 0.05]})
    bounds, cell, _ = unc.figure_interval("e2e_ms_p50", 100.0, residuals=rs)
    assert cell["borrowed_from"] == "tpot_ms_p50" and bounds == pytest.approx((100 * math.exp(-0.4),
                                                                               100 * math.exp(0.5)))


def test_calibration_residuals_narrow_and_fall_back_to_in_sample() -> None:
    """A calibrated server's interval: its own fit's residuals where there are 9 or more, else the public
    runs' in-sample ones (here half the out-of-sample ones)."""
    public = _set({"ttft_ms_p50": [0.3, -0.1, 0.0, 0.2, -0.4, 0.1, 0.5, -0.2, 0.05]})
    own = {"ttft_ms_p50": [0.01 * k for k in range(-4, 5)]}
    bounds, cell, method = unc.figure_interval("ttft_ms_p50", 100.0, residuals=public, calibration=own)
    assert method == unc.METHOD_CALIBRATION and cell["calibration_runs"] == 9
    assert bounds == pytest.approx((100 * math.exp(-0.04), 100 * math.exp(0.04)))
    bounds, _, method = unc.figure_interval("ttft_ms_p50", 100.0, residuals=public, calibration={})
    assert method == unc.METHOD_IN_SAMPLE
    assert bounds == pytest.approx((100 * math.exp(-0.2), 100 * math.exp(0.25)))


def test_compare_uses_same_server_pairs() -> None:
    """Two servers with 3 runs each: 12 ordered pairs; differences within a server only."""
    values = [0.0, 0.1, 0.2, 1.0, 1.1, 1.2]
    rs = _set({"itl_ms_p50": values}, servers=["a", "a", "a", "b", "b", "b"])
    diffs = sorted(rs.pair_differences(["itl_ms_p50"]))
    assert len(diffs) == 12 and max(diffs) == pytest.approx(0.2) and min(diffs) == pytest.approx(-0.2)
    # ratio 1.5 (ln 0.405) against |d| <= 0.2: always ahead, but 12 pairs give an interval (n >= 9)
    c = unc.compare(1.5, 1.0, ["itl_ms_p50"], residuals=rs)
    assert c.confidence == 1.0 and not c.too_close and c.pairs == 12
    assert c.bounds == pytest.approx((1.5 * math.exp(-0.2), 1.5 * math.exp(0.2)))
    # ln 1.15 = 0.14 < 0.2: too close
    c = unc.compare(1.15, 1.0, ["itl_ms_p50"], residuals=rs)
    # a server's 6 differences: +-0.1 twice each, +-0.2 once each; 0.14 + d > 0 but for d = -0.2: 5 of 6
    assert c.too_close and c.confidence == pytest.approx(5 / 6)
    assert unc.compare(1.0, 1.0, ["itl_ms_p50"], residuals=rs).confidence == 0.5
    with pytest.raises(ValueError):
        unc.compare(0.0, 1.0, ["itl_ms_p50"], residuals=rs)


def test_regime_features() -> None:
    assert unc.client_loop(math.inf, None) == "burst" and unc.client_loop(5.0, 64) == "closed"
    assert unc.client_loop(5.0, None) == "open" and unc.client_loop(math.inf, 16) == "closed"
    assert [unc.gpu_family(cc) for cc in ((8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0), (7, 5))] == [
        "ampere", "ampere", "ada", "hopper", "blackwell", "blackwell", "older"]
    assert [unc.load_bin(x, (4, 32)) for x in (1, 4, 31.9, 32, 500)] == ["<4", "4-32", "4-32", ">=32", ">=32"]
    assert Regime("open", math.nan, "").features((4, 32)) == {"loop": "open", "load": None, "family": None}


def test_shipped_residuals_load_and_cover_every_figure() -> None:
    rs = unc.load_residuals()
    figures = {r.figure for r in rs.residuals}
    assert {"ttft_ms_p50", "itl_ms_p50", "tpot_ms_p50", "output_tok_s"} <= figures
    assert len(rs.residuals) >= 150
    for figure in unc.FIGURES:
        assert unc.figure_interval(figure, 100.0)[0] is not None, figure


def test_simulate_json_has_an_uncertainty_object_per_policy() -> None:
    out = CliRunner().invoke(app, ["simulate", "--trace", "tests/fixtures/azure_conv_50.csv", "--json"])
    assert out.exit_code == 0, out.output
    for policy in json.loads(out.stdout)["policies"]:
        u = policy["uncertainty"]
        assert u["coverage"] == 0.8 and u["method"] == unc.METHOD_OUT_OF_SAMPLE
        for key, value in (("ttft_ms_p50", policy["ttft_ms"]["p50"]), ("itl_ms_p50", policy["itl_ms"]["p50"]),
                           ("tpot_ms_p50", policy["tpot_ms"]["p50"]), ("e2e_ms_p50", policy["e2e_ms"]["p50"]),
                           ("output_tok_s", policy["output_tok_s"])):
            lo, hi = u[key]
            assert lo < value < hi, key
    # the chapter's model has no measured error: no interval
    out = CliRunner().invoke(app, ["simulate", "--trace", "tests/fixtures/azure_conv_50.csv", "--json",
                                   "--cost-model", "chapter", "--policies", "chunked"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["policies"][0]["uncertainty"] is None


def test_output_tok_s_is_the_completed_outputs_over_the_span() -> None:
    from pdmux_cli.workflows.simulate import SimulateRequest, simulate

    result = simulate(SimulateRequest(trace="tests/fixtures/azure_conv_50.csv", policies="chunked"))
    m = result.metrics[0]
    assert m.completed == 50
    assert m.output_tok_s == pytest.approx(sum(result.workload.output_tokens) / m.span_s)


def test_estimate_gives_the_whole_server_ttft_with_its_interval() -> None:
    out = CliRunner().invoke(app, ["estimate", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    for row in data["rows"]:
        if row["prefill_ms"] is None:
            continue
        assert row["ttft_ms"] == pytest.approx(row["prefill_ms"] + data["request_delay_ms"])
        lo, hi = row["ttft_interval_ms"]
        assert lo < row["ttft_ms"] < hi
    # how sure, as simulate's "uncertainty" says it; none under the chapter's model (no measured error)
    assert data["ttft_uncertainty"] == {"coverage": 0.8,
                                        "method": "conformal, leave-one-source-out residuals of public runs"}
    chapter = json.loads(CliRunner().invoke(app, ["estimate", "--cost-model", "chapter", "--json"]).stdout)
    assert chapter["ttft_uncertainty"] is None
    assert all(r["ttft_interval_ms"] is None for r in chapter["rows"])


def test_the_python_api_returns_the_same_intervals() -> None:
    import pdmux

    result = pdmux.simulate(trace="tests/fixtures/azure_conv_50.csv", policies="chunked")
    policy = result.to_dict()["policies"][0]
    assert result.metrics[0].uncertainty.to_dict() == policy["uncertainty"]
    lo, hi = policy["uncertainty"]["itl_ms_p50"]
    assert lo < result.metrics[0].itl_ms["p50"] < hi


def test_capacity_interval_brackets_the_rate_and_the_verdict_says_how_sure() -> None:
    """The interval's ends are the capacities with the TTFT and ITL scaled by their error's 80% bounds: the
    capacity lies between them; the verdict carries the comparison (or says too close to call)."""
    r = CliRunner().invoke(app, ["capacity", "--synthetic", "--qps", "2", "--max-requests", "300",
                                 "--prompt-tokens", "1000", "--output-tokens", "200", "--policies",
                                 "pdmux,mixed-chunk", "--json", "--workers", "1"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    for p in data["policies"]:
        if p["bound"] is None and p["max_rate_interval_rps"] is not None:
            lo, hi = p["max_rate_interval_rps"]
            assert lo <= p["max_rate_rps"] <= hi and p["interval_coverage"] == 0.8
    comparison = data["verdict_comparison"]  # both bracketed on one GPU: compared
    assert comparison is not None and comparison["pairs"] > 100
    assert ("too close to call" in data["verdict"]) == comparison["too_close_to_call"]
    assert 0.5 <= comparison["confidence"] <= 1 or comparison["too_close_to_call"]
