"""SGLang's defaults and scheduler rules per release (``pdmux_cli/sglang/release_defaults.py``) and the
replays that use them (issue 29: each public run replayed on the code it ran).

Every expected number below is worked out by hand from the release's own code (the file and function the
module docstring cites; ``M``: nvidia-smi's MiB), not from pdmux: L4 23034 MiB, A100-40GB 40960, H100 SXM
81559, H200 SXM 143771.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.sglang import release_defaults as rd
from pdmux_cli.sglang.measurement_readers import parse_bench_serving
from pdmux_cli.simulate import serving_accuracy as sa
from pdmux_cli.simulate.engine import build_work, make_setup
from pdmux_cli.simulate.traces import Trace
from pdmux_cli.util.errors import InputError

MIB = 1024**2
L4, A100_40, H100, H200 = 23034 * MIB, 40960 * MIB, 81559 * MIB, 143771 * MIB
# the serving terms at 0: admission and retraction by hand
NO_SERVING = {"per_request_overhead_ms": 0, "admission_delay_ms": 0, "admission_interval_ms": 0,
              "first_token_delay_ms": 0, "eager_launch_ms": 0, "frontend_token_ms": 0}


def test_the_gpu_profiles_report_nvidia_smis_memory() -> None:
    """The sizes below are the profiles' (SGLang reads nvidia-smi's memory.total)."""
    assert [find_gpu(g).memory_bytes for g in ("l4", "a100-sxm-40gb", "h100", "h200")] == [L4, A100_40, H100,
                                                                                              H200]


# (release, GPU memory, TP) -> (default chunk, decode graph max batch, mem_fraction_static)
DEFAULTS = [
    # 0.3.0 server_args.__post_init__: fraction by TP alone; chunk 8192; graphs [1, 2, 4] + 8..160 by 8
    ("0.3.0", L4, 1, 8192, 160, 0.88), ("0.3.0", A100_40, 1, 8192, 160, 0.88),
    ("0.3.0", H100, 1, 8192, 160, 0.88), ("0.3.0", H200, 8, 8192, 160, 0.83),
    # 0.3.6: M < 25000 -> chunk 8192 // 4, cuda_graph_max_bs 4; TP 8 0.82
    ("0.3.6", L4, 1, 2048, 4, 0.88), ("0.3.6", H200, 8, 8192, 160, 0.82),
    # 0.4.0: M < 25000 -> 2048 and 8; TP 8 0.81
    ("0.4.0", L4, 1, 2048, 8, 0.88), ("0.4.0", A100_40, 1, 8192, 160, 0.88),
    ("0.4.0", H200, 4, 8192, 160, 0.85),
    # 0.4.6: M > 81920 -> (M - 13 GiB) / M, graphs to 256
    ("0.4.6", L4, 1, 2048, 8, 0.88), ("0.4.6", A100_40, 1, 8192, 160, 0.88),
    ("0.4.6", H100, 1, 8192, 160, 0.88),
    ("0.4.6", H200, 1, 8192, 256, (143771 - 13312) / 143771),
    # 0.4.7: M > 96 GiB -> min(0.88 + 48 GiB x 0.12 / M, (M - 18 GiB) / M)
    ("0.4.7", H200, 1, 8192, 256, (143771 - 18432) / 143771), ("0.4.7", H100, 1, 8192, 160, 0.88),
    # 0.4.8-0.5.2: reserved (2.8 + TP/10) GiB below 35 GiB, (9.5 + TP/2) below 90, (12 + TP/2) below 160
    ("0.4.8", L4, 1, 2048, 8, 0.871), ("0.4.8", A100_40, 1, 8192, 160, 0.75),
    ("0.5.2", H100, 1, 8192, 160, 0.874),
    ("0.5.1", H200, 1, 8192, 256, 0.911), ("0.5.1", H200, 8, 8192, 256, 0.886),
    # 0.5.3 _handle_gpu_memory_settings: 512 + 1.5 x chunk + 2 x graph + 128 x TP, at least 10 GiB over 60
    ("0.5.3", L4, 1, 2048, 16, 0.837), ("0.5.3", A100_40, 1, 4096, 32, 0.833),
    ("0.5.3", H100, 1, 8192, 256, 0.835),
    ("0.5.3.post3", H200, 1, 8192, 256, 0.907),
    # 0.5.4.post2: 24 graphs below 35 GiB at TP < 4
    ("0.5.6", L4, 1, 2048, 24, 0.837), ("0.5.5.post1", A100_40, 1, 4096, 32, 0.833),
    ("0.5.6", H200, 8, 8192, 512, 0.897),
    # 0.5.10: plus 8 MiB a prefill-graph bucket (42 up to 2048 tokens, 50 to 4096, 58 to 8192)
    ("0.5.10", L4, 1, 2048, 24, 0.822), ("0.5.12", H100, 1, 8192, 256, 0.830),
    # 0.5.20 on (0.5.23's arg_groups/memory_hook.py): 4096 and 48 on a 20-35 GiB GPU
    ("0.5.22", L4, 1, 4096, 48, 0.684), ("0.5.23", L4, 1, 4096, 48, 0.684),
    ("0.5.23", A100_40, 1, 4096, 32, 0.823),
    ("0.5.23", H100, 1, 8192, 256, 0.830), ("0.5.23", H200, 1, 8192, 256, 0.903),
]


@pytest.mark.parametrize("version, memory, tp, chunk, graphs, fraction", DEFAULTS)
def test_memory_defaults_per_release(version, memory, tp, chunk, graphs, fraction) -> None:
    rules = rd.release_defaults(version)
    assert rules.chunked_prefill_size(memory, tp) == chunk
    assert rules.cuda_graph_max_bs(memory, tp) == graphs
    assert rules.mem_fraction_static(memory, chunk, tp) == pytest.approx(fraction, abs=1e-12)


def test_chunking_is_off_by_default_up_to_0_2_12() -> None:
    """0.2.12 server_args.py: chunked_prefill_size -1 (0.2.10: None); 0.2.13: 8192."""
    assert rd.release_defaults("0.2.10").chunked_prefill_size(H100) == -1
    assert rd.release_defaults("0.2.12").cuda_graph_max_bs(H100) == 128
    assert rd.release_defaults("0.2.13").chunked_prefill_size(H100) == 8192
    assert rd.release_defaults("0.2.14").cuda_graph_max_bs(H100) == 160


# --disable-cuda-graph: (release, GPU memory) -> mem_fraction_static, by hand from the release's reserve
WITHOUT_GRAPHS = [
    # up to 0.5.8 (_handle_gpu_memory_settings): the decode graph's 2 x max_bs counts all the same;
    # L4 0.5.6: 512 + 1.5 x 2048 + 2 x 24 + 128 = 3760 MiB
    ("0.5.6", L4, 0.837),
    # 0.5.10-0.5.12: both shares count (the flag turns off neither): 3760 + 8 x 42 buckets = 4096 MiB
    ("0.5.10", L4, 0.822), ("0.5.12", L4, 0.822),
    # 0.5.14: the prefill share only under prefill_cuda_graph_config.backend != DISABLED: 3760 MiB
    ("0.5.14", L4, 0.837), ("0.5.14", A100_40, 0.833),
    # 0.5.16 on (reserve_for_graph_mb): neither: 512 + 3072 + 128 = 3712 MiB; A100-40: 6784 MiB
    ("0.5.16", L4, 0.839), ("0.5.18", A100_40, 0.834),
]


@pytest.mark.parametrize("version, memory, fraction", WITHOUT_GRAPHS)
def test_mem_fraction_without_cuda_graphs_per_release(version, memory, fraction) -> None:
    rules = rd.release_defaults(version)
    chunk = rules.chunked_prefill_size(memory)
    assert rules.mem_fraction_static(memory, chunk, graphs=False) == pytest.approx(fraction, abs=1e-12)


def _outcome(function, *args, **kw) -> object:
    """``function``'s value, or the text of the InputError it raises."""
    try:
        return function(*args, **kw)
    except InputError as exc:
        return str(exc)


