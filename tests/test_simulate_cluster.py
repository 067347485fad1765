"""Several servers: data-parallel replicas behind a router, PD disaggregation, and the CLI's --dp/--disagg."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.messages import layout_text, render_all
from pdmux_cli.multigpu.disaggregation import KvLink, Layout, kv_link
from pdmux_cli.simulate import servers
from pdmux_cli.simulate.cluster import DisaggPolicy, simulate_disagg, transfer_ends
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.metrics import summarize
from pdmux_cli.simulate.runner import simulate
from pdmux_cli.simulate.schedulers import (
    ChunkedPolicy,
    MixedChunkPolicy,
    PdmuxPolicy,
    PrefillFirstPolicy,
)
from pdmux_cli.simulate.servers import simulate_dp
from pdmux_cli.simulate.traces import Trace, load_trace, synthetic_trace
from pdmux_cli.util.errors import InputError

FIX = Path(__file__).parent / "fixtures"
AZURE = str(FIX / "azure_conv_50.csv")
runner = CliRunner()
INSTANT = KvLink("nvlink", math.inf, 0.0, "test: an infinitely fast link")


@pytest.fixture(scope="module")
def h100():
    return find_gpu("h100")


@pytest.fixture(scope="module")
def setup(h100):
    # the serving terms at 0: these hand calculations are the kernels and the scheduler alone
    return make_setup(h100, load_model("qwen3-8b"), per_request_overhead_ms=0, admission_delay_ms=0,
                      admission_interval_ms=0, first_token_delay_ms=0, frontend_token_ms=0)


@pytest.fixture(scope="module")
def busy_trace():
    """1,200 requests at 12 req/s: more than one H100 serves, so the servers queue and batch."""
    return synthetic_trace(12.0, "lognormal:1500:1", "exp:200", 1200, None, 0)


def _same_run(a, b) -> bool:
    return (a.first_token_s == b.first_token_s and list(a.step_end_s) == list(b.step_end_s)
            and a.first_step == b.first_step and a.stints == b.stints and a.idle_s == b.idle_s
            and a.counters == b.counters)


@pytest.mark.parametrize("policy",
                         [PdmuxPolicy(), ChunkedPolicy(2048), MixedChunkPolicy(512), PrefillFirstPolicy()],
                         ids=lambda p: p.label)
@pytest.mark.parametrize("method", ["round_robin", "total_requests"])
def test_one_replica_behind_the_router_is_the_lone_server(setup, busy_trace, policy, method) -> None:
    """Pausing for the router changes nothing: DP 1 reproduces the lone server step for step."""
    alone = simulate(busy_trace, setup, policy)
    routed = simulate_dp(busy_trace, setup, policy, 1, method)
    assert _same_run(alone, routed)
    assert (routed.gpus, routed.layout, routed.router) == (1, Layout(1), method)
    assert (alone.gpus, alone.layout, alone.router) == (1, Layout(1), "")


def _sub_trace(trace: Trace, rids: list[int]) -> Trace:
    return Trace(tuple(trace.arrival_s[r] for r in rids), tuple(trace.prompt_tokens[r] for r in rids),
                 tuple(trace.output_tokens[r] for r in rids), source="part")


@pytest.mark.parametrize("policy", [PdmuxPolicy(), ChunkedPolicy(8192)], ids=lambda p: p.label)
def test_round_robin_is_independent_servers_on_alternate_requests(setup, busy_trace, policy) -> None:
    """Round robin does not look at the servers: DP 2 is two lone servers, one on the even requests
    and one on the odd ones, request for request."""
    both = simulate_dp(busy_trace, setup, policy, 2, "round_robin")
    assert both.gpus == 2 and both.layout == Layout(1, 2) and str(both.layout) == "DP 2 x TP 1"
    for parity in (0, 1):
        rids = list(range(parity, len(busy_trace), 2))
        alone = simulate(_sub_trace(busy_trace, rids), setup, policy)
        for j, rid in enumerate(rids):
            assert both.first_token_s[rid] == alone.first_token_s[j]
            assert both.finish_s(rid) == alone.finish_s(j)


def _routed(setup, trace, policy, dp, method):
    pool = setup.kv_pool(policy.chunk_tokens)
    works = servers.routed_works(trace, setup, pool.tokens, dp)
    rounds = [policy.rounds(w, setup) for w in works]
    rejected = set(works[0].rejected)
    order = [r for r in range(len(trace)) if r not in rejected]
    extras, where, unrouted = servers.route(rounds, works, order, trace.arrival_s, method)
    return works, extras, where, unrouted, order


@pytest.mark.parametrize("method", ["round_robin", "total_requests"])
@pytest.mark.parametrize("dp", [2, 3, 8])
def test_every_request_finishes_exactly_once_under_dp(setup, busy_trace, dp, method) -> None:
    works, _, where, unrouted, order = _routed(setup, busy_trace, ChunkedPolicy(8192), dp, method)
    assert not unrouted and len(order) == len(busy_trace)
    assert sum(w.finished for w in works) == len(busy_trace)
    for rid in range(len(busy_trace)):
        served = [i for i, w in enumerate(works) if not math.isnan(w.first_token[rid])]
        assert served == [where[rid]]
    result = simulate_dp(busy_trace, setup, ChunkedPolicy(8192), dp, method)
    assert all(math.isfinite(result.finish_s(r)) for r in range(len(busy_trace)))
    assert result.gpus == dp and summarize(result, 1000, 60).completed == len(busy_trace)


def test_total_requests_routes_to_the_least_loaded_server(setup) -> None:
    """Request 0 decodes for a long time on server 0, request 1 finishes at once on server 1; request 2
    arrives later: round robin sends it back to server 0, total_requests to the idle server 1."""
    trace = Trace((0.0, 0.0, 1.0), (512, 512, 512), (2000, 1, 10), source="three")
    _, _, rr, _, _ = _routed(setup, trace, ChunkedPolicy(8192), 2, "round_robin")
    _, _, tr, _, _ = _routed(setup, trace, ChunkedPolicy(8192), 2, "total_requests")
    assert rr == [0, 1, 0]
    assert tr == [0, 1, 1]


def test_total_requests_spreads_load_better_than_round_robin(setup, busy_trace) -> None:
    """With unequal requests, routing by outstanding requests finishes them sooner than taking turns: it
    balances what each replica holds (queued and decoding), so end-to-end latency, mean and tail, is lower.
    (TTFT is not the measure: it is set by the chunked prefill of the longest prompts on any replica.)"""
    rr = summarize(simulate_dp(busy_trace, setup, ChunkedPolicy(8192), 4, "round_robin"), 1000, 60)
    least = summarize(simulate_dp(busy_trace, setup, ChunkedPolicy(8192), 4, "total_requests"), 1000, 60)
    mean = lambda m: sum(m.per_request["e2e_ms"]) / len(m.per_request["e2e_ms"])
    assert mean(least) < mean(rr)
    assert least.e2e_ms["p99"] < rr.e2e_ms["p99"]


def test_transfer_ends_queue_on_each_prefill_instance() -> None:
    link = KvLink("rdma", 1000.0, 0.25, "test")  # 1 kB/s: 250 bytes take 0.25 s, plus 0.25 s latency
    done, queued = transfer_ends([1.0, 1.0, 1.0, math.nan], [0, 0, 1, 0], [250.0, 250.0, 250.0, 250.0], link)
    assert done[:3] == [1.5, 2.0, 1.5] and math.isnan(done[3])
    assert queued[:3] == [0.0, 0.5, 0.0]


def test_kv_link_defaults(h100) -> None:
    nv = kv_link(h100, 2)
    assert (nv.kind, nv.bytes_per_s, nv.latency_s) == ("nvlink", 450e9, 6e-07)
    rdma = kv_link(h100, 16)
    assert (rdma.kind, rdma.bytes_per_s, rdma.latency_s) == ("rdma", 50e9, 2.7e-06)
    assert "RDMA 400 Gb/s" in rdma.source and "16 GPUs span nodes" in rdma.source
    assert kv_link(find_gpu("h100-pcie"), 2).kind == "pcie"
    assert kv_link(h100, 2, "rdma", gb_per_s=25, latency_us=10).transfer_s(25e9) == pytest.approx(1.00001)


def test_disagg_one_request_with_an_instant_link_is_prefill_then_undisturbed_decode(setup) -> None:
    """One request, an infinitely fast link: TTFT is the whole-GPU prefill and every ITL the decode
    step of a lone server, exactly as prefill-first on one GPU with nothing else running."""
    trace = Trace((0.0,), (8192,), (64,), source="one")
    alone = simulate(trace, setup, PrefillFirstPolicy())
    split = simulate_disagg(trace, setup, DisaggPolicy(1, 1, INSTANT))
    assert split.first_token_s == alone.first_token_s
    assert list(split.step_end_s) == list(alone.step_end_s)
    # one instance a side: no routing
    assert (split.gpus, split.layout, split.router) == (2, Layout(1, xpyd=(1, 1)), "")
    prefill = max(setup.step_model.prefill_s(setup.total_sms, [(8192, 0)]), setup.step_model.decode_cpu_s(1))
    assert split.first_token_s[0] == pytest.approx(prefill)


def test_disagg_ttft_is_prefill_plus_transfer(setup) -> None:
    trace = Trace((0.0,), (8192,), (64,), source="one")
    link = kv_link(find_gpu("h100"), 2)
    instant = simulate_disagg(trace, setup, DisaggPolicy(1, 1, INSTANT))
    real = simulate_disagg(trace, setup, DisaggPolicy(1, 1, link))
    transfer = 6e-07 + 8192 * 147456 / 450e9  # Qwen3-8B: 36 layers x 8 KV heads x 128 x 2 x 2 bytes a token
    assert real.first_token_s[0] - instant.first_token_s[0] == pytest.approx(transfer)
    assert real.counters["kv_transfer_ms_mean"] == pytest.approx(transfer * 1e3)
    assert any("NVLink 450 GB/s per GPU" in n for n in real.notes)


def test_disagg_decode_is_undisturbed_by_prefill(setup, busy_trace) -> None:
    """Each request's first token comes when its prefill (on the prefill side alone) ends plus its
    transfer and its admission; the decode instances never prefill, so ITLs do not spike."""
    split = simulate_disagg(busy_trace, setup, DisaggPolicy(1, 2, INSTANT))
    prefill_only = simulate(replace(busy_trace, output_tokens=tuple([1] * len(busy_trace))), setup,
                            PrefillFirstPolicy())
    for rid in range(len(busy_trace)):
        assert split.first_token_s[rid] >= prefill_only.first_token_s[rid]
    m = summarize(split, 1000, 60)
    colocated = summarize(simulate_dp(busy_trace, setup, ChunkedPolicy(8192), 3), 1000, 60)
    assert m.completed == len(busy_trace) and m.itl_ms["max"] < colocated.itl_ms["max"]
    assert m.itl_ms["max"] < 30  # decode of Qwen3-8B on an H100 never waits behind a prefill


@pytest.mark.parametrize("xy", [(1, 1), (2, 3)])
def test_every_request_finishes_exactly_once_under_disagg(setup, busy_trace, xy) -> None:
    result = simulate_disagg(busy_trace, setup, DisaggPolicy(*xy, kv_link(find_gpu("h100"), sum(xy))))
    assert all(math.isfinite(result.finish_s(r)) for r in range(len(busy_trace)))
    steps = sum(result.decode_steps)
    # every decode step of every request is one token: the merged records hold each request's steps once
    assert sum(max(0, o - 1) for o in busy_trace.output_tokens) == steps
    assert result.gpus == sum(xy) and str(result.layout) == f"{xy[0]}P{xy[1]}D x TP 1"


def test_layout_text() -> None:
    assert layout_text(Layout(1)) == "1 GPU" and Layout(1).gpus == 1
    assert layout_text(Layout(4)) == "TP 4" and Layout(4).gpus == 4
    assert layout_text(Layout(2, 4)) == "DP 4 x TP 2" and Layout(2, 4).gpus == 8
    assert layout_text(Layout(1, xpyd=(2, 6))) == str(Layout(1, xpyd=(2, 6))) == "2P6D x TP 1"


def test_mooncake_prefix_cache_per_replica(setup) -> None:
    """Each replica has its own radix cache: spreading requests over more replicas finds fewer prefixes."""
    trace = load_trace(FIX / "mooncake_small.jsonl")
    assert trace.has_hash_ids
    one = summarize(simulate(trace, setup, ChunkedPolicy(8192)), 1000, 60)
    four = summarize(simulate_dp(trace, setup, ChunkedPolicy(8192), 4), 1000, 60)
    assert four.prefix_cache_hit_rate < one.prefix_cache_hit_rate


# ------------------------------------------------------------------------------------------------
# CLI

def run(*args: str):
    return runner.invoke(app, list(args))


def test_simulate_dp_json() -> None:
    r = run("simulate", AZURE, "--json", "--policies", "pdmux,chunked", "--dp", "2",
            "--load-balance-method", "total_requests")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["dp"], d["gpus"], d["load_balance_method"], d["disagg"]) == (2, 2, "total_requests", None)
    for p in d["policies"]:
        assert (p["gpus"], p["layout"], p["router"]) == (2, "DP 2 x TP 1", "total_requests")
        assert p["completed"] == 50


def test_simulate_disagg_table_and_json() -> None:
    r = run("simulate", AZURE, "--policies", "pdmux", "--disagg", "1p1d")
    assert r.exit_code == 0, r.stderr
    for text in ("disagg 1P1D", "1P1D x TP 1", "DP 2 x TP 1", "every policy on 2 GPUs", "NVLink 450 GB/s"):
        assert text in r.stdout
    r = run("simulate", AZURE, "--json", "--policies", "chunked,disagg", "--disagg", "2P6D", "--tp", "2")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["disagg"] == "2P6D" and d["kv_link"]["kind"] == "rdma" and d["kv_link"]["bytes_per_s"] == 50e9
    assert {p["policy"]: p["gpus"] for p in d["policies"]} == {"chunked 8192": 16, "disagg 2P6D": 16}
    assert {p["policy"]: p["layout"] for p in d["policies"]} == {
        "chunked 8192": "DP 8 x TP 2", "disagg 2P6D": "2P6D x TP 2"}


def test_simulate_unequal_gpus_noted() -> None:
    r = run("simulate", AZURE, "--policies", "chunked", "--disagg", "1P3D", "--dp", "2")
    assert r.exit_code == 0, r.stderr
    assert "not at equal GPU count" in r.stdout


@pytest.mark.parametrize("args,contains", [
    (("--dp", "0"), "--dp"),
    (("--dp", "65"), "--dp"),
    (("--load-balance-method", "random"), "--load-balance-method"),
    (("--disagg", "1X1D"), "--disagg"),
    (("--disagg", "0P1D"), "prefill"),
    (("--policies", "disagg"), "--disagg XPYD"),
    (("--kv-link", "rdma"), "apply to --disagg"),
    (("--disagg", "1P1D", "--kv-link", "infiniband"), "--kv-link"),
    (("--disagg", "1P1D", "--kv-link-gb-s", "-3"), "--kv-link-gb-s"),
    (("--disagg", "1P1D", "--kv-link", "nvlink", "--gpu", "h100-pcie"), "--kv-link nvlink"),
])
def test_simulate_cluster_bad_input(args, contains) -> None:
    assert_one_line_error(run("simulate", AZURE, *args), 2, contains)


def test_disagg_tp_puts_every_policy_on_the_same_gpus() -> None:
    """TP 2 against 1P1D of TP 1 each: both on 2 GPUs, one server of TP 2 for the colocated policies."""
    r = run("simulate", AZURE, "--json", "--policies", "chunked", "--tp", "2", "--disagg", "1P1D",
            "--disagg-tp", "1")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["dp"], d["disagg_tp"]) == (1, 1)
    assert {p["policy"]: (p["gpus"], p["layout"]) for p in d["policies"]} == {
        "chunked 8192": (2, "TP 2"), "disagg 1P1D": (2, "1P1D x TP 1")}
    assert any("every policy on 2 GPUs" in n for n in d["notes"])
    r = run("simulate", AZURE, "--json", "--policies", "chunked", "--disagg", "1P1D", "--disagg-tp", "2")
    d = json.loads(r.stdout)
    assert {p["policy"]: p["gpus"] for p in d["policies"]} == {"chunked 8192": 4, "disagg 1P1D": 4}
    assert d["dp"] == 4


@pytest.mark.parametrize("args,contains", [
    (("--disagg-tp", "2"), "apply to --disagg"),
    (("--disagg", "1P1D", "--disagg-tp", "9"), "--disagg-tp"),
    (("--disagg", "1P1D", "--disagg-tp", "0"), "--disagg-tp"),
])
def test_disagg_tp_bad_input(args, contains) -> None:
    assert_one_line_error(run("simulate", AZURE, *args), 2, contains)


def test_disagg_decode_instance_retracts_and_prefills_again(h100) -> None:
    """A decode instance short of KV (a 14,902-token pool) retracts requests and prefills them again
    when it readmits them; every request still finishes once, its tokens all accounted for."""
    small = make_setup(h100, load_model("qwen3-8b"), mem_fraction_static=0.22)
    assert small.kv_pool(-1).tokens == 14902
    trace = synthetic_trace(30.0, "512", "uniform:200:3000", 400, None, 0)
    result = simulate_disagg(trace, small, DisaggPolicy(1, 1, kv_link(h100, 2)))
    assert result.counters["retracted_requests"] == result.counters["re_prefills"] > 0
    assert all(math.isfinite(result.finish_s(r)) for r in range(len(trace))) and not result.rejected
    assert any("retraction(s) on the decode instances" in n for n in render_all(result.notes))
    m = summarize(result, 1e9, 1e9)
    assert m.completed == len(trace) and m.met == len(trace)


def test_a_crashed_replica_is_said_and_the_others_serve() -> None:
    """0.5.23's UnboundLocalError on one replica: the run says how many crashed, that a --dp-size server
    would go down whole, and the requests routed to the others still finish."""
    r = run("simulate", AZURE, "--policies", "pdmux", "--divisions", "112:20:4,96:36:10", "--dp", "2",
            "--json")
    assert r.exit_code == 0, r.stderr
    p = json.loads(r.stdout)["policies"][0]
    assert p["crashed_at_s"] is not None and 0 < p["completed"] < 50
    assert any(("replicas crashed; the others kept serving" in n or "every replica crashed" in n)
               and "--dp-size goes down whole" in n for n in p["notes"])


def test_load_balance_method_on_one_server_is_a_note() -> None:
    r = run("simulate", AZURE, "--policies", "chunked", "--load-balance-method", "total_requests", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["load_balance_method"] is None and d["policies"][0]["router"] is None
    assert any("nothing to route" in n for n in d["notes"])


def test_disagg_only_notes_speak_of_disagg_alone() -> None:
    d = json.loads(run("simulate", AZURE, "--policies", "disagg", "--disagg", "1P2D", "--json").stdout)
    assert (d["dp"], d["gpus"]) == (1, 3)
    assert not any("the others" in n for n in d["notes"])
    assert any(n.startswith("disagg 1P2D on 3 GPUs") for n in d["notes"])


def test_kv_link_overrides_and_sources(h100) -> None:
    """Both overrides make any kind usable, even one the profile lacks; the source says where each
    figure comes from; a link slower than 1 MB/s is a unit slip."""
    link = kv_link(h100, 2, "pcie", gb_per_s=64, latency_us=1)
    assert (link.kind, link.bytes_per_s, link.latency_s) == ("pcie", 64e9, 1e-06)
    assert link.source == "--kv-link-gb-s; latency: --kv-link-latency-us; --kv-link pcie"
    assert kv_link(h100,
                   2).source == ("the H100 SXM5 80GB profile's nvlink figure per GPU and direction; latency: "
                                       "the profile's nvlink latency; 2 GPUs fit one node of 8")
    assert kv_link(h100, 2,
                   gb_per_s=100).source.startswith("--kv-link-gb-s; latency: the profile's nvlink latency")
    for bad in (1e-300, 0.0, -1.0, math.nan, math.inf):
        with pytest.raises(InputError, match="--kv-link-gb-s"):
            kv_link(h100, 2, gb_per_s=bad)
    with pytest.raises(InputError, match="--kv-link-latency-us"):
        kv_link(h100, 2, latency_us=2e6)
    with pytest.raises(InputError, match="give both"):
        kv_link(h100, 2, "pcie", gb_per_s=64)


@pytest.mark.parametrize("args,contains", [
    (("--disagg", "33P32D"), "--disagg 33P32D: the other policies would need 65 replicas"),
    (("--disagg", "1P1D", "--disagg-tp", "3"), "use a --disagg-tp that divides"),
])
def test_disagg_errors_name_the_disagg_options(args, contains) -> None:
    assert_one_line_error(run("simulate", AZURE, *args), 2, contains)


def test_disagg_ttft_parts_add_up(setup, busy_trace) -> None:
    """The note's TTFT parts (prefill, link wait, transfer, decode-side wait) add up to the mean TTFT."""
    result = simulate_disagg(busy_trace, setup, DisaggPolicy(1, 1, kv_link(find_gpu("h100"), 2)))
    m = summarize(result, 1000, 60)
    ttft = [x for x in m.per_request["ttft_ms"] if not math.isnan(x)]
    c = result.counters
    parts = (c["ttft_prefill_ms_mean"] + c["ttft_link_wait_ms_mean"] + c["ttft_transfer_ms_mean"]
             + c["ttft_decode_side_wait_ms_mean"])
    assert parts == pytest.approx(sum(ttft) / len(ttft))
    assert c["ttft_transfer_ms_mean"] == pytest.approx(c["kv_transfer_ms_mean"])
    assert c["ttft_decode_side_wait_ms_mean"] >= 0 and c["ttft_prefill_ms_mean"] > 0
    assert any(n.startswith("TTFT mean ") for n in result.notes)


