"""The shared input-file checks (pdmux_cli/util/input_files.py): one InputError line naming the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pdmux_cli.util.errors import InputError
from pdmux_cli.util.input_files import check_input_file, read_input_bytes, read_input_text

SPECIAL = "is not a regular file (a device, pipe or socket)"


def message(call) -> str:
    """The one-line InputError message ``call()`` raises."""
    with pytest.raises(InputError) as err:
        call()
    assert "\n" not in str(err.value)
    return str(err.value)


def test_good_file(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text("sm_group_num: 3  # é\n", encoding="utf-8")
    assert check_input_file(path, "pdmux config") == path
    assert check_input_file(str(path), "pdmux config") == path
    assert read_input_bytes(path, "pdmux config", 100) == path.read_bytes()
    assert read_input_text(path, "pdmux config", 100) == "sm_group_num: 3  # é\n"
    size = path.stat().st_size
    assert read_input_text(path, "pdmux config", size) == "sm_group_num: 3  # é\n"  # exactly at the limit


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    assert message(lambda: check_input_file(missing,
                                            "pdmux config")) == f"pdmux config {missing}: no such file"
    assert message(lambda: read_input_text(missing, "calibration file", 100)) == \
        f"calibration file {missing}: no such file"
    inside_a_file = tmp_path / "file.txt"
    inside_a_file.write_text("x")
    assert message(lambda: read_input_text(inside_a_file / "x.yaml", "GPU profile", 100)) == \
        f"GPU profile {inside_a_file / 'x.yaml'}: no such file"


def test_directory(tmp_path: Path) -> None:
    assert message(lambda: check_input_file(tmp_path,
                                            "trace file")) == f"trace file {tmp_path}: is a directory"
    assert message(lambda: read_input_bytes(tmp_path, "trace file",
                                            100)) == f"trace file {tmp_path}: is a directory"


def test_device_is_refused_without_reading() -> None:
    assert message(lambda: read_input_bytes("/dev/zero", "model config",
                                            10)) == f"model config /dev/zero: {SPECIAL}"


def test_fifo_is_refused_without_blocking(tmp_path: Path, error_from_fifo_reader) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # opening it would block until a writer came
    error = error_from_fifo_reader(lambda: read_input_text(fifo, "pdmux config", 100), fifo)
    assert isinstance(error, InputError) and str(error) == f"pdmux config {fifo}: {SPECIAL}"
    assert message(lambda: check_input_file(fifo, "pdmux config")) == f"pdmux config {fifo}: {SPECIAL}"


def test_over_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b"x" * 1025)
    assert message(lambda: read_input_bytes(path, "model config", 1024)) == \
        f"model config {path}: larger than 1 KiB, the most pdmux reads"
    assert "larger than 1,000 bytes" in message(lambda: read_input_text(path, "model config", 1000))
    path.write_bytes(b"x" * (10 * 1024**2 + 1))
    assert "larger than 10 MiB" in message(lambda: read_input_text(path, "model config", 10 * 1024**2))
    assert len(read_input_bytes(path, "model config", 10 * 1024**2 + 1)) == 10 * 1024**2 + 1


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("sm_group_num: 3  # \xe9\n".encode("latin-1"))
    assert message(lambda: read_input_text(path, "pdmux config",
                                           100)) == f"pdmux config {path}: not UTF-8 text"
    assert read_input_bytes(path, "pdmux config", 100).endswith(b"\xe9\n")  # bytes are not decoded


def test_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "locked.yaml"
    path.write_text("x: 1\n")

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(type(path), "open", refuse)
    assert message(lambda: read_input_text(path, "calibration file", 100)) == \
        f"calibration file {path}: cannot read it (Permission denied)"


def test_hint_is_appended_to_every_refusal(tmp_path: Path) -> None:
    hint = "give a Hugging Face config.json"
    assert message(lambda: check_input_file(tmp_path / "x.json", "model config", hint)).endswith(
        f": no such file; {hint}")
    assert message(lambda: check_input_file(tmp_path, "model config",
                                            hint)).endswith(f": is a directory; {hint}")
    path = tmp_path / "bad.json"
    path.write_bytes(b"\xff\xfe{}")
    assert message(lambda: read_input_text(path, "model config", 100,
                                           hint)).endswith(f": not UTF-8 text; {hint}")
    assert message(lambda: read_input_text(path, "model config", 1, hint)).endswith(
        f": larger than 1 byte, the most pdmux reads; {hint}")


def test_an_empty_path_says_it_is_the_current_folder() -> None:
    """``''`` reaches a loader as ``.`` (``Path('')``): the refusal says what was probably typed (a new
    user's report: 'calibration file .: is a directory')."""
    for typed in ("", "."):
        with pytest.raises(InputError) as err:
            check_input_file(typed, "calibration file")
        assert str(err.value) == ("calibration file " + typed + ": is a directory (an empty path is the "
                                  "current folder): give a file")
