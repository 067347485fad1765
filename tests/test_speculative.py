"""Speculative decoding (issue 30): SGLang 0.5.23's flags and start-up rules, the round's cost, the
simulator's rounds, the per-revision verdict beside pdmux, and the accept length read from a server log."""

from __future__ import annotations

import json

import pytest

from pdmux_cli.costmodel.efficiency import load_serving
from typer.testing import CliRunner

import pdmux
from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.costmodel import build_step_model
from pdmux_cli.sglang.measurement_readers import parse_server_log
from pdmux_cli.sglang.speculative_args import (
    Speculation,
    auto_params,
    check_pdmux_speculation,
    default_draft,
    resolve_speculation,
)
from pdmux_cli.util.errors import InputError

runner = CliRunner()
EAGLE = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "4", "--speculative-accept-length", "2.5"]


@pytest.fixture(scope="module")
def qwen():
    return load_model("Qwen3-8B")


def test_auto_params_follow_sglang(qwen):
    # SGLang 0.5.23 _auto_choose_speculative_params: Llama (5, 4, 8); Qwen and the rest (3, 1, 4)
    assert auto_params("EAGLE", load_model("Llama-3.1-8B")) == (5, 4, 8)
    assert auto_params("EAGLE", qwen) == (3, 1, 4)
    assert auto_params("STANDALONE", load_model("Llama-3.1-8B")) == (3, 1, 4)
    spec, notes = resolve_speculation(qwen, "mtp", None, None, None, 2.0)
    assert (spec.algorithm, spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == ("NEXTN", 3, 1, 4)
    assert spec.sglang_algorithm == "EAGLE"
    assert [n.code for n in notes] == ["speculative.auto_params"]


def test_topk_one_draft_tokens_adjusted_as_sglang_does(qwen):
    spec, notes = resolve_speculation(qwen, "EAGLE", 3, 1, 8, 2.5)
    assert spec.num_draft_tokens == 4
    assert notes[0].code == "speculative.draft_tokens_adjusted"
    assert notes[0].values["given"] == 8


@pytest.mark.parametrize(("args", "param"), [
    (("EAGLE", 3, 4, 3, 2.0), "speculative_num_draft_tokens"),     # a tree too small for its depth
    (("EAGLE", 3, 4, 14, 2.0), "speculative_num_draft_tokens"),    # more than topk x steps + 1 nodes
    (("EAGLE", 3, 1, 4, 4.5), "speculative_accept_length"),        # above num-steps + 1
    (("EAGLE", 3, 1, 4, 0.9), "speculative_accept_length"),
    (("EAGLE", 3, 1, 4, float("nan")), "speculative_accept_length"),
    (("EAGLE", 3, 1, 4, None), "speculative_accept_length"),
    (("EAGLE", 3, None, None, 2.0), "speculative_eagle_topk"),     # SGLang fails on None > 1
    (("EAGLE", None, 1, None, 2.0), "speculative_eagle_topk"),     # SGLang asserts
    (("EAGLE", 0, 1, 1, 1.0), "speculative_num_steps"),
    (("NGRAM", 3, 1, 4, 2.0), "speculative_algorithm"),
    (("STANDALONE", 3, 1, 4, 2.0), "speculative_draft_model_path"),  # its draft is a whole model
])
def test_bad_combinations_name_the_parameter(qwen, args, param):
    with pytest.raises(InputError) as err:
        resolve_speculation(qwen, *args)
    assert err.value.param == param


def test_draft_vocabulary_must_match(qwen):
    with pytest.raises(InputError) as err:
        resolve_speculation(qwen, "EAGLE", 3, 1, 4, 2.5, load_model("Llama-3.1-8B"), "llama.json")
    assert err.value.param == "speculative_draft_model_path"
    assert "128256" in str(err.value) and "151936" in str(err.value)


def test_default_draft_is_one_layer(qwen):
    draft = default_draft(qwen, "EAGLE")
    assert (draft.num_layers, draft.hidden_size, draft.vocab_size) == (1, 4096, 151936)
    moe = default_draft(load_model("Qwen3-30B-A3B"), "NEXTN")
    assert moe.num_layers == 1 and moe.num_experts == 128


def test_round_costs_and_gain_shrinking_with_batch(qwen):
    gpu = find_gpu("h100")
    spec = Speculation("EAGLE", 3, 1, 4, 2.5, default_draft(qwen, "EAGLE"))
    plain = build_step_model(gpu, qwen)
    model = build_step_model(gpu, qwen, speculation=spec)
    draft, verify, extend = model.round_parts(132, 1, 1500)
    # the verify pass reads the weights once for 4 tokens: about one decode step; the draft a fraction
    assert verify == pytest.approx(plain.decode_s(132, 4, 1500), rel=0.05)
    assert 0 < extend < draft < 0.3 * verify
    assert model.decode_s(132, 1, 1500) == pytest.approx(draft + verify + extend)
    gains = [plain.decode_s(132, n, n * 1500) / (model.decode_s(132, n, n * 1500) / 2.5) for n in (1, 64,
    256)]
    assert 1.4 <= gains[0] <= 3.5
    assert gains[0] > gains[2] and gains[1] > gains[2]  # speculation's gain shrinks at large batches


def test_prefill_runs_the_draft_over_the_prompt(qwen):
    """A prefill under speculation is the target's and then the draft's extend over the same tokens
    (0.5.23 EAGLEWorkerV2._forward_prefill_batch -> _draft_extend_for_prefill): Qwen3-8B on an H100, 2048
    tokens: 46.1 ms + the one-layer draft's 1.7 ms (its lm_head on the last token only)."""
    gpu = find_gpu("h100")
    spec = Speculation("EAGLE", 3, 1, 4, 2.5, default_draft(qwen, "EAGLE"))
    model = build_step_model(gpu, qwen, speculation=spec)
    seqs = [(2048, 0)]
    target, draft = model.base.prefill_s(132, seqs), model.draft.prefill_s(132, seqs)
    assert target * 1e3 == pytest.approx(46.15, abs=0.05) and draft * 1e3 == pytest.approx(1.71, abs=0.05)
    assert model.prefill_s(132, seqs) == pytest.approx(target + draft, rel=1e-12)
    assert model.mixed_s(seqs, 0, 0.0) == pytest.approx(target + draft, rel=1e-12)


def test_chapter_model_refused(qwen):
    spec = Speculation("EAGLE", 3, 1, 4, 2.5, default_draft(qwen, "EAGLE"))
    with pytest.raises(InputError) as err:
        build_step_model(find_gpu("h100"), qwen, cost_model="chapter", speculation=spec)
    assert err.value.param == "cost_model"


def test_pdmux_per_revision(qwen):
    eagle = Speculation("EAGLE", 3, 1, 4, 2.5, default_draft(qwen, "EAGLE"))
    eagle3 = Speculation("EAGLE3", 3, 1, 4, 2.5, default_draft(qwen, "EAGLE3"))
    for revision in ("0.5.23", "main@2260e61"):
        with pytest.raises(InputError) as err:
            check_pdmux_speculation(revision, eagle)
        assert err.value.param == "speculative_algorithm"
    check_pdmux_speculation("dsv41@a64f33f", eagle)  # single-layer EAGLE/MTP: runs
    with pytest.raises(InputError):
        check_pdmux_speculation("dsv41@a64f33f", eagle3)


def _policy(out: str) -> dict:
    return json.loads(out)["policies"][0]


def test_simulate_low_load_tpot_and_itl():
    base = ["simulate", "--model", "Qwen3-8B", "--gpu", "h100", "--synthetic", "--qps", "0.5",
            "--max-requests", "60", "--prompt-tokens", "1000", "--output-tokens", "300", "--policies",
            "chunked", "--json"]
    plain = runner.invoke(app, base)
    spec = runner.invoke(app, base + EAGLE)
    assert plain.exit_code == 0 and spec.exit_code == 0, spec.output
    p, s = _policy(plain.stdout), _policy(spec.stdout)
    ratio = p["tpot_ms"]["p50"] / s["tpot_ms"]["p50"]
    assert 1.4 <= ratio <= 3.5
    # ITL is per streamed chunk (a round), TPOT per token: a round is longer than a plain step
    assert s["itl_ms"]["p50"] > p["itl_ms"]["p50"]
    assert s["tpot_ms"]["p50"] == pytest.approx(s["itl_ms"]["p50"] / 2.5, rel=0.1)
    assert s["completed"] == 60
    assert s["kv_pool_tokens"] < p["kv_pool_tokens"]  # the draft's KV layer shares each token's cell


def test_simulated_round_pays_the_cpu_where_the_release_turns_overlap_off(qwen):
    """SGLang up to 0.5.10 turns the overlap scheduler off under speculation, 0.5.11-0.5.12 at topk > 1
    (release_defaults): a baseline round is then its GPU time plus the scheduler's CPU time, as under
    --disable-overlap-schedule. 0.5.12 and 0.5.13 share every other rule pdmux models."""
    from itertools import pairwise

    from pdmux_cli.simulate.engine import make_setup
    from pdmux_cli.simulate.runner import simulate
    from pdmux_cli.simulate.schedulers import ChunkedPolicy
    from pdmux_cli.simulate.traces import Trace

    gpu = find_gpu("h100")
    trace = Trace(arrival_s=(0.0,), prompt_tokens=(1000,), output_tokens=(40,))
    no_serving = {"per_request_overhead_ms": 0, "admission_delay_ms": 0, "admission_interval_ms": 0,
                  "first_token_delay_ms": 0, "eager_launch_ms": 0, "frontend_token_ms": 0}

    def gaps(release, topk, draft_tokens, disable_overlap=False):
        spec = Speculation("EAGLE", 3, topk, draft_tokens, 2.5, default_draft(qwen, "EAGLE"))
        setup = make_setup(gpu, qwen, release=release, speculation=spec, disable_overlap=disable_overlap,
                           **no_serving)
        r = simulate(trace, setup, ChunkedPolicy(8192))
        return setup, [b - a for a, b in pairwise(r.step_end_s)]

    on, on_gaps = gaps("0.5.13", 4, 8)
    off, off_gaps = gaps("0.5.12", 4, 8)
    assert (on.overlap, off.overlap) == (True, False)
    cpu = on.step_model.decode_cpu_s(1)
    assert len(on_gaps) == len(off_gaps) >= 10
    assert all(g > cpu for g in on_gaps)  # a round's GPU work is longer than the CPU's: hidden on 0.5.13
    assert [b - a for a, b in zip(on_gaps, off_gaps)] == pytest.approx([cpu] * len(on_gaps), rel=1e-9)
    assert gaps("0.5.23", 4, 8, disable_overlap=True)[1] == pytest.approx(off_gaps, rel=1e-12)
    # topk 1: 0.5.12 keeps the overlap scheduler on; 0.5.6 (SGLANG_ENABLE_SPEC_V2 off) does not
    assert gaps("0.5.12", 1, 4)[1] == pytest.approx(gaps("0.5.13", 1, 4)[1], rel=1e-12)
    old, _ = gaps("0.5.6", 1, 4)
    assert old.overlap is False and make_setup(gpu, qwen, release="0.5.6").overlap is True


def test_simulate_pdmux_refused_on_release():
    out = runner.invoke(app, ["simulate", "--synthetic", "--qps", "1", "--max-requests", "20", "--policies",
                              "pdmux", *EAGLE])
    assert out.exit_code == 2
    assert "forward_batch_split_prefill" in out.output


@pytest.mark.parametrize("extra", [
    ["--speculative-accept-length", "2"],                                    # no algorithm
    ["--speculative-algorithm", "EAGLE"],                                    # no accept length
    ["--speculative-algorithm", "EAGLE", "--speculative-accept-length", "2", "--cost-model", "chapter"],
])
def test_estimate_bad_input_one_line(extra):
    out = runner.invoke(app, ["estimate", *extra])
    assert out.exit_code == 2
    assert "Traceback" not in out.output


def test_estimate_worked_example_note():
    est = pdmux.estimate(decode_bs=1, speculative_algorithm="EAGLE", speculative_num_steps=3,
                         speculative_eagle_topk=1, speculative_num_draft_tokens=4,
                         speculative_accept_length=2.5)
    notes = [n for n in est.estimate.notes if getattr(n, "code", "") == "estimate.speculative_round"]
    assert len(notes) == 1
    v = notes[0].values
    assert v["round_ms"] / 2.5 == pytest.approx(v["tpot_ms"])
    assert 1.4 <= v["speedup"] <= 3.5
    assert v["draft_ms"] + v["verify_ms"] + v["extend_ms"] < v["round_ms"]
    codes = [getattr(n, "code", "") for n in est.estimate.notes]
    assert "estimate.pdmux_speculation" in codes  # 0.5.23 cannot run pdmux beside it


def test_gain_range_under_0523_shrinks_with_the_batch():
    """0.5.23 (the V2 worker): the per-request term once a round keeps the whole-step gain near 2x up to
    batch 128; paid per verified token (4 a request) the gain falls with the batch as SGLang's measurements
    do (the accuracy block: AngelSlim's batch 8-64 points lie between the two). estimate gives both: its
    ``speedup_range``, narrow at batch 1, wide at 256 (1.12-1.65x with serving.yaml's 0.04 ms a request)."""
    lows, highs = [], []
    for bs in (1, 32, 128, 256):
        est = pdmux.estimate(decode_bs=bs, speculative_algorithm="EAGLE", speculative_num_steps=3,
                             speculative_eagle_topk=1, speculative_num_draft_tokens=4,
                             speculative_accept_length=2.5)
        v = next(n for n in est.estimate.notes
                 if getattr(n, "code", "") == "estimate.speculative_round").values
        low, high = v["speedup_range"]
        assert high == v["speedup"]
        per_request = load_serving()[0]["per_request_step_s"] * bs  # serving.yaml's 0.5 line, s; paid 4 times
        assert v["plain_ms"] * 2.5 / low == pytest.approx(v["round_ms"] + 3 * per_request * 1e3, rel=1e-9)
        lows.append(low)
        highs.append(high)
    assert lows == sorted(lows, reverse=True)
    assert highs[0] / lows[0] < 1.05 and lows[0] > 1.8  # batch 1: the term is 0.04 ms of an 8.6 ms round
    assert highs[-1] / lows[-1] > 1.4 and lows[-1] < 1.2  # batch 256: speculation gains 1.12x to 1.65x
    out = runner.invoke(app, ["estimate", "--decode-bs", "256", "--json", *EAGLE])
    assert out.exit_code == 0
    assert json.loads(out.stdout)["speculation"]["speedup_range"] == pytest.approx([low, high], rel=1e-9)


def test_api_error_names_keyword():
    with pytest.raises(pdmux.InputError) as err:
        pdmux.estimate(speculative_algorithm="EAGLE", speculative_accept_length=9.0)
    assert err.value.param == "speculative_accept_length"


def test_server_log_accept_length():
    lines = [f"[2026-01-01 10:00:0{i}] Decode batch, #running-req: 4, #token: 5000, token usage: 0.01, "
             f"accept len: {a}, accept rate: 0.6, cuda graph: True, gen throughput (token/s): 600.0, "
             "#queue-req: 0" for i, a in enumerate(("2.61", "2.45", "2.70"))]
    reading = parse_server_log(lines, "spec.log")
    assert reading.accept_lengths == [2.61, 2.45, 2.70]
    assert reading.accept_length == 2.61
    assert reading.intervals == []
    assert reading.skipped["speculative decoding"] == 3


@pytest.mark.parametrize("keyword, value, message", [
    ("speculative_num_steps", 0, "speculative_num_steps must be an integer >= 1, got 0"),
    ("speculative_eagle_topk", -1, "speculative_eagle_topk must be an integer >= 1, got -1"),
    ("speculative_num_draft_tokens", 1, "speculative_num_draft_tokens must be an integer >= 2, got 1"),
    ("speculative_accept_length", float("nan"), "speculative_accept_length must be a number >= 1"),
    ("speculative_num_steps", 2.5, "speculative_num_steps must be an integer, got 2.5"),
    ("speculative_num_steps", 10**20, "speculative_num_steps must be at most 32"),
    ("speculative_eagle_topk", 100000, "speculative_eagle_topk must be at most 64"),
    ("speculative_num_draft_tokens", 200001, "speculative_num_draft_tokens must be at most 1024"),
])
def test_each_option_is_in_range_when_the_request_is_made(keyword, value, message):
    """The request's one check (workflows/fields.py, the rule of speculative_args): a value out of range is
    refused as such, with or without an algorithm, naming the keyword for the API and the flag for the CLI."""
    with pytest.raises(pdmux.InputError, match="^" + message):
        pdmux.estimate(**{keyword: value})
    flag = "--" + keyword.replace("_", "-")
    out = runner.invoke(app, ["estimate", flag, str(value)])
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert flag in out.stderr


def test_gen_config_refuses_on_release_and_launches_on_dsv41(tmp_path):
    out = runner.invoke(app, ["gen-config", "--speculative-algorithm", "EAGLE"])
    assert out.exit_code == 2
    assert "forward_batch_split_prefill" in out.output
    result = pdmux.gen_config(manual=True, sglang="dsv41@a64f33f", speculative_algorithm="mtp")
    assert result.launch_flags[-2:] == ["--speculative-algorithm", "NEXTN"]
    assert result.launch_command.endswith("--speculative-algorithm NEXTN")
    with pytest.raises(pdmux.InputError) as err:
        pdmux.gen_config(manual=True, sglang="dsv41@a64f33f", speculative_algorithm="EAGLE3")
    assert err.value.param == "speculative_algorithm"
    with pytest.raises(pdmux.InputError) as err:
        pdmux.gen_config(speculative_draft_model_path="profiles/models/Qwen3-0.6B.json")
    assert err.value.param == "speculative_draft_model_path"
    # the launch line names the draft's folder (SGLang loads its config.json and weights from it)
    config = json.loads(open("profiles/models/Qwen3-8B.json").read())
    config["num_hidden_layers"] = 1
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = pdmux.gen_config(manual=True, sglang="dsv41@a64f33f", speculative_algorithm="EAGLE",
                              speculative_draft_model_path=str(tmp_path / "config.json"))
    assert result.launch_flags[-2:] == ["--speculative-draft-model-path", str(tmp_path)]


def test_check_config_fails_the_file_with_speculation_on_release(tmp_path):
    yaml_path = tmp_path / "pdmux.yaml"
    pdmux.gen_config(output=yaml_path)
    assert pdmux.check_config(yaml_path).ok
    result = pdmux.check_config(yaml_path, speculative_algorithm="EAGLE")
    assert not result.ok
    assert "forward_batch_split_prefill" in result.speculation_line
    assert result.to_dict()["speculation"] == result.speculation_line
    out = runner.invoke(app, ["check-config", str(yaml_path), "--speculative-algorithm", "EAGLE"])
    assert out.exit_code == 2
    # the per-revision verdicts say it too (second fresh-user report: 'runs it', then exit 2)
    verdicts = {v.revision: (v.accepted, v.stage) for v in result.revisions}
    assert verdicts["0.5.23"] == (False, "run")
    assert verdicts["standard@b875545"] == (False, "start-up")
    assert verdicts["dsv41@a64f33f"] == (None, "")  # its loader not read: not judged, speculation or not


def test_capacity_sizes_the_baselines_and_says_pdmux_cannot_run():
    out = runner.invoke(app, ["capacity", "--trace", "tests/fixtures/azure_conv_50.csv", "--policies",
                              "pdmux,chunked", "--json", *EAGLE])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert [p["policy"] for p in data["policies"]] == ["chunked 8192"]
    assert any("forward_batch_split_prefill" in n for n in data["notes"])
    only = runner.invoke(app, ["capacity", "--trace", "tests/fixtures/azure_conv_50.csv", "--policies",
                               "pdmux", *EAGLE])
    assert only.exit_code == 2


def test_eagle3_draft_vocab_sizes_its_lm_head(tmp_path, qwen):
    config = json.loads(open("profiles/models/Qwen3-8B.json").read())
    config.update({"num_hidden_layers": 1, "draft_vocab_size": 32000,
                   "architectures": ["LlamaForCausalLMEagle3"]})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    draft = load_model(path)
    assert (draft.draft_vocab_size, draft.vocab_size) == (32000, 151936)
    spec, notes = resolve_speculation(qwen, "EAGLE3", 3, 1, 4, 2.5, draft, str(path))
    assert spec.draft.vocab_size == 32000
    assert "speculative.draft_vocab" in [n.code for n in notes]
    same, _ = resolve_speculation(qwen, "EAGLE", 3, 1, 4, 2.5, draft, str(path))
    assert same.draft.vocab_size == 151936  # EAGLE shares the target's lm_head
    gpu = find_gpu("h100")
    small = build_step_model(gpu, qwen, speculation=spec).round_parts(132, 1, 1500)
    full = build_step_model(gpu, qwen, speculation=same).round_parts(132, 1, 1500)
    assert small[0] < full[0] and small[1] == full[1]  # a cheaper draft tree, the same verify pass


def test_draft_weights_are_charged_to_memory(qwen, tmp_path):
    """SGLang 0.5.23 loads the draft's weights before it sizes the KV pool (kv_cache_configurator.py
    _profile_available_bytes: "Loaded weights (target + draft)"): a one-layer EAGLE draft of Qwen3-8B adds
    its layer, 192,937,984 bf16 parameters (the embedding and lm_head are the target's), and its fc over
    the embedding and the target's hidden state, 2 x 4096 x 4096 + 4096 (llama_eagle.py), on every TP rank
    whole; a STANDALONE draft all of its weights; an EAGLE3 draft its 3 x 4096 x 4096 fc (llama_eagle3.py)
    and, with its own hot-token lm_head, that too."""
    from pdmux_cli.catalog.model import weight_bytes_total
    from pdmux_cli.costmodel.speculative import draft_weight_bytes

    eagle = Speculation("EAGLE", 3, 1, 4, 2.5, default_draft(qwen, "EAGLE"))
    fc = (2 * 4096 * 4096 + 4096) * 2
    assert draft_weight_bytes(eagle) == 385_875_968 + fc
    assert draft_weight_bytes(eagle, tp=2) == 385_875_968 / 2 + fc
    small = load_model("qwen3-14b")
    standalone = Speculation("STANDALONE", 3, 1, 4, 2.0, small)
    assert draft_weight_bytes(standalone) == weight_bytes_total(small) == 29_535_764_480
    config = json.loads(open("profiles/models/Qwen3-8B.json").read())
    config.update({"num_hidden_layers": 1, "draft_vocab_size": 32000})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec, _ = resolve_speculation(qwen, "EAGLE3", 3, 1, 4, 2.5, load_model(path), str(path))
    # its own lm_head over 32,000 tokens
    assert draft_weight_bytes(spec) == 385_875_968 + 3 * 4096 * 4096 * 2 + 32000 * 4096 * 2
    mtp = Speculation("NEXTN", 3, 1, 4, 2.5, default_draft(qwen, "NEXTN"))
    assert draft_weight_bytes(mtp) == 385_875_968 + 2 * 4096 * 4096 * 2  # eh_proj, no bias
    plain = pdmux.estimate(model="Qwen3-8B", gpu="h100").estimate.memory
    with_draft = pdmux.estimate(model="Qwen3-8B", gpu="h100", speculative_algorithm="EAGLE",
                                speculative_accept_length=2.5).estimate.memory
    assert with_draft.weight_bytes == plain.weight_bytes + 385_875_968 + fc
    assert with_draft.kv_cache_bytes == pytest.approx(plain.kv_cache_bytes * 37 / 36)  # the draft's layer


def test_a_draft_that_does_not_fit_is_refused_naming_it():
    out = runner.invoke(app, ["simulate", "tests/fixtures/azure_conv_50.csv", "--model", "qwen3-32b",
                              "--policies", "chunked", "--speculative-algorithm", "STANDALONE",
                              "--speculative-accept-length", "2", "--speculative-draft-model-path",
                              "qwen3-14b"])
    assert out.exit_code == 2
    assert "Qwen3-32B with its draft Qwen3-14B does not fit" in out.stderr
    assert "88.5 GiB of weights" in out.stderr


def test_draft_vocab_above_the_vocabulary_is_refused(qwen, tmp_path):
    config = json.loads(open("profiles/models/Qwen3-8B.json").read())
    config.update({"num_hidden_layers": 1, "draft_vocab_size": 1_000_000_000})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match="draft_vocab_size of 1,000,000,000, more than its vocabulary"):
        resolve_speculation(qwen, "EAGLE3", 3, 1, 4, 2.5, load_model(path), str(path))


