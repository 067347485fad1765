"""Where a sweep's simulations run: in this process, on local processes, or on a Ray cluster.

``tune`` (one simulation per config), ``capacity`` (one per rate and policy) and ``simulate`` (one per
policy, or per DP replica) hand their simulations to an :class:`Executor`:

- ``local`` (the default): this machine's cores (a few tasks all at once: :func:`local_workers`). One worker
  runs the tasks here, one after another (:class:`InProcess`); more run them on a process pool
  (:class:`Processes`, on :func:`pdmux_cli.simulate.pool.process_pool`: Ctrl-C kills the workers). What
  every task shares (the trace and the simulated server, :meth:`Executor.share`) reaches the workers once,
  inherited when the pool forks them, not pickled with every task.
- ``ray``: tasks on a Ray cluster (``pip install 'pdmux[ray]'``; :class:`OnRay`): ``--ray-address`` names
  one (``auto``: the one ``ray start`` began on this machine; ``ray://host:10001``: a remote one through
  Ray Client), none starts a local Ray instance for the run (stopped after it). The shared objects go
  to Ray's object store once (``ray.put``); at most ``--workers`` tasks run at a time (default: the
  cluster's CPUs). Ctrl-C, SIGTERM and SIGHUP cancel every task (``ray.cancel(force=True)``; the stop
  signals' handlers are pdmux's again after ``ray.init``, which installs its own). The cluster's workers need
  this pdmux importable (on a local Ray they are this Python; on a cluster, the same pdmux installed on
  its nodes).

Results do not depend on the executor or the number of workers: every simulation is deterministic and
the callers combine results in task order. A task's failure is reported with the task it was running
(:class:`TaskFailed`, exit 1; an :class:`~pdmux_cli.util.errors.InputError` it raises keeps exit 2, its
template and parameter, and gains the same prefix).
"""

from __future__ import annotations

import itertools
import multiprocessing
import signal
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..util.errors import InputError, PdmuxError
from ..util.signals import deferred

#: ``--executor`` values.
EXECUTORS = ("local", "ray")

#: What ``pip`` installs for ``--executor ray``.
RAY_EXTRA = "pip install 'pdmux[ray]'"


class TaskFailed(PdmuxError):
    """A task failed in a worker for a reason other than bad input (exit 1); the message names the task."""


class _Shared:
    """A token for an object every task of a :class:`Processes` pool shares (looked up in the worker)."""

    __slots__ = ("key",)

    def __init__(self, key: int) -> None:
        self.key = key


#: Objects shared with forked workers, by key (filled before the pool forks them).
_SHARED: dict[int, Any] = {}
_KEYS = itertools.count(1)


def _invoke(fn: Callable[[Any, Any], Any], shared: Any, arg: Any) -> Any:
    """Run one task in a worker: ``fn(shared object, arg)``."""
    if isinstance(shared, _Shared):
        shared = _SHARED[shared.key]
    return fn(shared, arg)


class Job:
    """One submitted task: ``tag`` (the caller's), ``what`` (for messages), and its outcome once done."""

    __slots__ = ("handle", "order", "outcome", "tag", "what")

    def __init__(self, order: int, tag: Any, what: str) -> None:
        self.order = order
        self.tag = tag
        self.what = what
        self.handle: Any = None
        self.outcome: tuple[bool, Any] | None = None

    def result(self) -> Any:
        """The task's value; re-raises its failure: :class:`InputError` prefixed with :attr:`what`,
        anything else as :class:`TaskFailed`."""
        ok, value = self.outcome
        if ok:
            return value
        raise _failure(self.what, value) from None


def _failure(what: str, exc: BaseException) -> BaseException:
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return exc
    if isinstance(exc, InputError):  # its template and parameter kept: the API's text names the keyword
        return exc.prefixed(f"{what}: ")
    if isinstance(exc, PdmuxError) and not isinstance(exc, TaskFailed):  # a DeviceError: template kept
        return exc.prefixed(f"{what}: ")
    if isinstance(exc, TaskFailed):
        return exc
    detail = str(exc).strip().splitlines()
    return TaskFailed(f"a worker failed while simulating {what}: {type(exc).__name__}"
                      + (f": {detail[-1]}" if detail else ""))


