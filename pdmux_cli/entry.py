"""The ``pdmux`` console script: a stop signal during start-up leaves quietly (:mod:`pdmux_cli.util.signals`),
then the CLI (:func:`pdmux_cli.cli.main`) runs. Importing the CLI takes a few hundred milliseconds; a
Ctrl-C in them would otherwise print a traceback from inside an import. After a stop (exit 129, 130,
143: everything unwound, worker processes killed, temporary files removed) the process leaves without
Python's exit-time joins, which could wait forever on a process pool's thread stuck where the signal
landed."""

from __future__ import annotations

import os
import sys

#: The exit statuses of a command stopped by SIGHUP, Ctrl-C and SIGTERM (``128 + signal``).
STOPPED = (129, 130, 143)


def main() -> None:
    """``pdmux = pdmux_cli.entry:main``."""
    from .util.signals import install_early

    install_early()
    from .cli import main as cli_main

    try:
        cli_main()
    except SystemExit as exc:
        if exc.code in STOPPED:
            for stream in (sys.stdout, sys.stderr):
                try:
                    if stream is not None:
                        stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(exc.code)
        raise
