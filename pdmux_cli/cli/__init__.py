"""``pdmux``: the command-line entry point. Commands parse, call the core, render; nothing else.

Each command module registers its commands on :data:`app`; heavy imports (the core's cost model,
rich tables, the bench's torch and cuda-python) happen inside the command functions, so that
``pdmux splits`` starts about as fast as a bare typer + rich + yaml program.
"""

from __future__ import annotations

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
    """Console-script entry point (``pdmux = pdmux_cli.cli:main``)."""
    app()
