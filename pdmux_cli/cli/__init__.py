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

from . import planning  # noqa: E402,F401  (registers splits, estimate, gen-config, check-config)


def main() -> None:
    """Console-script entry point (``pdmux = pdmux_cli.cli:main``)."""
    app()
from . import simulate  # noqa: E402,F401  (registers simulate, tune)
from . import bench  # noqa: E402,F401  (registers bench)
