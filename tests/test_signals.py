"""SIGTERM and SIGHUP stop pdmux cleanly (issue 23): exit 128 + signal, one line, no process and no
temporary or half-written file left, and a caller reading pdmux's pipes sees them close.

Real signals to real subprocesses: ``kill PID`` (the main process alone, as batch schedulers and
Kubernetes send it), the terminal's hang-up (the whole process group), and SIGKILL (nothing runs in
the parent: the workers must still go). Each run waits only until its workers exist, then signals.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

ROOT = Path(__file__).resolve().parents[1]


def _session(sid: int, zombies: bool = False) -> list[int]:
    """Processes of session ``sid`` (zombies too with ``zombies``): the pdmux process and what it started."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and (zombies or fields[0] != "Z"):
            found.append(int(entry))
    return found


def _trace(path: Path, requests: int = 3000) -> Path:
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:{15 + i // 600:02d}:{(i // 10) % 60:02d}.{i % 10}000000,{500 + 37 * i % 3000},"
             f"{20 + i % 300}" for i in range(requests)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _start(args: list[str], cwd: Path, processes: int) -> subprocess.Popen:
    """``python -m pdmux_cli ARGS`` in a session of its own, returned once ``processes`` processes
    (itself and its workers) run in it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "pdmux_cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, env=env)
    deadline = time.monotonic() + 60
    while len(_session(proc.pid)) < processes:
        if proc.poll() is not None or time.monotonic() > deadline:
            _, err = proc.communicate()
            pytest.fail(f"the workers never started (exit {proc.returncode}): {err.decode()[-2000:]}")
        time.sleep(0.02)
    return proc


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    """Wait for the pipes to close (a hang fails the test) and for the session to empty."""
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("stdout/stderr still open 20 s after the signal: a caller waiting on them hangs")
    deadline = time.monotonic() + 5
    while _session(proc.pid, zombies=True) and time.monotonic() < deadline:
        time.sleep(0.02)
    # a parent killed outright reaps none
    left = _session(proc.pid, zombies=proc.returncode != -signal.SIGKILL)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"
    return proc.returncode, err.decode()


def _only_inputs(folder: Path, inputs: set[str]) -> None:
    left = sorted(p.name for p in folder.iterdir() if p.name not in inputs)
    assert not left, f"files left behind: {left}"


CASES = [
    pytest.param(["tune", "--trace", "trace.csv", "--slo-ttft", "1000", "--slo-itl", "60", "--workers", "2",
                  "-o", "tuned.yaml"], signal.SIGTERM, False, id="tune-SIGTERM"),
    pytest.param(["simulate", "--synthetic", "--qps", "40", "--duration", "900", "--workers", "2", "--csv",
                  "out.csv", "--plot", "cdf.png"], signal.SIGHUP, True, id="simulate-SIGHUP-to-the-group"),
    pytest.param(["capacity", "trace.csv", "--slo-ttft", "1000", "--slo-itl", "60", "--workers", "2",
                  "--plot", "cap.png"], signal.SIGTERM, True, id="capacity-SIGTERM-to-the-group"),
    pytest.param(["gen-config", "--tune", "--trace", "trace.csv", "--slo-ttft", "1000", "--slo-itl", "60",
                  "--gpu", "h100", "-o", "tuned.yaml"], signal.SIGHUP, False, id="gen-config-tune-SIGHUP"),
    pytest.param(["simulate", "trace.csv", "--dp", "8", "--workers", "2", "--csv", "out.csv"], signal.SIGINT,
                 True, id="simulate-dp-Ctrl-C-to-the-group"),
]


@pytest.mark.parametrize(("args", "signum", "group"), CASES)
def test_a_stop_signal_ends_the_workers_and_leaves_no_file(tmp_path, args, signum, group) -> None:
    _trace(tmp_path / "trace.csv")
    proc = _start(args, tmp_path, processes=3)
    if group:
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    code, err = _finish(proc)
    assert code == 128 + signum, err
    name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
    assert err == f"pdmux: error: stopped by {name}\n"
    _only_inputs(tmp_path, {"trace.csv"})


def test_workers_die_with_a_parent_killed_outright(tmp_path) -> None:
    """SIGKILL: no handler runs in the parent; the kernel ends the workers (PR_SET_PDEATHSIG)."""
    proc = _start(["simulate", "--synthetic", "--qps", "40", "--duration", "900", "--workers", "2"], tmp_path,
                  processes=3)
    os.kill(proc.pid, signal.SIGKILL)
    code, _ = _finish(proc)
    assert code == -signal.SIGKILL


DRIVER = textwrap.dedent("""
    import os, pathlib, signal, sys
    signum = int(sys.argv[1])
    real = pathlib.Path.write_text

    def half_then_signal(self, data, *args, **kwargs):
        # half the file on disk, then the signal arrives mid-write, as a `kill` would
        with open(self, "w", encoding="utf-8") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            os.kill(os.getpid(), signum)
            f.write(data[len(data) // 2:])
        return len(data)

    pathlib.Path.write_text = half_then_signal
    # simulate's --csv streams its rows into the temporary file (simulate/fold.py CsvRows), not write_text:
    # the signal arrives once the first rows are on disk
    from pdmux_cli.simulate import fold
    rows = fold.CsvRows.flush

    def rows_then_signal(self, *args, **kwargs):
        rows(self, *args, **kwargs)
        if self.next:
            os.kill(os.getpid(), signum)

    fold.CsvRows.flush = rows_then_signal
    sys.argv = ["pdmux", *sys.argv[2:]]
    from pdmux_cli.cli import main
    main()
""")


@pytest.mark.parametrize(("signum", "args", "output"), [
    (signal.SIGTERM, ["simulate", "--synthetic", "--qps", "5", "--duration", "30", "--workers", "1", "--csv",
                      "out.csv"], "out.csv"),
    (signal.SIGHUP, ["gen-config", "--gpu", "h200", "--manual", "-o", "out.yaml"], "out.yaml"),
])
def test_a_signal_during_a_write_leaves_the_old_file_and_no_temporary(tmp_path, signum, args, output) -> None:
    (tmp_path / output).write_text("the previous result\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", DRIVER, str(int(signum)), *args], cwd=tmp_path,
                         capture_output=True, check=False, text=True, timeout=60, env=env)
    assert run.returncode == 128 + signum, run.stderr
    assert run.stderr == f"pdmux: error: stopped by {signal.Signals(signum).name}\n"
    assert (tmp_path / output).read_text() == "the previous result\n"
    _only_inputs(tmp_path, {output})


def test_a_signal_while_the_temporary_file_is_made_still_removes_it(tmp_path, monkeypatch) -> None:
    """The stop is held (signals.deferred) from creating the temporary file to recording its name."""
    import tempfile

    from pdmux_cli.util.atomic import write_text_atomic
    from pdmux_cli.util.signals import Terminated, handling_signals

    real = tempfile.mkstemp

    def mkstemp_then_signal(*args, **kwargs):
        made = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # arrives before mkstemp has returned the name
        return made

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp_then_signal)
    with handling_signals(), pytest.raises(Terminated) as stopped:
        write_text_atomic(tmp_path / "out.yaml", "x: 1\n")
    assert stopped.value.signum == signal.SIGTERM and stopped.value.exit_code == 143
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # restored after the block


def test_a_worker_killed_alone_is_one_line_exit_1(tmp_path) -> None:
    """A worker killed by the OOM killer (here SIGKILL to it alone): one line, exit 1, no traceback."""
    proc = _start(["simulate", "--synthetic", "--qps", "40", "--duration", "900", "--workers", "2"], tmp_path,
                  processes=3)
    worker = next(pid for pid in _session(proc.pid) if pid != proc.pid)
    os.kill(worker, signal.SIGKILL)
    code, err = _finish(proc)
    assert code == 1, err
    assert err.startswith("pdmux: error: a worker process died") and err.count("\n") == 1, err


class _SignalOnCollect:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGHUP)


def test_a_stop_raised_where_python_cannot_raise_is_raised_again() -> None:
    """A signal handled inside a ``__del__`` (or an at-fork callback, as when a pool forks a worker):
    Python drops the exception there as unraisable; the signal is sent again and stops the run after."""
    from pdmux_cli.util.signals import Terminated, handling_signals

    reached = []
    started = time.monotonic()
    with pytest.raises(Terminated) as stopped, handling_signals():
        obj = _SignalOnCollect()
        del obj  # the handler's raise is dropped inside __del__
        reached.append("after the __del__")
        time.sleep(5)  # the signal sent again ends this
        reached.append("after the sleep")
    assert stopped.value.signum == signal.SIGHUP and stopped.value.exit_code == 129
    assert reached == ["after the __del__"] and time.monotonic() - started < 2


def test_a_dropped_stop_still_stops_a_command_that_finishes_first() -> None:
    from pdmux_cli.util.signals import Terminated, handling_signals

    with pytest.raises(Terminated) as stopped, handling_signals():
        obj = _SignalOnCollect()
        del obj
    assert stopped.value.signum == signal.SIGHUP
    time.sleep(0.1)  # the thread that would send it again finds the block gone: nothing more arrives


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_the_cli_is_imported_leaves_quietly(signum) -> None:
    """The entry points install a quiet exit before importing the CLI (a Ctrl-C there printed a traceback
    from inside an import); the CLI's own handling replaces it (SIGINT included)."""
    code = ("import os, signal, sys, time\n"
            "from pdmux_cli.util.signals import handling_signals, install_early\n"
            "install_early()\n"
            "with handling_signals():\n"
            "    assert signal.getsignal(signal.SIGINT).__name__ == '_handler'\n"
            f"os.kill(os.getpid(), {int(signum)})\n"
            "time.sleep(5)\n"
            "sys.exit(3)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                         check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 128 + signum and run.stderr == "" and run.stdout == ""


def test_a_pool_whose_shutdown_never_returns_does_not_hold_the_stop(monkeypatch) -> None:
    """Workers killed while one was sending its result leave the pool's manager thread reading the rest
    of the message for ever (the parent holds the pipe's other end), and ``shutdown(wait=True)`` with it
    (the sweep's one hang): the stop waits for it at most POOL_STOP_TIMEOUT_S."""
    from concurrent.futures import ProcessPoolExecutor

    from pdmux_cli.simulate import pool

    monkeypatch.setattr(pool, "POOL_STOP_TIMEOUT_S", 0.2)
    monkeypatch.setattr(ProcessPoolExecutor, "shutdown", lambda self, wait=True,
                        cancel_futures=False: time.sleep(30))
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), pool.process_pool(2):
        raise KeyboardInterrupt
    assert time.monotonic() - started < 5


def test_a_stopped_run_leaves_without_the_exit_time_joins(tmp_path) -> None:
    """After a stop (143) the entry point leaves at once: an exit-time join that never returns (a pool's
    thread stuck where the signal landed) does not keep the process."""
    code = ("import atexit, time, sys\n"
            "atexit.register(lambda: time.sleep(60))\n"
            "import pdmux_cli.cli as cli\n"
            "def stopped():\n"
            "    print('partial line', flush=False)\n"
            "    raise SystemExit(143)\n"
            "cli.main = stopped\n"
            "from pdmux_cli.entry import main\n"
            "main()\n")
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                         check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 143 and run.stdout == "partial line\n"
    assert time.monotonic() - started < 20


LEAVING = """
import atexit, sys, threading, time
class Freed:
    def __del__(self):
        sys.stdout.write("freed at teardown\\n")
kept = Freed()
atexit.register(lambda: sys.stdout.write("exit handler\\n"))
import pdmux_cli.cli as cli
def command():
    {before}
    sys.stdout.write("result\\n")  # not flushed
    raise SystemExit({code})
cli.main = command
from pdmux_cli.entry import main
main()
"""


@pytest.mark.parametrize("before,code,rc,out,err", [
    # the end of every command: the exit handlers run and the streams are flushed, the teardown skipped
    ("pass", 0, 0, "result\nexit handler\n", ""),
    ("pass", 2, 2, "result\nexit handler\n", ""),
    ("pass", None, 0, "result\nexit handler\n", ""),
    # a thread still running (a normal exit joins it) or a status that is a message: Python's own exit
    ("threading.Thread(target=time.sleep, args=(0.2,)).start()", 0, 0,
     "result\nexit handler\nfreed at teardown\n", ""),
    ("pass", "'no'", 1, "result\nexit handler\nfreed at teardown\n", "no\n"),
])
def test_a_command_leaves_without_the_teardown_where_that_changes_nothing(before, code, rc, out, err) -> None:
    run = subprocess.run([sys.executable, "-c", LEAVING.format(before=before, code=code)],
                         capture_output=True, text=True, timeout=30, check=False,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (run.returncode, run.stdout, run.stderr) == (rc, out, err)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_dead_unreaped_parent_counts_as_gone() -> None:
    """A pool maker killed before its worker looked is a zombie (os.kill(pid, 0) still succeeds): the
    worker must see it as gone, or it outlives its parent with no death signal to come."""
    from pdmux_cli.util.signals import _is_zombie

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while not _is_zombie(child.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _is_zombie(child.pid)  # exited, not yet reaped
    os.kill(child.pid, 0)  # which os.kill does not tell
    child.wait()
    assert not _is_zombie(child.pid) and not _is_zombie(os.getpid())


# ---- a stop while ray.init starts Ray (issue 34) -------------------------------------------------------

FAKE_RAY = '''
"""A stand-in for ray: init sets a SIGTERM handler through ray._private.utils as Ray's does (sys.exit), says
it has started, and takes a while; shutdown is recorded."""
import os, sys, time
from types import SimpleNamespace

def _set_sigterm_handler(handler):
    import signal
    signal.signal(signal.SIGTERM, handler)

_private = SimpleNamespace(utils=SimpleNamespace(set_sigterm_handler=_set_sigterm_handler))
_up = False

def is_initialized():
    return _up

def init(**kwargs):
    global _up
    _private.utils.set_sigterm_handler(lambda signum, frame: sys.exit(signum))
    open("started", "w").close()
    for _ in range(40):
        time.sleep(0.05)
    _up = True

def shutdown():
    global _up
    _up = False
    open("shut-down", "w").close()
'''


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_while_ray_starts_waits_for_it_then_stops_it(tmp_path, signum) -> None:
    """ray.init's own SIGTERM handler exited 15 with no line, and a stop that cut it short left its processes:
    the stop now waits for ray.init, then shuts Ray down and exits 128 + signal with one line."""
    (tmp_path / "fake" / "ray").mkdir(parents=True)
    (tmp_path / "fake" / "ray" / "__init__.py").write_text(FAKE_RAY)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'fake'}{os.pathsep}{ROOT}"}
    trace = str(ROOT / "tests" / "fixtures" / "azure_conv_50.csv")
    proc = subprocess.Popen([sys.executable, "-m", "pdmux_cli", "simulate", trace, "--executor", "ray",
                             "--policies", "chunked"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    os.kill(proc.pid, signum)
    code, err = _finish(proc)
    name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
    assert (code, err) == (128 + signum, f"pdmux: error: stopped by {name}\n")
    assert (tmp_path / "shut-down").exists()


@pytest.mark.ray
def test_sigterm_while_a_real_ray_starts_leaves_nothing(tmp_path) -> None:
    """The same on a real local Ray: SIGTERM once its first process runs (ray.init under way; before, Ray's
    handler exited 15, or its C++ crash handler printed a stack dump)."""
    pytest.importorskip("ray")
    _trace(tmp_path / "trace.csv", 300)
    proc = _start(["tune", "--trace", "trace.csv", "--slo-ttft", "1000", "--slo-itl", "60", "--executor",
                   "ray", "--workers", "1", "-o", "tuned.yaml"], tmp_path, processes=2)
    os.kill(proc.pid, signal.SIGTERM)
    code, err = _finish(proc)
    assert (code, err) == (143, "pdmux: error: stopped by SIGTERM\n")
    _only_inputs(tmp_path, {"trace.csv"})
