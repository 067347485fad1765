"""The README's and the manual's `$ pdmux ...` examples print what pdmux prints today.

Each fenced block of README.md and of the manual's pages (:data:`MANUAL`, in this order) whose first line
is `$ pdmux ...` is run as a user would run it (a subprocess,
the terminal COLUMNS the block was made at: 80 unless an `<!-- columns: N -->` line precedes the block) and
its output compared line by line (trailing spaces dropped). A `...` line in the README stands for any lines
the example leaves out. Paths: `../shared/...` is the workplace's copy beside the checkout (the example is
skipped without it), checkout files (`profiles/`, `tests/`) are read from the checkout, and files the example
writes (`pdmux.yaml`, `slo.yaml`) go to one temporary folder, where the README's later commands find them (as
a user running the README top to bottom would).

`tune` and `capacity` examples replay 2000 requests over dozens of configs (minutes on two cores): they run
only with PDMUX_README_SLOW=1.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SLOW_COMMANDS = {"tune", "capacity"}


@dataclass(frozen=True)
class Example:
    """One `$ pdmux ...` command of a README block and the output lines shown under it."""

    line: int  # the page's line of the `$` prompt (1-based)
    argv: tuple[str, ...]
    expected: tuple[str, ...]
    columns: int
    block: int  # the page's line of the block's opening fence
    page: str = "README.md"  # the file, from the checkout's root


def readme_examples(text: str, page: str = "README.md") -> list[Example]:
    """Every `$ pdmux` command in ``text``'s fenced blocks (of the file ``page``), in order."""
    examples: list[Example] = []
    lines = text.splitlines()
    i = 0
    columns = 80
    while i < len(lines):
        m = re.fullmatch(r"<!-- columns: (\d+) -->", lines[i].strip())
        if m:
            columns = int(m.group(1))
        if lines[i].startswith("```") and i + 1 < len(lines) and lines[i + 1].startswith("$ pdmux"):
            fence = i + 1
            j = i + 1
            while not lines[j].startswith("```"):
                start = j
                command = lines[j][2:]
                while command.endswith("\\"):
                    j += 1
                    command = command[:-1] + lines[j].strip()
                j += 1
                out = []
                while not lines[j].startswith("```") and not lines[j].startswith("$ "):
                    out.append(lines[j].rstrip())
                    j += 1
                while out and not out[-1]:
                    out.pop()  # the blank line between two commands of a block
                examples.append(Example(start + 1, tuple(shlex.split(command)), tuple(out), columns, fence,
                                        page))
            columns = 80
            i = j
        i += 1
    return examples


def matches(expected: tuple[str, ...], actual: list[str]) -> bool:
    """``actual`` is ``expected`` with each `...` line standing for zero or more lines."""
    pattern = "".join(r"(?:[^\n]*\n)*?" if e == "..." else re.escape(e) + r"\n" for e in expected)
    return re.fullmatch(pattern, "".join(a + "\n" for a in actual)) is not None


#: The front door, then the manual's pages in reading order: files one page writes (``pdmux.yaml``,
#: ``slo.yaml``) are read by its later examples, in one temporary folder.
MANUAL = ("README.md", "docs/estimate.md", "docs/fidelity.md", "docs/calibrate.md",
          "docs/splits-and-configs.md", "docs/simulate.md", "docs/speculative.md", "docs/capacity.md",
          "docs/python-api.md", "docs/output-and-errors.md")
EXAMPLES = [e for page in MANUAL for e in readme_examples((REPO / page).read_text(), page)]


def test_every_manual_page_is_listed() -> None:
    # the map, the module reference and the accuracy report have no examples to run
    pages = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")} - {
        "docs/architecture.md", "docs/modules.md", "docs/accuracy.md"}
    assert pages <= set(MANUAL), sorted(pages - set(MANUAL))


def test_the_readme_has_examples() -> None:
    names = {e.argv[1] for e in EXAMPLES}
    assert {"estimate", "splits", "accuracy", "gen-config", "check-config", "tune", "capacity"} <= names


def _argv(argv: tuple[str, ...]) -> list[str]:
    out = []
    for arg in argv[1:]:
        if arg.startswith("../shared/"):
            arg = str(SHARED / arg[len("../shared/"):])
        elif arg.split("/")[0] in {"profiles", "tests"}:
            arg = str(REPO / arg)
        out.append(arg)
    return [sys.executable, "-m", "pdmux_cli", *out]


@pytest.mark.parametrize("example", EXAMPLES,
                         ids=[f"{e.page.removeprefix('docs/')}:line{e.line}-{e.argv[1]}" for e in EXAMPLES])
def test_readme_example_prints_what_pdmux_prints(example: Example, tmp_path_factory) -> None:
    if example.argv[1] in SLOW_COMMANDS and not os.environ.get("PDMUX_README_SLOW"):
        pytest.skip("tune/capacity examples take minutes: PDMUX_README_SLOW=1 runs them")
    if any(a.startswith("../shared/") for a in example.argv) and not SHARED.is_dir():
        pytest.skip("needs ../shared beside the checkout")
    folder = tmp_path_factory.getbasetemp() / "readme-examples"
    folder.mkdir(exist_ok=True)
    env = {**os.environ, "COLUMNS": str(example.columns), "LINES": "50", "PYTHONPATH": str(REPO)}
    env.pop("NO_COLOR", None)
    run = subprocess.run(_argv(example.argv), cwd=folder, env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    assert run.returncode == 0, run.stderr
    actual = [line.rstrip() for line in (run.stdout + run.stderr).splitlines()]
    assert matches(example.expected, actual), (
        f"{example.page} line {example.line} shows\n" + "\n".join(example.expected)
        + "\n\nbut pdmux prints\n" + "\n".join(actual))


def test_matching_takes_elisions_and_nothing_else() -> None:
    assert matches(("a", "...", "d"), ["a", "b", "c", "d"])
    assert matches(("a", "...", "b"), ["a", "b"])
    assert not matches(("a", "d"), ["a", "b", "d"])
    assert not matches(("a", "...", "d"), ["a", "b", "c", "e"])
    assert not matches(("a",), ["a", "extra"])
