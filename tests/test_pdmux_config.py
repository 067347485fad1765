"""Tests for pdmux_cli.sglang.pdmux_config: SGLang's pdmux YAML, parse/dump, validation rules.

Expected values are written out literally from sglang-pdmux.md ("The YAML config", SGLang's H200
docs example, sgl-kernel's green-context checks) and the CUDA granularity table.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdmux_cli.sglang import split_levels
from pdmux_cli.util.errors import InputError
from pdmux_cli.sglang.pdmux_config import (
    HEADER,
    RULE_LABELS,
    RULES,
    PdmuxConfig,
    Problem,
    config_from_plan,
    default_thresholds,
    driver_divisions,
    dump_config,
    is_error,
    launch_command,
    launch_flags,
    load_config,
    parse_config,
    parse_divisions,
    stream_group_count,
    validate,
)

H200_DIVISIONS = ((112, 20, 1), (104, 28, 5), (96, 36, 10), (80, 52, 15), (64, 68, 20), (56, 76, 25))
H200 = PdmuxConfig(
    sm_group_num=8, manual_divisions=H200_DIVISIONS, split_forward_token_budget=65536, decode_bs_divisor=36
)
H200_YAML = """\
sm_group_num: 8
manual_divisions:
  - [112, 20, 1]
  - [104, 28, 5]
  - [96, 36, 10]
  - [80, 52, 15]
  - [64, 68, 20]
  - [56, 76, 25]
split_forward_token_budget: 65536
decode_bs_divisor: 36
"""
HOPPER = (9, 0)


def wheres(problems: list[Problem]) -> list[tuple[str, str]]:
    return [(p.where, p.rule) for p in problems]


def with_entry(index: int, entry: tuple[int, int, int]) -> PdmuxConfig:
    divisions = list(H200_DIVISIONS)
    divisions[index] = entry
    return replace(H200, manual_divisions=tuple(divisions))


# ------------------------------------------------------------------ parse


def test_h200_docs_example_parses_and_validates_clean():
    config, problems = parse_config(H200_YAML)
    assert problems == []
    assert config == H200
    assert validate(config, total_sms=132, cc=HOPPER, cli_sm_group_num=8) == []


def test_defaults_are_sglangs():
    assert PdmuxConfig() == PdmuxConfig(8, (), 65536, 36, None, None)
    config, problems = parse_config("sm_group_num: 8\n")
    assert config == PdmuxConfig()
    assert problems == []


def test_lists_are_normalised_to_tuples():
    assert PdmuxConfig(manual_divisions=[[112, 20, 1]]).manual_divisions == ((112, 20, 1),)


def test_missing_sm_group_num_is_refused_by_both():
    """0.5.23's load_pdmux_config raises 'Missing required field: sm_group_num', and so does the
    unreleased loader."""
    config, problems = parse_config("decode_bs_divisor: 24\n")
    assert config == PdmuxConfig(decode_bs_divisor=24)
    assert wheres(problems) == [("sm_group_num", "both")]
    assert "Missing required field" in problems[0].message


def test_unknown_key_is_reported_with_a_suggestion():
    config, problems = parse_config("sm_group_num: 8\nsm_group_nums: 6\n")
    assert config == PdmuxConfig()
    assert wheres(problems) == [("sm_group_nums", "pdmux")]
    assert "'sm_group_num'" in problems[0].message


@pytest.mark.parametrize(
    "text, where, value",
    [
        ('sm_group_num: "8"\n', "sm_group_num", 8),  # a string that reads as an int: used, reported
        ("sm_group_num: 8.0\n", "sm_group_num", 8),  # an integral float: used, reported
        ("sm_group_num: 8.5\n", "sm_group_num", 8),  # unusable: the default stays
        ("sm_group_num: true\n", "sm_group_num", 8),
        ("sm_group_num: eight\n", "sm_group_num", 8),
        ("sm_group_num: 8\ndecode_bs_divisor: 36.0\n", "decode_bs_divisor", 36),
        ("sm_group_num: 8\nsplit_forward_token_budget: lots\n", "split_forward_token_budget", 65536),
        ("sm_group_num: 8\nsplit_forward_token_budget:\n", "split_forward_token_budget", 65536),
        ("sm_group_num: 8\nsplit_forward_token_budget: [1]\n", "split_forward_token_budget", 65536),
    ],
)
def test_wrong_types_become_problems(text, where, value):
    config, problems = parse_config(text)
    assert wheres(problems) == [(where, "both")]
    assert getattr(config, where) == value


def test_optional_keys_parse_and_bad_bool_is_reported():
    config, problems = parse_config(
        "sm_group_num: 3\nmanual_divisions: [[112, 20, 0]]\nmax_split_forward_layers: 4\n"
        "overlap_decode_full_sm: true\n"
    )
    assert problems == []
    assert config.max_split_forward_layers == 4
    assert config.overlap_decode_full_sm is True
    config, problems = parse_config("sm_group_num: 8\noverlap_decode_full_sm: 1\nmax_split_forward_layers:\n")
    assert wheres(problems) == [("overlap_decode_full_sm", "both")]
    assert config.overlap_decode_full_sm is None
    assert config.max_split_forward_layers is None


@pytest.mark.parametrize(
    "entry, rule",
    [
        ("[112, 20]", "both"),
        ("112", "both"),
        ("[112, twenty, 1]", "both"),
        ("[112, 20, .inf]", "both"),
        ("{prefill: 112}", "both"),
    ],
)
def test_unreadable_entry_leaves_divisions_empty(entry, rule):
    text = f"sm_group_num: 4\nmanual_divisions:\n  - [120, 12, 0]\n  - {entry}\n"
    config, problems = parse_config(text)
    assert wheres(problems) == [("manual_divisions[1]", rule)]
    assert config.manual_divisions == ()


def test_unreadable_entry_with_wrong_count_still_reports_the_count():
    config, problems = parse_config("sm_group_num: 8\nmanual_divisions:\n  - [112, 20]\n")
    assert wheres(problems) == [("manual_divisions[0]", "both"), ("manual_divisions", "both")]
    assert config.manual_divisions == ()


def test_long_entry_crashes_both_and_keeps_three():
    """0.5.23's initialize_stream_groups unpacks three values per entry: ValueError at start-up."""
    config, problems = parse_config("sm_group_num: 3\nmanual_divisions: [[112, 20, 1, 9]]\n")
    assert wheres(problems) == [("manual_divisions[0]", "both")]
    assert "SGLang 0.5.23 (latest release) dies at start-up" in problems[0].message
    assert "ValueError" in problems[0].message
    assert config.manual_divisions == ((112, 20, 1),)


