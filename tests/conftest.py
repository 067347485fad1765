"""Fixtures shared by several test files."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest


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
