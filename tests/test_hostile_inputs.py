"""Issue 23: hostile files and values, and what a new user trips on. Every case is one clear line and the
right exit code (2 for input, 1 at run time), never a traceback; output files whole or not at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_assertions import assert_one_line_error
from typer.testing import CliRunner

from pdmux_cli.cli import app

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures"
runner = CliRunner()

# --- control characters in any YAML pdmux reads -------------------------------------------------------

BAD_CHARACTERS = [("\x00", "U+0000"), ("\x07", "U+0007"), ("\ufffe", "U+FFFE"), ("\x1b", "U+001B")]


def _yaml_commands(path: str) -> list[list[str]]:
    """Every command and option that reads a YAML the user wrote, on ``path``."""
    trace = str(FIX / "azure_conv_50.csv")
    cmds = [
        ["check-config", path],
        ["splits", "--config", path],
        ["estimate", "--config", path],
        ["estimate", "--gpu", path],
        ["splits", "--gpu", path],
        ["estimate", "--calibration", path],
        ["gen-config", "--slo-itl", "60", "--context", "2048", "--calibration", path],
        ["calibrate", "--merge", path, "--merge", path],
        ["simulate", "--synthetic", "--qps", "1", "--duration", "2", "--config", path],
        ["simulate", "--synthetic", "--qps", "1", "--duration", "2", "--calibration", path],
        ["capacity", "--synthetic", "--qps", "1", "--max-requests", "20", "--slo-ttft", "1000", "--slo-itl",
         "60", "--config", path],
    ]
    cmds.append(["tune", "--trace", trace, "--slo-ttft", "1000", "--slo-itl", "60", "--calibration", path])
    return cmds


@pytest.mark.parametrize(("char", "code"), BAD_CHARACTERS)
def test_a_control_character_in_any_yaml_is_one_line(tmp_path, char, code) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"sm_group_num: 8{char}\n", encoding="utf-8")
    for args in _yaml_commands(str(path)):
        r = runner.invoke(app, args)
        assert_one_line_error(r, 2, f"character {code} at line 1, column 16 is not allowed")


def test_a_control_character_in_a_gpu_profile_names_its_line(tmp_path) -> None:
    text = (ROOT / "profiles" / "gpus" / "h100-sxm.yaml").read_text()
    path = tmp_path / "my-gpu.yaml"
    path.write_text(text + "# \x01 pasted\n")
    line = text.count("\n") + 1
    r = runner.invoke(app, ["estimate", "--gpu", str(path)])
    assert_one_line_error(r, 2, f"GPU profile {path} is not valid YAML: character U+0001 at line {line}, column 3")


# --- output paths ---------------------------------------------------------------------------------------


def _simulate_csv(csv: str) -> object:
    return runner.invoke(app, ["simulate", "--synthetic", "--qps", "1", "--duration", "5", "--workers", "1",
                               "--csv", csv])


@pytest.mark.skipif(not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK), reason="no /dev/shm")
def test_dev_shm_is_a_folder_of_files() -> None:
    target = Path("/dev/shm") / f"pdmux-test-{os.getpid()}.csv"
    try:
        r = _simulate_csv(str(target))
        assert r.exit_code == 0, r.stderr
        assert target.read_text().startswith("policy,request,")
    finally:
        target.unlink(missing_ok=True)


@pytest.mark.parametrize("target", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_streams_stay_refused(target) -> None:
    assert_one_line_error(_simulate_csv(target), 2, "it is a device or a stream")


def test_a_link_to_a_stream_is_refused(tmp_path) -> None:
    (tmp_path / "out.csv").symlink_to("/dev/stdout")
    assert_one_line_error(_simulate_csv(str(tmp_path / "out.csv")), 2, "it is a device or a stream")


@pytest.mark.parametrize("length", [242, 249, 255])
def test_names_up_to_the_file_system_limit_are_written(tmp_path, length) -> None:
    name = "r" * (length - 4) + ".csv"
    r = _simulate_csv(str(tmp_path / name))
    assert r.exit_code == 0, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_utf8_name_cut_for_the_temporary_file_is_written(tmp_path) -> None:
    name = "é" * 125 + ".csv"  # 254 bytes: the temporary name is cut between characters
    r = _simulate_csv(str(tmp_path / name))
    assert r.exit_code == 0, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_name_past_the_limit_is_one_line(tmp_path) -> None:
    assert_one_line_error(_simulate_csv(str(tmp_path / ("r" * 256))), 2, "file name too long")


@pytest.mark.parametrize("args", [
    ["simulate", "--synthetic", "--qps", "1", "--duration", "5", "--csv", "newname/"],
    ["simulate", "--synthetic", "--qps", "1", "--duration", "5", "--plot", "plots/"],
    ["gen-config", "-o", "configs/"],
    ["estimate", "--plot", "x/"],
])
def test_a_trailing_slash_is_a_folder_not_a_file(tmp_path, monkeypatch, args) -> None:
    monkeypatch.chdir(tmp_path)
    option = next(a for a in args if a.startswith("-") and a not in ("--synthetic",) and args[args.index(a) + 1]
                  .endswith("/"))
    r = runner.invoke(app, args)
    assert_one_line_error(r, 2, "ends with '/', a folder: give a file name")
    assert option in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_dangling_symlink_names_its_targets_folder(tmp_path) -> None:
    link = tmp_path / "out.csv"
    link.symlink_to(tmp_path / "gone" / "x.csv")
    r = _simulate_csv(str(link))
    assert_one_line_error(r, 2, f"it is a symlink to {tmp_path / 'gone' / 'x.csv'}, whose folder "
                                f"{tmp_path / 'gone'} does not exist")


def test_a_config_path_starting_with_a_dash_is_one_argument_of_the_launch_line(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["gen-config", "-o", "--weird.yaml"])
    assert r.exit_code == 0, r.stderr
    assert "--pdmux-config-path ./--weird.yaml --sm-group-num 8" in " ".join(r.stdout.split())
    assert (tmp_path / "--weird.yaml").exists()


# --- help ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--help"], ["simulate", "--help"], []])
def test_help_into_a_reader_that_stops_early_exits_0(args) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "pdmux_cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.readline()
    proc.stdout.close()  # `| head -1`
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 0, err
    assert err == b""


def test_flags_show_no_bool_metavar() -> None:
    for args in (["--help"], ["simulate", "--help"], ["estimate", "--help"]):
        r = runner.invoke(app, args, env={"COLUMNS": "120"})
        assert r.exit_code == 0
        assert "<bool>" not in r.stdout
    r = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "120"})
    assert "--csv" in r.stdout and "<path>" in r.stdout