def test_0_5_23_is_server_defaults() -> None:
    """0.5.23's rules are server_defaults' functions: every command's output is unchanged."""
    from pdmux_cli.sglang import server_defaults as sgl

    latest = rd.LATEST
    for memory in (L4, A100_40, H100, H200, find_gpu("b200").memory_bytes):
        for tp in (1, 4, 8):
            assert latest.chunked_prefill_size(memory, tp) == sgl.default_chunked_prefill_size(memory, tp)
            assert latest.cuda_graph_max_bs(memory, tp) == sgl.default_cuda_graph_max_bs(memory, tp)
            for chunk in (-1, 2048, 8192):
                for graphs in (True, False):
                    assert _outcome(latest.mem_fraction_static, memory, chunk, tp, graphs=graphs) == _outcome(
                        sgl.mem_fraction_static, memory, chunk, tp, graphs=graphs)
    assert latest.max_running_requests(100_000, 131072) == sgl.max_running_requests(100_000, 131072)
    assert (latest.min_new_token_ratio, latest.new_token_ratio_decay) == (sgl.MIN_NEW_TOKEN_RATIO,
                                                                         sgl.NEW_TOKEN_RATIO_DECAY)
    setup = make_setup(find_gpu("h100"), load_model("qwen3-8b"))
    assert setup.release is rd.LATEST and setup.serial_frontend is False


