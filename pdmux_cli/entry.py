"""The ``pdmux`` console script: a stop signal during start-up leaves quietly (:mod:`pdmux_cli.util.signals`),
then the CLI (:func:`pdmux_cli.cli.main`) runs. Importing the CLI takes a few hundred milliseconds; a
Ctrl-C in them would otherwise print a traceback from inside an import. After a stop (exit 129, 130,
143: everything unwound, worker processes killed, temporary files removed) the process leaves without
Python's exit-time joins, which could wait forever on a process pool's thread stuck where the signal
landed. After any other end it leaves without the interpreter's teardown where that changes nothing
(:func:`leave`)."""

from __future__ import annotations

import os
import sys

#: The exit statuses of a command stopped by SIGHUP, Ctrl-C and SIGTERM (``128 + signal``).
STOPPED = (129, 130, 143)


def main() -> None:
    """``pdmux = pdmux_cli.entry:main``: :func:`run`, then the process leaves (:func:`leave`)."""
    try:
        run()
    except SystemExit as exc:
        if exc.code in STOPPED:
            _flush()
            os._exit(exc.code)
        leave(exc.code)
        raise


def run() -> None:
    """The CLI, with a stop during its imports leaving quietly. Raises ``SystemExit`` with the exit status
    (click's standalone mode), which :func:`main` leaves with; in-process callers (tests) catch it."""
    from .util.signals import install_early

    install_early()
    from .cli import main as cli_main

    cli_main()


def leave(code: object) -> None:
    """End the process with ``code`` (a ``SystemExit``'s) without the interpreter's teardown, which frees
    every object one by one: 40-60 ms after ``simulate`` of the conv trace (benchmarks/RESULTS.md). What a
    normal exit does besides is done first: the exit handlers (``atexit``: multiprocessing's, logging's,
    Ray's) and both streams flushed. Returns, for the caller's normal exit, where that might differ: a
    status that is not a number (click's are), a thread beside this one (a normal exit joins it), a
    stream that cannot be flushed (Python reports it), or no ``atexit._run_exitfuncs``."""
    import atexit
    import threading

    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if (not (code is None or type(code) is int) or threading.active_count() != 1
            or run_exit_handlers is None or not _flush(report=True)):
        return
    run_exit_handlers()
    _flush()
    os._exit(code or 0)


def _flush(report: bool = False) -> bool:
    """Flush stdout and stderr; whether both could be (errors ignored unless ``report``: then ``False``)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            if report:
                return False
    return True
