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