def test_max_running_requests_up_to_0_3_0() -> None:
    """0.3.0 model_runner.py init_memory_pool: clamp(..., 2048, 5120); tp_worker.py: the pool's size - 1."""
    old, new = rd.release_defaults("0.3.0"), rd.release_defaults("0.3.5")
    assert old.max_running_requests(100_000, 131072) == 2047
    assert new.max_running_requests(100_000, 131072) == 2048
    assert old.max_running_requests(3_000, 131072) == 1500
    assert old.max_running_requests(2_000_000, 8192) == 5119
    assert new.max_running_requests(2_000_000, 8192) == 4096


@pytest.mark.parametrize("version, rules", [
    ("0.3.0", (False, 20, False, 0.1, 0.001, True)),
    ("0.4.6", (False, 20, False, 0.7 * 0.14, (0.7 - 0.7 * 0.14) / 600, True)),
    ("0.5.1", (False, 20, False, 0.7 * 0.14, (0.7 - 0.7 * 0.14) / 600, True)),
    ("0.5.2", (False, 1, False, 0.7 * 0.14, (0.7 - 0.7 * 0.14) / 600, True)),
    ("0.5.3.post3", (False, 1, False, 0.7 * 0.14, (0.7 - 0.7 * 0.14) / 600, True)),
    ("0.5.4", (False, 1, True, 0.7 * 0.14, (0.7 - 0.7 * 0.14) / 600, True)),
    ("0.5.21", (False, 1, True, 0.7 * 0.14, (0.7 - 0.7 * 0.14) / 600, True)),
    ("0.5.22", (True, 1, True, 0.7 * 0.14, (0.7 - 0.7 * 0.14) / 600, False)),
])
def test_scheduler_rules_per_release(version, rules) -> None:
    """schedule_policy.py PrefillAdder (ratio 1.0 for ignore_eos from 0.5.22), schedule_batch.py
    retract_decode (20 tokens a kept request up to 0.5.1; + 1 in the ratio's denominator from 0.5.4),
    global_config.py (floor 0.1, decay 0.001 up to 0.3.0), serving_base.py (executor from 0.5.22)."""
    r = rd.release_defaults(version)
    got = (r.full_reserve_for_ignore_eos, r.retract_steps, r.retract_ratio_plus_one, r.min_new_token_ratio,
           r.new_token_ratio_decay, r.serial_frontend)
    assert got[:3] == rules[:3] and got[5] == rules[5]
    assert got[3:5] == pytest.approx(rules[3:5], rel=1e-12)


@pytest.mark.parametrize("version, topk1, topk4", [
    # server_args.py __post_init__: speculation sets disable_overlap_schedule = True
    ("0.4.3", False, False), ("0.4.6", False, False), ("0.4.9", False, False), ("0.5.2", False, False),
    # --enable-beta-spec (default False), then SGLANG_ENABLE_SPEC_V2 = EnvBool(False) in environ.py
    ("0.5.4", False, False), ("0.5.5.post3", False, False), ("0.5.6", False, False), ("0.5.10", False, False),
    # EnvBool(True); topk > 1: "spec v2 currently only supports topk = 1", overlap off
    ("0.5.11", True, False), ("0.5.12.post1", True, False),
    # arg_groups/speculative_hook.py _handle_eagle_family: no topk condition; the variable gone in 0.5.14
    ("0.5.13", True, True), ("0.5.14", True, True), ("0.5.20", True, True), ("0.5.23", True, True),
])
def test_overlap_scheduler_under_speculation_per_release(version, topk1, topk4) -> None:
    """Whether SGLang's overlap scheduler runs beside speculative decoding by default (module docstring)."""
    r = rd.release_defaults(version)
    assert (r.speculation_overlaps(1), r.speculation_overlaps(4)) == (topk1, topk4)