def test_csv_says_which_server_served_each_request(tmp_path) -> None:
    import csv

    out = tmp_path / "r.csv"
    r = run("simulate", AZURE, "--policies", "chunked", "--disagg", "1P2D", "--csv", str(out))
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(out.open()))
    chunked = [row for row in rows if row["policy"] == "chunked 8192"]
    disagg = [row for row in rows if row["policy"] == "disagg 1P2D"]
    assert len(chunked) == len(disagg) == 50
    assert [row["server"] for row in chunked] == [str(i % 3) for i in range(50)]  # round robin over DP 3
    assert {row["prefill_server"] for row in chunked} == {""}
    assert {row["prefill_server"] for row in disagg} == {"0"} and {row["server"] for row in disagg} == {
        "0", "1"}
    out1 = tmp_path / "one.csv"
    assert run("simulate", AZURE, "--policies", "chunked", "--csv", str(out1)).exit_code == 0
    assert {row["server"] for row in csv.DictReader(out1.open())} == {""}


def test_more_replicas_than_requests_is_noted(setup) -> None:
    trace = Trace((0.0, 0.5), (256, 256), (8, 8), source="two")
    result = simulate_dp(trace, setup, ChunkedPolicy(8192), 8)
    assert "6 of 8 replicas got no request (2 routed)" in result.notes


def test_rdma_source_reads_flat(h100) -> None:
    source = kv_link(h100, 16).source
    assert source == ("RDMA 400 Gb/s per GPU, line rate: one ConnectX-7 port per GPU, NVIDIA datasheet; "
                      "latency: NCCL tuning.cc hwLat NET; 16 GPUs span nodes of 8")
    with pytest.raises(InputError, match="--kv-link-gb-s"):
        kv_link(h100, 2, gb_per_s=1e300)


def test_one_instance_a_side_routes_nothing() -> None:
    r = run("simulate", AZURE, "--policies", "disagg", "--disagg", "1P1D", "--load-balance-method",
            "total_requests", "--json")
    d = json.loads(r.stdout)
    assert d["load_balance_method"] is None and d["policies"][0]["router"] is None
    assert any("nothing to route" in n for n in d["notes"])
    d = json.loads(run("simulate", AZURE, "--policies", "disagg", "--disagg", "1P2D", "--json").stdout)
    assert d["load_balance_method"] == "round_robin" and d["policies"][0]["router"] == "round_robin"
