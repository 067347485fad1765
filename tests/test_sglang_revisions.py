"""The SGLang revisions added after the release: upstream main at 2260e612 and feat/dsv41-pdmux at a64f33f0.

- ``main@2260e61`` (sgl-project/sglang main at 2260e612f6092000d899dab42da92c549f015c4a): 0.5.23's pdmux
  rules, and a start-up failure on every launch (multiplexing_mixin.py ``init_pdmux`` reads ``self.gpu_id``,
  which managers/scheduler.py keeps in ``self.ps`` since 43797cc8; sgl-project/sglang#37714): said by every
  command.
- ``dsv41@a64f33f`` (sgl-project/sglang a64f33f089e9863b360992950ca1436ca6cba8f8): multiplexing_mixin.py
  ``_get_split_forward_count`` caps layers per round with ``max_split_forward_layers`` while decode work
  exists; launch_order.py ``configure_pdmux_nccl_launch_order`` (called by distributed/bootstrap.py for NCCL
  and TP > 1) sets ``NCCL_LAUNCH_ORDER_IMPLICIT=1`` and needs NCCL >= 2.26 and CUDA >= 12.3. Its
  pdmux_context.py was not read: manual_divisions only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.catalog.hardware import find_gpu
from pdmux_cli.catalog.model import load_model
from pdmux_cli.cli import app
from pdmux_cli.messages import render_all
from pdmux_cli.planning.estimate import Scenario, estimate
from pdmux_cli.sglang import split_levels
from pdmux_cli.sglang.pdmux_config import PdmuxConfig
from pdmux_cli.simulate.engine import make_setup
from pdmux_cli.simulate.runner import run_scenario
from pdmux_cli.simulate.schedulers import PdmuxPolicy
from pdmux_cli.util.errors import InputError

FIX = Path(__file__).parent / "fixtures"
AZURE = str(FIX / "azure_conv_50.csv")
H100 = find_gpu("h100")
QWEN = load_model("qwen3-8b")  # 36 layers
runner = CliRunner()

#: a64f33f0's runbook example (sm_group_num 3, [104, 28, 1]) with the GLM-5.3 runbook's cap of 2
CAPPED = "sm_group_num: 3\nmanual_divisions:\n  - [104, 28, 1]\nsplit_forward_token_budget: 65536\n" \
         "max_split_forward_layers: 2\n"


@pytest.mark.parametrize("cap, rounds", [(0, 5), (2, 18), (4, 9)])
def test_simulated_prefill_takes_the_capped_rounds(cap: int, rounds: int) -> None:
    """The chapter's scenario (32 x 2048 decoding on an H100, chapter cost model) with a 1024-token prompt:
    budget 65536 // 1024 = 64 -> all 36 layers in the first round, and the prefill on 80 SMs outlasts five
    ~11 ms decode rounds; capped at 2 (4) layers a round it takes ceil(36 / 2) = 18 (9) rounds, one slice per
    round, its first token at the end of the last."""
    setup = make_setup(H100, QWEN, cost_model="chapter", s_sat=66)
    out = run_scenario(setup, PdmuxPolicy(PdmuxConfig(), max_split_forward_layers=cap), prompt_tokens=1024)
    assert out.steps == rounds
    if cap:
        assert rounds == split_levels.prefill_rounds(1024, 36, 65536, cap)
        assert out.result.first_token_s[0] == out.result.step_end_s[rounds - 1]


def test_estimate_applies_the_cap_only_where_the_revision_reads_it() -> None:
    scenario = Scenario(prompt_tokens=1024, sm_group_num=3, manual_divisions=((104, 28, 1),),
                        max_split_forward_layers=2)
    capped = estimate(H100, QWEN, scenario, sglang="dsv41@a64f33f")
    assert (capped.layers_per_round, capped.prefill_rounds) == (2, 18)
    assert any(
        n.startswith("dsv41@a64f33f: its pdmux_context.py was not read") for n in render_all(capped.notes)
    )
    for revision in (None, "0.5.23", "overlay@2126b0b", "main@2260e61"):
        plain = estimate(H100, QWEN, scenario, sglang=revision)
        assert (plain.layers_per_round, plain.prefill_rounds) == (36, 1), revision
    pdmux = {r.policy: r for r in capped.rows}["pdmux"]
    free = {r.policy: r for r in estimate(H100, QWEN, scenario).rows}["pdmux"]
    assert pdmux.prefill_ms > free.prefill_ms  # 18 rounds of decode beside it, not one
    # no manual_divisions: a64f33f0's divide_sm was not read
    with pytest.raises(InputError, match="divide_sm.*not read"):
        estimate(H100, QWEN, Scenario(), sglang="dsv41@a64f33f")


def test_every_command_says_main_s_start_up_failure(tmp_path: Path) -> None:
    r = runner.invoke(app, ["estimate", "--sglang", "main@2260e61", "--json"])
    assert r.exit_code == 0, r.stderr
    notes = json.loads(r.stdout)["notes"]
    assert notes[0].startswith("main@2260e61: every --enable-pdmux launch fails at start-up")
    assert "#37714" in notes[0] and "#30884" in notes[0]
    s = runner.invoke(app, ["simulate", AZURE, "--max-requests", "8", "--policies", "pdmux", "--sglang",
                            "main@2260e61", "--json", "--workers", "1"])
    assert s.exit_code == 0, s.stderr
    assert any(n.startswith("main@2260e61: every --enable-pdmux launch fails")
               for n in json.loads(s.stdout)["notes"])
    g = runner.invoke(app, ["gen-config", "--sglang", "main@2260e61", "--json"])
    assert g.exit_code == 0 and json.loads(g.stdout)["sglang_notes"][0].startswith("main@2260e61: every")
    # its model support is its own scan's
    assert json.loads(r.stdout)["sglang_support"]["reason"].startswith("SGLang main@2260e61's "
                                                                       "Qwen3ForCausalLM")


def test_simulate_and_capacity_need_manual_divisions_under_dsv41(tmp_path: Path) -> None:
    assert_one_line_error(runner.invoke(app, ["simulate", AZURE, "--max-requests", "8", "--policies", "pdmux",
                                              "--sglang", "dsv41@a64f33f"]), 2, "divide_sm")
    assert_one_line_error(runner.invoke(app, ["capacity", AZURE, "--max-requests", "8", "--policies", "pdmux",
                                              "--sglang", "dsv41@a64f33f"]), 2, "divide_sm")
    path = tmp_path / "capped.yaml"
    path.write_text(CAPPED)
    args = ["simulate", AZURE, "--max-requests", "8", "--policies", "pdmux", "--config", str(path), "--json",
            "--workers", "1"]
    capped = json.loads(runner.invoke(app, [*args, "--sglang", "dsv41@a64f33f"]).stdout)
    plain = json.loads(runner.invoke(app, args).stdout)
    assert any("pdmux_context.py was not read" in n for n in capped["notes"])
    # short prompts: 65536 // prompt covers all 36 layers in a round, so the cap is what splits those that
    # arrive beside decode (the first, alone, runs all its layers at once under either)
    assert capped["policies"][0]["ttft_ms"]["p50"] == plain["policies"][0]["ttft_ms"]["p50"]
    assert capped["policies"][0]["ttft_ms"]["max"] > 4 * plain["policies"][0]["ttft_ms"]["max"]


def test_tune_searches_the_layer_cap_where_the_revision_has_it() -> None:
    base = ["tune", "--trace", AZURE, "--slo-ttft", "2000", "--slo-itl", "60", "--max-requests", "20",
            "--sm-group-nums", "3", "--divisors", "36", "--budgets", "65536", "--no-fixed-splits",
            "--slo-margins", "none", "--workers", "1", "--json"]
    d = json.loads(runner.invoke(app, [*base, "--sglang", "dsv41@a64f33f"]).stdout)
    caps = [r["config"]["max_split_forward_layers"] for r in d["rows"]]
    assert caps == [None, None, 1, 2, 4, 8]  # the two level sets, then the caps on the better of them
    assert all(r["config"]["manual_divisions"] for r in d["rows"])  # a64f33f0's divide_sm was not read
    assert d["rows"][2]["description"].endswith("max 1 layer(s) per round")
    # fewer layers a round: more rounds before the first token (the cap of 1 longest, none shortest)
    p99 = [r["ttft_p99_ms"] for r in d["rows"][2:]] + [d["rows"][1]["ttft_p99_ms"]]
    assert p99 == sorted(p99, reverse=True) and len(set(p99)) == len(p99)
    assert d["best"] == d["baseline"] == 1
    released = json.loads(runner.invoke(app, base).stdout)
    assert [r["config"]["max_split_forward_layers"] for r in released["rows"]] == [None, None]
    assert released["rows"][1]["config"]["manual_divisions"] == []  # 0.5.23's automatic levels


def test_tp_launch_lines_carry_what_the_revision_requires() -> None:
    d = json.loads(runner.invoke(app,
                                 ["gen-config", "--sglang", "dsv41@a64f33f", "--tp", "2", "--json"]).stdout)
    assert d["launch_env"] == ["NCCL_LAUNCH_ORDER_IMPLICIT=1"]
    assert any("NCCL >= 2.26" in n and "CUDA runtime and driver >= 12.3" in n for n in d["sglang_notes"])
    assert d["config"]["manual_divisions"]  # the levels written out: its divide_sm was not read
    r = runner.invoke(app, ["gen-config", "--sglang", "dsv41@a64f33f", "--tp", "2"])
    assert "# NCCL_LAUNCH_ORDER_IMPLICIT=1 python -m sglang.launch_server" in r.stderr
    one = json.loads(runner.invoke(app, ["gen-config", "--sglang", "dsv41@a64f33f", "--json"]).stdout)
    assert one["launch_env"] == []  # TP 1: launch_order.py is not called
    for other in ("0.5.23", "main@2260e61"):
        plain = json.loads(runner.invoke(app,
                                         ["gen-config", "--sglang", other, "--tp", "2", "--json"]).stdout)
        assert plain["launch_env"] == [], other


RUNBOOK = Path(__file__).parent / "fixtures" / "sglang_runbooks" / "standard_b8755452_exclusive_h20.yaml"


@pytest.mark.parametrize("command", [["estimate"], ["gen-config"], ["check-config", str(RUNBOOK)]])
def test_an_empty_revision_is_refused(command) -> None:
    """``--sglang ''`` is refused in one line naming the revisions (it was taken as 0.5.23; a new user's
    report), as ``--gpu ''`` is."""
    out = CliRunner().invoke(app, [*command, "--sglang", ""])
    assert_one_line_error(out, contains="--sglang is empty: give a revision, one of 0.5.23, standard@b875545")
