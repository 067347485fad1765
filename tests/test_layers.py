"""The packages' layer order (issue 32, item 5): every import between two of pdmux's packages goes down
this list, lazy imports inside functions included (the graph of ``test_import_graph.import_graph``: the
source read with ``ast``, ``if TYPE_CHECKING:`` left out), so no two packages depend on each other.

From the bottom: ``messages`` (the English; imports nothing of pdmux), ``util``, ``catalog`` (GPU and
model profiles, compute capabilities), ``sglang`` (SGLang's rules), ``multigpu``, ``costmodel``,
``provenance``, ``planning``, ``simulate``, ``bench``, ``workflows``, ``cli``, ``entry``, ``__main__``; the
``pdmux_cli`` package's own ``__init__`` (the version) at the very bottom and the Python API (``pdmux``) on
top. docs/architecture.md states the same order.
"""

from __future__ import annotations

from collections.abc import Mapping

from test_import_graph import ROOT, import_graph

#: Lowest first. A module of a package may import modules of the packages before it only.
LAYERS = ("pdmux_cli", "messages", "util", "catalog", "sglang", "multigpu", "costmodel", "provenance",
          "planning", "simulate", "bench", "workflows", "cli", "entry", "__main__", "pdmux")


def layer_of(module: str) -> str:
    """The layer (a name of :data:`LAYERS`) of a dotted module name: ``pdmux`` for the API, the first
    package (or top-level module) under ``pdmux_cli``, ``pdmux_cli`` for the package itself."""
    parts = module.split(".")
    if parts[0] == "pdmux":
        return "pdmux"
    return parts[1] if len(parts) > 1 else "pdmux_cli"


def upward_imports(graph: Mapping[str, set[str]], layers: tuple[str, ...] = LAYERS) -> list[str]:
    """``"a -> b"`` for every import of ``graph`` from a module to one of a higher layer, or of a layer
    missing from ``layers`` (a new package must be placed)."""
    rank = {name: i for i, name in enumerate(layers)}
    found = []
    for module, imported in sorted(graph.items()):
        low = layer_of(module)
        for other in sorted(imported):
            high = layer_of(other)
            if low == high:
                continue
            if low not in rank or high not in rank or rank[high] > rank[low]:
                found.append(f"{module} -> {other}")
    return found


def test_every_import_goes_down_the_layers() -> None:
    graph = import_graph(ROOT)
    assert len(graph) > 100  # the tree was read (modules that import another of pdmux)
    assert upward_imports(graph) == []


def test_every_package_has_a_layer() -> None:
    layers = {layer_of(m) for m in import_graph(ROOT)}
    assert layers <= set(LAYERS), sorted(layers - set(LAYERS))


def test_an_upward_or_unplaced_import_is_found() -> None:
    graph = {"pdmux_cli.catalog.hardware": {"pdmux_cli.sglang.split_levels", "pdmux_cli.util.errors"},
             "pdmux_cli.sglang.revisions": {"pdmux_cli.catalog.model"},
             "pdmux_cli.newpkg.mod": {"pdmux_cli.util.errors"}}
    assert upward_imports(graph) == ["pdmux_cli.catalog.hardware -> pdmux_cli.sglang.split_levels",
                                     "pdmux_cli.newpkg.mod -> pdmux_cli.util.errors"]
