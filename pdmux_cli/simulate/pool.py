"""The local process pool every parallel run uses (tune, capacity, simulate's policies, calibrate's and
accuracy's serving replays): workers that ignore the stop signals and die with their parent, killed at once
when the caller fails or is stopped.

A run's simulations are independent and deterministic, so the pool only spreads them over cores;
:mod:`pdmux_cli.simulate.executors` puts it behind the same interface as in-process and Ray runs.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any


#: How long a failed or stopped run waits for its process pool's own shutdown, s (normally instant).
POOL_STOP_TIMEOUT_S = 5.0


def _quiet_shutdown(pool: ProcessPoolExecutor) -> None:
    """``pool.shutdown`` after its workers were killed: what it raises then (a pipe the dead workers
    closed) changes nothing and would only print a thread's traceback."""
    with contextlib.suppress(BaseException):
        pool.shutdown(wait=True, cancel_futures=True)


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    """Kill ``pool``'s workers (SIGKILL: they ignore the stop signals), reap them, and shut the pool down,
    waiting at most :data:`POOL_STOP_TIMEOUT_S` in all. Shutting down normally returns at once; but workers
    killed while one was sending its result leave the pool's manager thread reading the rest of the
    message for ever (the parent holds the pipe's other end), and ``shutdown(wait=True)`` with it: the
    shutdown then runs on in a daemon thread (the entry point leaves a stopped run without joining it,
    :mod:`pdmux_cli.entry`). The pool's own threads (its manager, the queues' feeders) may fail on the
    dead workers' pipes meanwhile (a cancelled future set again, a closed handle): their tracebacks are
    dropped, this pool's only."""
    own = {"pdmux-pool-shutdown", "QueueFeederThread"}
    manager = getattr(pool, "_executor_manager_thread", None)
    previous = threading.excepthook

    def hook(args: Any) -> None:
        if args.thread is not None and (args.thread is manager or args.thread.name in own):
            return
        previous(args)

    threading.excepthook = hook
    try:
        deadline = time.monotonic() + POOL_STOP_TIMEOUT_S
        processes = list((getattr(pool, "_processes", None) or {}).values())  # private: no public way
        for process in processes:
            process.kill()
        for process in processes:  # reaped here: no zombie once a stopped run leaves without the pool's joins
            with contextlib.suppress(Exception):
                process.join(max(0.0, deadline - time.monotonic()))
        closer = threading.Thread(target=_quiet_shutdown, args=(pool,), name="pdmux-pool-shutdown",
                                  daemon=True)
        closer.start()
        closer.join(max(0.1, deadline - time.monotonic()))
    finally:
        threading.excepthook = previous


@contextmanager
def process_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A process pool of ``workers`` that never outlives an interrupted or failed caller: on Ctrl-C,
    SIGTERM, SIGHUP (:mod:`pdmux_cli.util.signals`) or an error the queued simulations are cancelled and the
    workers killed at once (waiting for them could take minutes, and a worker hit by SIGINT can leave
    the pool hanging). The workers ignore those signals (the parent handles them for the whole process
    group: :func:`pdmux_cli.util.signals.worker_init`) and on Linux die with their parent even when it is
    killed outright. A worker that dies (the OOM killer's SIGKILL) ends the run with
    :class:`~pdmux_cli.util.errors.PdmuxError` (exit 1)."""
    from concurrent.futures.process import BrokenProcessPool

    from ..util.errors import PdmuxError
    from ..util.signals import worker_init

    pool = ProcessPoolExecutor(max_workers=workers, initializer=worker_init, initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException as exc:
        _kill_pool(pool)
        if isinstance(exc, BrokenProcessPool):
            raise PdmuxError("a worker process died before finishing its simulation (out of memory, or "
                             "killed): run again, with fewer {flag.workers} if memory is short",
                             param="workers", values={}) from None
        raise
    pool.shutdown()


def default_workers() -> int:
    """CPU cores this process may use (``os.sched_getaffinity`` where available)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)