class Executor(ABC):
    """Runs tasks ``fn(shared, arg)``; subclasses say where. Use as a context manager: leaving it on an
    error or Ctrl-C stops every task still running. ``workers``: tasks at a time; ``name``: ``local`` or
    ``ray`` (for output)."""

    name = "local"

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._order = itertools.count()

    # ---- the interface -------------------------------------------------------------------------
    def share(self, obj: Any) -> Any:
        """A token for ``obj`` to pass as the shared argument of many tasks (sent to the workers once)."""
        return obj

    def submit(self, fn: Callable[[Any, Any], Any], shared: Any, arg: Any, what: str, tag: Any = None) -> Job:
        """Queue ``fn(shared, arg)``; ``what``: the task in words (``"pdmux (auto, 8 groups...)"``)."""
        job = Job(next(self._order), tag, what)
        self._start(job, fn, shared, arg)
        return job

    @abstractmethod
    def next_done(self) -> Job:
        """Block until a submitted task is done and return it (the earliest submitted of those done)."""
        raise NotImplementedError

    @abstractmethod
    def pending(self) -> int:
        """Tasks submitted and not yet returned by :meth:`next_done`."""
        raise NotImplementedError

    def run(self, fn: Callable[[Any, Any], Any], shared: Any, args: Sequence[Any], whats: Sequence[str],
            on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Every ``fn(shared, arg)``; their values in the order of ``args``. ``on_done(index, value)`` as each
        finishes (in any order). The first failure is raised (the other tasks are stopped)."""
        out: list[Any] = [None] * len(args)
        for i, (arg, what) in enumerate(zip(args, whats, strict=True)):
            self.submit(fn, shared, arg, what, tag=i)
        for _ in range(len(args)):
            job = self.next_done()
            out[job.tag] = job.result()
            if on_done is not None:
                on_done(job.tag, out[job.tag])
        return out

    # ---- for subclasses ------------------------------------------------------------------------
    @abstractmethod
    def _start(self, job: Job, fn: Callable, shared: Any, arg: Any) -> None:
        raise NotImplementedError

    def close(self, failed: bool, exc_info: tuple = (None, None, None)) -> None:
        """Release what the executor holds; ``failed``: stop every task at once (``exc_info``: why)."""

    def __enter__(self):  # typing.Self needs Python 3.11
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.close(exc_type is not None, (exc_type, exc, tb))


class InProcess(Executor):
    """Tasks run here, one after another in the order submitted, each when :meth:`next_done` asks for it
    (one worker)."""

    def __init__(self) -> None:
        super().__init__(1)
        self._queue: deque[tuple[Job, Callable, Any, Any]] = deque()

    def _start(self, job: Job, fn: Callable, shared: Any, arg: Any) -> None:
        self._queue.append((job, fn, shared, arg))

    def next_done(self) -> Job:
        job, fn, shared, arg = self._queue.popleft()
        try:
            job.outcome = (True, fn(shared, arg))
        except Exception as exc:  # noqa: BLE001 - re-raised by Job.result with the task named
            job.outcome = (False, exc)
        return job

    def pending(self) -> int:
        return len(self._queue)


class Processes(Executor):
    """Tasks on a local process pool of ``workers`` (:func:`pdmux_cli.simulate.pool.process_pool`)."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        from .pool import process_pool

        self._fork = multiprocessing.get_start_method(allow_none=False) == "fork"
        if self._fork:  # the simulations' numpy, imported once here for every forked worker (~0.1 s each)
            import numpy  # noqa: F401
        self._keys: list[int] = []
        self._context = process_pool(workers)
        self._pool = self._context.__enter__()
        self._running: dict[Any, Job] = {}
        self._started = False

    def share(self, obj: Any) -> Any:
        if not self._fork or self._started:  # spawned (or already forked) workers inherit nothing more:
            return obj  # the object goes with each task
        key = next(_KEYS)
        _SHARED[key] = obj
        self._keys.append(key)
        return _Shared(key)

    def _start(self, job: Job, fn: Callable, shared: Any, arg: Any) -> None:
        self._started = True  # a forking pool starts every worker at its first task
        future = self._pool.submit(_invoke, fn, shared, arg)
        job.handle = future
        self._running[future] = job

    def next_done(self, timeout: float | None = None) -> Job | None:  # type: ignore[override]
        """:meth:`Executor.next_done`; with a ``timeout`` (s), ``None`` when no task is done by then."""
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool

        done, _ = wait(self._running, timeout=timeout, return_when=FIRST_COMPLETED)
        if not done:
            return None
        future = min(done, key=lambda f: self._running[f].order)
        job = self._running.pop(future)
        try:
            job.outcome = (True, future.result())
        except BrokenProcessPool:
            raise TaskFailed("a worker process died while simulating {what} (out of memory, or killed): run "
                             "again, with fewer {flag.workers} if memory is short", param="workers",
                             values={"what": job.what}) from None
        except Exception as exc:  # noqa: BLE001 - re-raised by Job.result with the task named
            job.outcome = (False, exc)
        return job

    def pending(self) -> int:
        return len(self._running)

    def close(self, failed: bool, exc_info: tuple = (None, None, None)) -> None:
        for key in self._keys:
            _SHARED.pop(key, None)
        self._keys.clear()
        # process_pool's own clean-up: on a failure (Ctrl-C included) it kills the workers at once
        self._context.__exit__(*(exc_info if failed else (None, None, None)))


class Backfill(Executor):
    """``inner``'s workers for a caller's tasks and, while fewer tasks run on them than it has workers,
    ``background`` ones (``(fn, shared, arg, what)`` that no task of the caller's waits on) on the rest, in
    their order: tune's schedules on the worker its last candidates' runs and its overload search's chain of
    runs (one at a time) leave idle. :meth:`drain` runs the background tasks left and returns every one's
    value in order; ``on_done(index, value)`` as each finishes. The caller's tasks, their values and the
    order it gets them are as on ``inner``: only when the background tasks run changes, never a value. A
    background task's failure is raised where it is met (:meth:`next_done` or :meth:`drain`), as
    :meth:`Job.result` raises it."""

    def __init__(self, inner: Executor, background: Sequence[tuple[Callable, Any, Any, str]],
                 on_done: Callable[[int, Any], None] | None = None) -> None:
        super().__init__(inner.workers)
        self.name = inner.name
        self._inner = inner
        self._waiting = deque(enumerate(background))
        self._running: dict[Job, int] = {}  # background jobs in flight: their index
        self._values: list[Any] = [None] * len(background)
        self._on_done = on_done

    def share(self, obj: Any) -> Any:
        return self._inner.share(obj)

    def submit(self, fn: Callable[[Any, Any], Any], shared: Any, arg: Any, what: str, tag: Any = None) -> Job:
        return self._inner.submit(fn, shared, arg, what, tag)

    def _start(self, job: Job, fn: Callable, shared: Any, arg: Any) -> None:
        self._inner._start(job, fn, shared, arg)  # unused: submit hands each task to the inner executor

    def pending(self) -> int:
        return self._inner.pending() - len(self._running)

    def next_done(self) -> Job:
        while True:
            self._fill()
            job = self._inner.next_done()
            if job not in self._running:
                return job
            self._finished(job)

    def drain(self) -> list[Any]:
        """Run the background tasks left (the caller's all returned) and return every one's value, in
        order."""
        while self._waiting or self._running:
            self._fill()
            self._finished(self._inner.next_done())
        return self._values

    def _fill(self) -> None:
        while self._waiting and self._inner.pending() < self._inner.workers:
            index, (fn, shared, arg, what) = self._waiting.popleft()
            self._running[self._inner.submit(fn, shared, arg, what)] = index

    def _finished(self, job: Job) -> None:
        index = self._running.pop(job)
        self._values[index] = job.result()
        if self._on_done is not None:
            self._on_done(index, self._values[index])


class OnRay(Executor):
    """Tasks on a Ray cluster (module docstring). ``address``: ``None`` to start a local Ray instance
    (stopped on :meth:`close`), ``auto``, ``ray://...`` or ``host:port`` to connect to one. ``workers``:
    tasks at a time, ``None`` for the cluster's CPUs."""

    name = "ray"

    def __init__(self, workers: int | None, address: str | None, tasks: int = 1 << 30) -> None:
        ray = import_ray()
        import logging

        self._ray = ray
        self._owned = False
        if not ray.is_initialized():
            options: dict[str, Any] = {"address": address, "log_to_driver": False,
                                       "logging_level": logging.ERROR, "include_dashboard": False}
            if address is None and workers:
                options["num_cpus"] = workers
            where = f"the Ray cluster at {address}" if address else "a local Ray instance"
            if address is not None:
                _probe(address, where)
            saved = _signal_handlers()
            try:
                # a stop while Ray starts waits for it to have started (then all it started is stopped):
                # cut short, ray.init leaves its processes behind
                with deferred(), _ray_keeps_off_sigterm(ray):
                    ray.init(**options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                _shutdown_quietly(ray)
                raise PdmuxError("{flag.executor} ray: cannot start or reach {where}: {reason}",
                                 param="executor",
                                 values={"where": where, "reason": _first_line(exc)}) from None
            except BaseException:  # Ctrl-C, SIGTERM, SIGHUP while it started
                _restore(saved)
                _shutdown_quietly(ray)
                raise
            finally:
                _restore(saved)  # should ray.init have set a SIGTERM handler after all: pdmux's again
            self._owned = True
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        super().__init__(max(1, min(workers or cpus, cpus, tasks)))
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_invoke)
        self._queue: deque[tuple[Job, Callable, Any, Any]] = deque()
        self._running: dict[Any, Job] = {}
        self._finished: list[Job] = []

    def share(self, obj: Any) -> Any:
        return self._ray.put(obj)

    def _start(self, job: Job, fn: Callable, shared: Any, arg: Any) -> None:
        self._queue.append((job, fn, shared, arg))
        self._fill()

    def _fill(self) -> None:
        while self._queue and len(self._running) < self.workers:
            job, fn, shared, arg = self._queue.popleft()
            ref = self._remote.remote(fn, shared, arg)
            job.handle = ref
            self._running[ref] = job

    def next_done(self) -> Job:
        ray = self._ray
        while not self._finished:
            done, _ = ray.wait(list(self._running), num_returns=1)
            for ref in done:
                job = self._running.pop(ref)
                try:
                    job.outcome = (True, ray.get(ref))
                except Exception as exc:  # noqa: BLE001 - re-raised by Job.result with the task named
                    job.outcome = (False, _ray_cause(exc))
                self._finished.append(job)
            self._fill()
        self._finished.sort(key=lambda j: j.order)
        return self._finished.pop(0)

    def pending(self) -> int:
        return len(self._queue) + len(self._running) + len(self._finished)

    def close(self, failed: bool, exc_info: tuple = (None, None, None)) -> None:
        ray = self._ray
        if failed:
            self._queue.clear()
            # a Ray of this run's own: shutdown ends its workers, tasks and all. Cancelling them first races
            # their replies, and Ray 2.x's driver can abort on one (task_manager.cc CompletePendingTask: a
            # stack dump, exit 1, its processes left behind)
            for ref in [] if self._owned else list(self._running):
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001,S110 - a task that already ended cannot be cancelled
                    pass
            self._running.clear()
        if self._owned:
            ray.shutdown()


#: Seconds :func:`_probe` waits for a Ray address to answer (ray.init itself retries for minutes).
RAY_CONNECT_TIMEOUT_S = 10.0

#: Ray Client's port where a ``ray://`` address names none.
RAY_CLIENT_PORT = 10001


def ray_host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``--ray-address`` (``host:port``, ``[v6]:port``, ``ray://host[:port]``);
    ``None`` for ``auto`` (Ray finds it); :class:`InputError` for anything else (a port that is no port)."""
    if address == "auto":
        return None
    rest = address
    default_port = None
    if "://" in address:
        scheme, rest = address.split("://", 1)
        if scheme != "ray":
            raise InputError("{flag.ray_address} must be auto, host:port or ray://host:10001, got "
                             "{address!r}", values={"address": address})
        default_port = RAY_CLIENT_PORT
        rest = rest.split("/", 1)[0]
    host, port_text = rest, ""
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else tail
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    elif ":" in rest:
        host = ""  # an IPv6 address needs its brackets before a port
    port = default_port if not port_text and default_port else None
    if port_text.isascii() and port_text.isdigit() and 1 <= int(port_text) <= 65535:
        port = int(port_text)
    if not host or port is None:
        raise InputError("{flag.ray_address} must be auto, host:port (a port from 1 to 65535) or "
                         "ray://host:10001, got {address!r}", values={"address": address})
    return host, port


#: What an HTTP/2 client sends first (RFC 9113 3.4): the preface, then an empty SETTINGS frame.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
#: The GCS method the probe calls (an empty request; every Ray 2.x GCS has it), and Ray Client's.
_GCS_PROBE_PATH = "/ray.rpc.NodeInfoGcsService/GetClusterId"
_CLIENT_PROBE_PATH = "/ray.rpc.RayletDriver/ClusterInfo"


def _h2_frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    """One HTTP/2 frame (RFC 9113 4.1): length, type, flags, stream id, payload."""
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload


def _hpack_literal(name: str, value: str) -> bytes:
    """A header as an HPACK literal without indexing, new name, no Huffman (RFC 7541 6.2.2); names and
    values under 127 bytes."""
    raw_name, raw_value = name.encode(), value.encode()
    return b"\x00" + bytes((len(raw_name),)) + raw_name + bytes((len(raw_value),)) + raw_value


def _grpc_call(host: str, port: int, path: str) -> bytes:
    """A gRPC call of ``path`` with an empty message on stream 1, after the client's preface: a SETTINGS
    ACK, the request's HEADERS (RFC 9113 8.3.1; gRPC over HTTP/2: POST, ``application/grpc``,
    ``te: trailers``) and its DATA (a 5-byte gRPC frame of an empty message), the stream ended."""
    headers = b"".join(_hpack_literal(k, v) for k, v in (
        (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", f"{host}:{port}"),
        ("content-type", "application/grpc"), ("te", "trailers")))
    return (_h2_frame(4, 1, 0, b"") + _h2_frame(1, 4, 1, headers)
            + _h2_frame(0, 1, 1, b"\x00\x00\x00\x00\x00"))


def _answers_grpc(sock: Any, host: str, port: int, path: str, deadline: float) -> str | None:
    """``None`` where the server on ``sock`` answers a gRPC call (:func:`_grpc_call`) with response HEADERS
    of ``:status 200`` on its stream before ``deadline`` (``time.monotonic()``), whatever the gRPC status
    (a cluster with token authentication refuses the call, and is still a cluster); else why not: another
    HTTP status (an HTTP/2 server that is no gRPC service), it speaks no HTTP/2, closes,
    sends GOAWAY, or stays silent (an HTTP/2 server that is no gRPC service: ray.init waits on it for good,
    deaf to SIGTERM)."""
    import time

    head = _recv_exactly(sock, 9, deadline)
    if not head and time.monotonic() >= deadline:
        return "timed out"
    if len(head) < 9 or head[3] != 4:  # the server's first frame: a SETTINGS frame (type 4)
        return "it answers, but not as a Ray cluster (no gRPC there)"
    _recv_exactly(sock, int.from_bytes(head[:3], "big"), deadline)
    sock.sendall(_grpc_call(host, port, path))
    while time.monotonic() < deadline:
        head = _recv_exactly(sock, 9, deadline)
        if len(head) < 9:
            break
        kind, flags, stream = head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        payload = _recv_exactly(sock, int.from_bytes(head[:3], "big"), deadline)
        if kind == 1 and stream == 1:
            if _status_200(payload, flags):
                return None
            return "it answers HTTP/2, but not as a gRPC service (no :status 200; no Ray cluster there)"
        if kind == 7:  # GOAWAY
            return "it answers HTTP/2, but refuses a gRPC call (no Ray cluster there)"
    return "it answers HTTP/2, but not a gRPC call (no Ray cluster there)"


def _status_200(block: bytes, flags: int) -> bool:
    """Whether a HEADERS frame's header block (``flags``: its frame flags) opens with ``:status: 200`` as
    HPACK's static entry 8 (byte ``0x88``, RFC 7541 appendix A), as a gRPC server answers every call,
    an error's status in its trailers (gRPC over HTTP/2: "Status: 200"); padding and priority skipped."""
    start = 0
    if flags & 0x8:  # PADDED: the pad length byte
        start += 1
    if flags & 0x20:  # PRIORITY: stream dependency and weight
        start += 5
    return block[start:start + 1] == b"\x88"


def _recv_exactly(sock: Any, n: int, deadline: float) -> bytes:
    """Up to ``n`` bytes from ``sock`` before ``deadline`` (fewer where it closes or time runs out)."""
    import socket
    import time

    data = b""
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(data))
        except socket.timeout:
            break
        if not chunk:
            break
        data += chunk
    return data