def test_estimate_json_says_the_pdmux_rows_cannot_run_beside_speculation():
    """On 0.5.23 pdmux cannot run beside speculation: the table says "cannot run", --json's pdmux row
    ``runs`` false, and the round comes as data (``speculation``), with the refusal."""
    out = runner.invoke(app, ["estimate", "--json", *EAGLE])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert [(r["policy"], r["runs"]) for r in data["rows"] if r["policy"] == "pdmux"] == [("pdmux", False)]
    spec = data["speculation"]
    assert (spec["algorithm"], spec["num_steps"], spec["accept_length"]) == ("EAGLE", 3, 2.5)
    assert spec["tpot_ms"] == pytest.approx(spec["round_ms"] / 2.5)
    assert spec["speedup"] == pytest.approx(spec["plain_ms"] / spec["tpot_ms"])
    assert "forward_batch_split_prefill" in spec["pdmux_refusal"]
    table = runner.invoke(app, ["estimate", *EAGLE])
    assert "cannot run" in table.stdout
    plain = json.loads(runner.invoke(app, ["estimate", "--json"]).stdout)
    assert plain["speculation"] is None and all(r["runs"] for r in plain["rows"])


def test_simulate_and_capacity_say_what_speculation_they_ran():
    """simulate and capacity name the speculative settings SGLang runs (the auto-chosen ones, the 48-request
    limit) in their notes and as --json's ``speculation``, and say the intervals come from runs without
    speculation; without speculation neither appears."""
    base = ["--synthetic", "--qps", "0.5", "--max-requests", "40", "--policies", "chunked", "--json"]
    out = runner.invoke(app, ["simulate", *base, "--speculative-algorithm", "EAGLE",
                              "--speculative-accept-length", "2.5"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["speculation"] == {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1,
                                   "num_draft_tokens": 4, "accept_length": 2.5,
                                   "draft": "Qwen3-8B draft (1 layer)", "draft_source": "default",
                                   "draft_layers": 1, "overlap_schedule": True, "max_running_requests": 48}
    notes = " | ".join(data["notes"])
    assert "speculative decoding: EAGLE, 3 steps, topk 1, 4 draft tokens, accept length 2.5" in notes
    assert "SGLang chooses 3 steps" in notes and "runs without speculation" in notes
    plain = json.loads(runner.invoke(app, ["simulate", *base]).stdout)
    assert plain["speculation"] is None and not any("speculati" in n for n in plain["notes"])
    cap = runner.invoke(app, ["capacity", "--trace", "tests/fixtures/azure_conv_50.csv", "--policies",
                              "chunked", "--json", *EAGLE])
    assert cap.exit_code == 0, cap.output
    assert json.loads(cap.stdout)["speculation"]["algorithm"] == "EAGLE"


def test_mixed_chunk_beside_speculation_follows_sglang():
    """SGLang 0.5.23 turns mixed chunk off beside STANDALONE (speculative_hook.py, supports_mixed_chunk:
    EAGLE and EAGLE3 only): the mixed-chunk policy runs as chunked prefill of its size, with a note;
    beside EAGLE it runs, with a note on the one-token decode SGLang gives in a mixed step."""
    standalone = ["--speculative-algorithm", "STANDALONE", "--speculative-accept-length", "2",
                  "--speculative-draft-model-path", "qwen3-0.6b"]
    out = runner.invoke(app, ["simulate", "tests/fixtures/azure_conv_50.csv", "--policies", "mixed-chunk",
                              "--mixed-chunk-sizes", "2048", "--json", *standalone])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert [p["policy"] for p in data["policies"]] == ["chunked 2048"]
    assert any("SGLang turns mixed chunked prefill off beside STANDALONE" in n for n in data["notes"])
    eagle = json.loads(runner.invoke(app, ["simulate", "tests/fixtures/azure_conv_50.csv", "--policies",
                                           "mixed-chunk", "--mixed-chunk-sizes", "2048", "--json",
                                           *EAGLE]).stdout)
    assert [p["policy"] for p in eagle["policies"]] == ["mixed-chunk 2048"]
    assert any("one-token decode in a mixed step" in n for n in eagle["notes"])


def test_calibrate_on_a_speculative_log_gives_the_accept_length(tmp_path):
    """A log of only speculative decode lines: calibrate says their median accept len (values outside 1 to
    pdmux's 33 left out and counted) and that there is nothing to fit, one line, exit 2."""
    lines = [f"[2026-01-01 10:00:0{i} TP0] Decode batch. #running-req: 8, #token: 4000, token usage: 0.02, "
             f"accept len: {a}, accept rate: 0.5, cuda graph: True, gen throughput (token/s): 500.0, "
             "#queue-req: 0, "
             for i, a in enumerate(["2.61", "0.5", "nan", "99", "-1", "inf", "2.45", "2.70"])]
    reading = parse_server_log(lines, "spec.log")
    assert reading.accept_lengths == [2.61, 2.45, 2.70]
    assert reading.skipped["accept len unreadable or out of 1-33"] == 5
    log = tmp_path / "spec.log"
    log.write_text("\n".join(lines) + "\n")
    out = runner.invoke(app, ["calibrate", "--sglang-log", str(log), "--gpu", "h100", "--model", "Qwen3-8B"])
    assert out.exit_code == 2
    assert "median accept len 2.61 over 3 line(s), 5 more left out (unreadable or outside 1-33)" in out.stderr
    assert "--speculative-accept-length 2.61" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_estimate_names_the_draft_that_does_not_fit():
    out = runner.invoke(app, ["estimate", "--speculative-algorithm", "STANDALONE",
                              "--speculative-accept-length", "2", "--speculative-draft-model-path",
                              "qwen3-235b-a22b"])
    assert out.exit_code == 0, out.output
    assert "does not fit: Qwen3-8B with its draft Qwen3-235B-A22B needs 453.2 GiB of weights" in " ".join(
        out.stdout.split())



def test_estimate_says_what_mixed_chunk_does_beside_speculation():
    eagle = " ".join(runner.invoke(app, ["estimate", *EAGLE]).stdout.split())
    assert "mixed-chunk beside EAGLE: SGLang gives the running requests a plain one-token decode" in eagle
    standalone = " ".join(runner.invoke(app, ["estimate", "--speculative-algorithm", "STANDALONE",
                                              "--speculative-accept-length", "2",
                                              "--speculative-draft-model-path", "qwen3-0.6b"]).stdout.split())
    assert "SGLang turns mixed chunked prefill off beside STANDALONE" in standalone


def test_tune_under_speculation_launches_with_it(tmp_path):
    """tune scores its configs with speculation, so its launch line and --json carry it (second fresh-user
    report: the line had no --speculative-algorithm)."""
    args = ["tune", "--trace", "tests/fixtures/azure_conv_50.csv", "--slo-ttft", "1000", "--slo-itl", "60",
            "--speculative-algorithm", "EAGLE", "--speculative-accept-length", "2", "--sglang",
            "dsv41@a64f33f", "--sm-group-nums", "8", "--divisors", "36", "--budgets", "65536"]
    out = runner.invoke(app, [*args, "-o", str(tmp_path / "t.yaml")])
    assert out.exit_code == 0, out.output
    assert "--disable-overlap-schedule --speculative-algorithm EAGLE" in " ".join(out.output.split())
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert data["speculative_flags"] == ["--speculative-algorithm", "EAGLE"]
    assert data["speculation"]["algorithm"] == "EAGLE"
