"""The ``pdmux`` console script: a stop signal during start-up leaves quietly (:mod:`pdmux_cli.signals`),
then the CLI (:func:`pdmux_cli.cli.main`) runs. Importing the CLI takes a few hundred milliseconds; a
Ctrl-C in them would otherwise print a traceback from inside an import."""

from __future__ import annotations


def main() -> None:
    """``pdmux = pdmux_cli.entry:main``."""
    from .signals import install_early

    install_early()
    from .cli import main as cli_main

    cli_main()