def _probe(address: str, where: str) -> None:
    """Fail in seconds where ``address`` does not answer, or answers but not a gRPC call (Ray's GCS and Ray
    Client both are gRPC services; the call: ``NodeInfoGcsService/GetClusterId``, Ray Client's
    ``RayletDriver/ClusterInfo``): ray.init retries the first for minutes and waits on the second for good.
    :class:`PdmuxError` (exit 1) naming it, within :data:`RAY_CONNECT_TIMEOUT_S`; :class:`InputError`
    where it is not an address. A cluster with TLS (``RAY_USE_TLS``) is only connected to."""
    import os
    import socket
    import time

    target = ray_host_port(address)
    if target is None:
        return
    tls = os.environ.get("RAY_USE_TLS", "0").strip().lower() not in ("", "0", "false", "no")
    path = _CLIENT_PROBE_PATH if address.startswith("ray://") else _GCS_PROBE_PATH
    deadline = time.monotonic() + RAY_CONNECT_TIMEOUT_S
    try:
        with socket.create_connection(target, timeout=RAY_CONNECT_TIMEOUT_S) as sock:
            if tls:
                return
            sock.sendall(_H2_PREFACE)
            reason = _answers_grpc(sock, target[0], target[1], path, deadline)
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
    if reason is None:
        return
    raise PdmuxError("{flag.executor} ray: cannot reach {where}: {reason} (is Ray running there? {start} "
                     "starts one; {flag.ray_address} auto finds one on this machine)",
                     param="ray_address", values={"where": where, "reason": reason,
                                                  "start": "'ray start --head'"})


