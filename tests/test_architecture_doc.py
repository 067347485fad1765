"""The module tables stay true to the tree: docs/architecture.md's one short line per module (under
"## Modules") and docs/modules.md's detailed rows (under "# Modules and where each rule lives") each have a
row for every module under ``pdmux_cli/`` (and ``pdmux/``), none for a module that is gone, no module in two
rows, and both name the same modules in the same order.

A table is the first one under its page's heading. A row names its modules in its first
cell, in backticks: a path under ``pdmux_cli/`` (``sglang/split_levels.py``, ``entry.py``) or, starting
with ``pdmux/``, under the top-level ``pdmux`` package; a name without a ``/`` after the first is in the
previous name's folder (``costmodel/measurements.py``, ``fit.py``, ``accuracy.py``). Every ``.py`` file
needs a row except an ``__init__.py`` that defines no function or class (a docstring and re-exports).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Each page with a module table, and the heading its table follows.
PAGES = {"docs/architecture.md": "## Modules", "docs/modules.md": "# Modules and where each rule lives"}
HEADING = "## Modules and where each rule lives"


def table_modules(text: str, heading: str = HEADING) -> list[str]:
    """The modules the table's rows name, as paths from the repository root, in row order (repeats kept)."""
    start = text.index(heading + "\n")
    names: list[str] = []
    in_table = False
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            in_table = True
            cell = line.split("|")[1]
            folder = None
            for name in re.findall(r"`([^`]+)`", cell):
                if "/" in name or folder is None:
                    path = name if name.startswith("pdmux/") else f"pdmux_cli/{name}"
                else:
                    path = f"{folder}/{name}"
                folder = path.rsplit("/", 1)[0]
                names.append(path)
        elif in_table:
            break
    return names


def needs_row(path: Path) -> bool:
    """Every module but an ``__init__.py`` without a top-level function or class."""
    if path.name != "__init__.py":
        return True
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for node in tree.body)


def tree_modules(root: Path) -> set[str]:
    """The ``.py`` files under ``pdmux_cli/`` and ``pdmux/`` that need a row, as paths from ``root``."""
    found = set()
    for package in ("pdmux_cli", "pdmux"):
        if (root / package).is_dir():
            found.update(p.relative_to(root).as_posix() for p in (root / package).rglob("*.py")
                         if needs_row(p))
    return found


def problems(text: str, root: Path, heading: str = HEADING) -> list[str]:
    """What is wrong between the table and the tree, one line each (empty: nothing)."""
    named = table_modules(text, heading)
    modules = tree_modules(root)
    existing = {p.relative_to(root).as_posix() for pkg in ("pdmux_cli", "pdmux") if (root / pkg).is_dir()
                for p in (root / pkg).rglob("*.py")}
    out = [f"no row for {m}" for m in sorted(modules - set(named))]
    out += [f"a row for {m}, which does not exist" for m in sorted(set(named) - existing)]
    out += [f"{m} is in {named.count(m)} rows" for m in sorted(set(named)) if named.count(m) > 1]
    return out


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_module_has_one_row(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    assert len(table_modules(text, PAGES[page])) > 70  # the table was found and read (80 names in it)
    assert problems(text, ROOT, PAGES[page]) == []


def test_the_map_and_the_reference_name_the_same_modules_in_order() -> None:
    tables = [table_modules((ROOT / page).read_text(encoding="utf-8"), heading)
              for page, heading in PAGES.items()]
    assert tables[0] == tables[1]


def test_the_map_stays_short() -> None:
    """docs/architecture.md's table is a map: one short line a module, the rules in docs/modules.md."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = text[text.index(PAGES["docs/architecture.md"] + "\n"):].split("\n## ")[0]
    long = [line[:60] for line in rows.splitlines()
            if line.startswith("| `") and len(line.split(" | ")[-1]) > 110]
    assert long == []


DOC_SAMPLE = f"""# x

{HEADING}

| module | holds | rules and sources |
|---|---|---|
| `entry.py` | the console script | |
| `costmodel/measurements.py`, `fit.py`, `accuracy.py` | records | `other.py` here is no row |
| `pdmux/__init__.py` | the API | |

## Conventions

| `not/a/row.py` | after the table | |
"""


def test_rows_are_read_as_written() -> None:
    assert table_modules(DOC_SAMPLE) == ["pdmux_cli/entry.py", "pdmux_cli/costmodel/measurements.py",
                                         "pdmux_cli/costmodel/fit.py", "pdmux_cli/costmodel/accuracy.py",
                                         "pdmux/__init__.py"]


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_missing_a_gone_and_a_repeated_row_are_each_reported(tmp_path) -> None:
    root = _tree(tmp_path, {
        "pdmux_cli/__init__.py": '"""docstring only: no row needed."""\n__version__ = "0"\n',
        "pdmux_cli/entry.py": "",
        "pdmux_cli/costmodel/__init__.py": "class StepModel: ...\n",
        "pdmux_cli/costmodel/measurements.py": "",
        "pdmux_cli/costmodel/fit.py": "",
        "pdmux/__init__.py": "def estimate(): ...\n",
    })
    assert problems(DOC_SAMPLE, root) == ["no row for pdmux_cli/costmodel/__init__.py",
                                          "a row for pdmux_cli/costmodel/accuracy.py, which does not exist"]
    twice = DOC_SAMPLE.replace("| `pdmux/__init__.py` |", "| `entry.py`, `costmodel/__init__.py`, "
                                                          "`costmodel/accuracy.py` | x |\n| "
                                                          "`pdmux/__init__.py` |")
    (root / "pdmux_cli/costmodel/accuracy.py").write_text("")
    assert problems(twice, root) == ["pdmux_cli/costmodel/accuracy.py is in 2 rows",
                                     "pdmux_cli/entry.py is in 2 rows"]
