"""No import cycles among pdmux's own modules (issue 21: simulate/capacity <-> tune <-> runner through the
process pool, cli/bench <-> cli/bench_model, the command modules <-> the cli package's ``app``).

What counts as an import of module B by module A: every ``import`` / ``from ... import`` statement in A's
source that names B, at module level or inside a function or class (a lazy import is still a dependency:
it runs when the function does), except those under ``if TYPE_CHECKING:`` (never executed). ``from P
import name`` counts as importing ``P.name`` when that is a module, else ``P`` (even when ``P`` is A's own
package: ``from . import app`` in ``cli/bench.py`` needs ``cli/__init__.py`` to have defined ``app``).
Importing ``P.Q.M`` also imports the packages ``P`` and ``P.Q`` above it (their ``__init__.py`` runs
first), except, there, a package that contains A itself (its ``__init__`` is already running when A is
imported). Only modules under ``pdmux_cli/`` and ``pdmux/``
are nodes; the standard library and third-party imports are ignored. The graph comes from the source tree
with :mod:`ast` (nothing is imported), so the test sees lazy imports that a run would only reach on some
paths.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pdmux_cli", "pdmux")


def module_files(root: Path) -> dict[str, tuple[Path, bool]]:
    """``{dotted module name: (file, is_package)}`` for every ``.py`` file of :data:`PACKAGES` under
    ``root``."""
    mods: dict[str, tuple[Path, bool]] = {}
    for package in PACKAGES:
        base = root / package
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts = parts[:-1]
            mods[".".join(parts)] = (path, is_pkg)
    return mods


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree`` outside ``if TYPE_CHECKING:`` bodies (their ``else`` kept)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """``{module: modules it imports}`` over :func:`module_files` (the rules in this file's docstring)."""
    mods = module_files(root)
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        package = name.split(".") if is_pkg else name.split(".")[:-1]
        targets: set[str] = set()
        for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                targets.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in mods else source)
        deps: set[str] = set()
        for target in targets:
            parts = target.split(".")
            if target in mods and target != name:  # named: its contents are needed, even a parent's
                deps.add(target)
            for i in range(1, len(parts)):  # the packages above it are imported first
                prefix = ".".join(parts[:i])
                if prefix in mods and prefix != name and not name.startswith(prefix + "."):
                    deps.add(prefix)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative), each
    sorted; a module importing itself is not a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_no_import_cycles() -> None:
    graph = import_graph(ROOT)
    assert len(graph) > 80  # the whole tree was read (pdmux_cli alone has 90 modules)
    assert cycles(graph) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_lazy_cycle_is_found(tmp_path) -> None:
    """The cycle the process pool made: tune imports runner at module level, runner's function imports
    tune."""
    root = _tree(tmp_path, {
        "pdmux_cli/__init__.py": "",
        "pdmux_cli/simulate/__init__.py": "",
        "pdmux_cli/simulate/tune.py": "from .runner import simulate\n",
        "pdmux_cli/simulate/runner.py": "def simulate():\n    from .tune import process_pool\n",
        "pdmux_cli/simulate/pool.py": "import os\n",
    })
    assert cycles(import_graph(root)) == [["pdmux_cli.simulate.runner", "pdmux_cli.simulate.tune"]]


def test_a_cycle_through_a_package_init_is_found(tmp_path) -> None:
    """``cli/__init__`` importing the command modules that import ``app`` from it; fixed by ``cli/app.py``."""
    files = {
        "pdmux_cli/__init__.py": "",
        "pdmux_cli/cli/__init__.py": "app = object()\nfrom . import bench\n",
        "pdmux_cli/cli/bench.py": "from . import app\n",
    }
    assert cycles(import_graph(_tree(tmp_path / "a", files))) == [["pdmux_cli.cli", "pdmux_cli.cli.bench"]]
    files["pdmux_cli/cli/__init__.py"] = "from .app import app\nfrom . import bench\n"
    files["pdmux_cli/cli/app.py"] = "app = object()\n"
    files["pdmux_cli/cli/bench.py"] = "from .app import app\n"
    assert cycles(import_graph(_tree(tmp_path / "b", files))) == []


def test_type_checking_imports_do_not_count(tmp_path) -> None:
    root = _tree(tmp_path, {
        "pdmux_cli/__init__.py": "",
        "pdmux_cli/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
        "pdmux_cli/b.py": "from . import a\n",
    })
    assert import_graph(root)["pdmux_cli.a"] == set()
    assert cycles(import_graph(root)) == []


def test_a_longer_cycle_and_the_package_parents(tmp_path) -> None:
    """slo_levels -> simulate.schedulers imports the simulate package, whose __init__ imports runner."""
    root = _tree(tmp_path, {
        "pdmux_cli/__init__.py": "",
        "pdmux_cli/planning/__init__.py": "",
        "pdmux_cli/planning/slo_levels.py": "def f():\n    from ..simulate.schedulers import x\n",
        "pdmux_cli/simulate/__init__.py": "from .runner import simulate\n",
        "pdmux_cli/simulate/schedulers.py": "x = 1\n",
        "pdmux_cli/simulate/runner.py": "import pdmux_cli.simulate.tune\n",
        "pdmux_cli/simulate/tune.py": "from pdmux_cli.planning import slo_levels\n",
    })
    graph = import_graph(root)
    assert graph["pdmux_cli.planning.slo_levels"] == {"pdmux_cli.simulate", "pdmux_cli.simulate.schedulers"}
    assert cycles(graph) == [["pdmux_cli.planning.slo_levels", "pdmux_cli.simulate",
                              "pdmux_cli.simulate.runner", "pdmux_cli.simulate.tune"]]