@contextmanager
def _ray_keeps_off_sigterm(ray: Any) -> Iterator[None]:
    """ray.init sets SIGTERM handlers of its own as it starts (``sys.exit(15)``: exit 15, no line; a
    local head's, exit 1), through ``ray._private.utils.set_sigterm_handler``: made a no-op for its length,
    so pdmux's handler (held by :func:`~pdmux_cli.util.signals.deferred`) keeps SIGTERM."""
    utils = getattr(getattr(ray, "_private", None), "utils", None)
    original = getattr(utils, "set_sigterm_handler", None)
    if original is None:
        yield
        return
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = original


def _shutdown_quietly(ray: Any) -> None:
    """Stop what a ray.init cut short had started (its local instance's processes)."""
    try:
        ray.shutdown()
    except Exception:  # noqa: BLE001,S110 - stopping anyway; nothing more to free
        pass


def _signal_handlers() -> dict[int, Any]:
    """The handlers of the stop signals (SIGINT, SIGTERM, SIGHUP), where this is the main thread."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    signals = [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)]
    return {sig: signal.getsignal(sig) for sig in signals}


def _restore(handlers: dict[int, Any]) -> None:
    for sig, handler in handlers.items():
        if handler is not None:
            signal.signal(sig, handler)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _ray_cause(exc: BaseException) -> BaseException:
    """The exception a Ray task raised (``RayTaskError`` wraps it), else a :class:`TaskFailed` saying what
    happened to the worker."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return cause
    name = type(exc).__name__
    return TaskFailed(f"{name}: {_first_line(exc)}" if name != "TaskFailed" else str(exc))


