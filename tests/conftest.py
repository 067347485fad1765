"""Fixtures shared by several test files."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

# A suite started in the background of a non-interactive shell (`pytest &`, nohup) inherits SIGINT (and
# SIGHUP) ignored, and an ignored signal stays ignored across exec: the signal tests' pdmux subprocesses would
# never see the Ctrl-C they are sent. A Python handler is reset to the default in an exec'd child, so
# installing one here gives every subprocess the dispositions a terminal gives it.
for _signum, _handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGHUP, signal.SIG_DFL)):
    if signal.getsignal(_signum) is signal.SIG_IGN:
        signal.signal(_signum, _handler)


@pytest.fixture
def error_from_fifo_reader() -> Callable[[Callable[[], object], Path], BaseException]:
    """``check(call, fifo)``: run ``call`` (which reads ``fifo``) in a thread and return what it raised.

    Fails the test when ``call`` blocks for 5 s (opening a fifo waits for a writer) or raises nothing;
    a blocked call is released by opening the fifo's write end first.
    """

    def check(call: Callable[[], object], fifo: Path) -> BaseException:
        done: list[BaseException] = []

        def run() -> None:
            try:
                call()
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                done.append(exc)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(5)
        if worker.is_alive():
            with open(fifo, "w"):
                pass
            pytest.fail(f"blocked on the fifo {fifo}")
        assert len(done) == 1, f"no error for the fifo {fifo}"
        return done[0]

    return check
