"""bench_serving's generated-shared-prefix dataset (``--dataset-name generated-shared-prefix``): the trace
against bench_serving's own construction (counts, lengths, order, arrivals, the shared prefix), the
radix-cache hits of simulated runs against hand-computed ones, the CLI, the API and bad input.

The literals were confirmed against SGLang 0.5.23's own generator by ``benchmarks/check_gsp_trace.py``
(SGLang's ``sample_generated_shared_prefix_requests`` run on a fake tokenizer, token-id prompts)."""

from __future__ import annotations

import json
import math
import random

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

import pdmux
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.simulate import traces
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.runner import simulate_metrics
from pdmux_cli.simulate.schedulers import ChunkedPolicy, MixedChunkPolicy, PdmuxPolicy, PrefillFirstPolicy
from pdmux_cli.simulate.traces import GSP_DEFAULTS, generated_shared_prefix_trace
from pdmux_cli.util.errors import InputError

runner = CliRunner()
SETUP = make_setup(find_gpu("h100"), load_model("qwen3-8b"))
POLICIES = [PdmuxPolicy(), ChunkedPolicy(8192), ChunkedPolicy(512), MixedChunkPolicy(512),
            PrefillFirstPolicy()]


def group_of(trace, i: int, system: int) -> int:
    """The group of request ``i`` (its first hash id names its group's system prompt's first token)."""
    return trace.hash_ids[i][0] // system


# ---- the trace against bench_serving ---------------------------------------------------------------


def test_defaults_are_sglang_0_5_23s() -> None:
    """benchmark/serving.py: --gsp-num-groups 64, --gsp-prompts-per-group 16, --gsp-system-prompt-len 2048,
    --gsp-question-len 128, --gsp-output-len 256, --gsp-range-ratio 1.0."""
    assert GSP_DEFAULTS == {"num_groups": 64, "prompts_per_group": 16, "system_prompt_len": 2048,
                            "question_len": 128, "output_len": 256, "range_ratio": 1.0}


def test_default_dataset_counts_lengths_and_order() -> None:
    """64 x 16 prompts of 2048 + 128 tokens and 256 outputs (SGLang prints 2228224 input and 262144 output
    tokens); each group's 16 prompts share its 2048 system tokens and nothing else; shuffled for seed 42
    into SGLang's order."""
    t = generated_shared_prefix_trace(math.inf, seed=42)
    assert len(t) == 1024 and t.format == "synthetic" and t.block_tokens == 1
    assert set(t.prompt_tokens) == {2176} and set(t.output_tokens) == {256} and set(t.arrival_s) == {0.0}
    assert sum(t.prompt_tokens) == 2228224 and sum(t.output_tokens) == 262144
    groups = [group_of(t, i, 2048) for i in range(len(t))]
    assert groups[:16] == [39, 7, 8, 25, 56, 52, 19, 47, 58, 11, 32, 42, 17, 45, 1, 13]
    assert sorted(groups) == [g for g in range(64) for _ in range(16)]
    seen = set()
    for i, ids in enumerate(t.hash_ids):
        g = groups[i]
        assert len(ids) == 2176 and ids[:2048] == tuple(range(g * 2048, (g + 1) * 2048))
        question = ids[2048:]
        assert min(question) >= 64 * 2048 and not seen & set(question)  # every question its own tokens
        seen.update(question)


def test_ordered_keeps_the_groups_in_turn() -> None:
    t = generated_shared_prefix_trace(math.inf, 4, 3, 700, 50, 20, ordered=True)
    assert [group_of(t, i, 700) for i in range(12)] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]


@pytest.mark.parametrize("args, totals", [
    ((4.0, 8, 5, 700, 300, 64, 0.5, False, 7), (29465, 1908)),
    ((math.inf, 6, 6, 1000, 200, 100, 0.9, False, 11), (41596, 3399)),
])
def test_range_ratio_lengths_give_the_totals_sglang_prints(args, totals) -> None:
    """With --gsp-range-ratio < 1 every system prompt, question and output is drawn: the input and output
    token totals SGLang's generator prints for these settings (token-id prompts)."""
    t = generated_shared_prefix_trace(*args)
    assert (sum(t.prompt_tokens), sum(t.output_tokens)) == totals
    assert len(t) == args[1] * args[2]