@pytest.mark.parametrize("text, key", [
    ("0.5.6", (0, 5, 6, 2, 0)), ("v0.5.6.post1", (0, 5, 6, 2, 1)), ("0.5.0rc2", (0, 5, 0, 1, 2)),
    ("0.5.24.dev3+g1234", (0, 5, 24, 0, 3)), ("0.4.6-cu124", (0, 4, 6, 2, 0)), ("0.5", (0, 5, 0, 2, 0)),
])
def test_version_parsing(text, key) -> None:
    assert rd.parse_version(text) == key


def test_versions_order_and_fall_to_the_last_release_read() -> None:
    p = rd.parse_version
    assert p("0.5.0rc0") < p("0.5.0rc2") < p("0.5.0") < p("0.5.0.post1") < p("0.5.1") < p("0.5.10")
    assert rd.release_defaults("v0.5.6.post1").release == "0.5.6.post1"
    # a release between two read ones takes the earlier one's rules; a later one 0.5.23's
    assert replace(rd.release_defaults("0.5.7"), release="0.5.6") == rd.release_defaults("0.5.6")
    assert replace(rd.release_defaults("0.5.4.post1"), release="0.5.4") == rd.release_defaults("0.5.4")
    assert replace(rd.release_defaults("0.5.24.dev1"), release="0.5.23") == rd.LATEST
    for bad in ("latest", "", "0.1.9", None):
        with pytest.raises(InputError):
            rd.release_defaults(bad)


# ---- the engine under each release's rules ----------------------------------------------------------
def _work(version: str, running: list[tuple[int, int]], trace: Trace, capacity: int, ignore_eos: bool = True):
    setup = make_setup(find_gpu("h100"), load_model("qwen3-8b"), ignore_eos=ignore_eos, release=version,
                       **NO_SERVING)
    work = build_work(trace, setup, capacity, initial_decode=running)
    work.receive(0.0)
    return work


def test_admission_reserve_for_ignore_eos_requests() -> None:
    """Two running requests with 2000 outputs to go, four waiting of 1000 + 1001 tokens, 10,000 slots.
    Free: 10,000 - 200 = 9,800. Up to 0.5.21 the running requests reserve new_token_ratio (0.7) x 4000 =
    2,800: 7,000 left, each admission needs 1000 + 1001 + 1 = 2,002 < what is left and then takes it:
    three pass (7000, 4998, 2996 > 2002; 994 not). From 0.5.22 (ignore_eos) they reserve 4,000: 5,800
    left, two pass (5800, 3798; 1796 not)."""
    trace = Trace(arrival_s=(0.0,) * 4, prompt_tokens=(1000,) * 4, output_tokens=(1001,) * 4)
    running = [(100, 2000)] * 2
    admitted = {v: len(_work(v, running, trace, 10_000).form_prefill_batch(None)[0])
                for v in ("0.5.21", "0.5.22")}
    assert admitted == {"0.5.21": 3, "0.5.22": 2}
    # without ignore_eos 0.5.22 reserves at the ratio too
    assert len(_work("0.5.22", running, trace, 10_000, ignore_eos=False).form_prefill_batch(None)[0]) == 3


def test_retraction_target_and_ratio() -> None:
    """Twenty running requests of 30 tokens (one output each, 50 to go) and 10 slots held by a prefill in
    flight in a pool of 620: 10 free for 20 requests. From 0.5.2 retraction stops once a decode step fits
    (one retraction: 40 free for 19); up to 0.5.1 once 20 tokens a kept request are free (10 + 30k >= 20 x
    (20 - k): eight). new_token_ratio after it: (outputs + 20 x kept) / max_new (+ 1 from 0.5.4), max_new
    51 a request."""
    trace = Trace(arrival_s=(), prompt_tokens=(), output_tokens=())
    retracted, ratio = {}, {}
    for version in ("0.5.1", "0.5.2", "0.5.3", "0.5.4"):
        work = _work(version, [(30, 50)] * 20, trace, 620)
        work.extra_held = 10
        retracted[version] = len(work.check_decode_memory())
        ratio[version] = work.ratio
        assert work.batch.n == 20 - retracted[version]
    assert retracted == {"0.5.1": 8, "0.5.2": 1, "0.5.3": 1, "0.5.4": 1}
    assert ratio["0.5.1"] == pytest.approx((12 + 20 * 12) / (12 * 51), rel=1e-12)
    assert ratio["0.5.3"] == pytest.approx((19 + 20 * 19) / (19 * 51), rel=1e-12)
    assert ratio["0.5.4"] == pytest.approx((19 + 20 * 19) / (19 * 51 + 1), rel=1e-12)