def import_ray() -> Any:
    """The ``ray`` module; :class:`InputError` saying how to install it when it is not there."""
    import os

    # Ray's C++ core reads this as it loads: without it the driver's SIGTERM, until pdmux's handler is
    # back, is a crash report (a stack dump on stderr) instead of a stop
    name = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"
    before = os.environ.get(name)
    os.environ[name] = "1"
    try:
        import ray
    except ImportError:
        raise InputError(
            "{flag.executor} ray needs Ray: {RAY_EXTRA} (or {flag.executor} local, the default)",
            values={"RAY_EXTRA": RAY_EXTRA},
        ) from None
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
    return ray


def check_executor(kind: str | None, ray_address: str | None) -> str:
    """``--executor`` (``None``: ``local``) checked against :data:`EXECUTORS`; :class:`InputError` for an
    unknown one, or ``--ray-address`` without ``--executor ray``."""
    name = ("local" if kind is None else str(kind)).strip().lower()
    if name not in EXECUTORS:  # given blank too, as --speculative-algorithm and --gpu are
        raise InputError(
            "{flag.executor} must be one of {executors}, got {kind!r}",
            values={"executors": ", ".join(EXECUTORS), "kind": kind},
        )
    if ray_address is not None and name != "ray":
        raise InputError(
            "{flag.ray_address} applies to {flag.executor} ray",
            values={},
        )
    if ray_address is not None and not ray_address.strip():
        raise InputError(
            "{flag.ray_address}: give a Ray address (auto, host:port or ray://host:10001)",
            values={},
        )
    if ray_address is not None:
        ray_host_port(ray_address.strip())
    return name


