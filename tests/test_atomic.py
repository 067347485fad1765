"""Output files are written whole or not at all, with ordinary permissions."""

from __future__ import annotations

import os

import pytest

from pdmux_cli.util.atomic import atomic_output, write_text_atomic
from pdmux_cli.util.errors import InputError


def test_written_whole_with_umask_permissions(tmp_path) -> None:
    old = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "a.yaml", "x: 1\n")
    finally:
        os.umask(old)
    assert path.read_text() == "x: 1\n"
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["a.yaml"]


def test_failure_leaves_the_old_file_and_no_temporary(tmp_path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("old\n")
    with pytest.raises(KeyboardInterrupt), atomic_output(path) as tmp:
        tmp.write_text("half")
        raise KeyboardInterrupt
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.yaml"]


@pytest.mark.parametrize("target", ["missing/a.yaml", "."])
def test_bad_targets(tmp_path, target) -> None:
    with pytest.raises(InputError, match="cannot write"):
        write_text_atomic(tmp_path / target, "x")


@pytest.mark.parametrize("target", ["/dev/stdout", "/dev/null", "/proc/self/fd/1"])
def test_devices_and_streams_refused(target) -> None:
    """/dev/stdout resolves to the file stdout is redirected to: a rename would replace it."""
    with pytest.raises(InputError, match="not a regular file"):
        write_text_atomic(target, "x")
