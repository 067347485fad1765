"""``pdmux``: the command-line entry point. Commands parse, call the core, render; nothing else.

Each command module registers its commands on :data:`app`; heavy imports (the core's cost model,
rich tables, the bench's torch and cuda-python) happen inside the command functions, so that
``pdmux splits`` starts about as fast as a bare typer + rich + yaml program.
"""

from __future__ import annotations

import sys

from .app import app

# Importing the command modules registers their commands on `app`, in this order in --help.
# isort: off
from . import planning  # noqa: F401
from . import simulate  # noqa: F401
from . import capacity  # noqa: F401
from . import accuracy  # noqa: F401
from . import calibrate  # noqa: F401
from . import bench  # noqa: F401
# isort: on


def main() -> None:
    """Console-script entry point (``pdmux = pdmux_cli.cli:main``).

    Where the first argument names a command (``pdmux splits ...``), typer builds the click command of that
    one only: building all ten costs 30-50 ms of start-up, a tenth of ``pdmux splits``. Anything else
    (``pdmux --help``, ``--version``, a mistyped command and its suggestions) sees every command."""
    only = _named_command(sys.argv[1:2])
    if only is None:
        app()
        return
    every = list(app.registered_commands)
    app.registered_commands[:] = [only]
    try:
        app()
    finally:
        app.registered_commands[:] = every


def _named_command(first: list[str]) -> object | None:
    """The registered command ``first`` (the command line's first argument) names, or ``None``."""
    if not first or first[0].startswith("-"):
        return None
    from typer.main import get_command_name

    found = [c for c in app.registered_commands
             if (c.name or get_command_name(c.callback.__name__ if c.callback else "")) == first[0]]
    return found[0] if len(found) == 1 else None
