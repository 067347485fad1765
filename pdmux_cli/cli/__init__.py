"""``pdmux``: the command-line entry point. Commands parse, call the core, render; nothing else.

Each command module registers its commands on the typer application of :mod:`.root`. The package's
``app`` (``from pdmux_cli.cli import app``, as the tests' CliRunner uses it) is that application with
every command module imported, in :data:`COMMAND_MODULES`' order (the order of ``pdmux --help``).
:func:`main` imports only the module of the command it runs: the others' option declarations cost a
fifth of ``pdmux splits``' start-up. Heavy imports (the core's cost model, rich tables, the bench's torch
and cuda-python) happen inside the command functions.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

#: Each command module of this package and the commands it registers, in ``pdmux --help``'s order.
#: ``tests/test_cli_lazy.py`` checks it against what the modules register.
COMMAND_MODULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("splits", ("splits",)),
    ("estimate", ("estimate",)),
    ("gen_config", ("gen-config",)),
    ("check_config", ("check-config",)),
    ("simulate", ("simulate", "tune")),
    ("capacity", ("capacity",)),
    ("accuracy", ("accuracy",)),
    ("calibrate", ("calibrate",)),
    ("bench", ("bench",)),
)
_MODULE_OF = {command: module for module, commands in COMMAND_MODULES for command in commands}


def _with_modules(modules: list[str]) -> Any:
    """The root typer app after importing the command ``modules`` (names in this package)."""
    from .root import app as root_app

    for module in modules:
        importlib.import_module(f".{module}", __name__)
    return root_app


def _every_command() -> Any:
    """The root typer app with every command module imported, in :data:`COMMAND_MODULES`' order."""
    return _with_modules([module for module, _ in COMMAND_MODULES])


def __getattr__(name: str) -> Any:
    """``app``: the typer application with every command registered (PEP 562: built on first use)."""
    if name == "app":
        return _every_command()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point (``pdmux = pdmux_cli.entry:main``).

    Where the first argument names a command (``pdmux splits ...``), only that command's module is
    imported and typer builds the click command of that one only. Anything else (``pdmux --help``,
    ``--version``, a mistyped command and its suggestions) sees every command."""
    first = sys.argv[1] if len(sys.argv) > 1 else None
    module = _MODULE_OF.get(first) if first else None
    if module is None:
        _every_command()()
        return
    app = _with_modules([module])
    only = [c for c in app.registered_commands if _command_name(c) == first]
    every = list(app.registered_commands)
    app.registered_commands[:] = only
    try:
        app()
    finally:
        app.registered_commands[:] = every


def _command_name(command: Any) -> str:
    """The name typer gives a registered command: its own, or its callback's with ``_`` as ``-``."""
    from typer.main import get_command_name

    return command.name or get_command_name(command.callback.__name__ if command.callback else "")
