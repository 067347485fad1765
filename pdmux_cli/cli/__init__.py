"""``pdmux``: the command-line entry point. Commands parse, call the core, render; nothing else.

Each command module registers its commands on :data:`app`; heavy imports (the core's cost model,
rich tables, the bench's torch and cuda-python) happen inside the command functions, so that
``pdmux splits`` starts about as fast as a bare typer + rich + yaml program.
"""

from __future__ import annotations

import typer

from .common import OneLineErrorGroup

app = typer.Typer(
    cls=OneLineErrorGroup,
    name="pdmux",
    help=(
        "Plan and benchmark PD multiplexing: prefill and decode on separate SM partitions of one GPU "
        "(CUDA green contexts), exact to SGLang's --enable-pdmux."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)



def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"pdmux {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print pdmux's version and exit."),
) -> None:
    """Plan and benchmark PD multiplexing: prefill and decode on separate SM partitions of one GPU
    (CUDA green contexts), exact to SGLang's --enable-pdmux."""


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