def test_ratio_decays_to_the_release_floor() -> None:
    """Up to 0.3.0: 0.001 a step down to 0.1 (global_config.py); from 0.3.5 to 0.7 x 0.14."""
    trace = Trace(arrival_s=(), prompt_tokens=(), output_tokens=())
    for version, floor in (("0.3.0", 0.1), ("0.4.0", 0.7 * 0.14)):
        work = _work(version, [(30, 50)], trace, 620)
        for _ in range(700):
            work.decay_ratio()
        assert work.ratio == pytest.approx(floor, rel=1e-12)
        work.idle()
        assert work.ratio == 0.7


def test_setup_takes_the_release_defaults() -> None:
    """make_setup(release=...): the KV pool, decode graph, front end and prefill graph of that release."""
    l4, qwen = find_gpu("l4"), load_model("Qwen2.5-7B-Instruct")
    old = make_setup(l4, qwen, release="0.5.6")
    new = make_setup(l4, qwen)
    assert (old.default_chunk_tokens, old.graph_max_bs) == (2048, 24)
    assert (new.default_chunk_tokens, new.graph_max_bs) == (4096, 48)
    assert (old.kv_pool(2048).mem_fraction_static, new.kv_pool(4096).mem_fraction_static) == (0.837, 0.684)
    assert old.kv_pool(2048).tokens > 7 * new.kv_pool(4096).tokens  # 0.5.23's reserve leaves ~9.7k tokens
    assert (old.serial_frontend, old.prefill_cuda_graph) == (True, False)
    assert make_setup(l4, qwen, release="0.5.6", serial_frontend=False).serial_frontend is False


@pytest.mark.parametrize(("version", "trtllm"), [("0.5.6", False), ("0.5.6.post2", False), ("0.5.7", False),
                                              ("0.5.8", True), ("0.5.23", True)])
def test_qwen3_moe_bf16_runner_per_release(version, trtllm) -> None:
    """SM100's fused-MoE runner for bf16 Qwen3 MoE experts: Triton up to 0.5.7, flashinfer_trtllm from 0.5.8
    (``server_args.py`` ``_handle_model_specific_adjustments``); make_setup hands it to the step model."""
    assert rd.release_defaults(version).qwen3_moe_bf16_trtllm is trtllm
    setup = make_setup(find_gpu("b200"), load_model("qwen3-235b-a22b"), tp=8, release=version)
    assert setup.step_model.eff.moe_routed.latency_s == (1.35e-05 if trtllm else 3.594e-05)


def test_the_printed_command_carries_the_release_moe_runner() -> None:
    """A 0.5.6 run of a bf16 Qwen3 MoE on a B200 ran Triton's fused MoE: its printed command says
    ``--moe-runner-backend triton`` and replays its ITL; a run whose runner 0.5.23 keeps gets no flag."""
    import shlex

    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    runs = {r.id: r for r in sa.load_runs()}
    run = runs["cookbook-b200-qwen3-235b-a22b-tp8-1000-1000-c1"]
    assert run.moe_runner_flags() == ["--moe-runner-backend", "triton"]
    assert runs["cookbook-b200-deepseek-v3-tp8-1000-1000-c1"].moe_runner_flags() == []
    out = CliRunner().invoke(app, [*shlex.split(run.command())[1:], "--json"])
    assert out.exit_code == 0, out.stderr
    itl = json.loads(out.stdout)["policies"][0]["itl_ms"]["p50"]
    assert itl == pytest.approx(sa.replay(run)["itl_p50_ms"], rel=1e-6)


# ---- the replays ------------------------------------------------------------------------------------------
def test_every_shipped_run_names_its_release() -> None:
    """sglang_version on every run; the lower release, said in the notes, where the engine text is
    approximate ("~v0.4.0/v0.4.1", "~v0.4.6", "main (Aug 2024)", a Docker :latest)."""
    for run in [*sa.load_runs(), *sa.load_runs(sa.HELDOUT_RUNS)]:
        assert rd.parse_version(run.sglang_version) <= rd.parse_version(rd.LATEST_RELEASE), run.id
        approximate = any(x in run.engine for x in ("~", "main (", ":latest"))
        assert approximate == (f"sglang_version {run.sglang_version}:" in run.notes), run.id
        if not approximate:
            assert run.sglang_version in run.engine, run.id
    by_id = {r.id: r for r in sa.load_runs()}
    assert by_id["datacrunch-h200-llama70b-tp4-random1024-rate16"].sglang_version == "0.4.0"
    assert by_id["sglang-pr1060-h100-llama8b-prefill"].sglang_version == "0.2.10"
    assert by_id["cookbook-a100-sxm-80gb-llama-3.1-70b-tp8-1000-1000-c16"].sglang_version == "0.5.6"


