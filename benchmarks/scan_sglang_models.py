"""Which SGLang model classes can run ``--enable-pdmux``: an AST scan of ``srt/models/``, written as data.

SGLang's pdmux loop runs every prefill as ``ForwardMode.SPLIT_PREFILL``; ``ModelRunner.forward_split_prefill``
(``srt/model_executor/model_runner.py``) then calls ``self.model.forward_split_prefill(...)`` on the model
class SGLang resolved for the checkpoint. A class without that method (itself or through a base class)
fails at the first prefill (AttributeError). SGLang resolves the class from ``architectures`` in
``config.json`` through ``srt/models/registry.py``: every module's ``EntryClass`` (one class or a list)
is registered under the class's ``__name__``; ``resolve_model_cls`` takes the first listed architecture
SGLang has, and falls back to ``TransformersForCausalLM`` when none is.

This script reads the source only (``ast``; nothing is imported or run), resolves each class's bases
through the module's own ``from sglang.srt.models.X import Y`` imports (so subclasses such as
``MistralForCausalLM(LlamaForCausalLM)`` inherit the method), and writes, per registered architecture,
the file and class that define ``forward_split_prefill`` or ``null``. Classes whose bases it cannot
resolve inside ``srt/models`` (e.g. ``nn.Module``) contribute nothing, which is what SGLang has too.

Usage: ``python benchmarks/scan_sglang_models.py SGLANG_PACKAGE_DIR VERSION >
profiles/sglang/models-VERSION.json`` (``SGLANG_PACKAGE_DIR`` is the ``sglang`` package directory, e.g.
``/work/sglang/src/sglang``). Standard library only. The output is committed; pdmux reads it
(``pdmux_cli/sglang/revisions.py``).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

METHOD = "forward_split_prefill"
MODELS_PACKAGE = "sglang.srt.models"


def _module_classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _imports(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """Local name -> (module under srt/models, name there), for ``from sglang.srt.models.X import Y``."""
    found: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        if node.level == 1:  # ``from .llama import X`` inside srt/models
            module = node.module
        elif node.level == 0 and node.module.startswith(MODELS_PACKAGE + "."):
            module = node.module[len(MODELS_PACKAGE) + 1:]
        else:
            continue
        for alias in node.names:
            found[alias.asname or alias.name] = (module, alias.name)
    return found


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Module-level ``A = B`` assignments between names (class aliases)."""
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.id
    return found


def _entry_names(tree: ast.Module) -> list[str] | None:
    """The names listed in ``EntryClass`` (a name, or a list/tuple of names); None if the module has none."""
    names: list[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                for t in node.targets):
            value = node.value
            items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
            names = [item.id if isinstance(item, ast.Name) else ast.unparse(item) for item in items]
    return names


def scan(package_dir: Path, version: str) -> dict:
    """The scan's result as a JSON-ready dict (see the module docstring)."""
    models_dir = package_dir / "srt" / "models"
    # every module under srt/models (subpackages hold base classes too), keyed by dotted name
    trees = {".".join(path.relative_to(models_dir).with_suffix("").parts):
             # a BOM is valid Python source
             ast.parse(path.read_text(encoding="utf-8-sig"), filename=str(path))
             for path in sorted(models_dir.rglob("*.py"))}
    classes = {module: _module_classes(tree) for module, tree in trees.items()}
    imports = {module: _imports(tree) for module, tree in trees.items()}
    aliases = {module: _aliases(tree) for module, tree in trees.items()}

    def resolve(module: str, name: str, depth: int = 0) -> tuple[str, str] | None:
        """(module, class) that ``name`` means in ``module``, or None outside srt/models."""
        if depth > 20:
            return None
        if name in classes.get(module, {}):
            return module, name
        if name in aliases.get(module, {}):
            return resolve(module, aliases[module][name], depth + 1)
        if name in imports.get(module, {}):
            other, other_name = imports[module][name]
            return resolve(other, other_name, depth + 1) if other in trees else None
        return None

    def defines(module: str, name: str, seen: frozenset = frozenset()) -> str | None:
        """``"srt/models/<file>.py:<Class>"`` where the method comes from (own body first, then bases in
        order)."""
        if (module, name) in seen:
            return None
        node = classes[module][name]
        if any(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == METHOD
               for item in node.body):
            return f"srt/models/{module.replace('.', '/')}.py:{name}"
        for base in node.bases:
            base_name = base.id if isinstance(base, ast.Name) else None
            if base_name is None:
                continue
            target = resolve(module, base_name)
            if target is not None:
                found = defines(*target, seen | {(module, name)})
                if found:
                    return found
        return None

    architectures: dict[str, dict] = {}
    unresolved: list[str] = []
    for module, tree in trees.items():
        if "." in module:  # the registry imports only srt/models' own modules (pkgutil.iter_modules)
            continue
        for entry in _entry_names(tree) or []:
            target = resolve(module, entry)
            if target is None:
                unresolved.append(f"srt/models/{module}.py:{entry}")
                continue
            arch = target[1]  # the registry keys classes by __name__
            architectures[arch] = {
                "class": f"srt/models/{target[0].replace('.', '/')}.py:{arch}",
                METHOD: defines(*target),
            }
    return {
        "sglang": version,
        "source": f"AST scan of SGLang {version}'s srt/models/*.py (EntryClass, class bases, {METHOD} "
                  "definitions) by benchmarks/scan_sglang_models.py; registry rules from "
                  "srt/models/registry.py (import_model_classes, resolve_model_cls), the call from "
                  "srt/model_executor/model_runner.py ModelRunner.forward_split_prefill",
        "fallback": "TransformersForCausalLM",
        "unresolved_entries": sorted(unresolved),
        "architectures": dict(sorted(architectures.items())),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    json.dump(scan(Path(argv[1]), argv[2]), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
