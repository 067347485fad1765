"""``pdmux estimate --disagg XPYD``: PD disaggregation as a row of the estimate (TTFT = whole-GPU prefill +
the KV transfer, the decode instances' ITL undisturbed), its GPUs and layout, the KV link, bad input."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.costmodel.options import CostModelOptions
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.costmodel.operators import rank_kv_bytes_per_token
from pdmux_cli.messages import render_all
from pdmux_cli.multigpu.disaggregation import Layout
from pdmux_cli.planning.estimate import Scenario, estimate
from pdmux_cli.util.errors import InputError

runner = CliRunner()

#: Qwen3-8B's KV bytes per token in bf16: 36 layers x 2 (K and V) x 8 KV heads x 128 x 2 bytes.
QWEN3_8B_KV_BYTES_PER_TOKEN = 36 * 2 * 8 * 128 * 2


def run(*args: str):
    return runner.invoke(app, list(args))


def _rows(est):
    return {r.policy: r for r in est.rows}


def test_infinitely_fast_link_is_the_whole_gpu_prefill_and_the_undisturbed_decode_step() -> None:
    for cost_model in ("roofline", "chapter"):
        est = estimate(find_gpu("h100"), load_model("qwen3-8b"),
                       Scenario(cost=CostModelOptions(cost_model=cost_model), disagg=(1, 1),
                                kv_link_gb_s=1e12, kv_link_latency_us=0))
        rows = _rows(est)
        dis = rows["disagg"]
        assert dis.prefill_ms == pytest.approx(rows["prefill-first"].prefill_ms, rel=1e-5)
        # the pure prefill, same as prefill-first's
        assert dis.prefill_alone_ms == rows["prefill-first"].prefill_ms
        assert dis.itl_ms == rows["decode-only"].itl_ms == dis.decode_alone_ms
        assert dis.transfer_ms == pytest.approx(0, abs=1e-3)
        # every decode step during the prefill is the undisturbed one: tokens = TTFT / ITL
        assert dis.tokens_during_prefill == round(dis.prefill_ms / dis.itl_ms)


def test_1p1d_h100_qwen3_8b_transfer_over_nvlink() -> None:
    m = load_model("qwen3-8b")
    assert rank_kv_bytes_per_token(m, 2, 1) == QWEN3_8B_KV_BYTES_PER_TOKEN == 147456
    est = estimate(find_gpu("h100"), m, Scenario(disagg=(1, 1)))
    dis = _rows(est)["disagg"]
    expected_s = 0.6e-6 + 8192 * 147456 / 450e9  # 1.208 GB over 450 GB/s + NVLink's 0.6 us
    assert dis.transfer_ms == pytest.approx(expected_s * 1e3, rel=1e-9)
    assert dis.transfer_ms == pytest.approx(2.6850, abs=1e-4)
    assert est.kv_transfer_bytes == 8192 * 147456
    assert dis.prefill_ms == pytest.approx(_rows(est)["prefill-first"].prefill_ms + dis.transfer_ms)
    assert (dis.gpus, dis.layout, dis.label) == (2, Layout(1, xpyd=(1, 1)), "disagg 1P1D")
    assert est.kv_link.kind == "nvlink" and est.kv_link.bytes_per_s == 450e9
    assert {(r.gpus, r.layout) for r in est.rows if r.policy != "disagg"} == {(1, Layout(1))}
    assert est.rows[-1] is dis  # the last row
    link_note = next(n for n in render_all(est.notes) if n.startswith("disagg KV link"))
    assert "NVLink 450 GB/s per GPU, 0.6 us" in link_note and "2.68 ms" in link_note
    assert "H100 SXM5 80GB profile's nvlink" in link_note  # the source
    gpus_note = next(n for n in render_all(est.notes) if n.startswith("disagg 1P1D: 2 GPUs"))
    assert "2 data-parallel replicas" in gpus_note and "one server" in gpus_note


def test_2p6d_tp2_spans_nodes_over_rdma() -> None:
    m = load_model("qwen3-8b")
    est = estimate(find_gpu("h100"), m, Scenario(disagg=(2, 6), tp=2))
    dis = _rows(est)["disagg"]
    assert (dis.gpus, str(dis.layout)) == (16, "2P6D x TP 2")
    assert est.kv_link.kind == "rdma" and est.kv_link.bytes_per_s == 50e9
    assert dis.transfer_ms == pytest.approx((2.7e-6 + 8192 * rank_kv_bytes_per_token(m, 2, 2) / 50e9) * 1e3)
    assert {(r.gpus, r.layout) for r in est.rows if r.policy != "disagg"} == {(2, Layout(2))}
    assert any("16 GPUs span nodes of 8" in n for n in render_all(est.notes))
    assert any("8 data-parallel replicas" in n for n in render_all(est.notes))


def test_link_auto_on_a_pcie_gpu_and_kinds_asked() -> None:
    m = load_model("qwen3-8b")
    assert estimate(find_gpu("h100-pcie"), m, Scenario(disagg=(1, 1))).kv_link.kind == "pcie"
    assert estimate(find_gpu("h100"), m, Scenario(disagg=(1, 1), kv_link="rdma")).kv_link.kind == "rdma"
    with pytest.raises(InputError, match="pcie"):
        estimate(find_gpu("h100-pcie"), m, Scenario(disagg=(1, 1), kv_link="nvlink"))
    with pytest.raises(InputError, match="--disagg"):
        estimate(find_gpu("h100"), m, Scenario(kv_link="rdma"))  # a link without --disagg
    with pytest.raises(InputError, match="--disagg"):
        estimate(find_gpu("h100"), m, Scenario(disagg=(0, 1)))


def test_chapter_table_unchanged_with_a_disagg_row_added() -> None:
    gpu, m = find_gpu("h100"), load_model("qwen3-8b")
    plain = estimate(gpu, m, Scenario(cost=CostModelOptions(cost_model="chapter")))
    with_row = estimate(gpu, m, Scenario(cost=CostModelOptions(cost_model="chapter"), disagg=(1, 1)))
    assert [r.label for r in plain.rows] + ["disagg 1P1D"] == [r.label for r in with_row.rows]
    assert [(r.itl_ms, r.prefill_ms) for r in plain.rows] == [
        (r.itl_ms, r.prefill_ms) for r in with_row.rows[:-1]
    ]
    assert plain.kv_link is None and not any("disagg" in n for n in render_all(plain.notes))


def test_cli_table_and_json() -> None:
    r = run("estimate", "--disagg", "1P1D")
    assert r.exit_code == 0, r.stderr
    assert "disagg 1P1D" in r.stdout and "GPUs" in r.stdout and "NVLink 450 GB/s" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()[1:]) <= 80  # the table keeps to the width
    d = json.loads(run("estimate", "--disagg", "1p1d", "--json").stdout)
    row = d["rows"][-1]
    assert row["policy"] == "disagg" and row["gpus"] == 2 and row["layout"] == "1P1D x TP 1"
    assert row["transfer_ms"] == pytest.approx(2.6850, abs=1e-4)
    assert row["prefill_ms"] == pytest.approx(row["prefill_alone_ms"] + row["transfer_ms"])
    assert row["link"] == {"kind": "nvlink", "bytes_per_s": 450e9, "latency_s": 6e-7,
                           "source": row["link"]["source"]} and "nvlink" in row["link"]["source"]
    assert all(r["link"] is None and r["transfer_ms"] is None and r["layout"] == "1 GPU"
               for r in d["rows"][:-1])
    assert d["disagg"]["ttft_ms"] == row["prefill_ms"] and d["disagg"]["gpus"] == 2
    assert d["disagg"]["kv_transfer_bytes_per_gpu"] == 8192 * 147456
    d = json.loads(run("estimate", "--disagg", "2P6D", "--tp", "2", "--json").stdout)
    assert d["rows"][-1]["gpus"] == 16 and d["rows"][-1]["link"]["kind"] == "rdma"
    assert d["disagg"]["layout"] == "2P6D x TP 2"
    d = json.loads(run("estimate", "--disagg", "1P1D", "--kv-link-gb-s", "1e12", "--kv-link-latency-us", "0",
                       "--json").stdout)
    rows = {r["policy"]: r for r in d["rows"]}
    assert rows["disagg"]["prefill_ms"] == pytest.approx(rows["prefill-first"]["prefill_ms"], rel=1e-5)
    assert rows["disagg"]["itl_ms"] == rows["decode-only"]["itl_ms"]
    assert "--kv-link-gb-s" in rows["disagg"]["link"]["source"]


def test_default_output_has_no_disagg() -> None:
    r = run("estimate")
    assert r.exit_code == 0 and "disagg" not in r.stdout and "GPUs" not in r.stdout
    d = json.loads(run("estimate", "--json").stdout)
    assert d["disagg"] is None and all(r["policy"] != "disagg" for r in d["rows"])


@pytest.mark.parametrize(
    "args,contains",
    [
        (["--disagg", "0P1D"], "prefill instances"),
        (["--disagg", "1P0D"], "decode instances"),
        (["--disagg", "1X1D"], "XPYD"),
        (["--disagg", ""], "XPYD"),
        (["--disagg", "1P1D", "--kv-link", "foo"], "--kv-link"),
        (["--disagg", "1P1D", "--kv-link-gb-s", "-1"], "--kv-link-gb-s"),
        (["--disagg", "1P1D", "--kv-link-gb-s", "0"], "--kv-link-gb-s"),
        (["--disagg", "1P1D", "--kv-link-gb-s", "nan"], "--kv-link-gb-s"),
        (["--disagg", "1P1D", "--kv-link-latency-us", "-1"], "--kv-link-latency-us"),
        (["--disagg", "1P1D", "--kv-link", "nvlink", "--gpu", "h100-pcie"], "pcie"),
        (["--kv-link", "rdma"], "--disagg"),
        (["--kv-link-gb-s", "100"], "--disagg"),
    ],
)
def test_bad_disagg_input(args, contains) -> None:
    assert_one_line_error(run("estimate", *args), 2, contains)


def test_plot_draws_disagg_as_a_point(tmp_path, monkeypatch) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from pdmux_cli.planning import plot

    figures = []

    @contextmanager
    def keep_figure(path, figsize, title=""):
        fig = Figure(figsize=figsize)
        figures.append(fig)
        yield fig

    monkeypatch.setattr(plot, "png_figure", keep_figure)
    est = estimate(find_gpu("h100"), load_model("qwen3-8b"), Scenario(disagg=(1, 1)), all_levels=True)
    plot.write_tradeoff_plot(tmp_path / "x.png", est)
    lines = {line.get_label(): line for line in figures[0].axes[0].get_lines()}
    dis = lines["disagg 1P1D (2 GPUs, TTFT)"]
    row = _rows(est)["disagg"]
    assert list(dis.get_xdata()) == [row.prefill_ms] and list(dis.get_ydata()) == [row.itl_ms]
    assert dis.get_marker() == "*"
    monkeypatch.undo()
    png = tmp_path / "t.png"
    r = run("estimate", "--disagg", "1P1D", "--plot", str(png))
    assert r.exit_code == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "1P1D disaggregation as a point" in r.stdout


def test_disagg_tp_instances_of_their_own_tp() -> None:
    """--tp 2 --disagg 1P1D --disagg-tp 1: the other rows one TP 2 server, disagg two TP 1 instances; both
    on 2 GPUs. The disagg row's times are a TP 1 server's (the same as estimate --tp 1's rows), and its
    transfer is a whole request's KV over one link."""
    r = runner.invoke(app, ["estimate", "--tp", "2", "--disagg", "1P1D", "--disagg-tp", "1", "--json"])
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    dis = d["rows"][-1]
    assert (dis["gpus"], dis["layout"]) == (2, "1P1D x TP 1") and d["disagg"]["tp"] == 1
    assert {row["layout"] for row in d["rows"][:-1]} == {"TP 2"}
    one = json.loads(runner.invoke(app, ["estimate", "--json"]).stdout)
    by_policy = {row["policy"]: row for row in one["rows"]}
    assert dis["itl_ms"] == pytest.approx(by_policy["decode-only"]["itl_ms"])
    assert dis["prefill_ms"] - dis["transfer_ms"] == pytest.approx(by_policy["prefill-first"]["prefill_ms"])
    assert dis["transfer_ms"] == pytest.approx((6e-07 + 8192 * 147456 / 450e9) * 1e3)
    assert any("on as many GPUs" in n for n in d["notes"])


def test_disagg_tp_too_small_for_the_model_is_refused() -> None:
    r = runner.invoke(app,
                      ["estimate", "--model", "llama-3.1-70b", "--tp", "4", "--disagg", "1P1D", "--disagg-tp",
                       "1"])
    assert_one_line_error(r, 2, "--disagg-tp 1")
    assert_one_line_error(runner.invoke(app, ["estimate", "--disagg-tp", "2"]), 2, "--disagg")
    assert_one_line_error(runner.invoke(app, ["estimate", "--disagg", "1P1D", "--disagg-tp", "9"]), 2,
                          "--disagg-tp")