def _bench_serving(seed, groups, per_group, system, question, output, ratio, ordered, rate):
    """bench_serving's construction, step by step as SGLang 0.5.23 runs it: random.seed and np.random.seed;
    compute_random_lens for the system prompts, the questions, the outputs; gen_prompt_ids
    (random.choices of the vocabulary) for every system prompt, then every question; the prompts group by
    group, shuffled unless ordered; then get_request's np.random.exponential(1 / rate) between sends."""
    np = pytest.importorskip("numpy")
    random.seed(seed)
    np.random.seed(seed)

    def lens(full, num):
        return np.random.randint(max(int(full * ratio), 1), full + 1, size=num).tolist()

    system_lens, question_lens, output_lens = lens(system, groups), lens(question, groups * per_group), \
        lens(output, groups * per_group)
    vocab = list(range(151936))
    system_prompts = [random.choices(vocab, k=n) for n in system_lens]
    questions = [random.choices(vocab, k=n) for n in question_lens]
    rows = [(system_prompts[s // per_group] + questions[s], output_lens[s])
            for s in range(groups * per_group)]
    if not ordered:
        random.shuffle(rows)
    times, t = [], 0.0
    for _ in rows:
        times.append(t)
        if rate != math.inf:
            t += np.random.exponential(1.0 / rate)
    return rows, times


@pytest.mark.parametrize("setting", [
    (0, 4, 3, 700, 50, 20, 1.0, False, math.inf),
    (0, 64, 16, 2048, 128, 256, 1.0, False, 8.0),
    (7, 8, 5, 700, 300, 64, 0.5, False, 4.0),
    (3, 5, 4, 333, 40, 10, 1.0, True, 2.5),
])
def test_trace_is_bench_servings_requests_in_its_order_and_arrivals(setting) -> None:
    """Lengths, order, arrival times and the tokens any two prompts share (what SGLang's radix cache, page
    size 1, matches) equal bench_serving's own construction, redone with numpy and Python's random."""
    seed, groups, per_group, system, question, output, ratio, ordered, rate = setting
    rows, times = _bench_serving(*setting)
    t = generated_shared_prefix_trace(rate, groups, per_group, system, question, output, ratio, ordered, seed)
    assert list(t.prompt_tokens) == [len(p) for p, _ in rows]
    assert list(t.output_tokens) == [o for _, o in rows]
    assert list(t.arrival_s) == times
    pairs = random.Random(1).sample([(i, j) for i in range(len(rows)) for j in range(i)], min(400, len(rows)))
    for i, j in pairs:
        a, b = rows[i][0], rows[j][0]
        tokens = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        hi, hj = t.hash_ids[i], t.hash_ids[j]
        ids = next((k for k, (x, y) in enumerate(zip(hi, hj)) if x != y), min(len(hi), len(hj)))
        assert ids * t.block_tokens == tokens, (i, j)


def test_max_requests_and_duration_cut_the_sent_order() -> None:
    whole = generated_shared_prefix_trace(8.0)
    first = generated_shared_prefix_trace(8.0, num_requests=100)
    assert len(first) == 100 and list(first.arrival_s) == list(whole.arrival_s[:100])
    assert list(first.hash_ids) == list(whole.hash_ids[:100])
    within = generated_shared_prefix_trace(8.0, duration_s=10.0)
    assert within.arrival_s[-1] <= 10.0 < whole.arrival_s[len(within)]


def test_a_trace_past_the_hash_budget_takes_system_prompt_blocks_then_wider(monkeypatch) -> None:
    """Past MAX_GSP_BLOCKS token ids: blocks of the system prompts' common divisor (each system prompt whole
    blocks, a note); past it again wider blocks, a system prompt sharing its whole blocks only (a note)."""
    monkeypatch.setattr(traces, "MAX_GSP_BLOCKS", 5_000)
    t = generated_shared_prefix_trace(math.inf, 4, 3, 700, 50, 20)
    assert t.block_tokens == 700 and [n.code for n in t.notes] == ["trace.gsp_block_system"]
    # one block the group's system prompt (ids 0-3), one the request's question (from 4 on)
    assert all(len(h) == 2 and h[0] < 4 <= h[1] for h in t.hash_ids)
    assert sorted(h[0] for h in t.hash_ids) == [g for g in range(4) for _ in range(3)]
    monkeypatch.setattr(traces, "MAX_GSP_BLOCKS", 100)
    wide = generated_shared_prefix_trace(math.inf, 4, 3, 700, 50, 20, range_ratio=0.5)
    assert wide.block_tokens > 1 and [n.code for n in wide.notes] == ["trace.gsp_block_widened"]
    assert "go uncached" in str(wide.notes[0])


# ---- the radix cache's hits -------------------------------------------------------------------------


@pytest.mark.parametrize("pol", POLICIES, ids=lambda p: p.label)
def test_one_request_at_a_time_every_group_misses_once_then_hits_its_system_prompt(pol) -> None:
    """A closed-loop client of one (bench_serving --max-concurrency 1): the first prompt of each of 8 groups
    misses, the other 3 find the 700 system tokens: (32 - 8) x 700 / (32 x 750) = 70% of prompt tokens."""
    t = generated_shared_prefix_trace(math.inf, 8, 4, 700, 50, 16)
    m = simulate_metrics(t, SETUP, pol, 1000, 60, max_concurrency=1)
    assert m.prefix_cache_hit_rate == pytest.approx(24 * 700 / (32 * 750), abs=1e-12)


def test_default_dataset_hit_rate_one_at_a_time() -> None:
    """bench_serving's default dataset: 960 of 1024 prompts find 2048 of their 2176 tokens: 88.24%."""
    t = generated_shared_prefix_trace(math.inf)
    m = simulate_metrics(t, SETUP, ChunkedPolicy(8192), 1000, 60, max_concurrency=1)
    assert m.prefix_cache_hit_rate == pytest.approx(960 * 2048 / (1024 * 2176), abs=1e-12)


def test_a_system_prompt_still_in_chunks_is_matched_token_by_token() -> None:
    """Two prompts of one group sent at once, chunks of 512 (the front end's interval off, both seen at
    once): the first is cut after 512 tokens; SGLang caches that chunk (cache_unfinished_req) before the
    next batch, where the second finds 512 of its 750 tokens, as here: 512 / 1500. Whole prompts in one
    batch share nothing (both matched before either ran)."""
    setup = make_setup(find_gpu("h100"), load_model("qwen3-8b"), admission_interval_ms=0)
    t = generated_shared_prefix_trace(math.inf, 1, 2, 700, 50, 20, ordered=True)
    assert simulate_metrics(t, setup, ChunkedPolicy(512), 1000, 60).prefix_cache_hit_rate == 512 / 1500
    assert simulate_metrics(t, setup, MixedChunkPolicy(512), 1000, 60).prefix_cache_hit_rate == 512 / 1500
    assert simulate_metrics(t, setup, ChunkedPolicy(8192), 1000, 60).prefix_cache_hit_rate == 0.0


# ---- the CLI and the API ----------------------------------------------------------------------------


def test_simulate_cli_json_and_api_agree() -> None:
    args = ["--dataset-name", "generated-shared-prefix", "--qps", "inf", "--gsp-num-groups", "8",
            "--gsp-prompts-per-group", "4", "--gsp-system-prompt-len", "700", "--gsp-question-len", "50",
            "--gsp-output-len", "16", "--max-concurrency", "1", "--policies", "pdmux,chunked",
            "--workers", "1"]
    r = runner.invoke(app, ["simulate", *args, "--json"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["trace"]["requests"] == 32 and data["trace"]["prefix_block_tokens"] == 1
    assert data["trace"]["source"].startswith("bench_serving generated-shared-prefix (8 groups x 4 prompts")
    assert [p["prefix_cache_hit_rate"] for p in data["policies"]] == [pytest.approx(0.7, abs=1e-12)] * 2
    api = pdmux.simulate(dataset_name="generated-shared-prefix", qps=math.inf, gsp_num_groups=8,
                         gsp_prompts_per_group=4, gsp_system_prompt_len=700, gsp_question_len=50,
                         gsp_output_len=16, max_concurrency=1, policies=["pdmux", "chunked"], workers=1)
    assert json.loads(json.dumps(api.to_dict())) == data
    table = runner.invoke(app, ["simulate", *args])
    assert table.exit_code == 0 and "prefix cache hit" in table.stdout and "70.0%" in table.stdout


def test_capacity_takes_the_dataset() -> None:
    r = runner.invoke(app, ["capacity", "--dataset-name", "generated-shared-prefix", "--qps", "4",
                            "--gsp-num-groups", "4", "--gsp-prompts-per-group", "8", "--policies", "chunked",
                            "--workers", "1", "--json"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["requests"] == 32
    assert data["trace"].startswith("bench_serving generated-shared-prefix (4 groups")
    assert data["policies"][0]["max_rate_rps"] > 0


def test_mooncake_traces_keep_512_token_blocks_and_their_json() -> None:
    from pdmux_cli.simulate.report import trace_dict

    t = traces.Trace(arrival_s=(0.0, 1.0), prompt_tokens=(600, 600), output_tokens=(2, 2),
                     hash_ids=((1, 2), (1, 3)))
    assert t.block_tokens == traces.HASH_BLOCK_TOKENS == 512 and "prefix_block_tokens" not in trace_dict(t)


GSP = ["--dataset-name", "generated-shared-prefix", "--qps", "2"]
BAD = [
    (["--dataset-name", "generated-shared-prefix"], "--dataset-name needs --qps"),
    (["--dataset-name", "random", "--qps", "2"], "--prompt-tokens random:L"),
    (["--dataset-name", "sharegpt", "--qps", "2"], "no tokenizer"),
    (["--synthetic", "--qps", "2", "--gsp-num-groups", "4"], "--gsp-num-groups shapes"),
    (["--synthetic", "--qps", "2", "--gsp-ordered"], "--gsp-ordered shapes"),
    (["tests/fixtures/azure_conv_50.csv", "--gsp-question-len", "4"], "add --dataset-name"),
    (["tests/fixtures/azure_conv_50.csv", *GSP], "trace file or --dataset-name"),
    ([*GSP, "--gsp-num-groups", "0"], "--gsp-num-groups"),
    ([*GSP, "--gsp-prompts-per-group", "-1"], "--gsp-prompts-per-group"),
    ([*GSP, "--gsp-system-prompt-len", "0"], "--gsp-system-prompt-len"),
    ([*GSP, "--gsp-question-len", "20000000"], "--gsp-question-len"),
    ([*GSP, "--gsp-output-len", "0"], "--gsp-output-len"),
    ([*GSP, "--gsp-range-ratio", "1.5"], "--gsp-range-ratio"),
    ([*GSP, "--gsp-range-ratio", "nan"], "--gsp-range-ratio"),
    ([*GSP, "--output-tokens", "64"], "--gsp-output-len"),
    (["--dataset-name", "generated-shared-prefix", "--qps", "inf", "--duration", "5"], "--duration"),
    ([*GSP, "--gsp-num-groups", "100000", "--gsp-prompts-per-group", "100000"], "more than the 100,000,000"),
    ([*GSP, "--gsp-system-prompt-len", "10000000", "--gsp-question-len", "10000000"],
     "up to 10,880,000,000 prompt tokens to draw, more than 2,000,000,000"),
]


@pytest.mark.parametrize("command", ["simulate", "capacity"])
@pytest.mark.parametrize("args, fragment", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_dataset_input_is_one_line_exit_2(command, args, fragment) -> None:
    r = runner.invoke(app, [command, *args])
    assert_one_line_error(r, 2, fragment)


def test_api_raises_the_line_naming_the_keyword() -> None:
    """The API's refusal names the keyword (``gsp_num_groups``), where the CLI's names the flag."""
    with pytest.raises(InputError, match="^gsp_num_groups must be an integer, got 2.5") as caught:
        pdmux.simulate(dataset_name="generated-shared-prefix", qps=2.0, gsp_num_groups=2.5)
    assert caught.value.param == "gsp_num_groups"
    with pytest.raises(InputError, match="^gsp_range_ratio must be a number from 0 to 1"):
        pdmux.capacity(dataset_name="generated-shared-prefix", qps=2.0, gsp_range_ratio=-0.1)


def test_the_request_checks_each_gsp_option_before_any_work() -> None:
    """The ``gsp_*`` ranges are the request's (``workflows/fields.py``, one rule with the trace's): a value
    out of range is refused as such, beside a trace file too, before any file is read."""
    from pdmux_cli.workflows.workload import WorkloadOptions

    with pytest.raises(InputError, match="^gsp_num_groups must be a whole number from 1 to 100,000,000, "
                                         "got 0"):
        pdmux.simulate("no-such-trace.csv", gsp_num_groups=0)
    with pytest.raises(InputError, match="^--gsp-range-ratio must be a number from 0 to 1") as caught:
        WorkloadOptions(gsp_range_ratio=float("nan"))  # the CLI's request: its flag
    assert caught.value.param == "gsp_range_ratio"
    assert WorkloadOptions(gsp_range_ratio=0).gsp_range_ratio == 0.0


def test_all_at_once_has_no_mean_rate_in_json():
    """--qps inf: every request at 0 s, so the trace's mean rate is undefined: null, not 0 (fresh-user
    report)."""
    import json

    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    out = CliRunner().invoke(app, ["simulate", "--synthetic", "--qps", "inf", "--max-requests", "20",
                                   "--policies", "chunked", "--json"])
    assert out.exit_code == 0, out.output
    trace = json.loads(out.stdout)["trace"]
    assert trace["duration_s"] == 0 and trace["mean_qps"] is None
