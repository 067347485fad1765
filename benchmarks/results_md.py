"""benchmarks/RESULTS.md: each benchmark owns one ``## `` section and rewrites only that one."""

from __future__ import annotations

import os
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(section: str, text: str, results: Path = RESULTS) -> None:
    """Replace the section headed ``section`` (a ``## ...`` line) of ``results`` with ``text`` (which
    starts with that heading), or append it; every other section is kept. Written whole (temp file +
    rename)."""
    old = results.read_text(encoding="utf-8") if results.exists() else "# Benchmark results\n"
    lines = old.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.rstrip() == section), None)
    if start is None:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        new = "".join(lines[:start]) + text.rstrip("\n") + "\n" + (
            "\n" + "".join(lines[end:]) if end < len(lines) else "")
    tmp = results.with_suffix(".md.tmp")
    tmp.write_text(new.rstrip("\n") + "\n", encoding="utf-8")
    os.replace(tmp, results)