@pytest.mark.parametrize("threshold, acts", [(0.5, 1), (4.2, 5), (-0.5, 0)])
def test_float_threshold_is_a_warning_and_kept_as_written(threshold, acts):
    """SGLang compares the decode batch with a float threshold as it is (every version runs it)."""
    config, problems = parse_config(f"sm_group_num: 3\nmanual_divisions: [[112, 20, {threshold}]]\n")
    assert wheres(problems) == [("manual_divisions[0]", "warning")]
    assert f"acts as {acts}" in problems[0].message
    assert config.manual_divisions == ((112, 20, threshold),)
    assert [p.rule for p in problems if is_error(p)] == []


def test_float_thresholds_are_compared_as_written():
    """[0.5, 1] strictly increases (unreleased SGLang accepts it); 1.5 is above 1, so a batch of one
    matches nothing and 0.5.23 crashes."""
    config = PdmuxConfig(sm_group_num=4, manual_divisions=((112, 20, 0.5), (104, 28, 1)))
    assert validate(config, total_sms=132, cc=HOPPER) == []
    config = PdmuxConfig(sm_group_num=3, manual_divisions=((112, 20, 1.5),))
    problems = validate(config, total_sms=132, cc=HOPPER)
    assert wheres(problems) == [("manual_divisions[0]", "old")]
    assert "fewer than 2 requests" in problems[0].message
    assert split_levels.plan_groups(132, HOPPER, 3, config.manual_divisions).thresholds == [1.5]
    assert split_levels.choose_group(3, 1, True,
                                     thresholds=[1.5]) == 1 and split_levels.older_sglang_crashes([1.5], 1)
    assert not split_levels.older_sglang_crashes([1.5], 2)


