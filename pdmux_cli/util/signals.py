"""Stopping cleanly on SIGTERM and SIGHUP, as on Ctrl-C: no worker left running, no temporary file left.

Python's default for SIGTERM (``kill PID``, what batch schedulers, systemd and Kubernetes send) and
SIGHUP (the terminal closed) is to die on the spot: no ``finally`` runs, so a half-written output's
temporary file stays behind and the worker processes of a process pool
(:func:`pdmux_cli.simulate.pool.process_pool`) are re-parented and live on, blocked on a pipe to a
parent that is gone, holding the caller's stdout and stderr open (a caller waiting on them hangs).

:func:`handling_signals` (installed by the CLI around every command) turns the first SIGTERM or
SIGHUP into :class:`Terminated`, an exception raised in the main thread, so the same unwinding as
Ctrl-C runs: the process pool terminates its workers, an atomic write removes its temporary file.
The CLI then exits ``128 + signal number`` (143 for SIGTERM, 129 for SIGHUP; a shell's convention for a
process its signal stopped). Later signals while it unwinds are recorded and ignored, so the cleanup
itself is not cut short. A stop raised where Python cannot raise (an at-fork callback, a ``__del__``:
reported as "unraisable" and dropped) is sent again, to land where it can unwind. :func:`deferred` holds the
three signals over a few statements that must not be split (creating a temporary file and recording its name).
:func:`worker_init` is the pool workers' initializer: the parent alone handles Ctrl-C, SIGTERM and SIGHUP, and
kills its workers once it has; on Linux a worker is also killed when its parent dies by any means, SIGKILL
included (``prctl(PR_SET_PDEATHSIG)``).

Pure standard library; no output. Handlers are installed only from the main thread (``signal.signal``
refuses other threads), and restored afterwards, so the test suite's own handlers are left alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

#: The signals that stop a command cleanly (besides SIGINT, which Python turns into KeyboardInterrupt).
STOP_SIGNALS: tuple[int, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


#: How long after a dropped stop (:func:`_swallowed`) the signal is sent again, s.
RESEND_DELAY_S = 0.05


class Terminated(KeyboardInterrupt):
    """A stop signal (``signum``: SIGTERM or SIGHUP) received by the main process.

    A ``KeyboardInterrupt`` subclass, so every path that unwinds on Ctrl-C (``except BaseException``
    cleanups, the bench's "interrupted: keep what finished") unwinds the same way, and no
    ``except Exception`` swallows it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        """``"SIGTERM"``, ``"SIGHUP"``."""
        try:
            return signal.Signals(self.signum).name
        except ValueError:  # pragma: no cover - only the signals above are handled
            return f"signal {self.signum}"

    @property
    def exit_code(self) -> int:
        """``128 + signum``: 143 for SIGTERM, 129 for SIGHUP."""
        return 128 + self.signum


class _State:
    """What the installed handler needs: the process it was installed in, whether a stop is under way,
    the depth of :func:`deferred` sections and the signal that arrived during one."""

    def __init__(self) -> None:
        self.pid = 0
        self.stopping = False
        self.defer_depth = 0
        self.pending: int | None = None
        self.raised: int | None = None
        self.swallowed: int | None = None


_STATE = _State()


def _raise_for(signum: int) -> None:
    _STATE.stopping = True
    _STATE.raised = signum
    _STATE.swallowed = None
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def _handler(signum: int, frame: Any) -> None:
    """The installed handler (SIGTERM, SIGHUP, SIGINT). In a child forked before its own initializer ran,
    the signal ignored from then on (as :func:`worker_init` will); while stopping already, nothing; inside
    :func:`deferred`, recorded; otherwise :class:`Terminated` (``KeyboardInterrupt`` for SIGINT) raised."""
    if os.getpid() != _STATE.pid:  # a forked worker that has not yet run worker_init: as it will
        signal.signal(signum, signal.SIG_IGN)
        return
    if _STATE.stopping:
        return
    if _STATE.defer_depth:
        if _STATE.pending is None:
            _STATE.pending = signum
        return
    _raise_for(signum)


def _swallowed(signum: int) -> None:
    """The stop raised in a place that cannot raise (an at-fork callback, a ``__del__``: Python reports it
    as unraisable and carries on). A thread sends the signal again a moment later, when the main thread
    has left that place, to be raised where the unwinding can run; should the command finish first, it
    still ends as stopped (:func:`handling_signals`)."""
    _STATE.swallowed = signum

    def resend() -> None:
        time.sleep(RESEND_DELAY_S)
        if _STATE.swallowed is None or _STATE.pid != os.getpid():
            return
        _STATE.stopping = False
        try:
            os.kill(os.getpid(), signum)
        except OSError:  # pragma: no cover - the process is leaving
            pass

    threading.Thread(target=resend, name="pdmux-resend-signal", daemon=True).start()


@contextlib.contextmanager
def handling_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` (SIGINT ``KeyboardInterrupt``, as Python's default
    does) in the main thread while the block runs; the previous handlers are restored after it. Outside
    the main thread (where handlers cannot be set) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = (*STOP_SIGNALS, signal.SIGINT)
    previous: dict[int, Any] = {}
    saved = (_STATE.pid, _STATE.stopping, _STATE.defer_depth, _STATE.pending, _STATE.raised, _STATE.swallowed)
    _STATE.pid, _STATE.stopping, _STATE.defer_depth = os.getpid(), False, 0
    _STATE.pending = _STATE.raised = _STATE.swallowed = None
    previous_hook = sys.unraisablehook

    def unraisable(report: Any) -> None:
        if (isinstance(report.exc_value, KeyboardInterrupt) and _STATE.raised is not None
                and os.getpid() == _STATE.pid):
            _swallowed(_STATE.raised)
            return
        previous_hook(report)

    sys.unraisablehook = unraisable
    try:
        for signum in wanted:
            current = signal.getsignal(signum)
            if signum == signal.SIGINT and current not in (signal.default_int_handler, _early):
                continue  # someone else's SIGINT handling (a test harness, an embedding program): keep it
            if current == signal.SIG_IGN and signum != signal.SIGINT:
                continue  # started under nohup (SIGHUP ignored): keep ignoring it
            previous[signum] = signal.signal(signum, _handler)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = previous_hook
        swallowed = _STATE.swallowed
        (_STATE.pid, _STATE.stopping, _STATE.defer_depth, _STATE.pending, _STATE.raised,
         _STATE.swallowed) = saved
    if swallowed is not None:  # finished before the signal sent again arrived: stopped all the same
        raise Terminated(swallowed)


def _early(signum: int, frame: Any) -> None:
    """The handler while the CLI is still being imported (:func:`install_early`): nothing has started and
    nothing is written yet, so leave at once, quietly, with the status the CLI gives later (130 for
    Ctrl-C, 143, 129); Python's default prints a KeyboardInterrupt traceback from inside an import."""
    os._exit(128 + signum)


def install_early() -> None:
    """For the entry points (``pdmux``, ``python -m pdmux_cli``), before they import the CLI: Ctrl-C,
    SIGTERM and SIGHUP end the process quietly until :func:`handling_signals` takes over. Signals
    already ignored (``nohup``) stay ignored."""
    for signum in (signal.SIGINT, *STOP_SIGNALS):
        try:
            if signal.getsignal(signum) != signal.SIG_IGN:
                signal.signal(signum, _early)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass


def raised_stop() -> Terminated | None:
    """The stop (SIGTERM, SIGHUP) raised in the current :func:`handling_signals` block, if one was: for a
    caller whose library turned it into something else (typer returns 130 for any KeyboardInterrupt
    while it parses the options)."""
    if _STATE.raised is None or _STATE.raised == signal.SIGINT or os.getpid() != _STATE.pid:
        return None
    return Terminated(_STATE.raised)


def interrupted() -> bool:
    """Whether Ctrl-C (SIGINT) was raised in the current :func:`handling_signals` block."""
    return _STATE.raised == signal.SIGINT and os.getpid() == _STATE.pid


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGTERM, SIGHUP and Ctrl-C (as handled by :func:`handling_signals`) until the block ends, then
    raise for the first one that arrived. For steps that must not be split: a temporary file created and
    its name recorded for removal. Without the handlers installed it changes nothing."""
    _STATE.defer_depth += 1
    try:
        yield
    finally:
        _STATE.defer_depth -= 1
        if not _STATE.defer_depth and _STATE.pending is not None:
            signum, _STATE.pending = _STATE.pending, None
            if not _STATE.stopping and os.getpid() == _STATE.pid:
                _raise_for(signum)


def _die_with_parent(parent: int) -> None:
    """Linux: have the kernel send SIGKILL to this process when its parent dies (``PR_SET_PDEATHSIG``),
    and exit now if the pool's maker (``parent``) is already gone. Elsewhere nothing (the parent's
    cleanup still runs). Under the forkserver start method the parent is the fork server, which exits
    when the pool's maker does."""
    if not sys.platform.startswith("linux"):
        return
    before = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        return
    # The maker may have died before ``before`` was read (then it is a zombie until its own parent reaps
    # it, and os.kill(parent, 0) still succeeds) or between that and prctl (then this process has a new
    # parent): either way no death signal will come.
    try:
        os.kill(parent, 0)
        gone = os.getppid() != before or _is_zombie(parent)
    except ProcessLookupError:
        gone = True
    except OSError:  # pragma: no cover - another user's pid: it exists
        gone = os.getppid() != before or _is_zombie(parent)
    if gone:
        os._exit(1)


def _is_zombie(pid: int) -> bool:
    """Whether Linux process ``pid`` has exited and waits to be reaped (state ``Z`` in /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def worker_init(parent: int) -> None:
    """A pool worker's initializer (``parent``: the pid of the process that made the pool). Ctrl-C,
    SIGHUP and SIGTERM sent to the whole process group (a terminal, systemd, ``kill -- -PGID``) are the
    parent's to handle: the workers ignore them, and the parent, once it has, kills them (SIGKILL). Had
    they died on their own, the parent could see its pool broken before it saw the signal. A worker dies
    with its parent (:func:`_die_with_parent`), whatever ended the parent."""
    for signum in (signal.SIGINT, *STOP_SIGNALS):
        signal.signal(signum, signal.SIG_IGN)
    _STATE.pid, _STATE.stopping, _STATE.defer_depth = os.getpid(), False, 0
    _STATE.pending = _STATE.raised = _STATE.swallowed = None
    _die_with_parent(parent)
