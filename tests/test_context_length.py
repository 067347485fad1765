"""SGLang's ``--context-length`` on simulate, capacity and tune (0.5.23 ``srt/configs/model_config.py``
``_derive_context_length``), and the serving runs whose pages set it (issue 29: their replay commands run)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pdmux
from pdmux_cli.catalog.model import load_model, with_context_length
from pdmux_cli.cli import app
from pdmux_cli.simulate.serving_accuracy import HELDOUT_RUNS, _context_length, load_runs, replay

runner = CliRunner()
LONG = ["simulate", "--synthetic", "--qps", "inf", "--max-requests", "1", "--prompt-tokens", "129024",
        "--output-tokens", "2048", "--gpu", "h20", "--model", "Qwen3-8B", "--policies", "chunked",
        "--ignore-eos"]


def test_model_takes_the_context_length():
    qwen = load_model("Qwen3-8B")
    assert qwen.max_position_embeddings == 40960
    same, notes = with_context_length(qwen, None)
    assert same is qwen and notes == []
    longer, notes = with_context_length(qwen, 140000)
    assert longer.max_position_embeddings == 140000 and longer.num_layers == qwen.num_layers
    assert [n.code for n in notes] == ["server.context_length_over"]  # SGLang refuses it without the env var
    shorter, notes = with_context_length(qwen, 12000)
    assert shorter.max_position_embeddings == 12000
    assert [n.code for n in notes] == ["server.context_length"]


def test_a_prompt_past_the_models_length_runs_with_a_longer_context_length():
    out = runner.invoke(app, LONG)
    assert out.exit_code == 2 and "40,960" in out.stderr
    out = runner.invoke(app, [*LONG, "--context-length", "140000", "--json"])
    assert out.exit_code == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["policies"][0]["completed"] == 1
    notes = " ".join(data["notes"])
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in notes and "140,000" in notes


def test_a_shorter_context_length_drops_longer_requests():
    out = runner.invoke(app, ["simulate", "--synthetic", "--qps", "1", "--max-requests", "5",
                              "--prompt-tokens", "2000",
                              "--output-tokens", "100", "--context-length", "1000"])
    assert out.exit_code == 2
    assert "1,000" in out.stderr and "Traceback" not in out.output


def test_requests_past_the_flag_name_the_flag_not_the_model():
    """A request past --context-length is one the server rejects (SGLang 0.5.23's tokenizer manager,
    ``_validate_one_request``), not a bad row: counted in the trace's JSON, a note naming the flag (the
    model's own length is 40,960: the first five of the fixture's ten such requests); with none left, one
    line naming the flag."""
    fixture = str(Path(__file__).parent / "fixtures" / "azure_conv_50.csv")
    out = runner.invoke(app, ["simulate", fixture, "--context-length", "1000", "--json"])
    assert out.exit_code == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["trace"]["rejected_past_context"] == 10 and data["trace"]["requests"] == 40
    assert data["trace"]["bad_rows"] == 0 and data["trace"]["bad_row_examples"] == []
    assert not any("bad row" in n for n in data["notes"])
    rejected = next(n for n in data["notes"] if "rejected by the server" in n)
    assert rejected.startswith("10 requests of 50 in azure_conv_50.csv rejected by the server, not replayed: "
                               "prompt + output past the context length of 1,000 (--context-length; "
                               "Qwen3-8B's own: 40,960)")
    assert "first: request 7: 1313 + 142 tokens;" in rejected and "max_position_embeddings" not in rejected
    table = runner.invoke(app, ["simulate", fixture, "--context-length", "1000"])
    assert table.exit_code == 0 and "bad row" not in table.stdout
    assert "note: 10 requests of 50 in azure_conv_50.csv rejected by the server" in table.stdout
    # none past the model's own length: the count is 0, no note
    plain = json.loads(runner.invoke(app, ["simulate", fixture, "--json"]).stdout)
    assert plain["trace"]["rejected_past_context"] == 0 and plain["trace"]["requests"] == 50
    assert not any("rejected by the server" in n for n in plain["notes"])
    # rows that really are malformed stay bad rows, beside the rejected requests
    mixed = runner.invoke(app, ["simulate", str(Path(fixture).parent / "azure_bad_rows.csv"),
                                "--context-length", "500", "--json"])
    trace = json.loads(mixed.stdout)["trace"]
    assert (trace["bad_rows"], trace["rejected_past_context"], trace["requests"]) == (5, 2, 1)
    assert [e["line"] for e in trace["bad_row_examples"]] == [4, 5, 6, 7, 8]
    out = runner.invoke(app, ["simulate", fixture, "--context-length", "100"])
    assert out.exit_code == 2
    assert "longer than the context length of 100 (--context-length; Qwen3-8B's own: 40,960)" in out.stderr


@pytest.mark.parametrize("value", ["0", "-5", "abc", "10000001", "99999999999999999999"])
def test_bad_context_length_is_one_line(value):
    out = runner.invoke(app, ["simulate", "--synthetic", "--max-requests", "5", "--context-length", value])
    assert out.exit_code == 2
    assert "Traceback" not in out.output and "--context-length" in out.output


def test_api_names_the_keyword():
    with pytest.raises(pdmux.InputError) as err:
        pdmux.simulate(synthetic=True, max_requests=5, context_length=0)
    assert err.value.param == "context_length"


def test_server_flags_give_the_runs_context_length():
    flags = "mem_fraction_static=0.85, context_length=140000, enable_mixed_chunk=True"
    assert _context_length(flags) == 140000
    assert _context_length("--tp 8 --context-length 12000") == 12000
    assert _context_length(None) is None and _context_length("tp_size=1") is None
    runs = {r.id: r for r in load_runs(HELDOUT_RUNS)}
    run = runs["qwen-speed-h20-qwen3-8b-bf16-tp1-in129024-out2048"]
    assert run.context_length == 140000
    assert "--context-length 140000" in run.command()


def test_the_printed_command_replays_the_run():
    """The run's command (``accuracy --serving --runs``) runs in the CLI, 129,024-token prompt and all, and
    gives its replay's throughput within 0.2% (the command runs 0.5.23's scheduler rules and the 0.5 line's
    serving terms, the replay the run's 0.4.6 and the 0.4 line's: one request, so only the lines' per-request
    step time differs, 0.04 against 0.1 ms over 2048 steps: 1437.22 against 1435.11 tok/s)."""
    run = {r.id: r for r in load_runs(HELDOUT_RUNS)}["qwen-speed-h20-qwen3-8b-bf16-tp1-in129024-out2048"]
    predicted = replay(run)["total_tok_s"]
    out = runner.invoke(app, [*shlex.split(run.command())[1:], "--json"])
    assert out.exit_code == 0, out.stderr
    policy = json.loads(out.stdout)["policies"][0]
    assert (129024 + 2048) / (policy["e2e_ms"]["p50"] / 1e3) == pytest.approx(predicted, rel=2e-3)


def test_estimate_takes_the_context_length():
    """estimate refuses a prompt past the model's 40,960 tokens, takes it under a longer --context-length
    (with SGLang's start-up note), and refuses it past a shorter one, naming the flag."""
    long = ["estimate", "--prompt-tokens", "60000"]
    out = runner.invoke(app, long)
    assert out.exit_code == 2 and "40,960 (max_position_embeddings)" in out.stderr
    out = runner.invoke(app, [*long, "--context-length", "140000", "--json"])
    assert out.exit_code == 0, out.stderr
    notes = json.loads(out.stdout)["notes"]
    assert any("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in n for n in notes)
    out = runner.invoke(app, [*long, "--context-length", "50000"])
    assert out.exit_code == 2
    assert out.stderr.strip().splitlines() == [
        "pdmux: error: prompt of 60,000 tokens is past the server's context length of 50,000 "
        "(--context-length): SGLang rejects it; use fewer tokens"]
    out = runner.invoke(app, ["estimate", "--prompt-tokens", "1024", "--context", "4096",
                              "--context-length", "4096"])
    assert out.exit_code == 2 and "decode context of 4,096 tokens" in out.stderr
    with pytest.raises(pdmux.InputError, match=r"^prompt of 60,000 .* \(context_length\)"):
        pdmux.estimate(prompt_tokens=60000, context_length=50000)
    same = pdmux.estimate(context_length=40960).to_dict()["rows"]
    assert same == pdmux.estimate().to_dict()["rows"]  # a limit above the sizes changes no figure