def test_integral_float_sm_group_num_runs_with_manual_divisions_only():
    """With manual_divisions 0.5.23 only compares the entry count with sm_group_num - 2 (6 == 6.0);
    without them divide_sm slices with 8.0 - 2 and dies with TypeError."""
    entries = "".join(f"  - [{p}, {132 - p}, {t}]\n"
                      for p, t in ((112, 0), (104, 5), (96, 10), (80, 15), (64, 20), (56, 25)))
    config, problems = parse_config("sm_group_num: 8.0\nmanual_divisions:\n" + entries)
    assert wheres(problems) == [("sm_group_num", "warning")]
    assert config.sm_group_num == 8 and len(config.manual_divisions) == 6
    config, problems = parse_config("sm_group_num: 8.0\n")
    assert wheres(problems) == [("sm_group_num", "both")]
    assert "TypeError in divide_sm" in problems[0].message
    _, problems = parse_config("sm_group_num: 3\nmanual_divisions: [[112, 20, 0]]\ndecode_bs_divisor: 36.0\n")
    assert wheres(problems) == [("decode_bs_divisor", "warning")]
    _, problems = parse_config("sm_group_num: 8.5\nmanual_divisions: [[112, 20, 0]]\n")
    assert wheres(problems) == [("sm_group_num", "both")]


def test_float_and_string_in_an_entry_are_read_and_reported():
    config, problems = parse_config('sm_group_num: 3\nmanual_divisions: [[112.0, "20", 1]]\n')
    assert wheres(problems) == [("manual_divisions[0]", "both"), ("manual_divisions[0]", "both")]
    assert "prefill_sm" in problems[0].message and "decode_sm" in problems[1].message
    assert config.manual_divisions == ((112, 20, 1),)


def test_manual_divisions_null_runs_on_the_release_only():
    """0.5.23: ``raw.get("manual_divisions", [])`` is None, falsy, so the automatic split runs; the
    unreleased loader iterates it and fails."""
    config, problems = parse_config("sm_group_num: 8\nmanual_divisions: null\n")
    assert wheres(problems) == [("manual_divisions", "new")]
    assert "runs it as []" in problems[0].message
    assert config.manual_divisions == ()


@pytest.mark.parametrize("value", ["5", "{a: 1}"])
def test_manual_divisions_not_a_list(value):
    config, problems = parse_config(f"sm_group_num: 8\nmanual_divisions: {value}\n")
    assert wheres(problems) == [("manual_divisions", "both")]
    assert config.manual_divisions == ()


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "just words\n", "42\n", "", "# only a comment\n"])
def test_not_a_mapping_raises_input_error_naming_source(text):
    with pytest.raises(InputError) as info:
        parse_config(text, source="cfg.yaml")
    assert "cfg.yaml" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "text", ["sm_group_num: [8\n", "a: 1\n b: 2\n", "key: 'open\n", "\tsm_group_num: 8\n"]
)
def test_invalid_yaml_raises_one_line_input_error(text):
    with pytest.raises(InputError) as info:
        parse_config(text, source="cfg.yaml")
    message = str(info.value)
    assert re.match(r"cfg\.yaml is not valid YAML \(.+ at line [12], column \d+\)$", message), message
    assert "\n" not in message


# ------------------------------------------------------------------ load


def test_load_config_reads_a_file(tmp_path):
    path = tmp_path / "pdmux.yaml"
    path.write_text(H200_YAML, encoding="utf-8")
    assert load_config(path) == (H200, [])
    assert load_config(str(path)) == (H200, [])


def test_load_config_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(InputError, match="nope.yaml"):
        load_config(path)


def test_load_config_directory(tmp_path):
    with pytest.raises(InputError, match="directory"):
        load_config(tmp_path)