def test_the_loader_refuses_a_run_without_a_release(tmp_path, monkeypatch) -> None:
    (tmp_path / "serving").mkdir()
    entry = ("format: pdmux-serving-runs/1\nruns:\n- id: r\n  source_url: https://x/y\n  gpu: h100\n  model: "
             "qwen3-8b\n  workload: {{lengths: {{kind: fixed, input: 10, output: 10}}, request_rate: 1, "
             "num_prompts: 2}}\n  metrics: [{{metric: ttft_p50_ms, measured: 5}}]\n{extra}")
    monkeypatch.setattr(sa, "measurements_dir", lambda: tmp_path)
    for name, extra, problem in (("a.yaml", "", "no sglang_version"),
                                 ("b.yaml", "  sglang_version: '0.1.0'\n", "older than"),
                                 ("c.yaml", "  sglang_version: soon\n", "not a release number")):
        (tmp_path / "serving" / name).write_text(entry.format(extra=extra))
        with pytest.raises(InputError, match=problem):
            sa.load_runs(name)
    (tmp_path / "serving" / "d.yaml").write_text(entry.format(extra="  sglang_version: v0.5.6.post1\n"))
    assert sa.load_runs("d.yaml")[0].release.release == "0.5.6.post1"


def test_a_run_replayed_on_its_release() -> None:
    """datacrunch's H200 TP 4 run at 16 req/s (SGLang ~0.4.0, ignore_eos): 0.4's admission reserved the
    running requests' outputs at new_token_ratio, so the server admitted every request; under 0.5.23's
    rule (1.0) the simulated queue grew for the whole run (the +8000% TTFT pdmux gave before)."""
    run = {r.id: r for r in sa.load_runs()}["datacrunch-h200-llama70b-tp4-random1024-rate16"]
    measured = dict(run.metrics)["ttft_p50_ms"]
    own = sa.replay(run)["ttft_p50_ms"]
    latest = sa.replay(replace(run, sglang_version=rd.LATEST_RELEASE))["ttft_p50_ms"]
    assert abs(own / measured - 1) < 0.5 and latest > 10 * measured


def test_the_printed_command_carries_the_release_memory_defaults() -> None:
    runs = {r.id: r for r in sa.load_runs()}
    pr1060 = runs["sglang-pr1060-h100-llama8b-prefill"].command()  # 0.2.10: chunking off, graphs to 128
    assert "--policies prefill-first" in pr1060 and "--cuda-graph-max-bs 128" in pr1060
    assert "--mem-fraction-static 0.88" in pr1060 and "--policies chunked" not in pr1060
    h200 = runs["sglang-attn-backend-h200-llama8b-1024-1024"].command()  # 0.4.6: (M - 13 GiB) / M, unrounded
    assert f"--mem-fraction-static {(143771 - 13312) / 143771!r}" in h200
    assert "--chunk-sizes" not in h200  # 8192, as 0.5.23's on an H200
    latest = replace(runs["sglang-attn-backend-h200-llama8b-1024-1024"], sglang_version=rd.LATEST_RELEASE)
    assert "--mem-fraction-static" not in latest.command()


def _bench_serving(version: object) -> list:
    server = {"tp_size": 1} if version is None else {"tp_size": 1, "version": version}
    line = ('{"request_rate": 2, "completed": 3, "median_ttft_ms": 5, "input_lens": [10, 20, 30], '
            f'"output_lens": [5, 5, 5], "server_info": {json.dumps(server)}}}\n')
    results, problems = parse_bench_serving(line, "r.jsonl")
    assert not problems
    return results


@pytest.mark.parametrize("version, release, said", [
    ("0.4.6", "0.4.6", "SGLang 0.4.6's defaults and rules (server_info)"),
    ("0.5.6.post1", "0.5.6.post1", "SGLang 0.5.6.post1's"),
    (None, "0.5.23", "no SGLang version in server_info"),
    ("unknown", "0.5.23", "not a release number"),
])
def test_a_users_runs_take_server_infos_version(version, release, said) -> None:
    runs, notes = sa.runs_from_bench_serving(_bench_serving(version), "l4", "Qwen2.5-7B-Instruct")
    assert runs[0].sglang_version == release and said in notes[0]
    assert runs[0].serial_frontend == (release != "0.5.23")
