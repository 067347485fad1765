"""Each SGLang revision's verdict on a pdmux YAML (sglang_rules), against SGLang's own runbooks.

The runbook YAMLs in tests/fixtures/sglang_runbooks/ are the YAML blocks of SGLang's manual runbooks,
as written there:
- ``standard_b8755452_*``: sgl-project/sglang test/manual/pdmux/standard_prefill_runbook.md at commit
  b8755452da65eb2dd5c51eef504bfbc843a49865 ("Exclusive partitions (H20, 78 SMs)" and "Overlay");
- ``layerwise_1b7accf6_h100``: sgl-project/sglang test/manual/pdmux/layerwise_prefill_runbook.md at commit
  1b7accf6a138a6971a1f6c76a30b0e359f770f15 ("Example for a 132-SM GPU").
The verdicts are what each revision's code does with them (pdmux_context.py load_pdmux_config and
initialize_stream_groups at the commits sglang_support names; sgl-kernel's positive-count check).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdmux_cli import pdmux_config as pc
from pdmux_cli import sglang_rules as sr
from pdmux_cli.cli import app

RUNBOOKS = Path(__file__).parent / "fixtures" / "sglang_runbooks"
H20, H100 = (78, (9, 0)), (132, (9, 0))
runner = CliRunner()


def _verdicts(name: str, device: tuple[int, tuple[int, int]]) -> dict[str, tuple[bool, str]]:
    config, problems = pc.load_config(RUNBOOKS / name)
    return {v.revision: (v.accepted, v.stage) for v in sr.verdicts(config, problems, *device)}


@pytest.mark.parametrize("name, device, expected", [
    # exclusive, every entry sums to the H20's 78 SMs, thresholds 1..8 rising: every revision runs it
    ("standard_b8755452_exclusive_h20.yaml", H20,
     {"0.5.23": (True, ""), "standard@b875545": (True, ""), "overlay@2126b0b": (True, "")}),
    # overlay with decode_sm 0 placeholders: 0.5.23 ignores overlap_decode_full_sm and sgl-kernel refuses a
    # 0-SM decode side; b8755452 accepts (prefill 24 and 40 inside (0, 78)); 2126b0b7's loader takes
    # decode_sm >= 0 with the overlay
    ("standard_b8755452_overlay_h20.yaml", H20,
     {"0.5.23": (False, "start-up"), "standard@b875545": (True, ""), "overlay@2126b0b": (True, "")}),
    ("layerwise_1b7accf6_h100.yaml", H100,
     {"0.5.23": (True, ""), "standard@b875545": (True, ""), "overlay@2126b0b": (True, "")}),
    # the 132-SM example on a 78-SM H20: 132 SMs asked for; 2126b0b7 wants every SM used exactly
    ("layerwise_1b7accf6_h100.yaml", H20,
     {"0.5.23": (False, "start-up"), "standard@b875545": (False, "start-up"), "overlay@2126b0b": (False, "start-up")}),
    # the H20 exclusive file on a 132-SM H100: 0.5.23 and b8755452 leave SMs idle, 2126b0b7 refuses
    ("standard_b8755452_exclusive_h20.yaml", H100,
     {"0.5.23": (True, ""), "standard@b875545": (True, ""), "overlay@2126b0b": (False, "start-up")}),
])
def test_runbooks_are_accepted_or_refused_as_their_code_does(name, device, expected) -> None:
    assert _verdicts(name, device) == expected


def test_loader_rules_differ_by_revision() -> None:
    def judge(text: str, device=H100) -> dict[str, tuple[bool, str]]:
        config, problems = pc.parse_config(text)
        return {v.revision: (v.accepted, v.stage) for v in sr.verdicts(config, problems, *device)}

    # thresholds not strictly increasing: only 2126b0b7's loader checks them (0.5.23 runs it)
    assert judge("sm_group_num: 4\nmanual_divisions: [[112, 20, 0], [104, 28, 0]]\n") == {
        "0.5.23": (True, ""), "standard@b875545": (True, ""), "overlay@2126b0b": (False, "load")}
    # every threshold above 1: 0.5.23 dies choosing a level (UnboundLocalError); both branches take group 1
    assert judge("sm_group_num: 3\nmanual_divisions: [[112, 20, 4]]\n") == {
        "0.5.23": (False, "run"), "standard@b875545": (True, ""), "overlay@2126b0b": (True, "")}
    # overlay without manual_divisions: refused at load where the key is read
    assert judge("sm_group_num: 8\noverlap_decode_full_sm: true\n") == {
        "0.5.23": (True, ""), "standard@b875545": (False, "load"), "overlay@2126b0b": (False, "load")}
    # the automatic split on Blackwell: only the rewritten divide_sm has (8, 8) for majors >= 9
    assert judge("sm_group_num: 8\n", (148, (10, 0))) == {
        "0.5.23": (False, "start-up"), "standard@b875545": (False, "start-up"), "overlay@2126b0b": (True, "")}
    # a four-number entry: unpacked at start-up by 0.5.23 and b8755452, refused at load by 2126b0b7
    assert judge("sm_group_num: 3\nmanual_divisions: [[112, 20, 0, 7]]\n") == {
        "0.5.23": (False, "start-up"), "standard@b875545": (False, "start-up"), "overlay@2126b0b": (False, "load")}


def test_rewritten_divide_sm_levels() -> None:
    """Li-brua/sglang 2126b0b7 divide_sm on an H100 (132 SMs, cc 9.0), 6 levels: candidates 8..112 in
    steps of 8 (decode >= 16, no prefill-half rule: 14 values), indices round(i * 13 / 5) = 0, 3, 5, 8, 10, 13."""
    levels = sr.automatic_levels("overlay@2126b0b", 132, (9, 0), 8)
    assert [(s.prefill_sms, s.decode_sms) for s in levels] == [
        (112, 20), (88, 44), (72, 60), (48, 84), (32, 100), (8, 124)]
    assert [(s.prefill_sms, s.decode_sms) for s in sr.automatic_levels("overlay@2126b0b", 132, (9, 0), 3)] == [
        (112, 20)]
    # the release's: prefill at least half (the chapter's H100 levels)
    assert [s.prefill_sms for s in sr.automatic_levels("0.5.23", 132, (9, 0), 8)] == [112, 104, 96, 88, 80, 72]


def test_check_config_reports_per_revision_and_exits_by_sglang() -> None:
    overlay = str(RUNBOOKS / "standard_b8755452_overlay_h20.yaml")
    r = runner.invoke(app, ["check-config", overlay, "--gpu", "h20", "--json"])
    assert r.exit_code == 2
    d = json.loads(r.stdout)
    assert d["sglang"] == "0.5.23" and d["ok"] is False
    assert [(v["sglang"], v["accepted"]) for v in d["revisions"]] == [
        ("0.5.23", False), ("standard@b875545", True), ("overlay@2126b0b", True)]
    assert d["revisions"][1]["source"].startswith("sgl-project/sglang b8755452")
    ok = runner.invoke(app, ["check-config", overlay, "--gpu", "h20", "--sglang", "overlay@2126b0b"])
    assert ok.exit_code == 0, ok.stderr
    assert "OK for H20 96GB (78 SMs) under Li-brua/sglang 2126b0b7" in " ".join(ok.stdout.split())
    assert "unreleased" not in ok.stdout
    # estimate takes the file under the overlay's revision only to say pdmux cannot time it
    e = runner.invoke(app, ["estimate", "--gpu", "h20", "--config", overlay, "--sglang", "overlay@2126b0b"])
    assert e.exit_code == 2 and "overlap_decode_full_sm: true runs decode on the whole device" in e.stderr
    w = runner.invoke(app, ["check-config", str(RUNBOOKS / "layerwise_1b7accf6_h100.yaml"), "--gpu", "h100",
                            "--model", "gpt-oss-20b"])
    assert w.exit_code == 0 and "pdmux: warning: gpt-oss-20b: no forward_split_prefill" in w.stderr