def test_load_config_not_utf8_and_bad_yaml_name_the_path(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00sm")
    with pytest.raises(InputError, match="bin.yaml"):
        load_config(path)
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n", encoding="utf-8")
    with pytest.raises(InputError, match="list.yaml"):
        load_config(path)


def test_load_config_unreadable(tmp_path, monkeypatch):
    path = tmp_path / "locked.yaml"
    path.write_text(H200_YAML, encoding="utf-8")

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(type(path), "open", refuse)
    with pytest.raises(InputError, match="locked.yaml.*Permission denied"):
        load_config(path)


def test_load_config_special_files_are_refused_without_reading(tmp_path):
    with pytest.raises(InputError, match="/dev/zero: is not a regular file"):
        load_config("/dev/zero")
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # opening it would block until a writer came
    with pytest.raises(InputError, match="pipe.yaml: is not a regular file"):
        load_config(fifo)


def test_load_config_over_the_size_limit(tmp_path, monkeypatch):
    from pdmux_cli.sglang import pdmux_config

    path = tmp_path / "big.yaml"
    path.write_text(H200_YAML, encoding="utf-8")
    monkeypatch.setattr(pdmux_config, "MAX_CONFIG_BYTES", len(H200_YAML) - 1)
    with pytest.raises(InputError, match="big.yaml: larger than"):
        load_config(path)
    monkeypatch.setattr(pdmux_config, "MAX_CONFIG_BYTES", len(H200_YAML))
    assert load_config(path) == (H200, [])


def test_duplicate_keys_are_problems():
    text = "sm_group_num: 3\ndecode_bs_divisor: 24\nmanual_divisions: [[112, 20, 0]]\nsm_group_num: 8\n"
    config, problems = parse_config(text)
    assert config.sm_group_num == 8  # as SGLang reads it: the last value
    assert [(p.where, p.rule) for p in problems] == [("sm_group_num", "pdmux")]
    assert "written twice" in problems[0].message and "line 4" in problems[0].message
    # a merge key and its override are not duplicates
    _, problems = parse_config("sm_group_num: 8\nx: &a {k: 1}\ny:\n  <<: *a\n  k: 2\n")
    assert [p.where for p in problems] == ["x", "y"]  # unknown keys only
    # three times: reported twice
    _, problems = parse_config("sm_group_num: 8\ndecode_bs_divisor: 1\ndecode_bs_divisor: "
                               "2\ndecode_bs_divisor: 3\n")
    assert [(p.where, "line 3" in p.message or "line 4" in p.message) for p in problems] == [
        ("decode_bs_divisor", True), ("decode_bs_divisor", True)]


def test_check_config_cli_reports_duplicate_key(tmp_path):
    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    path = tmp_path / "dup.yaml"
    path.write_text(H200_YAML + "decode_bs_divisor: 48\n", encoding="utf-8")
    r = CliRunner().invoke(app, ["check-config", str(path), "--gpu", "h200"])
    assert r.exit_code == 2
    assert "decode_bs_divisor" in r.stdout + r.stderr and "twice" in r.stdout + r.stderr


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads anything")
def test_load_config_unreadable_for_real(tmp_path):
    path = tmp_path / "locked.yaml"
    path.write_text(H200_YAML, encoding="utf-8")
    path.chmod(0)
    with pytest.raises(InputError, match="locked.yaml"):
        load_config(path)


# ------------------------------------------------------------------ validate: each rule once


def test_sm_group_num_below_three():
    assert wheres(validate(PdmuxConfig(sm_group_num=2))) == [("sm_group_num", "both")]


def test_wrong_entry_count():
    config = replace(H200, manual_divisions=H200_DIVISIONS[:5])
    problems = validate(config)
    assert wheres(problems) == [("manual_divisions", "both")]
    assert "exactly 6" in problems[0].message


def test_sum_not_the_device():
    problems = validate(with_entry(2, (96, 32, 10)), total_sms=132)
    assert wheres(problems) == [("manual_divisions[2]", "new")]
    assert "128" in problems[0].message and "132" in problems[0].message


def test_sum_above_the_device_fails_everywhere():
    assert wheres(validate(with_entry(2, (96, 40, 10)), total_sms=132)) == [("manual_divisions[2]", "both")]


def test_sum_not_checked_without_total():
    assert validate(with_entry(2, (96, 32, 10))) == []


@pytest.mark.parametrize("entry", [(0, 132, 10), (132, 0, 10), (-8, 140, 10)])
def test_counts_must_be_positive(entry):
    assert wheres(validate(with_entry(2, entry))) == [("manual_divisions[2]", "both")]


def test_negative_threshold():
    config = with_entry(0, (112, 20, -1))
    assert wheres(validate(config)) == [("manual_divisions[0]", "new")]


def test_non_multiple_of_8_on_hopper():
    problems = validate(with_entry(2, (100, 32, 10)), total_sms=132, cc=HOPPER)
    assert wheres(problems) == [("manual_divisions[2]", "cuda")]
    message = problems[0].message
    assert "104" in message and "28" in message  # the driver's real split: 104 / 28
    assert "96 or 104" in message


def test_driver_divisions_use_what_the_driver_runs():
    """100/32 on an H100 runs as 104/28 (sgl-kernel splits 132, then 100 -> 104); H200's 112/20 as written."""
    config = PdmuxConfig(sm_group_num=4, manual_divisions=((112, 20, 0), (100, 32, 5)))
    real, notes = driver_divisions(config, 132, HOPPER)
    assert real.manual_divisions == ((112, 20, 0), (104, 28, 5))
    assert len(notes) == 1 and "manual_divisions[1] [100, 32] runs as 104/28" in notes[0]
    assert driver_divisions(H200, 132, HOPPER) == (H200, [])
    assert driver_divisions(PdmuxConfig(), 132, HOPPER) == (PdmuxConfig(), [])
    # A100 (8.x: multiples of 2, at least 4): 85/23 -> 86/22
    a100 = PdmuxConfig(sm_group_num=3, manual_divisions=((85, 23, 0),))
    assert driver_divisions(a100, 108, (8, 0))[0].manual_divisions == ((86, 22, 0),)
    with pytest.raises(InputError, match="leaves decode none"):
        driver_divisions(PdmuxConfig(sm_group_num=3, manual_divisions=((130, 2, 0),)), 132, HOPPER)


@settings(max_examples=200, deadline=None)
@given(prefill=st.integers(1, 131), sms=st.sampled_from([78, 114, 132, 148, 170]))
def test_driver_split_rounds_prefill_up_and_keeps_the_whole_device(prefill, sms):
    """A split of the whole device: prefill rounded up to the next multiple of 8 (at least 8), decode
    the rest; unchanged when already on the granularity."""
    prefill = min(prefill, sms - 1)
    real = split_levels.driver_split(prefill, sms - prefill, sms, 9)
    assert real.prefill_sms % 8 == 0 and 0 <= real.prefill_sms - max(prefill, 8) < 8
    assert real.prefill_sms + real.decode_sms == sms
    if prefill % 8 == 0:
        assert real == (prefill, sms - prefill)


def test_prefill_below_minimum_on_hopper():
    config = PdmuxConfig(sm_group_num=3, manual_divisions=((4, 128, 0),))
    assert wheres(validate(config, total_sms=132, cc=HOPPER)) == [("manual_divisions[0]", "cuda")]


def test_partial_pair_rounds_decode_up_on_hopper():
    # 112 + 18 = 130 < 132: the pair is rounded up to 136, capped at the device: decode gets 20.
    problems = validate(with_entry(0, (112, 18, 1)), total_sms=132, cc=HOPPER)
    assert wheres(problems) == [("manual_divisions[0]", "new"), ("manual_divisions[0]", "cuda")]
    assert "decode on 20" in problems[1].message


def test_granularity_without_total_checks_prefill_only():
    assert validate(H200, cc=HOPPER) == []
    assert wheres(validate(with_entry(1, (100, 32, 5)), cc=HOPPER)) == [("manual_divisions[1]", "cuda")]


def test_six_sms_multiple_of_two_on_a100_is_fine():
    config = PdmuxConfig(sm_group_num=4, manual_divisions=((102, 6, 0), (96, 12, 6)))
    assert validate(config, total_sms=108, cc=(8, 0)) == []
    # The same 6 SMs are rounded on Hopper, where the unit is 8.
    odd = PdmuxConfig(sm_group_num=3, manual_divisions=((98, 6, 0),))
    assert wheres(validate(odd, total_sms=104, cc=(8, 0))) == []
    assert wheres(validate(odd, total_sms=104, cc=HOPPER)) == [("manual_divisions[0]", "cuda")]


def test_decreasing_thresholds():
    problems = validate(with_entry(3, (80, 52, 8)))
    assert wheres(problems) == [("manual_divisions[3]", "new")]


def test_equal_thresholds_are_not_increasing():
    assert wheres(validate(with_entry(1, (104, 28, 1)))) == [("manual_divisions[1]", "new")]


def test_first_threshold_above_one_warns_about_older_crash():
    problems = validate(with_entry(0, (112, 20, 2)), total_sms=132, cc=HOPPER)
    assert wheres(problems) == [("manual_divisions[0]", "old")]
    assert "UnboundLocalError" in problems[0].message
    assert "0 or 1" in problems[0].message


@pytest.mark.parametrize("threshold", [0, 1])
def test_first_threshold_zero_or_one_is_fine(threshold):
    assert validate(with_entry(0, (112, 20, threshold)), total_sms=132, cc=HOPPER) == []


def test_zero_budget():
    assert wheres(validate(replace(H200, split_forward_token_budget=0))) == [
        ("split_forward_token_budget", "new")
    ]


def test_zero_divisor():
    assert wheres(validate(replace(H200, decode_bs_divisor=0))) == [("decode_bs_divisor", "new")]
    # Without manual_divisions older main divides by it.
    assert wheres(validate(PdmuxConfig(decode_bs_divisor=0))) == [("decode_bs_divisor", "both")]


def test_negative_max_split_forward_layers():
    assert wheres(validate(replace(H200, max_split_forward_layers=-1))) == [
        ("max_split_forward_layers", "new")
    ]
    assert validate(replace(H200, max_split_forward_layers=0)) == []


def test_overlap_decode_full_sm_needs_manual_divisions():
    assert wheres(validate(PdmuxConfig(overlap_decode_full_sm=True))) == [("overlap_decode_full_sm", "new")]
    assert validate(PdmuxConfig(overlap_decode_full_sm=False)) == []
    assert validate(replace(H200, overlap_decode_full_sm=True)) == []


def test_cli_sm_group_num_must_match():
    """Unreleased SGLang refuses any difference; 0.5.23 builds --sm-group-num decode attention backends
    and indexes them by stream group, so fewer than the groups it builds is an IndexError."""
    assert wheres(validate(H200, cli_sm_group_num=10)) == [("--sm-group-num", "new")]
    problems = validate(H200, cli_sm_group_num=6)
    assert wheres(problems) == [("--sm-group-num", "both")]
    assert "IndexError" in problems[0].message and "8 stream groups" in problems[0].message
    assert validate(H200, cli_sm_group_num=8) == []
    # H20's automatic split builds 5 groups for sm_group_num 8: 6 backends are enough for 0.5.23
    assert stream_group_count(PdmuxConfig(), total_sms=78, cc=HOPPER) == 5
    assert wheres(validate(PdmuxConfig(), 78, HOPPER, cli_sm_group_num=6)) == [("--sm-group-num", "new")]
    assert wheres(validate(PdmuxConfig(), 78, HOPPER, cli_sm_group_num=4)) == [("--sm-group-num", "both")]
    assert stream_group_count(PdmuxConfig()) == 8  # device unknown: the YAML's count


def test_automatic_split_on_blackwell_needs_manual_divisions():
    assert wheres(validate(PdmuxConfig(), total_sms=148, cc=(10, 0))) == [("manual_divisions", "both")]
    assert validate(PdmuxConfig(), total_sms=132, cc=HOPPER) == []


def test_automatic_split_without_partitions():
    problems = validate(PdmuxConfig(), total_sms=24, cc=HOPPER)
    assert wheres(problems) == [("manual_divisions", "both")]
    assert "No valid partitions" in problems[0].message


def test_validate_bad_arguments():
    with pytest.raises(InputError):
        validate(H200, total_sms=0)
    with pytest.raises(InputError):
        validate(H200, cc=(5, 2))


def test_every_rule_is_documented():
    problems = (
        validate(with_entry(0, (100, 0, 2)), total_sms=132, cc=HOPPER)
        + validate(PdmuxConfig(sm_group_num=1, decode_bs_divisor=0))
        + parse_config("x: 1\n")[1]
        + parse_config("sm_group_num: 3\nmanual_divisions: [[112, 20, 0.5]]\n")[1]
    )
    assert {p.rule for p in problems} <= set(RULES) == set(RULE_LABELS)
    assert "SGLang 0.5.23 (latest release)" in RULES["old"] and "Li-brua/sglang 2126b0b7" in RULES["new"]
    assert [is_error(p) for p in problems].count(False) == 1
    assert all("\n" not in p.message for p in problems)
    assert str(Problem("sm_group_num", "is 2", "both")) == "sm_group_num: is 2 [both]"


# ------------------------------------------------------------------ dump


def test_dump_h200_is_the_docs_yaml_under_the_header():
    assert dump_config(H200) == HEADER + H200_YAML


def test_dump_empty_and_optional_keys():
    text = dump_config(PdmuxConfig(max_split_forward_layers=0, overlap_decode_full_sm=False))
    assert text == HEADER + (
        "sm_group_num: 8\nmanual_divisions: []\nsplit_forward_token_budget: 65536\n"
        "decode_bs_divisor: 36\nmax_split_forward_layers: 0\noverlap_decode_full_sm: false\n"
    )


def test_parse_of_dump_of_parse_is_unchanged():
    text = dump_config(H200)
    assert dump_config(parse_config(text)[0]) == text


small_ints = st.integers(min_value=-(2**40), max_value=2**40)


@st.composite
def valid_configs(draw):
    n = draw(st.integers(min_value=3, max_value=12))
    manual = draw(st.booleans())
    divisions = ()
    if manual:
        total = draw(st.integers(min_value=n * 2, max_value=400))
        thresholds = sorted(draw(st.sets(st.integers(0, 500), min_size=n - 2, max_size=n - 2)))
        prefills = draw(st.lists(st.integers(1, total - 1), min_size=n - 2, max_size=n - 2))
        divisions = tuple((p, total - p, t) for p, t in zip(prefills, thresholds))
    return PdmuxConfig(
        sm_group_num=n,
        manual_divisions=divisions,
        split_forward_token_budget=draw(st.integers(1, 2**31)),
        decode_bs_divisor=draw(st.integers(1, 4096)),
        max_split_forward_layers=draw(st.none() | st.integers(0, 200)),
        overlap_decode_full_sm=draw(st.none() | st.just(False) | st.just(manual)),
    )


@settings(max_examples=300)
@given(valid_configs())
def test_round_trip_valid_configs(config):
    text = dump_config(config)
    parsed, problems = parse_config(text)
    assert problems == []
    assert parsed == config
    assert dump_config(parsed) == text
    assert [p for p in validate(parsed) if p.rule != "old"] == []


@settings(max_examples=200)
@given(
    st.builds(
        PdmuxConfig,
        sm_group_num=small_ints,
        manual_divisions=st.lists(st.tuples(small_ints, small_ints, small_ints), max_size=8).map(tuple),
        split_forward_token_budget=small_ints,
        decode_bs_divisor=small_ints,
        max_split_forward_layers=st.none() | small_ints,
        overlap_decode_full_sm=st.none() | st.booleans(),
    )
)
def test_round_trip_any_well_typed_config(config):
    text = dump_config(config)
    parsed = parse_config(text)[0]
    assert parsed == config
    assert dump_config(parsed) == text


def test_dump_refuses_non_ints():
    with pytest.raises(TypeError):
        dump_config(PdmuxConfig(sm_group_num=True))


# ------------------------------------------------------------------ from a plan, thresholds


def test_config_from_blackwell_plan_is_manual_and_clean():
    plan = split_levels.plan_groups(148, (10, 0))
    config = config_from_plan(plan, 8, 65536, 36, manual=False)
    assert config.manual_divisions == (
        (120, 28, 0),
        (112, 36, 12),
        (104, 44, 18),
        (96, 52, 24),
        (88, 60, 30),
        (80, 68, 36),
    )
    assert config.sm_group_num == 8
    assert validate(config, total_sms=148, cc=(10, 0), cli_sm_group_num=8) == []


def test_config_from_auto_plan_stays_automatic_unless_asked():
    plan = split_levels.plan_groups(132, HOPPER)
    assert config_from_plan(plan, 8, 65536, 36, manual=False) == PdmuxConfig()
    config = config_from_plan(plan, 8, 65536, 36, manual=True)
    assert config.manual_divisions == (
        (112, 20, 0),
        (104, 28, 12),
        (96, 36, 18),
        (88, 44, 24),
        (80, 52, 30),
        (72, 60, 36),
    )
    assert validate(config, total_sms=132, cc=HOPPER) == []


def test_config_from_plan_with_fewer_levels_sets_sm_group_num():
    plan = split_levels.plan_groups(78, HOPPER)  # H20: 3 levels
    config = config_from_plan(plan, 8, 65536, 36, manual=True)
    assert config.sm_group_num == 5
    assert config.manual_divisions == ((56, 22, 0), (48, 30, 24), (40, 38, 36))
    assert validate(config, total_sms=78, cc=HOPPER) == []


def test_config_from_manual_plan_keeps_its_thresholds():
    plan = split_levels.plan_groups(132, HOPPER, 8, [list(e) for e in H200_DIVISIONS])
    assert config_from_plan(plan, 8, 65536, 36, manual=False) == H200


def test_config_from_plan_refuses_divisor_below_levels():
    plan = split_levels.plan_groups(132, HOPPER)
    with pytest.raises(InputError, match="decode_bs_divisor"):
        config_from_plan(plan, 8, 65536, 4, manual=True)


def test_default_thresholds_h100():
    assert default_thresholds(6, 36) == [0, 12, 18, 24, 30, 36]
    assert default_thresholds(1, 36) == [0]
    assert default_thresholds(3, 36) == [0, 24, 36]


def test_default_thresholds_reproduce_the_linear_rule_on_h100():
    groups = split_levels.stream_groups(132, 9)
    n = len(groups)
    thresholds = default_thresholds(n - 2, 36)
    for decode_bs in range(1, 201):
        linear = split_levels.choose_group(n, decode_bs, True, 36)
        manual = split_levels.choose_group(n, decode_bs, True, 36, thresholds)
        assert manual == linear, decode_bs
        assert not split_levels.older_sglang_crashes(thresholds, decode_bs)
    # The chapter's table.
    assert [split_levels.choose_group(n, bs, True, 36, thresholds)
            for bs in (1, 6, 12, 18, 24, 30, 36, 64)] == [
        1,
        1,
        2,
        3,
        4,
        5,
        6,
        6,
    ]


@given(st.integers(1, 16), st.integers(1, 300))
def test_default_thresholds_match_linear_rule_generally(levels, divisor):
    thresholds = default_thresholds(levels, divisor)
    n = levels + 2
    for decode_bs in range(1, 2 * divisor + 2):
        assert split_levels.choose_group(n, decode_bs, True, divisor,
                                         thresholds) == split_levels.choose_group(
            n, decode_bs, True, divisor
        )
    strictly_increasing = all(a < b for a, b in itertools.pairwise(thresholds))
    if divisor >= levels:
        assert strictly_increasing


@pytest.mark.parametrize("levels, divisor", [(0, 36), (6, 0), (-1, 36)])
def test_default_thresholds_bad_arguments(levels, divisor):
    with pytest.raises(InputError):
        default_thresholds(levels, divisor)


# ------------------------------------------------------------------ CLI helpers


@pytest.mark.parametrize(
    "text, expected",
    [
        ("112:20:0,104:28:5,96:36:10", ((112, 20, 0), (104, 28, 5), (96, 36, 10))),
        ("112/20/0", ((112, 20, 0),)),
        (" 112 : 20 : 0 , 104/28/5 ", ((112, 20, 0), (104, 28, 5))),
        ("112:20:-1", ((112, 20, -1),)),
    ],
)
def test_parse_divisions_good(text, expected):
    assert parse_divisions(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "112:20",
        "112:20:0:4",
        "112:20:x",
        "112:20:0,",
        ",112:20:0",
        "112.0:20:0",
        "112;20;0",
        "a,b",
    ],
)
def test_parse_divisions_bad(text):
    with pytest.raises(InputError) as info:
        parse_divisions(text)
    assert "\n" not in str(info.value)


