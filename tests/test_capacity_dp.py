"""pdmux capacity and tune on more than one server: --dp replicas behind a router, --disagg XPYD."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error
from policy_rows import policy_fields
from typer.testing import CliRunner

from pdmux_cli.cli import app
from pdmux_cli.multigpu.disaggregation import Layout
from pdmux_cli.simulate import capacity as cap

FIX = Path(__file__).parent / "fixtures"
AZURE = str(FIX / "azure_conv_50.csv")
runner = CliRunner()

#: A small synthetic workload (200 requests) whose capacity one H100 reaches well inside the search.
SYNTH = ["--synthetic", "--qps", "4", "--prompt-tokens", "lognormal:1024:1", "--output-tokens", "exp:128",
         "--max-requests", "200", "--seed", "3", "--workers", "1"]
TUNE = ["tune", "--trace", AZURE, "--slo-ttft", "1000", "--slo-itl", "60", "--sm-group-nums", "8",
        "--divisors", "36", "--budgets", "65536", "--no-fixed-splits", "--workers", "1"]


def _capacity(*args: str) -> dict:
    r = runner.invoke(app, ["capacity", *SYNTH, *args, "--json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def dp_runs() -> tuple[dict, dict]:
    return _capacity("--policies", "pdmux"), _capacity("--policies", "pdmux", "--dp", "2")


def test_two_replicas_sustain_about_twice_the_rate(dp_runs) -> None:
    one, two = dp_runs
    a, b = one["policies"][0], two["policies"][0]
    assert a["bound"] is None and b["bound"] is None  # both bracketed: real capacities, not search limits
    assert b["max_rate_rps"] > a["max_rate_rps"]
    assert 1.5 <= b["max_rate_rps"] / a["max_rate_rps"] <= 2.6, (a["max_rate_rps"], b["max_rate_rps"])
    assert (a["gpus"], a["layout"], a["router"]) == (1, "1 GPU", None)
    assert (b["gpus"], b["layout"], b["router"]) == (2, "DP 2 x TP 1", "round_robin")
    assert b["max_rate_per_gpu_rps"] == pytest.approx(b["max_rate_rps"] / 2)
    assert a["max_rate_per_gpu_rps"] == pytest.approx(a["max_rate_rps"])


def test_json_top_level_fields(dp_runs) -> None:
    one, two = dp_runs
    assert (one["dp"], one["gpus"], one["load_balance_method"], one["disagg"], one["kv_link"]) == (
        1, 1, None, None, None)  # one server: nothing to route
    assert (two["dp"], two["gpus"], two["tp"], two["load_balance_method"]) == (2, 2, 1, "round_robin")
    assert "over all" in two["rate_rps_is"]
    assert two["verdict"].endswith("req/s on 2 GPUs (DP 2 x TP 1)") and "on 2 GPUs" not in one["verdict"]
    assert any(n.startswith("DP 2: ") and "sgl-router" in n for n in two["notes"])


def test_disagg_runs_every_policy_on_the_same_gpus() -> None:
    data = _capacity("--policies", "pdmux,chunked", "--chunk-sizes", "2048", "--disagg", "1P1D",
                     "--load-balance-method", "total_requests")
    assert [p["policy"] for p in data["policies"]] == ["pdmux", "chunked 2048", "disagg 1P1D"]
    assert all(p["gpus"] == 2 for p in data["policies"])
    assert [p["layout"] for p in data["policies"]] == ["DP 2 x TP 1", "DP 2 x TP 1", "1P1D x TP 1"]
    assert all(p["router"] == "total_requests" for p in data["policies"])
    assert (data["dp"], data["gpus"], data["disagg"], data["load_balance_method"]) == (
        2, 2, "1P1D", "total_requests")
    assert data["kv_link"]["kind"] == "nvlink" and data["kv_link"]["bytes_per_s"] > 0
    disagg = data["policies"][2]
    assert disagg["kind"] == "disagg" and disagg["max_rate_rps"] > 0 and disagg["points"]
    assert any("every policy on 2 GPUs" in n for n in data["notes"])
    assert any("--disaggregation-mode prefill" in n and "--pd-disaggregation" in n for n in data["notes"])
    assert "not at equal GPU count" not in data["verdict"]
    only = _capacity("--policies", "disagg", "--disagg", "1P2D", "--kv-link", "rdma")
    assert [(p["policy"], p["gpus"]) for p in only["policies"]] == [("disagg 1P2D", 3)]
    assert only["kv_link"]["kind"] == "rdma" and (only["dp"], only["gpus"]) == (1, 3)
    assert not any("the others" in n or n.startswith("DP ") for n in only["notes"])


def test_disagg_beside_fewer_replicas_says_the_gpu_counts_differ() -> None:
    data = _capacity("--policies", "pdmux", "--disagg", "1P1D", "--dp", "1")
    assert [p["gpus"] for p in data["policies"]] == [1, 2]
    assert any("not at equal GPU count" in n for n in data["notes"])
    assert "not at equal GPU count: pdmux on 1 GPU(s), disagg 1P1D on 2; per GPU" in data["verdict"]


def test_table_fits_80_columns_and_says_gpus_and_layout() -> None:
    r = runner.invoke(app, ["capacity", *SYNTH, "--policies", "pdmux,mixed-chunk", "--disagg", "1P1D"],
                      env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    table = [ln for ln in lines if ln[:1] in "┏┃┡│├└"]
    assert table and all(len(ln) <= 80 for ln in table), "\n".join(table)
    assert any("DP 2 x TP 1" in ln for ln in table) and any("1P1D x TP 1" in ln for ln in table)
    text = " ".join(r.stdout.split())
    assert "req/s over all 2 GPUs" in text and "per GPU" in text
    r = runner.invoke(app, ["capacity", *SYNTH, "--policies", "pdmux", "--dp", "2"], env={"COLUMNS": "160"})
    assert r.exit_code == 0, r.stderr
    header = next(ln for ln in r.stdout.splitlines() if ln.startswith("┃"))
    assert all(col in header for col in ("layout", "GPUs", "max rate", "per GPU", "runs"))


#: The layouts these rows are written with, as data (a layout's text is pdmux_cli.messages.layout_text's).
LAYOUTS = {"DP 2 x TP 1": Layout(1, 2), "DP 4 x TP 2": Layout(2, 4), "1P1D x TP 1": Layout(1, xpyd=(1, 1)),
           "2P2D x TP 1": Layout(1, xpyd=(2, 2)), "2P2D x TP 2": Layout(2, xpyd=(2, 2))}


def _row(label: str, kind: str, rate: float, gpus: int, layout: str, xpyd=None) -> cap.PolicyCapacity:
    point = cap.RatePoint(rate, 0.99, rate, 100.0, 20.0)
    assert str(LAYOUTS[layout]) == layout and LAYOUTS[layout].gpus == gpus
    return cap.PolicyCapacity(
        label,
        kind,
        rate,
        point,
        (point,),
        "",
        None,
        None,
        8192 if kind == "chunked" else -1,
        gpus,
        LAYOUTS[layout],
        "round_robin",
        xpyd,
        **policy_fields(kind),
    )


def test_verdicts_on_several_servers() -> None:
    def result(*rows, dp=2, tp=1):
        return cap.CapacityResult(list(rows), 0.99, 0.02, 4.0, 1000, 60, 1, tp=tp, dp=dp,
                                  load_balance_method="total_requests")

    pd = _row("pdmux", "pdmux", 10.0, 2, "DP 2 x TP 1")
    assert result(pd, _row("chunked 8192", "chunked", 8.0, 2, "DP 2 x TP 1")).verdict() == (
        "pdmux sustains 10 req/s on 2 GPUs (DP 2 x TP 1) against 8 for chunked 8192: +25%; enable it with: "
        "--enable-pdmux --chunked-prefill-size -1 --disable-overlap-schedule --dp-size 2 "
        "--load-balance-method total_requests")
    disagg = _row("disagg 1P1D", "disagg", 12.0, 2, "1P1D x TP 1", (1, 1))
    text = result(pd, disagg).verdict()
    assert text.startswith("disagg 1P1D serves more (12 req/s on 2 GPUs (1P1D x TP 1) against 10 for pdmux)")
    assert "1 prefill server(s) with --disaggregation-mode prefill" in text
    assert "1 decode server(s) with --disaggregation-mode decode" in text
    assert "sglang_router.launch_router --pd-disaggregation" in text
    big = _row("disagg 2P2D", "disagg", 12.0, 8, "2P2D x TP 2", (2, 2))
    text = result(_row("pdmux", "pdmux", 10.0, 8, "DP 4 x TP 2"), big, tp=2, dp=4).verdict()
    assert "--tp-size 2" in text and "not at equal GPU count" not in text
    text = result(pd, _row("disagg 2P2D", "disagg", 12.0, 4, "2P2D x TP 1", (2, 2))).verdict()
    assert "(not at equal GPU count: pdmux on 2 GPU(s), disagg 2P2D on 4; per GPU 5 against 3 req/s)" in text
    text = result(pd, _row("disagg 2P2D", "disagg", 12.0, 4, "2P2D x TP 1", (2, 2)),
                  _row("chunked 8192", "chunked", 8.0, 2, "DP 2 x TP 1")).verdict()
    assert "against 8 for chunked 8192" in text and "equal GPU count" not in text  # compared on as many GPUs
    keep = result(pd, _row("chunked 8192", "chunked", 11.0, 2, "DP 2 x TP 1")).verdict()
    assert keep.endswith("keep it (--chunked-prefill-size 8192 --dp-size 2 --load-balance-method "
                         "total_requests)")


def test_tune_on_replicas() -> None:
    r = runner.invoke(app, [*TUNE, "--dp", "2", "--load-balance-method", "total_requests", "--json"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["gpus"], data["dp"], data["layout"], data["router"]) == (
        2, 2, "DP 2 x TP 1", "total_requests")
    assert all(row["gpus"] == 2 and row["layout"] == "DP 2 x TP 1" for row in data["rows"])
    assert all(s["gpus"] == 2 for s in data["schedules"])
    one = json.loads(runner.invoke(app, [*TUNE, "--json"]).stdout)
    assert (one["gpus"], one["dp"], one["layout"], one["router"]) == (1, 1, "1 GPU", None)
    r = runner.invoke(app, [*TUNE, "--dp", "2"])
    assert r.exit_code == 0, r.stderr
    text = " ".join((r.stdout + r.stderr).split())
    assert ("each on 2 GPUs, DP 2 x TP 1" in text
            and "every policy on 2 GPU(s) (DP 2 x TP 1 behind round_robin)" in text)


def test_bad_input() -> None:
    for args, text in [
        (["capacity", AZURE, "--dp", "0"], "--dp"),
        (["capacity", AZURE, "--dp", "999"], "--dp"),
        (["capacity", AZURE, "--load-balance-method", "foo"], "--load-balance-method"),
        (["capacity", AZURE, "--disagg", "1P0D"], "--disagg"),
        (["capacity", AZURE, "--disagg", "fast"], "--disagg"),
        (["capacity", AZURE, "--policies", "disagg"], "--disagg XPYD"),
        (["capacity", AZURE, "--kv-link", "rdma"], "--disagg"),
        (["capacity", AZURE, "--disagg", "1P1D", "--kv-link-gb-s", "0"], "--kv-link-gb-s"),
        ([*TUNE, "--disagg", "1P1D"], "--disagg"),
        ([*TUNE, "--dp", "0"], "--dp"),
        ([*TUNE, "--dp", "999"], "--dp"),
        ([*TUNE, "--load-balance-method", "foo"], "--load-balance-method"),
    ]:
        assert_one_line_error(runner.invoke(app, args), 2, text)


def test_disagg_tp_against_one_tp_server() -> None:
    """pdmux as one TP 2 server against 1P1D of TP 1 instances: both on 2 GPUs; the verdict's disagg
    flags carry no --tp-size (its instances are TP 1)."""
    data = _capacity("--policies", "pdmux", "--tp", "2", "--disagg", "1P1D", "--disagg-tp", "1")
    assert [(p["gpus"], p["layout"]) for p in data["policies"]] == [(2, "TP 2"), (2, "1P1D x TP 1")]
    assert (data["dp"], data["disagg_tp"]) == (1, 1)
    assert "not at equal GPU count" not in data["verdict"]
    note = next(n for n in data["notes"] if "--disaggregation-mode prefill" in n)
    assert "each TP 1" in note


def test_a_short_burst_on_replicas_is_noted() -> None:
    """200 requests over 2 replicas at the rates found: a burst, not a sustained rate."""
    data = _capacity("--policies", "pdmux", "--dp", "2")
    assert any("a burst its 2 servers drain" in n for n in data["notes"])
    one = _capacity("--policies", "pdmux")  # one server: still a burst under 30 s of arrivals
    rate = one["policies"][0]["max_rate_rps"]
    assert 200 / rate < 30 and any(f"within {200 / rate:.3g} s: a burst, not a sustained rate" in n
                                   for n in one["notes"])


def test_tune_on_replicas_says_pdmux_under_dp_is_untried() -> None:
    d = json.loads(runner.invoke(app, [*TUNE, "--dp", "2", "--json"]).stdout)
    assert any(n.startswith("DP 2: --dp-size 2") and "untried" in n for n in d["notes"])
    one = json.loads(runner.invoke(app, [*TUNE, "--json"]).stdout)
    assert not any("untried" in n for n in one["notes"])
