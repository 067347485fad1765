"""Assertions shared by the CLI tests (imported by name: pytest puts tests/ on sys.path)."""

from __future__ import annotations


def assert_one_line_error(result, code: int = 2, contains: str = "") -> None:
    """The promise for bad input and runtime failures: exit ``code``, exactly one stderr line
    starting ``pdmux: error:`` that contains ``contains`` (case-insensitive), no traceback."""
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pdmux: error: ")
    assert "Traceback" not in result.stderr + result.stdout
    assert contains.lower() in lines[0].lower()


def raised_input_error(call, *args, **kwargs):
    """The :class:`~pdmux_cli.util.errors.InputError` ``call(*args, **kwargs)`` raises (fails if none)."""
    import pytest

    from pdmux_cli.util.errors import InputError

    with pytest.raises(InputError) as caught:
        call(*args, **kwargs)
    return caught.value


def one_error_line(args: list[str]) -> str:
    """The CLI's one stderr line for ``pdmux ARGS`` (exit 2), without its ``pdmux: error: `` prefix."""
    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("pdmux: error: "), lines
    return lines[0].removeprefix("pdmux: error: ")
