"""Each SGLang revision's verdict on a pdmux YAML (sglang_rules), against SGLang's own runbooks.

The runbook YAMLs in tests/fixtures/sglang_runbooks/ are the YAML blocks of SGLang's manual runbooks,
as written there:
- ``standard_b8755452_*``: sgl-project/sglang test/manual/pdmux/standard_prefill_runbook.md at commit
  b8755452da65eb2dd5c51eef504bfbc843a49865 ("Exclusive partitions (H20, 78 SMs)" and "Overlay");
- ``layerwise_1b7accf6_h100``: sgl-project/sglang test/manual/pdmux/layerwise_prefill_runbook.md at commit
  1b7accf6a138a6971a1f6c76a30b0e359f770f15 ("Example for a 132-SM GPU");
- ``layerwise_a64f33f0_h100``: the same runbook at sgl-project/sglang a64f33f089e9863b360992950ca1436ca6cba8f8
  (feat/dsv41-pdmux), whose example adds ``max_split_forward_layers: 0``;
- ``glm53_dspark_a926d916``: Li-brua/sglang GLM53_FLASH_PDMUX_DSPARK.md at
  a926d91685f4c280ba9f62d313700880596547f6 (feat/glm53-flash-pdmux, "Launch": prefill capped at 104 SMs,
  full-device decode, ``max_split_forward_layers: 2``), run on a 132-SM GPU as the runbook's 104 + 16 implies.
The verdicts are what each revision's code does with them (pdmux_context.py load_pdmux_config and
initialize_stream_groups at the commits sglang_support names; sgl-kernel's positive-count check). Under
sgl-project/sglang main at 2260e612 every file its loader (0.5.23's) takes is refused at start-up:
multiplexing_mixin.py init_pdmux reads self.gpu_id, which managers/scheduler.py no longer has
(sgl-project/sglang#37714). sgl-project/sglang a64f33f0's pdmux_context.py was not read: no verdict (None).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.sglang import pdmux_config as pc
from pdmux_cli.sglang import revision_rules as sr
from pdmux_cli.cli import app
from pdmux_cli.util.errors import InputError

RUNBOOKS = Path(__file__).parent / "fixtures" / "sglang_runbooks"
H20, H100 = (78, (9, 0)), (132, (9, 0))
runner = CliRunner()


def _verdicts(name: str, device: tuple[int, tuple[int, int]]) -> dict[str, tuple[bool, str]]:
    config, problems = pc.load_config(RUNBOOKS / name)
    return {v.revision: (v.accepted, v.stage) for v in sr.verdicts(config, problems, *device)}


NO_VERDICT = (None, "")  # dsv41@a64f33f: its loader was not read
STARTUP = (False, "start-up")


@pytest.mark.parametrize("name, device, expected", [
    # exclusive, every entry sums to the H20's 78 SMs, thresholds 1..8 rising: every revision runs it
    ("standard_b8755452_exclusive_h20.yaml", H20,
     {"0.5.23": (True, ""), "standard@b875545": (True, ""), "overlay@2126b0b": (True, ""),
      "main@2260e61": STARTUP, "dsv41@a64f33f": NO_VERDICT}),
    # overlay with decode_sm 0 placeholders: 0.5.23 ignores overlap_decode_full_sm and sgl-kernel refuses a
    # 0-SM decode side; b8755452 accepts (prefill 24 and 40 inside (0, 78)); 2126b0b7's loader takes
    # decode_sm >= 0 with the overlay
    ("standard_b8755452_overlay_h20.yaml", H20,
     {"0.5.23": STARTUP, "standard@b875545": (True, ""), "overlay@2126b0b": (True, ""),
      "main@2260e61": STARTUP, "dsv41@a64f33f": NO_VERDICT}),
    ("layerwise_1b7accf6_h100.yaml", H100,
     {"0.5.23": (True, ""), "standard@b875545": (True, ""), "overlay@2126b0b": (True, ""),
      "main@2260e61": STARTUP, "dsv41@a64f33f": NO_VERDICT}),
    # the 132-SM example on a 78-SM H20: 132 SMs asked for; 2126b0b7 wants every SM used exactly
    ("layerwise_1b7accf6_h100.yaml", H20,
     {"0.5.23": STARTUP, "standard@b875545": STARTUP, "overlay@2126b0b": STARTUP,
      "main@2260e61": STARTUP, "dsv41@a64f33f": NO_VERDICT}),
    # the H20 exclusive file on a 132-SM H100: 0.5.23 and b8755452 leave SMs idle, 2126b0b7 refuses
    ("standard_b8755452_exclusive_h20.yaml", H100,
     {"0.5.23": (True, ""), "standard@b875545": (True, ""), "overlay@2126b0b": (False, "start-up"),
      "main@2260e61": STARTUP, "dsv41@a64f33f": NO_VERDICT}),
    # a64f33f0's example: 104 + 28 = 132; max_split_forward_layers is ignored by every loader that does not
    # read it (0.5.23, b8755452, 2126b0b7 take only their own keys)
    ("layerwise_a64f33f0_h100.yaml", H100,
     {"0.5.23": (True, ""), "standard@b875545": (True, ""), "overlay@2126b0b": (True, ""),
      "main@2260e61": STARTUP, "dsv41@a64f33f": NO_VERDICT}),
    # GLM-5.3's [104, 0, 0] overlay: 0.5.23 (and so main's loader) reads no overlay, and sgl-kernel refuses
    # the 0-SM decode side; b8755452 and 2126b0b7 run it (104 inside (0, 132), decode_sm >= 0 with the
    # overlay)
    ("glm53_dspark_a926d916.yaml", H100,
     {"0.5.23": STARTUP, "standard@b875545": (True, ""), "overlay@2126b0b": (True, ""),
      "main@2260e61": STARTUP, "dsv41@a64f33f": NO_VERDICT}),
])
def test_runbooks_are_accepted_or_refused_as_their_code_does(name, device, expected) -> None:
    assert _verdicts(name, device) == expected


def test_loader_rules_differ_by_revision() -> None:
    def judge(text: str, device=H100) -> dict[str, tuple[bool, str]]:
        config, problems = pc.parse_config(text)
        return {v.revision: (v.accepted, v.stage) for v in sr.verdicts(config, problems, *device)}

    def three(text: str, device=H100) -> dict[str, tuple[bool, str]]:
        got = judge(text, device)
        # main@2260e61 refuses at start-up whatever loads (init_pdmux's self.gpu_id); a64f33f0: not read
        assert got.pop("dsv41@a64f33f") == NO_VERDICT
        assert got.pop("main@2260e61") == STARTUP
        return got

    # thresholds not strictly increasing: only 2126b0b7's loader checks them (0.5.23 runs it)
    assert three("sm_group_num: 4\nmanual_divisions: [[112, 20, 0], [104, 28, 0]]\n") == {
        "0.5.23": (True, ""), "standard@b875545": (True, ""), "overlay@2126b0b": (False, "load")}
    # every threshold above 1: 0.5.23 dies choosing a level (UnboundLocalError); both branches take group 1
    assert three("sm_group_num: 3\nmanual_divisions: [[112, 20, 4]]\n") == {
        "0.5.23": (False, "run"), "standard@b875545": (True, ""), "overlay@2126b0b": (True, "")}
    # overlay without manual_divisions: refused at load where the key is read
    assert three("sm_group_num: 8\noverlap_decode_full_sm: true\n") == {
        "0.5.23": (True, ""), "standard@b875545": (False, "load"), "overlay@2126b0b": (False, "load")}
    # the automatic split on Blackwell: only the rewritten divide_sm has (8, 8) for majors >= 9
    assert three("sm_group_num: 8\n", (148, (10, 0))) == {
        "0.5.23": (False, "start-up"), "standard@b875545": (False, "start-up"), "overlay@2126b0b": (True, "")}
    # a four-number entry: unpacked at start-up by 0.5.23 and b8755452, refused at load by 2126b0b7
    assert three("sm_group_num: 3\nmanual_divisions: [[112, 20, 0, 7]]\n") == {
        "0.5.23": (False, "start-up"), "standard@b875545": (False, "start-up"),
        "overlay@2126b0b": (False, "load")}
    # what main@2260e61's loader (pdmux_context.py load_pdmux_config, 0.5.23's) refuses is refused at load,
    # before init_pdmux reaches self.gpu_id
    short = judge("sm_group_num: 2\n")
    assert short["main@2260e61"] == (False, "load") == short["0.5.23"]
    wrong_count = judge("sm_group_num: 4\nmanual_divisions: [[112, 20, 0]]\n")
    assert wrong_count["main@2260e61"] == (False, "load")
    config, problems = pc.parse_config("sm_group_num: 8\n")
    mine = sr.verdict(config, problems, "main@2260e61", 132, (9, 0))
    assert "self.gpu_id" in mine.reason and "#37714" in mine.reason


def test_rewritten_divide_sm_levels() -> None:
    """Li-brua/sglang 2126b0b7 divide_sm on an H100 (132 SMs, cc 9.0), 6 levels: candidates 8..112 in
    steps of 8 (decode >= 16, no prefill-half rule: 14 values), indices round(i * 13 / 5) = 0, 3, 5, 8, 10,
    13."""
    levels = sr.automatic_levels("overlay@2126b0b", 132, (9, 0), 8)
    assert [(s.prefill_sms, s.decode_sms) for s in levels] == [
        (112, 20), (88, 44), (72, 60), (48, 84), (32, 100), (8, 124)]
    assert [(s.prefill_sms, s.decode_sms)
            for s in sr.automatic_levels("overlay@2126b0b", 132, (9, 0), 3)] == [
        (112, 20)]
    # the release's: prefill at least half (the chapter's H100 levels)
    assert [s.prefill_sms for s in sr.automatic_levels("0.5.23", 132, (9, 0), 8)] == [
        112, 104, 96, 88, 80, 72]


def test_main_2260e612_levels_are_its_divide_sm_by_hand() -> None:
    """sgl-project/sglang main at 2260e612, python/sglang/srt/multiplex/pdmux_context.py divide_sm (unchanged
    since 2c036f1e): candidates x from min to total - min in steps of the granularity with x >= total - x and
    total - x >= 16; with at least g = sm_group_num - 2 of them every (len // g)-th from the smallest, the
    first g kept; fewer: all; largest prefill first.
    - H100 (132 SMs, 9.0: (8, 8)): x in 72..112 by 8, 6 values, step 1 -> all six;
    - A100 (108 SMs, 8.0: (4, 2)): x in 54..92 by 2, 20 values, step 20 // 6 = 3 -> 54, 60, 66, 72, 78, 84;
    - H20 (78 SMs, 9.0): x in {40, 48, 56}, fewer than 6 -> all three;
    - H100 with sm_group_num 4 (g = 2): step 6 // 2 = 3 -> 72, 96."""
    def levels(sms: int, cc: tuple[int, int], groups: int) -> list[tuple[int, int]]:
        return [(s.prefill_sms, s.decode_sms) for s in sr.automatic_levels("main@2260e61", sms, cc, groups)]

    assert levels(132, (9, 0), 8) == [(112, 20), (104, 28), (96, 36), (88, 44), (80, 52), (72, 60)]
    assert levels(108, (8, 0), 8) == [(84, 24), (78, 30), (72, 36), (66, 42), (60, 48), (54, 54)]
    assert levels(78, (9, 0), 8) == [(56, 22), (48, 30), (40, 38)]
    assert levels(132, (9, 0), 4) == [(96, 36), (72, 60)]
    # Blackwell: get_arch_constraints raises for majors other than 6-9, as 0.5.23's does
    with pytest.raises(InputError, match="Unsupported compute capability: 10.0"):
        sr.automatic_levels("main@2260e61", 148, (10, 0), 8)
    # a64f33f0's divide_sm was not read: no levels, said as such
    with pytest.raises(InputError, match="not read|not known"):
        sr.automatic_levels("dsv41@a64f33f", 132, (9, 0), 8)


def test_layer_cap_is_the_yaml_s_where_the_revision_reads_it() -> None:
    """sgl-project/sglang a64f33f0 multiplexing_mixin.py _get_split_forward_count: with decode work,
    min(max(1, budget // prefill tokens), max_split_forward_layers if > 0, remaining layers)."""
    capped, _ = pc.load_config(RUNBOOKS / "glm53_dspark_a926d916.yaml")
    assert sr.layer_cap("dsv41@a64f33f", capped) == 2
    for other in ("0.5.23", "standard@b875545", "overlay@2126b0b", "main@2260e61"):
        assert sr.layer_cap(other, capped) == 0  # their loaders ignore the key
    uncapped, _ = pc.load_config(RUNBOOKS / "layerwise_a64f33f0_h100.yaml")
    assert sr.layer_cap("dsv41@a64f33f", uncapped) == 0
    assert sr.layer_cap("dsv41@a64f33f", pc.PdmuxConfig()) == 0  # not written


def test_check_config_reports_per_revision_and_exits_by_sglang() -> None:
    overlay = str(RUNBOOKS / "standard_b8755452_overlay_h20.yaml")
    r = runner.invoke(app, ["check-config", overlay, "--gpu", "h20", "--json"])
    assert r.exit_code == 2
    d = json.loads(r.stdout)
    assert d["sglang"] == "0.5.23" and d["ok"] is False
    assert [(v["sglang"], v["accepted"]) for v in d["revisions"]] == [
        ("0.5.23", False), ("standard@b875545", True), ("overlay@2126b0b", True), ("main@2260e61", False),
        ("dsv41@a64f33f", None)]
    assert d["revisions"][3]["stage"] == "start-up" and d["revisions"][4]["stage"] is None
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


def test_check_config_says_main_s_start_up_failure_and_refuses_to_judge_an_unread_loader() -> None:
    layerwise = str(RUNBOOKS / "layerwise_1b7accf6_h100.yaml")
    r = runner.invoke(app, ["check-config", layerwise, "--gpu", "h100", "--sglang", "main@2260e61"],
                      env={"COLUMNS": "250"})
    assert r.exit_code == 2
    out = " ".join(r.stdout.split())
    assert "main@2260e61 * │ refuses (start-up)" in out and "dsv41@a64f33f │ not judged" in out
    assert "#37714" in out and "Scheduler.init_pdmux reads self.gpu_id" in out
    assert "refuses it (start-up)" in r.stderr
    # a revision pdmux follows without its loader's rules is no bad input: every verdict, then exit 1
    unread = runner.invoke(app, ["check-config", layerwise, "--gpu", "h100", "--sglang", "dsv41@a64f33f"],
                           env={"COLUMNS": "250"})
    assert unread.exit_code == 1, unread.stderr
    assert "dsv41@a64f33f * │ not judged" in " ".join(unread.stdout.split())
    assert "0.5.23 │ runs it" in " ".join(unread.stdout.split())
    assert unread.stderr.count("\n") == 1 and unread.stderr.startswith(
        f"pdmux: error: {layerwise}: not judged under dsv41@a64f33f: pdmux has not read")
    as_json = runner.invoke(app, ["check-config", layerwise, "--sglang", "dsv41@a64f33f", "--json"])
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)["ok"] is False
    # a value that is no revision pdmux follows stays bad input, as in estimate
    assert_one_line_error(runner.invoke(app, ["check-config", layerwise, "--sglang", "dsv42@a64f33f"]), 2,
                          "--sglang 'dsv42@a64f33f' is not a revision pdmux has read")
    ok = runner.invoke(app, ["check-config", layerwise, "--gpu", "h100"])
    assert ok.exit_code == 0, ok.stderr  # 0.5.23 runs it; the other rows do not decide
