"""Plots (estimate --plot, simulate's empty case) and display rules: latencies from 10 s on in seconds,
table titles wider than their table printed on a line of their own."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.cli import app
from pdmux_cli.cli.simulate_tables import latency_cell

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


def test_estimate_plot(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "tradeoff.png"
    r = runner.invoke(app, ["estimate", "--plot", str(png)])
    assert r.exit_code == 0, r.stderr
    assert png.read_bytes()[:8] == PNG and f"wrote {png}" in r.stdout
    assert "Every level" not in r.stdout  # the plot computes every level; the table stays opt-in
    assert r.stderr == ""  # no library warnings
    assert_one_line_error(runner.invoke(app, ["estimate", "--plot", str(tmp_path / "x.jpg")]), 2, ".png")
    assert_one_line_error(runner.invoke(app, ["estimate", "--plot", str(tmp_path / "no" / "x.png")]), 2,
                          "does not exist")


def test_simulate_plot_without_a_completed_request_is_a_note(tmp_path) -> None:
    png = tmp_path / "cdf.png"
    r = runner.invoke(app,
                      ["simulate", "--synthetic", "--qps", "1", "--duration", "5", "--prompt-tokens", "30000",
                            "--mem-fraction-static", "0.215", "--plot", str(png)])
    assert r.exit_code == 0, r.stderr
    assert "nothing to plot" in r.stdout and not png.exists()


def test_latency_cells() -> None:
    assert [latency_cell(x) for x in (12.34, 850.2, 9999.0, 10_000.0, 12_700.2, float("nan"))] == [
        "12.3", "850", "9999", "10.0 s", "12.7 s", "-"]


def test_a_long_title_over_a_narrow_table_stays_one_line() -> None:
    r = runner.invoke(app,
                      ["simulate", "--synthetic", "--qps", "2", "--duration", "10", "--policies", "pdmux"],
                      env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("synthetic Poisson 2 req/s") and "Qwen3-8B on H100 SXM5 80GB" in first


def test_policies_that_do_not_fit_the_width_come_in_groups() -> None:
    r = runner.invoke(app, ["simulate", str(Path(__file__).parent / "fixtures" / "azure_conv_50.csv"),
                            "--chunk-sizes", "512,1024,2048,4096,8192", "--mixed-chunk-sizes", "256,512"],
                      env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.stderr
    assert r.stdout.count("│ SLO met") == 3  # 8 policies in tables of 3 on 80 columns
    for name in ("pdmux", "chunked 512", "chunked 8192", "mixed-chunk 256", "mixed-chunk 512"):
        assert name in r.stdout
    assert "…" not in r.stdout  # no value or header cut off
