"""The typer application every command module registers its commands on (``pdmux --help``, ``--version``).

Its own module so that the command modules import it without importing the package that imports them.
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