@contextmanager
def executor(kind: str | None = "local", workers: int | None = None, tasks: int = 1,
             ray_address: str | None = None) -> Iterator[Executor]:
    """The :class:`Executor` for ``--executor kind`` (module docstring), as a context manager.

    ``local``: :func:`local_workers` processes (about the cores), in this process when that is 1.
    ``ray``: ``workers`` tasks at a time (default: the cluster's CPUs). Raises :class:`InputError` for an
    unknown kind or Ray missing, :class:`~pdmux_cli.util.errors.PdmuxError` when Ray cannot start or be
    reached."""
    name = check_executor(kind, ray_address)
    if workers is not None and workers < 1:
        raise InputError(
            "{flag.workers} must be >= 1, got {workers}",
            values={"workers": workers},
        )
    if name == "ray":
        made: Executor = OnRay(workers, ray_address.strip() if ray_address else None, tasks)
    else:
        count = local_workers(workers, tasks)
        made = InProcess() if count == 1 else Processes(count)
    with made:
        yield made


@contextmanager
def using(given: str | Executor | None, workers: int | None = None, tasks: int = 1,
          ray_address: str | None = None) -> Iterator[Executor]:
    """``given`` when it is an :class:`Executor` already (a caller's, left open), else a new one of that
    kind (:func:`executor`)."""
    if isinstance(given, Executor):
        yield given
        return
    with executor(given, workers, tasks, ray_address) as made:
        yield made


#: At most this many processes per core, where all of a few tasks run at once (:func:`local_workers`).
SHARED_CORE_TASKS = 2


def local_workers(workers: int | None, tasks: int) -> int:
    """The processes ``--executor local`` runs ``tasks`` on: ``min(workers or most, most, tasks)``.

    ``most`` is the cores this process may use (:func:`pdmux_cli.simulate.pool.default_workers`), or
    ``tasks`` where there are two cores or more and at most :data:`SHARED_CORE_TASKS` tasks a core. A few
    unequal tasks then all run at once, the cores shared among them, and the last ends when their total work
    over the cores is done, not when the worker left with two of them is: 3 policies on the conv trace (0.72,
    0.63 and 0.54 s each) on 2 cores end after about 1.0 s, not 1.2 s (``simulate conv --json``: 1.56 s ->
    1.39 s whole process, medians of 6 paired runs, benchmarks/RESULTS.md). Each process holds its own run
    (memory), so many tasks run on the cores' count of processes, one after another."""
    from . import pool

    cores = pool.default_workers()
    most = tasks if 2 <= cores and tasks <= SHARED_CORE_TASKS * cores else cores
    return max(1, min(workers or most, most, tasks))