def test_launch_command_quotes_for_the_shell():
    line = launch_command("/tmp/my dir/pdmux's.yaml", 8)
    assert line.startswith("python -m sglang.launch_server --model-path MODEL --enable-pdmux "
                           "--pdmux-config-path ")
    assert shlex.split(line)[7] == "/tmp/my dir/pdmux's.yaml"
    assert launch_command("pdmux.yaml", 3).endswith(
        "--pdmux-config-path pdmux.yaml --sm-group-num 3 --chunked-prefill-size -1 "
        "--disable-overlap-schedule")


def test_launch_flags():
    assert launch_flags("/tmp/pdmux.yaml", 8) == [
        "--enable-pdmux",
        "--pdmux-config-path",
        "/tmp/pdmux.yaml",
        "--sm-group-num",
        "8",
        "--chunked-prefill-size",
        "-1",
        "--disable-overlap-schedule",
    ]


# ------------------------------------------------------------------ hostile YAML


def test_deep_nesting_is_an_input_error_not_a_crash(tmp_path):
    """60 kB of '[': libyaml's composer overflows the C stack (exit 139, no message); the
    Python parser's recursion limit makes it one line and exit 2. Run in a child process so a
    regression cannot take the test session down with it."""
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 60_000)
    r = subprocess.run([sys.executable, "-m", "pdmux_cli", "check-config", str(path)],
                       check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-300:])
    assert r.stderr.count("\n") == 1 and "nested too deeply" in r.stderr


@pytest.mark.parametrize("value", ["2025-13-45", "9" * 5000])
def test_values_yaml_cannot_build(value):
    with pytest.raises(InputError, match="a value YAML cannot read"):
        parse_config(f"sm_group_num: 8\ndecode_bs_divisor: {value}\n", source="cfg.yaml")


def test_alias_bomb_quoted_briefly():
    items = ["&a0 [" + ", ".join(["lol"] * 9) + "]"]
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    _, problems = parse_config("sm_group_num: 8\ndecode_bs_divisor: [" + ", ".join(items) + "]\n")
    assert problems and all(len(str(p)) < 400 for p in problems)
